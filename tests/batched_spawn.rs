//! `Scheduler::spawn_many` (smol's `Executor::spawn_many`) and its fiber
//! counterpart `Scheduler::spawn_fibers` (F1, F2): every future or closure
//! becomes a task or fiber whose handle comes back in order, on a pool from
//! outside and from a worker, through a shutdown, a panicking iterator or
//! `Extend`, and on the schedulers where they are spawned one by one.

use crate::common;

use std::cell::RefCell;
use std::rc::Rc;
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

/// A pool that has shut down: each task's and fiber's handle resolves to
/// `ShutDown`, nothing runs, and each future and closure is dropped once.
#[test]
fn on_a_shut_down_pool_each_handle_says_shut_down() {
    watchdog("on_a_shut_down_pool_each_handle_says_shut_down", 60, || {
        let pool = common::quiet_pool(1);
        pool.shutdown();
        let s = pool.scheduler();
        let dropped = Arc::new(AtomicUsize::new(0));
        let counted = || common::Counted(dropped.clone());
        let (mut tasks, mut fibers) = (Vec::new(), Vec::new());
        s.spawn_many(
            (0..10).map(|_| {
                let counted = counted();
                async move {
                    let _counted = counted;
                    unreachable!("a shut-down pool runs nothing")
                }
            }),
            &mut tasks,
        );
        s.spawn_fibers(
            (0..10).map(|_| {
                let counted = counted();
                move || {
                    let _counted = counted;
                    unreachable!("a shut-down pool runs nothing")
                }
            }),
            &mut fibers,
        );
        for task in tasks {
            assert!(matches!(gdex::block_on(task), Err(gdex::Error::ShutDown)));
        }
        for fiber in fibers {
            assert!(matches!(gdex::block_on(fiber), Err(gdex::Error::ShutDown)));
        }
        assert_eq!(dropped.load(Ordering::SeqCst), 20);
    });
}

/// Batches of tasks and of fibers racing a shutdown from four threads:
/// every handle resolves once, to its value, `ShutDown` (made after the
/// close) or `Cancelled` (made before it and dropped unrun by the
/// shutdown, also from the inbox of a worker that had exited), as single
/// spawns' do, and every future and closure is dropped once.
#[test]
fn batches_racing_a_shutdown_resolve_every_handle() {
    watchdog(
        "batches_racing_a_shutdown_resolve_every_handle",
        120,
        || {
            fn check<T: PartialEq<usize> + std::fmt::Debug>(
                i: usize,
                result: Result<T, gdex::Error>,
            ) {
                match result {
                    Ok(v) => assert_eq!(v, i),
                    Err(gdex::Error::ShutDown | gdex::Error::Cancelled) => {}
                    other => panic!("{other:?}"),
                }
            }
            for round in 0..common::stress(20) {
                let pool = common::quiet_pool(2);
                let dropped = Arc::new(AtomicUsize::new(0));
                let spawners: Vec<_> = (0..4)
                    .map(|_| {
                        let (s, dropped) = (pool.scheduler(), dropped.clone());
                        let counted = move || common::Counted(dropped.clone());
                        std::thread::spawn(move || {
                            let (mut tasks, mut fibers) = (Vec::new(), Vec::new());
                            s.spawn_many(
                                (0..250usize).map(|i| {
                                    let counted = counted();
                                    async move {
                                        let _counted = counted;
                                        i
                                    }
                                }),
                                &mut tasks,
                            );
                            s.spawn_fibers(
                                (0..250usize).map(|i| {
                                    let counted = counted();
                                    move || {
                                        let _counted = counted;
                                        i
                                    }
                                }),
                                &mut fibers,
                            );
                            (tasks, fibers)
                        })
                    })
                    .collect();
                if round % 2 == 1 {
                    std::thread::yield_now();
                }
                pool.shutdown();
                for spawner in spawners {
                    let (tasks, fibers) = spawner.join().unwrap();
                    for (i, task) in tasks.into_iter().enumerate() {
                        check(i, gdex::block_on(task));
                    }
                    for (i, fiber) in fibers.into_iter().enumerate() {
                        check(i, gdex::block_on(fiber));
                    }
                }
                common::wait_until(|| dropped.load(Ordering::SeqCst) == 2_000);
            }
        },
    );
}

/// The iterator panics half-way: the tasks or fibers made before it are
/// queued and run (their handles are the caller's), and the panic goes on.
#[test]
fn a_panicking_iterator_leaves_what_it_made_running() {
    watchdog(
        "a_panicking_iterator_leaves_what_it_made_running",
        60,
        || {
            let gives_up = |i: u32| assert!(i != 5, "the iterator gives up at 5");
            let caught = |spawn: &mut dyn FnMut()| {
                let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(spawn));
                let message = common::panic_message(caught.unwrap_err());
                assert!(message.contains("gives up at 5"), "{message}");
            };
            let pool = common::quiet_pool(2);
            let s = pool.scheduler();
            let (mut tasks, mut fibers) = (Vec::new(), Vec::new());
            caught(&mut || {
                s.spawn_many(
                    (0..10u32).map(|i| {
                        gives_up(i);
                        async move { i }
                    }),
                    &mut tasks,
                )
            });
            caught(&mut || {
                s.spawn_fibers(
                    (0..10u32).map(|i| {
                        gives_up(i);
                        move || i
                    }),
                    &mut fibers,
                )
            });
            let tasks: Vec<u32> = tasks
                .into_iter()
                .map(|t| gdex::block_on(t).unwrap())
                .collect();
            let fibers: Vec<u32> = fibers
                .into_iter()
                .map(|f| gdex::block_on(f).unwrap())
                .collect();
            assert_eq!(tasks, [0, 1, 2, 3, 4]);
            assert_eq!(fibers, [0, 1, 2, 3, 4]);
        },
    );
}

/// An `Extend` with room for two handles: it panics at the third.
struct Picky<H>(Vec<H>);

impl<H> Extend<H> for Picky<H> {
    fn extend<I: IntoIterator<Item = H>>(&mut self, items: I) {
        for handle in items {
            assert!(self.0.len() < 2, "no room for a third");
            self.0.push(handle);
        }
    }
}

/// `handles`' `Extend` panics at the third: the two before run; the third
/// task or fiber, whose handle the panic dropped, is cancelled (F4), and
/// its future or closure dropped, as are those of the two that ran.
#[test]
fn a_panicking_extend_leaves_the_earlier_ones_running() {
    watchdog(
        "a_panicking_extend_leaves_the_earlier_ones_running",
        60,
        || {
            let pool = common::quiet_pool(1);
            let s = pool.scheduler();
            let dropped = Arc::new(AtomicUsize::new(0));
            let counted = || common::Counted(dropped.clone());
            let (mut tasks, mut fibers) = (Picky(Vec::new()), Picky(Vec::new()));
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                s.spawn_many(
                    (0..5u32).map(|i| {
                        let counted = counted();
                        async move {
                            let _counted = counted;
                            i
                        }
                    }),
                    &mut tasks,
                );
            }));
            assert!(caught.is_err());
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                s.spawn_fibers(
                    (0..5u32).map(|i| {
                        let counted = counted();
                        move || {
                            let _counted = counted;
                            i
                        }
                    }),
                    &mut fibers,
                );
            }));
            assert!(caught.is_err());
            let tasks: Vec<u32> = tasks
                .0
                .into_iter()
                .map(|t| gdex::block_on(t).unwrap())
                .collect();
            let fibers: Vec<u32> = fibers
                .0
                .into_iter()
                .map(|f| gdex::block_on(f).unwrap())
                .collect();
            assert_eq!(tasks, [0, 1]);
            assert_eq!(fibers, [0, 1]);
            common::wait_until(|| dropped.load(Ordering::SeqCst) == 6);
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

// ---------------------------------------------------------------------------
// Fibers: `Scheduler::spawn_fibers`
// ---------------------------------------------------------------------------

/// The thread a fiber ran on, as a number.
fn thread_number() -> u64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u64 }
}

/// From outside the pool (a pool asleep, then one busy with a batch) and
/// from one of its workers: each closure runs once as a fiber (it can
/// wait), the handles are in the iterator's order, and the fibers are
/// placed round-robin (F2), the pool's next single spawn going on where
/// the batch stopped.
#[test]
fn every_fiber_runs_once_round_robin_and_the_handles_keep_their_order() {
    watchdog(
        "every_fiber_runs_once_round_robin_and_the_handles_keep_their_order",
        60,
        || {
            let pool = common::quiet_pool(2);
            let s = pool.scheduler();
            // Both workers asleep: the batch's queueing wakes them.
            common::wait_until(|| pool.metrics().workers.iter().all(|w| w.parks > 0));
            let mut fibers = Vec::new();
            s.spawn_fibers((0..3u64).map(|i| move || (i, thread_number())), &mut fibers);
            let got: Vec<_> = fibers
                .into_iter()
                .map(|f| gdex::block_on(f).unwrap())
                .collect();
            assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), [0, 1, 2]);
            assert_ne!(got[0].1, got[1].1, "round-robin: {got:?}");
            assert_eq!(got[0].1, got[2].1, "round-robin: {got:?}");
            let next = gdex::block_on(s.spawn_fiber(thread_number)).unwrap();
            assert_eq!(
                next, got[1].1,
                "the next single spawn goes on after the batch"
            );

            let runs = Arc::new(AtomicUsize::new(0));
            let n = common::stress(10_000) as u64;
            let mut fibers = Vec::new();
            let helper = s.clone();
            s.spawn_fibers(
                (0..n).map(|i| {
                    let (runs, helper) = (runs.clone(), helper.clone());
                    move || {
                        runs.fetch_add(1, Ordering::SeqCst);
                        // A real fiber: it waits for a task.
                        let doubled = gdex::fiber::wait(helper.spawn(async move { 2 * i }));
                        (doubled.unwrap(), thread_number())
                    }
                }),
                &mut fibers,
            );
            assert_eq!(fibers.len() as u64, n);
            let got: Vec<_> = fibers
                .into_iter()
                .map(|f| gdex::block_on(f).unwrap())
                .collect();
            for (i, (doubled, _)) in got.iter().enumerate() {
                assert_eq!(*doubled, 2 * i as u64);
            }
            for pair in got.windows(2) {
                assert_ne!(pair[0].1, pair[1].1, "fibers placed round-robin");
            }
            assert_eq!(runs.load(Ordering::SeqCst) as u64, n);

            // From a worker: its own fibers on its pinned queue, the
            // other's in that worker's inbox.
            let inner = s.clone();
            let sum = gdex::block_on(s.spawn(async move {
                let mut fibers = Vec::new();
                inner.spawn_fibers((0..1_000u64).map(|i| move || i), &mut fibers);
                let mut sum = 0;
                for fiber in fibers {
                    sum += fiber.await.unwrap();
                }
                sum
            }))
            .unwrap();
            assert_eq!(sum, 499_500);
        },
    );
}

/// Nothing of a batch is queued before its iterator is done (the
/// documented price of one wake-up per worker): with both workers idle,
/// no fiber of a 200-fiber batch has run by the time the iterator makes
/// its last one, 50 ms after its first, and all of them run once it is
/// done.
#[test]
fn no_fiber_of_a_batch_starts_before_its_iterator_is_done() {
    watchdog(
        "no_fiber_of_a_batch_starts_before_its_iterator_is_done",
        60,
        || {
            let pool = common::quiet_pool(2);
            let s = pool.scheduler();
            let ran = Arc::new(AtomicUsize::new(0));
            let mut fibers = Vec::new();
            let (r, n) = (ran.clone(), 200u32);
            s.spawn_fibers(
                (0..n).map(|i| {
                    if i == n - 1 {
                        // Time for a worker to run what it was given.
                        std::thread::sleep(std::time::Duration::from_millis(50));
                        assert_eq!(r.load(Ordering::SeqCst), 0, "a fiber ran mid-batch");
                    }
                    let r = r.clone();
                    move || r.fetch_add(1, Ordering::SeqCst)
                }),
                &mut fibers,
            );
            for fiber in fibers {
                gdex::block_on(fiber).unwrap();
            }
            assert_eq!(ran.load(Ordering::SeqCst), n as usize);
        },
    );
}

/// `Extend` into a vector the iterator can reach.
struct Shared<H>(Rc<RefCell<Vec<H>>>);

impl<H> Extend<H> for Shared<H> {
    fn extend<I: IntoIterator<Item = H>>(&mut self, items: I) {
        self.0.borrow_mut().extend(items);
    }
}

/// Whether `handle` resolves to `Err(error)` on its first poll.
fn resolved_to<T>(
    handle: impl std::future::Future<Output = Result<T, gdex::Error>>,
    error: fn(&gdex::Error) -> bool,
) -> bool {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::pin!(handle).poll(&mut cx) {
        std::task::Poll::Ready(Err(e)) => error(&e),
        _ => false,
    }
}

/// S9 in a batch: the pool shuts down while the iterator runs (after the
/// call's own check). The fibers or tasks made before it are resolved
/// (`Cancelled`, never run) by the time the iterator gives its next item,
/// not when it ends: the shutdown could not reach them. Each one made
/// after it resolves to `ShutDown` at once, as a single spawn does.
#[test]
fn a_batch_made_across_a_shutdown_resolves_every_handle_at_once() {
    watchdog(
        "a_batch_made_across_a_shutdown_resolves_every_handle_at_once",
        60,
        || {
            let cancelled: fn(&gdex::Error) -> bool = |e| matches!(e, gdex::Error::Cancelled);
            let shut_down: fn(&gdex::Error) -> bool = |e| matches!(e, gdex::Error::ShutDown);
            let pool = common::quiet_pool(2);
            let ran = Arc::new(AtomicUsize::new(0));
            let got = Rc::new(RefCell::new(Vec::new()));
            let mut handles = Shared(got.clone());
            pool.scheduler().spawn_fibers(
                (0..6u32).map(|i| {
                    if i == 3 {
                        pool.shutdown();
                    }
                    if i == 4 {
                        let early: Vec<_> = got.borrow_mut().drain(..3).collect();
                        assert!(
                            early.into_iter().all(|f| resolved_to(f, cancelled)),
                            "a fiber made before the shutdown, unresolved"
                        );
                    }
                    let ran = ran.clone();
                    move || {
                        ran.fetch_add(1, Ordering::SeqCst);
                        i
                    }
                }),
                &mut handles,
            );
            let late: Vec<_> = got.borrow_mut().drain(..).collect();
            assert_eq!(late.len(), 3);
            assert!(
                late.into_iter().all(|f| resolved_to(f, shut_down)),
                "a fiber made after the shutdown"
            );
            assert_eq!(ran.load(Ordering::SeqCst), 0);

            let pool = common::quiet_pool(2);
            let got = Rc::new(RefCell::new(Vec::new()));
            let mut handles = Shared(got.clone());
            pool.scheduler().spawn_many(
                (0..6u32).map(|i| {
                    if i == 3 {
                        pool.shutdown();
                    }
                    if i == 4 {
                        let early: Vec<_> = got.borrow_mut().drain(..3).collect();
                        assert!(
                            early.into_iter().all(|t| resolved_to(t, cancelled)),
                            "a task made before the shutdown, unresolved"
                        );
                    }
                    async move { i }
                }),
                &mut handles,
            );
            let late: Vec<_> = got.borrow_mut().drain(..).collect();
            assert!(
                late.into_iter().all(|t| resolved_to(t, shut_down)),
                "a task made after the shutdown"
            );
        },
    );
}

/// F4 in a batch: `Extend` drops every handle as it gets it, before the
/// batch is queued; each fiber, once queued, runs once and its wait
/// reports `Cancelled` (it is never run twice, nor lost).
#[test]
fn fibers_whose_handles_extend_drops_are_cancelled_once() {
    struct Drops;
    impl Extend<gdex::Fiber<()>> for Drops {
        fn extend<I: IntoIterator<Item = gdex::Fiber<()>>>(&mut self, items: I) {
            items.into_iter().for_each(drop);
        }
    }
    watchdog(
        "fibers_whose_handles_extend_drops_are_cancelled_once",
        60,
        || {
            let pool = common::quiet_pool(2);
            let (started, told) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
            let n = 100;
            pool.scheduler().spawn_fibers(
                (0..n).map(|_| {
                    let (started, told) = (started.clone(), told.clone());
                    move || {
                        started.fetch_add(1, Ordering::SeqCst);
                        if let Err(gdex::Error::Cancelled) =
                            gdex::fiber::wait(futures::future::pending::<Result<(), gdex::Error>>())
                        {
                            told.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }),
                &mut Drops,
            );
            common::wait_until(|| told.load(Ordering::SeqCst) == n);
            // Nothing runs twice, late.
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert_eq!(started.load(Ordering::SeqCst), n);
            assert_eq!(told.load(Ordering::SeqCst), n);
        },
    );
}

/// A batch made inside a fiber on a worker: its own worker's fibers go on
/// that worker's pinned queue, the other's in its inbox, and the fiber
/// waits for each of them.
#[test]
fn a_fiber_spawns_a_batch_and_waits_for_it() {
    watchdog("a_fiber_spawns_a_batch_and_waits_for_it", 60, || {
        let pool = common::quiet_pool(2);
        let s = pool.scheduler();
        let inner = s.clone();
        let (sum, threads) = gdex::block_on(s.spawn_fiber(move || {
            let mut fibers = Vec::new();
            inner.spawn_fibers(
                (0..100u64).map(|i| move || (i, thread_number())),
                &mut fibers,
            );
            let mut sum = 0;
            let mut threads = std::collections::HashSet::new();
            for fiber in fibers {
                let (i, thread) = gdex::fiber::wait(fiber).unwrap();
                sum += i;
                threads.insert(thread);
            }
            (sum, threads)
        }))
        .unwrap();
        assert_eq!(sum, 4_950);
        assert_eq!(threads.len(), 2, "both workers ran the batch's fibers");
    });
}

/// A batch that makes nothing takes no turn of the round-robin: the
/// single spawns around it alternate as if it were not there.
#[test]
fn an_empty_batch_leaves_the_round_robin_alone() {
    watchdog("an_empty_batch_leaves_the_round_robin_alone", 60, || {
        let pool = common::quiet_pool(2);
        let s = pool.scheduler();
        let a = gdex::block_on(s.spawn_fiber(thread_number)).unwrap();
        let mut fibers = Vec::new();
        s.spawn_fibers(std::iter::empty::<fn() -> u64>(), &mut fibers);
        assert!(fibers.is_empty());
        let b = gdex::block_on(s.spawn_fiber(thread_number)).unwrap();
        assert_ne!(a, b, "the empty batch took a turn");
    });
}

/// Where fibers are spawned one by one: a context scheduler pumped by
/// hand, with a builder's stack size. On a pool's latency class it panics
/// as `spawn_fiber` does, before it takes anything from the iterator, and
/// for an empty one too.
#[test]
fn fibers_elsewhere_are_spawned_in_turn() {
    watchdog("fibers_elsewhere_are_spawned_in_turn", 60, || {
        let context = glib::MainContext::new();
        let local = gdex::Scheduler::for_context(&context);
        let mut fibers = Vec::new();
        gdex::fiber::Builder::new()
            .stack_size(64 * 1024)
            .spawn_many(&local, (0..5u32).map(|i| move || i), &mut fibers);
        let got: Vec<u32> = fibers
            .into_iter()
            .map(|f| context.block_on(f).unwrap())
            .collect();
        assert_eq!(got, [0, 1, 2, 3, 4]);
        let pool = common::quiet_pool(2);
        let taken = AtomicUsize::new(0);
        for n in [2u32, 0] {
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut fibers = Vec::new();
                pool.scheduler()
                    .with_priority(glib::Priority::HIGH)
                    .spawn_fibers(
                        (0..n).map(|i| {
                            taken.fetch_add(1, Ordering::SeqCst);
                            move || i
                        }),
                        &mut fibers,
                    );
            }));
            let message = common::panic_message(caught.unwrap_err());
            assert!(message.contains("latency class"), "{message}");
        }
        assert_eq!(
            taken.load(Ordering::SeqCst),
            0,
            "items taken before the panic"
        );
    });
}
