//! A pool's latency histograms (O1): its tasks' jobs stamped when queued,
//! and what its workers counted, summed.
//!
//! Each worker times the jobs it runs and counts them in cells of its own
//! (`PoolShared::latency_cells`, outside the lines of its other counters);
//! every schedule function of the pool makes its task's job with
//! [`PoolShared::task_job`], which stamps it while the histograms are on.
//! Off, a schedule reads the pool's switch and a worker's slice reads it
//! once; on, a schedule reads the clock once, and a job once more (its
//! end, which is the next job's start). Sampled (about one task in `n`,
//! `diagnostics::sampling`), a schedule stamps about one queueing in `n`
//! and a worker times the jobs of those and about one other job in `n`.

use std::cell::Cell;
use std::sync::{Arc, Weak};

use super::PoolShared;
use crate::diagnostics::latency::{LatencySource, SchedulerMetrics};
use crate::diagnostics::sampling::{self, Sampling};
use crate::task::{Job, Runnable};

thread_local! {
    /// The clock's reading at the end of the last job this worker timed.
    static LAST: Cell<u64> = const { Cell::new(0) };
    /// `LAST` is where the next job starts: every job is timed and the
    /// worker found no queue empty since (a job ends where the next
    /// starts).
    static FRESH: Cell<bool> = const { Cell::new(false) };
    /// Sampled: this worker's unstamped jobs left before it times one.
    static UNSTAMPED: sampling::Countdown = const { Cell::new(0) };
}

/// A worker's slice starts: 0 if it times no job, else the pool's
/// sampling (read once a slice); if on, a sample for the views that chart
/// the histograms (Sysprof's counters).
#[inline]
pub(super) fn slice_starts(pool: &PoolShared) -> Sampling {
    let sampling = pool.latency.load();
    if sampling.is_on() {
        FRESH.set(false);
        crate::diagnostics::views::latency_slice();
    }
    sampling
}

/// A worker's slice runs `job`: timed into worker `worker`'s cells if the
/// slice's `sampling` says so. The job runs here, in the slice's loop:
/// what timing adds is small and beside it (a job's run inlined into an
/// out-of-line timing function made every job pay for that function's
/// frame).
#[inline(always)]
pub(super) fn run(sampling: Sampling, pool: &PoolShared, worker: usize, job: Job) {
    if !sampling.is_on() {
        // Off: the loop as it was without the histograms.
        job.run();
        return;
    }
    let timing = starts(sampling, &job);
    job.run();
    if let Some((started, queued)) = timing {
        ends(pool, worker, started, queued);
    }
}

/// Whether a job starting now is timed, and if so where it starts and when
/// its task was queued. Every job is if `sampling` is 1; sampled, a job is
/// if its task's queueing was (it carries a stamp), and about one other
/// job in `sampling` is (so work items, and long polls of tasks not
/// sampled, are seen too).
///
/// Sampled, a timed job's start is read afresh: jobs timed back to back
/// are rare then, and the untimed ones need not mark the last end stale.
#[inline(always)]
fn starts(sampling: Sampling, job: &Job) -> Option<(u64, Option<u64>)> {
    let queued = job.queued_at();
    if sampling.one_in == 1 {
        let started = if FRESH.get() {
            LAST.get()
        } else {
            crate::util::clock::now()
        };
        return Some((started, queued));
    }
    if queued.is_none() && !UNSTAMPED.with(|left| sampling::take(left, sampling)) {
        return None;
    }
    Some((crate::util::clock::now(), queued))
}

/// A timed job ended: counted in worker `worker`'s cells (its end is the
/// next job's start if every job is timed). Out of line: a slice's loop
/// stays small.
#[inline(never)]
fn ends(pool: &PoolShared, worker: usize, started: u64, queued: Option<u64>) {
    let ended = crate::util::clock::now();
    pool.latency_cells[worker].job_ran(started, ended, queued);
    LAST.set(ended);
    FRESH.set(true);
}

/// A worker's slice found no job: the next one it finds starts when found.
#[inline(always)]
pub(super) fn idle(sampling: Sampling) {
    if sampling.is_on() {
        FRESH.set(false);
    }
}

impl PoolShared {
    /// The job of a task of this pool being queued now: stamped with the
    /// clock's reading if the histograms are on and count it (the moment
    /// its wait begins; a wake-up of a task already queued makes no job).
    #[inline]
    pub(crate) fn task_job(&self, runnable: Runnable) -> Job {
        let mut job = Job::task(runnable);
        let sampling = self.latency.load();
        if sampling.is_on() && sampling::stamp_this_queueing(sampling) {
            job.stamp(crate::util::clock::now());
        }
        job
    }

    /// Turns the pool's histograms on, for good, counting about one task
    /// in `one_in` (1: every one; the jobs queued before carry no stamp:
    /// their waits are not counted).
    pub(crate) fn enable_latency_histograms(self: &Arc<Self>, one_in: u32) {
        let weak: Weak<dyn LatencySource> = Arc::downgrade(self) as Weak<PoolShared>;
        self.latency.turn_on(weak, one_in);
    }
}

impl LatencySource for PoolShared {
    fn latency_metrics(&self) -> SchedulerMetrics {
        let summed = self.metrics();
        SchedulerMetrics {
            scheduler: format!("Scheduler::Pool {{ workers: {} }}", self.workers()),
            latency_histograms: self.latency.is_on(),
            sampling: self.latency.sampling(),
            wake_to_poll: summed.wake_to_poll,
            poll_durations: summed.poll_durations,
        }
    }

    fn short_name(&self) -> &'static str {
        "pool"
    }
}
