//! The one word of metadata in each task's block ([`TaskMeta`]), the task
//! this thread is running, and the builders that put the metadata there.
//!
//! Each block also carries the task's `gio::Cancellable` (X1), made on first
//! use by [`current_cancellable`] and cancelled when the task is.

use std::collections::HashMap;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use gio::prelude::*;

use super::owner::{Owner, OwnerHeader, OwnerRef};
use super::Runnable;
use crate::current::{Role, Slot};
use crate::util::Unpoisoned;

/// Per-task data kept in the task's block (async-task's metadata), in one
/// word: the task's owner, if it has one, and the state of the task's
/// `gio::Cancellable` (X1) in the word's two low bits.
///
/// One word, not two: a task's block is then 72 bytes for a future of two
/// words, which glibc serves from an 80-byte chunk where 80 bytes took a
/// 96-byte one (BENCH.md's memory_per_task). The owner is read on every
/// wake-up; a cancellable is made only for the tasks that ask for one (for
/// a GIO call), so it is kept in a side table, [`CANCELLABLES`], under the
/// address of the task's metadata, until the block is freed.
pub(crate) struct TaskMeta {
    /// A strong reference to the header of the task's owner ([`OwnerRef`]:
    /// set before the task is spawned and never changed), or null; tagged
    /// with [`CANCELLED`] and [`MADE`] (an `OwnerHeader` is 8-aligned).
    word: AtomicPtr<OwnerHeader>,
}

/// The tag for "cancelled before a cancellable was made": the cancellable
/// is born cancelled.
const CANCELLED: usize = 1;
/// The tag for "the task's cancellable is in [`CANCELLABLES`]".
const MADE: usize = 2;
/// The tag for "the task is bound to one thread" (S14): its cancellable is
/// cancelled there, never by a canceller on another thread, so that its
/// `cancelled` handlers (which may be `!Send`: `connect_cancelled_local`)
/// run on the task's own thread.
const BOUND: usize = 4;
const TAGS: usize = CANCELLED | MADE | BOUND;

const _: () = assert!(std::mem::align_of::<OwnerHeader>() > TAGS);
const _: () = assert!(std::mem::size_of::<TaskMeta>() == std::mem::size_of::<usize>());

/// The cancellables made for tasks (X1), by the address of their task's
/// metadata, each a strong reference released when the task's block is
/// freed. In shards, so that tasks asking for theirs on different workers
/// seldom meet on one lock.
static CANCELLABLES: std::sync::LazyLock<[Mutex<HashMap<usize, gio::Cancellable>>; 16]> =
    std::sync::LazyLock::new(|| std::array::from_fn(|_| Mutex::new(HashMap::new())));

/// The shard of [`CANCELLABLES`] holding the cancellable of the task whose
/// metadata is at `key`. Nothing under its lock panics.
fn cancellables(key: usize) -> MutexGuard<'static, HashMap<usize, gio::Cancellable>> {
    // Blocks are 16-aligned and at least 48 bytes apart.
    CANCELLABLES[(key >> 4) % 16].lock().unpoisoned()
}

impl TaskMeta {
    /// The metadata of a task with no owner.
    pub(crate) const fn new() -> Self {
        TaskMeta {
            word: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// The metadata of a task of `owner` (whose reference it keeps).
    fn owned(owner: OwnerRef) -> Self {
        let header = std::mem::ManuallyDrop::new(owner).0.as_ptr();
        TaskMeta {
            word: AtomicPtr::new(header),
        }
    }

    /// The header of the task's owner, if it has one; the block holds a
    /// strong reference to it.
    #[inline]
    pub(crate) fn owner(&self) -> Option<NonNull<OwnerHeader>> {
        // Relaxed: the owner was set before the block was shared and never
        // changes; only the tags do.
        NonNull::new(self.word.load(Ordering::Relaxed).map_addr(|a| a & !TAGS))
    }

    /// This metadata's key in [`CANCELLABLES`].
    fn key(&self) -> usize {
        (self as *const Self).addr()
    }

    /// Sets `tag`; gives the tags that were set before.
    fn tag(&self, tag: usize) -> usize {
        self.word.fetch_or(tag, Ordering::AcqRel).addr() & TAGS
    }

    /// The task's cancellable, made now if nobody asked before (already
    /// cancelled if the task has been).
    pub(crate) fn cancellable(&self) -> gio::Cancellable {
        let key = self.key();
        let mut table = cancellables(key);
        if self.word.load(Ordering::Acquire).addr() & MADE != 0 {
            return table
                .get(&key)
                .expect("a task's made cancellable stays in the table until its block is freed")
                .clone();
        }
        let made = gio::Cancellable::new();
        table.insert(key, made.clone());
        // Under the lock: a canceller that finds MADE set then waits here
        // for the entry. One that set CANCELLED first is seen here.
        if self.tag(MADE) & CANCELLED != 0 {
            // Nobody can have connected to it yet: no handler runs here.
            made.cancel();
        }
        made
    }

    /// True once the task has been cancelled ([`to_cancel`](Self::to_cancel)
    /// called): a fiber's cancellation (F4).
    #[inline]
    pub(crate) fn is_cancelled(&self) -> bool {
        self.word.load(Ordering::Acquire).addr() & CANCELLED != 0
    }

    /// For a task being cancelled: marks a cancellable nobody has asked for
    /// yet to be born cancelled, or gives the one that exists, for the
    /// canceller to cancel once the task is closed (so that the task's
    /// future is never polled with its cancellable cancelled: S5 drops it at
    /// its suspension point instead). Either way the task is marked
    /// cancelled ([`is_cancelled`](Self::is_cancelled)).
    ///
    /// A thread-bound task's (S14) is not given: its own thread cancels it
    /// ([`cancel_here`](Self::cancel_here)) when it next runs the task (a
    /// fiber's next wait, the drop of the task's future).
    pub(crate) fn to_cancel(&self) -> Option<gio::Cancellable> {
        let tags = self.tag(CANCELLED);
        if tags & MADE == 0 || tags & BOUND != 0 {
            return None;
        }
        self.made()
    }

    /// The made cancellable, from the table.
    fn made(&self) -> Option<gio::Cancellable> {
        let key = self.key();
        let made = cancellables(key).get(&key).cloned();
        debug_assert!(made.is_some(), "a made cancellable is in the table");
        made
    }

    /// Binds the task to the calling thread (S14): from now on only this
    /// thread cancels its cancellable. Called by each poll of a thread-bound
    /// task (a load once bound), first before it can make its cancellable.
    #[inline]
    pub(crate) fn bind(&self) {
        if self.word.load(Ordering::Relaxed).addr() & BOUND == 0 {
            self.tag(BOUND);
        }
    }

    /// On the task's own thread: cancels its cancellable if the task has
    /// been cancelled and has one (its `cancelled` handlers run here, on
    /// the calling thread, outside any gdex lock). Cancelling again does
    /// nothing (GLib emits `cancelled` once).
    #[inline]
    pub(crate) fn cancel_here(&self) {
        let word = self.word.load(Ordering::Acquire).addr();
        if word & (CANCELLED | MADE) == CANCELLED | MADE {
            self.cancel_made();
        }
    }

    #[cold]
    fn cancel_made(&self) {
        if let Some(cancellable) = self.made() {
            cancellable.cancel();
        }
    }
}

impl Drop for TaskMeta {
    fn drop(&mut self) {
        let word = *self.word.get_mut();
        if word.addr() & MADE != 0 {
            let key = self.key();
            // Released outside the lock.
            let made = cancellables(key).remove(&key);
            drop(made);
        }
        if let Some(header) = NonNull::new(word.map_addr(|a| a & !TAGS)) {
            // The block's reference, released once.
            drop(OwnerRef(header));
        }
    }
}

/// The metadata of the task this thread is running, or null.
// SAFETY: `task` owns `Role::Task`; this is its one slot.
pub(super) const CURRENT: Slot<TaskMeta> = unsafe { Slot::new(Role::Task) };

/// Makes `meta` the running task's metadata until the guard drops: for a
/// fiber resumed by its thread's fiber scheduler, outside its task's poll
/// (its `current_cancellable()` is its task's, as inside the poll).
#[inline]
pub(crate) fn enter_running(meta: *const TaskMeta) -> crate::current::Entered {
    CURRENT.enter(meta)
}

/// Identifies the task this thread is running right now (null if none): a
/// job run inside it (a nested loop's) has another.
pub(crate) fn running_task() -> *const () {
    CURRENT.get().cast()
}

/// The `gio::Cancellable` of the gdex task (or fiber, or blocking job) that
/// is running on this thread: it is cancelled when the task is cancelled
/// (its handle dropped, [`Task::cancel`](crate::Task::cancel), a
/// [`TaskGroup`](crate::TaskGroup) cancelled, the object of
/// [`spawn_bound`](crate::spawn_bound) disposed), so GIO calls made with it
/// stop too (X1). `None` outside a gdex task.
///
/// It is made on first use; a task that never asks pays nothing for it.
///
/// ```
/// use gio::prelude::*;
/// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
/// let task = pool.scheduler().spawn(async {
///     let cancellable = gdex::current_cancellable().expect("inside a task");
///     cancellable.is_cancelled()
/// });
/// assert_eq!(gdex::block_on(task).unwrap(), false);
/// assert!(gdex::current_cancellable().is_none());
/// ```
pub fn current_cancellable() -> Option<gio::Cancellable> {
    let meta = CURRENT.get();
    // SAFETY: CURRENT is set only while `Job::run` runs the task whose block
    // holds this metadata, and reset before the block can go away.
    unsafe { meta.as_ref() }.map(TaskMeta::cancellable)
}

/// The metadata of the gdex task running on this thread, or null: a fiber
/// finds its own there, to learn when it is cancelled (F4).
pub(crate) fn running_task_meta() -> *const TaskMeta {
    CURRENT.get()
}

/// Cancels the running task's cancellable (for a task that stops itself
/// because it was cancelled from elsewhere: a disposed object).
pub(crate) fn cancel_current_cancellable() {
    let meta = CURRENT.get();
    // SAFETY: as in `current_cancellable`.
    if let Some(meta) = unsafe { meta.as_ref() } {
        // On the task's own thread: its cancellable, bound or not.
        meta.tag(CANCELLED);
        meta.cancel_here();
    }
}

/// A builder for a gdex task's block: async-task with a [`TaskMeta`].
#[inline]
pub(crate) fn builder() -> async_task::Builder<TaskMeta> {
    async_task::Builder::new().metadata(TaskMeta::new())
}

/// A new reference to the owner of a task built by [`owned_builder`].
pub(crate) fn owner_of(runnable: &Runnable) -> OwnerRef {
    let Some(header) = runnable.metadata().owner() else {
        unreachable!("an owned task's metadata names its owner")
    };
    // SAFETY: the block `runnable` keeps alive holds a strong reference to
    // the owner (so it is live, and its header pointer came from the
    // owner's own `Arc` or `retained`); the new count keeps it so.
    unsafe { OwnerRef::retained(header) }
}

/// A builder for a stealable task of `owner`, to be spawned with
/// [`schedule_on_owner`] as its schedule function.
#[inline]
pub(crate) fn owned_builder<T: Owner>(owner: Arc<T>) -> async_task::Builder<TaskMeta> {
    async_task::Builder::new().metadata(TaskMeta::owned(OwnerRef::new(owner)))
}

/// A builder for a task scheduled through `owner` (with
/// [`schedule_on_owner`]), for owners made by [`OwnerRef::retained`].
#[inline]
pub(crate) fn builder_for(owner: OwnerRef) -> async_task::Builder<TaskMeta> {
    async_task::Builder::new().metadata(TaskMeta::owned(owner))
}

/// The schedule function of a task built by [`owned_builder`]: hands the
/// task to the owner named in its metadata. A plain function, so that
/// async-task makes no temporary waker around it.
#[inline]
pub(crate) fn schedule_on_owner(runnable: Runnable) {
    // Copied out of the block so that `runnable` can move into the call.
    let Some(header) = runnable.metadata().owner() else {
        unreachable!("an owned task's metadata names its owner")
    };
    // SAFETY: the block `runnable` keeps alive holds a strong reference to
    // the owner, so the header is in a live owner whose vtable it holds;
    // `Owner::schedule`'s contract covers the owner's life after `runnable`
    // is given away.
    unsafe { (header.as_ref().vtable.schedule)(header, runnable) }
}

#[cfg(test)]
mod tests {
    /// Every task's block carries its metadata: a thin pointer to its
    /// owner with the cancellable's state in its low bits, no more (a fat
    /// `Arc<dyn Owner>` made each block 8 bytes bigger, and the
    /// cancellable's own pointer 8 more).
    #[test]
    fn task_metadata_is_one_word() {
        assert_eq!(
            std::mem::size_of::<super::TaskMeta>(),
            std::mem::size_of::<usize>()
        );
    }

    /// An owner that counts what it is given (its header not first).
    struct Counting {
        _before: u64,
        header: super::OwnerHeader,
        scheduled: std::sync::Mutex<Vec<super::Runnable>>,
    }

    // SAFETY: one header, made for `Counting`, at the offset given.
    unsafe impl super::Owner for Counting {
        const HEADER_OFFSET: usize = std::mem::offset_of!(Counting, header);
        fn schedule(&self, runnable: super::Runnable) -> Option<super::OwnerRef> {
            self.scheduled.lock().unwrap().push(runnable);
            None
        }
        fn header(&self) -> &super::OwnerHeader {
            &self.header
        }
    }

    /// A task built by `owned_builder` reaches its owner through the thin
    /// pointer on every wake-up, holds one reference to it while the block
    /// lives and gives it back when the block is freed; `owner_of` hands out
    /// references of its own.
    #[test]
    fn an_owned_task_schedules_on_and_releases_its_owner() {
        let owner = std::sync::Arc::new(Counting {
            _before: 0,
            header: super::OwnerHeader::new::<Counting>(),
            scheduled: Default::default(),
        });
        let (runnable, task) =
            super::owned_builder(owner.clone()).spawn(|_| async { 7 }, super::schedule_on_owner);
        assert_eq!(std::sync::Arc::strong_count(&owner), 2);
        let extra = super::owner_of(&runnable);
        assert_eq!(std::sync::Arc::strong_count(&owner), 3);
        drop(extra);
        assert_eq!(std::sync::Arc::strong_count(&owner), 2);
        runnable.schedule();
        let queued = owner
            .scheduled
            .lock()
            .unwrap()
            .pop()
            .expect("scheduled on its owner");
        queued.run();
        assert_eq!(futures::executor::block_on(task), 7);
        assert_eq!(
            std::sync::Arc::strong_count(&owner),
            1,
            "the block let its owner go"
        );
    }

    /// An owner whose header is not where its `HEADER_OFFSET` says is
    /// refused at spawn, not followed into another field.
    #[repr(C)]
    struct Misplaced {
        first: u64,
        header: super::OwnerHeader,
    }

    // SAFETY: deliberately broken (the header is at 8, not 0), to check
    // that `OwnerRef::new` refuses it before anything follows the pointer.
    unsafe impl super::Owner for Misplaced {
        const HEADER_OFFSET: usize = 0;
        fn schedule(&self, _: super::Runnable) -> Option<super::OwnerRef> {
            unreachable!()
        }
        fn header(&self) -> &super::OwnerHeader {
            &self.header
        }
    }

    #[test]
    #[should_panic(expected = "an Owner's header is at its HEADER_OFFSET")]
    fn an_owner_with_its_header_elsewhere_is_refused() {
        let owner = std::sync::Arc::new(Misplaced {
            first: 1,
            header: super::OwnerHeader::new::<Misplaced>(),
        });
        assert_eq!(owner.first, 1);
        let _ = super::owned_builder(owner);
    }
}
