//! A task group's members in the order they finish (the toolkit's group,
//! tokio's `JoinSet` calls): `TaskGroup::join_next`, the group as a
//! `Stream`, and `abort_all`, on real pools and threads; with libdex's
//! options (`keep_results`, `cancel_on_error`) keeping their meaning.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{watchdog, Counted};
use futures::StreamExt;

type Res = Result<u32, gdex::Error>;

fn keeping(pool: &gdex::ThreadPool) -> gdex::TaskGroup<Res> {
    gdex::TaskGroup::builder()
        .scheduler(pool.scheduler())
        .keep_results(true)
        .build()
}

/// Members released one at a time in an order of the test's choosing come
/// out of `join_next` in that order (not spawn order), then `None`.
#[test]
fn join_next_gives_results_in_the_order_members_finish() {
    watchdog(
        "join_next_gives_results_in_the_order_members_finish",
        60,
        || {
            let pool = common::quiet_pool(2);
            let group = keeping(&pool);
            let mut gates: Vec<Option<gdex::Promise<()>>> = Vec::new();
            for i in 0..5u32 {
                let (gate, opened) = gdex::Promise::new();
                gates.push(Some(gate));
                group
                    .spawn(async move {
                        opened.await.unwrap();
                        Ok(i)
                    })
                    .unwrap();
            }
            let mut order = Vec::new();
            for i in [3usize, 0, 4, 1, 2] {
                gates[i].take().unwrap().resolve(());
                order.push(gdex::block_on(group.join_next()).unwrap().unwrap());
            }
            assert_eq!(order, [3, 0, 4, 1, 2]);
            assert!(gdex::block_on(group.join_next()).is_none());
            // Every result was given: the group holds nothing.
            assert_eq!((group.len(), group.held_entries()), (0, 0));
            // Members spawned after a `None` come out too.
            group.spawn(async { Ok(9) }).unwrap();
            assert_eq!(gdex::block_on(group.join_next()).unwrap().unwrap(), 9);
            assert!(gdex::block_on(group.close()).is_ok());
        },
    );
}

/// The group as a `Stream`: every result once, the stream ending once no
/// member runs; panicked and failed members come out as their errors.
#[test]
fn the_group_as_a_stream_gives_every_result_once() {
    watchdog("the_group_as_a_stream_gives_every_result_once", 60, || {
        let pool = common::quiet_pool(2);
        let mut group = keeping(&pool);
        const N: u32 = 200;
        for i in 0..N {
            group
                .spawn(async move {
                    if i % 50 == 7 {
                        gdex::sleep(Duration::from_millis(1)).await;
                    }
                    match i {
                        13 => panic!("member 13"),
                        14 => Err(gdex::Error::TimedOut),
                        i => Ok(i),
                    }
                })
                .unwrap();
        }
        let results: Vec<Res> = gdex::block_on(async { (&mut group).collect().await });
        assert_eq!(results.len(), N as usize);
        let mut oks: Vec<u32> = results
            .iter()
            .filter_map(|r| r.as_ref().ok().copied())
            .collect();
        oks.sort_unstable();
        let want: Vec<u32> = (0..N).filter(|i| *i != 13 && *i != 14).collect();
        assert_eq!(oks, want);
        assert!(results
            .iter()
            .any(|r| matches!(r, Err(gdex::Error::Panicked(m)) if m.contains("member 13"))));
        assert!(results
            .iter()
            .any(|r| matches!(r, Err(gdex::Error::TimedOut))));
        // The failures were given by the stream: close has none to give.
        assert!(gdex::block_on(group.close()).is_ok());
    });
}

/// Dropping a `join_next` future while it waits loses nothing: the result
/// of the member that finishes next is there for the next call, and the
/// dropped future's waker is let go.
#[test]
fn join_next_is_cancel_safe() {
    watchdog("join_next_is_cancel_safe", 60, || {
        let pool = common::quiet_pool(1);
        let group = keeping(&pool);
        let (gate, opened) = gdex::Promise::<()>::new();
        group
            .spawn(async move {
                opened.await.unwrap();
                Ok(1)
            })
            .unwrap();
        let timed_out = gdex::block_on(gdex::timeout(Duration::from_millis(20), group.join_next()));
        assert!(timed_out.is_err(), "nothing had finished");
        gate.resolve(());
        assert_eq!(gdex::block_on(group.join_next()).unwrap().unwrap(), 1);
        assert!(gdex::block_on(group.join_next()).is_none());
    });
}

/// `abort_all` cancels the running members without closing the group:
/// each comes out as `Cancelled`, which is no failure (close is Ok and
/// cancel_on_error is not set off), and the group takes new members.
#[test]
fn abort_all_cancels_the_running_members_and_leaves_the_group_open() {
    watchdog(
        "abort_all_cancels_the_running_members_and_leaves_the_group_open",
        60,
        || {
            let pool = common::quiet_pool(2);
            let group = gdex::TaskGroup::<Res>::builder()
                .scheduler(pool.scheduler())
                .keep_results(true)
                .cancel_on_error(true)
                .build();
            let dropped = Arc::new(AtomicUsize::new(0));
            for _ in 0..10 {
                let counted = Counted(dropped.clone());
                group
                    .spawn(async move {
                        let _counted = counted;
                        std::future::pending::<()>().await;
                        Ok(0)
                    })
                    .unwrap();
            }
            group.abort_all();
            let mut cancelled = 0;
            while let Some(result) = gdex::block_on(group.join_next()) {
                assert!(matches!(result, Err(gdex::Error::Cancelled)), "{result:?}");
                cancelled += 1;
            }
            assert_eq!(cancelled, 10);
            assert_eq!(
                dropped.load(Ordering::SeqCst),
                10,
                "every future dropped (X1)"
            );
            // Still open, and no failure recorded.
            group.spawn(async { Ok(5) }).unwrap();
            assert_eq!(gdex::block_on(group.join_next()).unwrap().unwrap(), 5);
            assert!(gdex::block_on(group.close()).is_ok());
        },
    );
}

/// With cancel_on_error, the first failure given by join_next still
/// cancels the others (which come out as cancelled), and close does not
/// give that failure a second time.
#[test]
fn a_failure_join_next_gave_cancels_the_others_and_is_not_given_again() {
    watchdog(
        "a_failure_join_next_gave_cancels_the_others_and_is_not_given_again",
        60,
        || {
            let pool = common::quiet_pool(2);
            let group = gdex::TaskGroup::<Res>::builder()
                .scheduler(pool.scheduler())
                .keep_results(true)
                .cancel_on_error(true)
                .build();
            for _ in 0..3 {
                group.spawn(std::future::pending()).unwrap();
            }
            group.spawn(async { Err(gdex::Error::TimedOut) }).unwrap();
            let mut results = Vec::new();
            while let Some(result) = gdex::block_on(group.join_next()) {
                results.push(result);
            }
            assert!(
                matches!(results[0], Err(gdex::Error::TimedOut)),
                "{results:?}"
            );
            assert_eq!(results.len(), 4);
            assert!(results[1..]
                .iter()
                .all(|r| matches!(r, Err(gdex::Error::Cancelled))));
            // Closed by the failure; close has nothing more to report.
            assert!(matches!(
                group.spawn(async { Ok(0) }),
                Err(gdex::Error::Closed)
            ));
            assert!(gdex::block_on(group.close()).is_ok());
        },
    );
}

/// A failure join_next gave is not close's to give again, but one it did
/// not give is: close gives the first failure not yet given (in the order
/// they finished), whether it finished before or after join_next gave the
/// first, and never `Ok` over a failure nobody was given.
#[test]
fn close_gives_the_first_failure_join_next_did_not_give() {
    watchdog(
        "close_gives_the_first_failure_join_next_did_not_give",
        60,
        || {
            let failure =
                |what: &str| gdex::Error::Failed(glib::Error::new(gio::IOErrorEnum::Failed, what));
            let message = |result: Result<(), gdex::Error>| match result {
                Err(gdex::Error::Failed(e)) => e.message().to_owned(),
                other => panic!("not a failure: {other:?}"),
            };
            let pool = common::quiet_pool(1);
            for second_finishes_first in [false, true] {
                let group = keeping(&pool);
                let (gate, opened) = gdex::Promise::<()>::new();
                let first = failure("first");
                group.spawn(async move { Err(first) }).unwrap();
                let second = failure("second");
                group
                    .spawn(async move {
                        opened.await.unwrap();
                        Err(second)
                    })
                    .unwrap();
                group.spawn(async { Ok(7) }).unwrap();
                // "first" (and the success) done, "second" at its gate.
                common::wait_until(|| group.len() == 1);
                let next_failure = || loop {
                    match gdex::block_on(group.join_next()).unwrap() {
                        Ok(7) => continue,
                        given => break message(given.map(drop)),
                    }
                };
                if second_finishes_first {
                    // Both failures in before join_next gives the first.
                    gate.resolve(());
                    common::wait_until(|| group.is_empty());
                    assert_eq!(next_failure(), "first");
                } else {
                    assert_eq!(next_failure(), "first");
                    gate.resolve(());
                }
                assert_eq!(
                    message(gdex::block_on(group.close())),
                    "second",
                    "second_finishes_first: {second_finishes_first}"
                );
            }
        },
    );
}

/// Results that join_next did not take stay for close_with_results (in
/// spawn order); those it took are not given twice.
#[test]
fn close_with_results_gives_what_join_next_left() {
    watchdog("close_with_results_gives_what_join_next_left", 60, || {
        let pool = common::quiet_pool(1);
        let group = keeping(&pool);
        let (gate, opened) = gdex::Promise::<()>::new();
        for i in 0..4u32 {
            let opened = opened.clone();
            group
                .spawn(async move {
                    if i != 2 {
                        opened.await.unwrap();
                    }
                    Ok(i)
                })
                .unwrap();
        }
        drop(opened);
        assert_eq!(gdex::block_on(group.join_next()).unwrap().unwrap(), 2);
        gate.resolve(());
        let rest: Vec<u32> = gdex::block_on(group.close_with_results())
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(rest, [0, 1, 3]);
        assert!(gdex::block_on(group.join_next()).is_none());
    });
}

/// Many threads joining one group at once: every result is given exactly
/// once, whoever takes it.
#[test]
fn concurrent_joiners_take_each_result_once() {
    watchdog("concurrent_joiners_take_each_result_once", 60, || {
        let pool = common::quiet_pool(2);
        let group = Arc::new(keeping(&pool));
        const N: u32 = 2_000;
        let taken: Vec<_> = (0..3)
            .map(|_| {
                let group = group.clone();
                std::thread::spawn(move || {
                    let mut mine = Vec::new();
                    while let Some(r) = gdex::block_on(group.join_next()) {
                        mine.push(r.unwrap());
                    }
                    mine
                })
            })
            .collect();
        for i in 0..N {
            group.spawn(async move { Ok(i) }).unwrap();
        }
        // A joiner may see the group empty before the spawns: join the rest
        // here.
        let mut all: Vec<u32> = taken.into_iter().flat_map(|t| t.join().unwrap()).collect();
        while let Some(r) = gdex::block_on(group.join_next()) {
            all.push(r.unwrap());
        }
        all.sort_unstable();
        assert_eq!(all, (0..N).collect::<Vec<_>>());
    });
}

/// join_next and the group's stream on a group that drops its results
/// panic, saying to build it with keep_results.
#[test]
#[should_panic(expected = "gdex::TaskGroup::join_next() on a group that does not keep results")]
fn join_next_on_a_group_that_drops_results_panics_and_says_why() {
    let group = gdex::TaskGroup::<Res>::new();
    drop(group.join_next());
}

#[test]
#[should_panic(expected = "keep_results(true)")]
fn the_stream_of_a_group_that_drops_results_panics_and_says_why() {
    let mut group = gdex::TaskGroup::<Res>::new();
    let _ = gdex::block_on(group.next());
}

/// The group dropped while its stream waits: the members are cancelled
/// and nothing is left registered (the joiner is let go).
#[test]
fn a_group_dropped_while_its_stream_waits_lets_go() {
    watchdog("a_group_dropped_while_its_stream_waits_lets_go", 60, || {
        let pool = common::quiet_pool(1);
        let mut group = keeping(&pool);
        let dropped = Arc::new(AtomicUsize::new(0));
        let counted = Counted(dropped.clone());
        group
            .spawn(async move {
                let _counted = counted;
                std::future::pending::<()>().await;
                Ok(0)
            })
            .unwrap();
        let waited = gdex::block_on(gdex::timeout(Duration::from_millis(10), group.next()));
        assert!(waited.is_err());
        drop(group);
        common::wait_until(|| dropped.load(Ordering::SeqCst) == 1);
    });
}
