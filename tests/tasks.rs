//! Task handles (S4-S6, X1): output, panics, cancellation on drop, detach,
//! and `cancel().await`.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::watchdog;
use futures::channel::oneshot;
use gdex::ThreadPool;
use gio::prelude::*;

/// Sets a flag when dropped, and records the thread that dropped it.
struct DropFlag {
    dropped: Arc<AtomicBool>,
    thread: Arc<std::sync::Mutex<Option<String>>>,
    slow: Duration,
}

impl DropFlag {
    fn new(
        slow: Duration,
    ) -> (
        DropFlag,
        Arc<AtomicBool>,
        Arc<std::sync::Mutex<Option<String>>>,
    ) {
        let dropped = Arc::new(AtomicBool::new(false));
        let thread = Arc::new(std::sync::Mutex::new(None));
        (
            DropFlag {
                dropped: dropped.clone(),
                thread: thread.clone(),
                slow,
            },
            dropped,
            thread,
        )
    }
}

impl Drop for DropFlag {
    fn drop(&mut self) {
        // Deliberate: a slow drop, the behaviour under test.
        std::thread::sleep(self.slow);
        *self.thread.lock().unwrap() = std::thread::current().name().map(str::to_owned);
        self.dropped.store(true, Ordering::Release);
    }
}

/// S5: dropping the handle of a pending task drops its future, on the worker
/// (the task's own scheduler), not on the thread that dropped the handle.
#[test]
fn dropping_a_pending_task_drops_its_future_on_its_scheduler() {
    common::watchdog("dropping_a_pending_task", 60, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let (flag, dropped, thread) = DropFlag::new(Duration::ZERO);
        let (polled_tx, polled_rx) = std::sync::mpsc::channel();
        let task = pool.scheduler().spawn(async move {
            let _flag = flag;
            polled_tx.send(()).unwrap();
            std::future::pending::<()>().await
        });
        polled_rx.recv().unwrap();
        assert!(!dropped.load(Ordering::Acquire));
        drop(task);
        common::wait_until(|| dropped.load(Ordering::Acquire));
        let thread = thread.lock().unwrap().clone().unwrap_or_default();
        assert!(thread.starts_with("gdex-worker-"), "dropped on {thread}");
    });
}

/// S5: `detach()` keeps the task running to completion with no handle.
#[test]
fn detached_task_runs_to_completion() {
    common::watchdog("detached_task_runs_to_completion", 60, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let done2 = done.clone();
        pool.scheduler()
            .spawn(async move {
                glib::timeout_future(Duration::from_millis(20)).await;
                done2.store(true, Ordering::Release);
            })
            .detach();
        common::wait_until(|| done.load(Ordering::Acquire));
    });
}

/// X1: `cancel().await` returns only once the future has been dropped, even
/// when dropping it takes a while and the task was running.
#[test]
fn cancel_returns_after_the_future_is_dropped() {
    common::watchdog("cancel_returns_after_the_drop", 60, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let (flag, dropped, _) = DropFlag::new(Duration::from_millis(50));
        let (polled_tx, polled_rx) = std::sync::mpsc::channel();
        let task = pool.scheduler().spawn(async move {
            let _flag = flag;
            polled_tx.send(()).unwrap();
            // Always scheduled or running: the hardest moment to cancel.
            loop {
                gdex::yield_now().await;
            }
        });
        polled_rx.recv().unwrap();
        let out = gdex::block_on(task.cancel());
        assert_eq!(out, None);
        assert!(
            dropped.load(Ordering::Acquire),
            "cancel() returned before the future was dropped"
        );
    });
}

/// `cancel()` of a task that already finished gives its output.
#[test]
fn cancel_of_a_finished_task_gives_its_output() {
    common::watchdog("cancel_of_a_finished_task", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let task = pool.scheduler().spawn(async { 5 });
        common::wait_until(|| task.is_finished());
        assert_eq!(gdex::block_on(task.cancel()), Some(5));
    });
}

/// S6: a panicking task gives `Error::Panicked` with its message to its
/// waiter, and the worker goes on running tasks.
#[test]
fn a_panic_reaches_the_waiter_and_the_worker_lives_on() {
    common::watchdog("a_panic_reaches_the_waiter", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let s = pool.scheduler();
        let bad = s.spawn(async {
            gdex::yield_now().await;
            panic!("boom {}", 42);
        });
        match gdex::block_on(bad) {
            Err(gdex::Error::Panicked(msg)) => assert_eq!(msg, "boom 42"),
            other => panic!("expected a panic error, got {other:?}"),
        }
        // The same (only) worker still runs tasks.
        let names: Vec<_> = (0..10)
            .map(|i| s.spawn(async move { (i, std::thread::current().name().unwrap().to_owned()) }))
            .collect();
        for (i, t) in names.into_iter().enumerate() {
            let (j, name) = gdex::block_on(t).unwrap();
            assert_eq!((i, name.as_str()), (j, "gdex-worker-0"));
        }
        let m = pool.metrics();
        assert!(m.workers[0].tasks_run >= 11);
    });
}

/// S4: a task is awaitable from a plain thread, another pool and another
/// context; each waiter gets the output.
#[test]
fn tasks_are_awaitable_from_anywhere() {
    common::watchdog("tasks_are_awaitable_from_anywhere", 60, || {
        let a = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let b = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let (tx, rx) = oneshot::channel::<u32>();
        let producer = a.scheduler().spawn(async move { rx.await.unwrap() * 2 });
        // Awaited on another pool...
        let relay = b
            .scheduler()
            .spawn(async move { producer.await.unwrap() + 1 });
        // ...which is awaited from a thread running its own context.
        let context = glib::MainContext::new();
        let on_context = gdex::Scheduler::for_context(&context)
            .spawn(async move { (relay.await.unwrap(), std::thread::current().id()) });
        let waiter = std::thread::spawn(move || {
            let me = std::thread::current().id();
            let out = context.block_on(on_context).unwrap();
            (out, me)
        });
        tx.send(20).unwrap();
        let ((value, ran_on), thread) = waiter.join().unwrap();
        assert_eq!(value, 41);
        assert_eq!(ran_on, thread, "the context task resumed on its own thread");
    });
}

/// S7: spawning many tasks that each wait keeps them all pending cheaply,
/// and dropping their handles cancels every one (each future dropped once).
#[test]
fn many_pending_tasks_are_dropped_once_each() {
    common::watchdog("many_pending_tasks", 120, || {
        let n = common::stress(100_000);
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let drops = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                let guard = common::Counted(drops.clone());
                pool.scheduler().spawn(async move {
                    let _guard = guard;
                    std::future::pending::<()>().await
                })
            })
            .collect();
        drop(tasks);
        common::wait_until(|| drops.load(Ordering::Relaxed) >= n);
        pool.shutdown();
        assert_eq!(drops.load(Ordering::Relaxed), n);
    });
}

/// B4: `wait_for` blocks a plain thread until a pool task is done, and
/// refuses where blocking would stall what the future may need.
#[test]
fn wait_for_blocks_a_plain_thread_and_refuses_on_schedulers() {
    common::watchdog("wait_for", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let s = pool.scheduler();
        let task = s.spawn(async {
            glib::timeout_future(Duration::from_millis(5)).await;
            9
        });
        let got = std::thread::spawn(move || gdex::wait_for(task))
            .join()
            .unwrap();
        assert_eq!(got.unwrap(), 9);
        // On a worker: a panic that says why.
        let refused = s.spawn(async { gdex::wait_for(async { 1 }) });
        match gdex::wait_for(refused) {
            Err(gdex::Error::Panicked(msg)) => assert!(msg.contains("pool worker"), "{msg}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
        // In a fiber: likewise.
        let refused = s.spawn_fiber(|| gdex::wait_for(async { 1 }));
        match gdex::wait_for(refused) {
            Err(gdex::Error::Panicked(msg)) => assert!(msg.contains("fiber::wait"), "{msg}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
        // In a context scheduler's task.
        let context = glib::MainContext::new();
        let refused =
            gdex::Scheduler::for_context(&context).spawn(async { gdex::wait_for(async { 1 }) });
        match context.block_on(refused) {
            Err(gdex::Error::Panicked(msg)) => assert!(msg.contains("context scheduler"), "{msg}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
    });
}

/// X1: a task's cancellable is one object: every `current_cancellable()`
/// in the task gives the same one (mutant: a second call made a new one,
/// so cancelling the task missed the first). And it is released with the
/// task's block (mutant: the block's reference leaked).
#[test]
fn a_tasks_cancellable_is_one_object_released_with_the_task() {
    use glib::prelude::*;
    common::watchdog("a_tasks_cancellable_is_one_object", 30, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let task = pool.scheduler().spawn(async {
            let first = gdex::current_cancellable().unwrap();
            let second = gdex::current_cancellable().unwrap();
            assert_eq!(first, second, "the same GCancellable each time");
            first.downgrade()
        });
        let weak = gdex::block_on(task).unwrap();
        // The block is freed once the task has finished and its handle is
        // gone; the task's own reference goes with it.
        common::wait_until(|| weak.upgrade().is_none());
    });
}

/// X1 with the cancellable in a side table: a task that asks for its
/// cancellable again and again, cancelled from another thread at any
/// moment (before its first ask, between asks, during a poll), always
/// gets the same cancellable, which is cancelled once `cancel().await`
/// returns (a task cancelled before its first ask gets one born
/// cancelled); and the table lets it go with the task's block.
#[test]
fn a_task_cancellable_raced_by_its_canceller_is_one_cancelled_object() {
    watchdog("a_task_cancellable_raced_by_its_canceller", 120, || {
        let pool = ThreadPool::builder().workers(2).build().unwrap();
        let n = common::stress(300);
        let mut weaks = Vec::new();
        for i in 0..n {
            let (seen_tx, seen_rx) = mpsc::channel::<glib::WeakRef<gio::Cancellable>>();
            let mismatch = Arc::new(AtomicBool::new(false));
            let task = {
                let mismatch = mismatch.clone();
                pool.scheduler().spawn(async move {
                    let first = gdex::current_cancellable().unwrap();
                    let _ = seen_tx.send(first.downgrade());
                    loop {
                        // Asked in polls on whatever worker, racing the
                        // canceller.
                        let again = gdex::current_cancellable().unwrap();
                        if again != first {
                            mismatch.store(true, Ordering::SeqCst);
                        }
                        gdex::yield_now().await;
                    }
                })
            };
            // Cancel at varying points: at once (before the first poll, or
            // racing it), or once the task has asked (waited for: on a
            // loaded machine the workers may not poll it before a cancel
            // that only yields a few times) and a few polls later.
            let mut seen = None;
            if i % 3 != 0 {
                seen = seen_rx.recv().ok();
                for _ in 0..(i % 7) {
                    std::thread::yield_now();
                }
            }
            assert_eq!(gdex::block_on(task.cancel()), None);
            assert!(!mismatch.load(Ordering::SeqCst), "round {i}");
            // The task was polled at least once if it sent its cancellable;
            // then the future has been dropped and the cancellable is
            // cancelled.
            if let Some(weak) = seen.or_else(|| seen_rx.try_recv().ok()) {
                if let Some(cancellable) = weak.upgrade() {
                    assert!(cancellable.is_cancelled(), "round {i}");
                }
                weaks.push(weak);
            }
        }
        assert!(
            weaks.len() >= n / 2,
            "most tasks were polled before their cancel"
        );
        pool.shutdown();
        drop(pool);
        // Every block is freed (its handle cancelled and gone, its pool
        // gone): the side table holds none of the cancellables.
        for weak in &weaks {
            assert!(weak.upgrade().is_none(), "a cancellable outlived its task");
        }
    });
}

/// A task handle's `Debug` says what it is and whether it has finished.
#[test]
fn a_task_handle_debugs_as_a_task() {
    let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    let task = pool.scheduler().spawn(async move { rx.await.ok() });
    assert_eq!(format!("{task:?}"), "Task { finished: false }");
    drop(tx);
    assert_eq!(gdex::block_on(task).unwrap(), None);
}
