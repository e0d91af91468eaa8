//! X6: with the `tokio` feature, tokio's I/O and timers work inside gdex
//! tasks. Crates built on tokio (HTTP clients, database drivers) need a
//! tokio *reactor* in the context they run in, not tokio's executor: gdex
//! starts one small tokio runtime on first use (one `gdex-tokio` thread
//! that drives I/O and timers) and enters it on every gdex thread: each
//! pool worker and blocking thread for its whole life, a context scheduler
//! while it dispatches, and `block_on` while it waits. The app sets up
//! nothing.

use std::sync::OnceLock;

static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();

/// The tokio runtime gdex enters on its threads (started on first use).
/// Its thread only drives tokio's I/O and timers; spawn CPU work on gdex.
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
pub fn tokio_handle() -> &'static tokio::runtime::Handle {
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("gdex-tokio")
                .enable_all()
                .build()
                .expect("gdex: cannot start the tokio runtime of the `tokio` feature")
        })
        .handle()
}

/// Enters the runtime on this thread until the guard drops (guards nest).
pub(crate) fn enter() -> tokio::runtime::EnterGuard<'static> {
    tokio_handle().enter()
}
