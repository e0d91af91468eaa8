//! A pinned task never leaves its thread (as F2 for fibers): a task pinned
//! to a thread stays pinned to that thread, even after it exits and a new
//! thread takes its place.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// How many "gdex" criticals said a pinned future was leaked rather than
/// dropped on a foreign thread (captured for the whole process: this test
/// is alone in its binary).
fn leaks_reported() -> &'static AtomicUsize {
    static LEAKS: OnceLock<AtomicUsize> = OnceLock::new();
    LEAKS.get_or_init(|| {
        glib::log_set_handler(
            Some("gdex"),
            glib::LogLevels::LEVEL_CRITICAL,
            false,
            false,
            |_, _, message| {
                if message.contains("leaked instead") {
                    leaks_reported().fetch_add(1, Ordering::SeqCst);
                }
            },
        );
        AtomicUsize::new(0)
    })
}

/// A pinned task (`spawn_pinned` on a context scheduler) first polled on
/// thread A, which then exits, must be refused on thread B, which iterates
/// the context next: its poll panics (the task resolves to `Panicked`,
/// naming the misuse) and its future is leaked, not dropped, on B. Threads
/// are started one after the other, so B usually gets A's stack and
/// thread-local block back: an identity taken from a thread-local's address
/// calls them the same thread.
#[test]
fn a_pinned_task_is_refused_on_a_new_thread_after_its_own_exited() {
    leaks_reported();
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
        assert_eq!(leaks_reported().load(Ordering::SeqCst), rounds);
    });
}
