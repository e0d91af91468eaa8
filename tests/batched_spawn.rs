//! `Scheduler::spawn_many` (smol's `Executor::spawn_many`): every future
//! becomes a task whose handle comes back in order, on a pool from outside
//! and from a worker, through a shutdown, a panicking iterator or
//! `Extend`, and on the schedulers where it spawns one by one.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::watchdog;

/// From outside the pool and from one of its workers: each future runs
/// once, and the handles are in the iterator's order.
#[test]
fn every_future_runs_once_and_the_handles_keep_their_order() {
    watchdog(
        "every_future_runs_once_and_the_handles_keep_their_order",
        60,
        || {
            let pool = common::quiet_pool(2);
            let s = pool.scheduler();
            let runs = Arc::new(AtomicUsize::new(0));
            let n = common::stress(10_000) as u64;
            let mut tasks = Vec::new();
            s.spawn_many(
                (0..n).map(|i| {
                    let runs = runs.clone();
                    async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        i
                    }
                }),
                &mut tasks,
            );
            assert_eq!(tasks.len() as u64, n);
            for (i, task) in tasks.into_iter().enumerate() {
                assert_eq!(gdex::block_on(task).unwrap(), i as u64);
            }
            assert_eq!(runs.load(Ordering::SeqCst) as u64, n);
            // From a worker: on its deque, stolen by the other.
            let inner = s.clone();
            let sum = gdex::block_on(s.spawn(async move {
                let mut tasks = Vec::new();
                inner.spawn_many((0..1_000u64).map(|i| async move { i }), &mut tasks);
                let mut sum = 0;
                for task in tasks {
                    sum += task.await.unwrap();
                }
                sum
            }))
            .unwrap();
            assert_eq!(sum, 499_500);
        },
    );
}

/// A pool that has shut down: each handle resolves to `ShutDown` and no
/// future runs (its drop runs once).
#[test]
fn on_a_shut_down_pool_each_handle_says_shut_down() {
    watchdog("on_a_shut_down_pool_each_handle_says_shut_down", 60, || {
        let pool = common::quiet_pool(1);
        pool.shutdown();
        let dropped = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        pool.scheduler().spawn_many(
            (0..10).map(|_| {
                let counted = common::Counted(dropped.clone());
                async move {
                    let _counted = counted;
                    unreachable!("a shut-down pool runs nothing")
                }
            }),
            &mut tasks,
        );
        for task in tasks {
            assert!(matches!(gdex::block_on(task), Err(gdex::Error::ShutDown)));
        }
        assert_eq!(dropped.load(Ordering::SeqCst), 10);
    });
}

/// Batches racing a shutdown from four threads: every handle resolves
/// once, to its value, `ShutDown` (the pool closed before the batch) or
/// `Cancelled` (dropped unrun by the shutdown), as single spawns' do, and
/// every future is dropped once.
#[test]
fn batches_racing_a_shutdown_resolve_every_handle() {
    watchdog(
        "batches_racing_a_shutdown_resolve_every_handle",
        120,
        || {
            for _ in 0..common::stress(20) {
                let pool = common::quiet_pool(2);
                let dropped = Arc::new(AtomicUsize::new(0));
                let spawners: Vec<_> = (0..4)
                    .map(|_| {
                        let (s, dropped) = (pool.scheduler(), dropped.clone());
                        std::thread::spawn(move || {
                            let mut tasks = Vec::new();
                            s.spawn_many(
                                (0..250u32).map(|i| {
                                    let counted = common::Counted(dropped.clone());
                                    async move {
                                        let _counted = counted;
                                        i
                                    }
                                }),
                                &mut tasks,
                            );
                            tasks
                        })
                    })
                    .collect();
                pool.shutdown();
                for spawner in spawners {
                    for (i, task) in spawner.join().unwrap().into_iter().enumerate() {
                        match gdex::block_on(task) {
                            Ok(v) => assert_eq!(v as usize, i),
                            // Made after the close, or made before it and
                            // dropped unrun by the shutdown: as single spawns.
                            Err(gdex::Error::ShutDown | gdex::Error::Cancelled) => {}
                            other => panic!("{other:?}"),
                        }
                    }
                }
                assert_eq!(dropped.load(Ordering::SeqCst), 1_000);
            }
        },
    );
}

/// The iterator panics half-way: the tasks made before it are queued and
/// run (their handles are the caller's), and the panic goes on.
#[test]
fn a_panicking_iterator_leaves_the_tasks_made_before_it_running() {
    watchdog(
        "a_panicking_iterator_leaves_the_tasks_made_before_it_running",
        60,
        || {
            let pool = common::quiet_pool(1);
            let mut tasks = Vec::new();
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                pool.scheduler().spawn_many(
                    (0..10u32).map(|i| {
                        assert!(i != 5, "the iterator gives up at 5");
                        async move { i }
                    }),
                    &mut tasks,
                );
            }));
            let message = common::panic_message(caught.unwrap_err());
            assert!(message.contains("gives up at 5"), "{message}");
            let got: Vec<u32> = tasks
                .into_iter()
                .map(|t| gdex::block_on(t).unwrap())
                .collect();
            assert_eq!(got, [0, 1, 2, 3, 4]);
        },
    );
}

/// `handles`' `Extend` panics at the third: the two before run; the third,
/// whose handle the panic dropped, is cancelled, and its future dropped.
#[test]
fn a_panicking_extend_leaves_the_earlier_tasks_running() {
    struct Picky(Vec<gdex::Task<u32>>);
    impl Extend<gdex::Task<u32>> for Picky {
        fn extend<I: IntoIterator<Item = gdex::Task<u32>>>(&mut self, items: I) {
            for task in items {
                assert!(self.0.len() < 2, "no room for a third");
                self.0.push(task);
            }
        }
    }
    watchdog(
        "a_panicking_extend_leaves_the_earlier_tasks_running",
        60,
        || {
            let pool = common::quiet_pool(1);
            let dropped = Arc::new(AtomicUsize::new(0));
            let mut picky = Picky(Vec::new());
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                pool.scheduler().spawn_many(
                    (0..5u32).map(|i| {
                        let counted = common::Counted(dropped.clone());
                        async move {
                            let _counted = counted;
                            i
                        }
                    }),
                    &mut picky,
                );
            }));
            assert!(caught.is_err());
            let got: Vec<u32> = picky
                .0
                .into_iter()
                .map(|t| gdex::block_on(t).unwrap())
                .collect();
            assert_eq!(got, [0, 1]);
            common::wait_until(|| dropped.load(Ordering::SeqCst) == 3);
        },
    );
}

/// Where it spawns one by one: a context scheduler pumped by hand, a
/// pool's latency class, a thread-per-core pool.
#[test]
fn other_schedulers_spawn_each_future_in_turn() {
    watchdog("other_schedulers_spawn_each_future_in_turn", 60, || {
        let context = glib::MainContext::new();
        let local = gdex::Scheduler::for_context(&context);
        let mut tasks = Vec::new();
        local.spawn_many((0..5u32).map(|i| async move { i }), &mut tasks);
        let got: Vec<u32> = tasks
            .into_iter()
            .map(|t| context.block_on(t).unwrap())
            .collect();
        assert_eq!(got, [0, 1, 2, 3, 4]);
        let pool = common::quiet_pool(2);
        let tpc = gdex::ThreadPool::builder()
            .workers(2)
            .thread_per_core(true)
            .build()
            .unwrap();
        for s in [
            pool.scheduler().with_priority(glib::Priority::HIGH),
            tpc.scheduler(),
        ] {
            let mut tasks = Vec::new();
            s.spawn_many((0..100u32).map(|i| async move { i }), &mut tasks);
            let sum: u32 = tasks.into_iter().map(|t| gdex::block_on(t).unwrap()).sum();
            assert_eq!(sum, 4_950, "{s:?}");
        }
    });
}
