//! Attacks on the reliability changes (settle_spawn and the reaper, the
//! panic-containing waker cache, `WorkerMetrics::parked`, the panic wake
//! helpers). Each test states what it shows; the bodies that may abort,
//! deadlock or set the process-wide panic handler run in a child process
//! (this binary, re-run on an `#[ignore]`d `child_*` test), killed if it
//! hangs.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use common::{is_child, run_child, wait_until};

/// Runs child test `name` (at most `secs` seconds) and checks that it
/// exited successfully after printing `CHILD-OK`.
fn child_passes(name: &str, secs: u64) -> String {
    let (status, out) = run_child(name, &[], secs);
    assert!(
        status.is_some_and(|s| s.success()) && out.contains("CHILD-OK"),
        "child `{name}` failed ({}):\n{out}",
        match status {
            None => format!("killed after {secs} s (hung)"),
            Some(s) => s.to_string(),
        }
    );
    out
}

fn pool(workers: usize) -> gdex::ThreadPool {
    gdex::ThreadPool::builder()
        .workers(workers)
        .stall_threshold(Duration::ZERO)
        .build()
        .unwrap()
}

/// A waker whose `wake` panics; counts its calls.
struct PanickingWaker(AtomicUsize);

const WAKER_PANIC: &str = "attack13: a waker that panics";

impl Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
        panic!("{WAKER_PANIC}");
    }
}

fn panicking_waker() -> (Arc<PanickingWaker>, Waker) {
    let inner = Arc::new(PanickingWaker(AtomicUsize::new(0)));
    (inner.clone(), Waker::from(inner))
}

fn poll_with<F: Future + Unpin>(future: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(waker))
}

// ---------------------------------------------------------------------------
// Item 2: `contain_waker`'s `finished` shortcut
// ---------------------------------------------------------------------------

/// Set while the slow destructor below runs.
static DROPPING: AtomicBool = AtomicBool::new(false);

struct SlowDrop;

impl Drop for SlowDrop {
    fn drop(&mut self) {
        DROPPING.store(true, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
#[ignore = "child process of a_handle_polled_while_its_task_is_dropped_contains_a_panicking_waker"]
fn child_handle_polled_while_its_task_is_dropped() {
    if !is_child() {
        return;
    }
    let events = Arc::new(Mutex::new(Vec::<gdex::PanicEvent>::new()));
    let seen = events.clone();
    gdex::set_panic_handler(move |e| seen.lock().unwrap().push(e.clone()));
    let pool = pool(1);
    let polled = Arc::new(AtomicUsize::new(0));
    let mut task = pool
        .scheduler()
        .spawn(common::after_first_poll(&polled, async move {
            let _slow = SlowDrop;
            std::future::pending::<()>().await
        }));
    wait_until(|| polled.load(Ordering::SeqCst) == 1);
    // Shutdown step 3 drops the idle task on the worker: async-task marks
    // it CLOSED, then drops the future (300 ms), then clears SCHEDULED and
    // notifies the handle's waker, inside its abort_on_panic.
    let closer = {
        let pool = pool.clone();
        std::thread::spawn(move || pool.shutdown())
    };
    wait_until(|| DROPPING.load(Ordering::SeqCst));
    // The task is CLOSED but still SCHEDULED: `is_finished()` is true, so
    // `contain_waker` passes our waker to async-task unwrapped, and
    // async-task registers it (closed but its future not dropped yet).
    let (calls, waker) = panicking_waker();
    assert!(task.is_finished(), "closed while its future is dropped");
    assert!(poll_with(&mut task, &waker).is_pending());
    closer.join().unwrap();
    // With the shortcut the worker aborted the process in the wake above.
    assert_eq!(calls.0.load(Ordering::SeqCst), 1);
    assert!(events
        .lock()
        .unwrap()
        .iter()
        .any(|e| e.message == WAKER_PANIC && e.source == gdex::PanicSource::Waker));
    assert!(matches!(
        poll_with(&mut task, Waker::noop()),
        Poll::Ready(Err(gdex::Error::Cancelled))
    ));
    println!("CHILD-OK");
}

/// Item 2. `contain_waker` hands async-task the caller's own waker when
/// `FallibleTask::is_finished()` is true, assuming a finished poll leaves
/// no waker. But `is_finished` is `CLOSED | COMPLETED`, and a task whose
/// `Runnable` is being dropped (shutdown step 3, the reaper) is CLOSED while
/// still SCHEDULED: async-task's `poll_task` then *registers* the waker and
/// returns Pending, and wakes it from the dropping thread inside
/// `abort_on_panic`. A foreign waker that panics there aborts the process
/// (X5 says it goes to the panic handler).
#[test]
fn a_handle_polled_while_its_task_is_dropped_contains_a_panicking_waker() {
    if is_child() {
        return;
    }
    child_passes("child_handle_polled_while_its_task_is_dropped", 60);
}

// ---------------------------------------------------------------------------
// Item 4: the panic handler runs under the primitive's lock
// ---------------------------------------------------------------------------

static FORWARD: OnceLock<gdex::Sender<String>> = OnceLock::new();

#[test]
#[ignore = "child process of the_panic_handler_may_send_on_the_channel_whose_waker_panicked"]
fn child_panic_handler_sends_on_the_same_channel() {
    if !is_child() {
        return;
    }
    let (tx, rx) = gdex::channel::<String>(16);
    FORWARD.set(tx.clone()).ok().unwrap();
    // The pattern panic.rs suggests: the handler forwards the event to
    // whoever shows it, here over a gdex channel.
    gdex::set_panic_handler(|event| {
        let _ = FORWARD.get().unwrap().try_send(event.message.clone());
    });
    let (_calls, waker) = panicking_waker();
    {
        let mut recv = std::pin::pin!(rx.recv());
        assert!(recv
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        // The send wakes the receiver's waker under the channel's lock;
        // the panic goes to the handler, still under that lock, and the
        // handler's try_send takes the same lock: self-deadlock.
        let sent = std::thread::spawn(move || tx.try_send("first".to_owned()).is_ok());
        let deadline = Instant::now() + Duration::from_secs(5);
        while !sent.is_finished() {
            if Instant::now() > deadline {
                // Not a panic: unwinding would drop `recv`, which takes the
                // channel's lock too, and hang this thread as well.
                println!("try_send hung: the panic handler re-entered the channel's lock");
                std::process::exit(3);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(sent.join().unwrap());
    }
    assert_eq!(rx.try_recv().as_deref(), Some("first"));
    assert_eq!(rx.try_recv().as_deref(), Some(WAKER_PANIC));
    println!("CHILD-OK");
}

/// Item 4. `WaitQueue::notify_one` calls `crate::panic::wake` with the
/// primitive's lock held (a channel's, a promise's, a semaphore's; the
/// blocking lane's state lock in `on_exit`), so the user's panic handler
/// runs under that lock. A handler that forwards the event over a gdex
/// channel (what panic.rs suggests for a GTK app: "sends the event to the
/// main thread") deadlocks its thread when the waker that panicked was a
/// waiter of that same channel.
#[test]
fn the_panic_handler_may_send_on_the_channel_whose_waker_panicked() {
    if is_child() {
        return;
    }
    child_passes("child_panic_handler_sends_on_the_same_channel", 30);
}

// ---------------------------------------------------------------------------
// Item 1: a reaper flush on the reaper thread waits for itself
// ---------------------------------------------------------------------------

/// How long the `shutdown()` inside [`ShutsDownOnDrop`] took, in ms, and
/// the thread it ran on.
static ON_REAPER: Mutex<Option<(String, u128)>> = Mutex::new(None);

/// Shuts a pool down when dropped: a service that owns a pool.
struct ShutsDownOnDrop(gdex::ThreadPool);

impl Drop for ShutsDownOnDrop {
    fn drop(&mut self) {
        let t = Instant::now();
        self.0.shutdown();
        let name = std::thread::current().name().unwrap_or("").to_owned();
        *ON_REAPER.lock().unwrap() = Some((name, t.elapsed().as_millis()));
    }
}

#[test]
#[ignore = "child process of a_shutdown_inside_a_drop_on_the_reaper_does_not_wait_for_itself"]
fn child_shutdown_on_the_reaper() {
    if !is_child() {
        return;
    }
    let a = pool(1);
    let other = pool(1);
    let s = a.scheduler();
    let a2 = a.clone();
    let s2 = s.clone();
    let other2 = other.clone();
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let child = Arc::new(Mutex::new(None));
    let child2 = child.clone();
    let holder = s.spawn(async move {
        // A child queued on this worker's deque, never run.
        let guard = ShutsDownOnDrop(other2);
        *child2.lock().unwrap() = Some(s2.spawn(async move {
            let _guard = guard;
        }));
        started_tx.send(()).unwrap();
        // Wait for the shutdown to begin, then declare a blocking call:
        // the deque goes to the injector, the pusher sees `closed` and
        // hands the child to gdex-reaper (shutdown step 5).
        while !a2.is_closed() {
            std::thread::sleep(Duration::from_millis(1));
        }
        gdex::blocking::blocking(|| ());
        drop(a2);
    });
    started_rx.recv().unwrap();
    let t = Instant::now();
    a.shutdown();
    let shutdown_ms = t.elapsed().as_millis();
    drop(holder);
    // S9: every task of `a` has resolved when its shutdown returns.
    let mut child = child.lock().unwrap().take().expect("the child was spawned");
    // Not `is_finished()`: that is true as soon as the reaper has closed
    // the task, before its future is dropped and an await would return.
    let resolved = poll_with(&mut child, Waker::noop()).is_ready();
    let reaper = ON_REAPER.lock().unwrap().clone();
    // Let the reaper finish before reporting.
    wait_until(|| ON_REAPER.lock().unwrap().is_some());
    let (thread, ms) = ON_REAPER.lock().unwrap().clone().unwrap();
    assert_eq!(thread, "gdex-reaper", "the child was reaped");
    assert!(
        ms < 500 && shutdown_ms < 1000 && resolved && reaper.is_some(),
        "ThreadPool::shutdown inside a Drop run by gdex-reaper took {ms} ms: its \
         reaper::flush waited for the batch the reaper itself is dropping. The \
         outer shutdown took {shutdown_ms} ms and returned with the reaped \
         task resolved: {resolved}, its destructor done: {}",
        reaper.is_some()
    );
    drop(child);
    println!("CHILD-OK");
}

/// Item 1. `reaper::flush` (called by `settle_spawn` and by every
/// `shutdown()`'s `join_workers`) waits until the reaper has dropped every
/// batch handed over so far, including the one it is dropping now. Run on
/// the reaper thread itself (a reaped future's destructor that shuts a
/// pool down, or spawns on a pool that closes meanwhile) it waits for
/// itself: a 2 s stall of the reaper, and of every other shutdown and
/// racing spawn in the process, which then return with their reaped tasks
/// still pending (S9).
#[test]
fn a_shutdown_inside_a_drop_on_the_reaper_does_not_wait_for_itself() {
    if is_child() {
        return;
    }
    child_passes("child_shutdown_on_the_reaper", 60);
}

// ---------------------------------------------------------------------------
// Item 5 (a step the loom models leave out): thread-per-core `sees_work`
// ---------------------------------------------------------------------------

/// Item 5. In thread-per-core mode a worker never steals (`steal()` returns
/// `None`), but its park re-check `sees_work()` still counts its peers'
/// deques. While a peer runs a long poll with jobs queued on its deque, an
/// idle worker finds no job, announces its park, sees the peer's backlog,
/// un-parks and searches again, forever: `ran` never grows, so the slice
/// never ends. It burns its CPU and never returns to its `GMainContext`:
/// its own timers and GLib sources wait for the peer (P7, P8). The loom
/// models have no thread-per-core mode.
#[test]
fn thread_per_core_idle_worker_parks_while_a_peer_has_backlog() {
    common::watchdog("tpc_idle_peer", 60, || {
        let pool = gdex::ThreadPool::builder()
            .workers(2)
            .thread_per_core(true)
            .stall_threshold(Duration::ZERO)
            .build()
            .unwrap();
        let s = pool.scheduler();
        let busy = Arc::new(AtomicBool::new(false));
        let b = busy.clone();
        let s2 = s.clone();
        // Home: worker 0 (the first outside spawn, round-robin). Its
        // children stay on worker 0's deque behind its long poll.
        let a = s.spawn(async move {
            let children: Vec<_> = (0..2).map(|_| s2.spawn(async {})).collect();
            b.store(true, Ordering::SeqCst);
            common::spin(Duration::from_millis(600));
            children
        });
        wait_until(|| busy.load(Ordering::SeqCst));
        // Home: worker 1. A 10 ms timer on its context.
        let timed = s.spawn(async {
            let t = Instant::now();
            glib::timeout_future(Duration::from_millis(10)).await;
            (
                std::thread::current().name().unwrap().to_owned(),
                t.elapsed(),
            )
        });
        let (thread, waited) = gdex::block_on(timed).unwrap();
        for child in gdex::block_on(a).unwrap() {
            gdex::block_on(child).unwrap();
        }
        assert_eq!(thread, "gdex-worker-1");
        assert!(
            waited < Duration::from_millis(300),
            "a 10 ms timer on an idle worker took {waited:?}: the worker spun in \
             run_slice while its peer had backlog it may not steal"
        );
        pool.shutdown();
    });
}

// ---------------------------------------------------------------------------
// Item 4: a panic payload whose destructor panics
// ---------------------------------------------------------------------------

/// A panic payload whose own destructor panics.
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        panic!("attack13: a panic payload's destructor");
    }
}

/// A waker whose `wake` panics with a [`PanicsOnDrop`] payload.
struct BombWaker;

impl Wake for BombWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        std::panic::panic_any(PanicsOnDrop);
    }
}

#[test]
#[ignore = "child process of a_waker_panic_whose_payload_panics_on_drop_is_contained"]
fn child_waker_payload_panics_on_drop() {
    if !is_child() {
        return;
    }
    let events = Arc::new(Mutex::new(Vec::<gdex::PanicEvent>::new()));
    let seen = events.clone();
    gdex::set_panic_handler(move |e| seen.lock().unwrap().push(e.clone()));
    let pool = pool(1);
    let s = pool.scheduler();
    let (promise, value) = gdex::Promise::<u32>::new();
    let mut task = s.spawn(async move { value.await.unwrap() + 1 });
    let waker = Waker::from(Arc::new(BombWaker));
    assert!(poll_with(&mut task, &waker).is_pending());
    promise.resolve(41);
    wait_until(|| {
        events
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.source == gdex::PanicSource::Waker)
    });
    assert!(matches!(
        poll_with(&mut task, Waker::noop()),
        Poll::Ready(Ok(42))
    ));
    assert_eq!(gdex::block_on(s.spawn(async { 7 })).unwrap(), 7);
    println!("CHILD-OK");
}

/// Item 4. `panic::wake` (and every other `catch_unwind` site: `report`
/// callers in task.rs, group.rs, source.rs) drops the caught payload
/// outside the catch. A payload whose destructor panics (std's
/// `catch_unwind` docs warn of it) unwinds out of `panic::wake`: here out
/// of the `ContainedWaker` inside async-task's `abort_on_panic` on the
/// worker, which aborts (X5 promises the panic handler).
#[test]
fn a_waker_panic_whose_payload_panics_on_drop_is_contained() {
    if is_child() {
        return;
    }
    child_passes("child_waker_payload_panics_on_drop", 60);
}
