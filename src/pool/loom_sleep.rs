//! loom models of the sleep/wake-up protocol (P6, P7, X7): every
//! interleaving of a few threads running `Sleep`'s transitions, with the
//! queues reduced to counters and a context's wake-up to a flag.
//!
//! ```sh
//! RUSTFLAGS="--cfg gdex_loom" cargo test --release --lib loom_ --target-dir target/loom
//! ```
//!
//! Each model checks the promise "no wake-up is ever lost": when every
//! thread is done, either no work is left, or a worker that went to sleep
//! was told to wake up.

use loom::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering::SeqCst};
use loom::sync::Arc;
use loom::thread;

use super::sleep::{Request, Sleep};

/// Runs a model with at most 2 preemptions per execution, which keeps the
/// 4-thread models tractable (tokio's loom suites use the same bound).
fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(f);
}

/// Queues reduced to a count of jobs, and each worker's "your context was
/// woken" flag.
struct World {
    sleep: Sleep,
    jobs: AtomicUsize,
    woken: Vec<AtomicBool>,
    closed: AtomicBool,
}

impl World {
    fn new(workers: usize) -> Arc<World> {
        Arc::new(World {
            sleep: Sleep::new(workers),
            jobs: AtomicUsize::new(0),
            woken: (0..workers).map(|_| AtomicBool::new(false)).collect(),
            closed: AtomicBool::new(false),
        })
    }

    fn take(&self) -> bool {
        let mut n = self.jobs.load(SeqCst);
        while n > 0 {
            match self.jobs.compare_exchange(n, n - 1, SeqCst, SeqCst) {
                Ok(_) => return true,
                Err(m) => n = m,
            }
        }
        false
    }

    fn handle(&self, request: Request) {
        if let Request::Wake(i) = request {
            self.woken[i].store(true, SeqCst);
        }
    }

    /// Publishes a job from outside the pool, as `PoolShared::inject` does.
    fn inject(&self, start: usize) {
        self.jobs.fetch_add(1, SeqCst);
        fence(SeqCst);
        self.handle(self.sleep.request(None, start));
    }

    /// One worker's run until it runs dry and parks, as `run_slice` does.
    /// Returns how many jobs it ran.
    fn run_worker(&self, i: usize) -> usize {
        let mut ran = 0;
        self.sleep.wake_up(i);
        loop {
            if self.closed.load(SeqCst) {
                return ran;
            }
            if self.take() {
                ran += 1;
                // A thief that leaves backlog behind asks one more peer.
                if self.jobs.load(SeqCst) > 0 {
                    self.handle(self.sleep.request(Some(i), i + 1));
                }
                continue;
            }
            if !self.sleep.try_park(i) {
                self.sleep.wake_up(i);
                continue;
            }
            // The re-check after announcing the park.
            if self.jobs.load(SeqCst) > 0 || self.closed.load(SeqCst) {
                self.sleep.wake_up(i);
                continue;
            }
            return ran;
        }
    }

    /// After every thread is done: work is left only if some worker that
    /// parked was woken (its next dispatch would take it).
    fn check_no_lost_wakeup(&self) {
        if self.jobs.load(SeqCst) > 0 {
            let someone_woken = (0..self.woken.len())
                .any(|i| self.woken[i].load(SeqCst) && self.sleep.should_run(i));
            assert!(someone_woken, "a job was published and every worker sleeps");
        }
    }
}

/// A job injected while the only worker parks: it is run, or the worker is
/// woken.
#[test]
fn loom_publish_then_park() {
    model(|| {
        let world = World::new(1);
        let w = world.clone();
        let worker = thread::spawn(move || w.run_worker(0));
        world.inject(0);
        worker.join().unwrap();
        world.check_no_lost_wakeup();
    });
}

/// Two injections while two workers park: both jobs are run or some
/// sleeper was woken; a second request while a sleeper is on its way
/// coalesces instead of waking another.
#[test]
fn loom_coalesced_requests() {
    model(|| {
        let world = World::new(2);
        let workers: Vec<_> = (0..2)
            .map(|i| {
                let w = world.clone();
                thread::spawn(move || w.run_worker(i))
            })
            .collect();
        let w = world.clone();
        let other = thread::spawn(move || w.inject(1));
        world.inject(0);
        other.join().unwrap();
        for t in workers {
            t.join().unwrap();
        }
        world.check_no_lost_wakeup();
    });
}

/// A woken thief that leaves backlog wakes one more peer: two jobs, two
/// parked workers, one request from outside.
#[test]
fn loom_thief_wakes_one_more() {
    model(|| {
        let world = World::new(2);
        for i in 0..2 {
            assert!(world.sleep.try_park(i));
        }
        world.jobs.store(2, SeqCst);
        fence(SeqCst);
        world.handle(world.sleep.request(None, 0));
        // Whoever was woken runs; it must hand the backlog on.
        let woken: Vec<usize> = (0..2).filter(|&i| world.woken[i].load(SeqCst)).collect();
        assert_eq!(woken.len(), 1, "one request wakes one sleeper");
        let w = world.clone();
        let first = woken[0];
        let t = thread::spawn(move || w.run_worker(first));
        t.join().unwrap();
        world.check_no_lost_wakeup();
    });
}

/// Shutdown while a worker parks: the worker sees `closed`, or is woken.
#[test]
fn loom_shutdown_while_parked() {
    model(|| {
        let world = World::new(1);
        let w = world.clone();
        let worker = thread::spawn(move || w.run_worker(0));
        // PoolShared::shutdown: set the flag, then wake every context.
        world.closed.store(true, SeqCst);
        fence(SeqCst);
        world.woken[0].store(true, SeqCst);
        worker.join().unwrap();
        assert!(world.closed.load(SeqCst));
        assert!(world.woken[0].load(SeqCst));
    });
}

/// A directed notify (pinned work for one worker) while it parks.
#[test]
fn loom_directed_notify_while_parking() {
    model(|| {
        let world = World::new(2);
        let w = world.clone();
        let worker = thread::spawn(move || w.run_worker(1));
        world.jobs.fetch_add(1, SeqCst);
        fence(SeqCst);
        if world.sleep.notify(1) {
            world.woken[1].store(true, SeqCst);
        }
        worker.join().unwrap();
        world.check_no_lost_wakeup();
    });
}

/// Issue 12 point 2: two injectors race a worker that un-parks itself (a
/// timer fired on its context) and parks again. A requester whose notify
/// lost its race with the self-un-park must not look like "a sleeper on
/// its way" to the other requester: that one would coalesce, the worker
/// would re-park, and the second job would sit in the injector with every
/// worker asleep. Preemption bound 4 (the bound at which cc53133 fails).
#[test]
fn loom_two_injectors_and_a_self_unparking_worker() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(4);
    builder.check(|| {
        let world = World::new(1);
        // The worker starts parked, as an idle pool's worker is.
        assert!(world.sleep.try_park(0));
        let w = world.clone();
        let worker = thread::spawn(move || {
            // A timer fires: the poll returns (consuming any context
            // wake-up that came before it), the worker leaves the parked
            // state, runs what it finds and parks again.
            w.woken[0].store(false, SeqCst);
            w.run_worker(0);
        });
        let w = world.clone();
        let other = thread::spawn(move || w.inject(0));
        world.inject(0);
        other.join().unwrap();
        worker.join().unwrap();
        world.check_no_lost_wakeup();
    });
}
