//! Dedicated OS threads (B1): for long-blocking work that should not occupy
//! a pool worker or a blocking-lane thread, as libdex's `dex_thread_spawn`.

use std::future::{Future, IntoFuture};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::channel::oneshot;

use crate::error::Error;

/// Runs `f` on a new OS thread named `name` and returns a handle to its
/// result (B1).
///
/// The handle is not a future itself: [`join`](JoinHandle::join) blocks for
/// the result, and `.await` (it implements [`IntoFuture`]) waits without
/// blocking, from any scheduler. A panic in `f` reaches the joiner as
/// [`Error::Panicked`]. Dropping the handle detaches the thread (a thread
/// cannot be cancelled); it runs to completion. With the `tokio` feature
/// the thread is inside gdex's tokio runtime for its whole life (X6), so
/// tokio timers and I/O can be made there.
///
/// # Panics
/// If the OS refuses to create a thread, or `name` contains a NUL byte.
///
/// ```
/// let handle = gdex::thread::spawn("checksum", || (1..=100u32).sum::<u32>());
/// assert_eq!(handle.join().unwrap(), 5050);
///
/// let handle = gdex::thread::spawn("later", || "awaited");
/// assert_eq!(gdex::block_on(async { handle.await }).unwrap(), "awaited");
/// ```
pub fn spawn<F, T>(name: &str, f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    let thread = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            // X6: tokio I/O and timers work on this thread too.
            #[cfg(feature = "tokio")]
            let _tokio = crate::tokio_rt::enter();
            let result = catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
                Error::Panicked(crate::diagnostics::panic::take_message(payload))
            });
            // The handle may be gone (detached): then nobody wants the result.
            let _ = tx.send(result);
        })
        .unwrap_or_else(|e| panic!("gdex::thread::spawn: cannot start thread {name:?}: {e}"));
    JoinHandle {
        thread: Some(thread),
        result: rx,
    }
}

/// The result of a thread started by [`spawn`]: `join()` it, or `.await` it.
#[derive(Debug)]
#[must_use = "dropping a JoinHandle detaches the thread; join() or .await it for its result"]
pub struct JoinHandle<T> {
    thread: Option<std::thread::JoinHandle<()>>,
    result: oneshot::Receiver<Result<T, Error>>,
}

impl<T> JoinHandle<T> {
    /// Blocks until the thread has finished, and gives its result.
    pub fn join(mut self) -> Result<T, Error> {
        if let Some(thread) = self.thread.take() {
            // The thread body never unwinds (it catches panics), so join()
            // only fails if the thread was killed some other way.
            let _ = thread.join();
        }
        match self.result.try_recv() {
            Ok(Some(result)) => result,
            _ => Err(Error::Cancelled),
        }
    }

    /// The thread, for its name and id.
    pub fn thread(&self) -> Option<&std::thread::Thread> {
        self.thread.as_ref().map(|t| t.thread())
    }

    /// True once the thread has finished.
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }
}

impl<T> IntoFuture for JoinHandle<T> {
    type Output = Result<T, Error>;
    type IntoFuture = JoinFuture<T>;

    fn into_future(mut self) -> JoinFuture<T> {
        // Detach: the result arrives through the channel.
        drop(self.thread.take());
        JoinFuture {
            result: std::mem::replace(&mut self.result, oneshot::channel().1),
        }
    }
}

/// The future of a [`JoinHandle`], from `.await`.
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct JoinFuture<T> {
    result: oneshot::Receiver<Result<T, Error>>,
}

impl<T> Future for JoinFuture<T> {
    type Output = Result<T, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // A leaf future (P11).
        crate::task::coop::poll_leaf(cx, |cx| Pin::new(&mut self.result).poll(cx))
            .map(|r| r.unwrap_or(Err(Error::Cancelled)))
    }
}
