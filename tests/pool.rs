//! The thread pool's contracts P2, P3, P6, P7, P8 and P9, observed through
//! real GLib sources, real GIO calls and the pool's metrics; and a pool's
//! end (S9): once its tasks have finished, or its last handle has gone
//! while they were being woken from another thread, the pool is freed, its
//! workers' contexts with it (a source planted on a worker's context is
//! destroyed).

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::channel::oneshot;
use gio::prelude::*;

use common::{spin, wait_until};

/// P3: a task re-waking itself forever (a `yield_now` loop) goes to the back
/// of the deque, so the 100 tasks queued behind it on a 1-worker pool run.
/// With a LIFO pop the yielder would run forever and this test would hang.
#[test]
fn yield_loop_does_not_starve_tasks_queued_behind_it() {
    common::watchdog("yield_loop_does_not_starve", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let s = pool.scheduler();
        let stop = Arc::new(AtomicBool::new(false));
        let ran = Arc::new(AtomicUsize::new(0));
        let (s2, stop2, ran2) = (s.clone(), stop.clone(), ran.clone());
        let yields = Arc::new(AtomicUsize::new(0));
        let yields2 = yields.clone();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        s.spawn(async move {
            // The yielder is queued first, on this worker's own deque...
            let stop3 = stop2.clone();
            s2.spawn(async move {
                while !stop3.load(Ordering::Acquire) {
                    yields2.fetch_add(1, Ordering::Relaxed);
                    gdex::yield_now().await;
                }
            })
            .detach();
            // ...then 100 tasks behind it.
            for _ in 0..100 {
                let (ran, stop, done_tx) = (ran2.clone(), stop2.clone(), done_tx.clone());
                s2.spawn(async move {
                    if ran.fetch_add(1, Ordering::AcqRel) + 1 == 100 {
                        stop.store(true, Ordering::Release);
                        done_tx.send(()).unwrap();
                    }
                })
                .detach();
            }
        })
        .detach();
        done_rx.recv().unwrap();
        assert_eq!(ran.load(Ordering::Acquire), 100);
        assert!(yields.load(Ordering::Relaxed) >= 1, "the yielder ran");
    });
}

/// Keeps `s`'s workers busy with 4 tasks that each spin for `job` and
/// yield, for at most 10 s or until the returned flag is raised; the
/// counter counts their polls.
fn saturate(s: &gdex::Scheduler, job: Duration) -> (Arc<AtomicBool>, Arc<AtomicUsize>) {
    let stop = Arc::new(AtomicBool::new(false));
    let busy_polls = Arc::new(AtomicUsize::new(0));
    for _ in 0..4 {
        let (stop, busy_polls) = (stop.clone(), busy_polls.clone());
        s.spawn(async move {
            let t = Instant::now();
            while !stop.load(Ordering::Acquire) && t.elapsed() < Duration::from_secs(10) {
                spin(job);
                busy_polls.fetch_add(1, Ordering::Relaxed);
                gdex::yield_now().await;
            }
        })
        .detach();
    }
    (stop, busy_polls)
}

/// P8: a 10 ms `glib::timeout_future` inside a task on a 1-worker pool that
/// always has work fires while the work goes on: the worker lets its
/// context dispatch due timers every 32 tasks.
#[test]
fn timeout_fires_on_a_saturated_worker() {
    common::watchdog("timeout_fires_on_a_saturated_worker", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let s = pool.scheduler();
        // Busy for at most 10 s: long after the timer is due.
        let (stop, busy_polls) = saturate(&s, Duration::from_micros(100));
        // Let the busy tasks saturate the worker first.
        common::wait_until(|| busy_polls.load(Ordering::Relaxed) > 100);
        let stop2 = stop.clone();
        let timer = s.spawn(async move {
            let t = Instant::now();
            glib::timeout_future(Duration::from_millis(10)).await;
            let waited = t.elapsed();
            stop2.store(true, Ordering::Release);
            waited
        });
        let waited = gdex::block_on(timer).unwrap();
        assert!(waited >= Duration::from_millis(10));
        // Liveness, not speed: without P8 the timer could only fire once the
        // busy tasks gave up after 10 s.
        assert!(
            waited < Duration::from_secs(5),
            "the timeout fired only after {waited:?}, when the busy tasks stopped"
        );
    });
}

/// P8 with short jobs: a busy worker's loop turns skip the kernel's poll of
/// its fds between polls at most 100 µs apart (a syscall saved per turn),
/// so an fd that becomes ready while every slice is 32 jobs of a
/// microsecond is still found, soon. The reader waits on its pipe with
/// `gdex::unix_fd`, a plain fd source on the worker's context: nothing but
/// a poll(2) can see it.
#[test]
fn an_fd_becomes_ready_on_a_worker_busy_with_short_jobs() {
    use std::io::{Read, Write};
    common::watchdog("an_fd_becomes_ready_on_a_busy_worker", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let s = pool.scheduler();
        let (stop, busy_polls) = saturate(&s, Duration::from_micros(1));
        let (mut ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let stop2 = stop.clone();
        let (waiting_tx, waiting) = std::sync::mpsc::channel();
        let reader = s.spawn(async move {
            waiting_tx.send(()).unwrap();
            gdex::unix_fd(&ours, glib::IOCondition::IN).await.unwrap();
            let found = Instant::now();
            stop2.store(true, Ordering::Release);
            let mut byte = [0];
            ours.read_exact(&mut byte).unwrap();
            found
        });
        waiting.recv().unwrap();
        common::wait_until(|| busy_polls.load(Ordering::Relaxed) > 10_000);
        let written = Instant::now();
        theirs.write_all(b"x").unwrap();
        let found = gdex::block_on(reader).unwrap();
        let waited = found.saturating_duration_since(written);
        // Liveness, not speed: a worker that never polled its fds while
        // busy would find it only when the busy tasks stop after 10 s.
        assert!(
            waited < Duration::from_secs(5),
            "the fd was found only after {waited:?}, when the busy tasks stopped"
        );
    });
}

/// P2: a GIO async call made inside a pool task runs its callback on the
/// same worker (its context is thread-default there) and completes.
#[test]
fn gio_async_call_completes_inside_a_pool_task() {
    common::watchdog("gio_async_call_completes", 60, || {
        let dir = std::env::temp_dir().join(format!("gdex-gio-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("hello.txt");
        std::fs::write(&path, b"hello from GIO").unwrap();

        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let task = pool.scheduler().spawn(async move {
            let (tx, rx) = oneshot::channel();
            let caller = std::thread::current().name().unwrap().to_owned();
            gio::File::for_path(&path).load_contents_async(
                None::<&gio::Cancellable>,
                move |result| {
                    let callback = std::thread::current().name().unwrap_or("?").to_owned();
                    let _ = tx.send((result.map(|(bytes, _)| bytes.to_vec()), callback));
                },
            );
            let (result, callback) = rx.await.unwrap();
            (result, caller, callback)
        });
        let (result, caller, callback) = gdex::block_on(task).unwrap();
        assert_eq!(result.unwrap(), b"hello from GIO");
        assert!(caller.starts_with("gdex-worker-"));
        assert_eq!(
            caller, callback,
            "the GIO callback ran on the calling worker"
        );
        std::fs::remove_dir_all(&dir).ok();
    });
}

/// P2: an idle source and a timeout source attached to the thread-default
/// context inside a pool task dispatch on that worker. (`glib::idle_add` and
/// `glib::timeout_add` attach to the *global* default context, as in C; the
/// thread-default context is the one a worker runs.)
#[test]
fn thread_default_sources_dispatch_on_the_worker() {
    common::watchdog("thread_default_sources_dispatch_on_the_worker", 60, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let task = pool.scheduler().spawn(async {
            let me = std::thread::current().id();
            let context = glib::MainContext::ref_thread_default();
            let (tx, rx) = oneshot::channel();
            let mut tx = Some(tx);
            glib::idle_source_new(None, glib::Priority::DEFAULT_IDLE, move || {
                let _ = tx.take().unwrap().send(std::thread::current().id());
                glib::ControlFlow::Break
            })
            .attach(Some(&context));
            let idle_thread = rx.await.unwrap();
            let (tx, rx) = oneshot::channel();
            let mut tx = Some(tx);
            glib::timeout_source_new(
                Duration::from_millis(2),
                None,
                glib::Priority::DEFAULT,
                move || {
                    let _ = tx.take().unwrap().send(std::thread::current().id());
                    glib::ControlFlow::Break
                },
            )
            .attach(Some(&context));
            let timeout_thread = rx.await.unwrap();
            (me, idle_thread, timeout_thread)
        });
        let (me, idle_thread, timeout_thread) = gdex::block_on(task).unwrap();
        assert_eq!(me, idle_thread);
        assert_eq!(me, timeout_thread);
    });
}

/// P6: a burst of local spawns on one worker of an otherwise idle 2-worker
/// pool wakes the other worker, which steals; further requests while the
/// peer already has one pending are coalesced.
#[test]
fn local_burst_wakes_a_peer_that_steals() {
    common::watchdog("local_burst_wakes_a_peer_that_steals", 60, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let s = pool.scheduler();
        // Let both workers park first.
        common::wait_until(|| pool.metrics().workers.iter().all(|w| w.parks > 0));
        let before = pool.metrics();
        let (s2, done) = (s.clone(), Arc::new(AtomicUsize::new(0)));
        let done2 = done.clone();
        let spawner = s.spawn(async move {
            for _ in 0..1000 {
                let done = done2.clone();
                s2.spawn(async move {
                    spin(Duration::from_micros(20));
                    done.fetch_add(1, Ordering::Relaxed);
                })
                .detach();
            }
            std::thread::current().name().unwrap().to_owned()
        });
        let spawner_thread = gdex::block_on(spawner).unwrap();
        common::wait_until(|| done.load(Ordering::Relaxed) == 1000);
        let after = pool.metrics();
        let home: usize = spawner_thread
            .trim_start_matches("gdex-worker-")
            .parse()
            .unwrap();
        let peer = 1 - home;
        let (p0, p1) = (&before.workers[peer], &after.workers[peer]);
        assert!(p1.steals > p0.steals, "the peer stole: {after:?}");
        assert!(
            p1.wake_requests_received > p0.wake_requests_received,
            "the peer received a wake request: {after:?}"
        );
        assert!(p1.tasks_run > p0.tasks_run, "the peer ran tasks: {after:?}");
        let (h0, h1) = (&before.workers[home], &after.workers[home]);
        assert!(h1.wake_requests_sent > h0.wake_requests_sent, "{after:?}");
        assert!(
            h1.wake_requests_coalesced > h0.wake_requests_coalesced,
            "repeated requests to the busy peer were coalesced: {after:?}"
        );
        // Coalescing is what keeps syscalls rare: far fewer requests sent
        // than tasks published.
        assert!(
            h1.wake_requests_sent - h0.wake_requests_sent < 100,
            "{after:?}"
        );
    });
}

/// P6: a deque that stays at a power of two asks seldom. Two tasks that
/// yield to each other on one worker leave its deque at 2 jobs at every
/// push; its peer, busy in a long poll, holds the first request. Asking it
/// again at each push (as the worker did: 2 is a power of two) only reads
/// its state: 10,000 yields made 10,000 requests, coalesced; now one, then
/// one every 64 pushes (`parking::REASK_EVERY`, for a peer that parked
/// racing a push).
#[test]
fn a_deque_that_stays_at_a_power_of_two_asks_seldom() {
    common::watchdog(
        "a_deque_that_stays_at_a_power_of_two_asks_seldom",
        60,
        || {
            // No stall report for the deliberate long poll (the hand-over to
            // peers works with the watchdog off too).
            let pool = common::quiet_pool(2);
            let s = pool.scheduler();
            let (busy_tx, busy) = std::sync::mpsc::channel::<String>();
            let stop = Arc::new(AtomicBool::new(false));
            let stop2 = stop.clone();
            let blocker = s.spawn(async move {
                busy_tx
                    .send(std::thread::current().name().unwrap().to_owned())
                    .unwrap();
                // Deliberate: the peer busy in one long poll.
                while !stop2.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
            });
            let peer_name = busy.recv().unwrap();
            let yields = common::stress(5_000);
            let s2 = s.clone();
            // From outside: the free worker takes it, and its two yielders are
            // pushed on its own deque.
            let driver = s.spawn(async move {
                let home = std::thread::current().name().unwrap().to_owned();
                let yielders: Vec<_> = (0..2)
                    .map(|_| {
                        s2.spawn(async move {
                            for _ in 0..yields {
                                gdex::yield_now().await;
                            }
                            std::thread::current().name().unwrap().to_owned()
                        })
                    })
                    .collect();
                let mut ran_on = Vec::new();
                for y in yielders {
                    ran_on.push(y.await.unwrap());
                }
                (home, ran_on)
            });
            let (home, ran_on) = gdex::block_on(driver).unwrap();
            stop.store(true, Ordering::Release);
            gdex::block_on(blocker).unwrap();
            assert_ne!(home, peer_name);
            assert!(
                ran_on.iter().all(|w| *w == home),
                "the yielders stayed home: {ran_on:?} (home {home})"
            );
            let index: usize = home.trim_start_matches("gdex-worker-").parse().unwrap();
            let w = &pool.metrics().workers[index];
            let asked = w.wake_requests_sent + w.wake_requests_coalesced;
            assert!(
                asked <= (2 * yields as u64) / 64 + 8,
                "{} yields on a deque of 2 asked the busy peer {asked} times: {w:?}",
                2 * yields
            );
        },
    );
}

/// P6: the length a deque last asked at asks again once a push has found
/// the deque empty. Each round, both workers asleep, a task pinned to one
/// of them (its wake-up is for that worker alone, P10) spawns two on that
/// worker's deque: the second push finds 2 jobs and asks the sleeping peer,
/// in every round, though the same worker's deque reached 2 and asked in
/// the rounds before (a length kept across the drain would ask no more,
/// and leave the peer asleep beside a queued job until the watchdog's
/// hand-over). Pinned tasks take the workers in turn: each is home in
/// every other round.
#[test]
fn a_deque_refilled_after_a_drain_asks_again() {
    common::watchdog("a_deque_refilled_after_a_drain_asks_again", 60, || {
        let pool = common::quiet_pool(2);
        let s = pool.scheduler();
        let mut homes = Vec::new();
        for round in 0..common::stress(10).max(4) {
            wait_until(|| pool.metrics().workers.iter().all(|w| w.parked));
            let before = pool.metrics();
            let s2 = s.clone();
            let spawner = pool.spawn_pinned(move || async move {
                let pair: Vec<_> = (0..2).map(|_| s2.spawn(async {})).collect();
                for t in pair {
                    t.await.unwrap();
                }
                std::thread::current().name().unwrap().to_owned()
            });
            let home = gdex::block_on(spawner).unwrap();
            let after = pool.metrics();
            let i: usize = home.trim_start_matches("gdex-worker-").parse().unwrap();
            let sent = after.workers[i].wake_requests_sent - before.workers[i].wake_requests_sent;
            // (A peer still on its way to its poll may see the first job
            // and take it before the second push: then it was awake, and
            // nobody needed asking.)
            let peer_stole = after.workers[1 - i].steals > before.workers[1 - i].steals;
            assert!(
                sent >= 1 || peer_stole,
                "round {round}: {home}'s deque reached 2 jobs and asked nobody (homes before: \
                 {homes:?}): {after:?}"
            );
            homes.push(home);
        }
        assert!(homes[1..].contains(&homes[0]), "{homes:?}");
    });
}

/// P6 with P10: a peer asked while its thread is busy in another source of
/// its context holds the request, and acts on it once that source returns,
/// though the asking deque stays at 2 jobs and asks no more (two tasks
/// yielding to each other on one worker, which asked at their second
/// push). A GLib callback on one worker's context, held until the other
/// worker's yielders have asked it once; after the callback, a yielder runs
/// on the worker that was busy.
#[test]
fn a_peer_busy_in_a_callback_takes_the_work_it_was_asked_for_after_it() {
    common::watchdog("a_peer_busy_in_a_callback_takes_the_work", 60, || {
        // No report of the deliberate callback (the hand-over works with the
        // watchdog off too).
        let pool = common::quiet_pool(2);
        let s = pool.scheduler();
        // One worker's context, from a task pinned there.
        let (busy, busy_context) = gdex::block_on(pool.spawn_pinned(|| async {
            (
                std::thread::current().name().unwrap().to_owned(),
                glib::MainContext::thread_default().expect("a worker's context"),
            )
        }))
        .unwrap();
        wait_until(|| pool.metrics().workers.iter().all(|w| w.parked));
        let before = pool.metrics();
        // The peer busy in another source, until the driver has spawned
        // its yielders (a fixed time could end first on a loaded machine,
        // and the driver start on the peer).
        let (release, _left) = common::busy_in_a_callback_until(&busy_context);
        let on_busy = Arc::new(AtomicBool::new(false));
        let (s2, busy2, on_busy2) = (s.clone(), busy.clone(), on_busy.clone());
        // From outside: the free worker takes it (the busy one sleeps in no
        // poll: no sleeper, P10), and its yielders go on its own deque.
        let driver = s.spawn(async move {
            let home = std::thread::current().name().unwrap().to_owned();
            let yielders: Vec<_> = (0..2)
                .map(|_| {
                    let (busy, on_busy) = (busy2.clone(), on_busy2.clone());
                    s2.spawn(async move {
                        let start = Instant::now();
                        while !on_busy.load(Ordering::Acquire)
                            && start.elapsed() < Duration::from_secs(10)
                        {
                            if std::thread::current().name() == Some(busy.as_str()) {
                                on_busy.store(true, Ordering::Release);
                            }
                            gdex::yield_now().await;
                        }
                    })
                })
                .collect();
            // The second push asked the peer: its callback may return.
            let _ = release.send(());
            for y in yielders {
                y.await.unwrap();
            }
            home
        });
        let home = gdex::block_on(driver).unwrap();
        let after = pool.metrics();
        assert_ne!(home, busy, "the busy worker ran the driver");
        assert!(
            on_busy.load(Ordering::Acquire),
            "no yielder ran on {busy} once its callback returned: {after:?}"
        );
        let b: usize = busy.trim_start_matches("gdex-worker-").parse().unwrap();
        assert!(
            after.workers[b].wake_requests_received > before.workers[b].wake_requests_received,
            "{busy} took the work without the request it held: {after:?}"
        );
    });
}

/// P4: work from outside goes through the injector, and a busy worker whose
/// deque never empties still takes it (it looks at the injector once per
/// slice).
#[test]
fn injected_work_runs_while_every_worker_has_local_work() {
    common::watchdog("injected_work_runs_while_busy", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let s = pool.scheduler();
        let stop = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicBool::new(false));
        for _ in 0..2 {
            let (stop, started) = (stop.clone(), started.clone());
            s.spawn(async move {
                started.store(true, Ordering::Release);
                while !stop.load(Ordering::Acquire) {
                    gdex::yield_now().await;
                }
            })
            .detach();
        }
        common::wait_until(|| started.load(Ordering::Acquire));
        let pulls = pool.metrics().workers[0].injector_pulls;
        let stop2 = stop.clone();
        let outside = s.spawn(async move { stop2.store(true, Ordering::Release) });
        gdex::block_on(outside).unwrap();
        assert!(pool.metrics().workers[0].injector_pulls > pulls);
    });
}

/// Work items (S3) run on the pool, and a panicking one is contained (S6).
#[test]
fn work_items_run_and_their_panics_are_contained() {
    common::watchdog("work_items_run", 60, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let s = pool.scheduler();
        let (tx, rx) = std::sync::mpsc::channel();
        s.push(|| panic!("a work item that panics"));
        for i in 0..1000 {
            let tx = tx.clone();
            s.push(move || tx.send(i).unwrap());
        }
        let mut got: Vec<i32> = (0..1000).map(|_| rx.recv().unwrap()).collect();
        got.sort_unstable();
        assert_eq!(got, (0..1000).collect::<Vec<_>>());
    });
}

/// P2: worker threads are named `gdex-worker-N`, the worker's context is
/// thread-default and owned by it, and `Scheduler::thread_default` there is
/// the pool.
#[test]
fn workers_are_named_and_own_their_context() {
    common::watchdog("workers_are_named", 60, || {
        let pool = gdex::ThreadPool::builder().workers(3).build().unwrap();
        let s = pool.scheduler();
        let tasks: Vec<_> = (0..30)
            .map(|_| {
                s.spawn(async {
                    let ctx =
                        glib::MainContext::thread_default().expect("a thread-default context");
                    (
                        std::thread::current().name().unwrap().to_owned(),
                        ctx.is_owner(),
                        ctx != glib::MainContext::default(),
                        gdex::Scheduler::thread_default().is_some_and(|s| s.is_pool()),
                    )
                })
            })
            .collect();
        for t in tasks {
            let (name, owner, own_context, pool_default) = gdex::block_on(t).unwrap();
            let n: usize = name.strip_prefix("gdex-worker-").unwrap().parse().unwrap();
            assert!(n < 3);
            assert!(owner && own_context && pool_default);
        }
    });
}

/// Shutdown: queued tasks are dropped (their handles say Cancelled), the
/// threads are joined, and later spawns say ShutDown.
#[test]
fn shutdown_cancels_queued_tasks_and_refuses_new_ones() {
    common::watchdog("shutdown", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let s = pool.scheduler();
        let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
        let started = Arc::new(AtomicBool::new(false));
        let started2 = started.clone();
        let blocker = s.spawn(async move {
            started2.store(true, Ordering::Release);
            gate_rx.recv().unwrap();
        });
        common::wait_until(|| started.load(Ordering::Acquire));
        let queued: Vec<_> = (0..100).map(|i| s.spawn(async move { i })).collect();
        let closer = {
            let pool = pool.clone();
            std::thread::spawn(move || pool.shutdown())
        };
        common::wait_until(|| pool.is_closed());
        gate_tx.send(()).unwrap();
        closer.join().unwrap();
        // The blocker was running: it finished. Queued ones may have run
        // before the flag, or were dropped.
        gdex::block_on(blocker).unwrap();
        for t in queued {
            match gdex::block_on(t) {
                Ok(_) | Err(gdex::Error::Cancelled) => {}
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
        assert!(matches!(
            gdex::block_on(s.spawn(async { 1 })),
            Err(gdex::Error::ShutDown)
        ));
    });
}

/// A spawn on pool A from a worker of pool B goes to A (its injector), not
/// to the deque of the B worker that spawned it: the task runs on A's
/// thread.
#[test]
fn a_spawn_on_another_pool_from_a_worker_runs_on_that_pool() {
    common::watchdog("spawn_on_another_pool", 60, || {
        let a = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let b = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let a_thread =
            gdex::block_on(a.scheduler().spawn(async { std::thread::current().id() })).unwrap();
        let sa = a.scheduler();
        let (b_thread, ran_on) = gdex::block_on(b.scheduler().spawn(async move {
            let me = std::thread::current().id();
            let there = sa
                .spawn(async { std::thread::current().id() })
                .await
                .unwrap();
            (me, there)
        }))
        .unwrap();
        assert_ne!(a_thread, b_thread);
        assert_eq!(
            ran_on, a_thread,
            "the task ran on the spawning pool's worker"
        );
    });
}

/// S7, P3: a spawn from a worker of the same pool goes to that worker's
/// deque, not through the injector.
#[test]
fn spawns_from_a_worker_skip_the_injector() {
    common::watchdog("spawns_from_a_worker_skip_the_injector", 60, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let s = pool.scheduler();
        let before = pool.metrics().injected;
        let s2 = s.clone();
        let n = gdex::block_on(s.spawn(async move {
            let tasks: Vec<_> = (0..100).map(|i| s2.spawn(async move { i })).collect();
            let mut sum = 0;
            for t in tasks {
                sum += t.await.unwrap();
            }
            sum
        }))
        .unwrap();
        assert_eq!(n, 4950);
        assert_eq!(
            pool.metrics().injected - before,
            1,
            "only the outside spawn went through the injector"
        );
    });
}

/// P9: in thread-per-core mode a task woken from another worker resumes on
/// its home worker (the waker queues it in its home's inbox, not on the
/// waker's deque).
#[test]
fn thread_per_core_a_task_woken_from_another_worker_resumes_at_home() {
    common::watchdog("tpc_woken_from_another_worker", 60, || {
        let pool = gdex::ThreadPool::builder()
            .workers(2)
            .thread_per_core(true)
            .build()
            .unwrap();
        let s = pool.scheduler();
        let (tx, rx) = oneshot::channel::<()>();
        let waiting = Arc::new(AtomicUsize::new(0));
        let rx = common::after_first_poll(&waiting, rx);
        // Spawned from outside: round-robin homes, so the two differ.
        let sleeper = s.spawn(async move {
            let before = std::thread::current().id();
            rx.await.unwrap();
            (before, std::thread::current().id())
        });
        let w = waiting.clone();
        let waker = s.spawn(async move {
            while w.load(Ordering::SeqCst) == 0 {
                gdex::yield_now().await;
            }
            tx.send(()).unwrap();
            std::thread::current().id()
        });
        let waker_thread = gdex::block_on(waker).unwrap();
        let (before, after) = gdex::block_on(sleeper).unwrap();
        assert_ne!(before, waker_thread, "the two tasks share a home");
        assert_eq!(after, before, "the task left its home worker");
    });
}

/// P6: a worker whose deque grows asks a peer for help as the deque reaches
/// 2, 4, 8, ... jobs, not on every push: 1,000 local spawns make nine
/// requests, one per doubling up to 512 (mutant: a request per push, a
/// thousand).
///
/// The peer is kept busy until the burst is queued, so the deque grows to
/// 1,000 undisturbed, and the requests are counted from inside the burst's
/// task, right after its last spawn. (Counted after the burst had been
/// run, they also held the freed peer's own requests: one per steal that
/// left backlog, and one each time the burst's task, woken by a task the
/// peer ran, landed on the peer's refilled deque as it reached 2, 4, 8 or
/// 16 jobs. Those depend on how the two threads interleave: the old bound
/// of 20 + steals failed once with 76 requests for 36 steals.)
#[test]
fn a_burst_of_local_spawns_asks_for_help_only_as_the_deque_doubles() {
    common::watchdog("a_burst_of_local_spawns_asks_for_help", 60, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let s = pool.scheduler();
        let (started, queued) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let (started2, queued2) = (started.clone(), queued.clone());
        let blocker = s.spawn(async move {
            started2.store(true, Ordering::Release);
            // Busy in one poll: this worker neither parks nor steals.
            while !queued2.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
        });
        common::wait_until(|| started.load(Ordering::Acquire));
        let asked = |m: &gdex::PoolMetrics| -> u64 {
            m.workers
                .iter()
                .map(|w| w.wake_requests_sent + w.wake_requests_coalesced)
                .sum()
        };
        let before = pool.metrics();
        let (s2, pool2) = (s.clone(), pool.clone());
        let burst = s.spawn(async move {
            let tasks: Vec<_> = (0..1000)
                .map(|_| s2.spawn(async { std::hint::black_box(1) }))
                .collect();
            let queued_by_now = pool2.metrics();
            queued.store(true, Ordering::Release);
            for t in tasks {
                t.await.unwrap();
            }
            queued_by_now
        });
        let during = gdex::block_on(burst).unwrap();
        gdex::block_on(blocker).unwrap();
        let requests = asked(&during) - asked(&before);
        assert_eq!(
            requests, 9,
            "{requests} requests for 1,000 pushes onto a deque nobody took from: {during:?}"
        );
    });
}

/// P8: a task woken by one of its worker's own GLib sources (here a
/// `glib::timeout_future`) between two run slices runs first in the next
/// one, not behind the whole deque (mutant: once the first slice had ended,
/// the worker believed itself inside a slice for ever, and the timer's task
/// waited behind the 50 queued jobs).
#[test]
fn a_task_woken_by_its_workers_timer_runs_before_the_queue() {
    common::watchdog("a_task_woken_by_its_workers_timer_runs_first", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let s = pool.scheduler();
        let s2 = s.clone();
        let ran_before = s.spawn(async move {
            let done = Arc::new(AtomicUsize::new(0));
            let d = done.clone();
            let timer_task = s2.spawn(async move {
                glib::timeout_future(std::time::Duration::from_millis(5)).await;
                d.load(Ordering::SeqCst)
            });
            // Queued behind it: the timer task is polled, and its source
            // attached to the worker's context, before the burst below.
            gdex::yield_now().await;
            let burst: Vec<_> = (0..50)
                .map(|_| {
                    let done = done.clone();
                    s2.spawn(async move {
                        common::spin(std::time::Duration::from_millis(1));
                        done.fetch_add(1, Ordering::SeqCst);
                    })
                })
                .collect();
            let ran_before = timer_task.await.unwrap();
            for t in burst {
                t.await.unwrap();
            }
            ran_before
        });
        let ran_before = gdex::block_on(ran_before).unwrap();
        assert!(
            ran_before < 25,
            "the timer's task waited for {ran_before} of the 50 queued jobs"
        );
    });
}

/// P5 beyond two workers: the peers of a worker with a local burst steal
/// from it (mutant: a pool of more than two workers never stole).
#[test]
fn a_local_burst_is_stolen_by_the_peers_of_a_three_worker_pool() {
    common::watchdog("a_local_burst_is_stolen_by_peers_of_three", 60, || {
        let pool = gdex::ThreadPool::builder().workers(3).build().unwrap();
        let s = pool.scheduler();
        let s2 = s.clone();
        let burst = s.spawn(async move {
            let tasks: Vec<_> = (0..1000)
                .map(|_| s2.spawn(async { spin(Duration::from_micros(20)) }))
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        gdex::block_on(burst).unwrap();
        let steals: u64 = pool.metrics().workers.iter().map(|w| w.steals).sum();
        assert!(steals > 0, "nobody stole: {:?}", pool.metrics());
    });
}

/// A thread-per-core idle worker parks while a peer has backlog (P9, P7,
/// P8). In thread-per-core mode a worker never steals (`steal()` returns
/// `None`), so its park re-check `sees_work()` must not count its peers'
/// deques. If it did, while a peer runs a long poll with jobs queued on its
/// deque, an idle worker would find no job, announce its park, see the
/// peer's backlog, un-park and search again, forever: `ran` never grows,
/// so the slice never ends. It burns its CPU and never returns to its
/// `GMainContext`: its own timers and GLib sources wait for the peer. The
/// loom models have no thread-per-core mode.
#[test]
fn thread_per_core_idle_worker_parks_while_a_peer_has_backlog() {
    common::watchdog("tpc_idle_peer", 60, || {
        let pool = gdex::ThreadPool::builder()
            .workers(2)
            .thread_per_core(true)
            .stall_threshold(Duration::ZERO)
            .build()
            .unwrap();
        let s = pool.scheduler();
        let busy = Arc::new(AtomicBool::new(false));
        let b = busy.clone();
        let s2 = s.clone();
        // Home: worker 0 (the first outside spawn, round-robin). Its
        // children stay on worker 0's deque behind its long poll.
        let a = s.spawn(async move {
            let children: Vec<_> = (0..2).map(|_| s2.spawn(async {})).collect();
            b.store(true, Ordering::SeqCst);
            common::spin(Duration::from_millis(600));
            children
        });
        wait_until(|| busy.load(Ordering::SeqCst));
        // Home: worker 1. A 10 ms timer on its context.
        let timed = s.spawn(async {
            let t = Instant::now();
            glib::timeout_future(Duration::from_millis(10)).await;
            (
                std::thread::current().name().unwrap().to_owned(),
                t.elapsed(),
            )
        });
        let (thread, waited) = gdex::block_on(timed).unwrap();
        for child in gdex::block_on(a).unwrap() {
            gdex::block_on(child).unwrap();
        }
        assert_eq!(thread, "gdex-worker-1");
        assert!(
            waited < Duration::from_millis(300),
            "a 10 ms timer on an idle worker took {waited:?}: the worker spun in \
             run_slice while its peer had backlog it may not steal"
        );
        pool.shutdown();
    });
}

/// Attaches to the calling worker's context a source that never fires and
/// whose closure sets the returned flag when dropped: the context destroys
/// its sources when it is freed, which its pool does when it is freed. So
/// the flag going up says the pool (`PoolShared`) was freed.
fn sentinel_on_this_worker() -> Arc<AtomicBool> {
    let freed = Arc::new(AtomicBool::new(false));
    let guard = common::SetOnDrop(freed.clone());
    glib::timeout_source_new(
        Duration::from_secs(3600),
        None,
        glib::Priority::DEFAULT,
        move || {
            let _keep = &guard;
            glib::ControlFlow::Continue
        },
    )
    .attach(Some(&glib::MainContext::ref_thread_default()));
    freed
}

/// Waits up to `limit` for `flag`.
fn wait_flag(flag: &AtomicBool, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while !flag.load(Ordering::SeqCst) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Pinned,
    Fiber,
    ThreadPerCore,
    LocalOnWorker,
}

/// A pool of two workers, thread-per-core for `ThreadPerCore`.
fn pool_for(kind: Kind) -> gdex::ThreadPool {
    gdex::ThreadPool::builder()
        .workers(2)
        .thread_per_core(matches!(kind, Kind::ThreadPerCore))
        .build()
        .unwrap()
}

/// A pool of two workers (thread-per-core for `ThreadPerCore`), a task of
/// `kind` that plants the sentinel on its worker, then one task of `kind`
/// per channel, each woken from this thread (through its home's inbox,
/// `push_inbox_keeping`) and finishing. Gives the pool, the sentinel and
/// the tasks' handles.
fn finished_tasks_of(kind: Kind, n: usize) -> Arc<AtomicBool> {
    let pool = pool_for(kind);
    let s = pool.scheduler();
    let sentinel: Arc<Mutex<Option<Arc<AtomicBool>>>> = Arc::default();
    let mut senders = Vec::new();
    let mut tasks: Vec<gdex::Task<usize>> = Vec::new();
    for i in 0..n {
        let (tx, rx) = gdex::channel::<usize>(1);
        senders.push(tx);
        let sentinel = sentinel.clone();
        let plant = move || {
            let mut slot = sentinel.lock().unwrap();
            if slot.is_none() {
                *slot = Some(sentinel_on_this_worker());
            }
        };
        let task = match kind {
            Kind::Pinned => pool.spawn_pinned(move || async move {
                plant();
                rx.recv().await.unwrap() + i
            }),
            Kind::ThreadPerCore => s.spawn(async move {
                plant();
                rx.recv().await.unwrap() + i
            }),
            Kind::Fiber => {
                let fiber = s.spawn_fiber(move || {
                    plant();
                    gdex::fiber::wait_output(async move { rx.recv().await.unwrap() + i }).unwrap()
                });
                s.spawn(async move { fiber.await.unwrap() })
            }
            Kind::LocalOnWorker => {
                let s2 = s.clone();
                s.spawn(async move {
                    s2.spawn_local(async move {
                        plant();
                        rx.recv().await.unwrap() + i
                    })
                    .await
                    .unwrap()
                })
            }
        };
        tasks.push(task);
    }
    common::wait_until(|| sentinel.lock().unwrap().is_some());
    // Let them all go idle, so that each send is a wake-up from here.
    std::thread::sleep(Duration::from_millis(20));
    for (i, tx) in senders.iter().enumerate() {
        gdex::block_on(tx.send(i)).unwrap();
    }
    for (i, task) in tasks.into_iter().enumerate() {
        assert_eq!(gdex::block_on(task).unwrap(), 2 * i, "{kind:?}");
    }
    drop((senders, pool));
    let flag = sentinel.lock().unwrap().take().unwrap();
    // The sentinel works: a scheduler handle still holds the pool.
    std::thread::sleep(Duration::from_millis(20));
    assert!(!flag.load(Ordering::SeqCst), "{kind:?}: freed too early");
    drop(s);
    flag
}

/// Every retain of a home (one per pinned, fiber, local or thread-per-core
/// task, one per wake-up from another thread) is released: once its tasks
/// finished and its last handle is dropped, the pool is freed (its worker
/// contexts with it). A leaked count on the pool's `Arc` would keep it,
/// its contexts and their sources forever (P2, S9).
#[test]
fn a_pool_whose_homed_tasks_finished_is_freed() {
    common::watchdog("a_pool_whose_homed_tasks_finished_is_freed", 60, || {
        for kind in [
            Kind::Pinned,
            Kind::Fiber,
            Kind::ThreadPerCore,
            Kind::LocalOnWorker,
        ] {
            let freed = finished_tasks_of(kind, 8);
            assert!(
                wait_flag(&freed, Duration::from_secs(5)),
                "{kind:?}: the pool was not freed"
            );
        }
    });
}

/// The last pool handle goes while homed tasks are being woken from
/// another thread: each wake-up races the shutdown (S9), the worker's exit
/// and the reaper, and the task's block may hold the last count on the
/// pool. Nothing crashes, every task resolves, and the pool is freed.
#[test]
fn the_last_handle_dropped_while_homed_tasks_are_woken_from_another_thread() {
    common::watchdog(
        "the_last_handle_dropped_while_homed_tasks_are_woken_from_another_thread",
        120,
        || {
            let rounds = common::stress(40);
            for round in 0..rounds {
                let kind = [Kind::Pinned, Kind::ThreadPerCore, Kind::Fiber][round % 3];
                let pool = pool_for(kind);
                let s = pool.scheduler();
                let sentinel: Arc<Mutex<Option<Arc<AtomicBool>>>> = Arc::default();
                let idle = Arc::new(AtomicUsize::new(0));
                let mut senders = Vec::new();
                let mut tasks = Vec::new();
                const N: usize = 16;
                for _ in 0..N {
                    let (tx, rx) = gdex::channel::<()>(1);
                    senders.push(tx);
                    let (sentinel, idle) = (sentinel.clone(), idle.clone());
                    let body = move || {
                        {
                            let mut slot = sentinel.lock().unwrap();
                            if slot.is_none() {
                                *slot = Some(sentinel_on_this_worker());
                            }
                        }
                        idle.fetch_add(1, Ordering::SeqCst);
                    };
                    let task: gdex::Task<()> = match kind {
                        Kind::Pinned => pool.spawn_pinned(move || async move {
                            body();
                            let _ = rx.recv().await;
                            gdex::yield_now().await;
                        }),
                        Kind::ThreadPerCore => s.spawn(async move {
                            body();
                            let _ = rx.recv().await;
                            gdex::yield_now().await;
                        }),
                        _ => {
                            let fiber = s.spawn_fiber(move || {
                                body();
                                let _ = gdex::fiber::wait_output(async move { rx.recv().await });
                            });
                            s.spawn(async move {
                                let _ = fiber.await;
                            })
                        }
                    };
                    tasks.push(task);
                }
                common::wait_until(|| idle.load(Ordering::SeqCst) == N);
                let waker = std::thread::spawn(move || {
                    for tx in senders {
                        let _ = tx.try_send(());
                    }
                });
                drop(s);
                if round % 2 == 0 {
                    std::thread::yield_now();
                }
                drop(pool);
                waker.join().unwrap();
                for task in tasks {
                    // Finished, or cancelled by the shutdown.
                    let _ = gdex::block_on(task);
                }
                let flag = sentinel.lock().unwrap().take().unwrap();
                assert!(
                    wait_flag(&flag, Duration::from_secs(5)),
                    "round {round} ({kind:?}): the pool was not freed"
                );
            }
        },
    );
}
