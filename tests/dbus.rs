//! Issue 15 point 3: D-Bus methods served as gdex tasks, without a bus
//! daemon: a `gio::DBusServer` on a unix socket in a temp dir, a
//! peer-to-peer client connection, 1,000 concurrent calls whose handlers do
//! pool work, one handler cancelled by closing the client, results
//! checked; and an export dropped with a call in flight answers it.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::{on_main, wait_until, watchdog, Counted};
use gdex::gio::prelude::*;
use gdex::{gio, glib};

const XML: &str = r#"<node>
  <interface name="org.gdex.Test">
    <method name="Sum"><arg type="t" direction="in"/><arg type="t" direction="out"/></method>
    <method name="Hang"/>
    <method name="Panic"/>
    <method name="PanicEarly"/>
  </interface>
</node>"#;
const PATH: &str = "/org/gdex/Test";
const IFACE: &str = "org.gdex.Test";

/// What the server side counts.
#[derive(Default)]
struct Server {
    hanging: AtomicUsize,
    dropped: Arc<AtomicUsize>,
    exports: Mutex<Vec<gdex::dbus::Export>>,
    /// The server side of each connection (its last reference closes it).
    connections: Mutex<Vec<gio::DBusConnection>>,
}

/// A server on a fresh socket whose every connection exports the test
/// object, its calls running on `pool`. Runs on this thread's context.
fn start_server(pool: &gdex::ThreadPool, server_state: &Arc<Server>) -> (gio::DBusServer, String) {
    let dir = std::env::temp_dir().join(format!(
        "gdex-dbus-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let address = format!("unix:path={}", dir.join("socket").display());
    let guid = gio::dbus_generate_guid();
    let server = gio::DBusServer::new_sync(
        &address,
        gio::DBusServerFlags::NONE,
        &guid,
        None::<&gio::DBusAuthObserver>,
        gio::Cancellable::NONE,
    )
    .unwrap();
    let scheduler = pool.scheduler();
    let state = server_state.clone();
    server.connect_new_connection(move |_, connection| {
        let info = gio::DBusNodeInfo::for_xml(XML).unwrap();
        let interface = info.lookup_interface(IFACE).unwrap();
        let handler_state = state.clone();
        let export = gdex::dbus::export(connection, PATH, &interface, &scheduler, move |call| {
            // A handler that panics before it makes its future (inside
            // GIO's dispatch, where unwinding would abort).
            assert_ne!(
                call.method_name, "PanicEarly",
                "the handler fell over early"
            );
            let state = handler_state.clone();
            async move {
                assert!(std::thread::current()
                    .name()
                    .unwrap()
                    .starts_with("gdex-worker"));
                match call.method_name.as_str() {
                    "Sum" => {
                        let (n,): (u64,) = call.parameters.get().unwrap();
                        // Pool work: a nested task and a yield.
                        let part = gdex::spawn(async move { (0..n / 2).sum::<u64>() })
                            .await
                            .unwrap();
                        gdex::yield_now().await;
                        Ok(Some((part + (n / 2..n).sum::<u64>(),).to_variant()))
                    }
                    "Hang" => {
                        let _counted = Counted(state.dropped.clone());
                        state.hanging.fetch_add(1, Ordering::SeqCst);
                        std::future::pending::<()>().await;
                        unreachable!()
                    }
                    "Panic" => panic!("the handler fell over"),
                    other => Err(glib::Error::new(gio::DBusError::UnknownMethod, other)),
                }
            }
        })
        .unwrap();
        state.exports.lock().unwrap().push(export);
        state.connections.lock().unwrap().push(connection.clone());
        true
    });
    server.start();
    let client_address = server.client_address().to_string();
    (server, client_address)
}

/// Iterates the main context (where GDBus dispatches the server's calls and
/// delivers the client's replies) until `done()`, which other threads (the
/// pool's workers) make true without waking the context: so never blocks
/// in the context's poll.
fn pump_while(mut done: impl FnMut() -> bool) {
    let main = glib::MainContext::default();
    while !done() {
        while main.iteration(false) {}
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

fn rand_suffix() -> u64 {
    static N: AtomicUsize = AtomicUsize::new(0);
    N.fetch_add(1, Ordering::SeqCst) as u64 * 1_000_003 + glib::monotonic_time() as u64
}

fn connect(address: &str) -> gio::DBusConnection {
    gdex::block_on(gio::DBusConnection::for_address_future(
        address,
        gio::DBusConnectionFlags::AUTHENTICATION_CLIENT,
        None,
    ))
    .unwrap()
}

fn call(
    client: &gio::DBusConnection,
    method: &str,
    args: Option<glib::Variant>,
) -> impl std::future::Future<Output = Result<glib::Variant, glib::Error>> {
    client.call_future(
        None,
        PATH,
        IFACE,
        method,
        args.as_ref(),
        None,
        gio::DBusCallFlags::NONE,
        30_000,
    )
}

#[test]
fn a_thousand_concurrent_calls_and_one_cancelled_by_closing_the_client() {
    watchdog("dbus_thousand", 120, || {
        on_main(|| {
            let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
            let state = Arc::new(Server::default());
            let (server, address) = start_server(&pool, &state);
            let client = connect(&address);

            let calls = common::stress(1000);
            let futures: Vec<_> = (0..calls as u64)
                .map(|n| call(&client, "Sum", Some((n,).to_variant())))
                .collect();
            let replies = gdex::block_on(futures::future::join_all(futures));
            for (n, reply) in replies.into_iter().enumerate() {
                let (sum,): (u64,) = reply.unwrap().get().unwrap();
                let n = n as u64;
                assert_eq!(sum, n * n.saturating_sub(1) / 2, "call {n}");
            }
            assert_eq!(state.exports.lock().unwrap().len(), 1);
            assert_eq!(state.exports.lock().unwrap()[0].in_flight(), 0);

            // One call that never finishes; closing the client cancels it.
            let hang = gdex::spawn_local(call(&client, "Hang", None));
            pump_while(|| state.hanging.load(Ordering::SeqCst) == 1);
            assert_eq!(state.exports.lock().unwrap()[0].in_flight(), 1);
            gdex::block_on(client.close_future()).unwrap();
            pump_while(|| state.dropped.load(Ordering::SeqCst) == 1);
            assert_eq!(state.exports.lock().unwrap()[0].in_flight(), 0);
            let err = gdex::block_on(hang).unwrap().unwrap_err();
            assert!(err.matches(gio::IOErrorEnum::Closed), "{err}");
            server.stop();
        })
    });
}

#[test]
fn a_panicking_handler_answers_with_an_error() {
    watchdog("dbus_panic", 60, || {
        on_main(|| {
            let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
            let state = Arc::new(Server::default());
            let (server, address) = start_server(&pool, &state);
            let client = connect(&address);
            let err = gdex::block_on(call(&client, "Panic", None)).unwrap_err();
            assert!(err.message().contains("the handler fell over"), "{err}");
            let err = gdex::block_on(call(&client, "PanicEarly", None)).unwrap_err();
            assert!(err.message().contains("fell over early"), "{err}");
            let err = gdex::block_on(call(&client, "Nope", None)).unwrap_err();
            assert!(err.matches(gio::DBusError::UnknownMethod), "{err}");
            server.stop();
        })
    });
}

#[test]
fn dropping_the_export_cancels_and_answers_its_calls_in_flight() {
    watchdog("dbus_unexport", 60, || {
        on_main(|| {
            let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
            let state = Arc::new(Server::default());
            let (server, address) = start_server(&pool, &state);
            let client = connect(&address);
            let hang = gdex::spawn_local(call(&client, "Hang", None));
            pump_while(|| state.hanging.load(Ordering::SeqCst) == 1);
            state.exports.lock().unwrap().clear();
            wait_until(|| state.dropped.load(Ordering::SeqCst) == 1);
            let err = gdex::block_on(hang).unwrap().unwrap_err();
            assert!(err.matches(gio::IOErrorEnum::Cancelled), "{err}");
            assert!(err.message().contains("was cancelled"), "{err}");
            // The object is gone: a new call is refused by GIO itself.
            let err = gdex::block_on(call(&client, "Sum", Some((3u64,).to_variant()))).unwrap_err();
            assert!(
                err.matches(gio::DBusError::UnknownMethod)
                    || err.matches(gio::DBusError::UnknownObject),
                "{err}"
            );
            server.stop();
        })
    });
}
