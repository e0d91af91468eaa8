//! Panics are not stalls (X4): the time a job spends in the process's
//! panic hook (a backtrace being symbolized) is the panic report's. The
//! hook is wrapped in place to note that time on the current runner (see
//! the parent module's docs).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Runner, CURRENT};
use crate::util::Unpoisoned;

/// The time one job (`seq`) spent in the panic hook.
#[derive(Default)]
pub(super) struct HookTime {
    /// The job's sequence number (odd); another value: nothing for the
    /// current job.
    seq: u64,
    /// Finished hook calls of that job.
    total: Duration,
    /// Set while the job is inside the hook.
    since: Option<Instant>,
    /// When the last finished call began and ended.
    last: Option<(Instant, Instant)>,
}

impl HookTime {
    /// For tests: job `seq`'s one finished call of the hook, from `began`
    /// to `ended`.
    #[cfg(test)]
    pub(super) fn finished(seq: u64, began: Instant, ended: Instant) -> HookTime {
        HookTime {
            seq,
            total: ended.saturating_duration_since(began),
            since: None,
            last: Some((began, ended)),
        }
    }

    /// The process was stopped for `stopped` within the monitor's sleep from
    /// `asleep_at` to `now` (B5): whatever of that stop fell inside a hook
    /// call is the stop's, excused on the job's stall clock already, and no
    /// longer hook time, or it would be subtracted twice. Every thread was
    /// stopped, so a call under way at the stop's start went on through it.
    pub(super) fn excuse(&mut self, stopped: Duration, asleep_at: Instant, now: Instant) {
        if let Some(since) = self.since {
            // Inside the hook now: its time so far loses the stop.
            self.since = Some(since.checked_add(stopped).map_or(now, |s| s.min(now)));
        } else if let Some((began, ended)) = self.last {
            if ended > asleep_at {
                // A call that ended during the sleep (right after the stop,
                // before this look): its time loses what of it fell in the
                // sleep, up to the stop.
                let in_sleep = ended.saturating_duration_since(began.max(asleep_at));
                self.total = self.total.saturating_sub(stopped.min(in_sleep));
                self.last = None;
            }
        }
    }
}

impl Runner {
    /// On the runner's thread, in the panic hook: the current job enters
    /// the hook. `None` outside a job.
    fn enter_panic_hook(&self) -> Option<InPanicHook<'_>> {
        let seq = self.seq.load(Ordering::Relaxed);
        if seq & 1 == 0 {
            return None;
        }
        {
            let mut time = self.in_panic_hook.lock().unpoisoned();
            if time.seq != seq {
                *time = HookTime {
                    seq,
                    ..HookTime::default()
                };
            }
            time.since = Some(Instant::now());
        }
        Some(InPanicHook(self))
    }

    /// How much of job `seq`'s time in the panic hook came before `at`: a
    /// call under way at `at`, or the last call if it ended after `at` (the
    /// hook returned while the monitor was between reading the time and
    /// reading this; at a job's first look, where its stall clock starts,
    /// that part is the clock's), counts only up to `at`. (Two calls ending
    /// after `at`, two panics in that moment, would count the first whole.)
    pub(super) fn panic_hook_time(&self, seq: u64, at: Instant) -> Duration {
        let time = self.in_panic_hook.lock().unpoisoned();
        if time.seq != seq {
            return Duration::ZERO;
        }
        let before = time.total
            + time
                .since
                .map_or(Duration::ZERO, |s| at.saturating_duration_since(s));
        let after = time.last.map_or(Duration::ZERO, |(began, ended)| {
            ended.saturating_duration_since(began.max(at))
        });
        before.saturating_sub(after)
    }
}

/// A job is inside the panic hook until this drops.
struct InPanicHook<'a>(&'a Runner);

impl Drop for InPanicHook<'_> {
    fn drop(&mut self) {
        let mut time = self.0.in_panic_hook.lock().unpoisoned();
        if let Some(since) = time.since.take() {
            let now = Instant::now();
            time.total += now.saturating_duration_since(since);
            time.last = Some((since, now));
        }
    }
}

/// Wraps the panic hook in place so that the time a job spends in it is
/// not counted as a stall (see the module docs). Keeps the hook it wraps
/// and calls it unchanged.
pub(super) fn wrap_panic_hook() {
    if std::thread::panicking() {
        // take_hook and set_hook panic on a panicking thread; stay unwrapped.
        return;
    }
    let wrapped = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let runner = CURRENT.get();
        // SAFETY: CURRENT points at a runner that outlives the scope of
        // `enter` on this thread (set by the worker loop or a context
        // dispatch); a panic hook runs on the panicking thread, inside that
        // scope if CURRENT is set.
        let runner = unsafe { runner.as_ref() };
        let _in_hook = runner.and_then(Runner::enter_panic_hook);
        wrapped(info);
    }));
}

#[cfg(all(test, not(gdex_loom)))]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    use super::super::{monitor, Runner};
    use super::HookTime;
    use crate::util::Unpoisoned;

    /// A runner with a 100 ms threshold that the monitor's thread does not
    /// know of (this test looks in its place), in a job that spent `hook`
    /// in the panic hook, ending at `ended`.
    fn runner_after_a_hook(hook: Duration, ended: Instant) -> std::sync::Arc<Runner> {
        let runner = Runner::unregistered("a test runner".into(), Duration::from_millis(100), None);
        runner.enter_job();
        let seq = runner.seq.load(Ordering::Relaxed);
        *runner.in_panic_hook.lock().unpoisoned() =
            HookTime::finished(seq, ended.checked_sub(hook).unwrap(), ended);
        runner
    }

    /// X4 with the stall clock (B5): the clock of a job starts at the
    /// monitor's first look at it, which can come long after the job did
    /// (the monitor woken late on a loaded machine, or the process stopped
    /// before it looked); the hook time before that look is no part of the
    /// clock and is not taken off it. A job first seen after 400 ms in the
    /// hook that then spins 250 ms is a stall: taking the 400 ms off left
    /// it unreported (`tests/stall.rs::a_stop_inside_the_panic_hook_is_excused_once`
    /// failed that way under load). Hook time after the first look is still
    /// taken off.
    #[test]
    fn hook_time_before_the_first_look_is_not_taken_off_the_clock() {
        let first_look = Instant::now();
        let runner = runner_after_a_hook(Duration::from_millis(400), first_look);
        monitor().check(&runner, first_look);
        monitor().check(&runner, first_look + Duration::from_millis(250));
        assert!(
            runner.track.lock().unpoisoned().reported,
            "250 ms spun after a hook that ended before the first look went unreported"
        );
        runner.leave_job();

        // Seen first, then 300 ms in the hook, then 50 ms more: no stall.
        let runner = runner_after_a_hook(Duration::ZERO, first_look);
        monitor().check(&runner, first_look);
        let after = first_look + Duration::from_millis(300);
        let seq = runner.seq.load(Ordering::Relaxed);
        *runner.in_panic_hook.lock().unpoisoned() = HookTime::finished(seq, first_look, after);
        monitor().check(&runner, after + Duration::from_millis(50));
        assert!(
            !runner.track.lock().unpoisoned().reported,
            "the hook's 300 ms after the first look were counted as a stall"
        );
        runner.leave_job();

        // A hook call that began after the look's time and ended before
        // the look read the hook's time (the monitor busy with the runners
        // before, or descheduled): it is after the clock's start, and
        // taken off. 100 ms later, 69 of them in the hook: no stall.
        let runner = runner_after_a_hook(Duration::ZERO, first_look);
        let seq = runner.seq.load(Ordering::Relaxed);
        *runner.in_panic_hook.lock().unpoisoned() = HookTime::finished(
            seq,
            first_look + Duration::from_millis(1),
            first_look + Duration::from_millis(70),
        );
        monitor().check(&runner, first_look);
        monitor().check(&runner, first_look + Duration::from_millis(100));
        assert!(
            !runner.track.lock().unpoisoned().reported,
            "the hook's 69 ms after the look's time were counted as a stall"
        );
        runner.leave_job();
    }
}
