//! The main scheduler's trust rules: who owns its `!Send` side (S10), that
//! an idle main loop does not wake for work it cannot run, that `wait_for`
//! refuses the threads whose loop it would block (B4), that a ready main
//! task makes progress whatever else is ready (S11), and that
//! main-scheduler work nobody runs is reported.

mod common;

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{main_context_lock, on_main, pump, pump_until, watchdog};

/// The message of a caught panic.
fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Runs `body` on a new thread called `name` and returns what it returns.
fn on_thread<R: Send + 'static>(name: &str, body: impl FnOnce() -> R + Send + 'static) -> R {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(body)
        .unwrap()
        .join()
        .unwrap()
}

/// S10: a plain thread that calls `spawn_local` before any main loop runs
/// is refused with a message that names it, the rule and the fix, and it
/// does not become the owner: afterwards the thread that holds the default
/// main context can still spawn `!Send` tasks there. (Before the fix, the
/// plain thread took the main scheduler's `!Send` side for good and the
/// real owner panicked.)
#[test]
fn a_plain_thread_cannot_take_the_main_schedulers_local_side() {
    watchdog(
        "a_plain_thread_cannot_take_the_main_schedulers_local_side",
        60,
        || {
            {
                // Nobody holds the default main context meanwhile.
                let _lock = main_context_lock();
                for via_main in [false, true] {
                    let refused = on_thread("plain-helper", move || {
                        catch_unwind(|| {
                            let task = if via_main {
                                gdex::Scheduler::main().spawn_local(async { Rc::new(1) })
                            } else {
                                gdex::spawn_local(async { Rc::new(1) })
                            };
                            task.detach();
                        })
                        .map_err(panic_text)
                    });
                    let msg = refused.expect_err("a plain thread's spawn_local must be refused");
                    assert!(msg.contains("\"plain-helper\""), "names the thread: {msg}");
                    assert!(msg.contains("main thread"), "states the rule: {msg}");
                    assert!(
                        msg.contains("spawn(") && msg.contains("main loop"),
                        "says what to do: {msg}"
                    );
                }
            }
            on_main(|| {
                let shared = Rc::new(5);
                let task = gdex::Scheduler::main().spawn_local(async move { *shared + 1 });
                assert_eq!(gdex::block_on(task).unwrap(), 6);
                let task = gdex::spawn_local(async { Rc::new(7) });
                assert_eq!(*gdex::block_on(task).unwrap(), 7);
            });
        },
    );
}

/// S10: ownership does not stick to a thread that has exited. A thread that
/// held the default main context leaves a `!Send` task pending and exits;
/// the next thread that holds the context may spawn `!Send` tasks there.
/// (Before the fix the exited thread stayed the owner while its task lived,
/// and every other thread was refused.)
#[test]
fn local_ownership_does_not_outlive_its_thread() {
    watchdog("local_ownership_does_not_outlive_its_thread", 60, || {
        on_thread("short-lived-owner", || {
            on_main(|| {
                gdex::Scheduler::main()
                    .spawn_local(async {
                        let _not_send = Rc::new(());
                        futures::future::pending::<()>().await;
                    })
                    .detach();
                pump(&glib::MainContext::default());
            })
        });
        on_main(|| {
            let task = gdex::Scheduler::main().spawn_local(async { Rc::new(3) });
            assert_eq!(*gdex::block_on(task).unwrap(), 3);
        });
    });
}

/// S10: an idle main context does not wake for `!Send` work it cannot run.
/// A task of another thread that is woken while that thread is away waits
/// for it without polling: the thread iterating the context meanwhile
/// sleeps (it used to re-arm the source every 10 ms, 100 wake-ups a
/// second). The owner runs the task when it is back.
#[test]
fn an_idle_main_context_does_not_wake_for_tasks_it_cannot_run() {
    watchdog("an_idle_main_context_does_not_wake", 60, || {
        use std::sync::mpsc::channel;
        let _lock = main_context_lock();
        let context = glib::MainContext::default();
        let (wake_tx, wake_rx) = futures::channel::oneshot::channel::<()>();
        let (away_tx, away_rx) = channel::<()>();
        let (back_tx, back_rx) = channel::<()>();
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        let owner = std::thread::Builder::new()
            .name("local-owner".into())
            .spawn(move || {
                let context = glib::MainContext::default();
                context
                    .with_thread_default(|| {
                        let r = r.clone();
                        gdex::Scheduler::main()
                            .spawn_local(async move {
                                let _not_send = Rc::new(());
                                let _ = wake_rx.await;
                                r.store(true, Ordering::SeqCst);
                            })
                            .detach();
                        pump(&context);
                    })
                    .unwrap();
                away_tx.send(()).unwrap();
                back_rx.recv().unwrap();
                context
                    .with_thread_default(|| pump_until(&context, || r.load(Ordering::SeqCst)))
                    .unwrap();
            })
            .unwrap();
        away_rx.recv().unwrap();
        let iterations = {
            let _own = context.acquire().unwrap();
            // Woken while its owner is away: queued for the owner.
            wake_tx.send(()).unwrap();
            let done = Arc::new(AtomicBool::new(false));
            let d = done.clone();
            let timer = glib::timeout_source_new(
                Duration::from_millis(200),
                None,
                glib::Priority::DEFAULT,
                move || {
                    d.store(true, Ordering::SeqCst);
                    glib::ControlFlow::Break
                },
            );
            timer.attach(Some(&context));
            let mut iterations = 0;
            while !done.load(Ordering::SeqCst) {
                context.iteration(true);
                iterations += 1;
            }
            iterations
        };
        assert!(
            !ran.load(Ordering::SeqCst),
            "the !Send task ran on a thread that is not its owner"
        );
        assert!(
            iterations < 10,
            "an idle main context iterated {iterations} times in 200 ms"
        );
        back_tx.send(()).unwrap();
        owner.join().unwrap();
        assert!(ran.load(Ordering::SeqCst), "its owner ran it when back");
    });
}

/// B4: `wait_for` on the thread that holds the default main context would
/// block the very loop that runs main-scheduler work (it never returned);
/// it is refused with a message pointing at `block_on`, which works there.
#[test]
fn wait_for_on_the_main_context_owner_panics_and_points_at_block_on() {
    watchdog("wait_for_on_the_main_context_owner_panics", 30, || {
        on_main(|| {
            let task = gdex::Scheduler::main().spawn(async { 1 });
            let msg = catch_unwind(AssertUnwindSafe(|| gdex::wait_for(task)))
                .map_err(panic_text)
                .expect_err("wait_for on the main context's owner must be refused");
            assert!(msg.contains("block_on"), "says what to do: {msg}");
            assert!(msg.contains("main context"), "says why: {msg}");
            let task = gdex::Scheduler::main().spawn(async { 2 });
            assert_eq!(gdex::block_on(task).unwrap(), 2);
        });
    });
}

/// B4: likewise on a thread that holds a context with a gdex scheduler (a
/// context scheduler's loop thread).
#[test]
fn wait_for_on_a_context_schedulers_thread_panics() {
    watchdog("wait_for_on_a_context_schedulers_thread_panics", 30, || {
        let context = glib::MainContext::new();
        let s = gdex::Scheduler::for_context(&context);
        // This thread holds the context (pushing it as thread-default
        // acquires it), as a thread running its loop does.
        context
            .with_thread_default(|| {
                let task = s.spawn(async { 1 });
                let msg = catch_unwind(AssertUnwindSafe(|| gdex::wait_for(task)))
                    .map_err(panic_text)
                    .expect_err("wait_for on a context scheduler's thread must be refused");
                assert!(msg.contains("block_on"), "says what to do: {msg}");
                // block_on iterates the thread-default context meanwhile.
                let task = s.spawn(async { 2 });
                assert_eq!(gdex::block_on(task).unwrap(), 2);
            })
            .unwrap();
    });
}

/// B4: `wait_for` on a plain thread still waits, for main-scheduler work
/// too, while another thread runs the main loop.
#[test]
fn wait_for_on_a_plain_thread_still_works() {
    watchdog("wait_for_on_a_plain_thread_still_works", 30, || {
        on_main(|| {
            let done = Arc::new(AtomicUsize::new(0));
            let d = done.clone();
            let waiter = std::thread::spawn(move || {
                let got = gdex::wait_for(gdex::Scheduler::main().spawn(async { 7 }));
                d.store(got.unwrap(), Ordering::SeqCst);
                // Wake the loop below.
                gdex::Scheduler::main().push(|| {});
            });
            pump_until(&glib::MainContext::default(), || {
                done.load(Ordering::SeqCst) != 0
            });
            waiter.join().unwrap();
            assert_eq!(done.load(Ordering::SeqCst), 7);
        });
    });
}

/// S11: frames come first (X3), but a ready main task runs within a bounded
/// time whatever else is ready. An idle source at `G_PRIORITY_DEFAULT` that
/// is always ready used to starve the main scheduler for as long as it
/// stayed (the scheduler sits below it).
#[test]
fn a_ready_main_task_runs_while_a_default_priority_source_is_always_ready() {
    watchdog("a_ready_main_task_runs_while_busy", 60, || {
        on_main(|| {
            let context = glib::MainContext::default();
            let spins = Arc::new(AtomicUsize::new(0));
            let s = spins.clone();
            let busy = glib::idle_source_new(None, glib::Priority::DEFAULT, move || {
                s.fetch_add(1, Ordering::Relaxed);
                glib::ControlFlow::Continue
            });
            busy.attach(Some(&context));
            let ran = Rc::new(Cell::new(None));
            let r = ran.clone();
            let start = Instant::now();
            gdex::Scheduler::main()
                .spawn_local(async move { r.set(Some(start.elapsed())) })
                .detach();
            // Pump (never blocks: the busy source is always ready) for up
            // to 2 s.
            while ran.get().is_none() && start.elapsed() < Duration::from_secs(2) {
                context.iteration(false);
            }
            busy.destroy();
            pump(&context);
            let waited = ran
                .get()
                .expect("the main task never ran in 2 s next to an always-ready source");
            assert!(
                waited < Duration::from_millis(500),
                "the main task waited {waited:?} (bound 50 ms)"
            );
            assert!(
                spins.load(Ordering::Relaxed) > 0,
                "the busy source ran meanwhile"
            );
        });
    });
}

const WARN_CHILD: &str = "GDEX_TEST_MAIN_IDLE_WARN_CHILD";

/// Work nobody runs is reported: main-scheduler work that waits because no
/// thread iterates the default main context is reported with one
/// `g_warning` (domain `gdex`) per episode, never repeatedly. Run in a
/// child process so that `GDEX_MAIN_IDLE_WARN_MS` (here 100 ms) is set from
/// the start.
#[test]
fn main_work_nobody_runs_is_reported_once_per_episode() {
    watchdog("main_work_nobody_runs_is_reported", 60, || {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_main_work_nobody_runs",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(WARN_CHILD, "1")
            .env("GDEX_MAIN_IDLE_WARN_MS", "100")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("child: ok"), "the child ran: {text}");
    });
}

#[test]
fn child_main_work_nobody_runs() {
    if std::env::var_os(WARN_CHILD).is_none() {
        return;
    }
    // Its own watchdog: a hung child ends itself rather than outlive the
    // parent's.
    watchdog("child_main_work_nobody_runs", 30, || {
        let warnings = Arc::new(Mutex::new(Vec::<String>::new()));
        let w = warnings.clone();
        glib::log_set_handler(
            Some("gdex"),
            glib::LogLevels::LEVEL_WARNING,
            false,
            false,
            move |_, _, message| w.lock().unwrap().push(message.to_owned()),
        );
        let count = || warnings.lock().unwrap().len();
        let wait_for_count = |n: usize| {
            let start = Instant::now();
            while count() < n && start.elapsed() < Duration::from_secs(3) {
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        // Nobody iterates the default main context.
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        gdex::Scheduler::main().push(move || {
            r.fetch_add(1, Ordering::SeqCst);
        });
        wait_for_count(1);
        assert_eq!(count(), 1, "one warning after the delay");
        let text = warnings.lock().unwrap()[0].clone();
        assert!(text.contains("default main context"), "{text}");
        assert!(text.contains("block_on"), "says what to do: {text}");
        // More work in the same episode, more time: no second warning.
        let r = ran.clone();
        gdex::Scheduler::main().push(move || {
            r.fetch_add(1, Ordering::SeqCst);
        });
        // Deliberate: five warning delays in which no second warning may come;
        // a correct scheduler stays quiet however late the check.
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(
            count(),
            1,
            "never repeatedly: {:?}",
            warnings.lock().unwrap()
        );
        // Someone runs the loop: the episode ends.
        on_main(|| {
            pump_until(&glib::MainContext::default(), || {
                ran.load(Ordering::SeqCst) == 2
            })
        });
        // A new episode is reported once more.
        gdex::Scheduler::main().push(|| {});
        wait_for_count(2);
        assert_eq!(count(), 2, "{:?}", warnings.lock().unwrap());
        println!("child: ok");
    });
}

const PRIORITIES_CHILD: &str = "GDEX_TEST_MAIN_IDLE_PRIORITIES_CHILD";

/// X4 with P12: main-context work waiting at many priorities (each its own
/// scheduler, kept for the process) while nobody iterates the default main
/// context is watched by one `gdex-main-watch` thread and reported with one
/// `g_warning`: the loop is what nobody runs. (A watch thread per priority
/// left twelve threads, for the process's life, and twelve warnings.)
#[test]
fn main_work_waiting_at_many_priorities_has_one_watch_and_one_warning() {
    watchdog("main_work_waiting_at_many_priorities", 60, || {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_main_work_waiting_at_many_priorities",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(PRIORITIES_CHILD, "1")
            .env("GDEX_MAIN_IDLE_WARN_MS", "100")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("child: ok"), "the child ran: {text}");
    });
}

#[test]
fn child_main_work_waiting_at_many_priorities() {
    if std::env::var_os(PRIORITIES_CHILD).is_none() {
        return;
    }
    watchdog("child_main_work_waiting_at_many_priorities", 30, || {
        let warnings = Arc::new(Mutex::new(Vec::<String>::new()));
        let w = warnings.clone();
        glib::log_set_handler(
            Some("gdex"),
            glib::LogLevels::LEVEL_WARNING,
            false,
            false,
            move |_, _, message| w.lock().unwrap().push(message.to_owned()),
        );
        let count = || warnings.lock().unwrap().len();
        let watches = || {
            common::thread_names()
                .iter()
                .filter(|name| *name == "gdex-main-watch")
                .count()
        };
        // Nobody iterates the default main context. The main scheduler's
        // default and eleven priorities above it, each watched (X4).
        let main = gdex::Scheduler::main();
        let ran = Arc::new(AtomicUsize::new(0));
        let priorities: Vec<glib::Priority> = std::iter::once(main.priority())
            .chain((0..11).map(|k| glib::Priority::from(glib::ffi::G_PRIORITY_DEFAULT + 10 * k)))
            .collect();
        for &priority in &priorities {
            let r = ran.clone();
            main.with_priority(priority).push(move || {
                r.fetch_add(1, Ordering::SeqCst);
            });
        }
        let start = Instant::now();
        while count() == 0 && start.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(5));
        }
        // Deliberate: five warning delays in which no second warning may
        // come, as in `child_main_work_nobody_runs`.
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(watches(), 1, "{:?}", common::thread_names());
        assert_eq!(count(), 1, "{:?}", warnings.lock().unwrap());
        // Someone runs the loop: every priority's work runs.
        on_main(|| {
            pump_until(&glib::MainContext::default(), || {
                ran.load(Ordering::SeqCst) == priorities.len()
            })
        });
        println!("child: ok");
    });
}
