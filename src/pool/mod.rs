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
//! The parts: the state the workers share, and the shutdown below (this
//! file); the public [`ThreadPool`] and its builder (`handle.rs`); one
//! worker, its run slice and its thread (`worker/`); where a worker's own
//! tasks are woken to ([`Home`], `home.rs`); what ends with a worker
//! (`retire.rs`); the wake-up protocol ([`parking`]); the gdex timers noted
//! per worker ([`timers`]); the thread that drops what a shutdown left
//! ([`reaper`]).
//!
//! # Shutdown
//!
//! 1. `closed` is set; from then on a spawn returns a task that resolves to
//!    [`Error::ShutDown`](crate::Error::ShutDown), one onto the blocking
//!    lane too (`spawn_blocking` checks this flag before the lane's own).
//! 2. Every worker's context is woken; each worker leaves its loop after the
//!    current dispatch. The blocking lane closes: its queued jobs are
//!    dropped (`Cancelled`), running ones finish on their own. Every caller
//!    of `shutdown()` closes it, so it is closed when any of them returns.
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

mod handle;
mod home;
mod latency;
#[cfg(all(test, gdex_loom))]
mod loom_pool;
pub(crate) mod parking;
mod reaper;
pub(crate) use reaper::reap;
mod pinned_batch;
mod retire;
pub(crate) use pinned_batch::PinnedBatch;
pub(crate) mod timers;
mod worker;

use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crossbeam_deque::{Injector, Stealer};
use crossbeam_utils::CachePadded;

use std::ptr::NonNull;

use crate::blocking::Lane;
use crate::diagnostics::metrics::{Counter, PoolMetrics, WorkerCounters};
use crate::task::Job;
use crate::util::{drain, Unpoisoned};
use parking::{Directed, Parking, Request};

pub use handle::{ThreadPool, ThreadPoolBuilder, MAX_WORKERS};
use home::Home;
pub(crate) use retire::{at_worker_exit, is_worker_context, Retire, WorkerContext};
use retire::{context_key, worker_contexts, Retiring};
pub(crate) use worker::{current_index, current_pool, note_timer};

/// Whether the calling thread is a worker of one of `pools`, or a thread
/// of its blocking lane.
pub(crate) fn on_a_thread_of(pools: &[std::sync::Weak<PoolShared>]) -> bool {
    pools
        .iter()
        .filter_map(std::sync::Weak::upgrade)
        .any(|pool| current_index(&pool).is_some() || pool.blocking.is_current())
}

/// What peers and outside threads may touch of one worker.
pub(crate) struct Remote {
    context: glib::MainContext,
    counters: WorkerCounters,
    /// Jobs that only this worker may run: fibers and pinned `!Send` tasks.
    /// Any thread pushes; only the worker pops. Never stolen.
    inbox: Injector<Job>,
    /// One fiber's resumption for this worker, beside the inbox: the word
    /// of its job, 0 if none (see [`PoolShared::push_fiber`]).
    mail: CachePadded<AtomicUsize>,
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

impl Remote {
    /// Whether the mailbox holds a resumption.
    #[inline]
    fn has_mail(&self) -> bool {
        self.mail.load(Ordering::Relaxed) != 0
    }

    /// The resumption in the mailbox, taken out (see
    /// [`PoolShared::push_fiber`]).
    #[inline]
    fn take_mail(&self) -> Option<Job> {
        if !self.has_mail() {
            return None;
        }
        match self.mail.swap(0, Ordering::Acquire) {
            0 => None,
            // SAFETY: only `push_fiber` fills the mailbox, with the word of
            // a resumption, which it takes out of its job.
            word => Some(unsafe { crate::fiber::resumption(word) }),
        }
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
    /// The latency class's queue (P12): every worker looks here before any
    /// other work, one job at a time; any thread pushes.
    urgent: CachePadded<Injector<Job>>,
    /// Where a latency-class task is woken to: `urgent`.
    latency_home: Home,
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
    /// Whether the workers keep latency histograms (O1, `latency.rs`).
    latency: crate::diagnostics::latency::Switch,
    /// Each worker's latency histograms, by index: lines of its own.
    latency_cells: Box<[CachePadded<crate::diagnostics::latency::Recorder>]>,
    /// The test clock that drives the workers' gdex timers, if any
    /// ([`crate::TestClock`]): told when a worker goes to sleep.
    clock: Option<Arc<dyn PoolClock>>,
}

/// What a pool needs of a test clock (`crate::TestClock`, made above the
/// pool): it tells the clock when a worker goes to sleep.
pub(crate) trait PoolClock: Send + Sync {
    /// The pool is built: its workers' contexts are the clock's.
    fn drive_pool(&self, pool: std::sync::Weak<PoolShared>, contexts: Vec<glib::MainContext>);
    /// A worker is about to sleep in its poll (called from the worker's
    /// poll function), the blocking lane emptied (called under the lane's
    /// lock), or the pool shut down: it runs no user code, and takes no
    /// lock held while the pool or its lane is used.
    fn pool_went_idle(&self);
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
        let local = worker::push_local_if(self, None, self.task_job(runnable));
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

    /// Queues the first jobs of freshly spawned tasks
    /// ([`Scheduler::spawn_many`](crate::Scheduler::spawn_many)): on the
    /// calling worker's deque if it is one of ours, else on the injector
    /// with one fence and one wake-up request for them all (the worker
    /// woken pulls a batch and asks a peer for help while backlog remains,
    /// P6), where `inject` pays both per job.
    pub(crate) fn schedule_spawned(&self, runnables: Vec<crate::task::Runnable>) {
        let mut outside = Vec::new();
        for runnable in runnables {
            if let Err(job) = worker::push_local_if(self, None, self.task_job(runnable)) {
                outside.push(job);
            }
        }
        if outside.is_empty() {
            return;
        }
        self.inject_counters
            .injected
            .add_shared_n(outside.len() as u64);
        for job in outside {
            self.injector.push(job);
        }
        fence(Ordering::SeqCst);
        if self.closed.load(Ordering::SeqCst) {
            // As for `inject`: shutdown step 5, the reaper drops them.
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

    /// Queues a latency-class job (P12) and wakes one sleeper if nobody is
    /// already on the way: from any thread, a worker's own included (its
    /// deque would put the job behind the batch work there).
    pub(crate) fn push_urgent(&self, job: Job) {
        self.urgent.push(job);
        fence(Ordering::SeqCst);
        if self.closed.load(Ordering::SeqCst) {
            // As for `inject`: shutdown step 5, the reaper drops it.
            reaper::reap(Self::take_all(&self.urgent));
            return;
        }
        match self.parking.request(None, worker::pseudo_random() as usize) {
            Request::Wake(i) => self.unpark(i),
            Request::Coalesced | Request::Marked(_) | Request::Nobody => {}
        }
    }

    /// A reference to the pool's latency-class home (P12), for a task's
    /// metadata ([`crate::task::builder_for`]).
    pub(crate) fn latency_owner(self: &Arc<Self>) -> crate::task::OwnerRef {
        debug_assert!(std::ptr::eq(self.latency_home.pool, Arc::as_ptr(self)));
        let header = NonNull::from(&self.latency_home).cast::<crate::task::OwnerHeader>();
        // SAFETY: as in `home_of`: the home is inside this live pool, and
        // its vtable's retain and release keep the pool alive.
        unsafe { crate::task::OwnerRef::retained(header) }
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

    /// Whether every task of the pool waits (for a [`crate::TestClock`]):
    /// every worker asleep in its poll with no wake-up to act on, nothing
    /// queued anywhere, and no job in the blocking lane; or the pool is
    /// shut down. A snapshot: work may come at any moment after. (Work
    /// queued for a context scheduler on a worker's context is not the
    /// pool's: the clock reads it.)
    pub(crate) fn is_idle(&self) -> bool {
        // A pool shut down runs nothing more (its lane's running jobs
        // wake nobody here): its workers are gone, not asleep.
        if self.is_closed() {
            return true;
        }
        if !self.parking.all_asleep() {
            return false;
        }
        let queued = !self.injector.is_empty()
            || !self.urgent.is_empty()
            || self.stealers.iter().any(|s| !s.is_empty())
            || self
                .remotes
                .iter()
                .any(|r| !r.inbox.is_empty() || r.has_mail());
        if queued {
            return false;
        }
        let lane = self.blocking.stats();
        lane.threads == lane.idle && lane.queued == 0
    }

    /// The workers' own contexts.
    pub(crate) fn worker_contexts(&self) -> impl Iterator<Item = &glib::MainContext> {
        self.remotes.iter().map(|r| &r.context)
    }

    /// The test clock that drives the workers' timers.
    pub(crate) fn clock(&self) -> Option<&Arc<dyn PoolClock>> {
        self.clock.as_ref()
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
        if n < 2
            || self.stealers[i].is_empty() && self.injector.is_empty() && self.urgent.is_empty()
        {
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

    /// Worker `i` holds a wake-up it has not acted on (its thread is busy
    /// in another source of its context) in thread-per-core mode: its own
    /// tasks stay home (P9), but latency-class work (P12) has no home, and
    /// the wake-up may have been for it: a peer is asked to take it, as
    /// [`help_stuck_worker`](Self::help_stuck_worker) asks on a plain pool.
    pub(crate) fn hand_over_latency(&self, i: usize) {
        let n = self.workers();
        if n < 2 || self.urgent.is_empty() {
            return;
        }
        fence(Ordering::SeqCst);
        if let Request::Wake(j) = self.parking.request(Some(i), (i + 1) % n) {
            self.unpark(j);
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
        if !self.pushed_to(i) {
            // Shutdown: worker `i` has drained its inbox for the last time
            // (it sets `exited` and then drains once more, so either it sees
            // our job or we see the flag). Every task that had run on it
            // was woken and dropped by then (S9; a wake that straddled its
            // registry's close was waited for), so what we find here never
            // ran: a task spawned while the pool shut down. Its future was
            // never polled, so dropping it on this thread is sound (the
            // contract of `spawn_pinned_unchecked`; ThreadBound checks it).
            reaper::reap(Self::take_all(&remote.inbox));
        }
    }

    /// After a push to worker `i`'s inbox or mailbox: `false` if the worker
    /// has exited (it sets `exited`, fences, then drains both once more:
    /// either it sees what we pushed or we see the flag, and the caller
    /// takes it back), else `true`, with a directed wake-up if it is parked
    /// (P10; the fence pairs with `Parking::try_park`'s and
    /// `Parking::enter_poll`'s). A parked worker busy in another source of
    /// its context needs no wake-up, but the stall monitor watches it: the
    /// work waits for that source's end (B5).
    fn pushed_to(&self, i: usize) -> bool {
        fence(Ordering::SeqCst);
        if self.remotes[i].exited.load(Ordering::SeqCst) {
            return false;
        }
        match self.parking.notify(i) {
            Directed::Wake => self.unpark(i),
            Directed::Busy => crate::diagnostics::stall::look(),
            Directed::No => {}
        }
        true
    }

    /// Worker `i` holds a wake-up it has not acted on (for the stall
    /// monitor: `Parking::holds_wake_up`).
    pub(crate) fn holds_wake_up(&self, i: usize) -> bool {
        self.parking.holds_wake_up(i)
    }

    /// Queues the resumption of a fiber of worker `i` from another thread
    /// (`Home::push_fiber`): in the worker's mailbox if it and the inbox
    /// are empty, else in its inbox, with a directed wake-up (P6, P10)
    /// either way.
    ///
    /// The mailbox is one word, the cell of the fiber to resume: a
    /// hand-off between two fibers on two workers then moves the line of
    /// that word, where the inbox (a crossbeam `Injector`) moves its tail's
    /// and its slot's, and allocates a block of slots every 63 pushes (the
    /// profile in `benches/RESULTS.md`). The worker looks at the mailbox
    /// first, and the mailbox is filled only while the inbox is empty: what
    /// it holds came before what waits in the inbox (but for a push that
    /// raced this one), and a stream of resumptions through it cannot keep
    /// the inbox's jobs from their turn.
    fn push_fiber(&self, i: usize, job: Job) {
        let remote = &self.remotes[i];
        let job = match job.into_word(crate::fiber::resumption_kind()) {
            Ok(word) => {
                if remote.mail.load(Ordering::Relaxed) == 0
                    && remote.inbox.is_empty()
                    && remote
                        .mail
                        .compare_exchange(0, word, Ordering::Release, Ordering::Relaxed)
                        .is_ok()
                {
                    if !self.pushed_to(i) {
                        // Dropping a resumption does nothing: its fiber
                        // ends with its task.
                        drop(remote.take_mail());
                    }
                    return;
                }
                // SAFETY: the word `into_word` just took out of a resumption.
                unsafe { crate::fiber::resumption(word) }
            }
            Err(job) => job,
        };
        self.push_inbox(i, job);
    }

    /// Wakes worker `i`'s context (one syscall).
    #[inline]
    fn unpark(&self, i: usize) {
        self.remotes[i].context.wakeup();
    }

    fn drain_injector(&self) {
        Self::drain(&self.urgent);
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
            // pool must not wait: the first caller may be joining it. The
            // lane is closed when any shutdown() returns: this one may be
            // done joining before the first caller has closed it (the first
            // close decides; a later one changes nothing).
            self.blocking
                .close(crate::blocking::CloseMode::CancelQueued);
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
        // Running blocking jobs finish on their own; queued ones are dropped
        // (after the wake-ups: a dropped job's destructor may shut the pool
        // down too, and join the workers).
        self.blocking
            .close(crate::blocking::CloseMode::CancelQueued);
        self.join_workers();
        if let Some(clock) = &self.clock {
            // Closed, it counts as idle now (`is_idle`): the clock may move.
            clock.pool_went_idle();
        }
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
            wake_to_poll: Default::default(),
            poll_durations: Default::default(),
            latency_sampling: self.latency.sampling(),
        }
        .with_latency(&self.latency_cells)
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
