//! A context scheduler's latency histograms (O1): its tasks' jobs stamped
//! as they are queued (`push`, `push_local`), and each job of its
//! dispatches timed.
//!
//! One writer at a time: the thread dispatching the scheduler, which holds
//! the context (GLib lets one thread iterate a context at a time, and its
//! lock orders one owner's writes before the next's), so the counts are
//! plain loads and stores.

use std::sync::{Arc, Weak};

use super::ContextShared;
use crate::diagnostics::latency::{LatencySource, Recorder, SchedulerMetrics, Switch};
use crate::task::Job;

/// A context scheduler's switch and counts.
#[derive(Default)]
pub(super) struct Histograms {
    switch: Switch,
    recorder: Recorder,
}

impl Histograms {
    /// Stamps a task's job being queued now, if the histograms are on.
    #[inline]
    pub(super) fn stamp(&self, job: &mut Job) {
        if self.switch.is_on() {
            job.stamp(crate::util::clock::now());
        }
    }

    /// Runs `job`, timed if `timed` (the switch, read once a dispatch);
    /// gives the clock's reading at its end either way (the dispatch's
    /// deadline needs it).
    #[inline]
    pub(super) fn run(&self, timed: bool, job: Job) -> u64 {
        if timed {
            return self.run_timed(job);
        }
        job.run();
        crate::util::clock::now()
    }

    /// Out of line: a dispatch's loop stays as it was when they are off.
    #[inline(never)]
    fn run_timed(&self, job: Job) -> u64 {
        self.recorder.time(job.queued_at(), move || job.run())
    }
}

impl ContextShared {
    /// A dispatch starts: whether it times its jobs, and if so, a sample
    /// for the views that chart the histograms (Sysprof's counters).
    #[inline]
    pub(super) fn latency_slice(&self) -> bool {
        let timed = self.latency.switch.is_on();
        if timed {
            crate::diagnostics::views::latency_slice(self);
        }
        timed
    }

    /// Turns this scheduler's histograms on, for good (the jobs queued
    /// before carry no stamp: their waits are not counted).
    pub(crate) fn enable_latency_histograms(&self) {
        let weak: Weak<dyn LatencySource> = self.me.clone() as Weak<ContextShared>;
        self.latency.switch.turn_on(weak);
    }

    /// With `GDEX_LATENCY_HISTOGRAMS=1`, a new scheduler's are on.
    pub(super) fn latency_by_default(self: &Arc<Self>) {
        if crate::diagnostics::latency::on_by_default() {
            self.enable_latency_histograms();
        }
    }
}

impl LatencySource for ContextShared {
    fn latency_metrics(&self) -> SchedulerMetrics {
        SchedulerMetrics {
            // As `Scheduler`'s `Debug` names it.
            scheduler: match (self.is_main, self.at_default_priority()) {
                (true, true) => "Scheduler::Main".to_owned(),
                (false, true) => format!("Scheduler::Context({:?})", self.context),
                (true, false) => format!(
                    "Scheduler::Main {{ priority: {} }}",
                    super::priority_name(self.priority)
                ),
                (false, false) => format!(
                    "Scheduler::Context {{ context: {:?}, priority: {} }}",
                    self.context,
                    super::priority_name(self.priority)
                ),
            },
            latency_histograms: self.latency.switch.is_on(),
            wake_to_poll: self.latency.recorder.wake_to_poll(),
            poll_durations: self.latency.recorder.poll_durations(),
        }
    }

    fn latency_switch(&self) -> &Switch {
        &self.latency.switch
    }

    fn short_name(&self) -> &'static str {
        if self.is_main {
            "main"
        } else {
            "context"
        }
    }
}
