//! The futures of the toolkit (libdex parity): time, future sets, promises,
//! cancellables, delayed results, Unix signals and file descriptors.

pub(crate) mod cancellable;
pub(crate) mod clock;
pub(crate) mod fd;
pub(crate) mod promise;
pub(crate) mod sets;
pub(crate) mod signal;
pub(crate) mod time;
