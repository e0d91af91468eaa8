//! [`TaskGroup`]: a scope of tasks that finish, or are cancelled, together.

use std::future::Future;
use std::sync::{Mutex, MutexGuard};

use crate::{Error, Scheduler, Task};

/// A group of tasks (libdex's `DexTaskGroup`): spawn into it, then
/// [`close`](TaskGroup::close) it to get every result, or
/// [`cancel`](TaskGroup::cancel) it. Dropping the group cancels every
/// member still running (S5), so no member outlives its scope unless it was
/// spawned elsewhere.
///
/// Members run on the group's scheduler: the default pool's unless made
/// with [`TaskGroup::on`].
///
/// ```
/// let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
/// let group = gdex::TaskGroup::on(pool.scheduler());
/// for i in 0..4 {
///     group.spawn(async move { i * i }).unwrap();
/// }
/// let results: Vec<u32> = gdex::block_on(group.close()).into_iter().map(Result::unwrap).collect();
/// assert_eq!(results, [0, 1, 4, 9]);
/// ```
pub struct TaskGroup<T> {
    scheduler: Scheduler,
    state: Mutex<State<T>>,
}

struct State<T> {
    tasks: Vec<Task<T>>,
    closed: bool,
}

impl<T: Send + 'static> Default for TaskGroup<T> {
    fn default() -> Self {
        TaskGroup::new()
    }
}

impl<T> TaskGroup<T> {
    /// A group whose members run on the default [`ThreadPool`](crate::ThreadPool).
    pub fn new() -> Self {
        TaskGroup::on(crate::ThreadPool::default().scheduler())
    }

    /// A group whose members run on `scheduler`.
    pub fn on(scheduler: Scheduler) -> Self {
        TaskGroup {
            scheduler,
            state: Mutex::new(State {
                tasks: Vec::new(),
                closed: false,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add(&self, spawn: impl FnOnce(&Scheduler) -> Task<T>) -> Result<(), Error> {
        let mut state = self.lock();
        if state.closed {
            return Err(Error::Closed);
        }
        let task = spawn(&self.scheduler);
        state.tasks.push(task);
        Ok(())
    }

    /// Spawns a member. Fails with [`Error::Closed`] (and drops `future`
    /// unrun) once the group is closed or cancelled.
    pub fn spawn<F>(&self, future: F) -> Result<(), Error>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        self.add(|s| s.spawn(future))
    }

    /// Spawns a `!Send` member, with the rules of
    /// [`Scheduler::spawn_local`].
    pub fn spawn_local<F>(&self, future: F) -> Result<(), Error>
    where
        F: Future<Output = T> + 'static,
        T: 'static,
    {
        self.add(|s| s.spawn_local(future))
    }

    /// Members spawned and not yet collected by `close` or `cancel`.
    pub fn len(&self) -> usize {
        self.lock().tasks.len()
    }

    /// True if there are no members.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Closes the group to new members now, and returns a future of every
    /// member's result, in spawn order. Dropping that future cancels the
    /// members.
    pub fn close(&self) -> impl Future<Output = Vec<Result<T, Error>>> + 'static
    where
        T: 'static,
    {
        let tasks = {
            let mut state = self.lock();
            state.closed = true;
            std::mem::take(&mut state.tasks)
        };
        futures::future::join_all(tasks)
    }

    /// Closes the group and cancels every member; resolves when each has
    /// stopped (its future dropped, X1).
    pub async fn cancel(&self) {
        let tasks = {
            let mut state = self.lock();
            state.closed = true;
            std::mem::take(&mut state.tasks)
        };
        futures::future::join_all(tasks.into_iter().map(Task::cancel)).await;
    }
}

impl<T> std::fmt::Debug for TaskGroup<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("TaskGroup")
            .field("members", &state.tasks.len())
            .field("closed", &state.closed)
            .finish()
    }
}
