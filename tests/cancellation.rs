//! Cancellation reaches GIO (X1) and GObjects (X2): every task's
//! `gio::Cancellable`, `gdex::Cancellable` bridged to `gio::Cancellable`,
//! and tasks bound to an object.

mod common;

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::{watchdog, Counted};
use gio::prelude::*;

/// A connected socket pair nobody writes to: reads from the first never
/// get data. The second end must be kept alive.
fn silent_socket() -> (OwnedFd, UnixStream) {
    let (ours, theirs) = UnixStream::pair().expect("socketpair");
    (OwnedFd::from(ours), theirs)
}

/// X1: a task reading from a GIO socket stream that never gets data is cancelled;
/// the read ends with G_IO_ERROR_CANCELLED through the task's own
/// cancellable, and `cancel().await` returns after the task's future (and
/// the stream it held) has been dropped.
#[test]
fn cancelling_a_task_cancels_its_gio_read() {
    watchdog("cancelling_a_task_cancels_its_gio_read", 30, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let (read_end, _write_end) = silent_socket();
        let (started_tx, started) = mpsc::channel();
        let (ended_tx, ended) = mpsc::channel::<Result<usize, glib::Error>>();
        let dropped = Arc::new(AtomicUsize::new(0));
        let guard = Counted(dropped.clone());
        let task = pool.scheduler().spawn_pinned(move || async move {
            let _guard = guard;
            let socket = gio::Socket::from_fd(read_end).unwrap();
            let connection = socket.connection_factory_create_connection();
            let stream = connection.input_stream();
            let cancellable = gdex::current_cancellable().expect("inside a task");
            let (done_tx, done) = futures::channel::oneshot::channel::<()>();
            stream.read_bytes_async(
                64,
                glib::Priority::DEFAULT,
                Some(&cancellable),
                move |result| {
                    ended_tx.send(result.map(|b| b.len())).unwrap();
                    let _ = done_tx.send(());
                },
            );
            started_tx.send(()).unwrap();
            let _ = done.await;
            drop(connection);
            unreachable!("the socket never gets data");
        });
        started.recv().unwrap();
        // Nothing comes: the read is really pending.
        if let Ok(early) = ended.recv_timeout(Duration::from_millis(50)) {
            panic!("the read ended before the cancel: {early:?}");
        }
        assert_eq!(gdex::block_on(task.cancel()), None);
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            1,
            "cancel().await returned before the drop"
        );
        let result = ended
            .recv_timeout(Duration::from_secs(10))
            .expect("the read never ended");
        let err = result.expect_err("a read of a silent socket cannot succeed");
        assert!(
            err.matches(gio::IOErrorEnum::Cancelled),
            "the read ended with {err:?}, not G_IO_ERROR_CANCELLED"
        );
    });
}

/// X1: dropping the handle cancels the cancellable too, and a cancellable
/// asked for after the cancellation is born cancelled.
#[test]
fn dropping_a_task_cancels_its_cancellable() {
    watchdog("dropping_a_task_cancels_its_cancellable", 30, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let (tx, rx) = mpsc::channel();
        let task = pool.scheduler().spawn(async move {
            tx.send(gdex::current_cancellable().unwrap()).unwrap();
            std::future::pending::<()>().await
        });
        let cancellable = rx.recv().unwrap();
        assert!(!cancellable.is_cancelled());
        drop(task);
        assert!(cancellable.is_cancelled(), "the drop did not cancel it");

        // A blocking job's cancellable (sync GIO calls take one).
        let (tx, rx) = mpsc::channel();
        let (go_tx, go) = mpsc::channel::<()>();
        let job = pool.spawn_blocking(move || {
            tx.send(gdex::current_cancellable().unwrap()).unwrap();
            let _ = go.recv();
        });
        let cancellable = rx.recv().unwrap();
        drop(job);
        assert!(cancellable.is_cancelled());
        drop(go_tx);
    });
}
