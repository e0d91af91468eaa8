//! The [`Scheduler`] handle: where a task runs.
//!
//! A scheduler is either a context scheduler (the main scheduler on
//! `g_main_context_default()`, or the scheduler of any other `GMainContext`)
//! or a thread pool. The handle is cheap to clone and `Send + Sync`; spawning
//! through it is the same call whatever is behind it.

pub(crate) mod context;
pub(crate) mod source;

use std::cell::Cell;
use std::future::Future;
use std::sync::{Arc, OnceLock};

use crate::error::Error;
use crate::pool::PoolShared;
use crate::task::{CatchUnwind, Job, Task};
use context::ContextShared;

/// Where tasks and work items run: a `GMainContext` or a [`ThreadPool`](crate::ThreadPool).
///
/// ```
/// // A scheduler for a context that some thread iterates.
/// let context = glib::MainContext::new();
/// let scheduler = gdex::Scheduler::for_context(&context);
/// let task = scheduler.spawn(async { 1 + 1 });
/// // Tasks run while the context is iterated.
/// let out = context.block_on(task);
/// assert_eq!(out.unwrap(), 2);
/// ```
#[derive(Clone)]
pub struct Scheduler {
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    Context(Arc<ContextShared>),
    Pool(Arc<PoolShared>),
}

thread_local! {
    /// The context scheduler whose source is dispatching on this thread.
    static DISPATCHING: Cell<*const ContextShared> = const { Cell::new(std::ptr::null()) };
}

/// Marks `shared` as the scheduler dispatching on this thread until the guard
/// drops (restoring the outer one for nested loops).
pub(crate) fn enter_context(shared: &ContextShared) -> impl Drop {
    struct Restore(*const ContextShared);
    impl Drop for Restore {
        fn drop(&mut self) {
            DISPATCHING.with(|d| d.set(self.0));
        }
    }
    Restore(DISPATCHING.with(|d| d.replace(shared)))
}

impl Scheduler {
    pub(crate) fn from_pool(pool: Arc<PoolShared>) -> Scheduler {
        Scheduler {
            kind: Kind::Pool(pool),
        }
    }

    /// The main scheduler, on `g_main_context_default()` (S1): tasks spawned
    /// here run on the thread that runs the default main loop (the GTK main
    /// thread).
    pub fn main() -> Scheduler {
        static MAIN: OnceLock<Scheduler> = OnceLock::new();
        MAIN.get_or_init(|| Scheduler::for_context(&glib::MainContext::default()))
            .clone()
    }

    /// The scheduler of `context` (S2); one per context, created on first use.
    /// Its tasks run on whichever thread iterates `context`.
    pub fn for_context(context: &glib::MainContext) -> Scheduler {
        Scheduler {
            kind: Kind::Context(ContextShared::for_context(context)),
        }
    }

    /// The calling thread's scheduler (S2): its pool if it is a pool worker,
    /// the context scheduler dispatching on it, the scheduler of its
    /// thread-default context, or the main scheduler if it owns the default
    /// context. `None` on a plain thread.
    pub fn thread_default() -> Option<Scheduler> {
        if let Some(pool) = crate::pool::current_pool() {
            return Some(Scheduler::from_pool(pool));
        }
        let dispatching = DISPATCHING.with(|d| d.get());
        if !dispatching.is_null() {
            // SAFETY: DISPATCHING is only non-null while a dispatch of that
            // scheduler, which holds a strong reference to it, is running on
            // this thread; so the pointer is a live `Arc` allocation, and
            // taking one more strong count for our handle is sound.
            let shared = unsafe {
                Arc::increment_strong_count(dispatching);
                Arc::from_raw(dispatching)
            };
            return Some(Scheduler {
                kind: Kind::Context(shared),
            });
        }
        if let Some(context) = glib::MainContext::thread_default() {
            return Some(Scheduler::for_context(&context));
        }
        let main = Scheduler::main();
        let owns_main = match &main.kind {
            Kind::Context(c) => c.context().is_owner() || c.is_local_owner(),
            Kind::Pool(_) => false,
        };
        owns_main.then_some(main)
    }

    /// True for the main scheduler.
    pub fn is_main(&self) -> bool {
        matches!(&self.kind, Kind::Context(c) if c.is_main())
    }

    /// True for a thread pool's scheduler.
    pub fn is_pool(&self) -> bool {
        matches!(self.kind, Kind::Pool(_))
    }

    /// The context a context scheduler runs on; `None` for a pool (each of its
    /// workers has its own).
    pub fn context(&self) -> Option<glib::MainContext> {
        match &self.kind {
            Kind::Context(c) => Some(c.context().clone()),
            Kind::Pool(_) => None,
        }
    }

    /// Spawns a `Send` future (S4). From any thread. One allocation and one
    /// queue push (S7).
    ///
    /// On a pool, a spawn from one of its workers goes to that worker's deque,
    /// a spawn from anywhere else to the pool's injector. On a closed pool the
    /// task resolves to [`Error::Closed`] without running.
    pub fn spawn<F>(&self, future: F) -> Task<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match &self.kind {
            Kind::Context(shared) => {
                let shared = shared.clone();
                let (runnable, task) =
                    async_task::spawn(CatchUnwind::new(future), move |r| shared.push(Job::Task(r)));
                runnable.schedule();
                Task::new(task)
            }
            Kind::Pool(pool) => {
                if pool.is_closed() {
                    return Task::failed(Error::Closed);
                }
                let pool = pool.clone();
                let (runnable, task) = async_task::spawn(CatchUnwind::new(future), move |r| {
                    pool.schedule(Job::Task(r))
                });
                runnable.schedule();
                Task::new(task)
            }
        }
    }

    /// Spawns a `!Send` future on a context scheduler (S1). It may only be
    /// called on the thread that owns the context (the one running its loop,
    /// or able to acquire it); the future is polled and dropped on that
    /// thread only.
    ///
    /// # Panics
    /// On any other thread, with a message saying which thread owns the
    /// context; and on a thread pool scheduler, whose workers take only
    /// `Send` futures.
    ///
    /// ```
    /// use std::rc::Rc;
    /// let main = gdex::Scheduler::main();
    /// let shared = Rc::new(5); // !Send
    /// let task = main.spawn_local(async move { *shared + 1 });
    /// assert_eq!(gdex::block_on(task).unwrap(), 6);
    /// ```
    pub fn spawn_local<F>(&self, future: F) -> Task<F::Output>
    where
        F: Future + 'static,
        F::Output: 'static,
    {
        match &self.kind {
            Kind::Context(shared) => {
                let guard = shared.enter_local("Scheduler::spawn_local");
                let queue = shared.clone();
                let future = async move {
                    let _live = guard;
                    future.await
                };
                let (runnable, task) =
                    async_task::spawn_local(CatchUnwind::new(future), move |r| {
                        queue.push(Job::Task(r))
                    });
                runnable.schedule();
                Task::new(task)
            }
            Kind::Pool(_) => panic!(
                "gdex: Scheduler::spawn_local was called on a thread pool scheduler; pool workers \
                 steal tasks from each other, so they only take Send futures. Spawn a Send \
                 future with spawn(), or a !Send one on the main scheduler or a context \
                 scheduler."
            ),
        }
    }

    /// Pushes a work item: the cheapest way to run a closure on this
    /// scheduler, with no handle and no future (S3). A panic in `f` is
    /// reported with `g_critical` and the scheduler goes on.
    ///
    /// On a pool that has been shut down the item cannot run: it is dropped
    /// and the mistake reported with `g_critical`.
    ///
    /// ```
    /// use std::sync::mpsc;
    /// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
    /// let (tx, rx) = mpsc::channel();
    /// pool.scheduler().push(move || tx.send(7).unwrap());
    /// assert_eq!(rx.recv().unwrap(), 7);
    /// ```
    pub fn push<F>(&self, f: F)
    where
        F: FnOnce() + Send + 'static,
    {
        let job = Job::Work(Box::new(f));
        match &self.kind {
            Kind::Context(shared) => shared.push(job),
            Kind::Pool(pool) => {
                if pool.is_closed() {
                    glib::g_critical!(
                        "gdex",
                        "Scheduler::push on a thread pool that has been shut down: the work item \
                         was dropped without running"
                    );
                    return;
                }
                pool.schedule(job)
            }
        }
    }
}

impl PartialEq for Scheduler {
    fn eq(&self, other: &Self) -> bool {
        match (&self.kind, &other.kind) {
            (Kind::Context(a), Kind::Context(b)) => Arc::ptr_eq(a, b),
            (Kind::Pool(a), Kind::Pool(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for Scheduler {}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Context(c) if c.is_main() => f.write_str("Scheduler::Main"),
            Kind::Context(c) => f
                .debug_tuple("Scheduler::Context")
                .field(c.context())
                .finish(),
            Kind::Pool(p) => f
                .debug_struct("Scheduler::Pool")
                .field("workers", &p.workers())
                .finish(),
        }
    }
}
