//! The work-stealing thread pool (P1-P9).
//!
//! Each worker is an OS thread named `gdex-worker-N` that owns a
//! `GMainContext`: the context is thread-default and acquired for the
//! thread's whole life, and the worker runs it with `g_main_context_iteration`
//! (P2). Tasks reach the worker through one polled `GSource` attached to that
//! context, so timeouts, idle sources and GIO callbacks made inside a pool
//! task are dispatched by the same loop that runs the tasks.
//!
//! Queues (P3-P5): each worker has a FIFO `crossbeam_deque::Worker`; the
//! owner and thieves both take the oldest job. Work from outside the pool
//! goes to one `Injector`. A worker whose deque is empty pulls a batch from
//! the injector, then steals a batch from its peers, starting at a
//! pseudo-random victim and going round-robin, then parks in its context's
//! poll. Who wakes whom is decided in [`parking`], which holds no GLib type.
//! Each worker also has an inbox that only it pops, for fibers and pinned
//! tasks (and, in thread-per-core mode, for every task whose home it is).
//!
//! # Shutdown
//!
//! 1. `closed` is set; from then on a spawn returns a task that resolves to
//!    [`Error::ShutDown`](crate::Error::ShutDown).
//! 2. Every worker's context is woken; each worker leaves its loop after the
//!    current dispatch. The blocking lane drops its queued jobs; running ones
//!    finish on their own.
//! 3. Each worker cancels its fibers that are still alive (F4: their waits
//!    return `Cancelled`) and runs them until they have returned, for up to
//!    500 ms. Then it wakes every task of the pool that went idle on it
//!    (S9: the tasks waiting on a GLib source, a channel, anything; not a
//!    task of another scheduler that a pool task polled in a nested loop of
//!    its context, which is not the pool's to end; see
//!    [`registry`](crate::task::registry)), which queues them on this
//!    worker (or on the scheduler of this worker's own context that they
//!    belong to, which it then retires: see [`Retire`]), and drops every job
//!    in its deque and queues, on its own thread (a fiber that did not
//!    return unwinds there; a `!Send` future is dropped on the thread it ran
//!    on). Their tasks resolve to
//!    [`Error::Cancelled`](crate::Error::Cancelled), and every
//!    future is dropped exactly once. A wake-up from another thread that
//!    straddled that step (the task marked scheduled, its job not queued
//!    yet) is waited for, for up to 2 s, so that its job too is dropped here.
//! 4. The caller joins every worker thread (except its own, if a worker shuts
//!    its own pool down) and drops what is left in the injector.
//! 5. A job injected after step 1 is taken back by its pusher, which checks
//!    `closed` after pushing: either it sees the flag, or step 4 sees the job.
//!    Likewise a job pushed to the inbox of a worker that has exited (a
//!    task spawned or woken during the shutdown, never polled). The pusher
//!    does not drop it itself (it may be inside a wake-up holding a lock
//!    the job's future needs): the `gdex-reaper` thread does, and step 4
//!    waits for it (see [`reaper`]).

#[cfg(all(test, gdex_loom))]
mod loom_pool;
pub(crate) mod parking;
mod reaper;
pub(crate) use reaper::reap;
pub(crate) mod timers;
mod worker;

use std::collections::HashMap;
use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::JoinHandle;

use crossbeam_deque::{Injector, Stealer};
use crossbeam_utils::CachePadded;

use std::ptr::NonNull;

use crate::blocking::{Lane, LaneStats};
use crate::diagnostics::metrics::{Counter, PoolMetrics, WorkerCounters};
use crate::error::Error;
use crate::task::Job;
use crate::util::{drain, Unpoisoned};
use parking::{Parking, Request};

pub(crate) use worker::{current_index, current_pool, note_timer};

/// The largest worker count a pool accepts.
pub const MAX_WORKERS: usize = 1024;

/// What peers and outside threads may touch of one worker.
pub(crate) struct Remote {
    context: glib::MainContext,
    counters: WorkerCounters,
    /// Jobs that only this worker may run: fibers and pinned `!Send` tasks.
    /// Any thread pushes; only the worker pops. Never stolen.
    inbox: Injector<Job>,
    /// Inside `gdex::blocking::blocking`: the stall watchdog leaves it be.
    in_blocking: AtomicUsize,
    /// The tasks that went idle on this worker (S9, see [`crate::task::registry`]).
    registry: Arc<crate::task::registry::Registry>,
    /// Set by the worker once it has drained its queues for the last time:
    /// from then on, whoever pushes to its inbox drops what it finds there.
    exited: AtomicBool,
    /// The gdex timers waiting on this worker's context (see [`timers`]).
    timers: timers::TimerBook,
    /// Where this worker's pinned tasks and fibers are woken to.
    pinned_home: Home,
    /// Where this worker's tasks are woken to in thread-per-core mode (P9).
    p9_home: Home,
    /// What ends with this worker ([`at_worker_exit`]).
    retiring: Arc<Retiring>,
}

/// What ends with one worker; `None` once it has exited. Shared by its
/// [`Remote`] and its entry in [`worker_contexts`].
type Retiring = Mutex<Option<Vec<Weak<dyn Retire>>>>;

/// Something that ends with a pool worker: a scheduler of the worker's own
/// context, whose tasks only that worker runs (S9: they resolve when the
/// pool shuts down, as the pool's own do).
pub(crate) trait Retire: Send + Sync {
    /// Called on the worker's thread as it exits, after its idle tasks
    /// were woken (shutdown step 3), and again while it waits for
    /// late wake-ups.
    fn retire(&self);
    /// Called once, on the worker's thread, after its last `retire`, just
    /// before it exits.
    fn finish(&self);
}

/// What [`at_worker_exit`] found.
pub(crate) enum WorkerContext {
    /// Not the context of a worker of a live pool.
    No,
    /// A worker's: it will retire what was given when it exits. Until then
    /// the tasks the retiring scheduler runs record themselves in this, the
    /// worker's registry of idle tasks, as the pool's own do (S9: see
    /// [`registry`](crate::task::registry)).
    Retires(Arc<crate::task::registry::Registry>),
    /// A worker's that has exited already.
    Exited,
}

/// One worker of a live pool, as [`at_worker_exit`] finds it by its context.
#[derive(Clone)]
struct WorkerEnd {
    retiring: Arc<Retiring>,
    registry: Arc<crate::task::registry::Registry>,
}

/// What ends with the worker of each context of a live pool, by the
/// context's address (a pool holds its workers' contexts, so an address
/// cannot be reused while its entry is here; the pool's drop removes them).
fn worker_contexts() -> &'static Mutex<HashMap<usize, WorkerEnd>> {
    static CONTEXTS: OnceLock<Mutex<HashMap<usize, WorkerEnd>>> = OnceLock::new();
    CONTEXTS.get_or_init(Default::default)
}

fn context_key(context: &glib::MainContext) -> usize {
    context.as_ptr() as usize
}

/// If `context` is a pool worker's own context, has `retire` retired on
/// that worker's thread when it exits (unless it has exited already: then
/// says so, and the caller retires it now). A scheduler made for a worker's
/// context registers here, so that its tasks end with the pool's (S9), and
/// gets the worker's registry of idle tasks, for its dispatches to enter.
/// Takes two locks and no count on the pool.
pub(crate) fn at_worker_exit(
    context: &glib::MainContext,
    retire: Weak<dyn Retire>,
) -> WorkerContext {
    let found = worker_contexts()
        .lock()
        .unpoisoned()
        .get(&context_key(context))
        .cloned();
    let Some(WorkerEnd { retiring, registry }) = found else {
        return WorkerContext::No;
    };
    let mut retiring = retiring.lock().unpoisoned();
    match retiring.as_mut() {
        Some(list) => {
            list.retain(|r| r.strong_count() > 0);
            list.push(retire);
            WorkerContext::Retires(registry)
        }
        None => WorkerContext::Exited,
    }
}

/// Where the tasks that belong to one worker (pinned tasks and fibers; every
/// task in thread-per-core mode, P9) are woken to. A task's block names its
/// home through one thin pointer (its `TaskMeta`'s owner), so that its
/// schedule function captures nothing: async-task wraps every call of a
/// schedule function with captures in a temporary waker, two atomic
/// operations on the task's state per wake-up (a fiber pays it on every
/// hand-off; the `yield_many` profile in `benches/RESULTS.md`).
///
/// A home lives in its worker's [`Remote`], inside the pool's `Arc`, and a
/// reference to it holds a strong count on the pool.
#[repr(C)]
pub(crate) struct Home {
    /// First, so that a pointer to the header is one to the home.
    header: crate::task::OwnerHeader,
    /// The pool this home is in (from `Arc::new_cyclic`: the address its
    /// `Arc` gives).
    pool: *const PoolShared,
    index: usize,
}

// SAFETY: `pool` is only read, and points to the `Send + Sync` pool that
// holds this home.
unsafe impl Send for Home {}
// SAFETY: as above.
unsafe impl Sync for Home {}

impl Home {
    const PINNED: crate::task::OwnerVtable = crate::task::OwnerVtable {
        schedule: Home::schedule_pinned,
        retain: Home::retain,
        release: Home::release,
    };

    const P9: crate::task::OwnerVtable = crate::task::OwnerVtable {
        schedule: Home::schedule_p9,
        retain: Home::retain,
        release: Home::release,
    };

    fn new(
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
        let Err(job) = worker::push_pinned_local(pool, home.index, Job::task(runnable)) else {
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
        let Err(job) = worker::push_local_if(pool, Some(home.index), Job::task(runnable)) else {
            return;
        };
        Self::push_inbox_keeping(pool, home.index, job);
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

/// The counters of [`PoolShared::inject`].
#[derive(Default)]
struct InjectCounters {
    injected: Counter,
    external_sent: Counter,
    external_coalesced: Counter,
}

pub(crate) struct PoolShared {
    /// How a task's block reaches this pool through one thin pointer.
    owner: crate::task::OwnerHeader,
    injector: CachePadded<Injector<Job>>,
    stealers: Box<[Stealer<Job>]>,
    parking: Parking,
    /// One cache line pair each: a worker bumps its counters on every job,
    /// and must not invalidate its neighbour's line when it does.
    remotes: Box<[CachePadded<Remote>]>,
    closed: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Written by every thread that injects; on a line of their own, so that
    /// an injection does not invalidate the read-mostly fields the workers
    /// check on every job (`closed`, `stealers`, `remotes`, …). Which line
    /// those shared with the counters used to depend on field order: an
    /// equivalent refactor moved the remote-spawn rows by up to 30%.
    inject_counters: CachePadded<InjectCounters>,
    /// Round-robin cursor for placing pinned work.
    next_pinned: CachePadded<std::sync::atomic::AtomicUsize>,
    /// Default stack size of fibers spawned on this pool.
    fiber_stack_size: usize,
    /// P9: tasks stay on the worker they were placed on; no stealing.
    thread_per_core: bool,
    /// The elastic blocking lane (B2).
    blocking: Arc<Lane>,
    /// How long one poll may take before the stall watchdog reports it.
    stall_threshold: std::time::Duration,
}

/// A stealable task of the pool is woken: like [`PoolShared::schedule`] in
/// work-stealing mode, onto the waking worker's deque, or the injector.
// SAFETY: `owner` is `PoolShared`'s one header, made by
// `OwnerHeader::new::<PoolShared>()`, at the offset given.
unsafe impl crate::task::Owner for PoolShared {
    const HEADER_OFFSET: usize = std::mem::offset_of!(PoolShared, owner);

    fn header(&self) -> &crate::task::OwnerHeader {
        &self.owner
    }

    #[inline]
    fn schedule(&self, runnable: crate::task::Runnable) -> Option<crate::task::OwnerRef> {
        // If the job goes to this worker's deque, the worker's own `Arc`
        // keeps the pool alive after the push (the task may then finish and
        // go), and `push_local_if` only compares the pointer with the
        // worker's pool.
        let local = worker::push_local_if(self, None, Job::task(runnable));
        let Err(job) = local else { return None };
        // Not on one of its workers: hold the pool ourselves before the job
        // (and with it, perhaps, the last other reference) leaves; the
        // caller drops it once this call (and its `&self`) has ended.
        let keep = job.task_owner();
        self.inject(job);
        Some(keep)
    }
}

impl PoolShared {
    pub(crate) fn workers(&self) -> usize {
        self.remotes.len()
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Queues a job: on the calling worker's own deque if it is one of ours,
    /// on the injector otherwise.
    #[inline]
    pub(crate) fn schedule(&self, job: Job) {
        if let Err(job) = worker::push_local_if(self, None, job) {
            if self.thread_per_core {
                // P9: outside work is spread over the workers.
                self.push_inbox(self.pick_worker(), job);
            } else {
                self.inject(job);
            }
        }
    }

    /// Queues a job from outside the pool (P4) and wakes one sleeper if
    /// nobody is already on the way (P6).
    pub(crate) fn inject(&self, job: Job) {
        self.injector.push(job);
        self.inject_counters.injected.add_shared();
        fence(Ordering::SeqCst);
        if self.closed.load(Ordering::SeqCst) {
            // Shutdown step 5: the workers are gone or going. Not dropped
            // here: we may be inside a wake-up that holds a lock the job's
            // future takes when dropped (see `reaper`).
            reaper::reap(Self::take_all(&self.injector));
            return;
        }
        match self.parking.request(None, worker::pseudo_random() as usize) {
            Request::Wake(i) => {
                self.inject_counters.external_sent.add_shared();
                self.unpark(i);
            }
            Request::Coalesced => self.inject_counters.external_coalesced.add_shared(),
            Request::Marked(_) | Request::Nobody => {}
        }
    }

    /// After a spawn's first push: if the pool closed meanwhile, the job may
    /// have gone to the reaper (shutdown step 5). Wait until the reaper has
    /// dropped it, so that a spawn that raced the shutdown returns a task
    /// that has already resolved, as a spawn after the shutdown does (S9).
    /// A spawn is not a wake-up: its caller holds no lock of gdex's that
    /// the dropped future could need.
    #[inline]
    pub(crate) fn settle_spawn(&self) {
        if self.closed.load(Ordering::SeqCst) {
            reaper::flush(std::time::Duration::from_secs(2));
        }
    }

    /// The worker the next pinned job goes to, round-robin (as libdex
    /// places fibers).
    pub(crate) fn pick_worker(&self) -> usize {
        self.next_pinned.fetch_add(1, Ordering::Relaxed) % self.workers()
    }

    pub(crate) fn fiber_stack_size(&self) -> usize {
        self.fiber_stack_size
    }

    pub(crate) fn thread_per_core(&self) -> bool {
        self.thread_per_core
    }

    pub(crate) fn stall_threshold(&self) -> std::time::Duration {
        self.stall_threshold
    }

    /// Worker `i` declared it blocks (`gdex::blocking::blocking`).
    /// Raises worker `i`'s overdue gdex timers (it sits in one long poll:
    /// see [`timers`]).
    pub(crate) fn fire_overdue_timers(&self, i: usize) -> usize {
        self.remotes[i].timers.fire_due(glib::monotonic_time())
    }

    /// Worker `i` is stuck in one poll: the AIO operations queued on its
    /// context's ring are submitted, and those completed reaped, from here,
    /// so that their tasks run on a peer (the services registered with
    /// `diagnostics::stall::add_context_service`).
    pub(crate) fn service_stuck_ring(&self, i: usize) {
        crate::diagnostics::stall::service_stuck_context(&self.remotes[i].context);
    }

    pub(crate) fn in_blocking(&self, i: usize) -> bool {
        self.remotes[i].in_blocking.load(Ordering::Acquire) > 0
    }

    /// Worker `i` is stuck in one poll (B5): its deque must not be held
    /// hostage, nor the injector's work wait for it (P10: a request for help
    /// may have reached it just before its long poll). Peers are woken to
    /// steal; in thread-per-core mode, where peers do not steal, its jobs are
    /// moved to their inboxes.
    pub(crate) fn help_stuck_worker(&self, i: usize) {
        let n = self.workers();
        if n < 2 || self.stealers[i].is_empty() && self.injector.is_empty() {
            return;
        }
        if self.thread_per_core {
            for (k, job) in drain(|| self.stealers[i].steal()).enumerate() {
                self.push_inbox((i + 1 + k % (n - 1)) % n, job);
            }
        } else {
            fence(Ordering::SeqCst);
            if let Request::Wake(j) = self.parking.request(Some(i), (i + 1) % n) {
                self.unpark(j);
            }
        }
    }

    /// The worker a new task calls home in thread-per-core mode (P9): the
    /// spawning worker, or the next one round-robin from outside the pool.
    pub(crate) fn home_for_spawn(&self) -> usize {
        worker::current_index(self).unwrap_or_else(|| self.pick_worker())
    }

    /// A reference to worker `i`'s home for pinned tasks (or for every task,
    /// with `p9`), for a task's metadata ([`crate::task::builder_for`]).
    pub(crate) fn home_of(self: &Arc<Self>, i: usize, p9: bool) -> crate::task::OwnerRef {
        let remote = &self.remotes[i];
        let home: &Home = if p9 {
            &remote.p9_home
        } else {
            &remote.pinned_home
        };
        debug_assert!(std::ptr::eq(home.pool, Arc::as_ptr(self)));
        let header = NonNull::from(home).cast::<crate::task::OwnerHeader>();
        // SAFETY: the home is inside this live pool, `header` is derived
        // from the whole `&Home`, and its vtable's retain and release keep
        // the pool (and so the home) alive by the pool's `Arc` counts.
        unsafe { crate::task::OwnerRef::retained(header) }
    }

    /// Queues a job on worker `i`'s inbox from another thread, and wakes `i`
    /// if it sleeps.
    fn push_inbox(&self, i: usize, job: Job) {
        let remote = &self.remotes[i];
        remote.inbox.push(job);
        fence(Ordering::SeqCst);
        if remote.exited.load(Ordering::SeqCst) {
            // Shutdown: worker `i` has drained its inbox for the last time
            // (it sets `exited` and then drains once more, so either it sees
            // our job or we see the flag). Every task that had run on it
            // was woken and dropped by then (S9; a wake that straddled its
            // registry's close was waited for), so what we find here never
            // ran: a task spawned while the pool shut down. Its future was
            // never polled, so dropping it on this thread is sound (the
            // contract of `spawn_pinned_unchecked`; ThreadBound checks it).
            reaper::reap(Self::take_all(&remote.inbox));
            return;
        }
        if self.parking.notify(i) {
            self.unpark(i);
        }
    }

    /// Wakes worker `i`'s context (one syscall).
    #[inline]
    fn unpark(&self, i: usize) {
        self.remotes[i].context.wakeup();
    }

    fn drain_injector(&self) {
        Self::drain(&self.injector);
    }

    /// Drops every job in `queue`, here.
    /// Takes every job in `queue`.
    fn take_all(queue: &Injector<Job>) -> Vec<Job> {
        drain(|| queue.steal()).collect()
    }

    fn drain(queue: &Injector<Job>) {
        drain(|| queue.steal()).for_each(drop);
    }

    fn shutdown(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            // Someone else began: a plain thread waits until the workers are
            // joined (S9 holds when any shutdown() returns). A worker of the
            // pool must not wait: the first caller may be joining it.
            if worker::current_index(self).is_none() {
                self.join_workers();
            }
            return;
        }
        glib::g_debug!(
            "gdex",
            "shutting down a pool of {} workers",
            self.remotes.len()
        );
        for remote in self.remotes.iter() {
            remote.context.wakeup();
        }
        // Running blocking jobs finish on their own; queued ones are dropped.
        self.blocking
            .close(crate::blocking::CloseMode::CancelQueued);
        self.join_workers();
    }

    /// Joins every worker thread but the caller's, holding the list while it
    /// does, so that a second caller waits for the first.
    fn join_workers(&self) {
        let mut threads = self.threads.lock().unpoisoned();
        let me = std::thread::current().id();
        let mut own = Vec::new();
        for thread in threads.drain(..) {
            if thread.thread().id() == me {
                // A worker is shutting down its own pool: it leaves its loop
                // when this dispatch returns; a later caller joins it.
                own.push(thread);
                continue;
            }
            if thread.join().is_err() {
                glib::g_critical!("gdex", "a gdex worker thread panicked during shutdown");
            }
        }
        *threads = own;
        drop(threads);
        self.drain_injector();
        // Jobs pushed while the pool closed were handed to the reaper: they
        // are dropped too before shutdown returns (S9).
        reaper::flush(std::time::Duration::from_secs(2));
    }

    fn metrics(&self) -> PoolMetrics {
        PoolMetrics {
            workers: self
                .remotes
                .iter()
                .enumerate()
                .map(|(i, r)| r.counters.snapshot(i, !self.parking.should_run(i)))
                .collect(),
            injected: self.inject_counters.injected.get(),
            external_wake_requests_sent: self.inject_counters.external_sent.get(),
            external_wake_requests_coalesced: self.inject_counters.external_coalesced.get(),
        }
    }
}

impl Drop for PoolShared {
    fn drop(&mut self) {
        {
            let mut contexts = worker_contexts().lock().unpoisoned();
            for remote in self.remotes.iter() {
                let key = context_key(&remote.context);
                if contexts
                    .get(&key)
                    .is_some_and(|end| Arc::ptr_eq(&end.retiring, &remote.retiring))
                {
                    contexts.remove(&key);
                }
            }
        }
        let mut leaked = 0;
        for remote in self.remotes.iter() {
            for job in drain(|| remote.inbox.steal()) {
                // A pinned job woken after its worker exited: its future may
                // only be dropped on that worker's thread, which is gone.
                // Leak it rather than drop it here.
                std::mem::forget(job);
                leaked += 1;
            }
        }
        if leaked > 0 {
            glib::g_warning!(
                "gdex",
                "{} fiber(s) or pinned task(s) were woken after their pool shut down; they were \
                 leaked, since they can only be dropped on their own worker thread",
                leaked
            );
        }
    }
}

/// A pool of worker threads, each running its own `GMainContext`, that run
/// tasks and work items with work stealing.
///
/// `ThreadPool` is a cheap handle (`Clone`, `Send`, `Sync`). The process-wide
/// pool, [`ThreadPool::default`], starts on first use and lives for the
/// process. A pool made with [`ThreadPool::builder`] shuts down when its last
/// `ThreadPool` handle is dropped, or on [`shutdown`](ThreadPool::shutdown);
/// [`Scheduler`](crate::Scheduler) handles do not keep it running.
///
/// Inside a pool task, GLib works as on any thread that runs a main loop:
/// `glib::timeout_future`, `glib::timeout_add_local`, idle sources and GIO
/// async calls attach to the worker's context and complete there.
///
/// ```
/// let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
/// let task = pool.scheduler().spawn(async {
///     glib::timeout_future(std::time::Duration::from_millis(5)).await;
///     std::thread::current().name().unwrap().to_owned()
/// });
/// assert!(gdex::block_on(task).unwrap().starts_with("gdex-worker-"));
/// assert_eq!(pool.metrics().workers.len(), 2);
/// ```
#[derive(Clone)]
pub struct ThreadPool {
    handle: Arc<PoolHandle>,
}

struct PoolHandle {
    shared: Arc<PoolShared>,
}

impl Drop for PoolHandle {
    fn drop(&mut self) {
        self.shared.shutdown();
    }
}

impl Default for ThreadPool {
    /// The process-wide pool, started on first use with the default worker
    /// count (online CPUs, or `GDEX_WORKERS`). It is never shut down.
    fn default() -> Self {
        static DEFAULT: OnceLock<ThreadPool> = OnceLock::new();
        DEFAULT
            .get_or_init(|| {
                ThreadPool::builder()
                    .build()
                    .unwrap_or_else(|e| panic!("gdex: cannot start the default thread pool: {e}"))
            })
            .clone()
    }
}

impl ThreadPool {
    /// A builder for a pool of one's own.
    pub fn builder() -> ThreadPoolBuilder {
        ThreadPoolBuilder::default()
    }

    /// The number of worker threads.
    pub fn workers(&self) -> usize {
        self.handle.shared.workers()
    }

    /// The pool's shared state, for the layers above.
    pub(crate) fn shared(&self) -> &Arc<PoolShared> {
        &self.handle.shared
    }

    /// Spawns a `!Send` future built on one worker by `make`, pinned there
    /// for its whole life; see [`Scheduler::spawn_pinned`](crate::Scheduler::spawn_pinned).
    #[track_caller]
    pub fn spawn_pinned<M, F>(&self, make: M) -> crate::Task<F::Output>
    where
        M: FnOnce() -> F + Send + 'static,
        F: std::future::Future + 'static,
        F::Output: Send + 'static,
    {
        self.scheduler().spawn_pinned(make)
    }

    /// Runs `f` on this pool's elastic blocking lane (B2): a thread is added
    /// when every lane thread is busy (up to
    /// [`max_blocking_threads`](ThreadPoolBuilder::max_blocking_threads)),
    /// and threads idle for
    /// [`blocking_keep_alive`](ThreadPoolBuilder::blocking_keep_alive) exit.
    /// The task resolves to `f`'s result; dropping it before `f` starts
    /// cancels it. On a pool that has shut down it resolves to
    /// [`Error::ShutDown`](crate::Error::ShutDown) and `f` never runs, as
    /// the pool's other spawns do.
    #[track_caller]
    pub fn spawn_blocking<F, T>(&self, f: F) -> crate::Task<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.handle.shared.blocking.spawn(f)
    }

    /// The blocking lane's threads and queue, now.
    pub fn blocking_stats(&self) -> LaneStats {
        self.handle.shared.blocking.stats()
    }

    /// True if the pool runs in thread-per-core mode (P9).
    pub fn is_thread_per_core(&self) -> bool {
        self.handle.shared.thread_per_core
    }

    /// The per-worker counters, read now.
    pub fn metrics(&self) -> PoolMetrics {
        self.handle.shared.metrics()
    }

    /// Stops the pool (S9). Fibers still waiting are cancelled (F4) and run
    /// to their return for up to 500 ms; then every other task of the pool
    /// is dropped, whether it was queued or idle (on a GLib source of its
    /// worker's context, a GIO call, a channel, or nothing at all), on the
    /// worker it ran on. When this returns, every [`Task`](crate::Task) of
    /// the pool has resolved ([`Error::Cancelled`] unless it had finished),
    /// every future has been dropped exactly once (a `!Send` one on its own
    /// thread), every worker thread is joined, and later spawns resolve to
    /// [`Error::ShutDown`]. Blocking-lane jobs already running finish on their
    /// own; queued ones are cancelled. Idempotent; also done when the last
    /// handle of a pool from [`builder`](ThreadPool::builder) is dropped.
    /// Called from one of the pool's own workers, it returns without joining
    /// that worker, which drops its tasks once the current job returns.
    ///
    /// ```
    /// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
    /// // Queued or already waiting on its worker's context: either way...
    /// let idle = pool.scheduler().spawn(glib::timeout_future(std::time::Duration::from_secs(60)));
    /// pool.shutdown();
    /// // ...it has resolved when shutdown() returns.
    /// assert!(idle.is_finished());
    /// assert!(matches!(gdex::block_on(idle), Err(gdex::Error::Cancelled)));
    /// ```
    pub fn shutdown(&self) {
        self.handle.shared.shutdown();
    }

    /// True once [`shutdown`](ThreadPool::shutdown) has begun.
    pub fn is_closed(&self) -> bool {
        self.handle.shared.is_closed()
    }
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool")
            .field("workers", &self.workers())
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// Configures a [`ThreadPool`].
///
/// ```
/// let pool = gdex::ThreadPool::builder().workers(3).build().unwrap();
/// assert_eq!(pool.workers(), 3);
/// ```
#[derive(Debug, Default, Clone)]
pub struct ThreadPoolBuilder {
    workers: Option<usize>,
    stack_size: Option<usize>,
    fiber_stack_size: Option<usize>,
    thread_per_core: Option<bool>,
    stall_threshold: Option<std::time::Duration>,
    max_blocking_threads: Option<usize>,
    blocking_keep_alive: Option<std::time::Duration>,
}

impl ThreadPoolBuilder {
    /// The number of worker threads, overriding `GDEX_WORKERS` and the CPU
    /// count (P1).
    ///
    /// # Panics
    /// If `n` is 0 or above [`MAX_WORKERS`].
    pub fn workers(mut self, n: usize) -> Self {
        assert!(
            (1..=MAX_WORKERS).contains(&n),
            "gdex: ThreadPool::builder().workers({n}): a pool needs from 1 to {MAX_WORKERS} workers"
        );
        self.workers = Some(n);
        self
    }

    /// The stack size of each worker thread, in bytes (default: Rust's
    /// default for spawned threads).
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = Some(bytes);
        self
    }

    /// The default stack size of fibers spawned on this pool (F1), in bytes;
    /// 128 KiB unless set. A guard page is added below it.
    ///
    /// # Panics
    /// If `bytes` is below 16 KiB.
    pub fn fiber_stack_size(mut self, bytes: usize) -> Self {
        crate::fiber::check_stack_size(bytes);
        self.fiber_stack_size = Some(bytes);
        self
    }

    /// Thread-per-core mode (P9), overriding `GDEX_THREAD_PER_CORE`: every
    /// task stays on the worker it was placed on (the spawning worker, or
    /// round-robin for spawns from outside), and workers never steal. Best
    /// for many small independent tasks that benefit from cache locality.
    pub fn thread_per_core(mut self, on: bool) -> Self {
        self.thread_per_core = Some(on);
        self
    }

    /// How long one poll of a task may run on a worker before the stall
    /// watchdog reports it (B5); overrides `GDEX_STALL_MS` (default 100 ms).
    /// Zero turns the watchdog off for this pool.
    pub fn stall_threshold(mut self, threshold: std::time::Duration) -> Self {
        self.stall_threshold = Some(threshold);
        self
    }

    /// The most threads the blocking lane may run at once (default 512).
    ///
    /// # Panics
    /// If `n` is 0.
    pub fn max_blocking_threads(mut self, n: usize) -> Self {
        assert!(
            n > 0,
            "gdex: max_blocking_threads(0): the blocking lane needs a thread"
        );
        self.max_blocking_threads = Some(n);
        self
    }

    /// How long a blocking-lane thread waits for a job before it exits
    /// (default 10 s).
    pub fn blocking_keep_alive(mut self, keep_alive: std::time::Duration) -> Self {
        self.blocking_keep_alive = Some(keep_alive);
        self
    }

    /// Starts the pool's threads.
    ///
    /// Fails with [`Error::Failed`] if the OS refuses to create a thread; the
    /// threads already started are stopped.
    pub fn build(self) -> Result<ThreadPool, Error> {
        let n = self.workers.unwrap_or_else(default_workers);
        let locals: Vec<_> = (0..n)
            .map(|_| crossbeam_deque::Worker::new_fifo())
            .collect();
        let shared = Arc::new_cyclic(|me: &std::sync::Weak<PoolShared>| PoolShared {
            owner: crate::task::OwnerHeader::new::<PoolShared>(),
            injector: CachePadded::new(Injector::new()),
            stealers: locals.iter().map(|w| w.stealer()).collect(),
            parking: Parking::new(n),
            remotes: (0..n)
                .map(|index| {
                    CachePadded::new(Remote {
                        pinned_home: Home::new(&Home::PINNED, me.as_ptr(), index),
                        p9_home: Home::new(&Home::P9, me.as_ptr(), index),
                        context: glib::MainContext::new(),
                        counters: WorkerCounters::default(),
                        inbox: Injector::new(),
                        in_blocking: AtomicUsize::new(0),
                        registry: crate::task::registry::Registry::new(),
                        exited: AtomicBool::new(false),
                        timers: Default::default(),
                        retiring: Arc::new(Mutex::new(Some(Vec::new()))),
                    })
                })
                .collect(),
            closed: AtomicBool::new(false),
            threads: Mutex::new(Vec::with_capacity(n)),
            inject_counters: CachePadded::default(),
            next_pinned: CachePadded::new(std::sync::atomic::AtomicUsize::new(0)),
            fiber_stack_size: self
                .fiber_stack_size
                .unwrap_or(crate::fiber::DEFAULT_STACK_SIZE),
            thread_per_core: self.thread_per_core.unwrap_or_else(default_thread_per_core),
            stall_threshold: self
                .stall_threshold
                .unwrap_or_else(crate::diagnostics::stall::default_threshold),
            blocking: Lane::new(
                "gdex-blocking",
                self.max_blocking_threads.unwrap_or(512),
                Some(
                    self.blocking_keep_alive
                        .unwrap_or(std::time::Duration::from_secs(10)),
                ),
                // Closed only by the pool's shutdown: a spawn says so, as
                // the pool's other spawns do.
                crate::Error::ShutDown,
            ),
        });
        {
            // Before the workers start: a scheduler made for a worker's
            // context from then on finds it (`at_worker_exit`).
            let mut contexts = worker_contexts().lock().unpoisoned();
            for remote in shared.remotes.iter() {
                let end = WorkerEnd {
                    retiring: remote.retiring.clone(),
                    registry: remote.registry.clone(),
                };
                contexts.insert(context_key(&remote.context), end);
            }
        }
        let pool = ThreadPool {
            handle: Arc::new(PoolHandle {
                shared: shared.clone(),
            }),
        };
        for (index, local) in locals.into_iter().enumerate() {
            let mut thread = std::thread::Builder::new().name(format!("gdex-worker-{index}"));
            if let Some(bytes) = self.stack_size {
                thread = thread.stack_size(bytes);
            }
            let worker_shared = shared.clone();
            let handle = thread
                .spawn(move || worker::run(worker_shared, index, local))
                .map_err(|e| {
                    Error::Failed(glib::Error::new(
                        glib::FileError::Failed,
                        &format!("cannot start thread gdex-worker-{index}: {e}"),
                    ))
                })?;
            shared.threads.lock().unpoisoned().push(handle);
        }
        glib::g_debug!(
            "gdex",
            "started a pool of {} workers (thread-per-core: {})",
            pool.workers(),
            pool.is_thread_per_core()
        );
        Ok(pool)
    }
}

/// P1: `GDEX_WORKERS` if set and usable, else the online CPUs. An unusable
/// value is reported once with `g_warning`.
fn default_workers() -> usize {
    static DEFAULT: OnceLock<usize> = OnceLock::new();
    *DEFAULT.get_or_init(|| {
        let cpus = num_cpus::get().clamp(1, MAX_WORKERS);
        crate::util::env_setting(
            "GDEX_WORKERS",
            &format!("a usable worker count (a whole number from 1 to {MAX_WORKERS})"),
            || format!("using {cpus}, the number of online CPUs"),
            |text| text.parse().ok().filter(|n| (1..=MAX_WORKERS).contains(n)),
        )
        .unwrap_or(cpus)
    })
}

/// P9: `GDEX_THREAD_PER_CORE=1` (or `true`/`yes`/`on`) turns thread-per-core
/// mode on; `0`/`false`/`no`/`off` or unset leaves it off; anything else is
/// reported once with `g_warning` and ignored.
fn default_thread_per_core() -> bool {
    static DEFAULT: OnceLock<bool> = OnceLock::new();
    *DEFAULT.get_or_init(|| {
        crate::util::env_setting(
            "GDEX_THREAD_PER_CORE",
            "a usable switch (use 1 or 0)",
            || "thread-per-core mode stays off".to_owned(),
            |text| match text.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => Some(true),
                "0" | "false" | "no" | "off" | "" => Some(false),
                _ => None,
            },
        )
        .unwrap_or(false)
    })
}
