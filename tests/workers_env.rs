//! P1: `GDEX_WORKERS` sets the default pool's size; an unusable value is
//! reported once with a warning naming the variable, and the CPU count is
//! used. Each case runs in a child process, since the default is read once.

mod common;

use std::process::Command;

const CHILD: &str = "GDEX_TEST_WORKERS_CHILD";

/// The child's body: build two default-sized pools and run a task on each.
/// Prints the worker counts for the parent to read.
#[test]
fn child_default_pool() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    // Its own watchdog: a hung child ends itself rather than outlive the
    // parent's.
    common::watchdog("child_default_pool", 30, || {
        let a = gdex::ThreadPool::builder().build().unwrap();
        let b = gdex::ThreadPool::default();
        for pool in [&a, &b] {
            let t = pool.scheduler().spawn(async { 2 + 2 });
            assert_eq!(gdex::block_on(t).unwrap(), 4);
        }
        println!("WORKERS={} {}", a.workers(), b.workers());
        println!("TPC={}", a.is_thread_per_core());
        if std::env::var_os("GDEX_TEST_SPIN").is_some() {
            // A poll that blocks its worker for 500 ms: the watchdog's business.
            // Deliberate: the stall under test.
            let t = a.scheduler().spawn_named("env-spinner", async {
                let t = std::time::Instant::now();
                while t.elapsed() < std::time::Duration::from_millis(500) {}
            });
            gdex::block_on(t).unwrap();
        }
    });
}

fn run_child(value: &str) -> (String, String) {
    run_child_with(&[("GDEX_WORKERS", value)])
}

fn run_child_with(vars: &[(&str, &str)]) -> (String, String) {
    // One child at a time: children that compete for the CPU make the
    // watchdog's samples late.
    let _one = common::serial();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "child_default_pool",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD, "1")
    .env_remove("G_DEBUG");
    for (k, v) in vars {
        cmd.env(k, v);
    }
    // A child that hangs fails the test by the watchdog.
    let out = common::watchdog(&format!("workers_env child {vars:?}"), 60, || {
        cmd.output().unwrap()
    });
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "child with {vars:?} failed:\n{stdout}\n{stderr}"
    );
    (stdout, stderr)
}

fn workers_line(stdout: &str) -> String {
    stdout
        .lines()
        .find_map(|l| l.find("WORKERS=").map(|i| l[i..].to_owned()))
        .unwrap_or_else(|| panic!("no WORKERS line in:\n{stdout}"))
}

#[test]
fn unusable_values_warn_once_and_use_the_cpu_count() {
    let cpus = num_cpus::get();
    for value in ["0", "abc", "-3", "100000"] {
        let (stdout, stderr) = run_child(value);
        assert_eq!(
            workers_line(&stdout),
            format!("WORKERS={cpus} {cpus}"),
            "GDEX_WORKERS={value}"
        );
        let warnings: Vec<_> = stderr
            .lines()
            .filter(|l| l.contains("GDEX_WORKERS"))
            .collect();
        assert_eq!(
            warnings.len(),
            1,
            "one warning for GDEX_WORKERS={value}:\n{stderr}"
        );
        assert!(warnings[0].contains("WARNING"), "{}", warnings[0]);
        assert!(
            warnings[0].contains(&format!("{value:?}")),
            "names the value: {}",
            warnings[0]
        );
    }
}

#[test]
fn a_usable_value_sets_the_size_silently() {
    let (stdout, stderr) = run_child("3");
    assert_eq!(workers_line(&stdout), "WORKERS=3 3");
    assert!(!stderr.contains("GDEX_WORKERS"), "{stderr}");
}

/// P9: `GDEX_THREAD_PER_CORE=1` turns thread-per-core mode on; an unusable
/// value is reported once and leaves it off.
#[test]
fn thread_per_core_from_the_environment() {
    let (stdout, stderr) = run_child_with(&[("GDEX_THREAD_PER_CORE", "1")]);
    assert!(stdout.contains("TPC=true"), "{stdout}");
    assert!(!stderr.contains("GDEX_THREAD_PER_CORE"), "{stderr}");
    let (stdout, stderr) = run_child_with(&[("GDEX_THREAD_PER_CORE", "maybe")]);
    assert!(stdout.contains("TPC=false"), "{stdout}");
    let warnings = stderr
        .lines()
        .filter(|l| l.contains("GDEX_THREAD_PER_CORE"))
        .count();
    assert_eq!(warnings, 1, "{stderr}");
}

/// B5: the watchdog reports a 500 ms poll by default, and `GDEX_STALL_MS=0`
/// turns it off.
#[test]
fn stall_watchdog_from_the_environment() {
    let (_, stderr) = run_child_with(&[("GDEX_TEST_SPIN", "1")]);
    assert_eq!(
        stderr.lines().filter(|l| l.contains("env-spinner")).count(),
        1,
        "one report by default:\n{stderr}"
    );
    let (_, stderr) = run_child_with(&[("GDEX_TEST_SPIN", "1"), ("GDEX_STALL_MS", "0")]);
    assert!(
        !stderr.contains("env-spinner"),
        "GDEX_STALL_MS=0 is quiet:\n{stderr}"
    );
    // An unusable value is reported once, naming it, and the default holds.
    let (_, stderr) = run_child_with(&[("GDEX_TEST_SPIN", "1"), ("GDEX_STALL_MS", "soon")]);
    let warnings: Vec<_> = stderr
        .lines()
        .filter(|l| l.contains("GDEX_STALL_MS"))
        .collect();
    assert_eq!(warnings.len(), 1, "one warning:\n{stderr}");
    assert!(
        warnings[0].contains("\"soon\"") && warnings[0].contains("using 100"),
        "{}",
        warnings[0]
    );
    assert_eq!(
        stderr.lines().filter(|l| l.contains("env-spinner")).count(),
        1,
        "the 100 ms default still reports:\n{stderr}"
    );
}
