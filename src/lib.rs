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
//!   [`with_timeout`]), [`Cancellable`] (one object with
//!   `gio::Cancellable`), [`Delayed`], [`unix_signal`], a cancel-safe
//!   [`channel`], [`Semaphore`], [`Limiter`] and [`TaskGroup`]; the
//!   [`libdex`] page maps each libdex call to its gdex counterpart;
//! - **stop means stopped**: every task has a `gio::Cancellable`
//!   ([`current_cancellable`]) cancelled with it, and [`spawn_bound`] ties a
//!   task to a GObject's life.
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
//! // A main-scheduler task awaits the pool task and resumes on the main thread.
//! let on_main = gdex::Scheduler::main().spawn_local(async move { work.await.unwrap() });
//! assert_eq!(gdex::block_on(on_main).unwrap(), 3_628_800);
//! ```
//!
//! The contracts this crate keeps (P1-P8 for the pool, S1-S8 for schedulers
//! and tasks) are numbered in the project's `DESIGN.md`; tests cite them.
//!
//! [libdex]: https://gitlab.gnome.org/GNOME/libdex

#![warn(missing_docs, missing_debug_implementations)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod block_on;
pub mod blocking;
#[doc = include_str!("../docs/libdex.md")]
pub mod libdex {}
mod bound;
mod clock;
mod error;
pub mod fiber;
mod panic;
mod pool;
mod scheduler;
mod stall;
mod sync;
mod task;
pub mod thread;
mod time;
#[cfg(feature = "tokio")]
mod tokio_rt;
mod util;

use std::future::Future;

pub use block_on::{block_on, wait_for};
pub use blocking::LaneStats;
pub use bound::spawn_bound;
pub use error::{Error, ErrorCode};
pub use fiber::Fiber;
pub use panic::{reset_panic_handler, set_panic_handler, PanicEvent, PanicSource};
pub use pool::metrics::{PoolMetrics, WorkerMetrics};
pub use pool::{ThreadPool, ThreadPoolBuilder, MAX_WORKERS};
pub use scheduler::Scheduler;
pub use sync::cancellable::{Cancellable, Cancelled, Delayed, Release};
pub use sync::channel::{
    channel, Receiver, RecvAllFuture, RecvFuture, SendError, SendFuture, Sender, TrySendError,
};
pub use sync::group::TaskGroup;
pub use sync::promise::{Promise, PromiseFuture};
pub use sync::semaphore::{Acquire, Limiter, Permit, Semaphore};
pub use sync::sets::{all, all_race, any, first};
pub use sync::signal::{unix_signal, UnixSignal};
pub use task::{current_cancellable, yield_now, Task, YieldNow};
pub use time::{sleep, timeout, with_deadline, with_timeout, Sleep, Timeout, WithTimeout};
#[cfg(feature = "tokio")]
pub use tokio_rt::tokio_handle;

/// Spawns a `Send` future on the process-wide [`ThreadPool::default`].
///
/// ```
/// let task = gdex::spawn(async { "from the pool" });
/// assert_eq!(gdex::block_on(task).unwrap(), "from the pool");
/// ```
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
pub fn spawn_local<F>(future: F) -> Task<F::Output>
where
    F: Future + 'static,
    F::Output: 'static,
{
    Scheduler::thread_default()
        .unwrap_or_else(Scheduler::main)
        .spawn_local(future)
}
