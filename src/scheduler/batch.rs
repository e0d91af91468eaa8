//! Spawning many tasks at once: [`Scheduler::spawn_many`] (smol's
//! `Executor::spawn_many`).

use std::future::Future;

use super::{Kind, Scheduler};
use crate::pool::PoolShared;
use crate::task::{self, CatchUnwind, Runnable, Task};

/// The first jobs of the tasks a batch has made so far: queued when it
/// ends, also if the caller's iterator or `Extend` panics half-way (the
/// tasks whose handles the caller has are then run, not lost).
struct Made<'a> {
    pool: &'a PoolShared,
    runnables: Vec<Runnable>,
}

impl Made<'_> {
    /// Queues the tasks made so far (after a shutdown: drops them, each
    /// handle then `Cancelled`); whether there were any.
    fn flush(&mut self) -> bool {
        let runnables = std::mem::take(&mut self.runnables);
        let any = !runnables.is_empty();
        if any {
            self.pool.schedule_spawned(runnables);
        }
        any
    }
}

impl Drop for Made<'_> {
    fn drop(&mut self) {
        let _ = self.flush();
        self.pool.settle_spawn();
    }
}

impl Scheduler {
    /// Spawns every future of `futures` (S4), putting each task's handle
    /// into `handles` in order (smol's `Executor::spawn_many`): on a pool,
    /// the tasks are queued together once the iterator is done, from
    /// outside the pool with one wake-up for them all rather than one
    /// each; on a worker of the pool, on its deque as single spawns are.
    /// So neither the iterator nor `handles`' `Extend` may wait for a task
    /// of the same batch: none runs before the batch is queued. Each task
    /// is as [`spawn`](Self::spawn) makes it. If the pool shuts down while
    /// the iterator runs, the tasks made before are queued when the
    /// iterator gives its next item, as single spawns made before the
    /// shutdown are (so the shutdown drops them, their handles
    /// `Cancelled`), and each one made after resolves to
    /// [`Error::ShutDown`](crate::Error::ShutDown), as a single spawn does.
    /// Elsewhere (a context scheduler, a pool's latency class, a
    /// thread-per-core pool) it spawns them one by one.
    ///
    /// If the iterator or `handles`' `Extend` panics, the tasks made
    /// before are queued all the same (their handles are the caller's),
    /// and the panic goes on.
    ///
    /// ```
    /// let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
    /// let mut tasks = Vec::new();
    /// pool.scheduler()
    ///     .spawn_many((0..100u64).map(|i| async move { i * i }), &mut tasks);
    /// let sum: u64 = tasks.into_iter().map(|t| gdex::block_on(t).unwrap()).sum();
    /// assert_eq!(sum, 328_350);
    /// ```
    #[track_caller]
    pub fn spawn_many<I, E>(&self, futures: I, handles: &mut E)
    where
        I: IntoIterator,
        I::Item: Future + Send + 'static,
        <I::Item as Future>::Output: Send + 'static,
        E: Extend<Task<<I::Item as Future>::Output>>,
    {
        let location = std::panic::Location::caller();
        let pool = match &self.kind {
            Kind::Pool(pool) if !self.latency && !pool.thread_per_core() && !pool.is_closed() => {
                pool
            }
            _ => {
                for future in futures {
                    handles.extend(Some(self.spawn_at(future, location)));
                }
                return;
            }
        };
        let futures = futures.into_iter();
        let mut made = Made {
            pool,
            runnables: Vec::with_capacity(futures.size_hint().0),
        };
        for future in futures {
            if pool.is_closed() {
                // S9: the tasks made before are resolved now (the pool's
                // shutdown could not reach them), not when the iterator
                // ends; this one is refused as a single spawn is, the
                // future dropped unpolled (a panic in its drop contained,
                // S6).
                if made.flush() {
                    pool.settle_spawn();
                }
                handles.extend(Some(self.spawn_at(future, location)));
                continue;
            }
            let future = CatchUnwind::located(future, None, location, || self.label());
            // A capture-less schedule function: see TaskMeta::pool.
            let (runnable, task) =
                task::owned_builder(pool.clone()).spawn(move |_| future, task::schedule_on_owner);
            made.runnables.push(runnable);
            handles.extend(Some(Task::new(task)));
        }
        // Queued, and a shutdown raced, settled: `Made`'s drop.
        drop(made);
    }
}
