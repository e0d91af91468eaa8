//! Attacks on issue 17's second speed round: the worker context's poll
//! function (`poll_fds`, P8), the S9 registry's `Book`, the boxed
//! `Failure`.

mod common;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::spin;

/// P8 with `poll_fds`: the AIO ring's source sits just above the default
/// priority, so on a turn where it has completions GLib polls only the
/// ring's fd (the sources at `G_PRIORITY_DEFAULT`, a `gdex::unix_fd` among
/// them, are left out of that turn). A task that reads a cached file and
/// then computes for longer than `FD_POLL_EVERY` makes every turn after a
/// long slice such a ring turn: if that restricted poll counted as "the
/// fds were just polled", the next (default-priority) turn skipped its
/// poll, every time, and the unix fd was never polled while the task ran.
#[test]
fn an_fd_is_found_on_a_worker_whose_long_slices_end_in_aio_completions() {
    common::watchdog("an_fd_is_found_between_aio_turns", 60, || {
        if gdex::aio::backend() != gdex::aio::Backend::IoUring {
            eprintln!("skipped: io_uring is unavailable here");
            return;
        }
        let dir = std::env::temp_dir().join(format!("gdex-attack17-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cached");
        std::fs::write(&path, [7u8; 4096]).unwrap();
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let s = pool.scheduler();
        const ROUNDS: usize = 5;
        let stop = Arc::new(AtomicBool::new(false));
        let reads = Arc::new(AtomicUsize::new(0));
        let (stop1, reads1) = (stop.clone(), reads.clone());
        s.spawn(async move {
            let file = gdex::aio::File::open(&path).await.unwrap();
            let t = Instant::now();
            while !stop1.load(Ordering::Acquire) && t.elapsed() < Duration::from_secs(40) {
                let buf = file.read_at(Vec::with_capacity(64), 0).await.unwrap();
                assert_eq!(buf.len(), 64);
                spin(Duration::from_micros(250));
                reads1.fetch_add(1, Ordering::Relaxed);
            }
        })
        .detach();
        let (mut ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let (waiting_tx, waiting) = std::sync::mpsc::channel();
        let (found_tx, found) = std::sync::mpsc::channel();
        let reader = s.spawn(async move {
            for _ in 0..ROUNDS {
                waiting_tx.send(()).unwrap();
                gdex::unix_fd(&ours, glib::IOCondition::IN).await.unwrap();
                found_tx.send(Instant::now()).unwrap();
                let mut byte = [0];
                ours.read_exact(&mut byte).unwrap();
            }
        });
        common::wait_until(|| reads.load(Ordering::Relaxed) > 100);
        let mut waits = Vec::new();
        for _ in 0..ROUNDS {
            waiting.recv().unwrap();
            // The reader's source is attached once its poll returns.
            std::thread::sleep(Duration::from_millis(2));
            let written = Instant::now();
            theirs.write_all(b"x").unwrap();
            let at = found.recv().unwrap();
            waits.push(at.saturating_duration_since(written));
        }
        gdex::block_on(reader).unwrap();
        stop.store(true, Ordering::Release);
        std::fs::remove_dir_all(&dir).ok();
        waits.sort();
        // Each turn of the reading task is 250 us long, so the fd is polled
        // within a millisecond or so; the median is kept below 50 ms so
        // that a preempted round does not fail the test. A worker that never
        // polls the fd between AIO turns finds it only by chance (when a
        // read does not complete during its submission): hundreds of
        // milliseconds to seconds per round.
        assert!(
            waits[ROUNDS / 2] < Duration::from_millis(50),
            "the fd was found after {waits:?} (sorted)"
        );
    });
}
