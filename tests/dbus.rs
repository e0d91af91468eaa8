//! G3: D-Bus methods served as gdex tasks, without a bus daemon: a
//! `gio::DBusServer` on a unix socket in a temp dir, a peer-to-peer client
//! connection, 1,000 concurrent calls whose handlers do pool work, one
//! handler cancelled by closing the client, results checked; an export
//! dropped with a call in flight answers it; and file descriptors passed in
//! (an `h` argument) and out (a reply's fd list).

mod common;

use std::io::{Read, Write};
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
    <method name="ReadFd"><arg type="h" direction="in"/><arg type="s" direction="out"/></method>
    <method name="OpenPipe"><arg type="s" direction="in"/><arg type="h" direction="out"/></method>
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
    start_server_at(&address, gio::DBusServerFlags::NONE, pool, server_state)
}

/// [`start_server`] on `address`.
fn start_server_at(
    address: &str,
    flags: gio::DBusServerFlags,
    pool: &gdex::ThreadPool,
    server_state: &Arc<Server>,
) -> (gio::DBusServer, String) {
    let guid = gio::dbus_generate_guid();
    let server = gio::DBusServer::new_sync(
        address,
        flags,
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
            // GIO's invocation, on the thread it dispatched the call on,
            // carries the same file descriptors as the call.
            let invocation = call.invocation().expect("the dispatching thread");
            let sent = invocation
                .message()
                .unix_fd_list()
                .map_or(0, |l| l.length());
            assert_eq!(sent as usize, call.fds().len());
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
                    "ReadFd" => {
                        // Not on the dispatching thread: no invocation here.
                        assert!(call.invocation().is_none());
                        let (handle,): (glib::variant::Handle,) = call.parameters.get().unwrap();
                        let fd = call.fd(handle)?.try_clone_to_owned().unwrap();
                        let mut text = String::new();
                        std::fs::File::from(fd).read_to_string(&mut text).unwrap();
                        Ok(Some((text,).to_variant()))
                    }
                    "OpenPipe" => {
                        let (text,): (String,) = call.parameters.get().unwrap();
                        let (reader, mut writer) = std::io::pipe().unwrap();
                        writer.write_all(text.as_bytes()).unwrap();
                        drop(writer);
                        Ok(Some((call.reply_fd(reader),).to_variant()))
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

/// A method takes a file descriptor (an `h` argument indexing the call's
/// `GUnixFDList`) and reads from it on the pool; another replies with one
/// (G3).
#[test]
fn file_descriptors_pass_in_and_out_of_method_calls() {
    watchdog("dbus_fds", 60, || {
        on_main(|| {
            let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
            let state = Arc::new(Server::default());
            let (server, address) = start_server(&pool, &state);
            let client = connect(&address);
            assert!(client
                .capabilities()
                .contains(gio::DBusCapabilityFlags::UNIX_FD_PASSING));

            // In: the read end of a pipe holding the text.
            let (reader, mut writer) = std::io::pipe().unwrap();
            writer.write_all(b"sent through a pipe").unwrap();
            drop(writer);
            let fds = gio::UnixFDList::from_array([reader]);
            let (reply, _) = gdex::block_on(client.call_with_unix_fd_list_future(
                None,
                PATH,
                IFACE,
                "ReadFd",
                Some(&(glib::variant::Handle(0),).to_variant()),
                None,
                gio::DBusCallFlags::NONE,
                30_000,
                Some(&fds),
            ))
            .unwrap();
            let (text,): (String,) = reply.get().unwrap();
            assert_eq!(text, "sent through a pipe");

            // A handle with no file descriptor behind it: the caller's error.
            let err = gdex::block_on(call(
                &client,
                "ReadFd",
                Some((glib::variant::Handle(3),).to_variant()),
            ))
            .unwrap_err();
            assert!(err.matches(gio::DBusError::InvalidArgs), "{err}");
            assert!(
                err.message().contains("refers to no file descriptor"),
                "{err}"
            );

            // Out: the reply carries the read end of a pipe.
            let (reply, fds) = gdex::block_on(client.call_with_unix_fd_list_future(
                None,
                PATH,
                IFACE,
                "OpenPipe",
                Some(&("back through another",).to_variant()),
                None,
                gio::DBusCallFlags::NONE,
                30_000,
                gio::UnixFDList::NONE,
            ))
            .unwrap();
            let (handle,): (glib::variant::Handle,) = reply.get().unwrap();
            let fd = fds.expect("the reply's fd list").get(handle.0).unwrap();
            let mut text = String::new();
            std::fs::File::from(fd).read_to_string(&mut text).unwrap();
            assert_eq!(text, "back through another");
            server.stop();
        })
    });
}

/// A reply with file descriptors on a connection that cannot pass them (TCP)
/// is an error that says so, not a reply GIO drops with a warning, leaving
/// the caller to its timeout (G3).
#[test]
fn a_reply_with_fds_where_they_cannot_pass_is_an_error() {
    watchdog("dbus_fds_tcp", 60, || {
        on_main(|| {
            let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
            let state = Arc::new(Server::default());
            let (server, address) = start_server_at(
                "tcp:host=127.0.0.1",
                gio::DBusServerFlags::AUTHENTICATION_ALLOW_ANONYMOUS,
                &pool,
                &state,
            );
            let client = connect(&address);
            assert!(!client
                .capabilities()
                .contains(gio::DBusCapabilityFlags::UNIX_FD_PASSING));
            let err =
                gdex::block_on(call(&client, "OpenPipe", Some(("x",).to_variant()))).unwrap_err();
            assert!(err.matches(gio::DBusError::NotSupported), "{err}");
            assert!(
                err.message().contains("cannot pass file descriptors"),
                "{err}"
            );
            server.stop();
        })
    });
}
