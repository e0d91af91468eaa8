//! P8: timers and fds while a worker is busy. gdex's own timers follow
//! their task: a timer waits on the context of whoever polled it last;
//! polled on another context (its task moved to another worker, or its
//! first worker's pool is gone), it moves there, or resolves at once if its
//! deadline has passed.
//!
//! A busy worker's turns are cheap: its context's poll function
//! (`poll_fds`) skips the kernel's poll on a turn that may not block when a
//! real poll of the same fds came less than 100 µs before. A turn on which
//! a source above the default priority is ready (the AIO ring's, with
//! completions) asks only about that priority's fds and does not stand in
//! for a real poll, so a socket, a pipe or a `gdex::unix_fd` is still found
//! on a worker whose long slices end in AIO completions; and a nested
//! non-blocking loop inside a task on a worker still gets a real poll every
//! 100 µs or so.
//!
//! The watchdog's monitor raises the overdue timers of a worker stuck in
//! one poll; in thread-per-core mode the task stays home all the same (P9).

use crate::common;

use std::future::Future;
use std::io::{Read, Write};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use common::{spin, watchdog};

/// The name of the worker thread we run on.
fn worker() -> String {
    std::thread::current().name().unwrap_or("?").to_owned()
}

/// Keeps one worker of `s`'s pool spinning until `until` is raised, so that
/// the next task spawned from outside starts on the other one; gives the
/// occupied worker's name once it spins.
fn occupy_a_worker(s: &gdex::Scheduler, until: &Arc<AtomicBool>) -> String {
    let (occupied_tx, occupied_rx) = std::sync::mpsc::channel::<String>();
    let until = until.clone();
    s.spawn(async move {
        occupied_tx.send(worker()).unwrap();
        while !until.load(Ordering::SeqCst) {
            std::hint::spin_loop();
        }
    })
    .detach();
    occupied_rx.recv().unwrap()
}

/// Polls `future` once, here, and gives it back.
async fn poll_once<F: Future + Unpin>(mut future: F) -> F {
    std::future::poll_fn(|cx| {
        let _ = Pin::new(&mut future).poll(cx);
        Poll::Ready(())
    })
    .await;
    future
}

/// A task's timer is first polled on one worker, which then blocks for 2 s
/// in `blocking::blocking`; that hands the task to the other worker, where
/// the timer is polled next. It must fire there after its 20 ms, while the
/// first worker still blocks. (On cc53133 it stayed on the first worker's
/// context and fired only once the blocker had returned.) The same for
/// `timeout`, `with_timeout` and `with_deadline`.
///
/// The placement is made deterministic: an occupier keeps the other worker
/// busy until the blocker starts, so the task and the blocker share a
/// worker, the blocker first in its queue.
#[test]
fn a_timer_fires_on_time_after_its_task_moved_off_a_blocked_worker() {
    watchdog("a_timer_fires_after_its_task_moved", 60, || {
        for kind in ["sleep", "timeout", "with_timeout", "with_deadline"] {
            let pool = gdex::ThreadPool::builder()
                .workers(2)
                .stall_threshold(Duration::ZERO)
                .build()
                .unwrap();
            let s = pool.scheduler();
            let blocker_started = Arc::new(AtomicBool::new(false));
            let blocker_done = Arc::new(AtomicBool::new(false));
            let occupied = occupy_a_worker(&s, &blocker_started);
            // The blocker blocks for up to 2 s; the test lets it go once it
            // has its answer.
            let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
            let release_rx = std::sync::Mutex::new(Some(release_rx));
            let (bs, bd, s2) = (blocker_started.clone(), blocker_done.clone(), s.clone());
            let task = s.spawn(async move {
                let first = worker();
                // Deliberate: the timers are under test.
                let short = Duration::from_millis(20);
                let timer: Pin<Box<dyn Future<Output = bool> + Send>> = match kind {
                    "sleep" => Box::pin(async move {
                        gdex::sleep(short).await;
                        true
                    }),
                    "timeout" => {
                        Box::pin(async move { gdex::reject_after::<()>(short).await.is_err() })
                    }
                    "with_timeout" => Box::pin(async move {
                        gdex::timeout(short, std::future::pending::<()>())
                            .await
                            .is_err()
                    }),
                    _ => Box::pin(async move {
                        let at = std::time::Instant::now() + short;
                        gdex::timeout_at(at, std::future::pending::<()>())
                            .await
                            .is_err()
                    }),
                };
                // Register the timer here, on this worker's context.
                let timer = poll_once(timer).await;
                // Queue the blocker ahead of us on this worker: its blocking
                // call hands us to the other worker, freed as it starts.
                let bd2 = bd.clone();
                s2.spawn(async move {
                    bs.store(true, Ordering::SeqCst);
                    let rx = release_rx.lock().unwrap().take().unwrap();
                    gdex::blocking::blocking(|| {
                        let _ = rx.recv_timeout(Duration::from_secs(2));
                    });
                    bd2.store(true, Ordering::SeqCst);
                })
                .detach();
                gdex::yield_now().await;
                let fired = timer.await;
                assert!(fired, "{kind}: the timer did not report its expiry");
                (first, worker(), bd.load(Ordering::SeqCst))
            });
            let (first, now, blocker_was_done) = gdex::block_on(task).unwrap();
            let _ = release_tx.send(());
            assert_ne!(
                first, occupied,
                "{kind}: the task started on the occupied worker"
            );
            assert!(
                !blocker_was_done,
                "{kind}: the timer of a task handed off {first} fired only after {first}'s \
                 blocking call returned (the task finished on {now})"
            );
            assert_ne!(
                first, now,
                "{kind}: the task did not move off its blocked worker"
            );
            pool.shutdown();
        }
    });
}

/// A `sleep` first polled on a pool worker, whose pool is then shut down,
/// must still fire when it is awaited elsewhere (here on a plain thread,
/// through `block_on`). On cc53133 its source stayed on the dead worker's
/// context and a 1 s `with_timeout` around it gave `TimedOut`.
#[test]
fn a_timer_survives_the_pool_of_its_first_worker() {
    watchdog("a_timer_survives_its_first_pool", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        // The task gives the polled sleep back (in a tuple: the task's
        // output is a value, not a future it forgot to await). Deliberate:
        // the timer under test.
        let (sleep,) =
            gdex::block_on(pool.scheduler().spawn(async {
                (poll_once(Box::pin(gdex::sleep(Duration::from_millis(20)))).await,)
            }))
            .unwrap();
        pool.shutdown();
        let result = gdex::block_on(gdex::timeout(Duration::from_secs(1), sleep));
        assert!(
            result.is_ok(),
            "a sleep first polled on a shut-down pool never fired: {result:?}"
        );
    });
}

/// A timer polled again on the context it waits on keeps its one source:
/// polling it many times there attaches nothing new.
#[test]
fn a_timer_polled_again_where_it_waits_stays_put() {
    watchdog("a_timer_polled_again_stays_put", 30, || {
        let context = glib::MainContext::new();
        context
            .with_thread_default(|| {
                // Deliberate: the timer under test; pumped until it fires.
                let mut sleep = Box::pin(gdex::sleep(Duration::from_millis(30)));
                let waker = futures::task::noop_waker();
                let mut cx = std::task::Context::from_waker(&waker);
                for _ in 0..1000 {
                    assert!(sleep.as_mut().poll(&mut cx).is_pending());
                }
                // One gdex timer source on the context, whatever the polls.
                let found = count_sources(&context, "gdex timer");
                assert_eq!(found, 1);
                common::pump_until(&context, || sleep.as_mut().poll(&mut cx).is_ready());
            })
            .unwrap();
    });
}

/// Counts the sources named `name` attached to `context`.
fn count_sources(context: &glib::MainContext, name: &str) -> usize {
    // Source ids are small integers handed out per context; look at the
    // first few thousand.
    (1..4096u32)
        .filter_map(|id| {
            // SAFETY: g_main_context_find_source_by_id only reads the
            // context's table; the pointer is checked before use.
            let source = unsafe {
                glib::ffi::g_main_context_find_source_by_id(
                    glib::translate::ToGlibPtr::to_glib_none(context).0,
                    id,
                )
            };
            if source.is_null() {
                return None;
            }
            // SAFETY: a live source's name is NULL or a NUL-terminated string.
            let n = unsafe { glib::ffi::g_source_get_name(source) };
            if n.is_null() {
                return None;
            }
            // SAFETY: as above.
            let n = unsafe { std::ffi::CStr::from_ptr(n) };
            (n.to_str() == Ok(name)).then_some(())
        })
        .count()
}

/// A task that waits only on its `sleep` (it is idle, nobody polls it) on a
/// worker that then sits in one long poll: the timer must still fire about
/// on time and the task run on the idle peer, both for a CPU-bound poll
/// and for one inside `blocking::blocking`. The watchdog's monitor raises
/// the overdue timers of a worker stuck in one poll. (On cc53133 the task
/// waited for the long poll to end.)
///
/// Placement is made deterministic as in the test above: an occupier keeps
/// the other worker busy until the long poll has started on the task's
/// worker, so neither the task nor the long poll can go elsewhere first.
#[test]
fn an_idle_tasks_timer_fires_while_its_worker_sits_in_one_long_poll() {
    watchdog(
        "an_idle_tasks_timer_fires_while_its_worker_is_stuck",
        60,
        || {
            for (declared, threshold) in [
                (false, Duration::ZERO),
                (true, Duration::ZERO),
                (false, Duration::from_millis(100)),
            ] {
                idle_timer_round(declared, threshold);
            }
        },
    );
}

fn idle_timer_round(declared: bool, threshold: Duration) {
    let pool = gdex::ThreadPool::builder()
        .workers(2)
        .stall_threshold(threshold)
        .build()
        .unwrap();
    let s = pool.scheduler();
    let long_poll_started = Arc::new(AtomicBool::new(false));
    let occupied = occupy_a_worker(&s, &long_poll_started);

    let release = Arc::new(AtomicBool::new(false));
    let blocker_done = Arc::new(AtomicBool::new(false));
    let blocker_on = Arc::new(std::sync::Mutex::new(String::new()));
    let (rel, bd, bo, st, s2) = (
        release.clone(),
        blocker_done.clone(),
        blocker_on.clone(),
        long_poll_started.clone(),
        s.clone(),
    );
    let task = s.spawn(async move {
        let first = worker();
        // Queue the long poll behind us on this worker, then wait only on
        // the timer.
        let bd2 = bd.clone();
        s2.spawn(async move {
            *bo.lock().unwrap() = worker();
            st.store(true, Ordering::SeqCst);
            let wait = || {
                let end = std::time::Instant::now() + Duration::from_secs(2);
                while !rel.load(Ordering::SeqCst) && std::time::Instant::now() < end {
                    std::hint::spin_loop();
                }
            };
            if declared {
                gdex::blocking::blocking(wait);
            } else {
                wait();
            }
            bd2.store(true, Ordering::SeqCst);
        })
        .detach();
        // Deliberate: the timer under test.
        gdex::sleep(Duration::from_millis(20)).await;
        (first, worker(), bd.load(Ordering::SeqCst))
    });
    let (first, now, blocker_was_done) = gdex::block_on(task).unwrap();
    release.store(true, Ordering::SeqCst);
    let blocker_on = blocker_on.lock().unwrap().clone();
    pool.shutdown();
    assert_ne!(first, occupied, "the task started on the occupied worker");
    assert_eq!(
        blocker_on, first,
        "the long poll did not run on the task's worker"
    );
    assert!(
        !blocker_was_done,
        "a 20 ms sleep of an idle task on {first} fired only after {first}'s long poll \
         (declared blocking: {declared}, watchdog threshold {threshold:?})"
    );
    assert_ne!(
        first, now,
        "the task did not move to the idle peer (declared {declared}, threshold {threshold:?})"
    );
}

/// A one-worker pool whose worker runs a task that reads a cached file with
/// AIO and computes 250 us after each read, until the returned flag is
/// raised (or 40 s pass); `None` without io_uring.
fn worker_busy_between_aio_turns(
    dir: &std::path::Path,
) -> Option<(gdex::ThreadPool, Arc<AtomicBool>)> {
    if gdex::aio::backend() != gdex::aio::Backend::IoUring {
        eprintln!("skipped: io_uring is unavailable here");
        return None;
    }
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("cached");
    std::fs::write(&path, [7u8; 4096]).unwrap();
    let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let (stop1, reads1) = (stop.clone(), reads.clone());
    pool.scheduler()
        .spawn(async move {
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
    common::wait_until(|| reads.load(Ordering::Relaxed) > 100);
    Some((pool, stop))
}

/// `ROUNDS` times: waits for `waiting`, writes a byte to `theirs`, and
/// takes the instant the reader found it from `found`; gives the waits,
/// sorted.
fn time_rounds(
    theirs: &mut std::os::unix::net::UnixStream,
    waiting: &std::sync::mpsc::Receiver<()>,
    found: &std::sync::mpsc::Receiver<Instant>,
) -> Vec<Duration> {
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
    waits.sort();
    waits
}

const ROUNDS: usize = 5;

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
        let dir = common::TempDir::new("fd-between-aio-turns");
        let Some((pool, stop)) = worker_busy_between_aio_turns(&dir.0) else {
            return;
        };
        let (mut ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let (waiting_tx, waiting) = std::sync::mpsc::channel();
        let (found_tx, found) = std::sync::mpsc::channel();
        let reader = pool.scheduler().spawn(async move {
            for _ in 0..ROUNDS {
                waiting_tx.send(()).unwrap();
                gdex::unix_fd(&ours, glib::IOCondition::IN).await.unwrap();
                found_tx.send(Instant::now()).unwrap();
                let mut byte = [0];
                ours.read_exact(&mut byte).unwrap();
            }
        });
        let waits = time_rounds(&mut theirs, &waiting, &found);
        gdex::block_on(reader).unwrap();
        stop.store(true, Ordering::Release);
        // Each turn of the reading task is 250 us long, so the fd is polled
        // within a millisecond or so; the median is kept below 20 ms so
        // that a preempted round does not fail the test. A worker that never
        // polls the fd between AIO turns finds it only by chance (when a
        // read does not complete during its submission): hundreds of
        // milliseconds to seconds per round.
        assert!(
            waits[ROUNDS / 2] < Duration::from_millis(20),
            "the fd was found after {waits:?} (sorted)"
        );
    });
}

/// The same worker, with GIO's own pollable source (a `GSocket`'s, as
/// GIO's stream and socket calls make) in a pinned task: what a user of
/// GIO on the pool meets (P8). Failed like the test above before `poll_fds`
/// compared the fds of a turn with those of the last real poll.
#[test]
fn a_gio_socket_source_is_found_on_a_worker_between_aio_turns() {
    common::watchdog("a_gio_socket_source_between_aio_turns", 60, || {
        let dir = common::TempDir::new("gio-socket-between-aio-turns");
        let Some((pool, stop)) = worker_busy_between_aio_turns(&dir.0) else {
            return;
        };
        let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let (waiting_tx, waiting) = std::sync::mpsc::channel();
        let (found_tx, found) = std::sync::mpsc::channel();
        let reader = pool.scheduler().spawn_pinned(move || async move {
            use gio::prelude::{SocketExt, SocketExtManual};
            let socket = gio::Socket::from_fd(std::os::fd::OwnedFd::from(ours)).unwrap();
            socket.set_blocking(false);
            for _ in 0..ROUNDS {
                waiting_tx.send(()).unwrap();
                let condition = socket
                    .create_source_future(
                        glib::IOCondition::IN,
                        None::<&gio::Cancellable>,
                        glib::Priority::DEFAULT,
                    )
                    .await;
                found_tx.send(Instant::now()).unwrap();
                assert!(condition.contains(glib::IOCondition::IN));
                let mut byte = [0u8; 1];
                assert_eq!(
                    socket
                        .receive(&mut byte, None::<&gio::Cancellable>)
                        .unwrap(),
                    1
                );
            }
        });
        let waits = time_rounds(&mut theirs, &waiting, &found);
        gdex::block_on(reader).unwrap();
        stop.store(true, Ordering::Release);
        assert!(
            waits[ROUNDS / 2] < Duration::from_millis(20),
            "the socket was found readable after {waits:?} (sorted)"
        );
    });
}

/// P8 with `poll_fds`, a nested loop: a pinned task that waits for a socket
/// by turning its worker's context itself without blocking
/// (`iteration(false)`, as code written for a plain GLib thread does) gets
/// only zero-timeout turns, each asked about the same fds, so most skip
/// the poll; a real one must still come every 100 us or so, or the loop
/// spins forever. Passes (the skip is bounded by time); no other test
/// turns a worker's context from inside one of its tasks while waiting
/// for an fd.
#[test]
fn a_nested_non_blocking_loop_on_a_worker_finds_its_socket() {
    common::watchdog("a_nested_non_blocking_loop_finds_its_socket", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let (waiting_tx, waiting) = std::sync::mpsc::channel();
        let reader = pool.scheduler().spawn_pinned(move || async move {
            use gio::prelude::SocketExtManual;
            let socket = gio::Socket::from_fd(std::os::fd::OwnedFd::from(ours)).unwrap();
            let ready = std::rc::Rc::new(std::cell::Cell::new(false));
            let ready2 = ready.clone();
            let context = glib::MainContext::ref_thread_default();
            let source = socket.create_source(
                glib::IOCondition::IN,
                None::<&gio::Cancellable>,
                None,
                glib::Priority::DEFAULT,
                move |_, _| {
                    ready2.set(true);
                    glib::ControlFlow::Break
                },
            );
            source.attach(Some(&context));
            waiting_tx.send(()).unwrap();
            let t = Instant::now();
            let mut turns = 0u64;
            while !ready.get() && t.elapsed() < Duration::from_secs(10) {
                context.iteration(false);
                turns += 1;
            }
            (ready.get(), Instant::now(), turns)
        });
        waiting.recv().unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let written = Instant::now();
        theirs.write_all(b"x").unwrap();
        let (ready, at, turns) = gdex::block_on(reader).unwrap();
        let waited = at.saturating_duration_since(written);
        assert!(ready, "the socket was never found ({turns} turns)");
        assert!(
            waited < Duration::from_secs(5),
            "found after {waited:?} ({turns} turns)"
        );
    });
}

/// In thread-per-core mode with the watchdog off, a task sleeping behind a
/// 150 ms poll on its home worker has its overdue timer raised by the
/// monitor, but stays home (P9): it resumes on its own worker's thread,
/// after the long poll (P8).
#[test]
fn held_a_thread_per_core_sleeper_behind_a_long_poll_stays_home() {
    watchdog("held_a_thread_per_core_sleeper", 30, || {
        let pool = gdex::ThreadPool::builder()
            .workers(2)
            .thread_per_core(true)
            .stall_threshold(Duration::ZERO)
            .build()
            .unwrap();
        let s = pool.scheduler();
        let started = Arc::new(AtomicUsize::new(0));
        let st = started.clone();
        let outer = s.spawn(async move {
            let home = std::thread::current().name().map(str::to_owned);
            let sleeper = gdex::Scheduler::thread_default().unwrap().spawn(async {
                let before = std::thread::current().name().map(str::to_owned);
                // Deliberate: the timer under test, overdue behind the
                // long poll whatever the timing.
                gdex::sleep(Duration::from_millis(5)).await;
                (before, std::thread::current().name().map(str::to_owned))
            });
            gdex::yield_now().await; // the sleeper polls and waits
            st.store(1, Ordering::SeqCst);
            let t = Instant::now();
            spin(Duration::from_millis(150));
            (home, sleeper, t)
        });
        let (home, sleeper, t) = gdex::block_on(outer).unwrap();
        let (before, after) = gdex::block_on(sleeper).unwrap();
        assert!(t.elapsed() < Duration::from_secs(5));
        assert_eq!(before, home, "spawned home");
        assert_eq!(
            after, home,
            "a thread-per-core task left its worker on a timer raise"
        );
        pool.shutdown();
    });
}
