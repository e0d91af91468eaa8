//! The group's public face: [`TaskGroup`], built with a
//! [`TaskGroupBuilder`] and spawned into from elsewhere through a
//! [`TaskGroupRef`]; closing it, and cancelling it.

use std::any::TypeId;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};

use slab::Slab;

use super::member::{add, drop_contained, CURRENT};
use super::output::{deliver, GroupOutput};
use super::{lock, First, Joiner, Shared, State};
use crate::diagnostics::panic::PanicSource;
use crate::sync::wait_queue::Parked;
use crate::{Error, Scheduler};

/// A group of tasks (libdex's `DexTaskGroup`): spawn into it, then
/// [`close`](TaskGroup::close) it and await the outcome, or
/// [`cancel`](TaskGroup::cancel) it. Dropping the group before closing it
/// cancels every member still running (S5), so no member outlives its
/// scope.
///
/// - **Memory follows the live members.** A member that finishes leaves
///   the group at once; its output is dropped where it finished, unless it
///   is the group's first failure (kept for `close`). To get every result
///   back, build the group with
///   [`keep_results`](TaskGroupBuilder::keep_results) and close it with
///   [`close_with_results`](TaskGroup::close_with_results): then the group
///   holds one result per member until that close.
/// - **Cancel on error** ([`TaskGroupBuilder::cancel_on_error`], libdex's
///   `DEX_TASK_GROUP_FLAGS_CANCEL_ON_ERROR`): the first member to fail (see
///   [`GroupOutput`]) cancels all the others and closes the group.
/// - **The current group** ([`TaskGroup::current`], libdex's thread-default
///   group): while a member runs, it can spawn more members into its own
///   group, also after the group was closed: a close waits for them too.
///
/// Members run on the group's scheduler: the default pool's unless set with
/// [`TaskGroup::on`] or [`TaskGroupBuilder::scheduler`].
///
/// ```
/// let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
/// let group = gdex::TaskGroup::builder()
///     .scheduler(pool.scheduler())
///     .keep_results(true)
///     .build();
/// for i in 0..4u32 {
///     group.spawn(async move { Ok::<_, gdex::Error>(i * i) }).unwrap();
/// }
/// let squares: Vec<u32> = gdex::block_on(group.close_with_results())
///     .into_iter()
///     .collect::<Result<_, _>>()
///     .unwrap();
/// assert_eq!(squares, [0, 1, 4, 9]);
/// ```
pub struct TaskGroup<T> {
    pub(super) shared: Arc<Shared<T>>,
    /// The group's own registration as a `Stream` (`join.rs`).
    pub(super) joiner: Joiner<T>,
}

/// A handle on a [`TaskGroup`] that does not own it, from
/// [`TaskGroup::current`]: it spawns members into the group, and dropping
/// it changes nothing. Its spawns are refused once the group is cancelled
/// or dropped, or once it was closed and every member has finished.
pub struct TaskGroupRef<T> {
    shared: Weak<Shared<T>>,
}

/// Builds a [`TaskGroup`] with libdex's options: from
/// [`TaskGroup::builder`].
///
/// ```
/// let group = gdex::TaskGroup::<Result<(), glib::Error>>::builder()
///     .cancel_on_error(true)
///     .build();
/// # drop(group);
/// ```
#[must_use = "a builder does nothing until build() is called"]
pub struct TaskGroupBuilder<T> {
    scheduler: Option<Scheduler>,
    cancel_on_error: bool,
    keep_results: bool,
    _members: std::marker::PhantomData<fn() -> T>,
}

impl<T> TaskGroupBuilder<T> {
    /// The scheduler the members run on. By default the default
    /// [`ThreadPool`](crate::ThreadPool)'s.
    pub fn scheduler(mut self, scheduler: Scheduler) -> Self {
        self.scheduler = Some(scheduler);
        self
    }

    /// libdex's `DEX_TASK_GROUP_FLAGS_CANCEL_ON_ERROR`: the first member to
    /// fail (it panics, its scheduler drops it, or its output is a failure:
    /// see [`GroupOutput`]) cancels every other member and closes the group
    /// to new ones; [`close`](TaskGroup::close) then gives that failure.
    /// Off by default: a failure is recorded and the others run on.
    ///
    /// ```
    /// let group = gdex::TaskGroup::<Result<(), gdex::Error>>::builder()
    ///     .cancel_on_error(true)
    ///     .build();
    /// group.spawn(std::future::pending()).unwrap();
    /// group
    ///     .spawn(async { Err(gdex::Error::TimedOut) })
    ///     .unwrap();
    /// // The failure cancelled the member that would never finish.
    /// assert!(matches!(
    ///     gdex::block_on(group.close()),
    ///     Err(gdex::Error::TimedOut)
    /// ));
    /// ```
    pub fn cancel_on_error(mut self, cancel: bool) -> Self {
        self.cancel_on_error = cancel;
        self
    }

    /// Keeps every member's result until
    /// [`close_with_results`](TaskGroup::close_with_results) collects them,
    /// so that the group's memory grows with every member it had, not only
    /// the running ones. Off by default: a finished member's output is
    /// dropped where it finished (except the group's first failure, kept for
    /// [`close`](TaskGroup::close)).
    pub fn keep_results(mut self, keep: bool) -> Self {
        self.keep_results = keep;
        self
    }

    /// The group.
    pub fn build(self) -> TaskGroup<T> {
        let scheduler = self
            .scheduler
            .unwrap_or_else(|| crate::ThreadPool::default().scheduler());
        TaskGroup {
            joiner: Joiner::default(),
            shared: Arc::new(Shared {
                scheduler,
                cancel_on_error: self.cancel_on_error,
                keep_results: self.keep_results,
                state: Mutex::new(State {
                    slots: Slab::new(),
                    live: 0,
                    closed: false,
                    cancelled: false,
                    close_called: false,
                    first: First::None,
                    later_failures: Default::default(),
                    next_seq: 0,
                    results: Default::default(),
                    completed: Default::default(),
                    waiters: Slab::new(),
                    joiners: Slab::new(),
                }),
            }),
        }
    }
}

impl<T> std::fmt::Debug for TaskGroupBuilder<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskGroupBuilder")
            .field("cancel_on_error", &self.cancel_on_error)
            .field("keep_results", &self.keep_results)
            .finish_non_exhaustive()
    }
}

impl<T: GroupOutput> Default for TaskGroup<T> {
    fn default() -> Self {
        TaskGroup::new()
    }
}

impl<T: GroupOutput> TaskGroup<T> {
    /// A group whose members run on the default [`ThreadPool`](crate::ThreadPool),
    /// without options.
    pub fn new() -> Self {
        TaskGroup::builder().build()
    }

    /// A group whose members run on `scheduler`, without options.
    pub fn on(scheduler: Scheduler) -> Self {
        TaskGroup::builder().scheduler(scheduler).build()
    }

    /// A builder for a group with options: its scheduler,
    /// [`cancel_on_error`](TaskGroupBuilder::cancel_on_error),
    /// [`keep_results`](TaskGroupBuilder::keep_results).
    pub fn builder() -> TaskGroupBuilder<T> {
        TaskGroupBuilder {
            scheduler: None,
            cancel_on_error: false,
            keep_results: false,
            _members: std::marker::PhantomData,
        }
    }

    /// The group of the member running on this thread (libdex's
    /// thread-default group), to spawn more members into: `None` outside a
    /// member of a group. A member's own spawns, also those of the members
    /// it spawns, are members of the same group; the group's
    /// [`close`](TaskGroup::close) waits for them, and its cancellation
    /// reaches them.
    ///
    /// It is set while a member's future is being polled (for a member
    /// polled inside [`block_on`](crate::block_on) on this thread, too).
    ///
    /// # Panics
    /// If the running member's group has another output type than `T`,
    /// with both types named.
    ///
    /// ```
    /// let group = gdex::TaskGroup::<()>::new();
    /// let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    /// let d = done.clone();
    /// group
    ///     .spawn(async move {
    ///         for _ in 0..3 {
    ///             let d = d.clone();
    ///             gdex::TaskGroup::current()
    ///                 .expect("inside a member")
    ///                 .spawn(async move {
    ///                     d.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    ///                 })
    ///                 .unwrap();
    ///         }
    ///     })
    ///     .unwrap();
    /// gdex::block_on(group.close()).unwrap();
    /// assert_eq!(done.load(std::sync::atomic::Ordering::SeqCst), 3);
    /// assert!(gdex::TaskGroup::<()>::current().is_none());
    /// ```
    pub fn current() -> Option<TaskGroupRef<T>>
    where
        T: 'static,
    {
        let (type_id, type_name, group, task) = CURRENT.get()?;
        if task != crate::task::running_task() {
            // A task polled inside a member's poll (a nested loop): no member.
            return None;
        }
        assert!(
            type_id == TypeId::of::<T>(),
            "gdex::TaskGroup::<{}>::current(): the running member belongs to a \
             TaskGroup<{type_name}>; ask for TaskGroup::<{type_name}>::current()",
            std::any::type_name::<T>(),
        );
        // SAFETY: CURRENT holds a pointer to the `Weak<Shared<T>>` of the
        // member `Member::poll` is polling on this thread (the type checked
        // just above); that member is pinned in its task and outlives the
        // poll, and `poll` restores CURRENT before it returns.
        let weak = unsafe { &*group.cast::<Weak<Shared<T>>>() };
        Some(TaskGroupRef {
            shared: weak.clone(),
        })
    }

    /// A non-owning handle on this group, to spawn members from elsewhere
    /// (as [`current`](TaskGroup::current) gives to members).
    pub fn handle(&self) -> TaskGroupRef<T> {
        TaskGroupRef {
            shared: Arc::downgrade(&self.shared),
        }
    }

    /// Spawns a member. Fails (and drops `future` unrun) with
    /// [`Error::Closed`] once the group is closed or cancelled, and with
    /// the scheduler's reason if its scheduler refuses the task:
    /// [`Error::ShutDown`] for a pool that has shut down.
    #[track_caller]
    pub fn spawn<F>(&self, future: F) -> Result<(), Error>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let at = std::panic::Location::caller();
        add(&self.shared, false, future, |s, member| {
            s.spawn_at(member, at)
        })
    }

    /// Spawns a `!Send` member, with the rules of
    /// [`Scheduler::spawn_local`].
    #[track_caller]
    pub fn spawn_local<F>(&self, future: F) -> Result<(), Error>
    where
        F: Future<Output = T> + 'static,
        T: 'static,
    {
        let at = std::panic::Location::caller();
        add(&self.shared, false, future, |s, member| {
            s.spawn_local_at(member, at)
        })
    }

    /// Members still running: spawned and not yet finished, cancelled to
    /// the end, or dropped. A finished member leaves the group at once, so
    /// this is also what the group holds on to (plus, with
    /// [`keep_results`](TaskGroupBuilder::keep_results), one result per
    /// member).
    pub fn len(&self) -> usize {
        lock(&self.shared).live
    }

    /// True if no member is running.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the group holds right now: one slot per member whose end it
    /// has not yet seen, plus one entry per member in a group that keeps
    /// results. For tests of the group's memory.
    #[doc(hidden)]
    pub fn held_entries(&self) -> usize {
        let state = lock(&self.shared);
        state.slots.len() + state.results.len()
    }

    /// Marks the group closed, and makes this call's future the owner of
    /// the members (the first close only). Returns `false` for a later one.
    fn start_close(&self) -> bool {
        let mut state = lock(&self.shared);
        state.closed = true;
        !std::mem::replace(&mut state.close_called, true)
    }

    /// Closes the group to new members from outside (members can still
    /// spawn into it: [`current`](TaskGroup::current)), and returns a future
    /// that resolves once every member has finished: `Ok(())` if none
    /// failed, otherwise the first failure (in the order they finished; see
    /// [`GroupOutput`]) that [`join_next`](TaskGroup::join_next) has not
    /// given, or [`Error::Cancelled`] if the group was cancelled with no
    /// failure before. Dropping that future before it resolves cancels the
    /// members.
    ///
    /// Only the first `close` (or `close_with_results`) gives the outcome;
    /// a later one resolves at once to [`Error::Closed`].
    pub fn close(&self) -> impl Future<Output = Result<(), T::Error>> + 'static
    where
        T: 'static,
    {
        let first = self.start_close();
        let shared = self.shared.clone();
        let mut closing = Closing {
            wait: Wait { shared, key: None },
            owns: first,
        };
        // A leaf future (P11): a close that is ready spends the budget.
        std::future::poll_fn(move |cx| {
            crate::task::coop::poll_leaf(cx, |cx| {
                if !closing.owns {
                    return Poll::Ready(Err(Error::Closed.into()));
                }
                std::task::ready!(closing.wait.poll_done(cx));
                closing.owns = false;
                let mut state = lock(&closing.wait.shared);
                let failure = match std::mem::replace(&mut state.first, First::Taken) {
                    First::Here(outcome) => Some(outcome),
                    First::At(seq) => state.results.remove(&seq),
                    First::None if state.cancelled => Some(Err(Error::Cancelled)),
                    First::None | First::Given | First::Taken => None,
                };
                let results = std::mem::take(&mut state.results);
                state.completed.clear();
                state.later_failures.clear();
                drop(state);
                // A group that kept results, closed without them: its other
                // panics have nobody to go to (X5).
                for result in results.into_values() {
                    match result {
                        Err(Error::Panicked(message)) => {
                            crate::diagnostics::panic::report(PanicSource::Task, message);
                        }
                        result => drop_contained(result, PanicSource::Output),
                    }
                }
                Poll::Ready(match failure.map(deliver::<T>) {
                    None => Ok(()),
                    Some(Err(error)) => Err(error),
                    Some(Ok(_)) => panic!(
                        "gdex::GroupOutput for {}: into_result() gave Ok for an output \
                     whose is_failure() is true; they must agree",
                        std::any::type_name::<T>()
                    ),
                })
            })
        })
    }

    /// [`close`](TaskGroup::close) for a group built with
    /// [`keep_results`](TaskGroupBuilder::keep_results): resolves, once every
    /// member has finished, to each member's result in spawn order (its
    /// output through [`GroupOutput::into_result`]; for a member that
    /// panicked, [`Error::Panicked`], and for one cancelled or dropped
    /// unfinished, [`Error::Cancelled`], each through `From`).
    /// Dropping the future before it resolves cancels the members. Only the
    /// first close gives the results; a later one gives an empty list.
    ///
    /// # Panics
    /// If the group was built without `keep_results`: it has dropped its
    /// members' outputs as they finished.
    pub fn close_with_results(
        &self,
    ) -> impl Future<Output = Vec<Result<T::Value, T::Error>>> + 'static
    where
        T: 'static,
    {
        assert!(
            self.shared.keep_results,
            "gdex::TaskGroup::close_with_results() on a group that does not keep \
             results: build it with TaskGroup::builder().keep_results(true), or \
             close it with close()"
        );
        let first = self.start_close();
        let shared = self.shared.clone();
        let mut closing = Closing {
            wait: Wait { shared, key: None },
            owns: first,
        };
        // A leaf future (P11), as `close`'s.
        std::future::poll_fn(move |cx| {
            crate::task::coop::poll_leaf(cx, |cx| {
                if !closing.owns {
                    return Poll::Ready(Vec::new());
                }
                std::task::ready!(closing.wait.poll_done(cx));
                closing.owns = false;
                let mut state = lock(&closing.wait.shared);
                state.first = First::Taken;
                let results = std::mem::take(&mut state.results);
                state.completed.clear();
                state.later_failures.clear();
                drop(state);
                // `into_result` and `From` are user code: after the release.
                Poll::Ready(results.into_values().map(deliver::<T>).collect())
            })
        })
    }

    /// Closes the group and cancels every member; resolves when each has
    /// stopped (its future dropped, X1), members it spawns included.
    /// [`close`](TaskGroup::close) then gives [`Error::Cancelled`], unless a
    /// member had failed before.
    pub async fn cancel(&self) {
        let tasks = lock(&self.shared).cancel_members();
        drop(tasks);
        let mut wait = Wait {
            shared: self.shared.clone(),
            key: None,
        };
        std::future::poll_fn(|cx| crate::task::coop::poll_leaf(cx, |cx| wait.poll_done(cx))).await;
    }
}

/// Waits for a group's last member.
struct Wait<T> {
    shared: Arc<Shared<T>>,
    key: Option<usize>,
}

impl<T> Wait<T> {
    fn poll_done(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = lock(&self.shared);
        if state.live == 0 {
            if let Some(key) = self.key.take() {
                state.waiters.remove(key);
            }
            return Poll::Ready(());
        }
        match self.key {
            Some(key) => match &mut state.waiters[key] {
                Some(parked) => parked.update(cx.waker()),
                slot => *slot = Some(Parked::new(cx.waker())),
            },
            None => self.key = Some(state.waiters.insert(Some(Parked::new(cx.waker())))),
        }
        Poll::Pending
    }
}

impl<T> Drop for Wait<T> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            lock(&self.shared).waiters.remove(key);
        }
    }
}

/// The state of a close future: whether it still owns the members.
struct Closing<T> {
    wait: Wait<T>,
    owns: bool,
}

impl<T> Drop for Closing<T> {
    fn drop(&mut self) {
        if self.owns {
            // The owner of the members is gone before they finished.
            let tasks = lock(&self.wait.shared).cancel_members();
            drop(tasks);
        }
    }
}

impl<T> Drop for TaskGroup<T> {
    fn drop(&mut self) {
        self.joiner.drop_in(&self.shared);
        let tasks = {
            let mut state = lock(&self.shared);
            if state.close_called {
                // A close future owns the members now.
                return;
            }
            state.cancel_members()
        };
        drop(tasks);
    }
}

impl<T> std::fmt::Debug for TaskGroup<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Read, then written with the lock released: the formatter's sink
        // is the caller's code.
        let (live, closed, cancelled) = {
            let state = lock(&self.shared);
            (state.live, state.closed, state.cancelled)
        };
        f.debug_struct("TaskGroup")
            .field("live", &live)
            .field("closed", &closed)
            .field("cancelled", &cancelled)
            .finish_non_exhaustive()
    }
}

impl<T: GroupOutput> TaskGroupRef<T> {
    /// Spawns a member into the group, as [`TaskGroup::spawn`] does; also
    /// after the group was closed, as long as a member still runs. Fails
    /// with [`Error::Closed`] once the group is cancelled or gone, or closed
    /// with every member finished; with [`Error::ShutDown`] if its pool
    /// has shut down.
    #[track_caller]
    pub fn spawn<F>(&self, future: F) -> Result<(), Error>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let at = std::panic::Location::caller();
        match self.shared.upgrade() {
            Some(shared) => add(&shared, true, future, |s, member| s.spawn_at(member, at)),
            None => Err(Error::Closed),
        }
    }

    /// Spawns a `!Send` member, with the rules of
    /// [`Scheduler::spawn_local`].
    #[track_caller]
    pub fn spawn_local<F>(&self, future: F) -> Result<(), Error>
    where
        F: Future<Output = T> + 'static,
        T: 'static,
    {
        let at = std::panic::Location::caller();
        match self.shared.upgrade() {
            Some(shared) => add(&shared, true, future, |s, member| {
                s.spawn_local_at(member, at)
            }),
            None => Err(Error::Closed),
        }
    }

    /// Members of the group still running (0 once the group is gone).
    pub fn len(&self) -> usize {
        self.shared.upgrade().map_or(0, |shared| lock(&shared).live)
    }

    /// True if no member of the group is running.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> Clone for TaskGroupRef<T> {
    fn clone(&self) -> Self {
        TaskGroupRef {
            shared: self.shared.clone(),
        }
    }
}

impl<T> std::fmt::Debug for TaskGroupRef<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskGroupRef")
            .field("alive", &(self.shared.strong_count() > 0))
            .finish_non_exhaustive()
    }
}
