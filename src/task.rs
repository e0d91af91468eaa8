//! What a scheduler queues, and the handle a spawner gets back.
//!
//! A spawned future lives in one heap block allocated by `async-task`: its
//! header (state word, awaiter waker, vtable), the schedule function, the
//! future and, later, its output. The block's `Runnable` is what a queue
//! holds; running it polls the future once. The spawner's [`Task<T>`] is the
//! other reference to the block.
//!
//! Cancellation follows libdex's *discard*: dropping the last `Task` handle of
//! a pending task closes the block. If the task is idle, `async-task`
//! schedules it once more so that the scheduler that owns it, on its own
//! thread, drops the future (S5); if it is queued, the scheduler drops the
//! future instead of polling it; if it is running, the future is dropped when
//! the current poll returns. A future is never dropped in the middle of a
//! poll. [`Task::detach`] is libdex's *disown*.
//!
//! Panics never cross a scheduler: every poll runs inside `catch_unwind`, and
//! a panic becomes the task's output, [`Error::Panicked`], for its waiter
//! (S6). A panic nobody will read (the task was detached, or its handle was
//! dropped after it finished) is reported with `g_critical`.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::{panic_message, Error};

/// A unit of work in a run queue: a task's `Runnable`, or a plain work item
/// pushed with [`Scheduler::push`](crate::Scheduler::push) (S3).
pub(crate) enum Job {
    Task(async_task::Runnable),
    Work(Box<dyn FnOnce() + Send>),
}

impl Job {
    /// Runs the job on the calling thread. Never unwinds: a task's panic is
    /// already its output, and a work item's panic is reported with
    /// `g_critical` (S6).
    #[inline]
    pub(crate) fn run(self) {
        match self {
            Job::Task(runnable) => {
                // The poll itself cannot unwind (CatchUnwind below), but a
                // future's destructor can, when a cancelled task is dropped.
                if let Err(payload) = catch_unwind(AssertUnwindSafe(|| runnable.run())) {
                    glib::g_critical!(
                        "gdex",
                        "a task panicked while being dropped: {}",
                        panic_message(&*payload)
                    );
                }
            }
            Job::Work(f) => {
                if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
                    glib::g_critical!("gdex", "a work item panicked: {}", panic_message(&*payload));
                }
            }
        }
    }
}

/// A panic caught in a task, on its way to the waiter. Reports itself with
/// `g_critical` if nobody takes it.
pub(crate) struct PanicReport {
    message: Option<String>,
}

impl PanicReport {
    fn take(mut self) -> String {
        self.message.take().unwrap_or_default()
    }
}

impl Drop for PanicReport {
    fn drop(&mut self) {
        if let Some(message) = self.message.take() {
            glib::g_critical!("gdex", "a task panicked and nobody awaited it: {}", message);
        }
    }
}

/// What a task's block stores as output.
pub(crate) type Outcome<T> = Result<T, PanicReport>;

/// Polls the inner future inside `catch_unwind`, turning a panic into the
/// task's output.
pub(crate) struct CatchUnwind<F> {
    future: F,
}

impl<F> CatchUnwind<F> {
    pub(crate) fn new(future: F) -> Self {
        CatchUnwind { future }
    }
}

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Outcome<F::Output>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `future` is structurally pinned: it is never moved out of
        // `self`, and `CatchUnwind` has no `Drop` impl or `Unpin` impl of its
        // own that could move it.
        let future = unsafe { self.map_unchecked_mut(|this| &mut this.future) };
        match catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
            Ok(Poll::Ready(value)) => Poll::Ready(Ok(value)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => Poll::Ready(Err(PanicReport {
                message: Some(panic_message(&*payload)),
            })),
        }
    }
}

/// A handle to a spawned task; itself a future of the task's output (S4).
///
/// Await it from any scheduler, a fiber or a plain thread
/// ([`block_on`](crate::block_on)); the waiter resumes on its own scheduler.
/// It resolves to `Ok(output)`, `Err(Error::Panicked(message))` if the task
/// panicked, or `Err(Error::Cancelled)` if the task was dropped unfinished
/// (its scheduler shut down).
///
/// Dropping a `Task` cancels the task (S5): its future is dropped at a
/// suspension point, on the thread that runs it. Call [`detach`](Task::detach)
/// to let it run to completion without a handle.
///
/// ```
/// let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
/// let task = pool.scheduler().spawn(async { 6 * 7 });
/// assert_eq!(gdex::block_on(task).unwrap(), 42);
/// ```
#[must_use = "dropping a Task cancels it; call .detach() to let it run"]
pub struct Task<T> {
    inner: Inner<T>,
}

enum Inner<T> {
    Live(async_task::FallibleTask<Outcome<T>>),
    /// Never spawned: resolves to this error once. (Boxed: a handle stays
    /// two words.)
    Failed(Option<Box<Error>>),
}

impl<T> Task<T> {
    pub(crate) fn new(task: async_task::Task<Outcome<T>>) -> Self {
        Task {
            inner: Inner::Live(task.fallible()),
        }
    }

    /// A task that was refused (its scheduler is closed): awaiting it gives
    /// `error` at once.
    pub(crate) fn failed(error: Error) -> Self {
        Task {
            inner: Inner::Failed(Some(Box::new(error))),
        }
    }

    /// Lets the task run to completion with nobody holding it (libdex's
    /// *disown*). Its output is dropped; a panic is reported with
    /// `g_critical`.
    pub fn detach(self) {
        match self.inner {
            Inner::Live(task) => task.detach(),
            Inner::Failed(_) => {}
        }
    }

    /// Cancels the task and waits until it has stopped (X1): when this
    /// resolves, the task's future has been dropped, or it had finished.
    /// Gives the output if the task finished before the cancellation took
    /// hold, `None` otherwise (also when it had panicked).
    ///
    /// ```
    /// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
    /// let task = pool.scheduler().spawn(std::future::pending::<()>());
    /// assert_eq!(gdex::block_on(task.cancel()), None);
    /// ```
    pub async fn cancel(self) -> Option<T> {
        match self.inner {
            Inner::Live(task) => match task.cancel().await {
                Some(Ok(value)) => Some(value),
                Some(Err(report)) => {
                    // The panic is the canceller's to know about, not a
                    // report for the log.
                    drop(report.take());
                    None
                }
                None => None,
            },
            Inner::Failed(_) => None,
        }
    }

    /// True once the task has finished or was cancelled; awaiting it will not
    /// wait.
    pub fn is_finished(&self) -> bool {
        match &self.inner {
            Inner::Live(task) => task.is_finished(),
            Inner::Failed(_) => true,
        }
    }
}

impl<T> Future for Task<T> {
    type Output = Result<T, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // `Task` is `Unpin`: both variants are.
        let this = self.get_mut();
        match &mut this.inner {
            Inner::Live(task) => match Pin::new(task).poll(cx) {
                Poll::Ready(Some(Ok(value))) => Poll::Ready(Ok(value)),
                Poll::Ready(Some(Err(report))) => Poll::Ready(Err(Error::Panicked(report.take()))),
                Poll::Ready(None) => Poll::Ready(Err(Error::Cancelled)),
                Poll::Pending => Poll::Pending,
            },
            Inner::Failed(error) => Poll::Ready(Err(*error
                .take()
                .expect("a gdex::Task was polled again after it completed"))),
        }
    }
}

impl<T> std::fmt::Debug for Task<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Task")
            .field("finished", &self.is_finished())
            .finish()
    }
}

/// Yields once to the scheduler: the task is queued again behind the work
/// already waiting, so a loop on `yield_now` never starves its neighbours
/// (P3).
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

#[cfg(test)]
mod tests {
    /// S7: a handle is small (it is what a spawner keeps per task).
    #[test]
    fn a_task_handle_is_two_words() {
        assert!(std::mem::size_of::<super::Task<u64>>() <= 2 * std::mem::size_of::<usize>());
    }
}
