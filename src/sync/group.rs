//! [`TaskGroup`]: a scope of tasks that finish, or are cancelled, together.
//!
//! The group keeps one slot per *live* member: the member's [`Task`]
//! handle, so that the group can cancel it. A member frees its slot itself
//! when it finishes (or is dropped), as libdex unlinks a finished child, so
//! the group's memory follows the members still running, not every member
//! it ever had. What a finished member leaves behind is
//! at most the group's first failure, or, in a group built with
//! [`keep_results`](TaskGroupBuilder::keep_results), its result.
//!
//! A member's slot goes through these states, each change under the
//! group's lock:
//!
//! - `Reserved`: [`spawn`](TaskGroup::spawn) made the slot and is handing
//!   the member to its scheduler (without the lock: a scheduler may drop
//!   the member right there, and the member's guard takes the lock);
//! - `Filled(task)`: the spawner stored the handle;
//! - `Taken`: a canceller took the handle (and drops it, which cancels the
//!   member); the member's guard frees the slot when the member's future
//!   is dropped;
//! - `Done`: the member finished while its spawner still held `Reserved`;
//!   the spawner frees the slot;
//! - `Refused`: the scheduler dropped the member unpolled while its spawner
//!   still held `Reserved` (a shut-down pool): the spawner undoes the
//!   spawn, and fails with the error the refused task resolved to.

use std::any::TypeId;
use std::cell::Cell;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};

use super::wait_queue::Locked;
use std::task::{Context, Poll, Waker};

use slab::Slab;

use crate::diagnostics::panic::PanicSource;
use crate::error::panic_message;
use crate::util::Unpoisoned;
use crate::{Error, Scheduler, Task};

/// What a member of a [`TaskGroup`] gives, seen by the group: whether it
/// failed, and the value or error the group hands back for it.
///
/// A member *fails* when it panics, when its scheduler drops it unfinished
/// (a pool shut down), or when its output says so: an `Err` for a group of
/// `Result`s. The first failure is what [`close`](TaskGroup::close)
/// reports, and what cancels the other members in a group built with
/// [`cancel_on_error`](TaskGroupBuilder::cancel_on_error).
///
/// gdex implements it for `()` (members that only fail by panicking or by
/// being dropped; the error is [`Error`]) and for `Result<U, E>` where `E`
/// can carry a gdex [`Error`] (`gdex::Error`, `glib::Error`,
/// `Box<dyn std::error::Error + Send + Sync>`, `anyhow::Error`, …): a
/// panicked or dropped member becomes an `E` through `From`. For a type of
/// your own:
///
/// ```
/// struct Hash([u8; 32]);
/// impl gdex::GroupOutput for Hash {
///     type Value = Hash;
///     type Error = gdex::Error;
///     fn is_failure(&self) -> bool {
///         false
///     }
///     fn into_result(self) -> Result<Hash, gdex::Error> {
///         Ok(self)
///     }
/// }
/// let group = gdex::TaskGroup::<Hash>::new();
/// group.spawn(async { Hash([0; 32]) }).unwrap();
/// assert!(gdex::block_on(group.close()).is_ok());
/// ```
pub trait GroupOutput: Sized {
    /// What a member that succeeded gives back (with
    /// [`keep_results`](TaskGroupBuilder::keep_results)).
    type Value;
    /// What a member that failed gives back; a panicked or dropped member
    /// becomes one through `From`.
    type Error: From<Error>;

    /// True if this output is a failure.
    fn is_failure(&self) -> bool;

    /// The output as a result: `Err` exactly when
    /// [`is_failure`](Self::is_failure) is true.
    fn into_result(self) -> Result<Self::Value, Self::Error>;
}

impl GroupOutput for () {
    type Value = ();
    type Error = Error;

    fn is_failure(&self) -> bool {
        false
    }

    fn into_result(self) -> Result<(), Error> {
        Ok(())
    }
}

impl<U, E: From<Error>> GroupOutput for Result<U, E> {
    type Value = U;
    type Error = E;

    fn is_failure(&self) -> bool {
        self.is_err()
    }

    fn into_result(self) -> Result<U, E> {
        self
    }
}

/// A member's outcome as the caller gets it.
fn deliver<T: GroupOutput>(outcome: Outcome<T>) -> Result<T::Value, T::Error> {
    match outcome {
        Ok(output) => output.into_result(),
        Err(error) => Err(error.into()),
    }
}

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
    shared: Arc<Shared<T>>,
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

struct Shared<T> {
    scheduler: Scheduler,
    cancel_on_error: bool,
    keep_results: bool,
    state: Mutex<State<T>>,
}

/// A member's outcome as the group records it: its output, or why there is
/// none (it panicked, or was dropped unfinished).
type Outcome<T> = Result<T, Error>;

struct State<T> {
    /// One slot per member not yet finished (see the module docs).
    slots: Slab<Slot>,
    /// Members spawned and not yet finished or dropped (slots that are
    /// `Reserved`, `Filled` or `Taken`).
    live: usize,
    /// No new members from outside (closed, cancelled, or dropped).
    closed: bool,
    /// The group cancelled its members: later failures do not count, and
    /// every spawn is refused.
    cancelled: bool,
    /// `close` (or `close_with_results`) was called: its first future owns
    /// the members from then on, and the group's drop leaves them alone.
    close_called: bool,
    /// The first failure; in a group that keeps results, where it is.
    first: First<T>,
    /// With `keep_results`: one entry per spawned member, in spawn order
    /// (`None` while it runs, and for a spawn that was refused).
    results: Vec<Option<Outcome<T>>>,
    /// Futures waiting for `live == 0` (close, cancel).
    waiters: Slab<Option<Waker>>,
}

enum Slot {
    Reserved,
    Filled(Task<()>),
    Taken,
    Done,
    Refused,
}

enum First<T> {
    None,
    /// The failing member's outcome (a group that drops results).
    Here(Outcome<T>),
    /// The failing member's index in `results` (a group that keeps them).
    At(usize),
    /// A `close` took it.
    Taken,
}

impl<T> State<T> {
    /// Closes the group and takes the handle of every member that has one,
    /// for the caller to drop (which cancels them) once the lock is
    /// released: a member's future may be dropped right there, and its
    /// guard takes the lock.
    fn cancel_members(&mut self) -> Vec<Task<()>> {
        self.closed = true;
        self.cancelled = true;
        let mut tasks = Vec::new();
        for (_, slot) in self.slots.iter_mut() {
            if matches!(slot, Slot::Filled(_)) {
                if let Slot::Filled(task) = std::mem::replace(slot, Slot::Taken) {
                    tasks.push(task);
                }
            }
        }
        tasks
    }

    /// Wakes whoever waits for the last member, once there is none.
    fn take_wakers(&mut self) -> Vec<Waker> {
        if self.live != 0 {
            return Vec::new();
        }
        if self.slots.is_empty() && self.slots.capacity() > 64 {
            // A burst of members is over: give its memory back.
            self.slots = Slab::new();
        }
        self.waiters
            .iter_mut()
            .filter_map(|(_, waker)| waker.take())
            .collect()
    }
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        // A panic nobody read (the group was never closed, or its results
        // never collected) goes to the panic handler (X5).
        let state = self.state.get_mut().unpoisoned();
        if let First::Here(Err(Error::Panicked(message))) = &mut state.first {
            crate::diagnostics::panic::report(PanicSource::Task, std::mem::take(message));
        }
        for result in state.results.iter_mut().flatten() {
            if let Err(Error::Panicked(message)) = result {
                crate::diagnostics::panic::report(PanicSource::Task, std::mem::take(message));
            }
        }
    }
}

fn lock<T>(shared: &Shared<T>) -> Locked<'_, State<T>> {
    super::wait_queue::lock(&shared.state)
}

thread_local! {
    /// The group of the member being polled on this thread, if any: its
    /// output type, that type's name (for the misuse panic), a pointer to
    /// the member's `Weak<Shared<T>>`, and the task polling it (a task run
    /// inside the member's poll, by a nested loop, is no member).
    static CURRENT: Cell<Option<(TypeId, &'static str, *const (), *const ())>> =
        const { Cell::new(None) };
}

/// Drops `value`, sending a panic of its destructor to the panic handler.
fn drop_contained<V>(value: V, source: PanicSource) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(value))) {
        crate::diagnostics::panic::report(source, panic_message(&*payload));
    }
}

/// The member's side of its slot: reports how the member ended, once.
struct Guard<T: GroupOutput> {
    group: Weak<Shared<T>>,
    key: usize,
    /// Its index in `results` (groups that keep results).
    seq: usize,
    started: bool,
    done: bool,
}

impl<T: GroupOutput> Guard<T> {
    fn finish(&mut self, outcome: Outcome<T>, dropped: bool) {
        self.done = true;
        let Some(shared) = self.group.upgrade() else {
            // The group is gone: nobody will read the outcome.
            if let Err(Error::Panicked(message)) = outcome {
                crate::diagnostics::panic::report(PanicSource::Task, message);
            } else {
                drop_contained(outcome, PanicSource::Output);
            }
            return;
        };
        let mut detach = None;
        let mut cancel = Vec::new();
        let mut unread = None;
        let wakers;
        {
            let mut state = lock(&shared);
            match std::mem::replace(&mut state.slots[self.key], Slot::Done) {
                Slot::Reserved if dropped && !self.started => {
                    // Dropped unpolled while its spawner still hands it over:
                    // the scheduler refused it. The spawner undoes the spawn.
                    state.slots[self.key] = Slot::Refused;
                    return;
                }
                Slot::Reserved => {} // the spawner frees the `Done` slot
                Slot::Filled(task) => {
                    state.slots.remove(self.key);
                    detach = Some(task);
                }
                Slot::Taken => {
                    state.slots.remove(self.key);
                }
                Slot::Done | Slot::Refused => unreachable!("a group member finishes once"),
            }
            state.live -= 1;
            let failed = !state.cancelled
                && match &outcome {
                    Ok(output) => output.is_failure(),
                    Err(_) => true,
                };
            let first = failed && matches!(state.first, First::None);
            if shared.keep_results {
                if first {
                    state.first = First::At(self.seq);
                }
                state.results[self.seq] = Some(outcome);
            } else if first {
                state.first = First::Here(outcome);
            } else {
                unread = Some(outcome);
            }
            if failed && shared.cancel_on_error && !state.cancelled {
                cancel = state.cancel_members();
            }
            wakers = state.take_wakers();
        }
        // Outside the lock: each of these may run code that takes it.
        if let Some(task) = detach {
            // Our own handle: the task is finishing (or being dropped) now.
            task.detach();
        }
        drop(cancel);
        match unread {
            Some(Err(Error::Panicked(message))) => {
                crate::diagnostics::panic::report(PanicSource::Task, message);
            }
            Some(outcome) => drop_contained(outcome, PanicSource::Output),
            None => {}
        }
        wakers.into_iter().for_each(Waker::wake);
    }
}

impl<T: GroupOutput> Drop for Guard<T> {
    fn drop(&mut self) {
        if !self.done {
            // The member's future was dropped unfinished (it is dropped
            // before this guard: field order in `Member`).
            self.finish(Err(Error::Cancelled), true);
        }
    }
}

pin_project_lite::pin_project! {
    /// A member's future: the user's future, polled with the group as the
    /// current group, its panics caught, and its end reported to the group.
    struct Member<F, T: GroupOutput> {
        // Set to `None` (dropped in place, `Pin::set`) when it finishes,
        // before the group hears of it.
        #[pin]
        future: Option<F>,
        guard: Guard<T>,
    }
}

impl<F, T> Future for Member<F, T>
where
    F: Future<Output = T>,
    T: GroupOutput + 'static,
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        if this.guard.done {
            return Poll::Ready(());
        }
        this.guard.started = true;
        let Some(future) = this.future.as_mut().as_pin_mut() else {
            return Poll::Ready(());
        };
        let group = (&this.guard.group as *const Weak<Shared<T>>).cast::<()>();
        let previous = CURRENT.replace(Some((
            TypeId::of::<T>(),
            std::any::type_name::<T>(),
            group,
            crate::task::running_task(),
        )));
        let polled = catch_unwind(AssertUnwindSafe(|| future.poll(cx)));
        CURRENT.set(previous);
        let outcome = match polled {
            Ok(Poll::Pending) => return Poll::Pending,
            Ok(Poll::Ready(output)) => Ok(output),
            Err(payload) => Err(Error::Panicked(panic_message(&*payload))),
        };
        // Stopped means stopped: the future's own state goes before the
        // group (and a close waiting for it) hears that the member ended.
        let mut future = this.future;
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| future.set(None))) {
            crate::diagnostics::panic::report(PanicSource::Drop, panic_message(&*payload));
        }
        this.guard.finish(outcome, false);
        Poll::Ready(())
    }
}

/// Spawns `future` into the group: `from_member` for a spawn through a
/// [`TaskGroupRef`], allowed in a closed group while members still run.
fn add<T, F>(
    shared: &Arc<Shared<T>>,
    from_member: bool,
    future: F,
    spawn: impl FnOnce(&Scheduler, Member<F, T>) -> Task<()>,
) -> Result<(), Error>
where
    T: GroupOutput,
{
    let (key, seq) = {
        let mut state = lock(shared);
        if state.cancelled || (state.closed && !(from_member && state.live > 0)) {
            drop(state);
            drop_contained(future, PanicSource::Drop);
            return Err(Error::Closed);
        }
        let key = state.slots.insert(Slot::Reserved);
        state.live += 1;
        let seq = state.results.len();
        if shared.keep_results {
            state.results.push(None);
        }
        (key, seq)
    };
    let member = Member {
        future: Some(future),
        guard: Guard {
            group: Arc::downgrade(shared),
            key,
            seq,
            started: false,
            done: false,
        },
    };
    let undo = |shared: &Shared<T>| {
        let wakers = {
            let mut state = lock(shared);
            state.slots.remove(key);
            state.live -= 1;
            state.take_wakers()
        };
        wakers.into_iter().for_each(Waker::wake);
    };
    let task = match catch_unwind(AssertUnwindSafe(|| spawn(&shared.scheduler, member))) {
        Ok(task) => task,
        Err(payload) => {
            // A misused `spawn_local`: its panic says what to do.
            undo(shared);
            std::panic::resume_unwind(payload);
        }
    };
    let mut state = lock(shared);
    match std::mem::replace(&mut state.slots[key], Slot::Taken) {
        Slot::Reserved if state.cancelled => {
            // Cancelled while we spawned: the member goes too.
            drop(state);
            drop(task);
        }
        Slot::Reserved => state.slots[key] = Slot::Filled(task),
        Slot::Done => {
            state.slots.remove(key);
            drop(state);
            task.detach();
        }
        Slot::Refused => {
            drop(state);
            undo(shared);
            // The spawn fails with the scheduler's reason, which its task
            // holds ([`Error::ShutDown`] for a shut-down pool), as a plain
            // spawn there would give.
            let why = futures::FutureExt::now_or_never(task).and_then(Result::err);
            return Err(why.unwrap_or(Error::Closed));
        }
        Slot::Filled(_) | Slot::Taken => unreachable!("only the spawner fills a reserved slot"),
    }
    Ok(())
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
                    results: Vec::new(),
                    waiters: Slab::new(),
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
    /// [`GroupOutput`]), or [`Error::Cancelled`] if the group was cancelled
    /// with no failure before. Dropping that future before it resolves
    /// cancels the members.
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
        std::future::poll_fn(move |cx| {
            if !closing.owns {
                return Poll::Ready(Err(Error::Closed.into()));
            }
            std::task::ready!(closing.wait.poll_done(cx));
            closing.owns = false;
            let mut state = lock(&closing.wait.shared);
            let failure = match std::mem::replace(&mut state.first, First::Taken) {
                First::Here(outcome) => Some(outcome),
                First::At(seq) => state.results[seq].take(),
                First::None if state.cancelled => Some(Err(Error::Cancelled)),
                First::None | First::Taken => None,
            };
            let results = std::mem::take(&mut state.results);
            drop(state);
            // A group that kept results, closed without them: its other
            // panics have nobody to go to (X5).
            for result in results.into_iter().flatten() {
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
        std::future::poll_fn(move |cx| {
            if !closing.owns {
                return Poll::Ready(Vec::new());
            }
            std::task::ready!(closing.wait.poll_done(cx));
            closing.owns = false;
            let mut state = lock(&closing.wait.shared);
            state.first = First::Taken;
            let results = std::mem::take(&mut state.results);
            Poll::Ready(results.into_iter().flatten().map(deliver::<T>).collect())
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
        std::future::poll_fn(|cx| wait.poll_done(cx)).await;
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
            Some(key) => {
                let slot = &mut state.waiters[key];
                if !slot.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *slot = Some(cx.waker().clone());
                }
            }
            None => self.key = Some(state.waiters.insert(Some(cx.waker().clone()))),
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
        let state = lock(&self.shared);
        f.debug_struct("TaskGroup")
            .field("live", &state.live)
            .field("closed", &state.closed)
            .field("cancelled", &state.cancelled)
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
