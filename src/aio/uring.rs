//! The io_uring backend: one ring per `GMainContext` that operations are
//! awaited on, polled by one source on that context.
//!
//! A ring's state sits behind one mutex. Only the thread that iterates the
//! context (the pool worker, the main thread) normally takes it, so it is
//! uncontended; it is there because a context may be iterated by another
//! thread than the one that polls an operation (a thread parked in
//! `gdex::wait_for` waits on the `gdex-timers` context's ring, which that
//! thread reaps).
//!
//! The life of an operation, by its slot in the ring's slab (the slab key is
//! the request's `user_data`):
//!
//! 1. [`InFlight::start`] puts the operation in a slot and at the back of
//!    the backlog; if another thread iterates the context, it wakes it.
//! 2. The source's `prepare` ([`Hooks::ready`]) moves the backlog into the
//!    submission queue, as long as fewer requests are in flight than the
//!    completion queue holds, and submits them all in one `io_uring_enter`:
//!    this is the batching per loop iteration. The ring's fd polls readable
//!    while completions wait.
//! 3. The source's `dispatch` reaps every completion: it stores the result
//!    in the slot and wakes the slot's waker; then it refills the
//!    submission queue from the backlog.
//! 4. The next poll of the future takes the operation and its result out of
//!    the slot.
//!
//! Dropping the future before 4 marks the slot dropped: a slot still in the
//! backlog is freed when the backlog reaches it (no request was made); one in
//! flight gets an `ASYNC_CANCEL` request, submitted there and then (unless
//! the ring is full, then at the next turn), and the slot (with its buffer
//! and file) is freed when the kernel's completion comes, whatever it says;
//! a completed one is freed at once. A ring whose last user is gone (its
//! source finalized with its context, and no operation left) cancels what
//! is still in flight and waits for the kernel to complete it before it
//! frees the buffers and closes the ring.

use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};

use io_uring::{opcode, squeue, types, IoUring};
use slab::Slab;

use super::Operation;
use crate::source::{Hooks, SourceRef};
use crate::util::Unpoisoned;

/// Submission queue entries per ring; the completion queue has twice as
/// many, and that is the cap on requests in flight (so the kernel never has
/// to hold completions back). Operations may take half of it, the other
/// half is kept for cancels: an operation that waits (a read of an empty
/// pipe) completes only when cancelled, so a ring full of them must still
/// take their cancels. More operations wait in the backlog.
const ENTRIES: u32 = 256;

/// The `user_data` of cancel requests, whose completions are not
/// operations'.
const CANCEL: u64 = u64::MAX;

/// Can this process set up a ring at all? (For [`super::backend`].)
pub(super) fn probe() -> std::io::Result<()> {
    IoUring::new(2).map(drop)
}

/// One context's ring.
pub(crate) struct Ring {
    state: Mutex<State>,
    /// The context's address: with `alive`, how a thread's cache knows the
    /// ring is still its context's.
    context: usize,
    /// True until the ring's source is finalized (its context is gone).
    alive: AtomicBool,
}

struct State {
    ring: IoUring,
    slots: Slab<Slot>,
    /// Operations not yet handed to the kernel, oldest first.
    backlog: VecDeque<usize>,
    /// Slots dropped in flight whose cancel request is not made yet.
    cancels: Vec<usize>,
    /// Requests (operations and cancels) in the kernel: submitted or in the
    /// submission queue, their completion not reaped.
    in_flight: usize,
    /// The operations (not cancels) among them: at most `cap / 2`.
    ops_in_flight: usize,
    /// The cap on `in_flight`: the completion queue's size.
    cap: usize,
}

struct Slot {
    operation: Option<Operation>,
    phase: Phase,
    waker: Option<Waker>,
    /// The future is gone: nobody will take the result.
    dropped: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Backlog,
    InKernel,
    Done(i32),
}

/// The rings of every context that has one, for the threads whose cache
/// misses (each thread caches its last one).
static RINGS: Mutex<Vec<(usize, Weak<Ring>)>> = Mutex::new(Vec::new());

thread_local! {
    /// This thread's last ring, by context address. Weak: the ring goes
    /// with its context's source (and the last operation on it), not with
    /// this thread (its io_uring fd and memory would stay until the thread
    /// used another ring, or exited).
    static CACHE: std::cell::RefCell<Weak<Ring>> = const { std::cell::RefCell::new(Weak::new()) };
}

impl Ring {
    /// The ring of `context`, made (with its source) on first use.
    fn of(context: &glib::MainContext) -> std::io::Result<Arc<Ring>> {
        let address = context.as_ptr() as usize;
        let usable =
            |ring: &Arc<Ring>| ring.context == address && ring.alive.load(Ordering::Acquire);
        // `context` is alive (we hold it), so a live ring at its address is
        // its own: a ring's source is finalized with its context.
        if let Some(ring) = CACHE.with_borrow(|cache| cache.upgrade()) {
            if usable(&ring) {
                return Ok(ring);
            }
        }
        let mut rings = RINGS.lock().unpoisoned();
        rings.retain(|(_, ring)| {
            ring.upgrade()
                .is_some_and(|ring| ring.alive.load(Ordering::Acquire))
        });
        let found = rings
            .iter()
            .filter(|(at, _)| *at == address)
            .find_map(|(_, ring)| ring.upgrade());
        let ring = match found {
            Some(ring) => ring,
            None => {
                let ring = Arc::new(Ring::new(address)?);
                crate::diagnostics::stall::add_context_service(service);
                let fd = ring.state.lock().unpoisoned().ring.as_raw_fd();
                // The context holds the source, the source holds the ring:
                // both go when the context does. Just above the default
                // priority: in a turn where both are ready, completions are
                // reaped (and their tasks woken) before a pool worker's
                // source runs its queue, which then has them.
                let source = SourceRef::attach_fd(
                    context,
                    Box::new(RingSource(ring.clone())),
                    true,
                    fd,
                    glib::IOCondition::IN,
                    c"[gdex aio]",
                    glib::ffi::G_PRIORITY_DEFAULT - 1,
                );
                drop(source);
                rings.push((address, Arc::downgrade(&ring)));
                ring
            }
        };
        CACHE.with_borrow_mut(|cache| *cache = Arc::downgrade(&ring));
        Ok(ring)
    }

    /// One turn of the ring's work, from its source's `dispatch` or from
    /// the monitor ([`service`]): hands the kernel what is queued, reaps
    /// every completion, hands it more of the backlog (room was freed), and
    /// wakes the finished operations' tasks outside the lock. A waker that
    /// panics goes to the panic handler (X5); the others are woken all the
    /// same (their operations are done, and a lost wake-up would leave
    /// their tasks waiting forever).
    fn turn(&self) {
        let mut wakers = Vec::new();
        {
            let mut state = self.state.lock().unpoisoned();
            if state.has_work() {
                state.submit();
            }
            state.reap(&mut wakers);
            if state.has_work() {
                state.submit();
            }
        }
        for waker in wakers {
            crate::diagnostics::panic::wake(waker);
        }
    }

    fn new(context: usize) -> std::io::Result<Ring> {
        let ring = IoUring::builder().setup_clamp().build(ENTRIES)?;
        let cap = ring.params().cq_entries() as usize;
        Ok(Ring {
            state: Mutex::new(State {
                ring,
                slots: Slab::new(),
                backlog: VecDeque::new(),
                cancels: Vec::new(),
                in_flight: 0,
                ops_in_flight: 0,
                cap,
            }),
            context,
            alive: AtomicBool::new(true),
        })
    }
}

impl State {
    /// Hands the kernel what it can take: cancels first, then the backlog,
    /// up to the cap, in one submission.
    fn submit(&mut self) {
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
            self.in_flight += 1;
            self.ops_in_flight += 1;
            pushed += 1;
        }
        drop(queue);
        if pushed > 0 || !self.ring.submission().is_empty() {
            match self.ring.submit() {
                Ok(_) => {}
                // The kernel is short of memory, or busy with completions:
                // the entries stay queued and go with the next submission.
                Err(err)
                    if matches!(
                        err.raw_os_error(),
                        Some(libc::EAGAIN | libc::EBUSY | libc::EINTR)
                    ) => {}
                Err(err) => glib::g_critical!("gdex", "io_uring submission failed: {}", err),
            }
        }
    }

    /// Reaps every completion; gives the wakers of the operations that
    /// finished.
    fn reap(&mut self, wakers: &mut Vec<Waker>) {
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
                slot.operation
                    .expect("in flight with its operation")
                    .discard(res);
            } else {
                slot.phase = Phase::Done(res);
                wakers.extend(slot.waker.take());
            }
        }
    }

    fn has_completions(&mut self) -> bool {
        !self.ring.completion().is_empty()
    }

    /// Is there anything to hand the kernel: cancels, backlog, or entries
    /// left in the submission queue by a submission that failed
    /// (`EAGAIN`, `EBUSY`, `EINTR`), which nothing else would retry?
    fn has_work(&mut self) -> bool {
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
            ..
        } => opcode::OpenAt::new(types::Fd(libc::AT_FDCWD), c_path.as_ptr())
            .flags(*flags)
            .mode(*mode)
            .build(),
        Operation::Read { file, buf, offset } => {
            let len = super::read_len(buf) as u32;
            // SAFETY: `len` is at most the spare capacity, so the pointer
            // one past the initialised part is inside the allocation.
            let spare = unsafe { buf.as_mut_ptr().add(buf.len()) };
            opcode::Read::new(types::Fd(file.fd.as_raw_fd()), spare, len)
                .offset(*offset)
                .build()
        }
        Operation::Write { file, buf, offset } => opcode::Write::new(
            types::Fd(file.fd.as_raw_fd()),
            buf.as_ptr(),
            super::write_len(buf) as u32,
        )
        .offset(*offset)
        .build(),
    }
}

/// The hooks of a ring's source.
struct RingSource(Arc<Ring>);

impl Hooks for RingSource {
    /// Called as the context prepares to poll (and checks after): submit
    /// what this turn of the loop queued; dispatch if completions wait.
    fn ready(&self) -> bool {
        let mut state = self.0.state.lock().unpoisoned();
        if state.has_work() {
            state.submit();
        }
        state.has_completions()
    }

    fn dispatch(&self, _source: *mut glib_sys::GSource) -> bool {
        self.0.turn();
        true
    }
}

impl Drop for RingSource {
    fn drop(&mut self) {
        self.0.alive.store(false, Ordering::Release);
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Every future is gone (each holds the ring): cancel what is in the
        // kernel and wait for it, so that no buffer is freed under a request.
        let state = self.state.get_mut().unpoisoned();
        let in_kernel: Vec<usize> = state
            .slots
            .iter()
            .filter(|(_, slot)| slot.phase == Phase::InKernel)
            .map(|(key, _)| key)
            .collect();
        state.cancels.extend(in_kernel);
        state.backlog.clear();
        let mut wakers = Vec::new();
        while state.in_flight > 0 || !state.cancels.is_empty() {
            state.submit();
            if state.in_flight > 0 {
                if let Err(err) = state.ring.submit_and_wait(1) {
                    if err.raw_os_error() != Some(libc::EINTR) {
                        glib::g_critical!(
                            "gdex",
                            "io_uring: waiting for cancelled requests failed ({}); leaking their buffers",
                            err
                        );
                        std::mem::forget(std::mem::take(&mut state.slots));
                        return;
                    }
                }
            }
            state.reap(&mut wakers);
        }
        debug_assert!(wakers.is_empty(), "no future is left to wake");
        // Slots that never reached the kernel: nothing to wait for.
        for slot in state.slots.drain() {
            if let (Some(operation), Phase::Done(res)) = (slot.operation, slot.phase) {
                operation.discard(res);
            }
        }
    }
}

/// Does the ring's work for `context` from this thread: submits what is
/// queued and reaps what completed, waking the operations' tasks. For the
/// pool's monitor, when the worker that iterates `context` has sat in one
/// poll (a CPU-bound job, a call in `blocking::blocking`): the operations
/// queued on its ring would otherwise not even reach the kernel until that
/// poll ends, though their tasks could run on an idle peer (as its overdue
/// timers are raised for one, issue 19 point 1). The ring's state is
/// behind its mutex, so any thread may do this; the worker's own source
/// then finds nothing left to reap.
pub(crate) fn service(context: &glib::MainContext) {
    let address = context.as_ptr() as usize;
    let ring = RINGS
        .lock()
        .unpoisoned()
        .iter()
        .filter(|(at, _)| *at == address)
        .find_map(|(_, ring)| ring.upgrade());
    let Some(ring) = ring.filter(|ring| ring.alive.load(Ordering::Acquire)) else {
        return;
    };
    ring.turn();
}

/// An operation handed to a ring, as its future holds it.
pub(crate) struct InFlight {
    ring: Arc<Ring>,
    key: usize,
    /// The ring's context, to wake it when this thread does not iterate it.
    context: glib::MainContext,
}

impl InFlight {
    /// Queues `operation` on the ring of the context this thread waits on;
    /// gives the operation back if that ring cannot be set up (the caller
    /// then runs it on the blocking lane).
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
                waker: Some(waker),
                dropped: false,
            });
            state.backlog.push_back(key);
            key
        };
        let in_flight = InFlight { ring, key, context };
        in_flight.nudge();
        Ok(in_flight)
    }

    /// Makes sure the context's next `prepare` comes soon: if this thread
    /// iterates it (we are in one of its turns), by noting that the turn
    /// has work (a pool worker that runs dry then takes it at once);
    /// otherwise by waking the context.
    fn nudge(&self) {
        if self.context.is_owner() {
            crate::current::note_loop_work();
        } else {
            self.context.wakeup();
        }
    }

    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<(Operation, i32)> {
        let mut state = self.ring.state.lock().unpoisoned();
        let slot = &mut state.slots[self.key];
        match slot.phase {
            Phase::Done(res) => {
                let slot = state.slots.remove(self.key);
                // Taken: `Drop` has nothing left to do.
                self.key = usize::MAX;
                Poll::Ready((slot.operation.expect("done with its operation"), res))
            }
            _ => {
                if slot.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    return Poll::Pending;
                }
                drop(state);
                // The new waker is cloned, and the old one dropped, outside
                // the lock: dropping a waker may drop what it owns (a simple
                // executor's task, and with it its future), which may be
                // another operation of this ring, whose drop takes the lock.
                let new = cx.waker().clone();
                let mut state = self.ring.state.lock().unpoisoned();
                let slot = &mut state.slots[self.key];
                if let Phase::Done(_) = slot.phase {
                    // Completed meanwhile (its waker, the old one, taken
                    // and woken): take the result now.
                    drop(state);
                    drop(new);
                    return self.poll(cx);
                }
                let old = slot.waker.replace(new);
                drop(state);
                drop(old);
                Poll::Pending
            }
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.key == usize::MAX {
            return;
        }
        let mut state = self.ring.state.lock().unpoisoned();
        let slot = &mut state.slots[self.key];
        // The waker is dropped after the lock (see `poll`).
        let waker;
        match slot.phase {
            Phase::Done(res) => {
                let slot = state.slots.remove(self.key);
                drop(state);
                waker = slot.waker;
                if let Some(operation) = slot.operation {
                    operation.discard(res);
                }
            }
            Phase::Backlog => {
                // Freed when the backlog reaches it.
                slot.dropped = true;
                waker = slot.waker.take();
                drop(state);
            }
            Phase::InKernel => {
                slot.dropped = true;
                waker = slot.waker.take();
                // Cancelled now, not at the next turn of the loop: a read of
                // a stream would take data that comes meanwhile.
                state.cancels.push(self.key);
                state.submit();
                let later = state.has_work();
                drop(state);
                if later {
                    self.nudge();
                }
            }
        }
        drop(waker);
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

#[cfg(test)]
mod tests {
    use std::future::Future as _;

    use super::*;

    /// The slots a context's ring holds (operations not yet taken).
    fn held(context: &glib::MainContext) -> usize {
        let ring = Ring::of(context).unwrap();
        let state = ring.state.lock().unpoisoned();
        state.slots.len()
    }

    /// A read dropped while the kernel waits on it (a pipe with no data)
    /// is cancelled, and its buffer stays with the ring until the kernel's
    /// completion comes; the data written afterwards is still in the pipe.
    #[test]
    fn a_read_dropped_in_flight_is_cancelled_and_its_buffer_kept_until_it_completes() {
        if super::super::backend() != super::super::Backend::IoUring {
            return; // nothing to cancel on the blocking lane
        }
        let context = glib::MainContext::new();
        context
            .with_thread_default(|| {
                let _owner = context.acquire().unwrap();
                let (reader, writer) = std::io::pipe().unwrap();
                let file = super::super::File::from(std::os::fd::OwnedFd::from(reader));
                let mut read = Box::pin(file.read_at(Vec::with_capacity(16), 0));
                let mut cx = Context::from_waker(Waker::noop());
                assert!(read.as_mut().poll(&mut cx).is_pending());
                // One turn of the loop submits it; the pipe has no data.
                context.iteration(false);
                assert!(read.as_mut().poll(&mut cx).is_pending());
                assert_eq!(held(&context), 1);
                drop(read);
                // The cancel went in with the drop; the completion of the
                // read (cancelled) frees the slot when it is reaped.
                assert_eq!(
                    held(&context),
                    1,
                    "the buffer stays until the completion is reaped"
                );
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                while held(&context) > 0 {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "the cancelled read never completed"
                    );
                    context.iteration(false);
                }
                use std::io::{Read, Write};
                let mut writer = writer;
                writer.write_all(b"still here").unwrap();
                drop(writer);
                let mut rest = String::new();
                let mut reader = std::fs::File::from(file.inner.fd.try_clone().unwrap());
                reader.read_to_string(&mut rest).unwrap();
                assert_eq!(rest, "still here", "the cancelled read took nothing");
            })
            .unwrap();
    }
}
