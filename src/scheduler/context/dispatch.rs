//! One dispatch of a context scheduler: a bounded batch of jobs (S1, X3),
//! taking turns between the shared queue and the dispatching thread's
//! `!Send` queue (S10), the turn carried from one of that thread's
//! dispatches to the next so that neither queue waits on the other's long
//! polls (S11).

use std::sync::atomic::Ordering;

use super::{latency, ContextShared, LocalQueue, DISPATCH_BATCH, FINISHED, RETIRED};
use crate::util::steal_one;

impl ContextShared {
    /// Runs up to a batch of jobs, taking turns between the shared queue
    /// and the calling thread's `!Send` queue, until both run out.
    fn run_jobs(&self, local: Option<&LocalQueue>) {
        let started = crate::util::clock::now();
        let deadline = started.wrapping_add(self.dispatch_ticks);
        let mut timer = self.latency_slice(started);
        let mut local_turn = local.is_some_and(|l| l.went_last.load(Ordering::Relaxed));
        let mut ran = 0;
        while ran < DISPATCH_BATCH {
            local_turn = local.is_some() && !local_turn;
            let shared = || steal_one(|| self.queue.steal());
            let job = match (local_turn, local) {
                (true, Some(local)) => steal_one(|| self.steal_local(local)).or_else(shared),
                _ => shared().or_else(|| local.and_then(|l| steal_one(|| self.steal_local(l)))),
            };
            let Some(job) = job else { break };
            self.runner.enter_job();
            let ended = latency::Histograms::run(&mut timer, job);
            self.runner.leave_job();
            ran += 1;
            if ended >= deadline || self.siblings.one_waits() {
                break;
            }
        }
        // Only its owner thread dispatches with it: relaxed.
        if let Some(local) = local {
            local.went_last.store(local_turn, Ordering::Relaxed);
        }
    }

    /// One dispatch, from the scheduler's source or its progress source.
    pub(super) fn run_batch(&self) {
        self.pending.dispatches.fetch_add(1, Ordering::Relaxed);
        self.source.set_ready_time(-1);
        self.pending.notified.swap(false, Ordering::AcqRel);
        let stage = self.stage.load(Ordering::Acquire);
        if stage >= RETIRED {
            // Its worker has exited, and someone else iterates the context:
            // what its pushes left is dropped, not run (S9). (Before
            // `finish`, on the exiting worker itself, in a nested loop: its
            // drain drops them.)
            if stage == FINISHED {
                self.drop_retired();
            }
            return;
        }
        // B6: a dispatch nested in a job of this scheduler (a nested loop
        // inside its task's poll, a modal dialog's) suspends that job: the
        // time the nested loop takes is not the outer poll's, and the outer
        // job keeps its name and its stall clock after. (A job of another
        // runner that iterates this context blocks its own: it counts.)
        let _outer = crate::diagnostics::stall::suspend_current_of(&self.runner);
        let _current = crate::scheduler::enter_context(self);
        // Our tasks record themselves where they end (S9): in our worker's
        // registry, or nowhere, whatever thread runs this dispatch.
        let _registry = crate::task::registry::enter(self.registry.get());
        #[cfg(feature = "tokio")]
        let _tokio = crate::tokio_rt::enter();
        let _outside = crate::fiber::outside_fiber();
        let _runner = crate::diagnostics::stall::enter(&self.runner);
        let _slice = crate::diagnostics::views::slice(self.is_main);
        self.runner.busy();
        let local = self.local_queue_here();
        // P11: each task's poll has its own budget; the dispatch itself,
        // nested perhaps in a poll (a nested loop), is a top level: its
        // work items are unconstrained. With the `tokio` feature, so is
        // tokio's budget, which would otherwise be that of a tokio task
        // running the loop (see `tokio_rt::unconstrained`).
        let _unconstrained = crate::task::coop::enter_unconstrained();
        #[cfg(feature = "tokio")]
        crate::tokio_rt::unconstrained(|| self.run_jobs(local.as_deref()));
        #[cfg(not(feature = "tokio"))]
        self.run_jobs(local.as_deref());
        self.runner.idle();
        // Work left: come back after the other sources. (`!Send` jobs of
        // other threads wait for their thread: the source's `prepare` finds
        // them when it iterates the context. No timer polls for them.)
        let more = !self.queue.is_empty() || local.is_some_and(|q| !q.jobs.is_empty());
        if more && !self.pending.notified.swap(true, Ordering::AcqRel) {
            self.mark_ready();
        }
    }
}
