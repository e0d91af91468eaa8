//! Where the tasks that belong to one worker are woken to: its [`Home`]
//! (pinned tasks and fibers; every task in thread-per-core mode, P9), an
//! owner of tasks one thin pointer wide.

use std::ptr::NonNull;
use std::sync::Arc;

use super::{worker, PoolShared};
use crate::task::Job;

/// Where the tasks that belong to one worker (pinned tasks and fibers; every
/// task in thread-per-core mode, P9) are woken to. A task's block names its
/// home through one thin pointer (its `TaskMeta`'s owner), so that its
/// schedule function captures nothing: async-task wraps every call of a
/// schedule function with captures in a temporary waker, two atomic
/// operations on the task's state per wake-up (a fiber pays it on every
/// hand-off; the `yield_many` profile in `benches/RESULTS.md`).
///
/// A home lives in its worker's [`Remote`](super::Remote), inside the
/// pool's `Arc`, and a reference to it holds a strong count on the pool.
#[repr(C)]
pub(crate) struct Home {
    /// First, so that a pointer to the header is one to the home.
    header: crate::task::OwnerHeader,
    /// The pool this home is in (from `Arc::new_cyclic`: the address its
    /// `Arc` gives).
    pub(super) pool: *const PoolShared,
    index: usize,
}

// SAFETY: `pool` is only read, and points to the `Send + Sync` pool that
// holds this home.
unsafe impl Send for Home {}
// SAFETY: as above.
unsafe impl Sync for Home {}

impl Home {
    pub(super) const PINNED: crate::task::OwnerVtable = crate::task::OwnerVtable {
        schedule: Home::schedule_pinned,
        retain: Home::retain,
        release: Home::release,
        push_pinned: Some(Home::push_fiber),
    };

    pub(super) const P9: crate::task::OwnerVtable = crate::task::OwnerVtable {
        schedule: Home::schedule_p9,
        retain: Home::retain,
        release: Home::release,
        push_pinned: Some(Home::push_fiber),
    };

    /// The pool's latency class (P12): woken to the pool's urgent queue,
    /// whatever thread wakes it. (Its `index` means nothing.)
    pub(super) const LATENCY: crate::task::OwnerVtable = crate::task::OwnerVtable {
        schedule: Home::schedule_latency,
        retain: Home::retain,
        release: Home::release,
        push_pinned: None,
    };

    pub(super) fn new(
        vtable: &'static crate::task::OwnerVtable,
        pool: *const PoolShared,
        index: usize,
    ) -> Self {
        Home {
            header: crate::task::OwnerHeader::with_vtable(vtable),
            pool,
            index,
        }
    }

    /// # Safety
    /// `header` is the header of a home whose pool is alive.
    #[inline]
    unsafe fn from_header<'a>(header: NonNull<crate::task::OwnerHeader>) -> &'a Home {
        // SAFETY: `Home` is `repr(C)` with its header first, and the
        // pointer came from a `&Home` (`PoolShared::home_of`), so its
        // provenance covers the home; the caller keeps it alive.
        unsafe { header.cast::<Home>().as_ref() }
    }

    /// # Safety
    /// As for [`from_header`](Self::from_header).
    unsafe fn retain(header: NonNull<crate::task::OwnerHeader>) {
        // SAFETY: the pool is alive (caller), and `pool` is the pointer its
        // `Arc` gives (`Weak::as_ptr` in `Arc::new_cyclic` is the address
        // `Arc::as_ptr`/`into_raw` give; `home_of` checks it in debug builds).
        unsafe { Arc::increment_strong_count(Self::from_header(header).pool) }
    }

    /// # Safety
    /// As for [`from_header`](Self::from_header), and the caller gives up a count that
    /// `retain` took.
    unsafe fn release(header: NonNull<crate::task::OwnerHeader>) {
        // SAFETY: as in `retain`; the pointer is read before the count goes
        // (which may free the home with its pool).
        unsafe {
            let pool = Self::from_header(header).pool;
            Arc::decrement_strong_count(pool)
        }
    }

    /// Queues a pinned task (a fiber, a `!Send` task) that only its worker
    /// may run, and wakes that worker if it sleeps (a directed wake-up, P6):
    /// on the worker's thread-local queue if we are that worker, else in its
    /// inbox.
    ///
    /// After shutdown the job is left in the inbox, never run; it is leaked
    /// when the pool is freed, since dropping a fiber or a `!Send` future on
    /// another thread than its own would be unsound.
    ///
    /// # Safety
    /// As for [`from_header`](Self::from_header); the task's block holds a count.
    unsafe fn schedule_pinned(
        header: NonNull<crate::task::OwnerHeader>,
        runnable: crate::task::Runnable,
    ) {
        // SAFETY: the block `runnable` keeps alive holds a count on the pool.
        let home = unsafe { Self::from_header(header) };
        // SAFETY: as above.
        let pool = unsafe { &*home.pool };
        let Err(job) = worker::push_pinned_local(pool, home.index, pool.task_job(runnable)) else {
            return;
        };
        Self::push_inbox_keeping(pool, home.index, job);
    }

    /// P9: queues a task whose home is this worker: on its deque if we are
    /// that worker, else in its inbox, with a directed wake-up.
    ///
    /// # Safety
    /// As for [`schedule_pinned`](Self::schedule_pinned).
    unsafe fn schedule_p9(
        header: NonNull<crate::task::OwnerHeader>,
        runnable: crate::task::Runnable,
    ) {
        // SAFETY: the block `runnable` keeps alive holds a count on the pool.
        let home = unsafe { Self::from_header(header) };
        // SAFETY: as above.
        let pool = unsafe { &*home.pool };
        let Err(job) = worker::push_local_if(pool, Some(home.index), pool.task_job(runnable))
        else {
            return;
        };
        Self::push_inbox_keeping(pool, home.index, job);
    }

    /// P12: queues a latency-class task on the pool's urgent queue, which
    /// every worker looks at before any other work.
    ///
    /// # Safety
    /// As for [`schedule_pinned`](Self::schedule_pinned).
    unsafe fn schedule_latency(
        header: NonNull<crate::task::OwnerHeader>,
        runnable: crate::task::Runnable,
    ) {
        // SAFETY: the block `runnable` keeps alive holds a count on the pool.
        let home = unsafe { Self::from_header(header) };
        // SAFETY: as above.
        let pool = unsafe { &*home.pool };
        // Once queued the task may run and free its block (and perhaps the
        // last other count on the pool) before the push returns.
        let job = pool.task_job(runnable);
        let keep = job.task_owner();
        pool.push_urgent(job);
        drop(keep);
    }

    /// Queues the resumption of a fiber of this home (`fiber::sched`): on
    /// the worker's thread-local pinned queue if we are that worker, else in
    /// its mailbox or inbox with a directed wake-up (P6, P10), as a pinned
    /// task's ([`PoolShared::push_fiber`]).
    ///
    /// # Safety
    /// `header` is the owner header of a home whose pool is alive, and
    /// stays so until this returns, whatever becomes of `job` once queued
    /// (the fiber it resumes keeps it: see `FiberCell::queue`).
    unsafe fn push_fiber(header: NonNull<crate::task::OwnerHeader>, job: Job) {
        // SAFETY: by the caller.
        let home = unsafe { Self::from_header(header) };
        // SAFETY: the pool is alive (caller).
        let pool = unsafe { &*home.pool };
        if let Err(job) = worker::push_pinned_local(pool, home.index, job) {
            pool.push_fiber(home.index, job);
        }
    }

    /// [`PoolShared::push_inbox`] for a task woken through its home: once
    /// the job is queued, the task may run, finish and free its block on
    /// worker `i` (and with it perhaps the last other count on the pool),
    /// so the push holds a count of its own, dropped here once
    /// `push_inbox` (and its `&self`) has returned.
    fn push_inbox_keeping(pool: &PoolShared, i: usize, job: Job) {
        let keep = job.task_owner();
        pool.push_inbox(i, job);
        drop(keep);
    }
}
