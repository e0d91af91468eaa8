//! X6: with the `tokio` feature, tokio's I/O and timers work inside gdex
//! tasks. Crates built on tokio (HTTP clients, database drivers) need a
//! tokio *reactor* in the context they run in, not tokio's executor: gdex
//! keeps one small tokio runtime (one `gdex-tokio` thread that drives I/O
//! and timers) and enters it wherever gdex runs code. The app sets up
//! nothing.
//!
//! **When it starts.** On first use, never before: the first time gdex runs
//! a job of yours (a pool worker's first task, a dispatch of a context or
//! the main scheduler, a `block_on` or `wait_for`, a blocking-lane job, the
//! body of a `gdex::thread::spawn` thread), or the first call to
//! [`tokio_handle`]. Building a pool, or starting a gdex thread that has not
//! run anything yet, starts nothing.
//!
//! **Where it is entered.** A pool worker from its first task to its exit,
//! a blocking-lane thread and a `gdex::thread::spawn` thread for their whole
//! life, a context scheduler while it dispatches, `block_on`/`wait_for`
//! while they wait.
//!
//! **Its lifetime.** It is never shut down: it lives in a static until the
//! process exits, and then its thread simply stops with the process.

use std::cell::OnceCell;
use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::{EnterGuard, Handle, Runtime};

/// The runtime, or why it could not be started.
static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();

fn runtime() -> Result<&'static Runtime, &'static str> {
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("gdex-tokio")
                // The threads where `block_in_place` is known to be
                // allowed (S13): this runtime's worker, and its blocking
                // threads, where it just runs the closure.
                .on_thread_start(|| RUNTIME_THREAD.with(|t| t.set(true)))
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(String::as_str)
}

/// The tokio runtime gdex enters on its threads, started by the first call
/// (or by the first job gdex runs, whichever comes first).
///
/// Its one thread (`gdex-tokio`) only drives tokio's I/O and timers; spawn
/// CPU work on gdex. Futures given to tokio itself (`tokio::spawn` inside a
/// gdex task, or `tokio_handle().spawn(..)`) run on that thread.
///
/// **Lifetime: never shut down.** The runtime lives until the process
/// exits; nothing stops it earlier, and at exit its thread ends with the
/// process: futures still spawned on tokio are not dropped (their
/// destructors do not run), and tokio's blocking threads are not joined.
/// Finish or cancel such work yourself before the process exits if its
/// destructors matter.
///
/// # Panics
/// If tokio cannot start the runtime (the OS refuses a thread or an epoll
/// instance); the message carries tokio's error.
///
/// ```
/// let handle = gdex::tokio_handle();
/// let task = gdex::spawn(async {
///     tokio::time::sleep(std::time::Duration::from_millis(1)).await;
///     "tokio timers work in gdex tasks"
/// });
/// assert_eq!(gdex::block_on(task).unwrap(), "tokio timers work in gdex tasks");
/// # drop(handle);
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub fn tokio_handle() -> &'static Handle {
    match runtime() {
        Ok(runtime) => runtime.handle(),
        Err(e) => panic!("gdex: cannot start the tokio runtime of the `tokio` feature: {e}"),
    }
}

/// Enters the runtime on this thread until the guard drops (guards nest),
/// starting it on first use. If tokio cannot start it, says so once with a
/// `g_critical` and enters nothing: tokio calls then fail in the task that
/// makes them (a panic it reports), not in gdex's machinery.
pub(crate) fn enter() -> Option<EnterGuard<'static>> {
    match runtime() {
        Ok(runtime) => Some(runtime.handle().enter()),
        Err(e) => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                glib::g_critical!(
                    "gdex",
                    "cannot start the tokio runtime of the `tokio` feature ({}): tokio I/O and \
                     timers will not work in gdex tasks",
                    e
                );
            });
            None
        }
    }
}

/// A thread's entry into the runtime made at its first job rather than at
/// its start (pool workers: a pool that runs nothing starts no runtime).
/// Held until the owner drops it; the thread must drop it after any guard
/// entered later (guards nest).
#[derive(Default)]
pub(crate) struct LazyEnter(OnceCell<Option<EnterGuard<'static>>>);

impl LazyEnter {
    /// Enters the runtime (starting it) unless already done on this thread.
    #[inline]
    pub(crate) fn ensure(&self) {
        self.0.get_or_init(enter);
    }
}

std::thread_local! {
    /// Set on the threads of gdex's own tokio runtime.
    static RUNTIME_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `wait`, a gdex wait that blocks this thread until its future
/// completes, so that no tokio worker's own work stops meanwhile (S13).
///
/// Inside a task on the `gdex-tokio` thread (the only worker of gdex's
/// runtime, which drives the I/O and timers of every gdex task), the
/// worker's core is handed to another thread first, as
/// `tokio::task::block_in_place` does; the thread then blocks as any other.
/// Elsewhere `wait` just runs (and in a wait nested inside another, where
/// the core was handed off already, `block_in_place` just runs it): an app's own runtime's worker blocks
/// as it would in any blocking call (wrap the call in `block_in_place`
/// there), since tokio offers no way to tell its worker apart from a
/// `LocalSet` or a current-thread runtime, where `block_in_place` panics.
pub(crate) fn off_worker<R>(wait: impl FnOnce() -> R) -> R {
    // A task on one of our runtime's threads: its worker (or a blocking
    // thread, where block_in_place just runs `wait`). The entered handle
    // says nothing about this thread (a gdex dispatch enters ours over an
    // app's current-thread runtime, whose task may be this one).
    let on_worker = tokio::task::try_id().is_some() && RUNTIME_THREAD.with(std::cell::Cell::get);
    if on_worker {
        tokio::task::block_in_place(wait)
    } else {
        wait()
    }
}

/// Runs `f` with tokio's cooperative budget unconstrained on this thread
/// (`tokio::task::coop::unconstrained`), then puts the previous one back.
///
/// For gdex's polls that may run inside a tokio task's poll (a `block_on`,
/// or a dispatch of a context scheduler in a main loop run from a tokio
/// task, as glib-rs's apps under `#[tokio::main]` do): without it, tokio
/// futures polled there spend the outer tokio task's budget, and once it is
/// spent (128 operations) tokio returns `Pending` and defers the wake-up
/// until that tokio task yields, which it does not while the GLib loop runs
/// inside it: the gdex task is never woken. (tokio offers no public way to
/// give them a fresh budget instead; on gdex's own threads, where no tokio
/// task runs, tokio's budget is unconstrained anyway.) One thread-local
/// access each way, once per wait or dispatch, not per poll.
pub(crate) fn unconstrained<R>(f: impl FnOnce() -> R) -> R {
    let mut f = Some(f);
    let once = std::future::poll_fn(move |_| {
        let f = f.take().expect("polled once");
        std::task::Poll::Ready(f())
    });
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::pin!(tokio::task::coop::unconstrained(once)).poll(&mut cx) {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => unreachable!("a poll_fn that is always ready"),
    }
}
