//! # gdex: a GLib executor for Rust
//!
//! gdex brings GNOME's [libdex] model to Rust. It gives a GTK application, a
//! GObject library or a GLib daemon:
//!
//! - the **main scheduler** ([`Scheduler::main`]): tasks, including `!Send`
//!   ones that touch widgets, run from the default `GMainContext` through one
//!   `GSource`, in bounded batches, so the GTK main loop keeps drawing;
//! - a **thread pool** ([`ThreadPool`]) whose every worker owns and runs its
//!   own `GMainContext`, so timeouts, idle sources and GIO async calls work
//!   inside pool tasks; workers steal from each other (FIFO deques, a global
//!   injector) and wake each other one at a time, with coalesced requests;
//! - a scheduler for **any context** ([`Scheduler::for_context`]);
//! - [`Task<T>`], a future of `Result<T, Error>` awaitable from any scheduler
//!   or thread; dropping it cancels the task, [`Task::detach`] lets it run;
//! - [`block_on`], which iterates the thread's context while it waits, and
//!   [`wait_for`] for plain threads;
//! - **fibers** ([`Scheduler::spawn_fiber`], module [`fiber`]): stackful
//!   coroutines pinned to their thread, which wait on futures with
//!   [`fiber::wait`] in straight-line code;
//! - **pinned `!Send` tasks** on pool workers ([`Scheduler::spawn_pinned`]),
//!   so `!Send` glib-rs and GIO objects can be used in pool work;
//! - libdex's **future toolkit**: [`Promise`], the sets [`all`],
//!   [`all_race`], [`any`] and [`first`], timers ([`sleep`], [`timeout`],
//!   [`timeout_at`], [`reject_after`]), [`Cancellable`] (one object with
//!   `gio::Cancellable`), [`Delayed`], [`unix_signal`] and
//!   [`unix_signals`], a cancel-safe
//!   [`channel`], [`Semaphore`], [`Limiter`] and [`TaskGroup`]; the
//!   [`libdex`] page maps each libdex call to its gdex counterpart;
//! - **stop means stopped**: every task has a `gio::Cancellable`
//!   ([`current_cancellable`]) cancelled with it, and [`spawn_bound`] ties a
//!   task to a GObject's life;
//! - **a poll always ends** (P11): gdex's leaf futures (a channel's send or
//!   receive, a promise, a timer, a [`Task`] handle, ...) each spend one
//!   unit of their task's cooperative budget (128 a poll) when they
//!   complete, so a loop over futures that are always ready yields to its
//!   neighbours and to GTK's frames; [`unconstrained`] lifts it,
//!   [`consume_budget`] is a yield point for long computations.
//!
//! - a **panic policy** ([`set_panic_handler`]), the **tokio** feature for
//!   tokio-based crates inside gdex tasks, and `futures`' `Spawn` /
//!   `LocalSpawn` on every [`Scheduler`].
//! - **seeing inside** (O1): the stall watchdog, the task [`dump`], and
//!   three features that read the same per-task record, off by default:
//!   `sysprof` (Sysprof marks and counters), `tracing` (a span per task,
//!   events for wake-ups, steals, parks, fibers' waits and stalls) and
//!   `console` (tokio-console lists gdex tasks). `docs/debugging.md` says
//!   which to reach for when.
//!
//! ## Three stories
//!
//! **1. Drive work from a GTK app's main loop.** Code on the main thread
//! spawns `!Send` futures that touch widgets; they run from the default
//! `GMainContext`, below GTK's redraw priority, with no second event loop.
//! ([`block_on`] stands in here for `gtk::Application::run`: both iterate
//! the main context.)
//!
//! ```
//! use std::{cell::RefCell, rc::Rc, time::Duration};
//!
//! let label = Rc::new(RefCell::new(String::from("loading"))); // a widget, say: !Send
//! let shown = label.clone();
//! let task = gdex::spawn_local(async move {
//!     gdex::sleep(Duration::from_millis(1)).await; // the main loop goes on meanwhile
//!     *shown.borrow_mut() = "ready".into();
//! });
//! gdex::block_on(task).unwrap();
//! assert_eq!(*label.borrow(), "ready");
//! ```
//!
//! **2. Spawn pool work from GObject code.** A method hands CPU or GIO work
//! to the pool and gets the result back on the main thread; the work is
//! cancelled when the caller loses interest (the task is dropped) or the
//! object goes away ([`spawn_local_bound`]).
//!
//! ```
//! use glib::prelude::*;
//!
//! fn checksum_in_background(object: &glib::Object, data: Vec<u8>) -> gdex::Task<String> {
//!     // Only a weak reference is held: disposing `object` cancels the task.
//!     gdex::spawn_local_bound(object, async move {
//!         let pool_work = gdex::spawn(async move {
//!             glib::compute_checksum_for_data(glib::ChecksumType::Sha256, &data).unwrap()
//!         });
//!         pool_work.await.unwrap().to_string() // back on this thread
//!     })
//! }
//!
//! let object = glib::Object::new::<glib::Object>();
//! let sum = gdex::block_on(checksum_in_background(&object, b"abc".to_vec())).unwrap();
//! assert!(sum.starts_with("ba7816bf"));
//!
//! let doomed = checksum_in_background(&object, vec![0; 1 << 20]);
//! drop(object); // the window closed, say
//! assert!(gdex::block_on(doomed).is_err_and(|e| e.is_cancelled()));
//! ```
//!
//! **3. Await any future from any scheduler.** A pool task, a fiber, a
//! main-thread task or a plain thread can await a task that runs anywhere
//! else; each resumes on its own scheduler.
//!
//! ```
//! use std::time::Duration;
//!
//! let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
//! let work = pool.scheduler().spawn(async {
//!     // GLib timers work inside pool tasks: each worker runs its own context.
//!     glib::timeout_future(Duration::from_millis(1)).await;
//!     (1..=10u64).product::<u64>()
//! });
//! // A fiber waits for the pool task in straight-line code...
//! let fiber = pool.scheduler().spawn_fiber(move || gdex::fiber::wait(work).unwrap());
//! // ...a main-scheduler task awaits the fiber and resumes on the main thread...
//! let on_main = gdex::Scheduler::main().spawn_local(async move { fiber.await.unwrap() });
//! // ...a plain thread waits for that one...
//! let waiter = gdex::thread::spawn("waiter", move || gdex::wait_for(on_main).unwrap());
//! // ...and the main thread runs its loop until the waiter is done.
//! let answer = gdex::block_on(waiter).unwrap();
//! assert_eq!(answer, 3_628_800);
//! ```
//!
//! The contracts this crate keeps (P for the pool, S for schedulers and
//! tasks, F for fibers, B for blocking, X beyond libdex, and G, D, A, C, L,
//! M, O, T for the rest) are numbered in `docs/architecture.md`, which says
//! for each where it lives and which tests show it; rustdoc and tests cite
//! them ("(S4)").
//!
//! [libdex]: https://gitlab.gnome.org/GNOME/libdex

#![warn(missing_docs, missing_debug_implementations)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod aio;
mod block_on;
pub mod blocking;
mod current;
mod diagnostics;
mod error;
pub mod fiber;
mod future;
mod interop;
#[doc = include_str!("../docs/libdex.md")]
pub mod libdex {}
#[doc = include_str!("../docs/migrating.md")]
pub mod migrating {}
mod pool;
mod scheduler;
mod source;
mod sync;
mod task;
#[cfg(feature = "tokio")]
mod tokio_rt;
mod util;

use std::future::Future;

pub use block_on::{block_on, wait_for};
pub use blocking::thread;
pub use blocking::LaneStats;
pub use diagnostics::dump::{dump, enable_task_dump, TaskDump, TaskInfo, TaskState};
pub use diagnostics::latency::{LatencyHistogram, SchedulerMetrics};
pub use diagnostics::metrics::{PoolMetrics, WorkerMetrics};
pub use diagnostics::panic::{reset_panic_handler, set_panic_handler, PanicEvent, PanicSource};
pub use error::{Elapsed, Error, ErrorCode, IntoResult};
pub use fiber::Fiber;
pub use future::cancellable::{Cancellable, CancelledFuture, Delayed, Release};
pub use future::clock::{ClockAttachment, TestClock};
pub use future::fd::{unix_fd, UnixFd};
pub use future::promise::{Promise, PromiseFuture};
pub use future::sets::{all, all_race, any, first};
pub use future::signal::{unix_signal, unix_signals, UnixSignal, UnixSignals, UnixSignalsRecv};
pub use future::time::{
    interval, interval_at, now, reject_after, sleep, timeout, timeout_at, Interval, RejectAfter,
    Sleep, Timeout,
};
pub use interop::async_result::AsyncResult;
pub use interop::dbus;
pub use interop::list_model::ListModel;
pub use interop::signal_stream::{
    signal_stream, signal_stream_local, LocalSignalStream, SignalStream, DEFAULT_SIGNAL_CAPACITY,
};
pub use pool::{ThreadPool, ThreadPoolBuilder, MAX_WORKERS};
pub use scheduler::bound::{spawn_bound, spawn_local_bound};
pub use scheduler::Scheduler;
pub use sync::channel::{
    channel, Receiver, RecvAllFuture, RecvFuture, SendError, SendFuture, Sender, TrySendError,
};
pub use sync::group::{GroupOutput, TaskGroup, TaskGroupBuilder, TaskGroupRef};
pub use sync::semaphore::{Acquire, Limiter, LimiterPermit, Permit, Semaphore};
pub use sync::state_machine::{
    Interrupted, State, StateMachine, StateMachineBuilder, TransitionContext, TransitionRequest,
    WaitForState,
};
pub use sync::tracker::{TaskTracker, Tracked};
pub use task::{
    consume_budget, current_cancellable, unconstrained, yield_now, Task, Unconstrained, YieldNow,
};
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use tokio_rt::tokio_handle;

/// The `gio` crate gdex is built on (see [`glib`](mod@glib)).
pub use gio;
/// The `glib` crate gdex is built on, so that an app can name the same
/// version (as `gtk4::glib` does).
pub use glib;

/// For gdex's own tests and benches; not part of the API. How often, since
/// the process started, a runner (a pool worker or a context scheduler)
/// starting a slice of jobs had to wake the stall monitor with a syscall
/// (B6: what the monitor costs while work runs).
#[doc(hidden)]
pub fn __stall_monitor_wakes() -> u64 {
    diagnostics::stall::runner_wakes()
}

/// For gdex's own tests; not part of the API. The time the stall monitor
/// has excused as stops of the whole process (B5: a debugger's breakpoint,
/// `SIGSTOP`) since the process started.
#[doc(hidden)]
pub fn __stall_monitor_excused_stops() -> std::time::Duration {
    diagnostics::stall::excused_stops()
}

/// Spawns a `Send` future on the process-wide [`ThreadPool::default`].
///
/// ```
/// let task = gdex::spawn(async { "from the pool" });
/// assert_eq!(gdex::block_on(task).unwrap(), "from the pool");
/// ```
#[track_caller]
pub fn spawn<F>(future: F) -> Task<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    static DEFAULT: std::sync::OnceLock<Scheduler> = std::sync::OnceLock::new();
    DEFAULT
        .get_or_init(|| ThreadPool::default().scheduler())
        .spawn(future)
}

/// Runs `f`, which may block, on the default pool's elastic blocking lane
/// (B2); see [`ThreadPool::spawn_blocking`].
///
/// ```
/// let task = gdex::spawn_blocking(|| std::fs::read_dir("/").map(|d| d.count()).unwrap_or(0));
/// assert!(gdex::block_on(task).unwrap() > 0);
/// ```
#[track_caller]
pub fn spawn_blocking<F, T>(f: F) -> Task<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    ThreadPool::default().spawn_blocking(f)
}

/// Spawns a `!Send` future on the calling thread's scheduler
/// ([`Scheduler::thread_default`]), or on the main scheduler if the thread
/// has none.
///
/// # Panics
/// If the calling thread does not own that scheduler's context (see
/// [`Scheduler::spawn_local`]), or is a pool worker.
///
/// ```
/// let task = gdex::spawn_local(async { std::rc::Rc::new(3) });
/// assert_eq!(*gdex::block_on(task).unwrap(), 3);
/// ```
#[track_caller]
pub fn spawn_local<F>(future: F) -> Task<F::Output>
where
    F: Future + 'static,
    F::Output: 'static,
{
    Scheduler::thread_default()
        .unwrap_or_else(Scheduler::main)
        .spawn_local(future)
}
