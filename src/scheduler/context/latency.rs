//! A context scheduler's latency histograms (O1): its tasks' jobs stamped
//! as they are queued (`push`, `push_local`), and each job of its
//! dispatches timed with the clock reading the dispatch makes after each
//! job anyway (its deadline's).
//!
//! One writer at a time: the thread dispatching the scheduler, which holds
//! the context (GLib lets one thread iterate a context at a time, and its
//! lock orders one owner's writes before the next's), so the counts are
//! plain loads and stores.

use std::sync::{Arc, Weak};

use super::ContextShared;
use crate::diagnostics::latency::{LatencySource, Recorder, SchedulerMetrics, Switch, Timer};
use crate::task::Job;

/// A context scheduler's switch and counts (boxed: only the switch is on
/// the push's path).
#[derive(Default)]
pub(super) struct Histograms {
    switch: Switch,
    recorder: Box<Recorder>,
}

impl Histograms {
    /// Stamps a task's job being queued now, if the histograms are on and
    /// count it (sampled, about one queueing in `n`).
    #[inline]
    pub(super) fn stamp(&self, job: &mut Job) {
        let sampling = self.switch.load();
        if sampling.is_on() && crate::diagnostics::sampling::stamp_this_queueing(sampling) {
            job.stamp(crate::util::clock::now());
        }
    }

    /// Runs `job`, timed if the dispatch has a timer; gives the clock's
    /// reading at its end either way (the dispatch's deadline needs it).
    #[inline]
    pub(super) fn run(timer: &mut Option<Timer<'_>>, job: Job) -> u64 {
        match timer {
            Some(timer) => Self::run_timed(timer, job),
            None => {
                job.run();
                crate::util::clock::now()
            }
        }
    }

    /// Out of line: a dispatch's loop stays as it was when they are off.
    #[inline(never)]
    fn run_timed(timer: &mut Timer<'_>, job: Job) -> u64 {
        timer.run(job.queued_at(), move || job.run())
    }
}

impl ContextShared {
    /// A dispatch starts, at `now` (a clock reading): a timer for its jobs
    /// if the histograms are on, and then a sample for the views that
    /// chart them (Sysprof's counters).
    #[inline]
    pub(super) fn latency_slice(&self, now: u64) -> Option<Timer<'_>> {
        if !self.latency.switch.is_on() {
            return None;
        }
        crate::diagnostics::views::latency_slice();
        Some(Timer::new(&self.latency.recorder, Some(now)))
    }

    /// Turns this scheduler's histograms on, for good, counting about one
    /// task in `one_in` (1: every one; the jobs queued before carry no
    /// stamp: their waits are not counted).
    pub(crate) fn enable_latency_histograms(&self, one_in: u32) {
        let weak: Weak<dyn LatencySource> = self.me.clone() as Weak<ContextShared>;
        self.latency.switch.turn_on(weak, one_in);
    }

    /// With `GDEX_LATENCY_HISTOGRAMS` set, a new scheduler's are on.
    pub(super) fn latency_by_default(self: &Arc<Self>) {
        match crate::diagnostics::latency::on_by_default() {
            0 => {}
            one_in => self.enable_latency_histograms(one_in),
        }
    }
}

impl LatencySource for ContextShared {
    fn latency_metrics(&self) -> SchedulerMetrics {
        SchedulerMetrics {
            // As `Scheduler`'s `Debug` names it.
            scheduler: format!("{self:?}"),
            latency_histograms: self.latency.switch.is_on(),
            sampling: self.latency.switch.sampling(),
            wake_to_poll: self.latency.recorder.wake_to_poll(),
            poll_durations: self.latency.recorder.poll_durations(),
        }
    }

    fn short_name(&self) -> &'static str {
        if self.is_main {
            "main"
        } else {
            "context"
        }
    }
}
