//! What a transition function gets (M1): the edge it runs, the machine's
//! real state, its interruption, and the way on to another edge.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use super::{Shared, State};
use crate::sync::wait_queue::{lock, WaitQueue};
use crate::{Error, Scheduler};

/// One transition's own state, shared by its [`TransitionContext`], its
/// [`Interrupted`] futures and the machine.
#[derive(Default)]
pub(crate) struct ContextShared {
    inner: Mutex<ContextInner>,
}

#[derive(Default)]
struct ContextInner {
    interrupted: bool,
    ended: bool,
    /// It ended because its run was dropped (its scheduler shut down, or
    /// the `continue_to` that ran it was dropped), maybe in the middle of
    /// a poll of its function: the rest of that poll finds it cancelled.
    cancelled: bool,
    /// The function set the state or continued: the machine does not
    /// commit the edge's target when it returns.
    took_over: bool,
    /// A `continue_to` of this transition runs: the machine is the
    /// continued edge's until it returns.
    continuing: bool,
    /// The pending [`Interrupted`] futures, each with its key (it leaves
    /// when dropped).
    wakers: WaitQueue,
}

impl ContextShared {
    /// Latches an interruption and wakes the waits for it.
    pub(crate) fn interrupt(&self) {
        let mut inner = lock(&self.inner);
        if inner.ended {
            return;
        }
        inner.interrupted = true;
        inner.wakers.notify_all();
    }

    /// Ends the transition: its interrupt waits resolve (with
    /// `Cancelled` unless it was interrupted), and its context may no
    /// longer change the state. `cancelled` if its run was dropped rather
    /// than its function returned. Called under the machine's lock, so
    /// that a `set_state` (which takes both) is wholly before it or not
    /// at all.
    pub(super) fn end(&self, cancelled: bool) {
        let mut inner = lock(&self.inner);
        inner.ended = true;
        inner.cancelled = cancelled;
        inner.wakers.notify_all();
    }

    /// How the transition ended, if it did: `Some(true)` if cancelled.
    pub(super) fn ended(&self) -> Option<bool> {
        let inner = lock(&self.inner);
        inner.ended.then_some(inner.cancelled)
    }

    pub(crate) fn took_over(&self) -> bool {
        lock(&self.inner).took_over
    }

    /// Whether the context may change the state now: `Err(Cancelled)` if
    /// its run was dropped under its function (nothing to change any
    /// more); panics on misuse: its transition has ended (a context kept
    /// past its function's end), or one of its continuations runs (the
    /// machine is that edge's).
    fn check(inner: &ContextInner, what: &str) -> Result<(), Error> {
        if inner.cancelled {
            return Err(Error::Cancelled);
        }
        assert!(
            !inner.ended,
            "TransitionContext::{what} was called after its transition ended: a context is only \
             valid while its transition function runs (do not keep it in a task that outlives it)"
        );
        assert!(
            !inner.continuing,
            "TransitionContext::{what} was called while a continue_to of the same transition \
             runs: the machine is the continued edge's until it returns, and a transition \
             continues through one edge at a time (await each continue_to before going on)"
        );
        Ok(())
    }

    /// Marks the state as the function's to set, if it may set it now
    /// (see `check`).
    fn take_over(&self, what: &str) -> Result<(), Error> {
        let mut inner = lock(&self.inner);
        Self::check(&inner, what)?;
        inner.took_over = true;
        Ok(())
    }

    /// Takes the state over for a continuation, until the guard drops.
    fn begin_continuation(self: &Arc<Self>) -> Result<Continuing, Error> {
        let mut inner = lock(&self.inner);
        Self::check(&inner, "continue_to")?;
        inner.took_over = true;
        inner.continuing = true;
        Ok(Continuing(self.clone()))
    }
}

/// A continuation running: the context may change the state again once
/// it drops.
struct Continuing(Arc<ContextShared>);

impl Drop for Continuing {
    fn drop(&mut self) {
        lock(&self.0.inner).continuing = false;
    }
}

/// Ends a context if its transition's future is dropped before its end
/// (forgotten once it ended).
pub(super) struct EndOnDrop<'a, S: State> {
    pub(super) shared: &'a Arc<Shared<S>>,
    pub(super) me: &'a Arc<ContextShared>,
}

impl<S: State> Drop for EndOnDrop<'_, S> {
    fn drop(&mut self) {
        let mut inner = lock(&self.shared.inner);
        inner.active.retain(|cx| !Arc::ptr_eq(cx, self.me));
        self.me.end(true);
    }
}

/// What a transition function gets: the edge it runs (`from`, `to`), the
/// machine's real state, its interruption, and
/// [`continue_to`](TransitionContext::continue_to). Valid while the
/// function runs: a call that changes the state after its end panics.
pub struct TransitionContext<S: State> {
    shared: Arc<Shared<S>>,
    me: Arc<ContextShared>,
    from: S,
    to: S,
}

impl<S: State> TransitionContext<S> {
    pub(super) fn new(shared: Arc<Shared<S>>, me: Arc<ContextShared>, from: S, to: S) -> Self {
        TransitionContext {
            shared,
            me,
            from,
            to,
        }
    }

    /// The state the edge leaves (fixed for the function, whatever it sets).
    pub fn from(&self) -> S {
        self.from
    }

    /// The state the edge leads to (fixed for the function).
    pub fn to(&self) -> S {
        self.to
    }

    /// The machine's real state now.
    pub fn state(&self) -> S {
        lock(&self.shared.inner).state
    }

    /// The scheduler the machine's transitions run on.
    pub fn scheduler(&self) -> &Scheduler {
        &self.shared.scheduler
    }

    /// Sets the machine's real state now (an intermediate state, or where
    /// the transition lands instead of `to`): waits for it resolve, and the
    /// machine no longer commits `to` when the function returns. Not
    /// rolled back if the function then fails.
    ///
    /// If the transition was cancelled under its function (its scheduler
    /// shut down, or the `continue_to` that ran it was dropped), this
    /// changes nothing.
    ///
    /// # Panics
    /// If the transition has ended, or while one of its
    /// [`continue_to`](TransitionContext::continue_to)s runs (the machine
    /// is the continued edge's until it returns).
    pub fn set_state(&self, state: S) {
        // Both locks, as the transition's end takes them: the state is set
        // wholly before the end, or not at all.
        let mut inner = lock(&self.shared.inner);
        if self.me.take_over("set_state").is_ok() {
            inner.set_state(state);
        }
    }

    /// Resolves with `Ok(())` when [`StateMachine::interrupt`] interrupts
    /// this transition (at once if it already did, or if the machine was
    /// dropped), or with [`Error::Cancelled`] once the transition ended
    /// without one.
    ///
    /// [`StateMachine::interrupt`]: super::StateMachine::interrupt
    pub fn interrupted(&self) -> Interrupted {
        Interrupted {
            me: self.me.clone(),
            key: None,
        }
    }

    /// Runs the edge from this one's target (or from the state the
    /// function set) to `next` now, before any queued request: the
    /// machine stays this request's until the chain ends, and the request
    /// resolves with where the chain lands. If the function has not set the
    /// state, the edge to `next` is checked first ([`Error::InvalidTransition`]
    /// and no change if there is none), then `to` is committed and the
    /// next function runs; its failure is returned, and `to` stays
    /// committed. A scheduler that has shut down, or a transition
    /// cancelled under its function, gives [`Error::Cancelled`].
    ///
    /// Dropping the future before it resolves (a
    /// [`timeout`](crate::timeout) around it) cancels the continued edge:
    /// its function's future is dropped at its next suspension point, as a
    /// dropped [`Task`](crate::Task)'s is, and the state stays where the
    /// chain had got to.
    ///
    /// # Panics
    /// When first polled, if the transition has ended, or if another
    /// `continue_to` of it runs (two awaited together): a transition
    /// continues through one edge at a time.
    pub fn continue_to(&self, next: S) -> impl Future<Output = Result<(), Error>> + Send + 'static {
        let shared = self.shared.clone();
        let me = self.me.clone();
        let to = self.to;
        async move {
            let set_before = {
                let inner = lock(&me.inner);
                ContextShared::check(&inner, "continue_to")?;
                inner.took_over
            };
            let from = if set_before {
                lock(&shared.inner).state
            } else {
                to
            };
            if !shared.edges.contains_key(&(from, next)) {
                return Err(Shared::invalid(from, next));
            }
            let _continuing = me.begin_continuation()?;
            // `to` is committed as the next edge starts, in one step, if
            // this transition has not ended meanwhile.
            let commit = (!set_before).then_some(to);
            // A scheduler that has shut down refuses the next edge: the
            // machine's requests give that as `Cancelled`.
            shared
                .run_edge(from, next, Some((me.clone(), commit)))
                .await
                .unwrap_or(Err(Error::Cancelled))
        }
    }
}

impl<S: State> std::fmt::Debug for TransitionContext<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransitionContext")
            .field("from", &self.from)
            .field("to", &self.to)
            .finish_non_exhaustive()
    }
}

/// An interruption of a transition ([`TransitionContext::interrupted`]).
#[must_use = "futures do nothing unless awaited"]
pub struct Interrupted {
    me: Arc<ContextShared>,
    /// Its entry among the context's waiting futures, once it waited.
    key: Option<usize>,
}

impl Future for Interrupted {
    type Output = Result<(), Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        // A leaf (P11): checked before the interruption is taken.
        let proceed = std::task::ready!(crate::task::coop::poll_proceed(cx));
        let mut inner = lock(&this.me.inner);
        if inner.interrupted || inner.ended {
            proceed.made_progress();
            inner.wakers.remove(&mut this.key);
            return Poll::Ready(if inner.interrupted {
                Ok(())
            } else {
                Err(Error::Cancelled)
            });
        }
        inner.wakers.park(&mut this.key, cx.waker());
        Poll::Pending
    }
}

impl Drop for Interrupted {
    fn drop(&mut self) {
        if self.key.is_some() {
            lock(&self.me.inner).wakers.remove(&mut self.key);
        }
    }
}

impl std::fmt::Debug for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interrupted").finish_non_exhaustive()
    }
}
