//! The fibers' own scheduler on a pool worker: a fiber that waits is
//! resumed by its thread directly, not through its task (F3).
//!
//! A fiber spawned on a pool is a task (its handle, its cancellation, its
//! record, its place in the shutdown: F1-F4, S9) whose first poll starts
//! it. From then on its waits do not go through the task: the future a
//! [`wait`](super::wait) polls gets the fiber's own waker, whose wake queues
//! a *resumption* of the fiber (a [`Job`] of one word) on the fiber's
//! worker, and the worker's run of that job switches straight into the
//! fiber. A switch from one fiber to another on a worker is then a queue
//! push, a pop and two stack switches, without the task core's two runs
//! (with their reference counts and state changes, their panic guard,
//! thread check and registry bookkeeping) that a task's wake and poll cost.
//!
//! # The cell
//!
//! A fiber's waker points at a [`FiberCell`]: its state, and how to resume
//! it. Cells are never freed: each worker thread takes them from chunks of
//! its own (4 KiB, 170 cells, which also say once for all of them which
//! thread and which worker's home they serve; a chunk whose thread exited
//! with all its cells free goes to the next thread that needs one), and
//! gives a fiber's back when the fiber's future drops. So a fiber's waker
//! is a plain pointer, with no reference count to take at each clone and
//! give back at each drop (on this machine an uncontended atomic
//! read-modify-write costs 8 ns, and a fiber's switch had ten of them). A
//! waker kept after its fiber ended finds the cell [`DONE`] and does
//! nothing, or, once the cell serves another fiber, wakes that one: a
//! spurious wake, which a fiber's wait survives as any future's poll does
//! (it polls its future again, and suspends again if it is not ready).
//!
//! What keeps the fiber's task alive while only such wakers know of it is
//! its worker's book of live fibers (F4), which holds a waker of the task
//! from the fiber's first suspension until its future drops.
//!
//! # States
//!
//! - [`DONE`] (also a cell that serves no fiber): wakes do nothing.
//! - [`RUNNING`]: the fiber runs, on its worker, inside its task's poll or
//!   a resumption; a wake then adds [`NOTIFIED`], and the wait that
//!   suspends it queues its resumption at once (a `yield_fiber`).
//! - [`WAITING`]: suspended in a wait; its first wake moves it to
//!   [`QUEUED`] and queues its resumption (on the worker's own queue from
//!   its own thread, else in its inbox with a directed wake-up, P6).
//! - [`QUEUED`]: a resumption is queued; further wakes only publish what
//!   they woke it for.
//!
//! A fiber that returns, panics or is dropped leaves its cell `DONE`; so
//! does its worker's exit, for a fiber whose future was never dropped on
//! its thread (leaked: [`retire_cells_out`]), so that a stale waker of it
//! never reads a freed pool.
//!
//! Every change of state that a wake may race is an atomic
//! read-modify-write, a wake's that changes nothing too: a resumption that
//! takes the fiber from `QUEUED` then sees what every wake before it
//! published, so the fiber's next poll of its future does. (Only a cell's
//! start, from `DONE`, which wakes leave alone, is a plain store.)
//!
//! A task's poll of a fiber that waits on this scheduler (its handle was
//! dropped, its worker shuts down) resumes it if it is [`WAITING`], and
//! does nothing otherwise (a queued resumption will run it, or it is
//! running and sees its cancellation at its next wait).

use std::cell::{Cell, RefCell};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::task::{RawWaker, RawWakerVTable, Waker};

use crate::task::{Job, OwnerHeader, WorkVtable};
use crate::util::thread_token;
use crate::util::Unpoisoned;

pub(crate) const RUNNING: u8 = 1;
pub(crate) const WAITING: u8 = 2;
pub(crate) const QUEUED: u8 = 3;
pub(crate) const DONE: u8 = 4;
/// With [`RUNNING`]: woken while it ran.
pub(crate) const NOTIFIED: u8 = 8;

/// A fiber's place on its worker's fiber scheduler (see the module docs):
/// 24 bytes, in a [`Chunk`] of one thread's cells.
pub(crate) struct FiberCell {
    state: AtomicU8,
    /// Wakes from other threads under way: the fiber's future, when it
    /// drops, waits for them to finish, so that none still uses its
    /// worker's home (its pool) once the fiber's task, which keeps that
    /// alive, may be freed. A wake counts itself only if the cell was not
    /// [`DONE`] when it began, so the wait is bounded by the wakes that
    /// began before the fiber's end, whatever wakes come after it.
    inflight: AtomicU32,
    /// How to resume the fiber outside its task's poll, and the future that
    /// it resumes. Used only on the fiber's worker.
    resume: Cell<Option<unsafe fn(*const ())>>,
    target: Cell<*const ()>,
}

// SAFETY: `state` and `inflight` are atomic; `resume` and `target` are
// written and read only on the thread of the fiber the cell serves, by
// `start` and a resumption (a waker on another thread never touches them),
// and a cell changes threads only with its chunk, through `SPARE`'s lock,
// when none of its cells serves a fiber.
unsafe impl Sync for FiberCell {}

impl FiberCell {
    const fn new() -> Self {
        FiberCell {
            state: AtomicU8::new(DONE),
            inflight: AtomicU32::new(0),
            resume: Cell::new(None),
            target: Cell::new(std::ptr::null()),
        }
    }

    /// The chunk this cell is in (chunks are aligned to their size).
    fn chunk(&self) -> &'static Chunk {
        let addr = (self as *const Self).addr() & !(CHUNK_BYTES - 1);
        // SAFETY: every cell is in a leaked (never freed) `Chunk`, aligned
        // to `CHUNK_BYTES`, which is its size: rounding a cell's address
        // down gives the chunk's.
        unsafe { &*(self as *const Self).with_addr(addr).cast::<Chunk>() }
    }
}

const CHUNK_BYTES: usize = 4096;
const CELLS: usize = (CHUNK_BYTES - 16) / std::mem::size_of::<FiberCell>();

/// One thread's cells, and what they share: the thread, and its worker's
/// home. Never freed; handed to another thread when its thread exits with
/// all its cells free.
#[repr(C, align(4096))]
struct Chunk {
    /// The home (`pool::Home`) of the worker whose fibers the cells serve,
    /// where a wake queues a resumption. Read by a waker only after it
    /// moved a fiber from `WAITING`, so while that fiber, whose task keeps
    /// the home alive, lives.
    home: AtomicPtr<OwnerHeader>,
    /// The [`thread_token`] of that worker's thread: a wake from it needs
    /// no [`inflight`](FiberCell::inflight) count.
    thread: AtomicU64,
    cells: [FiberCell; CELLS],
}

const _: () = assert!(std::mem::size_of::<Chunk>() == CHUNK_BYTES);

/// The chunks of threads that exited, for the next thread that needs one.
static SPARE: Mutex<Vec<&'static Chunk>> = Mutex::new(Vec::new());

/// A thread's chunks and its free cells. When the thread exits, a chunk all
/// of whose cells are free goes to [`SPARE`]; one with a cell still out (a
/// fiber dropped after this, during the thread's teardown) is left as it is.
struct Free {
    chunks: RefCell<Vec<&'static Chunk>>,
    cells: RefCell<Vec<&'static FiberCell>>,
}

impl Free {
    /// Retires every cell of this thread still out (see
    /// [`retire_cells_out`]); gives the chunks none of whose cells is out.
    fn retire_out(&self) -> Vec<&'static Chunk> {
        let free: std::collections::HashSet<usize> = self
            .cells
            .borrow()
            .iter()
            .map(|cell| (*cell as *const FiberCell).addr())
            .collect();
        let mut whole = Vec::new();
        for chunk in self.chunks.borrow().iter() {
            let mut out = 0;
            for cell in &chunk.cells {
                if !free.contains(&(cell as *const FiberCell).addr()) {
                    cell.retire();
                    out += 1;
                }
            }
            if out == 0 {
                whole.push(*chunk);
            }
        }
        whole
    }
}

impl Drop for Free {
    fn drop(&mut self) {
        // Usually done already by the worker's exit (`retire_cells_out`),
        // while its pool was sure to be alive; this is for a cell still
        // out whatever ended the thread.
        let whole = self.retire_out();
        self.chunks.get_mut().clear();
        self.cells.get_mut().clear();
        if !whole.is_empty() {
            SPARE.lock().unpoisoned().extend(whole);
        }
    }
}

/// This thread's worker exits, and runs no job from now on: a fiber whose
/// future has not been dropped here yet never will be (its task was woken
/// by a wake that straddled the exit past `LATE_WAKE`, and the reaper drops
/// its job on its own thread, where `ThreadBound` leaks the future; or its
/// task's block was leaked). Such a fiber's cell would stay `WAITING` or
/// `QUEUED` for good, with its `target` (in a block that may be freed) and
/// its chunk's `home` (in a pool that may be freed) still read by a wake:
/// each is retired instead, `DONE` once the wakes from other threads under
/// way have finished, so that a wake of a stale waker does nothing from
/// then on and no resumption reads the fiber again. Called while the pool
/// is alive (its worker thread holds it), before the wakes under way could
/// find it freed. The cells stay out (their chunk never serves another
/// thread), as a leaked future's memory does.
pub(crate) fn retire_cells_out() {
    let _ = FREE.try_with(|free| free.retire_out());
}

thread_local! {
    /// A fiber of this thread was woken from this thread since the last
    /// [`woken_here`]: its resumption is queued here (or it is the fiber
    /// running, which then does not wait), so a fiber about to suspend has
    /// no reason to watch for a wake from elsewhere (the worker has work).
    static WOKEN_HERE: Cell<bool> = const { Cell::new(false) };
    static FREE: Free = const {
        Free {
            chunks: RefCell::new(Vec::new()),
            cells: RefCell::new(Vec::new()),
        }
    };
}

/// Whether a fiber of this thread was woken from this thread since the
/// last call (see [`WOKEN_HERE`]); resets it.
#[inline]
pub(crate) fn woken_here() -> bool {
    WOKEN_HERE.replace(false)
}

/// How many of this thread's cells serve a fiber (taken, not given back).
pub(crate) fn cells_out() -> usize {
    FREE.try_with(|free| free.chunks.borrow().len() * CELLS - free.cells.borrow().len())
        .unwrap_or(0)
}

/// A cell for a fiber starting on this thread, a worker whose home is
/// `home`: one of its free cells, or of a spare chunk, or of a new one
/// (never freed). `None` during the thread's teardown.
fn take(home: NonNull<OwnerHeader>) -> Option<&'static FiberCell> {
    FREE.try_with(|free| {
        let mut cells = free.cells.borrow_mut();
        if cells.is_empty() {
            let spare = SPARE.lock().unpoisoned().pop();
            let chunk = spare.unwrap_or_else(|| {
                Box::leak(Box::new(Chunk {
                    home: AtomicPtr::new(std::ptr::null_mut()),
                    thread: AtomicU64::new(0),
                    cells: [const { FiberCell::new() }; CELLS],
                }))
            });
            // Every cell of the chunk is `DONE` (a new one's, or a spare
            // one's, whose thread gave them all back): no wake reads these.
            chunk.home.store(home.as_ptr(), Ordering::Relaxed);
            chunk.thread.store(thread_token(), Ordering::Relaxed);
            free.chunks.borrow_mut().push(chunk);
            cells.extend(chunk.cells.iter().rev());
        }
        cells.pop()
    })
    .ok()
    .flatten()
}

impl FiberCell {
    /// A cell for the fiber whose task's first poll runs now, with
    /// `task_waker`, on a worker whose home is `home`: the fiber's waits
    /// from now on get the fiber's waker, and a wake queues
    /// `resume(target)`. `None` if the task's waker is a tracked task's
    /// (O1: its fiber keeps its waits in its task's polls, so that the views
    /// see each of them) or the thread is being torn down.
    ///
    /// # Safety
    /// `target` stays valid for `resume` on this thread until the cell is
    /// given back ([`FiberCell::give_back`]), which the fiber's future does
    /// when it drops, and which must happen on this thread; `home` is the
    /// owner header of the home of this thread's worker, alive while the
    /// fiber is.
    pub(crate) unsafe fn start(
        task_waker: &Waker,
        home: NonNull<OwnerHeader>,
        resume: unsafe fn(*const ()),
        target: *const (),
    ) -> Option<&'static FiberCell> {
        if crate::diagnostics::tracking::is_marking(task_waker) {
            return None;
        }
        let cell = take(home)?;
        // A thread's chunks serve one worker: a thread is one pool's worker
        // for its whole life.
        debug_assert_eq!(cell.chunk().home.load(Ordering::Relaxed), home.as_ptr());
        cell.resume.set(Some(resume));
        cell.target.set(target);
        // Release: a waker that finds the fiber waiting later (through
        // `suspending`'s release) finds this fiber's home.
        cell.state.store(RUNNING, Ordering::Release);
        Some(cell)
    }

    /// The fiber's future drops: wakes do nothing from now on, and the cell
    /// goes back to this thread's pool for another fiber.
    pub(crate) fn give_back(&'static self) {
        self.retire();
        self.resume.set(None);
        self.target.set(std::ptr::null());
        // During the thread's teardown the pool is gone: the cell is lost,
        // as are the other cells still out (it stays `DONE`).
        let _ = FREE.try_with(|free| free.cells.borrow_mut().push(self));
    }

    /// Makes the cell `DONE` and waits for the wakes from other threads
    /// under way (see `give_back`): none reads the fiber's worker or its
    /// resumption from then on.
    fn retire(&self) {
        // SeqCst, with the wakes' count and their loads of the state: a
        // wake from another thread that counted itself before this swap is
        // waited for below, and one that loads the state after it finds
        // the fiber done and does not count itself (`wake`), so the loop
        // waits for one wake a waking thread at most, however often those
        // threads wake the fiber again. A wake that loaded the state before
        // the swap but counts itself after our load of the count is not
        // waited for: its `wake_counted` then finds the cell `DONE` and does
        // nothing, or, the cell already serving another fiber of this
        // worker, wakes that fiber once more than it asked (a spurious wake,
        // which a fiber's wait takes as any other: it polls its future
        // again). It never reads a freed fiber: the cell and its chunk's
        // home outlive every fiber they serve.
        self.state.swap(DONE, Ordering::SeqCst);
        // A wake under way is a few atomic operations and a push, but its
        // thread may be preempted in the middle: spin a little, then give
        // the core away rather than spin for the rest of our time slice.
        let backoff = crossbeam_utils::Backoff::new();
        while self.inflight.load(Ordering::SeqCst) != 0 {
            backoff.snooze();
        }
    }

    pub(crate) fn state(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    /// From the fiber's task's poll: takes the fiber to run if it waits
    /// (true), or leaves it where it is (queued, running, done).
    pub(crate) fn claim_waiting(&self) -> bool {
        self.state
            .compare_exchange(WAITING, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The fiber returned or panicked: wakes do nothing from now on (its
    /// future, which gives the cell back, drops later).
    pub(crate) fn finish(&self) {
        self.state.swap(DONE, Ordering::AcqRel);
    }

    /// The fiber, running, suspends in a wait: waiting from now on, or, if
    /// it was woken while it ran, its resumption is queued at once.
    pub(crate) fn suspending(&'static self) {
        if let Err(state) =
            self.state
                .compare_exchange(RUNNING, WAITING, Ordering::AcqRel, Ordering::Acquire)
        {
            debug_assert_eq!(state, RUNNING | NOTIFIED);
            // Wakes leave a notified fiber as it is (publishing what they
            // woke it for), so this cannot fail.
            let _ = self.state.compare_exchange(
                RUNNING | NOTIFIED,
                QUEUED,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            self.queue();
        }
    }

    /// Whether the fiber, running, was woken since it last polled.
    #[inline]
    pub(crate) fn notified(&self) -> bool {
        self.state.load(Ordering::Acquire) == RUNNING | NOTIFIED
    }

    /// Takes the fiber's notification (it goes on running, and polls its
    /// future again): true if it was notified.
    #[inline]
    pub(crate) fn take_notified(&self) -> bool {
        self.state
            .compare_exchange(
                RUNNING | NOTIFIED,
                RUNNING,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    /// The fiber's waker: a pointer to the cell, copied by a clone.
    pub(crate) fn waker(&'static self) -> Waker {
        // SAFETY: the vtable's functions take a pointer to a cell, which is
        // never freed, and hold nothing.
        unsafe { Waker::from_raw(RawWaker::new((self as *const Self).cast(), &FIBER_WAKER)) }
    }

    /// Queues the fiber's resumption on its worker.
    fn queue(&'static self) {
        // SAFETY: the job's word is this cell (never freed); `RESUME`
        // resumes the fiber it serves if it is still queued.
        let job = unsafe { Job::raw((self as *const Self).expose_provenance(), &RESUME) };
        let home = self.chunk().home.load(Ordering::Relaxed);
        // SAFETY: we just moved the fiber to `QUEUED` (from `WAITING`, or
        // it is suspending), so `home` is its worker's home (`start`), which
        // takes such jobs, and which the fiber's task keeps alive: the
        // fiber's future, which holds the task, drops only on that worker
        // and waits for wakes from other threads under way (`give_back`).
        unsafe {
            let home = NonNull::new_unchecked(home);
            let Some(push) = home.as_ref().push_pinned() else {
                unreachable!("a fiber's home takes its resumptions")
            };
            push(home, job);
        }
    }

    /// A wake of the fiber's waker.
    fn wake(&'static self) {
        // A wake from the fiber's own thread cannot overlap its future's
        // drop. (A token read stale is another thread's, or 0: such a wake
        // counts itself, which is only slower.)
        if self.chunk().thread.load(Ordering::Relaxed) == thread_token() {
            WOKEN_HERE.set(true);
            return self.wake_counted();
        }
        // A fiber that ended takes no wakes, and a wake of it must not
        // count itself: the fiber's end (`give_back`) waits for the wakes
        // counted, and threads that keep waking a kept clone of its waker
        // (a notifier that never deregisters) would keep that count above
        // zero, and the worker waiting, for as long as they go on. SeqCst,
        // with `give_back`'s swap: a wake that loads the state after that
        // swap finds it done, so the only wakes `give_back` can wait for are
        // those that loaded it before (one a thread at most).
        if self.state.load(Ordering::SeqCst) == DONE {
            return;
        }
        self.inflight.fetch_add(1, Ordering::SeqCst);
        self.wake_counted();
        self.inflight.fetch_sub(1, Ordering::Release);
    }

    fn wake_counted(&'static self) {
        let mut state = self.state.load(Ordering::SeqCst);
        loop {
            let next = match state {
                WAITING => QUEUED,
                RUNNING => RUNNING | NOTIFIED,
                // Queued or notified already: the change that changes
                // nothing publishes what we woke it for to the resumption.
                QUEUED | NOTIFIED.. => state,
                // Done (or serving no fiber).
                _ => return,
            };
            match self
                .state
                .compare_exchange_weak(state, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(WAITING) => return self.queue(),
                Ok(_) => return,
                Err(now) => state = now,
            }
        }
    }
}

/// The vtable of a fiber's waker; its data is the fiber's [`FiberCell`].
static FIBER_WAKER: RawWakerVTable =
    RawWakerVTable::new(waker_clone, waker_wake, waker_wake, waker_drop);

/// # Safety (all three)
/// `data` is a fiber cell (never freed).
unsafe fn waker_clone(data: *const ()) -> RawWaker {
    RawWaker::new(data, &FIBER_WAKER)
}

unsafe fn waker_wake(data: *const ()) {
    // SAFETY: by the caller.
    unsafe { &*data.cast::<FiberCell>() }.wake()
}

unsafe fn waker_drop(_: *const ()) {}

/// The job of a fiber's resumption: its word is the fiber's cell.
static RESUME: WorkVtable = WorkVtable {
    run: resume_job,
    drop: drop_job,
};

/// The kind of a resumption job (its vtable's address, for
/// [`Job::into_word`]): a worker's mailbox keeps only its word.
#[inline]
pub(crate) fn resumption_kind() -> *const () {
    (&RESUME as *const WorkVtable).cast()
}

/// The resumption job whose word is `word`.
///
/// # Safety
/// `word` is a resumption's, taken out of its job by `into_word` with
/// [`resumption_kind`], and its job is not run or dropped otherwise.
#[inline]
pub(crate) unsafe fn resumption(word: usize) -> Job {
    // SAFETY: by the caller, the word of a `RESUME` job made by `queue`.
    unsafe { Job::raw(word, &RESUME) }
}

/// # Safety
/// `data` holds a [`RESUME`] job's word, run on the worker it was queued
/// for.
///
/// When the fiber suspends, and the worker's next pinned job is another
/// fiber's resumption with nothing else waiting, it runs that one too, and
/// so on, each counting as a job of the worker's slice (the worker says
/// when to stop: `WorkerHooks::next_resumption`): two fibers that hand
/// control to each other then switch from one to the other without a trip
/// through the worker's slice loop each time.
unsafe fn resume_job(data: *mut std::mem::MaybeUninit<usize>) {
    // SAFETY: by the caller.
    let mut word = unsafe { (*data).assume_init() };
    loop {
        // SAFETY: a resumption's word, for this worker (the first by the
        // caller, the next ones from its own pinned queue).
        unsafe { resume_one(word) };
        let kind = resumption_kind();
        match crate::current::with_worker_hooks(|w| w.next_resumption(kind)).flatten() {
            Some(next) => word = next,
            None => return,
        }
    }
}

/// # Safety
/// `word` is a [`RESUME`] job's, run on the worker it was queued for.
unsafe fn resume_one(word: usize) {
    // SAFETY: by the caller: a fiber cell, never freed.
    let cell = unsafe { &*std::ptr::with_exposed_provenance::<FiberCell>(word) };
    if cell
        .state
        .compare_exchange(QUEUED, RUNNING, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        // The fiber was dropped meanwhile (its cell is `DONE`, or serves a
        // fiber that is not queued).
        return;
    }
    let Some(resume) = cell.resume.get() else {
        unreachable!("a queued fiber's cell says how to resume it")
    };
    // SAFETY: the cell serves a fiber of this thread (only its worker runs
    // its resumptions) whose future has not dropped (that would have made
    // the cell `DONE`, and given it back, before it served another); we
    // just claimed the fiber, which its resumption expects.
    unsafe { resume(cell.target.get()) }
}

/// # Safety
/// As for [`resume_job`], for a job dropped unrun: the fiber stays
/// `QUEUED`; its task's drop on its worker (S9) ends it.
unsafe fn drop_job(_: *mut std::mem::MaybeUninit<usize>) {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::{OwnerVtable, Runnable};
    use std::sync::atomic::AtomicUsize;

    /// A worker's home as far as a fiber's cell sees it: where a wake
    /// pushes the fiber's resumption. `gone` stands for its pool being
    /// freed: a push after it is a read of freed memory in a real pool.
    #[repr(C)]
    struct Home {
        header: OwnerHeader,
        gone: std::sync::atomic::AtomicBool,
        pushes: AtomicUsize,
        pushes_when_gone: AtomicUsize,
    }

    static VTABLE: OwnerVtable = OwnerVtable {
        schedule: no_task,
        retain: no_count,
        release: no_count,
        push_pinned: Some(push),
    };

    unsafe fn no_task(_: NonNull<OwnerHeader>, _: Runnable) {
        unreachable!("no task is spawned on this home")
    }

    unsafe fn no_count(_: NonNull<OwnerHeader>) {}

    unsafe fn push(header: NonNull<OwnerHeader>, job: Job) {
        // SAFETY: the header is the first field of a leaked `Home`.
        let home = unsafe { header.cast::<Home>().as_ref() };
        if home.gone.load(Ordering::SeqCst) {
            home.pushes_when_gone.fetch_add(1, Ordering::SeqCst);
        } else {
            home.pushes.fetch_add(1, Ordering::SeqCst);
        }
        // A resumption's drop unrun does nothing.
        drop(job);
    }

    unsafe fn never_resumed(_: *const ()) {
        unreachable!("a leaked fiber was resumed")
    }

    /// F3 at a worker's exit: a fiber whose future is never dropped on its
    /// thread (leaked: its task woken past `LATE_WAKE` and dropped by the
    /// reaper, where `ThreadBound` leaks it) leaves its cell waiting. Once its
    /// worker has exited, and its pool is freed, a stale waker of that fiber
    /// must not touch the pool: the exit retires the cell, and the wake does
    /// nothing. Without that, the wake moved the cell to `QUEUED` and pushed
    /// the fiber's resumption into the freed pool. Checked both ways a cell is
    /// retired: by the worker's exit (`retire_cells_out`, the pool still alive)
    /// and by the thread's end.
    #[test]
    fn a_stale_waker_of_a_leaked_fiber_does_not_reach_its_exited_worker() {
        crate::scheduler::context::tests::watchdog("stale_waker_of_leaked_fiber", 30, || {
            for explicit in [true, false] {
                let home: &'static Home = Box::leak(Box::new(Home {
                    header: OwnerHeader::with_vtable(&VTABLE),
                    gone: false.into(),
                    pushes: AtomicUsize::new(0),
                    pushes_when_gone: AtomicUsize::new(0),
                }));
                let header = NonNull::from(&home.header);
                // SAFETY: the pointer crosses to the worker thread only to
                // be used there as the home it stands for.
                let header_addr = header.as_ptr().expose_provenance();
                let (waker_tx, waker_rx) = std::sync::mpsc::channel::<Waker>();
                let (exit_tx, exit_rx) = std::sync::mpsc::channel::<()>();
                let mut worker = Some(std::thread::spawn(move || {
                    let header = NonNull::new(
                        std::ptr::with_exposed_provenance_mut::<OwnerHeader>(header_addr),
                    )
                    .unwrap();
                    // SAFETY: the target is never resumed (`never_resumed`
                    // says so if it is); `header` is a home that stays.
                    let cell = unsafe {
                        FiberCell::start(Waker::noop(), header, never_resumed, std::ptr::null())
                    }
                    .expect("a cell");
                    // Its first wait: it suspends, its waker kept elsewhere.
                    let waker = cell.waker();
                    cell.suspending();
                    assert_eq!(cell.state(), WAITING);
                    // Its future is leaked: `give_back` never comes.
                    if explicit {
                        // The worker's exit, with the pool alive.
                        retire_cells_out();
                    }
                    waker_tx.send(waker).unwrap();
                    if explicit {
                        exit_rx.recv().unwrap();
                    }
                }));
                let waker = waker_rx.recv().unwrap();
                if !explicit {
                    // The thread's end.
                    worker.take().unwrap().join().unwrap();
                }
                home.gone.store(true, Ordering::SeqCst);
                waker.wake_by_ref();
                waker.wake();
                assert_eq!(
                    home.pushes_when_gone.load(Ordering::SeqCst),
                    0,
                    "a stale waker of a leaked fiber pushed its resumption to its exited \
                     worker's home (retired at the worker's exit: {explicit})"
                );
                assert_eq!(home.pushes.load(Ordering::SeqCst), 0);
                if let Some(worker) = worker {
                    exit_tx.send(()).unwrap();
                    worker.join().unwrap();
                }
            }
        });
    }
}
