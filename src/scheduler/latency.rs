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
    /// end, which is the next job's start).
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
        match &self.kind {
            Kind::Context(shared) => shared.enable_latency_histograms(),
            Kind::Pool(pool) => pool.enable_latency_histograms(),
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
