//! The futures a caller of a [`StateMachine`](super::StateMachine) awaits (M1): a request for
//! a transition, and a wait for a state.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::{Shared, State};
use crate::sync::wait_queue::{lock, Parked};
use crate::Error;

/// A request for a transition ([`StateMachine::transition`](super::StateMachine::transition)): resolves
/// with the state the machine ended in.
///
/// Dropped before its transition started, it withdraws the request; after,
/// the transition runs to its end regardless.
#[must_use = "a request whose future is dropped before its turn is withdrawn: await it or detach it"]
pub struct TransitionRequest<S: State> {
    pub(super) shared: Arc<Shared<S>>,
    pub(super) id: u64,
    pub(super) done: bool,
}

impl<S: State> TransitionRequest<S> {
    /// Keeps the request queued with nobody awaiting it: it runs in its
    /// turn, and its outcome is dropped.
    pub fn detach(mut self) {
        let mut inner = lock(&self.shared.inner);
        if let Some(request) = inner.requests.get_mut(&self.id) {
            if request.outcome.is_some() {
                inner.requests.remove(&self.id);
            } else {
                request.abandoned = true;
                request.waker = None;
            }
        }
        self.done = true;
    }
}

impl<S: State> Future for TransitionRequest<S> {
    type Output = Result<S, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        assert!(
            !self.done,
            "a TransitionRequest was polled after it resolved"
        );
        // A leaf (P11): checked before the outcome is taken.
        let proceed = std::task::ready!(crate::task::coop::poll_proceed(cx));
        let mut inner = lock(&self.shared.inner);
        let request = inner
            .requests
            .get_mut(&self.id)
            .expect("a pending request has its entry");
        if let Some(outcome) = request.outcome.take() {
            proceed.made_progress();
            inner.requests.remove(&self.id);
            drop(inner);
            self.done = true;
            return Poll::Ready(outcome);
        }
        match &mut request.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            slot => *slot = Some(Parked::new(cx.waker())),
        }
        Poll::Pending
    }
}

impl<S: State> Drop for TransitionRequest<S> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut inner = lock(&self.shared.inner);
        let Some(request) = inner.requests.get_mut(&self.id) else {
            return;
        };
        if request.outcome.is_some() {
            inner.requests.remove(&self.id);
        } else if request.started {
            request.abandoned = true;
            request.waker = None;
        } else {
            // Not started: withdrawn.
            inner.requests.remove(&self.id);
            let id = self.id;
            inner.queue.retain(|&q| q != id);
        }
    }
}

impl<S: State> Debug for TransitionRequest<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransitionRequest")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// Resolves when the machine reaches a state
/// ([`StateMachine::wait_for_state`](super::StateMachine::wait_for_state)).
#[must_use = "futures do nothing unless awaited"]
pub struct WaitForState<S: State> {
    pub(super) shared: Arc<Shared<S>>,
    pub(super) id: Option<u64>,
    pub(super) ready: Option<Result<S, Error>>,
}

// Never pinned structurally: the state it may hold is moved out by value.
impl<S: State> Unpin for WaitForState<S> {}

impl<S: State> Future for WaitForState<S> {
    type Output = Result<S, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // A leaf (P11): checked before the outcome is taken.
        let proceed = std::task::ready!(crate::task::coop::poll_proceed(cx));
        if let Some(ready) = self.ready.take() {
            proceed.made_progress();
            return Poll::Ready(ready);
        }
        let Some(id) = self.id else {
            panic!("a WaitForState was polled after it resolved");
        };
        let mut inner = lock(&self.shared.inner);
        let waiter = inner
            .waiters
            .get_mut(&id)
            .expect("a pending wait has its entry");
        if let Some(outcome) = waiter.outcome.take() {
            proceed.made_progress();
            inner.waiters.remove(&id);
            drop(inner);
            self.id = None;
            return Poll::Ready(outcome);
        }
        match &mut waiter.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            slot => *slot = Some(Parked::new(cx.waker())),
        }
        Poll::Pending
    }
}

impl<S: State> Drop for WaitForState<S> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            lock(&self.shared.inner).waiters.remove(&id);
        }
    }
}

impl<S: State> Debug for WaitForState<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitForState").finish_non_exhaustive()
    }
}
