//! A context's schedulers at other priorities (P12): GLib cannot end a
//! dispatch that runs, so a scheduler's slice ends early, after the job
//! running, once a more urgent scheduler of its context waits to be
//! dispatched. A `G_PRIORITY_HIGH` main task woken during a slice of the
//! default main scheduler then waits for one poll, not for the slice's
//! 4 ms.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::Pending;
use crate::util::Unpoisoned;

/// The readiness of a scheduler's more urgent siblings on its context.
#[derive(Default)]
pub(super) struct Siblings {
    /// Set while there is one: until then a check is one load.
    any: AtomicBool,
    more_urgent: Mutex<Vec<Arc<Pending>>>,
}

impl Siblings {
    /// Whether a more urgent sibling waits to be dispatched. (One marked
    /// only for `!Send` jobs of another thread ends a slice here after one
    /// job until its source is dispatched on this thread, which the mark
    /// makes ready at once: that dispatch clears the mark and runs none of
    /// the other thread's jobs, and this scheduler's slices are whole
    /// again.)
    #[inline]
    pub(super) fn one_waits(&self) -> bool {
        self.any.load(Ordering::Relaxed) && self.look()
    }

    #[cold]
    #[inline(never)]
    fn look(&self) -> bool {
        self.more_urgent
            .lock()
            .unpoisoned()
            .iter()
            .any(|pending| pending.notified.load(Ordering::Acquire))
    }

    pub(super) fn add(&self, pending: Arc<Pending>) {
        self.more_urgent.lock().unpoisoned().push(pending);
        self.any.store(true, Ordering::Relaxed);
    }

    /// A more urgent sibling is gone.
    pub(super) fn remove(&self, pending: &Arc<Pending>) {
        let mut more_urgent = self.more_urgent.lock().unpoisoned();
        more_urgent.retain(|p| !Arc::ptr_eq(p, pending));
        self.any.store(!more_urgent.is_empty(), Ordering::Relaxed);
    }
}
