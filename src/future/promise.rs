//! [`Promise`]: a value given once, from any thread, to any number of
//! waiters.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::sync::wait_queue::Locked;
use std::task::{Context, Poll};

use crate::sync::wait_queue::WaitQueue;
use crate::Error;

/// The resolving side of a promise (libdex's `DexPromise`): resolve or
/// reject it once, from any thread. Dropping it unresolved rejects its
/// waiters with [`Error::Dropped`], so nobody waits forever.
///
/// Its [`PromiseFuture`] can be cloned (when `T: Clone`) and awaited from
/// any scheduler, fiber or thread; each waiter gets the value (the last one
/// gets it moved, the others a clone). A clone made after the value was
/// moved out gets an error instead: see [`PromiseFuture`].
///
/// ```
/// let (promise, future) = gdex::Promise::new();
/// let second = future.clone();
/// std::thread::spawn(move || promise.resolve(7));
/// assert_eq!(gdex::block_on(future).unwrap(), 7);
/// assert_eq!(gdex::block_on(second).unwrap(), 7);
/// ```
pub struct Promise<T> {
    inner: Arc<Inner<T>>,
}

struct Inner<T> {
    state: Mutex<State<T>>,
    /// Live `PromiseFuture`s.
    futures: AtomicUsize,
    /// Set by the first `PromiseFuture::clone`, which requires `T: Clone`:
    /// with several waiters, all but the last get a copy.
    cloner: OnceLock<fn(&T) -> T>,
}

enum State<T> {
    Pending(WaitQueue),
    /// The result. The value is shared with the waiters copying it at the
    /// moment: they do so with the lock released (`T::clone` is user code).
    Done(Result<Arc<T>, Error>),
    /// The only future left took the result. A clone made from it
    /// afterwards gets the rejection again, or (`None`: the value was moved
    /// out) an error saying so (see `PromiseFuture`).
    Taken(Option<Error>),
}

impl<T> Inner<T> {
    fn lock(&self) -> Locked<'_, State<T>> {
        crate::sync::wait_queue::lock(&self.state)
    }

    fn complete(&self, result: Result<T, Error>) {
        let mut state = self.lock();
        if let State::Pending(queue) = &mut *state {
            queue.notify_all();
            *state = State::Done(result.map(Arc::new));
        }
    }
}

impl<T> Promise<T> {
    /// A pending promise and the future of its value.
    #[allow(clippy::new_ret_no_self)]
    pub fn new() -> (Promise<T>, PromiseFuture<T>) {
        let inner = Arc::new(Inner {
            state: Mutex::new(State::Pending(WaitQueue::default())),
            futures: AtomicUsize::new(1),
            cloner: OnceLock::new(),
        });
        (
            Promise {
                inner: inner.clone(),
            },
            PromiseFuture {
                inner,
                key: None,
                resolved: false,
            },
        )
    }

    /// Resolves the promise: every waiter gets `value`.
    pub fn resolve(self, value: T) {
        self.inner.complete(Ok(value));
    }

    /// Rejects the promise: every waiter gets `error`.
    pub fn reject(self, error: Error) {
        self.inner.complete(Err(error));
    }

    /// True once every [`PromiseFuture`] has been dropped: nobody waits for
    /// the value any more, so the work that makes it can stop (libdex
    /// cancels a discarded promise's cancellable).
    pub fn is_abandoned(&self) -> bool {
        self.inner.futures.load(Ordering::Acquire) == 0
    }
}

impl<T> Drop for Promise<T> {
    fn drop(&mut self) {
        // A no-op once resolved or rejected.
        self.inner.complete(Err(Error::Dropped));
    }
}

impl<T> std::fmt::Debug for Promise<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Promise")
            .field("abandoned", &self.is_abandoned())
            .finish()
    }
}

/// The future of a [`Promise`]'s value: `Ok(value)`, the rejection, or
/// [`Error::Dropped`] if the promise was dropped unresolved.
///
/// Every clone gets the result once. While several clones are alive, each
/// one that resolves gets a copy; the last one alive gets the value itself,
/// moved out of the promise. A clone made *after* that (from the future
/// that took the value, once it resolved) has no value left to get: it
/// resolves to the same rejection if the promise was rejected, and if it
/// was resolved, to an [`Error::Failed`] (`G_IO_ERROR_FAILED`) saying the
/// value was already taken. To give the value to several waiters, clone
/// before the last clone resolves.
///
/// # Panics
/// Polling the future that took the value (the last one) again after it
/// resolved panics.
///
/// ```
/// let (promise, future) = gdex::Promise::new();
/// promise.resolve(String::from("once"));
/// let mut future = future;
/// // The only future takes the value...
/// assert_eq!(gdex::block_on(&mut future).unwrap(), "once");
/// // ...so a clone made from it afterwards has none to get.
/// let late = future.clone();
/// assert!(matches!(gdex::block_on(late), Err(gdex::Error::Failed(_))));
/// ```
#[must_use = "futures do nothing unless awaited"]
pub struct PromiseFuture<T> {
    inner: Arc<Inner<T>>,
    key: Option<usize>,
    /// It resolved: if it took the value, polling it again is a misuse.
    resolved: bool,
}

impl<T> Unpin for PromiseFuture<T> {}

impl<T: Clone> Clone for PromiseFuture<T> {
    fn clone(&self) -> Self {
        self.inner.cloner.get_or_init(|| T::clone);
        self.inner.futures.fetch_add(1, Ordering::AcqRel);
        PromiseFuture {
            inner: self.inner.clone(),
            key: None,
            resolved: false,
        }
    }
}

impl<T> Future for PromiseFuture<T> {
    type Output = Result<T, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        crate::task::coop::poll_leaf(cx, |cx| this.poll_result(cx))
    }
}

impl<T> PromiseFuture<T> {
    fn poll_result(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, Error>> {
        let this = self;
        let mut state = this.inner.lock();
        let poll = match &mut *state {
            State::Pending(queue) => {
                queue.park(&mut this.key, cx.waker());
                return Poll::Pending;
            }
            State::Done(result) => {
                this.key = None; // the queue is gone with Pending
                let last = this.inner.futures.load(Ordering::Acquire) == 1;
                let result = if last {
                    let left = result.as_ref().err().cloned();
                    let State::Done(result) = std::mem::replace(&mut *state, State::Taken(left))
                    else {
                        unreachable!()
                    };
                    result
                } else {
                    result.clone()
                };
                drop(state);
                // With the lock released: `T::clone` is user code. The last
                // future (no other is alive, so none is copying) holds the
                // only reference, and takes the value itself.
                Poll::Ready(result.map(|value| {
                    Arc::try_unwrap(value).unwrap_or_else(|shared| {
                        let copy = this
                            .inner
                            .cloner
                            .get()
                            .expect("several PromiseFutures exist only through Clone");
                        copy(&shared)
                    })
                }))
            }
            State::Taken(_) if this.resolved => panic!(
                "a gdex::PromiseFuture was polled again after it resolved; poll a future only \
                 until it resolves"
            ),
            // A clone made from the future that took the result.
            State::Taken(Some(rejection)) => Poll::Ready(Err(rejection.clone())),
            State::Taken(None) => Poll::Ready(Err(Error::Failed(glib::Error::new(
                gio::IOErrorEnum::Failed,
                "gdex: the promise's value was already moved out to the PromiseFuture this one \
                 was cloned from, so there is none left to give; to share a value, clone a \
                 PromiseFuture before the last of its clones resolves",
            )))),
        };
        this.resolved = true;
        poll
    }
}

impl<T> Drop for PromiseFuture<T> {
    fn drop(&mut self) {
        let mut state = self.inner.lock();
        if let State::Pending(queue) = &mut *state {
            // Waiters are all woken together: nothing to pass on.
            queue.remove(&mut self.key);
        }
        self.inner.futures.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<T> std::fmt::Debug for PromiseFuture<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromiseFuture").finish_non_exhaustive()
    }
}
