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
use crate::source::{Hooks, SourceRef};
use crate::task::flag::Flag;
use crate::{Error, Scheduler};

/// A one-shot timer on a GLib context.
struct Timer {
    /// Microseconds on GLib's monotonic clock.
    deadline: i64,
    fired: Arc<Flag>,
    /// The source it waits on, that source's context, and on a pool worker
    /// its entry in the worker's book of timers (see `pool::timers`).
    source: Option<(
        SourceRef,
        glib::MainContext,
        Option<Arc<crate::pool::timers::Noted>>,
    )>,
}

impl Hooks for Arc<Flag> {
    fn dispatch(&self, _source: *mut glib_sys::GSource) -> bool {
        self.raise();
        false
    }
}

impl Timer {
    fn after(duration: Duration) -> Timer {
        let micros = i64::try_from(duration.as_micros()).unwrap_or(i64::MAX / 2);
        Timer {
            deadline: glib::monotonic_time().saturating_add(micros),
            fired: Arc::default(),
            source: None,
        }
    }

    fn at(deadline: Instant) -> Timer {
        Timer::after(deadline.saturating_duration_since(Instant::now()))
    }

    fn poll_fired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.fired.poll_raised(cx) {
            return Poll::Ready(());
        }
        let here = waiting_context();
        if matches!(&self.source, Some((_, home, _)) if *home == here) {
            return Poll::Pending;
        }
        // First poll, or polled on another context than the one we wait on:
        // our task moved (its first worker may be stuck in one poll, or
        // gone). Wait here instead.
        if let Some((source, _, _)) = self.source.take() {
            source.destroy();
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
        self.source = Some((source, here, noted));
        if self.fired.poll_raised(cx) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        if let Some((source, _, _)) = &self.source {
            source.destroy();
        }
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
