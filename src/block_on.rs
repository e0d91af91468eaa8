//! `block_on`: drive a future on the calling thread while iterating its
//! context (S8).

use std::future::{Future, IntoFuture};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use crate::current::Role;

/// How a blocked thread sleeps, and so how its waker wakes it.
enum Sleeper {
    /// In its context's poll (`block_on`): woken by `g_main_context_wakeup`.
    Context(glib::MainContext),
    /// Parked (`wait_for`): woken by `Thread::unpark`.
    Thread(std::thread::Thread),
}

/// The waker of a thread blocked on one future: a flag, set once per
/// wake-up, and the sleeper to wake.
struct Signal {
    woken: AtomicBool,
    sleeper: Sleeper,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.woken.swap(true, Ordering::AcqRel) {
            match &self.sleeper {
                Sleeper::Context(context) => context.wakeup(),
                Sleeper::Thread(thread) => thread.unpark(),
            }
        }
    }
}

/// Polls `future` on this thread whenever it is woken, and sleeps between
/// wake-ups as `sleeper` says (iterating the context, or parked).
///
/// Each poll of `future` has a full cooperative budget (P11), as a task's
/// does; everything else that runs meanwhile (the context's GLib callbacks,
/// work items, another executor's tasks) is unconstrained, as at top level,
/// whatever budget the caller's own poll had left. With the `tokio`
/// feature, tokio's budget is unconstrained for the whole wait: a
/// `block_on` inside a tokio task would otherwise spend that task's budget
/// on every tokio future it polls, and once it is spent tokio defers their
/// wake-ups until the tokio task yields, which it cannot while it waits
/// here.
fn run_until_ready<F: Future>(sleeper: Sleeper, future: F) -> F::Output {
    let _unconstrained = crate::task::coop::enter_unconstrained();
    #[cfg(feature = "tokio")]
    return crate::tokio_rt::unconstrained(|| poll_until_ready(sleeper, future));
    #[cfg(not(feature = "tokio"))]
    poll_until_ready(sleeper, future)
}

/// [`run_until_ready`]'s loop.
fn poll_until_ready<F: Future>(sleeper: Sleeper, future: F) -> F::Output {
    let signal = Arc::new(Signal {
        woken: AtomicBool::new(true),
        sleeper,
    });
    let waker = Waker::from(signal.clone());
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if signal.woken.swap(false, Ordering::AcqRel) {
            let polled = {
                let _budget = crate::task::coop::enter_poll();
                future.as_mut().poll(&mut cx)
            };
            if let Poll::Ready(output) = polled {
                return output;
            }
            // Woken during the poll (it yielded, or what it awaits finished
            // meanwhile): poll again without sleeping, but let the context
            // dispatch what is ready first, as a worker does between two
            // polls of a yielding task (S12). Polling again at once would let
            // a `yield_now` loop starve the context's tasks and sources.
            if signal.woken.load(Ordering::Acquire) {
                if let Sleeper::Context(context) = &signal.sleeper {
                    context.iteration(false);
                }
                continue;
            }
        }
        match &signal.sleeper {
            Sleeper::Context(context) => {
                context.iteration(true);
            }
            Sleeper::Thread(_) => std::thread::park(),
        }
    }
}

/// Runs `future` to completion on the calling thread and returns its output.
///
/// While it waits, it iterates the calling thread's context, so that the
/// tasks, timeouts and GIO callbacks of that context keep running; tasks
/// spawned meanwhile go on after it returns (S8). A future that wakes itself
/// (a [`yield_now`](crate::yield_now) loop) is polled again only after one
/// non-blocking iteration of the context, so it never starves the context's
/// work (S12). The thread's context is:
///
/// - its thread-default context, if one is pushed
///   (`MainContext::with_thread_default`);
/// - inside a dispatch of a context (a task of [`Scheduler::for_context`],
///   a main-scheduler task, a GLib callback, a `glib::MainLoop::run` of a
///   context that is not thread-default), that context (S13): a nested loop
///   iterates the dispatch it is in, so the scheduler's other tasks, and the
///   sources attached there, keep running;
/// - on the process's main thread, or on a thread that owns the default main
///   context (it acquired it, or runs the main loop), the default main
///   context: main-scheduler tasks keep running (but inside a dispatch of
///   another context, the rule above wins: a `block_on` of main-scheduler
///   work inside a callback of a private context's loop waits for a main
///   loop that does not turn; await it from a task instead);
/// - on any other thread, a private context: the thread just waits, and
///   never runs another thread's main-loop work (such as `!Send` tasks of
///   the main scheduler).
///
/// If another thread is running that context, a private context is
/// iterated instead.
///
/// With the `tokio` feature, called inside a task on a tokio worker thread
/// (the `gdex-tokio` thread that drives gdex's tokio I/O and timers, or a
/// worker of an app's multi-thread runtime), it first hands that worker's
/// core to another thread, as `tokio::task::block_in_place` does, so tokio's
/// timers and I/O go on while it waits (S13).
///
/// [`Scheduler::for_context`]: crate::Scheduler::for_context
///
/// # Panics
/// On a pool worker: blocking a worker would stall every task queued behind
/// it and can deadlock the pool. Await the future instead.
///
/// ```
/// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
/// let on_pool = pool.scheduler().spawn(async { 20 });
/// let on_main = gdex::Scheduler::main().spawn(async move { on_pool.await.unwrap() + 1 });
/// // This example runs on the main thread, which iterates the main context.
/// assert_eq!(gdex::block_on(on_main).unwrap(), 21);
/// ```
pub fn block_on<F: IntoFuture>(future: F) -> F::Output {
    let future = future.into_future();
    if crate::current::holds(Role::Worker) {
        panic!(
            "gdex::block_on called on pool worker {:?}: blocking a worker stalls every task queued \
             behind it and can deadlock the pool. Await the future instead (or move the blocking \
             call off the pool).",
            std::thread::current().name().unwrap_or("<unnamed>")
        );
    }
    #[cfg(feature = "tokio")]
    return crate::tokio_rt::off_worker(|| wait_iterating(future));
    #[cfg(not(feature = "tokio"))]
    wait_iterating(future)
}

/// `block_on` once it may block this thread.
fn wait_iterating<F: Future>(future: F) -> F::Output {
    let context = waiting_context();
    let acquired = context.acquire();
    match acquired {
        Ok(_guard) => drive(&context, future),
        Err(_) => {
            // Another thread runs this context: wait on a context of our own.
            let private = glib::MainContext::new();
            let _guard = private
                .acquire()
                .expect("a fresh GMainContext is free to acquire");
            drive(&private, future)
        }
    }
}

/// The context `block_on` iterates on this thread (see its docs).
fn waiting_context() -> glib::MainContext {
    // (GLib reports the default context pushed as thread-default as no
    // thread-default at all: ownership tells that case apart.)
    if let Some(context) = glib::MainContext::thread_default() {
        return context;
    }
    // S13: inside a dispatch of a context that is not thread-default (a
    // `MainLoop::run` of it, a task of its scheduler, a GLib callback
    // attached there), that context: the work the future awaits (another
    // task of the same scheduler) may be dispatched nowhere else.
    if let Some(context) = dispatching_context() {
        return context;
    }
    if crate::util::is_main_thread() || glib::MainContext::default().is_owner() {
        glib::MainContext::default()
    } else {
        glib::MainContext::new()
    }
}

/// The context of the innermost source this thread is dispatching, if any.
pub(crate) fn dispatching_context() -> Option<glib::MainContext> {
    // SAFETY: `g_main_current_source` has no precondition; it gives the
    // source being dispatched on this thread (borrowed, alive for as long as
    // its dispatch, which encloses this call), or null.
    let source = unsafe { glib::ffi::g_main_current_source() };
    if source.is_null() {
        return None;
    }
    // SAFETY: `source` is that live source; GLib allows
    // `g_source_get_context` on the source `g_main_current_source` gives
    // (even a destroyed one, whose context lives while it dispatches).
    let context = unsafe { glib::ffi::g_source_get_context(source) };
    if context.is_null() {
        return None;
    }
    // SAFETY: the context of a source being dispatched, alive meanwhile
    // (borrowed: `from_glib_none` takes a reference of our own).
    Some(unsafe { glib::translate::from_glib_none(context) })
}

fn drive<F: Future>(context: &glib::MainContext, future: F) -> F::Output {
    // B6: a nested loop of the context this thread is dispatching (S13)
    // suspends the job that called it: waiting here, while the loop runs
    // the context's other sources, is not that job being stuck. (A nested
    // loop of another context blocks the dispatching one: that still
    // counts.)
    let _outer = dispatching_context()
        .is_some_and(|dispatching| dispatching == *context)
        .then(crate::diagnostics::stall::suspend_current)
        .flatten();
    // Called inside a fiber, this is a nested loop: what it polls is not the
    // fiber.
    let _outside = crate::fiber::outside_fiber();
    #[cfg(feature = "tokio")]
    let _tokio = crate::tokio_rt::enter();
    run_until_ready(Sleeper::Context(context.clone()), future)
}

// SAFETY: `block_on` owns `Role::ParkedWait`; this is its one slot.
const PARKED_WAIT: crate::current::Slot<()> =
    unsafe { crate::current::Slot::new(Role::ParkedWait) };

/// Blocks the calling thread until `future` completes (B4), iterating no
/// context: for plain threads that have no main loop (a thread of your own,
/// a C library's callback thread). A GLib thread that runs a context wants
/// [`block_on`] instead.
///
/// # Panics
/// Where blocking without iterating would stall work that the future may
/// itself need (as libdex refuses waits on its scheduler threads), with a
/// message saying what to use instead:
///
/// - on the process's main thread, and on any thread that holds the default
///   main context (acquired, pushed as thread-default, or running its loop):
///   the main scheduler runs there (see [`Scheduler::main`]), so a wait on
///   main-scheduler work would never return. Use [`block_on`], which waits
///   while iterating the main context;
/// - on a thread that holds a context a gdex scheduler runs on
///   ([`Scheduler::for_context`]), for the same reason: use [`block_on`];
/// - on a pool worker, inside a task of a context scheduler, and inside a
///   fiber (use [`fiber::wait`](crate::fiber::wait)).
///
/// [`Scheduler::main`]: crate::Scheduler::main
/// [`Scheduler::for_context`]: crate::Scheduler::for_context
///
/// ```should_panic
/// // A doctest runs on the process's main thread: refused, use block_on.
/// gdex::wait_for(gdex::Scheduler::main().spawn(async { 1 }));
/// ```
///
/// ```
/// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
/// let task = pool.scheduler().spawn(async { 6 * 7 });
/// let answer = std::thread::spawn(move || gdex::wait_for(task)).join().unwrap();
/// assert_eq!(answer.unwrap(), 42);
/// ```
pub fn wait_for<F: IntoFuture>(future: F) -> F::Output {
    let future = future.into_future();
    let here = std::thread::current();
    let name = here.name().unwrap_or("<unnamed>");
    if crate::fiber::in_fiber() {
        panic!(
            "gdex::wait_for called inside a fiber on thread {name:?}: it would block every task \
             of the fiber's thread. Use gdex::fiber::wait, which suspends only the fiber."
        );
    }
    if crate::current::holds(Role::Worker) {
        panic!(
            "gdex::wait_for called on pool worker {name:?}: blocking a worker stalls every task \
             queued behind it and can deadlock the pool. Await the future instead."
        );
    }
    if crate::current::holds(Role::Dispatching) {
        panic!(
            "gdex::wait_for called inside a task of a context scheduler on thread {name:?}: it \
             would block that context's loop, which the future may need. Await the future, or \
             use gdex::block_on, which keeps the loop running."
        );
    }
    if crate::util::is_main_thread() || glib::MainContext::default().is_owner() {
        panic!(
            "gdex::wait_for called on thread {name:?}, {}: the main scheduler runs on this \
             thread, and blocking it without iterating the default main context would never \
             let main-scheduler work the future may need run. Use gdex::block_on, which waits \
             while iterating the main context (or await the future inside a task).",
            if crate::util::is_main_thread() {
                "the process's main thread"
            } else {
                "which holds the default main context"
            }
        );
    }
    if crate::scheduler::context::holds_a_scheduler_context() {
        panic!(
            "gdex::wait_for called on thread {name:?}, which holds a GMainContext that a gdex \
             scheduler runs on: blocking it without iterating that context would stall the \
             scheduler's tasks, which the future may need. Use gdex::block_on, which waits \
             while iterating the thread's context (or await the future inside a task)."
        );
    }
    let wait = move || {
        #[cfg(feature = "tokio")]
        let _tokio = crate::tokio_rt::enter();
        let _parked = PARKED_WAIT.enter(std::ptr::NonNull::<()>::dangling().as_ptr());
        run_until_ready(Sleeper::Thread(here), future)
    };
    #[cfg(feature = "tokio")]
    return crate::tokio_rt::off_worker(wait);
    #[cfg(not(feature = "tokio"))]
    wait()
}
