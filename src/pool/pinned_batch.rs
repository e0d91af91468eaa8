//! A batch of pinned tasks queued together ([`Scheduler::spawn_fibers`]):
//! the jobs are made first and queued on their workers once the batch is
//! done, each worker's with one fence and at most one directed wake-up
//! (P6, P10), where a single spawn pays both for each.
//!
//! [`Scheduler::spawn_fibers`]: crate::Scheduler::spawn_fibers

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{reaper, worker, PoolShared};
use crate::task::{Job, Runnable};

/// The pinned jobs of a batch, placed round-robin on a pool's workers from
/// where the pool's single spawns are (as libdex places fibers). Its drop
/// queues them, also when the batch ends in a panic (the caller's iterator
/// or `Extend`): nothing is queued before, so no worker runs any of them
/// while the caller's code that makes the batch still runs.
pub(crate) struct PinnedBatch<'a> {
    pool: &'a Arc<PoolShared>,
    /// The worker of the first job, picked with the first job.
    start: Option<usize>,
    /// The worker of the next job.
    next: usize,
    /// The jobs made, in order: each belongs to the worker after the one
    /// before's, from `start`.
    jobs: Vec<Job>,
}

impl<'a> PinnedBatch<'a> {
    /// An empty batch, with room for `expected` jobs (the iterator's
    /// lower bound).
    pub(crate) fn new(pool: &'a Arc<PoolShared>, expected: usize) -> Self {
        PinnedBatch {
            pool,
            start: None,
            next: 0,
            jobs: Vec::with_capacity(expected),
        }
    }

    /// The worker the next job belongs to (the same until it is pushed).
    pub(crate) fn next_worker(&mut self) -> usize {
        if self.start.is_none() {
            let start = self.pool.pick_worker();
            self.start = Some(start);
            self.next = start;
        }
        self.next
    }

    /// Adds `runnable`, made for [`next_worker`](Self::next_worker), to the
    /// batch.
    pub(crate) fn push(&mut self, runnable: Runnable) {
        debug_assert!(
            self.start.is_some(),
            "next_worker names a job's worker first"
        );
        self.jobs.push(self.pool.task_job(runnable));
        self.next = if self.next + 1 == self.pool.workers() {
            0
        } else {
            self.next + 1
        };
    }
}

impl Drop for PinnedBatch<'_> {
    fn drop(&mut self) {
        let Some(start) = self.start else {
            return;
        };
        let pool = self.pool;
        let jobs = std::mem::take(&mut self.jobs);
        let made = jobs.len();
        let mut pushed = vec![false; pool.workers()];
        let mut i = start;
        for job in jobs {
            // Our own worker's on its pinned queue; the others' in their
            // inboxes, woken for below.
            if let Err(job) = worker::push_pinned_local(pool, i, job) {
                pool.remotes[i].inbox.push(job);
                pushed[i] = true;
            }
            i = if i + 1 == pushed.len() { 0 } else { i + 1 };
        }
        for (i, _) in pushed.iter().enumerate().filter(|(_, pushed)| **pushed) {
            if !pool.pushed_to(i) {
                // Worker `i` has exited: what its last drain did not take
                // never ran (see `PoolShared::push_inbox`).
                reaper::reap(PoolShared::take_all(&pool.remotes[i].inbox));
            }
        }
        // The pool's next single spawn goes on where the batch stopped
        // (`pick_worker` counted the first).
        if made > 1 {
            pool.next_pinned.fetch_add(made - 1, Ordering::Relaxed);
        }
        pool.settle_spawn();
    }
}
