//! Attack 16: `gdex::aio` (io_uring backend and blocking-lane fallback).
//!
//! Like tests/aio.rs, the tests that do not depend on one backend run in
//! this process (io_uring) and once more, all of them, in a child process
//! with `GDEX_AIO=blocking` (`every_attack16_test_again_on_the_blocking_lane`).
//! Tests that may deadlock or that count process-wide fds run alone in a
//! child process (`common::run_child`).

mod common;

use std::ffi::CString;
use std::future::Future as _;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use common::{after_first_poll, is_child, run_child, wait_until, watchdog, TempDir};
use gdex::aio::{Backend, File};
use gdex::gio::IOErrorEnum;
use gdex::ThreadPool;

/// A FIFO named `name` in `dir`.
fn fifo(dir: &TempDir, name: &str) -> PathBuf {
    let path = dir.0.join(name);
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    path
}

fn pool(workers: usize) -> ThreadPool {
    ThreadPool::builder().workers(workers).build().unwrap()
}

/// How many of this process's fds are open on `path`.
fn fds_open_on(path: &Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target == path)
        .count()
}

/// Opens the FIFO's write end without blocking: `None` (ENXIO) if no
/// reader has it open.
fn open_writer_nonblocking(path: &Path) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .ok()
}

// ---------------------------------------------------------------------------
// Finding 1: on the blocking lane, an open whose future is dropped while
// the `openat` runs leaks the fd it opens.
// ---------------------------------------------------------------------------

/// An open of a FIFO blocks until a writer comes. Its future is dropped
/// while it blocks; then a writer comes. The fd the open gets must be
/// closed (io_uring: the request is cancelled, or its fd discarded; the
/// blocking lane: the `openat` finishes on its lane thread and its result
/// is discarded, which for an open must close the fd).
#[test]
fn a_dropped_open_of_a_fifo_leaks_no_fd() {
    watchdog("a_dropped_open_of_a_fifo_leaks_no_fd", 30, || {
        let dir = TempDir::new("attack16-fifoleak");
        let fifo = fifo(&dir, "fifo");
        let pool = pool(1);
        let polled = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicUsize::new(0));
        let marker = common::Counted(dropped.clone());
        let open = File::open(&fifo);
        let task = pool
            .scheduler()
            .spawn(after_first_poll(&polled, async move {
                let _marker = marker;
                open.await
            }));
        wait_until(|| polled.load(Ordering::SeqCst) == 1);
        // Let the open reach the kernel (the worker's next turn) or the
        // lane thread.
        std::thread::sleep(Duration::from_millis(50));
        drop(task);
        wait_until(|| dropped.load(Ordering::SeqCst) == 1);
        std::thread::sleep(Duration::from_millis(20));
        // A writer now: the open, if still blocked, completes.
        let writer = open_writer_nonblocking(&fifo);
        // Wait for the opened reader fd (if any) to come and go.
        std::thread::sleep(Duration::from_millis(100));
        drop(writer);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let open = fds_open_on(&fifo);
            if open == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{open} fd(s) still open on {} after its open's future was dropped ({:?})",
                fifo.display(),
                gdex::aio::backend()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    });
}

// ---------------------------------------------------------------------------
// Finding 2: on the blocking lane, `read_file` of a FIFO (a pipe, a
// process substitution, /dev/stdin) fails with "Illegal seek".
// ---------------------------------------------------------------------------

/// `read_file` reads a stream to its end on both backends, as
/// `std::fs::read` does.
#[test]
fn read_file_reads_a_fifo() {
    watchdog("read_file_reads_a_fifo", 30, || {
        let dir = TempDir::new("attack16-fifo");
        let fifo = fifo(&dir, "fifo");
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let writer = std::thread::spawn({
            let fifo = fifo.clone();
            let data = data.clone();
            move || {
                use std::io::Write;
                // Blocks until the reader opens; EPIPE if it gives up early.
                let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
                let _ = w.write_all(&data);
            }
        });
        let pool = pool(1);
        let task = pool.scheduler().spawn(gdex::aio::read_file(fifo.clone()));
        let read = gdex::block_on(task).unwrap();
        writer.join().unwrap();
        let read = read.unwrap_or_else(|err| {
            panic!(
                "read_file of a FIFO failed on {:?}: {err}",
                gdex::aio::backend()
            )
        });
        assert!(read == data, "read {} bytes of {}", read.len(), data.len());
    });
}

// ---------------------------------------------------------------------------
// Finding 3: an offset of u64::MAX means "the file position" to io_uring.
// ---------------------------------------------------------------------------

/// `read_at`/`write_at` take a position: an offset the system cannot take
/// (past `i64::MAX`) is refused with `InvalidArgument`, as `pread` does on
/// the blocking lane. On io_uring, `u64::MAX` (-1) instead reads and writes
/// at the file's current position, and moves it.
#[test]
fn an_offset_past_i64_max_is_refused_on_both_backends() {
    watchdog(
        "an_offset_past_i64_max_is_refused_on_both_backends",
        30,
        || {
            let dir = TempDir::new("attack16-offset");
            let path = dir.file("f", b"0123456789");
            let pool = pool(1);
            let task = pool.scheduler().spawn(async move {
                let file = File::open(&path).await.unwrap();
                let read = file.read_at(Vec::with_capacity(4), u64::MAX).await;
                let write_file = gdex::aio::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .await
                    .unwrap();
                let write = write_file.write_at(b"XY".to_vec(), u64::MAX).await;
                let after = std::fs::read(&path).unwrap();
                (read, write.map(|(n, _)| n), after)
            });
            let (read, write, after) = gdex::block_on(task).unwrap();
            match read {
                Err(err) => assert!(err.matches(IOErrorEnum::InvalidArgument), "{err}"),
                Ok(buf) => panic!(
                    "read_at(u64::MAX) gave {:?} on {:?}: it read at the file position",
                    String::from_utf8_lossy(&buf),
                    gdex::aio::backend()
                ),
            }
            assert!(
                write.is_err(),
                "write_at(u64::MAX) wrote {write:?} on {:?}; the file is now {:?}",
                gdex::aio::backend(),
                String::from_utf8_lossy(&after)
            );
            assert_eq!(after, b"0123456789");
        },
    );
}

// ---------------------------------------------------------------------------
// Finding 4: a waker that panics in the ring's dispatch loses the wake-ups
// of every other operation reaped in the same batch.
// ---------------------------------------------------------------------------

struct Panicky(AtomicBool);
impl Wake for Panicky {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
        panic!("attack16: a waker that panics");
    }
}

struct Counting(AtomicUsize);
impl Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Two reads on one context's ring complete in the same batch; the first
/// one's waker panics. The second one's waker must still be woken (X5: "the
/// other waiters are woken as if nothing happened").
#[test]
fn a_panicking_waker_loses_no_other_wake_up() {
    if gdex::aio::backend() != Backend::IoUring {
        return;
    }
    watchdog("a_panicking_waker_loses_no_other_wake_up", 30, || {
        let dir = TempDir::new("attack16-panicky");
        let path = dir.file("f", b"0123456789");
        let file = File::from(std::fs::File::open(&path).unwrap());
        let context = glib::MainContext::new();
        context
            .with_thread_default(|| {
                let _owner = context.acquire().unwrap();
                let panicky = Arc::new(Panicky(AtomicBool::new(false)));
                let counting = Arc::new(Counting(AtomicUsize::new(0)));
                let panicky_waker = Waker::from(panicky.clone());
                let counting_waker = Waker::from(counting.clone());
                let mut first = Box::pin(file.read_at(Vec::with_capacity(4), 0));
                let mut second = Box::pin(file.read_at(Vec::with_capacity(4), 4));
                assert!(first
                    .as_mut()
                    .poll(&mut Context::from_waker(&panicky_waker))
                    .is_pending());
                assert!(second
                    .as_mut()
                    .poll(&mut Context::from_waker(&counting_waker))
                    .is_pending());
                // Both are submitted in one prepare, complete from the page
                // cache, and are reaped in one dispatch.
                let deadline = Instant::now() + Duration::from_secs(5);
                while !panicky.0.load(Ordering::SeqCst) {
                    assert!(Instant::now() < deadline, "the first read never completed");
                    context.iteration(false);
                }
                for _ in 0..10 {
                    context.iteration(false);
                }
                let done = matches!(
                    second
                        .as_mut()
                        .poll(&mut Context::from_waker(Waker::noop())),
                    Poll::Ready(Ok(_))
                );
                assert_eq!(
                    counting.0.load(Ordering::SeqCst),
                    1,
                    "the second read is {} but its waker was never woken: a task awaiting it hangs",
                    if done { "done" } else { "not done" }
                );
            })
            .unwrap();
    });
}

// ---------------------------------------------------------------------------
// Finding 5: a worker in `blocking::blocking` (or one long poll) holds the
// operations queued on its ring: they are never submitted.
// ---------------------------------------------------------------------------

/// Task R awaits a read; task B, on the same worker right after R's first
/// poll, blocks that worker (`gdex::blocking::blocking`) until R is done.
/// B's `blocking` hands the worker's queue to its peer, and a gdex timer R
/// waited on would be raised by the monitor for the peer to run (P8: a
/// timer follows its task); R's read, queued on the blocked worker's ring,
/// must not wait for that worker either.
#[test]
fn a_worker_in_blocking_does_not_hold_the_reads_queued_on_its_ring() {
    watchdog(
        "a_worker_in_blocking_does_not_hold_the_reads_queued_on_its_ring",
        60,
        || {
            let dir = TempDir::new("attack16-stuck");
            let path = dir.file("f", b"0123456789");
            let pool = pool(2);
            let scheduler = pool.scheduler();
            let file = File::from(std::fs::File::open(&path).unwrap());
            for attempt in 0..50 {
                let scheduler2 = scheduler.clone();
                let file = file.clone();
                let task = scheduler.spawn(async move {
                    let me = std::thread::current().id();
                    let (done_tx, done_rx) = std::sync::mpsc::channel();
                    let (where_tx, where_rx) = std::sync::mpsc::channel();
                    let reader = scheduler2.spawn(async move {
                        where_tx.send(std::thread::current().id()).unwrap();
                        let read = file.read_at(Vec::with_capacity(4), 0).await;
                        let _ = done_tx.send(read.map(|b| b.len()));
                    });
                    // Let R take its first poll here, on this worker.
                    gdex::yield_now().await;
                    let same =
                        where_rx.try_recv().ok() == Some(me) && std::thread::current().id() == me;
                    if !same {
                        let _ = reader.await;
                        return None;
                    }
                    let start = Instant::now();
                    let outcome =
                        gdex::blocking::blocking(|| done_rx.recv_timeout(Duration::from_secs(3)));
                    Some((outcome, start.elapsed()))
                });
                match gdex::block_on(task).unwrap() {
                    None => continue,
                    Some((outcome, took)) => {
                        assert!(
                            matches!(outcome, Ok(Ok(4))),
                            "attempt {attempt}: the read queued on the blocked worker's ring \
                             never completed ({outcome:?} after {took:?}, {:?})",
                            gdex::aio::backend()
                        );
                        return;
                    }
                }
            }
            panic!("never got R's first poll on B's worker in 50 attempts");
        },
    );
}

// ---------------------------------------------------------------------------
// Finding 6: a waker is dropped under the ring's lock; a waker whose drop
// drops another operation of the same ring deadlocks.
// ---------------------------------------------------------------------------

/// A waker that owns a future (as the wakers of simple executors own their
/// task, and with it its future).
#[allow(dead_code)] // held, never read: its drop is the point
struct Owner(Mutex<Option<Pin<Box<gdex::aio::ReadAt>>>>);
impl Wake for Owner {
    fn wake(self: Arc<Self>) {}
}

#[test]
fn replacing_a_waker_that_owns_another_operation_does_not_deadlock() {
    if is_child() || gdex::aio::backend() != Backend::IoUring {
        return;
    }
    let (status, out) = run_child("child_replaced_waker_owns_an_operation", &[], 20);
    assert!(
        status.is_some_and(|s| s.success()) && out.contains("CHILD-OK"),
        "the child deadlocked or failed ({status:?}):\n{out}"
    );
}

#[test]
#[ignore]
fn child_replaced_waker_owns_an_operation() {
    if !is_child() {
        return;
    }
    watchdog("child_replaced_waker_owns_an_operation", 10, || {
        let dir = TempDir::new("attack16-wakerdrop");
        let path = dir.file("f", b"0123456789");
        let file = File::from(std::fs::File::open(&path).unwrap());
        let context = glib::MainContext::new();
        context
            .with_thread_default(|| {
                let _owner = context.acquire().unwrap();
                // Y: an operation on this context's ring, owned by a waker.
                let mut other = Box::pin(file.read_at(Vec::with_capacity(4), 0));
                assert!(other
                    .as_mut()
                    .poll(&mut Context::from_waker(Waker::noop()))
                    .is_pending());
                let owner = Arc::new(Owner(Mutex::new(Some(other))));
                // X: polled with that waker, so X's slot holds the only
                // other reference to it.
                let mut op = Box::pin(file.read_at(Vec::with_capacity(4), 4));
                {
                    let waker = Waker::from(owner.clone());
                    assert!(op
                        .as_mut()
                        .poll(&mut Context::from_waker(&waker))
                        .is_pending());
                }
                drop(owner);
                // X polled again by another waker: the old one is replaced
                // (and dropped, and with it Y).
                assert!(op
                    .as_mut()
                    .poll(&mut Context::from_waker(Waker::noop()))
                    .is_pending());
                drop(op);
                while context.iteration(false) {}
            })
            .unwrap();
    });
    println!("CHILD-OK");
}

// ---------------------------------------------------------------------------
// Finding 7: the thread-local cache keeps a dead context's ring (its
// io_uring instance and fd) for the life of the thread.
// ---------------------------------------------------------------------------

fn io_uring_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target.as_os_str() == "anon_inode:[io_uring]")
        .count()
}

#[test]
fn a_dead_contexts_ring_is_closed() {
    if is_child() || gdex::aio::backend() != Backend::IoUring {
        return;
    }
    let (status, out) = run_child("child_a_dead_contexts_ring_is_closed", &[], 20);
    assert!(
        status.is_some_and(|s| s.success()) && out.contains("CHILD-OK"),
        "({status:?}):\n{out}"
    );
}

#[test]
#[ignore]
fn child_a_dead_contexts_ring_is_closed() {
    if !is_child() {
        return;
    }
    let dir = TempDir::new("attack16-deadring");
    let path = dir.file("f", b"0123456789");
    let file = File::from(std::fs::File::open(&path).unwrap());
    // gdex::aio::backend() probes with a ring of its own, closed at once.
    let before = io_uring_fds();
    {
        let context = glib::MainContext::new();
        context
            .with_thread_default(|| {
                let _owner = context.acquire().unwrap();
                let mut read = Box::pin(file.read_at(Vec::with_capacity(4), 0));
                let mut cx = Context::from_waker(Waker::noop());
                loop {
                    if let Poll::Ready(buf) = read.as_mut().poll(&mut cx) {
                        assert_eq!(buf.unwrap(), b"0123");
                        break;
                    }
                    context.iteration(true);
                }
            })
            .unwrap();
        assert_eq!(io_uring_fds(), before + 1, "the context's ring");
    }
    // The context is gone, and with it its source.
    assert_eq!(
        io_uring_fds(),
        before,
        "the ring of a context that is gone is still open"
    );
    println!("CHILD-OK");
}

// ---------------------------------------------------------------------------
// Finding 8: with the ring full of requests that wait (reads of an empty
// pipe), the cancels of dropped ones never reach the kernel: the ring is
// wedged for good, and its drop waits forever.
// ---------------------------------------------------------------------------

/// 600 reads of an empty pipe on one context: the ring takes as many as its
/// cap, the rest wait in its backlog. All are dropped: their cancels must
/// reach the kernel, and a read of a plain file started afterwards on the
/// same context must complete.
#[test]
fn dropping_a_full_ring_of_waiting_reads_unwedges_it() {
    if is_child() || gdex::aio::backend() != Backend::IoUring {
        return;
    }
    let (status, out) = run_child("child_full_ring_of_waiting_reads", &[], 30);
    assert!(
        status.is_some_and(|s| s.success()) && out.contains("CHILD-OK"),
        "the child hung or failed ({status:?}):\n{out}"
    );
}

#[test]
#[ignore]
fn child_full_ring_of_waiting_reads() {
    if !is_child() {
        return;
    }
    watchdog("child_full_ring_of_waiting_reads", 20, || {
        let dir = TempDir::new("attack16-fullring");
        let path = dir.file("f", b"0123456789");
        let plain = File::from(std::fs::File::open(&path).unwrap());
        let (reader, writer) = std::io::pipe().unwrap();
        let pipe = File::from(std::os::fd::OwnedFd::from(reader));
        let context = glib::MainContext::new();
        context
            .with_thread_default(|| {
                let _owner = context.acquire().unwrap();
                let mut cx = Context::from_waker(Waker::noop());
                let mut reads: Vec<_> = (0..600)
                    .map(|_| Box::pin(pipe.read_at(Vec::with_capacity(16), 0)))
                    .collect();
                for read in &mut reads {
                    assert!(read.as_mut().poll(&mut cx).is_pending());
                }
                // A few turns hand the kernel all it takes.
                for _ in 0..10 {
                    context.iteration(false);
                }
                drop(reads);
                for _ in 0..10 {
                    context.iteration(false);
                }
                let mut read = Box::pin(plain.read_at(Vec::with_capacity(4), 0));
                let deadline = Instant::now() + Duration::from_secs(3);
                let got = loop {
                    if let Poll::Ready(got) = read.as_mut().poll(&mut cx) {
                        break Some(got);
                    }
                    if Instant::now() > deadline {
                        break None;
                    }
                    context.iteration(false);
                    std::thread::sleep(Duration::from_millis(1));
                };
                match got {
                    Some(got) => assert_eq!(got.unwrap(), b"0123"),
                    None => {
                        println!("WEDGED: the read never completed");
                        // Unwedge it so that the ring's drop can finish:
                        // data for every waiting read, then the end.
                        use std::io::Write;
                        let mut writer = writer;
                        let _ = writer.write_all(&[0u8; 600 * 16]);
                        drop(writer);
                        panic!("the ring is wedged: the cancels of the dropped reads never went");
                    }
                }
                drop(read);
                // Nothing of the pipe was taken by the cancelled reads.
                use std::io::Write;
                let mut writer = writer;
                writer.write_all(b"after").unwrap();
                drop(writer);
                let mut rest = Vec::new();
                use std::io::Read;
                std::fs::File::from(
                    std::os::fd::AsFd::as_fd(&pipe)
                        .try_clone_to_owned()
                        .unwrap(),
                )
                .read_to_end(&mut rest)
                .unwrap();
                assert_eq!(rest, b"after");
            })
            .unwrap();
    });
    println!("CHILD-OK");
}

// ---------------------------------------------------------------------------
// Checked: shutdown with operations in every state.
// ---------------------------------------------------------------------------

/// A one-worker pool holds 300 reads of an empty pipe (256 in the kernel,
/// the rest in the backlog) and reads of a plain file (done, perhaps not
/// taken); it is shut down and dropped: every task resolves, the ring's fd
/// is closed, and the cancelled reads took nothing from the pipe.
#[test]
fn shutdown_and_drop_with_operations_in_every_state() {
    if is_child() || gdex::aio::backend() != Backend::IoUring {
        return;
    }
    let (status, out) = run_child("child_shutdown_in_every_state", &[], 60);
    assert!(
        status.is_some_and(|s| s.success()) && out.contains("CHILD-OK"),
        "({status:?}):\n{out}"
    );
}

#[test]
#[ignore]
fn child_shutdown_in_every_state() {
    if !is_child() {
        return;
    }
    watchdog("child_shutdown_in_every_state", 40, || {
        let dir = TempDir::new("attack16-shutdown");
        let path = dir.file("f", b"0123456789");
        let plain = File::from(std::fs::File::open(&path).unwrap());
        let (reader, mut writer) = std::io::pipe().unwrap();
        let pipe = File::from(std::os::fd::OwnedFd::from(reader));
        let before = io_uring_fds();
        let pool = pool(1);
        let polled = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..300 {
            let read = pipe.read_at(Vec::with_capacity(8), 0);
            tasks.push(
                pool.scheduler()
                    .spawn(after_first_poll(&polled, async move {
                        read.await.map(|b| b.len())
                    })),
            );
        }
        for _ in 0..50 {
            let read = plain.read_at(Vec::with_capacity(8), 0);
            tasks.push(
                pool.scheduler()
                    .spawn(after_first_poll(&polled, async move {
                        read.await.map(|b| b.len())
                    })),
            );
        }
        wait_until(|| polled.load(Ordering::SeqCst) == 350);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(io_uring_fds(), before + 1, "the worker's ring");
        pool.shutdown();
        let mut resolved = 0;
        for (i, task) in tasks.into_iter().enumerate() {
            let outcome = gdex::block_on(task);
            // A pipe read never completes (nothing was written): cancelled
            // with its task. A plain read may have completed first.
            let pipe_read = i < 300;
            assert!(
                matches!(outcome, Err(gdex::Error::ShutDown | gdex::Error::Cancelled))
                    || (!pipe_read && matches!(outcome, Ok(Ok(8)))),
                "task {i}: {outcome:?}"
            );
            resolved += 1;
        }
        assert_eq!(resolved, 350);
        drop(pool);
        let deadline = Instant::now() + Duration::from_secs(10);
        while io_uring_fds() != before {
            assert!(
                Instant::now() < deadline,
                "the ring of the dropped pool is still open"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        use std::io::{Read, Write};
        writer.write_all(b"later").unwrap();
        drop(writer);
        let mut rest = Vec::new();
        std::fs::File::from(
            std::os::fd::AsFd::as_fd(&pipe)
                .try_clone_to_owned()
                .unwrap(),
        )
        .read_to_end(&mut rest)
        .unwrap();
        assert_eq!(rest, b"later", "a cancelled read took data");
    });
    println!("CHILD-OK");
}

/// The whole file once more in a child process, on the blocking lane.
#[test]
fn every_attack16_test_again_on_the_blocking_lane() {
    if std::env::var("GDEX_AIO").is_ok() || is_child() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args(["--skip", "every_attack16_test_again_on_the_blocking_lane"])
        .env("GDEX_AIO", "blocking")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the blocking-lane run failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("test result: ok"), "{text}");
}
