//! The state every AIO future shares ([`Op`]: not started, in flight on a
//! ring, in flight on the blocking lane), and the futures themselves.

use std::fmt;
use std::future::Future;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::operation::{Operation, Outcome, Reopen};
use super::uring;
use super::{backend, Backend, File};
use crate::error::Error;
use crate::task::Task;

/// The state every AIO future shares: not started, in flight on a ring, or
/// in flight on the blocking lane.
pub(super) enum Op {
    /// Not polled yet: the backend and ring are chosen at the first poll,
    /// on the thread that awaits. (Also an operation to start again: one
    /// that moved with its task, or that the kernel stopped before it ran.)
    Start(Option<Operation>),
    /// Refused before it started (the error, until the first poll).
    Refused(Option<Error>),
    Ring(uring::InFlight),
    Lane(Task<Ran>),
    /// An open of a FIFO for reading on io_uring, after its first,
    /// non-blocking try (see [`Operation::after_a_nonblocking_open`]): the
    /// blocking open, and a poll of the first fd, whichever ends first.
    FifoRead(Box<FifoRead>),
    Done,
}

pub(super) struct FifoRead {
    /// The blocking open.
    reopen: Op,
    /// The poll of (a duplicate of) the first fd; `None` once it said
    /// nothing (on the blocking lane, where a poll only looks).
    writer: Option<Op>,
    /// The first, non-blocking open's fd.
    early: OwnedFd,
    path: PathBuf,
}

/// What the blocking lane gives back: an operation and its result. If
/// nobody takes it (the future was dropped while the call ran, so the
/// lane's task drops its output unseen), it releases what the call made:
/// the fd of an open, which would leak otherwise.
pub(super) struct Ran(Option<(Operation, i32)>);

impl Drop for Ran {
    fn drop(&mut self) {
        if let Some((operation, res)) = self.0.take() {
            operation.discard(res);
        }
    }
}

impl Op {
    pub(super) fn new(operation: Operation) -> Op {
        Op::Start(Some(operation))
    }

    pub(super) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<Outcome, Error>> {
        loop {
            match self {
                Op::Start(operation) => {
                    let mut operation = operation.take().expect("an operation starts once");
                    if operation.offset().is_some_and(|at| at > i64::MAX as u64) {
                        // No file has such an offset, and io_uring would take
                        // `u64::MAX` (-1) as "the current position": refused
                        // here, the same way on both backends, as `pread`
                        // refuses it.
                        *self = Op::Done;
                        // SAFETY: `-EINVAL` makes no fd and reads nothing.
                        return Poll::Ready(unsafe { operation.finish(-libc::EINVAL) });
                    }
                    if backend() == Backend::IoUring {
                        match uring::InFlight::start(operation, cx.waker()) {
                            Ok(in_flight) => {
                                // Its waker is in: the next poll comes with
                                // the completion.
                                *self = Op::Ring(in_flight);
                                return Poll::Pending;
                            }
                            Err(given_back) => operation = given_back,
                        }
                    }
                    *self = Op::Lane(crate::spawn_blocking(move || {
                        let res = operation.run_blocking();
                        Ran(Some((operation, res)))
                    }));
                }
                Op::Ring(in_flight) => match std::task::ready!(in_flight.poll(cx)) {
                    uring::Polled::Done(mut operation, res) => {
                        match operation.after_a_nonblocking_open(res) {
                            Reopen::No => {}
                            Reopen::Blocking => {
                                *self = Op::Start(Some(operation));
                                continue;
                            }
                            Reopen::FifoRead(early) => {
                                let path = match &operation {
                                    Operation::Open { path, .. } => path.clone(),
                                    _ => unreachable!("only an open reopens"),
                                };
                                let writer = early
                                    .try_clone()
                                    .ok()
                                    .map(|fd| Op::new(Operation::Poll { fd }));
                                *self = Op::FifoRead(Box::new(FifoRead {
                                    reopen: Op::new(operation),
                                    writer,
                                    early,
                                    path,
                                }));
                                continue;
                            }
                        }
                        *self = Op::Done;
                        // SAFETY: the ring gives each operation its own
                        // result.
                        return Poll::Ready(unsafe { operation.finish(res) });
                    }
                    uring::Polled::Again(operation) => {
                        *self = Op::Start(Some(operation));
                    }
                },
                Op::Refused(err) => {
                    let err = err.take().expect("a refusal is given once");
                    *self = Op::Done;
                    return Poll::Ready(Err(err));
                }
                Op::FifoRead(fifo) => {
                    if let Poll::Ready(reopened) = fifo.reopen.poll(cx) {
                        let Op::FifoRead(fifo) = std::mem::replace(self, Op::Done) else {
                            unreachable!()
                        };
                        // The poll goes (cancelled), and the first fd is
                        // closed; if the blocking open failed (the path
                        // changed meanwhile), the first open stands.
                        let FifoRead { early, path, .. } = *fifo;
                        return Poll::Ready(match reopened {
                            Ok(opened) => Ok(opened),
                            Err(_) => Ok(Outcome::Opened(File::opened(early, path))),
                        });
                    }
                    let came = match &mut fifo.writer {
                        Some(writer) => match writer.poll(cx) {
                            Poll::Ready(Ok(Outcome::Polled(events))) if events > 0 => true,
                            // Nothing seen (the lane only looks), or the
                            // poll failed: the blocking open decides.
                            Poll::Ready(_) => {
                                fifo.writer = None;
                                false
                            }
                            Poll::Pending => false,
                        },
                        None => false,
                    };
                    if !came {
                        return Poll::Pending;
                    }
                    // A writer came: the first open stands, as `open(2)`
                    // would have returned; the blocking open is dropped
                    // (cancelled; an fd it made meanwhile is closed).
                    let Op::FifoRead(fifo) = std::mem::replace(self, Op::Done) else {
                        unreachable!()
                    };
                    let FifoRead { early, path, .. } = *fifo;
                    return Poll::Ready(Ok(Outcome::Opened(File::opened(early, path))));
                }
                Op::Lane(task) => {
                    // The operation's future spends the budget (P11), not
                    // the lane's task too.
                    let outcome = std::task::ready!(task.poll_result(cx));
                    *self = Op::Done;
                    return Poll::Ready(match outcome {
                        Ok(mut ran) => {
                            let (operation, res) =
                                ran.0.take().expect("a lane result is taken once");
                            // SAFETY: `run_blocking` gave this operation's
                            // own result.
                            unsafe { operation.finish(res) }
                        }
                        Err(err) => Err(err),
                    });
                }
                Op::Done => panic!("gdex::aio: an operation's future polled after it completed"),
            }
        }
    }

    pub(super) fn state(&self) -> &'static str {
        match self {
            Op::Start(_) => "not started",
            Op::Refused(_) => "refused",
            Op::Ring(_) => "on io_uring",
            Op::Lane(_) => "on the blocking lane",
            Op::FifoRead(_) => "opening a FIFO, waiting for a writer",
            Op::Done => "done",
        }
    }
}

macro_rules! op_future {
    ($(#[$doc:meta])* $name:ident, $output:ty, $outcome:pat => $value:expr) => {
        $(#[$doc])*
        #[must_use = "futures do nothing unless awaited; dropping one cancels its operation"]
        pub struct $name {
            pub(super) op: Op,
        }

        impl Future for $name {
            type Output = Result<$output, Error>;

            /// A leaf (P11): a completed operation spends one unit of
            /// the polling task's budget.
            fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
                let op = &mut self.get_mut().op;
                let outcome = std::task::ready!(crate::task::coop::poll_leaf(cx, |cx| op.poll(cx)));
                Poll::Ready(outcome.map(|outcome| match outcome {
                    $outcome => $value,
                    _ => unreachable!("an operation gives its own kind of outcome"),
                }))
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("state", &self.op.state())
                    .finish()
            }
        }
    };
}

op_future!(
    /// The future of [`File::open`], [`File::create`] and
    /// [`OpenOptions::open`](super::OpenOptions::open): the open file.
    Open, File, Outcome::Opened(file) => file
);
op_future!(
    /// The future of [`File::read_at`]: the buffer, with what was read
    /// appended.
    ReadAt, Vec<u8>, Outcome::Read(buf) => buf
);
op_future!(
    /// The future of [`File::write_at`]: how many bytes were written, and
    /// the buffer.
    WriteAt, (usize, Vec<u8>), Outcome::Written(count, buf) => (count, buf)
);
