//! Fibers (F1-F6) and pinned `!Send` tasks, on real pools and contexts.

mod common;

use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::channel::oneshot;
use gdex::fiber;

use common::spin;

/// Keeps every worker of `pool` busy with stealable tasks until `stop`.
fn load(pool: &gdex::ThreadPool, stop: &Arc<AtomicBool>) {
    for _ in 0..4 * pool.workers() {
        let stop = stop.clone();
        pool.scheduler()
            .spawn(async move {
                while !stop.load(Ordering::Acquire) {
                    spin(Duration::from_micros(20));
                    gdex::yield_now().await;
                }
            })
            .detach();
    }
}

/// F2: a fiber on a loaded 4-worker pool resumes on its own thread after
/// each of 1,000 waits (on futures woken from other workers and threads).
#[test]
fn a_fiber_never_leaves_its_thread() {
    common::watchdog("a_fiber_never_leaves_its_thread", 120, || {
        let pool = gdex::ThreadPool::builder().workers(4).build().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        load(&pool, &stop);
        let s = pool.scheduler();
        let s2 = s.clone();
        let fiber = s.spawn_fiber(move || {
            let home = std::thread::current().id();
            let mut moved = 0;
            for i in 0..1000 {
                match i % 3 {
                    // A task that may run on any worker.
                    0 => assert_eq!(fiber::wait(s2.spawn(async move { i })).unwrap(), i),
                    // A wake-up from a plain thread.
                    1 => {
                        let (tx, rx) = oneshot::channel();
                        std::thread::spawn(move || tx.send(i).unwrap());
                        assert_eq!(fiber::wait(rx).unwrap(), i);
                    }
                    _ => fiber::yield_fiber().unwrap(),
                }
                if std::thread::current().id() != home {
                    moved += 1;
                }
            }
            moved
        });
        let moved = gdex::block_on(fiber).unwrap();
        stop.store(true, Ordering::Release);
        assert_eq!(
            moved, 0,
            "the fiber resumed on another thread {moved} times"
        );
    });
}

/// F2 for pinned `!Send` tasks: built on a worker, never moved.
#[test]
fn a_pinned_task_never_leaves_its_thread() {
    common::watchdog("a_pinned_task_never_leaves_its_thread", 120, || {
        let pool = gdex::ThreadPool::builder().workers(4).build().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        load(&pool, &stop);
        let s = pool.scheduler();
        let s2 = s.clone();
        let task = pool.spawn_pinned(move || async move {
            // !Send state held across awaits.
            let home = Rc::new(std::thread::current().id());
            let mut moved = 0;
            for i in 0..1000 {
                if i % 2 == 0 {
                    s2.spawn(async {}).await.unwrap();
                } else {
                    gdex::yield_now().await;
                }
                if std::thread::current().id() != *home {
                    moved += 1;
                }
            }
            moved
        });
        let moved = gdex::block_on(task).unwrap();
        stop.store(true, Ordering::Release);
        assert_eq!(moved, 0);
    });
}

/// `spawn_local` inside a pool task pins the `!Send` future to that worker.
#[test]
fn spawn_local_on_a_worker_pins_to_it() {
    common::watchdog("spawn_local_on_a_worker_pins_to_it", 60, || {
        let pool = gdex::ThreadPool::builder().workers(3).build().unwrap();
        let outer = pool.scheduler().spawn(async {
            let here = std::thread::current().id();
            let inner = gdex::spawn_local(async move {
                let rc = Rc::new(0);
                for _ in 0..100 {
                    gdex::yield_now().await;
                }
                (std::thread::current().id(), *rc)
            });
            (here, inner.await.unwrap().0)
        });
        let (outer_thread, inner_thread) = gdex::block_on(outer).unwrap();
        assert_eq!(outer_thread, inner_thread);
    });
}

/// F3 on a 1-worker pool: a fiber waits for a task that must run on the
/// same (only) worker: the wait suspends the fiber, not the worker.
#[test]
fn a_fiber_waits_for_a_task_on_its_own_worker() {
    common::watchdog("a_fiber_waits_for_a_task_on_its_own_worker", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let s = pool.scheduler();
        let s2 = s.clone();
        let fiber = s.spawn_fiber(move || {
            let task = s2.spawn(async {
                glib::timeout_future(Duration::from_millis(2)).await;
                std::thread::current().id()
            });
            let ran_on = fiber::wait(task).unwrap();
            (ran_on, std::thread::current().id())
        });
        let (task_thread, fiber_thread) = gdex::block_on(fiber).unwrap();
        assert_eq!(task_thread, fiber_thread);
    });
}

/// F3: 10,000 fibers on a 1-worker pool, each waiting on a promise resolved
/// from another thread, all finish.
#[test]
fn ten_thousand_fibers_waiting_on_promises_finish() {
    common::watchdog("ten_thousand_fibers", 120, || {
        let n = common::stress(10_000);
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let s = pool.scheduler();
        let (senders, fibers): (Vec<_>, Vec<_>) = (0..n)
            .map(|i| {
                let (tx, rx) = oneshot::channel::<usize>();
                let fiber = s.spawn_fiber(move || fiber::wait(rx).unwrap() + i);
                (tx, fiber)
            })
            .unzip();
        let resolver = std::thread::spawn(move || {
            for (i, tx) in senders.into_iter().enumerate() {
                tx.send(i).unwrap();
            }
        });
        let total: usize = fibers.into_iter().map(|f| gdex::block_on(f).unwrap()).sum();
        resolver.join().unwrap();
        assert_eq!(total, n * (n - 1));
    });
}

/// F3: outside a fiber, `wait` returns NotOnFiber at once, without polling
/// forever or blocking the thread.
#[test]
fn wait_outside_a_fiber_is_an_error_at_once() {
    common::watchdog("wait_outside_a_fiber_is_an_error_at_once", 30, || {
        let t = Instant::now();
        assert!(matches!(
            fiber::wait(std::future::pending::<()>()),
            Err(gdex::Error::NotOnFiber)
        ));
        assert!(matches!(fiber::yield_fiber(), Err(gdex::Error::NotOnFiber)));
        assert!(t.elapsed() < Duration::from_secs(5));
        // Inside a plain pool task too.
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let r = gdex::block_on(
            pool.scheduler()
                .spawn(async { fiber::wait_output(async { 1 }).is_err() }),
        );
        assert!(r.unwrap());
    });
}

/// F4: dropping the handle of a fiber blocked in `wait` makes that wait
/// return Cancelled, a second wait on a pending future returns Cancelled
/// too, and the code after them runs: the fiber leaves through its return.
#[test]
fn dropping_a_fiber_cancels_its_waits_and_it_returns() {
    common::watchdog("dropping_a_fiber_cancels_its_waits", 60, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (waiting_tx, waiting_rx) = std::sync::mpsc::channel();
        let (_never_tx, never_rx) = oneshot::channel::<()>();
        let log2 = log.clone();
        let fiber = pool.scheduler().spawn_fiber(move || {
            waiting_tx.send(()).unwrap();
            let first = fiber::wait(never_rx);
            log2.lock().unwrap().push(format!("first: {first:?}"));
            let second = fiber::wait(std::future::pending::<()>());
            log2.lock().unwrap().push(format!("second: {second:?}"));
            // A ready future still gives its value.
            let ready = fiber::wait_output(async { 5 });
            log2.lock().unwrap().push(format!("ready: {ready:?}"));
            log2.lock().unwrap().push("returned".into());
        });
        waiting_rx.recv().unwrap();
        drop(fiber);
        common::wait_until(|| log.lock().unwrap().len() == 4);
        let log = log.lock().unwrap().clone();
        assert_eq!(
            log,
            [
                "first: Err(Cancelled)",
                "second: Err(Cancelled)",
                "ready: Ok(5)",
                "returned"
            ]
        );
    });
}

/// F4: a detached fiber is not cancelled; it runs to completion.
#[test]
fn a_detached_fiber_runs_to_completion() {
    common::watchdog("a_detached_fiber_runs_to_completion", 60, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let done = Arc::new(AtomicUsize::new(0));
        let done2 = done.clone();
        pool.scheduler()
            .spawn_fiber(move || {
                for _ in 0..3 {
                    fiber::wait(glib::timeout_future(Duration::from_millis(2))).unwrap();
                    done2.fetch_add(1, Ordering::AcqRel);
                }
            })
            .detach();
        common::wait_until(|| done.load(Ordering::Acquire) == 3);
    });
}

/// S6 for fibers: a panic reaches the waiter with its message, and the
/// worker goes on running fibers.
#[test]
fn a_fiber_panic_reaches_the_waiter() {
    common::watchdog("a_fiber_panic_reaches_the_waiter", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let s = pool.scheduler();
        let bad = s.spawn_fiber(|| {
            fiber::yield_fiber().unwrap();
            panic!("fiber boom {}", 7);
        });
        match gdex::block_on(bad) {
            Err(gdex::Error::Panicked(msg)) => assert_eq!(msg, "fiber boom 7"),
            other => panic!("expected a panic, got {other:?}"),
        }
        assert_eq!(gdex::block_on(s.spawn_fiber(|| 3)).unwrap(), 3);
    });
}

/// F1, S2: fibers on the main scheduler and on a context scheduler run on
/// the context's thread, and are awaitable from a pool task.
#[test]
fn fibers_on_context_schedulers() {
    common::watchdog("fibers_on_context_schedulers", 60, || {
        common::on_main(|| {
            let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
            let main_thread = std::thread::current().id();
            let on_main = gdex::Scheduler::main().spawn_fiber(|| {
                fiber::wait(glib::timeout_future(Duration::from_millis(1))).unwrap();
                std::thread::current().id()
            });
            // Awaited by a pool task, while block_on runs the main context.
            let waiter = pool
                .scheduler()
                .spawn(async move { on_main.await.unwrap() });
            assert_eq!(gdex::block_on(waiter).unwrap(), main_thread);

            let context = glib::MainContext::new();
            let s = gdex::Scheduler::for_context(&context);
            let f = s.spawn_fiber(|| {
                fiber::yield_fiber().unwrap();
                std::thread::current().id()
            });
            let runner = std::thread::spawn(move || {
                (context.block_on(f).unwrap(), std::thread::current().id())
            });
            let (ran_on, runner_thread) = runner.join().unwrap();
            assert_eq!(ran_on, runner_thread);
        })
    });
}

/// F1: the stack size can be set per fiber and on the pool builder.
#[test]
fn stack_sizes_are_configurable() {
    common::watchdog("stack_sizes_are_configurable", 60, || {
        // About 200 KiB of locals: more than the 128 KiB default holds.
        fn deep(n: usize) -> usize {
            let buf = std::hint::black_box([n as u8; 1024]);
            if n == 0 {
                0
            } else {
                n + deep(n - 1) + buf[0] as usize - (n as u8) as usize
            }
        }
        let pool = gdex::ThreadPool::builder()
            .workers(1)
            .fiber_stack_size(2 * 1024 * 1024)
            .build()
            .unwrap();
        let f = pool.scheduler().spawn_fiber(|| deep(200));
        assert_eq!(gdex::block_on(f).unwrap(), 200 * 201 / 2);
        let small = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let f = fiber::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(&small.scheduler(), || deep(200));
        assert_eq!(gdex::block_on(f).unwrap(), 200 * 201 / 2);
    });
}

/// The child's body for the overflow test: unbounded recursion in a fiber
/// with a 64 KiB stack.
#[test]
#[ignore = "child process of a_fiber_stack_overflow_stops_the_process_with_a_message"]
fn child_overflows_a_fiber_stack() {
    if !common::is_child() {
        return;
    }
    fn recurse(n: u64) -> u64 {
        let buf = std::hint::black_box([n; 64]);
        if buf[3] == u64::MAX {
            return 0;
        }
        recurse(n + 1) + buf[3]
    }
    let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
    let f = fiber::Builder::new()
        .stack_size(64 * 1024)
        .spawn(&pool.scheduler(), || recurse(0));
    let _ = gdex::block_on(f);
    println!("the child survived a stack overflow");
}

/// F5: running off a fiber stack hits the guard page and the process stops
/// with a message naming a fiber stack overflow.
#[test]
fn a_fiber_stack_overflow_stops_the_process_with_a_message() {
    // The shared runner kills a child that hangs instead of waiting forever.
    let (status, out) = common::run_child("child_overflows_a_fiber_stack", &[], 60);
    let status = status.unwrap_or_else(|| panic!("the child hung, killed after 60 s:\n{out}"));
    assert!(!status.success(), "the child exited normally:\n{out}");
    assert!(!out.contains("survived"), "{out}");
    assert!(
        out.contains("gdex fiber overflowed its stack"),
        "no overflow message:\n{out}"
    );
}

/// F6, P3: a fiber that yields forever on a 1-worker pool does not starve
/// the 100 tasks queued behind it, nor they it.
#[test]
fn a_yielding_fiber_does_not_starve_tasks() {
    common::watchdog("a_yielding_fiber_does_not_starve_tasks", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let s = pool.scheduler();
        let stop = Arc::new(AtomicBool::new(false));
        let yields = Arc::new(AtomicUsize::new(0));
        let (stop2, yields2) = (stop.clone(), yields.clone());
        let yielder = s.spawn_fiber(move || {
            while !stop2.load(Ordering::Acquire) {
                fiber::yield_fiber().unwrap();
                yields2.fetch_add(1, Ordering::Relaxed);
            }
        });
        common::wait_until(|| yields.load(Ordering::Relaxed) > 10);
        // Spawned from inside the worker: they sit on its own deque, which
        // would never be looked at if pinned work always went first.
        let ran = Arc::new(AtomicUsize::new(0));
        let (s2, ran2) = (s.clone(), ran.clone());
        let spawner = s.spawn(async move {
            let tasks: Vec<_> = (0..100)
                .map(|_| {
                    let ran = ran2.clone();
                    s2.spawn(async move {
                        ran.fetch_add(1, Ordering::Relaxed);
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        gdex::block_on(spawner).unwrap();
        assert_eq!(ran.load(Ordering::Relaxed), 100);
        stop.store(true, Ordering::Release);
        gdex::block_on(yielder).unwrap();
    });
}

/// P2 with `!Send` GIO futures: `gio::File::load_contents_future` (a `!Send`
/// future) inside a fiber and inside a pinned task on the pool.
#[test]
fn gio_futures_in_fibers_and_pinned_tasks() {
    use gio::prelude::*;
    common::watchdog("gio_futures_in_fibers_and_pinned_tasks", 60, || {
        let dir = std::env::temp_dir().join(format!("gdex-fiber-gio-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("data.txt");
        std::fs::write(&path, b"fiber data").unwrap();
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();

        let p = path.clone();
        let fiber = pool.scheduler().spawn_fiber(move || {
            let file = gio::File::for_path(&p);
            let (bytes, _etag) = fiber::wait(file.load_contents_future()).unwrap();
            bytes.to_vec()
        });
        assert_eq!(gdex::block_on(fiber).unwrap(), b"fiber data");

        let p = path.clone();
        let pinned = pool.spawn_pinned(move || async move {
            let file = gio::File::for_path(&p);
            let (bytes, _etag) = file.load_contents_future().await.unwrap();
            bytes.to_vec()
        });
        assert_eq!(gdex::block_on(pinned).unwrap(), b"fiber data");
        std::fs::remove_dir_all(&dir).ok();
    });
}

/// F4, F6: a fiber cancelled while it is suspended in `yield_now` is told
/// so by that very yield, although a yield's future is ready on its next
/// poll; so a loop `loop { work(); yield_now()?; }` never runs `work()`
/// after the cancellation. (On cc53133 the yield returned `Ok` and `work()`
/// ran once more.)
#[test]
fn a_yield_pending_when_the_fiber_is_cancelled_reports_it() {
    common::watchdog("yield_pending_when_cancelled", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let s = pool.scheduler();
        let runs = Arc::new(AtomicUsize::new(0));
        let result = Arc::new(Mutex::new(None));
        let (held_tx, held) = std::sync::mpsc::channel::<()>();
        let (go_tx, go) = std::sync::mpsc::channel::<()>();
        let go = Arc::new(Mutex::new(Some((go, held_tx))));
        let (r, out, s2) = (runs.clone(), result.clone(), s.clone());
        let fiber = s.spawn_fiber(move || {
            let work = || -> Result<(), gdex::Error> {
                loop {
                    r.fetch_add(1, Ordering::SeqCst);
                    // Once: a work item that holds the only worker, so that
                    // the fiber sits suspended in its yield meanwhile.
                    if let Some((go, held_tx)) = go.lock().unwrap().take() {
                        s2.push(move || {
                            held_tx.send(()).unwrap();
                            let _ = go.recv();
                        });
                    }
                    fiber::yield_fiber()?;
                }
            };
            *out.lock().unwrap() = Some(work());
        });
        held.recv().unwrap();
        let before = runs.load(Ordering::SeqCst);
        drop(fiber);
        go_tx.send(()).unwrap();
        common::wait_until(|| result.lock().unwrap().is_some());
        assert!(
            matches!(*result.lock().unwrap(), Some(Err(gdex::Error::Cancelled))),
            "{:?}",
            result.lock().unwrap()
        );
        assert_eq!(
            runs.load(Ordering::SeqCst),
            before,
            "work() ran again after the fiber was cancelled"
        );
    });
}

/// Misuse: a fiber stack below `MIN_STACK_SIZE` (16 KiB) is refused with a
/// message that names the size, the minimum and the default, both on a
/// fiber's builder and on a pool's.
#[test]
fn a_fiber_stack_below_the_minimum_is_refused_with_a_clear_message() {
    assert_eq!(gdex::fiber::MIN_STACK_SIZE, 16 * 1024);
    let too_small = gdex::fiber::MIN_STACK_SIZE - 1;
    let fiber = std::panic::catch_unwind(|| gdex::fiber::Builder::new().stack_size(too_small));
    let pool = std::panic::catch_unwind(|| gdex::ThreadPool::builder().fiber_stack_size(too_small));
    for err in [fiber.map(drop), pool.map(drop)] {
        let err = err.expect_err("a too-small stack was accepted");
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.contains("16383 bytes is too small") && msg.contains("at least 16384"),
            "{msg}"
        );
    }
    // The minimum itself is fine.
    let _ = gdex::fiber::Builder::new().stack_size(gdex::fiber::MIN_STACK_SIZE);
}

/// `Fiber::is_finished` is false while the fiber waits and true once it
/// has returned; the handle's `Debug` says the same.
#[test]
fn is_finished_follows_the_fiber() {
    common::watchdog("is_finished_follows_the_fiber", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let (tx, rx) = futures::channel::oneshot::channel::<u32>();
        let fiber = pool
            .scheduler()
            .spawn_fiber(move || gdex::fiber::wait(rx).unwrap());
        assert!(!fiber.is_finished(), "a waiting fiber is not finished");
        assert_eq!(format!("{fiber:?}"), "Fiber { finished: false }");
        tx.send(7).unwrap();
        common::wait_until(|| fiber.is_finished());
        assert_eq!(format!("{fiber:?}"), "Fiber { finished: true }");
        assert_eq!(gdex::block_on(fiber).unwrap(), 7);
    });
}

/// F2: a fiber never leaves its thread, so it may capture `!Send` values
/// when it is spawned from the thread that runs it: on the main scheduler
/// from the main thread (a widget, an `Rc`), on a pool from inside a pool
/// task. From another thread the spawn is refused with `spawn_local`'s
/// message (S1).
#[test]
fn a_local_fiber_captures_thread_bound_values() {
    common::watchdog("a_local_fiber_captures_thread_bound_values", 30, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let s = pool.scheduler();
        common::on_main(|| {
            let label = Rc::new(std::cell::RefCell::new(String::new()));
            let l = label.clone();
            let main_thread = std::thread::current().id();
            let fiber = gdex::Scheduler::main().spawn_fiber_local(move || {
                let n = fiber::wait(s.spawn(async { 6 * 7 }))?;
                assert_eq!(std::thread::current().id(), main_thread);
                *l.borrow_mut() = format!("{n}");
                Ok::<_, gdex::Error>(())
            });
            gdex::block_on(fiber).unwrap().unwrap();
            assert_eq!(*label.borrow(), "42");
        });
        // On a pool: from a pool task, on that task's worker.
        let task = pool.scheduler().spawn(async {
            let here = std::thread::current().id();
            let fiber = gdex::Scheduler::thread_default()
                .unwrap()
                .spawn_fiber_local(move || {
                    let rc = Rc::new(5);
                    fiber::yield_fiber().unwrap();
                    (*rc, std::thread::current().id() == here)
                });
            fiber.await
        });
        assert_eq!(gdex::block_on(task).unwrap().unwrap(), (5, true));
        // From a plain thread: refused, with spawn_local's rule.
        let s = pool.scheduler();
        let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            drop(s.spawn_fiber_local(|| ()));
        }))
        .expect_err("a plain thread cannot spawn a local fiber on a pool");
        let message = refused
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(
            message.contains("Scheduler::spawn_fiber_local") && message.contains("spawn_pinned"),
            "{message}"
        );
    });
}

/// F3: a future that `fiber::wait` polls is plain async code: a `wait`
/// inside it gets `NotOnFiber` instead of suspending the fiber in the middle
/// of that poll (which left the future holding the `Context` of a poll that
/// had returned by the time the fiber resumed; found by an attack review).
#[test]
fn a_wait_inside_a_waited_future_is_not_on_a_fiber() {
    common::watchdog(
        "a_wait_inside_a_waited_future_is_not_on_a_fiber",
        30,
        || {
            let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
            let fiber = pool.scheduler().spawn_fiber(|| {
                let inner = fiber::wait_output(async {
                    let seen = fiber::in_fiber();
                    let nested = fiber::wait(gdex::sleep(Duration::from_millis(1)));
                    (seen, nested)
                })
                .unwrap();
                (fiber::in_fiber(), inner)
            });
            let (outside, (inside, nested)) = gdex::block_on(fiber).unwrap();
            assert!(outside, "the fiber's own code is on the fiber");
            assert!(!inside, "code polled by a wait is not");
            assert!(matches!(nested, Err(gdex::Error::NotOnFiber)), "{nested:?}");
        },
    );
}

/// Pending forever, keeping no waker: only the fiber's own cancellation can
/// end a wait on it. Says when it is first polled.
struct KeepsNoWaker(Option<std::sync::mpsc::Sender<()>>);

impl std::future::Future for KeepsNoWaker {
    type Output = ();
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if let Some(polled) = self.0.take() {
            let _ = polled.send(());
        }
        std::task::Poll::Pending
    }
}

/// F4: the drop of a fiber's handle wakes the fiber itself, with a waker of
/// its task the handle took at spawn (the fiber's cancellation needs no
/// state shared with its handle but the task's own block), so a fiber
/// suspended on a future that kept no waker still has its wait return
/// `Cancelled`, then returns: on a pool, on a context scheduler, and as a
/// local fiber of the main scheduler.
#[test]
fn a_dropped_handle_wakes_a_fiber_whose_future_kept_no_waker() {
    common::watchdog("a_dropped_handle_wakes_a_fiber", 60, || {
        let waits =
            |polled| move || format!("{:?}", fiber::wait_output(KeepsNoWaker(Some(polled))));
        // On a pool.
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let (polled_tx, polled_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let wait = waits(polled_tx);
        let fiber = pool.scheduler().spawn_fiber(move || {
            done_tx.send(wait()).unwrap();
        });
        polled_rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(5));
        drop(fiber);
        assert_eq!(
            done_rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            "Err(Cancelled)"
        );

        // On a context scheduler, pumped here.
        let context = glib::MainContext::new();
        let s = gdex::Scheduler::for_context(&context);
        let (polled_tx, polled_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let wait = waits(polled_tx);
        let fiber = s.spawn_fiber(move || {
            done_tx.send(wait()).unwrap();
        });
        context
            .with_thread_default(|| {
                common::pump_polling(&context, || polled_rx.try_recv().is_ok());
                common::pump(&context);
                drop(fiber);
                let mut done = None;
                common::pump_polling(&context, || {
                    done = done_rx.try_recv().ok();
                    done.is_some()
                });
                assert_eq!(done.as_deref(), Some("Err(Cancelled)"));
            })
            .unwrap();

        // A local fiber of the main scheduler.
        common::on_main(|| {
            let main = glib::MainContext::default();
            let (polled_tx, polled_rx) = std::sync::mpsc::channel();
            let done = Rc::new(std::cell::RefCell::new(None));
            let d = done.clone();
            let wait = waits(polled_tx);
            let fiber = gdex::Scheduler::main().spawn_fiber_local(move || {
                *d.borrow_mut() = Some(wait());
            });
            common::pump_polling(&main, || polled_rx.try_recv().is_ok());
            common::pump(&main);
            drop(fiber);
            common::pump_polling(&main, || done.borrow().is_some());
            assert_eq!(done.borrow().as_deref(), Some("Err(Cancelled)"));
        });
    });
}

/// F4 at shutdown: fibers suspended on futures that kept no waker are woken
/// by their worker (each booked its task's waker there at its first
/// suspension) and return, each on its own worker, before the shutdown
/// returns; their handles, kept, give their results.
#[test]
fn shutdown_wakes_fibers_whose_futures_kept_no_waker() {
    common::watchdog(
        "shutdown_wakes_fibers_whose_futures_kept_no_waker",
        60,
        || {
            let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
            let n = 20;
            let (polled_tx, polled_rx) = std::sync::mpsc::channel();
            let returned = Arc::new(AtomicUsize::new(0));
            let fibers: Vec<_> = (0..n)
                .map(|i| {
                    let polled = polled_tx.clone();
                    let returned = returned.clone();
                    pool.scheduler().spawn_fiber(move || {
                        let waited = fiber::wait_output(KeepsNoWaker(Some(polled)));
                        assert!(matches!(waited, Err(gdex::Error::Cancelled)));
                        returned.fetch_add(1, Ordering::SeqCst);
                        i
                    })
                })
                .collect();
            for _ in 0..n {
                polled_rx.recv().unwrap();
            }
            pool.shutdown();
            assert_eq!(returned.load(Ordering::SeqCst), n, "every fiber returned");
            for (i, fiber) in fibers.into_iter().enumerate() {
                assert_eq!(gdex::block_on(fiber).unwrap(), i);
            }
        },
    );
}
