//! Interop (unnumbered in DESIGN.md): gdex's schedulers (S1, S2) are
//! `futures` spawners, and gdex's debug log goes to GLib's structured log
//! (domain `gdex`).

use crate::common;

use common::{is_child, on_main, run_child_passing, watchdog};
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

#[test]
#[ignore = "run by debug_messages_go_to_the_glib_log_under_the_gdex_domain"]
fn child_log() {
    if !is_child() {
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

/// The output (stdout, where GLib's standard writer puts debug messages,
/// and stderr) of `child_log` run with `G_MESSAGES_DEBUG` set to `domains`
/// (empty: no debug messages, as when it is not set).
fn log_of_a_child(domains: &str) -> String {
    run_child_passing("child_log", &[("G_MESSAGES_DEBUG", domains)], 60, "")
}

/// `G_MESSAGES_DEBUG=gdex` shows gdex's debug messages (pool start and
/// shutdown, blocking threads) through GLib's log writer; without it they
/// are silent.
#[test]
fn debug_messages_go_to_the_glib_log_under_the_gdex_domain() {
    watchdog("debug_messages_go_to_the_glib_log", 60, || {
        let shown = log_of_a_child("gdex");
        assert!(
            shown.contains("gdex-DEBUG") && shown.contains("started a pool of 2 workers"),
            "{shown}"
        );
        assert!(
            shown.contains("shutting down a pool of 2 workers"),
            "{shown}"
        );
        let quiet = log_of_a_child("");
        assert!(!quiet.contains("gdex-DEBUG"), "{quiet}");
    });
}

/// libdex 1.2's stream cases (`DataInputStream/read_line_utf8`,
/// `read_upto`, `OutputStream/writev_all`), which test libdex's wrappers
/// of GIO calls: gdex has none, and gio-rs's `_future` calls do the same
/// from a gdex task pinned to a worker (they are `!Send`) and from a
/// fiber.
#[test]
fn gio_stream_calls_are_awaited_from_pool_tasks_and_fibers() {
    use gdex::gio::prelude::*;
    use gdex::{gio, glib};
    watchdog("gio-streams", 30, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let lines = pool.scheduler().spawn_pinned(|| async {
            let bytes = glib::Bytes::from_static("héllo\nwörld;rest".as_bytes());
            let data = gio::DataInputStream::new(&gio::MemoryInputStream::from_bytes(&bytes));
            let line = data
                .read_line_utf8_future(glib::Priority::DEFAULT)
                .await
                .unwrap();
            let upto = data
                .read_upto_future(b";", glib::Priority::DEFAULT)
                .await
                .unwrap();
            (
                line.map(|l| l.to_string()),
                String::from_utf8(upto.to_vec()).unwrap(),
            )
        });
        let (line, upto) = gdex::block_on(lines).unwrap();
        assert_eq!(line.as_deref(), Some("héllo"));
        assert_eq!(upto, "wörld");

        let written = pool.scheduler().spawn_fiber(|| {
            let out = gio::MemoryOutputStream::new_resizable();
            let vectors = [&b"gather "[..], &b"and write"[..]];
            let (_, n, partial) =
                gdex::fiber::wait_output(out.writev_all_future(vectors, glib::Priority::DEFAULT))
                    .unwrap()
                    .map_err(|(_, e)| e)
                    .unwrap();
            assert!(partial.is_none(), "{partial:?}");
            gdex::fiber::wait(out.close_future(glib::Priority::DEFAULT)).unwrap();
            (n, out.steal_as_bytes().to_vec())
        });
        let (n, bytes) = gdex::block_on(written).unwrap();
        assert_eq!(n, 16);
        assert_eq!(bytes, b"gather and write");
    });
}
