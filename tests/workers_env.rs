//! P1: `GDEX_WORKERS` sets the default pool's size; an unusable value is
//! reported once with a warning naming the variable, and the CPU count is
//! used. Each case runs in a child process, since the default is read once.

use std::process::Command;

const CHILD: &str = "GDEX_TEST_WORKERS_CHILD";

/// The child's body: build two default-sized pools and run a task on each.
/// Prints the worker counts for the parent to read.
#[test]
fn child_default_pool() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let a = gdex::ThreadPool::builder().build().unwrap();
    let b = gdex::ThreadPool::default();
    for pool in [&a, &b] {
        let t = pool.scheduler().spawn(async { 2 + 2 });
        assert_eq!(gdex::block_on(t).unwrap(), 4);
    }
    println!("WORKERS={} {}", a.workers(), b.workers());
}

fn run_child(value: &str) -> (String, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_default_pool",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("GDEX_WORKERS", value)
        .env_remove("G_DEBUG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "child with GDEX_WORKERS={value} failed:\n{stdout}\n{stderr}"
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
