//! The [`Scheduler`] handle: where a task runs.
//!
//! A scheduler is either a context scheduler (the main scheduler on
//! `g_main_context_default()`, or the scheduler of any other `GMainContext`)
//! or a thread pool. The handle is cheap to clone and `Send + Sync`; spawning
//! through it is the same call whatever is behind it.

mod batch;
pub(crate) mod bound;
pub(crate) mod context;
mod fiber;
mod latency;
mod owner_thread;
mod priority;

use owner_thread::{OnItsThread, ThreadBound};

use std::future::Future;
use std::sync::{Arc, OnceLock};

use crate::current::{Entered, Role, Slot};
use crate::error::Error;
use crate::pool::PoolShared;
use crate::task::{self, CatchUnwind, Job, Outcome, Task};
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
    /// On a pool: its spawns and pushes go to the latency class (P12).
    latency: bool,
}

#[derive(Clone)]
enum Kind {
    Context(Arc<ContextShared>),
    Pool(Arc<PoolShared>),
}

/// The context scheduler whose source is dispatching on this thread.
// SAFETY: `scheduler` owns `Role::Dispatching`; this is its one slot.
const DISPATCHING: Slot<ContextShared> = unsafe { Slot::new(Role::Dispatching) };

/// Marks `shared` as the scheduler dispatching on this thread until the guard
/// drops (restoring the outer one for nested loops).
pub(crate) fn enter_context(shared: &ContextShared) -> Entered {
    DISPATCHING.enter(shared)
}

impl crate::ThreadPool {
    /// A scheduler handle that spawns onto this pool.
    pub fn scheduler(&self) -> Scheduler {
        Scheduler::from_pool(self.shared().clone())
    }
}

impl Scheduler {
    pub(crate) fn from_pool(pool: Arc<PoolShared>) -> Scheduler {
        Scheduler {
            kind: Kind::Pool(pool),
            latency: false,
        }
    }

    /// The main scheduler, on `g_main_context_default()` (S1): tasks spawned
    /// here run on the thread that runs the default main loop (the GTK main
    /// thread).
    ///
    /// - **Who may spawn `!Send` futures here** (S10): the process's main
    ///   thread (as for GTK), or the thread that holds the default main
    ///   context right now: one that acquired it, pushed it as thread-default
    ///   or runs its loop. See [`spawn_local`](Scheduler::spawn_local).
    /// - **Frames first, with progress** (X3, S11): its source runs below
    ///   GTK's redraw, so frames come first, in slices: a slice starts no
    ///   new poll after 4 ms (or 128 polls), but the poll running at the
    ///   4 ms mark is not interrupted, so a slice lasts at most 4 ms plus
    ///   one poll of one task (keep each poll short: a task whose poll takes
    ///   20 ms holds the loop for 20 ms). A ready task never waits more than
    ///   about 50 ms behind other ready sources, however busy they keep the
    ///   loop: past that, one slice runs ahead of them (at
    ///   `G_PRIORITY_HIGH`).
    /// - **Somebody must iterate the default main context**: run a
    ///   `GMainLoop` or a GTK application, or wait with
    ///   [`block_on`](crate::block_on). Work that has waited 3 s with nobody
    ///   running it is reported once with a `g_warning` (domain `gdex`);
    ///   `GDEX_MAIN_IDLE_WARN_MS=<ms>` sets that delay, `0` turns it off.
    pub fn main() -> Scheduler {
        static MAIN: OnceLock<Scheduler> = OnceLock::new();
        MAIN.get_or_init(|| Scheduler::for_context(&glib::MainContext::default()))
            .clone()
    }

    /// The scheduler of `context` (S2); one per context, created on first use.
    /// Its tasks run on whichever thread iterates `context`.
    ///
    /// On a pool worker's own context (what `glib::MainContext::thread_default()`
    /// gives inside a pool task) that is the worker, so the scheduler ends
    /// with it (S9): when the pool shuts down its tasks resolve to
    /// [`Error::Cancelled`](crate::Error::Cancelled), and so do spawns there
    /// afterwards.
    pub fn for_context(context: &glib::MainContext) -> Scheduler {
        Scheduler {
            kind: Kind::Context(ContextShared::for_context(context)),
            latency: false,
        }
    }

    /// The calling thread's scheduler (S2): its pool if it is a pool worker,
    /// the context scheduler dispatching on it, the scheduler of its
    /// thread-default context, or the main scheduler if it holds the default
    /// context (it acquired it or runs its loop). `None` on a plain thread
    /// (and on the main thread before it runs the main loop).
    pub fn thread_default() -> Option<Scheduler> {
        if let Some(pool) = crate::pool::current_pool() {
            return Some(Scheduler::from_pool(pool));
        }
        let dispatching = DISPATCHING.get();
        if !dispatching.is_null() {
            // DISPATCHING is only non-null while a dispatch of that scheduler,
            // which holds a strong reference to it, runs on this thread.
            // SAFETY: so the pointer is a live `Arc` allocation, and taking
            // one more strong count for our handle is sound.
            let shared = unsafe {
                Arc::increment_strong_count(dispatching);
                Arc::from_raw(dispatching)
            };
            // P12: a spawn through it gets its context's default priority,
            // whatever priority the dispatching task was spawned at.
            if !shared.at_default_priority() {
                return Some(Scheduler::for_context(shared.context()));
            }
            return Some(Scheduler {
                kind: Kind::Context(shared),
                latency: false,
            });
        }
        if let Some(context) = glib::MainContext::thread_default() {
            return Some(Scheduler::for_context(&context));
        }
        glib::MainContext::default()
            .is_owner()
            .then(Scheduler::main)
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
    /// a spawn from anywhere else to the pool's injector. On a pool that has
    /// shut down the task resolves to [`Error::ShutDown`] without running
    /// (so do the other spawns: pinned, local, fibers, `spawn_blocking`).
    #[track_caller]
    pub fn spawn<F>(&self, future: F) -> Task<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.spawn_at(future, std::panic::Location::caller())
    }

    /// [`spawn`](Scheduler::spawn), the task dump naming `location` as
    /// where it was spawned.
    pub(crate) fn spawn_at<F>(
        &self,
        future: F,
        location: &'static std::panic::Location<'static>,
    ) -> Task<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.spawn_outcome(CatchUnwind::located(future, None, location, || {
            self.label()
        }))
    }

    /// How the task dump names this scheduler.
    pub(crate) fn label(&self) -> String {
        format!("{self:?}")
    }

    /// [`spawn`](Scheduler::spawn) for a future already wrapped so that its
    /// output is a task outcome.
    pub(crate) fn spawn_outcome<W, T>(&self, future: W) -> Task<T>
    where
        W: Future<Output = Outcome<T>> + Send + 'static,
        T: Send + 'static,
    {
        let (runnable, task) = match &self.kind {
            Kind::Context(shared) => {
                let shared = shared.clone();
                // S14: a context's task runs only on the thread that
                // iterates the context: its cancellation is signalled there.
                let future = move |meta: &task::TaskMeta| {
                    meta.bind();
                    OnItsThread { inner: future }
                };
                task::builder().spawn(future, move |r| shared.push(Job::task(r)))
            }
            Kind::Pool(pool) => {
                if pool.is_closed() {
                    return Task::failed(Error::ShutDown);
                }
                if self.latency {
                    // P12: woken to the pool's urgent queue, homeless.
                    task::builder_for(pool.latency_owner())
                        .spawn(move |_| future, task::schedule_on_owner)
                } else if pool.thread_per_core() {
                    // P9: the task keeps the worker it was placed on.
                    let home = pool.home_for_spawn();
                    task::builder_for(pool.home_of(home, true))
                        .spawn(move |_| future, task::schedule_on_owner)
                } else {
                    // A capture-less schedule function: see TaskMeta::pool.
                    task::owned_builder(pool.clone())
                        .spawn(move |_| future, task::schedule_on_owner)
                }
            }
        };
        runnable.schedule();
        if let Kind::Pool(pool) = &self.kind {
            pool.settle_spawn();
        }
        Task::new(task)
    }

    /// Spawns a `Send` future with a name (X4): the stall watchdog names it
    /// when one of its polls blocks its scheduler.
    ///
    /// ```
    /// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
    /// let task = pool.scheduler().spawn_named("thumbnailer", async { 3 });
    /// assert_eq!(gdex::block_on(task).unwrap(), 3);
    /// ```
    #[track_caller]
    pub fn spawn_named<F>(&self, name: &str, future: F) -> Task<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let name: std::sync::Arc<str> = name.into();
        let future = crate::diagnostics::stall::Named::new(name.clone(), future);
        self.spawn_outcome(CatchUnwind::named(future, name, || self.label()))
    }

    /// Spawns a `!Send` future on a context scheduler (S1, S10). The future
    /// is polled and dropped only on the calling thread, when it iterates
    /// the context; whoever else iterates the context meanwhile leaves it
    /// alone. Who may call it:
    ///
    /// - on the **main scheduler**: the process's main thread (as for GTK:
    ///   the thread that will run the main loop), unless another thread holds
    ///   the default main context; or the thread that holds the default main
    ///   context right now (it acquired it, pushed it as thread-default, or
    ///   runs its loop: how a program or a test runs the main loop on another
    ///   thread);
    /// - on any other **context scheduler**: the thread that holds the
    ///   context, or any thread while nobody holds it.
    ///
    /// Nothing sticks: a thread that releases the context or exits owns
    /// nothing any more, and another thread that holds the context may
    /// spawn its own. (The released thread's `!Send` tasks run when it holds
    /// the context again; those queued when it exits are dropped there, on
    /// their own thread. One that is idle when its thread exits can never be
    /// dropped soundly: it is leaked, its destructor never runs, and if it
    /// is woken later a critical says so.)
    ///
    /// On a thread pool, `spawn_local` may be called from one of its workers
    /// (inside a pool task): the future is pinned to that worker for its
    /// whole life, in the worker's inbox that peers never steal from.
    ///
    /// # Panics
    /// On any other thread, with a message that names the thread, the rule
    /// and the fix (spawn a `Send` future with [`spawn`](Scheduler::spawn),
    /// or call it from the thread that runs the loop); on a pool, from a
    /// thread that is not one of its workers (use
    /// [`spawn_pinned`](Scheduler::spawn_pinned) there).
    ///
    /// ```
    /// use std::rc::Rc;
    /// let main = gdex::Scheduler::main();
    /// let shared = Rc::new(5); // !Send
    /// let task = main.spawn_local(async move { *shared + 1 });
    /// assert_eq!(gdex::block_on(task).unwrap(), 6);
    /// ```
    #[track_caller]
    pub fn spawn_local<F>(&self, future: F) -> Task<F::Output>
    where
        F: Future + 'static,
        F::Output: 'static,
    {
        self.spawn_local_at(future, std::panic::Location::caller())
    }

    /// [`spawn_local`](Scheduler::spawn_local), the task dump naming
    /// `location` as where it was spawned.
    pub(crate) fn spawn_local_at<F>(
        &self,
        future: F,
        location: &'static std::panic::Location<'static>,
    ) -> Task<F::Output>
    where
        F: Future + 'static,
        F::Output: 'static,
    {
        let future = CatchUnwind::located(future, None, location, || self.label());
        self.spawn_local_outcome("Scheduler::spawn_local", future)
    }

    /// [`spawn_local`](Scheduler::spawn_local) for a future already wrapped
    /// so that its output is a task outcome; `what` names the caller in the
    /// misuse panic.
    pub(crate) fn spawn_local_outcome<W, T>(&self, what: &str, future: W) -> Task<T>
    where
        W: Future<Output = Outcome<T>> + 'static,
        T: 'static,
    {
        self.spawn_local_waking(what, future, false).0
    }

    /// [`spawn_local_outcome`](Self::spawn_local_outcome), and, if `waking`,
    /// a waker of the task (for a fiber's handle: F4), unless it was refused.
    #[inline]
    pub(crate) fn spawn_local_waking<W, T>(
        &self,
        what: &str,
        future: W,
        waking: bool,
    ) -> (Task<T>, Option<std::task::Waker>)
    where
        W: Future<Output = Outcome<T>> + 'static,
        T: 'static,
    {
        match &self.kind {
            Kind::Context(shared) => {
                let queue = shared.enter_local(what);
                let shared = shared.clone();
                let future = ThreadBound::here(future);
                // SAFETY: the future is built on this thread, an owner thread
                // (S10); its jobs go to this thread's own queue of `!Send`
                // jobs, which no other thread runs, and ThreadBound, bound to
                // this thread from the start, refuses to poll it on another
                // thread and leaks it rather than drop it on one.
                let (runnable, task) = unsafe {
                    task::builder().spawn_unchecked(
                        move |_| future,
                        move |r| shared.push_local(&queue, Job::task(r)),
                    )
                };
                let waker = waking.then(|| runnable.waker());
                runnable.schedule();
                (Task::new(task), waker)
            }
            Kind::Pool(pool) => {
                let Some(worker) = crate::pool::current_index(pool) else {
                    panic!(
                        "gdex: {what} on a thread pool from thread {:?}, which is \
                         not one of its workers. A !Send future must be built on the thread that \
                         runs it: use spawn_pinned(|| async {{ ... }}) to build it on a worker, \
                         or spawn() for a Send future.",
                        std::thread::current().name().unwrap_or("<unnamed>")
                    )
                };
                self.refuse_latency(what);
                if pool.is_closed() {
                    // A fiber or task still running during the shutdown:
                    // nothing new starts, as for every other spawn.
                    drop(future);
                    return (Task::failed(Error::ShutDown), None);
                }
                let future = ThreadBound::new(future);
                // The future is already on its worker's thread, and the
                // schedule function only queues it on that worker's inbox.
                // SAFETY: no other thread pops that inbox, and ThreadBound
                // refuses any other thread.
                let (runnable, task) = unsafe {
                    task::builder_for(pool.home_of(worker, false))
                        .spawn_unchecked(move |_| future, task::schedule_on_owner)
                };
                let waker = waking.then(|| runnable.waker());
                runnable.schedule();
                (Task::new(task), waker)
            }
        }
    }

    /// Spawns a `!Send` future built on the thread that will run it (F2,
    /// P2): `make` (which is `Send`) runs there and the future it returns
    /// never leaves that thread. On a pool that is one worker, chosen
    /// round-robin, whose inbox no peer steals from; on a context scheduler,
    /// the context's thread. This is how `!Send` glib-rs and GIO objects are
    /// used inside pool work.
    ///
    /// ```
    /// use std::rc::Rc;
    /// let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
    /// let task = pool.scheduler().spawn_pinned(|| async {
    ///     let local = Rc::new(std::thread::current().name().unwrap().to_owned());
    ///     gdex::yield_now().await;
    ///     (*local).clone()
    /// });
    /// assert!(gdex::block_on(task).unwrap().starts_with("gdex-worker-"));
    /// ```
    #[track_caller]
    pub fn spawn_pinned<M, F>(&self, make: M) -> Task<F::Output>
    where
        M: FnOnce() -> F + Send + 'static,
        F: Future + 'static,
        F::Output: Send + 'static,
    {
        // SAFETY: a Deferred holds only `make` (Send) until its first poll,
        // and builds the !Send future on the thread that polls it.
        unsafe { self.spawn_pinned_unchecked(Deferred::Make { make: Some(make) }) }
    }

    /// The default stack size for fibers spawned here.
    pub(crate) fn fiber_stack_size(&self) -> usize {
        match &self.kind {
            Kind::Pool(pool) => pool.fiber_stack_size(),
            Kind::Context(_) => crate::fiber::DEFAULT_STACK_SIZE,
        }
    }

    /// Spawns a future that must stay on one thread once it has been polled.
    ///
    /// # Safety
    /// Moving `future` to another thread before its first poll, and dropping
    /// it there if it is never polled, must be sound (what it holds until
    /// then must be `Send`).
    #[track_caller]
    pub(crate) unsafe fn spawn_pinned_unchecked<F>(&self, future: F) -> Task<F::Output>
    where
        F: Future + 'static,
        F::Output: Send + 'static,
    {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.spawn_pinned_waking(future, false).0 }
    }

    /// [`spawn_pinned_unchecked`](Self::spawn_pinned_unchecked), and, if
    /// `waking`, a waker of the task (for a fiber's handle: F4), unless it
    /// was refused.
    ///
    /// # Safety
    ///
    /// As for `spawn_pinned_unchecked`.
    #[track_caller]
    #[inline]
    pub(crate) unsafe fn spawn_pinned_waking<F>(
        &self,
        future: F,
        waking: bool,
    ) -> (Task<F::Output>, Option<std::task::Waker>)
    where
        F: Future + 'static,
        F::Output: Send + 'static,
    {
        // `waking` is asked only for a fiber's task (its handle's waker).
        let record_kind = if waking {
            crate::diagnostics::record::Kind::Fiber
        } else {
            crate::diagnostics::record::Kind::Task
        };
        // The record tells the kind apart: its scheduler is the scheduler
        // (the views say "spawned at … on Scheduler::Pool { workers: 2 }").
        let future = CatchUnwind::of_kind(ThreadBound::new(future), record_kind, || {
            format!("{self:?}")
        });
        let (runnable, task) = match &self.kind {
            Kind::Context(shared) => {
                let shared = shared.clone();
                // SAFETY: a context scheduler runs its queue on the thread
                // that iterates the context; ThreadBound refuses to poll or
                // drop the future on any thread but the first that polled it.
                unsafe {
                    task::builder()
                        .spawn_unchecked(move |_| future, move |r| shared.push(Job::task(r)))
                }
            }
            Kind::Pool(pool) => {
                self.refuse_latency(if waking {
                    "a fiber"
                } else {
                    "Scheduler::spawn_pinned"
                });
                if pool.is_closed() {
                    return (Task::failed(Error::ShutDown), None);
                }
                // SAFETY: the caller's promise, passed on.
                unsafe { Self::make_pinned(pool, pool.pick_worker(), future) }
            }
        };
        let waker = waking.then(|| runnable.waker());
        runnable.schedule();
        if let Kind::Pool(pool) = &self.kind {
            pool.settle_spawn();
        }
        (Task::new(task), waker)
    }

    /// The block of a pinned task (a fiber's, a `!Send` task's) that
    /// belongs to worker `worker` of `pool`, made but not queued: its
    /// schedule function queues it on that worker alone.
    ///
    /// # Safety
    ///
    /// As for `spawn_pinned_unchecked`, for the future inside `future`.
    #[inline]
    pub(super) unsafe fn make_pinned<F>(
        pool: &Arc<PoolShared>,
        worker: usize,
        future: CatchUnwind<F>,
    ) -> (
        task::Runnable,
        async_task::Task<Outcome<F::Output>, task::TaskMeta>,
    )
    where
        F: Future + 'static,
        F::Output: Send + 'static,
    {
        // SAFETY: the schedule function only queues the task on one
        // worker's inbox, popped by that worker alone (and drained by it at
        // exit, or leaked); ThreadBound checks it too.
        unsafe {
            task::builder_for(pool.home_of(worker, false))
                .spawn_unchecked(move |_| future, task::schedule_on_owner)
        }
    }

    /// Pushes a work item: the cheapest way to run a closure on this
    /// scheduler, with no handle and no future (S3). A panic in `f` goes to
    /// the panic handler (by default `g_critical`) and the scheduler goes
    /// on.
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
        match &self.kind {
            // (A work item does not keep its scheduler alive: it would keep
            // it, and its context, for good on a context nobody iterates
            // again. See `ContextShared`'s drop.)
            Kind::Context(shared) => shared.push(Job::work(f)),
            Kind::Pool(pool) => {
                let job = Job::work(f);
                if pool.is_closed() {
                    glib::g_critical!(
                        "gdex",
                        "Scheduler::push on a thread pool that has been shut down: the work item \
                         was dropped without running"
                    );
                    return;
                }
                if self.latency {
                    pool.push_urgent(job)
                } else {
                    pool.schedule(job)
                }
            }
        }
    }
}

/// Lets crates that take a `futures` spawner run their tasks on gdex: the
/// task is spawned and detached. A pool that has been shut down answers
/// `SpawnError::shutdown()`.
///
/// ```
/// use futures::task::SpawnExt;
/// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
/// let spawner = pool.scheduler();
/// let handle = spawner.spawn_with_handle(async { 2 + 2 }).unwrap();
/// assert_eq!(gdex::block_on(handle), 4);
/// ```
impl futures::task::Spawn for Scheduler {
    fn spawn_obj(
        &self,
        future: futures::task::FutureObj<'static, ()>,
    ) -> Result<(), futures::task::SpawnError> {
        self.status()?;
        self.spawn(future).detach();
        Ok(())
    }

    /// `shutdown()` for a pool that has been shut down.
    fn status(&self) -> Result<(), futures::task::SpawnError> {
        match &self.kind {
            Kind::Pool(pool) if pool.is_closed() => Err(futures::task::SpawnError::shutdown()),
            _ => Ok(()),
        }
    }
}

/// `!Send` futures from a `futures` local spawner, with the rules of
/// [`Scheduler::spawn_local`] (the owner thread of a context, or inside a
/// pool task; elsewhere it panics and says why).
///
/// ```
/// use futures::task::LocalSpawnExt;
/// let main = gdex::Scheduler::main();
/// let handle = main.spawn_local_with_handle(async { std::rc::Rc::new(1) }).unwrap();
/// assert_eq!(*gdex::block_on(handle), 1);
/// ```
impl futures::task::LocalSpawn for Scheduler {
    fn spawn_local_obj(
        &self,
        future: futures::task::LocalFutureObj<'static, ()>,
    ) -> Result<(), futures::task::SpawnError> {
        futures::task::Spawn::status(self)?;
        self.spawn_local(future).detach();
        Ok(())
    }
}

impl PartialEq for Scheduler {
    fn eq(&self, other: &Self) -> bool {
        match (&self.kind, &other.kind) {
            (Kind::Context(a), Kind::Context(b)) => Arc::ptr_eq(a, b),
            (Kind::Pool(a), Kind::Pool(b)) => Arc::ptr_eq(a, b) && self.latency == other.latency,
            _ => false,
        }
    }
}

impl Eq for Scheduler {}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            // As `ContextShared` names itself (P12: with its priority unless
            // it is the default).
            Kind::Context(c) => std::fmt::Debug::fmt(&**c, f),
            Kind::Pool(p) if self.latency => f
                .debug_struct("Scheduler::Pool")
                .field("workers", &p.workers())
                .field("class", &format_args!("Latency"))
                .finish(),
            Kind::Pool(p) => f
                .debug_struct("Scheduler::Pool")
                .field("workers", &p.workers())
                .finish(),
        }
    }
}

pin_project_lite::pin_project! {
    /// A future built on first poll by a `Send` closure: how a `!Send`
    /// future is made on the thread that will run it.
    #[project = DeferredProj]
    enum Deferred<M, F> {
        Make { make: Option<M> },
        Running { #[pin] future: F },
    }
}

impl<M, F> Future for Deferred<M, F>
where
    M: FnOnce() -> F,
    F: Future,
{
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let mut this = self;
        if let DeferredProj::Make { make } = this.as_mut().project() {
            let make = make
                .take()
                .expect("a gdex pinned task was polled after a panic");
            this.set(Deferred::Running { future: make() });
        }
        match this.project() {
            DeferredProj::Running { future } => future.poll(cx),
            DeferredProj::Make { .. } => unreachable!(),
        }
    }
}
