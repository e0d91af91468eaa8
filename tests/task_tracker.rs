//! `TaskTracker` (the toolkit's tracker, tokio-util's): waits for every
//! task spawned or future tracked through it, keeping no result; owns
//! nothing (dropping it cancels nothing); on any scheduler; through
//! cancellation, panics and a pool's shutdown.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{watchdog, Counted};

/// `wait` resolves once the tracker is closed and every tracked future is
/// gone, not before either.
#[test]
fn wait_resolves_once_closed_and_every_task_is_done() {
    watchdog(
        "wait_resolves_once_closed_and_every_task_is_done",
        60,
        || {
            let pool = common::quiet_pool(2);
            let tracker = gdex::TaskTracker::new();
            let (gate, opened) = gdex::Promise::<()>::new();
            let done = Arc::new(AtomicUsize::new(0));
            for _ in 0..50 {
                let (opened, done) = (opened.clone(), done.clone());
                tracker
                    .spawn_on(&pool.scheduler(), async move {
                        opened.await.unwrap();
                        done.fetch_add(1, Ordering::SeqCst);
                    })
                    .detach();
            }
            drop(opened);
            assert_eq!(tracker.len(), 50);
            // Open: wait does not resolve even once the tasks are done.
            let early = gdex::block_on(gdex::timeout(Duration::from_millis(10), tracker.wait()));
            assert!(early.is_err());
            assert!(tracker.close());
            assert!(!tracker.close(), "closed once");
            let early = gdex::block_on(gdex::timeout(Duration::from_millis(10), tracker.wait()));
            assert!(early.is_err(), "the tasks wait for their gate");
            gate.resolve(());
            gdex::block_on(tracker.wait());
            assert_eq!(done.load(Ordering::SeqCst), 50);
            assert!(tracker.is_empty() && tracker.is_closed());
            // Reopened, an empty tracker's wait waits again.
            assert!(tracker.reopen());
            let waiting = gdex::block_on(gdex::timeout(Duration::from_millis(10), tracker.wait()));
            assert!(waiting.is_err());
            tracker.close();
            gdex::block_on(tracker.wait());
        },
    );
}

/// A future is tracked until it is dropped: its destructor has run when
/// `wait` resolves, for a task cancelled by dropping its handle, one that
/// panicked, and those a pool's shutdown dropped.
#[test]
fn a_future_is_tracked_until_its_drop_has_run() {
    watchdog("a_future_is_tracked_until_its_drop_has_run", 60, || {
        let pool = common::quiet_pool(2);
        let tracker = gdex::TaskTracker::new();
        let dropped = Arc::new(AtomicUsize::new(0));
        let pending = |dropped: &Arc<AtomicUsize>| {
            let counted = Counted(dropped.clone());
            async move {
                let _counted = counted;
                std::future::pending::<()>().await;
            }
        };
        // Cancelled by its handle.
        let cancelled = tracker.spawn_on(&pool.scheduler(), pending(&dropped));
        // Panicking (the panic goes to its handle).
        let counted = Counted(dropped.clone());
        let panicked = tracker.spawn_on(&pool.scheduler(), async move {
            let _counted = counted;
            panic!("a tracked task panics");
        });
        // Dropped by the pool's shutdown.
        let doomed = common::quiet_pool(1);
        for _ in 0..5 {
            tracker
                .spawn_on(&doomed.scheduler(), pending(&dropped))
                .detach();
        }
        // The panicking task may have run (and let go) already.
        assert!((6..=7).contains(&tracker.len()), "{tracker:?}");
        tracker.close();
        drop(cancelled);
        assert!(matches!(
            gdex::block_on(panicked),
            Err(gdex::Error::Panicked(_))
        ));
        doomed.shutdown();
        gdex::block_on(tracker.wait());
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            7,
            "every future's drop ran first"
        );
    });
}

/// A moment when the tracker is closed and empty resolves every `wait`
/// made before it, even one that is only polled after the tracker was
/// reopened and tracks a future again (tokio-util's `wait` is resistant to
/// ABA so): polled once before the moment, or never.
#[test]
fn a_wait_made_before_a_closed_and_empty_moment_resolves_after_a_reopen() {
    let waker = std::task::Waker::noop();
    let tracker = gdex::TaskTracker::new();
    let tracked = tracker.track_future(std::future::pending::<()>());
    let mut polled = Box::pin(tracker.wait());
    let mut unpolled = Box::pin(tracker.wait());
    assert!(common::poll_with(&mut polled, waker).is_pending());
    // Closed and empty, for a moment.
    tracker.close();
    drop(tracked);
    assert!(tracker.reopen());
    let again = tracker.track_future(std::future::pending::<()>());
    assert!(common::poll_with(&mut polled, waker).is_ready());
    assert!(common::poll_with(&mut unpolled, waker).is_ready());
    // A wait made after the moment waits for the next one.
    let mut later = Box::pin(tracker.wait());
    assert!(common::poll_with(&mut later, waker).is_pending());
    tracker.close();
    drop(again);
    assert!(common::poll_with(&mut later, waker).is_ready());
}

/// A tracker owns nothing: dropping it (every clone) cancels no task, and
/// a clone's wait sees the same count.
#[test]
fn dropping_the_tracker_cancels_nothing() {
    watchdog("dropping_the_tracker_cancels_nothing", 60, || {
        let pool = common::quiet_pool(1);
        let tracker = gdex::TaskTracker::new();
        let clone = tracker.clone();
        let (gate, opened) = gdex::Promise::<u32>::new();
        let task = tracker.spawn_on(&pool.scheduler(), async move { opened.await.unwrap() + 1 });
        assert_eq!(clone.len(), 1);
        drop(tracker);
        gate.resolve(41);
        assert_eq!(gdex::block_on(task).unwrap(), 42);
        clone.close();
        gdex::block_on(clone.wait());
    });
}

/// Tasks on any scheduler and futures of any kind: a `!Send` task on a
/// context scheduler pumped by hand, a fiber's future, a task on the
/// default pool; a spawn after `close` is waited for too.
#[test]
fn tasks_on_every_scheduler_and_tracked_futures_are_waited_for() {
    watchdog(
        "tasks_on_every_scheduler_and_tracked_futures_are_waited_for",
        60,
        || {
            let tracker = gdex::TaskTracker::new();
            tracker.close();
            let context = glib::MainContext::new();
            let local = gdex::Scheduler::for_context(&context);
            let rc = std::rc::Rc::new(5);
            let on_context = tracker.spawn_local_on(&local, async move { *rc });
            let pool = common::quiet_pool(1);
            let fiber = pool.scheduler().spawn_fiber(|| 6);
            let tracked_fiber = tracker.track_future(fiber);
            let on_default = tracker.spawn(async { 7 });
            // The context's task and the tracked fiber are held here; the
            // default pool's task may be done already.
            assert!((2..=3).contains(&tracker.len()), "{tracker:?}");
            assert_eq!(gdex::block_on(on_default).unwrap(), 7);
            assert_eq!(gdex::block_on(tracked_fiber).unwrap(), 6);
            assert_eq!(tracker.len(), 1, "the context's task is not run yet");
            let wait = tracker.wait();
            assert_eq!(context.block_on(on_context).unwrap(), 5);
            gdex::block_on(wait);
        },
    );
}

/// Spawners on four threads racing waiters: once every spawner is done
/// and the tracker closed, `wait` resolves after the last of their tasks,
/// and never before.
#[test]
fn waits_racing_spawns_from_many_threads_see_every_task() {
    watchdog(
        "waits_racing_spawns_from_many_threads_see_every_task",
        120,
        || {
            let pool = common::quiet_pool(2);
            let rounds = common::stress(20);
            for _ in 0..rounds {
                let tracker = gdex::TaskTracker::new();
                let done = Arc::new(AtomicUsize::new(0));
                let spawners: Vec<_> = (0..4)
                    .map(|_| {
                        let (tracker, done, s) = (tracker.clone(), done.clone(), pool.scheduler());
                        std::thread::spawn(move || {
                            for i in 0..250 {
                                let done = done.clone();
                                tracker
                                    .spawn_on(&s, async move {
                                        if i % 7 == 0 {
                                            gdex::yield_now().await;
                                        }
                                        done.fetch_add(1, Ordering::SeqCst);
                                    })
                                    .detach();
                            }
                        })
                    })
                    .collect();
                let waiters: Vec<_> = (0..2)
                    .map(|_| {
                        let (tracker, done) = (tracker.clone(), done.clone());
                        std::thread::spawn(move || {
                            gdex::block_on(tracker.wait());
                            done.load(Ordering::SeqCst)
                        })
                    })
                    .collect();
                for s in spawners {
                    s.join().unwrap();
                }
                tracker.close();
                for w in waiters {
                    assert_eq!(w.join().unwrap(), 1_000, "a wait resolved before a task");
                }
            }
        },
    );
}
