//! What a scheduler queues, and the handle a spawner gets back.
//!
//! A spawned future lives in one heap block allocated by `async-task`: its
//! header (state word, awaiter waker, vtable), the schedule function, the
//! future and, later, its output. The block's `Runnable` is what a queue
//! holds; running it polls the future once. The spawner's [`Task<T>`] is the
//! other reference to the block.
//!
//! Cancellation follows libdex's *discard*: dropping the last `Task` handle of
//! a pending task closes the block. If the task is idle, `async-task`
//! schedules it once more so that the scheduler that owns it, on its own
//! thread, drops the future (S5); if it is queued, the scheduler drops the
//! future instead of polling it; if it is running, the future is dropped when
//! the current poll returns. A future is never dropped in the middle of a
//! poll. [`Task::detach`] is libdex's *disown*.
//!
//! Panics never cross a scheduler: every poll and the drop of every future
//! run inside `catch_unwind`, and a poll's panic becomes the task's output,
//! [`Error::Panicked`], for its waiter (S6). A panic nobody will read (the
//! task was detached, or its handle was dropped after it finished; a
//! destructor's) goes to the panic handler (X5; by default `g_critical`).
//!
//! Each block also carries the task's `gio::Cancellable` (X1), made on first
//! use by [`current_cancellable`] and cancelled when the task is.

pub(crate) mod flag;
pub(crate) mod registry;

use std::cell::Cell;
use std::collections::HashMap;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};

use gio::prelude::*;

use crate::current::{Role, Slot};
use crate::diagnostics::panic::PanicSource;
use crate::error::{panic_message, Error};
use crate::util::Unpoisoned;

/// A task's `Runnable`, with the task's [`TaskMeta`] in its block.
pub(crate) type Runnable = async_task::Runnable<TaskMeta>;

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
const TAGS: usize = CANCELLED | MADE;

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
    fn owner(&self) -> Option<NonNull<OwnerHeader>> {
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
    pub(crate) fn to_cancel(&self) -> Option<gio::Cancellable> {
        if self.tag(CANCELLED) & MADE == 0 {
            return None;
        }
        let key = self.key();
        let made = cancellables(key).get(&key).cloned();
        debug_assert!(made.is_some(), "a made cancellable is in the table");
        made
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
const CURRENT: Slot<TaskMeta> = unsafe { Slot::new(Role::Task) };

/// The waker of the gdex task whose future is being polled on this thread
/// (entered by `CatchUnwind::poll` for the poll), or null: see
/// [`contain_waker`].
// SAFETY: `task` owns `Role::Polling`; this is its one slot.
const POLLING: Slot<Waker> = unsafe { Slot::new(Role::Polling) };

thread_local! {
    /// The last panic-containing wrapper made on this thread (see
    /// [`contain_waker`]).
    static CONTAINED: Cell<std::sync::Weak<ContainedWaker>> = const { Cell::new(std::sync::Weak::new()) };
}

/// Identifies the task this thread is running right now (null if none): a
/// job run inside it (a nested loop's) has another.
pub(crate) fn running_task() -> *const () {
    CURRENT.get().cast()
}

/// The `gio::Cancellable` of the gdex task (or fiber, or blocking job) that
/// is running on this thread: it is cancelled when the task is cancelled
/// (its handle dropped, [`Task::cancel`], a [`TaskGroup`](crate::TaskGroup)
/// cancelled, the object of [`spawn_bound`](crate::spawn_bound) disposed),
/// so GIO calls made with it stop too (X1). `None` outside a gdex task.
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
    if let Some(cancellable) = unsafe { meta.as_ref() }.and_then(TaskMeta::to_cancel) {
        cancellable.cancel();
    }
}

/// A builder for a gdex task's block: async-task with a [`TaskMeta`].
#[inline]
pub(crate) fn builder() -> async_task::Builder<TaskMeta> {
    async_task::Builder::new().metadata(TaskMeta::new())
}

/// Who runs a stealable task wherever it is woken: its pool. The task core
/// knows its owner only through this trait, and each task's block holds
/// its owner through one thin pointer ([`OwnerRef`]): a fat `Arc<dyn _>`
/// would make every block 8 bytes bigger.
///
/// # Safety
///
/// An implementor has one [`OwnerHeader`] field, made by
/// `OwnerHeader::new::<Self>()`, at [`HEADER_OFFSET`](Owner::HEADER_OFFSET)
/// (`std::mem::offset_of!`), and returns that field from
/// [`header`](Owner::header): the owner is then found `HEADER_OFFSET` bytes
/// before its header, and the header's vtable is the owner's own. (No
/// `repr(C)`: the compiler keeps its own field order, which the pool's hot
/// atomics are laid out by.)
pub(crate) unsafe trait Owner: Send + Sync + Sized + 'static {
    /// Where the header is in `Self`: `std::mem::offset_of!(Self, field)`.
    const HEADER_OFFSET: usize;

    /// Queues `runnable`, woken on whatever thread. Once `runnable` is
    /// queued, the task may run, finish and free its block (and with it
    /// perhaps the last other reference to `self`) on another thread: an
    /// owner that still needs `self` after giving `runnable` away takes
    /// [`owner_of`] it first, and returns that reference for the caller to
    /// drop once this call has returned (dropping the last one inside it
    /// would free `self` while `&self` is still live).
    fn schedule(&self, runnable: Runnable) -> Option<OwnerRef>;

    /// The header of `self`, at `HEADER_OFFSET`.
    fn header(&self) -> &OwnerHeader;
}

/// A field of an [`Owner`]: the owner's vtable, so that a thin pointer to
/// the header is enough to schedule on, retain and release it.
pub(crate) struct OwnerHeader {
    vtable: &'static OwnerVtable,
}

/// What an owner does, given its header: its vtable. [`Owner`]s get theirs
/// from [`OwnerHeader::new`]; an owner that is not itself in an `Arc` (a
/// worker's home for its pinned tasks, inside its pool) writes its own and
/// uses [`OwnerHeader::with_vtable`].
pub(crate) struct OwnerVtable {
    /// Queues a task woken on whatever thread (see [`Owner::schedule`]).
    pub(crate) schedule: unsafe fn(NonNull<OwnerHeader>, Runnable),
    /// Takes one more count on whatever keeps the header alive.
    pub(crate) retain: unsafe fn(NonNull<OwnerHeader>),
    /// Gives one back (may free the header).
    pub(crate) release: unsafe fn(NonNull<OwnerHeader>),
}

/// The vtable of owners of type `T`.
struct VtableOf<T>(std::marker::PhantomData<T>);

impl<T: Owner> VtableOf<T> {
    const VTABLE: OwnerVtable = OwnerVtable {
        schedule: Self::schedule,
        retain: Self::retain,
        release: Self::release,
    };

    /// The owner whose header is at `header`.
    ///
    /// # Safety
    /// `header` is the header of a live `T` (the `Owner` contract).
    #[inline]
    unsafe fn owner(header: NonNull<OwnerHeader>) -> NonNull<T> {
        // SAFETY: by the caller and the `Owner` contract, the `T` starts
        // `HEADER_OFFSET` bytes before its header, inside the same object.
        unsafe { header.byte_sub(T::HEADER_OFFSET).cast::<T>() }
    }

    /// # Safety
    /// `header` is the header of a live `T` (the `Owner` contract).
    unsafe fn schedule(header: NonNull<OwnerHeader>, runnable: Runnable) {
        // SAFETY: by the caller, the `T` is live. Only the owner is
        // borrowed for the call, not the block: see `Owner::schedule` for
        // who keeps the owner alive after the job leaves.
        let owner = unsafe { Self::owner(header).as_ref() };
        let keep = owner.schedule(runnable);
        // After the call: it may be the pool's last count.
        drop(keep);
    }

    /// # Safety
    /// `header` is the header of a `T` in an `Arc` with a strong count we
    /// hold.
    unsafe fn retain(header: NonNull<OwnerHeader>) {
        // SAFETY: by the caller, the owner's pointer is the one
        // `Arc::into_raw` gave (`OwnerRef::new`), of a live `Arc<T>`.
        unsafe { Arc::increment_strong_count(Self::owner(header).as_ptr()) }
    }

    /// # Safety
    /// As for `retain`; releases one strong count we own.
    unsafe fn release(header: NonNull<OwnerHeader>) {
        // SAFETY: as in `retain`, and the caller gives up the count.
        unsafe { Arc::decrement_strong_count(Self::owner(header).as_ptr()) }
    }
}

impl OwnerHeader {
    /// The header for an owner of type `T`.
    pub(crate) const fn new<T: Owner>() -> Self {
        OwnerHeader {
            vtable: &VtableOf::<T>::VTABLE,
        }
    }

    /// A header with a vtable of its own: see [`OwnerRef::retained`] for
    /// what the vtable must do.
    pub(crate) const fn with_vtable(vtable: &'static OwnerVtable) -> Self {
        OwnerHeader { vtable }
    }
}

/// A strong reference to a task's owner, one pointer wide.
pub(crate) struct OwnerRef(NonNull<OwnerHeader>);

// SAFETY: an `Owner` is `Send + Sync`, and an `OwnerRef` is an `Arc` of one.
unsafe impl Send for OwnerRef {}
// SAFETY: as above.
unsafe impl Sync for OwnerRef {}

impl OwnerRef {
    fn new<T: Owner>(owner: Arc<T>) -> Self {
        assert!(
            ptr::eq(
                (Arc::as_ptr(&owner) as *const u8).wrapping_add(T::HEADER_OFFSET),
                owner.header() as *const OwnerHeader as *const u8
            ),
            "an Owner's header is at its HEADER_OFFSET (offset_of! its header field)"
        );
        // Derived from the `Arc`'s own pointer, not from the `&OwnerHeader`:
        // its provenance covers the whole owner, which the vtable reaches
        // back to.
        let raw = Arc::into_raw(owner) as *const u8;
        let header = raw.wrapping_add(T::HEADER_OFFSET) as *mut OwnerHeader;
        // SAFETY: inside the owner's allocation (checked above), so not
        // null; the `Arc`'s count we gave up with `into_raw` is this
        // reference's.
        OwnerRef(unsafe { NonNull::new_unchecked(header) })
    }
}

impl OwnerRef {
    /// A reference to the owner whose header is at `header`, taking a count
    /// with its vtable's `retain`.
    ///
    /// # Safety
    ///
    /// `header` is live now, its pointer's provenance covers whatever the
    /// vtable's functions reach from it, and it stays live for as long as
    /// one count taken by `retain` is held: `schedule` may then be called
    /// with it, from any thread, under the contract of [`Owner::schedule`].
    pub(crate) unsafe fn retained(header: NonNull<OwnerHeader>) -> Self {
        // SAFETY: by the caller, the header is live and `retain` keeps it so.
        unsafe { (header.as_ref().vtable.retain)(header) };
        OwnerRef(header)
    }
}

impl Clone for OwnerRef {
    fn clone(&self) -> Self {
        // SAFETY: we hold a strong reference to the owner this header is in.
        unsafe { (self.0.as_ref().vtable.retain)(self.0) };
        OwnerRef(self.0)
    }
}

impl Drop for OwnerRef {
    fn drop(&mut self) {
        // SAFETY: we give up the strong reference we hold; the vtable is
        // read before the release that may free the owner.
        unsafe {
            let release = self.0.as_ref().vtable.release;
            release(self.0)
        }
    }
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

/// A unit of work in a run queue: a task's `Runnable`, or a plain work item
/// pushed with [`Scheduler::push`](crate::Scheduler::push) (S3).
///
/// Two words, both plain: the task's raw `Runnable` or the work item's
/// closure (or its box), and the vtable that says which. (It was an enum of
/// the two. Rust built each one on the stack and copied it into a queue's
/// slot, or out of one, with a 16-byte load of what two 8-byte stores had
/// just written: a store-forwarding stall at every push and pop, about 8%
/// of a fiber switch and of the worker's dispatch loop.)
pub(crate) struct Job {
    /// A task's `Runnable::into_raw`, or the closure itself if
    /// [`WorkOf::INLINE`], else a `Box` of it.
    data: std::mem::MaybeUninit<usize>,
    /// [`TASK`] for a task; the closure's [`WorkOf::VTABLE`] otherwise.
    vtable: &'static WorkVtable,
}

// SAFETY: a job holds a `Runnable` (which is `Send`: gdex's task metadata is
// `Send` and `Sync`) or a closure that `Job::work` only takes if `Send`.
unsafe impl Send for Job {}

/// The vtable of a task's job. `run` and `drop` are never called through
/// it: `Job::run` and `Job`'s drop tell a task by this address and handle
/// its `Runnable` themselves.
static TASK: WorkVtable = WorkVtable {
    run: |_| unreachable!("a task's job runs through Job::run"),
    drop: |_| unreachable!("a task's job drops through Job's drop"),
};

/// How to run or drop the closure a work item's [`Job`] holds, by its type.
struct WorkVtable {
    run: unsafe fn(*mut std::mem::MaybeUninit<usize>),
    drop: unsafe fn(*mut std::mem::MaybeUninit<usize>),
}

struct WorkOf<F>(std::marker::PhantomData<F>);

impl<F: FnOnce() + Send + 'static> WorkOf<F> {
    const INLINE: bool = std::mem::size_of::<F>() <= std::mem::size_of::<usize>()
        && std::mem::align_of::<F>() <= std::mem::align_of::<usize>();

    const VTABLE: WorkVtable = WorkVtable {
        run: Self::run,
        drop: Self::drop,
    };

    /// Moves the closure out of `data` (freeing its box, if it has one).
    ///
    /// # Safety
    /// `data` is the `data` of a live `Job` made by `Job::work::<F>`, and
    /// that `Job` is never used again.
    unsafe fn take(data: *mut std::mem::MaybeUninit<usize>) -> F {
        if Self::INLINE {
            // SAFETY: `new` wrote an `F` there (it fits, size and alignment),
            // read out once (caller).
            unsafe { ptr::read(data.cast::<F>()) }
        } else {
            // SAFETY: `new` wrote the pointer of a leaked `Box<F>` there,
            // taken back once (caller).
            unsafe { *Box::from_raw(ptr::read(data.cast::<*mut F>())) }
        }
    }

    /// # Safety
    /// As for [`take`](Self::take).
    unsafe fn run(data: *mut std::mem::MaybeUninit<usize>) {
        // SAFETY: by the caller.
        let f = unsafe { Self::take(data) };
        f()
    }

    /// # Safety
    /// As for [`take`](Self::take).
    unsafe fn drop(data: *mut std::mem::MaybeUninit<usize>) {
        // SAFETY: by the caller.
        drop(unsafe { Self::take(data) })
    }
}

impl Job {
    /// The job of a task's `Runnable`.
    #[inline]
    pub(crate) fn task(runnable: Runnable) -> Job {
        let mut data = std::mem::MaybeUninit::<usize>::uninit();
        // SAFETY: a pointer fits in a `usize`-sized, -aligned word.
        unsafe {
            data.as_mut_ptr()
                .cast::<*mut ()>()
                .write(runnable.into_raw().as_ptr())
        }
        Job {
            data,
            vtable: &TASK,
        }
    }

    /// The raw `Runnable` a task's job holds.
    ///
    /// # Safety
    /// `self` is a task's job (`is_task`).
    #[inline]
    unsafe fn raw_runnable(&self) -> NonNull<()> {
        // SAFETY: `Job::task` wrote `Runnable::into_raw` there, non-null
        // (caller: this is a task's job).
        unsafe { NonNull::new_unchecked(ptr::read(self.data.as_ptr().cast::<*mut ()>())) }
    }

    /// The job of a work item's closure. Dropped without running (its pool shut down
    /// first), its captures are dropped under `catch_unwind`, as a cancelled
    /// task's future is (S6): a destructor's panic goes to the panic handler
    /// ([`PanicSource::Drop`]). It used to unwind into whoever dropped it: the
    /// worker's exit (the thread died with the rest of its queue, its `join`
    /// failed), the thread calling `ThreadPool::shutdown` (the call panicked,
    /// the injector half drained), the `gdex-reaper` thread (which died of it),
    /// or a `push` on a closed pool.
    ///
    /// A closure that fits in a word (an `Arc` it shares with its pusher, a
    /// pointer, nothing at all: libdex's `func` and `data`) is kept in the job
    /// itself; a bigger one is boxed. So the common push allocates nothing:
    /// in `push_remote` the allocator's `malloc` on the pushing thread and
    /// `free` on the workers were a third of the profile (S7).
    pub(crate) fn work<F: FnOnce() + Send + 'static>(f: F) -> Job {
        let mut data = std::mem::MaybeUninit::<usize>::uninit();
        if WorkOf::<F>::INLINE {
            // SAFETY: `F` fits in the word, size and alignment (INLINE).
            unsafe { data.as_mut_ptr().cast::<F>().write(f) }
        } else {
            let boxed = Box::into_raw(Box::new(f));
            // SAFETY: a pointer fits in a `usize`-sized, -aligned word.
            unsafe { data.as_mut_ptr().cast::<*mut F>().write(boxed) }
        }
        Job {
            data,
            vtable: &WorkOf::<F>::VTABLE,
        }
    }

    #[inline]
    fn is_task(&self) -> bool {
        ptr::eq(self.vtable, &TASK)
    }

    /// The task's `Runnable`, taken out of the job (which must not be used
    /// or dropped again).
    ///
    /// # Safety
    /// `self` is a task's job (`is_task`), never used again.
    #[inline]
    unsafe fn take_runnable(&mut self) -> Runnable {
        // SAFETY: `Job::task` stored `Runnable::into_raw` there, taken back
        // once (caller).
        unsafe { Runnable::from_raw(self.raw_runnable()) }
    }

    /// The owner of the task whose job this is (see [`owner_of`]).
    ///
    /// # Panics
    /// If it is a work item's job: schedule functions only queue tasks.
    pub(crate) fn task_owner(&self) -> OwnerRef {
        assert!(self.is_task(), "a schedule function only queues tasks");
        // SAFETY: a task's job holds its `Runnable`, which this borrow of
        // the job keeps alive; the copy made here is never dropped
        // (ManuallyDrop, at once), so the job still owns it.
        let copy = unsafe { Runnable::from_raw(self.raw_runnable()) };
        owner_of(&std::mem::ManuallyDrop::new(copy))
    }

    /// Runs the job on the calling thread. Never unwinds: a task's panic is
    /// already its output, and a work item's panic goes to the panic handler
    /// (S6, X5).
    #[inline]
    pub(crate) fn run(self) {
        let mut this = std::mem::ManuallyDrop::new(self);
        if this.is_task() {
            // SAFETY: a task's job, never used again (ManuallyDrop: no drop).
            let runnable = unsafe { this.take_runnable() };
            let running = CURRENT.enter(runnable.metadata());
            // Neither the poll nor the drop of a gdex task's future
            // unwinds (CatchUnwind below); this guards the rest.
            let result = catch_unwind(AssertUnwindSafe(|| runnable.run()));
            drop(running);
            if let Err(payload) = result {
                crate::diagnostics::panic::report(PanicSource::Drop, panic_message(&*payload));
            }
        } else {
            let vtable = this.vtable;
            // SAFETY: `vtable` is the one `work` chose for what `data`
            // holds, and `this` is never used again (ManuallyDrop: no drop).
            let run = || unsafe { (vtable.run)(&mut this.data) };
            if let Err(payload) = catch_unwind(AssertUnwindSafe(run)) {
                crate::diagnostics::panic::report(PanicSource::WorkItem, panic_message(&*payload));
            }
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if self.is_task() {
            // SAFETY: a task's job, dropped once, here. (Dropping the
            // `Runnable` drops the task's future: `CatchUnwind` contains a
            // panic of its drop.)
            drop(unsafe { self.take_runnable() });
            return;
        }
        // SAFETY: dropped exactly once, here; `run` forgets `self`.
        let drop_closure = || unsafe { (self.vtable.drop)(&mut self.data) };
        if let Err(payload) = catch_unwind(AssertUnwindSafe(drop_closure)) {
            crate::diagnostics::panic::report(PanicSource::Drop, panic_message(&*payload));
        }
    }
}

/// A panic caught in a task, on its way to the waiter. Goes to the panic
/// handler if nobody takes it, naming the thread the task panicked on (not
/// the one that happens to drop the report; X5).
pub(crate) struct PanicReport {
    message: Option<String>,
    thread: Option<String>,
}

impl PanicReport {
    /// A report of a panic caught now, on this thread.
    fn caught(message: String) -> Self {
        PanicReport {
            message: Some(message),
            thread: std::thread::current().name().map(str::to_owned),
        }
    }

    fn take(mut self) -> String {
        self.message.take().unwrap_or_default()
    }
}

impl Drop for PanicReport {
    fn drop(&mut self) {
        if let Some(message) = self.message.take() {
            crate::diagnostics::panic::report_from(PanicSource::Task, message, self.thread.take());
        }
    }
}

/// A task's output, kept in its block until its waiter takes it. Its drop
/// (when nobody takes it: the task was detached, or its handle dropped
/// after it finished) is contained like every other panic of a task (S6,
/// X5): async-task aborts the process if an output's destructor unwinds
/// (S6).
pub(crate) struct Output<T>(std::mem::ManuallyDrop<T>);

impl<T> Output<T> {
    fn new(value: T) -> Self {
        Output(std::mem::ManuallyDrop::new(value))
    }

    /// The value, for its waiter, who drops it as any value of theirs.
    fn into_inner(self) -> T {
        let mut this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped (ManuallyDrop), so the value is
        // taken out exactly once and never dropped here.
        unsafe { std::mem::ManuallyDrop::take(&mut this.0) }
    }
}

impl<T> Drop for Output<T> {
    fn drop(&mut self) {
        // SAFETY: dropped exactly once, here; `into_inner` forgets `self`.
        let drop_value = || unsafe { std::mem::ManuallyDrop::drop(&mut self.0) };
        if let Err(payload) = catch_unwind(AssertUnwindSafe(drop_value)) {
            crate::diagnostics::panic::report(PanicSource::Output, panic_message(&*payload));
        }
    }
}

/// Why a task has no value: what its block stores instead. Boxed: the
/// block keeps room for its output beside its future, and a failure is
/// rare, so a bare [`FailureKind`] (48 bytes) would make every block whose
/// future is small 40 bytes bigger than this pointer does.
pub(crate) struct Failure(Box<FailureKind>);

/// What a [`Failure`] holds.
pub(crate) enum FailureKind {
    Panicked(PanicReport),
    /// Refused or stopped by gdex (a closed scheduler, a disposed object).
    Error(Error),
}

impl Failure {
    /// A task refused or stopped by gdex with `error`.
    #[cold]
    pub(crate) fn error(error: Error) -> Self {
        Failure(Box::new(FailureKind::Error(error)))
    }

    #[cold]
    fn panicked(report: PanicReport) -> Self {
        Failure(Box::new(FailureKind::Panicked(report)))
    }

    fn into_kind(self) -> FailureKind {
        *self.0
    }
}

/// What a task's block stores as output.
pub(crate) type Outcome<T> = Result<Output<T>, Failure>;

/// Polls the inner future inside `catch_unwind`, turning a panic into the
/// task's output, and drops it inside `catch_unwind` too: async-task aborts
/// the process if a future's destructor unwinds, and S6 says a panic never
/// takes a worker down. A destructor's panic goes to the panic handler.
///
/// It also keeps the task's entry in the registry of idle tasks of the pool
/// worker that polls it (S9, `task::registry`): made at the first `Pending`
/// in a pool's run loop (a worker's dispatch, or that of a scheduler of a
/// worker's own context; a task of any other scheduler records nowhere,
/// wherever it is polled), removed when the future finishes or is dropped.
pub(crate) struct CatchUnwind<F> {
    future: std::mem::ManuallyDrop<F>,
    idle: Idle,
}

impl<F> CatchUnwind<F> {
    /// Wraps a task's future; with task tracking on (X8), the task gets an
    /// entry in the dump, spawned at the caller's caller (every spawn
    /// function up to the public one is `#[track_caller]`), on the
    /// scheduler `scheduler` names (called only then).
    #[track_caller]
    #[inline]
    pub(crate) fn new(future: F, scheduler: impl FnOnce() -> String) -> Self {
        Self::located(future, None, std::panic::Location::caller(), scheduler)
    }

    /// [`new`](Self::new), for a task with a name.
    #[track_caller]
    #[inline]
    pub(crate) fn named(
        future: F,
        name: std::sync::Arc<str>,
        scheduler: impl FnOnce() -> String,
    ) -> Self {
        Self::located(
            future,
            Some(name),
            std::panic::Location::caller(),
            scheduler,
        )
    }

    /// [`new`](Self::new), spawned at `location` (a spawn made through a
    /// closure, where `#[track_caller]` does not reach).
    #[inline]
    pub(crate) fn located(
        future: F,
        name: Option<std::sync::Arc<str>>,
        location: &'static std::panic::Location<'static>,
        scheduler: impl FnOnce() -> String,
    ) -> Self {
        let track = if crate::diagnostics::dump::tracking() {
            crate::diagnostics::dump::register(location, name, scheduler())
        } else {
            0
        };
        CatchUnwind {
            future: std::mem::ManuallyDrop::new(future),
            idle: Idle::new(track),
        }
    }
}

/// A task's record in a worker's registry of idle tasks (S9), or, for a
/// tracked task (X8), the mark of its entry in the task dump, which keeps
/// the record for it: 8 bytes in every task's block either way.
struct Idle(registry::Record);

const _: () = assert!(std::mem::size_of::<Idle>() == 8);

impl Idle {
    fn new(track: u32) -> Self {
        if track == 0 {
            Idle(registry::Record::new())
        } else {
            Idle(registry::Record::tracked(track))
        }
    }

    /// The task's entry in the task dump (X8); 0: not tracked.
    #[inline]
    fn track(&self) -> u32 {
        self.0.track()
    }

    /// The task's poll returned `Pending`: make sure a registry that has not
    /// been closed holds its waker.
    #[inline]
    fn pending(&mut self, waker: &std::task::Waker) {
        match self.track() {
            0 => self.0.pending(waker),
            track => Self::tracked(track, |record| record.pending(waker)),
        }
    }

    /// The task finished or is dropped: forget its entry.
    #[inline]
    fn done(&mut self) {
        match self.track() {
            0 => self.0.done(),
            track => Self::tracked(track, registry::Record::done),
        }
    }

    /// Runs `f` on a tracked task's record, which its dump entry keeps.
    #[cold]
    fn tracked(track: u32, f: impl FnOnce(&mut registry::Record)) {
        crate::diagnostics::dump::with_word(track, |word| {
            // SAFETY: the entry's word is this task's record, put there by
            // `into_bits` below (0 at first: no record), and it is taken
            // (0 left in its place, should `f` unwind) before it is used.
            let mut record = unsafe { registry::Record::from_bits(std::mem::take(word)) };
            f(&mut record);
            *word = record.into_bits();
        })
    }
}

impl<F> Drop for CatchUnwind<F> {
    fn drop(&mut self) {
        // SAFETY: dropped exactly once, here, in place (pinning allows
        // dropping in place), and never used afterwards.
        let drop_inner = || unsafe { std::mem::ManuallyDrop::drop(&mut self.future) };
        if let Err(payload) = catch_unwind(AssertUnwindSafe(drop_inner)) {
            crate::diagnostics::panic::report(PanicSource::Drop, panic_message(&*payload));
        }
        self.idle.done();
        let track = self.idle.track();
        if track != 0 {
            crate::diagnostics::dump::forget(track);
        }
    }
}

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Outcome<F::Output>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `future` is structurally pinned: it is never moved out of
        // `self` (the Drop impl drops it in place), and `CatchUnwind` has no
        // `Unpin` impl of its own. `idle` is not pinned.
        let this = unsafe { self.get_unchecked_mut() };
        if this.idle.track() != 0 {
            return this.poll_tracked(cx);
        }
        // SAFETY: as above.
        let future = unsafe { Pin::new_unchecked(&mut *this.future) };
        let polled = {
            let _polling = POLLING.enter(cx.waker());
            catch_unwind(AssertUnwindSafe(|| future.poll(cx)))
        };
        this.finish_poll(cx, polled)
    }
}

impl<F: Future> CatchUnwind<F> {
    /// A tracked task's poll (X8): its entry shows it running, and its
    /// future gets a waker that marks it queued when woken.
    #[cold]
    #[inline(never)]
    fn poll_tracked(&mut self, cx: &mut Context<'_>) -> Poll<Outcome<F::Output>> {
        let track = self.idle.track();
        let marking = crate::diagnostics::dump::begin_poll(track, cx.waker());
        let waker = marking.as_ref().unwrap_or(cx.waker());
        let mut inner_cx = Context::from_waker(waker);
        // SAFETY: `future` is structurally pinned (see `poll`).
        let future = unsafe { Pin::new_unchecked(&mut *self.future) };
        let polled = {
            let _polling = POLLING.enter(waker);
            catch_unwind(AssertUnwindSafe(|| future.poll(&mut inner_cx)))
        };
        crate::diagnostics::dump::end_poll(track, matches!(polled, Ok(Poll::Pending)));
        self.finish_poll(cx, polled)
    }

    /// What a poll's result makes of the task: its registry entry (S9) and
    /// its outcome.
    #[inline]
    fn finish_poll(
        &mut self,
        cx: &Context<'_>,
        polled: std::thread::Result<Poll<F::Output>>,
    ) -> Poll<Outcome<F::Output>> {
        let this = self;
        match polled {
            Ok(Poll::Pending) => {
                this.idle.pending(cx.waker());
                Poll::Pending
            }
            Ok(Poll::Ready(value)) => {
                this.idle.done();
                Poll::Ready(Ok(Output::new(value)))
            }
            Err(payload) => {
                this.idle.done();
                Poll::Ready(Err(Failure::panicked(PanicReport::caught(panic_message(
                    &*payload,
                )))))
            }
        }
    }
}

/// A handle to a spawned task; itself a future of the task's output (S4).
///
/// Await it from any scheduler, a fiber or a plain thread
/// ([`block_on`](crate::block_on)); the waiter resumes on its own scheduler.
/// It resolves to `Ok(output)`, `Err(Error::Panicked(message))` if the task
/// panicked, or `Err(Error::Cancelled)` if the task was dropped unfinished
/// (its scheduler shut down).
///
/// Dropping a `Task` cancels the task (S5): its future is dropped at a
/// suspension point, on the thread that runs it. Call [`detach`](Task::detach)
/// to let it run to completion without a handle.
///
/// ```
/// let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
/// let task = pool.scheduler().spawn(async { 6 * 7 });
/// assert_eq!(gdex::block_on(task).unwrap(), 42);
/// ```
#[must_use = "dropping a Task cancels it; call .detach() to let it run"]
pub struct Task<T> {
    /// `None` only once `detach` or `cancel` has taken it.
    task: Option<async_task::FallibleTask<Outcome<T>, TaskMeta>>,
    /// The task's metadata, in the block `task` keeps alive.
    meta: NonNull<TaskMeta>,
}

// SAFETY: `meta` points into the block that `task` keeps alive and is only
// read through `&TaskMeta`, which is Sync; otherwise a Task is what
// async-task's FallibleTask is, with the same bounds.
unsafe impl<T: Send> Send for Task<T> {}
// SAFETY: as above; no `&self` method touches the output.
unsafe impl<T> Sync for Task<T> {}

impl<T> Task<T> {
    pub(crate) fn new(task: async_task::Task<Outcome<T>, TaskMeta>) -> Self {
        let meta = NonNull::from(task.metadata());
        Task {
            task: Some(task.fallible()),
            meta,
        }
    }

    /// A task that was refused (its scheduler is closed): awaiting it gives
    /// `error` at once.
    pub(crate) fn failed(error: Error) -> Self {
        let future = async move { Err(Failure::error(error)) };
        // SAFETY: the future (which holds only an Error, Send) is polled to
        // its end right here, on this thread, and never scheduled again: the
        // schedule function is never called for a finished task.
        let (runnable, task) = unsafe { builder().spawn_unchecked(move |_| future, |_| {}) };
        runnable.run();
        Task::new(task)
    }

    /// Cancels the task's `gio::Cancellable` without closing the task: for
    /// a fiber cancelled the libdex way (F4), which runs on to its return.
    pub(crate) fn cancel_cancellable(&self) {
        if let Some(cancellable) = self.meta().to_cancel() {
            cancellable.cancel();
        }
    }

    fn meta(&self) -> &TaskMeta {
        // SAFETY: `task` keeps the block holding the metadata alive for as
        // long as `self` exists (it is only taken by methods consuming self).
        unsafe { self.meta.as_ref() }
    }

    /// Lets the task run to completion with nobody holding it (libdex's
    /// *disown*). Its output is dropped; a panic goes to the panic handler
    /// ([`set_panic_handler`](crate::set_panic_handler); by default
    /// `g_critical`).
    pub fn detach(mut self) {
        if let Some(task) = self.task.take() {
            task.detach();
        }
    }

    /// Cancels the task and waits until it has stopped (X1): when this
    /// resolves, the task's future has been dropped, or it had finished.
    /// The task's [`current_cancellable`] is cancelled too (right after the
    /// task is closed, so the future is never polled again), so GIO calls
    /// it has in flight end with `G_IO_ERROR_CANCELLED`. Gives the output if the
    /// task finished before the cancellation took hold, `None` otherwise
    /// (also when it had panicked).
    ///
    /// ```
    /// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
    /// let task = pool.scheduler().spawn(std::future::pending::<()>());
    /// assert_eq!(gdex::block_on(task.cancel()), None);
    /// ```
    pub async fn cancel(mut self) -> Option<T> {
        let task = self.task.take()?;
        let mut gio_cancel = if task.is_finished() {
            None
        } else {
            self.meta().to_cancel()
        };
        let mut cancel = std::pin::pin!(task.cancel());
        // The first poll closes the task; its GIO calls are cancelled after
        // that, so the future never runs on with a cancelled cancellable.
        let output = std::future::poll_fn(|cx| {
            let poll = contain_waker(cx, false, |cx| cancel.as_mut().poll(cx));
            if let Some(cancellable) = gio_cancel.take() {
                cancellable.cancel();
            }
            poll
        })
        .await;
        match output {
            Some(Ok(value)) => Some(value.into_inner()),
            Some(Err(failure)) => {
                if let FailureKind::Panicked(report) = failure.into_kind() {
                    // The panic is the canceller's to know about, not a
                    // report for the log.
                    drop(report.take());
                }
                None
            }
            None => None,
        }
    }

    /// True once the task has finished or was cancelled; awaiting it will not
    /// wait.
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().is_none_or(|t| t.is_finished())
    }
}

impl<T> Drop for Task<T> {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            if task.is_finished() {
                return;
            }
            let gio_cancel = self.meta().to_cancel();
            // S5: close the task first, so it is never polled again...
            drop(task);
            // ...then X1: its GIO calls in flight stop too.
            if let Some(cancellable) = gio_cancel {
                cancellable.cancel();
            }
        }
    }
}

impl<T> Future for Task<T> {
    type Output = Result<T, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // `Task` is `Unpin`: both fields are.
        let this = self.get_mut();
        let task = this
            .task
            .as_mut()
            .expect("a gdex::Task was polled after detach or cancel");
        let finished = task.is_finished();
        match contain_waker(cx, finished, |cx| Pin::new(&mut *task).poll(cx)) {
            Poll::Ready(Some(Ok(value))) => Poll::Ready(Ok(value.into_inner())),
            Poll::Ready(Some(Err(failure))) => Poll::Ready(Err(match failure.into_kind() {
                FailureKind::Panicked(report) => Error::Panicked(report.take()),
                FailureKind::Error(error) => error,
            })),
            Poll::Ready(None) => Poll::Ready(Err(Error::Cancelled)),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Runs `poll`, which may leave a waker with async-task (a `Task` handle's
/// poll), with a waker whose panic is contained.
///
/// async-task wakes the waker a task handle was polled with when the task
/// ends, on whichever thread ends it (a pool worker, a blocking-lane
/// thread), and aborts the process if that `wake` panics (its
/// `abort_on_panic`). So unless `poll` leaves no waker (`finished`, and a
/// first poll with a no-op waker is ready), or the waker is that of the
/// gdex task polling us (whose wake only queues that task), async-task
/// gets a waker of ours instead, whose
/// panic goes to the panic handler (X5, [`PanicSource::Waker`]): one
/// allocation, reused while this thread polls with the same waker and
/// async-task still holds the wrapper (a foreign executor re-polling a
/// pending handle, or awaiting many handles from one future).
#[inline]
fn contain_waker<R>(
    cx: &mut Context<'_>,
    finished: bool,
    mut poll: impl FnMut(&mut Context<'_>) -> Poll<R>,
) -> Poll<R> {
    let polling = POLLING.get();
    // SAFETY: POLLING is non-null only for the extent of a
    // `CatchUnwind::poll` on this thread (scoped: reset when that poll
    // returns or unwinds; scopes nest across fiber switches too, since a
    // fiber never suspends inside a poll nested in it), and then points at
    // that poll's waker, which its caller keeps alive for the whole poll.
    let own = !polling.is_null() && cx.waker().will_wake(unsafe { &*polling });
    if own {
        return poll(cx);
    }
    if finished {
        // Finished means CLOSED or COMPLETED, and a task whose Runnable is
        // being dropped (a shutdown, the reaper) is CLOSED while still
        // SCHEDULED: async-task then registers the waker it is polled with
        // and wakes it when the drop ends, inside its abort_on_panic. So
        // first a poll with a waker that needs no containing (no
        // allocation); only if that is pending, one with ours.
        if let Poll::Ready(out) = poll(&mut Context::from_waker(Waker::noop())) {
            return Poll::Ready(out);
        }
    }
    // A weak reference: the cache keeps neither the caller's waker nor
    // its task alive once async-task has let the wrapper go.
    let cached = CONTAINED.with(|c| c.take());
    let kept = match cached.upgrade() {
        Some(kept) if kept.0.will_wake(cx.waker()) => kept,
        _ => Arc::new(ContainedWaker(cx.waker().clone())),
    };
    CONTAINED.with(|c| c.set(Arc::downgrade(&kept)));
    // The same Arc gives a waker async-task's `will_wake` recognises, so
    // it keeps the one it has instead of cloning ours again.
    let contained = Waker::from(kept);
    poll(&mut Context::from_waker(&contained))
}

/// A waker whose `wake` never unwinds (see [`contain_waker`]).
struct ContainedWaker(Waker);

impl Wake for ContainedWaker {
    fn wake(self: Arc<Self>) {
        match Arc::try_unwrap(self) {
            Ok(ContainedWaker(waker)) => crate::diagnostics::panic::wake(waker),
            Err(this) => crate::diagnostics::panic::wake_by_ref(&this.0),
        }
    }

    fn wake_by_ref(self: &Arc<Self>) {
        crate::diagnostics::panic::wake_by_ref(&self.0);
    }
}

impl<T> std::fmt::Debug for Task<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Task")
            .field("finished", &self.is_finished())
            .finish()
    }
}

/// Yields once to the scheduler: the task is queued again behind the work
/// already waiting, so a loop on `yield_now` never starves its neighbours
/// (P3).
///
/// ```
/// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
/// let task = pool.scheduler().spawn(async {
///     for _ in 0..3 {
///         gdex::yield_now().await;
///     }
///     "done"
/// });
/// assert_eq!(gdex::block_on(task).unwrap(), "done");
/// ```
pub fn yield_now() -> YieldNow {
    YieldNow { yielded: false }
}

/// The future returned by [`yield_now`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct YieldNow {
    yielded: bool,
}

impl Future for YieldNow {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            Poll::Ready(())
        } else {
            self.yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    /// S7: a handle is small (it is what a spawner keeps per task).
    #[test]
    fn a_task_handle_is_two_words() {
        assert!(std::mem::size_of::<super::Task<u64>>() <= 2 * std::mem::size_of::<usize>());
    }

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

    /// The panic-containing wrapper passes both kinds of wake-up on
    /// (async-task itself only wakes by value; anyone holding the wrapper
    /// may wake by reference).
    #[test]
    fn a_contained_waker_passes_every_wake_on() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        struct Count(AtomicUsize);
        impl std::task::Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let contained = std::task::Waker::from(Arc::new(super::ContainedWaker(
            std::task::Waker::from(count.clone()),
        )));
        contained.wake_by_ref();
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "by reference");
        contained.wake();
        assert_eq!(count.0.load(Ordering::SeqCst), 2, "by value");
    }
}
#[cfg(all(test, not(gdex_loom)))]
mod size_tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts its drops in the `Arc` it holds (one word: kept inline).
    struct Counted(Arc<AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Work items of every storage run once and drop their captures once,
    /// whether they run or are dropped unrun: a word-sized closure (inline),
    /// a zero-sized one, a big one and an over-aligned one (boxed).
    #[test]
    fn a_work_item_runs_or_drops_its_closure_once_whatever_its_size() {
        #[repr(align(16))]
        struct Aligned(#[allow(dead_code)] u8);
        let drops = Arc::new(AtomicUsize::new(0));
        let runs = Arc::new(AtomicUsize::new(0));
        let items = |drops: &Arc<AtomicUsize>, runs: &Arc<AtomicUsize>| {
            let inline = Counted(drops.clone());
            let r1 = runs.clone();
            let big = (Counted(drops.clone()), [7u64; 8], runs.clone());
            let aligned = (Aligned(1), Counted(drops.clone()));
            let r3 = runs.clone();
            const { assert!(WorkOf::<fn()>::INLINE) };
            vec![
                Job::work(move || {
                    let _keep = &inline;
                }),
                Job::work(move || {
                    r1.fetch_add(1, Ordering::SeqCst);
                }),
                Job::work(move || {
                    let (_, words, runs) = &big;
                    assert_eq!(words[7], 7);
                    runs.fetch_add(1, Ordering::SeqCst);
                }),
                Job::work(move || {
                    let _keep = &aligned;
                    r3.fetch_add(1, Ordering::SeqCst);
                }),
                Job::work(|| {}),
            ]
        };
        for job in items(&drops, &runs) {
            job.run();
        }
        assert_eq!(
            (runs.load(Ordering::SeqCst), drops.load(Ordering::SeqCst)),
            (3, 3)
        );
        drop(items(&drops, &runs));
        assert_eq!(
            (runs.load(Ordering::SeqCst), drops.load(Ordering::SeqCst)),
            (3, 6)
        );
    }

    /// A task's job runs its task once, or, dropped unrun, drops its future
    /// once: the raw `Runnable` it keeps is taken back exactly once.
    #[test]
    fn a_task_job_runs_or_drops_its_task_once() {
        let drops = Arc::new(AtomicUsize::new(0));
        let runs = Arc::new(AtomicUsize::new(0));
        for run in [true, false] {
            let (counted, r) = (Counted(drops.clone()), runs.clone());
            let (runnable, task) = builder().spawn(
                move |_| async move {
                    let _keep = &counted;
                    r.fetch_add(1, Ordering::SeqCst);
                    7
                },
                |_| {},
            );
            let job = Job::task(runnable);
            assert!(job.is_task());
            if run {
                job.run();
                assert!(task.is_finished());
            } else {
                drop(job);
            }
            drop(task);
        }
        assert_eq!(
            (runs.load(Ordering::SeqCst), drops.load(Ordering::SeqCst)),
            (1, 2)
        );
    }

    /// BENCH.md's memory_per_task: a block holds room for the larger of
    /// the future and its outcome, so a failure's report stays boxed.
    #[test]
    fn a_small_outcome_costs_a_task_no_more_than_its_value_and_a_pointer() {
        assert_eq!(std::mem::size_of::<Outcome<()>>(), 8);
        assert_eq!(std::mem::size_of::<Outcome<u64>>(), 16);
        // What a task's wrapper adds to its future: the S9 record (or the
        // X8 key of a tracked task), one word.
        assert_eq!(std::mem::size_of::<CatchUnwind<[u64; 2]>>(), 24);
        // A queue slot: a task's pointer, or a work item's word and vtable.
        assert_eq!(std::mem::size_of::<Job>(), 16);
    }
}
