//! The pool's public face: the [`ThreadPool`] handle, its builder, and the
//! defaults it reads from the environment (P1, P9).

use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock};

use crossbeam_deque::Injector;
use crossbeam_utils::CachePadded;

use super::home::Home;
use super::parking::Parking;
use super::retire::{context_key, worker_contexts, WorkerEnd};
use super::{worker, PoolShared, Remote};
use crate::blocking::{Lane, LaneStats};
use crate::diagnostics::metrics::{PoolMetrics, WorkerCounters};
use crate::error::Error;
use crate::util::Unpoisoned;

/// The largest worker count a pool accepts.
pub const MAX_WORKERS: usize = 1024;

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
        // The pool's flag first, as every spawn onto the pool checks it: the
        // lane closes a moment after the pool does (S9).
        if self.handle.shared.is_closed() {
            return crate::Task::failed(crate::Error::ShutDown);
        }
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
    /// 0: off; 1: every task; `n`: about one in `n`.
    latency_histograms: Option<u32>,
    clock: Option<ClockHook>,
}

/// The builder's test clock (see `crate::TestClock`), opaque to the pool.
#[derive(Clone)]
struct ClockHook(Arc<dyn super::PoolClock>);

impl std::fmt::Debug for ClockHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TestClock")
    }
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

    /// Latency histograms (O1), overriding `GDEX_LATENCY_HISTOGRAMS`: each
    /// worker counts how long each task waited between its spawn or
    /// wake-up and its poll (wake-to-poll) and how long each job ran,
    /// read from [`ThreadPool::metrics`] (per worker and summed),
    /// [`Scheduler::metrics`](crate::Scheduler::metrics) and
    /// [`dump`](crate::dump). Off by default: on, a task's queueing and
    /// each job's end read the clock (about 10 ns each: a fifth of the
    /// cost of the smallest tasks, a spawn and an empty poll, and less the
    /// more a poll does; [`sampled_latency_histograms`](Self::sampled_latency_histograms)
    /// costs a fraction of that); off, they cost a branch on a flag.
    ///
    /// ```
    /// let pool = gdex::ThreadPool::builder()
    ///     .workers(1)
    ///     .latency_histograms(true)
    ///     .build()
    ///     .unwrap();
    /// gdex::block_on(pool.scheduler().spawn(async {})).unwrap();
    /// // The worker counts the poll once it has returned from it.
    /// let counted = |m: &gdex::PoolMetrics| (m.wake_to_poll.count(), m.poll_durations.count());
    /// while counted(&pool.metrics()) != (1, 1) {
    ///     std::thread::yield_now();
    /// }
    /// assert!(pool.metrics().wake_to_poll.p99().is_some());
    /// ```
    pub fn latency_histograms(mut self, on: bool) -> Self {
        self.latency_histograms = Some(u32::from(on));
        self
    }

    /// Sampled latency histograms (O1), overriding `GDEX_LATENCY_HISTOGRAMS`:
    /// as [`latency_histograms`](Self::latency_histograms), but counting
    /// about one task in `one_in` (1 counts every one): cheap enough to
    /// leave on in production. The queueings sampled (drawn at random,
    /// `one_in` apart on average) are timed from their queueing to the
    /// end of their poll; each worker also times about one other job in
    /// `one_in`, so a long work item or a long poll of a task not sampled
    /// shows too, by that chance. Counts are of samples: waits, about
    /// `1/one_in` of the queueings; polls, about twice that (the sampled
    /// tasks' and one in `one_in` of the other jobs'). Percentiles
    /// estimate those of every task. One in 64 costs about 2.6% of the
    /// smallest tasks' spawn and poll (by instructions), one in 16 3.4%.
    ///
    /// ```
    /// let pool = gdex::ThreadPool::builder()
    ///     .workers(1)
    ///     .sampled_latency_histograms(16)
    ///     .build()
    ///     .unwrap();
    /// let tasks: Vec<_> = (0..1_600).map(|_| pool.scheduler().spawn(async {})).collect();
    /// for task in tasks {
    ///     gdex::block_on(task).unwrap();
    /// }
    /// let metrics = pool.scheduler().metrics();
    /// assert_eq!(metrics.sampling, 16);
    /// // About 100 of the 1,600 tasks' waits.
    /// assert!(metrics.wake_to_poll.count() < 400, "{metrics}");
    /// ```
    ///
    /// # Panics
    /// If `one_in` is 0.
    pub fn sampled_latency_histograms(mut self, one_in: u32) -> Self {
        crate::diagnostics::latency::check_one_in(
            "ThreadPoolBuilder::sampled_latency_histograms",
            one_in,
        );
        self.latency_histograms = Some(one_in);
        self
    }

    /// For `crate::TestClock`'s `ThreadPoolBuilder::clock`.
    pub(crate) fn with_clock(mut self, clock: Arc<dyn super::PoolClock>) -> Self {
        self.clock = Some(ClockHook(clock));
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
            urgent: CachePadded::new(Injector::new()),
            latency_home: Home::new(&Home::LATENCY, me.as_ptr(), 0),
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
                        mail: Default::default(),
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
            latency: Default::default(),
            latency_cells: (0..n).map(|_| Default::default()).collect(),
            clock: self.clock.as_ref().map(|clock| clock.0.clone()),
        });
        if let Some(clock) = &self.clock {
            let contexts = shared.remotes.iter().map(|r| r.context.clone()).collect();
            clock.0.drive_pool(Arc::downgrade(&shared), contexts);
            // A blocking job that no task awaits ends with no worker waking.
            let lane_clock = clock.0.clone();
            shared
                .blocking
                .set_on_idle(Box::new(move || lane_clock.pool_went_idle()));
        }
        match self
            .latency_histograms
            .unwrap_or_else(crate::diagnostics::latency::on_by_default)
        {
            0 => {}
            one_in => shared.enable_latency_histograms(one_in),
        }
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
