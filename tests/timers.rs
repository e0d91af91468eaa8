//! P8: gdex's own timers follow their task. A timer waits on the context of
//! whoever polled it last; polled on another context (its task moved to
//! another worker, or its first worker's pool is gone), it moves there, or
//! resolves at once if its deadline has passed.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use common::watchdog;

/// The name of the worker thread we run on.
fn worker() -> String {
    std::thread::current().name().unwrap_or("?").to_owned()
}

/// Keeps one worker of `s`'s pool spinning until `until` is raised, so that
/// the next task spawned from outside starts on the other one; gives the
/// occupied worker's name once it spins.
fn occupy_a_worker(s: &gdex::Scheduler, until: &Arc<AtomicBool>) -> String {
    let (occupied_tx, occupied_rx) = std::sync::mpsc::channel::<String>();
    let until = until.clone();
    s.spawn(async move {
        occupied_tx.send(worker()).unwrap();
        while !until.load(Ordering::SeqCst) {
            std::hint::spin_loop();
        }
    })
    .detach();
    occupied_rx.recv().unwrap()
}

/// Polls `future` once, here, and gives it back.
async fn poll_once<F: Future + Unpin>(mut future: F) -> F {
    std::future::poll_fn(|cx| {
        let _ = Pin::new(&mut future).poll(cx);
        Poll::Ready(())
    })
    .await;
    future
}

/// A task's timer is first polled on one worker, which then blocks for 2 s
/// in `blocking::blocking`; that hands the task to the other worker, where
/// the timer is polled next. It must fire there after its 20 ms, while the
/// first worker still blocks. (On cc53133 it stayed on the first worker's
/// context and fired only once the blocker had returned.) The same for
/// `timeout`, `with_timeout` and `with_deadline`.
///
/// The placement is made deterministic: an occupier keeps the other worker
/// busy until the blocker starts, so the task and the blocker share a
/// worker, the blocker first in its queue.
#[test]
fn a_timer_fires_on_time_after_its_task_moved_off_a_blocked_worker() {
    watchdog("a_timer_fires_after_its_task_moved", 60, || {
        for kind in ["sleep", "timeout", "with_timeout", "with_deadline"] {
            let pool = gdex::ThreadPool::builder()
                .workers(2)
                .stall_threshold(Duration::ZERO)
                .build()
                .unwrap();
            let s = pool.scheduler();
            let blocker_started = Arc::new(AtomicBool::new(false));
            let blocker_done = Arc::new(AtomicBool::new(false));
            let occupied = occupy_a_worker(&s, &blocker_started);
            // The blocker blocks for up to 2 s; the test lets it go once it
            // has its answer.
            let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
            let release_rx = std::sync::Mutex::new(Some(release_rx));
            let (bs, bd, s2) = (blocker_started.clone(), blocker_done.clone(), s.clone());
            let task = s.spawn(async move {
                let first = worker();
                // Deliberate: the timers are under test.
                let short = Duration::from_millis(20);
                let timer: Pin<Box<dyn Future<Output = bool> + Send>> = match kind {
                    "sleep" => Box::pin(async move {
                        gdex::sleep(short).await;
                        true
                    }),
                    "timeout" => {
                        Box::pin(async move { gdex::reject_after::<()>(short).await.is_err() })
                    }
                    "with_timeout" => Box::pin(async move {
                        gdex::timeout(short, std::future::pending::<()>())
                            .await
                            .is_err()
                    }),
                    _ => Box::pin(async move {
                        let at = std::time::Instant::now() + short;
                        gdex::timeout_at(at, std::future::pending::<()>())
                            .await
                            .is_err()
                    }),
                };
                // Register the timer here, on this worker's context.
                let timer = poll_once(timer).await;
                // Queue the blocker ahead of us on this worker: its blocking
                // call hands us to the other worker, freed as it starts.
                let bd2 = bd.clone();
                s2.spawn(async move {
                    bs.store(true, Ordering::SeqCst);
                    let rx = release_rx.lock().unwrap().take().unwrap();
                    gdex::blocking::blocking(|| {
                        let _ = rx.recv_timeout(Duration::from_secs(2));
                    });
                    bd2.store(true, Ordering::SeqCst);
                })
                .detach();
                gdex::yield_now().await;
                let fired = timer.await;
                assert!(fired, "{kind}: the timer did not report its expiry");
                (first, worker(), bd.load(Ordering::SeqCst))
            });
            let (first, now, blocker_was_done) = gdex::block_on(task).unwrap();
            let _ = release_tx.send(());
            assert_ne!(
                first, occupied,
                "{kind}: the task started on the occupied worker"
            );
            assert!(
                !blocker_was_done,
                "{kind}: the timer of a task handed off {first} fired only after {first}'s \
                 blocking call returned (the task finished on {now})"
            );
            assert_ne!(
                first, now,
                "{kind}: the task did not move off its blocked worker"
            );
            pool.shutdown();
        }
    });
}

/// A `sleep` first polled on a pool worker, whose pool is then shut down,
/// must still fire when it is awaited elsewhere (here on a plain thread,
/// through `block_on`). On cc53133 its source stayed on the dead worker's
/// context and a 1 s `with_timeout` around it gave `TimedOut`.
#[test]
fn a_timer_survives_the_pool_of_its_first_worker() {
    watchdog("a_timer_survives_its_first_pool", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        // The task gives the polled sleep back (in a tuple: the task's
        // output is a value, not a future it forgot to await). Deliberate:
        // the timer under test.
        let (sleep,) =
            gdex::block_on(pool.scheduler().spawn(async {
                (poll_once(Box::pin(gdex::sleep(Duration::from_millis(20)))).await,)
            }))
            .unwrap();
        pool.shutdown();
        let result = gdex::block_on(gdex::timeout(Duration::from_secs(1), sleep));
        assert!(
            result.is_ok(),
            "a sleep first polled on a shut-down pool never fired: {result:?}"
        );
    });
}

/// A timer polled again on the context it waits on keeps its one source:
/// polling it many times there attaches nothing new.
#[test]
fn a_timer_polled_again_where_it_waits_stays_put() {
    watchdog("a_timer_polled_again_stays_put", 30, || {
        let context = glib::MainContext::new();
        context
            .with_thread_default(|| {
                // Deliberate: the timer under test; pumped until it fires.
                let mut sleep = Box::pin(gdex::sleep(Duration::from_millis(30)));
                let waker = futures::task::noop_waker();
                let mut cx = std::task::Context::from_waker(&waker);
                for _ in 0..1000 {
                    assert!(sleep.as_mut().poll(&mut cx).is_pending());
                }
                // One gdex timer source on the context, whatever the polls.
                let found = count_sources(&context, "gdex timer");
                assert_eq!(found, 1);
                common::pump_until(&context, || sleep.as_mut().poll(&mut cx).is_ready());
            })
            .unwrap();
    });
}

/// Counts the sources named `name` attached to `context`.
fn count_sources(context: &glib::MainContext, name: &str) -> usize {
    // Source ids are small integers handed out per context; look at the
    // first few thousand.
    (1..4096u32)
        .filter_map(|id| {
            // SAFETY: g_main_context_find_source_by_id only reads the
            // context's table; the pointer is checked before use.
            let source = unsafe {
                glib::ffi::g_main_context_find_source_by_id(
                    glib::translate::ToGlibPtr::to_glib_none(context).0,
                    id,
                )
            };
            if source.is_null() {
                return None;
            }
            // SAFETY: a live source's name is NULL or a NUL-terminated string.
            let n = unsafe { glib::ffi::g_source_get_name(source) };
            if n.is_null() {
                return None;
            }
            // SAFETY: as above.
            let n = unsafe { std::ffi::CStr::from_ptr(n) };
            (n.to_str() == Ok(name)).then_some(())
        })
        .count()
}

/// A task that waits only on its `sleep` (it is idle, nobody polls it) on a
/// worker that then sits in one long poll: the timer must still fire about
/// on time and the task run on the idle peer, both for a CPU-bound poll
/// and for one inside `blocking::blocking`. The watchdog's monitor raises
/// the overdue timers of a worker stuck in one poll. (On cc53133 the task
/// waited for the long poll to end.)
///
/// Placement is made deterministic as in the test above: an occupier keeps
/// the other worker busy until the long poll has started on the task's
/// worker, so neither the task nor the long poll can go elsewhere first.
#[test]
fn an_idle_tasks_timer_fires_while_its_worker_sits_in_one_long_poll() {
    watchdog(
        "an_idle_tasks_timer_fires_while_its_worker_is_stuck",
        60,
        || {
            for (declared, threshold) in [
                (false, Duration::ZERO),
                (true, Duration::ZERO),
                (false, Duration::from_millis(100)),
            ] {
                idle_timer_round(declared, threshold);
            }
        },
    );
}

fn idle_timer_round(declared: bool, threshold: Duration) {
    let pool = gdex::ThreadPool::builder()
        .workers(2)
        .stall_threshold(threshold)
        .build()
        .unwrap();
    let s = pool.scheduler();
    let long_poll_started = Arc::new(AtomicBool::new(false));
    let occupied = occupy_a_worker(&s, &long_poll_started);

    let release = Arc::new(AtomicBool::new(false));
    let blocker_done = Arc::new(AtomicBool::new(false));
    let blocker_on = Arc::new(std::sync::Mutex::new(String::new()));
    let (rel, bd, bo, st, s2) = (
        release.clone(),
        blocker_done.clone(),
        blocker_on.clone(),
        long_poll_started.clone(),
        s.clone(),
    );
    let task = s.spawn(async move {
        let first = worker();
        // Queue the long poll behind us on this worker, then wait only on
        // the timer.
        let bd2 = bd.clone();
        s2.spawn(async move {
            *bo.lock().unwrap() = worker();
            st.store(true, Ordering::SeqCst);
            let wait = || {
                let end = std::time::Instant::now() + Duration::from_secs(2);
                while !rel.load(Ordering::SeqCst) && std::time::Instant::now() < end {
                    std::hint::spin_loop();
                }
            };
            if declared {
                gdex::blocking::blocking(wait);
            } else {
                wait();
            }
            bd2.store(true, Ordering::SeqCst);
        })
        .detach();
        // Deliberate: the timer under test.
        gdex::sleep(Duration::from_millis(20)).await;
        (first, worker(), bd.load(Ordering::SeqCst))
    });
    let (first, now, blocker_was_done) = gdex::block_on(task).unwrap();
    release.store(true, Ordering::SeqCst);
    let blocker_on = blocker_on.lock().unwrap().clone();
    pool.shutdown();
    assert_ne!(first, occupied, "the task started on the occupied worker");
    assert_eq!(
        blocker_on, first,
        "the long poll did not run on the task's worker"
    );
    assert!(
        !blocker_was_done,
        "a 20 ms sleep of an idle task on {first} fired only after {first}'s long poll \
         (declared blocking: {declared}, watchdog threshold {threshold:?})"
    );
    assert_ne!(
        first, now,
        "the task did not move to the idle peer (declared {declared}, threshold {threshold:?})"
    );
}
