//! Per-worker counters (DESIGN "Introspection").
//!
//! Each counter of a worker is written only by that worker's thread, so an
//! increment is a relaxed load and store, not a locked read-modify-write; any
//! thread may read them. Requests sent from outside the pool are counted on
//! the pool, with atomic adds.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::latency::{LatencyHistogram, Recorder};
use crossbeam_utils::CachePadded;

/// One owner-written counter.
#[derive(Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    /// Adds one. Only the owning worker's thread may call this.
    #[inline]
    pub(crate) fn bump(&self) {
        self.0.store(self.0.load(Relaxed) + 1, Relaxed);
    }

    /// Adds one from any thread.
    #[inline]
    pub(crate) fn add_shared(&self) {
        self.0.fetch_add(1, Relaxed);
    }

    /// Adds `n` from any thread.
    #[inline]
    pub(crate) fn add_shared_n(&self, n: u64) {
        self.0.fetch_add(n, Relaxed);
    }

    pub(crate) fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

#[derive(Default)]
pub(crate) struct WorkerCounters {
    pub(crate) tasks_run: Counter,
    pub(crate) steals: Counter,
    pub(crate) steal_attempts: Counter,
    pub(crate) injector_pulls: Counter,
    pub(crate) wake_requests_sent: Counter,
    pub(crate) wake_requests_coalesced: Counter,
    pub(crate) wake_requests_received: Counter,
    pub(crate) parks: Counter,
    pub(crate) context_iterations: Counter,
}

impl WorkerCounters {
    pub(crate) fn snapshot(&self, index: usize, parked: bool) -> WorkerMetrics {
        WorkerMetrics {
            index,
            parked,
            tasks_run: self.tasks_run.get(),
            steals: self.steals.get(),
            steal_attempts: self.steal_attempts.get(),
            injector_pulls: self.injector_pulls.get(),
            wake_requests_sent: self.wake_requests_sent.get(),
            wake_requests_coalesced: self.wake_requests_coalesced.get(),
            wake_requests_received: self.wake_requests_received.get(),
            parks: self.parks.get(),
            context_iterations: self.context_iterations.get(),
            wake_to_poll: LatencyHistogram::default(),
            poll_durations: LatencyHistogram::default(),
        }
    }
}

/// A snapshot of one worker's counters, from [`ThreadPool::metrics`](crate::ThreadPool::metrics).
///
/// Counters only grow; compare two snapshots to see what happened between
/// them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerMetrics {
    /// The worker's index; its thread is named `gdex-worker-{index}`.
    pub index: usize,
    /// Whether the worker was parked when the snapshot was taken: it found
    /// no work anywhere and nobody has asked it to wake up since (P7). It
    /// sleeps in its context's poll, or is on its way there: the iteration
    /// that parked it may still be ending, and a wake-up sent while it
    /// announced the park (for work it then found itself) may still be
    /// pending, so `context_iterations` can grow by up to two more before
    /// it settles.
    pub parked: bool,
    /// Jobs (task polls and work items) this worker ran.
    pub tasks_run: u64,
    /// Successful steals from peers' deques (each may move a batch).
    pub steals: u64,
    /// Scans of the peers' deques, successful or not.
    pub steal_attempts: u64,
    /// Successful pulls (each may move a batch) from the pool's injector.
    pub injector_pulls: u64,
    /// Wake requests this worker sent to a peer (a syscall for a parked peer,
    /// a flag for a busy one).
    pub wake_requests_sent: u64,
    /// Requests this worker would have sent, absorbed by one already pending.
    pub wake_requests_coalesced: u64,
    /// Wake requests this worker consumed.
    pub wake_requests_received: u64,
    /// Times this worker went to sleep in its context's poll.
    pub parks: u64,
    /// Iterations of this worker's `GMainContext`.
    pub context_iterations: u64,
    /// From the spawn or wake-up of each task this worker polled to the
    /// start of that poll (O1); empty unless the pool's latency histograms
    /// are on ([`ThreadPoolBuilder::latency_histograms`](crate::ThreadPoolBuilder::latency_histograms)).
    pub wake_to_poll: LatencyHistogram,
    /// How long each job this worker ran took (O1: a task's poll, a work
    /// item, a fiber's resumption); empty unless the histograms are on.
    pub poll_durations: LatencyHistogram,
}

/// A snapshot of a pool's counters, from [`ThreadPool::metrics`](crate::ThreadPool::metrics).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolMetrics {
    /// One entry per worker, by index.
    pub workers: Vec<WorkerMetrics>,
    /// Jobs pushed to the injector from outside the pool.
    pub injected: u64,
    /// Wake requests sent to a parked worker by threads outside the pool.
    pub external_wake_requests_sent: u64,
    /// Requests from outside the pool absorbed by one already pending.
    pub external_wake_requests_coalesced: u64,
    /// Every worker's `wake_to_poll`, summed (O1).
    pub wake_to_poll: LatencyHistogram,
    /// Every worker's `poll_durations`, summed (O1).
    pub poll_durations: LatencyHistogram,
    /// How many tasks the histograms count: 0 while off, 1 every one, `n`
    /// about one in `n` ([`ThreadPoolBuilder::sampled_latency_histograms`](crate::ThreadPoolBuilder::sampled_latency_histograms)).
    pub latency_sampling: u32,
}

impl PoolMetrics {
    /// Fills each worker's histograms from its cells in `recorders` (by
    /// index), and the pool's with their sums.
    pub(crate) fn with_latency(mut self, recorders: &[CachePadded<Recorder>]) -> Self {
        for (worker, recorder) in self.workers.iter_mut().zip(recorders) {
            worker.wake_to_poll = recorder.wake_to_poll();
            worker.poll_durations = recorder.poll_durations();
            self.wake_to_poll.merge(&worker.wake_to_poll);
            self.poll_durations.merge(&worker.poll_durations);
        }
        self
    }

    /// The sum of every worker's `tasks_run`.
    pub fn tasks_run(&self) -> u64 {
        self.workers.iter().map(|w| w.tasks_run).sum()
    }
}
