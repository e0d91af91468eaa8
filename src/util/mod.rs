//! Small helpers shared by the modules.

pub(crate) mod clock;

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Context;
use std::thread::LocalKey;

use futures::task::AtomicWaker;

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

/// A one-way flag a future can wait on: raised once, from any thread.
#[derive(Default, Debug)]
pub(crate) struct Flag {
    pub(crate) set: AtomicBool,
    waker: AtomicWaker,
}

impl Flag {
    pub(crate) fn raise(&self) {
        self.set.store(true, Ordering::Release);
        // Raised from GLib callbacks (where unwinding aborts), gdex's
        // timer sources and the watchdog's thread (which a panic would
        // kill): a waker's panic goes to the panic handler instead (X5).
        if let Some(waker) = self.waker.take() {
            crate::diagnostics::panic::wake(waker);
        }
    }

    /// True once raised.
    pub(crate) fn is_raised(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }

    /// True if raised; otherwise registers the task to be woken when it is.
    pub(crate) fn poll_raised(&self, cx: &mut Context<'_>) -> bool {
        if self.set.load(Ordering::Acquire) {
            return true;
        }
        self.waker.register(cx.waker());
        self.set.load(Ordering::Acquire)
    }
}
