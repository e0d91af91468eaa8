//! A ring's book ([`State`]): its operations' slots and their phases, the
//! backlog, the cancels, and what it hands the kernel (submission entries,
//! up to the cap on requests in flight) and takes back (completions).

use std::cell::Cell;
use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
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
    /// Submissions on this thread that offer the kernel only the first
    /// entry queued: how a unit test stands for a kernel that took part of
    /// a submission (it ran short of memory after the first).
    pub(super) static TAKE_ONE: Cell<usize> = const { Cell::new(0) };
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
    /// What the submission being made put in the submission queue, in
    /// order (kept for its capacity): what is taken back of it if the
    /// kernel does not take it all.
    pub(super) queued: Vec<Queued>,
    /// The submission queue's head and tail, to take back what the kernel
    /// did not take.
    pub(super) ends: SqEnds,
}

/// An entry put in the submission queue by the submission being made.
#[derive(Clone, Copy)]
pub(super) enum Queued {
    /// The operation in this slot.
    Op(usize),
    /// The cancel of the request of this slot.
    Cancel(usize),
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
    /// Not handed to the kernel yet (or refused by it: see
    /// [`State::submit`]).
    Backlog,
    /// Taken by the kernel: never merely left in the submission queue.
    InKernel,
    Done(i32),
    /// Out of the backlog and not in the kernel: handed back by the
    /// monitor, or stopped by the kernel before it ran. Its next poll
    /// starts it again, on the poller's ring.
    Adrift,
}

impl State {
    /// Hands the kernel what it can take: cancels first, then the backlog,
    /// up to the cap, in one submission. What the kernel does not take (a
    /// passing failure: `EAGAIN`, the kernel is short of memory; `EBUSY`,
    /// completions must be reaped first; or any other error) is taken back
    /// out of the submission queue: its operations go back to the front of
    /// the backlog, its cancels back to the cancels. True if something was
    /// taken back, to be submitted again soon. `EINTR` is retried at once.
    ///
    /// So the submission queue is empty whenever the lock is free, and an
    /// operation is `InKernel` only once the kernel has it: one the kernel
    /// refused is in the backlog, where it follows its poller and where the
    /// pool's monitor and its thread's exit hand it back to its task (A2).
    /// Left in the submission queue, it would wait for the owner's next
    /// submission, which never comes if that loop stopped.
    pub(super) fn submit(&mut self) -> bool {
        self.queued.clear();
        let mut queue = self.ring.submission();
        debug_assert!(
            queue.is_empty(),
            "the submission queue is empty between submissions"
        );
        while self.in_flight < self.cap && !queue.is_full() {
            let Some(key) = self.cancels.pop() else { break };
            let entry = opcode::AsyncCancel::new(key as u64)
                .build()
                .user_data(CANCEL);
            // SAFETY: a cancel request refers to no memory.
            unsafe { queue.push(&entry) }.expect("checked: the queue is not full");
            self.in_flight += 1;
            self.queued.push(Queued::Cancel(key));
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
            self.queued.push(Queued::Op(key));
        }
        drop(queue);
        if self.queued.is_empty() {
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
            #[cfg(test)]
            let take_one = TAKE_ONE.with(|take| {
                let left = take.get();
                take.set(left.saturating_sub(1));
                left > 0
            });
            #[cfg(not(test))]
            let take_one = false;
            let submitted = if injected {
                Err(std::io::Error::from_raw_os_error(libc::EAGAIN))
            } else if take_one {
                // SAFETY: the entries are valid (see the pushes above); a
                // plain submission of the first of them, no argument.
                unsafe { self.ring.submitter().enter::<libc::sigset_t>(1, 0, 0, None) }
            } else {
                self.ring.submit()
            };
            match submitted {
                Ok(_) => break,
                Err(err) if err.raw_os_error() == Some(libc::EINTR) => continue,
                // The kernel is short of memory, or busy with completions:
                // what it did not take goes with the next submission.
                Err(err) if matches!(err.raw_os_error(), Some(libc::EAGAIN | libc::EBUSY)) => break,
                Err(err) => {
                    glib::g_critical!("gdex", "io_uring submission failed: {}", err);
                    break;
                }
            }
        }
        self.take_back()
    }

    /// Takes what the kernel did not take of the submission just made out
    /// of the submission queue (see [`State::submit`]); true if there was
    /// any. The kernel takes entries in order, from the queue's head: those
    /// left are the last ones queued.
    fn take_back(&mut self) -> bool {
        let left = self.ring.submission().len();
        if left == 0 {
            return false;
        }
        let Some(first_left) = self.queued.len().checked_sub(left) else {
            // Cannot be: the queue was empty when this submission began.
            glib::g_critical!(
                "gdex",
                "io_uring: {} entries left in the submission queue, {} queued",
                left,
                self.queued.len()
            );
            return true;
        };
        // Nothing reads the queue meanwhile: the kernel reads it only in
        // `io_uring_enter` (no SQPOLL), made under the lock this thread
        // holds, and no `SubmissionQueue` is borrowed (its drop would store
        // its own tail).
        self.ends.rewind();
        debug_assert!(self.ring.submission().is_empty());
        for queued in self.queued.drain(first_left..).rev() {
            self.in_flight -= 1;
            match queued {
                Queued::Cancel(key) => self.cancels.push(key),
                Queued::Op(key) => {
                    self.ops_in_flight -= 1;
                    let slot = &mut self.slots[key];
                    slot.phase = Phase::Backlog;
                    slot.submitter = 0;
                    self.backlog.push_front(key);
                }
            }
        }
        true
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

    /// Is there anything to hand the kernel: cancels or backlog (where a
    /// submission the kernel refused put its entries back)?
    pub(super) fn has_work(&mut self) -> bool {
        !self.backlog.is_empty() || !self.cancels.is_empty()
    }
}

/// The kernel's `io_sqring_offsets` (`linux/io_uring.h`).
#[repr(C)]
struct SqOffsets {
    head: u32,
    tail: u32,
    ring_mask: u32,
    ring_entries: u32,
    flags: u32,
    dropped: u32,
    array: u32,
    resv1: u32,
    user_addr: u64,
}

/// The kernel's `io_uring_params` (`linux/io_uring.h`), whose layout
/// `io_uring::Parameters` wraps (`#[repr(transparent)]`, documented so).
#[repr(C)]
struct RawParams {
    sq_entries: u32,
    cq_entries: u32,
    flags: u32,
    sq_thread_cpu: u32,
    sq_thread_idle: u32,
    features: u32,
    wq_fd: u32,
    resv: [u32; 3],
    sq_off: SqOffsets,
    /// `io_cqring_offsets`, unused here.
    cq_off: [u32; 10],
}

const _: () =
    assert!(std::mem::size_of::<io_uring::Parameters>() == std::mem::size_of::<RawParams>());

/// The head and tail of a ring's submission queue, in a mapping of the
/// queue's ring of its own (the `io-uring` crate keeps its own private):
/// how [`State::submit`] takes back what the kernel did not take. Unmapped
/// when dropped.
pub(super) struct SqEnds {
    map: NonNull<libc::c_void>,
    len: usize,
    head: usize,
    tail: usize,
}

// SAFETY: the mapping is shared memory of the ring, not tied to a thread;
// `SqEnds` is used only through the `State` that holds it, under its
// ring's lock.
unsafe impl Send for SqEnds {}

impl SqEnds {
    pub(super) fn of(ring: &IoUring) -> std::io::Result<SqEnds> {
        let params = ring.params();
        // SAFETY: `Parameters` is `#[repr(transparent)]` over the kernel's
        // `io_uring_params`, whose layout (a stable kernel ABI) `RawParams`
        // spells, of the same size (checked above).
        let raw = unsafe { &*std::ptr::from_ref(params).cast::<RawParams>() };
        if raw.sq_entries != params.sq_entries() || raw.cq_entries != params.cq_entries() {
            return Err(std::io::Error::other(
                "io_uring::Parameters is not laid out as io_uring_params",
            ));
        }
        let off = &raw.sq_off;
        let len = off.array as usize + raw.sq_entries as usize * std::mem::size_of::<u32>();
        let (head, tail) = (off.head as usize, off.tail as usize);
        let fits = |at: usize| at.is_multiple_of(4) && at + 4 <= len;
        if !fits(head) || !fits(tail) {
            return Err(std::io::Error::other(
                "io_uring: the submission queue's head or tail is outside its ring",
            ));
        }
        // SAFETY: maps the ring's submission queue ring (`IORING_OFF_SQ_RING`,
        // offset 0) a second time, at an address the kernel picks, no
        // larger than the crate maps it; it aliases no Rust object.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                ring.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(SqEnds {
            map: NonNull::new(map).expect("mmap succeeded"),
            len,
            head,
            tail,
        })
    }

    fn at(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: `offset` is `head` or `tail`, checked in `of` to be a
        // 4-aligned `u32` inside the mapping, which lives as long as `self`;
        // the kernel and this process access both as 32-bit atomics.
        unsafe {
            &*self
                .map
                .as_ptr()
                .cast::<u8>()
                .add(offset)
                .cast::<AtomicU32>()
        }
    }

    /// Sets the tail back to the head: the entries the kernel did not take
    /// are no longer in the queue. The caller holds the ring's state (no
    /// `io_uring_enter` runs, no `SubmissionQueue` is borrowed).
    fn rewind(&self) {
        let head = self.at(self.head).load(Ordering::Acquire);
        self.at(self.tail).store(head, Ordering::Release);
    }
}

impl Drop for SqEnds {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `of`, of this length, used by nothing
        // else (`at` borrows `self`).
        unsafe { libc::munmap(self.map.as_ptr(), self.len) };
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
