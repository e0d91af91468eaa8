//! S13: a nested loop iterates the dispatch it is in. `block_on` inside a
//! dispatch of any context (a context scheduler's task, a GLib callback)
//! iterates that context, thread-default or not; on the `tokio` feature's
//! runtime thread it hands the runtime's work to another thread first, so
//! tokio's timers go on while it waits.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Runs `body` on a thread of its own with a fresh context that is *not*
/// its thread-default, running that context's loop (`MainLoop::run`) until
/// `body`'s work quits it; gives what the work stored.
fn run_loop_of_a_context<T: Send + 'static>(
    body: impl FnOnce(&glib::MainContext, glib::MainLoop, Arc<Mutex<Option<T>>>) + Send + 'static,
) -> Option<T> {
    std::thread::spawn(move || {
        let context = glib::MainContext::new();
        let main_loop = glib::MainLoop::new(Some(&context), false);
        let out = Arc::new(Mutex::new(None));
        body(&context, main_loop.clone(), out.clone());
        assert!(glib::MainContext::thread_default().is_none());
        main_loop.run();
        let got = out.lock().unwrap().take();
        got
    })
    .join()
    .unwrap()
}

/// S13: a task of `Scheduler::for_context(&ctx)`, dispatched by
/// `MainLoop::run` of `ctx` (not thread-default), blocks on another task of
/// the same scheduler: `block_on` iterates `ctx`, so the other task runs.
#[test]
fn block_on_in_a_context_schedulers_task_iterates_that_context() {
    common::watchdog("block_on_in_a_context_schedulers_task", 30, || {
        let got = run_loop_of_a_context(|context, main_loop, out| {
            let scheduler = gdex::Scheduler::for_context(context);
            let same = scheduler.clone();
            scheduler
                .spawn(async move {
                    let other = same.spawn(async {
                        gdex::yield_now().await;
                        7
                    });
                    *out.lock().unwrap() = Some(gdex::block_on(other).unwrap());
                    main_loop.quit();
                })
                .detach();
        });
        assert_eq!(got, Some(7));
    });
}

/// S13: the same from a plain GLib callback attached to `ctx`: the nested
/// loop iterates the context whose source is dispatching, so a task of its
/// scheduler and a GLib timeout there both run meanwhile.
#[test]
fn block_on_in_a_glib_callback_iterates_its_context() {
    common::watchdog("block_on_in_a_glib_callback", 30, || {
        let got = run_loop_of_a_context(|context, main_loop, out| {
            let scheduler = gdex::Scheduler::for_context(context);
            let on_context = context.clone();
            let source = glib::idle_source_new(None, glib::Priority::DEFAULT, move || {
                let task = scheduler.spawn(async { 5 });
                let (tx, rx) = futures::channel::oneshot::channel::<u32>();
                let mut tx = Some(tx);
                glib::timeout_source_new(
                    Duration::from_millis(1),
                    None,
                    glib::Priority::DEFAULT,
                    move || {
                        let _ = tx.take().unwrap().send(1);
                        glib::ControlFlow::Break
                    },
                )
                .attach(Some(&on_context));
                let sum = gdex::block_on(async move { task.await.unwrap() + rx.await.unwrap() });
                *out.lock().unwrap() = Some(sum);
                main_loop.quit();
                glib::ControlFlow::Break
            });
            source.attach(Some(context));
        });
        assert_eq!(got, Some(6));
    });
}

/// S13: a context pushed as thread-default inside the dispatch is the
/// caller's explicit choice: `block_on` iterates it (GIO callbacks of calls
/// made meanwhile go there), as before.
#[test]
fn block_on_prefers_a_thread_default_pushed_inside_the_dispatch() {
    common::watchdog("block_on_prefers_a_pushed_thread_default", 30, || {
        let got = run_loop_of_a_context(|context, main_loop, out| {
            let source = glib::idle_source_new(None, glib::Priority::DEFAULT, move || {
                let inner = glib::MainContext::new();
                let ran = inner
                    .with_thread_default(|| {
                        let (tx, rx) = futures::channel::oneshot::channel::<u32>();
                        let mut tx = Some(tx);
                        // Attached to `inner` only: it fires only if
                        // `block_on` iterates `inner`.
                        glib::idle_source_new(None, glib::Priority::DEFAULT, move || {
                            let _ = tx.take().unwrap().send(3);
                            glib::ControlFlow::Break
                        })
                        .attach(Some(&glib::MainContext::thread_default().unwrap()));
                        gdex::block_on(rx).unwrap()
                    })
                    .unwrap();
                *out.lock().unwrap() = Some(ran);
                main_loop.quit();
                glib::ControlFlow::Break
            });
            source.attach(Some(context));
        });
        assert_eq!(got, Some(3));
    });
}

/// S13 with the `tokio` feature: `block_on` and `wait_for` inside a task
/// on the `gdex-tokio` runtime's thread (its only worker, which drives
/// tokio's timers) wait for a tokio timer: the worker's core is handed to
/// another thread first, so the timer fires.
#[cfg(feature = "tokio")]
#[test]
fn block_on_and_wait_for_on_the_tokio_runtime_thread_keep_its_timers_going() {
    common::watchdog("block_on_on_the_tokio_runtime_thread", 30, || {
        let handle = gdex::tokio_handle();
        let blocked = handle.spawn(async {
            gdex::block_on(async {
                tokio::time::sleep(Duration::from_millis(5)).await;
                1
            })
        });
        let waited = handle.spawn(async {
            gdex::wait_for(async {
                tokio::time::sleep(Duration::from_millis(5)).await;
                2
            })
        });
        let sum = gdex::wait_for(async { blocked.await.unwrap() + waited.await.unwrap() });
        assert_eq!(sum, 3);
        // The runtime goes on serving gdex's tokio timers after.
        let after = gdex::wait_for(async {
            tokio::time::sleep(Duration::from_millis(1)).await;
            4
        });
        assert_eq!(after, 4);
    });
}

/// S13 with the `tokio` feature: the hand-off is made only on gdex's own
/// runtime's threads. A gdex task dispatched inside a task of an app's
/// current-thread tokio runtime, and a `LocalSet` task of a multi-thread
/// runtime's `block_on`, run `block_on`'s nested loop as before: tokio's
/// `block_in_place` would panic there ("can call blocking only when
/// running on the multi-threaded runtime").
#[cfg(feature = "tokio")]
#[test]
fn block_on_inside_an_apps_tokio_tasks_runs_a_nested_loop() {
    common::watchdog("block_on_inside_an_apps_tokio_tasks", 30, || {
        let context = glib::MainContext::new();
        let scheduler = gdex::Scheduler::for_context(&context);
        let out = Arc::new(Mutex::new(None));
        let o = out.clone();
        let task = scheduler.spawn(async move {
            *o.lock().unwrap() = Some(gdex::block_on(async { 7 }));
        });
        let current_thread = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let seen = out.clone();
        current_thread.block_on(async move {
            tokio::spawn(async move {
                while seen.lock().unwrap().is_none() {
                    context.iteration(false);
                }
            })
            .await
            .unwrap();
        });
        let ended = gdex::block_on(task);
        assert_eq!(
            *out.lock().unwrap(),
            Some(7),
            "the task ended with {ended:?}"
        );

        let multi_thread = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        let got = multi_thread.block_on(local.run_until(async {
            tokio::task::spawn_local(async { gdex::block_on(async { 5 }) })
                .await
                .unwrap()
        }));
        assert_eq!(got, 5);
        let got = current_thread.block_on(async {
            tokio::spawn(async { gdex::block_on(async { 6 }) })
                .await
                .unwrap()
        });
        assert_eq!(got, 6);
    });
}
