//! Fibers: stackful coroutines pinned to the thread that starts them (F1-F6).
//!
//! A fiber runs a plain closure on a stack of its own, so code that waits on
//! futures can be written straight-line, without `async`: [`wait`] suspends
//! the fiber (and only the fiber) until the future is ready. As in libdex, a
//! fiber is a future of its result ([`Fiber<T>`]), awaitable from any
//! scheduler, another fiber or a plain thread.
//!
//! # How a fiber runs
//!
//! A fiber is a gdex task whose future runs a [`corosensei`] coroutine: it
//! shares the task core's single allocation, panic capture, record and
//! `Task` handle, and the task is *pinned* (F2): on a pool it goes to one
//! worker's inbox, which no other worker reads; on a context scheduler it
//! runs on the context's thread. Its stack comes from a per-thread pool of
//! guard-paged stacks (module `stack`). The coroutine runs until the fiber
//! returns or calls [`wait`] on a future that is not ready, which registers
//! a waker with that future and switches back to whoever resumed the fiber.
//!
//! On a pool, that waker is the fiber's own (module `sched`, the worker's
//! fiber scheduler): its wake queues a one-word resumption of the fiber on
//! its worker, which switches straight into the fiber, and, if the next job
//! of its worker is another fiber's resumption with nothing else waiting,
//! into that one after it. The task's poll only starts the fiber, resumes
//! it when it is cancelled while it waits, and takes its result. Elsewhere
//! (a context scheduler's fiber, a local one, or a tracked one, O1, whose
//! waits the views must see as polls) the waker is the task's, and each
//! poll of the task switches into the fiber, which polls its future again.
//!
//! # Cancellation (F4)
//!
//! Dropping a [`Fiber`] handle does not drop the coroutine (that would unwind
//! it from the outside, mid-wait). It marks the fiber cancelled and wakes it:
//! the pending [`wait`] returns [`Error::Cancelled`], so does every later
//! `wait` on a future that is not already ready, and the fiber leaves through
//! its own return. Its result is discarded. [`Fiber::detach`] opts out.
//!
//! When its pool shuts down, a fiber is cancelled the same way, detached or
//! not, and its worker runs it to its return before exiting, so that its
//! state is dropped on its own thread.
//!
//! # Thread state across a wait
//!
//! A fiber shares its thread with every other task of that thread: while it
//! is suspended in [`wait`], they run. So thread-local state the fiber sets
//! and has not restored before a `wait` is seen by them. The usual case is
//! a GLib thread-default context: a `wait` inside
//! `MainContext::with_thread_default` (or between
//! `g_main_context_push_thread_default` and its pop) leaves that context
//! pushed while the thread's other tasks run, so their `glib::timeout_future`s
//! and GIO callbacks attach to it rather than to the thread's own, and GLib
//! complains when the pushes and pops of two fibers interleave. The same
//! holds for a `RefCell` borrow of a `thread_local!`, a `tracing` span's
//! entered guard, or any other guard of per-thread state. Keep such guards
//! between two waits, never across one: to run GIO calls on a context of
//! your own, push it, start the calls, pop it, and then `wait` on their
//! futures (or give that work a task of its own, on a
//! [`Scheduler::for_context`](crate::Scheduler::for_context) of that
//! context).

mod future;
mod sched;
pub(crate) use sched::{resumption, resumption_kind, retire_cells_out};
pub(crate) mod stack;

use std::cell::Cell;
use std::future::{Future, IntoFuture};
use std::pin::{pin, Pin};
use std::task::{Context, Poll};

use corosensei::Yielder;

use crate::current::{Role, Slot};
use crate::error::{Error, IntoResult};
use crate::task::Task;
use future::{FiberFuture, State};

pub use stack::stacks_mapped;

/// The default fiber stack: 128 KiB, as libdex (deep GTK and Pango stacks
/// need it), plus a guard page.
pub const DEFAULT_STACK_SIZE: usize = 128 * 1024;

/// The smallest fiber stack gdex accepts.
pub const MIN_STACK_SIZE: usize = 16 * 1024;

pub(crate) fn check_stack_size(bytes: usize) {
    assert!(
        bytes >= MIN_STACK_SIZE,
        "gdex: a fiber stack of {bytes} bytes is too small; use at least {MIN_STACK_SIZE} bytes \
         (the default is {DEFAULT_STACK_SIZE})"
    );
}

/// Per-fiber state the running fiber reaches through [`CURRENT`].
///
/// A fiber's cancellation (F4) needs no state of its own, shared with its
/// handle: the handle marks the fiber's task cancelled (the mark in its
/// block's metadata, `TaskMeta::to_cancel`) and wakes it with a waker of the
/// task taken at spawn; a worker shutting down sets its thread's
/// [`ON_WORKER`] flag and wakes the fibers it has. A `wait` asks both
/// ([`cancelled`]). (An `Arc` of a flag and a waker, shared by the handle and
/// the fiber, was a second allocation per fiber, and a third of the
/// spawning thread's time went to the allocator.)
struct FiberCtx {
    /// The coroutine's yielder; set by the fiber's first instructions.
    yielder: Cell<*const Yielder<(), ()>>,
    /// Where the fiber's stack's mapping starts: its guard page (F5).
    stack_map: Cell<usize>,
    /// The fiber's entry in its worker's book of live fibers
    /// ([`ON_WORKER`]), made by its first suspension; [`NOT_BOOKED`] before
    /// (or on a thread that is no pool worker).
    booked: Cell<usize>,
    /// Where [`cancelled`] looks first, found once by the first poll (a
    /// fiber never leaves its task's block): its task's metadata (null if
    /// it ran outside a task). Then it looks at its thread's
    /// [`SHUTTING_DOWN`].
    meta: Cell<*const crate::task::TaskMeta>,
    /// The fiber's cell on its worker's fiber scheduler ([`sched`]), once
    /// its first poll started using it: its waits get the fiber's own
    /// waker, and a wake resumes it without its task. Null: its task's
    /// polls run it (a fiber of a context scheduler, a local or tracked
    /// one).
    cell: Cell<Option<&'static sched::FiberCell>>,
}

const NOT_BOOKED: usize = usize::MAX;

/// The fiber running on this thread, if any: entered by its task's poll for
/// the duration of the switch into it.
// SAFETY: `fiber` owns `Role::Fiber`; this is its one slot.
const CURRENT: Slot<FiberCtx> = unsafe { Slot::new(Role::Fiber) };

/// A pool worker's fibers (F4, shutdown step 3).
struct OnWorker {
    /// The waker of each live fiber that has suspended on this worker, to
    /// wake it when the worker shuts down; a fiber's future takes its entry
    /// out when it drops.
    live: std::cell::RefCell<slab::Slab<std::task::Waker>>,
}

impl Drop for OnWorker {
    fn drop(&mut self) {
        // The thread is being torn down: a fiber that waits from now on (in
        // a destructor) is cancelled.
        let _ = SHUTTING_DOWN.try_with(|flag| flag.set(true));
    }
}

thread_local! {
    static ON_WORKER: OnWorker = const {
        OnWorker {
            live: std::cell::RefCell::new(slab::Slab::new()),
        }
    };
    /// Set when this thread's worker shuts down, or when its book of live
    /// fibers goes with the thread: every fiber on it is cancelled from
    /// then on (F4). (No destructor: readable to the thread's end.)
    static SHUTTING_DOWN: Cell<bool> = const { Cell::new(false) };
    /// The `Context` of the poll (or the fiber scheduler's resumption)
    /// that resumed the fiber running on this thread, for the fiber's
    /// waits; null outside one (a fiber unwound by its drop).
    static RESUMER: Cell<*mut Context<'static>> = const { Cell::new(std::ptr::null_mut()) };
}

/// Is the fiber `ctx` cancelled (F4)? Its task was (its handle dropped),
/// or its worker is shutting down.
#[inline]
fn cancelled(ctx: &FiberCtx) -> bool {
    let meta = ctx.meta.get();
    // SAFETY: set by the fiber's first poll to the metadata of the task
    // running it, its own, in the block that holds this `FiberCtx`.
    if !meta.is_null() && unsafe { &*meta }.is_cancelled() {
        // S14: its cancellable is cancelled here, on the fiber's thread,
        // before the wait reports it (X1: a GIO call made next refuses).
        // Its handlers run as code outside the fiber (a wait there is a
        // nested loop's, never a suspension of the fiber mid-emission).
        let _outside = outside_fiber();
        // SAFETY: as above.
        unsafe { &*meta }.cancel_here();
        return true;
    }
    SHUTTING_DOWN.with(Cell::get)
}

/// Books the fiber `ctx`, suspending for the first time with the waker
/// `waker`, in its worker's book of live fibers (if it runs on a worker).
#[inline]
fn book(ctx: &FiberCtx, waker: &std::task::Waker) {
    if ctx.booked.get() == NOT_BOOKED {
        book_first(ctx, waker);
    }
}

#[cold]
fn book_first(ctx: &FiberCtx, waker: &std::task::Waker) {
    if !crate::current::holds(Role::Worker) {
        return;
    }
    let key = ON_WORKER.try_with(|w| w.live.borrow_mut().insert(waker.clone()));
    if let Ok(key) = key {
        ctx.booked.set(key);
    }
}

/// A fiber starts on this thread: its book of live fibers is set up (so
/// that its teardown cancels the fibers still waiting then), or, if it is
/// gone already (the thread is being torn down), every fiber here is
/// cancelled from now on (F4).
fn note_fiber_start() {
    if ON_WORKER.try_with(|_| ()).is_err() {
        SHUTTING_DOWN.with(|flag| flag.set(true));
    }
}

/// Wakes the task of the fiber `ctx` through the waker its worker's book
/// keeps (a fiber on its worker's fiber scheduler is always booked: it
/// suspended in its task's first poll, on a worker).
fn wake_booked_task(ctx: &FiberCtx) {
    let key = ctx.booked.get();
    let waker = ON_WORKER
        .try_with(|w| w.live.borrow().get(key).cloned())
        .ok()
        .flatten();
    match waker {
        Some(waker) => waker.wake(),
        // During the thread's teardown: the task's drop, which comes, ends
        // it.
        None => debug_assert!(key == NOT_BOOKED || !crate::current::holds(Role::Worker)),
    }
}

/// Takes the fiber `ctx` out of its worker's book, if it is in it.
fn unbook(ctx: &FiberCtx) {
    let key = ctx.booked.replace(NOT_BOOKED);
    if key == NOT_BOOKED {
        return;
    }
    // The waker is dropped outside the borrow (it may be the last reference
    // to a task whose drop books or unbooks another fiber). During the
    // thread's teardown the book is gone already, and took its wakers.
    let waker = ON_WORKER
        .try_with(|w| w.live.borrow_mut().try_remove(key))
        .ok()
        .flatten();
    drop(waker);
}

/// For a pool worker that shuts down: cancels every fiber on this thread,
/// those that start from now on too (F4), wakes those that have suspended,
/// and says whether there was one. Their waits return at once; the worker
/// then runs them to their return.
pub(crate) fn cancel_those_on_this_worker() -> bool {
    SHUTTING_DOWN.with(|flag| flag.set(true));
    let wakers: Vec<std::task::Waker> = ON_WORKER.with(|w| {
        w.live
            .borrow()
            .iter()
            .map(|(_, waker)| waker.clone())
            .collect()
    });
    let any = !wakers.is_empty();
    for waker in wakers {
        waker.wake();
    }
    any
}

/// True while a fiber on this worker's fiber scheduler has not ended (its
/// future has not dropped): for the worker's shutdown, which runs them to
/// their return (F4), and waits for the resumption of one woken from
/// another thread to reach its queue.
pub(crate) fn live_on_this_worker() -> bool {
    sched::cells_out() > 0
}

/// Hides the running fiber (if any) until the returned guard drops: used
/// where a nested main loop inside a fiber runs other tasks, so that their
/// `wait` calls do not mistake themselves for the fiber.
#[inline]
pub(crate) fn outside_fiber() -> impl Drop {
    CURRENT.enter(std::ptr::null())
}

/// True when called from inside a fiber.
#[inline]
pub fn in_fiber() -> bool {
    crate::current::holds(Role::Fiber)
}

/// Waits for `future` inside a fiber, suspending only the fiber (F3): its
/// thread goes on running other tasks and fibers, and the fiber resumes on
/// the same thread when the future wakes it.
///
/// Gives the future's value, or its error, or:
/// - [`Error::NotOnFiber`] at once when not called from a fiber (it never
///   blocks the thread), and from inside a future that a `wait` is polling:
///   that future is plain async code, which must not suspend the fiber in
///   the middle of its poll (await there instead);
/// - [`Error::Cancelled`] if the fiber was cancelled (every handle dropped)
///   while waiting (even if the future became ready meanwhile), or is
///   cancelled and the future is not ready at once
///   (F4). The future is dropped.
///
/// The future gives a `Result<T, E>` whose error converts into
/// [`Error`] (a task, a fiber, a GIO call), merged into the one result, or
/// `()`; see [`IntoResult`]. For a future with any other
/// output, use [`wait_output`].
///
/// The thread's other tasks run while the fiber waits: do not wait while
/// holding a guard of per-thread state, such as a context pushed with
/// `MainContext::with_thread_default` (see the [module docs](self#thread-state-across-a-wait)).
///
/// ```
/// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
/// let s = pool.scheduler();
/// let s2 = s.clone();
/// let fiber = s.spawn_fiber(move || -> Result<i32, gdex::Error> {
///     let twenty = gdex::fiber::wait(s2.spawn(async { 20 }))?;
///     gdex::fiber::wait(gdex::sleep(std::time::Duration::from_millis(1)))?;
///     Ok(twenty + 1)
/// });
/// assert_eq!(gdex::block_on(fiber)??, 21);
/// assert!(matches!(gdex::fiber::wait(gdex::spawn(async { 1 })), Err(gdex::Error::NotOnFiber)));
/// # Ok::<(), gdex::Error>(())
/// ```
pub fn wait<F>(future: F) -> Result<<F::Output as IntoResult>::Ok, Error>
where
    F: IntoFuture,
    F::Output: IntoResult,
{
    wait_output(future).and_then(IntoResult::into_result)
}

/// [`wait`] for a future whose output is not a `Result` gdex can merge
/// with its own errors: gives that output as it is, or the fiber's error
/// ([`Error::NotOnFiber`], [`Error::Cancelled`]), as [`wait`] does.
///
/// ```
/// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
/// let fiber = pool.scheduler().spawn_fiber(|| gdex::fiber::wait_output(async { 7 }));
/// assert_eq!(gdex::block_on(fiber)??, 7);
/// # Ok::<(), gdex::Error>(())
/// ```
pub fn wait_output<F: IntoFuture>(future: F) -> Result<F::Output, Error> {
    let future = future.into_future();
    if !in_fiber() {
        return Err(Error::NotOnFiber);
    }
    let mut future = pin!(future);
    let mut resumed = false;
    loop {
        // SAFETY: CURRENT is non-null (checked above, and every resume of
        // this fiber sets it again to the same `FiberCtx`), and points into
        // the fiber's task, which outlives the fiber's execution.
        let ctx = unsafe { &*CURRENT.get() };
        // F4: once the fiber is cancelled, a wait it was suspended in
        // reports it, even if its future became ready meanwhile (a yield's
        // always does): `loop { work(); yield_now()?; }` must not run
        // `work()` again.
        if resumed && cancelled(ctx) {
            return Err(Error::Cancelled);
        }
        let cx = RESUMER.with(Cell::get);
        if cx.is_null() {
            // No poll is resuming us: the fiber is being unwound by its
            // drop (its pool shut down), and a destructor waits. There is
            // no `Context` of a poll to use and nobody to resume us (this
            // used to poll with the last poll's `Context`, long gone). A future that is ready at once still gives its
            // value (a destructor that flushes must not panic during the
            // unwind: that aborts); any other wait is cancelled.
            let mut noop = Context::from_waker(std::task::Waker::noop());
            let _hidden = outside_fiber();
            return match future.as_mut().poll(&mut noop) {
                Poll::Ready(value) => Ok(value),
                Poll::Pending => Err(Error::Cancelled),
            };
        }
        // SAFETY: a non-null `cx` was set by the poll (or the fiber
        // scheduler's resumption) that resumed us and is reset to null
        // before it returns, so it is live here.
        // (The cast shortens the `Context`'s lifetime to this loop's.)
        let resumer: &mut Context<'_> = unsafe { &mut *cx.cast::<Context<'_>>() };
        let resumer_waker: *const std::task::Waker = resumer.waker();
        // On its worker's fiber scheduler, the future gets the fiber's own
        // waker, even inside the task's poll: its wake resumes the fiber
        // directly.
        let cell = ctx.cell.get();
        let fiber_waker;
        let mut fiber_cx;
        let cx = match cell {
            Some(cell) => {
                fiber_waker = cell.waker();
                fiber_cx = Context::from_waker(&fiber_waker);
                &mut fiber_cx
            }
            None => &mut *resumer,
        };
        // The future is polled as plain async code, the fiber hidden: a
        // `wait` inside it must not suspend the fiber in the middle of this
        // poll (the future would keep this poll's `Context`, which is gone
        // by the time the fiber resumes), so it gets `NotOnFiber`.
        let polled = {
            let _hidden = outside_fiber();
            future.as_mut().poll(cx)
        };
        if let Poll::Ready(value) = polled {
            return Ok(value);
        }
        // The book keeps a waker of the task (the first suspension is in
        // the task's first poll, whose waker `resumer` has): for a fiber on
        // its worker's scheduler, the only reference to the task's block
        // while it waits (its own waker holds none).
        // SAFETY: the resumer's `Context`, and its waker, live until the
        // resumer returns, after we suspend.
        book(ctx, unsafe { &*resumer_waker });
        // Checked after the booking: a worker's shutdown before it found no
        // waker to wake (a handle's cancellation wakes the task with its own
        // waker, whenever it comes). A cancelled fiber still goes round its
        // scheduler once before it is told (as libdex's cancelled waits do),
        // so one that ignores the error and loops on its waits never holds
        // its thread in a single poll.
        if cancelled(ctx) {
            cx.waker().wake_by_ref();
        }
        let wait = crate::diagnostics::views::fiber_waits();
        if let Some(cell) = cell {
            // A wake expected from another thread, on a worker with nothing
            // else to run: watch for it rather than suspend (not when the
            // fiber woke itself, a `yield_fiber`, which must let others
            // run: F6).
            // (A fiber of this thread woken from here, the common case on
            // one worker, means work here: no need to ask.)
            if !sched::woken_here()
                && !cell.notified()
                && crate::current::with_worker_hooks(|w| w.spin_while_idle(&mut || cell.notified()))
                    .unwrap_or(false)
                && cell.take_notified()
            {
                wait.resumed();
                resumed = true;
                // A resumption as good as the scheduler's (P11).
                crate::task::coop::refill();
                continue;
            }
            cell.suspending();
        }
        // SAFETY: the yielder lives on this fiber's stack for the fiber's
        // whole run, and we are running on that fiber.
        unsafe { &*ctx.yielder.get() }.suspend(());
        wait.resumed();
        resumed = true;
    }
}

/// Lets the fiber's scheduler run other work, then resumes the fiber (F6):
/// the fiber's counterpart of the async [`gdex::yield_now`](crate::yield_now).
/// Returns [`Error::Cancelled`] once the fiber is cancelled, and
/// [`Error::NotOnFiber`] outside a fiber.
pub fn yield_fiber() -> Result<(), Error> {
    wait(crate::yield_now())
}

/// Options for spawning a fiber.
///
/// ```
/// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
/// let fiber = gdex::fiber::Builder::new()
///     .stack_size(64 * 1024)
///     .spawn(&pool.scheduler(), || "small stack");
/// assert_eq!(gdex::block_on(fiber).unwrap(), "small stack");
/// ```
#[derive(Debug, Default, Clone)]
pub struct Builder {
    stack_size: Option<usize>,
}

impl Builder {
    /// Default options: the scheduler's fiber stack size.
    pub fn new() -> Builder {
        Builder::default()
    }

    /// The fiber's stack size in bytes (a guard page is added below).
    ///
    /// # Panics
    /// If `bytes` is below [`MIN_STACK_SIZE`].
    pub fn stack_size(mut self, bytes: usize) -> Builder {
        check_stack_size(bytes);
        self.stack_size = Some(bytes);
        self
    }

    /// The future that runs `f` as a fiber (with `default_stack` bytes of
    /// stack unless [`stack_size`](Self::stack_size) said otherwise), to be
    /// spawned pinned.
    ///
    /// Until its first poll the future holds only `f` and plain integers: it
    /// may move to the thread that first polls it, and must stay there from
    /// then on.
    ///
    /// With `on_pool` (a fiber of a pool's scheduler, not a local one),
    /// its first poll puts the fiber on its worker's fiber scheduler
    /// ([`sched`]).
    pub(crate) fn prepare<F, T>(
        self,
        default_stack: usize,
        f: F,
        on_pool: bool,
    ) -> impl Future<Output = Result<T, Error>>
    where
        F: FnOnce() -> T + 'static,
        T: 'static,
    {
        FiberFuture {
            state: State::Start {
                f,
                stack_size: self.stack_size.unwrap_or(default_stack),
                on_pool,
            },
            ctx: FiberCtx {
                yielder: Cell::new(std::ptr::null()),
                stack_map: Cell::new(0),
                booked: Cell::new(NOT_BOOKED),
                meta: Cell::new(std::ptr::null()),
                cell: Cell::new(None),
            },
            _pinned: std::marker::PhantomPinned,
        }
    }
}

/// A handle to a running fiber; a future of its result (F1).
///
/// Dropping it cancels the fiber (F4, see the module docs);
/// [`detach`](Fiber::detach) lets it run to completion. A panic inside the
/// fiber reaches the waiter as [`Error::Panicked`]; a stack that could not
/// be mapped, as [`Error::Failed`].
#[must_use = "dropping a Fiber cancels it; call .detach() to let it run"]
pub struct Fiber<T> {
    /// The fiber's task: the closure's result, or why it never started.
    task: Option<Task<Result<T, Error>>>,
    /// A waker of the task, to wake the fiber when it is cancelled (F4);
    /// `None` for a fiber refused at spawn.
    waker: Option<std::task::Waker>,
}

impl<T> Fiber<T> {
    /// The handle of the fiber whose pinned task is `task`, woken by
    /// `waker` (a waker of that task).
    pub(crate) fn new(task: Task<Result<T, Error>>, waker: Option<std::task::Waker>) -> Self {
        Fiber {
            task: Some(task),
            waker,
        }
    }

    /// Lets the fiber run to completion with nobody holding it (libdex's
    /// `dex_future_disown`).
    pub fn detach(mut self) {
        if let Some(task) = self.task.take() {
            task.detach();
        }
    }

    /// True once the fiber has returned (or panicked).
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().is_none_or(Task::is_finished)
    }
}

impl<T> Future for Fiber<T> {
    type Output = Result<T, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.task.as_mut() {
            Some(task) => Pin::new(task).poll(cx).map(Result::flatten),
            None => Poll::Ready(Err(Error::Cancelled)),
        }
    }
}

impl<T> Drop for Fiber<T> {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            if !task.is_finished() {
                // Marks the task cancelled (what its waits ask), and, X1,
                // cancels its cancellable: GIO calls made with it stop too.
                task.cancel_cancellable();
                // Then wakes it, whatever it waits on: its wait returns
                // `Cancelled`. (A fiber that is running or queued is polled
                // again anyway; one not started yet is told at its first
                // wait.)
                if let Some(waker) = self.waker.take() {
                    waker.wake();
                }
            }
            // The fiber ends through its own return; its result is dropped.
            task.detach();
        }
    }
}

impl<T> std::fmt::Debug for Fiber<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fiber")
            .field("finished", &self.is_finished())
            .finish()
    }
}
