//! A pool's latency histograms (O1): its tasks' jobs stamped when queued,
//! and what its workers counted, summed.
//!
//! Each worker times the jobs it runs and counts them in its own cells
//! (`WorkerCounters::latency`); every schedule function of the pool makes
//! its task's job with [`PoolShared::task_job`], which stamps it while the
//! histograms are on. Off, a schedule reads the pool's flag once and a
//! worker's slice reads it once.

use std::sync::{Arc, Weak};

use super::PoolShared;
use crate::diagnostics::latency::{LatencySource, Recorder, SchedulerMetrics, Switch};
use crate::task::{Job, Runnable};

/// A worker's slice starts: whether it times its jobs (the pool's flag,
/// read once a slice), and if so, a sample for the views that chart the
/// histograms (Sysprof's counters).
#[inline]
pub(super) fn slice_starts(pool: &PoolShared) -> bool {
    let timed = pool.latency.is_on();
    if timed {
        crate::diagnostics::views::latency_slice(pool);
    }
    timed
}

/// A worker's slice runs `job`: timed, if `timed`, in `recorder` (the
/// worker's own cells).
#[inline(always)]
pub(super) fn run(timed: bool, recorder: &Recorder, job: Job) {
    if timed {
        run_timed(recorder, job);
    } else {
        job.run();
    }
}

/// Runs `job` and counts how long it ran, and how long its task waited
/// since it was queued. Out of line: a slice's loop stays as it was when
/// the histograms are off.
#[inline(never)]
fn run_timed(recorder: &Recorder, job: Job) {
    recorder.time(job.queued_at(), move || job.run());
}

impl PoolShared {
    /// The job of a task of this pool being queued now: stamped with the
    /// clock's reading if the histograms are on (the moment its wait
    /// begins; a wake-up of a task already queued makes no job).
    #[inline]
    pub(crate) fn task_job(&self, runnable: Runnable) -> Job {
        if self.latency.is_on() {
            Job::task_queued_at(runnable, crate::util::clock::now())
        } else {
            Job::task(runnable)
        }
    }

    /// Turns the pool's histograms on, for good (the jobs queued before
    /// carry no stamp: their waits are not counted).
    pub(crate) fn enable_latency_histograms(self: &Arc<Self>) {
        let weak: Weak<dyn LatencySource> = Arc::downgrade(self) as Weak<PoolShared>;
        self.latency.turn_on(weak);
    }
}

impl LatencySource for PoolShared {
    fn latency_metrics(&self) -> SchedulerMetrics {
        let summed = self.metrics();
        SchedulerMetrics {
            scheduler: format!("Scheduler::Pool {{ workers: {} }}", self.workers()),
            latency_histograms: self.latency.is_on(),
            wake_to_poll: summed.wake_to_poll,
            poll_durations: summed.poll_durations,
        }
    }

    fn latency_switch(&self) -> &Switch {
        &self.latency
    }

    fn short_name(&self) -> &'static str {
        "pool"
    }
}
