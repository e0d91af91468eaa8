//! Drops the jobs a pusher finds it may not run, on a thread of their own.
//!
//! Once a pool is closed, a job pushed to it (a task spawned or woken while
//! it shuts down) is dropped rather than run: its task resolves to
//! `Cancelled` (shutdown step 5). The pusher must not drop it itself: it is
//! often inside a wake-up, called by a channel, a semaphore or a promise
//! (or any code of the user's) while holding a lock, and dropping the task's
//! future can take that same lock (a pending `recv` leaves its channel's
//! queue): the thread would deadlock on itself. So such jobs go to one
//! `gdex-reaper` thread, started on first use and asleep otherwise, which
//! drops them once the pusher's lock is free. `ThreadPool::shutdown` waits
//! for the jobs handed over before it returns, so every task of the pool
//! has still resolved by then (S9).

use std::sync::mpsc::Sender;
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::task::Job;
use crate::util::Unpoisoned;

struct Reaper {
    jobs: Mutex<Option<Sender<Vec<Job>>>>,
    /// (batches handed over, batches dropped).
    count: Mutex<(u64, u64)>,
    dropped: Condvar,
}

thread_local! {
    /// True on the `gdex-reaper` thread.
    static ON_REAPER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn reaper() -> &'static Reaper {
    static REAPER: OnceLock<Reaper> = OnceLock::new();
    REAPER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Vec<Job>>();
        let started = std::thread::Builder::new()
            .name("gdex-reaper".into())
            .spawn(move || {
                ON_REAPER.with(|r| r.set(true));
                for jobs in rx {
                    drop(jobs);
                    let r = reaper();
                    r.count.lock().unpoisoned().1 += 1;
                    r.dropped.notify_all();
                }
            })
            .is_ok();
        Reaper {
            jobs: Mutex::new(started.then_some(tx)),
            count: Mutex::new((0, 0)),
            dropped: Condvar::new(),
        }
    })
}

/// Drops `jobs` on the reaper thread (here, if it could not be started).
pub(crate) fn reap(jobs: Vec<Job>) {
    if jobs.is_empty() {
        return;
    }
    let r = reaper();
    let jobs = {
        let sender = r.jobs.lock().unpoisoned();
        match sender.as_ref() {
            Some(tx) => {
                r.count.lock().unpoisoned().0 += 1;
                match tx.send(jobs) {
                    Ok(()) => return,
                    Err(e) => {
                        r.count.lock().unpoisoned().0 -= 1;
                        e.0
                    }
                }
            }
            None => jobs,
        }
    };
    drop(jobs);
}

/// Waits until every job handed over so far has been dropped, for up to
/// `limit`. Not on the reaper thread itself (a reaped future's destructor
/// that shuts a pool down or spawns on one): what it would wait for
/// includes the batch it is dropping, and the batches behind it.
pub(crate) fn flush(limit: Duration) {
    if ON_REAPER.with(|r| r.get()) {
        return;
    }
    let r = reaper();
    let deadline = Instant::now() + limit;
    let mut count = r.count.lock().unpoisoned();
    let target = count.0;
    while count.1 < target {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        count = r.dropped.wait_timeout(count, left).unpoisoned().0;
    }
}
