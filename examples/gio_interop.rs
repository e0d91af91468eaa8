//! GObject and GIO with gdex, in three parts:
//!
//! 1. a GIO-style `_async`/`_finish` pair implemented with a future on the
//!    pool ([`gdex::AsyncResult`]), called with a plain callback from the
//!    main loop;
//! 2. waiting for a file descriptor ([`gdex::unix_fd`]) in a pool task;
//! 3. a D-Bus object whose methods run as pool tasks
//!    ([`gdex::dbus::export`]), served peer-to-peer on a socket in a temp
//!    dir (no bus daemon), called by a client in the same process.
//!
//! Run with `cargo run --example gio_interop`.

use std::io::{Read, Write};

use gdex::gio::prelude::*;
use gdex::glib::IOCondition;
use gdex::{gio, glib, AsyncResult};

/// `checksum_async`: hashes `data` on the pool; the callback runs on the
/// caller's thread-default main context.
fn checksum_async(
    source: &glib::Object,
    data: Vec<u8>,
    pool: &gdex::ThreadPool,
    callback: impl FnOnce(Option<&glib::Object>, &gio::AsyncResult) + 'static,
) {
    let result = AsyncResult::new(Some(source), None, callback);
    result.spawn(&pool.scheduler(), async move {
        let sum = glib::compute_checksum_for_data(glib::ChecksumType::Sha256, &data)
            .ok_or_else(|| glib::Error::new(gio::IOErrorEnum::Failed, "no checksum"))?;
        Ok::<_, glib::Error>(sum.to_string())
    });
}

/// `checksum_finish`.
fn checksum_finish(
    source: &glib::Object,
    result: &gio::AsyncResult,
) -> Result<String, glib::Error> {
    AsyncResult::propagate(result, Some(source))
}

fn async_pair(pool: &gdex::ThreadPool) {
    let object = glib::Object::new::<glib::Object>();
    let main = glib::MainContext::default();
    let main_loop = glib::MainLoop::new(Some(&main), false);
    let quit = main_loop.clone();
    checksum_async(&object, b"hello".to_vec(), pool, move |source, result| {
        let sum = checksum_finish(source.unwrap(), result).unwrap();
        println!("1. checksum_async -> {sum} (callback on the main loop)");
        quit.quit();
    });
    main_loop.run();
}

fn fd_wait(pool: &gdex::ThreadPool) {
    let (mut ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let reader = pool.scheduler().spawn(async move {
        let ready = gdex::unix_fd(&ours, IOCondition::IN)
            .await
            .expect("the fd is open");
        let mut line = String::new();
        ours.read_to_string(&mut line).unwrap();
        (ready, line)
    });
    theirs.write_all(b"a line through a socketpair").unwrap();
    drop(theirs);
    let (ready, line) = gdex::block_on(reader).unwrap();
    println!("2. unix_fd -> {ready:?}, read {line:?}");
}

const XML: &str = r#"<node><interface name="org.gdex.Example">
  <method name="Sum"><arg type="t" direction="in"/><arg type="t" direction="out"/></method>
</interface></node>"#;

fn dbus(pool: &gdex::ThreadPool) {
    let dir = std::env::temp_dir().join(format!("gdex-example-{}", std::process::id()));
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
    let scheduler = pool.scheduler();
    let exports = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let keep = exports.clone();
    server.connect_new_connection(move |_, connection| {
        let info = gio::DBusNodeInfo::for_xml(XML).unwrap();
        let interface = info.lookup_interface("org.gdex.Example").unwrap();
        let export = gdex::dbus::export(
            connection,
            "/org/gdex/Example",
            &interface,
            &scheduler,
            |call| async move {
                let (n,): (u64,) = call
                    .parameters
                    .get()
                    .ok_or_else(|| glib::Error::new(gio::DBusError::InvalidArgs, "expected (t)"))?;
                // Runs on a pool worker: heavy work does not hold the main loop.
                Ok(Some(((0..n).sum::<u64>(),).to_variant()))
            },
        )
        .unwrap();
        keep.borrow_mut().push((export, connection.clone()));
        true
    });
    server.start();
    let client = gdex::block_on(gio::DBusConnection::for_address_future(
        &server.client_address(),
        gio::DBusConnectionFlags::AUTHENTICATION_CLIENT,
        None,
    ))
    .unwrap();
    let calls: Vec<_> = (1..=100u64)
        .map(|n| {
            client.call_future(
                None,
                "/org/gdex/Example",
                "org.gdex.Example",
                "Sum",
                Some(&(n,).to_variant()),
                None,
                gio::DBusCallFlags::NONE,
                5_000,
            )
        })
        .collect();
    let replies = gdex::block_on(futures::future::join_all(calls));
    let last: (u64,) = replies.last().unwrap().as_ref().unwrap().get().unwrap();
    println!(
        "3. D-Bus: 100 concurrent Sum calls served as pool tasks; Sum(100) = {}",
        last.0
    );
    server.stop();
    exports.borrow_mut().clear();
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
    async_pair(&pool);
    fd_wait(&pool);
    dbus(&pool);
}
