//! The cooperative budget (P11): how many operations of gdex's leaf futures
//! a task may complete in one poll before they make it yield.
//!
//! A poll is never interrupted, so a task that loops over futures that are
//! always ready (a channel with items waiting, a resolved promise, a timer
//! already due, a finished `Task`) would hold its thread for as long as the
//! loop lasts: the main loop draws no frame, a worker's neighbours and
//! GLib timers wait. So every poll of a task starts with [`BUDGET`] units
//! (tokio's figure, for the same reasons: enough to amortise a wake-up, few
//! enough that a poll stays short), each leaf future spends one when it
//! completes, and once they are gone a leaf returns `Pending` once, having
//! woken its task: the task goes to the back of its queue and its next poll
//! starts with a full budget.
//!
//! **Where it lives.** One thread-local `Cell<Option<u8>>`, `None` meaning
//! unconstrained: its initial value, so a future polled by another executor
//! outside any gdex poll never yields for it. Const-initialised and with no
//! destructor, so every access is one TLS-relative load or store: no lazy
//! initialisation, no registration at thread exit, no allocation.
//!
//! **Where it is reset.** [`enter_poll`] gives the thread a full budget
//! until its guard drops, and then puts the previous one back, so nested
//! polls (a `block_on` inside a task) do not spend or refill the outer
//! one. It is entered by every task's poll (`CatchUnwind::poll`: main,
//! pool, context schedulers, pinned, thread-per-core, blocking jobs alike),
//! by each poll of `block_on`'s and `wait_for`'s own future, and by each
//! resumption of a fiber by its worker's fiber scheduler (a fiber's wait
//! counts as its poll; a fiber resumed inside its task's poll has the
//! task's). [`enter_unconstrained`] is the other scope: `block_on`'s loop
//! and a context scheduler's dispatch run everything that is not one of
//! their own polls (GLib callbacks, work items, other executors' tasks in a
//! nested loop) unconstrained, as at top level.
//!
//! **How a leaf spends it.** [`poll_proceed`] first: `Pending` (and a
//! `wake_by_ref` of the task) if the budget is spent, before the leaf takes
//! anything, so nothing is lost; otherwise a [`Proceed`], and the leaf calls
//! [`Proceed::made_progress`] only when it completes. A leaf that returns
//! `Pending` has spent nothing. [`poll_leaf`] does both around a poll
//! function. `yield_now` is no leaf: it always yields, and the poll after
//! it has a full budget anyway.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The units a task may spend in one poll.
pub(crate) const BUDGET: u8 = 128;

thread_local! {
    /// What is left of the budget of the poll running on this thread;
    /// `None`: unconstrained (outside any gdex poll, or inside
    /// [`unconstrained`]).
    static LEFT: Cell<Option<u8>> = const { Cell::new(None) };
}

/// The guard of [`enter_poll`] and [`enter_unconstrained`]: puts the
/// previous budget back when it drops, also on unwind.
#[must_use = "the budget is restored when the guard drops"]
pub(crate) struct Scope(Option<u8>);

impl Drop for Scope {
    #[inline]
    fn drop(&mut self) {
        LEFT.with(|left| left.set(self.0));
    }
}

/// A full budget for the poll about to run on this thread, until the guard
/// drops.
#[inline]
pub(crate) fn enter_poll() -> Scope {
    Scope(LEFT.with(|left| left.replace(Some(BUDGET))))
}

/// No budget at all until the guard drops: what runs meanwhile never
/// yields for it.
#[inline]
pub(crate) fn enter_unconstrained() -> Scope {
    Scope(LEFT.with(|left| left.replace(None)))
}

/// A full budget again, in the scope already entered: for a fiber that
/// went on without suspending (its wake came while its worker watched for
/// it), which counts as a new resumption.
#[inline]
pub(crate) fn refill() {
    LEFT.with(|left| {
        if left.get().is_some() {
            left.set(Some(BUDGET));
        }
    });
}

/// True unless the running poll's budget is spent.
#[inline]
pub(crate) fn has_budget_remaining() -> bool {
    LEFT.with(Cell::get) != Some(0)
}

/// Leave to complete one operation, given by [`poll_proceed`]: nothing is
/// spent until [`made_progress`](Proceed::made_progress) says the operation
/// completed. Dropped without it (the operation is pending), it spends
/// nothing.
#[must_use = "call made_progress when the operation completes"]
#[derive(Debug)]
pub(crate) struct Proceed(());

impl Proceed {
    /// The operation completed: one unit is spent.
    #[inline]
    pub(crate) fn made_progress(self) {
        LEFT.with(|left| {
            if let Some(n) = left.get() {
                left.set(Some(n.saturating_sub(1)));
            }
        });
    }
}

/// The budget check of a leaf future, before it takes anything: `Pending`,
/// with the task woken (it goes to the back of its queue and its next poll
/// has a full budget), if the running poll's budget is spent; otherwise
/// leave to proceed.
///
/// The waker is woken directly: this runs inside the task's own poll, under
/// no lock of gdex's, and a waker that panics there panics the poll, as
/// anything else in it would.
#[inline]
pub(crate) fn poll_proceed(cx: &mut Context<'_>) -> Poll<Proceed> {
    if has_budget_remaining() {
        Poll::Ready(Proceed(()))
    } else {
        spent(cx)
    }
}

#[cold]
#[inline(never)]
fn spent(cx: &mut Context<'_>) -> Poll<Proceed> {
    cx.waker().wake_by_ref();
    Poll::Pending
}

/// A leaf future's poll under the budget: [`poll_proceed`], then `poll`,
/// one unit spent if it completed.
#[inline]
pub(crate) fn poll_leaf<T>(
    cx: &mut Context<'_>,
    poll: impl FnOnce(&mut Context<'_>) -> Poll<T>,
) -> Poll<T> {
    let proceed = std::task::ready!(poll_proceed(cx));
    let out = std::task::ready!(poll(cx));
    proceed.made_progress();
    Poll::Ready(out)
}

/// Runs `future` outside the cooperative budget (P11): gdex's futures
/// awaited inside it never make the task yield for the budget, as if it
/// were polled by another executor. The escape hatch of tokio's
/// `task::coop::unconstrained`: for a loop that must not be split across
/// polls, at the price of holding its thread for as long as it runs (on
/// the main thread, no frame is drawn meanwhile).
///
/// Every gdex task's poll has a budget of 128 operations: a channel's send
/// or receive, a promise, a timer, a `Task` handle and the other leaf
/// futures each spend one when they complete, and once it is spent they
/// return `Pending` once, having woken the task, so a loop over futures
/// that are always ready still lets its neighbours, the main loop's frames
/// and its worker's timers run.
///
/// ```
/// use std::future::Future;
/// use std::task::Poll;
///
/// let (tx, rx) = gdex::channel(1000);
/// for i in 0..1000 {
///     tx.try_send(i).unwrap();
/// }
/// // One poll takes every item: no receive is made to yield.
/// let task = gdex::spawn(gdex::unconstrained(std::future::poll_fn(move |cx| {
///     let mut sum = 0;
///     for _ in 0..1000 {
///         match std::pin::pin!(rx.recv()).poll(cx) {
///             Poll::Ready(item) => sum += item.unwrap(),
///             Poll::Pending => panic!("an unconstrained receive yielded"),
///         }
///     }
///     Poll::Ready(sum)
/// })));
/// assert_eq!(gdex::block_on(task).unwrap(), 499_500);
/// ```
pub fn unconstrained<F: Future>(future: F) -> Unconstrained<F> {
    Unconstrained { future }
}

pin_project_lite::pin_project! {
    /// The future of [`unconstrained`].
    #[must_use = "futures do nothing unless awaited"]
    #[derive(Debug)]
    pub struct Unconstrained<F> {
        #[pin]
        future: F,
    }
}

impl<F: Future> Future for Unconstrained<F> {
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let _unconstrained = enter_unconstrained();
        self.project().future.poll(cx)
    }
}

/// Spends one unit of the running task's cooperative budget (P11), and
/// yields once to the scheduler first if it is spent: a yield point for a
/// long computation that awaits nothing of gdex's, which yields only as
/// often as the budget says rather than at every call (as
/// [`yield_now`](crate::yield_now) does). Outside a gdex task's poll, or
/// inside [`unconstrained`], it never yields.
///
/// ```
/// async fn sum(input: impl Iterator<Item = u64>) -> u64 {
///     let mut sum = 0;
///     for i in input {
///         sum += i;
///         // Every 128 items, the task goes to the back of its queue.
///         gdex::consume_budget().await;
///     }
///     sum
/// }
/// let task = gdex::spawn(sum(1..=10_000));
/// assert_eq!(gdex::block_on(task).unwrap(), 50_005_000);
/// ```
pub async fn consume_budget() {
    std::future::poll_fn(|cx| poll_leaf(cx, |_| Poll::Ready(()))).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn left() -> Option<u8> {
        LEFT.with(Cell::get)
    }

    /// tokio's `budgeting` unit test: unconstrained outside a poll; a poll's
    /// budget is spent only by completed operations; nested scopes put the
    /// outer budget back; a spent budget gives `Pending` once, with a wake.
    #[test]
    fn the_budget_is_spent_by_completions_and_restored_by_scopes() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        assert_eq!(left(), None, "unconstrained outside any poll");
        let Poll::Ready(proceed) = poll_proceed(&mut cx) else {
            panic!("an unconstrained check yielded")
        };
        proceed.made_progress();
        assert_eq!(left(), None);
        {
            let _poll = enter_poll();
            assert_eq!(left(), Some(BUDGET));
            // Pending: nothing spent.
            let Poll::Ready(_pending) = poll_proceed(&mut cx) else {
                panic!()
            };
            assert_eq!(left(), Some(BUDGET));
            assert!(poll_leaf(&mut cx, |_| Poll::Ready(())).is_ready());
            assert_eq!(left(), Some(BUDGET - 1));
            {
                let _nested = enter_poll();
                assert!(poll_leaf(&mut cx, |_| Poll::Ready(())).is_ready());
                assert_eq!(left(), Some(BUDGET - 1), "a nested poll has its own");
                let _free = enter_unconstrained();
                assert!(poll_leaf(&mut cx, |_| Poll::Ready(())).is_ready());
                assert_eq!(left(), None);
            }
            assert_eq!(left(), Some(BUDGET - 1), "the outer budget is back");
            for _ in 1..BUDGET {
                assert!(poll_leaf(&mut cx, |_| Poll::Ready(())).is_ready());
            }
            assert_eq!(left(), Some(0));
            assert!(!has_budget_remaining());
            assert_eq!(count.0.load(Ordering::SeqCst), 0);
            assert!(poll_leaf(&mut cx, |_| Poll::Ready(())).is_pending());
            assert_eq!(count.0.load(Ordering::SeqCst), 1, "the task is woken");
            refill();
            assert_eq!(left(), Some(BUDGET));
        }
        assert_eq!(left(), None, "unconstrained again after the poll");
        refill();
        assert_eq!(left(), None, "a refill outside a poll gives no budget");
    }

    /// The budget is back after a poll that unwinds.
    #[test]
    fn a_poll_that_unwinds_restores_the_budget() {
        let unwound = std::panic::catch_unwind(|| {
            let _poll = enter_poll();
            panic!("unwind");
        });
        assert!(unwound.is_err());
        assert_eq!(left(), None);
    }
}
