//! The stall watchdog (B5, X4). Alone in its binary: it captures the "gdex"
//! log domain's warnings for the whole process.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

fn warnings() -> &'static Mutex<Vec<String>> {
    static WARNINGS: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    WARNINGS.get_or_init(|| {
        glib::log_set_handler(
            Some("gdex"),
            glib::LogLevels::LEVEL_WARNING,
            false,
            false,
            |_, _, message| warnings().lock().unwrap().push(message.to_owned()),
        );
        Mutex::new(Vec::new())
    })
}

fn warnings_naming(text: &str) -> Vec<String> {
    warnings()
        .lock()
        .unwrap()
        .iter()
        .filter(|w| w.contains(text))
        .cloned()
        .collect()
}

use common::spin;

/// A task that spins 300 ms produces exactly one warning, naming it and its
/// worker; a task queued behind it on the same worker is taken by the peer
/// meanwhile.
#[test]
fn a_stuck_task_is_reported_once_by_name_and_its_queue_moves() {
    warnings();
    common::watchdog("a_stuck_task_is_reported_once", 60, || {
        let pool = gdex::ThreadPool::builder()
            .workers(2)
            .stall_threshold(Duration::from_millis(100))
            .build()
            .unwrap();
        // Both workers asleep first, so that nothing but the watchdog wakes
        // the peer.
        common::wait_until(|| pool.metrics().workers.iter().all(|w| w.parks > 0));
        std::thread::sleep(Duration::from_millis(20));
        let s = pool.scheduler();
        let s2 = s.clone();
        let behind_ran = Arc::new(AtomicBool::new(false));
        let behind_ran2 = behind_ran.clone();
        let stuck = s.spawn_named("spinner-under-test", async move {
            // One task queued behind us on our own deque: too little to ask a
            // peer for help, so only the watchdog can get it moving.
            let behind = s2.spawn(async move { behind_ran2.store(true, Ordering::SeqCst) });
            spin(Duration::from_millis(300));
            let ran_during_spin = behind_ran.load(Ordering::SeqCst);
            behind.await.unwrap();
            (
                ran_during_spin,
                std::thread::current().name().unwrap().to_owned(),
            )
        });
        let (ran_during_spin, worker) = gdex::block_on(stuck).unwrap();
        let reports = warnings_naming("spinner-under-test");
        assert_eq!(reports.len(), 1, "exactly one report: {reports:?}");
        assert!(
            reports[0].contains(&worker),
            "names the worker: {}",
            reports[0]
        );
        assert!(
            ran_during_spin,
            "the task queued behind the stuck one waited for it"
        );
    });
}

/// Work declared with `gdex::blocking::blocking` is not a stall, and a pool
/// with the watchdog off never reports.
#[test]
fn declared_blocking_and_a_disabled_watchdog_are_quiet() {
    warnings();
    common::watchdog("declared_blocking_is_quiet", 60, || {
        let pool = gdex::ThreadPool::builder()
            .workers(1)
            .stall_threshold(Duration::from_millis(50))
            .build()
            .unwrap();
        let t = pool.scheduler().spawn_named("declared-blocker", async {
            gdex::blocking::blocking(|| std::thread::sleep(Duration::from_millis(200)));
        });
        gdex::block_on(t).unwrap();

        let off = gdex::ThreadPool::builder()
            .workers(1)
            .stall_threshold(Duration::ZERO)
            .build()
            .unwrap();
        let t = off.scheduler().spawn_named("unwatched-spinner", async {
            spin(Duration::from_millis(200));
        });
        gdex::block_on(t).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(warnings_naming("declared-blocker").is_empty());
        assert!(warnings_naming("unwatched-spinner").is_empty());
    });
}

/// The main loop is watched too: a main-scheduler task stuck in one poll is
/// reported, naming the main scheduler.
#[test]
fn a_stuck_main_task_is_reported() {
    warnings();
    common::watchdog("a_stuck_main_task_is_reported", 60, || {
        common::on_main(|| {
            let t = gdex::Scheduler::main().spawn_named("main-spinner", async {
                spin(Duration::from_millis(300));
            });
            gdex::block_on(t).unwrap();
        });
        let reports = warnings_naming("main-spinner");
        assert_eq!(reports.len(), 1, "{reports:?}");
        assert!(reports[0].contains("main scheduler"), "{}", reports[0]);
    });
}
