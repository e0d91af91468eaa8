//! One worker thread: its context, its deque, and the run slice its
//! `GSource` dispatches.
//!
//! Everything here runs on the worker's own thread, except the checks of
//! `push_local_if`, `push_pinned_local` and `current_index`, which any
//! thread may make (they decline on threads that are not the worker).
//!
//! The parts: `thread.rs`, the thread's body (its start, its loop, its
//! exit) and the hooks through which its source, the stall watchdog and
//! `blocking()` reach it; `fd_poll.rs`, the poll function of its context
//! (P8); `spin.rs`, its watch for work before it parks (P7), and for a
//! fiber's wake from another thread before the fiber suspends (F3).

mod fd_poll;
mod spin;
mod thread;

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam_deque::Steal;

use super::parking::{push_asks, EnterPoll, Request, Woke};
use super::PoolShared;
use crate::current::{Role, Slot};
use crate::task::Job;
use crate::util::steal_one;

pub(crate) use thread::run;

/// Jobs a worker runs per dispatch before it lets its context dispatch due
/// timers and other sources (P8).
pub(crate) const SLICE: usize = 32;

/// How long a busy worker runs jobs before it lets its context dispatch due
/// timers and sources, even if fewer than [`SLICE`] jobs ran (P8): timeouts
/// are late by about this much at most under load.
const SLICE_TIME: std::time::Duration = std::time::Duration::from_micros(100);

/// How long a worker that shuts down waits for its cancelled fibers to
/// return before it drops (unwinds) the rest.
const FIBER_EXIT: std::time::Duration = std::time::Duration::from_millis(500);

/// How long a worker that ran out of work watches for more before it parks.
const SPIN: std::time::Duration = std::time::Duration::from_micros(20);

/// How long a fiber about to suspend on an idle worker watches for its
/// wake from another thread ([`Core::spin_while_idle`]): a round trip to
/// a fiber on another worker and back takes well under a microsecond here;
/// a wait for this worker's own context (a timer, a GIO call), whose
/// sources do not run meanwhile, is late by this much at most.
const FIBER_SPIN: std::time::Duration = std::time::Duration::from_micros(4);

/// The state only the worker's thread touches.
pub(crate) struct Core {
    shared: Arc<PoolShared>,
    index: usize,
    local: crossbeam_deque::Worker<Job>,
    /// Pinned jobs queued by this worker's own thread (a fiber woken by a
    /// task it ran); the shared inbox takes those from other threads.
    pinned: std::cell::RefCell<std::collections::VecDeque<Job>>,
    /// Whether pinned work went first on the last search (the next one
    /// takes the other turn).
    pinned_turn: Cell<bool>,
    /// Whether the inbox went first on the last look at pinned work (the
    /// next look takes the other turn): resumptions of fibers that yield on
    /// this thread refill the thread-local queue at once, and must not keep
    /// a fiber woken from another thread, whose resumption waits in the
    /// inbox, from its turn (F6).
    inbox_turn: Cell<bool>,
    /// The job running now may run this many more fibers' resumptions after
    /// its own, each counting as a job of the slice (P8, and B5: the stall
    /// watchdog sees each as one), until the slice's deadline
    /// ([`next_resumption`](Self::next_resumption)); `chained` counts
    /// those it ran. Both 0 outside a slice's job.
    chain_left: Cell<usize>,
    chained: Cell<usize>,
    /// The running slice's deadline, in clock ticks, and how often it reads
    /// the clock (`clock_mask`: after each job whose count has these bits
    /// set, so every job after a slice that ran out of time).
    slice_deadline: Cell<u64>,
    slice_mask: Cell<usize>,
    /// This worker consumed a wake request (P6): it was asked to help with
    /// work any worker may run, so its next search looks at the shared
    /// queues before its own pinned work (P10).
    searching: Cell<bool>,
    /// Inside `run_slice`: pushes come from the tasks it runs.
    in_slice: Cell<bool>,
    /// Latency-class jobs (P12) this worker ran in a row: after [`SLICE`]
    /// of them it runs one other job first, so that a latency task that
    /// stays ready cannot keep the batch class from its worker for good.
    urgent_run: Cell<usize>,
    /// The deque's length at this worker's last request for help from a
    /// push (P6), 0 since a push found it empty, and the pushes that left
    /// it at that length since: a deque that stays at a power of two (jobs
    /// that yield, popped and pushed back) asks once, then every
    /// `REASK_EVERY`th push, not at every push (`parking::push_asks`).
    asked_at: Cell<usize>,
    asked_repeats: Cell<u32>,
    /// The first job this worker's own thread queued outside a slice since
    /// the last one: a task woken by its context's other sources (a timer
    /// fired, a GIO call completed). It runs first in the next slice, so a
    /// timer's task is not late by a whole deque. One slot only, so it holds
    /// back no parallelism (the rest go to the stealable deque), and no
    /// starvation: a task cannot wake itself into it.
    woken: std::cell::RefCell<Option<Job>>,
    /// `SLICE_TIME` in clock ticks.
    slice_ticks: u64,
    /// [`FIBER_SPIN`] in clock ticks.
    fiber_spin_ticks: u64,
    /// The slice's clock is read when `ran & clock_mask == 0`.
    clock_mask: Cell<usize>,
    /// What the stall watchdog watches of this worker.
    runner: Arc<crate::diagnostics::stall::Runner>,
    /// X6: tokio I/O and timers work in this worker's tasks; entered at
    /// its first job, so a pool that runs nothing starts no tokio runtime.
    #[cfg(feature = "tokio")]
    tokio: crate::tokio_rt::LazyEnter,
}

/// The worker running on this thread, if any. Entered for the worker's
/// whole life, left before its `Core` is dropped.
// SAFETY: `pool::worker` owns `Role::Worker`; this is its one slot.
const CURRENT: Slot<Core> = unsafe { Slot::new(Role::Worker) };

thread_local! {
    static RNG: Cell<u32> = const { Cell::new(0) };
}

/// A cheap per-thread xorshift, for victim and sleeper choice.
pub(crate) fn pseudo_random() -> u32 {
    RNG.with(|rng| {
        let mut x = rng.get();
        if x == 0 {
            // Seed from the thread-local's address: distinct per thread.
            x = (rng as *const Cell<u32> as usize as u32) | 1;
        }
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        rng.set(x);
        x
    })
}

#[inline(always)]
fn with_current<R>(f: impl FnOnce(Option<&Core>) -> R) -> R {
    let ptr = CURRENT.get();
    // SAFETY: CURRENT is only non-null while `run` keeps the `Core` it points
    // to alive on this very thread, and a `Core` is never moved while
    // published.
    f(unsafe { ptr.as_ref() })
}

/// The pool whose worker is running on this thread, if any.
pub(crate) fn current_pool() -> Option<Arc<PoolShared>> {
    with_current(|core| core.map(|c| c.shared.clone()))
}

/// Pushes `job` on the calling worker's deque if the caller is a worker of
/// `pool` (and, with `only`, that very worker); gives the job back
/// otherwise.
#[inline]
pub(crate) fn push_local_if(pool: &PoolShared, only: Option<usize>, job: Job) -> Result<(), Job> {
    with_current(|core| match core {
        Some(core)
            if std::ptr::eq(Arc::as_ptr(&core.shared), pool)
                && only.is_none_or(|i| i == core.index) =>
        {
            core.push(job);
            Ok(())
        }
        _ => Err(job),
    })
}

/// If the calling thread is worker `i` of `pool`, queues `job` on its
/// thread-local pinned queue (no atomics), makes sure the worker is not
/// parked, and returns `Ok`. Gives the job back otherwise.
#[inline]
pub(crate) fn push_pinned_local(pool: &PoolShared, i: usize, job: Job) -> Result<(), Job> {
    with_current(|core| match core {
        Some(core) if core.index == i && std::ptr::eq(Arc::as_ptr(&core.shared), pool) => {
            core.pinned.borrow_mut().push_back(job);
            core.unpark_self();
            Ok(())
        }
        _ => Err(job),
    })
}

/// Notes a gdex timer attached to this worker's context in the worker's
/// book (see `pool::timers`); nothing off the pool.
pub(crate) fn note_timer(
    deadline: i64,
    flag: &Arc<crate::task::flag::Flag>,
) -> Option<Arc<super::timers::Noted>> {
    with_current(|core| {
        core.map(|core| core.shared.remotes[core.index].timers.note(deadline, flag))
    })
}

/// The index of the worker running on this thread, if it belongs to `pool`.
pub(crate) fn current_index(pool: &PoolShared) -> Option<usize> {
    with_current(|core| match core {
        Some(core) if std::ptr::eq(Arc::as_ptr(&core.shared), pool) => Some(core.index),
        _ => None,
    })
}

impl Core {
    /// For a fiber's resumption that just ran on this worker
    /// (`fiber::sched`, through `WorkerHooks`): the next job of the
    /// worker's own pinned queue, if it is another resumption (its vtable
    /// at `kind`) and nothing else waits that the worker's search would
    /// take first or in turn (a task a timer woke, a request for help,
    /// stealable work in its deque or the injector: P3, P10, F6), taken
    /// out; `None` otherwise, or off a slice. So fibers that hand control
    /// to each other on one worker switch from one to the next without a
    /// trip through the slice loop, while any other work still gets its
    /// turn after at most one such run of them (bounded by the caller).
    #[inline(always)]
    fn next_resumption(&self, kind: *const ()) -> Option<usize> {
        let left = self.chain_left.get();
        let remote = &self.shared.remotes[self.index];
        // This thread's own state first: the shared queues' lines, which
        // other threads write (a peer pushing the next resumption into our
        // inbox), only when there is a resumption to run.
        if left == 0
            || self.searching.get()
            || self.woken.borrow().is_some()
            || !self.pinned.borrow().front()?.is_kind(kind)
            || !self.local.is_empty()
            || !self.shared.injector.is_empty()
            || !self.shared.urgent.is_empty()
            || remote.has_mail()
            || !remote.inbox.is_empty()
            || self.shared.closed.load(Ordering::Relaxed)
        {
            return None;
        }
        let chained = self.chained.get();
        // P8 by time too, reading the clock as often as the slice does.
        let mask = self.slice_mask.get();
        if chained & mask == mask && crate::util::clock::now() >= self.slice_deadline.get() {
            return None;
        }
        let word = self.pinned.borrow_mut().pop_front()?.into_word(kind).ok()?;
        self.chain_one(left);
        Some(word)
    }

    /// One more job in the running job's chain (a fiber's resumption run
    /// after it, or a wake its fiber's spin saw), with `left` the room that
    /// was left: counted for the slice (P8) and for the stall watchdog
    /// (B5: one job ended, another starts).
    #[inline(always)]
    fn chain_one(&self, left: usize) {
        self.chain_left.set(left - 1);
        self.chained.set(self.chained.get() + 1);
        self.counters().tasks_run.bump();
        self.runner.leave_job();
        self.runner.enter_job();
    }

    fn counters(&self) -> &crate::diagnostics::metrics::WorkerCounters {
        &self.shared.remotes[self.index].counters
    }

    /// The worker's figures, for the views that chart them (O1).
    #[cold]
    fn figures(&self) -> crate::diagnostics::views::WorkerFigures {
        let counters = self.counters();
        crate::diagnostics::views::WorkerFigures {
            index: self.index,
            queued: self.local.len(),
            parks: counters.parks.get(),
            steals: counters.steals.get(),
        }
    }

    /// A job spawned or woken on this worker goes to the back of its deque
    /// (P3), and a peer is asked to help when the deque doubles (P6, see
    /// [`push_asks`]). The first job woken by the worker's other sources
    /// outside a slice takes the `woken` slot instead.
    #[inline]
    fn push(&self, job: Job) {
        let job = if self.in_slice.get() {
            job
        } else {
            let mut slot = self.woken.borrow_mut();
            match slot.take() {
                None => {
                    *slot = Some(job);
                    drop(slot);
                    self.unpark_self();
                    return;
                }
                Some(first) => {
                    *slot = Some(first);
                    job
                }
            }
        };
        self.local.push(job);
        if self.shared.parking.is_parked(self.index) {
            self.unpark_self();
        } else if !self.shared.thread_per_core
            && push_asks(self.local.len(), &self.asked_at, &self.asked_repeats)
        {
            self.request_help();
        }
    }

    /// Shutdown, on the worker's thread: every fiber of this worker still
    /// alive is cancelled (F4) and run until it has left through its own
    /// return, for up to [`FIBER_EXIT`]; its future is dropped here, on its
    /// own thread. Pinned tasks woken meanwhile run too. What is still
    /// queued after that is dropped by the caller (a fiber then unwinds).
    fn finish_fibers(&self) {
        if !crate::fiber::cancel_those_on_this_worker() {
            return;
        }
        // A cancelled fiber's waits return at once, so one pass over the
        // pinned work normally finishes them all; the deadline bounds a
        // fiber that loops on its own.
        let deadline = std::time::Instant::now() + FIBER_EXIT;
        self.in_slice.set(true);
        while std::time::Instant::now() < deadline {
            // A fiber first polled during this phase is cancelled too (F4),
            // so that it returns rather than unwinds: this thread's fibers
            // are all cancelled from now on.
            match self.find_pinned() {
                Some(job) => job.run(),
                // A fiber woken from another thread is queued, but the job
                // that resumes it is not in the inbox yet (its waker is
                // between the two, `fiber::sched`): it comes in a moment.
                None if crate::fiber::live_on_this_worker() => std::thread::yield_now(),
                None => break,
            }
        }
        self.in_slice.set(false);
    }

    /// Shutdown step 3: drops what is queued here, on the worker's thread:
    /// its pinned inbox (fibers unwind here, on their own thread) and its
    /// deque. A future's destructor may schedule more (a dropped Task
    /// cancels its task): that lands here too and is dropped in turn.
    fn drop_queued(&self) {
        let remote = &self.shared.remotes[self.index];
        let inbox = &remote.inbox;
        loop {
            if let Some(job) = remote.take_mail() {
                drop(job);
                continue;
            }
            if let Some(job) = self.local.pop() {
                drop(job);
                continue;
            }
            let pinned = self.pinned.borrow_mut().pop_front();
            if let Some(job) = pinned {
                drop(job);
                continue;
            }
            let woken = self.woken.borrow_mut().take();
            if let Some(job) = woken {
                drop(job);
                continue;
            }
            match steal_one(|| inbox.steal()) {
                Some(job) => drop(job),
                None => break,
            }
        }
    }

    /// Hands every job on this worker's deque to its peers before the worker
    /// blocks.
    fn offload(&self) {
        let n = self.shared.workers();
        let mut moved = 0;
        let woken = self.woken.borrow_mut().take();
        if let Some(job) = woken {
            self.local.push(job);
        }
        while let Some(job) = self.local.pop() {
            if self.shared.thread_per_core && n > 1 {
                // Round-robin over the other workers' inboxes.
                let to = (self.index + 1 + moved % (n - 1)) % n;
                self.shared.push_inbox(to, job);
            } else {
                self.shared.inject(job);
            }
            moved += 1;
        }
    }

    /// Work was queued for this worker by its own thread outside its run
    /// slice (from another source's callback: a timer or a GIO completion
    /// woke a task) while it was parked: un-park, so the next iteration
    /// dispatches our source. No syscall: we are the thread that would poll.
    fn unpark_self(&self) {
        let sleep = &self.shared.parking;
        if sleep.is_parked(self.index) {
            self.woke(sleep.wake_up(self.index));
        }
    }

    /// Our context's poll is about to block for `timeout` (not 0) ms (the
    /// poll function, P10): a parked worker marks itself asleep in its poll
    /// (from now on a request may wake it) and re-checks every queue, as
    /// after `try_park`. Returns whether it marked itself, and the timeout
    /// to poll with: 0 if it must not sleep (work is queued, it was sent a
    /// wake-up while its thread was busy in another source, or its own
    /// thread woke it since its source's prepare).
    pub(super) fn before_poll(&self, timeout: std::os::raw::c_int) -> (bool, std::os::raw::c_int) {
        if self.shared.closed.load(Ordering::Acquire) {
            // The pool is closed: the worker's source runs nothing more
            // (and is not ready), so a poll of its context (the worker's
            // last turn, or a nested loop in a GLib callback there) blocks
            // as GLib asks, whatever wake-up the worker holds.
            return (false, timeout);
        }
        let sleep = &self.shared.parking;
        match sleep.enter_poll(self.index) {
            EnterPoll::Sleep => {
                if self.sees_work() {
                    self.woke(sleep.wake_up(self.index));
                    (false, 0)
                } else {
                    if let Some(clock) = self.shared.clock() {
                        // Perhaps the last to sleep: the clock may move.
                        clock.pool_went_idle();
                    }
                    (true, timeout)
                }
            }
            EnterPoll::Woken => (false, 0),
            // Awake outside a slice, yet GLib would block: the worker's own
            // thread queued work for it after its source's prepare found it
            // parked (user code in a later source's prepare, or a source's
            // finalizer run while GLib walks the sources, woke one of its
            // tasks: `unpark_self`). No request will come for that work
            // (a requester takes an awake worker for one that finds its
            // own), so this poll must not block: the source is ready at
            // the next prepare. Inside a slice (a nested loop in a job) the
            // work waits for that job anyway, and the poll may block.
            EnterPoll::Awake if !self.in_slice.get() => (false, 0),
            EnterPoll::Awake => (false, timeout),
        }
    }

    /// The poll that [`before_poll`](Self::before_poll) marked returned:
    /// until our source runs, the thread may be busy in the context's other
    /// sources, and is no sleeper (P10). If it was sent a wake-up, the stall
    /// monitor watches from now on, not only once our source runs: a
    /// source of a higher priority may dispatch first, for long (B5).
    pub(super) fn after_poll(&self) {
        if self.shared.parking.leave_poll(self.index) {
            self.runner.busy();
        }
    }

    /// This worker left the parked state (or gave up parking): a request it
    /// consumed is counted, and makes its next search look at the shared
    /// queues first (P10).
    #[inline]
    fn woke(&self, woke: Woke) {
        if woke.received {
            self.counters().wake_requests_received.bump();
            self.searching.set(true);
        }
    }

    fn request_help(&self) {
        let n = self.shared.workers();
        let counters = self.counters();
        match self
            .shared
            .parking
            .request(Some(self.index), (self.index + 1) % n)
        {
            Request::Wake(i) => {
                counters.wake_requests_sent.bump();
                self.shared.unpark(i);
            }
            Request::Marked(_) => counters.wake_requests_sent.bump(),
            Request::Coalesced => counters.wake_requests_coalesced.bump(),
            Request::Nobody => {}
        }
    }

    /// One dispatch of the worker's source: up to [`SLICE`] jobs, then back
    /// to GLib so due timers and sources run (P8); or park when there is no
    /// work anywhere (P7).
    fn run_slice(&self) {
        if self.shared.closed.load(Ordering::Acquire) {
            return;
        }
        // A slice dispatched by a nested loop inside a fiber runs plain tasks.
        let _outside = crate::fiber::outside_fiber();
        self.runner.busy();
        struct Idle<'a>(&'a crate::diagnostics::stall::Runner);
        impl Drop for Idle<'_> {
            fn drop(&mut self) {
                self.0.idle();
            }
        }
        let _idle = Idle(&self.runner);
        self.in_slice.set(true);
        struct OutOfSlice<'a>(&'a Cell<bool>);
        impl Drop for OutOfSlice<'_> {
            fn drop(&mut self) {
                self.0.set(false);
            }
        }
        let _out = OutOfSlice(&self.in_slice);
        // A slice dispatched by a nested loop inside one of our jobs (a
        // fiber's resumption among them) leaves that job's chain as it was.
        struct Chain<'a>(&'a Core, usize, usize, u64, usize);
        impl Drop for Chain<'_> {
            fn drop(&mut self) {
                self.0.chain_left.set(self.1);
                self.0.chained.set(self.2);
                self.0.slice_deadline.set(self.3);
                self.0.slice_mask.set(self.4);
            }
        }
        let _chain = Chain(
            self,
            self.chain_left.replace(0),
            self.chained.replace(0),
            self.slice_deadline.get(),
            self.slice_mask.get(),
        );
        let deadline = crate::util::clock::now().wrapping_add(self.slice_ticks);
        // Read the clock after every job if the last slice ran out of time
        // (long jobs), every 8th otherwise; this slice decides the next.
        let clock_mask = self.clock_mask.replace(7);
        self.slice_deadline.set(deadline);
        self.slice_mask.set(clock_mask);
        let sleep = &self.shared.parking;
        let counters = self.counters();
        // Leave the parked state if we were asleep. A busy worker keeps a
        // request it holds until its own deque is drained (P6): it consumes
        // it below, when it has to search anyway, and until then further
        // requests coalesce on it without touching its state word.
        if sleep.is_parked(self.index) {
            self.woke(sleep.wake_up(self.index));
        }
        crate::diagnostics::views::worker_slice(|| self.figures());
        let sampling = super::latency::slice_starts(&self.shared);
        let mut ran = 0;
        // Spins since the last job: each time the worker runs dry it watches
        // for work once; a few fruitless spins in a row and it parks.
        let mut spins = 0;
        while ran < SLICE {
            if self.shared.closed.load(Ordering::Relaxed) {
                // Shutdown: no new job starts; the worker leaves its loop
                // after this dispatch and drops what is queued.
                return;
            }
            if let Some(job) = self.find_job(ran == 0) {
                counters.tasks_run.bump();
                #[cfg(feature = "tokio")]
                self.tokio.ensure();
                self.runner.enter_job();
                self.chain_left.set(SLICE - ran - 1);
                super::latency::run(sampling, &self.shared, self.index, job);
                self.chain_left.set(0);
                let chained = self.chained.replace(0);
                self.runner.leave_job();
                ran += 1 + chained;
                spins = 0;
                // P8 by time as well as by count (the clock read is cheap,
                // not free).
                if (chained > 0 || ran & clock_mask == 0) && crate::util::clock::now() >= deadline {
                    self.clock_mask.set(0);
                    break;
                }
                continue;
            }
            super::latency::idle(sampling);
            if crate::current::take_loop_work() {
                // Our context has work for its next turn (queued AIO
                // requests, whose completions are our next jobs): take that
                // turn now, rather than spin or park first. Not parked, so
                // the loop comes straight back here.
                break;
            }
            if spins < 2 {
                spins += 1;
                if self.spin_for_work() {
                    continue;
                }
                spins = 2;
            }
            if !sleep.try_park(self.index) {
                // We hold a request: consume it and search once more.
                self.woke(sleep.wake_up(self.index));
                continue;
            }
            if self.sees_work() {
                // Work arrived while we announced the park.
                self.woke(sleep.wake_up(self.index));
                continue;
            }
            counters.parks.bump();
            crate::diagnostics::views::parked(|| self.figures());
            return;
        }
    }

    /// The latency class's queue first (P12), then a task a timer woke;
    /// then pinned work (fibers, pinned tasks) and stealable work take turns, so
    /// a fiber that yields forever cannot starve the deque, nor the reverse
    /// (P3, F6). Stealable work is P3-P5: own deque, injector, peers.
    fn find_job(&self, slice_start: bool) -> Option<Job> {
        // P12: the latency class first, one job at a time (a batch taken
        // into the deque would wait there behind batch work).
        let urgent_first = self.urgent_run.get() < SLICE;
        if urgent_first && !self.shared.urgent.is_empty() {
            if let Some(job) = self.pull_urgent() {
                self.urgent_run.set(self.urgent_run.get() + 1);
                return Some(job);
            }
        }
        self.urgent_run.set(0);
        let woken = self.woken.borrow_mut().take();
        if woken.is_some() {
            return woken;
        }
        if self.searching.get() {
            if let Some(job) = self.search_shared(slice_start) {
                return Some(job);
            }
        }
        let pinned_first = !self.pinned_turn.get();
        self.pinned_turn.set(pinned_first);
        let job = if pinned_first {
            self.find_pinned().or_else(|| self.find_queued(slice_start))
        } else {
            self.find_queued(slice_start).or_else(|| self.find_pinned())
        };
        // The batch class's turn found nothing: the latency class again.
        let urgent = || (!urgent_first).then(|| self.pull_urgent()).flatten();
        job.or_else(|| self.steal()).or_else(urgent)
    }

    /// One latency-class job (P12); with more behind it, a peer is asked
    /// to help. Out of line: the queue is empty on most searches.
    #[cold]
    #[inline(never)]
    fn pull_urgent(&self) -> Option<Job> {
        let job = steal_one(|| self.shared.urgent.steal())?;
        if !self.shared.urgent.is_empty() {
            self.request_help();
        }
        Some(job)
    }

    /// Asked to help (P10): what the request was for comes before a pinned
    /// job that may poll for long. Out of line: most searches are not the
    /// first after a request, and `find_job` is on every job's path.
    #[cold]
    #[inline(never)]
    fn search_shared(&self, slice_start: bool) -> Option<Job> {
        self.searching.set(false);
        self.find_queued(slice_start).or_else(|| self.steal())
    }

    /// This thread's own pinned queue and what other threads queued for
    /// this worker take turns (F6).
    fn find_pinned(&self) -> Option<Job> {
        let inbox_first = self.inbox_turn.get();
        self.inbox_turn.set(!inbox_first);
        if inbox_first {
            if let Some(job) = self.find_sent() {
                return Some(job);
            }
        }
        let pinned = self.pinned.borrow_mut().pop_front();
        if pinned.is_some() || inbox_first {
            return pinned;
        }
        self.find_sent()
    }

    /// What other threads queued for this worker only: the mailbox (a
    /// fiber's resumption), then the inbox. The mailbox is filled only
    /// while the inbox is empty (`PoolShared::push_fiber`), so what it
    /// holds came before what waits in the inbox, but for a push that
    /// raced: neither keeps the other from its turn.
    #[inline]
    fn find_sent(&self) -> Option<Job> {
        let remote = &self.shared.remotes[self.index];
        if let Some(job) = remote.take_mail() {
            return Some(job);
        }
        if remote.inbox.is_empty() {
            return None;
        }
        steal_one(|| remote.inbox.steal())
    }

    /// Own deque and the injector.
    fn find_queued(&self, slice_start: bool) -> Option<Job> {
        // Fairness: once per slice, the injector goes first, so outside work
        // is not starved by a deque that never empties.
        if slice_start && !self.shared.injector.is_empty() {
            if let Some(job) = self.pull_injector() {
                return Some(job);
            }
        }
        if let Some(job) = self.local.pop() {
            return Some(job);
        }
        self.pull_injector()
    }

    fn pull_injector(&self) -> Option<Job> {
        if self.shared.injector.is_empty() {
            return None;
        }
        let job = steal_one(|| self.shared.injector.steal_batch_and_pop(&self.local))?;
        self.counters().injector_pulls.bump();
        if !self.shared.injector.is_empty() || !self.local.is_empty() {
            // Useful backlog remains: grow parallelism by one.
            self.request_help();
        }
        Some(job)
    }

    /// P5: a pseudo-random first victim, then round-robin over the others.
    /// A scan that met contention (some victim had backlog) goes again.
    fn steal(&self) -> Option<Job> {
        let stealers = &self.shared.stealers;
        let n = stealers.len();
        if n < 2 || self.shared.thread_per_core {
            return None;
        }
        let counters = self.counters();
        counters.steal_attempts.bump();
        let start = pseudo_random() as usize % n;
        loop {
            let mut retry = false;
            for k in 0..n {
                let victim = (start + k) % n;
                if victim == self.index {
                    continue;
                }
                match stealers[victim].steal_batch_and_pop(&self.local) {
                    Steal::Success(job) => {
                        counters.steals.bump();
                        crate::diagnostics::views::stole(|| self.figures());
                        if !stealers[victim].is_empty() || !self.local.is_empty() {
                            // A thief whose steal left backlog wakes one more.
                            self.request_help();
                        }
                        return Some(job);
                    }
                    Steal::Retry => retry = true,
                    Steal::Empty => {}
                }
            }
            if !retry {
                return None;
            }
        }
    }
}

#[cfg(all(test, not(gdex_loom)))]
mod tests;
