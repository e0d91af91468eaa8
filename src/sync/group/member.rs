//! A member of a group: its future, polled with the group as the current
//! group ([`TaskGroup::current`](super::TaskGroup::current)) and its panics
//! caught; the guard that reports its end to its slot; and the spawn that
//! reserves, fills or undoes that slot.

use std::any::TypeId;
use std::cell::Cell;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use super::output::GroupOutput;
use super::{lock, First, Outcome, Shared, Slot};
use crate::diagnostics::panic::PanicSource;
use crate::{Error, Scheduler, Task};

thread_local! {
    /// The group of the member being polled on this thread, if any: its
    /// output type, that type's name (for the misuse panic), a pointer to
    /// the member's `Weak<Shared<T>>`, and the task polling it (a task run
    /// inside the member's poll, by a nested loop, is no member).
    pub(super) static CURRENT: Cell<Option<(TypeId, &'static str, *const (), *const ())>> =
        const { Cell::new(None) };
}

/// Drops `value`, sending a panic of its destructor to the panic handler.
pub(super) fn drop_contained<V>(value: V, source: PanicSource) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(value))) {
        crate::diagnostics::panic::contain(source, payload);
    }
}

/// The member's side of its slot: reports how the member ended, once.
struct Guard<T: GroupOutput> {
    group: Weak<Shared<T>>,
    key: usize,
    /// Its place in spawn order (its key in `results`, in groups that
    /// keep results).
    seq: usize,
    started: bool,
    done: bool,
}

impl<T: GroupOutput> Guard<T> {
    fn finish(&mut self, outcome: Outcome<T>, dropped: bool) {
        self.done = true;
        let Some(shared) = self.group.upgrade() else {
            // The group is gone: nobody will read the outcome.
            if let Err(Error::Panicked(message)) = outcome {
                crate::diagnostics::panic::report(PanicSource::Task, message);
            } else {
                drop_contained(outcome, PanicSource::Output);
            }
            return;
        };
        // The output's verdict is user code: asked before the lock is
        // taken, and a panic in it is the member's failure.
        let (outcome, failed) = judge(outcome);
        let mut detach = None;
        let mut cancel = Vec::new();
        let mut unread = None;
        let wakers;
        {
            let mut state = lock(&shared);
            let mut aborted = false;
            match std::mem::replace(&mut state.slots[self.key], Slot::Done) {
                Slot::Reserved if dropped && !self.started => {
                    // Dropped unpolled while its spawner still hands it over:
                    // the scheduler refused it. The spawner undoes the spawn.
                    state.slots[self.key] = Slot::Refused;
                    return;
                }
                Slot::Reserved => {} // the spawner frees the `Done` slot
                Slot::Filled(task) => {
                    state.slots.remove(self.key);
                    detach = Some(task);
                }
                Slot::Taken => {
                    state.slots.remove(self.key);
                    aborted = true;
                }
                Slot::Done | Slot::Refused => unreachable!("a group member finishes once"),
            }
            state.live -= 1;
            // A member the group cancelled (`cancel`, `abort_all`) did not
            // fail: the group stopped it.
            let stopped = aborted && matches!(outcome, Err(Error::Cancelled));
            let failed = failed && !state.cancelled && !stopped;
            let first = failed && matches!(state.first, First::None | First::Given);
            if shared.keep_results {
                if first {
                    state.first = First::At(self.seq);
                } else if failed && matches!(state.first, First::At(_)) {
                    // Next in line for `close` once `join_next` gives the
                    // first.
                    state.later_failures.push_back(self.seq);
                }
                state.results.insert(self.seq, outcome);
                state.completed.push_back(self.seq);
            } else if first {
                state.first = First::Here(outcome);
            } else {
                unread = Some(outcome);
            }
            if failed && shared.cancel_on_error && !state.cancelled {
                cancel = state.cancel_members();
            }
            wakers = state.take_wakers();
        }
        // Outside the lock: each of these may run code that takes it.
        if let Some(task) = detach {
            // Our own handle: the task is finishing (or being dropped) now.
            task.detach();
        }
        drop(cancel);
        match unread {
            Some(Err(Error::Panicked(message))) => {
                crate::diagnostics::panic::report(PanicSource::Task, message);
            }
            Some(outcome) => drop_contained(outcome, PanicSource::Output),
            None => {}
        }
        wakers.into_iter().for_each(crate::diagnostics::panic::wake);
    }
}

/// A member's outcome and whether it is a failure, asking the output's
/// [`GroupOutput::is_failure`] (user code, so never under the group's
/// lock). A panic in it makes the outcome [`Error::Panicked`] with its
/// message, a failure: the output is dropped (its own panic contained).
fn judge<T: GroupOutput>(outcome: Outcome<T>) -> (Outcome<T>, bool) {
    let output = match outcome {
        Ok(output) => output,
        Err(error) => return (Err(error), true),
    };
    match catch_unwind(AssertUnwindSafe(|| output.is_failure())) {
        Ok(failed) => (Ok(output), failed),
        Err(payload) => {
            let message = crate::diagnostics::panic::take_message(payload);
            drop_contained(output, PanicSource::Output);
            (Err(Error::Panicked(message)), true)
        }
    }
}

impl<T: GroupOutput> Drop for Guard<T> {
    fn drop(&mut self) {
        if !self.done {
            // The member's future was dropped unfinished (it is dropped
            // before this guard: field order in `Member`).
            self.finish(Err(Error::Cancelled), true);
        }
    }
}

pin_project_lite::pin_project! {
    /// A member's future: the user's future, polled with the group as the
    /// current group, its panics caught, and its end reported to the group.
    pub(super) struct Member<F, T: GroupOutput> {
        // Set to `None` (dropped in place, `Pin::set`) when it finishes,
        // before the group hears of it.
        #[pin]
        future: Option<F>,
        guard: Guard<T>,
    }
}

impl<F, T> Future for Member<F, T>
where
    F: Future<Output = T>,
    T: GroupOutput + 'static,
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        if this.guard.done {
            return Poll::Ready(());
        }
        this.guard.started = true;
        let Some(future) = this.future.as_mut().as_pin_mut() else {
            return Poll::Ready(());
        };
        let group = (&this.guard.group as *const Weak<Shared<T>>).cast::<()>();
        let previous = CURRENT.replace(Some((
            TypeId::of::<T>(),
            std::any::type_name::<T>(),
            group,
            crate::task::running_task(),
        )));
        let polled = catch_unwind(AssertUnwindSafe(|| future.poll(cx)));
        CURRENT.set(previous);
        let outcome = match polled {
            Ok(Poll::Pending) => return Poll::Pending,
            Ok(Poll::Ready(output)) => Ok(output),
            Err(payload) => Err(Error::Panicked(crate::diagnostics::panic::take_message(
                payload,
            ))),
        };
        // Stopped means stopped: the future's own state goes before the
        // group (and a close waiting for it) hears that the member ended.
        let mut future = this.future;
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| future.set(None))) {
            crate::diagnostics::panic::contain(PanicSource::Drop, payload);
        }
        this.guard.finish(outcome, false);
        Poll::Ready(())
    }
}

/// Spawns `future` into the group: `from_member` for a spawn through a
/// [`TaskGroupRef`](super::TaskGroupRef), allowed in a closed group while
/// members still run.
pub(super) fn add<T, F>(
    shared: &Arc<Shared<T>>,
    from_member: bool,
    future: F,
    spawn: impl FnOnce(&Scheduler, Member<F, T>) -> Task<()>,
) -> Result<(), Error>
where
    T: GroupOutput,
{
    let (key, seq) = {
        let mut state = lock(shared);
        if state.cancelled || (state.closed && !(from_member && state.live > 0)) {
            drop(state);
            drop_contained(future, PanicSource::Drop);
            return Err(Error::Closed);
        }
        let key = state.slots.insert(Slot::Reserved);
        state.live += 1;
        let seq = state.next_seq;
        state.next_seq += 1;
        (key, seq)
    };
    let member = Member {
        future: Some(future),
        guard: Guard {
            group: Arc::downgrade(shared),
            key,
            seq,
            started: false,
            done: false,
        },
    };
    let undo = |shared: &Shared<T>| {
        let wakers = {
            let mut state = lock(shared);
            state.slots.remove(key);
            state.live -= 1;
            state.take_wakers()
        };
        wakers.into_iter().for_each(crate::diagnostics::panic::wake);
    };
    let task = match catch_unwind(AssertUnwindSafe(|| spawn(&shared.scheduler, member))) {
        Ok(task) => task,
        Err(payload) => {
            // A misused `spawn_local`: its panic says what to do.
            undo(shared);
            std::panic::resume_unwind(payload);
        }
    };
    let mut state = lock(shared);
    match std::mem::replace(&mut state.slots[key], Slot::Taken) {
        Slot::Reserved if state.cancelled => {
            // Cancelled while we spawned: the member goes too.
            drop(state);
            drop(task);
        }
        Slot::Reserved => state.slots[key] = Slot::Filled(task),
        Slot::Done => {
            state.slots.remove(key);
            drop(state);
            task.detach();
        }
        Slot::Refused => {
            drop(state);
            undo(shared);
            // The spawn fails with the scheduler's reason, which its task
            // holds ([`Error::ShutDown`] for a shut-down pool), as a plain
            // spawn there would give.
            let why = futures::FutureExt::now_or_never(task).and_then(Result::err);
            return Err(why.unwrap_or(Error::Closed));
        }
        Slot::Filled(_) | Slot::Taken => unreachable!("only the spawner fills a reserved slot"),
    }
    Ok(())
}
