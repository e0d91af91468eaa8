//! The io_uring backend: one ring per `GMainContext` that operations are
//! awaited on, polled by one source on that context.
//!
//! # Who submits (A2)
//!
//! Only the ring's *owner*, the thread that iterates its context (the last
//! one to run its source), hands requests to the kernel: the kernel ties
//! the work it queues for a request (its io-wq) to the submitting thread,
//! and when that thread exits the work ends with a kernel-internal error
//! (`-ERESTARTSYS`), or the thread's exit waits for it. So an operation is
//! queued by whatever thread polls it, and submitted by the owner's source
//! in its `prepare`; another thread that needs the owner (it queued an
//! operation, or dropped one whose cancel waits) wakes the owner's loop
//! through a second, ready-time source. A dropped operation in the kernel
//! is cancelled by a non-owner with `IORING_REGISTER_SYNC_CANCEL`, a
//! register call that submits nothing (kernels before 6.0: the owner sends
//! the cancel at its next turn). A thread that exits stops the requests it
//! submitted first (`ring::Owned`, [`Ring::stop_for_exit`]): its exit would
//! otherwise wait for their work (an open of a FIFO waits for the other
//! end), or the kernel would end them with `-ECANCELED` or a restart code.
//! An operation stopped so, whose future is still alive, starts again where
//! it is next polled, as an interrupted system call is restarted; no such
//! code reaches the user.
//!
//! # An operation follows its poller (A2)
//!
//! The life of an operation, by its slot in the ring's slab (the slab key is
//! the request's `user_data`):
//!
//! 1. [`InFlight::start`] puts the operation in a slot and at the back of
//!    the backlog of the ring of the context the polling thread waits on;
//!    if another thread iterates the context, it wakes it.
//! 2. The source's `prepare` ([`Hooks::ready`]) moves the backlog into the
//!    submission queue, as long as fewer requests are in flight than the
//!    completion queue holds, and submits them all in one `io_uring_enter`:
//!    this is the batching per loop iteration. What the kernel does not
//!    take (`EAGAIN`, `EBUSY`: a passing refusal) is taken back out of the
//!    submission queue, to the front of the backlog, and tried again a
//!    millisecond later: the queue is empty between submissions, so an
//!    operation the kernel refused is in the backlog, where it follows its
//!    poller (below), not stranded in a queue that only a loop which may
//!    have stopped would submit. The ring's fd polls readable while
//!    completions wait.
//! 3. The source's `dispatch` reaps every completion: it stores the result
//!    in the slot and wakes the slot's waker; then it refills the
//!    submission queue from the backlog.
//! 4. The next poll of the future takes the operation and its result out of
//!    the slot.
//!
//! A poll on another context than the ring's (the task moved to another
//! worker, its pool is gone, a `block_on` loop stopped and the future is
//! awaited with `wait_for`) moves the operation: one still in the backlog
//! leaves it and starts again on the poller's ring; one in the kernel stays
//! there (a request cannot move), and the poller's context watches the old
//! ring's fd and reaps it, so the completion comes whether or not the old
//! loop still runs. The pool's monitor hands the backlog of a worker stuck
//! in one long poll back to its operations' tasks, which then start them
//! on the peer that runs them.
//!
//! Dropping the future before 4 marks the slot dropped: a slot still in the
//! backlog is freed when the backlog reaches it (its buffer and file at
//! once); one in flight is cancelled (see above), and the slot (with its
//! buffer and file) is freed when the kernel's completion comes, whatever
//! it says; a completed one is freed at once. A ring whose last user is
//! gone (its source finalized with its context, and no operation left)
//! cancels what is still in flight and waits for the kernel to complete it
//! before it frees the buffers and closes the ring.
//!
//! [`Ring::stop_for_exit`]: ring::Ring::stop_for_exit
//! [`Hooks::ready`]: crate::source::Hooks::ready
//!
//! The parts: the ring's book of operations and what it hands the kernel
//! (`state.rs`); one context's ring, its owner, its sources and its life
//! (`ring.rs`); an operation handed to a ring, as its future holds it
//! (`in_flight.rs`).

mod in_flight;
mod ring;
mod state;

use io_uring::IoUring;

pub(crate) use in_flight::{InFlight, Polled};

/// Can this process set up a ring at all? (For [`super::backend`].)
pub(super) fn probe() -> std::io::Result<()> {
    IoUring::new(2).map(drop)
}
