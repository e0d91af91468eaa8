//! Directed wake-ups are their own (P10), under load and at their edges:
//! pinned pushes and fibers woken from outside racing outside spawns on
//! pools of 2 and 3 workers, from parked workers each round; and a parked
//! worker whose thread is busy in another source of its own context (a
//! context scheduler's task, a GLib callback) is no sleeper to a request;
//! nor does one that its own thread woke between its source's prepare and
//! its poll block in that poll.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// The context of each of `pool`'s workers, by index (found by pinned tasks,
/// which go round-robin).
fn worker_contexts(pool: &gdex::ThreadPool, n: usize) -> Vec<glib::MainContext> {
    let mut found: Vec<(String, glib::MainContext)> = Vec::new();
    for _ in 0..8 * n {
        let (name, ctx) = gdex::wait_for(pool.spawn_pinned(|| async {
            (
                std::thread::current().name().unwrap_or("").to_owned(),
                glib::MainContext::thread_default().expect("a worker's context"),
            )
        }))
        .unwrap();
        if !found.iter().any(|(n, _)| *n == name) {
            found.push((name, ctx));
        }
        if found.len() == n {
            break;
        }
    }
    assert_eq!(found.len(), n, "found every worker's context");
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found.into_iter().map(|(_, c)| c).collect()
}

fn all_parked(pool: &gdex::ThreadPool) {
    common::wait_until(|| pool.metrics().workers.iter().all(|w| w.parked));
}

/// P10: a pinned job pushed to a parked worker wakes that worker for its
/// own inbox only. An outside spawn right behind it must still wake the
/// other sleeper, not coalesce with the directed wake-up and then wait
/// behind the pinned job's long poll. Here the pinned job blocks its worker
/// until the outside task has started (up to 2 s): with the two wake-ups
/// merged, the outside task sat in the injector while its only awake worker
/// waited for it and the other slept on.
#[test]
fn a_directed_wake_up_does_not_absorb_an_outside_spawns() {
    common::watchdog("a_directed_wake_up_does_not_absorb", 120, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let s = pool.scheduler();
        for trial in 0..common::stress(100) {
            common::wait_until(|| pool.metrics().workers.iter().all(|w| w.parked));
            let (started, seen) = std::sync::mpsc::channel::<()>();
            let pinned = pool.spawn_pinned(move || async move {
                seen.recv_timeout(std::time::Duration::from_secs(2)).is_ok()
            });
            let outside = s.spawn(async move {
                let _ = started.send(());
            });
            let ran_beside = gdex::wait_for(pinned).unwrap();
            gdex::wait_for(outside).unwrap();
            assert!(
                ran_beside,
                "trial {trial}: the outside task waited behind the pinned job's poll while \
                 the other worker slept: {:?}",
                pool.metrics()
            );
        }
    });
}

/// P10 under load: several outside threads each push a pinned task that
/// waits (blocking its worker, up to 2 s) for an outside task spawned right
/// behind it. On 3 workers there is always a worker free for the outside
/// task; it must start while the pinned one waits, every time.
#[test]
fn concurrent_pinned_waiters_and_outside_spawns_all_meet() {
    common::watchdog("concurrent_pinned_waiters", 240, || {
        let pool = gdex::ThreadPool::builder().workers(3).build().unwrap();
        let failures = Arc::new(AtomicUsize::new(0));
        for _round in 0..common::stress(30) {
            all_parked(&pool);
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let s = pool.scheduler();
                    let failures = failures.clone();
                    std::thread::spawn(move || {
                        let (started, seen) = mpsc::channel::<()>();
                        let pinned = s.spawn_pinned(move || async move {
                            seen.recv_timeout(Duration::from_secs(2)).is_ok()
                        });
                        let outside = s.spawn(async move {
                            let _ = started.send(());
                        });
                        if !gdex::wait_for(pinned).unwrap() {
                            failures.fetch_add(1, Ordering::SeqCst);
                        }
                        gdex::wait_for(outside).unwrap();
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
        }
        assert_eq!(
            failures.load(Ordering::SeqCst),
            0,
            "an outside task waited 2 s behind a pinned poll: {:?}",
            pool.metrics()
        );
    });
}

/// P6/P10 lost wake-ups: bursts of pinned pushes to every worker, outside
/// spawns and tasks spawning children, from parked workers each round. Every
/// task must finish (the watchdog catches a worker left asleep with work).
#[test]
fn bursts_of_directed_and_general_pushes_lose_nothing() {
    common::watchdog("bursts_of_directed_and_general", 240, || {
        let pool = gdex::ThreadPool::builder().workers(3).build().unwrap();
        for _round in 0..common::stress(200) {
            all_parked(&pool);
            let done = Arc::new(AtomicUsize::new(0));
            let s = pool.scheduler();
            let (d1, d2) = (done.clone(), done.clone());
            let s1 = s.clone();
            let a = std::thread::spawn(move || {
                for _ in 0..6 {
                    let d = d1.clone();
                    s1.spawn_pinned(move || async move {
                        d.fetch_add(1, Ordering::SeqCst);
                    })
                    .detach();
                }
            });
            let s2 = s.clone();
            let b = std::thread::spawn(move || {
                for _ in 0..6 {
                    let d = d2.clone();
                    let s3 = s2.clone();
                    s2.spawn(async move {
                        let d4 = d.clone();
                        s3.spawn(async move {
                            d4.fetch_add(1, Ordering::SeqCst);
                        })
                        .detach();
                        d.fetch_add(1, Ordering::SeqCst);
                    })
                    .detach();
                }
            });
            a.join().unwrap();
            b.join().unwrap();
            common::wait_until(|| done.load(Ordering::SeqCst) == 18);
        }
    });
}

/// On a pool of two whose workers have parked, `occupy` makes worker 1's
/// thread busy for 600 ms in another source of its own context, and
/// returns once that has begun and something to wait on for its end; ten
/// outside spawns meanwhile, three times over. Gives the longest an outside
/// task waited to start (worker 0 sleeps all along).
fn worst_wait_behind_a_foreign_source(
    occupy: impl Fn(&glib::MainContext) -> Box<dyn FnOnce()>,
) -> (Duration, gdex::PoolMetrics) {
    let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
    let contexts = worker_contexts(&pool, 2);
    let s = pool.scheduler();
    let mut worst = Duration::ZERO;
    for _trial in 0..3 {
        all_parked(&pool);
        let ended = occupy(&contexts[1]);
        for _ in 0..10 {
            let t0 = Instant::now();
            let waited = gdex::wait_for(s.spawn(async move { t0.elapsed() })).unwrap();
            worst = worst.max(waited);
            std::thread::sleep(Duration::from_millis(2));
        }
        ended();
    }
    (worst, pool.metrics())
}

/// P10's promise, "queued work never waits behind one long poll while a
/// peer sleeps", when the long poll is not a pool job: a task of a context
/// scheduler made for a worker's own context (supported: S9) runs on the
/// worker's thread while it is parked to the pool. Only a worker asleep in
/// its poll is a sleeper to a request: outside spawns wake the other
/// worker, rather than take the busy one for a sleeper (and coalesce with
/// it) and wait for the whole foreign poll.
#[test]
fn an_outside_spawn_does_not_wait_behind_a_foreign_poll_on_a_parked_worker() {
    common::watchdog("outside_spawn_foreign_poll", 120, || {
        let (worst, metrics) = worst_wait_behind_a_foreign_source(|context| {
            let (entered_tx, entered) = mpsc::channel::<()>();
            let blocker = gdex::Scheduler::for_context(context).spawn(async move {
                entered_tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(600));
            });
            entered.recv().unwrap();
            Box::new(move || gdex::wait_for(blocker).unwrap())
        });
        assert!(
            worst < Duration::from_millis(200),
            "an outside task waited {worst:?} behind a context-scheduler task's poll on a \
             parked worker while the other worker slept: {metrics:?}"
        );
    });
}

/// As above on 3 workers, with a pool task stuck waiting for the outside
/// task: neither the outside spawn's request nor the stall monitor's
/// hand-over (P10: it includes the injector) may take the worker busy in
/// the foreign poll for one on its way and coalesce with it: the third
/// worker is woken.
#[test]
fn the_hand_over_is_not_absorbed_by_a_worker_busy_outside_its_slice() {
    common::watchdog("hand_over_absorbed", 120, || {
        let pool = gdex::ThreadPool::builder().workers(3).build().unwrap();
        let contexts = worker_contexts(&pool, 3);
        let s = pool.scheduler();
        let mut worst = Duration::ZERO;
        for _trial in 0..3 {
            all_parked(&pool);
            let (entered_tx, entered) = mpsc::channel::<()>();
            let foreign = gdex::Scheduler::for_context(&contexts[1]);
            let blocker = foreign.spawn(async move {
                entered_tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(800));
            });
            entered.recv().unwrap();
            for _ in 0..6 {
                let (tx, rx) = mpsc::channel::<Instant>();
                // A pool task that blocks its worker until the next one runs.
                let waiter = s.spawn(async move { rx.recv_timeout(Duration::from_secs(2)).ok() });
                std::thread::sleep(Duration::from_millis(5));
                let t0 = Instant::now();
                let j = s.spawn(async move {
                    let _ = tx.send(Instant::now());
                });
                if let Some(ran) = gdex::wait_for(waiter).unwrap() {
                    worst = worst.max(ran.saturating_duration_since(t0));
                } else {
                    worst = Duration::from_secs(2);
                }
                gdex::wait_for(j).unwrap();
            }
            gdex::wait_for(blocker).unwrap();
        }
        assert!(
            worst < Duration::from_millis(200),
            "an outside task waited {worst:?} (a pool task blocked on it, a third worker \
             asleep): {:?}",
            pool.metrics()
        );
    });
}

/// The same with a plain GLib source on a worker's context (a timeout whose
/// callback runs long): any source of the context, not only a scheduler's.
#[test]
fn an_outside_spawn_does_not_wait_behind_a_glib_callback_on_a_parked_worker() {
    common::watchdog("outside_spawn_glib_callback", 120, || {
        let (worst, metrics) = worst_wait_behind_a_foreign_source(|context| {
            let left = common::busy_in_a_callback(context, Duration::from_millis(600));
            Box::new(move || left.recv().unwrap())
        });
        assert!(
            worst < Duration::from_millis(200),
            "an outside task waited {worst:?} behind a GLib callback on a parked worker while \
             the other worker slept: {metrics:?}"
        );
    });
}

/// P10 with fibers: a fiber woken from outside is a directed wake-up. A
/// fiber that blocks its worker until an outside task runs must not hold
/// that task hostage while the other worker sleeps.
#[test]
fn a_fiber_woken_from_outside_does_not_absorb_an_outside_spawn() {
    common::watchdog("fiber_directed", 120, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let s = pool.scheduler();
        for trial in 0..common::stress(50) {
            let (go_tx, go_rx) = futures::channel::oneshot::channel::<()>();
            let (started, seen) = mpsc::channel::<()>();
            let fiber = s.spawn_fiber(move || {
                let _ = gdex::fiber::wait(go_rx);
                seen.recv_timeout(Duration::from_secs(2)).is_ok()
            });
            all_parked(&pool);
            // Wakes the fiber (a directed push), then an outside spawn.
            go_tx.send(()).unwrap();
            let outside = s.spawn(async move {
                let _ = started.send(());
            });
            let ran_beside = gdex::wait_for(fiber).unwrap();
            gdex::wait_for(outside).unwrap();
            assert!(ran_beside, "trial {trial}: {:?}", pool.metrics());
        }
    });
}

/// A worker's own thread may wake one of its tasks between its source's
/// prepare (which found it parked) and the poll GLib then blocks in: user
/// code in another source's prepare, or a source's finalizer run while
/// GLib walks the sources. The worker is awake from then on, with the task
/// queued on it; it must not block in that poll (P7, P10: no request will
/// come to wake it, since requesters take an awake worker for one that
/// finds its work). Here a source at a lower priority than the worker's,
/// so prepared after it, wakes the worker's only task from its prepare;
/// nothing else happens on the context after that.
#[test]
fn a_task_woken_by_its_workers_thread_between_prepare_and_poll_runs() {
    use futures::channel::oneshot;
    common::watchdog("woken_between_prepare_and_poll", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let context = worker_contexts(&pool, 1).remove(0);
        for round in 0..common::stress(20) {
            let (fire, fired) = oneshot::channel::<()>();
            let fire = std::sync::Mutex::new(Some(fire));
            let polled = Arc::new(AtomicUsize::new(0));
            let task = pool
                .scheduler()
                .spawn(common::after_first_poll(&polled, fired));
            common::wait_until(|| polled.load(Ordering::SeqCst) == 1);
            all_parked(&pool);
            // Prepared after the worker's source, which finds it parked.
            let hook =
                common::PrepareHook::attach(&context, glib::ffi::G_PRIORITY_LOW, move || {
                    if let Some(fire) = fire.lock().unwrap().take() {
                        let _ = fire.send(());
                    }
                });
            let (done_tx, done) = mpsc::channel();
            std::thread::spawn(move || done_tx.send(gdex::wait_for(task)));
            let result = done.recv_timeout(Duration::from_secs(10));
            drop(hook);
            assert!(
                matches!(result, Ok(Ok(Ok(())))),
                "round {round}: the task its worker's own thread woke from a source's prepare \
                 did not run in 10 s ({result:?}): the worker slept with it queued: {:?}",
                pool.metrics()
            );
        }
    });
}
