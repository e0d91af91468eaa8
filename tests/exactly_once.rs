//! Every task runs exactly once (P6: no lost wake-up; P3-P5: no duplicated
//! job), whether spawned from outside the pool, from inside workers, or woken
//! across workers. One million tasks by default; `GDEX_STRESS` scales.

mod common;

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

use futures::channel::oneshot;

fn check_counts(counts: &[AtomicU32]) {
    let wrong: Vec<(usize, u32)> = counts
        .iter()
        .enumerate()
        .map(|(i, c)| (i, c.load(Ordering::Relaxed)))
        .filter(|&(_, c)| c != 1)
        .take(10)
        .collect();
    assert!(
        wrong.is_empty(),
        "tasks not run exactly once (index, runs): {wrong:?}"
    );
}

#[test]
fn a_million_tasks_each_run_exactly_once_on_4_workers() {
    common::watchdog("a_million_tasks_on_4_workers", 300, || {
        run(4, common::stress(1_000_000))
    });
}

#[test]
fn tasks_each_run_exactly_once_on_1_and_2_workers() {
    common::watchdog("tasks_on_1_and_2_workers", 300, || {
        run(1, common::stress(100_000));
        run(2, common::stress(200_000));
    });
}

/// `total` tasks: two fifths spawned from outside, two fifths from inside
/// workers, one fifth woken across workers by a oneshot.
fn run(workers: usize, total: usize) {
    {
        let outside = total * 2 / 5;
        let inside = total * 2 / 5;
        let woken = total - outside - inside;
        let pool = gdex::ThreadPool::builder()
            .workers(workers)
            .build()
            .unwrap();
        let s = pool.scheduler();
        let counts: Arc<Vec<AtomicU32>> = Arc::new((0..total).map(|_| AtomicU32::new(0)).collect());
        let finished = Arc::new(AtomicUsize::new(0));
        let (all_done_tx, all_done) = std::sync::mpsc::channel::<()>();
        let done = {
            let finished = finished.clone();
            move |counts: &Vec<AtomicU32>, i: usize, tx: &std::sync::mpsc::Sender<()>| {
                counts[i].fetch_add(1, Ordering::Relaxed);
                if finished.fetch_add(1, Ordering::AcqRel) + 1 == total {
                    tx.send(()).unwrap();
                }
            }
        };

        // 1. Spawned from outside the pool: the injector.
        for i in 0..outside {
            let (counts, tx, done) = (counts.clone(), all_done_tx.clone(), done.clone());
            s.spawn(async move { done(&counts, i, &tx) }).detach();
        }

        // 2. Spawned from inside workers: local deques, stolen by peers.
        let spawners = 8;
        for k in 0..spawners {
            let (counts, tx, done, s2) =
                (counts.clone(), all_done_tx.clone(), done.clone(), s.clone());
            s.spawn(async move {
                let lo = outside + k * inside / spawners;
                let hi = outside + (k + 1) * inside / spawners;
                for i in lo..hi {
                    let (counts, tx, done) = (counts.clone(), tx.clone(), done.clone());
                    s2.spawn(async move { done(&counts, i, &tx) }).detach();
                    if i % 64 == 0 {
                        gdex::yield_now().await;
                    }
                }
            })
            .detach();
        }

        // 3. Woken across workers: each waiter parks on a oneshot that a task
        //    (probably on another worker) completes.
        for i in outside + inside..total {
            let (tx_wake, rx_wake) = oneshot::channel::<()>();
            let (counts, tx, done) = (counts.clone(), all_done_tx.clone(), done.clone());
            s.spawn(async move {
                rx_wake.await.unwrap();
                done(&counts, i, &tx)
            })
            .detach();
            s.spawn(async move {
                tx_wake.send(()).unwrap();
            })
            .detach();
        }

        all_done.recv().unwrap();
        // Give a duplicate run a chance to show before counting.
        pool.shutdown();
        assert_eq!(finished.load(Ordering::Acquire), total);
        check_counts(&counts);
        // Every job counted by the workers: at least one poll per task.
        assert!(pool.metrics().tasks_run() as usize >= total + woken + spawners);
    }
}
