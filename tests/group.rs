//! `TaskGroup` (the toolkit's task group, DESIGN "Future toolkit"): memory
//! that follows the live members, and libdex's group options,
//! cancel-on-error and the current (thread-default) group, on real pools
//! and threads. Only a member is in its group: a task that a nested loop
//! polls inside a member's poll is not.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{stress, wait_until, watchdog, Counted};

type Res = Result<(), gdex::Error>;

fn pool(workers: usize) -> gdex::ThreadPool {
    gdex::ThreadPool::builder()
        .workers(workers)
        .build()
        .unwrap()
}

/// Waits (up to a generous bound, a failure detector, not a timing
/// assertion) until the group holds nothing, and says what it held.
fn assert_group_lets_go<T: gdex::GroupOutput>(group: &gdex::TaskGroup<T>, after: &str) {
    let start = Instant::now();
    while group.held_entries() != 0 && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        (group.len(), group.held_entries()),
        (0, 0),
        "the group still holds members {after}"
    );
}

/// Memory follows the live members: a finished member leaves its group at
/// once, so a group that runs many short members holds only those still
/// running; close() still waits for every member and reports the first
/// failure.
#[test]
fn a_group_holds_only_its_live_members_not_every_finished_one() {
    watchdog("a_group_holds_only_its_live_members", 120, || {
        let p = pool(2);
        let group = gdex::TaskGroup::<()>::on(p.scheduler());
        let finished = Arc::new(AtomicUsize::new(0));
        let batch = 1_000;
        let batches = stress(50).max(2);
        for b in 0..batches {
            for _ in 0..batch {
                let finished = finished.clone();
                group
                    .spawn(async move {
                        finished.fetch_add(1, Ordering::SeqCst);
                    })
                    .unwrap();
            }
            // Never more than one batch in flight: what the group holds is
            // bounded by that, whatever the total.
            assert!(group.held_entries() <= batch);
            wait_until(|| finished.load(Ordering::SeqCst) == (b + 1) * batch);
            assert_group_lets_go(&group, &format!("after {} finished", (b + 1) * batch));
        }
        // close() still behaves as documented: it waits for a slow member,
        // and gives the first failure.
        let slow_done = Arc::new(AtomicUsize::new(0));
        let slow = slow_done.clone();
        group
            .spawn(async move {
                // Deliberate: a slow member; close() waits for it however
                // slow it is.
                gdex::sleep(Duration::from_millis(20)).await;
                slow.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
        group.spawn(async { panic!("one member failed") }).unwrap();
        match gdex::block_on(group.close()) {
            Err(gdex::Error::Panicked(m)) => assert_eq!(m, "one member failed"),
            other => panic!("close gave {other:?}"),
        }
        assert_eq!(slow_done.load(Ordering::SeqCst), 1, "close did not wait");
        assert_eq!(group.held_entries(), 0);
        assert!(matches!(group.spawn(async {}), Err(gdex::Error::Closed)));
        // A later close does not give the outcome again.
        assert!(matches!(
            gdex::block_on(group.close()),
            Err(gdex::Error::Closed)
        ));
    });
}

/// Keeping results is opt-in: such a group holds one result per member
/// until `close_with_results`, which gives them in spawn order; a group
/// that does not keep them refuses `close_with_results` with a clear panic.
#[test]
fn a_group_that_keeps_results_gives_every_one_in_spawn_order() {
    watchdog("a_group_that_keeps_results", 60, || {
        let p = pool(2);
        let group = gdex::TaskGroup::builder()
            .scheduler(p.scheduler())
            .keep_results(true)
            .build();
        let n = stress(2_000);
        for i in 0..n {
            group
                .spawn(async move {
                    if i % 500 == 3 {
                        return Err(gdex::Error::TimedOut);
                    }
                    Ok(i)
                })
                .unwrap();
        }
        let results = gdex::block_on(group.close_with_results());
        assert_eq!(results.len(), n);
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Ok(v) => assert_eq!(v, i),
                Err(gdex::Error::TimedOut) => assert_eq!(i % 500, 3),
                other => panic!("member {i}: {other:?}"),
            }
        }
        assert_eq!(group.held_entries(), 0);

        let plain = gdex::TaskGroup::<()>::on(p.scheduler());
        let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            drop(plain.close_with_results());
        }));
        let message = refused.expect_err("close_with_results on a plain group");
        let message = message
            .downcast_ref::<&str>()
            .copied()
            .map(str::to_owned)
            .or_else(|| message.downcast_ref::<String>().cloned())
            .unwrap();
        assert!(message.contains("keep_results(true)"), "{message}");
    });
}

/// A group of `n` members that never finish and count their drops.
fn pending_members(group: &gdex::TaskGroup<Res>, n: usize) -> Arc<AtomicUsize> {
    let drops = Arc::new(AtomicUsize::new(0));
    for _ in 0..n {
        let guard = Counted(drops.clone());
        group
            .spawn(async move {
                let _guard = guard;
                std::future::pending::<Res>().await
            })
            .unwrap();
    }
    drops
}

/// Cancel-on-error (libdex 1.2 `task-group/cancel-on-error`): with
/// cancel_on_error, the first member to fail cancels the others and closes
/// the group; close() gives that failure once every member has stopped.
#[test]
fn the_first_failing_member_cancels_the_others_with_cancel_on_error() {
    watchdog("the_first_failing_member_cancels_the_others", 30, || {
        let p = pool(2);
        // An `Err` output is a failure...
        let group = gdex::TaskGroup::builder()
            .scheduler(p.scheduler())
            .cancel_on_error(true)
            .build();
        let drops = pending_members(&group, 8);
        group
            .spawn(async {
                // Deliberate: fails a little later; the others never finish,
                // so the outcome is the same whenever it fails.
                gdex::sleep(Duration::from_millis(5)).await;
                Err(gdex::Error::TimedOut)
            })
            .unwrap();
        match gdex::block_on(group.close()) {
            Err(gdex::Error::TimedOut) => {}
            other => panic!("close gave {other:?}"),
        }
        assert_eq!(
            drops.load(Ordering::SeqCst),
            8,
            "close resolved before the other members were dropped"
        );

        // ...and so is a panic; the group refuses new members at once.
        let group = gdex::TaskGroup::builder()
            .scheduler(p.scheduler())
            .cancel_on_error(true)
            .build();
        let drops = pending_members(&group, 8);
        group.spawn(async { panic!("member failed") }).unwrap();
        wait_until(|| drops.load(Ordering::SeqCst) == 8);
        assert!(matches!(
            group.spawn(async { Ok(()) }),
            Err(gdex::Error::Closed)
        ));
        assert!(gdex::block_on(group.close()).is_err_and(|e| e.is_panicked()));
    });
}

/// Without cancel_on_error (the default), a failure is recorded and the
/// other members run to their end; close() gives the first failure.
#[test]
fn without_cancel_on_error_a_failure_lets_the_others_finish() {
    watchdog("without_cancel_on_error", 30, || {
        let p = pool(2);
        let group = gdex::TaskGroup::<Res>::on(p.scheduler());
        let finished = Arc::new(AtomicUsize::new(0));
        // The others wait on a gate the test opens once the failure is in,
        // instead of a 10 ms sleep that hoped to outlast it.
        let (open, gate) = gdex::Promise::<()>::new();
        group.spawn(async { Err(gdex::Error::TimedOut) }).unwrap();
        for _ in 0..8 {
            let (finished, gate) = (finished.clone(), gate.clone());
            group
                .spawn(async move {
                    let _ = gate.await;
                    finished.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                })
                .unwrap();
        }
        // The failed member has left the group; the others still run.
        wait_until(|| group.len() == 8);
        assert_eq!(finished.load(Ordering::SeqCst), 0);
        open.resolve(());
        assert!(matches!(
            gdex::block_on(group.close()),
            Err(gdex::Error::TimedOut)
        ));
        assert_eq!(finished.load(Ordering::SeqCst), 8);
    });
}

/// A `glib::Error` group: the member's own error comes back from close(),
/// unchanged, as a GTK app would want it.
#[test]
fn close_gives_a_members_glib_error_unchanged() {
    watchdog("close_gives_a_members_glib_error_unchanged", 30, || {
        let p = pool(1);
        let group = gdex::TaskGroup::<Result<(), glib::Error>>::builder()
            .scheduler(p.scheduler())
            .cancel_on_error(true)
            .build();
        group
            .spawn(async { Err(glib::Error::new(gio::IOErrorEnum::NotFound, "no such file")) })
            .unwrap();
        let err = gdex::block_on(group.close()).unwrap_err();
        assert!(err.matches(gio::IOErrorEnum::NotFound));
        assert_eq!(err.message(), "no such file");
    });
}

/// The current group (libdex 1.2 `task-group/null-uses-thread-default` and
/// `thread-default-nesting`; gdex sets the current group for each member's
/// poll, so there is no push or pop to nest): a member spawns into its own
/// group with `TaskGroup::current()`, also after the group was closed;
/// close() waits for those members too, and `current()` is `None`
/// elsewhere.
#[test]
fn a_members_spawns_through_current_join_its_group() {
    watchdog(
        "a_members_spawns_through_current_join_its_group",
        60,
        || {
            let p = pool(2);
            let group = gdex::TaskGroup::<()>::on(p.scheduler());
            let done = Arc::new(AtomicUsize::new(0));
            let fan_out = stress(200);
            let d = done.clone();
            let (closed, after_close) = futures::channel::oneshot::channel::<()>();
            group
                .spawn(async move {
                    // close() comes first: the fan-out happens in a closed
                    // group (a gate, not a 10 ms sleep that hoped so).
                    let _ = after_close.await;
                    let here = gdex::TaskGroup::current().expect("inside a member");
                    for _ in 0..fan_out {
                        let d = d.clone();
                        here.spawn(async move {
                            // A member spawned through current() is a member
                            // too: its own spawns join the same group.
                            let d2 = d.clone();
                            gdex::TaskGroup::current()
                                .expect("inside a member spawned through current()")
                                .spawn(async move {
                                    // Deliberate: finishes after its spawner;
                                    // close() waits for it either way.
                                    gdex::sleep(Duration::from_millis(1)).await;
                                    d2.fetch_add(1, Ordering::SeqCst);
                                })
                                .unwrap();
                            gdex::yield_now().await;
                            d.fetch_add(1, Ordering::SeqCst);
                        })
                        .unwrap();
                    }
                    d.fetch_add(1, Ordering::SeqCst);
                })
                .unwrap();
            assert!(gdex::TaskGroup::<()>::current().is_none());
            let close = group.close();
            closed.send(()).unwrap();
            gdex::block_on(close).unwrap();
            assert_eq!(
                done.load(Ordering::SeqCst),
                1 + 2 * fan_out,
                "close resolved before the members spawned through current()"
            );
            // Closed with every member finished: no more spawns, from anyone.
            assert!(matches!(
                group.handle().spawn(async {}),
                Err(gdex::Error::Closed)
            ));
            assert!(gdex::block_on(
                p.scheduler()
                    .spawn(async { gdex::TaskGroup::<()>::current().is_none() })
            )
            .unwrap());
        },
    );
}

/// Cancelling a group reaches the members its members spawned through
/// `current()`; cancel() returns once every one of them has been dropped.
#[test]
fn cancelling_a_group_reaches_members_spawned_through_current() {
    watchdog(
        "cancelling_a_group_reaches_members_spawned_through_current",
        30,
        || {
            let p = pool(2);
            let group = gdex::TaskGroup::<()>::on(p.scheduler());
            let drops = Arc::new(AtomicUsize::new(0));
            let spawned = Arc::new(AtomicUsize::new(0));
            let (d, s) = (drops.clone(), spawned.clone());
            group
                .spawn(async move {
                    let here = gdex::TaskGroup::current().unwrap();
                    for _ in 0..10 {
                        let guard = Counted(d.clone());
                        here.spawn(async move {
                            let _guard = guard;
                            std::future::pending::<()>().await
                        })
                        .unwrap();
                        s.fetch_add(1, Ordering::SeqCst);
                    }
                    let _guard = Counted(d);
                    std::future::pending::<()>().await
                })
                .unwrap();
            wait_until(|| spawned.load(Ordering::SeqCst) == 10);
            gdex::block_on(group.cancel());
            assert_eq!(drops.load(Ordering::SeqCst), 11, "cancel() returned early");
            assert!(group.is_empty());
            assert!(matches!(
                gdex::block_on(group.close()),
                Err(gdex::Error::Cancelled)
            ));
        },
    );
}

/// Asking for the current group with the wrong output type is a misuse,
/// and its panic names both types.
#[test]
fn current_with_another_output_type_panics_naming_both() {
    watchdog(
        "current_with_another_output_type_panics_naming_both",
        30,
        || {
            let p = pool(1);
            let group = gdex::TaskGroup::<()>::on(p.scheduler());
            group
                .spawn(async {
                    let _ = gdex::TaskGroup::<Res>::current();
                })
                .unwrap();
            match gdex::block_on(group.close()) {
                Err(gdex::Error::Panicked(m)) => {
                    assert!(m.contains("TaskGroup<()>"), "{m}");
                    assert!(m.contains("current()"), "{m}");
                }
                other => panic!("close gave {other:?}"),
            }
        },
    );
}

/// Dropping the close future, or the group before closing it, cancels the
/// members; dropping the group after close() leaves them to the close.
#[test]
fn the_close_future_owns_the_members_once_the_group_is_closed() {
    watchdog("the_close_future_owns_the_members", 30, || {
        let p = pool(2);
        let group = gdex::TaskGroup::<Res>::on(p.scheduler());
        let drops = pending_members(&group, 5);
        let close = group.close();
        drop(group);
        // Deliberate: 20 ms in which nothing may happen; a correct group
        // never cancels its members here, however late the check.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            drops.load(Ordering::SeqCst),
            0,
            "the group's drop cancelled"
        );
        drop(close);
        wait_until(|| drops.load(Ordering::SeqCst) == 5);

        let group = gdex::TaskGroup::<Res>::on(p.scheduler());
        let drops = pending_members(&group, 5);
        drop(group);
        wait_until(|| drops.load(Ordering::SeqCst) == 5);
    });
}

/// A spawn into a group whose pool is shut down is refused at once, with
/// the pool's reason (`ShutDown`, as any spawn there: S9), and leaves
/// nothing behind.
#[test]
fn a_spawn_refused_by_a_shut_down_pool_fails_and_leaves_nothing() {
    watchdog("a_spawn_refused_by_a_shut_down_pool", 30, || {
        let p = pool(1);
        let group = gdex::TaskGroup::<()>::on(p.scheduler());
        p.shutdown();
        let drops = Arc::new(AtomicUsize::new(0));
        let guard = Counted(drops.clone());
        assert!(matches!(
            group.spawn(async move { drop(guard) }),
            Err(gdex::Error::ShutDown)
        ));
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        assert_eq!((group.len(), group.held_entries()), (0, 0));
        gdex::block_on(group.close()).unwrap();
    });
}

/// `TaskGroup::current()` names the member whose poll is running, not a
/// task that a nested loop inside that poll runs: that one is no member
/// (mutant: with the running task unidentified, every task polled inside a
/// member's poll passed for the member).
#[test]
fn a_task_polled_in_a_members_nested_loop_is_no_member() {
    watchdog(
        "a_task_polled_in_a_members_nested_loop_is_no_member",
        30,
        || {
            common::on_main(|| {
                let group = gdex::TaskGroup::<()>::on(gdex::Scheduler::main());
                group
                    .spawn(async {
                        assert!(
                            gdex::TaskGroup::<()>::current().is_some(),
                            "the member is one"
                        );
                        let other = gdex::Scheduler::main()
                            .spawn(async { gdex::TaskGroup::<()>::current().is_none() });
                        // A nested loop inside the member's poll runs `other`.
                        assert!(
                            gdex::block_on(other).unwrap(),
                            "a task of the nested loop is no member"
                        );
                    })
                    .unwrap();
                gdex::block_on(group.close()).unwrap();
            })
        },
    );
}

/// `TaskGroup::current()` is `None` in a task polled inside a member's
/// nested loop: it checks the running task too. The sequence that leaked
/// the group: a `TaskGroup<()>` on the main scheduler; its member calls
/// `gdex::block_on` (S8: a nested `block_on` on the main thread runs other
/// main tasks). An unrelated main task, not a member of any group, runs
/// inside that nested loop and asks `TaskGroup::<()>::current()`. The
/// group's `CURRENT` thread-local was set by `Member::poll` around the
/// whole poll of the outer member and is never cleared for tasks polled
/// inside it, so the stranger gets the outer group (and could spawn members
/// into a group it does not belong to); asking for another output type
/// panics with "the running member belongs to a TaskGroup<()>" in a task
/// that is no member at all. Expected: `None` in a non-member task.
#[test]
fn task_group_current_is_none_in_tasks_polled_inside_a_member() {
    watchdog("task_group_current_leaks", 30, || {
        common::on_main(|| {
            let group = gdex::TaskGroup::<()>::on(gdex::Scheduler::main());
            let seen = Arc::new(Mutex::new(None::<(bool, bool)>));
            let s2 = seen.clone();
            group
                .spawn(async move {
                    let stranger = gdex::Scheduler::main().spawn(async {
                        let same_type = gdex::TaskGroup::<()>::current().is_some();
                        let other_type = std::panic::catch_unwind(|| {
                            gdex::TaskGroup::<Result<(), gdex::Error>>::current().is_some()
                        })
                        .is_err();
                        (same_type, other_type)
                    });
                    let got = gdex::block_on(stranger).unwrap();
                    *s2.lock().unwrap() = Some(got);
                })
                .unwrap();
            gdex::block_on(group.close()).unwrap();
            let (same_type, other_type_panicked) = seen.lock().unwrap().expect("member ran");
            assert!(
                !same_type && !other_type_panicked,
                "a task that belongs to no group, polled inside a member's nested block_on, \
                 saw TaskGroup::<()>::current() = Some: {same_type}, and \
                 TaskGroup::<Result<..>>::current() panicked: {other_type_panicked}"
            );
        });
    });
}

/// A member that waits forever and hands out its task's cancellable
/// (X1): what libdex's tests give a group as a cancellable promise.
fn member_with_cancellable(
    group: &gdex::TaskGroup<Res>,
) -> std::sync::mpsc::Receiver<gio::Cancellable> {
    let (tx, rx) = std::sync::mpsc::channel();
    group
        .spawn(async move {
            tx.send(gdex::current_cancellable().expect("a member has a cancellable"))
                .unwrap();
            std::future::pending::<Res>().await
        })
        .unwrap();
    rx
}

fn cancelled(c: &gio::Cancellable) -> bool {
    gio::prelude::CancellableExt::is_cancelled(c)
}

/// libdex 1.2 `task-group/cancel`: cancelling a group cancels its
/// members' work (their cancellables), and they never give a value.
#[test]
fn a_cancelled_group_cancels_its_members_work() {
    watchdog("group-cancel", 30, || {
        let p = pool(2);
        let group = gdex::TaskGroup::on(p.scheduler());
        let member = member_with_cancellable(&group);
        let cancellable = member.recv().unwrap();
        gdex::block_on(group.cancel());
        assert!(cancelled(&cancellable));
    });
}

/// libdex 1.2 `task-group/close-all-resolved`: a group whose members all
/// finished closes with `Ok(())` at once.
#[test]
fn a_group_whose_members_all_finished_closes_ok() {
    watchdog("group-close-resolved", 30, || {
        let p = pool(2);
        let group = gdex::TaskGroup::<Res>::on(p.scheduler());
        let done = Arc::new(AtomicUsize::new(0));
        let d = done.clone();
        group
            .spawn(async move {
                d.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .unwrap();
        wait_until(|| done.load(Ordering::SeqCst) == 1 && group.is_empty());
        assert!(gdex::block_on(group.close()).is_ok());
    });
}

/// libdex 1.2 `task-group/timeout-cancels-children`: a close that times
/// out (its future dropped by the timeout) cancels the members it was
/// waiting for.
#[test]
fn a_close_that_times_out_cancels_the_members() {
    watchdog("group-close-timeout", 30, || {
        let p = pool(2);
        let group = gdex::TaskGroup::on(p.scheduler());
        let first = member_with_cancellable(&group).recv().unwrap();
        let second = member_with_cancellable(&group).recv().unwrap();
        let timed = gdex::block_on(gdex::timeout(Duration::from_millis(10), group.close()));
        assert!(timed.is_err(), "{timed:?}");
        wait_until(|| cancelled(&first) && cancelled(&second));
    });
}

/// libdex 1.2 `task-group/nested-cancellation`: cancelling a group reaches
/// a leaf two groups down (a member owns a group whose member owns a
/// group).
#[test]
fn cancelling_a_group_reaches_a_leaf_of_nested_groups() {
    watchdog("group-nested-cancel", 30, || {
        let p = pool(2);
        let scheduler = p.scheduler();
        let (leaf_tx, leaf_rx) = std::sync::mpsc::channel::<gio::Cancellable>();
        let outer = gdex::TaskGroup::<Res>::on(scheduler.clone());
        outer
            .spawn(async move {
                let middle = gdex::TaskGroup::<Res>::on(scheduler.clone());
                middle
                    .spawn(async move {
                        let inner = gdex::TaskGroup::<Res>::on(scheduler);
                        inner
                            .spawn(async move {
                                leaf_tx
                                    .send(
                                        gdex::current_cancellable()
                                            .expect("a member has a cancellable"),
                                    )
                                    .unwrap();
                                std::future::pending::<Res>().await
                            })
                            .unwrap();
                        inner.close().await
                    })
                    .unwrap();
                middle.close().await
            })
            .unwrap();
        let leaf = leaf_rx.recv().unwrap();
        gdex::block_on(outer.cancel());
        wait_until(|| cancelled(&leaf));
    });
}

/// An output whose `is_failure` panics: a bug in a user's `GroupOutput`.
struct Verdict(bool);

impl gdex::GroupOutput for Verdict {
    type Value = ();
    type Error = gdex::Error;
    fn is_failure(&self) -> bool {
        assert!(!self.0, "is_failure refused to judge");
        false
    }
    fn into_result(self) -> Result<(), gdex::Error> {
        Ok(())
    }
}

/// `GroupOutput::is_failure` is user code, asked outside the group's lock:
/// a panic in it is the member's failure (`Error::Panicked`, with its
/// message, which cancels the others under `cancel_on_error`), and the
/// close waiting for the member resolves.
#[test]
fn a_member_whose_is_failure_panics_has_failed_and_close_resolves() {
    watchdog("group-is-failure-panics", 30, || {
        let p = pool(2);
        let group = gdex::TaskGroup::<Verdict>::builder()
            .scheduler(p.scheduler())
            .cancel_on_error(true)
            .build();
        let dropped = Arc::new(AtomicUsize::new(0));
        let guard = Counted(dropped.clone());
        group
            .spawn(async move {
                let _guard = guard;
                std::future::pending::<Verdict>().await
            })
            .unwrap();
        group.spawn(async { Verdict(true) }).unwrap();
        match gdex::block_on(group.close()) {
            Err(gdex::Error::Panicked(message)) => {
                assert!(message.contains("is_failure refused"), "{message}");
            }
            other => panic!("close gave {other:?}, not the panic of is_failure"),
        }
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            1,
            "the failure cancelled the other member"
        );

        // In a group that keeps results, it is that member's result.
        let group = gdex::TaskGroup::<Verdict>::builder()
            .scheduler(p.scheduler())
            .keep_results(true)
            .build();
        group.spawn(async { Verdict(false) }).unwrap();
        group.spawn(async { Verdict(true) }).unwrap();
        let results = gdex::block_on(group.close_with_results());
        assert!(results[0].is_ok(), "{results:?}");
        assert!(
            matches!(&results[1], Err(gdex::Error::Panicked(m)) if m.contains("is_failure refused")),
            "{results:?}"
        );
    });
}

/// An output that asks its group how many members run, when judged and
/// when it becomes a result.
struct AsksItsGroup(gdex::TaskGroupRef<AsksItsGroup>);

impl gdex::GroupOutput for AsksItsGroup {
    type Value = usize;
    type Error = gdex::Error;
    fn is_failure(&self) -> bool {
        // Asks too: the member has not left the group yet.
        self.0.is_empty()
    }
    fn into_result(self) -> Result<usize, gdex::Error> {
        Ok(self.0.len())
    }
}

/// `is_failure`, `into_result` and the error's `From` are user code: the
/// group calls them with its lock released, so one that uses the group
/// does not deadlock.
#[test]
fn close_with_results_converts_each_result_with_the_groups_lock_released() {
    watchdog("group-into-result-unlocked", 30, || {
        let p = pool(2);
        let group = gdex::TaskGroup::<AsksItsGroup>::builder()
            .scheduler(p.scheduler())
            .keep_results(true)
            .build();
        for _ in 0..2 {
            group
                .spawn(async { AsksItsGroup(gdex::TaskGroup::current().expect("inside a member")) })
                .unwrap();
        }
        let results = gdex::block_on(group.close_with_results());
        assert_eq!(results.len(), 2);
        assert!(results.iter().all(|r| matches!(r, Ok(0))), "{results:?}");
    });
}

/// A waker that a close lets go of (replaced by the waker of a later poll)
/// is dropped with the group's lock released: its drop is user code (the
/// last reference to another executor's task), which may use the group.
#[test]
fn a_waker_a_close_lets_go_of_is_dropped_with_the_groups_lock_released() {
    watchdog("group-waker-drop-unlocked", 30, || {
        let p = pool(1);
        let group = gdex::TaskGroup::<()>::on(p.scheduler());
        let (release, released) = gdex::Promise::<()>::new();
        group
            .spawn(async move {
                let _ = released.await;
            })
            .unwrap();
        let ran = Arc::new(AtomicUsize::new(0));
        let probe = || {
            let (handle, ran) = (group.handle(), ran.clone());
            common::waker_running_on_drop(move || {
                assert_eq!(handle.len(), 1);
                ran.fetch_add(1, Ordering::SeqCst);
            })
        };
        let mut close = Box::pin(group.close());
        assert!(common::poll_with(&mut close, &probe()).is_pending());
        assert_eq!(ran.load(Ordering::SeqCst), 0, "the close keeps its waker");
        assert!(common::poll_with(&mut close, &probe()).is_pending());
        assert_eq!(
            ran.load(Ordering::SeqCst),
            1,
            "the first waker was let go of"
        );
        release.resolve(());
        assert!(gdex::block_on(close).is_ok());
    });
}

/// Formatting a group (`{:?}`) writes with the group's lock released: the
/// formatter's sink is the caller's code, which may use the group.
#[test]
fn formatting_a_group_writes_with_its_lock_released() {
    struct Log<'a>(&'a gdex::TaskGroup<()>, String);
    impl std::fmt::Write for Log<'_> {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            let _ = self.0.len();
            self.1.push_str(s);
            Ok(())
        }
    }
    watchdog("group-debug-unlocked", 30, || {
        let p = pool(1);
        let group = gdex::TaskGroup::<()>::on(p.scheduler());
        let mut log = Log(&group, String::new());
        std::fmt::Write::write_fmt(&mut log, format_args!("{group:?}")).unwrap();
        assert!(log.1.contains("live: 0"), "{}", log.1);
    });
}
