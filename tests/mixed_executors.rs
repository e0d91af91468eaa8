//! gdex beside glib-rs's own executor in one app (docs/migrating.md): an
//! app that moves one part to gdex keeps the rest on
//! `glib::spawn_future_local` and `MainContext::spawn_local`, and both
//! must behave on one main loop. Each executor's tasks make progress while
//! the other's flood the loop (X3, S11), a task of either awaits the
//! other's handle, and glib-rs's handles and gio-rs's `_future` calls are
//! awaited from gdex's pool tasks, fibers and main scheduler.
//!
//! GTK's frames beside both executors are measured in a real window by
//! `tests/apps.rs` (feature `gtk`).

use crate::common;

use std::cell::Cell;
use std::rc::Rc;

use common::{on_main, pump_until, watchdog, yield_once, TempDir};
use gio::prelude::*;

/// A flood that is always ready: tasks that yield in a loop until told to
/// stop, counting their turns and how many of them are still running.
#[derive(Clone, Default)]
struct Flood {
    stop: Rc<Cell<bool>>,
    turns: Rc<Cell<usize>>,
    running: Rc<Cell<usize>>,
}

impl Flood {
    fn on_gdex(tasks: usize) -> Flood {
        let flood = Flood::default();
        for _ in 0..tasks {
            let f = flood.started();
            gdex::Scheduler::main()
                .spawn_local(async move {
                    while !f.stop.get() {
                        f.turns.set(f.turns.get() + 1);
                        gdex::yield_now().await;
                    }
                    f.running.set(f.running.get() - 1);
                })
                .detach();
        }
        flood
    }

    fn on_glib_rs(tasks: usize) -> Flood {
        let flood = Flood::default();
        for _ in 0..tasks {
            let f = flood.started();
            glib::spawn_future_local(async move {
                while !f.stop.get() {
                    f.turns.set(f.turns.get() + 1);
                    yield_once().await;
                }
                f.running.set(f.running.get() - 1);
            });
        }
        flood
    }

    fn started(&self) -> Flood {
        self.running.set(self.running.get() + 1);
        self.clone()
    }

    /// Stops it and runs the loop until each of its tasks has returned.
    fn stop(&self) {
        self.stop.set(true);
        pump_until(&glib::MainContext::default(), || self.running.get() == 0);
    }

    /// Stops it when dropped, should the test fail before it does: the
    /// next test on the main context must not inherit it.
    fn stopped_on_drop(&self) -> impl Drop + '_ {
        struct Guard<'a>(&'a Flood);
        impl Drop for Guard<'_> {
            fn drop(&mut self) {
                self.0.stop();
            }
        }
        Guard(self)
    }
}

#[test]
fn a_glib_rs_task_makes_progress_under_a_flood_of_gdex_main_tasks() {
    watchdog("glib-rs under a gdex flood", 30, || {
        on_main(|| {
            // The main scheduler runs its tasks in slices of bounded time
            // (X3), so an always-ready flood of them leaves the loop to
            // glib-rs's timers between slices.
            let flood = Flood::on_gdex(64);
            let _stop = flood.stopped_on_drop();
            let ticks = Rc::new(Cell::new(0));
            let t = ticks.clone();
            glib::spawn_future_local(async move {
                for _ in 0..50 {
                    glib::timeout_future(std::time::Duration::from_millis(1)).await;
                    t.set(t.get() + 1);
                }
            });
            let main = glib::MainContext::default();
            assert!(
                common::pump_for(&main, std::time::Duration::from_secs(20), || ticks.get()
                    == 50),
                "the glib-rs task ticked {} of 50 times under the gdex flood",
                ticks.get()
            );
            assert!(flood.turns.get() > 0, "the gdex flood never ran");
        })
    });
}

#[test]
fn a_gdex_main_task_makes_progress_under_a_flood_of_glib_rs_tasks() {
    watchdog("gdex under a glib-rs flood", 30, || {
        on_main(|| {
            // glib-rs's tasks run at G_PRIORITY_DEFAULT, above the main
            // scheduler's slices (X3): without S11 a flood of them, always
            // ready, would starve every gdex main task.
            let flood = Flood::on_glib_rs(64);
            let _stop = flood.stopped_on_drop();
            let done = Rc::new(Cell::new(0));
            let d = done.clone();
            let task = gdex::Scheduler::main().spawn_local(async move {
                for _ in 0..20 {
                    gdex::yield_now().await;
                    d.set(d.get() + 1);
                }
            });
            let main = glib::MainContext::default();
            let before = flood.turns.get();
            // Bounded: without S11 this would wait forever.
            assert!(
                common::pump_for(&main, std::time::Duration::from_secs(20), || done.get()
                    == 20),
                "the gdex task got {} of its 20 turns under the glib-rs flood",
                done.get()
            );
            assert!(
                flood.turns.get() > before,
                "the glib-rs flood stopped running"
            );
            gdex::block_on(task).unwrap();
        })
    });
}

#[test]
fn each_executor_awaits_the_others_handle_on_the_main_loop() {
    watchdog("handles across executors", 30, || {
        on_main(|| {
            let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
            let scheduler = pool.scheduler();

            // A gdex main task awaits glib-rs's handle; its value, or
            // glib-rs's JoinError, comes through.
            let glib_handle = glib::spawn_future_local(async {
                yield_once().await;
                Rc::new("from glib-rs")
            });
            let got =
                gdex::block_on(gdex::Scheduler::main().spawn_local(async move {
                    *glib_handle.await.expect("glib-rs's task finished")
                }))
                .unwrap();
            assert_eq!(got, "from glib-rs");

            // A glib-rs task awaits a gdex main task and a gdex pool task.
            let local = gdex::Scheduler::main().spawn_local(async {
                gdex::yield_now().await;
                Rc::new(2)
            });
            let remote = scheduler.spawn(async { std::thread::current().name().map(String::from) });
            let both = glib::spawn_future_local(async move {
                let local = *local.await.unwrap();
                let remote = remote.await.unwrap();
                (local, remote)
            });
            let (local, remote) = gdex::block_on(both).unwrap();
            assert_eq!(local, 2);
            assert!(
                remote.as_deref().unwrap_or("").starts_with("gdex-worker-"),
                "the pool task ran on {remote:?}"
            );

            // A gdex task that panics is an Err for glib-rs's task too,
            // not a panic on the main loop.
            let panicking = scheduler.spawn(async {
                panic!("on purpose");
            });
            let seen = gdex::block_on(glib::spawn_future_local(panicking)).unwrap();
            match seen {
                Err(gdex::Error::Panicked(message)) => assert!(message.contains("on purpose")),
                other => panic!("expected Panicked, got {other:?}"),
            }
            pool.shutdown();
        })
    });
}

#[test]
fn dropping_a_glib_rs_handle_detaches_where_dropping_a_task_cancels() {
    // The pitfall docs/migrating.md names: the same line of code, two
    // outcomes.
    watchdog("drop a handle", 30, || {
        on_main(|| {
            let main = glib::MainContext::default();
            let (glib_ran, gdex_ran) = (Rc::new(Cell::new(false)), Rc::new(Cell::new(false)));
            let r = glib_ran.clone();
            drop(glib::spawn_future_local(async move {
                yield_once().await;
                r.set(true);
            }));
            let r = gdex_ran.clone();
            drop(gdex::Scheduler::main().spawn_local(async move {
                gdex::yield_now().await;
                r.set(true);
            }));
            pump_until(&main, || glib_ran.get());
            common::pump_during(&main, std::time::Duration::from_millis(50));
            assert!(!gdex_ran.get(), "a dropped gdex task ran on");
        })
    });
}

#[test]
fn glib_rs_handles_and_gio_futures_are_awaited_from_pool_tasks_fibers_and_main() {
    watchdog("glib-rs and gio-rs from gdex", 60, || {
        on_main(|| {
            let dir = TempDir::new("mixed-executors");
            let path = dir.0.join("note.txt");
            std::fs::write(&path, b"hello from gio").unwrap();
            let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
            let scheduler = pool.scheduler();

            // In a pool task: glib-rs's spawn on the thread-default context
            // (the worker's) and its handle; a gio-rs `_future` call, whose
            // callback comes on the worker's context.
            let p = path.clone();
            let from_pool = scheduler.spawn(async move {
                let worker = std::thread::current().id();
                // A !Send future (it holds an Rc across an await), run by
                // glib-rs on the worker's context.
                let local = glib::spawn_future_local(async move {
                    let five = Rc::new(5);
                    yield_once().await;
                    (std::thread::current().id(), *five)
                });
                let (ran_on, five) = local.await.expect("glib-rs's task on the worker");
                assert_eq!(ran_on, worker, "glib::spawn_future_local left the worker");
                let sent = glib::spawn_future(async { 6 }).await.unwrap();
                let (bytes, _etag) = gio::File::for_path(&p).load_contents_future().await?;
                assert_eq!(std::thread::current().id(), worker);
                Ok::<_, glib::Error>((five + sent, bytes.to_vec()))
            });
            let (eleven, bytes) = gdex::block_on(from_pool).unwrap().unwrap();
            assert_eq!(eleven, 11);
            assert_eq!(bytes, b"hello from gio");

            // A glib-rs task on the main loop, awaited from a pool task: its
            // handle is Send, and the main loop runs it.
            let on_main_loop =
                glib::MainContext::default().spawn(async { std::thread::current().id() });
            let main_thread = std::thread::current().id();
            let awaited = scheduler.spawn(async move { on_main_loop.await.unwrap() });
            assert_eq!(gdex::block_on(awaited).unwrap(), main_thread);

            // In a fiber: the same, waited on in straight-line code.
            let p = path.clone();
            let from_fiber = scheduler.spawn_fiber(move || {
                let handle = glib::spawn_future_local(async { Rc::new(7) });
                let seven = *gdex::fiber::wait(handle).expect("glib-rs's task in a fiber");
                let contents = gdex::fiber::wait(gio::File::for_path(&p).load_contents_future())
                    .unwrap()
                    .0;
                (seven, contents.len())
            });
            assert_eq!(gdex::block_on(from_fiber).unwrap(), (7, 14));

            // On the main scheduler.
            let p = path.clone();
            let from_main = gdex::Scheduler::main().spawn_local(async move {
                let handle = glib::spawn_future_local(async { Rc::new(8) });
                let eight = *handle.await.unwrap();
                let info = gio::File::for_path(&p)
                    .query_info_future(
                        "standard::size",
                        gio::FileQueryInfoFlags::NONE,
                        glib::Priority::DEFAULT,
                    )
                    .await
                    .unwrap();
                (eight, info.size())
            });
            assert_eq!(gdex::block_on(from_main).unwrap(), (8, 14));
            pool.shutdown();
        })
    });
}
