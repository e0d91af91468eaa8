//! Panic containment: what a task's block stores as its output, the
//! wrapper that polls and drops every task's future, and wakers whose panic
//! is contained.
//!
//! Panics never cross a scheduler: every poll and the drop of every future
//! run inside `catch_unwind`, and a poll's panic becomes the task's output,
//! [`Error::Panicked`], for its waiter (S6). A panic nobody will read (the
//! task was detached, or its handle was dropped after it finished; a
//! destructor's) goes to the panic handler (X5; by default `g_critical`).

use std::cell::Cell;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use super::registry;
use crate::current::{Role, Slot};
use crate::diagnostics::panic::PanicSource;
use crate::diagnostics::record::{self, Kind};
use crate::diagnostics::tracking;
use crate::error::Error;

/// The waker of the gdex task whose future is being polled on this thread
/// (entered by `CatchUnwind::poll` for the poll), or null: see
/// [`contain_waker`].
// SAFETY: `task` owns `Role::Polling`; this is its one slot.
const POLLING: Slot<Waker> = unsafe { Slot::new(Role::Polling) };

/// Makes `waker` the waker of the gdex task being polled here until the
/// guard drops: for a fiber resumed by its thread's fiber scheduler, whose
/// waits poll with the fiber's own waker (it queues the fiber, and its
/// wake cannot panic: [`contain_waker`] need not wrap it).
#[inline]
pub(crate) fn enter_polling(waker: &Waker) -> crate::current::Entered {
    POLLING.enter(waker)
}

thread_local! {
    /// The last panic-containing wrapper made on this thread (see
    /// [`contain_waker`]).
    static CONTAINED: Cell<std::sync::Weak<ContainedWaker>> = const { Cell::new(std::sync::Weak::new()) };
}

/// A panic caught in a task, on its way to the waiter. Goes to the panic
/// handler if nobody takes it, naming the thread the task panicked on (not
/// the one that happens to drop the report; X5).
pub(crate) struct PanicReport {
    message: Option<String>,
    thread: Option<String>,
}

impl PanicReport {
    /// A report of a panic caught now, on this thread.
    fn caught(message: String) -> Self {
        PanicReport {
            message: Some(message),
            thread: std::thread::current().name().map(str::to_owned),
        }
    }

    pub(super) fn take(mut self) -> String {
        self.message.take().unwrap_or_default()
    }
}

impl Drop for PanicReport {
    fn drop(&mut self) {
        if let Some(message) = self.message.take() {
            crate::diagnostics::panic::report_from(PanicSource::Task, message, self.thread.take());
        }
    }
}

/// A task's output, kept in its block until its waiter takes it. Its drop
/// (when nobody takes it: the task was detached, or its handle dropped
/// after it finished) is contained like every other panic of a task (S6,
/// X5): async-task aborts the process if an output's destructor unwinds
/// (S6).
pub(crate) struct Output<T>(std::mem::ManuallyDrop<T>);

impl<T> Output<T> {
    fn new(value: T) -> Self {
        Output(std::mem::ManuallyDrop::new(value))
    }

    /// The value, for its waiter, who drops it as any value of theirs.
    pub(super) fn into_inner(self) -> T {
        let mut this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped (ManuallyDrop), so the value is
        // taken out exactly once and never dropped here.
        unsafe { std::mem::ManuallyDrop::take(&mut this.0) }
    }
}

impl<T> Drop for Output<T> {
    fn drop(&mut self) {
        // SAFETY: dropped exactly once, here; `into_inner` forgets `self`.
        let drop_value = || unsafe { std::mem::ManuallyDrop::drop(&mut self.0) };
        if let Err(payload) = catch_unwind(AssertUnwindSafe(drop_value)) {
            crate::diagnostics::panic::contain(PanicSource::Output, payload);
        }
    }
}

/// Why a task has no value: what its block stores instead. Boxed: the
/// block keeps room for its output beside its future, and a failure is
/// rare, so a bare [`FailureKind`] (48 bytes) would make every block whose
/// future is small 40 bytes bigger than this pointer does.
pub(crate) struct Failure(Box<FailureKind>);

/// What a [`Failure`] holds.
pub(crate) enum FailureKind {
    Panicked(PanicReport),
    /// Refused or stopped by gdex (a closed scheduler, a disposed object).
    Error(Error),
}

impl Failure {
    /// A task refused or stopped by gdex with `error`.
    #[cold]
    pub(crate) fn error(error: Error) -> Self {
        Failure(Box::new(FailureKind::Error(error)))
    }

    #[cold]
    fn panicked(report: PanicReport) -> Self {
        Failure(Box::new(FailureKind::Panicked(report)))
    }

    pub(super) fn into_kind(self) -> FailureKind {
        *self.0
    }
}

/// What a task's block stores as output.
pub(crate) type Outcome<T> = Result<Output<T>, Failure>;

/// Polls the inner future inside `catch_unwind`, turning a panic into the
/// task's output, and drops it inside `catch_unwind` too: async-task aborts
/// the process if a future's destructor unwinds, and S6 says a panic never
/// takes a worker down. A destructor's panic goes to the panic handler.
///
/// Each poll has a full cooperative budget (P11, `task::coop`): this is
/// where every scheduler's polls of a task pass.
///
/// It also keeps the task's entry in the registry of idle tasks of the pool
/// worker that polls it (S9, `task::registry`): made at the first `Pending`
/// in a pool's run loop (a worker's dispatch, or that of a scheduler of a
/// worker's own context; a task of any other scheduler records nowhere,
/// wherever it is polled), removed when the future finishes or is dropped.
pub(crate) struct CatchUnwind<F> {
    future: std::mem::ManuallyDrop<F>,
    idle: Idle,
}

impl<F> CatchUnwind<F> {
    /// Wraps a task's future; if a view of the per-task record wants it
    /// (O1: the dump, X8, and the features' views), the task gets an
    /// entry there, spawned at the caller's caller (every spawn
    /// function up to the public one is `#[track_caller]`), on the
    /// scheduler `scheduler` names (called only then).
    #[track_caller]
    #[inline]
    pub(crate) fn new(future: F, scheduler: impl FnOnce() -> String) -> Self {
        Self::located(future, None, std::panic::Location::caller(), scheduler)
    }

    /// [`new`](Self::new), for a task with a name.
    #[track_caller]
    #[inline]
    pub(crate) fn named(
        future: F,
        name: std::sync::Arc<str>,
        scheduler: impl FnOnce() -> String,
    ) -> Self {
        Self::located(
            future,
            Some(name),
            std::panic::Location::caller(),
            scheduler,
        )
    }

    /// [`new`](Self::new), for a fiber's or a blocking job's task: the
    /// views of the per-task record (O1) tell them apart.
    #[track_caller]
    #[inline]
    pub(crate) fn of_kind(future: F, kind: Kind, scheduler: impl FnOnce() -> String) -> Self {
        Self::spawned(
            future,
            record::Spawn {
                kind,
                name: None,
                location: std::panic::Location::caller(),
            },
            scheduler,
        )
    }

    /// [`new`](Self::new), spawned at `location` (a spawn made through a
    /// closure, where `#[track_caller]` does not reach).
    #[inline]
    pub(crate) fn located(
        future: F,
        name: Option<std::sync::Arc<str>>,
        location: &'static std::panic::Location<'static>,
        scheduler: impl FnOnce() -> String,
    ) -> Self {
        Self::spawned(
            future,
            record::Spawn {
                kind: Kind::Task,
                name,
                location,
            },
            scheduler,
        )
    }

    /// Wraps a task's future, tracked if a view of the per-task record
    /// wants it (O1).
    #[inline]
    fn spawned(future: F, spawn: record::Spawn, scheduler: impl FnOnce() -> String) -> Self {
        CatchUnwind {
            future: std::mem::ManuallyDrop::new(future),
            idle: Idle::new(tracking::track(spawn, scheduler)),
        }
    }
}

/// A task's record in a worker's registry of idle tasks (S9), or, for a
/// tracked task (X8), the mark of its entry in the task dump, which keeps
/// the record for it: 8 bytes in every task's block either way.
struct Idle(registry::Record);

const _: () = assert!(std::mem::size_of::<Idle>() == 8);

impl Idle {
    fn new(track: u32) -> Self {
        if track == 0 {
            Idle(registry::Record::new())
        } else {
            Idle(registry::Record::tracked(track))
        }
    }

    /// The task's entry in the per-task record (O1); 0: not tracked.
    #[inline]
    fn track(&self) -> u32 {
        self.0.track()
    }

    /// The task's poll returned `Pending`: make sure a registry that has not
    /// been closed holds its waker.
    #[inline]
    fn pending(&mut self, waker: &std::task::Waker) {
        match self.track() {
            0 => self.0.pending(waker),
            track => Self::tracked(track, |record| record.pending(waker)),
        }
    }

    /// The task finished or is dropped: forget its entry.
    #[inline]
    fn done(&mut self) {
        match self.track() {
            0 => self.0.done(),
            track => Self::tracked(track, registry::Record::done),
        }
    }

    /// Runs `f` on a tracked task's record, which its dump entry keeps.
    #[cold]
    fn tracked(track: u32, f: impl FnOnce(&mut registry::Record)) {
        tracking::with_word(track, |word| {
            // SAFETY: the entry's word is this task's record, put there by
            // `into_bits` below (0 at first: no record), and it is taken
            // (0 left in its place, should `f` unwind) before it is used.
            let mut record = unsafe { registry::Record::from_bits(std::mem::take(word)) };
            f(&mut record);
            *word = record.into_bits();
        })
    }
}

impl<F> Drop for CatchUnwind<F> {
    fn drop(&mut self) {
        // SAFETY: dropped exactly once, here, in place (pinning allows
        // dropping in place), and never used afterwards.
        let drop_inner = || unsafe { std::mem::ManuallyDrop::drop(&mut self.future) };
        if let Err(payload) = catch_unwind(AssertUnwindSafe(drop_inner)) {
            crate::diagnostics::panic::contain(PanicSource::Drop, payload);
        }
        self.idle.done();
        let track = self.idle.track();
        if track != 0 {
            tracking::forget(track);
        }
    }
}

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Outcome<F::Output>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `future` is structurally pinned: it is never moved out of
        // `self` (the Drop impl drops it in place), and `CatchUnwind` has no
        // `Unpin` impl of its own. `idle` is not pinned.
        let this = unsafe { self.get_unchecked_mut() };
        // P11: every poll of every task starts with a full budget, the
        // outer one (a nested poll's) back when it returns.
        let _budget = super::coop::enter_poll();
        if this.idle.track() != 0 {
            return this.poll_tracked(cx);
        }
        // SAFETY: as above.
        let future = unsafe { Pin::new_unchecked(&mut *this.future) };
        let polled = {
            let _polling = POLLING.enter(cx.waker());
            catch_unwind(AssertUnwindSafe(|| future.poll(cx)))
        };
        this.finish_poll(cx, polled)
    }
}

impl<F: Future> CatchUnwind<F> {
    /// A tracked task's poll (O1): its entry shows it running, its future
    /// gets a waker that marks it queued when woken, and the views see the
    /// poll.
    #[cold]
    #[inline(never)]
    fn poll_tracked(&mut self, cx: &mut Context<'_>) -> Poll<Outcome<F::Output>> {
        let track = self.idle.track();
        // SAFETY: `future` is structurally pinned (see `poll`).
        let future = unsafe { Pin::new_unchecked(&mut *self.future) };
        let polled = tracking::poll(track, cx.waker(), |waker| {
            let mut inner_cx = Context::from_waker(waker);
            let _polling = POLLING.enter(waker);
            catch_unwind(AssertUnwindSafe(|| future.poll(&mut inner_cx)))
        });
        self.finish_poll(cx, polled)
    }

    /// What a poll's result makes of the task: its registry entry (S9) and
    /// its outcome.
    #[inline]
    fn finish_poll(
        &mut self,
        cx: &Context<'_>,
        polled: std::thread::Result<Poll<F::Output>>,
    ) -> Poll<Outcome<F::Output>> {
        let this = self;
        match polled {
            Ok(Poll::Pending) => {
                this.idle.pending(cx.waker());
                Poll::Pending
            }
            Ok(Poll::Ready(value)) => {
                this.idle.done();
                Poll::Ready(Ok(Output::new(value)))
            }
            Err(payload) => {
                this.idle.done();
                Poll::Ready(Err(Failure::panicked(PanicReport::caught(
                    crate::diagnostics::panic::take_message(payload),
                ))))
            }
        }
    }
}

/// Runs `poll`, which may leave a waker with async-task (a `Task` handle's
/// poll), with a waker whose panic is contained.
///
/// async-task wakes the waker a task handle was polled with when the task
/// ends, on whichever thread ends it (a pool worker, a blocking-lane
/// thread), and aborts the process if that `wake` panics (its
/// `abort_on_panic`). So unless `poll` leaves no waker (`finished`, and a
/// first poll with a no-op waker is ready), or the waker is that of the
/// gdex task polling us (whose wake only queues that task), async-task
/// gets a waker of ours instead, whose
/// panic goes to the panic handler (X5, [`PanicSource::Waker`]): one
/// allocation, reused while this thread polls with the same waker and
/// async-task still holds the wrapper (a foreign executor re-polling a
/// pending handle, or awaiting many handles from one future).
#[inline]
pub(super) fn contain_waker<R>(
    cx: &mut Context<'_>,
    finished: bool,
    mut poll: impl FnMut(&mut Context<'_>) -> Poll<R>,
) -> Poll<R> {
    let polling = POLLING.get();
    // SAFETY: POLLING is non-null only for the extent of a
    // `CatchUnwind::poll` on this thread (scoped: reset when that poll
    // returns or unwinds; scopes nest across fiber switches too, since a
    // fiber never suspends inside a poll nested in it), and then points at
    // that poll's waker, which its caller keeps alive for the whole poll.
    let own = !polling.is_null() && cx.waker().will_wake(unsafe { &*polling });
    if own {
        return poll(cx);
    }
    if finished {
        // Finished means CLOSED or COMPLETED, and a task whose Runnable is
        // being dropped (a shutdown, the reaper) is CLOSED while still
        // SCHEDULED: async-task then registers the waker it is polled with
        // and wakes it when the drop ends, inside its abort_on_panic. So
        // first a poll with a waker that needs no containing (no
        // allocation); only if that is pending, one with ours.
        if let Poll::Ready(out) = poll(&mut Context::from_waker(Waker::noop())) {
            return Poll::Ready(out);
        }
    }
    // A weak reference: the cache keeps neither the caller's waker nor
    // its task alive once async-task has let the wrapper go.
    let cached = CONTAINED.with(|c| c.take());
    let kept = match cached.upgrade() {
        Some(kept) if kept.waker().will_wake(cx.waker()) => kept,
        _ => Arc::new(ContainedWaker(Some(cx.waker().clone()))),
    };
    CONTAINED.with(|c| c.set(Arc::downgrade(&kept)));
    // The same Arc gives a waker async-task's `will_wake` recognises, so
    // it keeps the one it has instead of cloning ours again.
    let contained = Waker::from(kept);
    poll(&mut Context::from_waker(&contained))
}

/// A waker whose `wake` never unwinds (see [`contain_waker`]), nor its
/// drop: async-task drops the awaiter it replaces (a handle polled with
/// another waker) inside its `abort_on_panic` too. `None` only once woken
/// by value.
struct ContainedWaker(Option<Waker>);

impl ContainedWaker {
    fn waker(&self) -> &Waker {
        self.0
            .as_ref()
            .expect("a contained waker holds its waker until woken by value")
    }
}

impl Wake for ContainedWaker {
    fn wake(self: Arc<Self>) {
        match Arc::try_unwrap(self) {
            Ok(mut this) => {
                if let Some(waker) = this.0.take() {
                    crate::diagnostics::panic::wake(waker);
                }
            }
            Err(this) => crate::diagnostics::panic::wake_by_ref(this.waker()),
        }
    }

    fn wake_by_ref(self: &Arc<Self>) {
        crate::diagnostics::panic::wake_by_ref(self.waker());
    }
}

impl Drop for ContainedWaker {
    fn drop(&mut self) {
        if let Some(waker) = self.0.take() {
            crate::diagnostics::panic::drop_waker(waker);
        }
    }
}

#[cfg(test)]
mod tests {
    /// The panic-containing wrapper passes both kinds of wake-up on
    /// (async-task itself only wakes by value; anyone holding the wrapper
    /// may wake by reference).
    #[test]
    fn a_contained_waker_passes_every_wake_on() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        struct Count(AtomicUsize);
        impl std::task::Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let contained = std::task::Waker::from(Arc::new(super::ContainedWaker(Some(
            std::task::Waker::from(count.clone()),
        ))));
        contained.wake_by_ref();
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "by reference");
        contained.wake();
        assert_eq!(count.0.load(Ordering::SeqCst), 2, "by value");
    }
}
#[cfg(all(test, not(gdex_loom)))]
mod size_tests {
    use super::*;
    use crate::task::Job;

    /// BENCH.md's memory_per_task: a block holds room for the larger of
    /// the future and its outcome, so a failure's report stays boxed.
    #[test]
    fn a_small_outcome_costs_a_task_no_more_than_its_value_and_a_pointer() {
        assert_eq!(std::mem::size_of::<Outcome<()>>(), 8);
        assert_eq!(std::mem::size_of::<Outcome<u64>>(), 16);
        // What a task's wrapper adds to its future: the S9 record (or the
        // X8 key of a tracked task), one word.
        assert_eq!(std::mem::size_of::<CatchUnwind<[u64; 2]>>(), 24);
        // A queue slot: a task's pointer, or a work item's word and vtable.
        assert_eq!(std::mem::size_of::<Job>(), 16);
    }
}
