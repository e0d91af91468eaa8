//! A FIFO of parked futures for the toolkit's primitives (semaphore,
//! channel, promise), kept under the primitive's own lock.
//!
//! libdex's semaphore and channel waits are not cancel-safe: a dropped wait
//! stays queued and swallows the next post or item (LIBDEX-NOTES, section
//! 4). Here every waiter has a key; a future that goes away removes its
//! entry, and one that had been notified but never acted on hands the
//! notification to the next waiter ([`WaitQueue::remove`] tells it so).

use crate::util::Unpoisoned;
use std::cell::Cell;
use std::collections::VecDeque;
use std::mem::ManuallyDrop;
use std::sync::{Mutex, MutexGuard};
use std::task::Waker;

/// This thread's primitive locks and what they deferred to their release:
/// wake-ups, and the drops of the wakers they let go of.
///
/// It has no destructor (no field needs one), so its thread-local is never
/// torn down: a primitive used while the thread's other thread-locals are
/// being destroyed (a task's future, holding a channel end, dropped by a
/// scheduler's thread-local queue at thread exit) still locks and wakes.
/// The wakers it holds are always handed out before the thread's last lock
/// is released, so none is left for a destructor to drop.
struct Deferred {
    /// How many primitive locks ([`Locked`]) this thread holds.
    held: Cell<usize>,
    /// The first deferral made under them (the common case: one per lock).
    first: Cell<Option<ManuallyDrop<Deferral>>>,
    /// The ones after it, in order: a box made for them, null when there
    /// are none.
    rest: Cell<*mut VecDeque<Deferral>>,
    /// How many deferrals `first` and `rest` hold: a release that finds
    /// none (the common case of a receive that woke nobody) looks no
    /// further.
    len: Cell<usize>,
}

/// What a primitive lock defers to its release. Both are user code: a
/// waker's `wake`, and its drop (the last reference to another executor's
/// task may drop that task, and its future with it).
enum Deferral {
    Wake(Waker),
    Drop(Waker),
}

impl Deferral {
    /// Runs it, a panic going to the panic handler (X5).
    fn run(self) {
        match self {
            Deferral::Wake(waker) => crate::diagnostics::panic::wake(waker),
            Deferral::Drop(waker) => crate::diagnostics::panic::drop_waker(waker),
        }
    }
}

thread_local! {
    static DEFERRED: Deferred = const {
        Deferred {
            held: Cell::new(0),
            first: Cell::new(None),
            rest: Cell::new(std::ptr::null_mut()),
            len: Cell::new(0),
        }
    };
}

impl Deferred {
    #[inline]
    fn push(&self, deferral: Deferral) {
        let len = self.len.get();
        self.len.set(len + 1);
        if len == 0 {
            // The book is empty (`pop` frees `rest` once it empties): the
            // common case of one wake-up under one lock.
            debug_assert!(self.rest.get().is_null());
            self.first.set(Some(ManuallyDrop::new(deferral)));
            return;
        }
        self.push_behind(deferral);
    }

    fn push_behind(&self, deferral: Deferral) {
        match self.first.take() {
            // The book is empty: `first` is free. (Once `first` has been
            // popped while `rest` still holds wakers, a new one goes behind
            // those: a wake that notifies more, re-entering, must not put
            // its waker ahead of the ones notified before it.)
            None if self.rest.get().is_null() => {
                self.first.set(Some(ManuallyDrop::new(deferral)));
            }
            first => {
                self.first.set(first);
                let mut rest = self.rest.get();
                if rest.is_null() {
                    rest = Box::into_raw(Box::default());
                    self.rest.set(rest);
                }
                // SAFETY: `rest` came from `Box::into_raw` on this thread
                // (the cell is thread-local) and is freed only in `pop`,
                // which nulls it; no other reference to it is alive (none
                // outlives these calls).
                unsafe { (*rest).push_back(deferral) };
            }
        }
    }

    /// The oldest deferral, if any: only while no primitive lock is held.
    #[inline]
    fn pop(&self) -> Option<Deferral> {
        if self.len.get() == 0 {
            return None;
        }
        self.len.set(self.len.get() - 1);
        self.pop_slow()
    }

    fn pop_slow(&self) -> Option<Deferral> {
        if let Some(first) = self.first.take() {
            return Some(ManuallyDrop::into_inner(first));
        }
        let rest = self.rest.get();
        debug_assert!(!rest.is_null(), "a deferral counted in `len` is in `rest`");
        if rest.is_null() {
            return None;
        }
        // SAFETY: as in `push`: our own live box, used by this thread only.
        let next = unsafe { (*rest).pop_front() };
        // SAFETY: as above.
        if unsafe { (*rest).is_empty() } {
            self.rest.set(std::ptr::null_mut());
            // SAFETY: made by `Box::into_raw`, freed once: the cell no
            // longer points to it.
            drop(unsafe { Box::from_raw(rest) });
        }
        next
    }
}

/// A primitive's lock (a channel's, a promise's, a semaphore's...): a
/// waker notified while this thread holds one is woken only after the
/// thread has released every such lock, and a waker it lets go of (a
/// [`Parked`] replaced or removed, [`drop_unlocked`]) is dropped only then.
/// So neither the waker's `wake` or drop (user code: another executor's)
/// nor the panic handler that reports its panic (X5) runs under the
/// primitive's lock, where using the same primitive again would deadlock.
/// A poisoned lock is taken anyway: the primitives keep their state
/// consistent across a panic.
///
/// No user code may run while one is held (wakers are deferred; items and
/// values are dropped after the release): a fiber that suspended inside
/// one would leave its thread's count raised, and every wake-up of the
/// other tasks on that thread deferred until it resumed.
pub(crate) struct Locked<'a, T> {
    guard: ManuallyDrop<MutexGuard<'a, T>>,
}

#[inline]
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> Locked<'_, T> {
    let guard = mutex.lock().unpoisoned();
    DEFERRED.with(|d| d.held.set(d.held.get() + 1));
    Locked {
        guard: ManuallyDrop::new(guard),
    }
}

impl<T> std::ops::Deref for Locked<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> std::ops::DerefMut for Locked<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

impl<T> Drop for Locked<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the guard is dropped once, here, and never used after.
        unsafe { ManuallyDrop::drop(&mut self.guard) };
        let mut next = DEFERRED.with(|d| {
            let left = d.held.get() - 1;
            d.held.set(left);
            if left == 0 {
                d.pop()
            } else {
                None
            }
        });
        // One at a time, without holding the queue: a wake (or a waker's
        // drop) may lock a primitive again and defer more (its own release
        // runs those).
        while let Some(deferral) = next {
            deferral.run();
            next = DEFERRED.with(|d| if d.held.get() == 0 { d.pop() } else { None });
        }
    }
}

/// Wakes `waker` now, or after the primitive locks this thread holds are
/// released (see [`Locked`]); a panic in its `wake` goes to the panic
/// handler.
pub(crate) fn wake_unlocked(waker: Waker) {
    defer(Deferral::Wake(waker));
}

/// Drops `waker` now, or after the primitive locks this thread holds are
/// released (see [`Locked`]); a panic in its drop goes to the panic
/// handler.
pub(crate) fn drop_unlocked(waker: Waker) {
    defer(Deferral::Drop(waker));
}

fn defer(deferral: Deferral) {
    let now = DEFERRED.with(|d| {
        if d.held.get() > 0 {
            d.push(deferral);
            None
        } else {
            Some(deferral)
        }
    });
    if let Some(deferral) = now {
        deferral.run();
    }
}

/// A waker a primitive keeps under its lock: dropping it (replaced by a
/// newer one, or removed with its entry) drops the waker only once this
/// thread holds no primitive lock ([`drop_unlocked`]), so that its drop
/// (user code) never runs under one.
pub(crate) struct Parked(Option<Waker>);

impl Parked {
    /// Keeps a clone of `waker`.
    pub(crate) fn new(waker: &Waker) -> Parked {
        Parked(Some(waker.clone()))
    }

    /// Keeps `waker` instead, unless the one kept would wake the same task.
    pub(crate) fn update(&mut self, waker: &Waker) {
        if !self.will_wake(waker) {
            *self = Parked::new(waker);
        }
    }

    /// True if the waker kept would wake the same task as `waker`.
    pub(crate) fn will_wake(&self, waker: &Waker) -> bool {
        self.0.as_ref().is_some_and(|w| w.will_wake(waker))
    }

    /// The waker, given up by the primitive: the caller wakes it (or drops
    /// it) once the primitive's lock is released.
    pub(crate) fn into_waker(mut self) -> Waker {
        self.0
            .take()
            .expect("a Parked holds its waker until given up")
    }

    /// Wakes a clone of it once the thread's primitive locks are released,
    /// keeping it.
    pub(crate) fn wake_clone(&self) {
        if let Some(waker) = &self.0 {
            wake_unlocked(waker.clone());
        }
    }

    /// Wakes it once the thread's primitive locks are released
    /// ([`wake_unlocked`]).
    pub(crate) fn wake(self) {
        wake_unlocked(self.into_waker());
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        if let Some(waker) = self.0.take() {
            drop_unlocked(waker);
        }
    }
}

enum Slot {
    Free,
    /// Parked, with the ticket of its entry in `order`.
    Waiting(Parked, u64),
    Notified,
}

/// Parked futures in arrival order.
#[derive(Default)]
pub(crate) struct WaitQueue {
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// (key, ticket) in arrival order. An entry is live only while its slot
    /// is `Waiting` with the same ticket; others (the future was removed or
    /// notified since) are skipped when popped, and swept out before they
    /// can outnumber the live ones, so a queue whose waits keep being
    /// dropped (timeouts on an idle channel) does not grow.
    order: VecDeque<(usize, u64)>,
    next_ticket: u64,
    /// Entries in `Waiting`.
    waiting: usize,
}

impl WaitQueue {
    /// Parks (or re-parks) the future whose key is in `key` with `waker`.
    /// A future notified before that did not get what it waited for joins
    /// the back of the queue again.
    pub(crate) fn park(&mut self, key: &mut Option<usize>, waker: &Waker) {
        let ticket = self.next_ticket;
        match *key {
            Some(k) => match &mut self.slots[k] {
                Slot::Waiting(w, _) => {
                    w.update(waker);
                    return;
                }
                slot @ Slot::Notified => {
                    *slot = Slot::Waiting(Parked::new(waker), ticket);
                    self.order.push_back((k, ticket));
                }
                Slot::Free => unreachable!("a wait queue key outlived its slot"),
            },
            None => {
                let k = match self.free.pop() {
                    Some(k) => {
                        self.slots[k] = Slot::Waiting(Parked::new(waker), ticket);
                        k
                    }
                    None => {
                        self.slots.push(Slot::Waiting(Parked::new(waker), ticket));
                        self.slots.len() - 1
                    }
                };
                self.order.push_back((k, ticket));
                *key = Some(k);
            }
        }
        self.next_ticket += 1;
        self.waiting += 1;
    }

    /// True if this `order` entry still stands for a parked future.
    fn is_live(&self, (k, ticket): (usize, u64)) -> bool {
        matches!(self.slots[k], Slot::Waiting(_, t) if t == ticket)
    }

    /// True if the future with this key has been notified since it parked.
    #[inline]
    pub(crate) fn is_notified(&self, key: Option<usize>) -> bool {
        key.is_some_and(|k| matches!(self.slots[k], Slot::Notified))
    }

    /// Forgets the future with this key (it got what it waited for, or it
    /// is going away). Returns true if it had been notified and not yet
    /// acted on: the caller passes the notification on.
    #[inline]
    pub(crate) fn remove(&mut self, key: &mut Option<usize>) -> bool {
        match key.take() {
            Some(k) => self.remove_key(k),
            None => false,
        }
    }

    fn remove_key(&mut self, k: usize) -> bool {
        let was = std::mem::replace(&mut self.slots[k], Slot::Free);
        self.free.push(k);
        match was {
            Slot::Waiting(..) => {
                self.waiting -= 1;
                // Its entry in `order` is dead now: sweep the dead ones out
                // once they outnumber the live ones.
                if self.order.len() > 2 * self.waiting + 32 {
                    let slots = &self.slots;
                    self.order
                        .retain(|&(k, t)| matches!(slots[k], Slot::Waiting(_, live) if live == t));
                }
                false
            }
            Slot::Notified => true,
            Slot::Free => unreachable!("a wait queue key was removed twice"),
        }
    }

    /// Wakes the longest-waiting future. Returns false if none was waiting.
    #[inline]
    pub(crate) fn notify_one(&mut self) -> bool {
        // Entries left in `order` by futures that went away are not woken
        // (and `remove`'s sweep bounds them): with none waiting, no look.
        self.waiting != 0 && self.notify_first()
    }

    fn notify_first(&mut self) -> bool {
        while let Some(entry) = self.order.pop_front() {
            if self.is_live(entry) {
                let Slot::Waiting(waker, _) =
                    std::mem::replace(&mut self.slots[entry.0], Slot::Notified)
                else {
                    unreachable!("a live entry's slot is Waiting")
                };
                self.waiting -= 1;
                // Woken once the primitive's lock is released, and a
                // waker that panics must not unwind through the
                // primitive's state half-updated (a channel's item pushed
                // but not kept, a promise's other waiters never woken):
                // its panic goes to the panic handler (X5).
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

    /// Wakes every waiting future, in arrival order, without notifying it:
    /// each stays parked, [`is_notified`](WaitQueue::is_notified) stays
    /// false for it, and [`remove`](WaitQueue::remove) returns false (it
    /// was handed nothing to pass on). For a primitive that closes: its
    /// waiters must look again, but a notification is what it hands out (a
    /// semaphore's permit) and closing hands out nothing.
    pub(crate) fn wake_all(&mut self) {
        for &(k, ticket) in &self.order {
            if let Slot::Waiting(waker, t) = &self.slots[k] {
                if *t == ticket {
                    waker.wake_clone();
                }
            }
        }
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

    /// Waits that keep being dropped without a notification (a receive
    /// with a timeout on an idle channel) do not make the queue grow, and
    /// a reused key is notified once, in its new place.
    #[test]
    fn dropped_waits_do_not_accumulate() {
        let a = Arc::new(Count(AtomicUsize::new(0)));
        let w = Waker::from(a.clone());
        let mut q = WaitQueue::default();
        let mut steady = None;
        q.park(&mut steady, &w);
        // A crowd that leaves all at once first: its removals lower the
        // sweep threshold two at a time, past the queue's length.
        let mut crowd: Vec<Option<usize>> = (0..34).map(|_| None).collect();
        for k in &mut crowd {
            q.park(k, &w);
        }
        for k in &mut crowd {
            assert!(!q.remove(k));
        }
        assert_eq!(q.waiting, 1, "only the steady waiter is left");
        for _ in 0..100_000 {
            let mut k = None;
            q.park(&mut k, &w);
            assert!(!q.remove(&mut k));
            // Dead entries are swept before they outnumber the live ones
            // (one, here) by more than the slack of 32: 2 * 1 + 32 at most.
            assert!(q.order.len() <= 2 + 32, "{} entries", q.order.len());
        }
        assert!(q.slots.len() <= 35);
        assert!(q.notify_one());
        assert!(q.is_notified(steady));
        assert!(!q.notify_one(), "a dead entry was notified");
        assert_eq!(a.0.load(Ordering::SeqCst), 1);
    }

    /// A key freed by a waiter that left is reused by the next one, which
    /// joins the back of the queue: the dead entry of the key's first
    /// owner, still ahead in the queue, is not taken for it.
    #[test]
    fn a_reused_key_waits_its_turn() {
        let (a, b, c) = (
            Arc::new(Count(AtomicUsize::new(0))),
            Arc::new(Count(AtomicUsize::new(0))),
            Arc::new(Count(AtomicUsize::new(0))),
        );
        let mut q = WaitQueue::default();
        let (mut ka, mut kb, mut kc) = (None, None, None);
        q.park(&mut ka, &Waker::from(a.clone()));
        q.park(&mut kb, &Waker::from(b.clone()));
        let reused = ka;
        assert!(!q.remove(&mut ka));
        assert!(q.has_waiters(), "b still waits");
        q.park(&mut kc, &Waker::from(c.clone()));
        assert_eq!(kc, reused, "the freed key is reused");
        assert!(q.notify_one());
        assert_eq!(b.0.load(Ordering::SeqCst), 1, "b was first in line");
        assert_eq!(c.0.load(Ordering::SeqCst), 0);
        assert!(q.notify_one());
        assert_eq!(c.0.load(Ordering::SeqCst), 1);
        assert_eq!(a.0.load(Ordering::SeqCst), 0);
        assert!(!q.notify_one());
    }

    /// `waiting` counts exactly the parked futures: a removal that was not
    /// notified lowers it, so a queue whose waiters all left has none.
    #[test]
    fn removing_a_waiter_leaves_no_waiter() {
        let a = Arc::new(Count(AtomicUsize::new(0)));
        let mut q = WaitQueue::default();
        let mut k = None;
        q.park(&mut k, &Waker::from(a.clone()));
        assert!(q.has_waiters());
        assert!(!q.remove(&mut k));
        assert!(!q.has_waiters());
        assert_eq!(q.waiting, 0);
        assert!(!q.notify_one());
    }

    /// `wake_all` wakes every parked future once, in arrival order, and
    /// notifies none of them: removing one passes nothing on, and a later
    /// `notify_one` still goes to the first in line.
    #[test]
    fn wake_all_wakes_without_notifying() {
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        struct Log(Arc<std::sync::Mutex<Vec<usize>>>, usize);
        impl Wake for Log {
            fn wake(self: Arc<Self>) {
                self.0.lock().unwrap().push(self.1);
            }
        }
        let mut q = WaitQueue::default();
        let mut keys = [None, None, None];
        for (i, k) in keys.iter_mut().enumerate() {
            q.park(k, &Waker::from(Arc::new(Log(log.clone(), i))));
        }
        // One leaves first: it is not woken.
        assert!(!q.remove(&mut keys[1]));
        q.wake_all();
        assert_eq!(*log.lock().unwrap(), [0, 2]);
        assert!(!q.is_notified(keys[0]) && !q.is_notified(keys[2]));
        assert!(!q.remove(&mut keys[2]), "woken, not handed anything");
        assert!(q.notify_one());
        assert!(q.is_notified(keys[0]));
        assert!(q.remove(&mut keys[0]));
        assert!(!q.has_waiters());
    }

    /// Wakers notified under primitive locks are woken once the thread
    /// holds none, in the order they were notified, and not before.
    #[test]
    fn wakers_run_after_the_last_lock_in_order() {
        struct Log(Arc<std::sync::Mutex<Vec<usize>>>, usize);
        impl Wake for Log {
            fn wake(self: Arc<Self>) {
                self.0.lock().unwrap().push(self.1);
            }
        }
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let waker = |i| Waker::from(Arc::new(Log(log.clone(), i)));
        let (a, b) = (std::sync::Mutex::new(()), std::sync::Mutex::new(()));
        {
            let _outer = lock(&a);
            wake_unlocked(waker(1));
            {
                let _inner = lock(&b);
                wake_unlocked(waker(2));
                wake_unlocked(waker(3));
            }
            assert!(log.lock().unwrap().is_empty(), "woken under a lock");
        }
        assert_eq!(*log.lock().unwrap(), [1, 2, 3]);
        wake_unlocked(waker(4));
        assert_eq!(*log.lock().unwrap(), [1, 2, 3, 4], "no lock: woken at once");
    }

    /// A wake that locks a primitive and notifies another waker (user code:
    /// another executor's `wake` sending on a channel) while the book still
    /// holds wakers notified before: the new one is woken after those, in
    /// the order of notification. It used to take the empty `first` slot
    /// and jump the queue. Re-entrant wakes several deep all run, once
    /// each, and the book is empty (its box freed) afterwards.
    #[test]
    fn a_wake_that_defers_more_keeps_the_order() {
        type Log = Arc<std::sync::Mutex<Vec<usize>>>;
        struct Chain {
            log: Log,
            me: usize,
            /// Notified, under a lock, from this waker's `wake`.
            then: Vec<Waker>,
        }
        impl Wake for Chain {
            fn wake(self: Arc<Self>) {
                self.log.lock().unwrap().push(self.me);
                let m = std::sync::Mutex::new(());
                let _held = lock(&m);
                for w in &self.then {
                    wake_unlocked(w.clone());
                }
            }
        }
        let log: Log = Arc::default();
        let waker = |me, then: Vec<Waker>| {
            Waker::from(Arc::new(Chain {
                log: log.clone(),
                me,
                then,
            }))
        };
        // 1 wakes 4 and 5 (5 then wakes 6); 2 and 3 were notified with 1.
        let six = waker(6, vec![]);
        let five = waker(5, vec![six]);
        let four = waker(4, vec![]);
        let one = waker(1, vec![four, five]);
        let m = std::sync::Mutex::new(());
        {
            let _held = lock(&m);
            wake_unlocked(one);
            wake_unlocked(waker(2, vec![]));
            wake_unlocked(waker(3, vec![]));
        }
        assert_eq!(*log.lock().unwrap(), [1, 2, 3, 4, 5, 6]);
        DEFERRED.with(|d| {
            assert_eq!(d.held.get(), 0);
            assert!(d.rest.get().is_null(), "the box is freed once empty");
            assert_eq!(d.len.get(), 0, "every deferral counted was run");
            let first = d.first.take();
            assert!(first.is_none());
        });
    }
}
