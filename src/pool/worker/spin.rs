//! Watching for work instead of sleeping: a worker that ran out of jobs
//! before it parks (P7), and a fiber about to suspend on an idle worker,
//! for its wake from another thread (F3).

use std::sync::atomic::Ordering;

use super::{Core, SPIN};

impl Core {
    /// Before parking, watch the queues for a few microseconds: work that
    /// arrives meanwhile (the other half of a ping-pong, the next item of a
    /// stream) is taken without a wake-up syscall on either side, and
    /// without the latency of waking a sleeping thread. Yields the CPU while
    /// it watches, so it never delays the thread that would produce the work.
    pub(super) fn spin_for_work(&self) -> bool {
        let start = std::time::Instant::now();
        let mut round = 0u32;
        loop {
            if self.sees_work() {
                return true;
            }
            if start.elapsed() >= SPIN {
                return false;
            }
            round += 1;
            if round.is_multiple_of(16) {
                std::thread::yield_now();
            } else {
                for _ in 0..8 {
                    std::hint::spin_loop();
                }
            }
        }
    }

    /// A fiber of this worker is about to suspend in a wait whose wake may
    /// come from another thread: while nothing else waits here, and the
    /// running job's slice has room for one more, watch for that wake
    /// (`done`) for up to [`FIBER_SPIN`](super::FIBER_SPIN) instead, sparing the fiber's
    /// suspension, its resumption's trip through the mailbox and the search
    /// that finds it (two fibers handing control to each other across
    /// workers then go on without either suspending). A wake that `done`
    /// sees counts as a job of the slice, as a chained resumption does
    /// ([`next_resumption`](Self::next_resumption)): P8's count and time,
    /// B5's watchdog. Not while the context holds AIO requests that only
    /// its next turn submits: what the fiber waits for cannot come before.
    pub(super) fn spin_while_idle(&self, done: &mut dyn FnMut() -> bool) -> bool {
        let left = self.chain_left.get();
        // The common case first, at no cost: the fiber that woke ours runs
        // on this very worker, and waits in its own queue.
        if left == 0 || self.searching.get() || !self.pinned.borrow().is_empty() {
            return false;
        }
        // P8 by time: the clock is read here anyway.
        let start = crate::util::clock::now();
        if start >= self.slice_deadline.get() {
            return false;
        }
        let mut round = 0u32;
        loop {
            if done() {
                break;
            }
            if self.shared.closed.load(Ordering::Relaxed)
                || self.sees_work()
                || crate::current::has_loop_work()
            {
                return false;
            }
            for _ in 0..2 {
                std::hint::spin_loop();
            }
            round += 1;
            if round.is_multiple_of(8)
                && crate::util::clock::now()
                    .checked_sub(start)
                    .is_none_or(|spun| spun >= self.fiber_spin_ticks)
            {
                return false;
            }
        }
        self.chain_one(left);
        true
    }

    /// The re-check after announcing a park: is any job visible anywhere?
    pub(super) fn sees_work(&self) -> bool {
        !self.local.is_empty()
            || !self.pinned.borrow().is_empty()
            || self.woken.borrow().is_some()
            || self.shared.remotes[self.index].has_mail()
            || !self.shared.remotes[self.index].inbox.is_empty()
            || !self.shared.injector.is_empty()
            || !self.shared.urgent.is_empty()
            // P9: in thread-per-core mode a peer's deque is not ours to
            // take (`steal` never does); counting it would keep this worker
            // searching, never parking, while the peer has backlog.
            || !self.shared.thread_per_core
                && self
                    .shared
                    .stealers
                    .iter()
                    .enumerate()
                    .any(|(i, s)| i != self.index && !s.is_empty())
    }
}
