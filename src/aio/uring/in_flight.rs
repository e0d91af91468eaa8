//! An operation handed to a ring, as its future holds it ([`InFlight`]):
//! queued on the ring of the context it is first polled on, moved or
//! watched when polled from another, and cancelled when dropped.

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use io_uring::types;

use super::ring::Ring;
use super::state::{Phase, Slot, State};
use crate::aio::operation::Operation;
use crate::source::{Hooks, SourceRef};
use crate::util::Unpoisoned;

/// The hooks of a source that watches another context's ring for an
/// operation polled here (its task moved): reaps it when completions wait.
struct WatchRing(Arc<Ring>);

impl Hooks for WatchRing {
    fn dispatch(&self, _source: *mut glib_sys::GSource) -> bool {
        self.0.turn(false);
        true
    }
}

/// An operation handed to a ring, as its future holds it.
pub(crate) struct InFlight {
    ring: Arc<Ring>,
    key: usize,
    /// While the operation is in the kernel on another context's ring than
    /// the one it is now polled from: a source on the poller's context
    /// that reaps that ring.
    watch: Option<Watch>,
}

/// A source that watches a ring for an operation polled elsewhere, and the
/// context it is attached to; destroyed when dropped. The context is held,
/// not its address: a context made later at a dead one's address is
/// another, whose poll must watch again.
struct Watch(SourceRef, glib::MainContext);

impl Drop for Watch {
    fn drop(&mut self) {
        self.0.destroy();
    }
}

/// What a poll of an [`InFlight`] gives.
pub(crate) enum Polled {
    /// The operation and its result.
    Done(Operation, i32),
    /// The operation, not run: start it again where it is polled now.
    Again(Operation),
}

impl InFlight {
    /// Queues `operation` on the ring of the context this thread waits on;
    /// gives the operation back if that ring cannot be set up (the caller
    /// then runs it on the blocking lane). `waker` is woken when it
    /// completes.
    pub(crate) fn start(operation: Operation, waker: &Waker) -> Result<InFlight, Operation> {
        let context = crate::future::time::waiting_context();
        let ring = match Ring::of(&context) {
            Ok(ring) => ring,
            Err(err) => {
                warn_once(&err);
                return Err(operation);
            }
        };
        // Cloned before the lock: a waker's clone and drop are foreign code.
        let waker = waker.clone();
        let key = {
            let mut state = ring.state.lock().unpoisoned();
            let key = state.slots.insert(Slot {
                operation: Some(operation),
                phase: Phase::Backlog,
                submitter: 0,
                waker: Some(waker),
                dropped: false,
            });
            state.backlog.push_back(key);
            if ring.owned_here() {
                // We are in one of the context's turns: its next `prepare`
                // submits it, and a pool worker that runs dry goes back to
                // its loop at once for it.
                crate::current::note_loop_work();
            } else {
                ring.wake_loop(&state);
            }
            key
        };
        Ok(InFlight {
            ring,
            key,
            watch: None,
        })
    }

    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Polled> {
        if let Some(polled) = self.take_if_over() {
            return Poll::Ready(polled);
        }
        // Still waiting. Where is it polled from? (Not under the lock: the
        // first call may start the `gdex-timers` thread.)
        let here = crate::future::time::waiting_context();
        // The ring's context, not one made later at a dead one's address:
        // `here` is held, so a live ring at its address is its own.
        let at_home =
            here.as_ptr() as usize == self.ring.context && self.ring.alive.load(Ordering::Acquire);
        // The new waker is cloned, and the old one dropped, outside the
        // lock: dropping a waker may drop what it owns (a simple executor's
        // task, and with it its future), which may be another operation of
        // this ring, whose drop takes the lock.
        let new = cx.waker().clone();
        let mut state = self.ring.state.lock().unpoisoned();
        let slot = &mut state.slots[self.key];
        let old = match slot.phase {
            Phase::Done(_) | Phase::Adrift => {
                // Finished (or handed back) meanwhile: take it now.
                drop(state);
                drop(new);
                return self.poll(cx);
            }
            Phase::Backlog if !at_home => {
                // Not asked of the kernel yet: it moves with its task. The
                // slot stays in the backlog, dropped, until the backlog
                // reaches it.
                slot.dropped = true;
                let operation = slot.operation.take().expect("queued with its operation");
                let old = slot.waker.take();
                drop(state);
                self.key = usize::MAX;
                self.watch = None;
                drop((old, new));
                return Poll::Ready(Polled::Again(operation));
            }
            Phase::Backlog | Phase::InKernel => slot.waker.replace(new),
        };
        let in_kernel_elsewhere = slot.phase == Phase::InKernel && !at_home;
        drop(state);
        drop(old);
        if !in_kernel_elsewhere {
            self.watch = None;
        } else if self.watch.as_ref().map(|watch| &watch.1) != Some(&here) {
            // In the kernel on a ring whose loop may no longer run: the
            // completion comes to its fd; watch it from here.
            let fd = self.ring.state.lock().unpoisoned().ring.as_raw_fd();
            let source = SourceRef::attach_fd(
                &here,
                Box::new(WatchRing(self.ring.clone())),
                false,
                fd,
                glib::IOCondition::IN,
                c"[gdex aio watch]",
                glib::ffi::G_PRIORITY_DEFAULT - 1,
            );
            self.watch = Some(Watch(source, here));
            // It may have completed already, before the watch.
            self.ring.turn(false);
        }
        Poll::Pending
    }

    /// The operation, if it is done or adrift: its slot freed.
    fn take_if_over(&mut self) -> Option<Polled> {
        let mut state = self.ring.state.lock().unpoisoned();
        let res = match state.slots[self.key].phase {
            Phase::Done(res) => Some(res),
            Phase::Adrift => None,
            Phase::Backlog | Phase::InKernel => return None,
        };
        let slot = state.slots.remove(self.key);
        drop(state);
        // Taken: `Drop` has nothing left to do.
        self.key = usize::MAX;
        self.watch = None;
        let operation = slot.operation.expect("over with its operation");
        drop(slot.waker);
        Some(match res {
            Some(res) => Polled::Done(operation, res),
            None => Polled::Again(operation),
        })
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        // Its watch, if any, goes first: it would only reap.
        self.watch = None;
        if self.key == usize::MAX {
            return;
        }
        let mut state = self.ring.state.lock().unpoisoned();
        let slot = &mut state.slots[self.key];
        // The waker, and what the operation owns, are dropped after the
        // lock (see `poll`).
        let waker;
        let mut released = None;
        match slot.phase {
            Phase::Done(res) => {
                let slot = state.slots.remove(self.key);
                drop(state);
                waker = slot.waker;
                if let Some(operation) = slot.operation {
                    operation.discard(res);
                }
            }
            Phase::Adrift => {
                let slot = state.slots.remove(self.key);
                drop(state);
                waker = slot.waker;
                released = slot.operation;
            }
            Phase::Backlog => {
                // Not asked of the kernel: its buffer and file go now, its
                // slot when the backlog reaches it.
                slot.dropped = true;
                waker = slot.waker.take();
                released = slot.operation.take();
                drop(state);
            }
            Phase::InKernel => {
                slot.dropped = true;
                waker = slot.waker.take();
                // Cancelled now, not at the next turn of the loop: a read of
                // a stream would take data that comes meanwhile.
                if self.ring.owned_here() {
                    state.cancels.push(self.key);
                    self.ring.submit(&mut state);
                } else if !sync_cancel(&state, self.key) {
                    state.cancels.push(self.key);
                    self.ring.wake_loop(&state);
                }
                drop(state);
            }
        }
        drop(waker);
        drop(released);
    }
}

/// Cancels the request `key` from a thread that is not the ring's owner,
/// without a submission (`IORING_REGISTER_SYNC_CANCEL`, not waiting for it
/// to end): true if the kernel found it, false if it did not (it completed,
/// or was not submitted yet) or cannot (a kernel before 6.0), and the
/// owner must send the cancel.
fn sync_cancel(state: &State, key: usize) -> bool {
    let outcome = state.ring.submitter().register_sync_cancel(
        Some(types::Timespec::new()),
        types::CancelBuilder::user_data(key as u64),
    );
    match outcome {
        Ok(()) => true,
        // Found, and told to stop; it ends in its own time.
        Err(err) => err.raw_os_error() == Some(libc::ETIME),
    }
}

fn warn_once(err: &std::io::Error) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        glib::g_warning!(
            "gdex",
            "gdex::aio: cannot set up an io_uring ring for this context ({}); its operations run on the blocking lane",
            err
        )
    });
}
