//! Blocking work: the elastic blocking lane behind `spawn_blocking` (B2),
//! the fixed-size [`BlockingPool`] (B3), and [`blocking`], the escape hatch
//! for a pool task that must block in place.
//!
//! Both pools are one mechanism, a `Lane`: a FIFO of task `Runnable`s, a
//! mutex and a condition variable, and threads that run jobs to completion.
//! The elastic lane starts threads when every one is busy (up to a cap) and
//! retires them after an idle keep-alive; a fixed pool starts its threads up
//! front and keeps them until it is closed. Blocking jobs never run on pool
//! workers, so they never stall tasks.
//!
//! When the OS refuses a new thread (`EAGAIN`), a job waits for a lane
//! thread that is alive; if none is, nothing would ever run it, so it
//! fails at once: its task resolves to [`Error::Failed`] with a message
//! saying no thread could start, and its closure never runs. The next job
//! tries to start a thread again.

pub mod thread;

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::error::Error;
use crate::task::{CatchUnwind, Failure, Job, Task};
use crate::util::Unpoisoned;

/// How a [`BlockingPool`] closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseMode {
    /// Run every job already queued, then stop.
    Drain,
    /// Drop the jobs still queued (their tasks resolve to
    /// [`Error::Cancelled`]); jobs already running finish.
    CancelQueued,
}

struct LaneState {
    queue: VecDeque<Job>,
    /// Threads alive.
    threads: usize,
    /// Threads waiting for a job.
    idle: usize,
    /// Wake-ups sent to idle threads and not yet taken.
    notified: usize,
    /// The most threads alive at once.
    peak: usize,
    closed: Option<CloseMode>,
    /// Waiting for every thread to exit: one waker per pending close
    /// future, under the key it holds.
    on_exit: Vec<(u64, Waker)>,
    /// The key of the next close future that waits.
    next_exit_key: u64,
    /// The thread dropping the jobs a `CancelQueued` close took, until it
    /// has: a later close waits for it (`Lane::close`).
    cancelling: Option<std::thread::ThreadId>,
}

pub(crate) struct Lane {
    name: String,
    max_threads: usize,
    /// `None`: threads never retire (a fixed pool).
    keep_alive: Option<Duration>,
    /// What a spawn on the closed lane resolves to: the error of its
    /// owner's closing ([`Error::ShutDown`] for a pool's lane, closed by
    /// the pool's shutdown; [`Error::Closed`] for a [`BlockingPool`]).
    closed_error: Error,
    state: Mutex<LaneState>,
    cond: Condvar,
    /// Signalled when the closer has dropped the jobs it took.
    cancelled: Condvar,
    /// Told, under the lock, each time the lane empties: every thread
    /// idle and nothing queued (a pool's test clock, which may move then).
    on_idle: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl Lane {
    pub(crate) fn new(
        name: &str,
        max_threads: usize,
        keep_alive: Option<Duration>,
        closed_error: Error,
    ) -> Arc<Lane> {
        Arc::new(Lane {
            name: name.to_owned(),
            max_threads,
            keep_alive,
            closed_error,
            state: Mutex::new(LaneState {
                queue: VecDeque::new(),
                threads: 0,
                idle: 0,
                notified: 0,
                peak: 0,
                closed: None,
                on_exit: Vec::new(),
                next_exit_key: 0,
                cancelling: None,
            }),
            cond: Condvar::new(),
            cancelled: Condvar::new(),
            on_idle: OnceLock::new(),
        })
    }

    /// Has `hook` told each time the lane empties (see `on_idle`): called
    /// under the lane's lock, so it must run no user code and take no lock
    /// that is held while the lane is used (a pool's test clock: its
    /// locks are never held across a call into the lane).
    pub(crate) fn set_on_idle(&self, hook: Box<dyn Fn() + Send + Sync>) {
        let first = self.on_idle.set(hook).is_ok();
        debug_assert!(
            first,
            "a lane's idle hook is set once, when its pool is built"
        );
    }

    fn lock(&self) -> MutexGuard<'_, LaneState> {
        self.state.lock().unpoisoned()
    }

    /// Spawns a task running `f` on this lane; if the lane is closed, a
    /// task that resolves to the lane's `closed_error`.
    #[track_caller]
    pub(crate) fn spawn<F, T>(self: &Arc<Self>, f: F) -> Task<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        if self.lock().closed.is_some() {
            return Task::failed(self.closed_error.clone());
        }
        let lane = self.clone();
        let job = CatchUnwind::of_kind(
            async move { f() },
            crate::diagnostics::record::Kind::Blocking,
            || "a blocking lane".into(),
        );
        let future = async move {
            // Polled by `refuse`: no thread could start to run `f`, or the
            // lane closed before it took the job.
            if let Some(error) = REFUSAL.with(|r| r.borrow().clone()) {
                return Err(Failure::error(error));
            }
            job.await
        };
        let (runnable, task) =
            crate::task::builder().spawn(move |_| future, move |r| lane.submit(Job::task(r)));
        runnable.schedule();
        Task::new(task)
    }

    /// Queues a job; an idle thread takes it, or a new thread starts.
    ///
    /// If the lane closed since `spawn` checked, the job is refused as a
    /// spawn onto the closed lane is: its task resolves to the lane's
    /// `closed_error` (not `Cancelled`, which is for jobs the close found
    /// queued), and its closure never runs.
    ///
    /// If no thread can start (the OS refuses) and none is alive, nothing
    /// would ever run the queue: every queued job, this one included, is
    /// refused (its task resolves to [`Error::Failed`] saying so, and its
    /// closure never runs). The lane stays usable: the next job tries to
    /// start a thread again. If some thread is alive, the job waits for it.
    fn submit(self: &Arc<Self>, job: Job) {
        let mut state = self.lock();
        if state.closed.is_some() {
            // Closed between the check in `spawn` and now: never queued, so
            // refused as that check would have (outside the lock: the
            // closure's drop is user code).
            drop(state);
            Self::refuse(std::iter::once(job), &self.closed_error);
            return;
        }
        state.queue.push_back(job);
        if state.idle > state.notified {
            state.notified += 1;
            self.cond.notify_one();
        } else if state.threads < self.max_threads {
            if let Err(e) = self.start_thread(&mut state) {
                if state.threads == 0 {
                    let stranded = std::mem::take(&mut state.queue);
                    drop(state);
                    let error = self.no_thread_error(&e);
                    Self::refuse(stranded, &error);
                }
            }
        }
    }

    /// The error of the jobs no thread can run: the OS refused to start
    /// one (`cause`) and none is alive.
    fn no_thread_error(&self, cause: &std::io::Error) -> Error {
        Error::Failed(glib::Error::new(
            gio::IOErrorEnum::Failed,
            &format!(
                "gdex: {} could not start a thread ({cause}) and none is running, so this \
                 blocking job was not run. Retry later (the next job tries to start a thread \
                 again), or raise the process's thread limit.",
                self.name
            ),
        ))
    }

    /// Resolves `jobs`, which no thread will run, to `error`, without
    /// running their closures. Called without the lock: a task's
    /// completion may wake and run code.
    fn refuse(jobs: impl IntoIterator<Item = Job>, error: &Error) {
        for job in jobs {
            // Only lane tasks (from `spawn`) are submitted to a lane; their
            // futures see REFUSAL on this poll and resolve to it. Restored
            // after each: dropping a refused closure runs its destructor,
            // which may submit to (and refuse on) another lane. `run` never
            // unwinds.
            let previous = REFUSAL.with(|r| r.replace(Some(error.clone())));
            job.run();
            REFUSAL.with(|r| *r.borrow_mut() = previous);
        }
    }

    /// Starts one more thread; on failure, warns and returns the OS error.
    fn start_thread(self: &Arc<Self>, state: &mut LaneState) -> std::io::Result<()> {
        let lane = self.clone();
        let spawned = if FAIL_THREAD_STARTS.with(Cell::get) {
            // What the OS says when it is out of threads (see
            // `__fail_thread_starts_here`).
            Err(std::io::Error::from_raw_os_error(libc::EAGAIN))
        } else {
            std::thread::Builder::new()
                .name(self.name.clone())
                .spawn(move || lane.run())
        };
        match spawned {
            Ok(_) => {
                state.threads += 1;
                state.peak = state.peak.max(state.threads);
                glib::g_debug!("gdex", "{}: thread {} started", self.name, state.threads);
                Ok(())
            }
            Err(e) => {
                glib::g_warning!("gdex", "cannot start a {} thread: {}", self.name, e);
                Err(e)
            }
        }
    }

    /// A lane thread: run jobs until closed, or idle past the keep-alive.
    fn run(self: Arc<Self>) {
        #[cfg(feature = "tokio")]
        let _tokio = crate::tokio_rt::enter();
        // Never reset: the thread ends with this function.
        LANE.with(|lane| lane.set(Arc::as_ptr(&self)));
        let mut state = self.lock();
        loop {
            if let Some(job) = state.queue.pop_front() {
                drop(state);
                job.run();
                state = self.lock();
                continue;
            }
            if state.closed.is_some() {
                break;
            }
            state.idle += 1;
            if state.idle == state.threads && state.queue.is_empty() {
                if let Some(hook) = self.on_idle.get() {
                    // Under the lock: whoever reads the lane's stats after
                    // this sees the hook's effects too.
                    hook();
                }
            }
            let timed_out = match self.keep_alive {
                Some(keep_alive) => {
                    let (s, result) = self.cond.wait_timeout(state, keep_alive).unpoisoned();
                    state = s;
                    result.timed_out()
                }
                None => {
                    state = self.cond.wait(state).unpoisoned();
                    false
                }
            };
            state.idle -= 1;
            if state.notified > 0 {
                state.notified -= 1;
            } else if timed_out && state.queue.is_empty() {
                // Idle for the whole keep-alive: retire.
                glib::g_debug!("gdex", "{}: an idle thread retires", self.name);
                break;
            }
        }
        state.threads -= 1;
        if state.threads == 0 {
            let wakers: Vec<_> = state.on_exit.drain(..).map(|(_, waker)| waker).collect();
            // Woken outside the lane's lock (a waker, or the panic handler
            // reporting its panic, may use the lane), and a panic would end
            // this thread and leave the other waiters of the close asleep:
            // it goes to the panic handler (X5).
            drop(state);
            for waker in wakers {
                crate::diagnostics::panic::wake(waker);
            }
        }
    }

    /// Stops accepting jobs; with `CancelQueued`, drops the queued ones.
    /// The first close decides: closing a closed lane changes nothing, so a
    /// `CancelQueued` after a `Drain` does not cancel the jobs the drain
    /// promised to run (B3).
    pub(crate) fn close(&self, mode: CloseMode) {
        let me = std::thread::current().id();
        let dropped = {
            let mut state = self.lock();
            if state.closed.is_some() {
                // Closed already. Every close returns with the queued jobs
                // resolved (S9: when any `shutdown()` returns), so wait for
                // the closer still dropping them, unless this thread is that
                // closer (a job's destructor closing again).
                while state.cancelling.is_some_and(|closer| closer != me) {
                    state = self.cancelled.wait(state).unpoisoned();
                }
                return;
            }
            state.closed = Some(mode);
            self.cond.notify_all();
            match mode {
                CloseMode::CancelQueued => {
                    state.cancelling = Some(me);
                    std::mem::take(&mut state.queue)
                }
                CloseMode::Drain => VecDeque::new(),
            }
        };
        /// Ends the closer's turn, also if a destructor unwinds.
        struct Cancelled<'a>(&'a Lane);
        impl Drop for Cancelled<'_> {
            fn drop(&mut self) {
                self.0.lock().cancelling = None;
                self.0.cancelled.notify_all();
            }
        }
        let _turn = (mode == CloseMode::CancelQueued).then_some(Cancelled(self));
        // Dropped outside the lock: a future's destructor may spawn.
        drop(dropped);
    }

    /// Whether the calling thread is one of this lane's.
    pub(crate) fn is_current(&self) -> bool {
        LANE.with(|lane| std::ptr::eq(lane.get(), self))
    }

    pub(crate) fn stats(&self) -> LaneStats {
        let state = self.lock();
        LaneStats {
            threads: state.threads,
            idle: state.idle,
            peak_threads: state.peak,
            queued: state.queue.len(),
        }
    }
}

thread_local! {
    /// Test hook: lane threads that this thread starts fail to start.
    static FAIL_THREAD_STARTS: Cell<bool> = const { Cell::new(false) };
    /// Set while `Lane::refuse` polls jobs that no thread will run: a lane
    /// task polled meanwhile resolves to this error instead of running.
    static REFUSAL: RefCell<Option<Error>> = const { RefCell::new(None) };
    /// The lane whose thread this is (its address), or null.
    static LANE: Cell<*const Lane> = const { Cell::new(std::ptr::null()) };
}

/// For gdex's own tests; not part of the API. While `fail` is true, every
/// blocking-lane or [`BlockingPool`] thread that the *calling thread* asks
/// to start fails to start, as if the OS refused it (`EAGAIN`, out of
/// threads). It injects that OS failure and nothing else; other threads are
/// not affected.
#[doc(hidden)]
pub fn __fail_thread_starts_here(fail: bool) {
    FAIL_THREAD_STARTS.with(|f| f.set(fail));
}

/// A snapshot of a blocking lane or pool: [`crate::ThreadPool::blocking_stats`],
/// [`BlockingPool::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LaneStats {
    /// Threads alive now.
    pub threads: usize,
    /// Of those, threads waiting for a job.
    pub idle: usize,
    /// The most threads alive at once so far.
    pub peak_threads: usize,
    /// Jobs waiting for a thread.
    pub queued: usize,
}

/// A fixed-size pool of threads for blocking jobs (B3), libdex's
/// `DexThreadPool`: `n` threads started up front, `submit` queues a job and
/// gives a [`Task`], `close` stops it.
///
/// Dropping the pool closes it with [`CloseMode::Drain`] without waiting.
///
/// ```
/// use gdex::blocking::{BlockingPool, CloseMode};
/// let pool = BlockingPool::new(2);
/// let job = pool.submit(|| std::fs::metadata("/").is_ok());
/// assert!(gdex::block_on(job).unwrap());
/// gdex::block_on(pool.close(CloseMode::Drain));
/// assert!(matches!(gdex::block_on(pool.submit(|| 1)), Err(gdex::Error::Closed)));
/// ```
pub struct BlockingPool {
    lane: Arc<Lane>,
}

impl BlockingPool {
    /// Starts `threads` threads named `gdex-blocking-pool`.
    ///
    /// # Panics
    /// If `threads` is 0.
    pub fn new(threads: usize) -> BlockingPool {
        assert!(
            threads > 0,
            "gdex: BlockingPool::new(0): a pool needs at least one thread"
        );
        let lane = Lane::new("gdex-blocking-pool", threads, None, Error::Closed);
        {
            let mut state = lane.lock();
            for _ in 0..threads {
                // A thread that fails to start (warned) is started by a
                // later submit instead; see `Lane::submit`.
                let _ = lane.start_thread(&mut state);
            }
        }
        BlockingPool { lane }
    }

    /// Queues `f`; the task resolves to its result, [`Error::Panicked`] if it
    /// panicked, [`Error::Cancelled`] if the pool was closed with
    /// [`CloseMode::CancelQueued`] before it ran, [`Error::Closed`] if the
    /// pool was already closed, or [`Error::Failed`] if none of the pool's
    /// threads is alive and the OS refused to start one (see the module
    /// docs).
    #[track_caller]
    pub fn submit<F, T>(&self, f: F) -> Task<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.lane.spawn(f)
    }

    /// Closes the pool; the returned future completes when every thread of
    /// the pool has exited.
    ///
    /// The first close decides. Closing again, with either mode, changes
    /// nothing: after `close(Drain)`, a `close(CancelQueued)` cancels no
    /// queued job. Its future, like the first one's, completes when the
    /// first close's work is done and the threads have exited.
    pub fn close(&self, mode: CloseMode) -> CloseFuture {
        self.lane.close(mode);
        CloseFuture {
            lane: self.lane.clone(),
            key: None,
        }
    }

    /// The pool's threads and queue, now.
    pub fn stats(&self) -> LaneStats {
        self.lane.stats()
    }
}

impl Drop for BlockingPool {
    fn drop(&mut self) {
        self.lane.close(CloseMode::Drain);
    }
}

impl std::fmt::Debug for BlockingPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockingPool")
            .field("stats", &self.stats())
            .finish()
    }
}

/// The future of [`BlockingPool::close`]: completes when the pool's threads
/// have all exited.
///
/// While it waits, the pool holds one waker for it, however often it is
/// polled (replaced only by a waker that would wake another task); dropping
/// it removes that waker.
#[must_use = "futures do nothing unless awaited"]
pub struct CloseFuture {
    lane: Arc<Lane>,
    /// Its entry in `on_exit`, once it has waited.
    key: Option<u64>,
}

impl Future for CloseFuture {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // A leaf future (P11): the budget is checked before the lock.
        let this = self.get_mut();
        crate::task::coop::poll_leaf(cx, |cx| this.poll_closed(cx))
    }
}

impl CloseFuture {
    fn poll_closed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let this = self;
        let mut state = this.lane.lock();
        if state.threads == 0 {
            // The last thread drained `on_exit` as it left.
            this.key = None;
            return Poll::Ready(());
        }
        let waker = cx.waker();
        let entry = this
            .key
            .and_then(|key| state.on_exit.iter_mut().find(|(k, _)| *k == key));
        // The waker it replaces is the caller's code to drop: after the
        // lock.
        let replaced = match entry {
            Some((_, stored)) if !stored.will_wake(waker) => {
                Some(std::mem::replace(stored, waker.clone()))
            }
            Some(_) => None,
            None => {
                let key = state.next_exit_key;
                state.next_exit_key += 1;
                state.on_exit.push((key, waker.clone()));
                this.key = Some(key);
                None
            }
        };
        drop(state);
        drop(replaced);
        Poll::Pending
    }
}

impl Drop for CloseFuture {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let mut state = self.lane.lock();
            let at = state.on_exit.iter().position(|(k, _)| *k == key);
            let removed = at.map(|at| state.on_exit.swap_remove(at));
            // Its waker is the caller's code to drop: after the lock.
            drop(state);
            drop(removed);
        }
    }
}

impl std::fmt::Debug for CloseFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloseFuture").finish_non_exhaustive()
    }
}

/// Runs `f`, which may block, right here; called from a pool task, it first
/// hands the rest of the worker's queue to its peers and wakes them, so that
/// a peer that is free takes the queued tasks instead of leaving them behind
/// the blocking call (tokio's `block_in_place`). Elsewhere it just runs `f`.
///
/// What still waits for `f` to return:
/// - everything queued on a pool of **one worker**: there is no peer to
///   hand it to, so those tasks run only after `f` returns (use
///   [`crate::spawn_blocking`], or a pool of two workers or more);
/// - tasks handed over while every peer is itself busy: they start when a
///   peer is free;
/// - fibers and pinned tasks queued on the worker, which cannot move, and
///   raw GLib sources attached to the worker's context, which is not
///   iterated meanwhile.
///
/// Prefer [`crate::spawn_blocking`] when the work can go to another thread.
///
/// ```
/// let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
/// let task = pool.scheduler().spawn(async {
///     gdex::blocking::blocking(|| std::thread::sleep(std::time::Duration::from_millis(5)));
///     "done"
/// });
/// assert_eq!(gdex::block_on(task).unwrap(), "done");
/// ```
pub fn blocking<F, R>(f: F) -> R
where
    F: FnOnce() -> R,
{
    struct Declared(bool);
    impl Drop for Declared {
        fn drop(&mut self) {
            if self.0 {
                crate::current::with_worker_hooks(|worker| worker.leave_blocking());
            }
        }
    }
    let _declared =
        Declared(crate::current::with_worker_hooks(|worker| worker.enter_blocking()).is_some());
    f()
}
