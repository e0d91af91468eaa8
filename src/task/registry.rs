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
//! Only the tasks that end with the pool are recorded: the pool's own, and
//! those of a scheduler of a worker's own context (which ends with its
//! worker: `pool::Retire`). A task of any other scheduler can be polled on
//! a worker too, when a pool task runs a nested loop of the task's context;
//! it is not the pool's to end, and recorded here it would be woken at the
//! shutdown into a queue that nobody runs, and its worker would wait
//! [`LATE_WAKE`] for it. So a task records itself in the registry of the
//! scheduler that runs it, not in the registry of whatever worker thread it
//! runs on: each run loop enters its scheduler's ([`enter`]), a worker's
//! dispatch the worker's own, a context scheduler's dispatch its worker's
//! for a scheduler of a worker's context and none for any other, which
//! marks the task as recorded nowhere for good.
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
//!
//! A task keeps where it is recorded in its block, in a [`Record`] of 8
//! bytes: the registry's id and the entry's key. (A pointer to the registry
//! beside the key took 16, and made every pending task's block a size
//! class bigger: BENCH.md's memory_per_task.) Ids are found in a table of
//! segments that never move, without a lock; a record that names a
//! registry holds a strong count on it, so the registry and its slot in the
//! table stay while any task is recorded in it.

use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::Duration;

use crate::current::{Entered, Role, Slot};
use crate::util::Unpoisoned;

/// The registry of the scheduler whose tasks this thread is running, if it
/// is a pool's (see [`enter`]).
// SAFETY: `task::registry` owns `Role::Registry`; this is its one slot.
const CURRENT: Slot<Registry> = unsafe { Slot::new(Role::Registry) };

/// Makes `registry` (a pool worker's, or none) where a task polled on this
/// thread records itself when it goes idle, until the guard drops. Whoever
/// runs tasks enters the registry of the scheduler they belong to (see the
/// module docs): a worker its own, for its whole life and again for each of
/// its dispatches; a context scheduler's dispatch its worker's if it is a
/// scheduler of a worker's own context, none otherwise. The caller keeps
/// `registry` alive until the guard drops.
pub(crate) fn enter(registry: Option<&Arc<Registry>>) -> Entered {
    CURRENT.enter(registry.map_or(ptr::null(), Arc::as_ptr))
}

/// The registry of idle tasks (S9) of the scheduler whose tasks this thread
/// is running, if it is a pool's.
pub(crate) fn current() -> Option<Arc<Registry>> {
    let ptr = CURRENT.get();
    if ptr.is_null() {
        return None;
    }
    // SAFETY: a non-null pointer was entered by `enter` from an `Arc` that
    // its caller (a worker, through its pool; a context scheduler's
    // dispatch, through the scheduler) keeps until the guard drops, which
    // puts the previous value back; a new strong count makes the returned
    // `Arc` its own.
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
    /// Its id, for the tasks' [`Record`]s: 1 to [`MAX_ID`], given back
    /// when it is dropped.
    id: u32,
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
/// more (BENCH.md's memory_per_task). The slots are in pages of
/// [`PAGE`] that never move: a `Vec` of them all would double, copying a
/// million tasks' wakers at a time and leaving its old copy's memory with
/// the allocator (up to twice the book's size, and a memory_per_task that
/// changed with where glibc put it).
#[derive(Default)]
struct Book {
    pages: Vec<Box<[Option<Waker>]>>,
    /// The slots handed out so far (the next new key).
    used: usize,
    /// The keys of the empty slots below `used`.
    free: Vec<u32>,
}

/// Slots per page of a [`Book`] (4 KiB).
const PAGE: usize = 256;

impl Book {
    /// How many wakers are recorded.
    fn len(&self) -> usize {
        self.used - self.free.len()
    }

    fn slot(&mut self, key: usize) -> &mut Option<Waker> {
        &mut self.pages[key / PAGE][key % PAGE]
    }

    fn insert(&mut self, waker: Waker) -> usize {
        let key = match self.free.pop() {
            Some(key) => key as usize,
            None => {
                // Keys are u32 on the free list, and the task keeps its key
                // in a u32 (`Record::key`).
                assert!(
                    self.used < u32::MAX as usize,
                    "gdex: more than 4 billion idle tasks on one worker"
                );
                if self.used.is_multiple_of(PAGE) {
                    self.pages.push((0..PAGE).map(|_| None).collect());
                }
                self.used += 1;
                self.used - 1
            }
        };
        *self.slot(key) = Some(waker);
        key
    }

    fn try_remove(&mut self, key: usize) -> Option<Waker> {
        if key >= self.used {
            return None;
        }
        let waker = self.slot(key).take()?;
        self.free.push(key as u32);
        Some(waker)
    }

    fn take_all(&mut self) -> Vec<Waker> {
        let wakers: Vec<Waker> = std::mem::take(&mut self.pages)
            .into_iter()
            .flat_map(|page| page.into_vec())
            .flatten()
            .collect();
        *self = Book::default();
        wakers
    }
}

impl Registry {
    pub(crate) fn new() -> Arc<Registry> {
        let id = Ids::take();
        let registry = Arc::new(Registry {
            id,
            closed: AtomicBool::new(false),
            outstanding: AtomicUsize::new(0),
            wakers: Mutex::new(Book::default()),
        });
        // Published before any task can record itself here: tasks find the
        // registry through `current` once its worker has entered it.
        slot(id).store(Arc::as_ptr(&registry).cast_mut(), Ordering::Release);
        registry
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

impl Drop for Registry {
    fn drop(&mut self) {
        // No record names this id any more (each holds a count): nobody
        // looks it up, and it can be given to a new registry.
        slot(self.id).store(ptr::null_mut(), Ordering::Relaxed);
        IDS.lock().unpoisoned().free.push(self.id);
    }
}

/// The most registries alive at once (ids 1 to this; the two values above
/// are [`Record`]'s marks).
const MAX_ID: u32 = u32::MAX - 2;
/// A [`Record`]'s id for a task that went idle outside a pool's run loop
/// (a main-scheduler task, one of any context scheduler that is no
/// worker's, wherever it is polled): no registry will ever hold it.
const OFF_WORKER: u32 = u32::MAX;
/// A [`Record`]'s id for a tracked task (X8): its key is the task's entry
/// in the task dump, which keeps the task's real record.
const TRACKED: u32 = u32::MAX - 1;

/// The table of registries by id, in segments that never move or go: the
/// k-th holds 64 << k slots, so 27 of them hold every id.
static SEGMENTS: [AtomicPtr<AtomicPtr<Registry>>; 27] =
    [const { AtomicPtr::new(ptr::null_mut()) }; 27];

/// The ids given out and given back.
static IDS: Mutex<Ids> = Mutex::new(Ids {
    next: 1,
    free: Vec::new(),
});

struct Ids {
    next: u32,
    free: Vec<u32>,
}

impl Ids {
    /// An id for a new registry, with its slot in the table made.
    fn take() -> u32 {
        let mut ids = IDS.lock().unpoisoned();
        if let Some(id) = ids.free.pop() {
            return id;
        }
        let id = ids.next;
        assert!(
            id <= MAX_ID,
            "gdex: more than {MAX_ID} pool workers alive at once"
        );
        ids.next += 1;
        let (segment, offset) = place(id);
        if offset == 0 {
            // The first id of its segment: make the segment (under the lock,
            // so once), and keep it for good.
            let slots: Box<[AtomicPtr<Registry>]> = (0..64usize << segment)
                .map(|_| AtomicPtr::new(ptr::null_mut()))
                .collect();
            let slots = Box::leak(slots).as_mut_ptr();
            SEGMENTS[segment].store(slots, Ordering::Release);
        }
        id
    }
}

/// The segment of the table holding id `id`, and the slot's offset in it.
#[inline]
fn place(id: u32) -> (usize, usize) {
    let n = (id - 1) as usize;
    // Segment k holds n from 64 * (2^k - 1) up to 64 * (2^(k+1) - 1).
    let k = (usize::BITS - 1 - (n / 64 + 1).leading_zeros()) as usize;
    (k, n - 64 * ((1 << k) - 1))
}

/// The slot of the table for id `id`, which has been given out.
#[inline]
fn slot(id: u32) -> &'static AtomicPtr<Registry> {
    let (segment, offset) = place(id);
    let slots = SEGMENTS[segment].load(Ordering::Acquire);
    // SAFETY: `Ids::take` made the segment (64 << segment slots, leaked,
    // never freed) before giving out `id`, and the store that published it
    // happened before `id` reached anyone; `place` gives an offset inside
    // it.
    unsafe { &*slots.add(offset) }
}

/// Where a task's waker is recorded (S9), kept in the task's block: which
/// registry, by id, and the entry's key. A record that names a registry
/// holds a strong count on it. Or, for a tracked task (X8), its entry in the
/// task dump, which keeps the task's record for it as a word (see
/// `task::Idle`).
pub(crate) struct Record {
    /// 0: not recorded; a registry's id; [`OFF_WORKER`]; [`TRACKED`].
    id: u32,
    /// The entry in the registry; for [`TRACKED`], the dump entry.
    key: u32,
}

const _: () = assert!(std::mem::size_of::<Record>() == 8);

impl Record {
    /// Not recorded anywhere yet.
    pub(crate) const fn new() -> Self {
        Record { id: 0, key: 0 }
    }

    /// The mark of a tracked task, whose record is kept by its entry `track`
    /// (not 0) in the task dump.
    pub(crate) const fn tracked(track: u32) -> Self {
        Record {
            id: TRACKED,
            key: track,
        }
    }

    /// The record as a word, for a tracked task's dump entry to keep (with
    /// the count it holds).
    pub(crate) fn into_bits(self) -> u64 {
        let this = std::mem::ManuallyDrop::new(self);
        (this.id as u64) << 32 | this.key as u64
    }

    /// The record that [`into_bits`](Self::into_bits) made `bits` of.
    ///
    /// # Safety
    ///
    /// `bits` is 0 (no record) or came from `into_bits`, and is made a
    /// record again only once: the record may hold a count.
    pub(crate) unsafe fn from_bits(bits: u64) -> Self {
        Record {
            id: (bits >> 32) as u32,
            key: bits as u32,
        }
    }

    /// For a tracked task's mark: its entry in the task dump; else 0.
    #[inline]
    pub(crate) fn track(&self) -> u32 {
        if self.id == TRACKED {
            self.key
        } else {
            0
        }
    }

    /// The registry this record names.
    ///
    /// # Safety
    ///
    /// `self.id` is a registry's id (not 0 or a mark): the record holds a
    /// count on it.
    #[inline]
    unsafe fn registry(&self) -> &Registry {
        // SAFETY: by the caller; the pointer names a live registry.
        unsafe { &*self.registry_ptr() }
    }

    /// The registry this record names, as the pointer its `Arc` gave
    /// (`Arc::as_ptr` in `Registry::new`), whose provenance covers the
    /// whole `ArcInner`: the one to give the record's count back through.
    /// (A pointer made from a `&Registry` covers only the `Registry`:
    /// `Arc::decrement_strong_count` through it reaches the counts before
    /// it, and frees the allocation, outside what it may touch: undefined
    /// behaviour, which Miri reports.)
    ///
    /// # Safety
    ///
    /// As for [`registry`](Self::registry).
    #[inline]
    unsafe fn registry_ptr(&self) -> *const Registry {
        debug_assert!(self.id != 0 && self.id <= MAX_ID);
        // The record holds a strong count on registry `id` (taken in
        // `register`), so the registry is alive and its slot names it.
        slot(self.id).load(Ordering::Acquire)
    }

    /// The task's poll returned `Pending`: make sure a registry that has not
    /// been closed holds its waker. Not for a tracked task's mark.
    #[inline]
    pub(crate) fn pending(&mut self, waker: &Waker) {
        debug_assert!(self.id != TRACKED, "a tracked task's record is in the dump");
        match self.id {
            OFF_WORKER => return,
            0 => {}
            // SAFETY: a registry's id.
            _ if !unsafe { self.registry() }.is_closed() => return,
            _ => {}
        }
        self.register(waker);
    }

    #[cold]
    fn register(&mut self, waker: &Waker) {
        // First idle, or the registry that held us was closed while we ran
        // on another worker: record ourselves on this one, and tell the old
        // one we are no longer its to drop.
        self.done();
        let Some(registry) = current() else {
            self.id = OFF_WORKER;
            return;
        };
        match registry.insert(waker) {
            Some(key) => {
                // Keys below u32::MAX (`Book::insert`).
                self.key = key as u32;
                self.id = registry.id;
                // The record's count.
                let _ = Arc::into_raw(registry);
            }
            // This worker has closed its registry: it is dropping its queues.
            // Be queued on it, to be dropped with them.
            None => waker.wake_by_ref(),
        }
    }

    /// The task finished or is dropped (or moves): forget its entry and
    /// release the registry. Not for a tracked task's mark.
    #[inline]
    pub(crate) fn done(&mut self) {
        debug_assert!(self.id != TRACKED, "a tracked task's record is in the dump");
        if self.id == 0 || self.id > MAX_ID {
            return;
        }
        // SAFETY: a registry's id. The `Arc`'s own pointer, not one made
        // from a `&Registry` (see `registry_ptr`).
        let registry = unsafe { self.registry_ptr() };
        self.id = 0;
        // SAFETY: the count this record held (taken by `into_raw` in
        // `register`) keeps the registry alive for the removal, and is
        // given back after it, once.
        unsafe {
            (*registry).remove(self.key as usize);
            Arc::decrement_strong_count(registry);
        }
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        if self.id != TRACKED {
            self.done();
        }
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

    /// Ids map to one slot each, segment after segment, up to the last id.
    #[test]
    fn every_id_has_its_own_slot_in_the_segments() {
        assert_eq!(place(1), (0, 0));
        assert_eq!(place(64), (0, 63));
        assert_eq!(place(65), (1, 0));
        assert_eq!(place(64 + 128), (1, 127));
        assert_eq!(place(64 + 128 + 1), (2, 0));
        let mut last = (0, 0);
        for id in 2..5000 {
            let at = place(id);
            let next = if at.0 == last.0 {
                (last.0, last.1 + 1)
            } else {
                (last.0 + 1, 0)
            };
            assert_eq!(at, next, "id {id}");
            assert!(at.1 < 64 << at.0);
            last = at;
        }
        let (segment, offset) = place(MAX_ID);
        assert!(segment < SEGMENTS.len() && offset < 64 << segment);
    }

    /// A record names its registry by id and holds a count on it while it
    /// does; `done` gives both back, and a closed registry is left for the
    /// registry of the thread the task goes idle on next.
    #[test]
    fn a_record_holds_its_registry_while_it_names_it() {
        let noop = futures::task::noop_waker_ref();
        let mut record = Record::new();
        record.pending(noop);
        assert_eq!(record.id, OFF_WORKER, "no registry on this thread");
        record.pending(noop);
        assert_eq!(record.id, OFF_WORKER);

        let first = Registry::new();
        let second = Registry::new();
        assert_ne!(first.id, second.id);
        let mut record = Record::new();
        {
            let _entered = enter(Some(&first));
            record.pending(noop);
            assert_eq!((record.id, first.len()), (first.id, 1));
            assert_eq!(Arc::strong_count(&first), 2);
            record.pending(noop);
            assert_eq!(first.len(), 1, "recorded once");
            assert_eq!(first.close().len(), 1);
        }
        {
            let _entered = enter(Some(&second));
            record.pending(noop);
            assert_eq!((record.id, second.len()), (second.id, 1));
            assert_eq!(first.outstanding(), 0, "the move counts it done");
            assert_eq!(Arc::strong_count(&first), 1);
            assert_eq!(Arc::strong_count(&second), 2);
        }
        drop(record);
        assert_eq!((second.len(), Arc::strong_count(&second)), (0, 1));

        // A dropped registry's id goes to the next one, with its slot.
        let id = second.id;
        drop(second);
        let mut ids: Vec<_> = (0..3).map(|_| Registry::new()).collect();
        ids.retain(|r| r.id == id);
        if let Some(again) = ids.first() {
            assert!(std::ptr::eq(
                slot(id).load(Ordering::Relaxed),
                Arc::as_ptr(again)
            ));
        }
    }

    /// A record whose count is its registry's last (the pool went, its
    /// task lived on) frees the registry when it is done, through the
    /// `Arc`'s own pointer (Miri checks that pointer's provenance:
    /// `cargo +nightly miri test --lib registry::tests`).
    #[test]
    fn a_record_with_the_last_count_frees_its_registry() {
        let noop = futures::task::noop_waker_ref();
        let registry = Registry::new();
        let gone = Arc::downgrade(&registry);
        let mut record = Record::new();
        {
            let _entered = enter(Some(&registry));
            record.pending(noop);
        }
        assert_eq!((record.id, registry.len()), (registry.id, 1));
        drop(registry);
        assert!(gone.upgrade().is_some(), "the record's count keeps it");
        drop(record);
        assert!(gone.upgrade().is_none(), "the record's count was the last");
    }

    /// Keys run across pages; a freed key is given again, on whatever page.
    #[test]
    fn the_book_keeps_wakers_across_its_pages() {
        let r = Registry::new();
        let noop = futures::task::noop_waker_ref();
        let keys: Vec<_> = (0..3 * PAGE + 5).map(|_| r.insert(noop).unwrap()).collect();
        assert_eq!(keys, (0..3 * PAGE + 5).collect::<Vec<_>>());
        for key in [0, PAGE - 1, PAGE, 2 * PAGE + 3, 3 * PAGE + 4] {
            r.remove(key);
        }
        assert_eq!(r.len(), 3 * PAGE);
        r.remove(3 * PAGE + 5);
        r.remove(PAGE);
        assert_eq!(r.len(), 3 * PAGE, "unused and freed keys remove nothing");
        let mut again: Vec<_> = (0..5).map(|_| r.insert(noop).unwrap()).collect();
        again.sort();
        assert_eq!(again, [0, PAGE - 1, PAGE, 2 * PAGE + 3, 3 * PAGE + 4]);
        assert_eq!(r.insert(noop), Some(3 * PAGE + 5));
        assert_eq!(r.close().len(), 3 * PAGE + 6);
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
