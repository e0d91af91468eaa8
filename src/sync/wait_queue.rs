//! A FIFO of parked futures for the toolkit's primitives (semaphore,
//! channel, promise), kept under the primitive's own lock.
//!
//! libdex's semaphore and channel waits are not cancel-safe: a dropped wait
//! stays queued and swallows the next post or item (LIBDEX-NOTES, section
//! 4). Here every waiter has a key; a future that goes away removes its
//! entry, and one that had been notified but never acted on hands the
//! notification to the next waiter ([`WaitQueue::remove`] tells it so).

use std::collections::VecDeque;
use std::task::Waker;

enum Slot {
    Free,
    Waiting(Waker),
    Notified,
}

/// Parked futures in arrival order.
#[derive(Default)]
pub(crate) struct WaitQueue {
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// Keys in arrival order; may hold keys already notified or removed,
    /// skipped when popped.
    order: VecDeque<usize>,
    /// Entries in `Waiting`.
    waiting: usize,
}

impl WaitQueue {
    /// Parks (or re-parks) the future whose key is in `key` with `waker`.
    /// A future notified before that did not get what it waited for joins
    /// the back of the queue again.
    pub(crate) fn park(&mut self, key: &mut Option<usize>, waker: &Waker) {
        match *key {
            Some(k) => match &mut self.slots[k] {
                Slot::Waiting(w) => {
                    if !w.will_wake(waker) {
                        w.clone_from(waker);
                    }
                }
                slot @ Slot::Notified => {
                    *slot = Slot::Waiting(waker.clone());
                    self.waiting += 1;
                    self.order.push_back(k);
                }
                Slot::Free => unreachable!("a wait queue key outlived its slot"),
            },
            None => {
                let k = match self.free.pop() {
                    Some(k) => {
                        self.slots[k] = Slot::Waiting(waker.clone());
                        k
                    }
                    None => {
                        self.slots.push(Slot::Waiting(waker.clone()));
                        self.slots.len() - 1
                    }
                };
                self.waiting += 1;
                self.order.push_back(k);
                *key = Some(k);
            }
        }
    }

    /// True if the future with this key has been notified since it parked.
    pub(crate) fn is_notified(&self, key: Option<usize>) -> bool {
        key.is_some_and(|k| matches!(self.slots[k], Slot::Notified))
    }

    /// Forgets the future with this key (it got what it waited for, or it
    /// is going away). Returns true if it had been notified and not yet
    /// acted on: the caller passes the notification on.
    pub(crate) fn remove(&mut self, key: &mut Option<usize>) -> bool {
        let Some(k) = key.take() else { return false };
        let was = std::mem::replace(&mut self.slots[k], Slot::Free);
        self.free.push(k);
        match was {
            Slot::Waiting(_) => {
                self.waiting -= 1;
                false
            }
            Slot::Notified => true,
            Slot::Free => unreachable!("a wait queue key was removed twice"),
        }
    }

    /// Wakes the longest-waiting future. Returns false if none was waiting.
    pub(crate) fn notify_one(&mut self) -> bool {
        while let Some(k) = self.order.pop_front() {
            if let Slot::Waiting(_) = self.slots[k] {
                let Slot::Waiting(waker) = std::mem::replace(&mut self.slots[k], Slot::Notified)
                else {
                    unreachable!()
                };
                self.waiting -= 1;
                waker.wake();
                return true;
            }
        }
        false
    }

    /// Wakes every waiting future.
    pub(crate) fn notify_all(&mut self) {
        while self.notify_one() {}
    }

    /// True if some future is waiting (not yet notified).
    #[cfg(test)]
    pub(crate) fn has_waiters(&self) -> bool {
        self.waiting > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn fifo_and_handoff_of_a_dropped_notification() {
        let (a, b) = (
            Arc::new(Count(AtomicUsize::new(0))),
            Arc::new(Count(AtomicUsize::new(0))),
        );
        let (wa, wb) = (Waker::from(a.clone()), Waker::from(b.clone()));
        let mut q = WaitQueue::default();
        let (mut ka, mut kb) = (None, None);
        q.park(&mut ka, &wa);
        q.park(&mut kb, &wb);
        assert!(q.notify_one());
        assert_eq!(a.0.load(Ordering::SeqCst), 1, "first parked, first woken");
        assert!(q.is_notified(ka) && !q.is_notified(kb));
        // `a` goes away without acting: the notification is passed on.
        assert!(q.remove(&mut ka));
        assert!(q.notify_one());
        assert_eq!(b.0.load(Ordering::SeqCst), 1);
        assert!(!q.remove(&mut ka), "already removed");
        assert!(q.remove(&mut kb));
        assert!(!q.has_waiters() && !q.notify_one());
    }
}
