//! Each worker's book of the gdex timers waiting on its context (P8, B5),
//! so that a worker stuck in one long poll does not hold them.
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
//! Entries are weak and never removed one by one: an entry whose timer
//! fired, was dropped or moved to another context (each attachment has its
//! own [`Noted`] token, which the timer drops when it moves) is pruned when
//! the book next grows past twice its live size, so noting a timer costs
//! one uncontended lock, one small allocation and a push.

use std::sync::{Arc, Mutex, Weak};

use crate::task::flag::Flag;
use crate::util::Unpoisoned;

/// A timer's entry in a worker's book, held by the timer while it waits on
/// that worker's context.
pub(crate) struct Noted(Arc<Flag>);

#[derive(Default)]
pub(crate) struct TimerBook {
    inner: Mutex<Book>,
}

#[derive(Default)]
struct Book {
    /// (deadline in µs on GLib's monotonic clock, the attachment's token).
    entries: Vec<(i64, Weak<Noted>)>,
    /// Prune when `entries` reaches this length.
    prune_at: usize,
}

/// Entries kept without pruning.
const MIN_PRUNE_AT: usize = 64;

impl TimerBook {
    fn lock(&self) -> std::sync::MutexGuard<'_, Book> {
        // Nothing panics while holding the lock.
        self.inner.lock().unpoisoned()
    }

    /// Notes a timer attached to this worker's context; the timer keeps the
    /// token for as long as it waits here.
    pub(crate) fn note(&self, deadline: i64, flag: &Arc<Flag>) -> Arc<Noted> {
        let noted = Arc::new(Noted(flag.clone()));
        let mut held = Vec::new();
        let mut book = self.lock();
        if book.entries.len() >= book.prune_at.max(MIN_PRUNE_AT) {
            book.entries.retain(|(_, n)| {
                let Some(n) = n.upgrade() else { return false };
                let keep = !n.0.is_raised();
                held.push(n);
                keep
            });
            book.prune_at = book.entries.len() * 2;
        }
        book.entries.push((deadline, Arc::downgrade(&noted)));
        drop(book);
        // After the lock: see `fire_due`.
        drop(held);
        noted
    }

    /// Raises every noted timer whose deadline is at or before `now`, and
    /// forgets it; gives how many it raised.
    pub(crate) fn fire_due(&self, now: i64) -> usize {
        // Every token upgraded under the lock is dropped after it: its
        // timer may be dropped on another thread meanwhile, leaving ours the
        // last reference to the timer's flag, and with it to the waker the
        // timer was polled with, whose drop is user code.
        let mut held = Vec::new();
        let due: Vec<Arc<Flag>> = {
            let mut book = self.lock();
            if book.entries.is_empty() {
                return 0;
            }
            let mut due = Vec::new();
            book.entries.retain(|(deadline, n)| {
                let Some(n) = n.upgrade() else { return false };
                let waiting = !n.0.is_raised();
                if waiting && *deadline <= now {
                    due.push(n.0.clone());
                }
                let keep = waiting && *deadline > now;
                held.push(n);
                keep
            });
            due
        };
        drop(held);
        // Woken outside the lock: a wake-up schedules a task.
        for flag in &due {
            flag.raise();
        }
        due.len()
    }

    #[cfg(all(test, not(gdex_loom)))]
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
        let _e = book.note(10, &early);
        let _l = book.note(1_000, &late);
        assert_eq!(book.fire_due(10), 1);
        assert!(early.is_raised() && !late.is_raised());
        assert_eq!(book.fire_due(10), 0);
        // Dropped timers are pruned as the book grows.
        for i in 0..10_000 {
            drop(book.note(i, &Arc::new(Flag::default())));
        }
        // So is the entry of a live timer that moved on (dropped its token).
        let moving = Arc::new(Flag::default());
        for i in 0..10_000 {
            drop(book.note(5_000 + i, &moving));
        }
        assert!(book.len() <= 2 * MIN_PRUNE_AT, "{}", book.len());
        assert_eq!(book.fire_due(2_000), 1, "only `late` is alive and due");
    }
}
