//! Time: [`sleep`], [`timeout`], [`timeout_at`] (and their [`Elapsed`]),
//! [`reject_after`].
//!
//! A timer is one ready-time `GSource` attached to the context of the
//! scheduler that polls it: a pool worker's own context, the main context,
//! a context scheduler's context, or the thread-default context. So it works
//! in pool tasks, main tasks and fibers alike. A timer follows its task: when
//! it is polled on another context than the one it waits on (its task moved
//! to another worker, say because its first worker is stuck in a long poll or
//! in [`blocking::blocking`](crate::blocking::blocking), or that worker's pool
//! was shut down), it moves its source there, or resolves at once if its
//! deadline has passed. A task that waits only on its timer, on a worker
//! that then sits in one long poll, is not held either: the watchdog's
//! monitor raises the overdue timers of a worker stuck in one poll for a
//! millisecond, and an idle peer runs the task (see `pool::timers`). A
//! future polled where no context runs (a plain thread) gets its timer from
//! a small `gdex-timers` thread.
//!
//! (Raw GLib sources that a task attaches itself, such as a
//! `glib::timeout_future`, stay on the context they were attached to, as in
//! libdex: on a pool, that worker's.)
//!
//! A timer polled on a context that a [`TestClock`](crate::TestClock)
//! drives waits on that clock instead of a source (see `clock`), and
//! [`interval`] ticks on it too.
//!
//! A timer that fires spends one unit of its task's cooperative budget
//! (P11): a loop over timers already due yields as one over ready channels
//! does.
//!
//! Deadlines are kept in microseconds on GLib's monotonic clock, but GLib
//! wakes a sleeping context with millisecond precision: a timer fires up to
//! about a millisecond late when its context sleeps (a 100 µs sleep takes
//! about 1.1 ms), and on time while the context is busy and checks it.

use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::error::Elapsed;
use crate::future::clock::{self, ClockInner};
use crate::source::{Hooks, SourceRef};
use crate::task::flag::Flag;
use crate::{Error, Scheduler};

/// A one-shot timer on a GLib context, or on a [`TestClock`](crate::TestClock).
pub(crate) struct Timer {
    /// Microseconds on GLib's monotonic clock (or, once on a test clock,
    /// on that clock's time, which has the same scale).
    deadline: i64,
    /// The duration asked for, in µs: a timer made where no test clock
    /// runs and first polled where one does counts it from that poll.
    length: i64,
    fired: Arc<Flag>,
    waiting: Waiting,
}

enum Waiting {
    /// Not polled yet, or polled only when due.
    No,
    /// On a source of `context`, and on a pool worker in the worker's book
    /// of timers (see `pool::timers`).
    Source {
        source: SourceRef,
        context: glib::MainContext,
        /// Held, never read: the entry lives while the timer waits here.
        _noted: Option<Arc<crate::pool::timers::Noted>>,
    },
    /// On a test clock; `entry` is its number in the clock's book once it
    /// waits there (`None`: not yet, or it was due at its first poll).
    Clock {
        clock: Arc<ClockInner>,
        entry: Option<u64>,
    },
}

impl Hooks for Arc<Flag> {
    fn dispatch(&self, _source: *mut glib_sys::GSource) -> bool {
        self.raise();
        false
    }
}

fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX / 2)
}

impl Timer {
    pub(crate) fn after(duration: Duration) -> Timer {
        Timer::after_micros(micros(duration))
    }

    /// A timer `length` µs from now; a negative `length` is a deadline
    /// that long ago (due, but an interval keeps its phase from it).
    fn after_micros(length: i64) -> Timer {
        // Made where a test clock runs: on its time from now.
        if let Some(clock) = clock_here() {
            return Timer {
                deadline: clock.now_us().saturating_add(length),
                length,
                fired: Arc::default(),
                waiting: Waiting::Clock { clock, entry: None },
            };
        }
        Timer {
            deadline: glib::monotonic_time().saturating_add(length),
            length,
            fired: Arc::default(),
            waiting: Waiting::No,
        }
    }

    fn at(deadline: Instant) -> Timer {
        let now = match clock_here() {
            Some(clock) => clock.now(),
            None => Instant::now(),
        };
        // A deadline that has passed stays where it was: `interval_at`
        // with a start in the past ticks first at that start, and then in
        // phase with it (as tokio's does).
        Timer::after_micros(match deadline.checked_duration_since(now) {
            Some(ahead) => micros(ahead),
            None => -micros(now - deadline),
        })
    }

    /// On its test clock, the clock's time; otherwise GLib's monotonic time.
    fn now(&self) -> i64 {
        match &self.waiting {
            Waiting::Clock { clock, .. } => clock.now_us(),
            _ => glib::monotonic_time(),
        }
    }

    /// The `Instant` of `deadline`, given the timer's time `now`.
    fn instant_at(&self, deadline: i64, now: i64) -> Instant {
        match &self.waiting {
            Waiting::Clock { clock, .. } => clock.instant_at(deadline),
            _ => {
                let ago = Duration::from_micros(now.saturating_sub(deadline).max(0) as u64);
                let real = Instant::now();
                real.checked_sub(ago).unwrap_or(real)
            }
        }
    }

    /// Sets the deadline anew (an interval's next tick): `deadline` on the
    /// timer's clock's scale. Leaves what it waited on.
    fn reset(&mut self, deadline: i64, length: i64) {
        self.stop_waiting();
        self.deadline = deadline;
        self.length = length;
        self.fired = Arc::default();
    }

    fn stop_waiting(&mut self) {
        match &mut self.waiting {
            Waiting::No => {}
            Waiting::Source { source, .. } => {
                source.destroy();
                self.waiting = Waiting::No;
            }
            Waiting::Clock { clock, entry } => {
                if let Some(entry) = entry.take() {
                    clock.forget(self.deadline, entry);
                }
            }
        }
    }

    fn poll_fired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.fired.poll_raised(cx) {
            return Poll::Ready(());
        }
        if let Waiting::Clock { clock, entry } = &mut self.waiting {
            if entry.is_some() {
                return Poll::Pending; // its clock raises it
            }
            return match clock.note(self.deadline, &self.fired) {
                None => Poll::Ready(()), // due
                Some(noted) => {
                    *entry = Some(noted);
                    clock.waits_on(&waiting_context());
                    if self.fired.poll_raised(cx) {
                        Poll::Ready(())
                    } else {
                        Poll::Pending
                    }
                }
            };
        }
        let here = waiting_context();
        if matches!(&self.waiting, Waiting::Source { context, .. } if *context == here) {
            return Poll::Pending;
        }
        // First poll, or polled on another context than the one we wait on:
        // our task moved (its first worker may be stuck in one poll, or
        // gone). Wait here instead.
        let first = matches!(self.waiting, Waiting::No);
        self.stop_waiting();
        if first {
            // First polled where a test clock runs: its whole length on
            // that clock, from now.
            if let Some(clock) = clock::any_driven()
                .then(|| clock::for_context(&here))
                .flatten()
            {
                self.deadline = clock.now_us().saturating_add(self.length);
                self.waiting = Waiting::Clock { clock, entry: None };
                return self.poll_fired(cx);
            }
        }
        if glib::monotonic_time() >= self.deadline {
            return Poll::Ready(());
        }
        let source = SourceRef::attach(
            &here,
            Box::new(self.fired.clone()),
            false,
            c"gdex timer",
            glib::ffi::G_PRIORITY_DEFAULT,
            false,
        );
        source.set_ready_time(self.deadline);
        // On a pool worker: in case the worker gets stuck in one poll.
        let noted = crate::pool::note_timer(self.deadline, &self.fired);
        self.waiting = Waiting::Source {
            source,
            context: here,
            _noted: noted,
        };
        if self.fired.poll_raised(cx) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.stop_waiting();
    }
}

/// The test clock of the context a timer polled here waits on, if a clock
/// drives it. One relaxed load while no clock drives any context.
fn clock_here() -> Option<Arc<ClockInner>> {
    if !clock::any_driven() {
        return None;
    }
    clock::for_context(&waiting_context())
}

/// The time now on the clock that drives the context a timer polled here
/// waits on (a pool task's worker, an attached context): the paused time
/// of a [`TestClock`](crate::TestClock), or [`Instant::now`] where no
/// clock drives the context. Code that computes what is left of a deadline
/// it set with a gdex timer should read this, not `Instant::now`, to be
/// testable on a paused clock.
///
/// ```
/// use std::time::Duration;
///
/// let clock = gdex::TestClock::paused();
/// let pool = gdex::ThreadPool::builder().workers(1).clock(&clock).build().unwrap();
/// let task = pool.scheduler().spawn(async {
///     let start = gdex::now();
///     gdex::sleep(Duration::from_secs(3600)).await;
///     gdex::now() - start
/// });
/// clock.advance(Duration::from_secs(3600)); // once the task waits
/// assert_eq!(gdex::block_on(task).unwrap(), Duration::from_secs(3600));
/// ```
pub fn now() -> Instant {
    match clock_here() {
        Some(clock) => clock.now(),
        None => Instant::now(),
    }
}

/// The context a timer (or an fd wait) polled here attaches to.
pub(crate) fn waiting_context() -> glib::MainContext {
    // Parked in `wait_for`: a context pushed on this thread is not iterated
    // while it waits; the `gdex-timers` thread's is.
    let parked = crate::current::holds(crate::current::Role::ParkedWait);
    if let Some(context) = glib::MainContext::thread_default().filter(|_| !parked) {
        return context; // a pool worker's, or one the thread pushed
    }
    if let Some(context) = Scheduler::thread_default()
        .filter(|_| !parked)
        .and_then(|s| s.context())
    {
        return context; // the main context on its owner, a context scheduler's
    }
    static TIMERS: OnceLock<glib::MainContext> = OnceLock::new();
    TIMERS
        .get_or_init(|| {
            let context = glib::MainContext::new();
            let thread_context = context.clone();
            std::thread::Builder::new()
                .name("gdex-timers".into())
                .spawn(move || {
                    let main_loop = glib::MainLoop::new(Some(&thread_context), false);
                    thread_context
                        .with_thread_default(|| main_loop.run())
                        .expect("a fresh context is free to push");
                })
                .expect("gdex: cannot start the gdex-timers thread");
            context
        })
        .clone()
}

/// Resolves after `duration`.
///
/// ```
/// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
/// let task = pool.scheduler().spawn(async {
///     let start = std::time::Instant::now();
///     gdex::sleep(std::time::Duration::from_millis(5)).await;
///     start.elapsed()
/// });
/// assert!(gdex::block_on(task).unwrap() >= std::time::Duration::from_millis(5));
/// ```
pub fn sleep(duration: Duration) -> Sleep {
    Sleep {
        timer: Timer::after(duration),
    }
}

/// The future of [`sleep`].
#[must_use = "futures do nothing unless awaited"]
pub struct Sleep {
    timer: Timer,
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let timer = &mut self.get_mut().timer;
        crate::task::coop::poll_leaf(cx, |cx| timer.poll_fired(cx))
    }
}

impl std::fmt::Debug for Sleep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline_us", &self.timer.deadline)
            .finish()
    }
}

/// A future that only rejects: with [`Error::TimedOut`] once `duration` has
/// passed (libdex's `dex_timeout_new_*`). Its value type is whatever the
/// futures it races with need, so it fits in [`first`](crate::first). To
/// bound a future by a time, use [`timeout`].
///
/// ```
/// let t = gdex::reject_after::<u32>(std::time::Duration::from_millis(1));
/// assert!(matches!(gdex::block_on(t), Err(gdex::Error::TimedOut)));
/// ```
pub fn reject_after<T>(duration: Duration) -> RejectAfter<T> {
    RejectAfter {
        timer: Timer::after(duration),
        _value: PhantomData,
    }
}

/// The future of [`reject_after`].
#[must_use = "futures do nothing unless awaited"]
pub struct RejectAfter<T> {
    timer: Timer,
    _value: PhantomData<fn() -> T>,
}

impl<T> Future for RejectAfter<T> {
    type Output = Result<T, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let timer = &mut self.get_mut().timer;
        crate::task::coop::poll_leaf(cx, |cx| timer.poll_fired(cx)).map(|()| Err(Error::TimedOut))
    }
}

impl<T> std::fmt::Debug for RejectAfter<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RejectAfter")
            .field("deadline_us", &self.timer.deadline)
            .finish()
    }
}

/// Gives `future`'s output if it arrives within `duration`; otherwise drops
/// `future` (cancelling it) and gives [`Elapsed`]. tokio's `timeout`, in
/// tokio's shape: `Result<F::Output, Elapsed>`, for any output.
///
/// A future that has errors of its own (a [`Task`](crate::Task), a GIO
/// call) gives a `Result` inside the `Result`: `?` takes both apart, since
/// [`Elapsed`] converts into [`Error::TimedOut`] and into an
/// [`std::io::Error`] of kind [`TimedOut`](std::io::ErrorKind::TimedOut).
/// `future` is polled first, so a value that is ready passes through even
/// at a deadline that has passed.
///
/// ```
/// use std::time::Duration;
///
/// // Any output: a `bool`, an `io::Result`, a task's `Result`.
/// let quick = gdex::block_on(gdex::timeout(Duration::from_secs(5), async { true }));
/// assert_eq!(quick, Ok(true));
/// let slow = gdex::sleep(Duration::from_secs(60));
/// let r = gdex::block_on(gdex::timeout(Duration::from_millis(5), slow));
/// assert_eq!(r.unwrap_err().to_string(), "deadline has elapsed");
///
/// // Both errors with `?`: the deadline's, then the task's.
/// async fn doubled() -> Result<u32, gdex::Error> {
///     let task = gdex::spawn(async { 21 });
///     Ok(gdex::timeout(Duration::from_secs(5), task).await?? * 2)
/// }
/// assert_eq!(gdex::block_on(doubled()).unwrap(), 42);
///
/// // Into an `io::Result` the same way.
/// async fn read(path: &str) -> std::io::Result<Vec<u8>> {
///     gdex::timeout(Duration::from_secs(5), async { std::fs::read(path) }).await?
/// }
/// let missing = gdex::block_on(read("/no/such/file")).unwrap_err();
/// assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
/// ```
pub fn timeout<F>(duration: Duration, future: F) -> Timeout<F::IntoFuture>
where
    F: IntoFuture,
{
    Timeout::new(Timer::after(duration), future.into_future())
}

/// [`timeout`] with a deadline instead of a duration: tokio's
/// `timeout_at`, with a [`std::time::Instant`]. A deadline that has passed
/// still polls `future` once.
///
/// ```
/// use std::time::{Duration, Instant};
///
/// let deadline = Instant::now() + Duration::from_millis(5);
/// let r = gdex::block_on(gdex::timeout_at(deadline, std::future::pending::<u8>()));
/// assert!(r.is_err() && Instant::now() >= deadline);
/// let past = Instant::now();
/// assert_eq!(gdex::block_on(gdex::timeout_at(past, async { 7 })), Ok(7));
/// ```
pub fn timeout_at<F>(deadline: Instant, future: F) -> Timeout<F::IntoFuture>
where
    F: IntoFuture,
{
    Timeout::new(Timer::at(deadline), future.into_future())
}

pin_project_lite::pin_project! {
    /// The future of [`timeout`] and [`timeout_at`].
    #[must_use = "futures do nothing unless awaited"]
    pub struct Timeout<F> {
        // `None` once dropped in place (`Pin::set`) at the deadline.
        #[pin]
        future: Option<F>,
        timer: Timer,
    }
}

impl<F> Timeout<F> {
    fn new(timer: Timer, future: F) -> Self {
        Timeout {
            future: Some(future),
            timer,
        }
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut future = this.future;
        let Some(inner) = future.as_mut().as_pin_mut() else {
            return Poll::Ready(Err(Elapsed::new()));
        };
        let had_budget = crate::task::coop::has_budget_remaining();
        if let Poll::Ready(value) = inner.poll(cx) {
            return Poll::Ready(Ok(value));
        }
        // The deadline spends a unit when it fires (P11), unless `future`
        // spent the last one in this very poll: then it is checked anyway
        // (as tokio's `timeout` does), or a future that keeps the budget
        // spent would never be timed out.
        let fired = if had_budget && !crate::task::coop::has_budget_remaining() {
            this.timer.poll_fired(cx)
        } else {
            crate::task::coop::poll_leaf(cx, |cx| this.timer.poll_fired(cx))
        };
        match fired {
            Poll::Ready(()) => {
                // Cancel the work now, not when the wrapper goes.
                future.set(None);
                Poll::Ready(Err(Elapsed::new()))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<F> std::fmt::Debug for Timeout<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timeout")
            .field("deadline_us", &self.timer.deadline)
            .field("dropped", &self.future.is_none())
            .finish()
    }
}

/// A stream of ticks `period` apart (tokio's `interval`): the first tick
/// completes at once, the next ones one period after the tick before.
///
/// A tick that comes late (its task was busy, or the thread slept past
/// it) is given at once, and the ticks missed meanwhile are skipped: the
/// next one keeps the phase, at the first multiple of `period` after now
/// (tokio's `MissedTickBehavior::Skip`; GLib's `g_timeout_add` drifts
/// instead). On a [`TestClock`](crate::TestClock), an advance by ten
/// periods gives one tick, not ten.
///
/// ```
/// use futures::StreamExt;
/// use std::time::Duration;
///
/// let ticks = gdex::interval(Duration::from_millis(1)).take(3);
/// let times: Vec<_> = gdex::block_on(ticks.collect());
/// assert!(times[2] - times[0] >= Duration::from_millis(2));
/// ```
///
/// # Panics
/// If `period` is zero.
pub fn interval(period: Duration) -> Interval {
    Interval::new(Timer::after(Duration::ZERO), period)
}

/// [`interval`] whose first tick is at `start` (tokio's `interval_at`).
///
/// # Panics
/// If `period` is zero.
pub fn interval_at(start: Instant, period: Duration) -> Interval {
    Interval::new(Timer::at(start), period)
}

/// The stream of [`interval`] and [`interval_at`]: a
/// [`Stream`](futures::Stream) of the `Instant`s the ticks were due at.
#[must_use = "streams do nothing unless polled"]
pub struct Interval {
    timer: Timer,
    period: i64,
}

impl Interval {
    fn new(timer: Timer, period: Duration) -> Interval {
        assert!(
            !period.is_zero(),
            "gdex::interval: the period must be above zero (to run on every \
             turn of the loop, use gdex::yield_now in a loop)"
        );
        Interval {
            timer,
            period: micros(period).max(1),
        }
    }

    /// Waits for the next tick; gives the `Instant` it was due at.
    pub async fn tick(&mut self) -> Instant {
        std::future::poll_fn(|cx| self.poll_tick(cx)).await
    }

    /// Polls for the next tick (for hand-written futures).
    pub fn poll_tick(&mut self, cx: &mut Context<'_>) -> Poll<Instant> {
        let timer = &mut self.timer;
        match crate::task::coop::poll_leaf(cx, |cx| timer.poll_fired(cx)) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                let due = self.timer.deadline;
                let now = self.timer.now();
                let at = self.timer.instant_at(due, now);
                // The next tick after now, in phase with this one.
                let late = now.saturating_sub(due).max(0);
                let next = due.saturating_add((late / self.period + 1).saturating_mul(self.period));
                self.timer.reset(next, next.saturating_sub(now));
                Poll::Ready(at)
            }
        }
    }

    /// The time between ticks.
    pub fn period(&self) -> Duration {
        Duration::from_micros(self.period as u64)
    }

    /// The next tick comes one period from now.
    pub fn reset(&mut self) {
        let now = self.timer.now();
        self.timer
            .reset(now.saturating_add(self.period), self.period);
    }
}

impl futures::Stream for Interval {
    type Item = Instant;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Instant>> {
        self.get_mut().poll_tick(cx).map(Some)
    }
}

impl std::fmt::Debug for Interval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interval")
            .field("period", &self.period())
            .field("next_us", &self.timer.deadline)
            .finish()
    }
}
