//! Each worker's book of the gdex timers waiting on its context (issue 19
//! point 1), so that a worker stuck in one long poll does not hold them.
//!
//! A gdex timer is a `GSource` on the context of the worker that polled it:
//! when it fires, that worker's loop dispatches it, with no other thread
//! involved. But a worker inside one long poll (a CPU-bound job, a call in
//! `blocking::blocking`) does not dispatch anything, and a task that waits
//! only on such a timer would wait for the poll to end, though an idle peer
//! could run it. So each timer attached on a worker is also noted here, and
//! the watchdog's monitor, which samples busy workers every millisecond
//! (see `stall`), raises the overdue timers of a worker that has sat in one
//! poll for that long: their tasks are woken from the monitor's thread and
//! run by a peer (a pinned task still waits for its worker).
//!
//! Entries are weak and never removed one by one: a timer that fired or was
//! dropped is pruned when the book next grows past twice its live size, so
//! noting a timer costs one uncontended lock and a push.

use std::sync::{Arc, Mutex, Weak};

use crate::sync::Flag;

#[derive(Default)]
pub(crate) struct TimerBook {
    inner: Mutex<Book>,
}

#[derive(Default)]
struct Book {
    /// (deadline in µs on GLib's monotonic clock, the timer's flag).
    entries: Vec<(i64, Weak<Flag>)>,
    /// Prune when `entries` reaches this length.
    prune_at: usize,
}

/// Entries kept without pruning.
const MIN_PRUNE_AT: usize = 64;

impl TimerBook {
    fn lock(&self) -> std::sync::MutexGuard<'_, Book> {
        // Nothing panics while holding the lock.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes a timer attached to this worker's context.
    pub(crate) fn note(&self, deadline: i64, flag: &Arc<Flag>) {
        let mut book = self.lock();
        if book.entries.len() >= book.prune_at.max(MIN_PRUNE_AT) {
            book.entries
                .retain(|(_, f)| f.upgrade().is_some_and(|f| !f.is_raised()));
            book.prune_at = book.entries.len() * 2;
        }
        book.entries.push((deadline, Arc::downgrade(flag)));
    }

    /// Raises every noted timer whose deadline is at or before `now`, and
    /// forgets it; gives how many it raised.
    pub(crate) fn fire_due(&self, now: i64) -> usize {
        let due: Vec<Arc<Flag>> = {
            let mut book = self.lock();
            if book.entries.is_empty() {
                return 0;
            }
            let mut due = Vec::new();
            book.entries.retain(|(deadline, f)| match f.upgrade() {
                None => false,
                Some(f) if f.is_raised() => false,
                Some(f) if *deadline <= now => {
                    due.push(f);
                    false
                }
                Some(_) => true,
            });
            due
        };
        // Woken outside the lock: a wake-up schedules a task.
        for flag in &due {
            flag.raise();
        }
        due.len()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().entries.len()
    }
}

#[cfg(all(test, not(gdex_loom)))]
mod tests {
    use super::*;

    #[test]
    fn due_timers_are_raised_once_and_the_book_stays_bounded() {
        let book = TimerBook::default();
        let early = Arc::new(Flag::default());
        let late = Arc::new(Flag::default());
        book.note(10, &early);
        book.note(1_000, &late);
        assert_eq!(book.fire_due(10), 1);
        assert!(early.is_raised() && !late.is_raised());
        assert_eq!(book.fire_due(10), 0);
        // Dropped timers are pruned as the book grows.
        for i in 0..10_000 {
            book.note(i, &Arc::new(Flag::default()));
        }
        assert!(book.len() <= 2 * MIN_PRUNE_AT, "{}", book.len());
        assert_eq!(book.fire_due(2_000), 1, "only `late` is alive and due");
    }
}
