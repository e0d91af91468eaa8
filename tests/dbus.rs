//! G3: D-Bus methods served as gdex tasks, without a bus daemon: a
//! `gio::DBusServer` on a unix socket in a temp dir, a peer-to-peer client
//! connection, 1,000 concurrent calls whose handlers do pool work, one
//! handler cancelled by closing the client, results checked; an export
//! dropped with a call in flight answers it; and file descriptors passed in
//! (an `h` argument) and out (a reply's fd list).
//!
//! What GIO would get wrong, and the export answers or survives: a method
//! with out-args whose future gives no value, or a tuple of the wrong type,
//! is still answered (GLib would log a warning and send no reply, leaving
//! the caller to its timeout); an export made on a thread without a
//! context, dropped on a worker, or freed by another thread iterating its
//! context aborts nothing; an export dropped by its own refused future
//! does not deadlock; a refused future whose drop panics and a value whose
//! `into_future` panics abort nothing; a pool shut down with calls in
//! flight answers them. Each of these runs its body in a child process
//! (`common::run_child`): a defect there aborts or hangs the process, and
//! an `Export` dropped on one test thread is freed by whichever thread
//! iterates its context next.

use crate::common;

use std::future::IntoFuture;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{
    is_child, on_main, pump_during, pump_polling, run_child_passing, wait_until, watchdog, Counted,
};
use gdex::gio::prelude::*;
use gdex::{gio, glib};

const XML: &str = r#"<node>
  <interface name="org.gdex.Test">
    <method name="Sum"><arg type="t" direction="in"/><arg type="t" direction="out"/></method>
    <method name="Hang"/>
    <method name="Void"/>
    <method name="Panic"/>
    <method name="PanicEarly"/>
    <method name="ReadFd"><arg type="h" direction="in"/><arg type="s" direction="out"/></method>
    <method name="OpenPipe"><arg type="s" direction="in"/><arg type="h" direction="out"/></method>
  </interface>
</node>"#;
const PATH: &str = "/org/gdex/Test";
const IFACE: &str = "org.gdex.Test";

type Reply = Result<Option<glib::Variant>, glib::Error>;

/// The test object's interface.
fn interface() -> gio::DBusInterfaceInfo {
    gio::DBusNodeInfo::for_xml(XML)
        .unwrap()
        .lookup_interface(IFACE)
        .unwrap()
}

/// What the server side counts.
#[derive(Default)]
struct Server {
    hanging: AtomicUsize,
    dropped: Arc<AtomicUsize>,
    exports: Mutex<Vec<gdex::dbus::Export>>,
    /// The server side of each connection (its last reference closes it).
    connections: Mutex<Vec<gio::DBusConnection>>,
}

/// A unix socket's address in a fresh temp dir (`gdex-dbus-*`), and the
/// dir, which is removed (with whatever GIO left in it) when dropped: when
/// the test ends, or as its panic unwinds.
fn socket_address() -> (common::TempDir, String) {
    let dir = common::TempDir::new(&format!("dbus-{}", rand_suffix()));
    let address = format!("unix:path={}", dir.0.join("socket").display());
    (dir, address)
}

/// The folder of the unix socket `client` is connected to.
fn socket_folder(client: &gio::DBusConnection) -> std::path::PathBuf {
    let stream = client.stream();
    let socket = stream
        .downcast_ref::<gio::SocketConnection>()
        .expect("a socket connection");
    let address = socket.remote_address().unwrap();
    let address = address
        .downcast_ref::<gio::UnixSocketAddress>()
        .expect("a unix socket");
    match address.path() {
        Some(gio::prelude::UnixSocketAddressPath::Path(path)) => path.parent().unwrap().to_owned(),
        other => panic!("not a socket in a folder: {other:?}"),
    }
}

/// A started server on `address` that hands each new connection to
/// `on_connection`.
fn new_server(
    address: &str,
    flags: gio::DBusServerFlags,
    on_connection: impl Fn(&gio::DBusConnection) + 'static,
) -> gio::DBusServer {
    let guid = gio::dbus_generate_guid();
    let server = gio::DBusServer::new_sync(
        address,
        flags,
        &guid,
        None::<&gio::DBusAuthObserver>,
        gio::Cancellable::NONE,
    )
    .unwrap();
    server.connect_new_connection(move |_, connection| {
        on_connection(connection);
        true
    });
    server.start();
    server
}

/// A server on `address` whose every connection exports the test object,
/// its calls running on `pool`; and the address its clients connect to.
/// Runs on this thread's context.
fn start_server_at(
    address: &str,
    flags: gio::DBusServerFlags,
    pool: &gdex::ThreadPool,
    server_state: &Arc<Server>,
) -> (gio::DBusServer, String) {
    let scheduler = pool.scheduler();
    let state = server_state.clone();
    let server = new_server(address, flags, move |connection| {
        let handler_state = state.clone();
        let export = gdex::dbus::export(connection, PATH, &interface(), &scheduler, move |call| {
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
    });
    let client_address = server.client_address().to_string();
    (server, client_address)
}

/// Iterates the main context (where GDBus dispatches the server's calls and
/// delivers the client's replies) until `done()`, which other threads (the
/// pool's workers) make true without waking the context: so never blocks
/// in the context's poll ([`common::pump_polling`]).
fn pump_main_until(done: impl FnMut() -> bool) {
    pump_polling(&glib::MainContext::default(), done);
}

/// Iterates the main context without blocking for `d`.
fn pump_main_during(d: Duration) {
    pump_during(&glib::MainContext::default(), d);
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

/// Calls `method` of the test object, with GIO's timeout of `timeout_ms`.
fn call_within(
    client: &gio::DBusConnection,
    method: &str,
    args: Option<glib::Variant>,
    timeout_ms: i32,
) -> impl std::future::Future<Output = Result<glib::Variant, glib::Error>> {
    client.call_future(
        None,
        PATH,
        IFACE,
        method,
        args.as_ref(),
        None,
        gio::DBusCallFlags::NONE,
        timeout_ms,
    )
}

/// [`call_within`] 30 s.
fn call(
    client: &gio::DBusConnection,
    method: &str,
    args: Option<glib::Variant>,
) -> impl std::future::Future<Output = Result<glib::Variant, glib::Error>> {
    call_within(client, method, args, 30_000)
}

/// [`call`] with a list of file descriptors going, and the reply's coming
/// back.
fn call_with_fds(
    client: &gio::DBusConnection,
    method: &str,
    args: Option<glib::Variant>,
    fds: Option<&gio::UnixFDList>,
) -> impl std::future::Future<Output = Result<(glib::Variant, Option<gio::UnixFDList>), glib::Error>>
{
    client.call_with_unix_fd_list_future(
        None,
        PATH,
        IFACE,
        method,
        args.as_ref(),
        None,
        gio::DBusCallFlags::NONE,
        30_000,
        fds,
    )
}

/// Runs `body` with a client connected to a fresh server of the test object
/// on a unix socket (its calls on a pool of `workers`), on the main context
/// (`on_main`), under a watchdog of `secs`; then stops the server.
fn with_served(
    name: &str,
    secs: u64,
    workers: usize,
    body: impl FnOnce(&Arc<Server>, &gio::DBusConnection),
) {
    // Declared first, dropped last: after the server has stopped, also when
    // `body` panics.
    let (_dir, address) = socket_address();
    let flags = gio::DBusServerFlags::NONE;
    with_served_at(name, secs, workers, &address, flags, body);
}

/// [`with_served`] with the server on `address`, with `flags`.
fn with_served_at(
    name: &str,
    secs: u64,
    workers: usize,
    address: &str,
    flags: gio::DBusServerFlags,
    body: impl FnOnce(&Arc<Server>, &gio::DBusConnection),
) {
    watchdog(name, secs, || {
        on_main(|| {
            let pool = gdex::ThreadPool::builder()
                .workers(workers)
                .build()
                .unwrap();
            let state = Arc::new(Server::default());
            let (server, address) = start_server_at(address, flags, &pool, &state);
            let client = connect(&address);
            body(&state, &client);
            server.stop();
        })
    });
}

#[test]
fn a_thousand_concurrent_calls_and_one_cancelled_by_closing_the_client() {
    with_served("dbus_thousand", 120, 2, |state, client| {
        let calls = common::stress(1000);
        let futures: Vec<_> = (0..calls as u64)
            .map(|n| call(client, "Sum", Some((n,).to_variant())))
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
        let hang = gdex::spawn_local(call(client, "Hang", None));
        pump_main_until(|| state.hanging.load(Ordering::SeqCst) == 1);
        assert_eq!(state.exports.lock().unwrap()[0].in_flight(), 1);
        gdex::block_on(client.close_future()).unwrap();
        pump_main_until(|| state.dropped.load(Ordering::SeqCst) == 1);
        assert_eq!(state.exports.lock().unwrap()[0].in_flight(), 0);
        let err = gdex::block_on(hang).unwrap().unwrap_err();
        assert!(err.matches(gio::IOErrorEnum::Closed), "{err}");
    });
}

#[test]
fn a_panicking_handler_answers_with_an_error() {
    with_served("dbus_panic", 60, 1, |_, client| {
        let err = gdex::block_on(call(client, "Panic", None)).unwrap_err();
        assert!(err.message().contains("the handler fell over"), "{err}");
        let err = gdex::block_on(call(client, "PanicEarly", None)).unwrap_err();
        assert!(err.message().contains("fell over early"), "{err}");
        let err = gdex::block_on(call(client, "Nope", None)).unwrap_err();
        assert!(err.matches(gio::DBusError::UnknownMethod), "{err}");
    });
}

#[test]
fn dropping_the_export_cancels_and_answers_its_calls_in_flight() {
    with_served("dbus_unexport", 60, 1, |state, client| {
        let hang = gdex::spawn_local(call(client, "Hang", None));
        pump_main_until(|| state.hanging.load(Ordering::SeqCst) == 1);
        state.exports.lock().unwrap().clear();
        wait_until(|| state.dropped.load(Ordering::SeqCst) == 1);
        let err = gdex::block_on(hang).unwrap().unwrap_err();
        assert!(err.matches(gio::IOErrorEnum::Cancelled), "{err}");
        assert!(err.message().contains("was cancelled"), "{err}");
        // The object is gone: a new call is refused by GIO itself.
        let err = gdex::block_on(call(client, "Sum", Some((3u64,).to_variant()))).unwrap_err();
        assert!(
            err.matches(gio::DBusError::UnknownMethod)
                || err.matches(gio::DBusError::UnknownObject),
            "{err}"
        );
    });
}

/// A method takes a file descriptor (an `h` argument indexing the call's
/// `GUnixFDList`) and reads from it on the pool; another replies with one
/// (G3).
#[test]
fn file_descriptors_pass_in_and_out_of_method_calls() {
    with_served("dbus_fds", 60, 1, |_, client| {
        assert!(client
            .capabilities()
            .contains(gio::DBusCapabilityFlags::UNIX_FD_PASSING));

        // In: the read end of a pipe holding the text.
        let (reader, mut writer) = std::io::pipe().unwrap();
        writer.write_all(b"sent through a pipe").unwrap();
        drop(writer);
        let fds = gio::UnixFDList::from_array([reader]);
        let (reply, _) = gdex::block_on(call_with_fds(
            client,
            "ReadFd",
            Some((glib::variant::Handle(0),).to_variant()),
            Some(&fds),
        ))
        .unwrap();
        let (text,): (String,) = reply.get().unwrap();
        assert_eq!(text, "sent through a pipe");

        // A handle with no file descriptor behind it: the caller's error.
        let err = gdex::block_on(call(
            client,
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
        let (reply, fds) = gdex::block_on(call_with_fds(
            client,
            "OpenPipe",
            Some(("back through another",).to_variant()),
            gio::UnixFDList::NONE,
        ))
        .unwrap();
        let (handle,): (glib::variant::Handle,) = reply.get().unwrap();
        let fd = fds.expect("the reply's fd list").get(handle.0).unwrap();
        let mut text = String::new();
        std::fs::File::from(fd).read_to_string(&mut text).unwrap();
        assert_eq!(text, "back through another");
    });
}

/// A reply with file descriptors on a connection that cannot pass them (TCP)
/// is an error that says so, not a reply GIO drops with a warning, leaving
/// the caller to its timeout (G3).
#[test]
fn a_reply_with_fds_where_they_cannot_pass_is_an_error() {
    let anonymous = gio::DBusServerFlags::AUTHENTICATION_ALLOW_ANONYMOUS;
    let tcp = "tcp:host=127.0.0.1";
    with_served_at("dbus_fds_tcp", 60, 1, tcp, anonymous, |_, client| {
        assert!(!client
            .capabilities()
            .contains(gio::DBusCapabilityFlags::UNIX_FD_PASSING));
        let err = gdex::block_on(call(client, "OpenPipe", Some(("x",).to_variant()))).unwrap_err();
        assert!(err.matches(gio::DBusError::NotSupported), "{err}");
        assert!(
            err.message().contains("cannot pass file descriptors"),
            "{err}"
        );
    });
}

/// The unix socket's folder (`gdex-dbus-*` in the temp dir) of a test's
/// server is removed when the test ends, and when its body panics.
#[test]
fn a_served_test_leaves_no_socket_folder_even_when_it_panics() {
    for panics in [false, true] {
        let folder = Arc::new(Mutex::new(None));
        let seen = folder.clone();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            with_served("dbus_folder", 60, 1, |_, client| {
                let path = socket_folder(client);
                assert!(path.is_dir(), "{}", path.display());
                *seen.lock().unwrap() = Some(path);
                gdex::block_on(call(client, "Sum", Some((3u64,).to_variant()))).unwrap();
                assert!(!panics, "the test's planned panic");
            })
        }));
        assert_eq!(outcome.is_err(), panics);
        let folder = folder.lock().unwrap().take().unwrap();
        assert!(
            !folder.exists(),
            "{} is still there (the body panicked: {panics})",
            folder.display()
        );
    }
}

/// A call gets one answer (G3). One answered early through its
/// `Invocation` is not answered again by its future, and a second answer
/// through an `Invocation` is refused with an error, before or after the
/// future's: the client receives one reply per call. (GIO sends every
/// answer it is given: a second `return_value` on the same invocation puts
/// a second reply to the same serial on the wire, without a warning.)
#[test]
fn a_call_is_answered_once_whoever_answers() {
    with_peer("dbus_answered_once", 60, 1, |pool, p| {
        // The serial each reply the client receives answers.
        let replies = Arc::new(Mutex::new(Vec::<u32>::new()));
        let seen = replies.clone();
        let filter = p.client.add_filter(move |_, message, incoming| {
            let reply = matches!(
                message.message_type(),
                gio::DBusMessageType::MethodReturn | gio::DBusMessageType::Error
            );
            if incoming && reply {
                seen.lock().unwrap().push(message.reply_serial());
            }
            Some(message.clone())
        });
        let refused = Arc::new(Mutex::new(Vec::<String>::new()));
        let kept = Arc::new(Mutex::new(None::<gdex::dbus::MethodCall>));
        let (r, k) = (refused.clone(), kept.clone());
        let export = p.export(pool, move |call| {
            let early = call.method_name == "Sum";
            if early {
                // Answered here, in the handler; then once more: refused.
                let invocation = call.invocation().expect("the dispatching thread");
                invocation
                    .return_value(Some(&(1u64,).to_variant()))
                    .expect("the first answer is sent");
                assert!(invocation.is_answered());
                let again = call
                    .invocation()
                    .unwrap()
                    .return_value(Some(&(2u64,).to_variant()));
                r.lock().unwrap().push(again.unwrap_err().to_string());
            } else {
                // Answered by its future; kept, to be answered again later.
                *k.lock().unwrap() = Some(call.clone());
            }
            // For `Sum`, a third answer, which is not sent.
            async move { Ok(early.then(|| (3u64,).to_variant())) }
        });

        let reply = p.call("Sum", Some((3u64,).to_variant()), 10_000).unwrap();
        assert_eq!(reply.get::<(u64,)>(), Some((1,)));
        let refused = refused.lock().unwrap().clone();
        assert_eq!(refused.len(), 1);
        assert!(refused[0].contains("answered already"), "{refused:?}");
        // The future has given its outcome: had it been sent, it went
        // before anything sent from now on.
        pump_main_until(|| export.in_flight() == 0);

        // Answered by the future, then through the kept call's invocation
        // (here, on the thread GIO dispatched it on): refused.
        p.call("Void", None, 10_000).unwrap();
        let call = kept.lock().unwrap().take().unwrap();
        let invocation = call.invocation().expect("the dispatching thread");
        assert!(invocation.is_answered());
        let late = invocation.return_value(None).unwrap_err();
        assert!(late.message().contains("answered already"), "{late}");

        // A last call: its reply comes after any second reply to the two
        // before, on the same connection.
        p.call("Void", None, 10_000).unwrap();
        p.client.remove_filter(filter);
        let replies = replies.lock().unwrap().clone();
        let mut serials = replies.clone();
        serials.dedup();
        assert_eq!(
            (replies.len(), serials.len()),
            (3, 3),
            "replies to serials {replies:?}: a call was answered twice"
        );
        drop(export);
        p.server.stop();
    });
}

/// A handler that panics after its call was answered through its
/// `Invocation` (in its future, or before it made one) has nobody left to
/// read the panic: the caller has its answer. It goes to the panic handler
/// (X5), as every panic nobody awaits does, not to a log line.
#[test]
fn a_panic_after_an_early_answer_goes_to_the_panic_handler() {
    let _turn = common::panic_handler_lock();
    let seen = common::record_panics("after its answer");
    with_peer("dbus_panic_after_early_answer", 60, 1, |pool, p| {
        let export = p.export(pool, move |call| {
            let invocation = call.invocation().expect("the dispatching thread");
            invocation
                .return_value(None)
                .expect("the first answer is sent");
            assert_ne!(
                call.method_name, "PanicEarly",
                "the handler fell over after its answer"
            );
            async move {
                assert_ne!(
                    call.method_name, "Panic",
                    "the future fell over after its answer"
                );
                Ok(None)
            }
        });
        p.call("Panic", None, 10_000).unwrap();
        p.call("PanicEarly", None, 10_000).unwrap();
        pump_main_until(|| export.in_flight() == 0);
        // The future's panic is reported as its task ends.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while seen.lock().unwrap().len() < 2 && std::time::Instant::now() < deadline {
            pump_main_during(Duration::from_millis(10));
        }
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert!(
            seen.iter().any(|m| m.contains("the future fell over")),
            "{seen:?}"
        );
        assert!(
            seen.iter().any(|m| m.contains("the handler fell over")),
            "{seen:?}"
        );
        drop(export);
        p.server.stop();
    });
    gdex::reset_panic_handler();
}

// ---------------------------------------------------------------------------
// What GIO would get wrong: replies it would not send, closures freed or
// called on the wrong thread, drops and panics inside its dispatch. Each
// test runs its body in a child process.
// ---------------------------------------------------------------------------

/// A server on a fresh socket, a client connected to it, and the server's
/// side of that connection (to export on, from the test). Call on_main.
struct Peer {
    server: gio::DBusServer,
    client: gio::DBusConnection,
    conn: gio::DBusConnection,
    /// The socket's folder, removed when the peer is dropped (after the
    /// server: fields drop in order).
    _dir: common::TempDir,
}

impl Peer {
    /// Exports the test object on the server's side of the connection, its
    /// calls running on `pool`.
    fn export<H, F>(&self, pool: &gdex::ThreadPool, handler: H) -> gdex::dbus::Export
    where
        H: Fn(gdex::dbus::MethodCall) -> F + Send + Sync + 'static,
        F: IntoFuture<Output = Reply>,
        F::IntoFuture: Send + 'static,
    {
        gdex::dbus::export(&self.conn, PATH, &interface(), &pool.scheduler(), handler).unwrap()
    }

    /// Calls `method` of the test object, with GIO's timeout of
    /// `timeout_ms`, and waits for the reply.
    fn call(
        &self,
        method: &str,
        args: Option<glib::Variant>,
        timeout_ms: i32,
    ) -> Result<glib::Variant, glib::Error> {
        gdex::block_on(call_within(&self.client, method, args, timeout_ms))
    }

    /// Calls `Sum(3)`, which the export answers with 7, and checks the reply.
    fn sum_of_three_is_seven(&self) {
        let reply = self
            .call("Sum", Some((3u64,).to_variant()), 10_000)
            .unwrap();
        assert_eq!(reply.get::<(u64,)>(), Some((7,)));
    }
}

fn peer() -> Peer {
    let conns = Arc::new(Mutex::new(Vec::<gio::DBusConnection>::new()));
    let c = conns.clone();
    let (dir, address) = socket_address();
    let server = new_server(&address, gio::DBusServerFlags::NONE, move |connection| {
        c.lock().unwrap().push(connection.clone())
    });
    let client = connect(&server.client_address());
    pump_main_until(|| !conns.lock().unwrap().is_empty());
    let conn = conns.lock().unwrap()[0].clone();
    Peer {
        server,
        client,
        conn,
        _dir: dir,
    }
}

/// Runs `body` with a pool of `workers` and a fresh [`Peer`], on the main
/// context (`on_main`), under a watchdog of `secs`.
fn with_peer(name: &str, secs: u64, workers: usize, body: impl FnOnce(&gdex::ThreadPool, Peer)) {
    watchdog(name, secs, || {
        on_main(|| {
            let pool = gdex::ThreadPool::builder()
                .workers(workers)
                .build()
                .unwrap();
            body(&pool, peer());
        })
    });
}

/// Runs the ignored test `name` in a child and asserts it passed.
fn in_child(name: &str) {
    run_child_passing(name, &[], 60, "");
}

/// A method with out-args whose future gives `reply` is answered, not left
/// to the caller's timeout: GLib (2.74 .. main) logs a g_warning for an
/// out-args reply of `None` or of the wrong type and sends NO reply, so
/// the caller waits its whole timeout (forever with G_MAXINT).
fn wrong_reply_is_answered(reply: fn() -> Reply) {
    with_peer("dbus_wrong_reply", 60, 1, |pool, p| {
        let _export = p.export(pool, move |_| async move { reply() });
        let start = std::time::Instant::now();
        let err = p
            .call("Sum", Some((3u64,).to_variant()), 10_000)
            .unwrap_err();
        assert!(
            !err.matches(gio::IOErrorEnum::TimedOut),
            "the caller got no reply: {err} after {:?}",
            start.elapsed()
        );
        p.server.stop();
    });
}

/// A method with out-args whose future gives `Ok(None)` gets a reply (G3).
// (In children: an Export dropped on one harness thread is freed by the
// next test's thread, which would abort this binary on a defect.)
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

/// A method with out-args whose future gives a tuple of the wrong type
/// gets a reply (G3).
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

/// `export()` on a thread with no thread-default context, its `Export`
/// sent back to the main thread, serves calls and is dropped there without
/// an abort (G3). The registration then goes to the global default
/// context, and GIO calls the (non-`Send`) handler on the thread that
/// iterates it, where glib-rs's `ThreadGuard` (`Closure::new_local`, used
/// by gio-rs's `RegistrationBuilder`) used to panic inside an `extern "C"`
/// marshal: abort.
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
    with_peer("dbus_export_elsewhere", 30, 1, |pool, p| {
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
        p.sum_of_three_is_seven();
        drop(export);
        p.server.stop();
    });
}

/// An `Export` dropped by the future of a call the closed pool refused
/// (an "unexport me" method) does not deadlock, and the call is answered
/// `Cancelled` (G3). The spawn in the method handler used to hold
/// `Calls::group`'s lock while `group.spawn(member)` ran; on a closed pool
/// the member (and the user's future) is dropped right there, and
/// `Export::drop` -> `cancel_all` took the same lock: a self-deadlock of
/// the thread running GIO's dispatch.
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
    with_peer("dbus_self_deadlock", 15, 1, |pool, p| {
        let slot: Arc<Mutex<Option<gdex::dbus::Export>>> = Arc::default();
        let s = slot.clone();
        let export = p.export(pool, move |_| {
            // "Unexport": the call's future takes the export with it.
            let export = s.lock().unwrap().take();
            async move {
                drop(export);
                Ok(None)
            }
        });
        *slot.lock().unwrap() = Some(export);
        pool.shutdown();
        let err = p.call("Void", None, 10_000).unwrap_err();
        assert!(err.matches(gio::IOErrorEnum::Cancelled), "{err}");
        p.server.stop();
    });
}

/// A future whose destructor panics.
struct Bomb;
impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("Bomb dropped");
    }
}

/// A refused call's future whose drop panics, dropped inside GIO's
/// dispatch (`extern "C"`), does not abort the process (G3, X5).
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
    with_peer("dbus_drop_panic", 15, 1, |pool, p| {
        let _export = p.export(pool, |_| {
            let bomb = Bomb;
            async move {
                let _bomb = bomb;
                Ok(None)
            }
        });
        pool.shutdown();
        let err = p.call("Void", None, 10_000).unwrap_err();
        eprintln!("reply: {err}");
        p.server.stop();
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

/// A handler's value whose `into_future` panics inside GIO's dispatch does
/// not abort the process: the caller gets the panic's message (G3, X5).
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
    with_peer("dbus_into_future", 15, 1, |pool, p| {
        let _export = p.export(pool, |_| Lazy);
        let err = p.call("Void", None, 10_000).unwrap_err();
        assert!(err.message().contains("into_future fell over"), "{err}");
        p.server.stop();
    });
}

/// Calls running or queued when the pool shuts down are answered (G3, S9).
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
    with_peer("dbus_pool_shutdown", 60, 1, |pool, p| {
        let _export = p.export(pool, |_| async {
            std::future::pending::<()>().await;
            Ok(None)
        });
        let calls: Vec<_> = (0..20)
            .map(|_| gdex::spawn_local(call(&p.client, "Void", None)))
            .collect();
        // Let the calls reach the pool, then stop it.
        pump_main_during(Duration::from_millis(300));
        pool.shutdown();
        for c in calls {
            let err = gdex::block_on(c).unwrap().unwrap_err();
            assert!(err.matches(gio::IOErrorEnum::Cancelled), "{err}");
        }
        p.server.stop();
    });
}

/// An Export dropped on another thread (a pool task), with a call in
/// flight: the call is answered, the closure is freed on its own context
/// (G3).
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
    with_peer("dbus_drop_on_a_worker", 30, 2, |pool, p| {
        let export = p.export(pool, |call| async move {
            if call.method_name == "Void" {
                std::future::pending::<()>().await;
            }
            Ok(Some((1u64,).to_variant()))
        });
        let hang = gdex::spawn_local(call(&p.client, "Void", None));
        // The call is in flight (dropped, the export would answer a call
        // that came after with an unknown object instead).
        pump_main_until(|| export.in_flight() == 1);
        let dropped = pool.scheduler().spawn(async move { drop(export) });
        gdex::block_on(dropped).unwrap();
        let err = gdex::block_on(hang).unwrap().unwrap_err();
        assert!(err.matches(gio::IOErrorEnum::Cancelled), "{err}");
        // Let the destroy-notify idle run here.
        pump_main_during(Duration::from_millis(100));
        p.server.stop();
    });
}

/// An `Export` made and dropped on thread A (which pushes the default
/// context, as `on_main` does) is freed without an abort when thread B
/// iterates the default context next (G3). GIO frees the thread-bound
/// closure in an idle on the registration context (`call_destroy_notify`),
/// wherever that context runs next: `ThreadGuard`'s drop used to panic
/// there, in an `extern "C"` finalizer, and abort (which also aborted any
/// binary whose in-process export tests ran one after another on the
/// harness's threads).
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
    watchdog("dbus_freed_elsewhere", 30, || {
        std::thread::spawn(|| {
            on_main(|| {
                let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
                let p = peer();
                let export = p.export(&pool, |_| async { Ok(Some((7u64,).to_variant())) });
                p.sum_of_three_is_seven();
                drop(export);
                p.server.stop();
            })
        })
        .join()
        .unwrap();
        std::thread::spawn(|| on_main(|| pump_main_during(Duration::from_millis(200))))
            .join()
            .unwrap();
    });
}
