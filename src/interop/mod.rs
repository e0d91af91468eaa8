//! GObject and GIO interop: GIO's `_async`/`_finish` pairs implemented
//! with futures ([`AsyncResult`](crate::AsyncResult)) and D-Bus methods
//! served as tasks ([`dbus`](crate::dbus)).

pub(crate) mod async_result;
pub mod dbus;
