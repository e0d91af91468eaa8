//! B6: the stall monitor understands nesting. A nested loop (a `block_on`
//! of the context being dispatched, a nested dispatch of the same
//! scheduler) suspends the job that runs it: the monitor sees the runner
//! between jobs meanwhile, and the job goes on after with its name and its
//! stall clock.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Runner, Track, CURRENT};
use crate::util::Unpoisoned;

impl Runner {
    /// On the runner's thread: the job running now is suspended while a
    /// nested loop iterates (B6), until the guard drops. Meanwhile the
    /// runner is between jobs to the monitor (what the nested loop runs is
    /// its own jobs, each with its own stall clock), the job's name is
    /// hidden, and its stall clock stops; after, the job goes on with its
    /// name and the time it had run before. `None` outside a job.
    pub(crate) fn suspend(&self) -> Option<Suspended<'_>> {
        let mut track = self.track.lock().unpoisoned();
        // Under the lock, as the monitor's `check` reads it: the sequence
        // and the monitor's track of it change together.
        let seq = self.seq.load(Ordering::Relaxed);
        if seq & 1 == 0 {
            return None;
        }
        let now = Instant::now();
        let (ran, reported) = match (track.seq == seq, track.since) {
            // Its time on the clock, less what it spent in the panic hook
            // since (X4): after the nested loop its sequence is a new one,
            // whose hook time starts from nothing.
            (true, Some(since)) => {
                let in_hook = self
                    .panic_hook_time(seq, now)
                    .saturating_sub(track.hook_before);
                (
                    now.saturating_duration_since(since).saturating_sub(in_hook),
                    track.reported,
                )
            }
            // Not seen by the monitor yet: it began less than a tick ago.
            _ => (Duration::ZERO, false),
        };
        self.seq.store(seq + 1, Ordering::Relaxed);
        *track = Track {
            seq: seq + 1,
            ..Track::default()
        };
        drop(track);
        let name = self.name.lock().unpoisoned().take();
        Some(Suspended {
            runner: self,
            ran,
            reported,
            name,
        })
    }
}

/// A job suspended while a nested loop iterates ([`Runner::suspend`]); it
/// goes on when this drops.
pub(crate) struct Suspended<'a> {
    runner: &'a Runner,
    /// How long the job had run before (as the monitor saw it).
    ran: Duration,
    /// Its stall was reported already.
    reported: bool,
    name: Option<Arc<str>>,
}

impl Drop for Suspended<'_> {
    fn drop(&mut self) {
        let runner = self.runner;
        // (The nested loop's jobs are over: their guards dropped first.)
        *runner.name.lock().unpoisoned() = self.name.take();
        {
            let mut track = runner.track.lock().unpoisoned();
            let seq = runner.seq.load(Ordering::Relaxed) | 1;
            runner.seq.store(seq, Ordering::Relaxed);
            let now = Instant::now();
            *track = Track {
                seq,
                since: Some(now.checked_sub(self.ran).unwrap_or(now)),
                reported: self.reported,
                resumed: Some(now),
                // The job's sequence is a new one: its hook time starts
                // again from nothing.
                hook_before: Duration::ZERO,
            };
        }
        // A nested dispatch of this runner ended its own slice (`idle`):
        // the outer slice goes on, watched.
        runner.busy();
    }
}

/// [`suspend_current`], only if this thread's runner is `runner`: a nested
/// dispatch of the same scheduler (B6). A nested loop of another context
/// blocks the outer one, and still counts.
pub(crate) fn suspend_current_of(runner: &Runner) -> Option<Suspended<'static>> {
    if !std::ptr::eq(CURRENT.get(), runner) {
        return None;
    }
    suspend_current()
}

/// Suspends the job running on this thread's runner while a nested loop
/// iterates (B6), until the guard drops: see [`Runner::suspend`].
pub(crate) fn suspend_current() -> Option<Suspended<'static>> {
    let runner = CURRENT.get();
    // SAFETY: CURRENT points at a runner that outlives the scope of `enter`
    // on this thread (the worker loop, a context dispatch), which encloses
    // the nested loop that holds the guard: the guard drops first. The
    // 'static lifetime never leaves that scope (callers hold the guard on
    // their stack for the nested loop's duration).
    let runner: Option<&'static Runner> = unsafe { runner.as_ref() };
    runner.and_then(Runner::suspend)
}

#[cfg(all(test, not(gdex_loom)))]
mod tests {
    use std::time::{Duration, Instant};

    use super::super::{monitor, Runner};
    use crate::util::Unpoisoned;

    /// Where the running job's stall clock starts.
    fn clock_start(runner: &Runner) -> Instant {
        runner
            .track
            .lock()
            .unpoisoned()
            .since
            .expect("a running job")
    }

    /// B6 with B5: a job that goes on after a nested loop keeps the time it
    /// had run before, even when the monitor's next look excuses a stop of
    /// the process that came before the job went on (the nested loop's job
    /// spanned it; the outer one went on right after, before that look).
    /// The stop was no part of the outer job's clock, which restarted after
    /// it: the excuse shifted the restarted clock by the whole stop all the
    /// same, to the look itself, and the 80 ms it had run were lost. A
    /// stop after it went on is still excused.
    #[test]
    fn a_job_that_goes_on_after_a_stop_keeps_its_time() {
        // Not watched (no threshold, no worker): the monitor's thread
        // never looks at it; this test looks in its place.
        let runner = Runner::new("a test runner".into(), Duration::ZERO, None);
        runner.enter_job();
        let ran = Duration::from_millis(80);
        // The monitor's look that first saw the job, 80 ms ago.
        let first_look = Instant::now().checked_sub(ran).unwrap();
        monitor().check(&runner, first_look);
        // The monitor goes to sleep, the process is stopped for 400 ms
        // meanwhile; the nested loop then ends and the job goes on.
        let asleep_at = Instant::now()
            .checked_sub(Duration::from_millis(500))
            .unwrap();
        let nested = runner.suspend().expect("inside a job");
        drop(nested);
        // The monitor's look, late by the stop.
        let now = Instant::now();
        runner.excuse(Duration::from_millis(400), asleep_at, now);
        let since = clock_start(&runner);
        let kept = now.saturating_duration_since(since);
        assert!(
            kept >= ran,
            "the job went on with {kept:?} of the {ran:?} it had run"
        );
        // A stop after the job went on is on its clock, and excused: a
        // look 450 ms after it went on, late by a 400 ms stop.
        let before = runner.track.lock().unpoisoned().since.unwrap();
        let later_look = now + Duration::from_millis(450);
        runner.excuse(Duration::from_millis(400), now, later_look);
        let since = runner.track.lock().unpoisoned().since.unwrap();
        assert_eq!(since - before, Duration::from_millis(400));
        runner.leave_job();
    }

    /// B6 with X4: a job that spent time in the panic hook, then ran a
    /// nested loop, goes on with the time it ran outside the hook: after
    /// the loop its hook time starts again from nothing, so the hook's
    /// time kept in `ran` would count as a stall.
    #[test]
    fn a_job_that_goes_on_after_a_nested_loop_keeps_no_hook_time() {
        let runner = Runner::new("a test runner".into(), Duration::ZERO, None);
        runner.enter_job();
        let seq = runner.seq.load(std::sync::atomic::Ordering::Relaxed);
        // First seen 400 ms ago; 300 ms of it in the hook since.
        let first_look = Instant::now()
            .checked_sub(Duration::from_millis(400))
            .unwrap();
        monitor().check(&runner, first_look);
        let hook_began = first_look + Duration::from_millis(50);
        *runner.in_panic_hook.lock().unpoisoned() = super::super::HookTime::finished(
            seq,
            hook_began,
            hook_began + Duration::from_millis(300),
        );
        drop(runner.suspend().expect("inside a job"));
        let since = clock_start(&runner);
        // The clock kept the time since the first look less the 300 ms:
        // it restarted at least 300 ms after that look (however late this
        // thread ran).
        assert!(
            since >= first_look + Duration::from_millis(300),
            "the job went on with {:?} more on its clock: the 300 ms in the hook counted",
            (first_look + Duration::from_millis(300)).saturating_duration_since(since)
        );
        runner.leave_job();
    }
}
