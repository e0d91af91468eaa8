//! A group's members in the order they finish: [`TaskGroup::join_next`],
//! the group as a [`Stream`], and [`TaskGroup::abort_all`] (tokio's
//! `JoinSet` calls, on a group that keeps its results).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;

use super::output::{deliver, GroupOutput};
use super::task_group::TaskGroup;
use super::{lock, First, Joiner, Shared};
use crate::sync::wait_queue::Parked;

impl<T: GroupOutput> Joiner<T> {
    /// The next finished member's result, `None` once no member is running
    /// and none is left to give, or `Pending` (woken when a member
    /// finishes).
    fn poll_next(
        &mut self,
        shared: &Shared<T>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<T::Value, T::Error>>> {
        let mut state = lock(shared);
        while let Some(seq) = state.completed.pop_front() {
            // A result `close_with_results` took is no longer there.
            let Some(outcome) = state.results.remove(&seq) else {
                continue;
            };
            if matches!(state.first, First::At(first) if first == seq) {
                // Given here: `close` does not give it again, but gives the
                // next failure nobody was given.
                state.first = match state.later_failures.pop_front() {
                    Some(next) => First::At(next),
                    None => First::Given,
                };
            }
            self.leave(&mut state.joiners);
            drop(state);
            // `into_result` and `From` are user code: after the release.
            return Poll::Ready(Some(deliver::<T>(outcome)));
        }
        if state.live == 0 {
            self.leave(&mut state.joiners);
            return Poll::Ready(None);
        }
        match self.key {
            Some(key) => match &mut state.joiners[key] {
                Some(parked) => parked.update(cx.waker()),
                slot => *slot = Some(Parked::new(cx.waker())),
            },
            None => self.key = Some(state.joiners.insert(Some(Parked::new(cx.waker())))),
        }
        Poll::Pending
    }

    fn leave(&mut self, joiners: &mut slab::Slab<Option<Parked>>) {
        if let Some(key) = self.key.take() {
            joiners.remove(key);
        }
    }
}

impl<T> Joiner<T> {
    /// Gives up the registration (a future or stream dropped while
    /// waiting).
    pub(super) fn drop_in(&mut self, shared: &Shared<T>) {
        if self.key.is_some() {
            let parked = {
                let mut state = lock(shared);
                self.key.take().and_then(|key| state.joiners.remove(key))
            };
            // A waker's drop is user code: after the release.
            drop(parked);
        }
    }
}

/// Panics, saying what to do, unless the group keeps its results.
fn check_keeps_results<T>(shared: &Shared<T>, call: &str) {
    assert!(
        shared.keep_results,
        "gdex::TaskGroup::{call} on a group that does not keep results: its members' \
         outputs are dropped as they finish. Build it with \
         TaskGroup::builder().keep_results(true) to get each result back as its member \
         finishes (or use close() to wait for them all)"
    );
}

impl<T: GroupOutput + 'static> TaskGroup<T> {
    /// The result of the next member to finish (tokio's
    /// `JoinSet::join_next`), in the order they finish: its output through
    /// [`GroupOutput::into_result`], or for a member that panicked
    /// [`Error::Panicked`](crate::Error::Panicked) and for one cancelled or
    /// dropped unfinished [`Error::Cancelled`](crate::Error::Cancelled),
    /// each through `From`. `None` once no member is running and every
    /// result was given. Cancel-safe: dropping the future loses no result.
    ///
    /// A result given here is gone from the group:
    /// [`close_with_results`](TaskGroup::close_with_results) gives the
    /// others, and a failure given here is not [`close`](TaskGroup::close)'s
    /// to give again (it gives the first failure not given here). With
    /// [`cancel_on_error`](crate::TaskGroupBuilder::cancel_on_error), the
    /// first failure still cancels the others, which then finish as
    /// cancelled.
    ///
    /// ```
    /// let group = gdex::TaskGroup::builder().keep_results(true).build();
    /// // Three members, each finishing once its gate opens.
    /// let mut gates = Vec::new();
    /// for i in 0..3u32 {
    ///     let (gate, opened) = gdex::Promise::<()>::new();
    ///     gates.push(Some(gate));
    ///     group
    ///         .spawn(async move {
    ///             opened.await?;
    ///             Ok::<_, gdex::Error>(i)
    ///         })
    ///         .unwrap();
    /// }
    /// let order = gdex::block_on(async {
    ///     let mut order = Vec::new();
    ///     for i in [2, 0, 1] {
    ///         gates[i].take().unwrap().resolve(());
    ///         if let Some(finished) = group.join_next().await {
    ///             order.push(finished?);
    ///         }
    ///     }
    ///     Ok::<_, gdex::Error>(order)
    /// });
    /// assert_eq!(order.unwrap(), [2, 0, 1]);
    /// assert!(gdex::block_on(group.join_next()).is_none());
    /// ```
    ///
    /// # Panics
    /// If the group was built without
    /// [`keep_results`](crate::TaskGroupBuilder::keep_results): it drops
    /// its members' outputs as they finish.
    pub fn join_next(&self) -> impl Future<Output = Option<Result<T::Value, T::Error>>> + 'static {
        check_keeps_results(&self.shared, "join_next()");
        JoinNext {
            shared: self.shared.clone(),
            joiner: Joiner::default(),
        }
    }

    /// Cancels every member running now (tokio's `JoinSet::abort_all`),
    /// without closing the group: each finishes as cancelled once its
    /// future is dropped (X1), which [`join_next`](TaskGroup::join_next)
    /// then gives as [`Error::Cancelled`](crate::Error::Cancelled), and new
    /// members may still be spawned. A member cancelled so is no failure:
    /// it neither triggers
    /// [`cancel_on_error`](crate::TaskGroupBuilder::cancel_on_error) nor is
    /// what [`close`](TaskGroup::close) reports. A member being spawned by
    /// another thread at the same moment may escape it.
    ///
    /// ```
    /// let group = gdex::TaskGroup::<Result<(), gdex::Error>>::builder()
    ///     .keep_results(true)
    ///     .build();
    /// group.spawn(std::future::pending()).unwrap();
    /// group.abort_all();
    /// let first = gdex::block_on(group.join_next()).unwrap();
    /// assert!(matches!(first, Err(gdex::Error::Cancelled)));
    /// // Still open.
    /// group.spawn(async { Ok(()) }).unwrap();
    /// assert!(gdex::block_on(group.close()).is_ok());
    /// ```
    pub fn abort_all(&self) {
        let tasks = lock(&self.shared).abort_members();
        // Dropping a handle cancels its task, whose guard takes the lock.
        drop(tasks);
    }
}

/// [`TaskGroup::join_next`]'s future.
struct JoinNext<T> {
    shared: Arc<Shared<T>>,
    joiner: Joiner<T>,
}

impl<T: GroupOutput> Future for JoinNext<T> {
    type Output = Option<Result<T::Value, T::Error>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        // A leaf future (P11): a result ready at once spends the budget.
        crate::task::coop::poll_leaf(cx, |cx| this.joiner.poll_next(&this.shared, cx))
    }
}

impl<T> Unpin for JoinNext<T> {}

impl<T> Drop for JoinNext<T> {
    fn drop(&mut self) {
        self.joiner.drop_in(&self.shared);
    }
}

/// The results of a group that keeps them, in the order its members
/// finish: each item is what [`TaskGroup::join_next`] gives; the stream
/// ends once no member is running and every result was given (and may
/// give more if members are spawned after).
///
/// ```
/// use futures::StreamExt;
/// let group = gdex::TaskGroup::builder().keep_results(true).build();
/// for i in 0..3u32 {
///     group.spawn(async move { Ok::<_, gdex::Error>(i) }).unwrap();
/// }
/// let mut sum = 0;
/// gdex::block_on(async {
///     let mut group = group;
///     while let Some(result) = group.next().await {
///         sum += result.unwrap();
///     }
/// });
/// assert_eq!(sum, 3);
/// ```
///
/// # Panics
/// When polled, if the group was built without
/// [`keep_results`](crate::TaskGroupBuilder::keep_results).
impl<T: GroupOutput + 'static> Stream for TaskGroup<T> {
    type Item = Result<T::Value, T::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        check_keeps_results(&this.shared, "poll_next() (the group as a Stream)");
        crate::task::coop::poll_leaf(cx, |cx| this.joiner.poll_next(&this.shared, cx))
    }
}
