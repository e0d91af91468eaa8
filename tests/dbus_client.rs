//! D4: the client side of D-Bus on a real message bus (a private
//! `dbus-daemon` each test starts): a well-known name owned as a handle
//! (`gdex::dbus::own_name`, libdex's `dex_bus_own_name_on_connection`),
//! signal subscriptions as streams that unsubscribe when dropped (gio-rs's
//! `receive_signal`, libdex's generated signal monitors), and method calls
//! that carry a unix fd list (gio-rs's `call_with_unix_fd_list_future`,
//! libdex's `dex_dbus_connection_call_with_unix_fd_list`), awaited from
//! gdex's schedulers and fibers.

use crate::common;

use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{on_own_context, watchdog, PrivateBus};
use futures::StreamExt;
use gdex::gio::prelude::*;
use gdex::{gio, glib};

const NAME: &str = "org.gdex.Test.Names";
const PATH: &str = "/org/gdex/Test";
const IFACE: &str = "org.gdex.Test";

/// Who owns `name` on the bus, as the bus says (`None`: nobody).
fn owner_of(connection: &gio::DBusConnection, name: &str) -> Option<String> {
    let reply = gdex::block_on(connection.call_future(
        Some("org.freedesktop.DBus"),
        "/org/freedesktop/DBus",
        "org.freedesktop.DBus",
        "GetNameOwner",
        Some(&(name,).to_variant()),
        None,
        gio::DBusCallFlags::NONE,
        5_000,
    ));
    reply.ok().map(|v| v.get::<(String,)>().unwrap().0)
}

/// A name is acquired, refused to a second connection (its `acquired`
/// fails and its `lost` resolves), and released when its owner is dropped,
/// after which another connection gets it (D4).
#[test]
fn a_name_is_acquired_refused_to_others_and_released_on_drop() {
    watchdog("dbus-own-name", 60, || {
        let bus = PrivateBus::start("own-name");
        on_own_context(|context| {
            let first = bus.connect();
            let second = bus.connect();
            let owner = gdex::dbus::own_name(&first, NAME, gio::BusNameOwnerFlags::NONE);
            gdex::block_on(owner.acquired()).unwrap();
            assert!(owner.is_owned());
            assert_eq!(
                owner_of(&second, NAME).as_deref(),
                first.unique_name().as_deref()
            );

            let refused = gdex::dbus::own_name(&second, NAME, gio::BusNameOwnerFlags::NONE);
            let err = gdex::block_on(refused.acquired()).unwrap_err();
            assert!(err.matches(gio::IOErrorEnum::Failed), "{err:?}");
            assert!(err.to_string().contains(NAME), "{err}");
            gdex::block_on(refused.lost());
            assert!(!refused.is_owned());
            drop(refused);

            drop(owner);
            // The release goes to the bus without a reply: ask until it
            // has taken effect.
            common::pump_polling(context, || owner_of(&second, NAME).is_none());
            let next = gdex::dbus::own_name(&second, NAME, gio::BusNameOwnerFlags::NONE);
            gdex::block_on(next.acquired()).unwrap();
            assert_eq!(
                owner_of(&first, NAME).as_deref(),
                second.unique_name().as_deref()
            );
        });
    });
}

/// An owner that allows replacement loses its name to one that asks to
/// replace it: its `lost` resolves, the other's `acquired` succeeds (D4).
#[test]
fn a_replaced_owner_learns_it_lost_the_name() {
    watchdog("dbus-replace-name", 60, || {
        let bus = PrivateBus::start("replace-name");
        on_own_context(|_| {
            let first = bus.connect();
            let second = bus.connect();
            let owner =
                gdex::dbus::own_name(&first, NAME, gio::BusNameOwnerFlags::ALLOW_REPLACEMENT);
            gdex::block_on(owner.acquired()).unwrap();
            let lost = owner.lost();
            let usurper = gdex::dbus::own_name(&second, NAME, gio::BusNameOwnerFlags::REPLACE);
            gdex::block_on(usurper.acquired()).unwrap();
            gdex::block_on(lost);
            assert!(!owner.is_owned());
            // Acquired once: `acquired` still says so after the loss.
            assert!(gdex::block_on(owner.acquired()).is_ok());
            assert_eq!(
                owner_of(&first, NAME).as_deref(),
                second.unique_name().as_deref()
            );
        });
    });
}

/// A name asked for from a pool task is acquired there: GIO answers on the
/// worker's context (D4, S2).
#[test]
fn a_name_is_owned_from_a_pool_task() {
    watchdog("dbus-name-pool", 60, || {
        let bus = PrivateBus::start("name-pool");
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let connection = bus.connect();
        let owner = gdex::block_on(pool.scheduler().spawn(async move {
            let owner = gdex::dbus::own_name(&connection, NAME, gio::BusNameOwnerFlags::NONE);
            owner.acquired().await.map(|()| owner)
        }))
        .unwrap()
        .unwrap();
        assert!(owner.is_owned());
        assert_eq!(owner.name(), NAME);
    });
}

/// A name owned from a pool task and dropped on another thread is
/// released, and GIO freeing the owner's callbacks there is no misuse
/// (gio-rs's thread-bound closures panicked when that thread freed them)
/// (D4).
#[test]
fn a_name_owner_dropped_on_another_thread_releases_the_name() {
    watchdog("dbus-name-drop-elsewhere", 60, || {
        let bus = PrivateBus::start("name-drop");
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let watcher = bus.connect();
        on_own_context(|context| {
            for round in 0..common::stress(20) {
                let name = format!("{NAME}.R{round}");
                let connection = bus.connect();
                let n = name.clone();
                let owner = gdex::block_on(pool.scheduler().spawn(async move {
                    let owner = gdex::dbus::own_name(&connection, &n, gio::BusNameOwnerFlags::NONE);
                    owner.acquired().await.map(|()| owner)
                }))
                .unwrap()
                .unwrap();
                drop(owner);
                common::pump_polling(context, || owner_of(&watcher, &name).is_none());
            }
        });
    });
}

/// The futures of an owner dropped before the bus answered do not wait
/// forever: `acquired` gives `Cancelled`, `lost` resolves; those of an
/// owner dropped after it got the name say it was acquired, then lost
/// (D4).
#[test]
fn the_futures_of_a_dropped_owner_resolve() {
    watchdog("dbus-name-dropped-futures", 60, || {
        let bus = PrivateBus::start("name-futures");
        on_own_context(|_| {
            let connection = bus.connect();
            let owner = gdex::dbus::own_name(&connection, NAME, gio::BusNameOwnerFlags::NONE);
            let (acquired, lost) = (owner.acquired(), owner.lost());
            drop(owner);
            assert!(matches!(
                gdex::block_on(acquired),
                Err(gdex::Error::Cancelled)
            ));
            gdex::block_on(lost);

            let owner = gdex::dbus::own_name(&connection, NAME, gio::BusNameOwnerFlags::NONE);
            gdex::block_on(owner.acquired()).unwrap();
            let (acquired, lost) = (owner.acquired(), owner.lost());
            drop(owner);
            gdex::block_on(lost);
            assert!(gdex::block_on(acquired).is_ok());
        });
    });
}

/// A name's futures dropped before the bus answered let go of their
/// wakers then, not when the outcome comes (D4).
#[test]
fn dropped_name_futures_let_go_of_their_wakers() {
    struct Noop;
    impl std::task::Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    watchdog("dbus-name-wakers", 60, || {
        let bus = PrivateBus::start("name-wakers");
        on_own_context(|_| {
            let connection = bus.connect();
            let owner = gdex::dbus::own_name(&connection, NAME, gio::BusNameOwnerFlags::NONE);
            let wakers: Vec<_> = (0..3).map(|_| Arc::new(Noop)).collect();
            for w in &wakers {
                let waker = std::task::Waker::from(w.clone());
                // Polled before this thread's context ran: the bus has not
                // answered yet.
                let mut acquired = Box::pin(owner.acquired());
                let mut lost = Box::pin(owner.lost());
                assert!(common::poll_with(&mut acquired, &waker).is_pending());
                assert!(common::poll_with(&mut lost, &waker).is_pending());
            }
            let kept = wakers.iter().filter(|w| Arc::strong_count(w) > 1).count();
            assert_eq!(kept, 0, "dropped name futures still hold their wakers");
            gdex::block_on(owner.acquired()).unwrap();
        });
    });
}

/// Formatting a name owner (`{:?}`) writes with its lock released: the
/// formatter's sink is the caller's code, which may ask the owner (D4).
#[test]
fn formatting_a_name_owner_writes_with_its_lock_released() {
    struct Log<'a>(&'a gdex::dbus::NameOwner, String);
    impl std::fmt::Write for Log<'_> {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            let _ = self.0.is_owned();
            self.1.push_str(s);
            Ok(())
        }
    }
    watchdog("dbus-name-debug-unlocked", 60, || {
        let bus = PrivateBus::start("name-debug");
        on_own_context(|_| {
            let connection = bus.connect();
            let owner = gdex::dbus::own_name(&connection, NAME, gio::BusNameOwnerFlags::NONE);
            let mut log = Log(&owner, String::new());
            std::fmt::Write::write_fmt(&mut log, format_args!("{owner:?}")).unwrap();
            assert!(log.1.contains(NAME), "{}", log.1);
        });
    });
}

/// Signals become a stream in a (pinned) pool task: those emitted before the first
/// read are kept, in order; dropping the stream unsubscribes, so a signal
/// emitted afterwards reaches its callback no more (D4).
#[test]
fn a_signal_stream_keeps_order_and_unsubscribes_when_dropped() {
    watchdog("dbus-signal-stream", 60, || {
        let bus = PrivateBus::start("signals");
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let listener = bus.connect();
        let emitter = bus.connect();
        let sender = emitter.unique_name().unwrap().to_string();
        let delivered = Arc::new(AtomicUsize::new(0));
        let counted = delivered.clone();
        let (subscribed, ready) = gdex::Promise::<()>::new();
        let (go, emitted) = gdex::Promise::<()>::new();
        let (unsubscribed, dropped) = gdex::Promise::<()>::new();
        let (go_again, emitted_again) = gdex::Promise::<()>::new();
        // Pinned to a worker: gio-rs's streams and call futures are !Send.
        let got = pool.scheduler().spawn_pinned(move || async move {
            let subscribe = |count: Option<Arc<AtomicUsize>>| {
                listener.receive_signal(
                    Some(&sender),
                    Some(IFACE),
                    Some("Tick"),
                    Some(PATH),
                    None,
                    gio::DBusSignalFlags::NONE,
                    move |signal| {
                        if let Some(count) = &count {
                            count.fetch_add(1, Ordering::SeqCst);
                        }
                        signal.parameters.get::<(u32,)>().unwrap().0
                    },
                )
            };
            // Both on this worker's context, in this order: when the
            // witness sees a signal, the other's callback, had it still
            // been subscribed, has run.
            let mut ticks = subscribe(Some(counted));
            let mut witness = subscribe(None);
            // A round trip on the listener's connection: the bus has its
            // match rules before any signal goes out.
            let _ = listener
                .call_future(
                    Some("org.freedesktop.DBus"),
                    "/org/freedesktop/DBus",
                    "org.freedesktop.DBus",
                    "GetId",
                    None,
                    None,
                    gio::DBusCallFlags::NONE,
                    5_000,
                )
                .await
                .unwrap();
            subscribed.resolve(());
            emitted.await.unwrap();
            let mut got = Vec::new();
            for _ in 0..3 {
                got.push(ticks.next().await.unwrap());
            }
            drop(ticks);
            unsubscribed.resolve(());
            emitted_again.await.unwrap();
            let mut seen = Vec::new();
            for _ in 0..4 {
                seen.push(witness.next().await.unwrap());
            }
            (got, seen)
        });
        gdex::block_on(ready).unwrap();
        for i in 1..=3u32 {
            emitter
                .emit_signal(None, PATH, IFACE, "Tick", Some(&(i,).to_variant()))
                .unwrap();
        }
        go.resolve(());
        gdex::block_on(dropped).unwrap();
        emitter
            .emit_signal(None, PATH, IFACE, "Tick", Some(&(4u32,).to_variant()))
            .unwrap();
        go_again.resolve(());
        let (got, seen) = gdex::block_on(got).unwrap();
        assert_eq!(got, [1, 2, 3]);
        assert_eq!(seen, [1, 2, 3, 4]);
        assert_eq!(
            delivered.load(Ordering::SeqCst),
            3,
            "a dropped stream still got a signal"
        );
    });
}

/// File descriptors in and out of method calls: a call made with gio-rs's
/// `call_with_unix_fd_list_future` from a fiber on the pool passes a pipe
/// to a `gdex::dbus::export`ed object on another connection of the bus,
/// which reads it, and a second call gets a pipe back in the reply's fd
/// list (D4, G3, F1).
#[test]
fn fds_pass_in_and_out_of_calls_made_from_a_fiber() {
    watchdog("dbus-fd-calls", 60, || {
        let bus = PrivateBus::start("fd-call");
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        on_own_context(|_| {
            let service = bus.connect();
            let client = bus.connect();
            let xml = r#"<node><interface name="org.gdex.Test">
                <method name="ReadFd"><arg type="h" direction="in"/><arg type="s" direction="out"/></method>
                <method name="OpenPipe"><arg type="s" direction="in"/><arg type="h" direction="out"/></method>
              </interface></node>"#;
            let interface = gio::DBusNodeInfo::for_xml(xml)
                .unwrap()
                .lookup_interface(IFACE)
                .unwrap();
            let _export = gdex::dbus::export(
                &service,
                PATH,
                &interface,
                &pool.scheduler(),
                |call| async move {
                    if call.method_name == "OpenPipe" {
                        let (text,): (String,) = call.parameters.get().unwrap();
                        let (reader, mut writer) = std::io::pipe().unwrap();
                        std::io::Write::write_all(&mut writer, text.as_bytes()).unwrap();
                        drop(writer);
                        return Ok(Some((call.reply_fd(reader),).to_variant()));
                    }
                    let (handle,): (glib::variant::Handle,) = call.parameters.get().unwrap();
                    let fd = call.fd(handle)?.try_clone_to_owned().unwrap();
                    let mut text = String::new();
                    std::fs::File::from(fd).read_to_string(&mut text).unwrap();
                    Ok(Some((text,).to_variant()))
                },
            )
            .unwrap();
            let destination = service.unique_name().unwrap().to_string();
            let (reader, mut writer) = std::io::pipe().unwrap();
            std::io::Write::write_all(&mut writer, b"through the bus").unwrap();
            drop(writer);
            let reader = std::os::fd::OwnedFd::from(reader);
            let fiber = pool.scheduler().spawn_fiber(move || {
                let list = gio::UnixFDList::new();
                let index = list.append(&reader).unwrap();
                let (reply, _fds) = gdex::fiber::wait(client.call_with_unix_fd_list_future(
                    Some(&destination),
                    PATH,
                    IFACE,
                    "ReadFd",
                    Some(&(glib::variant::Handle(index),).to_variant()),
                    None,
                    gio::DBusCallFlags::NONE,
                    5_000,
                    Some(&list),
                ))?;
                let read = reply.get::<(String,)>().unwrap().0;
                let (reply, fds) = gdex::fiber::wait(client.call_with_unix_fd_list_future(
                    Some(&destination),
                    PATH,
                    IFACE,
                    "OpenPipe",
                    Some(&("and back",).to_variant()),
                    None,
                    gio::DBusCallFlags::NONE,
                    5_000,
                    gio::UnixFDList::NONE,
                ))?;
                let (handle,): (glib::variant::Handle,) = reply.get().unwrap();
                let fd = fds.expect("the reply's fd list").get(handle.0).unwrap();
                let mut back = String::new();
                std::fs::File::from(fd).read_to_string(&mut back).unwrap();
                Ok::<_, gdex::Error>((read, back))
            });
            // The service's dispatch runs on this thread's context, which
            // block_on iterates.
            let (read, back) = gdex::block_on(fiber).unwrap().unwrap();
            assert_eq!(read, "through the bus");
            assert_eq!(back, "and back");
        });
    });
}
