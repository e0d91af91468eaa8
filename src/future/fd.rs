//! Waiting for a file descriptor: [`unix_fd`].
//!
//! The wait is one unix-fd `GSource` on the context of the scheduler that
//! polls it, as for a timer (see [`sleep`](crate::sleep)): a pool worker's
//! own context, the main context, a context scheduler's, or the
//! thread-default context. So a task, a main-thread task and a fiber all
//! wait the same way, and the thread that waits sleeps in its context's
//! `poll` with the fd in the set: no busy polling, no extra thread. A wait
//! polled on another context than the one it waits on (its task moved to
//! another worker) moves its source there. Dropping the future removes the
//! source.
//!
//! One caveat a raw GLib source shares: the fd's readiness is seen when its
//! context is iterated, so a task whose worker sits in one long poll waits
//! for that poll to end (a timer, by contrast, is raised by the watchdog).

use std::future::Future;
use std::marker::PhantomData;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use glib::IOCondition;

use crate::error::Error;
use crate::source::{fd_revents, Hooks, SourceRef};
use crate::task::flag::Flag;

/// Resolves once `fd` is ready for one of `condition` (usually
/// [`IOCondition::IN`] or [`IOCondition::OUT`]), on whatever scheduler
/// awaits it, and gives what the fd was found ready for: a hang-up
/// ([`IOCondition::HUP`]) or an error condition ([`IOCondition::ERR`]) ends
/// the wait too, whatever was asked. An empty `condition` waits for a
/// hang-up or an error only. libdex waits on fds through its AIO backends;
/// GLib's own is `g_unix_fd_add`.
///
/// The future borrows the fd, so the fd stays open while it waits. It is
/// one wait, level-triggered: read (or write) what is there, then call
/// `unix_fd` again. It fails with a `G_FILE_ERROR_BADF` [`Error::Failed`]
/// if `poll` finds the fd not open (`G_IO_NVAL`).
///
/// ```
/// use std::io::{Read, Write};
/// use gdex::glib::IOCondition;
///
/// let (mut ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
/// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
/// let reader = pool.scheduler().spawn(async move {
///     let ready = gdex::unix_fd(&ours, IOCondition::IN).await.expect("open");
///     assert!(ready.contains(IOCondition::IN));
///     let mut buf = [0; 5];
///     ours.read_exact(&mut buf).unwrap();
///     buf
/// });
/// theirs.write_all(b"hello").unwrap();
/// assert_eq!(&gdex::block_on(reader).unwrap(), b"hello");
/// ```
pub fn unix_fd<F: AsFd + ?Sized>(fd: &F, condition: IOCondition) -> UnixFd<'_> {
    let fd = fd.as_fd();
    UnixFd {
        raw: fd.as_raw_fd(),
        condition,
        state: Arc::default(),
        source: None,
        _fd: PhantomData,
    }
}

/// What the fd's source and the future share.
#[derive(Default)]
struct Ready {
    fired: Flag,
    /// The `GIOCondition` bits the fd was found ready for; written before
    /// `fired` is raised.
    revents: AtomicU32,
}

impl Hooks for Arc<Ready> {
    fn dispatch(&self, source: *mut glib_sys::GSource) -> bool {
        self.revents
            .store(fd_revents(source).bits(), Ordering::Relaxed);
        self.fired.raise();
        false // one wait: the source goes
    }
}

/// The future of [`unix_fd`].
#[must_use = "futures do nothing unless awaited"]
pub struct UnixFd<'fd> {
    raw: RawFd,
    condition: IOCondition,
    state: Arc<Ready>,
    /// The source it waits on, and that source's context.
    source: Option<(SourceRef, glib::MainContext)>,
    _fd: PhantomData<BorrowedFd<'fd>>,
}

impl UnixFd<'_> {
    fn outcome(&self) -> Result<IOCondition, Error> {
        let revents = IOCondition::from_bits_truncate(self.state.revents.load(Ordering::Relaxed));
        if revents.contains(IOCondition::NVAL) {
            return Err(Error::Failed(glib::Error::new(
                glib::FileError::Badf,
                &format!(
                    "gdex::unix_fd: fd {} is not open (poll gave G_IO_NVAL); keep it open while the wait lives",
                    self.raw
                ),
            )));
        }
        Ok(revents)
    }
}

impl Future for UnixFd<'_> {
    type Output = Result<IOCondition, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        crate::task::coop::poll_leaf(cx, |cx| this.poll_ready(cx))
    }
}

impl UnixFd<'_> {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<IOCondition, Error>> {
        let this = self;
        if this.state.fired.poll_raised(cx) {
            return Poll::Ready(this.outcome());
        }
        let here = super::time::waiting_context();
        if matches!(&this.source, Some((_, home)) if *home == here) {
            return Poll::Pending;
        }
        // First poll, or our task moved to another context: wait here.
        if let Some((source, _)) = this.source.take() {
            source.destroy();
        }
        let source = SourceRef::attach_fd(
            &here,
            Box::new(this.state.clone()),
            false,
            this.raw,
            this.condition,
            c"gdex unix fd",
            glib::ffi::G_PRIORITY_DEFAULT,
        );
        this.source = Some((source, here));
        if this.state.fired.poll_raised(cx) {
            Poll::Ready(this.outcome())
        } else {
            Poll::Pending
        }
    }
}

impl Drop for UnixFd<'_> {
    fn drop(&mut self) {
        if let Some((source, _)) = &self.source {
            source.destroy();
        }
    }
}

impl std::fmt::Debug for UnixFd<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnixFd")
            .field("fd", &self.raw)
            .field("condition", &self.condition)
            .field("ready", &self.state.fired.is_raised())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::io::Write;
    use std::task::{Context, Poll};

    use glib::IOCondition;

    /// Dropping a wait removes its source at once: the source's hooks (our
    /// shared state) are released, and a later readiness dispatches nothing.
    #[test]
    fn dropping_the_wait_removes_its_source() {
        let context = glib::MainContext::new();
        context
            .with_thread_default(|| {
                let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
                let mut wait = Box::pin(super::unix_fd(&ours, IOCondition::IN));
                let mut cx = Context::from_waker(std::task::Waker::noop());
                assert!(wait.as_mut().poll(&mut cx).is_pending());
                let state = wait.state.clone();
                assert_eq!(
                    std::sync::Arc::strong_count(&state),
                    3,
                    "future, source, us"
                );
                drop(wait);
                assert_eq!(
                    std::sync::Arc::strong_count(&state),
                    1,
                    "the source is gone"
                );
                theirs.write_all(b"x").unwrap();
                while context.iteration(false) {}
                assert!(!state.fired.is_raised());
            })
            .unwrap();
    }

    /// A wait polled on another context than the one it waits on moves its
    /// source there (its task moved): the old context no longer sees it.
    #[test]
    fn a_wait_polled_elsewhere_moves_its_source() {
        let first = glib::MainContext::new();
        let second = glib::MainContext::new();
        let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut wait = Box::pin(super::unix_fd(&ours, IOCondition::IN));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        first
            .with_thread_default(|| assert!(wait.as_mut().poll(&mut cx).is_pending()))
            .unwrap();
        second
            .with_thread_default(|| assert!(wait.as_mut().poll(&mut cx).is_pending()))
            .unwrap();
        theirs.write_all(b"x").unwrap();
        while first.iteration(false) {}
        assert!(
            !wait.state.fired.is_raised(),
            "the first context dropped it"
        );
        while !wait.state.fired.is_raised() {
            second.iteration(true);
        }
        match wait.as_mut().poll(&mut cx) {
            Poll::Ready(Ok(ready)) => assert!(ready.contains(IOCondition::IN)),
            other => panic!("expected readable, got {other:?}"),
        }
    }

    /// A closed fd is an error that says what went wrong, not a hang.
    #[test]
    fn a_closed_fd_fails_with_badf() {
        let context = glib::MainContext::new();
        context
            .with_thread_default(|| {
                // Misuse only unsafe code can commit: a "borrowed" fd that
                // is not open. A number no process can have open, so that
                // no other test's fd is ever taken for it.
                // SAFETY: the number is only handed to `poll`, which reports
                // it as not open; nothing reads or closes it.
                let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(i32::MAX - 1) };
                let mut wait = Box::pin(super::unix_fd(&borrowed, IOCondition::IN));
                let mut cx = Context::from_waker(std::task::Waker::noop());
                let outcome = loop {
                    if let Poll::Ready(outcome) = wait.as_mut().poll(&mut cx) {
                        break outcome;
                    }
                    context.iteration(true);
                };
                let err = outcome.unwrap_err();
                assert!(err.to_string().contains("is not open"), "{err}");
            })
            .unwrap();
    }
}
