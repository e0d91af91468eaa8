//! What a run queue holds: a [`Job`], a task's `Runnable` or a plain work
//! item's closure (S3), in two plain words; running one never unwinds.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{self, NonNull};

use super::meta::{owner_of, CURRENT};
use super::owner::OwnerRef;
use super::Runnable;
use crate::diagnostics::panic::PanicSource;

/// A unit of work in a run queue: a task's `Runnable`, or a plain work item
/// pushed with [`Scheduler::push`](crate::Scheduler::push) (S3).
///
/// Two words, both plain: the task's raw `Runnable` or the work item's
/// closure (or its box), and the vtable that says which. (It was an enum of
/// the two. Rust built each one on the stack and copied it into a queue's
/// slot, or out of one, with a 16-byte load of what two 8-byte stores had
/// just written: a store-forwarding stall at every push and pop, about 8%
/// of a fiber switch and of the worker's dispatch loop.)
///
/// A task's job needs no vtable, so its second word is odd (a vtable's
/// address is even) and carries the moment the task was queued, when its
/// scheduler's latency histograms are on (O1, [`queued_at`](Self::queued_at)):
/// the stamp travels with the job through every queue, and neither the
/// task's block nor a queue's slot grows for it.
pub(crate) struct Job {
    /// A task's `Runnable::into_raw`, or the closure itself if
    /// [`WorkOf::INLINE`], else a `Box` of it.
    data: std::mem::MaybeUninit<usize>,
    /// A task's: [`UNSTAMPED`], or `(ticks << 1) | 1` with `ticks` the
    /// clock's reading when it was queued (never dereferenced: no
    /// provenance). A work item's: its closure's [`WorkOf::VTABLE`].
    /// Never null, so that `Option<Job>` (what every queue's pop gives)
    /// stays two words.
    kind: NonNull<WorkVtable>,
}

// SAFETY: a job holds a `Runnable` (which is `Send`: gdex's task metadata is
// `Send` and `Sync`) or a closure that `Job::work` only takes if `Send`; its
// `kind` is a `&'static` vtable or a number.
unsafe impl Send for Job {}

/// The `kind` word of a task's job that carries no stamp.
const UNSTAMPED: usize = 1;

/// The `kind` of a task's job whose word is `word`, which is odd (so never
/// null): a pointer without provenance, never dereferenced.
#[inline]
fn task_kind(word: usize) -> NonNull<WorkVtable> {
    debug_assert!(word & 1 == 1, "a task's kind word is odd");
    NonNull::new(ptr::without_provenance_mut(word)).unwrap_or(NonNull::dangling())
}

const _: () = assert!(std::mem::size_of::<Option<Job>>() == 2 * std::mem::size_of::<usize>());

// A vtable's address is even, so an odd `kind` is a task's.
const _: () = assert!(std::mem::align_of::<WorkVtable>() >= 2);

/// How to run or drop the closure a work item's [`Job`] holds, by its type
/// (or, for [`Job::raw`], what its word is).
pub(crate) struct WorkVtable {
    pub(crate) run: unsafe fn(*mut std::mem::MaybeUninit<usize>),
    pub(crate) drop: unsafe fn(*mut std::mem::MaybeUninit<usize>),
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
            kind: task_kind(UNSTAMPED),
        }
    }

    /// Stamps a task's job as queued at `ticks`, if it is a task's (a work
    /// item's job has no room for a stamp, and keeps none). On a target
    /// whose words are narrower than the clock's it keeps none either.
    #[inline]
    pub(crate) fn stamp(&mut self, ticks: u64) {
        if self.is_task() && usize::BITS >= u64::BITS {
            // A stamp of 0 would read as none: a reading of 0 is a tick
            // later. The top bit goes: 2^63 ticks is decades of uptime.
            let word = ((ticks.max(1) << 1) | 1) as usize;
            self.kind = task_kind(word);
        }
    }

    /// When the task of this job was queued (its spawn or wake-up), in
    /// clock ticks, if its scheduler stamped it ([`stamp`](Self::stamp)).
    #[inline]
    pub(crate) fn queued_at(&self) -> Option<u64> {
        let word = self.kind.as_ptr().addr();
        (self.is_task() && word != UNSTAMPED).then_some((word >> 1) as u64)
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
            kind: NonNull::from(&WorkOf::<F>::VTABLE),
        }
    }

    /// A job of one word whose meaning `vtable` knows: the resumption of
    /// a fiber by its thread's fiber scheduler (`fiber::sched`). Its `run`
    /// must not unwind (a panic there would be reported as a work item's),
    /// and its `drop` gives back whatever the word holds.
    ///
    /// # Safety
    /// `vtable`'s `run` and `drop` accept `word`, once, on the thread the
    /// job is run or dropped on.
    #[inline]
    pub(crate) unsafe fn raw(word: usize, vtable: &'static WorkVtable) -> Job {
        Job {
            data: std::mem::MaybeUninit::new(word),
            kind: NonNull::from(vtable),
        }
    }

    /// The word of a job [`raw`](Self::raw) made with the vtable at
    /// `kind`, taken out of it (its `drop` is not called: the caller now
    /// owns what the word holds); any other job is given back.
    #[inline]
    pub(crate) fn into_word(self, kind: *const ()) -> Result<usize, Job> {
        if !self.is_kind(kind) {
            return Err(self);
        }
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: a `raw` job's data is its word (only `raw` makes jobs of
        // such a vtable: a task's `kind` is odd, a closure's its `WorkOf`'s).
        Ok(unsafe { this.data.assume_init() })
    }

    /// True for a job whose vtable is at `kind` (a [`raw`](Self::raw)
    /// job's, told apart by its vtable's address).
    #[inline]
    pub(crate) fn is_kind(&self, kind: *const ()) -> bool {
        ptr::eq(self.kind.as_ptr().cast::<()>(), kind)
    }

    /// A task's job: its `kind` is odd (a vtable's address is even).
    #[inline]
    fn is_task(&self) -> bool {
        self.kind.as_ptr().addr() & 1 != 0
    }

    /// The vtable of a work item's (or a raw) job.
    ///
    /// # Safety
    /// `self` is not a task's job (`!is_task`).
    #[inline]
    unsafe fn vtable(&self) -> &'static WorkVtable {
        // SAFETY: a job that is not a task's was made by `work` or `raw`
        // from a `&'static WorkVtable` (caller).
        unsafe { self.kind.as_ref() }
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
                crate::diagnostics::panic::contain(PanicSource::Drop, payload);
            }
        } else {
            // SAFETY: not a task's job.
            let vtable = unsafe { this.vtable() };
            // SAFETY: `vtable` is the one `work` chose for what `data`
            // holds, and `this` is never used again (ManuallyDrop: no drop).
            let run = || unsafe { (vtable.run)(&mut this.data) };
            if let Err(payload) = catch_unwind(AssertUnwindSafe(run)) {
                crate::diagnostics::panic::contain(PanicSource::WorkItem, payload);
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
            let runnable = unsafe { self.take_runnable() };
            // S14, X1: while its future drops outside its run (a thread's
            // exit, a shutdown, an orphan), the running task is this one,
            // so the future's drop signals this task's cancellation, not
            // the task that happens to run here. A waker keeps the block
            // (and the metadata the slot points at) alive until the slot is
            // restored.
            let keep = runnable.waker();
            let running = CURRENT.enter(runnable.metadata());
            drop(runnable);
            drop(running);
            drop(keep);
            return;
        }
        // SAFETY: not a task's job.
        let vtable = unsafe { self.vtable() };
        // SAFETY: dropped exactly once, here; `run` forgets `self`.
        let drop_closure = || unsafe { (vtable.drop)(&mut self.data) };
        if let Err(payload) = catch_unwind(AssertUnwindSafe(drop_closure)) {
            crate::diagnostics::panic::contain(PanicSource::Drop, payload);
        }
    }
}

#[cfg(all(test, not(gdex_loom)))]
mod size_tests {
    use super::*;
    use crate::task::builder;
    use std::sync::atomic::AtomicUsize;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

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

    /// O1: a task's job carries the moment it was queued in its second
    /// word, and is a task's job all the same (it runs its task); a work
    /// item's keeps its vtable and no stamp; a stamp of 0 is a tick later.
    #[test]
    fn a_task_job_carries_its_stamp_and_a_work_item_none() {
        let (runnable, task) = builder().spawn(|_| async { 5 }, |_| {});
        let mut job = Job::task(runnable);
        assert_eq!(job.queued_at(), None);
        job.stamp(123_456);
        assert_eq!(job.queued_at(), Some(123_456));
        assert!(job.is_task());
        job.stamp(0);
        assert_eq!(job.queued_at(), Some(1));
        job.run();
        assert!(task.is_finished());
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        let mut work = Job::work(move || {
            r.fetch_add(1, Ordering::SeqCst);
        });
        work.stamp(99);
        assert_eq!(work.queued_at(), None);
        assert!(!work.is_task());
        work.run();
        assert_eq!(ran.load(Ordering::SeqCst), 1);
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
}
