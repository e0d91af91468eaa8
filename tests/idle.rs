//! P7: an idle pool's workers park in their contexts' poll and cost almost
//! nothing. Alone in its own test binary so that no other test's threads
//! count against the process CPU time it measures.

mod common;

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
    common::watchdog("idle_pool", 60, || {
        let pool = gdex::ThreadPool::builder().workers(4).build().unwrap();
        // A burst first, so every worker has run and gone back to sleep.
        let tasks: Vec<_> = (0..10_000)
            .map(|i| pool.scheduler().spawn(async move { i }))
            .collect();
        for t in tasks {
            gdex::block_on(t).unwrap();
        }
        // Every worker has parked: the iteration that parked it may still
        // be ending, and a stale wake-up may cost one more iteration (see
        // `WorkerMetrics::parked`); then it sleeps.
        common::wait_until(|| pool.metrics().workers.iter().all(|w| w.parked));
        let before = pool.metrics();
        let cpu = process_cpu();
        // Deliberate: the idle second under test.
        std::thread::sleep(Duration::from_secs(1));
        let spent = process_cpu() - cpu;
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
    });
}
