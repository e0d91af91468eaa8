//! The hand-over (P6, B5): one task queued behind a long poll is taken by
//! an idle peer within a couple of milliseconds, with the stall watchdog
//! off. One queued job asks for no help when it is pushed (asking on every
//! push would cost the chained workloads a wake-up each), so the watchdog's
//! monitor hands a worker's queue to a peer once the worker has sat in one
//! poll for a millisecond; a context scheduler busy meanwhile does not put
//! the monitor to sleep for longer. The tests take turns: their bounds
//! want the machine's cores.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{serial, spin, watchdog};

/// Task A spawns B on its own worker (B is the only job queued there), then
/// spins 300 ms in one poll. B must start on the idle peer while A still
/// spins. (On cc53133, with the watchdog off, B waited for A in 5 of 5
/// runs.) Both on a pool with the watchdog off and one with it on.
#[test]
fn one_task_queued_behind_a_long_poll_starts_on_an_idle_peer() {
    let _one = serial();
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

/// A busy context scheduler does not slow the pool's hand-over (P6): a pool
/// worker starting a slice cuts the monitor's slow sleep short. The
/// sequence that delayed it: every runner idle, the monitor parked. A
/// context scheduler (100 ms default stall threshold) starts a 60 ms poll:
/// its `busy()` wakes the monitor, which, seeing no *pool worker* busy,
/// picks its slow period, threshold / 4 = 25 ms, and sleeps. 3 ms later
/// pool task A spawns B on its own worker and spins 150 ms. A's `busy()`
/// calls `monitor().wake()`, a no-op since the monitor is sleeping, not
/// parked. So the monitor first sees A only at the end of its 25 ms sleep,
/// and B reaches the idle peer after ~25 ms instead of "within a couple of
/// 1 ms ticks" (P6, stall.rs `HAND_OVER_AFTER`); overdue timers of the
/// stuck worker are raised that late too. Any busy context scheduler or
/// main loop (a GTK app's, all the time) triggers it. Expected: the best of
/// 5 rounds under 10 ms.
#[test]
fn a_busy_context_scheduler_does_not_slow_the_pool_hand_over() {
    let _one = serial();
    watchdog("a_busy_context_scheduler_slows", 60, || {
        let pool = gdex::ThreadPool::builder()
            .workers(2)
            .stall_threshold(Duration::ZERO)
            .build()
            .unwrap();
        let s = pool.scheduler();
        let ctx = glib::MainContext::new();
        let mut delays = Vec::new();
        for _ in 0..5 {
            // Deliberate: all idle, the monitor parked. Nothing outside
            // the library can see the monitor park; 60 ms is over twice
            // its slow period (25 ms). A round that starts before it has
            // parked only sees a quicker hand-over: it cannot fail a
            // correct build, only miss the bug.
            std::thread::sleep(Duration::from_millis(60));
            let c = ctx.clone();
            let context_busy = Arc::new(AtomicBool::new(false));
            let cb = context_busy.clone();
            let busy = std::thread::spawn(move || {
                c.with_thread_default(|| {
                    let t = gdex::Scheduler::for_context(&c).spawn(async move {
                        cb.store(true, Ordering::SeqCst);
                        spin(Duration::from_millis(60));
                    });
                    gdex::block_on(t).unwrap();
                })
                .unwrap();
            });
            // The context scheduler's long poll has begun (a flag, where a
            // 3 ms sleep hoped so)...
            common::wait_until(|| context_busy.load(Ordering::SeqCst));
            // ...and A comes 3 ms into it. Deliberate: the monitor has had
            // the time to pick its slow period (not observable either); a
            // late A only speeds the round.
            std::thread::sleep(Duration::from_millis(3));
            let a = s.spawn(async {
                let t_a = Instant::now();
                let b = gdex::Scheduler::thread_default()
                    .unwrap()
                    .spawn(async { Instant::now() });
                spin(Duration::from_millis(150));
                (t_a, b)
            });
            let (t_a, b) = gdex::block_on(a).unwrap();
            let t_b = gdex::block_on(b).unwrap();
            delays.push(t_b.saturating_duration_since(t_a));
            busy.join().unwrap();
        }
        pool.shutdown();
        let best = delays.iter().min().copied().unwrap();
        assert!(
            best < Duration::from_millis(10),
            "with a context scheduler busy, a job queued behind a long poll waited \
             {delays:?} for an idle peer (best {best:?}); P6 promises a couple of 1 ms ticks"
        );
    });
}

/// Control: the same, with no context scheduler busy: the hand-over takes
/// a couple of milliseconds (P6).
#[test]
fn held_an_idle_monitor_hands_a_queued_job_over_within_a_few_ms() {
    let _one = serial();
    watchdog("held_an_idle_monitor_hands_over", 60, || {
        let pool = gdex::ThreadPool::builder()
            .workers(2)
            .stall_threshold(Duration::ZERO)
            .build()
            .unwrap();
        let s = pool.scheduler();
        // Deliberate: all idle, the monitor parked, as above (not
        // observable from outside; a late park only speeds the round).
        let delays = queued_behind_a_long_poll(&s, Duration::from_millis(60));
        pool.shutdown();
        let best = delays.iter().min().copied().unwrap();
        assert!(best < Duration::from_millis(10), "{delays:?}");
    });
}

/// The same while a task on the pool wakes every millisecond for a timer,
/// so that the monitor is watching (every 5 ms, B6) rather than parked
/// when the long poll begins: it sees the poll within a watch tick and
/// hands the queue over a 1 ms sample later, within about 6 ms.
#[test]
fn a_queued_job_is_handed_over_while_the_monitor_watches_a_1ms_timer() {
    let _one = serial();
    watchdog("handed_over_while_watching", 60, || {
        let pool = gdex::ThreadPool::builder()
            .workers(2)
            .stall_threshold(Duration::ZERO)
            .build()
            .unwrap();
        let s = pool.scheduler();
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let ticker = s.spawn(async move {
            while !st.load(Ordering::Relaxed) {
                glib::timeout_future(Duration::from_millis(1)).await;
            }
        });
        // Deliberate: the ticker runs a few slices first, so that the
        // monitor watches (not observable from outside; a monitor
        // sampling faster only speeds the round).
        let delays = queued_behind_a_long_poll(&s, Duration::from_millis(20));
        stop.store(true, Ordering::Relaxed);
        gdex::block_on(ticker).unwrap();
        pool.shutdown();
        let best = delays.iter().min().copied().unwrap();
        assert!(
            best < Duration::from_millis(10),
            "with the monitor watching a 1 ms timer, a job queued behind a long poll waited \
             {delays:?} for an idle peer (best {best:?}); P6 promises a few ms"
        );
    });
}

/// Five rounds, each after `pause`: a task queued on a worker's own deque
/// behind a 150 ms poll there; how long each waited to start.
fn queued_behind_a_long_poll(s: &gdex::Scheduler, pause: Duration) -> Vec<Duration> {
    (0..5)
        .map(|_| {
            std::thread::sleep(pause);
            let a = s.spawn(async {
                let t_a = Instant::now();
                let b = gdex::Scheduler::thread_default()
                    .unwrap()
                    .spawn(async { Instant::now() });
                spin(Duration::from_millis(150));
                (t_a, b)
            });
            let (t_a, b) = gdex::block_on(a).unwrap();
            gdex::block_on(b).unwrap().saturating_duration_since(t_a)
        })
        .collect()
}
