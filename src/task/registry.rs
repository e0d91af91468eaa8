//! S9: each worker's book of the tasks that went idle on it, so that a
//! shutdown resolves every task of the pool.
//!
//! A task that is queued when its pool shuts down is dropped with its queue.
//! A task that is *idle* has no queue to be dropped with: its waker sits in a
//! GLib source on a worker's context (a `glib::timeout_future`, a GIO call),
//! in a channel, or nowhere at all (`std::future::pending`). Without a record
//! of it, its `Task` would wait forever after the shutdown, and a pinned
//! task or fiber woken after its worker exited could never be dropped on its
//! own thread.
//!
//! So the first time a task's poll returns `Pending` on a worker, the task
//! puts a clone of its waker in that worker's registry (one lock, once per
//! task; a task that finishes in its first poll never comes here), and takes
//! it out when it finishes or is dropped. At shutdown each worker, on its own
//! thread, after its cancelled fibers have had their chance to return,
//! *closes* its registry and wakes every task in it: each is queued on that
//! worker (a pinned task or fiber in its thread-local queue) and dropped with
//! the worker's queues right after, on its own thread. Their handles resolve
//! to `Cancelled`. A task running on another worker when the registry it
//! is recorded in closes is woken by that close too: async-task queues it
//! again on the worker running it once its poll returns, and that worker
//! drops it with its queue when it exits (it stops running tasks once the
//! pool is closed). Should it go idle again before that, it records itself
//! in that worker's registry, which has not closed yet (a worker closes its
//! registry only once it runs no more tasks).
//!
//! A wake-up from another thread can straddle that close: async-task marks
//! the task scheduled, and only then calls the schedule function that
//! pushes it to the worker's inbox. If the worker closes its registry in
//! between, its own wake of that task does nothing (the task is already
//! scheduled), and the job arrives later. So a closed registry keeps count
//! of the tasks it gave back that have not been dropped yet (each drop, or
//! each move to another worker's registry, goes through [`Registry::remove`]),
//! and the worker keeps taking its inbox until that count is zero, for up to
//! [`LATE_WAKE`]: the late job is dropped on its own thread.
//!
//! (tokio keeps a list of every task it owns for the same reason; smol's
//! executor keeps a slab of every task's waker. Recording only tasks that
//! go idle keeps the spawn path free of it.)

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::Duration;

use crate::current::{Entered, Role, Slot};
use crate::util::Unpoisoned;

/// The registry of the pool worker running on this thread, if any.
// SAFETY: `task::registry` owns `Role::Registry`; this is its one slot.
const CURRENT: Slot<Registry> = unsafe { Slot::new(Role::Registry) };

/// Makes `registry` this thread's (a pool worker's, for its whole life):
/// where a task polled here records itself when it goes idle.
pub(crate) fn enter(registry: &Arc<Registry>) -> Entered {
    CURRENT.enter(Arc::as_ptr(registry))
}

/// The registry of idle tasks (S9) of the worker running on this thread, if
/// any.
pub(crate) fn current() -> Option<Arc<Registry>> {
    let ptr = CURRENT.get();
    if ptr.is_null() {
        return None;
    }
    // SAFETY: a non-null pointer was entered by `enter` from an `Arc` that
    // the worker keeps (through its pool) until it leaves the role; a new
    // strong count makes the returned `Arc` its own.
    unsafe {
        Arc::increment_strong_count(ptr);
        Some(Arc::from_raw(ptr))
    }
}

/// How long an exiting worker waits for the tasks its registry gave back
/// and that are still out (see the module docs). A wake-up straddles the
/// close only for a few instructions; the bound is for a waking thread that
/// is stopped in between (a signal handler, a debugger). A task still out
/// then is dropped by whoever queues it: a `Send` one anywhere, a pinned one
/// is leaked with a warning (it can only be dropped on its own thread).
pub(crate) const LATE_WAKE: Duration = Duration::from_secs(2);

/// One worker's book of idle tasks.
pub(crate) struct Registry {
    /// Set once, under the lock, when the worker wakes everything in it.
    closed: AtomicBool,
    /// Once closed: how many of the tasks given back by `close` have not
    /// been dropped (or recorded elsewhere) yet.
    outstanding: AtomicUsize,
    wakers: Mutex<Book>,
}

/// The recorded wakers: a slab of 16-byte slots (`Option<Waker>` uses the
/// waker's non-null vtable for `None`) with the free keys on a side list,
/// where `slab::Slab`'s 24-byte entries would cost every idle task 8 bytes
/// more (BENCH.md's memory_per_task).
#[derive(Default)]
struct Book {
    slots: Vec<Option<Waker>>,
    /// The keys of the empty slots.
    free: Vec<u32>,
}

impl Book {
    /// How many wakers are recorded.
    fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    fn insert(&mut self, waker: Waker) -> usize {
        match self.free.pop() {
            Some(key) => {
                self.slots[key as usize] = Some(waker);
                key as usize
            }
            None => {
                // Keys are u32 on the free list, and the task keeps its key
                // in a u32 (`Idle::key`, with u32::MAX reserved).
                assert!(
                    self.slots.len() < u32::MAX as usize,
                    "gdex: more than 4 billion idle tasks on one worker"
                );
                self.slots.push(Some(waker));
                self.slots.len() - 1
            }
        }
    }

    fn try_remove(&mut self, key: usize) -> Option<Waker> {
        let waker = self.slots.get_mut(key)?.take()?;
        self.free.push(key as u32);
        Some(waker)
    }

    fn take_all(&mut self) -> Vec<Waker> {
        let wakers: Vec<Waker> = std::mem::take(&mut self.slots)
            .into_iter()
            .flatten()
            .collect();
        *self = Book::default();
        wakers
    }
}

impl Registry {
    pub(crate) fn new() -> Arc<Registry> {
        Arc::new(Registry {
            closed: AtomicBool::new(false),
            outstanding: AtomicUsize::new(0),
            wakers: Mutex::new(Book::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Book> {
        // The one panic under the lock (`Book::insert` past 4 billion
        // entries) comes before the book changes: a poisoned lock still
        // holds a consistent book.
        self.wakers.lock().unpoisoned()
    }

    /// True once the worker has woken everything recorded here.
    #[inline]
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Records an idle task's waker; `None` if the registry is closed.
    pub(crate) fn insert(&self, waker: &Waker) -> Option<usize> {
        let mut wakers = self.lock();
        if self.closed.load(Ordering::Relaxed) {
            return None;
        }
        Some(wakers.insert(waker.clone()))
    }

    /// Forgets entry `key` (its task finished or was dropped, or is moving
    /// to another worker's registry). Once closed, `close` took every entry:
    /// this counts the task as no longer out.
    pub(crate) fn remove(&self, key: usize) {
        let waker = {
            let mut wakers = self.lock();
            if self.closed.load(Ordering::Relaxed) {
                // Every entry alive at the close was counted, and an
                // entry is removed once: this never goes below zero.
                self.outstanding.fetch_sub(1, Ordering::Release);
                return;
            }
            wakers.try_remove(key)
        };
        // Dropped outside the lock (a waker's drop may schedule its task).
        drop(waker);
    }

    /// Closes the registry and gives back every recorded waker, for the
    /// worker to wake.
    pub(crate) fn close(&self) -> Vec<Waker> {
        let mut wakers = self.lock();
        self.outstanding.store(wakers.len(), Ordering::Relaxed);
        self.closed.store(true, Ordering::Release);
        wakers.take_all()
    }

    /// Once closed: how many of the tasks `close` gave back are neither
    /// dropped nor recorded elsewhere yet.
    pub(crate) fn outstanding(&self) -> usize {
        self.outstanding.load(Ordering::Acquire)
    }

    /// How many tasks are recorded now (for the tests).
    #[cfg(all(test, not(gdex_loom)))]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(all(test, not(gdex_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_removed_key_is_given_again_and_a_stale_one_removes_nothing() {
        let r = Registry::new();
        let noop = futures::task::noop_waker_ref();
        let a = r.insert(noop).unwrap();
        let b = r.insert(noop).unwrap();
        assert_ne!(a, b);
        r.remove(a);
        r.remove(a);
        assert_eq!(r.len(), 1);
        assert_eq!(r.insert(noop), Some(a));
        r.remove(99);
        assert_eq!(r.len(), 2);
        assert_eq!(r.close().len(), 2);
    }

    #[test]
    fn closing_gives_back_every_waker_and_refuses_later_ones() {
        let r = Registry::new();
        let a = r.insert(futures::task::noop_waker_ref()).unwrap();
        let b = r.insert(futures::task::noop_waker_ref()).unwrap();
        r.remove(a);
        assert_eq!(r.len(), 1);
        assert_eq!(r.close().len(), 1);
        assert!(r.is_closed());
        assert_eq!(r.outstanding(), 1);
        assert!(r.insert(futures::task::noop_waker_ref()).is_none());
        // A late removal of an entry that close() took counts it as done.
        r.remove(b);
        assert_eq!(r.len(), 0);
        assert_eq!(r.outstanding(), 0);
    }
}
