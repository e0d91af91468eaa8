//! The stall watchdog (B5, X4). Alone in its binary: it captures the "gdex"
//! log domain's warnings for the whole process. Its tests run one at a time
//! (`common::serial`): they measure time in one poll, which tests spinning
//! next to them on two cores would stretch.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

use common::{serial, spin};

/// A pool of `workers` whose stall watchdog reports a poll longer than
/// `threshold_ms`.
fn watched_pool(workers: usize, threshold_ms: u64) -> gdex::ThreadPool {
    gdex::ThreadPool::builder()
        .workers(workers)
        .stall_threshold(Duration::from_millis(threshold_ms))
        .build()
        .unwrap()
}

/// Runs this binary's test `name` alone in a child process, with `env`
/// added (the test's own variable among them tells the child to run the
/// case rather than spawn it), and fails unless the child's run passed.
/// For a case that sets process-wide state (the panic hook, a thread's
/// scheduling policy) or stops the process.
fn child_run_passes(name: &str, env: &[(&str, &str)]) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .envs(env.iter().copied())
        .output()
        .expect("run this test binary as a child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{env:?}: the child run failed ({:?}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
}

/// In the parent (`child`, the test's own variable, unset): runs test
/// `name` in a child with `child` set, one at a time and under a watchdog
/// (a child that hangs fails the parent), and returns true. In the child:
/// false, and the caller runs the case.
fn ran_in_a_child(name: &str, child: &str) -> bool {
    if std::env::var_os(child).is_some() {
        return false;
    }
    let _serial = serial();
    common::watchdog(name, 60, || child_run_passes(name, &[(child, "1")]));
    true
}

/// A task that spins 300 ms produces exactly one warning, naming it and its
/// worker; a task queued behind it on the same worker is taken by the peer
/// meanwhile.
#[test]
fn a_stuck_task_is_reported_once_by_name_and_its_queue_moves() {
    let _serial = serial();
    warnings();
    common::watchdog("a_stuck_task_is_reported_once", 60, || {
        let pool = watched_pool(2, 100);
        // Both workers asleep first, so that nothing but the watchdog wakes
        // the peer.
        common::wait_until(|| pool.metrics().workers.iter().all(|w| w.parks > 0));
        let s = pool.scheduler();
        let s2 = s.clone();
        let behind_ran = Arc::new(AtomicBool::new(false));
        let behind_ran2 = behind_ran.clone();
        let stuck = s.spawn_named("spinner-under-test", async move {
            // One task queued behind us on our own deque: too little to ask a
            // peer for help, so only the watchdog can get it moving.
            let behind = s2.spawn(async move { behind_ran2.store(true, Ordering::SeqCst) });
            // Deliberate: the stall under test.
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

/// Work declared with `gdex::blocking::blocking` is not a stall (but a stall
/// after it on the same worker is), and a pool with the watchdog off never
/// reports.
#[test]
fn declared_blocking_and_a_disabled_watchdog_are_quiet() {
    let _serial = serial();
    warnings();
    common::watchdog("declared_blocking_is_quiet", 60, || {
        let pool = watched_pool(1, 50);
        let t = pool.scheduler().spawn_named("declared-blocker", async {
            // Deliberate: the declared blocking call under test, with a
            // short declaration nested in it first: the outer one still
            // holds once the inner one ends (it used to clear the flag).
            gdex::blocking::blocking(|| {
                gdex::blocking::blocking(|| ());
                std::thread::sleep(Duration::from_millis(200))
            });
        });
        gdex::block_on(t).unwrap();
        // The declaration ends with the call: the same worker's next stall
        // is reported.
        let t = pool.scheduler().spawn_named("stall-after-blocking", async {
            // Deliberate: the stall under test.
            spin(Duration::from_millis(200));
        });
        gdex::block_on(t).unwrap();
        common::wait_until(|| !warnings_naming("stall-after-blocking").is_empty());

        let off = gdex::ThreadPool::builder()
            .workers(1)
            .stall_threshold(Duration::ZERO)
            .build()
            .unwrap();
        let t = off.scheduler().spawn_named("unwatched-spinner", async {
            spin(Duration::from_millis(200));
        });
        gdex::block_on(t).unwrap();
        // Deliberate: 50 ms more in which no report may come; a correct
        // watchdog stays quiet however late the check.
        std::thread::sleep(Duration::from_millis(50));
        assert!(warnings_naming("declared-blocker").is_empty());
        assert!(warnings_naming("unwatched-spinner").is_empty());
    });
}

/// The main loop is watched too: a main-scheduler task stuck in one poll is
/// reported, naming the main scheduler.
#[test]
fn a_stuck_main_task_is_reported() {
    let _serial = serial();
    warnings();
    common::watchdog("a_stuck_main_task_is_reported", 60, || {
        common::on_main(|| {
            let t = gdex::Scheduler::main().spawn_named("main-spinner", async {
                // Deliberate: the stall under test.
                spin(Duration::from_millis(300));
            });
            gdex::block_on(t).unwrap();
        });
        let reports = warnings_naming("main-spinner");
        assert_eq!(reports.len(), 1, "{reports:?}");
        assert!(reports[0].contains("main scheduler"), "{}", reports[0]);
    });
}

/// X4/B5: a panicking task is not a stall. A panicking poll runs the panic
/// hook before it unwinds, and with `RUST_BACKTRACE=1` std's default hook
/// captures and symbolizes a backtrace there, which can take longer than a
/// threshold (the first one in a process does); that time is the panic
/// report's, not the task's. Tasks that panic on a pool and on
/// the main scheduler produce no report; a task that sleeps 300 ms in one
/// poll still produces exactly one.
///
/// std reads `RUST_BACKTRACE` once per process, and the panic hook is the
/// process's, so each case runs in a child process (this test binary, this
/// test alone) with `RUST_BACKTRACE=1`:
/// - `default-hook`: std's own hook (where a panic was first reported as a
///   stall), with a 20 ms threshold: the first backtrace of the process
///   takes longer.
/// - `slow-app-hook`: the app installed a hook before starting gdex that
///   takes 100 ms (a crash reporter) and then calls std's, with a 50 ms
///   threshold: every panic takes longer than the threshold.
///
/// The threshold goes to the pool and, by `GDEX_STALL_MS`, to the main
/// scheduler.
#[test]
fn a_panic_with_a_backtrace_is_not_a_stall() {
    const CHILD: &str = "GDEX_TEST_PANIC_STALL_CHILD";
    const CASES: [(&str, u64); 2] = [("default-hook", 20), ("slow-app-hook", 50)];
    let name = "a_panic_with_a_backtrace_is_not_a_stall";
    let Some(case) = std::env::var_os(CHILD) else {
        let _serial = serial();
        // A child that hangs fails the parent by the watchdog.
        common::watchdog(name, 120, || {
            for (case, ms) in CASES {
                let ms = ms.to_string();
                child_run_passes(
                    name,
                    &[
                        (CHILD, case),
                        ("RUST_BACKTRACE", "1"),
                        ("GDEX_STALL_MS", &ms),
                    ],
                );
            }
        });
        return;
    };
    let case = case.to_str().expect("a case name");
    let (_, ms) = CASES
        .into_iter()
        .find(|(c, _)| *c == case)
        .unwrap_or_else(|| panic!("unknown case {case:?}"));
    let threshold = Duration::from_millis(ms);
    if case == "slow-app-hook" {
        let std_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            // Deliberate: the slow crash reporter under test.
            std::thread::sleep(Duration::from_millis(100));
            std_hook(info);
        }));
    }
    warnings();
    common::watchdog(name, 60, || {
        let pool = gdex::ThreadPool::builder()
            .workers(2)
            .stall_threshold(threshold)
            .build()
            .unwrap();
        for i in 0..5 {
            let t = pool
                .scheduler()
                .spawn_named(
                    &format!("pool-panicker-{i}"),
                    async move { panic!("boom {i}") },
                );
            assert!(matches!(gdex::block_on(t), Err(gdex::Error::Panicked(_))));
        }
        common::on_main(|| {
            for i in 0..3 {
                let t = gdex::Scheduler::main().spawn_named(
                    &format!("main-panicker-{i}"),
                    async move { panic!("boom {i}") },
                );
                assert!(matches!(gdex::block_on(t), Err(gdex::Error::Panicked(_))));
            }
        });
        // The watchdog samples every few ms: give it time to have looked.
        // Deliberate: a window in which no report may come; a correct
        // watchdog stays quiet however late the check.
        std::thread::sleep(threshold * 2);
        let reports = warnings_naming("panicker-");
        assert!(
            reports.is_empty(),
            "a panic's report was counted as a stall: {reports:#?}"
        );

        // A real stall is still reported, once.
        let t = pool.scheduler().spawn_named("sleeper-after-panics", async {
            // Deliberate: the stall under test.
            std::thread::sleep(Duration::from_millis(300));
        });
        gdex::block_on(t).unwrap();
        let reports = warnings_naming("sleeper-after-panics");
        assert_eq!(reports.len(), 1, "{reports:?}");
    });
}

/// B5 with fibers on their worker's fiber scheduler: fibers that yield to
/// each other every 10 ms never sit in one poll for 50 ms, so no stall is
/// reported (each resumption that a resumption job runs after its own is a
/// job of its own for the watchdog).
#[test]
fn fibers_that_yield_every_10ms_are_no_stall() {
    let _serial = serial();
    warnings();
    common::watchdog("fibers_yielding_no_stall", 60, || {
        let pool = watched_pool(1, 50);
        let stop = Arc::new(AtomicBool::new(false));
        let fibers: Vec<_> = (0..2)
            .map(|_| {
                let stop = stop.clone();
                pool.scheduler().spawn_fiber(move || {
                    gdex::fiber::wait(gdex::sleep(Duration::from_millis(10))).unwrap();
                    while !stop.load(Ordering::Acquire) {
                        spin(Duration::from_millis(10));
                        gdex::fiber::yield_fiber().unwrap();
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::Release);
        for f in fibers {
            gdex::block_on(f).unwrap();
        }
        // (Other tests' named tasks and main scheduler are reported late
        // into the same log; the fibers here are unnamed.)
        let reported = warnings_naming("stuck in one poll of an unnamed");
        assert!(reported.is_empty(), "{reported:#?}");
    });
}

/// B5: time the whole process was stopped is nobody's poll. A process
/// stopped mid-poll (a debugger's breakpoint, `kill -STOP` and `kill
/// -CONT`, a paused VM or container) freezes the task and the monitor
/// alike; the monitor's next look comes late by the whole pause, and used
/// to count it against the poll that happened to be running. Here a poll of
/// about 150 ms, under a 200 ms threshold, spans a 400 ms stop of the
/// process by a child shell: it is no stall. (The child stops us 100 ms into
/// the poll: the monitor, looking every 50 ms, has seen the poll by then.)
#[test]
fn a_stopped_process_is_no_stall() {
    let _serial = serial();
    warnings();
    common::watchdog("a_stopped_process_is_no_stall", 60, || {
        let pool = watched_pool(1, 200);
        let pid = std::process::id();
        let excused_before = gdex::__stall_monitor_excused_stops();
        let t = pool
            .scheduler()
            .spawn_named("polls-through-a-stop", async move {
                let mut stopper = std::process::Command::new("sh")
                    .arg("-c")
                    .arg(format!(
                        "sleep 0.1; kill -STOP {pid}; sleep 0.4; kill -CONT {pid}"
                    ))
                    .spawn()
                    .expect("run sh");
                // Deliberate: one poll through the stop, short of a stall
                // on either side of it.
                let status = loop {
                    if let Some(status) = stopper.try_wait().unwrap() {
                        break status;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                };
                spin(Duration::from_millis(30));
                status
            });
        let status = gdex::block_on(t).unwrap();
        assert!(status.success(), "the stopping shell failed: {status}");
        // Deliberate: a window in which no report may come; a correct
        // watchdog stays quiet however late the check.
        std::thread::sleep(Duration::from_millis(100));
        let reports = warnings_naming("polls-through-a-stop");
        assert!(reports.is_empty(), "{reports:#?}");
        // Excused as a stop, not as a wait for a CPU: 400 ms less the
        // monitor's period (50 ms) and STOPPED_AFTER.
        let excused = gdex::__stall_monitor_excused_stops() - excused_before;
        assert!(excused >= Duration::from_millis(300), "{excused:?}");
    });
}

/// B5: a monitor kept waiting for a CPU was not stopped. On a loaded
/// machine the monitor wakes late because other threads ran first, the
/// stuck job's among them: that lateness is the job's, and excusing it as
/// a stop of the process hid real stalls (beside 12 busy threads on 2
/// cores, 2 of 10 polls of 140 ms under a 100 ms threshold went
/// unreported). Here the monitor is made to wait for its CPU every time:
/// it runs at `SCHED_IDLE` on one CPU beside two busy threads, while the
/// stuck job spins on another CPU until it is reported and the monitor's
/// wait for a CPU (the kernel's `run_delay`) has grown by 150 ms, far more
/// than 20 ms a look; none of it is excused, and the stall is reported.
/// (Run in a child process: the monitor's policy cannot be set back
/// without privileges.)
#[test]
fn a_monitor_kept_waiting_for_a_cpu_excuses_nothing() {
    let name = "a_monitor_kept_waiting_for_a_cpu_excuses_nothing";
    if ran_in_a_child(name, "GDEX_TEST_MONITOR_WAITS_CHILD") {
        return;
    }
    let cpus = cpus::allowed();
    if cpus.len() < 2 {
        eprintln!("{name}: needs two CPUs, this process may use {cpus:?}; skipped");
        return;
    }
    let (monitor_cpu, job_cpu) = (cpus[0], cpus[1]);
    warnings();
    common::watchdog(name, 60, || {
        let pool = watched_pool(1, 100);
        // The monitor starts with the first watched runner; its thread
        // names itself once it runs.
        let monitor = loop {
            if let Some(tid) = cpus::thread_named("gdex-watchdog") {
                break tid;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        cpus::pin(monitor, monitor_cpu);
        cpus::idle_policy(monitor);
        let stop = Arc::new(AtomicBool::new(false));
        let busy: Vec<_> = (0..2)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    cpus::pin(0, monitor_cpu);
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        let waited_before = cpus::run_delay(monitor);
        let excused_before = gdex::__stall_monitor_excused_stops();
        let t = pool
            .scheduler()
            .spawn_named("spins-beside-a-waiting-monitor", async move {
                cpus::pin(0, job_cpu);
                let start = std::time::Instant::now();
                // Deliberate: the stall under test, until it is reported and
                // the monitor has waited for its CPU long enough for the
                // test's premise (or for 5 s: then unreported, or not kept
                // waiting).
                let kept_waiting =
                    || cpus::run_delay(monitor) - waited_before > Duration::from_millis(150);
                while (warnings_naming("spins-beside-a-waiting-monitor").is_empty()
                    || !kept_waiting())
                    && start.elapsed() < Duration::from_secs(5)
                {
                    spin(Duration::from_millis(1));
                }
                start.elapsed()
            });
        let spun = gdex::block_on(t).unwrap();
        let waited = cpus::run_delay(monitor) - waited_before;
        let excused = gdex::__stall_monitor_excused_stops() - excused_before;
        stop.store(true, Ordering::Relaxed);
        for b in busy {
            b.join().unwrap();
        }
        eprintln!("spun {spun:?}; the monitor waited {waited:?} for a CPU; excused {excused:?}");
        assert!(
            waited > Duration::from_millis(150),
            "the monitor was not kept waiting ({waited:?}): the test's premise failed"
        );
        assert!(
            excused < Duration::from_millis(20),
            "the monitor's wait for a CPU ({waited:?}) was excused as a stop ({excused:?})"
        );
        let reports = warnings_naming("spins-beside-a-waiting-monitor");
        assert_eq!(reports.len(), 1, "unreported after {spun:?}: {reports:?}");
    });
}

/// The CPUs and scheduling of this process's threads, for a test that
/// keeps the monitor waiting for a CPU (Linux).
mod cpus {
    /// The CPUs this process may run on.
    pub fn allowed() -> Vec<usize> {
        // SAFETY: a zeroed cpu_set_t is a valid empty set, which the call
        // fills.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(
                libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
                0
            );
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect()
        }
    }

    /// Thread `tid` of this process (0: the calling one) runs on `cpu` only.
    pub fn pin(tid: i32, cpu: usize) {
        // SAFETY: a zeroed cpu_set_t is a valid empty set; the call reads it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            assert_eq!(
                libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set),
                0,
                "pin thread {tid} to CPU {cpu}"
            );
        }
    }

    /// Thread `tid` runs only when nothing else wants its CPU
    /// (`SCHED_IDLE`: no privilege needed to lower a policy).
    pub fn idle_policy(tid: i32) {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid sched_param for SCHED_IDLE.
        let r = unsafe { libc::sched_setscheduler(tid, libc::SCHED_IDLE, &param) };
        assert_eq!(r, 0, "SCHED_IDLE for thread {tid}");
    }

    /// The id of this process's thread named `name`, once it has named
    /// itself.
    pub fn thread_named(name: &str) -> Option<i32> {
        std::fs::read_dir("/proc/self/task").ok()?.find_map(|e| {
            let e = e.ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            (comm.trim_end() == name).then(|| e.file_name().to_str()?.parse().ok())?
        })
    }

    /// Thread `tid`'s time spent waiting for a CPU (the kernel's
    /// `run_delay`).
    pub fn run_delay(tid: i32) -> std::time::Duration {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
            .expect("the thread's schedstat");
        let nanos = stat
            .split_whitespace()
            .nth(1)
            .and_then(|f| f.parse().ok())
            .expect("schedstat's run_delay");
        std::time::Duration::from_nanos(nanos)
    }
}

/// B5 with X4: a process stopped while a job is in the panic hook excuses
/// the stop once, not twice. The stop is inside the hook's time, which is
/// the panic report's (X4), and it is the time the whole process was
/// stopped (B5): subtracting it as both left the job's own time after the
/// hook short by the whole stop, and a task that caught its panic and then
/// spun 250 ms under a 100 ms threshold went unreported (a debugger's
/// breakpoint in a crash reporter's hook, then `continue`). The hook here
/// has a child shell stop the process for 400 ms, and runs 50 ms more after
/// it (the monitor looks while it is still inside); 30 ms spun after it is
/// still no stall. The app's hook is the
/// process's, so the case runs in a child process, as in
/// `a_panic_with_a_backtrace_is_not_a_stall`.
#[test]
fn a_stop_inside_the_panic_hook_is_excused_once() {
    let name = "a_stop_inside_the_panic_hook_is_excused_once";
    if ran_in_a_child(name, "GDEX_TEST_STOP_IN_HOOK_CHILD") {
        return;
    }
    let pid = std::process::id();
    // The app's hook, set before gdex starts (which wraps it, X4): for the
    // task's panic, it has the process stopped for 400 ms, then takes 50 ms
    // more; any other panic (a failed assertion) goes to std's hook.
    let std_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<&str>() != Some(&"stop in the hook") {
            return std_hook(info);
        }
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("kill -STOP {pid}; sleep 0.4; kill -CONT {pid}"))
            .status()
            .expect("run sh");
        assert!(status.success(), "the stopping shell failed: {status}");
        // Deliberate: the rest of the hook, which the monitor looks into.
        spin(Duration::from_millis(50));
    }));
    warnings();
    common::watchdog(name, 60, || {
        let pool = watched_pool(1, 100);
        let after_the_hook = |name: &str, spun: u64| {
            let t = pool.scheduler().spawn_named(name, async move {
                let caught = std::panic::catch_unwind(|| panic!("stop in the hook"));
                assert!(caught.is_err());
                // Deliberate: the poll's own time, after the hook.
                spin(Duration::from_millis(spun));
            });
            gdex::block_on(t).unwrap();
        };
        // The stop and the hook are excused: 30 ms after them is no stall.
        after_the_hook("quiet-after-a-stop-in-the-hook", 30);
        // Deliberate: a window in which no report may come; a correct
        // watchdog stays quiet however late the check.
        std::thread::sleep(Duration::from_millis(100));
        let reports = warnings_naming("quiet-after-a-stop-in-the-hook");
        assert!(reports.is_empty(), "{reports:#?}");
        // But each only once: 250 ms after them is one.
        after_the_hook("spins-after-a-stop-in-the-hook", 250);
        let reports = warnings_naming("spins-after-a-stop-in-the-hook");
        assert_eq!(
            reports.len(),
            1,
            "250 ms spun after the hook went unreported: {reports:?}"
        );
    });
}

/// B6: a nested loop suspends the outer job. A main task that runs a
/// nested loop (a `block_on` of another main task, dispatched by it) and
/// then spins is reported once, by its name: the nested dispatch neither
/// ends the outer job for the monitor nor clears its name. And the outer
/// job keeps its stall clock: 90 ms before the nested loop and 90 ms after
/// are one 180 ms poll, over the 100 ms threshold (with room for the
/// monitor's 25 ms between looks on either side: each half alone is not).
#[test]
fn a_task_that_spins_after_a_nested_loop_is_reported_by_name() {
    let _serial = serial();
    warnings();
    common::watchdog("a_task_that_spins_after_a_nested_loop", 60, || {
        common::on_main(|| {
            let main = gdex::Scheduler::main();
            let after = main.spawn_named("spins-after-nesting", async {
                let inner = gdex::Scheduler::main().spawn(async { 1 });
                assert_eq!(gdex::block_on(inner).unwrap(), 1);
                // Deliberate: the stall under test.
                spin(Duration::from_millis(300));
            });
            gdex::block_on(after).unwrap();
            let around = main.spawn_named("spins-around-nesting", async {
                // Deliberate: 90 + 90 ms in one poll.
                spin(Duration::from_millis(90));
                let inner = gdex::Scheduler::main().spawn(async { 2 });
                assert_eq!(gdex::block_on(inner).unwrap(), 2);
                spin(Duration::from_millis(90));
            });
            gdex::block_on(around).unwrap();
        });
        let reports = warnings_naming("spins-after-nesting");
        assert_eq!(reports.len(), 1, "{reports:?}");
        let reports = warnings_naming("spins-around-nesting");
        assert_eq!(reports.len(), 1, "{reports:?}");
    });
}

/// B6: time spent waiting in a nested loop is not the outer task's poll.
/// A main task whose `block_on` waits 600 ms for a GLib timeout, while a
/// 1 ms GLib timer ticks in the nested loop (the main loop keeps turning),
/// is no stall.
#[test]
fn a_nested_loop_waiting_idly_is_no_stall() {
    let _serial = serial();
    warnings();
    common::watchdog("a_nested_loop_waiting_idly_is_no_stall", 60, || {
        common::on_main(|| {
            let (ticks, timer) = common::tick_counter(&glib::MainContext::default());
            let waiting = gdex::Scheduler::main().spawn_named("waits-in-nested-loop", async {
                gdex::block_on(glib::timeout_future(Duration::from_millis(600)));
            });
            gdex::block_on(waiting).unwrap();
            timer.destroy();
            assert!(ticks.load(Ordering::Relaxed) > 10, "the nested loop turned");
        });
        let reports = warnings_naming("waits-in-nested-loop");
        assert!(reports.is_empty(), "{reports:?}");
    });
}

/// B6 across priorities (P12): a `HIGH` main task that runs a nested
/// loop (a modal dialog's, here a plain `MainLoop`) in which the default
/// main scheduler's tasks keep running is suspended while they do: the
/// schedulers of one context share one runner.
#[test]
fn a_nested_loop_running_another_prioritys_tasks_is_no_stall() {
    let _serial = serial();
    warnings();
    common::watchdog("a_nested_loop_running_another_prioritys_tasks", 60, || {
        common::on_main(|| {
            let main = gdex::Scheduler::main();
            let busy = main.spawn(async {
                // 600 short polls, back to back: the nested loop is in the
                // default scheduler's dispatch nearly all the time.
                for _ in 0..600 {
                    spin(Duration::from_millis(1));
                    gdex::yield_now().await;
                }
            });
            let outer = main.with_priority(glib::Priority::HIGH).spawn_named(
                "high-with-nested-loop",
                async move {
                    let main_loop = glib::MainLoop::new(None, false);
                    let quit = main_loop.clone();
                    gdex::Scheduler::main()
                        .spawn(async move {
                            busy.await.unwrap();
                            quit.quit();
                        })
                        .detach();
                    main_loop.run();
                },
            );
            gdex::block_on(outer).unwrap();
        });
        let reports = warnings_naming("high-with-nested-loop");
        assert!(reports.is_empty(), "{reports:?}");
    });
}

/// Runs a task named `name` on a scheduler of a private context `c1`
/// (iterated here, not thread-default); the task pushes another context
/// `x` as thread-default and `block_on`s work there for about 600 ms in
/// 10 ms steps: `c1`'s loop is blocked all that time. With
/// `on_x_scheduler`, the steps are a task of `Scheduler::for_context(&x)`;
/// without, the future given to `block_on` itself.
fn outer_blocked_by_another_context(name: &'static str, on_x_scheduler: bool) {
    let c1 = glib::MainContext::new();
    let x = glib::MainContext::new();
    let s1 = gdex::Scheduler::for_context(&c1);
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let _outer = s1.spawn_named(name, async move {
        x.with_thread_default(|| {
            let steps = async {
                for _ in 0..60 {
                    // Deliberate: short polls, none a stall of its own.
                    spin(Duration::from_millis(10));
                    gdex::yield_now().await;
                }
            };
            if on_x_scheduler {
                let inner = gdex::Scheduler::for_context(&x).spawn(steps);
                gdex::block_on(inner).unwrap();
            } else {
                gdex::block_on(steps);
            }
        })
        .unwrap();
        d.store(true, Ordering::SeqCst);
    });
    let _held = c1.acquire().unwrap();
    assert!(common::pump_for(&c1, Duration::from_secs(20), || done.load(Ordering::SeqCst)));
}

/// B6: a nested loop of *another* context (a `block_on` of a pushed
/// thread-default) blocks the dispatching one, and still counts, whether
/// the nested loop polls the future itself or dispatches that context's
/// own scheduler (whose dispatches suspend only their own runner's job).
#[test]
fn a_nested_loop_of_another_context_still_counts() {
    let _serial = serial();
    warnings();
    common::watchdog("a_nested_loop_of_another_context_still_counts", 60, || {
        outer_blocked_by_another_context("blocked-by-a-future", false);
        outer_blocked_by_another_context("blocked-by-x-scheduler", true);
        for name in ["blocked-by-a-future", "blocked-by-x-scheduler"] {
            let reports = warnings_naming(name);
            assert_eq!(reports.len(), 1, "{name}: {:?}", warnings().lock().unwrap());
        }
    });
}

/// B5 and P10: a pool worker that was sent a wake-up and has not acted on
/// it for the threshold is reported once, naming it. Here worker `w`'s
/// thread is busy for 600 ms in a GLib callback on its own context (to the
/// pool it is parked: no job of its runs, so no job is stuck) when a pinned
/// task of `w` is woken from another thread: only `w` may run it, so the
/// wake-up waits for the callback, and the report says so. The task runs
/// once the callback returns; the other worker, woken the same way while
/// idle, is not reported.
#[test]
fn a_worker_that_does_not_act_on_a_wake_up_is_reported() {
    let _serial = serial();
    warnings();
    common::watchdog("unwoken_worker_is_reported", 60, || {
        let pool = watched_pool(2, 100);
        // A pinned task on each worker (they go round-robin), each waiting
        // to be woken, and telling its worker and context.
        let mut pinned = Vec::new();
        for _ in 0..2 {
            let (go, woken) = futures::channel::oneshot::channel::<()>();
            let (tell, told) = std::sync::mpsc::channel();
            let task = pool.spawn_pinned(move || async move {
                let context = glib::MainContext::thread_default().expect("a worker's context");
                tell.send(context).unwrap();
                let _ = woken.await;
                std::thread::current().name().unwrap().to_owned()
            });
            let context = told.recv().unwrap();
            pinned.push((go, task, context));
        }
        let (busy_go, busy_task, busy_context) = pinned.remove(0);
        let (idle_go, idle_task, _) = pinned.remove(0);
        common::wait_until(|| pool.metrics().workers.iter().all(|w| w.parked));
        // The busy callback under test.
        let _left = common::busy_in_a_callback(&busy_context, Duration::from_millis(600));
        busy_go.send(()).unwrap();
        let busy_worker = gdex::block_on(busy_task).unwrap();
        idle_go.send(()).unwrap();
        let idle_worker = gdex::block_on(idle_task).unwrap();
        assert_ne!(busy_worker, idle_worker);
        let reports = warnings_naming("has not woken");
        assert_eq!(reports.len(), 1, "exactly one report: {reports:?}");
        assert!(
            reports[0].contains(&format!("{busy_worker} was sent a wake-up")),
            "names the worker: {}",
            reports[0]
        );
    });
}

/// B6: the monitor itself costs little while work runs. A worker that
/// wakes every millisecond for a timer (a fiber, then a task, waiting on a
/// 1 ms GLib timeout in a loop, on a pool of 2 whose busy workers the
/// monitor samples every 1 ms for P6's hand-over) finds the monitor
/// watching: starting a slice wakes it with a syscall now and then, not at
/// every other tick. (Before, the monitor parked, or slept its slow period,
/// after every look that found the worker idle, and the worker's next slice
/// woke it again: 55 to 234 wake-ups per 300 ticks on adf18eb, the
/// first round failing; none now.) The count is the library's own
/// (`__stall_monitor_wakes`), not a CPU time: it does not depend on the
/// machine's load. The CPU itself is the `monitor_cpu` row of the compare
/// bench.
#[test]
fn a_worker_on_a_1ms_timer_seldom_wakes_the_monitor() {
    let _serial = serial();
    common::watchdog("a_worker_on_a_1ms_timer_seldom_wakes", 60, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        for fiber in [true, false] {
            let ticks = Arc::new(AtomicUsize::new(0));
            let stop = Arc::new(AtomicBool::new(false));
            let (t, s) = (ticks.clone(), stop.clone());
            let tick = || glib::timeout_future(Duration::from_millis(1));
            let (fiber, task) = if fiber {
                let f = pool.scheduler().spawn_fiber(move || {
                    while !s.load(Ordering::Relaxed) {
                        gdex::fiber::wait(tick()).unwrap();
                        t.fetch_add(1, Ordering::Relaxed);
                    }
                });
                (Some(f), None)
            } else {
                let task = pool.scheduler().spawn(async move {
                    while !s.load(Ordering::Relaxed) {
                        tick().await;
                        t.fetch_add(1, Ordering::Relaxed);
                    }
                });
                (None, Some(task))
            };
            common::wait_until(|| ticks.load(Ordering::Relaxed) >= 20);
            let wakes_before = gdex::__stall_monitor_wakes();
            let ticks_before = ticks.load(Ordering::Relaxed);
            let n = common::stress(300);
            common::wait_until(|| ticks.load(Ordering::Relaxed) >= ticks_before + n);
            let wakes = gdex::__stall_monitor_wakes() - wakes_before;
            let ticked = ticks.load(Ordering::Relaxed) - ticks_before;
            stop.store(true, Ordering::Relaxed);
            if let Some(f) = fiber {
                gdex::block_on(f).unwrap();
            }
            if let Some(task) = task {
                gdex::block_on(task).unwrap();
            }
            eprintln!("{ticked} timer ticks woke the monitor {wakes} times");
            assert!(
                wakes as usize * 10 <= ticked,
                "{ticked} ticks of a 1 ms timer woke the stall monitor {wakes} times: a worker \
                 that starts a slice every millisecond should find it awake (B6)"
            );
        }
        pool.shutdown();
    });
}
