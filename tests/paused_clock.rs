//! Time a test controls: a `gdex::TestClock` drives gdex's own timers
//! (`sleep`, `timeout`, `timeout_at`, `reject_after`, `interval`) on a pool
//! built with it and on contexts attached to it. Paused, it moves only when
//! advanced (after letting its pools settle); with auto-advance, it jumps
//! to the next deadline once every pool and attached context is idle, and
//! never while a task runs or a blocking job is in its pool's lane. GLib's
//! own timeout sources keep real time.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::{pump, watchdog};
use futures::StreamExt;

const HOUR: Duration = Duration::from_secs(3600);

fn pool_on(clock: &gdex::TestClock, workers: usize) -> gdex::ThreadPool {
    gdex::ThreadPool::builder()
        .workers(workers)
        .clock(clock)
        .build()
        .unwrap()
}

/// Waits (yielding) until `n` timers wait on the clock.
fn until_pending(clock: &gdex::TestClock, n: usize) {
    while clock.pending_timers() != n {
        std::thread::yield_now();
    }
}

#[test]
fn a_sleep_fires_only_when_advanced_past_its_deadline() {
    watchdog(
        "a_sleep_fires_only_when_advanced_past_its_deadline",
        30,
        || {
            let clock = gdex::TestClock::paused();
            let pool = pool_on(&clock, 2);
            // Made on this thread (no clock here): it counts its hour from its
            // first poll on the pool.
            let task = pool.scheduler().spawn(gdex::sleep(HOUR));
            clock.advance(HOUR - Duration::from_micros(1));
            clock.settle();
            assert!(!task.is_finished());
            assert_eq!(clock.pending_timers(), 1);
            clock.advance(Duration::from_micros(1));
            gdex::block_on(task).unwrap();
            assert_eq!(clock.pending_timers(), 0);
            assert_eq!(clock.elapsed(), HOUR);
        },
    );
}

#[test]
fn every_timer_kind_waits_on_the_clock() {
    watchdog("every_timer_kind_waits_on_the_clock", 30, || {
        let clock = gdex::TestClock::paused();
        let pool = pool_on(&clock, 2);
        let s = pool.scheduler();
        let timeout = s.spawn(gdex::timeout(HOUR, std::future::pending::<()>()));
        let rejected = s.spawn(gdex::reject_after::<u8>(HOUR));
        let at = s.spawn(async {
            // A deadline on the clock's time, made on the pool.
            let deadline = gdex::now() + HOUR;
            gdex::timeout_at(deadline, std::future::pending::<()>()).await
        });
        let ticks = s.spawn(async {
            let mut interval = gdex::interval(HOUR);
            let first = interval.tick().await;
            let second = interval.tick().await;
            second - first
        });
        // A `Delayed` is held back by its release, not by time: released at
        // once, it waits on the clock as the timer it wraps does.
        let (delayed, release) = gdex::Delayed::new(gdex::sleep(HOUR));
        release.release();
        let delayed = s.spawn(delayed);
        clock.settle();
        assert_eq!(clock.pending_timers(), 5);
        for task in [&timeout, &at] {
            assert!(!task.is_finished());
        }
        assert!(!delayed.is_finished());
        clock.advance(HOUR);
        assert!(gdex::block_on(timeout).unwrap().is_err());
        assert!(matches!(
            gdex::block_on(rejected).unwrap(),
            Err(gdex::Error::TimedOut)
        ));
        assert!(gdex::block_on(at).unwrap().is_err());
        assert_eq!(gdex::block_on(ticks).unwrap(), HOUR);
        gdex::block_on(delayed).unwrap();
    });
}

#[test]
fn a_timeout_that_its_future_beats_does_not_fire() {
    watchdog("a_timeout_that_its_future_beats_does_not_fire", 30, || {
        let clock = gdex::TestClock::paused();
        let pool = pool_on(&clock, 1);
        let (tx, rx) = gdex::channel::<u32>(1);
        let task = pool
            .scheduler()
            .spawn(async move { gdex::timeout(Duration::from_secs(30), rx.recv()).await });
        clock.advance(Duration::from_secs(29));
        gdex::block_on(tx.send(7)).unwrap();
        assert_eq!(gdex::block_on(task).unwrap().unwrap().unwrap(), 7);
        // Its timer left the book with it.
        assert_eq!(clock.pending_timers(), 0);
    });
}

#[test]
fn a_dropped_timer_leaves_the_clock() {
    watchdog("a_dropped_timer_leaves_the_clock", 30, || {
        let clock = gdex::TestClock::paused();
        let pool = pool_on(&clock, 1);
        let tasks: Vec<_> = (0..10)
            .map(|i| pool.scheduler().spawn(gdex::sleep(HOUR * i)))
            .collect();
        clock.settle();
        // Ten sleeps; the zero-length one was due at its first poll.
        assert_eq!(clock.pending_timers(), 9);
        drop(tasks);
        until_pending(&clock, 0);
        assert_eq!(clock.next_deadline(), None);
    });
}

#[test]
fn advance_lets_the_pool_settle_before_it_moves() {
    // The debounce of the docs, over many keys: each key restarts a 300 ms
    // window; `advance` waits for the task to take the key before it moves
    // the clock, so the window never closes early, however slow the pool.
    watchdog("advance_lets_the_pool_settle_before_it_moves", 60, || {
        let clock = gdex::TestClock::paused();
        let pool = pool_on(&clock, 2);
        let (keys, typed) = gdex::channel::<u32>(1);
        let task = pool.scheduler().spawn(async move {
            let mut seen = Vec::new();
            loop {
                match gdex::timeout(Duration::from_millis(300), typed.recv()).await {
                    Ok(Ok(key)) => seen.push(key),
                    _ => return seen,
                }
            }
        });
        let n = common::stress(200) as u32;
        for key in 0..n {
            gdex::block_on(keys.send(key)).unwrap();
            clock.advance(Duration::from_millis(299));
        }
        clock.settle();
        assert!(!task.is_finished());
        clock.advance(Duration::from_millis(1));
        assert_eq!(gdex::block_on(task).unwrap(), (0..n).collect::<Vec<_>>());
    });
}

#[test]
fn auto_advance_jumps_to_each_deadline_in_order() {
    watchdog("auto_advance_jumps_to_each_deadline_in_order", 30, || {
        let clock = gdex::TestClock::auto_advancing();
        let pool = pool_on(&clock, 2);
        let (tx, rx) = gdex::channel::<&str>(1);
        // A sleeper that sends after 5 s, and a receiver bounded by 10 s:
        // the clock must stop at 5 s first.
        let sender = pool.scheduler().spawn(async move {
            gdex::sleep(Duration::from_secs(2)).await;
            gdex::sleep(Duration::from_secs(3)).await;
            tx.send("at five").await.unwrap();
            gdex::now()
        });
        let receiver = pool
            .scheduler()
            .spawn(async move { gdex::timeout(Duration::from_secs(10), rx.recv()).await });
        assert_eq!(
            gdex::block_on(receiver).unwrap().unwrap().unwrap(),
            "at five"
        );
        let sent_at = gdex::block_on(sender).unwrap();
        assert_eq!(
            sent_at - (clock.now() - clock.elapsed()),
            Duration::from_secs(5)
        );
        // The 10 s timeout went with its task: nothing moved the clock on.
        assert_eq!(clock.elapsed(), Duration::from_secs(5));
    });
}

#[test]
fn auto_advance_waits_for_a_job_in_the_blocking_lane() {
    watchdog(
        "auto_advance_waits_for_a_job_in_the_blocking_lane",
        30,
        || {
            let clock = gdex::TestClock::auto_advancing();
            let pool = pool_on(&clock, 2);
            let (go, wait) = mpsc::channel::<()>();
            let job = pool.spawn_blocking(move || {
                wait.recv().unwrap();
                7
            });
            let task = pool
                .scheduler()
                .spawn(gdex::timeout(Duration::from_secs(1), job));
            until_pending(&clock, 1);
            // The workers sleep now: a clock that took the pool for idle would
            // fire the timeout within moments. Give it those moments.
            let until = Instant::now() + Duration::from_millis(50);
            while Instant::now() < until {
                std::thread::yield_now();
            }
            assert_eq!(clock.elapsed(), Duration::ZERO);
            go.send(()).unwrap();
            assert_eq!(gdex::block_on(task).unwrap().unwrap().unwrap(), 7);
            assert_eq!(clock.elapsed(), Duration::ZERO);
        },
    );
}

#[test]
fn auto_advance_does_not_move_while_a_task_runs() {
    watchdog("auto_advance_does_not_move_while_a_task_runs", 30, || {
        let clock = gdex::TestClock::auto_advancing();
        let pool = pool_on(&clock, 2);
        let (go, wait) = mpsc::channel::<()>();
        // One task in one long poll; the other waits on the clock. In that
        // order: the other way round, the pool could go idle between the
        // two spawns and the clock jump before the long poll began.
        let busy = pool.scheduler().spawn(async move {
            wait.recv().unwrap();
        });
        let sleeper = pool.scheduler().spawn(gdex::sleep(HOUR));
        until_pending(&clock, 1);
        let until = Instant::now() + Duration::from_millis(50);
        while Instant::now() < until {
            std::thread::yield_now();
        }
        assert_eq!(clock.elapsed(), Duration::ZERO);
        go.send(()).unwrap();
        gdex::block_on(busy).unwrap();
        gdex::block_on(sleeper).unwrap();
        assert_eq!(clock.elapsed(), HOUR);
    });
}

#[test]
fn an_attached_context_waits_for_its_advance() {
    watchdog("an_attached_context_waits_for_its_advance", 30, || {
        let context = glib::MainContext::new();
        let clock = gdex::TestClock::paused();
        let attached = clock.attach(&context);
        let scheduler = gdex::Scheduler::for_context(&context);
        let woke = Arc::new(AtomicUsize::new(0));
        let w = woke.clone();
        let task = scheduler.spawn(async move {
            gdex::sleep(Duration::from_secs(60)).await;
            w.fetch_add(1, Ordering::SeqCst);
        });
        pump(&context);
        assert_eq!(clock.pending_timers(), 1);
        clock.advance(Duration::from_secs(59));
        pump(&context);
        assert_eq!(woke.load(Ordering::SeqCst), 0);
        clock.advance(Duration::from_secs(1));
        common::pump_until(&context, || task.is_finished());
        assert_eq!(woke.load(Ordering::SeqCst), 1);
        // Let go: the context's timers keep real time again.
        drop(attached);
        let real = scheduler.spawn(gdex::sleep(Duration::from_millis(1)));
        common::pump_until(&context, || real.is_finished());
        assert_eq!(clock.pending_timers(), 0);
    });
}

#[test]
fn an_attached_context_and_a_pool_advance_together() {
    // A GTK app's shape: a main-loop task awaits pool work under a timeout.
    // The clock waits for both to be idle, and stops at the pool's 10 s.
    watchdog(
        "an_attached_context_and_a_pool_advance_together",
        30,
        || {
            let context = glib::MainContext::new();
            let clock = gdex::TestClock::auto_advancing();
            let _attached = clock.attach(&context);
            let pool = pool_on(&clock, 2);
            let work = pool.scheduler().spawn(async {
                gdex::sleep(Duration::from_secs(10)).await;
                "done"
            });
            let scheduler = gdex::Scheduler::for_context(&context);
            let ui = scheduler.spawn(async move {
                let r = gdex::timeout(Duration::from_secs(20), work).await;
                (r, gdex::now())
            });
            let start = clock.now();
            common::pump_until(&context, || ui.is_finished());
            let (r, at) = gdex::block_on(ui).unwrap();
            assert_eq!(r.unwrap().unwrap(), "done");
            assert_eq!(at - start, Duration::from_secs(10));
        },
    );
}

#[test]
fn glib_timeouts_keep_real_time() {
    watchdog("glib_timeouts_keep_real_time", 30, || {
        let clock = gdex::TestClock::paused();
        let pool = pool_on(&clock, 1);
        // GLib's own source fires in real time, on the paused pool.
        let task = pool.scheduler().spawn(async {
            glib::timeout_future(Duration::from_millis(5)).await;
        });
        gdex::block_on(task).unwrap();
        assert_eq!(clock.elapsed(), Duration::ZERO);
    });
}

#[test]
fn an_interval_skips_the_ticks_an_advance_jumps_over() {
    watchdog(
        "an_interval_skips_the_ticks_an_advance_jumps_over",
        30,
        || {
            let clock = gdex::TestClock::paused();
            let pool = pool_on(&clock, 1);
            let period = Duration::from_secs(1);
            let (tx, mut rx) = futures::channel::mpsc::unbounded::<Duration>();
            let start = clock.now();
            let task = pool.scheduler().spawn(async move {
                let mut ticks = gdex::interval(period);
                while let Some(at) = ticks.next().await {
                    if tx.unbounded_send(at - start).is_err() {
                        return;
                    }
                }
            });
            assert_eq!(gdex::block_on(rx.next()).unwrap(), Duration::ZERO);
            clock.advance(period);
            assert_eq!(gdex::block_on(rx.next()).unwrap(), period);
            // Ten periods and a half at once: one tick (the one due at 2 s,
            // late)...
            clock.advance(period * 10 + period / 2);
            assert_eq!(gdex::block_on(rx.next()).unwrap(), period * 2);
            clock.settle();
            assert!(rx.try_recv().is_err(), "the ticks jumped over are skipped");
            // ...and the next in phase, at 12 s, not 12.5 s.
            clock.advance(period / 2);
            assert_eq!(gdex::block_on(rx.next()).unwrap(), period * 12);
            drop(rx);
            clock.advance(period);
            gdex::block_on(task).unwrap();
        },
    );
}

#[test]
fn now_reads_the_clock_where_one_drives_and_real_time_elsewhere() {
    watchdog(
        "now_reads_the_clock_where_one_drives_and_real_time_elsewhere",
        30,
        || {
            let clock = gdex::TestClock::paused();
            let pool = pool_on(&clock, 1);
            clock.advance(HOUR);
            let on_pool = gdex::block_on(pool.scheduler().spawn(async { gdex::now() })).unwrap();
            assert_eq!(on_pool, clock.now());
            let here = gdex::now();
            assert!(here < clock.now(), "this thread keeps real time");
        },
    );
}

#[test]
fn misuse_is_refused_with_a_message() {
    let context = glib::MainContext::new();
    let first = gdex::TestClock::paused();
    let _attached = first.attach(&context);
    let second = gdex::TestClock::paused();
    let msg = common::panic_message(
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = second.attach(&context);
        }))
        .unwrap_err(),
    );
    assert!(
        msg.contains("another TestClock drives this context"),
        "{msg}"
    );

    let zero = common::panic_message(
        std::panic::catch_unwind(|| gdex::interval(Duration::ZERO)).unwrap_err(),
    );
    assert!(zero.contains("period must be above zero"), "{zero}");

    let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
    let worker_context = gdex::block_on(
        pool.scheduler()
            .spawn(async { glib::MainContext::thread_default().unwrap() }),
    )
    .unwrap();
    let on_worker = common::panic_message(
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = second.attach(&worker_context);
        }))
        .unwrap_err(),
    );
    assert!(
        on_worker.contains("ThreadPoolBuilder::clock"),
        "{on_worker}"
    );
}

#[test]
fn a_panicking_task_does_not_stop_the_clock() {
    watchdog("a_panicking_task_does_not_stop_the_clock", 30, || {
        let _panics = common::panic_handler_lock();
        let recorded = common::record_panics("paused_clock");
        let clock = gdex::TestClock::auto_advancing();
        let pool = pool_on(&clock, 2);
        // Both spawned by one task: spawned one by one from this thread,
        // the pool could go idle between them and the clock jump to the
        // first deadline before the second timer is made (TestClock's
        // docs), which would then end at 3 s.
        let s = pool.scheduler();
        let (doomed, fine) = gdex::block_on(pool.scheduler().spawn(async move {
            let doomed = s.spawn(async {
                gdex::sleep(Duration::from_secs(1)).await;
                panic!("paused_clock: boom after a second");
            });
            let fine = s.spawn(async {
                gdex::sleep(Duration::from_secs(2)).await;
                2
            });
            (doomed, fine)
        }))
        .unwrap();
        assert!(gdex::block_on(doomed).is_err());
        assert_eq!(gdex::block_on(fine).unwrap(), 2);
        assert_eq!(clock.elapsed(), Duration::from_secs(2));
        drop(recorded);
        gdex::reset_panic_handler();
    });
}

#[test]
fn the_main_scheduler_runs_on_an_attached_main_context() {
    // A GTK app's main loop: the main scheduler's timers on the clock, and
    // `block_on` on the main thread iterating the main context.
    watchdog(
        "the_main_scheduler_runs_on_an_attached_main_context",
        30,
        || {
            common::on_main(|| {
                let clock = gdex::TestClock::auto_advancing();
                let attached = clock.attach(&glib::MainContext::default());
                let start = clock.now();
                let task = gdex::Scheduler::main().spawn(async {
                    let mut ticks = gdex::interval(Duration::from_secs(60));
                    for _ in 0..3 {
                        ticks.tick().await;
                    }
                    gdex::now()
                });
                let at = gdex::block_on(task).unwrap();
                assert_eq!(at - start, Duration::from_secs(120));
                assert_eq!(clock.elapsed(), Duration::from_secs(120));
                drop(attached);
                assert!(
                    gdex::now() < clock.now(),
                    "the main context keeps real time again"
                );
            })
        },
    );
}

#[test]
fn a_pool_shut_down_leaves_nothing_on_its_clock_and_advance_goes_on() {
    watchdog(
        "a_pool_shut_down_leaves_nothing_on_its_clock_and_advance_goes_on",
        30,
        || {
            for auto in [false, true] {
                let clock = gdex::TestClock::paused();
                let pool = pool_on(&clock, 2);
                let tasks: Vec<_> = (1..=3)
                    .map(|i| pool.scheduler().spawn(gdex::sleep(HOUR * i)))
                    .collect();
                clock.settle();
                assert_eq!(clock.pending_timers(), 3);
                // The handle lives on: the pool is shut down, not dropped.
                pool.shutdown();
                for task in tasks {
                    assert!(matches!(gdex::block_on(task), Err(gdex::Error::Cancelled)));
                }
                assert_eq!(clock.pending_timers(), 0);
                // Turned on only now: with the pool idle and the sleeps in
                // the book, auto-advance would rightly jump to the first.
                clock.set_auto_advance(auto);
                // Nothing runs there any more: nothing to wait for.
                clock.advance(HOUR);
                clock.settle();
                assert_eq!(clock.elapsed(), HOUR);
                drop(pool);
            }
        },
    );
}

#[test]
fn timers_and_attachments_dropped_on_other_threads_leave_the_clock() {
    watchdog(
        "timers_and_attachments_dropped_on_other_threads_leave_the_clock",
        30,
        || {
            let clock = gdex::TestClock::paused();
            let pool = pool_on(&clock, 1);
            // A sleep polled once on the pool (so in the clock's book), then
            // handed to this thread and dropped on another.
            let sleep = gdex::block_on(pool.scheduler().spawn(async {
                let mut sleep = gdex::sleep(HOUR);
                let pending = futures::poll!(&mut sleep).is_pending();
                assert!(pending);
                // Wrapped: a task whose output is a future reads as a mistake.
                Some(sleep)
            }))
            .unwrap()
            .unwrap();
            assert_eq!(clock.pending_timers(), 1);
            std::thread::spawn(move || drop(sleep)).join().unwrap();
            assert_eq!(clock.pending_timers(), 0);

            // An attachment dropped on another thread while the context's own
            // thread iterates it: its timers keep real time again after.
            let context = glib::MainContext::new();
            let attached = clock.attach(&context);
            let scheduler = gdex::Scheduler::for_context(&context);
            let dropper = std::thread::spawn(move || drop(attached));
            while !dropper.is_finished() {
                context.iteration(false);
            }
            dropper.join().unwrap();
            let real = scheduler.spawn(gdex::sleep(Duration::from_millis(1)));
            common::pump_until(&context, || real.is_finished());
            assert_eq!(clock.pending_timers(), 0);
        },
    );
}

/// `future`'s output, or `None` if it takes more than `secs` of real time:
/// awaited on this thread, which no clock drives, so the bound is real
/// (a bug that stops the clock fails the test instead of hanging it).
fn within<F: std::future::IntoFuture>(secs: u64, future: F) -> Option<F::Output> {
    gdex::block_on(gdex::timeout(Duration::from_secs(secs), future)).ok()
}

/// Lets `d` of real time pass, for a race the test wants lost one way.
fn linger(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::thread::yield_now();
    }
}

#[test]
fn auto_advance_moves_on_once_the_blocking_lane_empties() {
    // A blocking job that no task of the pool awaits: when it ends no
    // worker wakes, yet the pool is idle then and the clock must move.
    watchdog(
        "auto_advance_moves_on_once_the_blocking_lane_empties",
        60,
        || {
            let clock = gdex::TestClock::auto_advancing();
            let pool = pool_on(&clock, 2);
            let (go, wait) = mpsc::channel::<()>();
            let job = pool.spawn_blocking(move || wait.recv().unwrap());
            let sleeper = pool.scheduler().spawn(gdex::sleep(Duration::from_secs(1)));
            until_pending(&clock, 1);
            // Let the workers go to sleep (and the clock see the lane busy).
            linger(Duration::from_millis(50));
            go.send(()).unwrap();
            gdex::block_on(job).unwrap();
            assert!(
                within(10, sleeper).is_some(),
                "the clock did not move once the lane emptied"
            );
            assert_eq!(clock.elapsed(), Duration::from_secs(1));
        },
    );
}

#[test]
fn a_context_reports_idle_again_after_its_tasks_ran() {
    // The context reports idle while the pool is busy; the pool then wakes
    // the context's task and goes idle with no timer left in the book. The
    // task then waits on a new timer: the context must report again.
    watchdog(
        "a_context_reports_idle_again_after_its_tasks_ran",
        60,
        || {
            let context = glib::MainContext::new();
            let clock = gdex::TestClock::auto_advancing();
            let _attached = clock.attach(&context);
            let pool = pool_on(&clock, 1);
            let (go, wait) = mpsc::channel::<()>();
            let (tx, rx) = gdex::channel::<()>(1);
            let busy = pool.scheduler().spawn(async move {
                // A timer on the clock while this task runs...
                let mut hour = Box::pin(gdex::sleep(HOUR));
                assert!(futures::poll!(hour.as_mut()).is_pending());
                wait.recv().unwrap();
                // ...and none once it is done.
                drop(hour);
                tx.send(()).await.unwrap();
            });
            until_pending(&clock, 1);
            let start = clock.now();
            let ui = gdex::Scheduler::for_context(&context).spawn(async move {
                rx.recv().await.unwrap();
                gdex::sleep(Duration::from_secs(1)).await;
                gdex::now()
            });
            pump(&context);
            assert_eq!(clock.elapsed(), Duration::ZERO, "the pool's task runs");
            go.send(()).unwrap();
            gdex::block_on(busy).unwrap();
            clock.settle();
            linger(Duration::from_millis(50));
            let done = common::pump_for(&context, Duration::from_secs(10), || ui.is_finished());
            assert!(
                done,
                "the clock did not move once the context's task waited"
            );
            assert_eq!(gdex::block_on(ui).unwrap() - start, Duration::from_secs(1));
        },
    );
}

#[test]
fn auto_advance_waits_for_a_task_another_context_woke() {
    // Two attached contexts: `a` reports idle; `b`'s task then wakes `a`'s
    // task and waits. `b` is idle, but `a` has work: no jump until it ran.
    watchdog(
        "auto_advance_waits_for_a_task_another_context_woke",
        60,
        || {
            let a = glib::MainContext::new();
            let b = glib::MainContext::new();
            let clock = gdex::TestClock::auto_advancing();
            let _on_a = clock.attach(&a);
            let _on_b = clock.attach(&b);
            let (tx, rx) = gdex::channel::<u8>(1);
            let start = clock.now();
            let woken = gdex::Scheduler::for_context(&a).spawn(async move {
                gdex::timeout(HOUR, rx.recv()).await.unwrap().unwrap();
                gdex::sleep(Duration::from_secs(1)).await;
                gdex::now()
            });
            pump(&a);
            let waker = gdex::Scheduler::for_context(&b).spawn(async move {
                tx.send(1).await.unwrap();
                gdex::sleep(Duration::from_secs(10)).await;
            });
            pump(&b);
            assert_eq!(
                clock.elapsed(),
                Duration::ZERO,
                "the clock moved while a task of `a` was woken and had not run"
            );
            let done = common::pump_for(&a, Duration::from_secs(10), || {
                pump(&b);
                woken.is_finished()
            });
            assert!(done);
            assert_eq!(
                gdex::block_on(woken).unwrap() - start,
                Duration::from_secs(1)
            );
            // Both contexts must say they are idle: both are iterated.
            assert!(common::pump_for(&b, Duration::from_secs(10), || {
                pump(&a);
                waker.is_finished()
            }));
            assert_eq!(clock.elapsed(), Duration::from_secs(10));
        },
    );
}

#[test]
fn auto_advance_waits_for_a_task_queued_on_a_worker_s_context() {
    // A context scheduler on a pool worker's own context: a pool task
    // wakes its task, then waits. The workers all sleep a moment later,
    // but the woken task has not run yet: the clock must wait for it.
    watchdog(
        "auto_advance_waits_for_a_task_queued_on_a_worker_s_context",
        120,
        || {
            for _ in 0..common::stress(500) {
                let clock = gdex::TestClock::auto_advancing();
                let pool = pool_on(&clock, 2);
                let worker_context = gdex::block_on(
                    pool.scheduler()
                        .spawn(async { glib::MainContext::thread_default().unwrap() }),
                )
                .unwrap();
                let on_worker = gdex::Scheduler::for_context(&worker_context);
                let (tx, rx) = gdex::channel::<()>(1);
                let start = clock.now();
                let woken = on_worker.spawn(async move {
                    rx.recv().await.unwrap();
                    gdex::sleep(Duration::from_secs(1)).await;
                    gdex::now()
                });
                let waker = pool.scheduler().spawn(async move {
                    tx.send(()).await.unwrap();
                    gdex::sleep(Duration::from_secs(10)).await;
                });
                let at = within(10, woken).expect("the clock stopped").unwrap();
                assert_eq!(at - start, Duration::from_secs(1));
                within(10, waker).expect("the clock stopped").unwrap();
            }
        },
    );
}

#[test]
fn detaching_a_busy_context_lets_the_others_move_the_clock() {
    watchdog(
        "detaching_a_busy_context_lets_the_others_move_the_clock",
        60,
        || {
            let a = glib::MainContext::new();
            let b = glib::MainContext::new();
            let clock = gdex::TestClock::auto_advancing();
            let _on_a = clock.attach(&a);
            let on_b = clock.attach(&b);
            let task = gdex::Scheduler::for_context(&a).spawn(gdex::sleep(Duration::from_secs(1)));
            // `a` is idle; `b`, never iterated, has not said so.
            pump(&a);
            assert_eq!(clock.elapsed(), Duration::ZERO);
            drop(on_b);
            let done = common::pump_for(&a, Duration::from_secs(10), || task.is_finished());
            assert!(done, "the clock waited for a context it no longer drives");
            assert_eq!(clock.elapsed(), Duration::from_secs(1));
        },
    );
}

#[test]
fn advance_from_a_blocking_job_of_the_pool_does_not_wait_for_itself() {
    watchdog(
        "advance_from_a_blocking_job_of_the_pool_does_not_wait_for_itself",
        60,
        || {
            let clock = gdex::TestClock::paused();
            let pool = pool_on(&clock, 1);
            let sleeper = pool.scheduler().spawn(gdex::sleep(Duration::from_secs(1)));
            until_pending(&clock, 1);
            let c = clock.clone();
            let job = pool.spawn_blocking(move || c.advance(Duration::from_secs(1)));
            assert!(within(10, job).is_some(), "advance waited for its own job");
            gdex::block_on(sleeper).unwrap();
        },
    );
}

#[test]
fn a_context_moves_the_clock_once_its_busy_pool_shut_down() {
    watchdog(
        "a_context_moves_the_clock_once_its_busy_pool_shut_down",
        60,
        || {
            let context = glib::MainContext::new();
            let clock = gdex::TestClock::auto_advancing();
            let _attached = clock.attach(&context);
            let pool = pool_on(&clock, 1);
            let (go, wait) = mpsc::channel::<()>();
            let (started, running) = mpsc::channel::<()>();
            let busy = pool.scheduler().spawn(async move {
                started.send(()).unwrap();
                wait.recv().unwrap();
            });
            running.recv().unwrap();
            let ui =
                gdex::Scheduler::for_context(&context).spawn(gdex::sleep(Duration::from_secs(1)));
            pump(&context);
            assert_eq!(clock.elapsed(), Duration::ZERO, "the pool's task runs");
            let closer = std::thread::spawn(move || pool.shutdown());
            go.send(()).unwrap();
            closer.join().unwrap();
            let _ = gdex::block_on(busy);
            let done = common::pump_for(&context, Duration::from_secs(10), || ui.is_finished());
            assert!(done, "the clock waited for a pool that shut down");
            assert_eq!(clock.elapsed(), Duration::from_secs(1));
        },
    );
}

#[test]
fn a_clock_timer_awaited_on_another_thread_is_auto_advanced() {
    // A timer made on the pool stays on the pool's clock wherever it is
    // polled: awaited on this thread, while the pool idles, the clock must
    // still move to it.
    watchdog(
        "a_clock_timer_awaited_on_another_thread_is_auto_advanced",
        60,
        || {
            let clock = gdex::TestClock::auto_advancing();
            let pool = pool_on(&clock, 1);
            // Handed out wrapped: a task whose output is a future reads as
            // a mistake.
            let made = pool
                .scheduler()
                .spawn(async { Some(gdex::sleep(Duration::from_secs(1))) });
            let sleep = gdex::block_on(made).unwrap().unwrap();
            clock.settle();
            // The worker has gone to sleep, and told the clock so, before
            // the timer waits.
            linger(Duration::from_millis(50));
            assert!(within(10, sleep).is_some(), "the clock never moved");
            assert_eq!(clock.elapsed(), Duration::from_secs(1));
        },
    );
}

/// One generated run of an interval: its period and start (ms; `None`:
/// `interval`, else `interval_at` that far from now, in the past or the
/// future), and what the test does to it.
#[derive(Debug)]
struct IntervalRun {
    period: u64,
    start: Option<i64>,
    steps: Vec<Step>,
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Advance(u64),
    Poll,
    Reset,
}

impl IntervalRun {
    fn generate(rng: &mut common::Rng) -> IntervalRun {
        // Periods above tokio's 5 ms of slack, within which tokio bursts a
        // late tick where gdex (always `Skip`) skips it.
        let period = 6 + rng.below(995);
        let start = match rng.below(3) {
            0 => None,
            _ => Some(rng.below(6001) as i64 - 3000),
        };
        let steps = (0..24)
            .map(|_| match rng.below(8) {
                0..=3 => Step::Poll,
                4..=6 => Step::Advance(rng.below(3 * period)),
                _ => Step::Reset,
            })
            .collect();
        IntervalRun {
            period,
            start,
            steps,
        }
    }
}

/// `base` moved by `ms` (either way).
fn shifted(base: Instant, ms: i64) -> Instant {
    let by = Duration::from_millis(ms.unsigned_abs());
    if ms >= 0 {
        base + by
    } else {
        base.checked_sub(by)
            .expect("an instant seconds in the past")
    }
}

/// `at - base` in ms, signed.
fn ms_from(base: Instant, at: Instant) -> i64 {
    if at >= base {
        (at - base).as_millis() as i64
    } else {
        -((base - at).as_millis() as i64)
    }
}

/// What each poll of the run's interval gave on tokio's paused clock (the
/// reference, with `MissedTickBehavior::Skip`): a tick, in ms from the
/// start, or `None`.
fn interval_on_tokio(run: &IntervalRun) -> Vec<Option<i64>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let base = tokio::time::Instant::now();
        let period = Duration::from_millis(run.period);
        let mut interval = match run.start {
            None => tokio::time::interval(period),
            Some(ms) => tokio::time::interval_at(shifted(base.into_std(), ms).into(), period),
        };
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut polls = Vec::new();
        for step in &run.steps {
            match *step {
                Step::Advance(ms) => tokio::time::advance(Duration::from_millis(ms)).await,
                Step::Reset => interval.reset(),
                Step::Poll => {
                    let tick =
                        std::future::poll_fn(|cx| std::task::Poll::Ready(interval.poll_tick(cx)))
                            .await;
                    polls.push(match tick {
                        std::task::Poll::Ready(at) => Some(ms_from(base.into_std(), at.into_std())),
                        std::task::Poll::Pending => None,
                    });
                }
            }
        }
        polls
    })
}

/// The same on a `TestClock` driving this thread's context.
fn interval_on_gdex(run: &IntervalRun) -> Vec<Option<i64>> {
    common::on_own_context(|context| {
        let clock = gdex::TestClock::paused();
        let _attached = clock.attach(context);
        let base = clock.now();
        let period = Duration::from_millis(run.period);
        let mut interval = match run.start {
            None => gdex::interval(period),
            Some(ms) => gdex::interval_at(shifted(base, ms), period),
        };
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        let mut polls = Vec::new();
        for step in &run.steps {
            match *step {
                Step::Advance(ms) => clock.advance(Duration::from_millis(ms)),
                Step::Reset => interval.reset(),
                Step::Poll => polls.push(match interval.poll_tick(&mut cx) {
                    std::task::Poll::Ready(at) => Some(ms_from(base, at)),
                    std::task::Poll::Pending => None,
                }),
            }
        }
        polls
    })
}

#[test]
fn an_interval_ticks_as_tokio_s_does_on_a_paused_clock() {
    // Generated runs (seeded; `GDEX_STRESS` scales their number): polls,
    // advances and resets of `interval` and `interval_at` (a start in the
    // past included), against tokio's own on its paused clock.
    let mut rng = common::Rng(0x1_7e4f_a1c0);
    for n in 0..common::stress(300) {
        let run = IntervalRun::generate(&mut rng);
        assert_eq!(
            interval_on_gdex(&run),
            interval_on_tokio(&run),
            "run {n}: {run:?}"
        );
    }
}
