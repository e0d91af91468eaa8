//! Spawning fibers (F1, F2): where the fiber core (`crate::fiber`) meets
//! the schedulers.

use super::owner_thread::ThreadBound;
use super::Kind;
use crate::diagnostics::record;
use crate::fiber::{Builder, Fiber};
use crate::task::{CatchUnwind, Task};
use crate::Scheduler;

impl Scheduler {
    /// Spawns `f` as a fiber (F1) with the scheduler's default stack size;
    /// see [`fiber::Builder`](crate::fiber::Builder) for options.
    ///
    /// ```
    /// let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
    /// let fiber = pool.scheduler().spawn_fiber(|| {
    ///     let t = std::time::Duration::from_millis(1);
    ///     gdex::fiber::wait(glib::timeout_future(t)).unwrap();
    ///     "waited"
    /// });
    /// assert_eq!(gdex::block_on(fiber).unwrap(), "waited");
    /// ```
    #[track_caller]
    pub fn spawn_fiber<F, T>(&self, f: F) -> crate::fiber::Fiber<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        crate::fiber::Builder::new().spawn(self, f)
    }

    /// Spawns a fiber (F1) for each closure of `fs`, with the scheduler's
    /// default stack size, putting each fiber's handle into `handles` in
    /// order: the fiber counterpart of [`spawn_many`](Self::spawn_many).
    /// Each fiber is as [`spawn_fiber`](Self::spawn_fiber) makes it, placed
    /// on the pool's workers round-robin as single spawns are (F2). On a
    /// pool the fibers are made first and queued together once the
    /// iterator is done: each other worker's in its inbox with one fence
    /// and at most one directed wake-up, where single spawns pay both for
    /// each fiber (called on a worker, that worker's own go on its local
    /// queue). So neither the iterator nor `handles`' `Extend` may wait for
    /// a fiber of the same batch: none starts before the batch is queued.
    /// On a context scheduler it spawns them one by one.
    ///
    /// If the pool shuts down while the iterator runs, the fibers made
    /// before are queued when the iterator gives its next item, as single
    /// spawns made before the shutdown are (so the shutdown drops them,
    /// their handles `Cancelled`), and each one made after resolves to
    /// [`Error::ShutDown`](crate::Error::ShutDown), as a single spawn
    /// does.
    ///
    /// If the iterator or `handles`' `Extend` panics, the fibers made
    /// before are queued all the same (their handles are the caller's; the
    /// one whose handle the panicking `Extend` dropped is cancelled, F4),
    /// and the panic goes on.
    ///
    /// # Panics
    /// On a pool's latency class, as [`spawn_fiber`](Self::spawn_fiber),
    /// before it takes anything from `fs`.
    ///
    /// ```
    /// let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
    /// let mut fibers = Vec::new();
    /// pool.scheduler().spawn_fibers((0..100u64).map(|i| move || i * i), &mut fibers);
    /// let sum: u64 = fibers.into_iter().map(|f| gdex::block_on(f).unwrap()).sum();
    /// assert_eq!(sum, 328_350);
    /// ```
    #[track_caller]
    pub fn spawn_fibers<I, F, T, E>(&self, fs: I, handles: &mut E)
    where
        I: IntoIterator<Item = F>,
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
        E: Extend<crate::fiber::Fiber<T>>,
    {
        crate::fiber::Builder::new().spawn_many(self, fs, handles)
    }

    /// Spawns `f` as a fiber that runs on the calling thread, which must be
    /// the one this scheduler's `!Send` work runs on (as for
    /// [`spawn_local`](Scheduler::spawn_local)): so `f` may capture `!Send`
    /// values, a widget or an `Rc`. On the main scheduler, call it from the
    /// main thread (the one that owns the default main context); on a pool,
    /// from inside a pool task (the fiber stays on that worker).
    ///
    /// Like every `!Send` job, a local fiber still queued when its thread
    /// exits is dropped there, during the thread's teardown: its stack is
    /// unwound then, and a destructor on it that uses a thread-local already
    /// gone would abort. Let a thread's local fibers finish before it ends.
    ///
    /// # Panics
    /// As [`spawn_local`](Scheduler::spawn_local), on any other thread.
    ///
    /// ```
    /// use std::rc::Rc;
    /// let label = Rc::new(std::cell::RefCell::new(String::new())); // !Send, like a widget
    /// let l = label.clone();
    /// let fiber = gdex::Scheduler::main().spawn_fiber_local(move || {
    ///     let n = gdex::fiber::wait(gdex::spawn(async { 6 * 7 }))?;
    ///     *l.borrow_mut() = format!("{n}");
    ///     Ok::<_, gdex::Error>(())
    /// });
    /// gdex::block_on(fiber)??;
    /// assert_eq!(*label.borrow(), "42");
    /// # Ok::<(), gdex::Error>(())
    /// ```
    #[track_caller]
    pub fn spawn_fiber_local<F, T>(&self, f: F) -> crate::fiber::Fiber<T>
    where
        F: FnOnce() -> T + 'static,
        T: 'static,
    {
        crate::fiber::Builder::new().spawn_local(self, f)
    }
}

impl Builder {
    /// Spawns `f` as a fiber on `scheduler`. On a pool it is placed on one
    /// worker (round-robin) and never leaves it (F2).
    ///
    /// Its stack is mapped on that thread before `f` starts (or reused
    /// from the thread's pool, F1). If the kernel refuses the mapping (the
    /// address space or the map count is exhausted), the fiber resolves to
    /// [`Error::Failed`](crate::Error::Failed) naming the stack size and the OS's reason, and `f`
    /// never runs; the scheduler goes on.
    #[track_caller]
    pub fn spawn<F, T>(self, scheduler: &Scheduler, f: F) -> Fiber<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        // On a pool, the fiber's first poll puts it on its worker's fiber
        // scheduler (`fiber::sched`).
        let future = self.prepare(scheduler.fiber_stack_size(), f, scheduler.is_pool());
        // SAFETY: `prepare`'s future may move to the thread that first polls
        // it (it holds only `Send` data until then), and
        // `spawn_pinned_waking` keeps it on that thread from then on.
        let (task, waker) = unsafe { scheduler.spawn_pinned_waking(future, true) };
        Fiber::new(task, waker)
    }

    /// Spawns a fiber for each closure of `fs` on `scheduler`, with these
    /// options, putting each handle into `handles` in order; see
    /// [`Scheduler::spawn_fibers`].
    #[track_caller]
    pub fn spawn_many<I, F, T, E>(self, scheduler: &Scheduler, fs: I, handles: &mut E)
    where
        I: IntoIterator<Item = F>,
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
        E: Extend<Fiber<T>>,
    {
        let pool = match &scheduler.kind {
            Kind::Pool(pool) => {
                scheduler.refuse_latency("a fiber");
                pool
            }
            Kind::Context(_) => {
                // A plain loop, not a closure: each spawn is located at our
                // caller (`#[track_caller]`).
                for f in fs {
                    handles.extend(Some(self.clone().spawn(scheduler, f)));
                }
                return;
            }
        };
        let stack = scheduler.fiber_stack_size();
        let fs = fs.into_iter();
        let mut batch = crate::pool::PinnedBatch::new(pool, fs.size_hint().0);
        for f in fs {
            if pool.is_closed() {
                // S9: the fibers made before are resolved now (the pool's
                // shutdown could not reach them), not when the iterator
                // ends; this one is refused as a single spawn is, `f`
                // dropped unrun (a panic in its drop contained, S6).
                if batch.flush() {
                    pool.settle_spawn();
                }
                handles.extend(Some(self.clone().spawn(scheduler, f)));
                continue;
            }
            let future = CatchUnwind::of_kind(
                ThreadBound::new(self.clone().prepare(stack, f, true)),
                record::Kind::Fiber,
                || format!("{scheduler:?}"),
            );
            // SAFETY: as in `spawn`: the fiber's future holds only `Send`
            // data until its first poll, and ThreadBound keeps it on the
            // thread of that poll.
            let (runnable, task) =
                unsafe { Scheduler::make_pinned(pool, batch.next_worker(), future) };
            let waker = runnable.waker();
            batch.push(runnable);
            handles.extend(Some(Fiber::new(Task::new(task), Some(waker))));
        }
        // Queued: `batch`'s drop (a panic above too).
    }

    /// Spawns `f` as a fiber on the calling thread, which must be the one
    /// `scheduler`'s `!Send` work runs on; see
    /// [`Scheduler::spawn_fiber_local`].
    #[track_caller]
    pub fn spawn_local<F, T>(self, scheduler: &Scheduler, f: F) -> Fiber<T>
    where
        F: FnOnce() -> T + 'static,
        T: 'static,
    {
        let future = self.prepare(scheduler.fiber_stack_size(), f, false);
        let (task, waker) = scheduler.spawn_local_waking(
            "Scheduler::spawn_fiber_local",
            crate::task::CatchUnwind::of_kind(
                future,
                crate::diagnostics::record::Kind::Fiber,
                || format!("{scheduler:?}"),
            ),
            true,
        );
        Fiber::new(task, waker)
    }
}
