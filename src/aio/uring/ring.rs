//! One context's ring ([`Ring`]): found or made for a context, owned by the
//! thread that iterates it, turned by its sources, stopped for its owner's
//! exit, and closed once its last user is gone.
//!
//! A ring's state sits behind one mutex. Only the thread that iterates the
//! context (the pool worker, the main thread) normally takes it, so it is
//! uncontended; it is there because other threads reap completions too (a
//! task polled on another context watches the ring, the pool's monitor
//! reaps a stuck worker's ring) and drop operations.
//!

use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::Waker;

use io_uring::{types, IoUring};
use slab::Slab;

use super::state::{this_thread, Phase, SqEnds, State};
use crate::source::{Hooks, SourceRef};
use crate::util::Unpoisoned;

/// Submission queue entries per ring; the completion queue has twice as
/// many, and that is the cap on requests in flight (so the kernel never has
/// to hold completions back). Operations may take half of it, the other
/// half is kept for cancels: an operation that waits (a read of an empty
/// pipe) completes only when cancelled, so a ring full of them must still
/// take their cancels. More operations wait in the backlog.
const ENTRIES: u32 = 256;

thread_local! {
    /// The rings this thread has owned, stopped when it exits.
    static OWNED: Owned = const { Owned(std::cell::RefCell::new(Vec::new())) };
}

/// The rings a thread has owned ([`Ring::claim`]); its drop, at the
/// thread's exit, stops what the thread handed the kernel on them, whether
/// it still owns them or not ([`Ring::stop_for_exit`]).
struct Owned(std::cell::RefCell<Vec<Weak<Ring>>>);

impl Drop for Owned {
    fn drop(&mut self) {
        for ring in self.0.take().iter().filter_map(Weak::upgrade) {
            ring.stop_for_exit();
        }
    }
}

/// One context's ring.
pub(crate) struct Ring {
    pub(super) state: Mutex<State>,
    /// The context's address: with `alive`, how a thread's cache knows the
    /// ring is still its context's.
    pub(super) context: usize,
    /// True until the ring's context is destroyed (cleared as GLib destroys
    /// its sources, before it frees the context: [`AliveGuard`]). Cleared
    /// under the state's lock: while a thread holds the lock and reads it
    /// true, the context's memory is still there; and a live ring whose
    /// context's address is that of a context held is that context's.
    pub(super) alive: AtomicBool,
    /// The thread that iterates the context ([`this_thread`]), the last to
    /// run the ring's source: the only one that submits (A2).
    owner: AtomicU64,
    /// A ready-time source on the context, which another thread sets to
    /// wake the owner's loop (for a queued operation, a cancel, a retry).
    /// It holds the ring weakly; the ring holds it, so it can be set after
    /// the context is gone (it then does nothing).
    wake: OnceLock<SourceRef>,
}

/// The rings of every context that has one, for the threads whose cache
/// misses (each thread caches its last one).
static RINGS: Mutex<Vec<(usize, Weak<Ring>)>> = Mutex::new(Vec::new());

thread_local! {
    /// The list a ring's turn gathers the wakers of completed operations
    /// in, kept empty between turns so that reaping does not allocate.
    static SPARE_WAKERS: std::cell::Cell<Vec<Waker>> = const { std::cell::Cell::new(Vec::new()) };
}

thread_local! {
    /// This thread's last ring, by context address. Weak: the ring goes
    /// with its context's source (and the last operation on it), not with
    /// this thread (its io_uring fd and memory would stay until the thread
    /// used another ring, or exited).
    static CACHE: std::cell::RefCell<Weak<Ring>> = const { std::cell::RefCell::new(Weak::new()) };
}

impl Ring {
    /// The ring of `context`, made (with its source) on first use.
    pub(super) fn of(context: &glib::MainContext) -> std::io::Result<Arc<Ring>> {
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
                let wake = SourceRef::attach(
                    context,
                    Box::new(WakeRing(Arc::downgrade(&ring))),
                    false,
                    c"[gdex aio wake]",
                    glib::ffi::G_PRIORITY_DEFAULT - 1,
                    false,
                );
                if ring.wake.set(wake).is_err() {
                    unreachable!("a new ring gets its wake source once");
                }
                // `alive` must turn false before the context's memory goes
                // (see `wake_loop_at`). A dying context frees its memory
                // first and finalizes its sources (the ring source's drop)
                // after; it destroys them before, which drops a source's
                // callback: this one, which never fires, clears `alive`.
                let guard = AliveGuard(Arc::downgrade(&ring));
                glib::timeout_source_new_seconds(
                    u32::MAX,
                    Some("[gdex aio alive]"),
                    glib::Priority::LOW,
                    move || {
                        let _ = &guard;
                        glib::ControlFlow::Continue
                    },
                )
                .attach(Some(context));
                if context.is_owner() {
                    ring.claim();
                }
                rings.push((address, Arc::downgrade(&ring)));
                ring
            }
        };
        CACHE.with_borrow_mut(|cache| *cache = Arc::downgrade(&ring));
        Ok(ring)
    }

    /// One turn of the ring's work, from one of its sources' `dispatch`
    /// (`owner`: on the thread that iterates the context) or from a thread
    /// that watches it: hands the kernel what is queued (the owner only),
    /// reaps every completion, hands it more of the backlog (room was
    /// freed), and wakes the finished operations' tasks outside the lock. A
    /// waker that panics goes to the panic handler (X5); the others are
    /// woken all the same (their operations are done, and a lost wake-up
    /// would leave their tasks waiting forever).
    pub(super) fn turn(self: &Arc<Self>, owner: bool) {
        // This thread's list from its last turn, emptied: a turn that
        // reaps allocates nothing (a wake-up that turns a ring again
        // before this one is done gets a new list).
        // (`try_with`: a thread's exit may turn a ring after its
        // thread-locals are gone.)
        let mut wakers = SPARE_WAKERS
            .try_with(std::cell::Cell::take)
            .unwrap_or_default();
        {
            let mut state = self.state.lock().unpoisoned();
            if owner {
                self.claim();
                if state.has_work() {
                    self.submit(&mut state);
                }
            }
            state.reap(&mut wakers);
            if owner && state.has_work() {
                self.submit(&mut state);
            }
        }
        for waker in wakers.drain(..) {
            crate::diagnostics::panic::wake(waker);
        }
        let _ = SPARE_WAKERS.try_with(|spare| spare.set(wakers));
    }

    /// For a context whose thread is stuck in one long poll: reaps the
    /// completions, and hands every operation still in the backlog back to
    /// its task, whose next poll (on a peer) starts it there.
    fn evict(&self) {
        let mut wakers = Vec::new();
        {
            let mut state = self.state.lock().unpoisoned();
            state.reap(&mut wakers);
            while let Some(key) = state.backlog.pop_front() {
                let slot = &mut state.slots[key];
                if slot.dropped {
                    state.slots.remove(key);
                    continue;
                }
                slot.phase = Phase::Adrift;
                wakers.extend(slot.waker.take());
            }
        }
        for waker in wakers {
            crate::diagnostics::panic::wake(waker);
        }
    }

    /// This thread is the one that iterates the context: the owner. The
    /// thread notes the ring, to stop what it handed the kernel when it
    /// exits ([`Owned`]).
    fn claim(self: &Arc<Self>) {
        let me = this_thread();
        if self.owner.load(Ordering::Relaxed) != me {
            self.owner.store(me, Ordering::Relaxed);
            // During the thread's exit the note is gone: nothing to add.
            let _ = OWNED.try_with(|owned| {
                let mut rings = owned.0.borrow_mut();
                rings.retain(|ring| ring.strong_count() > 0);
                rings.push(Arc::downgrade(self));
            });
        }
    }

    /// This thread, which owned the ring (and may still), exits. The
    /// kernel ties the work it queued for the requests this thread
    /// submitted (io-wq) to the thread: the thread's exit would wait for
    /// that work to end (an open of a FIFO waits for the other end, for
    /// good), or the work ends with a restart code. So the thread stops
    /// those requests first, with `IORING_REGISTER_SYNC_CANCEL` (waiting up
    /// to a second for each), whoever owns the ring now: another thread
    /// that iterates the context since submitted none of them. The stopped
    /// operations go back to their tasks, and so does the backlog if this
    /// thread still owns the ring: they start again where their tasks are
    /// next polled (A2).
    fn stop_for_exit(self: &Arc<Self>) {
        let me = this_thread();
        {
            let state = self.state.lock().unpoisoned();
            let mine: Vec<usize> = state
                .slots
                .iter()
                .filter(|(_, slot)| slot.phase == Phase::InKernel && slot.submitter == me)
                .map(|(key, _)| key)
                .collect();
            for key in mine {
                let _ = state.ring.submitter().register_sync_cancel(
                    Some(types::Timespec::new().sec(1)),
                    types::CancelBuilder::user_data(key as u64),
                );
            }
        }
        if self.owned_here() {
            self.evict();
        } else {
            // Another thread iterates the context: its backlog is that
            // thread's to submit. The stopped requests are reaped here, so
            // their tasks need not wait for that loop.
            self.turn(false);
        }
    }

    pub(super) fn owned_here(&self) -> bool {
        self.owner.load(Ordering::Relaxed) == this_thread()
    }

    /// Submits what is queued (the owner only), and if the kernel did not
    /// take all of it (`EAGAIN`, `EBUSY`: what it did not take is back in
    /// the backlog), comes back to it in a millisecond rather than when
    /// something else wakes the loop.
    pub(super) fn submit(&self, state: &mut State) {
        if state.submit() {
            self.wake_loop_at(state, glib::monotonic_time() + 1000);
        }
    }

    /// Wakes the owner's loop (its next turn submits what is queued).
    pub(super) fn wake_loop(&self, state: &State) {
        self.wake_loop_at(state, 0);
    }

    /// `state` is the held lock: under it, `alive` read true means the
    /// context is not yet freed (its [`AliveGuard`] clears `alive` under
    /// the same lock, before the context's memory goes), so setting
    /// the wake source's ready time touches a live context, or, once the
    /// context has let go of its sources, none.
    fn wake_loop_at(&self, _state: &State, time: i64) {
        if self.alive.load(Ordering::Acquire) {
            if let Some(wake) = self.wake.get() {
                wake.set_ready_time(time);
            }
        }
    }

    fn new(context: usize) -> std::io::Result<Ring> {
        let ring = IoUring::builder().setup_clamp().build(ENTRIES)?;
        let cap = ring.params().cq_entries() as usize;
        let ends = SqEnds::of(&ring)?;
        Ok(Ring {
            state: Mutex::new(State {
                ring,
                slots: Slab::new(),
                backlog: VecDeque::new(),
                cancels: Vec::new(),
                in_flight: 0,
                ops_in_flight: 0,
                cap,
                queued: Vec::new(),
                ends,
            }),
            context,
            alive: AtomicBool::new(true),
            owner: AtomicU64::new(0),
            wake: OnceLock::new(),
        })
    }
}

/// The hooks of a ring's source.
struct RingSource(Arc<Ring>);

impl Hooks for RingSource {
    /// Called as the context prepares to poll (and checks after), on the
    /// thread that iterates it, the owner: submit what this turn of the
    /// loop queued; dispatch if completions wait.
    fn ready(&self) -> bool {
        let ring = &self.0;
        ring.claim();
        let mut state = ring.state.lock().unpoisoned();
        if state.has_work() {
            ring.submit(&mut state);
        }
        state.has_completions()
    }

    fn dispatch(&self, _source: *mut glib_sys::GSource) -> bool {
        self.0.turn(true);
        true
    }
}

impl Drop for RingSource {
    fn drop(&mut self) {
        // Under the lock: see `Ring::wake_loop_at`. (Cleared already when
        // the context was destroyed, by its `AliveGuard`.)
        let _state = self.0.state.lock().unpoisoned();
        self.0.alive.store(false, Ordering::Release);
    }
}

/// Clears its ring's `alive` when dropped: held by the callback of a source
/// on the ring's context, so dropped when GLib destroys that source, while
/// the context is still there (a dying context finalizes its sources only
/// after it freed its own memory: too late for `wake_loop_at`).
struct AliveGuard(Weak<Ring>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        if let Some(ring) = self.0.upgrade() {
            // Under the lock: see `Ring::wake_loop_at`.
            let _state = ring.state.lock().unpoisoned();
            ring.alive.store(false, Ordering::Release);
        }
    }
}

/// The hooks of a ring's wake source: another thread set its ready time
/// for the owner to submit (or retry) what waits.
struct WakeRing(Weak<Ring>);

impl Hooks for WakeRing {
    fn dispatch(&self, source: *mut glib_sys::GSource) -> bool {
        // SAFETY: `dispatch` passes its own live source.
        unsafe { glib_sys::g_source_set_ready_time(source, -1) };
        if let Some(ring) = self.0.upgrade() {
            ring.turn(true);
        }
        true
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Every future is gone (each holds the ring): cancel what is in the
        // kernel and wait for it, so that no buffer is freed under a request.
        // Whichever thread drops the last reference sends these cancels:
        // a cancel completes inline and leaves no work in that thread's
        // name.
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

/// For the pool's monitor, when the worker that iterates `context` has sat
/// in one poll (a CPU-bound job, a call in `blocking::blocking`): the
/// operations queued on its ring would otherwise not even reach the kernel
/// until that poll ends, though their tasks could run on an idle peer (as
/// its overdue timers are raised for one). The monitor may not submit them
/// itself (only the owner submits, A2): it reaps what completed, and hands
/// the backlog back to the operations' tasks, which start them on the peer
/// that runs them.
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
    ring.evict();
}

#[cfg(test)]
mod tests;
