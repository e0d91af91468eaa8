//! What this thread is doing right now: the per-thread state of every layer
//! in one place (a thread-local per role), and the guard that enters and leaves each role.
//!
//! A thread can hold several roles at once, nested: a pool worker
//! ([`Role::Worker`]) runs a fiber ([`Role::Fiber`]) that polls a task
//! ([`Role::Task`]); the main thread dispatching its scheduler
//! ([`Role::Dispatching`]) may run a nested loop that dispatches it again.
//! Each role is a pointer to its owner's state, null when the thread does not
//! hold it. [`Slot::enter`] sets it and the guard puts the previous value
//! back when it drops, also on unwind, so roles nest.
//!
//! This module sits below every other one and names none of their types: a
//! role's pointer is stored untyped, and the one module that owns the role
//! gives it its type through a [`Slot`]. Lower layers that only need to know
//! whether a role is held (is this thread a pool worker?) ask [`holds`].

use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr;

/// The roles a thread can hold, and the module that owns each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// The metadata of the task whose `Runnable` is running
    /// (`task::TaskMeta`, owned by `task`).
    Task,
    /// The waker of the gdex task whose future is being polled
    /// (`std::task::Waker`, owned by `task`).
    Polling,
    /// The book of idle tasks (S9) of the pool whose tasks this thread is
    /// running (`task::registry::Registry`, owned by `task::registry`;
    /// entered by a pool worker for its whole life and for each of its
    /// dispatches, and by each context scheduler's dispatch: its worker's
    /// or none).
    Registry,
    /// The fiber running on this thread (`fiber::FiberCtx`, owned by
    /// `fiber`).
    Fiber,
    /// The pool worker this thread is (`pool::worker::Core`, owned by
    /// `pool::worker`).
    Worker,
    /// What the layers below the pool may ask of that worker (a
    /// `&dyn WorkerHooks` on the worker's stack; see [`enter_worker_hooks`]).
    WorkerHooks,
    /// The context scheduler being dispatched on this thread
    /// (`scheduler::context::ContextShared`, owned by `scheduler`).
    Dispatching,
    /// The runner the stall watchdog watches on this thread
    /// (`diagnostics::stall::Runner`, owned by `diagnostics::stall`).
    Runner,
    /// The thread is parked in `gdex::wait_for`, iterating no context: a
    /// marker (any non-null pointer, owned by `block_on`). Timers and fd
    /// waits polled here then wait on the `gdex-timers` thread's context,
    /// not on a thread-default context nobody iterates.
    ParkedWait,
}

// One thread-local per role (not one array of them): each is then its own
// `#[thread_local]` static, which the hot paths (a poll, a fiber switch)
// reach with one TLS-relative load; the array version made
// main_pool_roundtrip 9% and fiber_switch across two workers 24-44% slower
// in the default bench build (bisected to the commit that made it; see
// `benches/RESULTS.md`).
thread_local! {
    static TLS_TASK: Cell<*const ()> = const { Cell::new(ptr::null()) };
    static TLS_POLLING: Cell<*const ()> = const { Cell::new(ptr::null()) };
    static TLS_REGISTRY: Cell<*const ()> = const { Cell::new(ptr::null()) };
    static TLS_FIBER: Cell<*const ()> = const { Cell::new(ptr::null()) };
    static TLS_WORKER: Cell<*const ()> = const { Cell::new(ptr::null()) };
    static TLS_WORKER_HOOKS: Cell<*const ()> = const { Cell::new(ptr::null()) };
    static TLS_DISPATCHING: Cell<*const ()> = const { Cell::new(ptr::null()) };
    static TLS_RUNNER: Cell<*const ()> = const { Cell::new(ptr::null()) };
    static TLS_PARKED_WAIT: Cell<*const ()> = const { Cell::new(ptr::null()) };
}

/// Runs `f` with this thread's cell of `role`; `Err` once the thread's
/// locals are gone (its teardown).
#[inline]
fn try_cell<R>(
    role: Role,
    f: impl FnOnce(&Cell<*const ()>) -> R,
) -> Result<R, std::thread::AccessError> {
    match role {
        Role::Task => TLS_TASK.try_with(f),
        Role::Polling => TLS_POLLING.try_with(f),
        Role::Registry => TLS_REGISTRY.try_with(f),
        Role::Fiber => TLS_FIBER.try_with(f),
        Role::Worker => TLS_WORKER.try_with(f),
        Role::WorkerHooks => TLS_WORKER_HOOKS.try_with(f),
        Role::Dispatching => TLS_DISPATCHING.try_with(f),
        Role::Runner => TLS_RUNNER.try_with(f),
        Role::ParkedWait => TLS_PARKED_WAIT.try_with(f),
    }
}

#[inline]
fn cell<R>(role: Role, f: impl FnOnce(&Cell<*const ()>) -> R) -> R {
    try_cell(role, f).expect("gdex: a thread's per-thread state used during its teardown")
}

/// True if this thread holds `role` right now.
#[inline]
pub(crate) fn holds(role: Role) -> bool {
    cell(role, |c| !c.get().is_null())
}

thread_local! {
    /// See [`note_loop_work`].
    static LOOP_WORK: Cell<bool> = const { Cell::new(false) };
}

/// A source on this thread's context has work that only the context's next
/// turn hands over (AIO requests queued to be submitted in its `prepare`):
/// a pool worker that runs dry then goes back to its loop at once, rather
/// than spinning for work that cannot come before that turn.
#[inline]
pub(crate) fn note_loop_work() {
    LOOP_WORK.with(|w| w.set(true));
}

/// Whether [`note_loop_work`] was noted and not taken yet (a fiber about to
/// suspend then does not watch for its wake: what it waits for is not
/// even submitted before the context's next turn).
#[inline]
pub(crate) fn has_loop_work() -> bool {
    LOOP_WORK.with(Cell::get)
}

/// Takes the note of [`note_loop_work`].
#[inline]
pub(crate) fn take_loop_work() -> bool {
    LOOP_WORK.with(|w| w.replace(false))
}

/// What the layers below the pool (the blocking lane's
/// `gdex::blocking::blocking`) may ask of the pool worker this thread is.
pub(crate) trait WorkerHooks {
    /// The thread is about to block (B5): the worker hands its queue to its
    /// peers and wakes them, and does not count the wait as a stall.
    fn enter_blocking(&self);
    /// The blocking call of [`enter_blocking`](Self::enter_blocking)
    /// returned.
    fn leave_blocking(&self);
    /// For a fiber's resumption that just ran (`fiber::sched`): the word of
    /// the next job of the worker's own pinned queue, taken out, if it is a
    /// job of the same kind (its vtable at `kind`), no other work waits that
    /// the worker would take first or in turn, and its slice has room for
    /// one more job (by count and by time, P8); it then counts as a job of
    /// the slice, for the slice and for the stall watchdog (B5). `None`
    /// otherwise.
    fn next_resumption(&self, kind: *const ()) -> Option<usize>;
    /// For a fiber about to suspend on this worker's fiber scheduler: spins
    /// while the worker has nothing else to run and its slice has room,
    /// until `done` says yes (true: that counts as a job of the slice, P8
    /// and B5), or work arrives, the pool closes or a short window ends
    /// (false).
    fn spin_while_idle(&self, done: &mut dyn FnMut() -> bool) -> bool;
}

// SAFETY: `current` owns `Role::WorkerHooks`; this is its one slot.
const WORKER_HOOKS: Slot<&'static dyn WorkerHooks> = unsafe { Slot::new(Role::WorkerHooks) };

/// Makes `hooks` the hooks of this thread's pool worker until the guard
/// drops. `hooks` must outlive the guard (the worker keeps it on its stack
/// for its whole life).
pub(crate) fn enter_worker_hooks<'a>(hooks: &'a &'a dyn WorkerHooks) -> Entered {
    let hooks: *const &'a dyn WorkerHooks = hooks;
    WORKER_HOOKS.enter(hooks.cast())
}

/// Runs `f` with this thread's pool worker's hooks, if it is one.
pub(crate) fn with_worker_hooks<R>(f: impl FnOnce(&dyn WorkerHooks) -> R) -> Option<R> {
    let hooks = WORKER_HOOKS.get();
    // SAFETY: a non-null pointer was entered by `enter_worker_hooks`, whose
    // caller keeps the reference it points to (and what that refers to)
    // alive until the guard drops, which resets the slot; the 'static in the
    // slot's type is never handed out: `f` gets a borrow for this call only.
    unsafe { hooks.as_ref() }.map(|hooks| f(*hooks))
}

/// The typed handle of one role, made once, by the module that owns the role.
pub(crate) struct Slot<T: 'static> {
    role: Role,
    _type: PhantomData<fn() -> *const T>,
}

impl<T: 'static> Slot<T> {
    /// The slot of `role`, whose pointer is a `*const T`.
    ///
    /// # Safety
    /// This must be the only `Slot` of `role` in the crate (each role's
    /// documentation names its owner), so that every pointer entered for
    /// `role` is a `T`.
    pub(crate) const unsafe fn new(role: Role) -> Self {
        Slot {
            role,
            _type: PhantomData,
        }
    }

    /// The pointer this thread holds for the role, or null.
    #[inline]
    pub(crate) fn get(&self) -> *const T {
        cell(self.role, Cell::get).cast()
    }

    /// Holds the role with `value` (null: not at all) until the guard drops;
    /// then the previous value is back.
    #[inline]
    pub(crate) fn enter(&self, value: *const T) -> Entered {
        Entered {
            role: self.role,
            previous: cell(self.role, |c| c.replace(value.cast())),
        }
    }
}

/// The guard of [`Slot::enter`].
#[must_use = "the role is left when the guard drops"]
pub(crate) struct Entered {
    role: Role,
    previous: *const (),
}

impl Drop for Entered {
    #[inline]
    fn drop(&mut self) {
        let previous = self.previous;
        // `try_with`: a guard may drop while the thread's other
        // thread-locals are being destroyed; this one has no destructor, so
        // it only fails if the thread is already past all of them.
        let _ = try_cell(self.role, |c| c.set(previous));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_nest_and_come_back_on_unwind() {
        // SAFETY: a test-only slot of a role nothing reads on this test
        // thread. (Not `Runner`: the panic hook reads that one as a stall
        // runner, and this test panics while it holds its role.)
        let slot: Slot<u32> = unsafe { Slot::new(Role::Polling) };
        let (a, b) = (1u32, 2u32);
        assert!(!holds(Role::Polling));
        let outer = slot.enter(&a);
        assert_eq!(slot.get(), &a as *const u32);
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _inner = slot.enter(&b);
            assert_eq!(slot.get(), &b as *const u32);
            panic!("leave by unwinding");
        }));
        assert!(unwound.is_err());
        assert_eq!(slot.get(), &a as *const u32, "the outer value is back");
        assert!(!holds(Role::Worker), "roles are independent");
        drop(outer);
        assert!(slot.get().is_null() && !holds(Role::Polling));
    }
}
