//! P7: an idle pool's workers park in their contexts' poll and cost almost
//! nothing, also while 100 tasks wait for file descriptors (G2). In the
//! one-at-a-time binary (`tests/one_at_a_time.rs`), holding
//! `common::serial()`, so that no other test's threads count against the
//! process CPU time it measures.

use crate::common;

use std::time::Duration;

fn process_cpu() -> Duration {
    // SAFETY: getrusage only writes into the zeroed struct we pass.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut usage), 0);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

#[test]
fn an_idle_pool_parks_and_costs_under_20ms_of_cpu_per_second() {
    let _one = common::serial();
    // (With 100 tasks waiting for fds meanwhile.)
    common::watchdog("idle_pool", 60, || {
        // Nothing in a plain burst may reach the panic handler (mutant: a
        // slice's job counter that went down panicked after every job; the
        // worker's source contained it, and only the handler heard).
        let panics = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let p = panics.clone();
        gdex::set_panic_handler(move |_| {
            p.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        });
        let pool = gdex::ThreadPool::builder().workers(4).build().unwrap();
        // A burst first, so every worker has run and gone back to sleep.
        let tasks: Vec<_> = (0..10_000)
            .map(|i| pool.scheduler().spawn(async move { i }))
            .collect();
        for t in tasks {
            gdex::block_on(t).unwrap();
        }
        // 100 tasks wait for pipes (G2): an fd wait is a source in the
        // worker's poll, not a reason to wake.
        let waiting = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut writers = Vec::new();
        let mut readers = Vec::new();
        for _ in 0..100 {
            let (r, w) = std::io::pipe().unwrap();
            writers.push(w);
            let waiting = waiting.clone();
            readers.push(pool.scheduler().spawn(async move {
                common::after_first_poll(&waiting, gdex::unix_fd(&r, gdex::glib::IOCondition::IN))
                    .await
                    .expect("the pipe is open")
            }));
        }
        common::wait_until(|| waiting.load(std::sync::atomic::Ordering::SeqCst) == 100);
        // Every worker has parked: the iteration that parked it may still
        // be ending, and a stale wake-up may cost one more iteration (see
        // `WorkerMetrics::parked`); then it sleeps.
        common::wait_until(|| pool.metrics().workers.iter().all(|w| w.parked));
        let before = pool.metrics();
        let cpu = process_cpu();
        let watchdog_waits = watchdog_wakeups();
        // Deliberate: the idle second under test.
        std::thread::sleep(Duration::from_secs(1));
        let spent = process_cpu() - cpu;
        // The stall watchdog's monitor sleeps for good once no worker is
        // busy (mutant: a worker left "busy" after its slice kept it ticking
        // every millisecond, a thousand wake-ups a second).
        let watchdog_waits = watchdog_wakeups() - watchdog_waits;
        assert!(
            watchdog_waits < 50,
            "the watchdog woke {watchdog_waits} times in an idle second"
        );
        let after = pool.metrics();
        for (b, a) in before.workers.iter().zip(&after.workers) {
            assert!(
                a.context_iterations <= b.context_iterations + 2,
                "worker {} iterated its context while idle: {after:?}",
                a.index
            );
            assert!(a.parked, "worker {} woke while idle", a.index);
            assert_eq!(a.tasks_run, b.tasks_run);
        }
        assert!(
            spent < Duration::from_millis(20),
            "an idle pool spent {spent:?} of CPU in 1 s"
        );
        // The fds wake their tasks once written.
        for w in &mut writers {
            std::io::Write::write_all(w, b"x").unwrap();
        }
        for r in readers {
            assert!(gdex::block_on(r)
                .unwrap()
                .contains(gdex::glib::IOCondition::IN));
        }
        gdex::reset_panic_handler();
        assert_eq!(
            panics.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "panics reported"
        );
    });
}

/// How often the `gdex-watchdog` thread has gone to sleep so far (its
/// voluntary context switches), or 0 if it has not started.
fn watchdog_wakeups() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    for task in tasks.flatten() {
        let dir = task.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != "gdex-watchdog" {
            continue;
        }
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        return status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
    }
    0
}
