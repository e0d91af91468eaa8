//! [`Semaphore`] and [`Limiter`]: cancel-safe permits.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
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
    /// A notified waiter has been handed a permit.
    queue: WaitQueue,
}

impl Semaphore {
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

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.lock()
    }

    /// Waits for a permit, in arrival order. Fails with [`Error::Closed`]
    /// once the semaphore is closed.
    pub fn acquire(&self) -> Acquire<'_> {
        Acquire {
            semaphore: self,
            key: None,
        }
    }

    /// A permit if one is free right now and nobody is queued for one.
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
    /// # Panics
    /// If the semaphore would then have more than `usize::MAX` permits in
    /// all (free and held): the count is never allowed to wrap.
    pub fn add_permits(&self, n: usize) {
        let mut state = self.lock();
        // Checked before anything changes, so a refused add leaves the
        // semaphore as it was.
        let Some(total) = state.total.checked_add(n) else {
            let had = state.total;
            drop(state);
            panic!(
                "gdex::Semaphore::add_permits({n}): the semaphore already has {had} permits \
                 (free and held), and {n} more would overflow usize; add fewer"
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
        // Cannot overflow: `permits <= total` held before, and both grew by
        // at most `n`.
        state.permits += left;
    }

    /// Permits free now.
    pub fn available_permits(&self) -> usize {
        self.lock().permits
    }

    /// Closes the semaphore: every waiter, and every later `acquire`, fails
    /// with [`Error::Closed`]. Permits already held stay valid.
    pub fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        state.queue.notify_all();
    }

    /// True once [`close`](Semaphore::close) was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl State {
    /// One permit back: to the longest waiter, or to the pool of permits.
    fn release_one(&mut self) {
        if self.closed || !self.queue.notify_one() {
            self.permits += 1;
        }
    }
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("Semaphore")
            .field("permits", &state.permits)
            .field("closed", &state.closed)
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
        let this = self.get_mut();
        let mut state = this.semaphore.lock();
        if state.closed {
            state.queue.remove(&mut this.key);
            return Poll::Ready(Err(Error::Closed));
        }
        let granted = if state.queue.is_notified(this.key) {
            // Handed over by `release_one`.
            state.queue.remove(&mut this.key);
            true
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
    fn drop(&mut self) {
        if self.key.is_some() {
            let mut state = self.semaphore.lock();
            if state.queue.remove(&mut self.key) {
                // A permit was handed to us and nobody saw it: pass it on.
                state.release_one();
            }
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
/// ```
/// let limiter = gdex::Limiter::new(2);
/// let jobs: Vec<_> = (0..5).map(|i| limiter.run(async move { i * 2 })).collect();
/// let out = gdex::block_on(gdex::all(jobs)).unwrap();
/// assert_eq!(out, [0, 2, 4, 6, 8]);
/// ```
#[derive(Clone, Debug)]
pub struct Limiter {
    semaphore: Semaphore,
    limit: usize,
    accepting: Arc<std::sync::atomic::AtomicBool>,
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
            semaphore: Semaphore::new(limit),
            limit,
            accepting: Arc::new(std::sync::atomic::AtomicBool::new(true)),
        }
    }

    /// How many futures may run at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    fn check_open(&self) -> Result<(), Error> {
        if self.accepting.load(std::sync::atomic::Ordering::Acquire) {
            Ok(())
        } else {
            Err(Error::Closed)
        }
    }

    /// Runs `future` once a slot is free, in the awaiting task. Fails with
    /// [`Error::Closed`] if the limiter is closed (or draining) first.
    /// Dropping the returned future gives its slot (or its place in the
    /// queue) back.
    pub async fn run<F: Future>(&self, future: F) -> Result<F::Output, Error> {
        self.check_open()?;
        let _permit = self.semaphore.acquire().await?;
        Ok(future.await)
    }

    /// Runs `future` on the default [`ThreadPool`](crate::ThreadPool) once
    /// a slot is free; the slot is held until the pool task has finished.
    pub async fn run_on_pool<F>(&self, future: F) -> Result<F::Output, Error>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.check_open()?;
        let _permit = self.semaphore.acquire().await?;
        crate::spawn(future).await
    }

    /// Closes the limiter now: queued futures and later ones fail with
    /// [`Error::Closed`]; running ones finish.
    pub fn close(&self) {
        self.accepting
            .store(false, std::sync::atomic::Ordering::Release);
        self.semaphore.close();
    }

    /// Stops accepting new futures at once (they fail with
    /// [`Error::Closed`]), lets the queued and running ones finish, then
    /// closes. The returned future resolves when the last one has finished.
    pub fn close_after_drain(&self) -> impl Future<Output = ()> + '_ {
        self.accepting
            .store(false, std::sync::atomic::Ordering::Release);
        async move {
            // The queue is FIFO: once every permit is ours, everything
            // queued before us has run and finished.
            let mut held = Vec::with_capacity(self.limit);
            for _ in 0..self.limit {
                match self.semaphore.acquire().await {
                    Ok(permit) => held.push(permit),
                    Err(_) => break, // closed meanwhile by close()
                }
            }
            self.semaphore.close();
        }
    }
}
