//! The future of a fiber's task ([`FiberFuture`]): it starts the fiber,
//! resumes it in its task's polls or, on a pool worker, puts it on the
//! worker's fiber scheduler ([`sched`](super::sched)) and takes its result;
//! and it unwinds a fiber dropped while suspended.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use corosensei::{Coroutine, CoroutineResult, Yielder};

use super::{sched, stack, unbook, wake_booked_task, FiberCtx, CURRENT, RESUMER};
use crate::error::Error;

pub(super) enum State<F, T> {
    Start {
        f: F,
        stack_size: usize,
        on_pool: bool,
    },
    Running(Coroutine<(), (), T, stack::FiberStack>),
    /// The fiber returned, or panicked, while its worker's fiber scheduler
    /// ran it: its task's next poll gives the result.
    Returned(T),
    Panicked(Box<dyn std::any::Any + Send>),
    Done,
}

/// The future of a fiber's task: each poll switches into the coroutine, or,
/// once the fiber is on its worker's fiber scheduler ([`sched`]), only
/// starts it, resumes it if it waits (its cancellation), and takes its
/// result. Its output is the closure's result, or the error that kept the
/// fiber from starting (no stack).
pub(super) struct FiberFuture<F, T> {
    pub(super) state: State<F, T>,
    pub(super) ctx: FiberCtx,
    /// A `FiberFuture` is `!Unpin`: its address is kept between polls (a
    /// fiber on its worker's fiber scheduler is resumed through it, and a
    /// nested main loop inside that resumption can poll the fiber's own
    /// task), so a `&mut` to it is not a promise that nothing else points
    /// into it, the rule that every self-referential future relies on. No
    /// field is pinned: the state moves in and out freely.
    pub(super) _pinned: std::marker::PhantomPinned,
}

impl<F, T> Future for FiberFuture<F, T>
where
    F: FnOnce() -> T + 'static,
    T: 'static,
{
    type Output = Result<T, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T, Error>> {
        // SAFETY: the future itself is never moved out of its pin; no field
        // is pinned (see `_pinned`).
        let this = unsafe { self.get_unchecked_mut() };
        if let Some(cell) = this.ctx.cell.get() {
            // Only the cell's address and state are read before the fiber
            // is claimed: while the fiber runs (a nested loop inside it
            // polling its own task), its coroutine is borrowed by the
            // resumption that runs it, and `state` is not touched here.
            match cell.state() {
                sched::DONE => return this.take_result(),
                sched::WAITING if cell.claim_waiting() => {}
                // Queued (its resumption will run it), or running (it sees
                // its cancellation at its next wait).
                _ => return Poll::Pending,
            }
        }
        if let State::Start { .. } = this.state {
            if let Err(e) = this.start(cx) {
                return Poll::Ready(Err(e));
            }
        }
        let State::Running(coroutine) = &mut this.state else {
            panic!("a gdex fiber was polled after it finished");
        };
        let result = {
            // `cx` lives only for this poll: the fiber's waits see it until
            // the poll returns (or unwinds).
            let _cx = crate::util::scoped(
                &RESUMER,
                (cx as *mut Context<'_>).cast::<Context<'static>>(),
            );
            // On the fiber scheduler the fiber's waits use the fiber's
            // waker: that is the one a task handle polled in them must
            // recognise as this task's (`contain_waker`).
            let fiber_waker = this.ctx.cell.get().map(sched::FiberCell::waker);
            let _polling = fiber_waker.as_ref().map(crate::task::enter_polling);
            let _guard = stack::enter(this.ctx.stack_map.get());
            let _current = CURRENT.enter(&this.ctx);
            coroutine.resume(())
        };
        match result {
            CoroutineResult::Yield(()) => Poll::Pending,
            CoroutineResult::Return(value) => {
                this.end(State::Done);
                Poll::Ready(Ok(value))
            }
        }
    }
}

impl<F, T> FiberFuture<F, T>
where
    F: FnOnce() -> T + 'static,
    T: 'static,
{
    /// The first poll: maps the stack, makes the coroutine, and puts a
    /// pool's fiber on its worker's fiber scheduler.
    fn start(&mut self, cx: &Context<'_>) -> Result<(), Error> {
        let State::Start {
            f,
            stack_size,
            on_pool,
        } = std::mem::replace(&mut self.state, State::Done)
        else {
            unreachable!()
        };
        // A refused mapping is the OS saying no (address space or map
        // count exhausted), not a bug in the fiber: its spawn fails with
        // the OS's reason, and `f` is dropped unrun. (It used to panic
        // here, which reached the waiter as `Panicked` after going
        // through the process's panic hook.)
        let stack = stack::acquire(stack_size).map_err(|e| {
            Error::Failed(glib::Error::new(
                glib::FileError::Failed,
                &format!("cannot map a {stack_size} byte fiber stack: {e}"),
            ))
        })?;
        self.ctx.stack_map.set(stack.map());
        let meta = crate::task::running_task_meta();
        self.ctx.meta.set(meta);
        super::note_fiber_start();
        let coroutine = Coroutine::with_stack(stack, move |yielder: &Yielder<(), ()>, ()| {
            // SAFETY: the poll resuming us set CURRENT to our FiberCtx.
            let ctx = unsafe { &*CURRENT.get() };
            ctx.yielder.set(yielder);
            f()
        });
        self.state = State::Running(coroutine);
        // SAFETY: a non-null `meta` is the running task's, this one's.
        let home = unsafe { meta.as_ref() }.and_then(crate::task::TaskMeta::owner);
        if let (true, Some(home)) = (on_pool, home) {
            // SAFETY: a fiber's task on a pool names its worker's home as
            // its owner, alive while the task is; this future is pinned in
            // the task's block from now on and gives the cell back when it
            // drops, on this thread (F2).
            let cell = unsafe {
                sched::FiberCell::start(
                    cx.waker(),
                    home,
                    Self::resume_on_scheduler,
                    (self as *const Self).cast(),
                )
            };
            self.ctx.cell.set(cell);
        }
        Ok(())
    }

    /// Ends the coroutine's run: `state` takes its place, and its stack
    /// goes back to the thread's pool.
    fn end(&mut self, state: State<F, T>) {
        if let State::Running(coroutine) = std::mem::replace(&mut self.state, state) {
            stack::release(coroutine.into_stack());
        }
        if let Some(cell) = self.ctx.cell.get() {
            cell.finish();
        }
    }

    /// The task's poll after the fiber ended on its worker's fiber
    /// scheduler: its result, or its panic, which the task's poll contains
    /// (S6) as if it had happened there.
    fn take_result(&mut self) -> Poll<Result<T, Error>> {
        if let State::Running(_) = self.state {
            // Its cell was retired under it: its worker exited (see
            // `sched::retire_cells_out`). It is cancelled; its drop, here on
            // its own thread, unwinds it.
            return Poll::Ready(Err(Error::Cancelled));
        }
        match std::mem::replace(&mut self.state, State::Done) {
            State::Returned(value) => Poll::Ready(Ok(value)),
            State::Panicked(payload) => std::panic::resume_unwind(payload),
            _ => panic!("a gdex fiber was polled after it finished"),
        }
    }

    /// Resumes the fiber on its worker's fiber scheduler (a resumption job
    /// of [`sched`]), outside its task's poll, with the thread state that
    /// poll would give it: its task running (its `current_cancellable()`),
    /// its waker the one being polled with, itself the current fiber. When
    /// it returns or panics, its result is kept and its task woken to take
    /// it.
    ///
    /// # Safety
    /// `target` is a `FiberFuture<F, T>` whose cell `start` started, whose
    /// fiber was just claimed (`RUNNING`) on its own worker by the caller;
    /// its block is kept by the waker of its task in the worker's book.
    unsafe fn resume_on_scheduler(target: *const ()) {
        let this = target.cast_mut().cast::<Self>();
        // No `&mut` to the future is held across the resumption: a nested
        // main loop inside the fiber may poll the fiber's own task (its
        // handle dropped: F4), whose poll takes a `&mut` of the whole
        // future (`!Unpin`, so one that claims no uniqueness) and reads only
        // its cell (see `poll`); the coroutine is borrowed alone, through
        // the raw pointer, and nothing else touches it meanwhile.
        // SAFETY: by the caller: a live future in its block (not dropped:
        // its cell would be `DONE`), claimed for this resumption, on its
        // own thread; nothing else runs meanwhile but that nested poll,
        // which does not touch `state`.
        let coroutine = match unsafe { &mut (*this).state } {
            State::Running(coroutine) => coroutine,
            _ => unreachable!("a fiber claimed to run is running"),
        };
        // SAFETY: as above; `FiberCtx` is read only through shared
        // references (its fields are `Cell`s), the nested poll's too.
        let ctx = unsafe { &(*this).ctx };
        let Some(cell) = ctx.cell.get() else {
            unreachable!("a fiber resumed by its scheduler has a cell")
        };
        let waker = cell.waker();
        let mut cx = Context::from_waker(&waker);
        let result = {
            let _cx = crate::util::scoped(
                &RESUMER,
                (&mut cx as *mut Context<'_>).cast::<Context<'static>>(),
            );
            let _task = crate::task::enter_running(ctx.meta.get());
            let _polling = crate::task::enter_polling(&waker);
            // P11: a fiber's wait counts as its poll: a full budget for
            // each resumption.
            let _budget = crate::task::coop::enter_poll();
            let _guard = stack::enter(ctx.stack_map.get());
            let _current = CURRENT.enter(ctx);
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| coroutine.resume(())))
        };
        let state = match result {
            Ok(CoroutineResult::Yield(())) => return,
            Ok(CoroutineResult::Return(value)) => State::Returned(value),
            Err(payload) => State::Panicked(payload),
        };
        // SAFETY: the fiber has ended: nothing points into the future but
        // its cell (which `finish` makes `DONE`) and its task; the
        // coroutine's borrow is over (`end` releases its stack).
        let this = unsafe { &mut *this };
        this.end(state);
        // The task takes the result.
        wake_booked_task(&this.ctx);
    }
}

impl<F, T> Drop for FiberFuture<F, T> {
    fn drop(&mut self) {
        unbook(&self.ctx);
        // Wakes of the fiber's waker do nothing from now on, and its cell
        // goes back to serve another fiber.
        if let Some(cell) = self.ctx.cell.take() {
            cell.give_back();
        }
        if let State::Running(mut coroutine) = std::mem::replace(&mut self.state, State::Done) {
            if !coroutine.done() {
                // Dropped while suspended (its pool shut down): unwind the
                // fiber's frames here, on its own thread, with the fiber
                // visible so that overflow is still reported as such. A
                // `wait` in a destructor meanwhile must neither suspend nor
                // poll: it sees no live poll (no resumer's `Context`) and
                // returns `Cancelled`.
                let _cx = crate::util::scoped(&RESUMER, std::ptr::null_mut());
                let _guard = stack::enter(self.ctx.stack_map.get());
                let _current = CURRENT.enter(&self.ctx);
                coroutine.force_unwind();
            }
            stack::release(coroutine.into_stack());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FiberFuture;

    /// Whether `T` is `Unpin`, asked at run time (autoref picks the first
    /// impl whose bound holds).
    struct Probe<T>(std::marker::PhantomData<T>);
    trait IsUnpin {
        fn unpin(&self) -> bool {
            true
        }
    }
    impl<T: Unpin> IsUnpin for Probe<T> {}
    trait NotUnpin {
        fn unpin(&self) -> bool {
            false
        }
    }
    impl<T> NotUnpin for &Probe<T> {}

    /// F3's soundness with a nested loop inside a fiber: its scheduler
    /// resumes it through a pointer into its task's block, kept across
    /// polls, and a nested main loop inside that resumption may poll the
    /// fiber's own task, which takes a `&mut` of the future meanwhile. So
    /// the future must be `!Unpin`: a `&mut` of an `Unpin` value promises
    /// that nothing else points into it (which the optimiser and Miri's
    /// aliasing models rely on), one of a `!Unpin` value does not. (Miri
    /// cannot run a fiber itself: corosensei switches stacks in assembly,
    /// and the pool runs on GLib.) The resumption borrows only the
    /// coroutine, through a raw pointer, and that nested poll reads only
    /// the cell: `tests/fibers.rs::a_fiber_in_a_nested_loop_dispatching_its_own_task_is_cancelled`
    /// runs that path.
    #[test]
    #[allow(clippy::needless_borrow)] // the borrow picks the impl
    fn a_fiber_future_is_not_unpin() {
        let unpin = (&Probe::<FiberFuture<fn() -> u8, u8>>(std::marker::PhantomData)).unpin();
        assert!(
            !unpin,
            "a fiber's future must be !Unpin: its address is kept between polls"
        );
        // The probe itself.
        assert!((&Probe::<u8>(std::marker::PhantomData)).unpin());
        assert!(!(&Probe::<std::marker::PhantomPinned>(std::marker::PhantomData)).unpin());
    }
}
