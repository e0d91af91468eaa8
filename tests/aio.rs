//! Issue 16 point 1 (A1): `gdex::aio` opens, reads and writes files on an
//! io_uring ring of the context that awaits, or on the blocking lane where
//! io_uring is unavailable. Every test here runs on both backends: once in
//! this process (io_uring where the kernel allows it), and once more, all of
//! them, in a child process with `GDEX_AIO=blocking`
//! (`every_test_again_on_the_blocking_lane`).

mod common;

use std::future::Future as _;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{after_first_poll, wait_until, watchdog, TempDir};
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
/// errno, and messages that name the file.
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
    let refused = std::panic::catch_unwind(|| OpenOptions::new().open(&path)).unwrap_err();
    let message = refused.downcast_ref::<String>().unwrap();
    assert!(
        message.contains("neither read, write nor append"),
        "{message}"
    );
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
        let mut rest = Vec::new();
        let mut plain = std::fs::File::from(reader.as_fd_owned());
        if gdex::aio::backend() == Backend::IoUring {
            plain.read_to_end(&mut rest).unwrap();
            assert_eq!(rest, b"after", "the cancelled read took nothing");
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
                let mut rest = Vec::new();
                std::fs::File::from(reader.as_fd_owned())
                    .read_to_end(&mut rest)
                    .unwrap();
                assert_eq!(rest, b"later");
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
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let open = fds_open_on(&path);
            if open == 0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{open} fds still open on {}",
                path.display()
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
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
    let out = command.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the run with io_uring refused failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("4 passed"), "{text}");
}

/// The whole suite once more in a child process, on the blocking lane.
#[test]
fn every_test_again_on_the_blocking_lane() {
    if std::env::var("GDEX_AIO").is_ok() || std::env::var_os("GDEX_TEST_IO_URING_REFUSED").is_some()
    {
        return; // we are the child (or the whole run is on one backend)
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args(["--skip", "every_test_again_on_the_blocking_lane"])
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
