//! [`TaskTracker`]: waits for every task spawned through it, keeping no
//! result (tokio-util's `TaskTracker`).
//!
//! The count of tracked futures and the closed flag share one atomic word
//! (`live << 1 | closed`), so tracking a future and letting it go are one
//! atomic add each; the waiters of [`TaskTracker::wait`] sit under a lock
//! only they and the last release take. A waiter registers, then reads
//! the word again: whoever makes the word "closed and empty" takes that
//! lock after doing so, so a waiter either sees the word or is woken.
//!
//! Each time the word becomes "closed and empty", an epoch counter goes up
//! before the waiters are woken; a wait remembers the epoch it was made in,
//! so one made before such a moment resolves even if the tracker was
//! reopened (and tracks a future) by the time it is polled, as tokio-util's
//! `wait` does (it is resistant to ABA).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use slab::Slab;

use crate::sync::wait_queue::{lock, Parked};
use crate::{Scheduler, Task};

const CLOSED: usize = 1;
const ONE: usize = 2;

struct Inner {
    /// `live << 1 | closed`.
    state: AtomicUsize,
    /// How many times the word became "closed and empty" (see the module
    /// docs).
    epoch: AtomicUsize,
    /// [`TaskTracker::wait`]'s futures. A waker let go of under the lock
    /// is dropped after its release ([`Parked`]).
    waiters: Mutex<Slab<Option<Parked>>>,
}

impl Inner {
    fn is_done(state: usize) -> bool {
        state == CLOSED
    }

    /// The word became "closed and empty": a new epoch, and every waiter
    /// woken.
    fn wake_waiters(&self) {
        // Before the lock: a waiter that registers after we take it reads
        // the new epoch once it has registered.
        self.epoch.fetch_add(1, Ordering::AcqRel);
        let wakers: Vec<_> = lock(&self.waiters)
            .iter_mut()
            .filter_map(|(_, parked)| parked.take().map(Parked::into_waker))
            .collect();
        wakers.into_iter().for_each(crate::diagnostics::panic::wake);
    }

    fn track(&self) {
        let before = self.state.fetch_add(ONE, Ordering::Relaxed);
        assert!(
            before < usize::MAX - ONE,
            "gdex::TaskTracker: more tracked futures than a usize counts"
        );
    }

    fn release(&self) {
        let before = self.state.fetch_sub(ONE, Ordering::AcqRel);
        if Inner::is_done(before - ONE) {
            self.wake_waiters();
        }
    }
}

/// Waits for every task spawned (or future tracked) through it, keeping
/// none of their results (tokio-util's `TaskTracker`): for a service's
/// shutdown, "stop accepting work, then wait for what is running". Unlike
/// a [`TaskGroup`](crate::TaskGroup) it owns nothing: each spawn gives its
/// [`Task`] handle back (drop it to cancel the task, or
/// [`detach`](Task::detach) it), dropping the tracker changes nothing, and
/// its tasks may run on any scheduler.
///
/// A future is tracked from its spawn until it is dropped (finished or
/// cancelled: X1). [`wait`](TaskTracker::wait) resolves once the tracker
/// is [closed](TaskTracker::close) and nothing is tracked; closing only
/// marks that moment, it refuses nothing. Clones share one tracker.
///
/// ```
/// use std::time::Duration;
/// let tracker = gdex::TaskTracker::new();
/// for ms in [5u64, 10, 15] {
///     tracker
///         .spawn(async move { gdex::sleep(Duration::from_millis(ms)).await })
///         .detach();
/// }
/// tracker.close();
/// gdex::block_on(tracker.wait());
/// assert!(tracker.is_empty());
/// ```
#[derive(Clone)]
pub struct TaskTracker {
    inner: Arc<Inner>,
}

impl Default for TaskTracker {
    fn default() -> Self {
        TaskTracker::new()
    }
}

impl TaskTracker {
    /// An open tracker, tracking nothing.
    pub fn new() -> TaskTracker {
        TaskTracker {
            inner: Arc::new(Inner {
                state: AtomicUsize::new(0),
                epoch: AtomicUsize::new(0),
                waiters: Mutex::new(Slab::new()),
            }),
        }
    }

    /// Spawns `future`, tracked, on the default pool (as [`spawn`](crate::spawn)).
    #[track_caller]
    pub fn spawn<F>(&self, future: F) -> Task<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        crate::spawn(self.track_future(future))
    }

    /// Spawns `future`, tracked, on `scheduler`.
    #[track_caller]
    pub fn spawn_on<F>(&self, scheduler: &Scheduler, future: F) -> Task<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        scheduler.spawn(self.track_future(future))
    }

    /// Spawns the `!Send` `future`, tracked, on `scheduler`, with the rules
    /// of [`Scheduler::spawn_local`].
    #[track_caller]
    pub fn spawn_local_on<F>(&self, scheduler: &Scheduler, future: F) -> Task<F::Output>
    where
        F: Future + 'static,
        F::Output: 'static,
    {
        scheduler.spawn_local(self.track_future(future))
    }

    /// `future`, tracked until it is dropped: for spawns of another kind
    /// (a fiber's, another executor's).
    pub fn track_future<F: Future>(&self, future: F) -> Tracked<F> {
        self.inner.track();
        Tracked {
            future,
            token: Token(self.inner.clone()),
        }
    }

    /// Marks the tracker closed, so that [`wait`](Self::wait) resolves once
    /// nothing is tracked; spawns are still accepted (and wait for them if
    /// they come first). True if it was open.
    pub fn close(&self) -> bool {
        let before = self.inner.state.fetch_or(CLOSED, Ordering::AcqRel);
        if Inner::is_done(before | CLOSED) && before & CLOSED == 0 {
            self.inner.wake_waiters();
        }
        before & CLOSED == 0
    }

    /// Opens a closed tracker again (a [`wait`](Self::wait) already
    /// resolved stays resolved). True if it was closed.
    pub fn reopen(&self) -> bool {
        self.inner.state.fetch_and(!CLOSED, Ordering::AcqRel) & CLOSED != 0
    }

    /// Whether the tracker is closed.
    pub fn is_closed(&self) -> bool {
        self.inner.state.load(Ordering::Acquire) & CLOSED != 0
    }

    /// How many futures it tracks (spawned and not yet dropped).
    pub fn len(&self) -> usize {
        self.inner.state.load(Ordering::Acquire) >> 1
    }

    /// True if it tracks nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Resolves once the tracker is closed and tracks nothing: at once if
    /// it is so already. Cancel-safe; each call's future waits on its own.
    ///
    /// A moment when the tracker is closed and empty resolves every future
    /// of `wait` made before it, even one polled only after the tracker was
    /// [reopened](Self::reopen) and tracks futures again (tokio-util's
    /// `wait` is so resistant to ABA).
    pub fn wait(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut wait = WaitGuard {
            epoch: self.inner.epoch.load(Ordering::Acquire),
            inner: self.inner.clone(),
            key: None,
        };
        // A leaf future (P11): a wait that is over spends the budget.
        std::future::poll_fn(move |cx| {
            crate::task::coop::poll_leaf(cx, |cx| {
                let inner = &wait.inner;
                let epoch = wait.epoch;
                let over = || {
                    Inner::is_done(inner.state.load(Ordering::Acquire))
                        || inner.epoch.load(Ordering::Acquire) != epoch
                };
                if over() {
                    return Poll::Ready(());
                }
                {
                    let mut waiters = lock(&inner.waiters);
                    match wait.key {
                        Some(key) => match &mut waiters[key] {
                            Some(parked) => parked.update(cx.waker()),
                            slot => *slot = Some(Parked::new(cx.waker())),
                        },
                        None => wait.key = Some(waiters.insert(Some(Parked::new(cx.waker())))),
                    }
                }
                // Read again after registering: a release that made it
                // "closed and empty" before we did wakes nobody we can see.
                if over() {
                    return Poll::Ready(());
                }
                Poll::Pending
            })
        })
    }
}

/// Leaves a waiter's slot when [`TaskTracker::wait`]'s future goes.
struct WaitGuard {
    inner: Arc<Inner>,
    /// The epoch the wait was made in.
    epoch: usize,
    key: Option<usize>,
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let parked = lock(&self.inner.waiters).remove(key);
            // A waker's drop is user code: after the release.
            drop(parked);
        }
    }
}

impl std::fmt::Debug for TaskTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskTracker")
            .field("len", &self.len())
            .field("closed", &self.is_closed())
            .finish()
    }
}

pin_project_lite::pin_project! {
    /// A future tracked by a [`TaskTracker`] until it is dropped: from
    /// [`TaskTracker::track_future`].
    pub struct Tracked<F> {
        #[pin]
        future: F,
        // After `future`: released once the future's own drop has run.
        token: Token,
    }
}

/// One tracked future's count, given back when dropped.
struct Token(Arc<Inner>);

impl Drop for Token {
    fn drop(&mut self) {
        self.0.release();
    }
}

impl<F: Future> Future for Tracked<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.project().future.poll(cx)
    }
}

impl<F> std::fmt::Debug for Tracked<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracked").finish_non_exhaustive()
    }
}
