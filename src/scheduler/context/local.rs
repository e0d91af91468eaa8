//! The `!Send` jobs of a context scheduler (S10): one queue per owner
//! thread, run only when that thread iterates the context, retired when it
//! exits.
//!
//! **`!Send` jobs (S10).** `spawn_local` is accepted only from a thread that
//! owns the context right now (it holds it: it acquired it, pushed it as
//! thread-default, or runs its loop); on the main scheduler also from the
//! process's main thread while no other thread holds the default context.
//! Elsewhere it panics and says why. Each owner thread gets a queue of its
//! own: its `!Send` jobs run only when *that* thread iterates the context,
//! whoever else does meanwhile. Nothing about ownership sticks: another
//! thread that holds the context later gets its own queue, and a thread's
//! queue is retired when the thread exits (the jobs still in it are dropped
//! there, on their own thread, so their tasks resolve as cancelled). Jobs
//! waiting for a thread that is not iterating cost nothing: the source's
//! `prepare` finds them when their thread iterates the context again; no
//! timer polls for them.

use std::cell::RefCell;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread;

use crossbeam_deque::{Injector, Steal};

use super::{drop_orphan, ContextShared, RETIRED};
use crate::task::Job;
use crate::util::thread_token;
use crate::util::{drain, Unpoisoned};

/// The `!Send` jobs of one thread on one context scheduler: run only by that
/// thread (S10).
pub(crate) struct LocalQueue {
    /// The owner's [`thread_token`].
    owner: u64,
    pub(super) jobs: Injector<Job>,
    /// The owner thread has exited: nothing will run these jobs.
    gone: AtomicBool,
    /// Whether the last job a dispatch on the owner thread took was this
    /// queue's turn: the owner's next dispatch goes on from there. (Were
    /// each to start with the same queue, a dispatch cut short after one
    /// long job would always run that queue's, and a task that yields after
    /// each long poll would keep the other queue waiting until it ended:
    /// S11. The turn is the owner's, not the context's: threads that
    /// iterate the context in turn would each find the turn the other left,
    /// one always beginning with its `!Send` queue, the other never.)
    pub(super) went_last: AtomicBool,
}

impl ContextShared {
    /// Queues a job of a `!Send` task on its owner thread's queue.
    #[inline]
    pub(crate) fn push_local(&self, queue: &LocalQueue, mut job: Job) {
        self.latency.stamp(&mut job);
        if queue.gone.load(Ordering::Acquire) {
            drop_orphan(job);
            return;
        }
        if self.stage.load(Ordering::Acquire) >= RETIRED && queue.owner == thread_token() {
            // The worker whose context this is has exited (S9): a job of
            // this thread's is dropped here, on its own thread. (Another
            // thread's wake-up queues it: its owner drops it, the exiting
            // worker in `retire`, any other thread when it exits.)
            drop_orphan(job);
            return;
        }
        self.pending.local_jobs.fetch_add(1, Ordering::AcqRel);
        queue.jobs.push(job);
        // Pairs with the fence in `OwnedQueues::drop`: either it drains our job, or we
        // see `gone` and drain it ourselves.
        fence(Ordering::SeqCst);
        if queue.gone.load(Ordering::Relaxed) {
            self.drain(queue);
            return;
        }
        self.notify();
    }

    /// Panics unless the calling thread may spawn `!Send` futures here
    /// (S10): see the module comment.
    fn check_local_owner(&self, what: &str) {
        if self.context.is_owner() {
            return;
        }
        let here = thread::current();
        let name = here.name().unwrap_or("<unnamed>");
        if self.is_main {
            let main_thread = crate::util::is_main_thread();
            if main_thread && self.context.acquire().is_ok() {
                return;
            }
            let why = if main_thread {
                "this is the main thread, but another thread holds the default main context \
                 (it runs the main loop there)"
            } else {
                "this thread is not the process's main thread and does not hold the default \
                 main context"
            };
            panic!(
                "gdex: {what} called on thread {name:?}, which may not spawn !Send futures on the \
                 main scheduler: {why}. The main scheduler's !Send tasks belong to the process's \
                 main thread, or to the thread that holds (has acquired) the default main \
                 context, such as one running its main loop. Spawn a Send future instead \
                 (Scheduler::main().spawn(..), or gdex::spawn(..) on the pool), or call {what} \
                 from the thread that runs the main loop."
            );
        }
        // Any other context: the thread that holds it, or one that could.
        if self.context.acquire().is_err() {
            panic!(
                "gdex: {what} called on thread {name:?}, which does not own the scheduler's \
                 context: another thread is running it. A !Send future can only run on the \
                 thread that owns the context; call {what} from that thread, or spawn a Send \
                 future with spawn()."
            );
        }
    }

    /// Checks that the calling thread may spawn a `!Send` future here and
    /// returns its queue of `!Send` jobs, made on first use.
    pub(crate) fn enter_local(self: &Arc<Self>, what: &str) -> Arc<LocalQueue> {
        self.check_local_owner(what);
        let me = thread_token();
        let mut locals = self.locals.lock().unpoisoned();
        if let Some(queue) = locals.iter().find(|q| q.owner == me) {
            return queue.clone();
        }
        let queue = Arc::new(LocalQueue {
            owner: me,
            jobs: Injector::new(),
            gone: AtomicBool::new(false),
            went_last: AtomicBool::new(false),
        });
        locals.push(queue.clone());
        drop(locals);
        // Retire the queue when this thread exits. (During the thread's own
        // exit there is nothing to register with: the queue then simply
        // stays, as its jobs could never run anyway.)
        let _ = OWNED_QUEUES.try_with(|owned| {
            owned
                .0
                .borrow_mut()
                .push((Arc::downgrade(self), queue.clone()))
        });
        queue
    }

    /// The calling thread's queue of `!Send` jobs here, if it has one and
    /// any `!Send` job is queued at all.
    pub(super) fn local_queue_here(&self) -> Option<Arc<LocalQueue>> {
        if self.pending.local_jobs.load(Ordering::Acquire) == 0 {
            return None;
        }
        let me = thread_token();
        let locals = self.locals.lock().unpoisoned();
        locals.iter().find(|q| q.owner == me).cloned()
    }

    /// Drops the jobs left in `queue` here, on the calling thread.
    pub(super) fn drain(&self, queue: &LocalQueue) {
        for job in drain(|| queue.jobs.steal()) {
            self.pending.local_jobs.fetch_sub(1, Ordering::AcqRel);
            drop_orphan(job);
        }
    }

    pub(super) fn steal_local(&self, local: &LocalQueue) -> Steal<Job> {
        let got = local.jobs.steal();
        if got.is_success() {
            self.pending.local_jobs.fetch_sub(1, Ordering::AcqRel);
        }
        got
    }
}

/// The `!Send` queues the current thread owns, retired when it exits.
struct OwnedQueues(RefCell<Vec<(Weak<ContextShared>, Arc<LocalQueue>)>>);

thread_local! {
    static OWNED_QUEUES: OwnedQueues = const { OwnedQueues(RefCell::new(Vec::new())) };
}

impl Drop for OwnedQueues {
    fn drop(&mut self) {
        for (shared, queue) in self.0.take() {
            queue.gone.store(true, Ordering::Relaxed);
            // Pairs with the fence in `push_local`.
            fence(Ordering::SeqCst);
            // (A queued job holds its scheduler through its schedule
            // function: if the scheduler is gone, so are the jobs.)
            if let Some(shared) = shared.upgrade() {
                shared
                    .locals
                    .lock()
                    .unpoisoned()
                    .retain(|q| !Arc::ptr_eq(q, &queue));
                // On the owner thread: the futures are dropped in place.
                shared.drain(&queue);
            }
        }
    }
}
