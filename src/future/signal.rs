//! Unix signals: [`unix_signal`], a future of one arrival, and
//! [`unix_signals`], a stream of them that keeps the signal handled for its
//! whole life.
//!
//! Both watch the signal with a GLib `g_unix_signal_source_new` source on
//! the default main context, so they only fire while a thread iterates that
//! context. **Nobody iterating.** While a signal future
//! or stream waits, a thread, `gdex-signal-watch`, checks every
//! [`idle_warn_delay`] (3 s; `GDEX_MAIN_IDLE_WARN_MS`) that the default main
//! context still answers: it marks a probe source ready there (one wake-up
//! of the loop) and, if nobody has dispatched it by the next check, says so
//! with one `g_warning`, once until the context is iterated again. It sleeps
//! for good while nothing waits.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::thread;
use std::time::Duration;

use futures::task::AtomicWaker;
use glib::translate::ToGlibPtr;
use glib_sys as ffi;

use crate::scheduler::context::idle_warn_delay;
use crate::source::{Hooks, SourceRef};
use crate::task::flag::Flag;

use crate::util::g_unix_signal_source_new;

/// The signals GLib can watch (`g_unix_signal_source_new`).
const WATCHABLE: [(libc::c_int, &str); 6] = [
    (libc::SIGHUP, "SIGHUP"),
    (libc::SIGINT, "SIGINT"),
    (libc::SIGTERM, "SIGTERM"),
    (libc::SIGUSR1, "SIGUSR1"),
    (libc::SIGUSR2, "SIGUSR2"),
    (libc::SIGWINCH, "SIGWINCH"),
];

/// The name of `signum`, or a panic naming the signals GLib can watch.
fn watchable(what: &str, signum: i32) -> &'static str {
    match WATCHABLE.iter().find(|(s, _)| *s == signum) {
        Some(&(_, name)) => name,
        None => panic!(
            "gdex::{what}({signum}): GLib can only watch SIGHUP, SIGINT, SIGTERM, SIGUSR1, \
             SIGUSR2 and SIGWINCH"
        ),
    }
}

/// A new GLib watch of `signum` on the default main context, calling
/// `callback` with one strong count of `data`, released when the source is
/// finalized.
///
/// # Safety
/// `signum` must be one of [`WATCHABLE`]; `callback` must treat its data as
/// a `*const T` it only borrows, and `release` must be `release_arc::<T>`.
unsafe fn watch<T: Send + Sync>(
    signum: i32,
    name: &str,
    data: &Arc<T>,
    callback: unsafe extern "C" fn(ffi::gpointer) -> ffi::gboolean,
    release: unsafe extern "C" fn(ffi::gpointer),
) -> SourceRef {
    // SAFETY: `signum` is one GLib accepts (caller's promise), so this
    // returns a new source we own. The callback data is one strong count of
    // `data`, released by `release` when the source is finalized; the
    // callback only reads it. `T: Send + Sync`, so calling back and
    // releasing on any thread is sound, as `SourceRef::from_raw` requires.
    unsafe {
        let raw = g_unix_signal_source_new(signum);
        assert!(!raw.is_null(), "g_unix_signal_source_new({name}) failed");
        ffi::g_source_set_callback(
            raw,
            Some(callback),
            Arc::into_raw(data.clone()) as ffi::gpointer,
            Some(release),
        );
        ffi::g_source_set_name(raw, c"gdex unix signal".as_ptr());
        ffi::g_source_attach(raw, glib::MainContext::default().to_glib_none().0);
        SourceRef::from_raw(raw)
    }
}

unsafe extern "C" fn release_arc<T>(data: ffi::gpointer) {
    // SAFETY: GLib calls this once, with the data given in `watch`.
    drop(unsafe { Arc::from_raw(data as *const T) });
}

/// Resolves when the process receives `signum` (libdex's
/// `dex_unix_signal_new`). The watch starts now, so a signal that arrives
/// before the first poll is not missed; GLib handles the signal from then
/// on (the default action, such as SIGINT ending the process, no longer
/// happens) until the future resolves or is dropped.
///
/// **One arrival only.** Once it has resolved or been dropped, and no other
/// watch of the signal remains, GLib gives the signal its default action
/// back: a second SIGHUP that comes before the next `unix_signal` is made
/// ends the process. To handle a signal again and again (a reload on
/// SIGHUP, a dump on SIGUSR1), use [`unix_signals`], which stays
/// registered.
///
/// As in libdex and GLib, the signal is delivered through the **default
/// main context**: it must be running (a GTK app's main loop, or
/// [`block_on`](crate::block_on) on the main thread). If nobody iterates it
/// while the future waits, a `g_warning` (domain `gdex`) says so once after
/// 3 s (`GDEX_MAIN_IDLE_WARN_MS=<ms>` sets the delay, `0` turns it off).
///
/// # Panics
/// For a signal GLib cannot watch; these are SIGHUP, SIGINT, SIGTERM,
/// SIGUSR1, SIGUSR2 and SIGWINCH.
///
/// ```no_run
/// // Ctrl-C stops the work cleanly.
/// let work = gdex::spawn(std::future::pending::<()>());
/// gdex::block_on(gdex::unix_signal(libc::SIGINT));
/// gdex::block_on(work.cancel());
/// ```
pub fn unix_signal(signum: i32) -> UnixSignal {
    let name = watchable("unix_signal", signum);
    let fired = Arc::new(Flag::default());
    // SAFETY: `watchable` checked `signum`; `on_signal` borrows a `Flag`,
    // released by `release_arc::<Flag>`.
    let source = unsafe { watch(signum, name, &fired, on_signal, release_arc::<Flag>) };
    UnixSignal {
        name,
        fired,
        source,
        waiting: Waiting::default(),
    }
}

unsafe extern "C" fn on_signal(data: ffi::gpointer) -> ffi::gboolean {
    // SAFETY: `data` is the strong count given in `unix_signal`, alive
    // until `release_arc` runs after the source is gone.
    let fired = unsafe { &*(data as *const Flag) };
    fired.raise();
    ffi::G_SOURCE_REMOVE
}

/// The future of [`unix_signal`].
#[must_use = "futures do nothing unless awaited"]
pub struct UnixSignal {
    name: &'static str,
    fired: Arc<Flag>,
    source: SourceRef,
    waiting: Waiting,
}

impl Future for UnixSignal {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.fired.poll_raised(cx) {
            // A leaf (P11): its arrival is given under the budget.
            std::task::ready!(crate::task::coop::poll_proceed(cx)).made_progress();
            self.waiting.stop();
            Poll::Ready(())
        } else {
            self.waiting.start();
            Poll::Pending
        }
    }
}

impl Drop for UnixSignal {
    fn drop(&mut self) {
        self.source.destroy();
    }
}

impl std::fmt::Debug for UnixSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnixSignal")
            .field("signal", &self.name)
            .field("arrived", &self.fired.set.load(Ordering::Relaxed))
            .finish()
    }
}

/// Arrivals of a signal not yet taken by a `recv`: coalesced into one.
#[derive(Default)]
struct Arrivals {
    arrived: AtomicBool,
    waker: AtomicWaker,
}

impl Arrivals {
    fn poll_take(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.arrived.swap(false, Ordering::AcqRel) {
            return Poll::Ready(());
        }
        self.waker.register(cx.waker());
        if self.arrived.swap(false, Ordering::AcqRel) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

unsafe extern "C" fn on_signals(data: ffi::gpointer) -> ffi::gboolean {
    // SAFETY: `data` is the strong count given in `unix_signals`, alive
    // until `release_arc` runs after the source is gone.
    let arrivals = unsafe { &*(data as *const Arrivals) };
    arrivals.arrived.store(true, Ordering::Release);
    // Unwinding out of this C callback would abort (X5).
    if let Some(waker) = arrivals.waker.take() {
        crate::diagnostics::panic::wake(waker);
    }
    ffi::G_SOURCE_CONTINUE
}

/// Watches `signum` for as long as the returned stream lives (tokio's
/// `signal::unix::Signal` is the model): every arrival is handled by GLib,
/// never by the signal's default action, whether or not a
/// [`recv`](UnixSignals::recv) is waiting at that moment. A reload loop on
/// SIGHUP keeps one `UnixSignals` and awaits `recv()` in a loop.
///
/// **Coalesced, not lost.** A signal that arrives while no `recv` waits is
/// kept: the next `recv` resolves at once. Several that arrive before it
/// are one (as with any Unix signal, arrivals are not counted). It is also
/// a [`Stream`](futures::Stream) of `()` that never ends.
///
/// When the stream is dropped, and no other watch of the signal remains,
/// GLib gives the signal its default action back.
///
/// Like [`unix_signal`], it is delivered through the **default main
/// context**, which some thread must iterate (a GTK app's main loop, or
/// [`block_on`](crate::block_on) on the main thread); if nobody does while a
/// `recv` waits, a `g_warning` (domain `gdex`) says so once after 3 s
/// (`GDEX_MAIN_IDLE_WARN_MS=<ms>` sets the delay, `0` turns it off).
///
/// # Panics
/// For a signal GLib cannot watch; these are SIGHUP, SIGINT, SIGTERM,
/// SIGUSR1, SIGUSR2 and SIGWINCH.
///
/// ```no_run
/// // Reload the configuration on every SIGHUP, however close together.
/// let mut hangups = gdex::unix_signals(libc::SIGHUP);
/// gdex::block_on(async {
///     loop {
///         hangups.recv().await;
///         println!("reloading the configuration");
///     }
/// });
/// ```
pub fn unix_signals(signum: i32) -> UnixSignals {
    let name = watchable("unix_signals", signum);
    let arrivals = Arc::new(Arrivals::default());
    // SAFETY: `watchable` checked `signum`; `on_signals` borrows an
    // `Arrivals`, released by `release_arc::<Arrivals>`.
    let source = unsafe { watch(signum, name, &arrivals, on_signals, release_arc::<Arrivals>) };
    UnixSignals {
        signum,
        name,
        arrivals,
        source,
        waiting: Waiting::default(),
    }
}

/// The stream of [`unix_signals`]: the signal stays handled while it lives.
#[must_use = "the signal is watched only while the stream lives"]
pub struct UnixSignals {
    signum: i32,
    name: &'static str,
    arrivals: Arc<Arrivals>,
    source: SourceRef,
    /// Set by `poll_recv` while it reports `Pending`, for the watch.
    waiting: Waiting,
}

impl UnixSignals {
    /// Waits for the next arrival (or takes the one that came while nobody
    /// waited). Cancel-safe: dropping the future loses no signal.
    pub fn recv(&mut self) -> UnixSignalsRecv<'_> {
        UnixSignalsRecv { signals: self }
    }

    /// `recv` as a poll function: `Ready` if the signal has arrived since
    /// the last arrival taken; otherwise the task is woken when it does.
    /// An arrival taken spends one unit of the running task's cooperative
    /// budget (P11); once it is spent, this gives `Pending` once, with the
    /// task woken, and the arrival waits for the next poll.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let proceed = std::task::ready!(crate::task::coop::poll_proceed(cx));
        match self.arrivals.poll_take(cx) {
            Poll::Ready(()) => {
                proceed.made_progress();
                self.waiting.stop();
                Poll::Ready(())
            }
            Poll::Pending => {
                self.waiting.start();
                Poll::Pending
            }
        }
    }

    /// The signal watched, as a number (`libc::SIGHUP`, ...).
    pub fn signal(&self) -> i32 {
        self.signum
    }
}

impl futures::Stream for UnixSignals {
    type Item = ();

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<()>> {
        self.poll_recv(cx).map(Some)
    }
}

impl Drop for UnixSignals {
    fn drop(&mut self) {
        self.source.destroy();
    }
}

impl std::fmt::Debug for UnixSignals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnixSignals")
            .field("signal", &self.name)
            .field("pending", &self.arrivals.arrived.load(Ordering::Relaxed))
            .finish()
    }
}

/// The future of [`UnixSignals::recv`].
#[must_use = "futures do nothing unless awaited"]
pub struct UnixSignalsRecv<'a> {
    signals: &'a mut UnixSignals,
}

impl Future for UnixSignalsRecv<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.signals.poll_recv(cx)
    }
}

impl Drop for UnixSignalsRecv<'_> {
    fn drop(&mut self) {
        // Nobody waits any more (until the next recv).
        self.signals.waiting.stop();
    }
}

impl std::fmt::Debug for UnixSignalsRecv<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnixSignalsRecv")
            .field("signal", &self.signals.name)
            .finish()
    }
}

// --- The watch: is the default main context iterated while a signal
// future waits? ---

/// Counts this future or stream among the waiters of the watch while set.
#[derive(Default)]
struct Waiting(bool);

impl Waiting {
    fn start(&mut self) {
        if !self.0 {
            self.0 = true;
            if let Some(watch) = Watch::get() {
                watch.waiting.fetch_add(1, Ordering::AcqRel);
                watch.wake();
            }
        }
    }

    fn stop(&mut self) {
        if std::mem::take(&mut self.0) {
            if let Some(watch) = Watch::get() {
                watch.waiting.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The probe's dispatches: each one says the default main context was
/// iterated.
struct ProbeHooks {
    answers: Arc<AtomicU64>,
}

impl Hooks for ProbeHooks {
    fn dispatch(&self, source: *mut ffi::GSource) -> bool {
        // SAFETY: GLib dispatches our own live source; unsetting its ready
        // time is thread-safe.
        unsafe { ffi::g_source_set_ready_time(source, -1) };
        self.answers.fetch_add(1, Ordering::AcqRel);
        true
    }
}

/// The process-wide watch (see the module comment).
struct Watch {
    delay: Duration,
    /// Signal futures and streams now waiting.
    waiting: AtomicUsize,
    /// How many times the probe was dispatched.
    answers: Arc<AtomicU64>,
    /// A ready-time source on the default main context, ready only while a
    /// check is under way.
    probe: SourceRef,
    /// The watch thread, started with the watch (`None` inside if the OS
    /// refused a thread: then nothing is reported).
    thread: OnceLock<Option<thread::Thread>>,
    /// True while the watch thread sleeps for good.
    sleeping: AtomicBool,
}

impl Watch {
    /// The watch, started on first use; `None` if the report is off.
    fn get() -> Option<&'static Watch> {
        static WATCH: OnceLock<Option<Watch>> = OnceLock::new();
        let watch = WATCH
            .get_or_init(|| {
                let delay = idle_warn_delay()?;
                let answers = Arc::new(AtomicU64::new(0));
                let probe = SourceRef::attach(
                    &glib::MainContext::default(),
                    Box::new(ProbeHooks {
                        answers: answers.clone(),
                    }),
                    false,
                    c"[gdex-signal-probe]",
                    glib::ffi::G_PRIORITY_HIGH,
                    true,
                );
                Some(Watch {
                    delay,
                    waiting: AtomicUsize::new(0),
                    answers,
                    probe,
                    thread: OnceLock::new(),
                    sleeping: AtomicBool::new(false),
                })
            })
            .as_ref()?;
        watch.thread.get_or_init(|| {
            thread::Builder::new()
                .name("gdex-signal-watch".into())
                .spawn(move || watch.run())
                .ok()
                .map(|handle| handle.thread().clone())
        });
        Some(watch)
    }

    /// Wakes the watch thread if it sleeps for good.
    fn wake(&self) {
        // Pairs with the fence in `run`: either it sees our waiter, or we
        // see it sleeping.
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) && self.sleeping.swap(false, Ordering::AcqRel) {
            if let Some(Some(thread)) = self.thread.get() {
                thread.unpark();
            }
        }
    }

    /// The watch thread: while anything waits, probes the default main
    /// context every `delay` and reports once per episode of silence.
    fn run(&self) {
        // The answer count at the last report: no new report until the
        // context has answered since.
        let mut reported: Option<u64> = None;
        loop {
            if self.waiting.load(Ordering::Acquire) == 0 {
                self.sleeping.store(true, Ordering::Relaxed);
                fence(Ordering::SeqCst);
                if self.waiting.load(Ordering::Acquire) == 0 {
                    thread::park();
                }
                self.sleeping.store(false, Ordering::Relaxed);
                continue;
            }
            let before = self.answers.load(Ordering::Acquire);
            self.probe.set_ready();
            thread::sleep(self.delay);
            let answers = self.answers.load(Ordering::Acquire);
            if answers != before || self.waiting.load(Ordering::Acquire) == 0 {
                continue;
            }
            if reported == Some(answers) {
                continue;
            }
            reported = Some(answers);
            glib::g_warning!(
                "gdex",
                "a gdex Unix signal future is waiting, and for {} ms nobody has iterated the \
                 default main context, through which GLib delivers signals: a signal (Ctrl-C \
                 included) does nothing until it runs (or its loop is unblocked). Run the main loop (a GMainLoop, or a GTK \
                 application) on the main thread, or wait with gdex::block_on there. (Reported \
                 once until the context runs again; GDEX_MAIN_IDLE_WARN_MS sets the delay, 0 \
                 turns this off.)",
                self.delay.as_millis()
            );
        }
    }
}
