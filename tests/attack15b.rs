//! Attack review of `gdex::dbus::export` (G3). Six of these tests failed on
//! 8549305, the commit under review (two aborted, one deadlocked, two
//! waited for the caller's timeout, one aborted in the `IntoFuture`): an
//! out-args reply of the wrong type or `None`, an export from a thread
//! without a context and its closure freed on another thread, an export
//! dropped by its own refused future, a panicking `into_future`. The other
//! three pin down what was found sound. Each test that can abort or hang
//! the process runs its body in a child process (`run_child`) so that the
//! parent reports a plain failure.

mod common;

use std::future::IntoFuture;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{is_child, on_main, run_child, watchdog};
use gdex::gio::prelude::*;
use gdex::{gio, glib};

const XML: &str = r#"<node>
  <interface name="org.gdex.Attack">
    <method name="Sum"><arg type="t" direction="in"/><arg type="t" direction="out"/></method>
    <method name="Void"/>
  </interface>
</node>"#;
const PATH: &str = "/org/gdex/Attack";
const IFACE: &str = "org.gdex.Attack";

type Reply = Result<Option<glib::Variant>, glib::Error>;

fn interface() -> gio::DBusInterfaceInfo {
    gio::DBusNodeInfo::for_xml(XML)
        .unwrap()
        .lookup_interface(IFACE)
        .unwrap()
}

/// A server on a fresh socket, a client connected to it, and the server's
/// side of that connection (to export on, from the test). Call on_main.
struct Peer {
    server: gio::DBusServer,
    client: gio::DBusConnection,
    conn: gio::DBusConnection,
}

fn peer() -> Peer {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "gdex-attack15b-{}-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
        glib::monotonic_time()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let address = format!("unix:path={}", dir.join("socket").display());
    let server = gio::DBusServer::new_sync(
        &address,
        gio::DBusServerFlags::NONE,
        &gio::dbus_generate_guid(),
        None::<&gio::DBusAuthObserver>,
        gio::Cancellable::NONE,
    )
    .unwrap();
    let conns = Arc::new(Mutex::new(Vec::<gio::DBusConnection>::new()));
    let c = conns.clone();
    server.connect_new_connection(move |_, connection| {
        c.lock().unwrap().push(connection.clone());
        true
    });
    server.start();
    let client = gdex::block_on(gio::DBusConnection::for_address_future(
        &server.client_address(),
        gio::DBusConnectionFlags::AUTHENTICATION_CLIENT,
        None,
    ))
    .unwrap();
    pump_while(|| !conns.lock().unwrap().is_empty());
    let conn = conns.lock().unwrap()[0].clone();
    Peer {
        server,
        client,
        conn,
    }
}

fn pump_while(mut done: impl FnMut() -> bool) {
    let main = glib::MainContext::default();
    while !done() {
        while main.iteration(false) {}
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn call(
    client: &gio::DBusConnection,
    method: &str,
    args: Option<glib::Variant>,
    timeout_ms: i32,
) -> Result<glib::Variant, glib::Error> {
    gdex::block_on(client.call_future(
        None,
        PATH,
        IFACE,
        method,
        args.as_ref(),
        None,
        gio::DBusCallFlags::NONE,
        timeout_ms,
    ))
}

/// Runs the ignored test `name` in a child and asserts it passed.
fn in_child(name: &str) {
    let (status, out) = run_child(name, &[], 60);
    assert!(
        status.is_some_and(|s| s.success()),
        "child {name} did not pass (status {status:?}):\n{out}"
    );
}

// ---------------------------------------------------------------------------
// D1: a method with out-args whose future gives Ok(None), or a tuple of the
// wrong type: GLib (2.74 .. main) logs a g_warning and sends NO reply, so the
// caller waits for its whole timeout (forever with G_MAXINT).

fn wrong_reply_is_answered(reply: fn() -> Reply) {
    watchdog("attack15b_wrong_reply", 60, || {
        on_main(|| {
            let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
            let p = peer();
            let _export = gdex::dbus::export(
                &p.conn,
                PATH,
                &interface(),
                &pool.scheduler(),
                move |_| async move { reply() },
            )
            .unwrap();
            let start = Instant::now();
            let err = call(&p.client, "Sum", Some((3u64,).to_variant()), 3_000).unwrap_err();
            assert!(
                !err.matches(gio::IOErrorEnum::TimedOut),
                "the caller got no reply: {err} after {:?}",
                start.elapsed()
            );
            p.server.stop();
        })
    });
}

// (In children: an Export dropped on one harness thread is freed by the
// next test's thread, D2b, which would abort this binary.)
#[test]
fn out_args_method_whose_future_gives_none_gets_a_reply() {
    in_child("child_reply_none");
}

#[test]
#[ignore]
fn child_reply_none() {
    if is_child() {
        wrong_reply_is_answered(|| Ok(None));
    }
}

#[test]
fn out_args_method_whose_future_gives_a_wrong_tuple_gets_a_reply() {
    in_child("child_reply_wrong_tuple");
}

#[test]
#[ignore]
fn child_reply_wrong_tuple() {
    if is_child() {
        wrong_reply_is_answered(|| Ok(Some(("not a u64",).to_variant())));
    }
}

// ---------------------------------------------------------------------------
// D2: export() on a thread with no thread-default context registers on the
// global default context; GIO calls the (non-Send) handler on the thread
// that iterates it, where glib-rs's ThreadGuard (Closure::new_local, used by
// gio-rs's RegistrationBuilder) panics inside an extern "C" marshal: abort.

#[test]
fn export_from_a_thread_without_a_context_does_not_abort() {
    in_child("child_export_from_a_thread_without_a_context");
}

#[test]
#[ignore]
fn child_export_from_a_thread_without_a_context() {
    if !is_child() {
        return;
    }
    watchdog("attack15b_other_thread", 30, || {
        on_main(|| {
            let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
            let p = peer();
            let conn = p.conn.clone();
            let scheduler = pool.scheduler();
            // A helper thread (no thread-default context) exports; Export is
            // Send, so it comes back here.
            let export = std::thread::spawn(move || {
                gdex::dbus::export(&conn, PATH, &interface(), &scheduler, |_| async {
                    Ok(Some((7u64,).to_variant()))
                })
                .unwrap()
            })
            .join()
            .unwrap();
            let reply = call(&p.client, "Sum", Some((3u64,).to_variant()), 10_000).unwrap();
            assert_eq!(reply.get::<(u64,)>(), Some((7,)));
            drop(export);
            p.server.stop();
        })
    });
}

// ---------------------------------------------------------------------------
// D3: the spawn in the method handler holds `Calls::group`'s lock while
// `group.spawn(member)` runs; on a closed pool the member (and the user's
// future) is dropped right there. A future that owns the Export (an
// "unexport me" method) runs Export::drop -> cancel_all -> the same lock:
// self-deadlock of the thread running GIO's dispatch.

#[test]
fn export_dropped_by_its_refused_future_does_not_deadlock() {
    in_child("child_export_dropped_by_its_refused_future");
}

#[test]
#[ignore]
fn child_export_dropped_by_its_refused_future() {
    if !is_child() {
        return;
    }
    watchdog("attack15b_self_deadlock", 15, || {
        on_main(|| {
            let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
            let p = peer();
            let slot: Arc<Mutex<Option<gdex::dbus::Export>>> = Arc::default();
            let s = slot.clone();
            let export =
                gdex::dbus::export(&p.conn, PATH, &interface(), &pool.scheduler(), move |_| {
                    // "Unexport": the call's future takes the export with it.
                    let export = s.lock().unwrap().take();
                    async move {
                        drop(export);
                        Ok(None)
                    }
                })
                .unwrap();
            *slot.lock().unwrap() = Some(export);
            pool.shutdown();
            let err = call(&p.client, "Void", None, 10_000).unwrap_err();
            assert!(err.matches(gio::IOErrorEnum::Cancelled), "{err}");
            p.server.stop();
        })
    });
}

// ---------------------------------------------------------------------------
// D4: panics that unwind into GIO's dispatch (extern "C"): abort.

/// A future whose destructor panics.
struct Bomb;
impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("Bomb dropped");
    }
}

#[test]
fn a_refused_future_whose_drop_panics_does_not_abort() {
    in_child("child_refused_future_drop_panics");
}

#[test]
#[ignore]
fn child_refused_future_drop_panics() {
    if !is_child() {
        return;
    }
    watchdog("attack15b_drop_panic", 15, || {
        on_main(|| {
            let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
            let p = peer();
            let _export =
                gdex::dbus::export(&p.conn, PATH, &interface(), &pool.scheduler(), |_| {
                    let bomb = Bomb;
                    async move {
                        let _bomb = bomb;
                        Ok(None)
                    }
                })
                .unwrap();
            pool.shutdown();
            let err = call(&p.client, "Void", None, 10_000).unwrap_err();
            eprintln!("reply: {err}");
            p.server.stop();
        })
    });
}

/// A handler's value whose `into_future` panics.
struct Lazy;
impl IntoFuture for Lazy {
    type Output = Reply;
    type IntoFuture = std::future::Ready<Reply>;
    fn into_future(self) -> Self::IntoFuture {
        panic!("into_future fell over")
    }
}

#[test]
fn a_panicking_into_future_does_not_abort() {
    in_child("child_panicking_into_future");
}

#[test]
#[ignore]
fn child_panicking_into_future() {
    if !is_child() {
        return;
    }
    watchdog("attack15b_into_future", 15, || {
        on_main(|| {
            let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
            let p = peer();
            let _export =
                gdex::dbus::export(&p.conn, PATH, &interface(), &pool.scheduler(), |_| Lazy)
                    .unwrap();
            let err = call(&p.client, "Void", None, 10_000).unwrap_err();
            assert!(err.message().contains("into_future fell over"), "{err}");
            p.server.stop();
        })
    });
}

// ---------------------------------------------------------------------------
// Checks that hold (no defect found).

/// Calls running or queued when the pool shuts down are answered.
#[test]
fn pool_shutdown_answers_calls_in_flight() {
    in_child("child_pool_shutdown_answers");
}

#[test]
#[ignore]
fn child_pool_shutdown_answers() {
    if !is_child() {
        return;
    }
    watchdog("attack15b_pool_shutdown", 60, || {
        on_main(|| {
            let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
            let p = peer();
            let _export =
                gdex::dbus::export(&p.conn, PATH, &interface(), &pool.scheduler(), |_| async {
                    std::future::pending::<()>().await;
                    Ok(None)
                })
                .unwrap();
            let calls: Vec<_> = (0..20)
                .map(|_| {
                    gdex::spawn_local(p.client.call_future(
                        None,
                        PATH,
                        IFACE,
                        "Void",
                        None,
                        None,
                        gio::DBusCallFlags::NONE,
                        30_000,
                    ))
                })
                .collect();
            // Let the calls reach the pool, then stop it.
            let t = Instant::now();
            pump_while(|| t.elapsed() > Duration::from_millis(300));
            pool.shutdown();
            for c in calls {
                let err = gdex::block_on(c).unwrap().unwrap_err();
                assert!(err.matches(gio::IOErrorEnum::Cancelled), "{err}");
            }
            p.server.stop();
        })
    });
}

/// An Export dropped on another thread (a pool task), with a call in
/// flight: the call is answered, the closure is freed on its own context.
#[test]
fn export_dropped_on_a_worker_answers_and_does_not_abort() {
    in_child("child_export_dropped_on_a_worker");
}

#[test]
#[ignore]
fn child_export_dropped_on_a_worker() {
    if !is_child() {
        return;
    }
    watchdog("attack15b_drop_elsewhere", 30, || {
        on_main(|| {
            let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
            let p = peer();
            let export = gdex::dbus::export(
                &p.conn,
                PATH,
                &interface(),
                &pool.scheduler(),
                |call| async move {
                    if call.method_name == "Void" {
                        std::future::pending::<()>().await;
                    }
                    Ok(Some((1u64,).to_variant()))
                },
            )
            .unwrap();
            let hang = gdex::spawn_local(p.client.call_future(
                None,
                PATH,
                IFACE,
                "Void",
                None,
                None,
                gio::DBusCallFlags::NONE,
                30_000,
            ));
            let t = Instant::now();
            pump_while(|| t.elapsed() > Duration::from_millis(200));
            let dropped = pool.scheduler().spawn(async move { drop(export) });
            gdex::block_on(dropped).unwrap();
            let err = gdex::block_on(hang).unwrap().unwrap_err();
            assert!(err.matches(gio::IOErrorEnum::Cancelled), "{err}");
            // Let the destroy-notify idle run here.
            let t = Instant::now();
            pump_while(|| t.elapsed() > Duration::from_millis(100));
            p.server.stop();
        })
    });
}

// ---------------------------------------------------------------------------
// D2b: the same thread-bound closure is also *freed* wherever the
// registration context runs next: GIO frees it in an idle on that context
// (call_destroy_notify). Export on thread A (which pushes the default
// context, as `on_main` does), drop the Export there; thread B iterates the
// default context next: ThreadGuard's drop panics in an extern "C"
// finalizer: abort. (This is what aborts the whole `attack15b` binary when
// its in-process tests run one after another on the harness's threads.)

#[test]
fn export_freed_by_another_thread_iterating_its_context_does_not_abort() {
    in_child("child_export_freed_by_another_thread");
}

#[test]
#[ignore]
fn child_export_freed_by_another_thread() {
    if !is_child() {
        return;
    }
    watchdog("attack15b_freed_elsewhere", 30, || {
        std::thread::spawn(|| {
            on_main(|| {
                let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
                let p = peer();
                let export =
                    gdex::dbus::export(&p.conn, PATH, &interface(), &pool.scheduler(), |_| async {
                        Ok(Some((7u64,).to_variant()))
                    })
                    .unwrap();
                let reply = call(&p.client, "Sum", Some((3u64,).to_variant()), 10_000).unwrap();
                assert_eq!(reply.get::<(u64,)>(), Some((7,)));
                drop(export);
                p.server.stop();
            })
        })
        .join()
        .unwrap();
        std::thread::spawn(|| {
            on_main(|| {
                let t = Instant::now();
                pump_while(|| t.elapsed() > Duration::from_millis(200));
            })
        })
        .join()
        .unwrap();
    });
}
