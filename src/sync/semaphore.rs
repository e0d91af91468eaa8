//! [`Semaphore`] and [`Limiter`]: cancel-safe permits.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use super::wait_queue::Locked;
use std::task::{Context, Poll};

use super::wait_queue::WaitQueue;
use crate::Error;

/// A counting semaphore with FIFO waiters (libdex's `DexSemaphore`).
///
/// Unlike libdex's, its waits are cancel-safe: dropping an
/// [`acquire`](Semaphore::acquire) future removes it from the queue, and a
/// permit handed to a future that is dropped before it sees it goes on to
/// the next waiter. Nothing is swallowed.
///
/// Permits are conserved: whatever is dropped, polled or closed, the free
/// permits and the ones held (or handed to a waiter that has not yet taken
/// them) add up to every permit the semaphore was made with or given by
/// [`add_permits`](Semaphore::add_permits). [`close`](Semaphore::close)
/// wakes the waiters without handing them anything.
///
/// ```
/// let sem = gdex::Semaphore::new(1);
/// let permit = gdex::block_on(sem.acquire()).unwrap();
/// assert!(sem.try_acquire().is_none());
/// drop(permit);
/// assert!(sem.try_acquire().is_some());
/// ```
#[derive(Clone)]
pub struct Semaphore {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
}

struct State {
    /// Free permits.
    permits: usize,
    /// Every permit there is: free, held, or handed to a waiter that has
    /// not yet taken it. Only [`Semaphore::add_permits`] raises it, and it
    /// refuses to overflow, so giving a permit back (`permits += 1`) never
    /// can: `permits <= total` always.
    total: usize,
    closed: bool,
    /// A notified waiter has been handed a permit (and only that: `close`
    /// wakes the waiters without notifying them).
    queue: WaitQueue,
}

impl Semaphore {
    /// The most permits a semaphore can have in all, free and held (tokio's
    /// `Semaphore::MAX_PERMITS`, which is smaller: gdex keeps no flag bits
    /// in the count). [`add_permits`](Semaphore::add_permits) past it
    /// panics.
    pub const MAX_PERMITS: usize = usize::MAX;

    /// A semaphore with `permits` permits.
    pub fn new(permits: usize) -> Self {
        Semaphore {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    permits,
                    total: permits,
                    closed: false,
                    queue: WaitQueue::default(),
                }),
            }),
        }
    }

    fn lock(&self) -> Locked<'_, State> {
        self.inner.lock()
    }

    /// Waits for a permit, in arrival order. Fails with [`Error::Closed`]
    /// once the semaphore is closed, unless a permit was handed to it before
    /// the close: then it gives that permit, as libdex's
    /// `dex_semaphore_wait` does (its future was resolved by the post).
    ///
    /// ```
    /// use std::future::Future;
    /// use std::task::{Context, Poll};
    ///
    /// let sem = gdex::Semaphore::new(1);
    /// let held = sem.try_acquire().unwrap();
    /// let mut waiting = Box::pin(sem.acquire());
    /// let waker = futures::task::noop_waker();
    /// let mut cx = Context::from_waker(&waker);
    /// assert!(waiting.as_mut().poll(&mut cx).is_pending());
    /// drop(held); // handed to `waiting`...
    /// sem.close(); // ...before the close: it keeps it
    /// assert!(matches!(waiting.as_mut().poll(&mut cx), Poll::Ready(Ok(_))));
    /// assert!(matches!(gdex::block_on(sem.acquire()), Err(gdex::Error::Closed)));
    /// ```
    pub fn acquire(&self) -> Acquire<'_> {
        Acquire {
            semaphore: self,
            key: None,
        }
    }

    /// A permit if one is free right now and nobody is queued for one;
    /// `None` once the semaphore is closed.
    pub fn try_acquire(&self) -> Option<Permit> {
        let mut state = self.lock();
        if state.closed || state.permits == 0 {
            return None;
        }
        state.permits -= 1;
        Some(Permit {
            inner: self.inner.clone(),
        })
    }

    /// Adds `n` permits (libdex's `dex_semaphore_post`), handing them to
    /// waiters first, longest-waiting first. It costs one step per waiter it
    /// wakes, whatever `n` is: `add_permits(usize::MAX / 2)` is as quick as
    /// `add_permits(1)`.
    ///
    /// After [`close`](Semaphore::close) the permits are added to the free
    /// ones, which nobody can take any more; the count is still checked.
    ///
    /// # Panics
    /// If the semaphore would then have more than
    /// [`MAX_PERMITS`](Semaphore::MAX_PERMITS) permits in all (free and
    /// held), in debug and release builds alike: the count is never
    /// allowed to wrap. A refused add changes nothing.
    pub fn add_permits(&self, n: usize) {
        let mut state = self.lock();
        // Checked before anything changes, so a refused add leaves the
        // semaphore as it was.
        // (`MAX_PERMITS` is `usize::MAX`: the checked add is the check.)
        let Some(total) = state.total.checked_add(n) else {
            let had = state.total;
            drop(state);
            panic!(
                "gdex::Semaphore::add_permits({n}): the semaphore already has {had} permits \
                 (free and held), and {n} more would overflow Semaphore::MAX_PERMITS ({}); \
                 add fewer",
                Self::MAX_PERMITS
            );
        };
        state.total = total;
        let mut left = n;
        if !state.closed {
            // A woken waiter takes its permit from here (`Notified`), not
            // from `permits`.
            while left > 0 && state.queue.notify_one() {
                left -= 1;
            }
        }
        // Cannot overflow: `permits <= total` held before (permits are
        // conserved), and both grew by at most `n`.
        state.permits += left;
        debug_assert!(state.permits <= state.total, "a permit was made up");
    }

    /// Permits free now.
    pub fn available_permits(&self) -> usize {
        self.lock().permits
    }

    /// Closes the semaphore: every waiter, and every later `acquire` and
    /// `try_acquire`, fails with [`Error::Closed`] (`None`). Permits already
    /// held stay valid and go back to the free ones when dropped, where
    /// nobody can take them.
    ///
    /// A waiter that had been handed a permit before the close (by a
    /// release or an `add_permits`) and has not yet been polled keeps it:
    /// its next poll gives it, as in libdex, where the post resolved its
    /// wait. (tokio's `close` fails such a waiter and puts its permit back
    /// with the free ones; either way no permit is lost or made up.) The
    /// others are woken, handed nothing: dropping them gives nothing back.
    ///
    /// ```
    /// use std::future::Future;
    ///
    /// let sem = gdex::Semaphore::new(0);
    /// let mut waiters: Vec<_> = (0..3).map(|_| Box::pin(sem.acquire())).collect();
    /// let waker = futures::task::noop_waker();
    /// for w in &mut waiters {
    ///     assert!(w.as_mut().poll(&mut std::task::Context::from_waker(&waker)).is_pending());
    /// }
    /// sem.close();
    /// drop(waiters);
    /// assert_eq!(sem.available_permits(), 0);
    /// ```
    pub fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        // Woken, not notified: a notification is a permit.
        state.queue.wake_all();
    }

    /// True once [`close`](Semaphore::close) was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }
}

impl Inner {
    fn lock(&self) -> Locked<'_, State> {
        super::wait_queue::lock(&self.state)
    }
}

impl State {
    /// One permit back: to the longest waiter, or to the free ones.
    #[inline]
    fn release_one(&mut self) {
        if self.closed || !self.queue.notify_one() {
            // Below `total`, since this permit was held or handed: cannot
            // overflow.
            debug_assert!(self.permits < self.total, "a permit was made up");
            self.permits += 1;
        }
    }
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Read under the lock, written after it: the formatter's sink is
        // the caller's code.
        let (permits, closed) = {
            let state = self.lock();
            (state.permits, state.closed)
        };
        f.debug_struct("Semaphore")
            .field("permits", &permits)
            .field("closed", &closed)
            .finish()
    }
}

/// A permit of a [`Semaphore`]; dropping it gives it back.
#[must_use = "dropping a Permit releases it at once"]
pub struct Permit {
    inner: Arc<Inner>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.inner.lock().release_one();
    }
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Permit")
    }
}

/// The future of [`Semaphore::acquire`].
#[must_use = "futures do nothing unless awaited"]
pub struct Acquire<'a> {
    semaphore: &'a Semaphore,
    key: Option<usize>,
}

impl Future for Acquire<'_> {
    type Output = Result<Permit, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // A leaf future (P11): the budget is checked before the lock.
        let this = self.get_mut();
        crate::task::coop::poll_leaf(cx, |cx| this.poll_acquire(cx))
    }
}

impl Acquire<'_> {
    fn poll_acquire(&mut self, cx: &mut Context<'_>) -> Poll<Result<Permit, Error>> {
        let this = self;
        let mut state = this.semaphore.lock();
        let granted = if state.queue.is_notified(this.key) {
            // Handed over by `release_one` or `add_permits`, before any
            // close (a closed semaphore hands nothing over): ours.
            state.queue.remove(&mut this.key);
            true
        } else if state.closed {
            // Woken by `close` (or never queued), handed nothing.
            state.queue.remove(&mut this.key);
            return Poll::Ready(Err(Error::Closed));
        } else if this.key.is_none() && state.permits > 0 {
            // Waiters exist only while no permit is free, so taking one
            // here never overtakes a waiter.
            state.permits -= 1;
            true
        } else {
            false
        };
        if granted {
            return Poll::Ready(Ok(Permit {
                inner: this.semaphore.inner.clone(),
            }));
        }
        state.queue.park(&mut this.key, cx.waker());
        Poll::Pending
    }
}

impl Drop for Acquire<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.key.is_some() {
            self.leave();
        }
    }
}

impl Acquire<'_> {
    /// Its drop while parked or handed a permit: out of the line.
    fn leave(&mut self) {
        let mut state = self.semaphore.lock();
        if state.queue.remove(&mut self.key) {
            // A permit was handed to us and nobody saw it: pass it on.
            state.release_one();
        }
    }
}

impl std::fmt::Debug for Acquire<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acquire")
            .field("queued", &self.key.is_some())
            .finish()
    }
}

/// Bounded concurrency (libdex's `DexLimiter`): at most `limit` of the
/// futures run through it run at once; the others wait their turn in
/// arrival order.
///
/// A future made by [`run`](Limiter::run) or
/// [`run_on_pool`](Limiter::run_on_pool) counts as *queued* from the moment
/// it is made, even before it is first polled: a
/// [`close_after_drain`](Limiter::close_after_drain) called after that waits
/// for it, and lets it run. (Its place in the queue for a slot is taken when
/// it is first polled.) It stops counting when it finishes or is dropped.
///
/// ```
/// let limiter = gdex::Limiter::new(2);
/// let jobs: Vec<_> = (0..5).map(|i| limiter.run(async move { i * 2 })).collect();
/// let out = gdex::block_on(gdex::all(jobs)).unwrap();
/// assert_eq!(out, [0, 2, 4, 6, 8]);
/// ```
#[derive(Clone)]
pub struct Limiter {
    shared: Arc<Shared>,
}

struct Shared {
    semaphore: Semaphore,
    limit: usize,
    state: Mutex<LimiterState>,
}

struct LimiterState {
    /// False once `close` or `close_after_drain` was called.
    accepting: bool,
    /// True once `close` was called: a `run` future handed a slot before it
    /// but not yet polled is refused all the same.
    closed: bool,
    /// Futures made by `run` and `run_on_pool` while accepting that have
    /// not finished yet: unpolled, queued, running, or (`run_on_pool`)
    /// whose pool task still holds its slot. Once `accepting` is false it
    /// only falls; at 0 the limiter is drained.
    outstanding: usize,
    /// The futures of `close_after_drain` waiting for the drain.
    drainers: WaitQueue,
    /// The futures of `acquire` waiting for a slot, woken when the limiter
    /// stops accepting: they fail then, whoever still holds a slot.
    acquirers: WaitQueue,
}

impl Shared {
    fn lock(&self) -> Locked<'_, LimiterState> {
        super::wait_queue::lock(&self.state)
    }

    /// A place among the outstanding futures, or `None` once the limiter
    /// has stopped accepting.
    fn ticket(self: &Arc<Self>) -> Option<Ticket> {
        let mut state = self.lock();
        if !state.accepting {
            return None;
        }
        state.outstanding += 1;
        Some(Ticket(self.clone()))
    }

    /// Waits for a slot for a `run` or `run_on_pool` future.
    async fn slot(&self) -> Result<Permit, Error> {
        let permit = self.semaphore.acquire().await?;
        // Handed a slot before a `close` and polled after it: refused all
        // the same, as libdex's acquire refuses a permit that arrives once
        // the limiter is closed. The slot goes back to the closed
        // semaphore's free permits, where nobody takes it.
        let closed = self.lock().closed;
        if closed {
            return Err(Error::Closed);
        }
        Ok(permit)
    }
}

/// The refusal of a closed limiter's `run` or `run_on_pool`: it completes
/// the operation at once, so it spends a unit of the running task's budget
/// as any leaf does (P11), and a loop that keeps asking still yields.
async fn refused() -> Error {
    crate::task::consume_budget().await;
    Error::Closed
}

/// A [`Limiter::acquire`] waiting for its slot, on the limiter's list of
/// them: woken, and refused, once the limiter stops accepting.
struct Listening<'a> {
    shared: &'a Shared,
    key: Option<usize>,
}

impl Listening<'_> {
    /// `Err(Closed)` once the limiter has stopped accepting; otherwise
    /// listens (again) with `cx`'s waker.
    fn check(&mut self, cx: &Context<'_>) -> Result<(), Error> {
        let mut state = self.shared.lock();
        if !state.accepting {
            state.acquirers.remove(&mut self.key);
            return Err(Error::Closed);
        }
        state.acquirers.park(&mut self.key, cx.waker());
        Ok(())
    }
}

impl Drop for Listening<'_> {
    fn drop(&mut self) {
        if self.key.is_some() {
            // A wake-up concerns this acquire only: every one is woken.
            self.shared.lock().acquirers.remove(&mut self.key);
        }
    }
}

/// One outstanding future of a [`Limiter`]; dropping it may finish a drain.
struct Ticket(Arc<Shared>);

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.outstanding -= 1;
        if !state.accepting && state.outstanding == 0 {
            // Drained: close the semaphore, then let every drain return.
            // (Lock order: the limiter's, then the semaphore's; nothing
            // takes them the other way round.)
            self.0.semaphore.close();
            state.drainers.notify_all();
        }
    }
}

/// A slot held by a running future, and its ticket. Fields drop in order:
/// the slot goes back before the ticket can end a drain.
struct Held {
    _permit: Permit,
    _ticket: Ticket,
}

impl Limiter {
    /// A limiter that lets `limit` futures run at once.
    ///
    /// # Panics
    /// If `limit` is 0: nothing could ever run.
    pub fn new(limit: usize) -> Self {
        assert!(
            limit > 0,
            "gdex::Limiter::new(0): a limit of 0 would let nothing run; use 1 or more"
        );
        Limiter {
            shared: Arc::new(Shared {
                semaphore: Semaphore::new(limit),
                limit,
                state: Mutex::new(LimiterState {
                    accepting: true,
                    closed: false,
                    outstanding: 0,
                    drainers: WaitQueue::default(),
                    acquirers: WaitQueue::default(),
                }),
            }),
        }
    }

    /// How many futures may run at once.
    pub fn limit(&self) -> usize {
        self.shared.limit
    }

    /// Runs `future` once a slot is free, in the awaiting task, and gives
    /// the slot back when it has finished.
    ///
    /// The returned future counts as queued from the moment `run` returns
    /// (see [`Limiter`]): one made before
    /// [`close_after_drain`](Limiter::close_after_drain) runs, and the drain
    /// waits for it (so poll it or drop it). It fails with
    /// [`Error::Closed`] if it was made after `close` or
    /// `close_after_drain`, or if [`close`](Limiter::close) is called
    /// before it gets a slot. Dropping it drops `future` and gives its slot
    /// (or its place in the queue) back.
    ///
    /// The returned future does not borrow the limiter.
    pub fn run<F: Future>(&self, future: F) -> impl Future<Output = Result<F::Output, Error>> {
        let ticket = self.shared.ticket();
        let shared = self.shared.clone();
        async move {
            let ticket = match ticket {
                Some(ticket) => ticket,
                None => return Err(refused().await),
            };
            let permit = shared.slot().await?;
            let _held = Held {
                _permit: permit,
                _ticket: ticket,
            };
            Ok(future.await)
        }
    }

    /// Runs `future` on the default [`ThreadPool`](crate::ThreadPool) once
    /// a slot is free. The slot is held by the pool task itself, until that
    /// task's future has finished or been dropped, whatever happens to the
    /// returned future.
    ///
    /// Dropping the returned future cancels the pool task, as dropping a
    /// [`Task`](crate::Task) does: `future` is dropped at its next
    /// suspension point, on its worker, and only then is the slot free
    /// again, so a job in the middle of a long poll still counts against
    /// the limit. (libdex lets discarded pool work run to completion; to do
    /// that here, spawn the returned future and
    /// [`detach`](crate::Task::detach) it.)
    ///
    /// Queueing and closing are as for [`run`](Limiter::run); the returned
    /// future does not borrow the limiter.
    pub fn run_on_pool<F>(&self, future: F) -> impl Future<Output = Result<F::Output, Error>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let ticket = self.shared.ticket();
        let shared = self.shared.clone();
        async move {
            let ticket = match ticket {
                Some(ticket) => ticket,
                None => return Err(refused().await),
            };
            let permit = shared.slot().await?;
            let held = Held {
                _permit: permit,
                _ticket: ticket,
            };
            crate::spawn(async move {
                let _held = held;
                future.await
            })
            .await
        }
    }

    /// Waits for a slot and gives it as a [`LimiterPermit`], held until
    /// the permit is dropped (or [`released`](LimiterPermit::release)): a
    /// scope of limited work that is not one future (libdex's
    /// `dex_limiter_acquire` and `dex_limiter_release`). Prefer
    /// [`run`](Limiter::run), which cannot forget to give the slot back.
    ///
    /// Acquires wait in arrival order with the futures of `run` and
    /// `run_on_pool`, and are cancel-safe: a dropped acquire leaves the
    /// queue and passes on a slot it was given but never took. As in
    /// libdex 1.2 (`dex_limiter_acquire`), an acquire still waiting when
    /// the limiter is closed, by [`close`](Limiter::close) or
    /// [`close_after_drain`](Limiter::close_after_drain), is woken and
    /// fails with [`Error::Closed`] at once, whoever still holds a slot
    /// (so a holder may await it before releasing its own), and so does
    /// one made or first polled afterwards; a drain waits for the permits
    /// already held. (A `run` future made before a drain runs, by
    /// contrast: it is work already handed over, an acquire is a request
    /// to start some.)
    ///
    /// ```
    /// let limiter = gdex::Limiter::new(1);
    /// let permit = gdex::block_on(limiter.acquire()).unwrap();
    /// let mut second = Box::pin(limiter.acquire());
    /// assert!(gdex::block_on(gdex::timeout(std::time::Duration::from_millis(5), second.as_mut())).is_err());
    /// permit.release();
    /// assert!(gdex::block_on(second).is_ok());
    /// ```
    pub fn acquire(&self) -> impl Future<Output = Result<LimiterPermit, Error>> + Send + 'static {
        let shared = self.shared.clone();
        async move {
            let permit = {
                let mut listening = Listening {
                    shared: &shared,
                    key: None,
                };
                let mut wait = std::pin::pin!(shared.semaphore.acquire());
                // Listening first: a drain that begins after the check
                // finds this acquire on its list and wakes it.
                // A slot handed to it and never taken (it was refused)
                // goes back to the queue as `wait` drops: to a `run`
                // future made before the drain.
                std::future::poll_fn(|cx| {
                    if let Err(closed) = listening.check(cx) {
                        // A refusal completes the operation: a leaf's
                        // unit of the budget (P11), as the semaphore's.
                        std::task::ready!(crate::task::coop::poll_proceed(cx)).made_progress();
                        return Poll::Ready(Err(closed));
                    }
                    wait.as_mut().poll(cx)
                })
                .await?
            };
            // A drain began since the last check: refused, and the slot
            // goes back to the queue.
            let ticket = shared.ticket().ok_or(Error::Closed)?;
            Ok(LimiterPermit {
                _held: Held {
                    _permit: permit,
                    _ticket: ticket,
                },
            })
        }
    }

    /// Closes the limiter now: queued futures (made but not yet running),
    /// waiting acquires and later ones fail with [`Error::Closed`]; running
    /// ones finish, and permits held stay valid (libdex's
    /// `dex_limiter_close`).
    pub fn close(&self) {
        // Under the limiter's lock, so that no ticket is handed out after.
        let mut state = self.shared.lock();
        state.accepting = false;
        state.closed = true;
        state.acquirers.notify_all();
        self.shared.semaphore.close();
        // A drain still waits, for the running ones (their tickets).
        drop(state);
    }

    /// Stops accepting at once, lets the queued and running futures
    /// finish, then closes: libdex's `dex_limiter_close_after_drain`, but
    /// for the `run` futures already made.
    ///
    /// From this call on, futures of `run`, `run_on_pool` and `acquire`
    /// made afterwards fail with [`Error::Closed`], and so does every
    /// [`acquire`](Limiter::acquire) still waiting for a slot: it is woken
    /// and fails at once, as libdex rejects its waiting acquires with
    /// `DEX_ERROR_SEMAPHORE_CLOSED`, however long the permits held take to
    /// come back. The returned future resolves once every permit held
    /// ([`LimiterPermit`]) has been released and every queued future has
    /// finished.
    ///
    /// "Queued" means every future made by [`run`](Limiter::run) or
    /// [`run_on_pool`](Limiter::run_on_pool) before this call that has not
    /// finished or been dropped, polled yet or not: those run (libdex
    /// rejects them, as all its runs are acquires). The drain starts here,
    /// not when the returned future is first polled; it waits for the last
    /// of them (for `run_on_pool`, for its pool task).
    ///
    /// Any number of callers may drain the same limiter: they share one
    /// drain, and all of them return once it is done. A
    /// [`close`](Limiter::close) meanwhile refuses the queued futures; the
    /// drain then ends when the running ones have finished. The returned
    /// future does not borrow the limiter.
    ///
    /// ```
    /// let limiter = gdex::Limiter::new(1);
    /// let held = gdex::block_on(limiter.acquire()).unwrap();
    /// let waiting = limiter.acquire();
    /// let drain = limiter.close_after_drain();
    /// // Refused at once, though `held` still holds the only slot.
    /// assert!(matches!(gdex::block_on(waiting), Err(gdex::Error::Closed)));
    /// held.release();
    /// gdex::block_on(drain);
    /// ```
    pub fn close_after_drain(&self) -> impl Future<Output = ()> {
        let mut state = self.shared.lock();
        state.accepting = false;
        state.acquirers.notify_all();
        if state.outstanding == 0 {
            // Nothing outstanding: drained already (a later drain finds
            // the semaphore closed; closing it twice is harmless).
            self.shared.semaphore.close();
        }
        drop(state);
        Drain {
            shared: self.shared.clone(),
            key: None,
        }
    }
}

/// A slot of a [`Limiter`], from [`Limiter::acquire`]: held until dropped.
#[must_use = "dropping the permit gives its slot back at once"]
pub struct LimiterPermit {
    _held: Held,
}

impl LimiterPermit {
    /// Gives the slot back (as dropping the permit does; libdex's
    /// `dex_limiter_release`). After the limiter was closed, the slot
    /// goes to nobody, and a drain waiting for it may end.
    pub fn release(self) {}
}

impl std::fmt::Debug for LimiterPermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimiterPermit").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Read under the lock, written after it (the sink is user code).
        let (accepting, outstanding) = {
            let state = self.shared.lock();
            (state.accepting, state.outstanding)
        };
        f.debug_struct("Limiter")
            .field("limit", &self.shared.limit)
            .field("accepting", &accepting)
            .field("outstanding", &outstanding)
            .finish()
    }
}

/// The future of [`Limiter::close_after_drain`]: one caller's wait for the
/// limiter's shared drain.
struct Drain {
    shared: Arc<Shared>,
    key: Option<usize>,
}

impl Future for Drain {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // A leaf future (P11): the budget is checked before the lock.
        let this = self.get_mut();
        crate::task::coop::poll_leaf(cx, |cx| this.poll_drained(cx))
    }
}

impl Drain {
    fn poll_drained(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let this = self;
        let mut state = this.shared.lock();
        // `accepting` is false for good, so `outstanding` only falls.
        if state.outstanding == 0 {
            state.drainers.remove(&mut this.key);
            return Poll::Ready(());
        }
        state.drainers.park(&mut this.key, cx.waker());
        Poll::Pending
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        if self.key.is_some() {
            // A wake-up it got and did not act on concerns nobody else:
            // every drainer is woken at once.
            self.shared.lock().drainers.remove(&mut self.key);
        }
    }
}
