//! Small helpers shared by the modules.

pub(crate) mod clock;

use std::cell::Cell;
use std::thread::LocalKey;

/// Sets a thread-local `Cell` for a scope: the previous value comes back when
/// the guard drops, also on unwind, so scopes nest (a nested main loop, a
/// fiber resumed inside another's).
pub(crate) fn scoped<T: Copy + 'static>(key: &'static LocalKey<Cell<T>>, value: T) -> Scoped<T> {
    Scoped {
        key,
        previous: key.with(|cell| cell.replace(value)),
    }
}

/// The guard of [`scoped`].
pub(crate) struct Scoped<T: Copy + 'static> {
    key: &'static LocalKey<Cell<T>>,
    previous: T,
}

impl<T: Copy + 'static> Drop for Scoped<T> {
    fn drop(&mut self) {
        self.key.with(|cell| cell.set(self.previous));
    }
}

/// True on the process's initial thread, the one GTK calls the main thread.
pub(crate) fn is_main_thread() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid and getpid have no preconditions.
        unsafe { libc::gettid() == libc::getpid() }
    }
    #[cfg(not(target_os = "linux"))]
    {
        std::thread::current().name() == Some("main")
    }
}
