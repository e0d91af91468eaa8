//! The worker's unit tests (P5, P10).

use super::*;

/// P10: the stall monitor's hand-over (B5) wakes a peer for work that
/// waits in the injector, not only for the stuck worker's own deque.
/// Here a job sits in the injector with nobody asked to run it (as
/// after a request that reached a worker just before a long poll),
/// while the worker that holds the pinned job is stuck waiting for that
/// very job and its peer sleeps.
#[test]
fn the_hand_over_wakes_a_peer_for_the_injectors_work() {
    use std::time::{Duration, Instant};
    let pool = crate::ThreadPool::builder().workers(2).build().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let parked = |n: usize| {
        while pool.metrics().workers.iter().filter(|w| w.parked).count() < n {
            assert!(Instant::now() < deadline, "the workers never parked");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    parked(2);
    let (started_tx, started) = std::sync::mpsc::channel::<()>();
    let (ran_tx, ran) = std::sync::mpsc::channel::<()>();
    let (outcome_tx, outcome) = std::sync::mpsc::channel::<bool>();
    pool.spawn_pinned(move || async move {
        started_tx.send(()).unwrap();
        let ran_beside = ran.recv_timeout(Duration::from_secs(5)).is_ok();
        outcome_tx.send(ran_beside).unwrap();
    })
    .detach();
    started.recv_timeout(Duration::from_secs(5)).unwrap();
    parked(1);
    // Straight onto the injector, with no request for help.
    let shared = pool.shared();
    shared.injector.push(Job::work(move || {
        let _ = ran_tx.send(());
    }));
    assert!(
        outcome.recv_timeout(Duration::from_secs(10)).unwrap(),
        "the injector's job waited for the stuck worker while its peer slept: {:?}",
        pool.metrics()
    );
}

/// P5: the first victim of a steal (and the first sleeper a remote
/// request tries) is spread: the generator is not stuck on one value,
/// and it differs between threads.
#[test]
fn victim_choice_is_spread() {
    let here: std::collections::HashSet<u32> = (0..64).map(|_| pseudo_random() % 4).collect();
    assert_eq!(here.len(), 4, "64 draws over 4 workers hit {here:?}");
    let a: Vec<u32> = (0..8).map(|_| pseudo_random()).collect();
    let b: Vec<u32> = std::thread::spawn(|| (0..8).map(|_| pseudo_random()).collect())
        .join()
        .unwrap();
    assert_ne!(a, b, "two threads draw the same sequence");
}
