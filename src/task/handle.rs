//! The spawner's handle, [`Task<T>`]: a future of the task's output.
//!
//! Cancellation follows libdex's *discard*: dropping the last `Task` handle of
//! a pending task closes the block. If the task is idle, `async-task`
//! schedules it once more so that the scheduler that owns it, on its own
//! thread, drops the future (S5); if it is queued, the scheduler drops the
//! future instead of polling it; if it is running, the future is dropped when
//! the current poll returns. A future is never dropped in the middle of a
//! poll. [`Task::detach`] is libdex's *disown*.

use std::future::Future;
use std::pin::Pin;
use std::ptr::NonNull;
use std::task::{Context, Poll};

use gio::prelude::*;

use super::containment::{contain_waker, Failure, FailureKind, Outcome};
use super::meta::{builder, TaskMeta};
use crate::error::Error;

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
    /// `None` only once `detach` or `cancel` has taken it.
    task: Option<async_task::FallibleTask<Outcome<T>, TaskMeta>>,
    /// The task's metadata, in the block `task` keeps alive.
    meta: NonNull<TaskMeta>,
}

// SAFETY: `meta` points into the block that `task` keeps alive and is only
// read through `&TaskMeta`, which is Sync; otherwise a Task is what
// async-task's FallibleTask is, with the same bounds.
unsafe impl<T: Send> Send for Task<T> {}
// SAFETY: as above; no `&self` method touches the output.
unsafe impl<T> Sync for Task<T> {}

impl<T> Task<T> {
    pub(crate) fn new(task: async_task::Task<Outcome<T>, TaskMeta>) -> Self {
        let meta = NonNull::from(task.metadata());
        Task {
            task: Some(task.fallible()),
            meta,
        }
    }

    /// A task that was refused (its scheduler is closed): awaiting it gives
    /// `error` at once.
    pub(crate) fn failed(error: Error) -> Self {
        let future = async move { Err(Failure::error(error)) };
        // SAFETY: the future (which holds only an Error, Send) is polled to
        // its end right here, on this thread, and never scheduled again: the
        // schedule function is never called for a finished task.
        let (runnable, task) = unsafe { builder().spawn_unchecked(move |_| future, |_| {}) };
        runnable.run();
        Task::new(task)
    }

    /// Cancels the task's `gio::Cancellable` without closing the task: for
    /// a fiber cancelled the libdex way (F4), which runs on to its return.
    /// (A thread-bound task's is only marked: its thread cancels it, S14.)
    pub(crate) fn cancel_cancellable(&self) {
        if let Some(cancellable) = self.meta().to_cancel() {
            cancellable.cancel();
        }
    }

    fn meta(&self) -> &TaskMeta {
        // SAFETY: `task` keeps the block holding the metadata alive for as
        // long as `self` exists (it is only taken by methods consuming self).
        unsafe { self.meta.as_ref() }
    }

    /// Lets the task run to completion with nobody holding it (libdex's
    /// *disown*). Its output is dropped; a panic goes to the panic handler
    /// ([`set_panic_handler`](crate::set_panic_handler); by default
    /// `g_critical`).
    pub fn detach(mut self) {
        if let Some(task) = self.task.take() {
            task.detach();
        }
    }

    /// Cancels the task and waits until it has stopped (X1): when this
    /// resolves, the task's future has been dropped, or it had finished.
    /// The task's [`current_cancellable`](crate::current_cancellable) is
    /// cancelled too (right after the task is closed, so the future is never
    /// polled again), so GIO calls it has in flight end with
    /// `G_IO_ERROR_CANCELLED`. Gives the output if the task finished before
    /// the cancellation took hold, `None` otherwise (also when it had
    /// panicked).
    ///
    /// ```
    /// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
    /// let task = pool.scheduler().spawn(std::future::pending::<()>());
    /// assert_eq!(gdex::block_on(task.cancel()), None);
    /// ```
    pub async fn cancel(mut self) -> Option<T> {
        let task = self.task.take()?;
        let mut gio_cancel = if task.is_finished() {
            None
        } else {
            self.meta().to_cancel()
        };
        let mut cancel = std::pin::pin!(task.cancel());
        // The first poll closes the task; its GIO calls are cancelled after
        // that, so the future never runs on with a cancelled cancellable.
        let output = std::future::poll_fn(|cx| {
            // A leaf (P11), checked before the first poll closes the task.
            let proceed = std::task::ready!(super::coop::poll_proceed(cx));
            let poll = contain_waker(cx, false, |cx| cancel.as_mut().poll(cx));
            if poll.is_ready() {
                proceed.made_progress();
            }
            if let Some(cancellable) = gio_cancel.take() {
                cancellable.cancel();
            }
            poll
        })
        .await;
        match output {
            Some(Ok(value)) => Some(value.into_inner()),
            Some(Err(failure)) => {
                if let FailureKind::Panicked(report) = failure.into_kind() {
                    // The panic is the canceller's to know about, not a
                    // report for the log.
                    drop(report.take());
                }
                None
            }
            None => None,
        }
    }

    /// True once the task has finished or was cancelled; awaiting it will not
    /// wait.
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().is_none_or(|t| t.is_finished())
    }
}

impl<T> Drop for Task<T> {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            if task.is_finished() {
                return;
            }
            let gio_cancel = self.meta().to_cancel();
            // S5: close the task first, so it is never polled again...
            drop(task);
            // ...then X1: its GIO calls in flight stop too.
            if let Some(cancellable) = gio_cancel {
                cancellable.cancel();
            }
        }
    }
}

impl<T> Future for Task<T> {
    type Output = Result<T, Error>;

    /// A leaf (P11): taking the task's result spends one unit of the
    /// polling task's budget.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // `Task` is `Unpin`: both fields are.
        let this = self.get_mut();
        super::coop::poll_leaf(cx, |cx| this.poll_result(cx))
    }
}

impl<T> Task<T> {
    /// The task's result once it has one, outside the budget: for a leaf
    /// future of gdex that waits on a task and spends the budget itself.
    pub(crate) fn poll_result(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, Error>> {
        let this = self;
        let task = this
            .task
            .as_mut()
            .expect("a gdex::Task was polled after detach or cancel");
        let finished = task.is_finished();
        match contain_waker(cx, finished, |cx| Pin::new(&mut *task).poll(cx)) {
            Poll::Ready(Some(Ok(value))) => Poll::Ready(Ok(value.into_inner())),
            Poll::Ready(Some(Err(failure))) => Poll::Ready(Err(match failure.into_kind() {
                FailureKind::Panicked(report) => Error::Panicked(report.take()),
                FailureKind::Error(error) => error,
            })),
            Poll::Ready(None) => Poll::Ready(Err(Error::Cancelled)),
            Poll::Pending => Poll::Pending,
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

#[cfg(test)]
mod tests {
    /// S7: a handle is small (it is what a spawner keeps per task).
    #[test]
    fn a_task_handle_is_two_words() {
        assert!(std::mem::size_of::<super::Task<u64>>() <= 2 * std::mem::size_of::<usize>());
    }
}
