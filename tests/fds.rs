//! G2: `gdex::unix_fd` waits for a raw fd's readiness on whatever scheduler
//! awaits it (pool worker, main context, any context, fibers on both),
//! through a unix-fd `GSource` on that thread's context: readable, writable
//! and hang-up, with a pipe and a socketpair, and no busy polling while
//! many fds wait.
//!
//! The wait's edges: under `wait_for` (B4) on a thread with a pushed
//! context it does not iterate, the wait still ends; a pool shut down
//! under a wait drops it on its worker; a wait polled on one context, then
//! another, then the first again waits on the last only; a hang-up ends a
//! wait for input, and an empty condition waits for the hang-up.

use crate::common;

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::{after_first_poll, on_main, pump_during, wait_until, watchdog, Counted};
use gdex::glib::IOCondition;
use gdex::{fiber, glib, unix_fd, Scheduler};

/// What the reading side saw: its first wait, the bytes, its second wait.
type Seen = (IOCondition, Vec<u8>, IOCondition);

/// The other end of a pipe, on a thread of its own: once the reader's first
/// wait has been polled (so it is really waiting), writes "ping"; once its
/// second wait has been polled, closes the pipe.
fn pipe_writer(
    mut w: std::io::PipeWriter,
    polled: Arc<AtomicUsize>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        wait_until(|| polled.load(Ordering::SeqCst) >= 1);
        w.write_all(b"ping").unwrap();
        wait_until(|| polled.load(Ordering::SeqCst) >= 2);
        drop(w);
    })
}

/// The reading side as a future: wait readable, read, wait again (the
/// writer hangs up).
async fn read_then_hang_up(mut r: std::io::PipeReader, polled: Arc<AtomicUsize>) -> Seen {
    let first = after_first_poll(&polled, unix_fd(&r, IOCondition::IN))
        .await
        .unwrap();
    let mut buf = vec![0; 4];
    r.read_exact(&mut buf).unwrap();
    let second = after_first_poll(&polled, unix_fd(&r, IOCondition::IN))
        .await
        .unwrap();
    (first, buf, second)
}

/// The reading side as a fiber body: the same, with `fiber::wait`.
fn read_then_hang_up_in_fiber(mut r: std::io::PipeReader, polled: Arc<AtomicUsize>) -> Seen {
    assert!(fiber::in_fiber());
    let first = fiber::wait(after_first_poll(&polled, unix_fd(&r, IOCondition::IN))).unwrap();
    let mut buf = vec![0; 4];
    r.read_exact(&mut buf).unwrap();
    let second = fiber::wait(after_first_poll(&polled, unix_fd(&r, IOCondition::IN))).unwrap();
    (first, buf, second)
}

fn check(seen: Seen) {
    let (first, bytes, second) = seen;
    assert!(first.contains(IOCondition::IN), "first wait gave {first:?}");
    assert_eq!(bytes, b"ping");
    assert!(
        second.contains(IOCondition::HUP),
        "the closed pipe reads as a hang-up, got {second:?}"
    );
}

/// A socketpair end that fills its send buffer, waits until it is writable
/// again (the peer thread drains it), then waits readable for the peer's
/// answer.
async fn write_until_full_then_wait(
    mut ours: UnixStream,
    written: Arc<AtomicUsize>,
    polled: Arc<AtomicUsize>,
) -> (IOCondition, IOCondition, Vec<u8>) {
    ours.set_nonblocking(true).unwrap();
    let chunk = [7u8; 4096];
    loop {
        match ours.write(&chunk) {
            Ok(n) => {
                written.fetch_add(n, Ordering::SeqCst);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("write: {e}"),
        }
    }
    let writable = after_first_poll(&polled, unix_fd(&ours, IOCondition::OUT))
        .await
        .unwrap();
    let readable = after_first_poll(&polled, unix_fd(&ours, IOCondition::IN))
        .await
        .unwrap();
    let mut answer = vec![0; 4];
    ours.read_exact(&mut answer).unwrap();
    (writable, readable, answer)
}

/// The peer of [`write_until_full_then_wait`]: once the writer waits for
/// room, drains everything it wrote; once it waits for an answer, answers.
fn socket_peer(
    mut theirs: UnixStream,
    written: Arc<AtomicUsize>,
    polled: Arc<AtomicUsize>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        wait_until(|| polled.load(Ordering::SeqCst) >= 1);
        let mut sink = vec![0; written.load(Ordering::SeqCst)];
        theirs.read_exact(&mut sink).unwrap();
        wait_until(|| polled.load(Ordering::SeqCst) >= 2);
        theirs.write_all(b"pong").unwrap();
    })
}

fn check_socket(seen: (IOCondition, IOCondition, Vec<u8>)) {
    let (writable, readable, answer) = seen;
    assert!(writable.contains(IOCondition::OUT), "got {writable:?}");
    assert!(readable.contains(IOCondition::IN), "got {readable:?}");
    assert_eq!(answer, b"pong");
}

/// A pool task waits for a pipe and a socket pair to become readable
/// (G2; libdex 1.2 `Socket/wait_read_ready`, `dex_socket_wait`).
#[test]
fn a_pool_task_waits_for_a_pipe_and_a_socketpair() {
    watchdog("fd_pool_task", 60, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let (r, w) = std::io::pipe().unwrap();
        let polled = Arc::new(AtomicUsize::new(0));
        let writer = pipe_writer(w, polled.clone());
        check(gdex::block_on(pool.scheduler().spawn(read_then_hang_up(r, polled))).unwrap());
        writer.join().unwrap();

        let (ours, theirs) = UnixStream::pair().unwrap();
        let (written, polled) = (Arc::default(), Arc::new(AtomicUsize::new(0)));
        let peer = socket_peer(theirs, Arc::clone(&written), polled.clone());
        let task = pool
            .scheduler()
            .spawn(write_until_full_then_wait(ours, written, polled));
        check_socket(gdex::block_on(task).unwrap());
        peer.join().unwrap();
    });
}

#[test]
fn a_main_thread_task_waits_for_a_pipe_and_a_socketpair() {
    watchdog("fd_main_task", 60, || {
        on_main(|| {
            let (r, w) = std::io::pipe().unwrap();
            let polled = Arc::new(AtomicUsize::new(0));
            let writer = pipe_writer(w, polled.clone());
            let task = Scheduler::main().spawn_local(read_then_hang_up(r, polled));
            check(gdex::block_on(task).unwrap());
            writer.join().unwrap();

            let (ours, theirs) = UnixStream::pair().unwrap();
            let (written, polled) = (Arc::default(), Arc::new(AtomicUsize::new(0)));
            let peer = socket_peer(theirs, Arc::clone(&written), polled.clone());
            let task =
                Scheduler::main().spawn_local(write_until_full_then_wait(ours, written, polled));
            check_socket(gdex::block_on(task).unwrap());
            peer.join().unwrap();
        })
    });
}

/// Any `GMainContext`: a context scheduler on a context this test thread
/// iterates (no worker, no main loop of gdex's).
#[test]
fn a_context_scheduler_task_waits_for_a_pipe_and_a_socketpair() {
    watchdog("fd_context_task", 60, || {
        let context = gdex::glib::MainContext::new();
        let scheduler = Scheduler::for_context(&context);
        context
            .with_thread_default(|| {
                let (r, w) = std::io::pipe().unwrap();
                let polled = Arc::new(AtomicUsize::new(0));
                let writer = pipe_writer(w, polled.clone());
                let task = scheduler.spawn_local(read_then_hang_up(r, polled));
                check(gdex::block_on(task).unwrap());
                writer.join().unwrap();

                let (ours, theirs) = UnixStream::pair().unwrap();
                let (written, polled) = (Arc::default(), Arc::new(AtomicUsize::new(0)));
                let peer = socket_peer(theirs, Arc::clone(&written), polled.clone());
                let task = scheduler.spawn_local(write_until_full_then_wait(ours, written, polled));
                check_socket(gdex::block_on(task).unwrap());
                peer.join().unwrap();
            })
            .unwrap();
    });
}

#[test]
fn a_fiber_waits_for_a_pipe_on_a_worker_and_on_the_main_thread() {
    watchdog("fd_fibers", 60, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let (r, w) = std::io::pipe().unwrap();
        let polled = Arc::new(AtomicUsize::new(0));
        let writer = pipe_writer(w, polled.clone());
        let fiber = pool
            .scheduler()
            .spawn_fiber(move || read_then_hang_up_in_fiber(r, polled));
        check(gdex::block_on(fiber).unwrap());
        writer.join().unwrap();

        on_main(|| {
            let (r, w) = std::io::pipe().unwrap();
            let polled = Arc::new(AtomicUsize::new(0));
            let writer = pipe_writer(w, polled.clone());
            let fiber =
                Scheduler::main().spawn_fiber_local(move || read_then_hang_up_in_fiber(r, polled));
            check(gdex::block_on(fiber).unwrap());
            writer.join().unwrap();
        });
    });
}

/// 100 tasks each waiting for a pipe: the workers sleep in their contexts'
/// poll (no iteration while nothing is ready), then every wait ends once
/// its pipe is written.
#[test]
fn a_hundred_waiting_fds_keep_the_pool_asleep() {
    watchdog("fd_idle", 60, || {
        const FDS: usize = 100;
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let polled = Arc::new(AtomicUsize::new(0));
        let mut writers = Vec::new();
        let mut tasks = Vec::new();
        for i in 0..FDS {
            let (mut r, w) = std::io::pipe().unwrap();
            writers.push(w);
            let polled = polled.clone();
            tasks.push(pool.scheduler().spawn(async move {
                after_first_poll(&polled, unix_fd(&r, IOCondition::IN))
                    .await
                    .unwrap();
                let mut byte = [0];
                r.read_exact(&mut byte).unwrap();
                assert_eq!(byte[0] as usize, i % 256);
            }));
        }
        wait_until(|| polled.load(Ordering::SeqCst) == FDS);
        wait_until(|| pool.metrics().workers.iter().all(|w| w.parked));
        let before = pool.metrics();
        // Deliberate: the idle stretch under test.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let after = pool.metrics();
        for (b, a) in before.workers.iter().zip(&after.workers) {
            assert!(
                a.context_iterations <= b.context_iterations + 2,
                "a worker iterated {} times while only fds waited",
                a.context_iterations - b.context_iterations
            );
        }
        for (i, w) in writers.iter_mut().enumerate() {
            w.write_all(&[(i % 256) as u8]).unwrap();
        }
        for t in tasks {
            gdex::block_on(t).unwrap();
        }
    });
}

/// Cancelling a task that waits for an fd drops its wait (and the source
/// with it, see the unit tests of `future::fd`) on the task's worker (S5);
/// the fd is the caller's again, and nothing of the old wait reads it.
#[test]
fn a_cancelled_wait_is_dropped_on_its_worker() {
    watchdog("fd_cancel", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let (r, mut w) = std::io::pipe().unwrap();
        let mut ours = r.try_clone().unwrap();
        let (polled, dropped, woke) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let task = pool.scheduler().spawn({
            let (polled, dropped, woke) = (polled.clone(), dropped.clone(), woke.clone());
            async move {
                let _counted = Counted(dropped);
                after_first_poll(&polled, unix_fd(&r, IOCondition::IN))
                    .await
                    .unwrap();
                woke.fetch_add(1, Ordering::SeqCst);
            }
        });
        wait_until(|| polled.load(Ordering::SeqCst) == 1);
        drop(task);
        wait_until(|| dropped.load(Ordering::SeqCst) == 1);
        w.write_all(b"x").unwrap();
        let mut byte = [0];
        ours.read_exact(&mut byte).unwrap();
        assert_eq!(&byte, b"x");
        assert_eq!(woke.load(Ordering::SeqCst), 0);
    });
}

/// `gdex::wait_for` (for plain threads that have no main loop) on a thread
/// that has a context pushed as thread-default but does not iterate it
/// ends its fd wait (G2, B4): the wait attaches to the `gdex-timers`
/// thread's context. When `waiting_context()` picked the pushed context,
/// nobody ever polled the fd, and the wait hung although the fd was
/// readable before it started (`gdex::sleep` shares `waiting_context`
/// and hung the same way).
#[test]
fn an_fd_wait_under_wait_for_with_a_pushed_context_ends() {
    let (r, mut w) = std::io::pipe().unwrap();
    std::io::Write::write_all(&mut w, b"x").unwrap();
    let (tx, rx) = mpsc::channel();
    // Leaked on purpose if it hangs: the test reports instead of aborting.
    std::thread::spawn(move || {
        let context = glib::MainContext::new();
        let ready = context
            .with_thread_default(|| gdex::wait_for(unix_fd(&r, IOCondition::IN)))
            .unwrap();
        let _ = tx.send(ready.map_err(|e| e.to_string()));
    });
    let ready = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("wait_for(unix_fd(readable fd)) still waiting after 5 s");
    assert!(ready.unwrap().contains(IOCondition::IN));
    drop(w);
}

/// A pool that shuts down while a task waits for an fd drops the wait on
/// its worker (the task resolves `Cancelled`); the fd is then free to be
/// closed and reused, and a later readiness wakes nothing (G2, S9).
#[test]
fn holds_an_fd_wait_on_a_pool_that_shuts_down_is_dropped() {
    watchdog("fd_wait_at_shutdown", 30, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let (r, mut w) = std::io::pipe().unwrap();
        let _ours = r.try_clone().unwrap();
        let (polled, dropped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let task = pool.scheduler().spawn({
            let (polled, dropped) = (polled.clone(), dropped.clone());
            async move {
                let _c = Counted(dropped);
                common::after_first_poll(&polled, unix_fd(&r, IOCondition::IN))
                    .await
                    .unwrap();
            }
        });
        wait_until(|| polled.load(Ordering::SeqCst) == 1);
        pool.shutdown();
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        assert!(matches!(gdex::block_on(task), Err(gdex::Error::Cancelled)));
        std::io::Write::write_all(&mut w, b"x").unwrap();
    });
}

/// A wait polled on context A, then B, then A again waits on A only, and
/// ends there; HUP ends a wait for IN; an empty condition waits for HUP
/// (G2: the source moves when the task moves).
#[test]
fn holds_a_wait_moved_back_and_forth_and_hang_ups() {
    use std::future::Future;
    use std::task::{Context, Poll};
    let (a, b) = (glib::MainContext::new(), glib::MainContext::new());
    let (r, w) = std::io::pipe().unwrap();
    let mut wait = Box::pin(unix_fd(&r, IOCondition::IN));
    let mut empty = Box::pin(unix_fd(&r, IOCondition::empty()));
    let mut cx = Context::from_waker(std::task::Waker::noop());
    for ctx in [&a, &b, &a] {
        ctx.with_thread_default(|| {
            assert!(wait.as_mut().poll(&mut cx).is_pending());
            assert!(empty.as_mut().poll(&mut cx).is_pending());
        })
        .unwrap();
    }
    drop(w);
    pump_during(&b, Duration::from_millis(20));
    b.with_thread_default(|| ()).unwrap();
    assert!(
        format!("{wait:?}").contains("ready: false"),
        "B fired: {wait:?}"
    );
    let (mut got, mut got_empty) = (None, None);
    while got.is_none() || got_empty.is_none() {
        a.iteration(true);
        a.with_thread_default(|| {
            if let Poll::Ready(v) = wait.as_mut().poll(&mut cx) {
                got = Some(v.unwrap());
            }
            if let Poll::Ready(v) = empty.as_mut().poll(&mut cx) {
                got_empty = Some(v.unwrap());
            }
        })
        .unwrap();
    }
    assert!(got.unwrap().contains(IOCondition::HUP), "{got:?}");
    assert!(
        got_empty.unwrap().contains(IOCondition::HUP),
        "{got_empty:?}"
    );
}
