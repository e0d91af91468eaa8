//! How a clock knows that what it drives is idle: `settle`, which waits
//! for its pools, and auto-advance (see `TestClock`'s docs): the probe
//! source of each attached context, the driver thread of a clock with
//! pools alone, and the jump.
//!
//! An idle context is told by a probe source at the lowest priority, which
//! GLib dispatches only in an iteration where nothing else is ready; an idle
//! pool by its workers' parking state: every worker asleep in its poll, none
//! holding a wake-up, and no job in its blocking lane. When all are idle at
//! once, the clock jumps to its next deadline and fires what is due. Each
//! context reports again after every jump, after every time a pool goes
//! idle, and after its gdex schedulers ran a task (which may wait on a new
//! timer now), so a report is never older than the last change the clock
//! saw; before a jump, each report is checked against its context's
//! schedulers, in case another context gave it work since.

use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::{context_key, take_due, ClockInner, MAX_ELAPSED};
use crate::source::Hooks;
use crate::util::Unpoisoned;

/// How long `settle` waits for a pool that never goes idle.
const SETTLE_LIMIT: Duration = Duration::from_secs(60);

#[derive(Default)]
pub(super) struct Driver {
    state: Mutex<DriverState>,
    /// The driver thread waits here for the hint.
    wake: Condvar,
    /// `settle` waits here for a pool to go idle.
    settled: Condvar,
    started: OnceLock<()>,
}

#[derive(Default)]
struct DriverState {
    /// A pool went idle and no context can tell: the driver thread checks.
    hinted: bool,
    /// The clock is gone: the driver thread ends.
    stop: bool,
    /// How many times a pool went idle: `settle` waits for the next.
    idle_events: u64,
}

impl Driver {
    /// The clock is gone: the driver thread, if it runs, ends.
    pub(super) fn stop(&self) {
        self.state.lock().unpoisoned().stop = true;
        self.wake.notify_one();
    }
}

/// The source that tells an attached context is idle.
pub(super) struct Probe {
    pub(super) clock: Weak<ClockInner>,
    pub(super) id: u64,
    /// The context's address (the attachment holds the context).
    pub(super) context: usize,
}

impl Hooks for Probe {
    fn ready(&self) -> bool {
        let Some(clock) = self.clock.upgrade() else {
            return false;
        };
        let dispatches = {
            let state = clock.lock();
            let Some(this) = state.contexts.iter().find(|a| a.id == self.id) else {
                return false;
            };
            if !state.auto || state.jumping || state.book.is_empty() {
                return false;
            }
            match this.reported {
                Some((epoch, dispatches)) if epoch == state.epoch => dispatches,
                _ => return true,
            }
        };
        // Reported in this epoch: again if a task of the context ran since
        // (it may wait on a new timer now, which no one else tells of).
        crate::scheduler::context::activity(self.context).dispatches != dispatches
    }

    fn dispatch(&self, _source: *mut glib_sys::GSource) -> bool {
        if let Some(clock) = self.clock.upgrade() {
            let activity = crate::scheduler::context::activity(self.context);
            clock.try_jump(Some((self.id, activity)));
        }
        true
    }
}

impl ClockInner {
    /// A worker of a pool on this clock is about to sleep in its poll, the
    /// pool's blocking lane emptied, or the pool shut down. Called from the
    /// worker's poll function, or under the lane's lock: runs no user code;
    /// wakes `settle`, and hands the check to the attached contexts (whose
    /// probes report again), or to the driver thread if there is none.
    pub(super) fn pool_went_idle(&self) {
        {
            let mut driver = self.driver.state.lock().unpoisoned();
            driver.idle_events += 1;
            self.driver.settled.notify_all();
        }
        self.recheck();
    }

    /// What auto-advance waits for has changed (a pool went idle, a
    /// context was let go): every attached context reports again, or,
    /// with none, the driver thread looks at the pools.
    pub(super) fn recheck(&self) {
        {
            let mut state = self.lock();
            if !state.auto || state.book.is_empty() {
                return;
            }
            state.epoch += 1;
            if !state.contexts.is_empty() {
                // Woken from here, not from clones: this may run under a
                // blocking lane's lock (its idle hook), where a clone could
                // be a context's last reference, and its finalization (its
                // sources' destroy notifies: user code) would run there.
                // GLib's wakeup takes no lock and runs nothing.
                for attached in &state.contexts {
                    attached.context.wakeup();
                }
                return;
            }
            if state.pools.is_empty() {
                return;
            }
        }
        // Started when the first pool was driven (`start_driver`), not
        // here: a thread that cannot start fails the pool's build, not a
        // lane thread under its lock.
        self.driver.state.lock().unpoisoned().hinted = true;
        self.driver.wake.notify_one();
    }

    /// Starts the thread that looks at the pools when one went idle and no
    /// context is attached to report (once; called as a pool is driven).
    ///
    /// # Panics
    /// If the thread cannot be started.
    pub(super) fn start_driver(&self) {
        let driver = self.driver.clone();
        let clock = self.me.clone();
        self.driver.started.get_or_init(move || {
            let spawned = std::thread::Builder::new()
                .name("gdex-test-clock".into())
                .spawn(move || loop {
                    {
                        let mut state = driver.state.lock().unpoisoned();
                        while !state.hinted && !state.stop {
                            state = driver.wake.wait(state).unpoisoned();
                        }
                        if state.stop {
                            return;
                        }
                        state.hinted = false;
                    }
                    let Some(clock) = clock.upgrade() else { return };
                    clock.try_jump(None);
                });
            spawned.expect("gdex: cannot start the gdex-test-clock thread");
        });
    }

    /// Whether every pool on this clock is idle: the context schedulers on
    /// its workers' contexts included, whose queues are not the pool's.
    /// Those are read first: a worker that has taken their work since is
    /// awake when the pool is read, or has gone back to sleep (and told
    /// the clock).
    fn pools_idle(&self) -> bool {
        let pools: Vec<Arc<crate::pool::PoolShared>> =
            self.lock().pools.iter().filter_map(Weak::upgrade).collect();
        pools.iter().all(|pool| {
            let queued = || {
                pool.worker_contexts()
                    .any(|c| crate::scheduler::context::activity(context_key(c)).queued)
            };
            pool.is_closed() || (!queued() && pool.is_idle())
        })
    }

    /// Waits until every pool on this clock is idle (see
    /// `TestClock::advance`).
    pub(super) fn settle(&self, what: &str) {
        // Upgraded and dropped outside the clock's lock.
        let pools = self.lock().pools.clone();
        if crate::pool::on_a_thread_of(&pools) {
            return;
        }
        let began = Instant::now();
        loop {
            let seen = self.driver.state.lock().unpoisoned().idle_events;
            // Outside the driver's lock: the lane's idle hook takes it
            // under the lane's lock, which `pools_idle` takes; and a pool
            // upgraded there may be dropped there, last.
            if self.pools_idle() {
                return;
            }
            assert!(
                began.elapsed() < SETTLE_LIMIT,
                "gdex: {what}: a pool on this clock has not been idle for a minute \
                 (a task that never waits?); the clock cannot move while its tasks run"
            );
            // Woken when a worker goes to sleep or the lane empties; the
            // timeout is a backstop.
            let driver = self.driver.state.lock().unpoisoned();
            if driver.idle_events == seen {
                let waited = self
                    .driver
                    .settled
                    .wait_timeout(driver, Duration::from_millis(2));
                drop(waited);
            }
        }
    }

    /// Each attached context, with its report.
    fn reports(&self) -> Vec<(glib::MainContext, (u64, u64))> {
        let state = self.lock();
        let reported = state.contexts.iter().filter_map(|a| {
            let report = a.reported?;
            Some((a.context.clone(), report))
        });
        reported.collect()
    }

    /// Jumps to the next deadline if every context and pool is idle.
    /// `reporter`: the attached context whose probe says it is idle now,
    /// and what its schedulers have done (`None`: the driver thread, for a
    /// pool that went idle).
    fn try_jump(&self, reporter: Option<(u64, crate::scheduler::context::Activity)>) {
        // Whether the contexts are idle, and in which epoch.
        let epoch = {
            let mut state = self.lock();
            if !state.auto || state.jumping || state.book.is_empty() {
                return;
            }
            let epoch = state.epoch;
            if let Some((id, activity)) = reporter {
                match state.contexts.iter_mut().find(|a| a.id == id) {
                    Some(attached) => attached.reported = Some((epoch, activity.dispatches)),
                    None => return,
                }
                if activity.queued {
                    return; // its scheduler runs next, and it reports again
                }
            }
            if state
                .contexts
                .iter()
                .any(|a| a.reported.is_none_or(|(e, _)| e != epoch))
            {
                return;
            }
            epoch
        };
        // Each report, then, stands for an idle context; but a context that
        // reported may have been given work since, by a task of another
        // one (the reporter's, say): unless its schedulers are as they were
        // when it reported, with nothing queued, it is not idle (it reports
        // again once it has run). Read outside the clock's lock.
        let reports = self.reports();
        let stale = reports.iter().any(|(context, (_, dispatches))| {
            let now = crate::scheduler::context::activity(context_key(context));
            now.queued || now.dispatches != *dispatches
        });
        if stale {
            return;
        }
        // The pools, outside the clock's lock: a pool upgraded here may be
        // dropped here, last.
        if !self.pools_idle() {
            return;
        }
        let fired = {
            let mut state = self.lock();
            // Anything since (a move, a pool going busy and idle again, the
            // mode turned off, a context that ran and reported again) asks
            // again.
            if state.epoch != epoch || !state.auto || state.jumping {
                return;
            }
            let same = state.contexts.len() == reports.len()
                && state
                    .contexts
                    .iter()
                    .zip(&reports)
                    .all(|(a, (context, reported))| {
                        a.context == *context && a.reported == Some(*reported)
                    });
            if !same {
                return;
            }
            let Some((&(deadline, _), _)) = state.book.first_key_value() else {
                return;
            };
            state.elapsed = state
                .elapsed
                .max((deadline - self.start_us).min(MAX_ELAPSED));
            let now = self.start_us + state.elapsed;
            state.epoch += 1;
            state.jumping = true;
            take_due(&mut state, now)
        };
        self.raise(fired);
        let contexts: Vec<glib::MainContext> = {
            let mut state = self.lock();
            state.jumping = false;
            state.contexts.iter().map(|a| a.context.clone()).collect()
        };
        for context in contexts {
            context.wakeup();
        }
    }
}
