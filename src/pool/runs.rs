//! Pinned tasks queued in runs ([`Scheduler::spawn_fibers`]): a batch of
//! fibers spawned from outside their workers is pushed to each worker's
//! inbox as it is made, and the fence and directed wake-up (P6, P10) that
//! a single spawn pays for each push are paid once for each run of
//! [`RUN`] pushes to a worker, and once at the end of the batch.
//!
//! [`Scheduler::spawn_fibers`]: crate::Scheduler::spawn_fibers

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{reaper, worker, PoolShared};
use crate::task::Runnable;

/// The pushes to one worker's inbox between two of its directed wake-ups:
/// a worker asleep sees the run's first fiber at most this many spawns
/// late, and a worker awake finds them in its inbox as they come.
const RUN: usize = 64;

/// A batch of pinned tasks being queued on a pool's workers, round-robin
/// from where the pool's single spawns are (as libdex places fibers). Its
/// drop wakes every worker it left jobs for, even when the batch ends in a
/// panic (the iterator's or the caller's `Extend`).
pub(crate) struct PinnedRuns<'a> {
    pool: &'a Arc<PoolShared>,
    /// For each worker, the jobs pushed to its inbox since its last
    /// wake-up.
    pending: Vec<usize>,
    /// The worker the next job goes to.
    next: usize,
    /// The workers chosen so far.
    chosen: usize,
}

impl<'a> PinnedRuns<'a> {
    pub(crate) fn new(pool: &'a Arc<PoolShared>) -> Self {
        PinnedRuns {
            pool,
            pending: vec![0; pool.workers()],
            next: pool.pick_worker(),
            chosen: 0,
        }
    }

    /// The worker the next job goes to.
    pub(crate) fn next_worker(&mut self) -> usize {
        let i = self.next;
        self.next = if i + 1 == self.pending.len() {
            0
        } else {
            i + 1
        };
        self.chosen += 1;
        i
    }

    /// Queues `runnable`, which belongs to worker `i`: on the worker's own
    /// pinned queue if we are that worker, else in its inbox, the run's
    /// wake-up done when the run is full.
    pub(crate) fn push(&mut self, i: usize, runnable: Runnable) {
        let job = self.pool.task_job(runnable);
        if let Err(job) = worker::push_pinned_local(self.pool, i, job) {
            self.pool.remotes[i].inbox.push(job);
            self.pending[i] += 1;
            if self.pending[i] == RUN {
                self.wake(i);
            }
        }
    }

    /// Ends worker `i`'s run: as `PoolShared::push_inbox` after a push,
    /// for every job of the run.
    fn wake(&mut self, i: usize) {
        self.pending[i] = 0;
        if !self.pool.pushed_to(i) {
            // Worker `i` has exited: what its last drain did not take never
            // ran (see `push_inbox`).
            reaper::reap(PoolShared::take_all(&self.pool.remotes[i].inbox));
        }
    }
}

impl Drop for PinnedRuns<'_> {
    fn drop(&mut self) {
        for i in 0..self.pending.len() {
            if self.pending[i] > 0 {
                self.wake(i);
            }
        }
        // The pool's next single spawn goes on where the batch stopped.
        if self.chosen > 1 {
            self.pool
                .next_pinned
                .fetch_add(self.chosen - 1, Ordering::Relaxed);
        }
        self.pool.settle_spawn();
    }
}
