//! A1, A2: `gdex::aio` opens, reads and writes files on an
//! io_uring ring of the context that awaits, or on the blocking lane where
//! io_uring is unavailable. Every test here runs on both backends: once in
//! this process (io_uring where the kernel allows it), and once more, all of
//! them, in a child process with `GDEX_AIO=blocking`
//! (`every_test_again_on_the_blocking_lane`); the tests of the ring itself
//! return at once on the lane.
//!
//! At A1's edges: a FIFO's open dropped mid-call leaks no fd; `read_file`
//! reads a FIFO; offsets past `i64::MAX` are refused; a panicking waker
//! loses no other wake-up; a worker in `blocking()` holds no read queued
//! on its ring; a waker that owns another operation is replaced without a
//! deadlock; a dead context's ring is closed; a full ring of dropped reads
//! is not wedged; and a pool shut down with operations in every state
//! resolves them all. Those that may deadlock, or that count the process's
//! io_uring fds, run alone in a child process.

mod aio_stream;
mod common;

use std::future::Future as _;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use common::{after_first_poll, is_child, run_child_passing, wait_until, watchdog, TempDir};
use gdex::aio::{Backend, File, OpenOptions};
use gdex::gio::IOErrorEnum;
use gdex::{fiber, Scheduler, ThreadPool};

fn pool(workers: usize) -> ThreadPool {
    ThreadPool::builder().workers(workers).build().unwrap()
}

fn expected_backend() -> Backend {
    let refused = std::env::var_os("GDEX_TEST_IO_URING_REFUSED").is_some();
    match std::env::var("GDEX_AIO").as_deref() {
        Ok("blocking") => Backend::BlockingLane,
        _ if refused => Backend::BlockingLane,
        _ => Backend::IoUring,
    }
}

/// The backend is the one asked for: io_uring by default (this suite runs
/// where the kernel allows it; set `GDEX_AIO=blocking` where it does not),
/// the blocking lane with `GDEX_AIO=blocking`.
#[test]
fn the_backend_is_the_one_asked_for() {
    assert_eq!(gdex::aio::backend(), expected_backend());
}

/// Writes, then reads back at offsets, on a pool worker; `read_file`
/// agrees; the file made by `create` is truncated when created again.
#[test]
fn writes_then_reads_at_offsets() {
    watchdog("writes_then_reads_at_offsets", 30, || {
        let dir = TempDir::new("aio-rw");
        let path = dir.0.join("data");
        let pool = pool(2);
        let task = pool.scheduler().spawn({
            let path = path.clone();
            async move {
                let file = File::create(&path).await?;
                assert_eq!(file.path(), Some(path.as_path()));
                let (written, back) = file.write_at(b"0123456789".to_vec(), 0).await?;
                assert_eq!((written, back.as_slice()), (10, &b"0123456789"[..]));
                file.write_all_at(b"abc".to_vec(), 20).await?; // a hole 10..20
                drop(file);
                let file = File::open(&path).await?;
                let middle = file.read_at(Vec::with_capacity(4), 3).await?;
                assert_eq!(middle, b"3456");
                // A read appends to what the buffer holds.
                let mut middle = middle;
                middle.reserve(4);
                let more = file.read_at(middle, 7).await?;
                assert_eq!(more, b"3456789\0");
                let whole = gdex::aio::read_file(&path).await?;
                assert_eq!(whole, b"0123456789\0\0\0\0\0\0\0\0\0\0abc");
                // Created again: truncated.
                File::create(&path).await?;
                gdex::aio::read_file(&path).await
            }
        });
        assert_eq!(gdex::block_on(task).unwrap().unwrap(), b"");
    });
}

/// A read past what the file holds is short; at or after its end it gives
/// nothing (the end of the file); `read_file` of an empty file is empty, of
/// a larger one whole.
#[test]
fn short_reads_and_the_end_of_the_file() {
    watchdog("short_reads_and_the_end_of_the_file", 30, || {
        let dir = TempDir::new("aio-short");
        let small = dir.file("small", b"0123456789");
        let empty = dir.file("empty", b"");
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let large = dir.file("large", &big);
        let pool = pool(1);
        let task = pool.scheduler().spawn(async move {
            let file = File::open(&small).await?;
            let short = file.read_at(Vec::with_capacity(100), 4).await?;
            assert_eq!(short, b"456789", "a short read");
            let at_end = file.read_at(Vec::with_capacity(100), 10).await?;
            assert!(at_end.is_empty(), "at the end: nothing");
            let past = file.read_at(Vec::with_capacity(100), 1 << 40).await?;
            assert!(past.is_empty(), "past the end: nothing");
            assert!(gdex::aio::read_file(&empty).await?.is_empty());
            gdex::aio::read_file(&large).await
        });
        assert!(gdex::block_on(task).unwrap().unwrap() == big);
    });
}

/// Failures are `glib::Error`s in GIO's domain with the code GIO gives the
/// errno, and messages that name the file (libdex 1.2 `Aio/open-missing`:
/// `NotFound`; this file runs again on the blocking lane, libdex's
/// `open-posix` beside `open-uring`).
#[test]
fn failures_are_gio_errors_that_name_the_file() {
    watchdog("failures_are_gio_errors_that_name_the_file", 30, || {
        let dir = TempDir::new("aio-errors");
        let exists = dir.file("exists", b"x");
        let missing = dir.0.join("missing");
        let directory = dir.0.clone();
        let pool = pool(1);
        let task = pool.scheduler().spawn(async move {
            let err = File::open(&missing).await.unwrap_err();
            assert!(err.matches(IOErrorEnum::NotFound), "{err}");
            let text = err.to_string();
            assert!(
                text.contains("Error opening file") && text.contains(&*missing.to_string_lossy()),
                "{text}"
            );
            let err = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&exists)
                .await
                .unwrap_err();
            assert!(err.matches(IOErrorEnum::Exists), "{err}");
            let err = File::create(&directory).await.unwrap_err();
            assert!(err.matches(IOErrorEnum::IsDirectory), "{err}");
            // A directory opens for reading, but does not read.
            let dir_file = File::open(&directory).await.unwrap();
            let err = dir_file
                .read_at(Vec::with_capacity(8), 0)
                .await
                .unwrap_err();
            assert!(err.matches(IOErrorEnum::IsDirectory), "{err}");
            assert!(err.to_string().contains("Error reading file"), "{err}");
            // Writing to a file opened for reading only: EBADF.
            let read_only = File::open(&exists).await.unwrap();
            let err = read_only.write_at(b"y".to_vec(), 0).await.unwrap_err();
            let gdex::Error::Failed(glib_err) = &err else {
                panic!("not a GLib error: {err:?}")
            };
            assert_eq!(glib_err.domain(), glib::Quark::from_str("g-io-error-quark"));
            assert!(err.to_string().contains("Bad file descriptor"), "{err}");
        });
        gdex::block_on(task).unwrap();
    });
}

/// Misuse is refused with a message that says what to do: a read into a
/// buffer with no room.
#[test]
fn a_read_into_a_full_buffer_is_refused() {
    let dir = TempDir::new("aio-full");
    let path = dir.file("f", b"x");
    let file = File::from(std::fs::File::open(&path).unwrap());
    let refused = std::panic::catch_unwind(|| file.read_at(Vec::new(), 0)).unwrap_err();
    let message = refused.downcast_ref::<String>().unwrap();
    assert!(
        message.contains("no spare capacity") && message.contains("Vec::with_capacity"),
        "{message}"
    );
}

/// How `std::fs` and `gdex::aio` agree on an outcome: the error's kind as
/// `std::io::ErrorKind` names it (GIO's code mapped), or success.
fn kind_of_gdex<T>(result: &Result<T, gdex::Error>) -> Result<(), String> {
    match result {
        Ok(_) => Ok(()),
        Err(gdex::Error::Failed(err)) => Err(match err.kind::<IOErrorEnum>() {
            Some(IOErrorEnum::NotFound) => "NotFound".into(),
            Some(IOErrorEnum::Exists) => "AlreadyExists".into(),
            Some(IOErrorEnum::InvalidArgument) => "InvalidInput".into(),
            Some(IOErrorEnum::InvalidFilename) => "InvalidInput".into(),
            Some(IOErrorEnum::IsDirectory) => "IsADirectory".into(),
            other => format!("{other:?}"),
        }),
        Err(other) => Err(format!("{other:?}")),
    }
}

fn kind_of_std<T>(result: &std::io::Result<T>) -> Result<(), String> {
    match result {
        Ok(_) => Ok(()),
        Err(err) => Err(format!("{:?}", err.kind())),
    }
}

/// (A2) `OpenOptions` accepts and refuses exactly what
/// `std::fs::OpenOptions` does, all 64 combinations of its six switches,
/// on a file that exists and on one that does not, and leaves the file as
/// std leaves it; a refusal is an error (`InvalidArgument`), not a panic.
/// A path with a NUL byte is an error too (`InvalidFilename`).
#[test]
fn open_options_refuse_what_std_refuses() {
    watchdog("open_options_refuse_what_std_refuses", 60, || {
        let dir = TempDir::new("aio-options");
        let pool = pool(1);
        for exists in [true, false] {
            for bits in 0..64u32 {
                let on = |bit: u32| bits & (1 << bit) != 0;
                let set = |o: &mut OpenOptions| {
                    o.read(on(0))
                        .write(on(1))
                        .append(on(2))
                        .truncate(on(3))
                        .create(on(4))
                        .create_new(on(5));
                };
                let std_path = dir.0.join(format!("std-{exists}-{bits}"));
                let gdex_path = dir.0.join(format!("gdex-{exists}-{bits}"));
                if exists {
                    std::fs::write(&std_path, b"before").unwrap();
                    std::fs::write(&gdex_path, b"before").unwrap();
                }
                let expected = kind_of_std(
                    &std::fs::OpenOptions::new()
                        .read(on(0))
                        .write(on(1))
                        .append(on(2))
                        .truncate(on(3))
                        .create(on(4))
                        .create_new(on(5))
                        .open(&std_path),
                );
                let mut options = OpenOptions::new();
                set(&mut options);
                let opened = std::panic::catch_unwind(|| options.open(gdex_path.clone()))
                    .unwrap_or_else(|_| panic!("OpenOptions::open panicked for {bits:06b}"));
                let got = kind_of_gdex(&gdex::block_on(pool.scheduler().spawn(opened)).unwrap());
                assert_eq!(got, expected, "switches {bits:06b} (exists: {exists})");
                assert_eq!(
                    std::fs::read(&gdex_path).ok(),
                    std::fs::read(&std_path).ok(),
                    "switches {bits:06b} (exists: {exists}): the file afterwards"
                );
            }
        }
        let nul = Path::new("a\0b");
        let opened = std::panic::catch_unwind(|| File::open(nul))
            .unwrap_or_else(|_| panic!("a NUL byte in a path panicked"));
        let err = gdex::block_on(pool.scheduler().spawn(opened))
            .unwrap()
            .unwrap_err();
        assert!(err.matches(IOErrorEnum::InvalidFilename), "{err}");
        assert!(err.to_string().contains("NUL"), "{err}");
        assert_eq!(
            kind_of_std(&std::fs::File::open(nul)),
            Err("InvalidInput".into())
        );
        // The path is judged first, as std judges it first: a NUL byte with
        // switches std refuses is still the path's fault.
        let opened = OpenOptions::new().append(true).truncate(true).open(nul);
        let err = gdex::block_on(pool.scheduler().spawn(opened))
            .unwrap()
            .unwrap_err();
        assert!(err.matches(IOErrorEnum::InvalidFilename), "{err}");
        // Nonsensical on purpose: which refusal wins is the point.
        #[allow(clippy::nonsensical_open_options)]
        let std_err = std::fs::OpenOptions::new()
            .append(true)
            .truncate(true)
            .open(nul)
            .unwrap_err();
        assert!(
            std_err.raw_os_error().is_none() && std_err.to_string().contains("NUL"),
            "{std_err}"
        );
    });
}

/// 10,000 reads at once (each its own task) on two workers, of one shared
/// file and of 100 files opened at once: each gets its own bytes. More
/// than a ring holds in flight, so the backlog is used.
#[test]
fn ten_thousand_concurrent_reads_on_two_workers() {
    watchdog("ten_thousand_concurrent_reads_on_two_workers", 120, || {
        let reads = common::stress(10_000);
        let dir = TempDir::new("aio-many");
        let record = |i: usize| format!("record {i:>9}\n").into_bytes();
        let shared: Vec<u8> = (0..reads).flat_map(record).collect();
        let shared_path = dir.file("shared", &shared);
        let paths: Vec<PathBuf> = (0..100)
            .map(|i| dir.file(&format!("f{i}"), &record(i)))
            .collect();
        let pool = pool(2);
        let scheduler = pool.scheduler();
        let file = gdex::block_on(scheduler.spawn(File::open(shared_path)))
            .unwrap()
            .unwrap();
        let len = record(0).len();
        let tasks: Vec<_> = (0..reads)
            .map(|i| {
                let file = file.clone();
                scheduler.spawn(async move {
                    let buf = file
                        .read_at(Vec::with_capacity(len), (i * len) as u64)
                        .await?;
                    Ok::<_, gdex::Error>((i, buf))
                })
            })
            .collect();
        let opens: Vec<_> = paths
            .iter()
            .enumerate()
            .map(|(i, path)| {
                let path = path.clone();
                scheduler.spawn(async move { (i, gdex::aio::read_file(path).await) })
            })
            .collect();
        for task in tasks {
            let (i, buf) = gdex::block_on(task).unwrap().unwrap();
            assert_eq!(buf, record(i));
        }
        for task in opens {
            let (i, contents) = gdex::block_on(task).unwrap();
            assert_eq!(contents.unwrap(), record(i));
        }
    });
}

/// Every kind of thread can await: the main context's scheduler (as a GTK
/// app's main thread), a context scheduler, a fiber, and a plain thread in
/// `wait_for` or `block_on`.
#[test]
fn every_scheduler_can_await_aio() {
    watchdog("every_scheduler_can_await_aio", 30, || {
        let dir = TempDir::new("aio-everywhere");
        let path = dir.file("f", b"everywhere");
        // The main scheduler, from a thread that holds the main context.
        let on_main = common::on_main(|| {
            let task = Scheduler::main().spawn_local(gdex::aio::read_file(path.clone()));
            gdex::block_on(task).unwrap().unwrap()
        });
        assert_eq!(on_main, b"everywhere");
        // A scheduler on a context of our own, which this thread pumps.
        let context = glib::MainContext::new();
        let scheduler = Scheduler::for_context(&context);
        let task = scheduler.spawn(gdex::aio::read_file(path.clone()));
        let mut task = Box::pin(task);
        let waker = std::task::Waker::noop();
        let outcome = loop {
            context.iteration(true);
            if let std::task::Poll::Ready(outcome) = task
                .as_mut()
                .poll(&mut std::task::Context::from_waker(waker))
            {
                break outcome;
            }
        };
        assert_eq!(outcome.unwrap().unwrap(), b"everywhere");
        // A fiber on the pool.
        let pool = pool(1);
        let fiber = pool.scheduler().spawn_fiber({
            let path = path.clone();
            move || fiber::wait(gdex::aio::read_file(path))
        });
        assert_eq!(gdex::block_on(fiber).unwrap().unwrap(), b"everywhere");
        // Plain threads: parked (wait_for) and iterating (block_on).
        let parked = std::thread::spawn({
            let path = path.clone();
            move || gdex::wait_for(gdex::aio::read_file(path))
        });
        assert_eq!(parked.join().unwrap().unwrap(), b"everywhere");
        let blocked = std::thread::spawn({
            let path = path.clone();
            move || gdex::block_on(gdex::aio::read_file(path))
        });
        assert_eq!(blocked.join().unwrap().unwrap(), b"everywhere");
    });
}

/// Dropping a read in flight (a pipe with no data) cancels it: on io_uring
/// the request is cancelled and the data written afterwards stays in the
/// pipe; on the blocking lane the `pread` already running is not
/// interrupted, and takes the data when it comes, into its own buffer,
/// which it then drops. The pool goes on either way.
#[test]
fn dropping_a_read_in_flight_cancels_it() {
    watchdog("dropping_a_read_in_flight_cancels_it", 30, || {
        let (reader, mut writer) = std::io::pipe().unwrap();
        let reader = File::from(std::os::fd::OwnedFd::from(reader));
        let pool = pool(1);
        let polled = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicUsize::new(0));
        let read = reader.read_at(Vec::with_capacity(64), 0);
        let marker = common::Counted(dropped.clone());
        let task = pool
            .scheduler()
            .spawn(after_first_poll(&polled, async move {
                let _marker = marker;
                read.await
            }));
        wait_until(|| polled.load(Ordering::SeqCst) == 1);
        // Let the worker's loop hand the request over (a later turn would
        // cancel it before it started: the same outcome for the pipe).
        std::thread::sleep(std::time::Duration::from_millis(20));
        drop(task);
        // The handle's drop cancels the task; its worker drops the future.
        wait_until(|| dropped.load(Ordering::SeqCst) == 1);
        writer.write_all(b"after").unwrap();
        drop(writer);
        if gdex::aio::backend() == Backend::IoUring {
            assert_eq!(
                rest_of_pipe(&reader),
                b"after",
                "the cancelled read took nothing"
            );
        }
        // The pool still works.
        let task = pool.scheduler().spawn(async { 1 });
        assert_eq!(gdex::block_on(task).unwrap(), 1);
    });
}

trait OwnedCopy {
    fn as_fd_owned(&self) -> std::os::fd::OwnedFd;
}

impl OwnedCopy for File {
    fn as_fd_owned(&self) -> std::os::fd::OwnedFd {
        use std::os::fd::AsFd;
        self.as_fd().try_clone_to_owned().unwrap()
    }
}

/// What is left in the pipe `reader` reads from, up to its end (its
/// writers gone), read through a descriptor of its own.
fn rest_of_pipe(reader: &File) -> Vec<u8> {
    let mut rest = Vec::new();
    std::fs::File::from(reader.as_fd_owned())
        .read_to_end(&mut rest)
        .unwrap();
    rest
}

/// A pool shut down with reads in flight resolves their tasks, and the
/// reads are cancelled with it: nothing hangs, the data written later
/// stays in the pipes (io_uring).
#[test]
fn shutdown_with_reads_in_flight() {
    watchdog("shutdown_with_reads_in_flight", 30, || {
        let pool = pool(2);
        let polled = Arc::new(AtomicUsize::new(0));
        let mut pipes = Vec::new();
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (reader, writer) = std::io::pipe().unwrap();
            let reader = File::from(std::os::fd::OwnedFd::from(reader));
            tasks.push(pool.scheduler().spawn(after_first_poll(
                &polled,
                reader.read_at(Vec::with_capacity(8), 0),
            )));
            pipes.push((reader, writer));
        }
        wait_until(|| polled.load(Ordering::SeqCst) == 8);
        pool.shutdown();
        for task in tasks {
            let outcome = gdex::block_on(task);
            assert!(outcome.is_err(), "a read that never completed: {outcome:?}");
        }
        drop(pool);
        for (reader, mut writer) in pipes {
            writer.write_all(b"later").unwrap();
            drop(writer);
            if gdex::aio::backend() == Backend::IoUring {
                assert_eq!(
                    rest_of_pipe(&reader),
                    b"later",
                    "a cancelled read took data"
                );
            }
        }
    });
}

/// An open whose future is dropped closes the file it opened: no fd of
/// the process refers to the file afterwards.
#[test]
fn a_dropped_open_leaks_no_fd() {
    watchdog("a_dropped_open_leaks_no_fd", 30, || {
        let dir = TempDir::new("aio-openleak");
        let path = dir.file("f", b"x");
        let pool = pool(1);
        for _ in 0..200 {
            // Spawned and dropped at once: some are dropped before the open
            // starts, some while it runs, some after it completed.
            drop(pool.scheduler().spawn(File::open(path.clone())));
        }
        // Every open has finished once a later task on the same worker has
        // run and the worker's loop has turned twice more.
        for _ in 0..3 {
            gdex::block_on(
                pool.scheduler()
                    .spawn(gdex::sleep(std::time::Duration::from_millis(5))),
            )
            .unwrap();
        }
        no_fd_left_on(&path, "");
    });
}

/// libdex 1.2 `Aio/close-success`: dropping a `File` closes its fd
/// (gdex's counterpart of `dex_aio_close`; a bad fd cannot be written with
/// an owned `File`, so `close-bad-fd` has none) (A1).
#[test]
fn dropping_a_file_closes_its_fd() {
    watchdog("dropping_a_file_closes_its_fd", 30, || {
        let dir = TempDir::new("aio-close");
        let path = dir.file("f", b"x");
        let pool = pool(1);
        let p = path.clone();
        let file = gdex::block_on(pool.scheduler().spawn(File::open(p)))
            .unwrap()
            .unwrap();
        assert_eq!(fds_open_on(&path), 1);
        drop(file);
        no_fd_left_on(&path, "the File was dropped");
    });
}

/// How many of this process's fds are open on `path`.
fn fds_open_on(path: &Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target == path)
        .count()
}

/// Waits up to 5 s for no fd of this process to be open on `path`; fails
/// saying how many still are, and `after` what.
fn no_fd_left_on(path: &Path, after: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let open = fds_open_on(path);
        if open == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{open} fd(s) still open on {}{after}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A worker whose task waits for its own reads goes back to its loop to
/// submit them (and take their completions) as soon as it runs dry: it
/// does not park (nor spin) first, once per read.
#[test]
fn a_worker_waiting_for_its_own_reads_does_not_park_for_each() {
    if gdex::aio::backend() != Backend::IoUring {
        return; // the reads run on lane threads: the worker parks meanwhile
    }
    watchdog(
        "a_worker_waiting_for_its_own_reads_does_not_park_for_each",
        30,
        || {
            let dir = TempDir::new("aio-noparks");
            let path = dir.file("f", &[7u8; 4096]);
            let pool = pool(1);
            let reads = 1000;
            // Open it and read it once: the page cache has it, the ring exists.
            let file = gdex::block_on(pool.scheduler().spawn(File::open(path)))
                .unwrap()
                .unwrap();
            let before = pool.metrics().workers[0].parks;
            let task = pool.scheduler().spawn(async move {
                for _ in 0..reads {
                    let buf = file.read_at(Vec::with_capacity(4096), 0).await?;
                    assert_eq!(buf.len(), 4096);
                }
                Ok::<_, gdex::Error>(())
            });
            gdex::block_on(task).unwrap().unwrap();
            let parks = pool.metrics().workers[0].parks - before;
            assert!(
                parks < reads / 10,
                "{parks} parks for {reads} reads from the page cache"
            );
        },
    );
}

/// Where the kernel refuses io_uring (here a seccomp filter makes
/// `io_uring_setup` fail with `EPERM`, as container runtimes do), gdex
/// falls back to the blocking lane by itself: the backend says so, and a
/// sample of this suite passes in that child process.
#[test]
fn io_uring_refused_by_seccomp_falls_back_to_the_lane() {
    if std::env::var_os("GDEX_TEST_IO_URING_REFUSED").is_some() || std::env::var("GDEX_AIO").is_ok()
    {
        return; // we are the child (or the run is on one backend already)
    }
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().unwrap();
    let mut command = std::process::Command::new(exe);
    command
        .args([
            "the_backend_is_the_one_asked_for",
            "writes_then_reads_at_offsets",
            "failures_are_gio_errors_that_name_the_file",
            "every_scheduler_can_await_aio",
        ])
        .env("GDEX_TEST_IO_URING_REFUSED", "1");
    // SAFETY: between fork and exec the closure makes only two system calls
    // (prctl), async-signal-safe, on memory it owns.
    unsafe {
        command.pre_exec(|| {
            // The filter: io_uring_setup fails with EPERM; everything else
            // is allowed.
            let mut filter = [
                libc::sock_filter {
                    code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
                    jt: 0,
                    jf: 0,
                    k: 0, // seccomp_data.nr
                },
                libc::sock_filter {
                    code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
                    jt: 0,
                    jf: 1,
                    k: libc::SYS_io_uring_setup as u32,
                },
                libc::sock_filter {
                    code: (libc::BPF_RET | libc::BPF_K) as u16,
                    jt: 0,
                    jf: 0,
                    k: libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
                },
                libc::sock_filter {
                    code: (libc::BPF_RET | libc::BPF_K) as u16,
                    jt: 0,
                    jf: 0,
                    k: libc::SECCOMP_RET_ALLOW,
                },
            ];
            let program = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_mut_ptr(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &program as *const libc::sock_fprog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let text = passing_run("the run with io_uring refused", &mut command);
    assert!(text.contains("4 passed"), "{text}");
}

/// Runs `command` (this test binary again) and gives its stdout, failing
/// with both its outputs, under `what`, unless it passed.
fn passing_run(what: &str, command: &mut std::process::Command) -> String {
    let out = command.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The whole suite once more in a child process, on the blocking lane.
#[test]
fn every_test_again_on_the_blocking_lane() {
    if std::env::var("GDEX_AIO").is_ok() || std::env::var_os("GDEX_TEST_IO_URING_REFUSED").is_some()
    {
        return; // we are the child (or the whole run is on one backend)
    }
    let exe = std::env::current_exe().unwrap();
    let text = passing_run(
        "the blocking-lane run",
        std::process::Command::new(exe)
            .args(["--skip", "every_test_again_on_the_blocking_lane"])
            .env("GDEX_AIO", "blocking"),
    );
    assert!(text.contains("test result: ok"), "{text}");
}

/// What an io_uring read gives is initialised for valgrind's memcheck as
/// well as for Rust (the README's memory check runs this suite under it,
/// expecting no error): the kernel writes the bytes as it completes the
/// request, where memcheck cannot see it, so gdex tells memcheck which
/// bytes a read wrote. A child reads a file (whole, in part, appended to
/// what the buffer held) and a pipe under memcheck, compares every byte,
/// and memcheck must report nothing. Only on io_uring: the blocking lane's
/// `pread` is a system call memcheck knows.
#[test]
fn what_a_read_wrote_is_initialised_under_valgrinds_memcheck() {
    if is_child() || gdex::aio::backend() != Backend::IoUring {
        return;
    }
    watchdog(
        "what_a_read_wrote_is_initialised_under_valgrinds_memcheck",
        120,
        || {
            let exe = std::env::current_exe().unwrap();
            let mut command = std::process::Command::new("valgrind");
            command
                .args(["--error-exitcode=99", "-q"])
                .arg(exe)
                .args([
                    "child_reads_under_memcheck",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("GDEX_TEST_CHILD", "1");
            let out = command.output().unwrap_or_else(|err| {
                panic!("cannot run valgrind ({err}): install it (Debian: apt-get install valgrind)")
            });
            let (stdout, stderr) = (
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
            );
            assert!(
                out.status.success() && stdout.contains("CHILD-OK"),
                "reads under memcheck: {} (99: memcheck found errors)\n{stdout}\n{stderr}",
                out.status
            );
        },
    );
}

#[test]
#[ignore = "run under valgrind by what_a_read_wrote_is_initialised_under_valgrinds_memcheck"]
fn child_reads_under_memcheck() {
    assert_eq!(gdex::aio::backend(), Backend::IoUring);
    let dir = TempDir::new("aio-memcheck");
    let path = dir.file("f", b"0123456789");
    let pool = pool(1);
    let task = pool.scheduler().spawn(async move {
        let file = File::open(&path).await?;
        let part = file.read_at(Vec::with_capacity(4), 3).await?;
        assert_eq!(part, b"3456");
        // Appended to what the buffer holds, and short: 3 bytes of 100.
        let mut more = part;
        more.reserve(100);
        let more = file.read_at(more, 7).await?;
        assert_eq!(more, b"3456789");
        assert_eq!(gdex::aio::read_file(&path).await?, b"0123456789");
        Ok::<_, gdex::Error>(())
    });
    gdex::block_on(task).unwrap().unwrap();
    // A pipe: the kernel completes the read later, when data comes.
    let (file, writer) = pipe();
    let writer = write_later(writer, 50, b"late");
    let got = finish_elsewhere("the pipe", file.read_at(Vec::with_capacity(16), 0));
    assert_eq!(got, b"late");
    drop(writer.join().unwrap());
    println!("CHILD-OK");
}

// A2: an operation follows its poller, survives the threads and loops it
// met, and both backends open as `open(2)` does.

/// Polls `future` once on this thread under `gdex::block_on` (so on the
/// context pushed here, if any), lets that loop turn `turns` more times
/// (a queued request reaches the kernel in the first), and gives the
/// future back, unfinished.
fn started_here<F: std::future::Future + Unpin>(mut future: F, turns: usize) -> F {
    gdex::block_on(async {
        let polled = poll_once(&mut future).await;
        assert!(!polled, "the operation was meant to wait");
        for _ in 0..turns {
            gdex::yield_now().await;
        }
    });
    future
}

/// Polls `future` once, from the task that awaits this, and says whether
/// it finished: an operation queued (and registered) where that task runs.
async fn poll_once<F: std::future::Future + Unpin>(future: &mut F) -> bool {
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(std::pin::Pin::new(&mut *future).poll(cx).is_ready())
    })
    .await
}

/// An empty pipe's read end as an AIO file, and its write end.
fn pipe() -> (File, std::io::PipeWriter) {
    let (reader, writer) = std::io::pipe().unwrap();
    (File::from(std::os::fd::OwnedFd::from(reader)), writer)
}

/// Writes `data` to `writer` after `ms` milliseconds, from a thread.
fn write_later(
    mut writer: std::io::PipeWriter,
    ms: u64,
    data: &'static [u8],
) -> std::thread::JoinHandle<std::io::PipeWriter> {
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(ms));
        writer.write_all(data).unwrap();
        writer
    })
}

/// Awaits `future` with `gdex::wait_for`, failing after 5 s.
fn finish_elsewhere<T>(
    what: &str,
    future: impl std::future::Future<Output = Result<T, gdex::Error>>,
) -> T {
    match gdex::wait_for(gdex::timeout(std::time::Duration::from_secs(5), future)) {
        Ok(Ok(value)) => value,
        Ok(Err(err)) => panic!("{what}: {err}"),
        Err(elapsed) => panic!("{what}: {elapsed} (5 s)"),
    }
}

/// (A2) A read polled once under `block_on` on a thread with a pushed
/// context, whose loop then stops turning, completes when it is awaited
/// with `wait_for`: whether it was still queued or already in the kernel.
#[test]
fn an_operation_started_under_block_on_finishes_under_wait_for() {
    watchdog(
        "an_operation_started_under_block_on_finishes_under_wait_for",
        60,
        || {
            for turns in [0, 3] {
                let (file, writer) = pipe();
                let context = glib::MainContext::new();
                let read = context
                    .with_thread_default(|| {
                        started_here(file.read_at(Vec::with_capacity(16), 0), turns)
                    })
                    .unwrap();
                let writer = write_later(writer, 100, b"late");
                let got = finish_elsewhere(&format!("after {turns} turns"), read);
                assert_eq!(got, b"late", "after {turns} turns");
                drop(writer.join().unwrap());
                drop(context);
            }
        },
    );
}

/// (A2) A read polled in a pool task that hands its future out, awaited
/// after the pool is gone (its worker's loop, context and thread with it):
/// it completes, queued or in the kernel when the worker exited.
#[test]
fn an_operation_outlives_the_pool_that_started_it() {
    watchdog("an_operation_outlives_the_pool_that_started_it", 60, || {
        for turns in [0, 3] {
            let (file, writer) = pipe();
            let pool = pool(1);
            // The task hands its unfinished read out: the point of the test.
            #[allow(clippy::async_yields_async)]
            let read = gdex::block_on(pool.scheduler().spawn(async move {
                let mut read = file.read_at(Vec::with_capacity(16), 0);
                let first = poll_once(&mut read).await;
                assert!(!first, "the pipe is empty");
                for _ in 0..turns {
                    gdex::sleep(std::time::Duration::from_millis(2)).await;
                }
                read
            }))
            .unwrap();
            pool.shutdown();
            drop(pool);
            let writer = write_later(writer, 100, b"late");
            let got = finish_elsewhere(&format!("after {turns} turns"), read);
            assert_eq!(got, b"late", "after {turns} turns");
            drop(writer.join().unwrap());
        }
    });
}

/// `open`, an open for writing of the FIFO at `path` started elsewhere
/// (round `round` of a test), awaited with `wait_for` while a reader comes
/// `ms` milliseconds later from a thread: it opens, writes `data`, and the
/// reader reads it.
fn a_late_reader_gets(
    round: usize,
    path: PathBuf,
    ms: u64,
    open: impl std::future::Future<Output = Result<File, gdex::Error>>,
    data: &'static [u8],
) {
    let reader = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(ms));
        std::fs::read(path).unwrap()
    });
    let fifo = finish_elsewhere(&format!("round {round}: the FIFO's open"), open);
    let (written, _) = gdex::wait_for(fifo.write_at(data.to_vec(), 0)).unwrap();
    assert_eq!(written, data.len());
    drop(fifo);
    assert_eq!(reader.join().unwrap(), data, "round {round}");
}

/// A fresh FIFO in `dir`.
fn fifo(dir: &TempDir, name: &str) -> PathBuf {
    let path = dir.0.join(name);
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    path
}

/// (A2) An operation nobody cancelled does not fail when another thread,
/// which only dropped an unrelated operation of the same ring, exits:
/// only the ring's owner hands requests to the kernel, and the kernel's
/// own error codes ("Unknown error 512") never reach the user. Here an
/// open of a FIFO for writing (which waits for a reader) is queued on a
/// context nobody iterates, a short-lived thread drops a read of the same
/// ring and exits, and the open then completes when a reader comes.
#[test]
fn a_thread_that_exits_fails_no_operation_it_did_not_own() {
    watchdog(
        "a_thread_that_exits_fails_no_operation_it_did_not_own",
        60,
        || {
            let dir = TempDir::new("aio-exiting-thread");
            let path = fifo(&dir, "fifo");
            let (file, _writer) = pipe();
            let context = glib::MainContext::new();
            context
                .with_thread_default(|| {
                    let read = started_here(file.read_at(Vec::with_capacity(16), 0), 3);
                    let open =
                        started_here(OpenOptions::new().write(true).create(true).open(&path), 0);
                    std::thread::spawn(move || drop(read)).join().unwrap();
                    let reader = std::thread::spawn({
                        let path = path.clone();
                        move || {
                            std::thread::sleep(std::time::Duration::from_millis(100));
                            std::fs::read(path).unwrap()
                        }
                    });
                    let opened =
                        gdex::block_on(gdex::timeout(std::time::Duration::from_secs(5), open));
                    let fifo = opened
                        .unwrap_or_else(|elapsed| panic!("the FIFO's open: {elapsed}"))
                        .unwrap_or_else(|err| panic!("the FIFO's open failed: {err}"));
                    let (written, _) =
                        gdex::block_on(fifo.write_at(b"through".to_vec(), 0)).unwrap();
                    assert_eq!(written, 7);
                    drop(fifo);
                    assert_eq!(reader.join().unwrap(), b"through");
                })
                .unwrap();
        },
    );
}

/// (A2) A FIFO opens as `open(2)` and `std::fs` open it, on both backends:
/// for writing, it waits for a reader (io_uring's first, non-blocking try
/// would fail with ENXIO at once); for reading, it waits for a writer, and
/// the first read then gets the writer's data (a reader opened early would
/// read the end of the file at once).
#[test]
fn a_fifo_opens_as_open_2_says() {
    watchdog("a_fifo_opens_as_open_2_says", 60, || {
        let dir = TempDir::new("aio-fifo");
        let pool = pool(1);
        // For writing, before any reader.
        let path = fifo(&dir, "w");
        let open = pool
            .scheduler()
            .spawn(OpenOptions::new().write(true).open(path.clone()));
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(
            !open.is_finished(),
            "an open for writing did not wait for a reader: {:?}",
            gdex::block_on(open)
        );
        let reader = std::thread::spawn(move || std::fs::read(path).unwrap());
        let file = gdex::block_on(open).unwrap().unwrap();
        gdex::block_on(pool.scheduler().spawn({
            let file = file.clone();
            async move { file.write_all_at(b"to the reader".to_vec(), 0).await }
        }))
        .unwrap()
        .unwrap();
        drop(file);
        assert_eq!(reader.join().unwrap(), b"to the reader");
        // For reading, before any writer.
        let path = fifo(&dir, "r");
        let open = pool.scheduler().spawn(File::open(path.clone()));
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(
            !open.is_finished(),
            "an open for reading did not wait for a writer"
        );
        let writer = std::thread::spawn(move || {
            let mut writer = std::fs::OpenOptions::new().write(true).open(path).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(50));
            writer.write_all(b"from the writer").unwrap();
        });
        let file = gdex::block_on(open).unwrap().unwrap();
        let got = gdex::block_on(
            pool.scheduler()
                .spawn(async move { read_to_end(&file).await }),
        );
        writer.join().unwrap();
        assert_eq!(got.unwrap().unwrap(), b"from the writer");
    });
}

/// Reads `file` from its start until a read gives nothing.
async fn read_to_end(file: &File) -> Result<Vec<u8>, gdex::Error> {
    let mut all = Vec::new();
    loop {
        all.reserve(4096);
        let before = all.len();
        all = file.read_at(all, before as u64).await?;
        if all.len() == before {
            return Ok(all);
        }
    }
}

// A2 at its edges: contexts that die and are born again at the same address,
// FIFOs whose other end comes and goes, fds on every path.

/// The address of `context`'s `GMainContext`, and the usable size of its
/// allocation.
fn context_address(context: &glib::MainContext) -> (usize, usize) {
    use glib::translate::ToGlibPtr;
    let at: *mut glib::ffi::GMainContext = context.to_glib_none().0;
    // SAFETY: `at` is a live allocation of GLib's (`g_new0`, the system
    // allocator's), which `context` holds.
    (at as usize, unsafe { libc::malloc_usable_size(at.cast()) })
}

/// A fresh context at `address`, where a context of `size` bytes was just
/// freed: the allocator (glibc's) is steered so that the next `calloc` of
/// that size, `g_main_context_new`'s, gets that very block, as it would in
/// time by itself in a program that makes short-lived contexts. `None` if
/// it cannot be steered (another allocator, or the block is not free).
fn context_at(address: usize, size: usize) -> Option<glib::MainContext> {
    // SAFETY: plain allocations of our own, freed once each; `address` is
    // freed only after `malloc` handed it to us.
    unsafe {
        // Take blocks of that size until the freed one comes back.
        let mut taken = Vec::new();
        let mut found = false;
        for _ in 0..64 {
            let block = libc::malloc(size);
            if block as usize == address {
                found = true;
                break;
            }
            taken.push(block);
        }
        let made = if found {
            // Fill the per-thread cache for this size, so that the block,
            // freed again, goes where `calloc` looks first.
            let filler: Vec<_> = (0..16).map(|_| libc::malloc(size)).collect();
            for block in filler {
                libc::free(block);
            }
            libc::free(address as *mut libc::c_void);
            let context = glib::MainContext::new();
            Some(context).filter(|context| context_address(context).0 == address)
        } else {
            None
        };
        for block in taken {
            libc::free(block);
        }
        made
    }
}

/// [`context_at`], or else any fresh context (not `MainContext::default()`,
/// which is the main context).
fn fresh_context_at(address: usize, size: usize) -> glib::MainContext {
    match context_at(address, size) {
        Some(context) => context,
        None => glib::MainContext::new(),
    }
}

/// Polls `future` once on `context` (pushed as this thread's default) with
/// a waker that holds nothing (so that nothing keeps the context alive),
/// then iterates `context` `turns` times: a queued request reaches the
/// kernel in the first.
fn polled_on<F: std::future::Future + Unpin>(
    context: &glib::MainContext,
    mut future: F,
    turns: usize,
) -> F {
    context
        .with_thread_default(|| {
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            assert!(
                std::pin::Pin::new(&mut future).poll(&mut cx).is_pending(),
                "the operation was meant to wait"
            );
            for _ in 0..turns {
                context.iteration(false);
            }
        })
        .unwrap();
    future
}

/// (A2) An operation polled on a context that is then freed completes when
/// it is awaited on a new context that the allocator put at the freed
/// one's address, queued or in the kernel when the first context went: a
/// ring belongs to its context, not to an address, so the operation moves
/// (or is watched) as from any other context.
#[test]
fn an_operation_follows_its_poller_to_a_new_context_at_a_dead_ones_address() {
    watchdog(
        "an_operation_follows_its_poller_to_a_new_context_at_a_dead_ones_address",
        30,
        || {
            for turns in [0, 3] {
                let (file, writer) = pipe();
                let first = glib::MainContext::new();
                let (address, size) = context_address(&first);
                let read = polled_on(&first, file.read_at(Vec::with_capacity(16), 0), turns);
                drop(first);
                // (Any fresh context if the allocator cannot be steered.)
                let second = fresh_context_at(address, size);
                let writer = write_later(writer, 50, b"late");
                let got = second
                    .with_thread_default(|| {
                        gdex::block_on(gdex::timeout(std::time::Duration::from_secs(2), read))
                    })
                    .unwrap()
                    .unwrap_or_else(|elapsed| panic!("after {turns} turns: {elapsed}"))
                    .unwrap_or_else(|err| panic!("after {turns} turns: {err}"));
                assert_eq!(got, b"late", "after {turns} turns");
                drop(writer.join().unwrap());
            }
        },
    );
}

/// (A2) An operation in the kernel on a context nobody iterates, awaited
/// from a short-lived context (which watches the ring), then from a new
/// context at the dead watcher's address, completes: the watch went with
/// its context, and the new one watches again.
#[test]
fn a_watched_operation_is_watched_again_from_a_new_context_at_a_dead_watchers_address() {
    watchdog(
        "a_watched_operation_is_watched_again_from_a_new_context_at_a_dead_watchers_address",
        30,
        || {
            let (file, writer) = pipe();
            let home = glib::MainContext::new();
            let read = polled_on(&home, file.read_at(Vec::with_capacity(16), 0), 3);
            let watcher = glib::MainContext::new();
            let (address, size) = context_address(&watcher);
            // Polled once from the watcher: still waiting, now watched.
            let mut read = polled_on(&watcher, read, 0);
            drop(watcher);
            // (Any fresh context if the address is not free: the watch may
            // hold its context.)
            let again = fresh_context_at(address, size);
            let writer = write_later(writer, 50, b"late");
            let got = again
                .with_thread_default(|| {
                    gdex::block_on(gdex::timeout(std::time::Duration::from_secs(2), &mut read))
                })
                .unwrap()
                .unwrap_or_else(|elapsed| panic!("{elapsed}"))
                .unwrap_or_else(|err| panic!("{err}"));
            assert_eq!(got, b"late");
            drop(writer.join().unwrap());
            drop(home);
        },
    );
}

/// (A2) A FIFO opened for reading while a writer already waits in its own
/// `open(2)`, writes at once and closes, opens and reads what was written,
/// as `open(2)` would. On io_uring the first, non-blocking open lets the
/// writer through; if the writer wrote and left before a second, blocking
/// open ran, that open would wait for another writer, for good: the first
/// open's fd says whether a writer came.
#[test]
fn a_fifo_opened_for_reading_gets_what_a_writer_that_came_first_wrote() {
    watchdog(
        "a_fifo_opened_for_reading_gets_what_a_writer_that_came_first_wrote",
        30,
        || {
            let dir = TempDir::new("aio-fifo-writer-first");
            let pool = pool(1);
            let path = fifo(&dir, "f");
            let writer = std::thread::spawn({
                let path = path.clone();
                move || std::fs::write(path, b"first").unwrap()
            });
            // The writer waits in its open for a reader.
            std::thread::sleep(std::time::Duration::from_millis(50));
            let got = gdex::block_on(pool.scheduler().spawn(gdex::timeout(
                std::time::Duration::from_secs(2),
                async move { read_to_end(&File::open(path).await?).await },
            )))
            .unwrap();
            writer.join().unwrap();
            let got = got.unwrap_or_else(|elapsed| panic!("{elapsed}"));
            assert_eq!(got.unwrap_or_else(|err| panic!("{err}")), b"first");
        },
    );
}

/// (A2) An operation whose submitting thread exits while the kernel works
/// on it (an open of a FIFO for writing, which waits for a reader in the
/// kernel's worker threads, or has just been handed to them) does not hold
/// up the thread's exit, and awaited on another thread, completes when a
/// reader comes: the thread stops its requests as it exits, and a stopped
/// operation starts again where it is next polled; the kernel's codes
/// ("Unknown error 512") never surface. Ten times, the exit at once or
/// after the kernel's worker has taken the open.
#[test]
fn an_operation_outlives_the_thread_that_submitted_it() {
    watchdog(
        "an_operation_outlives_the_thread_that_submitted_it",
        60,
        || {
            let dir = TempDir::new("aio-exited-submitter");
            for round in 0..10 {
                let path = fifo(&dir, &format!("fifo-{round}"));
                let open = std::thread::spawn({
                    let path = path.clone();
                    move || {
                        let context = glib::MainContext::new();
                        let open = context
                            .with_thread_default(|| {
                                started_here(
                                    OpenOptions::new().write(true).create(true).open(&path),
                                    3,
                                )
                            })
                            .unwrap();
                        if round % 2 == 1 {
                            // Time for the kernel's worker thread to take
                            // the open and wait in it.
                            std::thread::sleep(std::time::Duration::from_millis(20));
                        }
                        open
                    }
                })
                .join()
                .unwrap();
                a_late_reader_gets(round, path, 20, open, b"after the exit");
            }
        },
    );
}

/// (A2) A pool dropped while an open of a FIFO by one of its tasks waits in
/// the kernel for a reader (or has just been handed to the kernel's worker
/// threads): the worker stops the request as it exits, so neither its exit
/// nor the pool's drop waits for the reader, and the open, awaited
/// elsewhere, starts again and completes when the reader comes.
#[test]
fn a_pool_dropped_with_a_fifo_open_in_the_kernel_does_not_wait_for_it() {
    watchdog(
        "a_pool_dropped_with_a_fifo_open_in_the_kernel_does_not_wait_for_it",
        60,
        || {
            let dir = TempDir::new("aio-pool-fifo");
            for round in 0..6 {
                let path = fifo(&dir, &format!("fifo-{round}"));
                let pool = pool(1);
                // The task hands its unfinished open out: the point of the
                // test.
                #[allow(clippy::async_yields_async)]
                let open = gdex::block_on(pool.scheduler().spawn({
                    let path = path.clone();
                    async move {
                        let mut open = OpenOptions::new().write(true).create(true).open(&path);
                        let first = poll_once(&mut open).await;
                        assert!(!first, "no reader yet");
                        // Submitted at the next turn of the worker's loop;
                        // in odd rounds, time for the kernel's worker thread
                        // to take the open and wait in it.
                        let ms = if round % 2 == 1 { 20 } else { 1 };
                        gdex::sleep(std::time::Duration::from_millis(ms)).await;
                        open
                    }
                }))
                .unwrap();
                pool.shutdown();
                drop(pool);
                a_late_reader_gets(round, path, 20, open, b"late");
            }
        },
    );
}

// A2 at its edges: thread exits with requests in the kernel, whoever owns the
// ring then; FIFO opens whose writer comes and goes; the fds they use.

/// Waits up to `secs` seconds for the thread whose kernel id is `tid` to
/// be gone, exit included (a `JoinHandle` says it is finished as soon as
/// its closure returned, and `join` would wait for good), then joins it.
fn exited_within<T>(what: &str, tid: i32, thread: std::thread::JoinHandle<T>, secs: u64) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    let task = format!("/proc/self/task/{tid}");
    while Path::new(&task).exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: the thread's exit did not end within {secs} s"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    thread.join().unwrap()
}

/// (A2) A thread that submitted a request (an open of a FIFO for writing,
/// which waits in the kernel's worker threads for a reader) and then let
/// another thread iterate the ring's context, which then owns the ring,
/// exits at once without waiting for a reader, and the open, awaited
/// elsewhere, completes when one comes: the kernel ties a request's work
/// to the thread that submitted it, whoever owns the ring when that thread
/// exits. (Without the stop, the exit waits for the reader when the
/// kernel's worker took the open only as the thread exited: a race, so
/// many rounds.)
#[test]
fn a_thread_that_submitted_then_handed_its_context_on_exits_without_waiting() {
    use std::sync::atomic::AtomicBool;
    watchdog(
        "a_thread_that_submitted_then_handed_its_context_on_exits_without_waiting",
        120,
        || {
            let dir = TempDir::new("aio-handed-on");
            for round in 0..common::stress(40) {
                let path = fifo(&dir, &format!("fifo-{round}"));
                let context = glib::MainContext::new();
                let go = Arc::new(AtomicBool::new(false));
                let claimed = Arc::new(AtomicBool::new(false));
                let (park, parked) = std::sync::mpsc::channel::<()>();
                // The next owner: it takes the context as soon as the
                // submitter lets go of it, runs one turn of its loop (the
                // ring's source claims the ring) and stays.
                let next = std::thread::spawn({
                    let context = context.clone();
                    let go = go.clone();
                    let claimed = claimed.clone();
                    move || {
                        while !go.load(Ordering::SeqCst) {
                            std::hint::spin_loop();
                        }
                        let guard = loop {
                            if let Ok(guard) = context.acquire() {
                                break guard;
                            }
                        };
                        context
                            .with_thread_default(|| context.iteration(false))
                            .unwrap();
                        drop(guard);
                        claimed.store(true, Ordering::SeqCst);
                        let _ = parked.recv();
                    }
                });
                let (tid_tx, tid_rx) = std::sync::mpsc::channel();
                let submitter = std::thread::spawn({
                    let path = path.clone();
                    let context = context.clone();
                    move || {
                        // SAFETY: gettid has no preconditions.
                        tid_tx.send(unsafe { libc::gettid() }).unwrap();
                        let guard = context.acquire().unwrap();
                        go.store(true, Ordering::SeqCst);
                        // One turn: the open (O_CREAT: straight to the
                        // kernel's worker threads) is submitted by this
                        // thread.
                        let open = context
                            .with_thread_default(|| {
                                started_here(
                                    OpenOptions::new().write(true).create(true).open(&path),
                                    1,
                                )
                            })
                            .unwrap();
                        drop(guard);
                        while !claimed.load(Ordering::SeqCst) {
                            std::hint::spin_loop();
                        }
                        open
                    }
                });
                let tid = tid_rx.recv().unwrap();
                let open = exited_within(&format!("round {round}"), tid, submitter, 5);
                a_late_reader_gets(round, path, 10, open, b"handed");
                drop(park);
                next.join().unwrap();
            }
        },
    );
}

/// (A2) Threads that each own a ring exit at once, each with reads of
/// empty pipes and opens of FIFOs for writing (which wait in the kernel's
/// worker threads for a reader) in the kernel: no exit waits for them,
/// and every operation, awaited afterwards on a pool, completes with what
/// its other end gives.
#[test]
fn threads_that_own_rings_exit_together_with_operations_in_the_kernel() {
    watchdog(
        "threads_that_own_rings_exit_together_with_operations_in_the_kernel",
        60,
        || {
            let dir = TempDir::new("aio-exits-together");
            let (threads, per) = (common::stress(6), 4);
            type Reads = Vec<std::pin::Pin<Box<gdex::aio::ReadAt>>>;
            type Opens = Vec<std::pin::Pin<Box<gdex::aio::Open>>>;
            let mut exiting = Vec::new();
            let mut writers = Vec::new();
            let mut paths = Vec::new();
            for t in 0..threads {
                let (files, mine): (Vec<File>, Vec<_>) = (0..per).map(|_| pipe()).unzip();
                writers.extend(mine);
                let fifos: Vec<PathBuf> =
                    (0..per).map(|i| fifo(&dir, &format!("{t}-{i}"))).collect();
                paths.extend(fifos.clone());
                let (tid_tx, tid_rx) = std::sync::mpsc::channel();
                let thread = std::thread::spawn(move || -> (Reads, Opens) {
                    // SAFETY: gettid has no preconditions.
                    tid_tx.send(unsafe { libc::gettid() }).unwrap();
                    let context = glib::MainContext::new();
                    context
                        .with_thread_default(|| {
                            let mut reads: Reads = files
                                .iter()
                                .map(|file| Box::pin(file.read_at(Vec::with_capacity(16), 0)))
                                .collect();
                            // O_CREAT: straight to the kernel's workers.
                            let mut opens: Opens = fifos
                                .iter()
                                .map(|path| {
                                    Box::pin(OpenOptions::new().write(true).create(true).open(path))
                                })
                                .collect();
                            gdex::block_on(async {
                                std::future::poll_fn(|cx| {
                                    for read in &mut reads {
                                        assert!(read.as_mut().poll(cx).is_pending());
                                    }
                                    for open in &mut opens {
                                        assert!(open.as_mut().poll(cx).is_pending());
                                    }
                                    std::task::Poll::Ready(())
                                })
                                .await;
                                // One turn: all of them go to the kernel.
                                gdex::yield_now().await;
                            });
                            (reads, opens)
                        })
                        .unwrap()
                });
                exiting.push((tid_rx.recv().unwrap(), thread));
            }
            let handed: Vec<(Reads, Opens)> = exiting
                .into_iter()
                .enumerate()
                .map(|(t, (tid, thread))| exited_within(&format!("thread {t}"), tid, thread, 5))
                .collect();
            for writer in &mut writers {
                writer.write_all(b"r").unwrap();
            }
            let readers: Vec<_> = paths
                .into_iter()
                .map(|path| std::thread::spawn(move || std::fs::read(path).unwrap()))
                .collect();
            let pool = pool(2);
            let tasks: Vec<_> = handed
                .into_iter()
                .map(|(reads, opens)| {
                    pool.scheduler().spawn(gdex::timeout(
                        std::time::Duration::from_secs(5),
                        async move {
                            for read in reads {
                                assert_eq!(read.await?, b"r");
                            }
                            for open in opens {
                                open.await?.write_all_at(b"w".to_vec(), 0).await?;
                            }
                            Ok::<_, gdex::Error>(())
                        },
                    ))
                })
                .collect();
            for task in tasks {
                gdex::block_on(task)
                    .unwrap()
                    .unwrap_or_else(|elapsed| panic!("{elapsed}"))
                    .unwrap_or_else(|err| panic!("{err}"));
            }
            for reader in readers {
                assert_eq!(reader.join().unwrap(), b"w");
            }
        },
    );
}

/// (A2) A FIFO opened for reading while a writer comes, writes and leaves
/// at about the same time opens and reads what the writer wrote, as with
/// `open(2)`, whenever the writer comes. On io_uring the first,
/// non-blocking open lets the writer through; a writer that came and went
/// before a second, blocking open waits in the kernel would leave that
/// open waiting for another writer for good (the data sits in the pipe),
/// so the second open races a poll of the first fd. Here the writer starts
/// 0-1.5 ms after the reader; without the race about 1 round in 200 hung.
#[test]
fn a_fifo_opened_for_reading_gets_what_a_writer_that_came_during_the_open_wrote() {
    watchdog(
        "a_fifo_opened_for_reading_gets_what_a_writer_that_came_during_the_open_wrote",
        120,
        || {
            let dir = TempDir::new("aio-fifo-writer-during");
            let pool = pool(1);
            for round in 0..common::stress(2000) {
                let path = fifo(&dir, &format!("f{round}"));
                let delay = (round * 13 % 1500) as u64;
                let writer = std::thread::spawn({
                    let path = path.clone();
                    move || {
                        std::thread::sleep(std::time::Duration::from_micros(delay));
                        // (It fails only if the reader gave up first.)
                        let _ = std::fs::write(path, b"w");
                    }
                });
                // A round that hangs (the bug) fails at its bound; a correct
                // one ends in about a millisecond, so the bound can leave
                // room for a writer thread descheduled on a loaded machine.
                let got = gdex::block_on(pool.scheduler().spawn(gdex::timeout(
                    std::time::Duration::from_secs(5),
                    {
                        let path = path.clone();
                        async move { read_to_end(&File::open(path).await?).await }
                    },
                )))
                .unwrap();
                // Lets a writer still waiting for a reader through.
                let unblock = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(&path);
                writer.join().unwrap();
                drop(unblock);
                let got = got
                    .unwrap_or_else(|elapsed| Err(elapsed.into()))
                    .unwrap_or_else(|err| panic!("round {round}, writer after {delay} µs: {err}"));
                assert_eq!(got, b"w", "round {round}");
            }
        },
    );
}

// ---------------------------------------------------------------------------
// A1 at its edges: a FIFO open dropped mid-call, a FIFO read to its end,
// offsets past `i64::MAX`, wakers that panic or own other operations, a
// worker blocked with reads queued on its ring, a dead context's ring, a
// full ring of dropped reads, shutdown with operations in every state.
// Tests that may deadlock, or that count the process's io_uring fds, run
// alone in a child process (`common::run_child`).
// ---------------------------------------------------------------------------

/// Opens the FIFO's write end without blocking: `None` (ENXIO) if no
/// reader has it open.
fn open_writer_nonblocking(path: &Path) -> Option<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .ok()
}

/// A file holding "0123456789" in `dir`, as an AIO file.
fn digits_file(dir: &TempDir) -> File {
    let path = dir.file("f", b"0123456789");
    File::from(std::fs::File::open(path).unwrap())
}

/// Runs the `#[ignore]`d test `name` alone in a child process, within
/// `secs`, and asserts it passed and printed "CHILD-OK". Only on io_uring:
/// these tests are about the ring itself.
fn ring_test_in_a_child(name: &str, secs: u64) {
    if is_child() || gdex::aio::backend() != Backend::IoUring {
        return;
    }
    run_child_passing(name, &[], secs, "CHILD-OK");
}

/// Runs `body` on a fresh context pushed as this thread's thread-default
/// and acquired (this thread owns it, as a loop's thread does): an
/// operation polled here queues on this context's ring, and iterating the
/// context submits and reaps it.
fn owning_a_fresh_context<R>(body: impl FnOnce(&glib::MainContext) -> R) -> R {
    let context = glib::MainContext::new();
    context
        .with_thread_default(|| {
            let _owner = context.acquire().unwrap();
            body(&context)
        })
        .unwrap()
}

/// An open of a FIFO blocks until a writer comes. Its future is dropped
/// while it blocks; then a writer comes. The fd the open gets must be
/// closed (io_uring: the request is cancelled, or its fd discarded; the
/// blocking lane: the `openat` finishes on its lane thread and its result
/// is discarded, which for an open must close the fd) (A1). The blocking
/// lane used to leak it.
#[test]
fn a_dropped_open_of_a_fifo_leaks_no_fd() {
    watchdog("a_dropped_open_of_a_fifo_leaks_no_fd", 30, || {
        let dir = TempDir::new("aio-fifo-open-dropped");
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
        no_fd_left_on(
            &fifo,
            &format!(
                " after its open's future was dropped ({:?})",
                gdex::aio::backend()
            ),
        );
    });
}

/// `read_file` reads a stream to its end on both backends, as
/// `std::fs::read` does (A1, A2). On the blocking lane, `read_file` of a
/// FIFO (a pipe, a process substitution, /dev/stdin) used to fail with
/// "Illegal seek".
#[test]
fn read_file_reads_a_fifo() {
    watchdog("read_file_reads_a_fifo", 30, || {
        let dir = TempDir::new("aio-read-file-fifo");
        let fifo = fifo(&dir, "fifo");
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let writer = std::thread::spawn({
            let fifo = fifo.clone();
            let data = data.clone();
            move || {
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

/// `read_at`/`write_at` take a position: an offset the system cannot take
/// (past `i64::MAX`) is refused with `InvalidArgument`, as `pread` does on
/// the blocking lane (A1, A2). On io_uring, `u64::MAX` (-1) instead means
/// "the file's current position": it reads and writes there, and moves it.
#[test]
fn an_offset_past_i64_max_is_refused_on_both_backends() {
    watchdog(
        "an_offset_past_i64_max_is_refused_on_both_backends",
        30,
        || {
            let dir = TempDir::new("aio-offset-past-max");
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

/// A waker that panics when woken.
struct Panicky(AtomicBool);
impl Wake for Panicky {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
        panic!("a waker that panics, on purpose");
    }
}

/// A waker that counts its wake-ups.
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
/// one's waker panics. The second one's waker must still be woken (A1, X5:
/// "the other waiters are woken as if nothing happened"). A waker that
/// panicked in the ring's dispatch used to lose the wake-ups of every other
/// operation reaped in the same batch.
#[test]
fn a_panicking_waker_loses_no_other_wake_up() {
    if gdex::aio::backend() != Backend::IoUring {
        return;
    }
    watchdog("a_panicking_waker_loses_no_other_wake_up", 30, || {
        let dir = TempDir::new("aio-panicky-waker");
        let file = digits_file(&dir);
        owning_a_fresh_context(|context| {
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
        });
    });
}

/// Task R awaits a read; task B, on the same worker right after R's first
/// poll, blocks that worker (`gdex::blocking::blocking`) until R is done.
/// B's `blocking` hands the worker's queue to its peer, and a gdex timer R
/// waited on would be raised by the monitor for the peer to run (P8: a
/// timer follows its task); R's read, queued on the blocked worker's ring,
/// must not wait for that worker either (A1, A2). A worker in `blocking`
/// (or in one long poll) used to hold the operations queued on its ring:
/// they were never submitted.
#[test]
fn a_worker_in_blocking_does_not_hold_the_reads_queued_on_its_ring() {
    watchdog(
        "a_worker_in_blocking_does_not_hold_the_reads_queued_on_its_ring",
        60,
        || {
            let dir = TempDir::new("aio-blocked-worker");
            let file = digits_file(&dir);
            let pool = pool(2);
            let scheduler = pool.scheduler();
            for attempt in 0..50 {
                // Both workers asleep first: B wakes one; R, pushed behind
                // B on its deque, asks nobody (one job), and B's yield asks
                // the sleeping peer, whose wake-up takes far longer than
                // B's worker takes to poll R next. (A peer still awake from
                // the attempt before may steal R first: all 50 attempts
                // missed once, in a full run beside the binary's other
                // tests.)
                wait_until(|| pool.metrics().workers.iter().all(|w| w.parked));
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

/// A waker that owns a future (as the wakers of simple executors own their
/// task, and with it its future).
#[allow(dead_code)] // held, never read: its drop is the point
struct Owner(Mutex<Option<Pin<Box<gdex::aio::ReadAt>>>>);
impl Wake for Owner {
    fn wake(self: Arc<Self>) {}
}

/// An operation polled again with another waker drops its old waker
/// outside its ring's lock, so an old waker that owns another operation of
/// the same ring does not deadlock when its drop drops that operation
/// (A1). The waker used to be dropped under the ring's lock.
#[test]
fn replacing_a_waker_that_owns_another_operation_does_not_deadlock() {
    ring_test_in_a_child("child_replaced_waker_owns_an_operation", 20);
}

#[test]
#[ignore]
fn child_replaced_waker_owns_an_operation() {
    if !is_child() {
        return;
    }
    watchdog("child_replaced_waker_owns_an_operation", 10, || {
        let dir = TempDir::new("aio-waker-owns-an-operation");
        let file = digits_file(&dir);
        owning_a_fresh_context(|context| {
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
        });
    });
    println!("CHILD-OK");
}

/// How many io_uring instances this process has open.
fn io_uring_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target.as_os_str() == "anon_inode:[io_uring]")
        .count()
}

/// A context's ring (its io_uring instance and fd) goes with the context
/// (A1). The thread-local cache used to keep a dead context's ring for the
/// life of the thread.
#[test]
fn a_dead_contexts_ring_is_closed() {
    ring_test_in_a_child("child_a_dead_contexts_ring_is_closed", 20);
}

#[test]
#[ignore]
fn child_a_dead_contexts_ring_is_closed() {
    if !is_child() {
        return;
    }
    let dir = TempDir::new("aio-dead-ring");
    let file = digits_file(&dir);
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

/// 600 reads of an empty pipe on one context: the ring takes as many as its
/// cap, the rest wait in its backlog. All are dropped: their cancels must
/// reach the kernel, and a read of a plain file started afterwards on the
/// same context must complete (A1). With the ring full of requests that
/// wait, the cancels of dropped ones used to never reach the kernel: the
/// ring was wedged for good, and its drop waited forever.
#[test]
fn dropping_a_full_ring_of_waiting_reads_unwedges_it() {
    ring_test_in_a_child("child_full_ring_of_waiting_reads", 30);
}

#[test]
#[ignore]
fn child_full_ring_of_waiting_reads() {
    if !is_child() {
        return;
    }
    watchdog("child_full_ring_of_waiting_reads", 20, || {
        let dir = TempDir::new("aio-full-ring");
        let plain = digits_file(&dir);
        let (pipe, writer) = pipe();
        owning_a_fresh_context(|context| {
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
                    let mut writer = writer;
                    let _ = writer.write_all(&[0u8; 600 * 16]);
                    drop(writer);
                    panic!("the ring is wedged: the cancels of the dropped reads never went");
                }
            }
            drop(read);
            // Nothing of the pipe was taken by the cancelled reads.
            let mut writer = writer;
            writer.write_all(b"after").unwrap();
            drop(writer);
            assert_eq!(rest_of_pipe(&pipe), b"after");
        });
    });
    println!("CHILD-OK");
}

/// A one-worker pool holds 300 reads of an empty pipe (256 in the kernel,
/// the rest in the backlog) and reads of a plain file (done, perhaps not
/// taken); it is shut down and dropped: every task resolves, the ring's fd
/// is closed, and the cancelled reads took nothing from the pipe (A1, S9).
#[test]
fn shutdown_and_drop_with_operations_in_every_state() {
    ring_test_in_a_child("child_shutdown_in_every_state", 60);
}

#[test]
#[ignore]
fn child_shutdown_in_every_state() {
    if !is_child() {
        return;
    }
    watchdog("child_shutdown_in_every_state", 40, || {
        let dir = TempDir::new("aio-shutdown-every-state");
        let plain = digits_file(&dir);
        let (pipe, mut writer) = pipe();
        let before = io_uring_fds();
        let pool = pool(1);
        let polled = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for (file, reads) in [(&pipe, 300), (&plain, 50)] {
            for _ in 0..reads {
                let read = file.read_at(Vec::with_capacity(8), 0);
                tasks.push(
                    pool.scheduler()
                        .spawn(after_first_poll(&polled, async move {
                            read.await.map(|b| b.len())
                        })),
                );
            }
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
        writer.write_all(b"later").unwrap();
        drop(writer);
        assert_eq!(rest_of_pipe(&pipe), b"later", "a cancelled read took data");
    });
    println!("CHILD-OK");
}

// ---------------------------------------------------------------------------
// A seeded random program through gdex::aio and std::fs side by side (A1, A2)
// ---------------------------------------------------------------------------

/// A seeded random program of file operations runs through `gdex::aio`
/// (this process's backend) and through `std::fs` (the reference) side by
/// side, each in a directory of its own, and agrees with it step by step
/// (A1, A2): the same `Ok` or error (GIO's code for the errno; the errno
/// itself where the code is the catch-all `Failed`), the same bytes read
/// and counts written, and the same files (names, types, permissions,
/// contents) after every step.
///
/// The operations: opens with every combination of `OpenOptions` (those
/// `std` refuses included) on files, a directory, a missing directory, a
/// path through a file and a path with a NUL byte; reads and writes at
/// offsets in, at and past the end, making holes, and past `i64::MAX`;
/// `write_all_at`, `metadata`, `read_file`; futures dropped before their
/// first poll, after it, and after they completed; a task cancelled while
/// it holds an operation; an operation polled once in one place (a pool
/// task, a context this thread stops iterating, a thread that exits, a pool
/// that is dropped) and finished in another (A2); FIFO opens, whose partner
/// comes from a helper thread after a delay; a thread that exits while an
/// operation it submitted waits. Every wait is bounded, so a hang is
/// reported as a divergence, not waited for. See `differential` for how
/// each kind of step is compared.
///
/// `GDEX_AIO_SEED` runs one program with that seed (decimal or `0x` hex);
/// `GDEX_STRESS` lengthens the programs; `GDEX_AIO_TRACE=1` prints every
/// step. A divergence names its seed and step.
#[test]
fn a_seeded_random_program_agrees_with_std_fs() {
    let secs = 60 + common::stress(60) as u64;
    watchdog("a_seeded_random_program_agrees_with_std_fs", secs, || {
        differential::run()
    });
}

/// The machinery of `a_seeded_random_program_agrees_with_std_fs`.
///
/// How a step is compared:
/// - An operation awaited to its end: its outcome exactly (`Got`), then
///   both directories.
/// - A future dropped before its first poll: nothing happened (the
///   directories as before the step), and no fd is left open on the file.
/// - A future dropped after its first poll (a read or a write: the drop
///   may come before the request reached the kernel or after the kernel
///   did it): the file is as `std` leaves it either with the operation or
///   without it. The operation holds a descriptor of its own on the file
///   until it is over, so the step first waits (bounded) for the file's
///   fds to come back to those of the program's open handles: then
///   nothing can change it later. An open dropped in flight is compared
///   only on a FIFO, where it cannot finish before its partner comes: on a
///   regular file nothing outside the backend tells when the kernel is
///   done with it, and a late `O_CREAT` would be reported as a divergence
///   of a later step.
/// - A future dropped after it completed (its waker was woken, it was not
///   polled again): exactly as `std` with the operation, no fd left.
/// - An operation whose result arrives late or never (polled once on a
///   context nobody iterates any more): reported as hung after a bound.
/// - A FIFO open: the outcome, and whether it returned before its partner
///   (a reader or a writer, from a helper thread after a delay) came:
///   `open(2)` of a FIFO for reading or writing waits for the other end.
///
/// After a divergence the gdex directory is made equal to the reference
/// one again, so one defect is reported once per step it shows in, not
/// in every later comparison. Divergences are gathered, deduplicated by
/// kind, and reported together at the end.
mod differential {
    use super::*;

    use std::any::Any;
    use std::collections::BTreeMap;
    use std::ffi::CString;
    use std::future::Future;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt, PermissionsExt};
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::pin::Pin;
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;
    use std::task::{Context, Poll, Wake, Waker};
    use std::time::{Duration, Instant};

    use futures::FutureExt as _;

    /// Programs run by default (seeds `DEFAULT_SEED`, `DEFAULT_SEED + 1`,
    /// ...), each of `STEPS` steps (times `GDEX_STRESS`).
    const PROGRAMS: u64 = 2;
    const STEPS: usize = 200;
    const DEFAULT_SEED: u64 = 0xA10_D1FF;
    /// The bound on an operation that should complete at once.
    const LIMIT: Duration = Duration::from_secs(5);
    /// The bound on an operation finished away from where it was first
    /// polled (A2): short, as on the base each of these hangs.
    const FOLLOW_LIMIT: Duration = Duration::from_secs(1);
    /// How long a FIFO's partner takes to come.
    const PARTNER_DELAY: Duration = Duration::from_millis(30);

    /// The regular files' names (one in a subdirectory).
    const FILES: [&str; 4] = ["a", "b", "c", "sub/d"];

    /// splitmix64: small, seedable, good enough to choose steps.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn coin(&mut self) -> bool {
            self.next() & 1 == 1
        }
        fn one_in(&mut self, n: u64) -> bool {
            self.below(n) == 0
        }
        fn pick<T: Copy>(&mut self, items: &[T]) -> T {
            items[self.below(items.len() as u64) as usize]
        }
        fn bytes(&mut self, n: usize) -> Vec<u8> {
            (0..n).map(|_| self.next() as u8).collect()
        }
    }

    /// What an operation gave, as compared: the same for both sides.
    #[derive(Clone, Debug)]
    enum Got {
        Opened,
        Read(Vec<u8>),
        Wrote(usize),
        Done,
        Meta {
            len: u64,
            dir: bool,
        },
        /// A FIFO open: the outcome, and whether it returned before the
        /// other end came.
        Fifo(Box<Got>, bool),
        Failed {
            code: String,
            errno: Option<String>,
        },
        Panicked(String),
        Hung(Duration),
        /// Anything else gdex gave (a task's `Cancelled`, a wrong buffer).
        Other(String),
    }

    impl PartialEq for Got {
        fn eq(&self, other: &Got) -> bool {
            use Got::*;
            match (self, other) {
                (Opened, Opened) | (Done, Done) => true,
                (Read(a), Read(b)) => a == b,
                (Wrote(a), Wrote(b)) => a == b,
                (Meta { len: a, dir: x }, Meta { len: b, dir: y }) => a == b && x == y,
                (Fifo(a, x), Fifo(b, y)) => a == b && x == y,
                // The code; and where the code is the catch-all `Failed`,
                // which hides the errno, the errno's text as well.
                (Failed { code: a, errno: x }, Failed { code: b, errno: y }) => {
                    a == b && (a != "Failed" || x.is_none() || y.is_none() || x == y)
                }
                _ => false,
            }
        }
    }

    impl std::fmt::Display for Got {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self {
                Got::Read(bytes) => write!(f, "read {} bytes {}", bytes.len(), preview(bytes)),
                Got::Wrote(n) => write!(f, "wrote {n}"),
                Got::Fifo(got, early) => write!(
                    f,
                    "{got}, {}",
                    if *early {
                        "returned before the other end came"
                    } else {
                        "after the other end came"
                    }
                ),
                Got::Failed { code, errno } => match errno {
                    Some(errno) => write!(f, "Err({code}: {errno})"),
                    None => write!(f, "Err({code})"),
                },
                Got::Panicked(message) => write!(f, "panicked: {message}"),
                Got::Hung(limit) => write!(f, "no result after {limit:?}"),
                Got::Other(what) => write!(f, "{what}"),
                other => write!(f, "{other:?}"),
            }
        }
    }

    impl Got {
        /// The kind of outcome, without its data: what divergences are
        /// deduplicated by.
        fn class(&self) -> String {
            match self {
                Got::Read(_) => "Read".into(),
                Got::Wrote(_) => "Wrote".into(),
                Got::Meta { .. } => "Meta".into(),
                Got::Fifo(got, early) => format!("Fifo({}, early: {early})", got.class()),
                Got::Failed { code, errno } if code == "Failed" => {
                    format!("Err(Failed: {})", errno.as_deref().unwrap_or("?"))
                }
                Got::Failed { code, .. } => format!("Err({code})"),
                Got::Panicked(_) => "Panicked".into(),
                Got::Hung(_) => "Hung".into(),
                Got::Other(_) => "Other".into(),
                other => format!("{other:?}"),
            }
        }
    }

    fn preview(bytes: &[u8]) -> String {
        let head: Vec<String> = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect();
        format!(
            "[{}{}]",
            head.join(" "),
            if bytes.len() > 8 { " …" } else { "" }
        )
    }

    fn strerror(errno: i32) -> String {
        let text = std::io::Error::from_raw_os_error(errno).to_string();
        text.split(" (os error").next().unwrap_or(&text).to_owned()
    }

    /// A `std` error as compared: GIO's code for its errno (as
    /// `g_io_error_from_errno` maps it), and the errno's text; a refusal
    /// without an errno as `InvalidArgument`, except a NUL byte in the
    /// path, which gdex calls `InvalidFilename` (GIO's code for a name no
    /// file can have: a documented difference, A2).
    fn std_failed(err: &std::io::Error) -> Got {
        match err.raw_os_error() {
            Some(errno) => Got::Failed {
                code: format!("{:?}", gdex::gio::io_error_from_errno(errno)),
                errno: Some(strerror(errno)),
            },
            None if err.kind() == std::io::ErrorKind::InvalidInput => Got::Failed {
                code: if err.to_string().contains("NUL") {
                    "InvalidFilename".into()
                } else {
                    "InvalidArgument".into()
                },
                errno: None,
            },
            None => Got::Failed {
                code: format!("{:?}", err.kind()),
                errno: None,
            },
        }
    }

    /// A gdex error as compared: the `G_IO_ERROR` code, and the errno's
    /// text, which gdex's messages end with ("Error opening file “…”: No
    /// such device or address").
    fn gdex_failed(err: &gdex::Error) -> Got {
        match err {
            gdex::Error::Failed(error) => match error.kind::<IOErrorEnum>() {
                Some(code) => Got::Failed {
                    code: format!("{code:?}"),
                    errno: error.message().rsplit(": ").next().map(str::to_owned),
                },
                None => Got::Other(format!("a non-GIO error: {error}")),
            },
            other => Got::Other(format!("gdex::Error::{other:?}")),
        }
    }

    fn std_got<T>(result: std::io::Result<T>, ok: impl FnOnce(T) -> Got) -> Got {
        match result {
            Ok(value) => ok(value),
            Err(err) => std_failed(&err),
        }
    }

    fn panic_message(payload: &(dyn Any + Send)) -> String {
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "a panic".into())
    }

    /// An operation's future, boxed so every kind travels the same way.
    type Fut<T> = Pin<Box<dyn Future<Output = Result<T, gdex::Error>> + Send>>;

    /// What became of a gdex operation.
    enum Fate<T> {
        Ok(T),
        Err(gdex::Error),
        Panicked(String),
        Hung(Duration),
    }

    impl<T> Fate<T> {
        fn got(self, ok: impl FnOnce(T) -> Got) -> Got {
            match self {
                Fate::Ok(value) => ok(value),
                Fate::Err(err) => gdex_failed(&err),
                Fate::Panicked(message) => Got::Panicked(message),
                Fate::Hung(limit) => Got::Hung(limit),
            }
        }
    }

    /// Makes an operation's future; a panic while making it (gdex refuses
    /// some options and paths by panicking) is its fate.
    fn make<T>(f: impl FnOnce() -> Fut<T>) -> Result<Fut<T>, Fate<T>> {
        catch_unwind(AssertUnwindSafe(f)).map_err(|p| Fate::Panicked(panic_message(&*p)))
    }

    /// Where an operation is awaited to its end.
    #[derive(Clone, Copy, Debug)]
    enum Awaiter {
        /// `gdex::wait_for` on the program's thread (the `gdex-timers`
        /// context's ring).
        WaitFor,
        /// `gdex::block_on` on the program's thread with its own context
        /// pushed (that context's ring).
        BlockOnOwn,
        /// A task on the pool (a worker's ring).
        PoolTask,
        /// A fiber on the pool.
        Fiber,
        /// `gdex::wait_for` on a thread started for it.
        OtherThread,
    }

    const AWAITERS: [Awaiter; 5] = [
        Awaiter::WaitFor,
        Awaiter::BlockOnOwn,
        Awaiter::PoolTask,
        Awaiter::Fiber,
        Awaiter::OtherThread,
    ];

    /// Where an operation is polled once, to be finished elsewhere (A2).
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum FirstPoll {
        /// On the program's thread with no context pushed (the
        /// `gdex-timers` context's ring).
        Plain,
        /// On the program's thread with its own context pushed; nobody
        /// iterates that context until the program does.
        Own,
        /// In a task on the pool, which gives the future back.
        PoolTask,
        /// Under `block_on` on a thread with a context of its own pushed;
        /// the thread then exits, and nobody iterates that context again.
        ExitingThread,
        /// In a task on a pool of its own, which is dropped right after.
        DroppedPool,
    }

    /// A future polled once: still pending, or done.
    enum Polled<T> {
        Pending(Fut<T>),
        Ready(Result<T, gdex::Error>),
        Panicked(String),
    }

    fn poll_here<T>(mut fut: Fut<T>, waker: &Waker) -> Polled<T> {
        let mut cx = Context::from_waker(waker);
        match catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(&mut cx))) {
            Ok(Poll::Ready(value)) => Polled::Ready(value),
            Ok(Poll::Pending) => Polled::Pending(fut),
            Err(p) => Polled::Panicked(panic_message(&*p)),
        }
    }

    /// A future that polls `fut` once, with `waker` if given (else with its
    /// own poller's), and gives it back.
    fn poll_once_future<T: Send + 'static>(
        fut: Fut<T>,
        waker: Option<Waker>,
    ) -> impl Future<Output = Polled<T>> + Send {
        let mut fut = Some(fut);
        std::future::poll_fn(move |cx| {
            let fut = fut.take().expect("polled once");
            Poll::Ready(match &waker {
                Some(waker) => poll_here(fut, waker),
                None => poll_here(fut, cx.waker()),
            })
        })
    }

    /// A waker that notes it was woken.
    struct Flag(AtomicBool);

    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn flag() -> (Arc<Flag>, Waker) {
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        (flag.clone(), Waker::from(flag))
    }

    /// The other end of a FIFO, opened (read and write, which never waits)
    /// by a helper thread after `PARTNER_DELAY`, and held until released.
    struct Partner {
        /// Set just before its `open`: an open of ours that returned
        /// before this was set did not wait for it.
        coming: Arc<AtomicBool>,
        /// Set once its `open` returned: its fd is open.
        arrived: Arc<AtomicBool>,
        release: Option<mpsc::Sender<()>>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl Partner {
        fn after_delay(path: &Path) -> Partner {
            let coming = Arc::new(AtomicBool::new(false));
            let arrived = Arc::new(AtomicBool::new(false));
            let (release, released) = mpsc::channel::<()>();
            let thread = std::thread::spawn({
                let path = path.to_path_buf();
                let (coming, arrived) = (coming.clone(), arrived.clone());
                move || {
                    std::thread::sleep(PARTNER_DELAY);
                    coming.store(true, Ordering::SeqCst);
                    let end = std::fs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .custom_flags(libc::O_NONBLOCK)
                        .open(&path)
                        .expect("the FIFO's partner opens it");
                    arrived.store(true, Ordering::SeqCst);
                    let _ = released.recv_timeout(Duration::from_secs(10));
                    drop(end);
                }
            });
            Partner {
                coming,
                arrived,
                release: Some(release),
                thread: Some(thread),
            }
        }

        fn coming(&self) -> bool {
            self.coming.load(Ordering::SeqCst)
        }

        fn arrived(&self) -> bool {
            self.arrived.load(Ordering::SeqCst)
        }

        /// Waits for it to come, then lets it close its end.
        fn finish(mut self) {
            drop(self.release.take());
            self.thread.take().unwrap().join().unwrap();
        }
    }

    impl Drop for Partner {
        fn drop(&mut self) {
            drop(self.release.take());
            if let Some(thread) = self.thread.take() {
                let _ = thread.join();
            }
        }
    }

    fn mkfifo(path: &Path) {
        let c = CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path that lives across the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    }

    /// A directory entry as compared.
    #[derive(Clone, Debug, PartialEq)]
    enum Entry {
        File { mode: u32, contents: Vec<u8> },
        Dir { mode: u32 },
        Fifo,
        Other,
    }

    /// Every entry under `root`, by its path relative to `root`.
    fn snapshot(root: &Path) -> BTreeMap<String, Entry> {
        let mut entries = BTreeMap::new();
        let mut dirs = vec![root.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let name = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                let meta = std::fs::symlink_metadata(&path).unwrap();
                let mode = meta.permissions().mode() & 0o7777;
                let kind = meta.file_type();
                let entry = if kind.is_file() {
                    Entry::File {
                        mode,
                        contents: std::fs::read(&path).unwrap(),
                    }
                } else if kind.is_dir() {
                    dirs.push(path.clone());
                    Entry::Dir { mode }
                } else if kind.is_fifo() {
                    Entry::Fifo
                } else {
                    Entry::Other
                };
                entries.insert(name, entry);
            }
        }
        entries
    }

    /// How two snapshots differ, or `None`.
    fn differences(
        reference: &BTreeMap<String, Entry>,
        got: &BTreeMap<String, Entry>,
    ) -> Option<String> {
        let mut out = Vec::new();
        let names: std::collections::BTreeSet<&String> =
            reference.keys().chain(got.keys()).collect();
        for name in names {
            let (s, g) = (reference.get(name), got.get(name));
            if s == g {
                continue;
            }
            let describe = |e: Option<&Entry>| match e {
                None => "nothing".to_owned(),
                Some(Entry::File { mode, contents }) => {
                    format!("a file ({mode:o}, {} bytes)", contents.len())
                }
                Some(other) => format!("{other:?}"),
            };
            let mut line = format!("{name}: std has {}, gdex {}", describe(s), describe(g));
            if let (Some(Entry::File { contents: a, .. }), Some(Entry::File { contents: b, .. })) =
                (s, g)
            {
                if let Some(at) = a.iter().zip(b.iter()).position(|(x, y)| x != y) {
                    line += &format!(", first different byte at {at}");
                }
            }
            out.push(line);
        }
        (!out.is_empty()).then(|| out.join("; "))
    }

    /// Makes `dir` hold what `reference` says (files only are rewritten in
    /// place, keeping their inodes, so open handles still refer to them).
    fn restore(dir: &Path, reference: &BTreeMap<String, Entry>) {
        let now = snapshot(dir);
        for (name, entry) in &now {
            if reference.contains_key(name) {
                continue;
            }
            let path = dir.join(name);
            match entry {
                Entry::Dir { .. } => {
                    let _ = std::fs::remove_dir_all(&path);
                }
                _ => {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        for (name, entry) in reference {
            let path = dir.join(name);
            if now.get(name) == Some(entry) {
                continue;
            }
            match entry {
                Entry::File { mode, contents } => {
                    if !matches!(now.get(name), None | Some(Entry::File { .. })) {
                        let _ = std::fs::remove_dir_all(&path);
                        let _ = std::fs::remove_file(&path);
                    }
                    std::fs::write(&path, contents).unwrap();
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode))
                        .unwrap();
                }
                Entry::Dir { mode } => {
                    let _ = std::fs::remove_file(&path);
                    let _ = std::fs::create_dir(&path);
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode))
                        .unwrap();
                }
                Entry::Fifo => {
                    let _ = std::fs::remove_file(&path);
                    mkfifo(&path);
                }
                Entry::Other => {}
            }
        }
    }

    /// One open file, on both sides.
    struct Handle {
        name: String,
        how: String,
        gdex: File,
        std: std::fs::File,
    }

    /// Random `OpenOptions`, as the fields of both kinds.
    #[derive(Clone, Copy, Debug)]
    struct Options {
        read: bool,
        write: bool,
        append: bool,
        truncate: bool,
        create: bool,
        create_new: bool,
    }

    impl Options {
        fn random(rng: &mut Rng) -> Options {
            Options {
                read: rng.coin(),
                write: rng.coin(),
                append: rng.one_in(3),
                truncate: rng.one_in(3),
                create: rng.coin(),
                create_new: rng.one_in(4),
            }
        }

        /// Why `std` refuses these options without trying, if it does.
        fn refusal(&self) -> Option<&'static str> {
            if !(self.read || self.write || self.append) {
                Some("no access mode")
            } else if !(self.write || self.append)
                && (self.truncate || self.create || self.create_new)
            {
                Some("create or truncate without write")
            } else if self.append && self.truncate && !self.create_new {
                Some("append with truncate")
            } else {
                None
            }
        }

        fn access(&self) -> &'static str {
            match (self.read, self.write || self.append) {
                (true, true) => "reading and writing",
                (true, false) => "reading",
                _ => "writing",
            }
        }

        /// Ones `std` accepts.
        fn valid(rng: &mut Rng) -> Options {
            let o = |read, write, append, truncate, create, create_new| Options {
                read,
                write,
                append,
                truncate,
                create,
                create_new,
            };
            rng.pick(&[
                o(true, false, false, false, false, false),
                o(false, true, false, false, true, false),
                o(false, true, false, true, true, false),
                o(true, true, false, false, true, false),
                o(false, false, true, false, true, false),
                o(false, true, false, false, false, true),
                o(true, true, false, true, false, false),
            ])
        }

        fn std(&self) -> std::fs::OpenOptions {
            let mut o = std::fs::OpenOptions::new();
            o.read(self.read)
                .write(self.write)
                .append(self.append)
                .truncate(self.truncate)
                .create(self.create)
                .create_new(self.create_new);
            o
        }

        fn gdex(&self) -> OpenOptions {
            let mut o = OpenOptions::new();
            o.read(self.read)
                .write(self.write)
                .append(self.append)
                .truncate(self.truncate)
                .create(self.create)
                .create_new(self.create_new);
            o
        }
    }

    impl std::fmt::Display for Options {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            let names = [
                (self.read, "read"),
                (self.write, "write"),
                (self.append, "append"),
                (self.truncate, "truncate"),
                (self.create, "create"),
                (self.create_new, "create_new"),
            ];
            let on: Vec<&str> = names
                .iter()
                .filter(|(on, _)| *on)
                .map(|(_, n)| *n)
                .collect();
            if on.is_empty() {
                f.write_str("nothing")
            } else {
                f.write_str(&on.join("+"))
            }
        }
    }

    /// The divergences found, by kind: the first one's report, and how
    /// many more there were.
    #[derive(Default)]
    struct Found(BTreeMap<String, (String, usize)>);

    impl Found {
        fn add(&mut self, key: String, report: String) {
            println!("DIVERGENCE {report}");
            self.0
                .entry(key)
                .and_modify(|(_, more)| *more += 1)
                .or_insert((report, 0));
        }
    }

    /// Runs the programs; fails listing every kind of divergence found.
    pub(super) fn run() {
        let seeds: Vec<u64> = match std::env::var("GDEX_AIO_SEED") {
            Ok(text) => {
                let text = text.trim();
                let seed = match text.strip_prefix("0x") {
                    Some(hex) => u64::from_str_radix(hex, 16),
                    None => text.parse(),
                };
                vec![seed.expect("GDEX_AIO_SEED: a number (decimal, or hex with 0x)")]
            }
            Err(_) => (0..PROGRAMS).map(|i| DEFAULT_SEED + i).collect(),
        };
        let steps = common::stress(STEPS);
        let trace = std::env::var_os("GDEX_AIO_TRACE").is_some();
        let mut found = Found::default();
        let started = Instant::now();
        for seed in seeds {
            Program::new(seed, trace).run(steps, &mut found);
        }
        println!(
            "a_seeded_random_program_agrees_with_std_fs: {} step(s) of each program in {:?} on {:?}",
            steps,
            started.elapsed(),
            gdex::aio::backend()
        );
        if !found.0.is_empty() {
            let mut text = format!(
                "gdex::aio ({:?}) diverged from std::fs in {} way(s); rerun one with \
                 GDEX_AIO_SEED=<seed> GDEX_AIO_TRACE=1{} to see its steps:\n",
                gdex::aio::backend(),
                found.0.len(),
                if gdex::aio::backend() == Backend::BlockingLane {
                    " GDEX_AIO=blocking"
                } else {
                    ""
                }
            );
            for (report, more) in found.0.values() {
                text += &format!("- {report}");
                if *more > 0 {
                    text += &format!(" ({more} more like it)");
                }
                text += "\n";
            }
            panic!("{text}");
        }
    }

    /// One program: its two directories, its open handles, and where its
    /// operations run.
    struct Program {
        seed: u64,
        rng: Rng,
        step: usize,
        trace: bool,
        /// This step, as the report names it.
        what: String,
        /// This step's kind, for deduplicating its divergences.
        key: String,
        gdex_dir: TempDir,
        std_dir: TempDir,
        handles: Vec<Handle>,
        pool: ThreadPool,
        /// This thread's own context (pushed only while it is used).
        own: glib::MainContext,
        fifos: usize,
        /// This step's divergence in an operation's outcome, if any (a
        /// difference in the files after it is then part of the same one).
        diverged: bool,
    }

    impl Program {
        fn new(seed: u64, trace: bool) -> Program {
            let gdex_dir = TempDir::new(&format!("aio-diff-{seed:x}-gdex"));
            let std_dir = TempDir::new(&format!("aio-diff-{seed:x}-std"));
            for dir in [&gdex_dir, &std_dir] {
                std::fs::create_dir(dir.0.join("sub")).unwrap();
                std::fs::write(dir.0.join("a"), b"the first file").unwrap();
            }
            Program {
                seed,
                rng: Rng(seed),
                step: 0,
                trace,
                what: String::new(),
                key: String::new(),
                gdex_dir,
                std_dir,
                handles: Vec::new(),
                pool: pool(2),
                own: glib::MainContext::new(),
                fifos: 0,
                diverged: false,
            }
        }

        fn run(&mut self, steps: usize, found: &mut Found) {
            for step in 0..steps {
                self.step = step;
                self.diverged = false;
                self.one_step(found);
                if self.trace {
                    println!("seed {:#x} step {step}: {}", self.seed, self.what);
                }
                let reference = snapshot(&self.std_dir.0);
                let got = snapshot(&self.gdex_dir.0);
                if let Some(diff) = differences(&reference, &got) {
                    if !self.diverged {
                        let key = format!("{}: the files differ", self.key);
                        let report = self.report(&format!("the files differ after it: {diff}"));
                        found.add(key, report);
                    }
                    restore(&self.gdex_dir.0, &reference);
                }
            }
            // Close everything; nothing may be left open in gdex's directory.
            self.handles.clear();
            self.what = "the end: every handle closed".into();
            self.key = "the end".into();
            let open = self.wait_quiet_all();
            if open > 0 {
                found.add(
                    "fds left open".into(),
                    self.report(&format!("{open} fd(s) still open in gdex's directory")),
                );
            }
        }

        fn report(&self, what: &str) -> String {
            format!(
                "[seed {:#x}, step {}] {}: {what}",
                self.seed, self.step, self.what
            )
        }

        /// Compares an operation's outcomes, noting a divergence.
        fn compare(&mut self, found: &mut Found, reference: &Got, got: &Got) {
            if reference != got {
                self.diverged = true;
                let key = match (reference, got) {
                    // One kind, whatever std gave.
                    (_, Got::Hung(_)) => format!("{}: gdex never completes", self.key),
                    // A refusal (std's, without an errno) that gdex tried:
                    // one kind, whatever the system then said.
                    (Got::Failed { errno: None, .. }, Got::Opened | Got::Failed { .. }) => {
                        format!("{}: std refuses / gdex tries", self.key)
                    }
                    _ => format!(
                        "{}: std {} / gdex {}",
                        self.key,
                        reference.class(),
                        got.class()
                    ),
                };
                let report = self.report(&format!("std: {reference}; gdex: {got}"));
                found.add(key, report);
            }
        }

        /// Notes a divergence that is not two outcomes.
        fn note(&mut self, found: &mut Found, kind: &str, what: &str) {
            self.diverged = true;
            let key = format!("{}: {kind}", self.key);
            let report = self.report(what);
            found.add(key, report);
        }

        fn gdex_path(&self, name: &str) -> PathBuf {
            self.gdex_dir.0.join(name)
        }

        fn std_path(&self, name: &str) -> PathBuf {
            self.std_dir.0.join(name)
        }

        /// A path to open: mostly the regular files, sometimes the
        /// directory, a file in a missing directory, a path through a
        /// file, a path with a NUL byte.
        fn pick_name(&mut self) -> String {
            match self.rng.below(40) {
                0..=1 => "sub".into(),
                2..=3 => "missing/x".into(),
                4..=5 => "a/x".into(),
                6..=7 => "a\0b".into(),
                _ => self.rng.pick(&FILES).into(),
            }
        }

        /// Regular files present in the reference directory now.
        fn existing_files(&self) -> Vec<&'static str> {
            FILES
                .iter()
                .copied()
                .filter(|name| self.std_path(name).is_file())
                .collect()
        }

        /// The fds of this process open on `name` in gdex's directory that
        /// the program's handles account for.
        fn handles_on(&self, name: &str) -> usize {
            self.handles.iter().filter(|h| h.name == name).count()
        }

        /// Iterates this thread's context (its ring, if an operation was
        /// polled there) until `done` or `limit`.
        fn wait_bounded(&self, limit: Duration, mut done: impl FnMut() -> bool) -> bool {
            let deadline = Instant::now() + limit;
            loop {
                if done() {
                    return true;
                }
                if Instant::now() >= deadline {
                    return false;
                }
                if !self.own.iteration(false) {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }

        /// Waits until the fds on `name` in gdex's directory are those of
        /// the open handles: an operation still holding one is not over.
        fn wait_quiet(&self, name: &str) -> bool {
            let path = self.gdex_path(name);
            let expected = self.handles_on(name);
            self.wait_bounded(LIMIT, || fds_open_on(&path) == expected)
        }

        /// Waits until no fd is open in gdex's directory; gives how many
        /// are.
        fn wait_quiet_all(&self) -> usize {
            let dir = self.gdex_dir.0.clone();
            let count = || {
                std::fs::read_dir("/proc/self/fd")
                    .unwrap()
                    .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
                    .filter(|target| target.starts_with(&dir))
                    .count()
            };
            self.wait_bounded(LIMIT, || count() == 0);
            count()
        }

        /// Awaits `fut` to its end on `awaiter`, within `limit`.
        fn finish<T: Send + 'static>(
            &self,
            awaiter: Awaiter,
            fut: Fut<T>,
            limit: Duration,
        ) -> Fate<T> {
            type Caught<T> = Result<Result<T, gdex::Error>, Box<dyn Any + Send>>;
            let timed = gdex::timeout(limit, AssertUnwindSafe(fut).catch_unwind());
            let out: Result<Caught<T>, gdex::Error> = match awaiter {
                Awaiter::WaitFor => gdex::wait_for(timed).map_err(Into::into),
                Awaiter::BlockOnOwn => self
                    .own
                    .with_thread_default(|| gdex::block_on(timed))
                    .expect("this thread's context is free")
                    .map_err(Into::into),
                Awaiter::PoolTask => gdex::wait_for(self.pool.scheduler().spawn(timed))
                    .and_then(|timed| timed.map_err(Into::into)),
                Awaiter::Fiber => gdex::wait_for(
                    self.pool
                        .scheduler()
                        .spawn_fiber(move || gdex::fiber::wait(timed)),
                )
                .and_then(|waited| waited),
                Awaiter::OtherThread => std::thread::spawn(move || gdex::wait_for(timed))
                    .join()
                    .unwrap()
                    .map_err(Into::into),
            };
            match out {
                Err(gdex::Error::TimedOut) => Fate::Hung(limit),
                Err(err) => Fate::Err(err),
                Ok(Err(payload)) => Fate::Panicked(panic_message(&*payload)),
                Ok(Ok(Ok(value))) => Fate::Ok(value),
                Ok(Ok(Err(err))) => Fate::Err(err),
            }
        }

        /// Makes and awaits an operation on a random awaiter.
        fn run_op<T: Send + 'static>(&mut self, f: impl FnOnce() -> Fut<T>) -> (Fate<T>, Awaiter) {
            let awaiter = self.rng.pick(&AWAITERS);
            let fate = match make(f) {
                Ok(fut) => self.finish(awaiter, fut, LIMIT),
                Err(fate) => fate,
            };
            (fate, awaiter)
        }

        /// Polls `fut` once at `first`, with `waker` if given.
        fn poll_once<T: Send + 'static>(
            &self,
            first: FirstPoll,
            fut: Fut<T>,
            waker: Option<Waker>,
        ) -> Polled<T> {
            let once = poll_once_future(fut, waker);
            let on_pool = |pool: &ThreadPool, once| {
                gdex::wait_for(pool.scheduler().spawn(once))
                    .unwrap_or_else(|err| Polled::Panicked(format!("the task: {err}")))
            };
            match first {
                FirstPoll::Plain => gdex::wait_for(once),
                FirstPoll::Own => self
                    .own
                    .with_thread_default(|| gdex::block_on(once))
                    .expect("this thread's context is free"),
                FirstPoll::PoolTask => on_pool(&self.pool, once),
                FirstPoll::ExitingThread => std::thread::spawn(move || {
                    let context = glib::MainContext::new();
                    context
                        .with_thread_default(|| gdex::block_on(once))
                        .expect("a fresh context is free")
                })
                .join()
                .unwrap(),
                FirstPoll::DroppedPool => {
                    let pool = pool(1);
                    let polled = on_pool(&pool, once);
                    drop(pool);
                    polled
                }
            }
        }

        // -------------------------------------------------------------
        // The steps
        // -------------------------------------------------------------

        fn one_step(&mut self, found: &mut Found) {
            let roll = self.rng.below(100);
            match roll {
                0..=15 => self.open(found),
                16..=31 => self.read_at(found),
                32..=43 => self.write_at(found),
                44..=51 => self.write_all_at(found),
                52..=55 => self.metadata(found),
                56..=61 => self.read_file(found),
                62..=67 => self.close(),
                68..=79 => self.dropped(found),
                80..=83 => self.cancelled_task(found),
                84..=91 => self.follows_its_poller(found),
                92..=96 => self.fifo(found),
                _ => self.exiting_thread(found),
            }
        }

        fn open(&mut self, found: &mut Found) {
            let name = self.pick_name();
            let (gpath, spath) = (self.gdex_path(&name), self.std_path(&name));
            let (options, refusal, how, reference, gdex) = match self.rng.below(8) {
                0 => {
                    let (fate, awaiter) = self.run_op(|| Box::pin(File::open(gpath)));
                    let reference = std::fs::File::open(&spath);
                    ("File::open".to_owned(), None, awaiter, reference, fate)
                }
                1 => {
                    let (fate, awaiter) = self.run_op(|| Box::pin(File::create(gpath)));
                    let reference = std::fs::File::create(&spath);
                    ("File::create".to_owned(), None, awaiter, reference, fate)
                }
                _ => {
                    let o = Options::random(&mut self.rng);
                    let (fate, awaiter) = self.run_op(|| Box::pin(o.gdex().open(gpath)));
                    let reference = o.std().open(&spath);
                    (
                        format!("open with {o}"),
                        o.refusal(),
                        awaiter,
                        reference,
                        fate,
                    )
                }
            };
            self.what = format!("{options} {name:?} ({how:?})");
            self.key = match (name.contains('\0'), refusal) {
                (true, _) => "open (a NUL byte in the path)".into(),
                (false, Some(why)) => format!("open ({why})"),
                (false, None) => "open".into(),
            };
            let (reference_got, std_file) = match reference {
                Ok(file) => (Got::Opened, Some(file)),
                Err(err) => (std_failed(&err), None),
            };
            let (gdex_got, gdex_file) = match gdex {
                Fate::Ok(file) => (Got::Opened, Some(file)),
                other => (other.got(|_: File| Got::Opened), None),
            };
            self.compare(found, &reference_got, &gdex_got);
            if let (Some(gdex), Some(std)) = (gdex_file, std_file) {
                if self.handles.len() >= 8 {
                    self.handles.remove(0);
                }
                self.handles.push(Handle {
                    name,
                    how: options,
                    gdex,
                    std,
                });
            }
        }

        /// A handle to work on, opening one first if there is none.
        fn handle(&mut self, found: &mut Found) -> Option<usize> {
            if self.handles.is_empty() {
                self.open(found);
                return None;
            }
            Some(self.rng.below(self.handles.len() as u64) as usize)
        }

        /// An offset to read or write at: in the file, at its end, past it
        /// (a hole, for a write), or past `i64::MAX`.
        fn offset(&mut self, len: u64, write: bool) -> u64 {
            match self.rng.below(20) {
                0..=5 => self.rng.below(len + 1),
                6..=7 => 0,
                8..=9 => len,
                10..=13 => len + 1 + self.rng.below(8192),
                14 if !write => len + self.rng.below(1 << 40),
                15 => i64::MAX as u64,
                16 => i64::MAX as u64 + 1 + self.rng.below(1 << 20),
                17 => u64::MAX,
                _ => self.rng.below(len + 1),
            }
        }

        fn file_len(&self, index: usize) -> u64 {
            self.handles[index]
                .std
                .metadata()
                .map(|m| m.len())
                .unwrap_or(0)
        }

        fn read_at(&mut self, found: &mut Found) {
            let Some(i) = self.handle(found) else { return };
            let len = self.file_len(i);
            let offset = self.offset(len, false);
            let room = match self.rng.below(8) {
                0 => 1,
                1 => 65_536,
                _ => 1 + self.rng.below(4096) as usize,
            };
            let prefix = if self.rng.one_in(4) {
                {
                    let n = 1 + self.rng.below(16) as usize;
                    self.rng.bytes(n)
                }
            } else {
                Vec::new()
            };
            let mut buf = Vec::with_capacity(prefix.len() + room);
            buf.extend_from_slice(&prefix);
            let room = buf.capacity() - buf.len();
            let h = &self.handles[i];
            let file = h.gdex.clone();
            let mut into = vec![0u8; room];
            let reference = std_got(h.std.read_at(&mut into, offset), |n| {
                Got::Read(into[..n].to_vec())
            });
            self.what = format!(
                "read_at({room} bytes, offset {offset}) of {:?} opened by {}",
                h.name, h.how
            );
            self.key = "read_at".into();
            let (fate, awaiter) = self.run_op(move || Box::pin(file.read_at(buf, offset)));
            self.what += &format!(" ({awaiter:?})");
            let gdex = fate.got(|buf| read_got(buf, &prefix));
            self.compare(found, &reference, &gdex);
        }

        fn write_data(&mut self) -> Vec<u8> {
            let size = match self.rng.below(16) {
                0 => 0,
                1..=5 => 1 + self.rng.below(64) as usize,
                _ => 1 + self.rng.below(4096) as usize,
            };
            self.rng.bytes(size)
        }

        /// Picks an open handle, an offset and the data for a write by `op`
        /// (in that order: a seed's program stays the same), and names the
        /// step.
        fn write_step(&mut self, found: &mut Found, op: &str) -> Option<(usize, u64, Vec<u8>)> {
            let i = self.handle(found)?;
            let len = self.file_len(i);
            let offset = self.offset(len, true);
            let data = self.write_data();
            let h = &self.handles[i];
            self.what = format!(
                "{op}({} bytes, offset {offset}) to {:?} opened by {}",
                data.len(),
                h.name,
                h.how
            );
            self.key = op.into();
            Some((i, offset, data))
        }

        fn write_at(&mut self, found: &mut Found) {
            let Some((i, offset, data)) = self.write_step(found, "write_at") else {
                return;
            };
            let h = &self.handles[i];
            let reference = std_got(h.std.write_at(&data, offset), Got::Wrote);
            let file = h.gdex.clone();
            let sent = data.clone();
            let (fate, awaiter) = self.run_op(move || Box::pin(file.write_at(sent, offset)));
            self.what += &format!(" ({awaiter:?})");
            let gdex = fate.got(|(n, back)| {
                if back == data {
                    Got::Wrote(n)
                } else {
                    Got::Other("the buffer came back changed".into())
                }
            });
            self.compare(found, &reference, &gdex);
        }

        fn write_all_at(&mut self, found: &mut Found) {
            let Some((i, offset, data)) = self.write_step(found, "write_all_at") else {
                return;
            };
            let h = &self.handles[i];
            let reference = std_got(h.std.write_all_at(&data, offset), |()| Got::Done);
            let file = h.gdex.clone();
            let (fate, awaiter) = self.run_op(move || {
                Box::pin(async move { file.write_all_at(data, offset).await.map(drop) })
            });
            self.what += &format!(" ({awaiter:?})");
            self.compare(found, &reference, &fate.got(|()| Got::Done));
        }

        fn metadata(&mut self, found: &mut Found) {
            let Some(i) = self.handle(found) else { return };
            let h = &self.handles[i];
            self.what = format!("metadata of {:?} opened by {}", h.name, h.how);
            self.key = "metadata".into();
            let meta = |m: std::fs::Metadata| Got::Meta {
                len: m.len(),
                dir: m.is_dir(),
            };
            let reference = std_got(h.std.metadata(), meta);
            let gdex = std_got(h.gdex.metadata(), meta);
            self.compare(found, &reference, &gdex);
        }

        fn read_file(&mut self, found: &mut Found) {
            let name = self.pick_name();
            let gpath = self.gdex_path(&name);
            let reference = std_got(std::fs::read(self.std_path(&name)), Got::Read);
            let (fate, awaiter) = self.run_op(move || Box::pin(gdex::aio::read_file(gpath)));
            self.what = format!("read_file {name:?} ({awaiter:?})");
            self.key = if name.contains('\0') {
                "read_file (a NUL byte in the path)".into()
            } else {
                "read_file".into()
            };
            self.compare(found, &reference, &fate.got(Got::Read));
        }

        fn close(&mut self) {
            if self.handles.is_empty() {
                self.what = "close (none open)".into();
                self.key = "close".into();
                return;
            }
            let i = self.rng.below(self.handles.len() as u64) as usize;
            let h = self.handles.remove(i);
            self.what = format!("close {:?} opened by {}", h.name, h.how);
            self.key = "close".into();
        }

        /// An operation on a descriptor of its own (so that when it is
        /// over shows in the fds open on the file): a read or a write of
        /// an existing file.
        fn own_fd_op(&mut self) -> Option<OwnFdOp> {
            let files = self.existing_files();
            if files.is_empty() {
                return None;
            }
            let name = self.rng.pick(&files).to_owned();
            let len = std::fs::metadata(self.std_path(&name)).unwrap().len();
            let own = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(self.gdex_path(&name))
                .unwrap();
            let file = File::from(own);
            if self.rng.one_in(3) {
                let offset = self.rng.below(len + 1);
                let room = 1 + self.rng.below(4096) as usize;
                let fut: Fut<Got> = Box::pin(async move {
                    file.read_at(Vec::with_capacity(room), offset)
                        .await
                        .map(Got::Read)
                });
                let reference = Box::new(move |f: &std::fs::File| {
                    let mut buf = vec![0; room];
                    std_got(f.read_at(&mut buf, offset), |n| {
                        Got::Read(buf[..n].to_vec())
                    })
                });
                Some(OwnFdOp {
                    desc: format!("read_at({room}, {offset}) of {name:?}"),
                    name,
                    fut,
                    reference,
                })
            } else {
                let offset = self.rng.below(len + 4096);
                let size = 1 + self.rng.below(4096) as usize;
                let data = self.rng.bytes(size);
                let size = data.len();
                let sent = data.clone();
                let fut: Fut<Got> = Box::pin(async move {
                    file.write_at(sent, offset)
                        .await
                        .map(|(n, _)| Got::Wrote(n))
                });
                let reference = Box::new(move |f: &std::fs::File| {
                    std_got(f.write_at(&data, offset), Got::Wrote)
                });
                Some(OwnFdOp {
                    desc: format!("write_at({size}, {offset}) to {name:?}"),
                    name,
                    fut,
                    reference,
                })
            }
        }

        /// The reference's own descriptor for `name`, read and write.
        fn std_own(&self, name: &str) -> std::fs::File {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(self.std_path(name))
                .unwrap()
        }

        /// After an operation that may or may not have happened: gdex's
        /// files must be the reference's with it (then kept) or without it
        /// (then the reference is put back).
        fn either(&mut self, found: &mut Found, apply: impl FnOnce(&mut Self)) {
            let without = snapshot(&self.std_dir.0);
            apply(self);
            let with = snapshot(&self.std_dir.0);
            let got = snapshot(&self.gdex_dir.0);
            if got == with {
                self.what += ", which happened";
            } else if got == without {
                restore(&self.std_dir.0, &without);
                self.what += ", which did not happen";
            } else {
                self.diverged = true;
                let diff = differences(&with, &got).unwrap_or_default();
                found.add(
                    format!("{}: neither with nor without it", self.key),
                    self.report(&format!(
                        "the files are as std leaves them neither with the operation nor without: {diff}"
                    )),
                );
                restore(&self.gdex_dir.0, &with);
            }
        }

        /// A future dropped before its first poll, after it, or after it
        /// completed.
        fn dropped(&mut self, found: &mut Found) {
            let first = self
                .rng
                .pick(&[FirstPoll::Plain, FirstPoll::Own, FirstPoll::PoolTask]);
            if self.rng.one_in(3) {
                return self.dropped_open(found, first);
            }
            let Some(OwnFdOp {
                name,
                fut,
                reference,
                desc,
            }) = self.own_fd_op()
            else {
                return self.write_at(found);
            };
            match self.rng.below(3) {
                0 => {
                    self.what = format!("{desc} dropped before its first poll");
                    self.key = format!("{} dropped before its first poll", op_name(&desc));
                    drop(fut);
                    self.check_quiet(found, &name);
                }
                1 => {
                    self.what = format!("{desc} dropped after its first poll ({first:?})");
                    self.key = format!("{} dropped after its first poll", op_name(&desc));
                    match self.poll_once(first, fut, None) {
                        Polled::Pending(fut) => {
                            drop(fut);
                            self.check_quiet(found, &name);
                            let std = self.std_own(&name);
                            self.either(found, |_| drop(reference(&std)));
                        }
                        Polled::Ready(result) => {
                            self.what += ", done at its first poll";
                            let got = result.unwrap_or_else(|e| gdex_failed(&e));
                            let std = self.std_own(&name);
                            let reference = reference(&std);
                            self.compare(found, &reference, &got);
                        }
                        Polled::Panicked(message) => {
                            let std = self.std_own(&name);
                            let reference = reference(&std);
                            self.compare(found, &reference, &Got::Panicked(message));
                        }
                    }
                }
                _ => {
                    self.what = format!("{desc} dropped after it completed ({first:?})");
                    self.key = format!("{} dropped after it completed", op_name(&desc));
                    let (woken, waker) = flag();
                    let got = match self.poll_once(first, fut, Some(waker)) {
                        Polled::Pending(fut) => {
                            if !self.wait_bounded(LIMIT, || woken.0.load(Ordering::SeqCst)) {
                                let what = format!("its waker was not woken within {LIMIT:?}");
                                self.note(found, "gdex never completes", &what);
                            }
                            drop(fut);
                            None
                        }
                        Polled::Ready(result) => Some(result.unwrap_or_else(|e| gdex_failed(&e))),
                        Polled::Panicked(message) => Some(Got::Panicked(message)),
                    };
                    let reference = reference(&self.std_own(&name));
                    if let Some(got) = got {
                        self.compare(found, &reference, &got);
                    }
                    self.check_quiet(found, &name);
                }
            }
        }

        /// Checks that no operation holds a descriptor of `name` any more.
        fn check_quiet(&mut self, found: &mut Found, name: &str) {
            if !self.wait_quiet(name) {
                let open = fds_open_on(&self.gdex_path(name)) - self.handles_on(name);
                let what = format!(
                    "{open} more fd(s) open on the file than the handles account for, after {LIMIT:?}"
                );
                self.note(found, "fd kept", &what);
            }
        }

        /// An open dropped before its first poll (nothing happens) or after
        /// it completed (it happened, and its fd is closed).
        fn dropped_open(&mut self, found: &mut Found, first: FirstPoll) {
            let name = self.rng.pick(&FILES);
            let o = Options::valid(&mut self.rng);
            let gpath = self.gdex_path(name);
            let fut: Fut<Got> = Box::pin({
                let open = o.gdex().open(gpath);
                async move { open.await.map(|_| Got::Opened) }
            });
            if self.rng.coin() {
                self.what = format!("open {name:?} with {o} dropped before its first poll");
                self.key = "open dropped before its first poll".into();
                drop(fut);
            } else {
                self.what =
                    format!("open {name:?} with {o} dropped after it completed ({first:?})");
                self.key = "open dropped after it completed".into();
                let (woken, waker) = flag();
                if let Polled::Pending(fut) = self.poll_once(first, fut, Some(waker)) {
                    if !self.wait_bounded(LIMIT, || woken.0.load(Ordering::SeqCst)) {
                        let what = format!("its waker was not woken within {LIMIT:?}");
                        self.note(found, "gdex never completes", &what);
                    }
                    drop(fut);
                }
                drop(o.std().open(self.std_path(name)));
            }
            self.check_quiet(found, name);
        }

        /// A task holding an operation is cancelled (its handle dropped)
        /// after the operation's first poll.
        fn cancelled_task(&mut self, found: &mut Found) {
            let Some(OwnFdOp {
                name,
                fut,
                reference,
                desc,
            }) = self.own_fd_op()
            else {
                return self.write_at(found);
            };
            self.what = format!("{desc} in a task cancelled after its first poll");
            self.key = "a task holding an operation cancelled".into();
            let polled = Arc::new(AtomicUsize::new(0));
            let dropped = Arc::new(AtomicUsize::new(0));
            let marker = common::Counted(dropped.clone());
            let task = self
                .pool
                .scheduler()
                .spawn(after_first_poll(&polled, async move {
                    let _marker = marker;
                    fut.await
                }));
            if !self.wait_bounded(LIMIT, || polled.load(Ordering::SeqCst) == 1) {
                self.note(found, "never polled", "the task was not polled");
            }
            drop(task);
            if !self.wait_bounded(LIMIT, || dropped.load(Ordering::SeqCst) == 1) {
                self.note(
                    found,
                    "never dropped",
                    "the cancelled task's future was not dropped",
                );
            }
            self.check_quiet(found, &name);
            let std = self.std_own(&name);
            self.either(found, |_| drop(reference(&std)));
        }

        /// An operation polled once in one place and awaited to its end in
        /// another (A2): it completes as it would have where it started.
        fn follows_its_poller(&mut self, found: &mut Found) {
            let first = self.rng.pick(&[
                FirstPoll::Plain,
                FirstPoll::Own,
                FirstPoll::PoolTask,
                FirstPoll::ExitingThread,
                FirstPoll::DroppedPool,
            ]);
            let awaiter = self.rng.pick(&AWAITERS);
            let (fut, reference, desc): (Fut<Got>, Got, String) = match self.rng.below(3) {
                0 if !self.handles.is_empty() => {
                    let i = self.rng.below(self.handles.len() as u64) as usize;
                    let len = self.file_len(i);
                    let offset = self.rng.below(len + 1);
                    let h = &self.handles[i];
                    let mut into = vec![0; 512];
                    let reference = std_got(h.std.read_at(&mut into, offset), |n| {
                        Got::Read(into[..n].to_vec())
                    });
                    let file = h.gdex.clone();
                    (
                        Box::pin(async move {
                            file.read_at(Vec::with_capacity(512), offset)
                                .await
                                .map(Got::Read)
                        }),
                        reference,
                        format!("read_at(512, {offset}) of {:?} opened by {}", h.name, h.how),
                    )
                }
                1 if !self.handles.is_empty() => {
                    let i = self.rng.below(self.handles.len() as u64) as usize;
                    let len = self.file_len(i);
                    let offset = self.rng.below(len + 64);
                    let size = 1 + self.rng.below(512) as usize;
                    let data = self.rng.bytes(size);
                    let h = &self.handles[i];
                    let reference = std_got(h.std.write_at(&data, offset), Got::Wrote);
                    let file = h.gdex.clone();
                    let size = data.len();
                    (
                        Box::pin(async move {
                            file.write_at(data, offset)
                                .await
                                .map(|(n, _)| Got::Wrote(n))
                        }),
                        reference,
                        format!(
                            "write_at({size}, {offset}) to {:?} opened by {}",
                            h.name, h.how
                        ),
                    )
                }
                _ => {
                    let name = self.rng.pick(&FILES);
                    let o = Options::valid(&mut self.rng);
                    let reference = std_got(o.std().open(self.std_path(name)), |_| Got::Opened);
                    let open = o.gdex().open(self.gdex_path(name));
                    (
                        Box::pin(async move { open.await.map(|_| Got::Opened) }),
                        reference,
                        format!("open {name:?} with {o}"),
                    )
                }
            };
            self.what = format!("{desc} polled once ({first:?}) then awaited ({awaiter:?})");
            self.key = format!("polled once ({first:?}) and awaited elsewhere");
            let got = match self.poll_once(first, fut, None) {
                Polled::Pending(fut) => self.finish(awaiter, fut, FOLLOW_LIMIT).got(|got| got),
                Polled::Ready(result) => result.unwrap_or_else(|e| gdex_failed(&e)),
                Polled::Panicked(message) => Got::Panicked(message),
            };
            self.compare(found, &reference, &got);
        }

        /// A FIFO opened while nobody has its other end, which a helper
        /// thread opens after a delay: `open(2)` for reading or writing
        /// waits for it. Sometimes gdex's open is dropped while it waits:
        /// then its fd must not stay open.
        /// A fresh FIFO on both sides: its gdex and std paths.
        fn new_fifo(&mut self) -> (PathBuf, PathBuf) {
            self.fifos += 1;
            let name = format!("fifo{}", self.fifos);
            let (gpath, spath) = (self.gdex_path(&name), self.std_path(&name));
            mkfifo(&gpath);
            mkfifo(&spath);
            (gpath, spath)
        }

        fn fifo(&mut self, found: &mut Found) {
            let (gpath, spath) = self.new_fifo();
            let o = self.rng.pick(&[
                (true, false, false, false, false),
                (false, true, false, false, false),
                (false, true, false, true, false),
                (false, true, false, false, true),
                (false, false, true, false, false),
                (true, true, false, false, false),
            ]);
            let o = Options {
                read: o.0,
                write: o.1,
                append: o.2,
                truncate: o.3,
                create: o.4,
                create_new: false,
            };
            // The reference.
            let partner = Partner::after_delay(&spath);
            let opened = o.std().open(&spath);
            // Read and write together never wait for the other end (Linux,
            // fifo(7)): returned early, even when this thread was
            // descheduled past the partner's delay before it could look.
            let early = !partner.coming() || (o.read && o.write);
            let reference = Got::Fifo(Box::new(std_got(opened, |_| Got::Opened)), early);
            partner.finish();
            // gdex.
            let partner = Partner::after_delay(&gpath);
            if self.rng.one_in(3) {
                let first = self
                    .rng
                    .pick(&[FirstPoll::Plain, FirstPoll::Own, FirstPoll::PoolTask]);
                self.what = format!("open FIFO with {o}, dropped while it waits ({first:?})");
                self.key = "open FIFO dropped while it waits".into();
                match make(|| -> Fut<File> { Box::pin(o.gdex().open(&gpath)) }) {
                    Ok(fut) => drop(self.poll_once(first, fut, None)),
                    Err(_) => self.what += ", refused",
                }
                // Once the partner holds its end, an open still running
                // (on the blocking lane, `openat` is not interrupted)
                // returns, and its fd is closed: then only the partner's
                // is left. The FIFO goes before the partner does, so that
                // an open that had not started yet fails instead of
                // waiting for a partner that is gone.
                let arrived = self.wait_bounded(LIMIT, || partner.arrived());
                let quiet = arrived && self.wait_bounded(LIMIT, || fds_open_on(&gpath) == 1);
                let _ = std::fs::remove_file(&gpath);
                partner.finish();
                if !quiet {
                    self.note(found, "fd kept", "the dropped open's fd is still open");
                }
            } else {
                let awaiter =
                    self.rng
                        .pick(&[Awaiter::WaitFor, Awaiter::BlockOnOwn, Awaiter::PoolTask]);
                self.what = format!("open FIFO with {o} ({awaiter:?})");
                self.key = format!("open FIFO for {}", o.access());
                let fate = match make(|| -> Fut<File> { Box::pin(o.gdex().open(&gpath)) }) {
                    Ok(fut) => self.finish(awaiter, fut, LIMIT),
                    Err(fate) => fate,
                };
                // Returning before the other end came is compared only
                // where std waited: an open that need not wait may still
                // return after it on a busy machine.
                let early = !partner.coming() && matches!(&reference, Got::Fifo(_, false));
                let early = early || matches!(&reference, Got::Fifo(_, true));
                let got = Got::Fifo(Box::new(fate.got(|_| Got::Opened)), early);
                partner.finish();
                self.compare(found, &reference, &got);
            }
            let _ = std::fs::remove_file(&gpath);
            let _ = std::fs::remove_file(&spath);
        }

        /// A thread polls an open of a FIFO for writing (with `create` or
        /// `truncate`, which the kernel's io_uring runs on a worker of its
        /// own, where it waits for a reader), drops another operation it
        /// had in flight, hands the open over and exits; the program awaits
        /// the open, whose reader comes after a delay.
        fn exiting_thread(&mut self, found: &mut Found) {
            let (gpath, spath) = self.new_fifo();
            let create = self.rng.coin();
            let o = Options {
                read: false,
                write: true,
                append: false,
                truncate: !create,
                create,
                create_new: false,
            };
            let awaiter = self.rng.pick(&AWAITERS);
            self.what = format!(
                "open FIFO with {o} polled on a thread that dropped a read in flight and exited ({awaiter:?})"
            );
            self.key = "open FIFO polled on a thread that then exits".into();
            let partner = Partner::after_delay(&spath);
            let reference = std_got(o.std().open(&spath), |_| Got::Opened);
            partner.finish();
            let partner = Partner::after_delay(&gpath);
            let directory = self.gdex_path("sub");
            let (pipe_reader, pipe_writer) = std::io::pipe().unwrap();
            let polled = std::thread::spawn({
                let gpath = gpath.clone();
                move || {
                    let pipe = File::from(std::os::fd::OwnedFd::from(pipe_reader));
                    let (woken, waker) = flag();
                    let mut cx = Context::from_waker(&waker);
                    // A read of an empty pipe, in flight until dropped.
                    let mut waiting = Box::pin(pipe.read_at(Vec::with_capacity(8), 0));
                    if waiting.as_mut().poll(&mut cx).is_ready() {
                        return Err("the pipe read finished at once".to_owned());
                    }
                    // A read submitted after it (it fails: a directory):
                    // when it completes, the pipe read is in flight too.
                    let dir = File::from(std::fs::File::open(&directory).unwrap());
                    let mut after = Box::pin(dir.read_at(Vec::with_capacity(8), 0));
                    if after.as_mut().poll(&mut cx).is_pending() {
                        let deadline = Instant::now() + LIMIT;
                        while !woken.0.load(Ordering::SeqCst) {
                            if Instant::now() > deadline {
                                return Err("the directory read never completed".to_owned());
                            }
                            std::thread::sleep(Duration::from_micros(200));
                        }
                    }
                    let open: Result<Fut<File>, _> = make(|| Box::pin(o.gdex().open(gpath)));
                    match open {
                        Ok(mut open) => {
                            let polled =
                                open.as_mut().poll(&mut Context::from_waker(Waker::noop()));
                            drop(waiting);
                            match polled {
                                Poll::Pending => Ok(Ok(open)),
                                Poll::Ready(result) => Ok(Err(result)),
                            }
                        }
                        Err(_) => Err("the open was refused".to_owned()),
                    }
                }
            })
            .join()
            .unwrap();
            drop(pipe_writer);
            let got = match polled {
                Ok(Ok(open)) => self.finish(awaiter, open, LIMIT).got(|_| Got::Opened),
                Ok(Err(result)) => match result {
                    Ok(_) => Got::Opened,
                    Err(err) => gdex_failed(&err),
                },
                Err(why) => Got::Other(why),
            };
            partner.finish();
            self.compare(found, &reference, &got);
            let _ = std::fs::remove_file(&gpath);
            let _ = std::fs::remove_file(&spath);
        }
    }

    /// A read or a write on a descriptor of its own, of the file `name`:
    /// gdex's future, what `std` does for it (given its own descriptor),
    /// and its description.
    struct OwnFdOp {
        name: String,
        fut: Fut<Got>,
        reference: Box<dyn FnOnce(&std::fs::File) -> Got>,
        desc: String,
    }

    /// A gdex read's outcome: the bytes it appended, the bytes already in
    /// the buffer left as they were.
    fn read_got(buf: Vec<u8>, prefix: &[u8]) -> Got {
        if buf.starts_with(prefix) {
            Got::Read(buf[prefix.len()..].to_vec())
        } else {
            Got::Other("the bytes already in the buffer changed".into())
        }
    }

    /// An operation's name from its description ("read_at(…) of …").
    fn op_name(desc: &str) -> &str {
        desc.split('(').next().unwrap_or(desc)
    }
}
