//! A scheduler's latency histograms (O1), turned on and read through its
//! handle: [`Scheduler::enable_latency_histograms`] and
//! [`Scheduler::metrics`].

use super::{Kind, Scheduler};
use crate::diagnostics::latency::{LatencySource, SchedulerMetrics};

impl Scheduler {
    /// Turns this scheduler's latency histograms on (O1), for good: how
    /// long each task waits between its spawn or wake-up and its poll
    /// (wake-to-poll), and how long each job runs, read with
    /// [`metrics`](Self::metrics) and shown by [`dump`](crate::dump). For
    /// the main scheduler or any context scheduler, and for a pool (as
    /// [`ThreadPoolBuilder::latency_histograms`](crate::ThreadPoolBuilder::latency_histograms)
    /// does from its start; `GDEX_LATENCY_HISTOGRAMS=1` turns them on for
    /// every scheduler). Tasks queued before the call are counted from
    /// their next wake-up; a pool's workers count from their next slice
    /// (within 32 jobs: a slice reads the switch once).
    ///
    /// Off, they cost a branch on a flag at each queueing and each
    /// dispatch; on, a clock reading per queueing and one per job (its
    /// end, which is the next job's start): about 20 ns a task, a fifth of
    /// the smallest task's spawn and poll on a pool.
    /// [`enable_sampled_latency_histograms`](Self::enable_sampled_latency_histograms)
    /// counts about one task in `n` for a fraction of that.
    ///
    /// ```
    /// let context = glib::MainContext::new();
    /// let scheduler = gdex::Scheduler::for_context(&context);
    /// scheduler.enable_latency_histograms();
    /// let task = scheduler.spawn(async { 7 });
    /// assert_eq!(context.block_on(task).unwrap(), 7);
    /// let metrics = scheduler.metrics();
    /// assert_eq!(metrics.wake_to_poll.count(), 1);
    /// assert_eq!(metrics.poll_durations.count(), 1);
    /// println!("{metrics}");
    /// ```
    pub fn enable_latency_histograms(&self) {
        self.turn_latency_histograms_on(1);
    }

    /// Turns this scheduler's latency histograms on (O1), for good,
    /// counting about one task in `one_in` (1: every one, as
    /// [`enable_latency_histograms`](Self::enable_latency_histograms)):
    /// cheap enough to leave on in production (`GDEX_LATENCY_HISTOGRAMS=1/64`
    /// does it for every scheduler). The queueings counted are drawn at
    /// random, `one_in` apart on average; each is timed from its queueing
    /// to its poll's end. A pool's workers also time about one other job in
    /// `one_in` (a long work item, or a long poll of a task not sampled,
    /// shows by that chance); a context scheduler times every job, which
    /// costs it nothing more. Counts are of samples; percentiles estimate
    /// those of every task. A later call changes the sampling; the counts
    /// so far stay.
    ///
    /// ```
    /// let context = glib::MainContext::new();
    /// let scheduler = gdex::Scheduler::for_context(&context);
    /// scheduler.enable_sampled_latency_histograms(8);
    /// for _ in 0..800 {
    ///     context.block_on(scheduler.spawn(async {})).unwrap();
    /// }
    /// let metrics = scheduler.metrics();
    /// assert_eq!(metrics.sampling, 8);
    /// // About 100 of the 800 waits; every poll.
    /// assert!(metrics.wake_to_poll.count() < 200, "{metrics}");
    /// assert_eq!(metrics.poll_durations.count(), 800);
    /// println!("{metrics}"); // "…, about 1 in 8 sampled: wake-to-poll …"
    /// ```
    ///
    /// # Panics
    /// If `one_in` is 0.
    pub fn enable_sampled_latency_histograms(&self, one_in: u32) {
        crate::diagnostics::latency::check_one_in(
            "Scheduler::enable_sampled_latency_histograms",
            one_in,
        );
        self.turn_latency_histograms_on(one_in);
    }

    fn turn_latency_histograms_on(&self, one_in: u32) {
        match &self.kind {
            Kind::Context(shared) => shared.enable_latency_histograms(one_in),
            Kind::Pool(pool) => pool.enable_latency_histograms(one_in),
        }
    }

    /// This scheduler's latency histograms (O1): empty unless they are on
    /// ([`enable_latency_histograms`](Self::enable_latency_histograms)). A
    /// pool's are the sums of its workers' (see
    /// [`ThreadPool::metrics`](crate::ThreadPool::metrics) for each
    /// worker's).
    pub fn metrics(&self) -> SchedulerMetrics {
        match &self.kind {
            Kind::Context(shared) => shared.latency_metrics(),
            Kind::Pool(pool) => pool.latency_metrics(),
        }
    }
}
