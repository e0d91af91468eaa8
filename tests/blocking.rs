//! Blocking work (B1-B4), the `blocking` escape hatch, and thread-per-core
//! mode (P9).

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gdex::blocking::{BlockingPool, CloseMode};

/// B1: a dedicated thread's result, by `join()` and by `.await` from a
/// main-scheduler task; the thread has the given name; a panic reaches the
/// joiner.
#[test]
fn thread_spawn_join_and_await() {
    common::watchdog("thread_spawn_join_and_await", 60, || {
        let h = gdex::thread::spawn("gdex-test-join", || {
            std::thread::current().name().unwrap().to_owned()
        });
        assert_eq!(h.thread().and_then(|t| t.name()), Some("gdex-test-join"));
        assert_eq!(h.join().unwrap(), "gdex-test-join");

        let panics = gdex::thread::spawn("gdex-test-panic", || panic!("thread boom"));
        assert!(matches!(panics.join(), Err(gdex::Error::Panicked(m)) if m == "thread boom"));

        common::on_main(|| {
            let on_main = gdex::Scheduler::main().spawn_local(async {
                let h = gdex::thread::spawn("gdex-test-await", || {
                    // Deliberate: likely still running when awaited, so the
                    // await usually waits; a thread done first passes too.
                    std::thread::sleep(Duration::from_millis(10));
                    std::thread::current().name().unwrap().to_owned()
                });
                h.await
            });
            assert_eq!(gdex::block_on(on_main).unwrap().unwrap(), "gdex-test-await");
        });
    });
}

/// B2: the blocking lane grows while every thread is busy, and its threads
/// retire after the keep-alive.
#[test]
fn the_blocking_lane_grows_and_retires() {
    common::watchdog("the_blocking_lane_grows_and_retires", 60, || {
        let pool = gdex::ThreadPool::builder()
            .workers(2)
            .blocking_keep_alive(Duration::from_millis(100))
            .build()
            .unwrap();
        let started = Instant::now();
        let jobs: Vec<_> = (0..64)
            .map(|i| {
                pool.spawn_blocking(move || {
                    // Deliberate: jobs that block, the load under test.
                    std::thread::sleep(Duration::from_millis(50));
                    i
                })
            })
            .collect();
        for (i, job) in jobs.into_iter().enumerate() {
            assert_eq!(gdex::block_on(job).unwrap(), i);
        }
        let took = started.elapsed();
        let stats = pool.blocking_stats();
        // The lane grew: the sleeps overlapped instead of queueing.
        assert!(stats.peak_threads >= 16, "{stats:?}");
        assert!(
            took < Duration::from_millis(64 * 50 / 2),
            "64 sleeps took {took:?}"
        );
        // Idle past the keep-alive: every thread exits.
        common::wait_until(|| pool.blocking_stats().threads == 0);
        // And the lane still works afterwards.
        assert_eq!(gdex::block_on(pool.spawn_blocking(|| 5)).unwrap(), 5);
        assert_eq!(gdex::block_on(gdex::spawn_blocking(|| 6)).unwrap(), 6);
    });
}

/// B3: a fixed pool closed with Drain runs every queued job; with
/// CancelQueued the queued ones reject with Cancelled; submit after close
/// gives Closed; the close future completes when the threads are gone.
#[test]
fn blocking_pool_close_drain_and_cancel() {
    common::watchdog("blocking_pool_close", 60, || {
        for mode in [CloseMode::Drain, CloseMode::CancelQueued] {
            let pool = BlockingPool::new(1);
            assert_eq!(pool.stats().threads, 1);
            let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
            let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
            let first = pool.submit(move || {
                started_tx.send(()).unwrap();
                gate_rx.recv().unwrap();
                "first"
            });
            started_rx.recv().unwrap();
            let ran = Arc::new(AtomicUsize::new(0));
            let queued: Vec<_> = (0..10)
                .map(|_| {
                    let ran = ran.clone();
                    pool.submit(move || ran.fetch_add(1, Ordering::SeqCst))
                })
                .collect();
            let closed = pool.close(mode);
            assert!(matches!(
                gdex::block_on(pool.submit(|| 0)),
                Err(gdex::Error::Closed)
            ));
            gate_tx.send(()).unwrap();
            assert_eq!(gdex::block_on(first).unwrap(), "first");
            gdex::block_on(closed);
            assert_eq!(pool.stats().threads, 0);
            for t in queued {
                match (mode, gdex::block_on(t)) {
                    (CloseMode::Drain, Ok(_)) => {}
                    (CloseMode::CancelQueued, Err(gdex::Error::Cancelled)) => {}
                    (mode, other) => panic!("{mode:?}: unexpected {other:?}"),
                }
            }
            let expected = if mode == CloseMode::Drain { 10 } else { 0 };
            assert_eq!(ran.load(Ordering::SeqCst), expected, "{mode:?}");
        }
    });
}

/// The `blocking` escape hatch: a pool task that blocks (until they ran, or
/// 10 s) does not delay 100 short tasks queued behind it on its worker. In
/// thread-per-core mode nothing is stolen, so without the hand-off they
/// would wait the whole 10 s.
#[test]
fn blocking_in_place_hands_the_queue_to_peers() {
    common::watchdog("blocking_in_place", 60, || {
        for thread_per_core in [true, false] {
            let pool = gdex::ThreadPool::builder()
                .workers(2)
                .thread_per_core(thread_per_core)
                .build()
                .unwrap();
            let s = pool.scheduler();
            let done = Arc::new(AtomicUsize::new(0));
            let s2 = s.clone();
            let done2 = done.clone();
            let blocker = s.spawn(async move {
                let me = std::thread::current().id();
                // Queued behind this task, on this worker's deque.
                let tasks: Vec<_> = (0..100)
                    .map(|_| {
                        let done = done2.clone();
                        s2.spawn(async move {
                            done.fetch_add(1, Ordering::SeqCst);
                        })
                    })
                    .collect();
                let seen_during = gdex::blocking::blocking(|| {
                    let t = Instant::now();
                    // Deliberate: the blocking call under test, a condition
                    // poll bounded at 10 s (a peer descheduled for a while
                    // on a loaded machine still gets there).
                    while done2.load(Ordering::SeqCst) < 100
                        && t.elapsed() < Duration::from_secs(10)
                    {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    done2.load(Ordering::SeqCst)
                });
                for t in tasks {
                    t.await.unwrap();
                }
                (seen_during, me)
            });
            let (seen_during, _) = gdex::block_on(blocker).unwrap();
            assert_eq!(
                seen_during, 100,
                "thread_per_core={thread_per_core}: the queued tasks waited behind the blocking call"
            );
        }
    });
}

/// P9: in thread-per-core mode, tasks spawned on a worker run on that worker
/// (nothing is stolen), and spawns from outside land on every worker.
#[test]
fn thread_per_core_keeps_tasks_home() {
    common::watchdog("thread_per_core_keeps_tasks_home", 60, || {
        let pool = gdex::ThreadPool::builder()
            .workers(2)
            .thread_per_core(true)
            .build()
            .unwrap();
        assert!(pool.is_thread_per_core());
        let s = pool.scheduler();
        let s2 = s.clone();
        let homes = s.spawn(async move {
            let me = std::thread::current().name().unwrap().to_owned();
            let tasks: Vec<_> = (0..1000)
                .map(|i| {
                    s2.spawn(async move {
                        // Spin a little so an idle peer would want to steal.
                        let t = Instant::now();
                        while t.elapsed() < Duration::from_micros(20) {}
                        if i % 10 == 0 {
                            gdex::yield_now().await;
                        }
                        std::thread::current().name().unwrap().to_owned()
                    })
                })
                .collect();
            let mut names = Vec::new();
            for t in tasks {
                names.push(t.await.unwrap());
            }
            (me, names)
        });
        // Meanwhile the other worker runs a few tasks of its own and then
        // looks for work with its queues empty: it must not take the first
        // worker's backlog (mutant: thread-per-core pools stole).
        let s3 = s.clone();
        let short = s.spawn(async move {
            let tasks: Vec<_> = (0..10).map(|_| s3.spawn(async {})).collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        gdex::block_on(short).unwrap();
        let (home, names) = gdex::block_on(homes).unwrap();
        assert!(
            names.iter().all(|n| *n == home),
            "a task left its home worker {home}"
        );
        let m = pool.metrics();
        assert!(m.workers.iter().all(|w| w.steals == 0), "{m:?}");
        // Nobody steals, so a growing deque asks no peer for help (mutant:
        // every push of the 1,000 woke or marked the peer for nothing).
        let asked: u64 = m
            .workers
            .iter()
            .map(|w| w.wake_requests_sent + w.wake_requests_coalesced)
            .sum();
        assert_eq!(asked, 0, "wake requests for local pushes: {m:?}");

        let outside: Vec<_> = (0..100)
            .map(|_| s.spawn(async { std::thread::current().name().unwrap().to_owned() }))
            .collect();
        let seen = Mutex::new(std::collections::HashSet::new());
        for t in outside {
            seen.lock().unwrap().insert(gdex::block_on(t).unwrap());
        }
        assert_eq!(
            seen.lock().unwrap().len(),
            2,
            "outside spawns go to every worker"
        );
    });
}

/// B3: a submit racing `close(Drain)` is run (queued before the close: the
/// drain runs it) or refused with `Closed` (after it: the pool was closed),
/// never `Cancelled`: a drain cancels nothing, and a job the close kept
/// out was never queued. A thread submits in a loop while the test thread
/// closes the pool; the loop ends at the first submit that resolves at
/// once to an error.
#[test]
fn a_submit_racing_a_drain_runs_or_gives_closed() {
    common::watchdog("submit_racing_drain", 120, || {
        let mut wrong = Vec::new();
        for round in 0..common::stress(300) {
            let pool = Arc::new(BlockingPool::new(1));
            let started = Arc::new(AtomicBool::new(false));
            let submitter = {
                let (pool, started) = (pool.clone(), started.clone());
                std::thread::spawn(move || {
                    let mut jobs = Vec::new();
                    loop {
                        let ran = Arc::new(AtomicBool::new(false));
                        let r = ran.clone();
                        let mut task = pool.submit(move || r.store(true, Ordering::SeqCst));
                        started.store(true, Ordering::SeqCst);
                        // Resolved at once: refused (or already run).
                        let early = match common::poll_with(&mut task, std::task::Waker::noop()) {
                            std::task::Poll::Ready(outcome) => Some(outcome),
                            std::task::Poll::Pending => None,
                        };
                        let refused = matches!(early, Some(Err(_)));
                        jobs.push((task, early, ran));
                        if refused {
                            return jobs;
                        }
                    }
                })
            };
            common::wait_until(|| started.load(Ordering::SeqCst));
            gdex::block_on(pool.close(CloseMode::Drain));
            for (i, (task, early, ran)) in submitter.join().unwrap().into_iter().enumerate() {
                let outcome = early.unwrap_or_else(|| gdex::block_on(task));
                let ran = ran.load(Ordering::SeqCst);
                match (&outcome, ran) {
                    (Ok(()), true) | (Err(gdex::Error::Closed), false) => {}
                    _ => wrong.push(format!(
                        "round {round}, job {i}: {outcome:?} (its closure ran: {ran})"
                    )),
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "{} wrong:\n{}",
            wrong.len(),
            wrong.join("\n")
        );
    });
}

/// B3: the first close decides. A second close, even with another mode,
/// changes nothing: after close(Drain) then close(CancelQueued), every job
/// queued behind a blocker still runs, and both close futures resolve once
/// the threads are gone.
#[test]
fn a_second_close_changes_nothing() {
    common::watchdog("a_second_close_changes_nothing", 60, || {
        let pool = BlockingPool::new(1);
        let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
        let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
        let blocker = pool.submit(move || {
            started_tx.send(()).unwrap();
            gate_rx.recv().unwrap();
        });
        started_rx.recv().unwrap();
        let ran = Arc::new(AtomicUsize::new(0));
        let queued: Vec<_> = (0..10)
            .map(|i| {
                let ran = ran.clone();
                pool.submit(move || {
                    ran.fetch_add(1, Ordering::SeqCst);
                    i
                })
            })
            .collect();
        let first = pool.close(CloseMode::Drain);
        let second = pool.close(CloseMode::CancelQueued);
        assert_eq!(
            pool.stats().queued,
            10,
            "the second close dropped the queue the first close drains"
        );
        gate_tx.send(()).unwrap();
        gdex::block_on(blocker).unwrap();
        for (i, t) in queued.into_iter().enumerate() {
            assert_eq!(
                gdex::block_on(t).unwrap(),
                i,
                "queued job {i}: the second close cancelled it"
            );
        }
        assert_eq!(ran.load(Ordering::SeqCst), 10);
        gdex::block_on(second);
        gdex::block_on(first);
        assert_eq!(pool.stats().threads, 0);
        // A third close after everything is gone resolves at once.
        gdex::block_on(pool.close(CloseMode::CancelQueued));
    });
}

/// B2/B3: when a lane cannot start a thread and none is running, the job
/// fails promptly with an error that says so, instead of waiting forever in
/// the queue; its closure never runs. Once threads can start again, the
/// next job starts one and runs.
#[test]
fn a_job_no_thread_can_run_fails_instead_of_waiting_forever() {
    common::watchdog("a_job_no_thread_can_run_fails", 20, || {
        fn assert_start_failed<T: std::fmt::Debug>(r: Result<T, gdex::Error>) {
            match r {
                Err(gdex::Error::Failed(e)) if e.message().contains("could not start a thread") => {
                }
                other => panic!("expected a could-not-start-a-thread error, got {other:?}"),
            }
        }
        // Thread starts asked for by this thread fail, as if the OS were out
        // of threads.
        gdex::blocking::__fail_thread_starts_here(true);
        let ran = Arc::new(AtomicUsize::new(0));

        // The elastic lane of a new pool: no thread yet.
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let r = ran.clone();
        assert_start_failed(gdex::block_on(pool.spawn_blocking(move || {
            r.fetch_add(1, Ordering::SeqCst);
        })));
        assert_eq!(pool.blocking_stats().threads, 0);
        assert_eq!(
            pool.blocking_stats().queued,
            0,
            "the job still sits in the queue"
        );

        // A fixed pool whose threads all failed to start.
        let fixed = BlockingPool::new(2);
        assert_eq!(fixed.stats().threads, 0);
        let r = ran.clone();
        assert_start_failed(gdex::block_on(fixed.submit(move || {
            r.fetch_add(1, Ordering::SeqCst);
        })));
        assert_eq!(fixed.stats().queued, 0, "the job still sits in the queue");
        assert_eq!(ran.load(Ordering::SeqCst), 0, "a refused job ran");

        // The failure is lifted: the next job starts a thread and runs.
        gdex::blocking::__fail_thread_starts_here(false);
        assert_eq!(gdex::block_on(pool.spawn_blocking(|| 2)).unwrap(), 2);
        assert_eq!(gdex::block_on(fixed.submit(|| 3)).unwrap(), 3);
        assert_eq!(fixed.stats().threads, 1);
        gdex::block_on(fixed.close(CloseMode::Drain));
    });
}

/// B5 with P9: a worker of a thread-per-core pool that declares it blocks
/// hands its queued tasks to its peers' inboxes, round-robin (nobody would
/// steal them), so they run while it blocks; a pool of one worker has no
/// peer and keeps them (nothing to divide by: no panic), and they run after.
#[test]
fn blocking_in_thread_per_core_hands_queued_tasks_to_every_peer() {
    common::watchdog("blocking_in_thread_per_core_hands_queued_tasks", 60, || {
        let pool = gdex::ThreadPool::builder()
            .workers(3)
            .thread_per_core(true)
            .build()
            .unwrap();
        let s = pool.scheduler();
        let s2 = s.clone();
        let outcome = s.spawn(async move {
            let me = std::thread::current().name().unwrap().to_owned();
            let ran = Arc::new(AtomicUsize::new(0));
            let tasks: Vec<_> = (0..4)
                .map(|_| {
                    let ran = ran.clone();
                    s2.spawn(async move {
                        ran.fetch_add(1, Ordering::SeqCst);
                        std::thread::current().name().unwrap().to_owned()
                    })
                })
                .collect();
            // Block until the four queued tasks have run elsewhere.
            let all_ran = gdex::blocking::blocking(|| {
                let deadline = Instant::now() + Duration::from_secs(10);
                while ran.load(Ordering::SeqCst) < 4 && Instant::now() < deadline {
                    std::thread::yield_now();
                }
                ran.load(Ordering::SeqCst) == 4
            });
            let mut ran_on = Vec::new();
            for t in tasks {
                ran_on.push(t.await.unwrap());
            }
            (me, all_ran, ran_on)
        });
        let (me, all_ran, ran_on) = gdex::block_on(outcome).unwrap();
        assert!(
            all_ran,
            "the queued tasks ran while their worker blocked: {ran_on:?}"
        );
        assert!(!ran_on.contains(&me), "{me} kept one: {ran_on:?}");
        let peers: std::collections::HashSet<_> = ran_on.iter().collect();
        assert_eq!(peers.len(), 2, "spread over both peers: {ran_on:?}");

        let lone = gdex::ThreadPool::builder()
            .workers(1)
            .thread_per_core(true)
            .build()
            .unwrap();
        let s = lone.scheduler();
        let s2 = s.clone();
        let after = s.spawn(async move {
            let queued = s2.spawn(async { 7 });
            gdex::blocking::blocking(|| ());
            queued.await.unwrap()
        });
        assert_eq!(gdex::block_on(after).unwrap(), 7);
    });
}

/// libdex 1.2 `ThreadPool/close_is_single_flight`: two drains of one pool
/// with a job running both resolve once that job has finished (B3).
#[test]
fn two_drains_of_one_pool_both_resolve_after_the_running_job() {
    common::watchdog("blocking-close-twice", 30, || {
        let pool = BlockingPool::new(2);
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d = done.clone();
        let (started, running) = std::sync::mpsc::channel();
        pool.submit(move || {
            started.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(100)); // the job's work
            d.store(true, Ordering::SeqCst);
        })
        .detach();
        running.recv().unwrap();
        let first = pool.close(CloseMode::Drain);
        let second = pool.close(CloseMode::Drain);
        gdex::block_on(first);
        assert!(
            done.load(Ordering::SeqCst),
            "a drain returned before the running job ended"
        );
        gdex::block_on(second);
    });
}

/// A close's future keeps its waiter's waker in the lane's book until the
/// last thread leaves; the waker it replaces (polled again with another)
/// and the one it holds when dropped are the caller's code, dropped after
/// the lane's lock: a drop that uses the pool (here its counters) would
/// deadlock on the lock.
#[test]
fn a_waker_a_close_lets_go_of_is_dropped_with_the_lanes_lock_released() {
    use std::future::Future;
    common::watchdog("close_waker_dropped_unlocked", 30, || {
        let pool = Arc::new(BlockingPool::new(1));
        let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
        let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
        let busy = pool.submit(move || {
            started_tx.send(()).unwrap();
            gate_rx.recv().unwrap();
        });
        started_rx.recv().unwrap();
        let dropped = Arc::new(AtomicUsize::new(0));
        let waker = |pool: &Arc<BlockingPool>| {
            let (pool, dropped) = (pool.clone(), dropped.clone());
            common::waker_running_on_drop(move || {
                assert_eq!(pool.stats().threads, 1);
                dropped.fetch_add(1, Ordering::SeqCst);
            })
        };
        let mut close = Box::pin(pool.close(CloseMode::Drain));
        for _ in 0..2 {
            let waker = waker(&pool);
            let mut cx = std::task::Context::from_waker(&waker);
            assert!(close.as_mut().poll(&mut cx).is_pending());
        }
        // The first waker was replaced by the second.
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        drop(close);
        assert_eq!(dropped.load(Ordering::SeqCst), 2);
        gate_tx.send(()).unwrap();
        gdex::block_on(busy).unwrap();
        gdex::block_on(pool.close(CloseMode::Drain));
    });
}
