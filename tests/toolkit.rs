//! The future toolkit (DESIGN "Future toolkit"): promises, future sets,
//! timers, delayed results, unix signals, channels, semaphores, limiters
//! and task groups, on real schedulers and threads.
//!
//! A wake-up that a primitive makes under its own lock (a channel's send, a
//! semaphore's permit, a promise's resolve) returns during a pool's
//! shutdown (S9): the woken job, which the closed pool may not run, goes to
//! the `gdex-reaper` thread instead of being dropped inside that lock.

use crate::common;

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use common::{on_main, spin, stress, wait_until, watchdog, Counted, Rng};
use futures::future::BoxFuture;
use futures::FutureExt;
use gio::prelude::CancellableExt;

fn pool(workers: usize) -> gdex::ThreadPool {
    gdex::ThreadPool::builder()
        .workers(workers)
        .build()
        .unwrap()
}

/// A pool task that never finishes and counts its drop: a loser whose
/// cancellation a set must cause.
fn loser(
    s: &gdex::Scheduler,
    drops: &Arc<AtomicUsize>,
) -> BoxFuture<'static, Result<u32, gdex::Error>> {
    let guard = Counted(drops.clone());
    let task = s.spawn(async move {
        let _guard = guard;
        std::future::pending::<u32>().await
    });
    task.boxed()
}

// Deliberate (`ok_after`, `err_after`): the timers spread the members'
// completions out; no test's outcome depends on which timer fires first
// (where an order matters, the test imposes it).
fn ok_after(s: &gdex::Scheduler, ms: u64, v: u32) -> BoxFuture<'static, Result<u32, gdex::Error>> {
    let task = s.spawn(async move {
        gdex::sleep(Duration::from_millis(ms)).await;
        v
    });
    task.boxed()
}

fn err_after(
    s: &gdex::Scheduler,
    ms: u64,
    e: gdex::Error,
) -> BoxFuture<'static, Result<u32, gdex::Error>> {
    let task = s.spawn(async move {
        gdex::sleep(Duration::from_millis(ms)).await;
    });
    async move {
        task.await?;
        Err(e)
    }
    .boxed()
}

/// `all`: every value in order; a rejection anywhere rejects with the first
/// (in order) — decided from every member, not the last to finish.
#[test]
fn all_resolves_in_order_and_rejects_if_any_rejected() {
    watchdog(
        "all_resolves_in_order_and_rejects_if_any_rejected",
        30,
        || {
            let p = pool(2);
            let s = p.scheduler();
            let out = gdex::block_on(gdex::all([
                ok_after(&s, 5, 1),
                ok_after(&s, 1, 2),
                ok_after(&s, 3, 3),
            ]));
            assert_eq!(out.unwrap(), [1, 2, 3]);
            // The rejection finishes first, a success last: still rejected
            // (libdex would resolve here).
            let out = gdex::block_on(gdex::all([
                ok_after(&s, 1, 1),
                err_after(&s, 1, gdex::Error::Closed),
                ok_after(&s, 20, 3),
            ]));
            assert!(matches!(out, Err(gdex::Error::Closed)));
            let none: Vec<BoxFuture<'static, Result<u32, gdex::Error>>> = Vec::new();
            assert!(gdex::block_on(gdex::all(none)).unwrap().is_empty());
        },
    );
}

/// `all_race`: rejects at the first rejection and cancels the rest.
#[test]
fn all_race_rejects_at_once_and_cancels_the_losers() {
    watchdog(
        "all_race_rejects_at_once_and_cancels_the_losers",
        30,
        || {
            let p = pool(2);
            let s = p.scheduler();
            let out = gdex::block_on(gdex::all_race([ok_after(&s, 2, 1), ok_after(&s, 1, 2)]));
            assert_eq!(out.unwrap(), [1, 2]);
            let drops = Arc::new(AtomicUsize::new(0));
            let out = gdex::block_on(gdex::all_race([
                loser(&s, &drops),
                err_after(&s, 2, gdex::Error::TimedOut),
                loser(&s, &drops),
            ]));
            assert!(matches!(out, Err(gdex::Error::TimedOut)));
            wait_until(|| drops.load(Ordering::SeqCst) == 2);
        },
    );
}

/// `any`: the first success wins and the rest are cancelled; only when
/// every member fails does it reject.
#[test]
fn any_takes_the_first_success_and_rejects_when_all_fail() {
    watchdog(
        "any_takes_the_first_success_and_rejects_when_all_fail",
        30,
        || {
            let p = pool(2);
            let s = p.scheduler();
            let drops = Arc::new(AtomicUsize::new(0));
            let out = gdex::block_on(gdex::any([
                err_after(&s, 1, gdex::Error::Closed),
                loser(&s, &drops),
                ok_after(&s, 3, 7),
                loser(&s, &drops),
            ]));
            assert_eq!(out.unwrap(), 7);
            wait_until(|| drops.load(Ordering::SeqCst) == 2);
            // The second rejection starts only once `any` has seen the
            // first: the order is imposed, not left to a 1 ms and a 5 ms
            // timer on two workers.
            let (first_seen, then) = futures::channel::oneshot::channel::<()>();
            let first = err_after(&s, 1, gdex::Error::Closed);
            let s2 = s.clone();
            let out = gdex::block_on(gdex::any([
                async move {
                    let r = first.await;
                    let _ = first_seen.send(());
                    r
                }
                .boxed(),
                async move {
                    let _ = then.await;
                    err_after(&s2, 1, gdex::Error::TimedOut).await
                }
                .boxed(),
            ]));
            assert!(
                matches!(out, Err(gdex::Error::TimedOut)),
                "the last rejection: {out:?}"
            );
            let empty = std::panic::catch_unwind(|| {
                let none: Vec<BoxFuture<'static, Result<u32, gdex::Error>>> = Vec::new();
                gdex::block_on(gdex::any(none))
            })
            .unwrap_err();
            assert!(common_message(&empty).contains("at least one future"));
        },
    );
}

/// `first`: whichever completes first, success or failure; the rest are
/// cancelled.
#[test]
fn first_takes_whichever_completes_first() {
    watchdog("first_takes_whichever_completes_first", 30, || {
        let p = pool(2);
        let s = p.scheduler();
        let drops = Arc::new(AtomicUsize::new(0));
        let out = gdex::block_on(gdex::first([
            loser(&s, &drops),
            ok_after(&s, 1, 9),
            loser(&s, &drops),
        ]));
        assert_eq!(out.unwrap(), 9);
        wait_until(|| drops.load(Ordering::SeqCst) == 2);
        // Deliberate: the success is an hour away, so the rejection is first
        // whatever the load (it used to be 200 ms away).
        let out = gdex::block_on(gdex::first([
            loser(&s, &drops),
            err_after(&s, 1, gdex::Error::Closed),
            ok_after(&s, 3_600_000, 1),
        ]));
        assert!(matches!(out, Err(gdex::Error::Closed)));
        wait_until(|| drops.load(Ordering::SeqCst) == 3);
    });
}

fn common_message(payload: &Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// A promise resolved from a plain thread reaches waiters on the pool, the
/// main scheduler and a plain thread; rejection and a dropped promise
/// reject them all.
#[test]
fn promises_resolve_reject_and_reject_when_dropped() {
    watchdog(
        "promises_resolve_reject_and_reject_when_dropped",
        30,
        || {
            on_main(|| {
                let p = pool(2);
                let (promise, future) = gdex::Promise::<String>::new();
                let on_pool = p.scheduler().spawn(future.clone());
                let on_main = gdex::Scheduler::main().spawn_local(future.clone());
                let on_thread = std::thread::spawn(move || gdex::wait_for(future));
                assert!(!promise.is_abandoned());
                std::thread::spawn(move || promise.resolve("done".into()));
                assert_eq!(gdex::block_on(on_pool).unwrap().unwrap(), "done");
                assert_eq!(gdex::block_on(on_main).unwrap().unwrap(), "done");
                assert_eq!(on_thread.join().unwrap().unwrap(), "done");

                let (promise, future) = gdex::Promise::<u32>::new();
                let second = future.clone();
                promise.reject(gdex::Error::TimedOut);
                assert!(matches!(gdex::block_on(future), Err(gdex::Error::TimedOut)));
                assert!(matches!(gdex::block_on(second), Err(gdex::Error::TimedOut)));

                let (promise, future) = gdex::Promise::<Vec<u8>>::new(); // not Clone needed
                let polled = Arc::new(AtomicUsize::new(0));
                let waiter = p
                    .scheduler()
                    .spawn(common::after_first_poll(&polled, future));
                // The waiter waits on the promise: its drop wakes it.
                wait_until(|| polled.load(Ordering::SeqCst) == 1);
                drop(promise);
                let err = gdex::block_on(waiter).unwrap().unwrap_err();
                assert!(matches!(err, gdex::Error::Dropped), "{err:?}");
                assert!(err.to_string().contains("dropped"));

                let (promise, future) = gdex::Promise::<u32>::new();
                drop(future);
                assert!(promise.is_abandoned());
            })
        },
    );
}

/// Timers work inside a pool task, a main task and a fiber, and
/// `with_timeout` on a pending future rejects with TimedOut and drops the
/// future right then.
#[test]
fn timeouts_on_every_scheduler_and_timeout_drops_the_future() {
    watchdog("timeouts_on_every_scheduler", 30, || {
        let p = pool(2);
        // Deliberate: the timers are what is tested; the checks are "not
        // before `d`", which no delay can break.
        let d = Duration::from_millis(20);
        let on_pool = p.scheduler().spawn(async move {
            let start = Instant::now();
            let r = gdex::reject_after::<()>(d).await;
            (r, start.elapsed())
        });
        let (r, elapsed) = gdex::block_on(on_pool).unwrap();
        assert!(
            matches!(r, Err(gdex::Error::TimedOut)) && elapsed >= d,
            "{elapsed:?}"
        );

        let in_fiber = p.scheduler().spawn_fiber(move || {
            let start = Instant::now();
            gdex::fiber::wait(gdex::sleep(d)).unwrap();
            // The timeout's `Elapsed`, as `fiber::wait`'s one error.
            let r = gdex::fiber::wait(gdex::timeout(d, std::future::pending::<()>()));
            (r, start.elapsed())
        });
        let (r, elapsed) = gdex::block_on(in_fiber).unwrap();
        assert!(
            matches!(r, Err(gdex::Error::TimedOut)) && elapsed >= 2 * d,
            "{elapsed:?}"
        );

        on_main(|| {
            let on_main = gdex::Scheduler::main().spawn_local(async move {
                let start = Instant::now();
                let r = gdex::reject_after::<u8>(d).await;
                assert!(matches!(r, Err(gdex::Error::TimedOut)));
                start.elapsed()
            });
            assert!(gdex::block_on(on_main).unwrap() >= d);
        });

        let dropped = Arc::new(AtomicUsize::new(0));
        let guard = Counted(dropped.clone());
        let pending = async move {
            let _guard = guard;
            std::future::pending::<Result<u32, gdex::Error>>().await
        };
        let check = dropped.clone();
        let task = p.scheduler().spawn(async move {
            let mut wrapped = pin!(gdex::timeout(d, pending));
            let r = wrapped.as_mut().await;
            // Dropped at the deadline, before the wrapper goes.
            (r, check.load(Ordering::SeqCst))
        });
        let (r, dropped_then) = gdex::block_on(task).unwrap();
        assert!(r.is_err(), "{r:?}");
        assert_eq!(dropped_then, 1);

        let deadline = Instant::now() + d;
        let r = gdex::block_on(gdex::timeout_at(deadline, gdex::spawn(async { 5 })));
        assert!(
            matches!(r, Ok(Ok(5))),
            "in time: the task's own result, {r:?}"
        );
        let r = gdex::block_on(gdex::timeout_at(deadline, gdex::sleep(10 * d)));
        assert!(r.is_err() && Instant::now() >= deadline, "{r:?}");
        // A duration too long for any clock is "never", not a panic.
        let r = gdex::block_on(gdex::timeout(Duration::MAX, gdex::spawn(async { 6 })));
        assert!(matches!(r, Ok(Ok(6))), "{r:?}");
    });
}

/// Delayed holds the output until released; dropping it drops the future.
#[test]
fn delayed_holds_until_released() {
    watchdog("delayed_holds_until_released", 30, || {
        let p = pool(1);
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        let (delayed, release) = gdex::Delayed::new(async move {
            r.fetch_add(1, Ordering::SeqCst);
            "held"
        });
        let polled = Arc::new(AtomicUsize::new(0));
        let task = p
            .scheduler()
            .spawn(common::after_first_poll(&polled, delayed));
        // The first poll ran the inner future to its end and returned:
        // from then on only `release()` may finish the task.
        wait_until(|| polled.load(Ordering::SeqCst) == 1);
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert!(!task.is_finished(), "released without release()");
        release.release();
        assert_eq!(gdex::block_on(task).unwrap(), "held");

        let dropped = Arc::new(AtomicUsize::new(0));
        let guard = Counted(dropped.clone());
        let (delayed, _release) = gdex::Delayed::new(async move {
            let _guard = guard;
            std::future::pending::<()>().await
        });
        drop(delayed);
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
    });
}

/// A Unix signal raised by the process resolves its future through the
/// main context; an unwatchable signal is refused with the list.
#[test]
fn unix_signal_arrives_through_the_main_context() {
    watchdog("unix_signal_arrives_through_the_main_context", 30, || {
        on_main(|| {
            let signal = gdex::unix_signal(libc::SIGUSR1);
            // SAFETY: raise(3) has no preconditions; GLib now handles SIGUSR1.
            assert_eq!(unsafe { libc::raise(libc::SIGUSR1) }, 0);
            gdex::block_on(signal);
        });
        let refused = std::panic::catch_unwind(|| gdex::unix_signal(libc::SIGKILL)).unwrap_err();
        let message = common_message(&refused);
        assert!(
            message.contains("SIGUSR1") && message.contains("only watch"),
            "{message}"
        );
    });
}

/// Cancel safety: a channel of capacity 1 with 4 producers and 4 consumers
/// moves 100,000 items, none lost or duplicated, while consumers' `recv`
/// futures are dropped at random (sometimes right after being woken for an
/// item), and two consumers walk away for good after such a drop.
#[test]
fn channel_moves_every_item_once_while_receives_are_dropped() {
    watchdog("channel_moves_every_item_once", 120, || {
        let p = pool(4);
        let items = stress(100_000).max(8);
        let per_producer = items / 4;
        let items = per_producer * 4;
        let (tx, rx) = gdex::channel::<usize>(1);
        let seen: Arc<Vec<AtomicUsize>> =
            Arc::new((0..items).map(|_| AtomicUsize::new(0)).collect());
        let dropped_recvs = Arc::new(AtomicUsize::new(0));
        let producers: Vec<_> = (0..4)
            .map(|k| {
                let tx = tx.clone();
                p.scheduler().spawn(async move {
                    for i in k * per_producer..(k + 1) * per_producer {
                        tx.send(i).await.unwrap();
                    }
                })
            })
            .collect();
        drop(tx);
        let consumers: Vec<_> = (0..4)
            .map(|k| {
                let rx = rx.clone();
                let seen = seen.clone();
                let dropped_recvs = dropped_recvs.clone();
                p.scheduler().spawn(async move {
                    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (k as u64 + 1));
                    // Consumers 2 and 3 quit at the first receive they
                    // drop, at a random point: if that receive had been
                    // woken for an item, the others must be woken instead,
                    // or everyone stalls (the channel is full, the
                    // producers wait).
                    let quitter = k >= 2;
                    let quit_after = rng.next() as usize % (per_producer / 2 + 1);
                    let mut got = 0usize;
                    loop {
                        let race = if quitter {
                            got >= quit_after
                        } else {
                            rng.next().is_multiple_of(2)
                        };
                        let item = if race {
                            // Race the receive against one yield, the
                            // yield polled first: on its second poll it
                            // wins, and the receive (parked, perhaps woken
                            // meanwhile) is dropped unpolled.
                            let recv = rx.recv();
                            match futures::future::select(pin!(gdex::yield_now()), pin!(recv)).await
                            {
                                futures::future::Either::Right((item, _)) => item,
                                futures::future::Either::Left(_) => {
                                    dropped_recvs.fetch_add(1, Ordering::Relaxed);
                                    if quitter {
                                        return got;
                                    }
                                    continue;
                                }
                            }
                        } else {
                            rx.recv().await
                        };
                        match item {
                            Ok(i) => {
                                seen[i].fetch_add(1, Ordering::Relaxed);
                                got += 1;
                            }
                            Err(gdex::Error::Closed) => return got,
                            Err(e) => panic!("recv failed: {e}"),
                        }
                    }
                })
            })
            .collect();
        drop(rx);
        for producer in producers {
            gdex::block_on(producer).unwrap();
        }
        let received: usize = consumers
            .into_iter()
            .map(|c| gdex::block_on(c).unwrap())
            .sum();
        assert_eq!(received, items);
        for (i, n) in seen.iter().enumerate() {
            assert_eq!(
                n.load(Ordering::Relaxed),
                1,
                "item {i} received {n:?} times"
            );
        }
        assert!(
            dropped_recvs.load(Ordering::Relaxed) > 0,
            "no receive was ever dropped"
        );
    });
}

/// Closing either side: receivers drain and then get Closed; a closed
/// receive side refuses sends with the item back and returns what was
/// queued; recv_all takes everything queued.
#[test]
fn channel_close_either_side_and_recv_all() {
    watchdog("channel_close_either_side_and_recv_all", 30, || {
        let (tx, rx) = gdex::channel(4);
        assert!(tx.is_empty());
        assert_eq!(tx.len(), 0);
        for i in 0..3 {
            gdex::block_on(tx.send(i)).unwrap();
        }
        assert!(!tx.is_empty() && tx.len() == 3, "{} queued", tx.len());
        assert_eq!(gdex::block_on(rx.recv_all()).unwrap(), [0, 1, 2]);
        assert!(tx.is_empty());
        gdex::block_on(tx.send(3)).unwrap();
        tx.close();
        let refused = gdex::block_on(tx.send(4)).unwrap_err();
        // The item is not printed (it need not be Debug), only the error.
        assert_eq!(format!("{refused:?}"), "SendError(..)");
        assert_eq!(
            refused.to_string(),
            "the channel is closed; the item was not sent"
        );
        assert_eq!(refused.into_inner(), 4);
        assert_eq!(gdex::block_on(rx.recv()).unwrap(), 3);
        assert!(matches!(
            gdex::block_on(rx.recv()),
            Err(gdex::Error::Closed)
        ));

        let (tx, rx) = gdex::channel(2);
        gdex::block_on(tx.send("a")).unwrap();
        assert_eq!(rx.close(), ["a"]);
        assert_eq!(gdex::block_on(tx.send("b")).unwrap_err().into_inner(), "b");

        // A sender blocked on a full channel is refused when the last
        // receiver goes.
        let p = pool(1);
        let (tx, rx) = gdex::channel(1);
        tx.try_send(1).unwrap();
        assert_eq!(tx.try_send(2), Err(gdex::TrySendError::Full(2)));
        let polled = Arc::new(AtomicUsize::new(0));
        let blocked = p
            .scheduler()
            .spawn(common::after_first_poll(&polled, async move {
                tx.send(2).await.map_err(|e| e.into_inner())
            }));
        // The send has been polled and waits for room: the drop wakes it.
        wait_until(|| polled.load(Ordering::SeqCst) == 1);
        assert!(!blocked.is_finished());
        drop(rx);
        assert_eq!(gdex::block_on(blocked).unwrap(), Err(2));
    });
}

fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    let waker = futures::task::noop_waker();
    std::pin::Pin::new(f).poll(&mut Context::from_waker(&waker))
}

/// Cancel safety of the semaphore: a dropped acquire leaves the queue, and
/// a permit handed to an acquire that is dropped before it looks goes on
/// to the next waiter (libdex's semaphore swallows it).
#[test]
fn semaphore_waits_are_cancel_safe() {
    let sem = gdex::Semaphore::new(1);
    let held = sem.try_acquire().unwrap();
    let mut a = Box::pin(sem.acquire());
    let mut b = Box::pin(sem.acquire());
    let mut c = Box::pin(sem.acquire());
    assert!(poll_once(&mut a).is_pending());
    assert!(poll_once(&mut b).is_pending());
    assert!(poll_once(&mut c).is_pending());
    drop(b); // a plain dropped wait: leaves the queue
    drop(held); // the permit goes to `a`...
    drop(a); // ...which never looks: it must reach `c`
    let Poll::Ready(Ok(permit)) = poll_once(&mut c) else {
        panic!("the permit was swallowed")
    };
    assert_eq!(sem.available_permits(), 0);
    drop(permit);
    assert_eq!(sem.available_permits(), 1);
    sem.close();
    assert!(matches!(
        poll_once(&mut Box::pin(sem.acquire())),
        Poll::Ready(Err(gdex::Error::Closed))
    ));
}

/// A limiter of 3 never has more than 3 of its 100 jobs running; all run.
#[test]
fn limiter_of_three_bounds_concurrency() {
    watchdog("limiter_of_three_bounds_concurrency", 60, || {
        let p = pool(4);
        let limiter = gdex::Limiter::new(3);
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let jobs: Vec<_> = (0..100)
            .map(|i| {
                let limiter = limiter.clone();
                let (running, peak, done) = (running.clone(), peak.clone(), done.clone());
                p.scheduler().spawn(async move {
                    limiter
                        .run(async move {
                            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                            peak.fetch_max(now, Ordering::SeqCst);
                            if i % 2 == 0 {
                                // Deliberate: a job that waits inside its
                                // slot; the bound holds whatever the timing.
                                gdex::sleep(Duration::from_millis(1)).await;
                            } else {
                                common::spin(Duration::from_micros(200));
                            }
                            running.fetch_sub(1, Ordering::SeqCst);
                            done.fetch_add(1, Ordering::SeqCst);
                        })
                        .await
                })
            })
            .collect();
        for job in jobs {
            gdex::block_on(job).unwrap().unwrap();
        }
        assert_eq!(done.load(Ordering::SeqCst), 100);
        let peak = peak.load(Ordering::SeqCst);
        assert!(peak <= 3, "{peak} jobs ran at once under a limit of 3");
        assert!(peak >= 2, "the limiter serialised everything (peak {peak})");

        // run_on_pool, then close_after_drain: the running job and the two
        // queued behind it all finish before the drain resolves; runs asked
        // for after it are refused, and close() refuses queued ones.
        let limiter = gdex::Limiter::new(1);
        let finished = Arc::new(AtomicUsize::new(0));
        let mut jobs: Vec<_> = (0..3)
            .map(|_| {
                let finished = finished.clone();
                Box::pin(limiter.run_on_pool(async move {
                    // Deliberate: a job that takes a while; the drain waits
                    // for it however long it takes.
                    gdex::sleep(Duration::from_millis(5)).await;
                    finished.fetch_add(1, Ordering::SeqCst);
                }))
            })
            .collect();
        // One poll each: the first holds the slot, the others queue.
        for job in &mut jobs {
            assert!(poll_once(job).is_pending());
        }
        let drain = limiter.close_after_drain();
        assert!(matches!(
            poll_once(&mut Box::pin(limiter.run(async {}))),
            Poll::Ready(Err(gdex::Error::Closed))
        ));
        let at_drain = finished.clone();
        let drained = async move {
            drain.await;
            at_drain.load(Ordering::SeqCst)
        };
        let (results, finished_when_drained) = gdex::block_on(futures::future::join(
            futures::future::join_all(jobs),
            drained,
        ));
        assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
        assert_eq!(
            finished_when_drained, 3,
            "the drain resolved before the queue ran"
        );

        let limiter = gdex::Limiter::new(1);
        let mut running = Box::pin(limiter.run(std::future::pending::<()>()));
        let mut queued = Box::pin(limiter.run(async {}));
        assert!(poll_once(&mut running).is_pending() && poll_once(&mut queued).is_pending());
        limiter.close();
        assert!(matches!(
            poll_once(&mut queued),
            Poll::Ready(Err(gdex::Error::Closed))
        ));
    });
}

/// A group of `n` members that never finish and count their drops.
fn pending_group(s: &gdex::Scheduler, n: usize) -> (gdex::TaskGroup<()>, Arc<AtomicUsize>) {
    let drops = Arc::new(AtomicUsize::new(0));
    let group = gdex::TaskGroup::on(s.clone());
    for _ in 0..n {
        let guard = Counted(drops.clone());
        group
            .spawn(async move {
                let _guard = guard;
                std::future::pending::<()>().await
            })
            .unwrap();
    }
    (group, drops)
}

/// A task group that keeps results gives every result in order; dropping a
/// group cancels every member (libdex 1.2 `task-group/finalize-cancels-children`);
/// cancel() returns once they have stopped.
#[test]
fn task_group_close_collects_and_drop_cancels() {
    watchdog("task_group_close_collects_and_drop_cancels", 30, || {
        let p = pool(2);
        let group = gdex::TaskGroup::builder()
            .scheduler(p.scheduler())
            .keep_results(true)
            .build();
        for i in 0..20u32 {
            group
                .spawn(async move {
                    if i == 7 {
                        panic!("member 7");
                    }
                    // Deliberate: members finish out of spawn order; the
                    // results come in spawn order whatever the timing.
                    gdex::sleep(Duration::from_millis(u64::from(i % 3))).await;
                    Ok::<_, gdex::Error>(i)
                })
                .unwrap();
        }
        let results = gdex::block_on(group.close_with_results());
        assert_eq!(results.len(), 20);
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Ok(v) => assert_eq!(v, i as u32),
                Err(gdex::Error::Panicked(m)) => assert!(i == 7 && m == "member 7"),
                Err(e) => panic!("member {i}: {e}"),
            }
        }
        assert!(matches!(
            group.spawn(async { Ok(0) }),
            Err(gdex::Error::Closed)
        ));

        let (group, drops) = pending_group(&p.scheduler(), 10);
        assert_eq!(group.len(), 10);
        drop(group);
        wait_until(|| drops.load(Ordering::SeqCst) == 10);

        let (group, drops) = pending_group(&p.scheduler(), 10);
        gdex::block_on(group.cancel());
        assert_eq!(
            drops.load(Ordering::SeqCst),
            10,
            "cancel() returned before the drops"
        );
    });
}

/// A waker that counts its wakes.
struct CountWaker(AtomicUsize);
impl std::task::Wake for CountWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// The channel's hand-on, step by step: a receive woken for an item and
/// dropped before it looks wakes the next receiver, which gets the item;
/// the same for a sender woken for room.
#[test]
fn a_dropped_woken_receive_wakes_the_next_receiver() {
    let (tx, rx) = gdex::channel::<u32>(1);
    let (wa, wb) = (
        Arc::new(CountWaker(AtomicUsize::new(0))),
        Arc::new(CountWaker(AtomicUsize::new(0))),
    );
    let (wake_a, wake_b) = (
        std::task::Waker::from(wa.clone()),
        std::task::Waker::from(wb.clone()),
    );
    let mut a = Box::pin(rx.recv());
    let mut b = Box::pin(rx.recv());
    assert!(a
        .as_mut()
        .poll(&mut Context::from_waker(&wake_a))
        .is_pending());
    assert!(b
        .as_mut()
        .poll(&mut Context::from_waker(&wake_b))
        .is_pending());
    tx.try_send(1).unwrap();
    assert_eq!(
        (wa.0.load(Ordering::SeqCst), wb.0.load(Ordering::SeqCst)),
        (1, 0)
    );
    drop(a);
    assert_eq!(
        wb.0.load(Ordering::SeqCst),
        1,
        "the wake-up died with the dropped receive"
    );
    assert!(matches!(
        b.as_mut().poll(&mut Context::from_waker(&wake_b)),
        Poll::Ready(Ok(1))
    ));

    // Senders: the channel is full, two senders wait; a receive makes
    // room and wakes the first, which is dropped: the second is woken.
    tx.try_send(2).unwrap();
    let mut s1 = Box::pin(tx.send(3));
    let mut s2 = Box::pin(tx.send(4));
    assert!(s1
        .as_mut()
        .poll(&mut Context::from_waker(&wake_a))
        .is_pending());
    assert!(s2
        .as_mut()
        .poll(&mut Context::from_waker(&wake_b))
        .is_pending());
    assert_eq!(rx.try_recv(), Some(2));
    drop(s1); // its item (3) is dropped unsent, as documented
    assert_eq!(wb.0.load(Ordering::SeqCst), 2);
    assert!(matches!(
        s2.as_mut().poll(&mut Context::from_waker(&wake_b)),
        Poll::Ready(Ok(()))
    ));
    assert_eq!(rx.try_recv(), Some(4));
}

/// The channel's ends say what they are in `Debug` output.
#[test]
fn channel_ends_debug_as_what_they_are() {
    let (tx, rx) = gdex::channel::<u8>(1);
    assert_eq!(format!("{tx:?}"), "Sender { .. }");
    assert_eq!(format!("{rx:?}"), "Receiver { .. }");
    // The waits say whether they are queued (mutants: both `fmt`s).
    let noop = &mut std::task::Context::from_waker(std::task::Waker::noop());
    gdex::block_on(tx.send(1)).unwrap();
    let mut send = Box::pin(tx.send(2));
    assert_eq!(format!("{send:?}"), "SendFuture { queued: false }");
    assert!(send.as_mut().poll(noop).is_pending(), "the channel is full");
    assert_eq!(format!("{send:?}"), "SendFuture { queued: true }");
    drop(send);
    let (_tx2, rx2) = gdex::channel::<u8>(1);
    let mut recv = Box::pin(rx2.recv());
    assert_eq!(format!("{recv:?}"), "RecvFuture { queued: false }");
    assert!(
        recv.as_mut().poll(noop).is_pending(),
        "the channel is empty"
    );
    assert_eq!(format!("{recv:?}"), "RecvFuture { queued: true }");
    drop(rx);
}

/// A channel end dropped while its thread's thread-locals are destroyed (a
/// task's future held by a scheduler's thread-local queue, at thread exit)
/// is dropped cleanly: the primitives' per-thread lock book has no
/// destructor, so it is still there. (It used to be destroyed first, and
/// the drop panicked with "cannot access a Thread Local Storage value
/// during or after destruction".)
#[test]
fn a_channel_end_dropped_during_thread_teardown_does_not_panic() {
    use std::cell::RefCell;
    use std::sync::atomic::{AtomicU8, Ordering};
    // 0: not dropped yet; 1: dropped cleanly; 2: the drop panicked.
    static OUTCOME: AtomicU8 = AtomicU8::new(0);
    struct Holder(Option<gdex::Receiver<u32>>);
    impl Drop for Holder {
        fn drop(&mut self) {
            let receiver = self.0.take();
            let clean =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(receiver))).is_ok();
            OUTCOME.store(if clean { 1 } else { 2 }, Ordering::SeqCst);
        }
    }
    thread_local! {
        static HELD: RefCell<Holder> = const { RefCell::new(Holder(None)) };
    }
    std::thread::spawn(|| {
        // The holder's thread-local is made first, so it is destroyed last.
        HELD.with(|_| {});
        let (tx, rx) = gdex::channel::<u32>(1);
        tx.try_send(1).unwrap(); // the primitives' lock book is used now
        HELD.with(|held| held.borrow_mut().0 = Some(rx));
        drop(tx);
    })
    .join()
    .unwrap();
    assert_eq!(
        OUTCOME.load(Ordering::SeqCst),
        1,
        "the receiver's drop panicked"
    );
}

/// A wake-up made during a pool's shutdown returns (S9): the woken job,
/// which the closed pool may not run, goes to the `gdex-reaper` thread
/// instead of being dropped inside the waker's lock. The sequence that
/// deadlocked the sender: a pool task waits in `rx.recv()`; its only worker
/// sits in a long poll; another thread calls `pool.shutdown()` (so `closed`
/// is set); then a plain thread `try_send`s an item. `State::push` wakes
/// the waiting receive *under the channel's lock*; the task's schedule
/// function, off the pool, pushes to the injector, finds the pool closed
/// and drops the job there (shutdown step 5), on the sender's thread, still
/// inside the lock: the `Runnable` drops the task's future, whose
/// `RecvFuture::drop` (key set: it was just notified) takes the same
/// channel lock. The sender deadlocked on itself. (Every toolkit primitive
/// that wakes under its own lock had the same hole: `Semaphore` permits,
/// `Limiter` tickets.)
#[test]
fn a_channel_send_during_pool_shutdown_returns() {
    watchdog("channel_send_during_pool_shutdown", 30, || {
        let (tx, rx) = gdex::channel::<u32>(4);
        let ok = wake_during_shutdown(
            async move {
                let _ = rx.recv().await;
            },
            move || {
                let _ = tx.try_send(1);
            },
        );
        assert!(
            ok,
            "try_send during pool shutdown never returned: the sender deadlocked on the \
             channel's own lock (the woken task was dropped inside it)"
        );
    });
}

/// The setup of the wake-ups during shutdown: a one-worker pool whose task
/// waits on `wait`; the worker stuck in a 500 ms poll; `shutdown()` begun
/// on another thread; then `wake` runs on a plain thread. True if `wake`
/// returned within 3 s.
fn wake_during_shutdown<W: Future + Send + 'static>(
    wait: W,
    wake: impl FnOnce() + Send + 'static,
) -> bool {
    let pool = gdex::ThreadPool::builder()
        .workers(1)
        .stall_threshold(Duration::ZERO)
        .build()
        .unwrap();
    let s = pool.scheduler();
    let polled = Arc::new(AtomicUsize::new(0));
    let waiter = s.spawn(common::after_first_poll(&polled, async move {
        wait.await;
    }));
    // The waiter waits on `wait` (instead of a 50 ms sleep).
    common::wait_until(|| polled.load(Ordering::SeqCst) == 1);
    let spinning = Arc::new(AtomicBool::new(false));
    let flag = spinning.clone();
    let long = s.spawn(async move {
        flag.store(true, Ordering::SeqCst);
        spin(Duration::from_millis(500));
    });
    common::wait_until(|| spinning.load(Ordering::SeqCst));
    let closer = {
        let pool = pool.clone();
        std::thread::spawn(move || pool.shutdown())
    };
    common::wait_until(|| pool.is_closed());
    let (done, returned) = mpsc::channel();
    std::thread::spawn(move || {
        wake();
        let _ = done.send(());
    });
    // Deliberate: the 3 s bound is the check (a deadlocked `wake` never
    // returns); a correct one returns at once.
    let ok = returned.recv_timeout(Duration::from_secs(3)).is_ok();
    closer.join().unwrap();
    drop((long, waiter));
    ok
}

/// Same hole as `a_channel_send_during_pool_shutdown_returns`
/// in `Semaphore`: dropping a `Permit` wakes the waiting `acquire` under
/// the semaphore's lock; the task is dropped inline (pool closed), and its
/// `Acquire::drop` (key set, notified) takes the same lock (S9).
#[test]
fn a_permit_drop_during_pool_shutdown_returns() {
    watchdog("permit_drop_during_pool_shutdown", 30, || {
        let sem = gdex::Semaphore::new(1);
        let permit = sem.try_acquire().unwrap();
        let s2 = sem.clone();
        let ok = wake_during_shutdown(
            async move {
                let _ = s2.acquire().await;
            },
            move || drop(permit),
        );
        assert!(
            ok,
            "dropping a Permit during pool shutdown deadlocked on the semaphore's lock"
        );
    });
}

/// Same hole in `Promise`: `resolve` wakes the waiters under the promise's
/// lock (`Inner::complete`); the task is dropped inline and
/// `PromiseFuture::drop` takes the same lock (S9).
#[test]
fn a_promise_resolve_during_pool_shutdown_returns() {
    watchdog("promise_resolve_during_pool_shutdown", 30, || {
        let (promise, future) = gdex::Promise::<u32>::new();
        let ok = wake_during_shutdown(
            async move {
                let _ = future.await;
            },
            move || promise.resolve(7),
        );
        assert!(
            ok,
            "Promise::resolve during pool shutdown deadlocked on the promise's lock"
        );
    });
}

/// libdex 1.2 `Channel/receive_all_with_blocked_sender`: `recv_all` on a
/// full bounded channel takes what is queued and lets the send waiting
/// for room in, in order.
#[test]
fn recv_all_lets_a_send_blocked_on_a_full_channel_in() {
    watchdog("recv-all-blocked-sender", 30, || {
        let (tx, rx) = gdex::channel(2);
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut send1 = Box::pin(tx.send(1));
        let mut send2 = Box::pin(tx.send(2));
        let mut send3 = Box::pin(tx.send(3));
        assert!(send1.as_mut().poll(&mut cx).is_ready());
        assert!(send2.as_mut().poll(&mut cx).is_ready());
        assert!(send3.as_mut().poll(&mut cx).is_pending());
        let mut all = Box::pin(rx.recv_all());
        match all.as_mut().poll(&mut cx) {
            Poll::Ready(Ok(items)) => assert_eq!(items, [1, 2]),
            other => panic!("recv_all on a full channel gave {other:?}"),
        }
        assert!(
            matches!(send3.as_mut().poll(&mut cx), Poll::Ready(Ok(()))),
            "the blocked send was not let in"
        );
        assert_eq!(gdex::block_on(rx.recv()).unwrap(), 3);
    });
}

/// libdex 1.2 `delayed` (its fix "chain wrapped future in the correct
/// direction"): released before the wrapped future resolves, a `Delayed`
/// stays pending until it does, then gives its value; resolved before the
/// release, it waits for the release.
#[test]
fn a_delayed_released_early_waits_for_its_future_and_gives_its_value() {
    watchdog("delayed-release-early", 30, || {
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let (promise, future) = gdex::Promise::<i32>::new();
        let (delayed, release) = gdex::Delayed::new(future);
        let mut delayed = Box::pin(delayed);
        assert!(delayed.as_mut().poll(&mut cx).is_pending());
        release.release();
        assert!(
            delayed.as_mut().poll(&mut cx).is_pending(),
            "released ahead of its future"
        );
        promise.resolve(123);
        assert!(matches!(
            delayed.as_mut().poll(&mut cx),
            Poll::Ready(Ok(123))
        ));

        let (promise, future) = gdex::Promise::<i32>::new();
        let (delayed, release) = gdex::Delayed::new(future);
        let mut delayed = Box::pin(delayed);
        promise.resolve(7);
        assert!(
            delayed.as_mut().poll(&mut cx).is_pending(),
            "resolved before its release"
        );
        release.release();
        assert!(matches!(delayed.as_mut().poll(&mut cx), Poll::Ready(Ok(7))));
    });
}

/// libdex 1.2 `with-timeout/resolves` and `/rejects`: a timeout around a
/// future that is already decided passes its value, or its error,
/// through unchanged (domain, code and message), without waiting.
#[test]
fn a_timeout_passes_a_value_or_an_error_through_unchanged() {
    watchdog("timeout-passthrough", 30, || {
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut ok = Box::pin(gdex::timeout(
            Duration::from_secs(1),
            std::future::ready(Ok::<_, gdex::Error>(123)),
        ));
        assert!(matches!(
            ok.as_mut().poll(&mut cx),
            Poll::Ready(Ok(Ok(123)))
        ));
        let failed = glib::Error::new(gio::IOErrorEnum::NotFound, "Failed");
        let mut err = Box::pin(gdex::timeout_at(
            Instant::now() + Duration::from_secs(1),
            std::future::ready(Err::<i32, _>(failed)),
        ));
        match err.as_mut().poll(&mut cx) {
            Poll::Ready(Ok(Err(e))) => {
                assert!(e.matches(gio::IOErrorEnum::NotFound));
                assert_eq!(e.message(), "Failed");
            }
            other => panic!("the error did not pass through: {other:?}"),
        }
    });
}

/// tokio's `timeout`, in tokio's shape: any output (a `bool`, an
/// `io::Result`, a task's `Result`) comes back whole in `Ok`, the deadline
/// as `Err(Elapsed)`; `?` takes both apart, into a gdex result or an
/// `io::Result` (where `Elapsed` is of kind `TimedOut`, as tokio's).
#[test]
fn a_timeout_takes_any_output_and_gives_tokios_shape() {
    watchdog("timeout-any-output", 30, || {
        let long = Duration::from_secs(10);
        // Deliberate: a deadline the future never meets.
        let short = Duration::from_millis(5);

        let r: Result<bool, gdex::Elapsed> = gdex::block_on(gdex::timeout(long, async { true }));
        assert_eq!(r, Ok(true));
        let elapsed = gdex::block_on(gdex::timeout(short, std::future::pending::<bool>()))
            .expect_err("a pending future met its deadline");
        assert_eq!(elapsed.to_string(), "deadline has elapsed");
        assert!(matches!(gdex::Error::from(elapsed), gdex::Error::TimedOut));

        // An `io::Result`, with `?` in a function that returns one.
        async fn read_within(d: Duration, path: &str) -> std::io::Result<Vec<u8>> {
            gdex::timeout(d, async { std::fs::read(path) }).await?
        }
        let missing = gdex::block_on(read_within(long, "/no/such/file/here")).unwrap_err();
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(missing.raw_os_error(), Some(libc::ENOENT));
        async fn never_within(d: Duration) -> std::io::Result<()> {
            gdex::timeout(d, std::future::pending::<std::io::Result<()>>()).await?
        }
        let late = gdex::block_on(never_within(short)).unwrap_err();
        assert_eq!(late.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(late.to_string(), "deadline has elapsed");
        assert!(matches!(gdex::Error::from(late), gdex::Error::TimedOut));

        // A task's `Result` (on another thread) with `??`, into a gdex
        // result; and the same task's errors into an `io::Result`.
        let p = pool(1);
        let s = p.scheduler();
        let doubled = {
            let s = s.clone();
            async move {
                let task = s.spawn(async { 21 });
                Ok::<_, gdex::Error>(gdex::timeout(long, task).await?? * 2)
            }
        };
        assert_eq!(gdex::block_on(doubled).unwrap(), 42);
        let failed = {
            let s = s.clone();
            async move {
                let task = s.spawn(async { panic!("on purpose") });
                gdex::timeout(long, task).await??;
                Ok::<(), std::io::Error>(())
            }
        };
        let failed = gdex::block_on(failed).unwrap_err();
        assert_eq!(failed.kind(), std::io::ErrorKind::Other);
        assert!(
            matches!(gdex::Error::from(failed), gdex::Error::Panicked(m) if m == "on purpose"),
            "the task's error did not come back whole"
        );
    });
}

/// At its deadline a timeout drops the future it wraps, whatever the
/// future's output, before it gives `Elapsed`: on a pool worker, in a
/// fiber and on the main scheduler (libdex `with-timeout`, tokio's
/// `timeout`: the future is cancelled by being dropped).
#[test]
fn an_elapsed_timeout_has_dropped_its_future() {
    watchdog("timeout-drops", 30, || {
        let p = pool(1);
        // Deliberate: the deadline is what is tested.
        let d = Duration::from_millis(5);
        // A future of `bool` that holds `Counted` until it is dropped.
        let held = |drops: &Arc<AtomicUsize>| {
            let guard = Counted(drops.clone());
            async move {
                let _guard = guard;
                std::future::pending::<bool>().await
            }
        };

        let drops = Arc::new(AtomicUsize::new(0));
        let (future, seen) = (held(&drops), drops.clone());
        let on_pool = p.scheduler().spawn(async move {
            let r = gdex::timeout(d, future).await;
            (r, seen.load(Ordering::SeqCst))
        });
        let (r, dropped) = gdex::block_on(on_pool).unwrap();
        assert!(r.is_err(), "{r:?}");
        assert_eq!(dropped, 1, "the future outlived its deadline on a worker");

        let drops = Arc::new(AtomicUsize::new(0));
        let (future, seen) = (held(&drops), drops.clone());
        let in_fiber = p.scheduler().spawn_fiber(move || {
            let r = gdex::fiber::wait_output(gdex::timeout(d, future)).unwrap();
            (r, seen.load(Ordering::SeqCst))
        });
        let (r, dropped) = gdex::block_on(in_fiber).unwrap();
        assert!(r.is_err(), "{r:?}");
        assert_eq!(dropped, 1, "the future outlived its deadline in a fiber");

        on_main(|| {
            let drops = Arc::new(AtomicUsize::new(0));
            let (future, seen) = (held(&drops), drops.clone());
            let on_main = gdex::Scheduler::main().spawn_local(async move {
                let r = gdex::timeout_at(Instant::now() + d, future).await;
                (r, seen.load(Ordering::SeqCst))
            });
            let (r, dropped) = gdex::block_on(on_main).unwrap();
            assert!(r.is_err(), "{r:?}");
            assert_eq!(dropped, 1, "the future outlived its deadline on main");
        });
    });
}

/// libdex 1.2 `with-timeout/times-out` and `/disowned`: a deadline that
/// passes gives `Elapsed` (libdex rejects with `DEX_ERROR_TIMED_OUT`)
/// and drops the wrapped future, which
/// cancels a GIO call it made; work handed to a detached task is not
/// cancelled, only no longer awaited.
#[test]
fn a_passed_deadline_times_out_cancelling_the_call_but_not_detached_work() {
    watchdog("timeout-deadline", 30, || {
        let context = glib::MainContext::new();
        context
            .with_thread_default(|| {
                let timed_out = gdex::block_on(gdex::timeout_at(
                    Instant::now(),
                    std::future::pending::<Result<(), gdex::Error>>(),
                ));
                assert!(timed_out.is_err(), "{timed_out:?}");

                // A GIO-style call whose cancellable the test watches; it
                // never answers (its sender is kept, unused).
                type Call = (gio::Cancellable, gio::GioFutureResult<()>);
                let started = Arc::new(std::sync::Mutex::new(None::<Call>));
                let seen = started.clone();
                let call = gio::GioFuture::new(&gio::Menu::new(), move |_, c, send| {
                    *seen.lock().unwrap() = Some((c.clone(), send));
                });
                let out = gdex::block_on(gdex::timeout(Duration::from_millis(5), async move {
                    call.await;
                    Ok::<(), gdex::Error>(())
                }));
                assert!(out.is_err(), "{out:?}");
                let (c, _send) = started.lock().unwrap().take().expect("the call started");
                assert!(c.is_cancelled(), "the timed-out call was not cancelled");

                // Disowned: the work runs on in a detached task.
                let done = Arc::new(AtomicBool::new(false));
                let d = done.clone();
                let (promise, result) = gdex::Promise::<u8>::new();
                let (open, gate) = gdex::Promise::<()>::new();
                gdex::spawn(async move {
                    let _ = gate.await;
                    d.store(true, Ordering::SeqCst);
                    promise.resolve(1);
                })
                .detach();
                let out = gdex::block_on(gdex::timeout(Duration::from_millis(5), result));
                assert!(out.is_err(), "{out:?}");
                open.resolve(());
                wait_until(|| done.load(Ordering::SeqCst));
            })
            .unwrap();
    });
}
