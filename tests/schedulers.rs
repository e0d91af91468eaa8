//! The main scheduler (S1), any-context schedulers (S2), `block_on` (S8, S12) and
//! awaiting across schedulers (S4), with real `GMainContext`s. A pinned
//! task of a context scheduler never leaves the thread that first polled
//! it, even once that thread has exited and another iterates the context.

use crate::common;

use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// S4: a main-scheduler task awaits a pool task and resumes on the main
/// thread; a pool task awaits a main-scheduler task.
#[test]
fn main_and_pool_await_each_other() {
    common::watchdog("main_and_pool_await_each_other", 60, || {
        common::on_main(|| {
            let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
            let ps = pool.scheduler();
            let main_thread = std::thread::current().id();
            let not_send = Rc::new(());
            let on_main = gdex::Scheduler::main().spawn_local(async move {
                let _keep = not_send;
                let before = std::thread::current().id();
                let worker = ps
                    .spawn(async { std::thread::current().name().unwrap().to_owned() })
                    .await
                    .unwrap();
                let after = std::thread::current().id();
                // And now a pool task that awaits a main task.
                let from_pool = ps
                    .spawn(async {
                        let main_task = gdex::Scheduler::main().spawn(async {
                            (
                                std::thread::current().id(),
                                gdex::Scheduler::thread_default().is_some_and(|s| s.is_main()),
                            )
                        });
                        let out = main_task.await.unwrap();
                        (out, std::thread::current().name().unwrap().to_owned())
                    })
                    .await
                    .unwrap();
                (before, worker, after, from_pool)
            });
            let (before, worker, after, ((main_ran_on, main_default), pool_resumed_on)) =
                gdex::block_on(on_main).unwrap();
            assert_eq!(before, main_thread);
            assert_eq!(after, main_thread, "resumed on the main thread");
            assert!(worker.starts_with("gdex-worker-"));
            assert_eq!(
                main_ran_on, main_thread,
                "the main task ran on the main thread"
            );
            assert!(
                main_default,
                "thread_default() inside a main task is the main scheduler"
            );
            assert!(
                pool_resumed_on.starts_with("gdex-worker-"),
                "the pool task resumed on the pool"
            );
        })
    });
}

/// S1: one dispatch runs a bounded batch, then gives the loop back.
#[test]
fn a_dispatch_runs_a_bounded_batch() {
    common::watchdog("a_dispatch_runs_a_bounded_batch", 60, || {
        let context = glib::MainContext::new();
        let s = gdex::Scheduler::for_context(&context);
        let ran = Arc::new(AtomicUsize::new(0));
        for _ in 0..1000 {
            let ran = ran.clone();
            s.push(move || {
                ran.fetch_add(1, Ordering::Relaxed);
            });
        }
        assert_eq!(
            ran.load(Ordering::Relaxed),
            0,
            "nothing runs until the context is iterated"
        );
        context.iteration(false);
        let first = ran.load(Ordering::Relaxed);
        assert!(
            first > 0 && first < 1000,
            "one iteration ran {first} of 1000"
        );
        common::pump(&context);
        assert_eq!(ran.load(Ordering::Relaxed), 1000);
    });
}

/// S1: work pushed from other threads lands on the context's thread and
/// wakes it: a thread blocked in the context's poll runs it.
#[test]
fn pushes_from_other_threads_wake_the_context() {
    common::watchdog("pushes_from_other_threads_wake_the_context", 60, || {
        let context = glib::MainContext::new();
        let s = gdex::Scheduler::for_context(&context);
        let total = 4 * 10_000;
        let ran = Arc::new(AtomicUsize::new(0));
        let runner_ctx = context.clone();
        let ran2 = ran.clone();
        let runner = std::thread::spawn(move || {
            let _owner = runner_ctx.acquire().unwrap();
            while ran2.load(Ordering::Acquire) < total {
                runner_ctx.iteration(true);
            }
        });
        let pushers: Vec<_> = (0..4)
            .map(|_| {
                let (s, ran) = (s.clone(), ran.clone());
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        let ran = ran.clone();
                        s.push(move || {
                            ran.fetch_add(1, Ordering::AcqRel);
                        });
                    }
                })
            })
            .collect();
        for p in pushers {
            p.join().unwrap();
        }
        runner.join().unwrap();
        assert_eq!(ran.load(Ordering::Acquire), total);
    });
}

/// S2: `Scheduler::for_context` is one scheduler per context, and
/// `thread_default()` answers it inside its tasks and on a thread whose
/// thread-default context it is.
#[test]
fn for_context_and_thread_default() {
    common::watchdog("for_context_and_thread_default", 60, || {
        let context = glib::MainContext::new();
        let s = gdex::Scheduler::for_context(&context);
        assert_eq!(s, gdex::Scheduler::for_context(&context));
        assert_ne!(s, gdex::Scheduler::for_context(&glib::MainContext::new()));
        assert_eq!(s.context().as_ref(), Some(&context));
        let inside = s.spawn(async { gdex::Scheduler::thread_default() });
        let got = context.block_on(inside).unwrap();
        assert_eq!(got.as_ref(), Some(&s));
        let pushed = context
            .with_thread_default(gdex::Scheduler::thread_default)
            .unwrap();
        assert_eq!(pushed.as_ref(), Some(&s));
        // A plain thread has no scheduler.
        let plain = std::thread::spawn(gdex::Scheduler::thread_default)
            .join()
            .unwrap();
        assert_eq!(plain, None);
    });
}

/// S8: `block_on` iterates the thread's context while it waits, so
/// main-scheduler tasks and GLib sources keep running; and tasks spawned
/// meanwhile keep running after it returns.
#[test]
fn block_on_iterates_the_main_context() {
    common::watchdog("block_on_iterates_the_main_context", 60, || {
        common::on_main(|| {
            let ticks = Rc::new(std::cell::Cell::new(0));
            let t2 = ticks.clone();
            let main = gdex::Scheduler::main();
            let bg_ran = Arc::new(AtomicUsize::new(0));
            let bg = bg_ran.clone();
            let (done_tx, done_rx) = futures::channel::oneshot::channel::<()>();
            main.spawn_local(async move {
                for _ in 0..3 {
                    glib::timeout_future(Duration::from_millis(1)).await;
                    t2.set(t2.get() + 1);
                }
                done_tx.send(()).unwrap();
            })
            .detach();
            // Waits on something only the main task above completes, with
            // timers of its own: block_on must run the main context.
            gdex::block_on(done_rx).unwrap();
            assert_eq!(ticks.get(), 3);
            // Spawned now, finished by a later block_on on the same context.
            main.spawn(async move {
                bg.fetch_add(1, Ordering::Relaxed);
            })
            .detach();
            gdex::block_on(async {});
            let context = glib::MainContext::default();
            let _own = context.acquire().unwrap();
            common::pump_until(&context, || bg_ran.load(Ordering::Relaxed) == 1);
        })
    });
}

/// S8: a nested `block_on` inside a main-scheduler task still runs the
/// main scheduler's other tasks (the source may recurse).
#[test]
fn nested_block_on_inside_a_main_task_runs_other_main_tasks() {
    common::watchdog("nested_block_on", 60, || {
        common::on_main(|| {
            let main = gdex::Scheduler::main();
            let outer = main.spawn_local(async {
                let inner = gdex::Scheduler::main().spawn_local(async { 7 });
                gdex::block_on(inner).unwrap()
            });
            assert_eq!(gdex::block_on(outer).unwrap(), 7);
        })
    });
}

/// S1: `spawn_local` from a thread that does not own the context panics with
/// a message that says why.
#[test]
fn spawn_local_from_a_non_owner_thread_panics() {
    common::watchdog("spawn_local_from_a_non_owner_thread_panics", 60, || {
        let context = glib::MainContext::new();
        let (owned_tx, owned_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let ctx = context.clone();
        let owner = std::thread::spawn(move || {
            let _guard = ctx.acquire().unwrap();
            owned_tx.send(()).unwrap();
            stop_rx.recv().unwrap();
        });
        owned_rx.recv().unwrap();
        let s = gdex::Scheduler::for_context(&context);
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            s.spawn_local(async {}).detach();
        }))
        .expect_err("spawn_local on a non-owner thread must panic");
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("does not own"), "message: {msg}");
        assert!(
            msg.contains("spawn()"),
            "the message says what to do: {msg}"
        );
        stop_tx.send(()).unwrap();
        owner.join().unwrap();
        // Once the owner is gone, this thread may own the context.
        s.spawn_local(async {}).detach();
    });
}

/// S8: `block_on` on a pool worker refuses with a clear panic instead of
/// deadlocking the worker.
#[test]
fn block_on_on_a_worker_panics() {
    common::watchdog("block_on_on_a_worker_panics", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let task = pool.scheduler().spawn(async {
            gdex::block_on(async { 1 });
        });
        match gdex::block_on(task) {
            Err(gdex::Error::Panicked(msg)) => {
                assert!(msg.contains("pool worker"), "message: {msg}");
                assert!(msg.contains("Await the future"), "message: {msg}");
            }
            other => panic!("expected a panic, got {other:?}"),
        }
    });
}

/// `spawn_local` on a pool scheduler is refused with a message.
#[test]
fn spawn_local_on_a_pool_panics() {
    common::watchdog("spawn_local_on_a_pool_panics", 30, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.scheduler().spawn_local(async {}).detach();
        }))
        .expect_err("must panic");
        let msg = err
            .downcast_ref::<&str>()
            .copied()
            .unwrap_or_default()
            .to_owned()
            + &err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("Send"), "message: {msg}");
        // From a worker of another pool too: a worker only counts for its
        // own pool.
        let other = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let s = pool.scheduler();
        let refused = gdex::block_on(other.scheduler().spawn(async move {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                s.spawn_local(async {}).detach();
            }))
            .is_err()
        }))
        .unwrap();
        assert!(
            refused,
            "spawn_local from another pool's worker was accepted"
        );
    });
}

/// X3, frames first: while the main scheduler works through a flood of
/// tasks, a source at GTK's redraw priority keeps ticking (the main
/// scheduler dispatches below it, in slices of at most 4 ms). At
/// `G_PRIORITY_DEFAULT` the always-ready scheduler would starve it until
/// the queue ran dry.
#[test]
fn redraw_priority_sources_run_while_main_tasks_flood() {
    common::watchdog("frames_first", 60, || {
        common::on_main(|| {
            let context = glib::MainContext::default();
            let pending = Arc::new(AtomicUsize::new(500));
            let ticks_during_flood = Arc::new(AtomicUsize::new(0));
            let (p2, t2) = (pending.clone(), ticks_during_flood.clone());
            let redraw = glib::timeout_source_new(
                Duration::from_millis(16),
                None,
                glib::Priority::from(120), // GDK_PRIORITY_REDRAW
                move || {
                    if p2.load(Ordering::SeqCst) > 0 {
                        t2.fetch_add(1, Ordering::SeqCst);
                    }
                    glib::ControlFlow::Continue
                },
            );
            redraw.attach(Some(&context));
            let main = gdex::Scheduler::main();
            for _ in 0..500 {
                let pending = pending.clone();
                main.push(move || {
                    let t = std::time::Instant::now();
                    while t.elapsed() < Duration::from_millis(1) {}
                    pending.fetch_sub(1, Ordering::SeqCst);
                });
            }
            common::pump_until(&context, || pending.load(Ordering::SeqCst) == 0);
            redraw.destroy();
            let ticks = ticks_during_flood.load(Ordering::SeqCst);
            assert!(
                ticks >= 5,
                "the redraw source ticked {ticks} times during 0.5 s of main tasks"
            );
        })
    });
}

/// S11: a context scheduler's `Send` and `!Send` queues take turns across
/// dispatches, not only within one. A poll that outlasts a dispatch's 4 ms
/// ends the dispatch after one job; if every dispatch began with the
/// `!Send` queue, a `!Send` task that yields after each long poll would run
/// alone until it ended, its `Send` neighbour never let in (and the other
/// way round).
#[test]
fn send_and_local_queues_take_turns_when_each_poll_fills_a_dispatch() {
    use std::sync::atomic::AtomicBool;
    /// Spawns the neighbour, then polls `POLLS` times for 5 ms each,
    /// yielding between: whether the neighbour ran before the end.
    async fn long_polls(spawn_neighbour: impl FnOnce(Arc<AtomicBool>)) -> bool {
        const POLLS: usize = 4;
        let ran = Arc::new(AtomicBool::new(false));
        spawn_neighbour(ran.clone());
        for _ in 0..POLLS {
            let t = std::time::Instant::now();
            while t.elapsed() < Duration::from_millis(5) {}
            gdex::yield_now().await;
        }
        ran.load(Ordering::SeqCst)
    }
    common::watchdog("queues_take_turns", 60, || {
        common::on_own_context(|_| {
            let here = || gdex::Scheduler::thread_default().expect("a context scheduler");
            let local_loop = here().spawn_local(long_polls(move |ran| {
                here()
                    .spawn(async move { ran.store(true, Ordering::SeqCst) })
                    .detach()
            }));
            assert!(
                gdex::block_on(local_loop).unwrap(),
                "a Send task waited for a !Send task's long polls to end"
            );
            let send_loop = here().spawn(long_polls(move |ran| {
                gdex::spawn_local(async move { ran.store(true, Ordering::SeqCst) }).detach()
            }));
            assert!(
                gdex::block_on(send_loop).unwrap(),
                "a !Send task waited for a Send task's long polls to end"
            );
        })
    });
}

/// S11 with two threads that iterate one context in turn, each with a
/// `!Send` task of its own beside a `Send` task, every poll filling a
/// dispatch: on each thread, its `!Send` queue and the shared queue take
/// turns. (With one turn for the whole context, carried from one thread's
/// dispatch to the other's, one thread always began with its `!Send`
/// queue and the other always with the shared one: the second thread's
/// `!Send` task waited for all of the `Send` task's polls.)
#[test]
fn each_threads_local_queue_takes_turns_with_the_shared_queue() {
    use std::sync::{mpsc, Mutex};
    const POLLS: usize = 4;
    /// `POLLS` polls of 5 ms each (more than a dispatch's 4 ms), yielding
    /// between; each poll's start is logged under `name`.
    async fn long_polls(name: &'static str, log: Arc<Mutex<Vec<&'static str>>>) {
        for _ in 0..POLLS {
            log.lock().unwrap().push(name);
            let t = std::time::Instant::now();
            while t.elapsed() < Duration::from_millis(5) {}
            gdex::yield_now().await;
        }
        log.lock().unwrap().push(name);
    }
    common::watchdog("each_threads_local_queue_takes_turns", 60, || {
        let context = glib::MainContext::new();
        let scheduler = gdex::Scheduler::for_context(&context);
        let log = Arc::new(Mutex::new(Vec::new()));
        // Each thread spawns its `!Send` task while it holds the context,
        // then iterates the context once each time it is given the turn.
        let mut threads = Vec::new();
        for name in ["a", "b"] {
            let (give, take) = mpsc::channel::<()>();
            let (done, is_done) = mpsc::channel::<()>();
            let (context, scheduler, log) = (context.clone(), scheduler.clone(), log.clone());
            let thread = std::thread::spawn(move || {
                {
                    let _held = context.acquire().expect("the context is free");
                    scheduler.spawn_local(long_polls(name, log)).detach();
                }
                done.send(()).unwrap();
                while take.recv().is_ok() {
                    let _held = context.acquire().expect("only the thread given the turn");
                    context.iteration(false);
                    drop(_held);
                    done.send(()).unwrap();
                }
            });
            is_done.recv().unwrap();
            threads.push((thread, give, is_done));
        }
        scheduler.spawn(long_polls("send", log.clone())).detach();
        // a, b, a, b, ...: one dispatch each.
        let mut rounds = 0;
        while log.lock().unwrap().len() < 3 * (POLLS + 1) {
            rounds += 1;
            assert!(
                rounds < 100,
                "the tasks did not end: {:?}",
                log.lock().unwrap()
            );
            for (_, give, is_done) in &threads {
                give.send(()).unwrap();
                is_done.recv().unwrap();
            }
        }
        for (thread, give, _) in threads {
            drop(give);
            thread.join().unwrap();
        }
        let log = log.lock().unwrap();
        let send_ended = log.iter().rposition(|&name| name == "send").unwrap();
        for name in ["a", "b"] {
            let first = log.iter().position(|&n| n == name).unwrap();
            assert!(
                first < send_ended,
                "thread {name}'s !Send task waited for a Send task's long polls to end: {log:?}"
            );
        }
    });
}

/// S1: a `!Send` task runs only on its owner thread. Another thread that
/// iterates the context meanwhile leaves it queued (it used to poll it there,
/// and async-task aborted the process); the owner runs it when it iterates
/// again.
#[test]
fn local_tasks_wait_for_their_owner_thread() {
    common::watchdog("local_tasks_wait_for_their_owner_thread", 60, || {
        use std::sync::mpsc::channel;
        let context = glib::MainContext::new();
        let (tx_wake, rx_wake) = futures::channel::oneshot::channel::<()>();
        let ran_on = Arc::new(std::sync::Mutex::new(None));
        let (to_owner, owner_rx) = channel::<()>();
        let (to_main, main_rx) = channel::<()>();
        let (ctx, ran) = (context.clone(), ran_on.clone());
        let owner = std::thread::spawn(move || {
            {
                let _own = ctx.acquire().unwrap();
                let not_send = Rc::new(());
                let ran = ran.clone();
                gdex::Scheduler::for_context(&ctx)
                    .spawn_local(async move {
                        let _keep = not_send;
                        let _ = rx_wake.await;
                        *ran.lock().unwrap() = Some(std::thread::current().id());
                    })
                    .detach();
                common::pump(&ctx);
            }
            to_main.send(()).unwrap();
            owner_rx.recv().unwrap();
            let _own = ctx.acquire().unwrap();
            common::pump_until(&ctx, || ran.lock().unwrap().is_some());
            std::thread::current().id()
        });
        main_rx.recv().unwrap();
        {
            // Another thread iterates the context while the task is woken.
            let _own = context.acquire().unwrap();
            tx_wake.send(()).unwrap();
            for _ in 0..10 {
                context.iteration(false);
            }
            assert!(
                ran_on.lock().unwrap().is_none(),
                "a !Send task ran on another thread"
            );
        }
        to_owner.send(()).unwrap();
        let owner_id = owner.join().unwrap();
        assert_eq!(*ran_on.lock().unwrap(), Some(owner_id));
    });
}

/// S12: a task that yields in a loop under `block_on` lets the thread's
/// context dispatch between its polls, as a worker does: a main-scheduler
/// task and a 1 ms GLib timeout both run, so the loop ends. (It used to poll
/// the yielding future again at once, for ever: the main context never ran,
/// and in a GTK app the window froze. tokio's `yield_defers_until_park`.)
/// The same with a private context pushed as thread-default.
#[test]
fn a_yield_loop_under_block_on_lets_the_context_run() {
    use std::cell::Cell;
    fn yield_until(done: impl Fn() -> bool) {
        gdex::block_on(async {
            let mut yields = 0u64;
            while !done() {
                gdex::yield_now().await;
                yields += 1;
                assert!(
                    yields < 1_000_000,
                    "a million yields and the context's task and timeout have not run"
                );
            }
        });
    }
    common::watchdog(
        "a_yield_loop_under_block_on_lets_the_context_run",
        60,
        || {
            common::on_main(|| {
                let (task_ran, timer_fired) =
                    (Rc::new(Cell::new(false)), Rc::new(Cell::new(false)));
                let t = task_ran.clone();
                gdex::Scheduler::main()
                    .spawn_local(async move { t.set(true) })
                    .detach();
                let f = timer_fired.clone();
                glib::timeout_add_local_once(Duration::from_millis(1), move || f.set(true));
                yield_until(|| task_ran.get() && timer_fired.get());
            });
            common::on_own_context(|context| {
                let task_ran = Rc::new(Cell::new(false));
                let t = task_ran.clone();
                gdex::Scheduler::for_context(context)
                    .spawn_local(async move { t.set(true) })
                    .detach();
                yield_until(|| task_ran.get());
            });
        },
    );
}

/// S12 at its edges: `block_on`'s iteration between two polls of a future
/// that woke itself, nested in main tasks, GLib callbacks, destructors and
/// fibers, and beside an always-ready source.
mod yields_let_the_loop_run {
    use super::common;
    use std::cell::Cell;
    use std::rc::Rc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    /// An idle source on `context` (not the global default context, where
    /// glib-rs's `idle_add_local` goes).
    fn idle_on(
        context: &glib::MainContext,
        f: impl FnMut() -> glib::ControlFlow + Send + 'static,
    ) -> glib::Source {
        let source = glib::idle_source_new(None, glib::Priority::DEFAULT_IDLE, f);
        source.attach(Some(context));
        source
    }

    /// S12: a future that wakes itself on every poll, for ever, while the
    /// context has an always-ready idle source: both make progress (the idle
    /// runs between polls; the polls go on between idles).
    #[test]
    fn a_self_waking_future_and_an_always_ready_source_share_the_loop() {
        common::watchdog("self_waking_and_idle", 60, || {
            common::on_own_context(|context| {
                let idles = Arc::new(AtomicUsize::new(0));
                let i = idles.clone();
                let source = idle_on(context, move || {
                    i.fetch_add(1, Ordering::SeqCst);
                    glib::ControlFlow::Continue
                });
                let polls = gdex::block_on(async {
                    let mut polls = 0u64;
                    while idles.load(Ordering::SeqCst) < 1000 {
                        gdex::yield_now().await;
                        polls += 1;
                        assert!(
                            polls < 10_000_000,
                            "the idle source ran {} times",
                            idles.load(Ordering::SeqCst)
                        );
                    }
                    polls
                });
                source.destroy();
                assert!(polls >= 1000, "polled {polls} times for 1000 idles");
            });
        });
    }

    /// S12 inside a main-scheduler task: the task's `block_on` of a yield loop
    /// runs a nested loop, in which another main-scheduler task must run (the
    /// loop waits for it).
    #[test]
    fn block_on_of_a_yield_loop_inside_a_main_task_runs_other_main_tasks() {
        common::watchdog("block_on_in_main_task", 60, || {
            common::on_main(|| {
                let flag = Rc::new(Cell::new(false));
                let f = flag.clone();
                let done = Rc::new(Cell::new(false));
                let d = done.clone();
                let main = gdex::Scheduler::main();
                let m2 = main.clone();
                main.spawn_local(async move {
                    // Spawned from inside: queued behind us.
                    m2.spawn_local(async move { f.set(true) }).detach();
                    gdex::block_on(async {
                        let mut n = 0u64;
                        while !flag.get() {
                            gdex::yield_now().await;
                            n += 1;
                            assert!(n < 1_000_000, "the other main task never ran");
                        }
                    });
                    d.set(true);
                })
                .detach();
                common::pump_until(&glib::MainContext::default(), || done.get());
            });
        });
    }

    /// S12 inside a GLib callback dispatched by an outer `block_on`'s
    /// iteration(false): the callback's own `block_on` of a yield loop iterates
    /// the context again, nested; a second idle source must run there (the
    /// first is blocked while it dispatches).
    #[test]
    fn block_on_inside_a_glib_callback_nests() {
        common::watchdog("block_on_in_callback", 60, || {
            common::on_own_context(|context| {
                let second = Arc::new(AtomicUsize::new(0));
                let inner_done = Arc::new(AtomicBool::new(false));
                let (s2, done2) = (second.clone(), inner_done.clone());
                idle_on(context, move || {
                    let s3 = s2.clone();
                    gdex::block_on(async move {
                        while s3.load(Ordering::SeqCst) < 5 {
                            gdex::yield_now().await;
                        }
                    });
                    done2.store(true, Ordering::SeqCst);
                    glib::ControlFlow::Break
                });
                let s4 = second.clone();
                let other = idle_on(context, move || {
                    s4.fetch_add(1, Ordering::SeqCst);
                    glib::ControlFlow::Continue
                });
                let d = inner_done.clone();
                gdex::block_on(async move {
                    while !d.load(Ordering::SeqCst) {
                        gdex::yield_now().await;
                    }
                });
                other.destroy();
                assert!(second.load(Ordering::SeqCst) >= 5);
            });
        });
    }

    /// S12 re-entrancy: a `block_on` of a yielding future inside a `Drop` run
    /// while GLib destroys a source (the closure of an idle that returned
    /// `Break`) during another `block_on`'s iteration(false), and inside the
    /// drop of a cancelled context-scheduler task's future.
    #[test]
    fn block_on_inside_drop_during_the_iteration() {
        struct BlockOnDrop(Arc<AtomicUsize>);
        impl Drop for BlockOnDrop {
            fn drop(&mut self) {
                let c = self.0.clone();
                gdex::block_on(async move {
                    gdex::yield_now().await;
                    gdex::yield_now().await;
                    c.fetch_add(1, Ordering::SeqCst);
                });
            }
        }
        common::watchdog("block_on_in_drop", 60, || {
            common::on_own_context(|context| {
                let drops = Arc::new(AtomicUsize::new(0));
                for _ in 0..3 {
                    let guard = BlockOnDrop(drops.clone());
                    idle_on(context, move || {
                        let _keep = &guard;
                        glib::ControlFlow::Break
                    });
                }
                // Cancelled tasks whose futures call block_on when dropped.
                let sched = gdex::Scheduler::for_context(context);
                let mut tasks = Vec::new();
                for _ in 0..3 {
                    let guard = BlockOnDrop(drops.clone());
                    tasks.push(sched.spawn_local(async move {
                        let _keep = guard;
                        std::future::pending::<()>().await;
                    }));
                }
                let d = drops.clone();
                gdex::block_on(async move {
                    let mut n = 0u64;
                    while d.load(Ordering::SeqCst) < 3 {
                        gdex::yield_now().await;
                        n += 1;
                        assert!(n < 1_000_000, "the idles never ran");
                    }
                });
                drop(tasks);
                let d = drops.clone();
                gdex::block_on(async move {
                    let mut n = 0u64;
                    while d.load(Ordering::SeqCst) < 6 {
                        gdex::yield_now().await;
                        n += 1;
                        assert!(n < 1_000_000, "the cancelled tasks were never dropped");
                    }
                });
                assert_eq!(drops.load(Ordering::SeqCst), 6);
            });
        });
    }

    /// S12 inside a fiber on a context scheduler: `block_on` there runs a
    /// nested loop outside the fiber; a yield loop waiting for another task of
    /// the same scheduler must see it run.
    #[test]
    fn block_on_of_a_yield_loop_inside_a_fiber_on_a_context_scheduler() {
        common::watchdog("block_on_in_fiber", 60, || {
            common::on_own_context(|context| {
                let sched = gdex::Scheduler::for_context(context);
                let flag = Arc::new(AtomicBool::new(false));
                let f = flag.clone();
                let s2 = sched.clone();
                let fiber = sched.spawn_fiber(move || {
                    s2.spawn(async move { f.store(true, Ordering::SeqCst) })
                        .detach();
                    gdex::block_on(async {
                        let mut n = 0u64;
                        while !flag.load(Ordering::SeqCst) {
                            gdex::yield_now().await;
                            n += 1;
                            assert!(n < 1_000_000, "the other task never ran");
                        }
                    });
                    7
                });
                assert_eq!(gdex::block_on(fiber).unwrap(), 7);
            });
        });
    }
}

/// Child body of [`a_pinned_task_is_refused_on_a_new_thread_after_its_own_exited`].
#[test]
#[ignore = "child process of a_pinned_task_is_refused_on_a_new_thread_after_its_own_exited"]
fn child_pinned_task_on_a_new_thread() {
    if !common::is_child() {
        return;
    }
    common::leak_reports();
    common::watchdog("a_pinned_task_is_refused_on_a_new_thread", 60, || {
        let rounds = common::stress(50);
        for round in 0..rounds {
            let context = glib::MainContext::new();
            let scheduler = gdex::Scheduler::for_context(&context);
            let polled = Arc::new(AtomicUsize::new(0));
            let dropped = Arc::new(AtomicUsize::new(0));
            let (tx, rx) = futures::channel::oneshot::channel::<()>();
            let (p, d) = (polled.clone(), dropped.clone());
            let task = scheduler.spawn_pinned(move || async move {
                let _counted = common::Counted(d);
                p.fetch_add(1, Ordering::SeqCst);
                let _ = rx.await;
                std::thread::current().name().map(str::to_owned)
            });

            // Thread A polls it once (it waits on `rx`), then exits.
            let a_context = context.clone();
            let a_polled = polled.clone();
            std::thread::Builder::new()
                .name("pinned-owner".into())
                .spawn(move || {
                    a_context
                        .with_thread_default(|| {
                            common::pump_until(&a_context, || a_polled.load(Ordering::SeqCst) == 1)
                        })
                        .unwrap();
                })
                .unwrap()
                .join()
                .unwrap();

            // Thread B wakes it and iterates the context.
            tx.send(()).unwrap();
            let b_context = context.clone();
            let result = std::thread::Builder::new()
                .name("pinned-intruder".into())
                .spawn(move || {
                    b_context
                        .with_thread_default(|| gdex::block_on(task))
                        .unwrap()
                })
                .unwrap()
                .join()
                .unwrap();
            match &result {
                Err(gdex::Error::Panicked(msg)) if msg.contains("resumed on thread") => {}
                other => panic!(
                    "round {round}: a pinned task resumed on a new thread after its own \
                     exited: {other:?}"
                ),
            }
            assert_eq!(
                dropped.load(Ordering::SeqCst),
                0,
                "round {round}: the pinned future was dropped on another thread"
            );
        }
        assert_eq!(common::leak_reports().load(Ordering::SeqCst), rounds);
    });
    println!("CHILD-OK");
}

/// A pinned task never leaves its thread (S2; F2 for fibers). A pinned
/// task (`spawn_pinned` on a context scheduler) first polled on
/// thread A, which then exits, must be refused on thread B, which iterates
/// the context next: its poll panics (the task resolves to `Panicked`,
/// naming the misuse) and its future is leaked, not dropped, on B. Threads
/// are started one after the other, so B usually gets A's stack and
/// thread-local block back: an identity taken from a thread-local's address
/// calls them the same thread.
/// In a child process: it counts the "gdex" leak reports of the whole
/// process. (Without backtraces: the child shows its output, and 50
/// expected panics with a backtrace each would outlast its watchdog.)
#[test]
fn a_pinned_task_is_refused_on_a_new_thread_after_its_own_exited() {
    if common::is_child() {
        return;
    }
    common::child_passes(
        "child_pinned_task_on_a_new_thread",
        &[("RUST_BACKTRACE", "0")],
        120,
    );
}
