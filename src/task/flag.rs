//! [`Flag`]: a one-way flag a task can wait on.

use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Context;

use futures::task::AtomicWaker;

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
