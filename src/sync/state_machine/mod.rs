//! State machines (M1): libdex 1.2's `DexStateMachine` in Rust's terms.
//!
//! A [`StateMachine`] holds a state (any `Copy + Eq + Hash + Debug` type:
//! a Rust enum, or a `#[derive(glib::Enum)]` one that GObject code can put
//! in a property) and a table of declared edges, each with a transition
//! function that may await. Requests for a transition queue up and run
//! one at a time, in request order, on the machine's scheduler; each
//! resolves with the state the machine ended in.
//!
//! # How a request runs
//!
//! [`StateMachine::transition`] records its target as the requested state
//! and queues the request; a runner task on the machine's scheduler takes
//! requests in order. For each, it looks up the edge from the machine's
//! current state to the target: none gives [`Error::InvalidTransition`]
//! and changes nothing. Otherwise the edge's function runs as a task of
//! its own (named after the edge in [`dump`](crate::dump); a panic in it
//! is contained like any task's and rejects the request with
//! [`Error::Panicked`]), with a [`TransitionContext`] that can read and
//! set the machine's real state, wait for an interruption, or continue
//! through another edge before any queued request runs. When the function
//! succeeds without having set the state or continued, the machine
//! commits the target; when it fails, the state stays as it was (or as
//! the function set it: those changes are real, and not rolled back).
//!
//! What dropping a request, the machine or its scheduler does is in
//! [`StateMachine`]'s docs.
//!
//! The machine's lock is a primitive lock of `sync::wait_queue`: no user
//! code runs under it, and wakers are woken (and dropped) after its
//! release.

mod context;
mod waits;

use std::collections::{HashMap, VecDeque};
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use crate::sync::wait_queue::{lock, Parked};
use crate::{Error, Scheduler};

pub use context::{Interrupted, TransitionContext};
pub use waits::{TransitionRequest, WaitForState};

/// What a [`StateMachine`]'s states can be: a small `Copy` value that can
/// be compared, hashed (the edge table's key) and printed (in errors).
/// Every such type is one: a plain Rust enum with
/// `#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]`, or a
/// `#[derive(glib::Enum)]` one for a GObject property. (The machine
/// compares states under its lock, to resolve the waits for one: an `Eq`
/// written by hand must not use the machine.)
pub trait State: Copy + Eq + Hash + Debug + Send + Sync + 'static {}

impl<T: Copy + Eq + Hash + Debug + Send + Sync + 'static> State for T {}

type EdgeFuture = Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>;
type EdgeFn<S> = Arc<dyn Fn(TransitionContext<S>) -> EdgeFuture + Send + Sync>;

/// The machine's scheduler refused an edge's task or dropped it
/// unfinished: it has shut down, and no transition can run any more.
struct SchedulerGone;

/// An edge's run: its function's result, unless the scheduler is gone.
type RunFuture = Pin<Box<dyn Future<Output = Result<Result<(), Error>, SchedulerGone>> + Send>>;

/// What the runner, the contexts and the futures share.
pub(crate) struct Shared<S: State> {
    scheduler: Scheduler,
    edges: HashMap<(S, S), EdgeFn<S>>,
    inner: Mutex<Inner<S>>,
}

struct Inner<S> {
    state: S,
    requested: S,
    requests: HashMap<u64, Request<S>>,
    /// Requests not started yet, in request order.
    queue: VecDeque<u64>,
    waiters: HashMap<u64, Waiter<S>>,
    next_id: u64,
    /// A runner task exists (queued or running) and will take the queue.
    running: bool,
    /// The last handle is gone.
    closed: bool,
    /// The scheduler is gone: it dropped a runner (it shut down, or
    /// refused the spawn), so no transition runs again.
    gone: bool,
    /// The running transition's context, and those it continued into
    /// (innermost last): [`StateMachine::interrupt`] reaches the last.
    active: Vec<Arc<context::ContextShared>>,
}

struct Request<S> {
    target: S,
    started: bool,
    /// Its future is gone (dropped after the start, or detached): the
    /// outcome is dropped, not kept.
    abandoned: bool,
    outcome: Option<Result<S, Error>>,
    waker: Option<Parked>,
}

struct Waiter<S> {
    want: S,
    outcome: Option<Result<S, Error>>,
    waker: Option<Parked>,
}

impl<S: State> Inner<S> {
    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Gives request `id` its outcome (or forgets it, if nobody awaits it).
    fn finish(&mut self, id: u64, outcome: Result<S, Error>) {
        let Some(request) = self.requests.get_mut(&id) else {
            return;
        };
        if request.abandoned {
            self.requests.remove(&id);
        } else {
            request.outcome = Some(outcome);
            if let Some(waker) = request.waker.take() {
                waker.wake();
            }
        }
    }

    /// Sets the real state and resolves the waits for it.
    fn set_state(&mut self, state: S) {
        self.state = state;
        for waiter in self.waiters.values_mut() {
            if waiter.want == state && waiter.outcome.is_none() {
                waiter.outcome = Some(Ok(state));
                if let Some(waker) = waiter.waker.take() {
                    waker.wake();
                }
            }
        }
    }

    /// Rejects every wait for a state with `Cancelled`: no state will
    /// come (the machine or its scheduler is gone).
    fn reject_waiters(&mut self) {
        for waiter in self.waiters.values_mut() {
            if waiter.outcome.is_none() {
                waiter.outcome = Some(Err(Error::Cancelled));
                if let Some(waker) = waiter.waker.take() {
                    waker.wake();
                }
            }
        }
    }

    /// Rejects every request not started yet with `error`.
    fn reject_queued(&mut self, error: &Error) {
        while let Some(id) = self.queue.pop_front() {
            self.finish(id, Err(error.clone()));
        }
    }
}

impl<S: State> Shared<S> {
    fn invalid(from: S, to: S) -> Error {
        Error::InvalidTransition(format!(
            "no transition from {from:?} to {to:?} is declared: the state machine's edges are \
             fixed when it is built (StateMachineBuilder::edge)"
        ))
    }

    /// Runs the edge `from → to` with a new context, and commits `to` if
    /// its function succeeded without setting the state or continuing.
    /// `parent` is the transition a continuation continues from, with a
    /// state to commit as the edge starts (its target).
    fn run_edge(
        self: Arc<Self>,
        from: S,
        to: S,
        parent: Option<(Arc<context::ContextShared>, Option<S>)>,
    ) -> RunFuture {
        Box::pin(async move {
            let Some(edge) = self.edges.get(&(from, to)).cloned() else {
                return Ok(Err(Self::invalid(from, to)));
            };
            let me = Arc::new(context::ContextShared::default());
            {
                let mut inner = lock(&self.inner);
                if let Some((parent, commit)) = &parent {
                    // A transition ends under this lock: one that has
                    // ended starts no continuation.
                    match parent.ended() {
                        None => {}
                        Some(true) => return Ok(Err(Error::Cancelled)),
                        Some(false) => {
                            drop(inner);
                            panic!(
                                "a continue_to future was polled on after its transition ended: \
                                 await it inside the transition function"
                            );
                        }
                    }
                    // One step with the start, so that whoever sees the
                    // state committed (a wait for it) and interrupts
                    // reaches this transition, not the one waiting for it.
                    if let Some(state) = commit {
                        inner.set_state(*state);
                    }
                }
                if inner.closed {
                    // The machine is gone: what it runs now (a queued
                    // request's edge cannot start; a continuation may)
                    // starts interrupted.
                    me.interrupt();
                }
                inner.active.push(me.clone());
            }
            // Ends the context if this future is dropped mid-way (a
            // shutdown): it leaves the active list, and its interrupt
            // waits resolve.
            let ended = context::EndOnDrop {
                shared: &self,
                me: &me,
            };
            let cx = TransitionContext::new(self.clone(), me.clone(), from, to);
            let name = format!("state machine transition {from:?} -> {to:?}");
            // The function is called inside the task, so that a panic in
            // it (not only in its future) is the task's.
            let result = match self
                .scheduler
                .spawn_named(&name, async move { edge(cx).await })
                .await
            {
                Ok(result) => result,
                Err(Error::Panicked(message)) => Err(Error::Panicked(message)),
                // Refused (`ShutDown`) or dropped unfinished (`Cancelled`):
                // the scheduler has shut down. (The context ends as
                // `ended` drops.)
                Err(_) => return Err(SchedulerGone),
            };
            {
                let mut inner = lock(&self.inner);
                // The context ends as the target is committed, in one step
                // (libdex pops its context before committing): whoever sees
                // the new state and interrupts reaches the transition still
                // running (the one that continued into this one), or none.
                inner.active.retain(|cx| !Arc::ptr_eq(cx, &me));
                me.end(false);
                if result.is_ok() && !me.took_over() {
                    inner.set_state(to);
                }
            }
            std::mem::forget(ended);
            Ok(result)
        })
    }
}

/// Rejects the runner's request and the queued ones if the runner is
/// dropped before it ran out of requests (its scheduler shut down, or
/// refused the spawn), or stops because its scheduler refused or dropped
/// an edge's task.
struct Runner<S: State> {
    shared: Arc<Shared<S>>,
    current: Option<u64>,
    done: bool,
}

impl<S: State> Drop for Runner<S> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut inner = lock(&self.shared.inner);
        inner.running = false;
        if let Some(id) = self.current.take() {
            inner.finish(id, Err(Error::Cancelled));
        }
        inner.reject_queued(&Error::Cancelled);
        // Only the scheduler drops a runner before it is done: no state
        // will be set again, so the waits for one end too.
        inner.gone = true;
        inner.reject_waiters();
    }
}

impl<S: State> Runner<S> {
    async fn run(mut self) {
        loop {
            let (id, from, to) = {
                let mut inner = lock(&self.shared.inner);
                let Some(id) = inner.queue.pop_front() else {
                    inner.running = false;
                    self.done = true;
                    return;
                };
                let from = inner.state;
                let request = inner
                    .requests
                    .get_mut(&id)
                    .expect("a queued request has its entry");
                request.started = true;
                (id, from, request.target)
            };
            self.current = Some(id);
            let Ok(result) = self.shared.clone().run_edge(from, to, None).await else {
                // The scheduler has shut down (the runner was polled while
                // it closed): stop as if dropped, which rejects this
                // request and the queued ones with `Cancelled`, rather
                // than take the next ones only to have them refused.
                return;
            };
            let mut inner = lock(&self.shared.inner);
            let outcome = result.map(|()| inner.state);
            inner.finish(id, outcome);
            self.current = None;
        }
    }
}

/// Builds a [`StateMachine`]: its initial state, its edges and where
/// their functions run. See [`StateMachine::builder`].
pub struct StateMachineBuilder<S: State> {
    initial: S,
    edges: Vec<(S, S, EdgeFn<S>)>,
    scheduler: Option<Scheduler>,
}

impl<S: State> StateMachineBuilder<S> {
    /// Declares the edge `from → to`, whose transition `f` runs as a task
    /// on the machine's scheduler: it may await, and returns `Ok(())` to
    /// commit `to` (unless it set the state or continued itself) or an
    /// error, which the request rejects with.
    pub fn edge<F, Fut>(mut self, from: S, to: S, f: F) -> Self
    where
        F: Fn(TransitionContext<S>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), Error>> + Send + 'static,
    {
        let edge: EdgeFn<S> = Arc::new(move |cx| Box::pin(f(cx)) as EdgeFuture);
        self.edges.push((from, to, edge));
        self
    }

    /// Declares the edge `from → to`, whose transition `f` runs in a fiber
    /// (F1) on the machine's scheduler, as libdex runs its transition
    /// callbacks: it waits with [`fiber::wait`](crate::fiber::wait)
    /// (`fiber::wait(cx.continue_to(next))` continues).
    pub fn fiber_edge<F>(self, from: S, to: S, f: F) -> Self
    where
        F: Fn(TransitionContext<S>) -> Result<(), Error> + Send + Sync + 'static,
    {
        let f = Arc::new(f);
        self.edge(from, to, move |cx: TransitionContext<S>| {
            let f = f.clone();
            let scheduler = cx.scheduler().clone();
            let fiber = scheduler.spawn_fiber(move || f(cx));
            async move {
                match fiber.await {
                    Ok(result) => result,
                    // Refused: the scheduler has shut down, which the
                    // machine's requests give as `Cancelled`.
                    Err(Error::ShutDown) => Err(Error::Cancelled),
                    Err(error) => Err(error),
                }
            }
        })
    }

    /// Where the transition functions (and the machine's runner) run: by
    /// default the calling thread's scheduler
    /// ([`Scheduler::thread_default`]: the main scheduler on a thread that
    /// runs or holds the default main context, as a GTK app's main thread
    /// does once its loop runs; the pool inside a pool task), else the
    /// default pool, also on a main thread that does not hold the default
    /// context yet (pass [`Scheduler::main`] to be sure of the main loop).
    pub fn scheduler(mut self, scheduler: &Scheduler) -> Self {
        self.scheduler = Some(scheduler.clone());
        self
    }

    /// The machine, in its initial state.
    ///
    /// # Errors
    /// [`Error::InvalidTransition`] if an edge is declared twice: each edge
    /// has one transition function.
    pub fn build(self) -> Result<StateMachine<S>, Error> {
        let mut edges = HashMap::with_capacity(self.edges.len());
        for (from, to, f) in self.edges {
            if edges.insert((from, to), f).is_some() {
                return Err(Error::InvalidTransition(format!(
                    "the edge {from:?} -> {to:?} is declared twice: a state machine takes one \
                     transition function per edge"
                )));
            }
        }
        let scheduler = self
            .scheduler
            .or_else(Scheduler::thread_default)
            .unwrap_or_else(|| crate::ThreadPool::default().scheduler());
        let shared = Arc::new(Shared {
            scheduler,
            edges,
            inner: Mutex::new(Inner {
                state: self.initial,
                requested: self.initial,
                requests: HashMap::new(),
                queue: VecDeque::new(),
                waiters: HashMap::new(),
                next_id: 0,
                running: false,
                closed: false,
                gone: false,
                active: Vec::new(),
            }),
        });
        Ok(StateMachine {
            handle: Arc::new(Handle { shared }),
        })
    }
}

impl<S: State> Debug for StateMachineBuilder<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateMachineBuilder")
            .field("initial", &self.initial)
            .field(
                "edges",
                &self
                    .edges
                    .iter()
                    .map(|(a, b, _)| (a, b))
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// A state machine over the states `S`, with declared edges whose
/// transitions may await (M1; libdex's `DexStateMachine`).
///
/// Requests run one at a time, in request order, on the machine's
/// scheduler: for each, the edge from the machine's state to the target
/// is looked up when its turn comes ([`Error::InvalidTransition`] if there
/// is none, with no change), and its function runs as a task of its own
/// (named after the edge in [`dump`](crate::dump); a panic in it rejects
/// the request with [`Error::Panicked`]). A function that succeeds without
/// setting the state or continuing commits the edge's target; one that
/// fails leaves the state as it was, or as it set it (those changes are
/// real, not rolled back).
///
/// Cloning gives another handle to the same machine. What dropping does:
/// - a [`TransitionRequest`] dropped before its transition started
///   withdraws it (its function never runs); once started, a transition
///   is never torn in half: it runs to its end and its outcome is dropped
///   ([`TransitionRequest::detach`] keeps a request without awaiting it);
/// - dropping the last handle rejects every queued request and every
///   [`WaitForState`] with [`Error::Cancelled`], and interrupts the running
///   transition ([`TransitionContext::interrupted`] resolves), which runs
///   to its end;
/// - if the machine's scheduler shuts down, the running and queued
///   requests reject with [`Error::Cancelled`], and so do the waits for a
///   state (from then on, or, for a machine idle at the shutdown, from the
///   next request, which finds the scheduler gone).
///
/// A transition that needs a `!Send` future (a GIO `_future` call, a
/// widget) awaits a task spawned for it on the main scheduler
/// (`Scheduler::main().spawn_local(...)`).
///
/// ```
/// use gdex::{Error, StateMachine};
///
/// #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
/// enum Conn { Disconnected, Connecting, Ready }
///
/// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
/// let machine = StateMachine::builder(Conn::Disconnected)
///     .scheduler(&pool.scheduler())
///     .edge(Conn::Disconnected, Conn::Connecting, |cx| async move {
///         gdex::sleep(std::time::Duration::from_millis(1)).await;
///         // Show the way through, then continue to Ready before any
///         // queued request runs.
///         cx.continue_to(Conn::Ready).await
///     })
///     .edge(Conn::Connecting, Conn::Ready, |_cx| async { Ok(()) })
///     .build()
///     .unwrap();
///
/// let ready = machine.wait_for_state(Conn::Ready);
/// assert_eq!(gdex::block_on(machine.transition(Conn::Connecting)).unwrap(), Conn::Ready);
/// assert_eq!(gdex::block_on(ready).unwrap(), Conn::Ready);
/// // No edge leads from Ready back to Disconnected:
/// let refused = gdex::block_on(machine.transition(Conn::Disconnected));
/// assert!(matches!(refused, Err(Error::InvalidTransition(_))));
/// assert_eq!(machine.state(), Conn::Ready);
/// ```
pub struct StateMachine<S: State> {
    handle: Arc<Handle<S>>,
}

impl<S: State> Clone for StateMachine<S> {
    fn clone(&self) -> Self {
        StateMachine {
            handle: self.handle.clone(),
        }
    }
}

/// Closes the machine when the last handle goes.
struct Handle<S: State> {
    shared: Arc<Shared<S>>,
}

impl<S: State> Drop for Handle<S> {
    fn drop(&mut self) {
        let mut inner = lock(&self.shared.inner);
        inner.closed = true;
        inner.reject_queued(&Error::Cancelled);
        inner.reject_waiters();
        for cx in &inner.active {
            cx.interrupt();
        }
    }
}

impl<S: State> StateMachine<S> {
    /// Starts a machine in the state `initial`; declare its edges with
    /// [`edge`](StateMachineBuilder::edge) or
    /// [`fiber_edge`](StateMachineBuilder::fiber_edge), then
    /// [`build`](StateMachineBuilder::build) it.
    pub fn builder(initial: S) -> StateMachineBuilder<S> {
        StateMachineBuilder {
            initial,
            edges: Vec::new(),
            scheduler: None,
        }
    }

    fn shared(&self) -> &Arc<Shared<S>> {
        &self.handle.shared
    }

    /// The machine's current state.
    pub fn state(&self) -> S {
        lock(&self.shared().inner).state
    }

    /// The target of the latest [`transition`](StateMachine::transition)
    /// request (the initial state before any): what the machine was last
    /// asked for, which it may not reach (the request may be refused,
    /// fail, or be withdrawn).
    pub fn requested_state(&self) -> S {
        lock(&self.shared().inner).requested
    }

    /// The scheduler the transitions run on.
    pub fn scheduler(&self) -> &Scheduler {
        &self.shared().scheduler
    }

    /// Requests a transition to `target`, queued behind the requests made
    /// before it; the future resolves with the state the machine ends in
    /// ([`Error::InvalidTransition`] if no edge leads from the state the
    /// machine is in when the request's turn comes to `target`; the
    /// function's error if it fails). The request is queued now, not when
    /// first polled: dropping the future before its turn withdraws it,
    /// [`detach`](TransitionRequest::detach) keeps it.
    pub fn transition(&self, target: S) -> TransitionRequest<S> {
        let shared = self.shared().clone();
        let (id, spawn) = {
            let mut inner = lock(&shared.inner);
            let id = inner.id();
            inner.requested = target;
            inner.requests.insert(
                id,
                Request {
                    target,
                    started: false,
                    abandoned: false,
                    outcome: None,
                    waker: None,
                },
            );
            inner.queue.push_back(id);
            let spawn = !inner.running;
            inner.running = true;
            (id, spawn)
        };
        if spawn {
            let runner = Runner {
                shared: shared.clone(),
                current: None,
                done: false,
            };
            // Dropped unpolled (a scheduler that is gone), the block drops
            // the runner, which rejects what is queued.
            shared
                .scheduler
                .spawn_named("state machine", async move { runner.run().await })
                .detach();
        }
        TransitionRequest {
            shared,
            id,
            done: false,
        }
    }

    /// Resolves with `state` when the machine is in it: at once if it is,
    /// else the next time its state is set to it (an intermediate state a
    /// transition sets counts), or [`Error::Cancelled`] if the machine is
    /// dropped first, or its scheduler is found gone (no state will be set
    /// again). It requests nothing.
    pub fn wait_for_state(&self, state: S) -> WaitForState<S> {
        let shared = self.shared().clone();
        let mut inner = lock(&shared.inner);
        if inner.state == state || inner.gone {
            let ready = if inner.state == state {
                Ok(state)
            } else {
                Err(Error::Cancelled)
            };
            drop(inner);
            return WaitForState {
                shared,
                id: None,
                ready: Some(ready),
            };
        }
        let id = inner.id();
        inner.waiters.insert(
            id,
            Waiter {
                want: state,
                outcome: None,
                waker: None,
            },
        );
        drop(inner);
        WaitForState {
            shared,
            id: Some(id),
            ready: None,
        }
    }

    /// Interrupts the running transition: its
    /// [`interrupted`](TransitionContext::interrupted) futures resolve (now,
    /// or at once when it asks later). It requests nothing and changes no
    /// state: the transition decides what an interruption means. Returns
    /// false if no transition is running.
    ///
    /// In a [`continue_to`](TransitionContext::continue_to) chain, the
    /// running transition is the innermost edge that has not returned. A
    /// state the chain commits is committed in one step with the change
    /// of running edge, so an interrupt sent on seeing it (a
    /// [`wait_for_state`](StateMachine::wait_for_state) that resolved)
    /// reaches the edge that runs from then on.
    pub fn interrupt(&self) -> bool {
        let inner = lock(&self.shared().inner);
        match inner.active.last() {
            Some(cx) => {
                cx.interrupt();
                true
            }
            None => false,
        }
    }
}

impl<S: State> Debug for StateMachine<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Read, then written with the lock released: the formatter's sink
        // and the states' `Debug` are the caller's code.
        let (state, requested, queued) = {
            let inner = lock(&self.shared().inner);
            (inner.state, inner.requested, inner.queue.len())
        };
        f.debug_struct("StateMachine")
            .field("state", &state)
            .field("requested_state", &requested)
            .field("queued", &queued)
            .finish_non_exhaustive()
    }
}
