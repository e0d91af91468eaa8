//! [`yield_now`]: a task yields once to its scheduler.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Yields once to the scheduler: the task is queued again behind the work
/// already waiting, so a loop on `yield_now` never starves its neighbours
/// (P3) of its priority. (A task spawned at a more urgent GLib priority,
/// P12, is queued ahead of less urgent work again: GLib's priorities are
/// strict. A pool's latency class runs one batch job after 32 of its own
/// in a row.)
///
/// ```
/// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
/// let task = pool.scheduler().spawn(async {
///     for _ in 0..3 {
///         gdex::yield_now().await;
///     }
///     "done"
/// });
/// assert_eq!(gdex::block_on(task).unwrap(), "done");
/// ```
pub fn yield_now() -> YieldNow {
    YieldNow { yielded: false }
}

/// The future returned by [`yield_now`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct YieldNow {
    yielded: bool,
}

impl Future for YieldNow {
    type Output = ();

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            Poll::Ready(())
        } else {
            self.yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}
