//! A batch of pinned tasks queued together ([`Scheduler::spawn_fibers`]):
//! the tasks are made first and queued on their workers once the batch is
//! done, each worker's with one fence and at most one directed wake-up
//! (P6, P10), where a single spawn pays both for each.
//!
//! [`Scheduler::spawn_fibers`]: crate::Scheduler::spawn_fibers

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{reaper, worker, PoolShared};
use crate::task::Runnable;

/// The pinned tasks of a batch, placed round-robin on a pool's workers
/// from where the pool's single spawns are (as libdex places fibers). Its
/// drop queues them, also when the batch ends in a panic (the caller's
/// iterator or `Extend`): nothing is queued before (but for a shutdown
/// met half-way, [`flush`](Self::flush)), so no worker runs any of them
/// while the caller's code that makes the batch still runs.
pub(crate) struct PinnedBatch<'a> {
    pool: &'a Arc<PoolShared>,
    /// The worker of the next task (the first picked with the first task).
    next: Option<usize>,
    /// The worker of `held`'s first.
    first: usize,
    /// The tasks made and not queued yet, in order: each belongs to the
    /// worker after the one before's, from `first`.
    held: Vec<Runnable>,
    /// The tasks made so far.
    made: usize,
}

impl<'a> PinnedBatch<'a> {
    /// An empty batch, with room for `expected` tasks (the iterator's
    /// lower bound).
    pub(crate) fn new(pool: &'a Arc<PoolShared>, expected: usize) -> Self {
        PinnedBatch {
            pool,
            next: None,
            first: 0,
            held: Vec::with_capacity(expected),
            made: 0,
        }
    }

    /// The worker the next task belongs to (the same until it is pushed).
    pub(crate) fn next_worker(&mut self) -> usize {
        let pool = self.pool;
        *self.next.get_or_insert_with(|| pool.pick_worker())
    }

    /// Adds `runnable`, made for [`next_worker`](Self::next_worker), to the
    /// batch.
    pub(crate) fn push(&mut self, runnable: Runnable) {
        let Some(next) = self.next else {
            unreachable!("next_worker names a task's worker first")
        };
        if self.held.is_empty() {
            self.first = next;
        }
        self.held.push(runnable);
        self.made += 1;
        self.next = Some(if next + 1 == self.pool.workers() {
            0
        } else {
            next + 1
        });
    }

    /// Queues what the batch holds: our own worker's on its pinned queue,
    /// the others' in their inboxes, each of those with one directed
    /// wake-up. What lands in the inbox of a worker that has exited never
    /// ran, and is taken back and dropped (see `PoolShared::push_inbox`):
    /// so after a shutdown, a flush resolves the tasks held (`Cancelled`).
    /// Whether it held any.
    pub(crate) fn flush(&mut self) -> bool {
        let pool = self.pool;
        let held = std::mem::take(&mut self.held);
        if held.is_empty() {
            return false;
        }
        let mut pushed = vec![false; pool.workers()];
        let mut i = self.first;
        for runnable in held {
            // Made into a job now: its latency stamp (P12) is the time it
            // is queued, as a single spawn's.
            let job = pool.task_job(runnable);
            if let Err(job) = worker::push_pinned_local(pool, i, job) {
                pool.remotes[i].inbox.push(job);
                pushed[i] = true;
            }
            i = if i + 1 == pushed.len() { 0 } else { i + 1 };
        }
        for (i, _) in pushed.iter().enumerate().filter(|(_, pushed)| **pushed) {
            if !pool.pushed_to(i) {
                reaper::reap(PoolShared::take_all(&pool.remotes[i].inbox));
            }
        }
        true
    }
}

impl Drop for PinnedBatch<'_> {
    fn drop(&mut self) {
        if self.next.is_none() {
            return;
        }
        let _ = self.flush();
        // The pool's next single spawn goes on where the batch stopped
        // (`pick_worker` counted the first).
        if self.made > 1 {
            self.pool
                .next_pinned
                .fetch_add(self.made - 1, Ordering::Relaxed);
        }
        self.pool.settle_spawn();
    }
}
