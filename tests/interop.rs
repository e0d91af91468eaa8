//! Interop: gdex schedulers as `futures` spawners, and gdex's debug log in
//! GLib's structured log (domain `gdex`).

mod common;

use std::process::Command;

use common::{on_main, watchdog};
use futures::task::{LocalSpawn, LocalSpawnExt, Spawn, SpawnExt};

/// What a crate that takes a spawner does with it.
fn library_code<S: Spawn>(spawner: &S) -> futures::future::RemoteHandle<usize> {
    spawner
        .spawn_with_handle(async { std::thread::current().name().unwrap_or("").len() })
        .expect("the spawner accepts work")
}

fn local_library_code<S: LocalSpawn>(spawner: &S) -> futures::future::RemoteHandle<String> {
    let local = std::rc::Rc::new("local".to_owned()); // !Send
    spawner
        .spawn_local_with_handle(async move { (*local).clone() })
        .expect("the spawner accepts local work")
}

#[test]
fn schedulers_are_futures_spawners() {
    watchdog("schedulers_are_futures_spawners", 30, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let s = pool.scheduler();
        // "gdex-worker-N": the work ran on a worker.
        assert!(gdex::block_on(library_code(&s)) >= "gdex-worker-0".len());
        on_main(|| {
            let main = gdex::Scheduler::main();
            assert_eq!(gdex::block_on(local_library_code(&main)), "local");
            assert!(gdex::block_on(library_code(&main)) > 0);
        });
        pool.shutdown();
        let refused = SpawnExt::spawn(&s, async {}).unwrap_err();
        assert!(refused.is_shutdown());
        assert!(s.status().is_err());
    });
}

const CHILD: &str = "GDEX_TEST_LOG_CHILD";

#[test]
fn child_log() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    // Its own watchdog: a hung child ends itself rather than outlive the
    // parent's.
    watchdog("child_log", 30, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        assert_eq!(
            gdex::block_on(pool.scheduler().spawn(async { 1 })).unwrap(),
            1
        );
        pool.shutdown();
    });
}

/// The child's stdout and stderr.
fn run_child(debug: Option<&str>) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_log", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env_remove("G_MESSAGES_DEBUG");
    if let Some(domains) = debug {
        cmd.env("G_MESSAGES_DEBUG", domains);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    // GLib's standard writer puts debug messages on stdout.
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// `G_MESSAGES_DEBUG=gdex` shows gdex's debug messages (pool start and
/// shutdown, blocking threads) through GLib's log writer; without it they
/// are silent.
#[test]
fn debug_messages_go_to_the_glib_log_under_the_gdex_domain() {
    watchdog("debug_messages_go_to_the_glib_log", 60, || {
        let shown = run_child(Some("gdex"));
        assert!(
            shown.contains("gdex-DEBUG") && shown.contains("started a pool of 2 workers"),
            "{shown}"
        );
        assert!(
            shown.contains("shutting down a pool of 2 workers"),
            "{shown}"
        );
        let quiet = run_child(None);
        assert!(!quiet.contains("gdex-DEBUG"), "{quiet}");
    });
}
