//! A pool's latency histograms (O1): its tasks' jobs stamped when queued,
//! and what its workers counted, summed.
//!
//! Each worker times the jobs it runs and counts them in cells of its own
//! (`PoolShared::latency_cells`, outside the lines of its other counters);
//! every schedule function of the pool makes its task's job with
//! [`PoolShared::task_job`], which stamps it while the histograms are on.
//! Off, a schedule reads the pool's one-byte switch and a worker's slice
//! reads it once; on, a schedule reads the clock once, and a job once
//! more (its end, which is the next job's start).

use std::cell::Cell;
use std::sync::{Arc, Weak};

use super::PoolShared;
use crate::diagnostics::latency::{LatencySource, SchedulerMetrics, Timer};
use crate::task::{Job, Runnable};

thread_local! {
    /// The timing of the slice running on this worker thread, while the
    /// pool's histograms are on: where the next job starts, and whether
    /// that is the last job's end (see [`Timer`]).
    static SLICE: Cell<(u64, bool)> = const { Cell::new((0, false)) };
}

/// A worker's slice starts: whether it times its jobs (the pool's switch,
/// read once a slice); if so, a sample for the views that chart the
/// histograms (Sysprof's counters).
#[inline]
pub(super) fn slice_starts(pool: &PoolShared) -> bool {
    if !pool.latency.is_on() {
        return false;
    }
    SLICE.set((0, false));
    crate::diagnostics::views::latency_slice();
    true
}

/// A worker's slice runs `job`: timed into worker `worker`'s cells if
/// `timed`.
#[inline(always)]
pub(super) fn run(timed: bool, pool: &PoolShared, worker: usize, job: Job) {
    if timed {
        run_timed(pool, worker, job);
    } else {
        job.run();
    }
}

/// Out of line: a slice's loop stays as it was when the histograms are
/// off.
#[inline(never)]
fn run_timed(pool: &PoolShared, worker: usize, job: Job) {
    let (last, fresh) = SLICE.get();
    let mut timer = Timer::resume(&pool.latency_cells[worker], last, fresh);
    timer.run(job.queued_at(), move || job.run());
    SLICE.set(timer.state());
}

/// A worker's slice found no job: the next one it finds starts when found.
#[inline(always)]
pub(super) fn idle(timed: bool) {
    if timed {
        SLICE.set((0, false));
    }
}

/// The job of a task queued now, stamped. Out of line: a schedule
/// function stays as small as it was when the histograms are off.
#[inline(never)]
fn stamped_job(runnable: Runnable) -> Job {
    Job::task_queued_at(runnable, crate::util::clock::now())
}

impl PoolShared {
    /// The job of a task of this pool being queued now: stamped with the
    /// clock's reading if the histograms are on (the moment its wait
    /// begins; a wake-up of a task already queued makes no job).
    #[inline]
    pub(crate) fn task_job(&self, runnable: Runnable) -> Job {
        if self.latency.is_on() {
            return stamped_job(runnable);
        }
        Job::task(runnable)
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

    fn short_name(&self) -> &'static str {
        "pool"
    }
}
