//! The hand-over (P6, B5): one task queued behind a long poll is taken by
//! an idle peer within a couple of milliseconds, with the stall watchdog
//! off. One queued job asks for no help when it is pushed (asking on every
//! push would cost the chained workloads a wake-up each), so the watchdog's
//! monitor hands a worker's queue to a peer once the worker has sat in one
//! poll for a millisecond.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::watchdog;

fn spin(d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}

/// Task A spawns B on its own worker (B is the only job queued there), then
/// spins 300 ms in one poll. B must start on the idle peer while A still
/// spins. (On cc53133, with the watchdog off, B waited for A in 5 of 5
/// runs.) Both on a pool with the watchdog off and one with it on.
#[test]
fn one_task_queued_behind_a_long_poll_starts_on_an_idle_peer() {
    watchdog("one_task_queued_behind_a_long_poll", 60, || {
        for threshold in [Duration::ZERO, Duration::from_millis(100)] {
            for _ in 0..common::stress(3) {
                let pool = gdex::ThreadPool::builder()
                    .workers(2)
                    .stall_threshold(threshold)
                    .build()
                    .unwrap();
                let s = pool.scheduler();
                // Both workers have parked (instead of a 20 ms sleep): only
                // the monitor's hand-over can wake the idle one for B.
                common::wait_until(|| pool.metrics().workers.iter().all(|w| w.parks > 0));
                let a_done = Arc::new(AtomicBool::new(false));
                let (ad, s2) = (a_done.clone(), s.clone());
                let a = s.spawn(async move {
                    let me = std::thread::current().name().unwrap().to_owned();
                    let ad2 = ad.clone();
                    let b = s2.spawn(async move {
                        (
                            std::thread::current().name().unwrap().to_owned(),
                            ad2.load(Ordering::SeqCst),
                        )
                    });
                    // Deliberate: the long poll under test.
                    spin(Duration::from_millis(300));
                    ad.store(true, Ordering::SeqCst);
                    (me, b)
                });
                let (a_worker, b) = gdex::block_on(a).unwrap();
                let (b_worker, a_was_done) = gdex::block_on(b).unwrap();
                assert!(
                    !a_was_done,
                    "B waited behind A's 300 ms poll on {a_worker} (watchdog threshold \
                     {threshold:?}) instead of starting on the idle peer"
                );
                assert_ne!(a_worker, b_worker);
                pool.shutdown();
            }
        }
    });
}
