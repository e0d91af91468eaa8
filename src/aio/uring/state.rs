//! A ring's book ([`State`]): its operations' slots and their phases, the
//! backlog, the cancels, and what it hands the kernel (submission entries,
//! up to the cap on requests in flight) and takes back (completions).

use std::cell::Cell;
use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Waker;

use io_uring::{opcode, squeue, types, IoUring};
use slab::Slab;

use crate::aio::operation::Operation;

/// The `user_data` of cancel requests, whose completions are not
/// operations'.
const CANCEL: u64 = u64::MAX;

/// A number for this thread, unique for the life of the process (0 is no
/// thread): how a ring knows its owner.
pub(super) fn this_thread() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static ME: Cell<u64> = const { Cell::new(0) };
    }
    ME.with(|me| {
        if me.get() == 0 {
            me.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        me.get()
    })
}

/// Kernel results that say an operation was stopped before it did
/// anything, not that it failed: `-ECANCELED` (we cancel only dropped
/// operations, so for a live one the kernel did, at its submitter's exit),
/// `-EINTR` and the restart codes a signal leaves (`-ERESTARTSYS` and its
/// kin, which the kernel turns into a restart of a plain system call, but
/// io_uring hands over as they are). The operation starts again.
fn stopped_before_it_ran(res: i32) -> bool {
    const ERESTARTSYS: i32 = 512;
    const ERESTARTNOINTR: i32 = 513;
    const ERESTARTNOHAND: i32 = 514;
    const ERESTART_RESTARTBLOCK: i32 = 516;
    matches!(
        -res,
        libc::ECANCELED
            | libc::EINTR
            | ERESTARTSYS
            | ERESTARTNOINTR
            | ERESTARTNOHAND
            | ERESTART_RESTARTBLOCK
    )
}

#[cfg(test)]
thread_local! {
    /// Submissions on this thread that fail with `EAGAIN` before reaching
    /// the kernel: how a unit test stands for a kernel short of memory.
    pub(super) static FAIL_SUBMITS: Cell<usize> = const { Cell::new(0) };
}

pub(super) struct State {
    pub(super) ring: IoUring,
    pub(super) slots: Slab<Slot>,
    /// Operations not yet handed to the kernel, oldest first.
    pub(super) backlog: VecDeque<usize>,
    /// Slots dropped in flight whose cancel request is not made yet.
    pub(super) cancels: Vec<usize>,
    /// Requests (operations and cancels) in the kernel: submitted or in the
    /// submission queue, their completion not reaped.
    pub(super) in_flight: usize,
    /// The operations (not cancels) among them: at most `cap / 2`.
    pub(super) ops_in_flight: usize,
    /// The cap on `in_flight`: the completion queue's size.
    pub(super) cap: usize,
}

pub(super) struct Slot {
    pub(super) operation: Option<Operation>,
    pub(super) phase: Phase,
    /// The thread that handed it to the kernel ([`this_thread`]), while
    /// it is `InKernel`: the kernel ties the request's work to that thread,
    /// which stops it as it exits, whoever owns the ring then.
    pub(super) submitter: u64,
    pub(super) waker: Option<Waker>,
    /// The future is gone: nobody will take the result.
    pub(super) dropped: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    Backlog,
    InKernel,
    Done(i32),
    /// Out of the backlog and not in the kernel: handed back by the
    /// monitor, or stopped by the kernel before it ran. Its next poll
    /// starts it again, on the poller's ring.
    Adrift,
}

impl State {
    /// Hands the kernel what it can take: cancels first, then the backlog,
    /// up to the cap, in one submission. True if entries were left in the
    /// submission queue by a passing failure (`EAGAIN`: the kernel is short
    /// of memory; `EBUSY`: completions must be reaped first), to be
    /// submitted again soon. `EINTR` is retried at once.
    pub(super) fn submit(&mut self) -> bool {
        let mut queue = self.ring.submission();
        let mut pushed = 0usize;
        while self.in_flight < self.cap && !queue.is_full() {
            let Some(key) = self.cancels.pop() else { break };
            let entry = opcode::AsyncCancel::new(key as u64)
                .build()
                .user_data(CANCEL);
            // SAFETY: a cancel request refers to no memory.
            unsafe { queue.push(&entry) }.expect("checked: the queue is not full");
            self.in_flight += 1;
            pushed += 1;
        }
        // Operations take at most half the cap, so that cancels always find
        // room: if they do not, at least half the requests in flight are
        // cancels, which complete at once.
        while self.in_flight < self.cap && self.ops_in_flight < self.cap / 2 && !queue.is_full() {
            let Some(key) = self.backlog.pop_front() else {
                break;
            };
            let slot = &mut self.slots[key];
            if slot.dropped {
                // Dropped before it was asked for: nothing to wait for.
                self.slots.remove(key);
                continue;
            }
            let entry = entry(slot.operation.as_mut().expect("queued with its operation"))
                .user_data(key as u64);
            // SAFETY: the entry points into the operation's own buffers (and
            // path), and names its own file; the slot keeps the operation
            // (so all of them) until the request's completion is reaped,
            // even if its future is dropped, and nothing moves or resizes
            // them meanwhile.
            unsafe { queue.push(&entry) }.expect("checked: the queue is not full");
            slot.phase = Phase::InKernel;
            slot.submitter = this_thread();
            self.in_flight += 1;
            self.ops_in_flight += 1;
            pushed += 1;
        }
        drop(queue);
        if pushed == 0 && self.ring.submission().is_empty() {
            return false;
        }
        loop {
            #[cfg(test)]
            let injected = FAIL_SUBMITS.with(|fail| {
                let left = fail.get();
                fail.set(left.saturating_sub(1));
                left > 0
            });
            #[cfg(not(test))]
            let injected = false;
            let submitted = if injected {
                Err(std::io::Error::from_raw_os_error(libc::EAGAIN))
            } else {
                self.ring.submit()
            };
            match submitted {
                Ok(_) => return !self.ring.submission().is_empty(),
                Err(err) if err.raw_os_error() == Some(libc::EINTR) => continue,
                // The kernel is short of memory, or busy with completions:
                // the entries stay queued and go with the next submission.
                Err(err) if matches!(err.raw_os_error(), Some(libc::EAGAIN | libc::EBUSY)) => {
                    return true
                }
                Err(err) => {
                    glib::g_critical!("gdex", "io_uring submission failed: {}", err);
                    return !self.ring.submission().is_empty();
                }
            }
        }
    }

    /// Reaps every completion; gives the wakers of the operations that
    /// finished.
    pub(super) fn reap(&mut self, wakers: &mut Vec<Waker>) {
        for cqe in self.ring.completion() {
            self.in_flight -= 1;
            let key = cqe.user_data();
            if key == CANCEL {
                continue;
            }
            self.ops_in_flight -= 1;
            let key = key as usize;
            let res = cqe.result();
            let slot = &mut self.slots[key];
            if slot.dropped {
                let slot = self.slots.remove(key);
                // A cancel still waiting to be sent would hit the next
                // operation given this key.
                self.cancels.retain(|cancel| *cancel != key);
                slot.operation
                    .expect("in flight with its operation")
                    .discard(res);
            } else if stopped_before_it_ran(res) {
                slot.phase = Phase::Adrift;
                wakers.extend(slot.waker.take());
            } else {
                slot.phase = Phase::Done(res);
                wakers.extend(slot.waker.take());
            }
        }
    }

    pub(super) fn has_completions(&mut self) -> bool {
        !self.ring.completion().is_empty()
    }

    /// Is there anything to hand the kernel: cancels, backlog, or entries
    /// left in the submission queue by a submission that failed
    /// (`EAGAIN`, `EBUSY`, `EINTR`), which nothing else would retry?
    pub(super) fn has_work(&mut self) -> bool {
        !self.backlog.is_empty() || !self.cancels.is_empty() || !self.ring.submission().is_empty()
    }
}

/// The submission entry of an operation (its `user_data` still unset).
fn entry(operation: &mut Operation) -> squeue::Entry {
    match operation {
        Operation::Open {
            c_path,
            flags,
            mode,
            blocking,
            ..
        } => {
            let entry = opcode::OpenAt::new(types::Fd(libc::AT_FDCWD), c_path.as_ptr())
                .flags(*flags)
                .mode(*mode)
                .build();
            if *blocking {
                // Straight to the kernel's worker threads, which open as
                // `open(2)` does; the first, non-blocking try io_uring
                // makes otherwise does not wait for a FIFO's partner.
                entry.flags(squeue::Flags::ASYNC)
            } else {
                entry
            }
        }
        Operation::Read { file, buf, offset } => {
            let len = crate::aio::operation::read_len(buf) as u32;
            // SAFETY: `len` is at most the spare capacity, so the pointer
            // one past the initialised part is inside the allocation.
            let spare = unsafe { buf.as_mut_ptr().add(buf.len()) };
            opcode::Read::new(types::Fd(file.fd.as_raw_fd()), spare, len)
                .offset(*offset)
                .build()
        }
        Operation::Poll { fd } => {
            opcode::PollAdd::new(types::Fd(fd.as_raw_fd()), libc::POLLIN as u32).build()
        }
        Operation::Write {
            file,
            buf,
            from,
            offset,
        } => opcode::Write::new(
            types::Fd(file.fd.as_raw_fd()),
            buf[*from..].as_ptr(),
            crate::aio::operation::write_len(buf, *from) as u32,
        )
        .offset(*offset)
        .build(),
    }
}
