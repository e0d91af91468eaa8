//! Cancellation reaches GIO (X1) and GObjects (X2): every task's
//! `gio::Cancellable`, `gdex::Cancellable` bridged to `gio::Cancellable`,
//! and tasks bound to an object.

use crate::common;

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use common::{watchdog, Counted};
use futures::channel::oneshot;
use gdex::Promise;
use gio::prelude::*;

/// A connected socket pair nobody writes to: reads from the first never
/// get data. The second end must be kept alive.
fn silent_socket() -> (OwnedFd, UnixStream) {
    let (ours, theirs) = UnixStream::pair().expect("socketpair");
    (OwnedFd::from(ours), theirs)
}

/// X1: a task reading from a GIO socket stream that never gets data is cancelled;
/// the read ends with G_IO_ERROR_CANCELLED through the task's own
/// cancellable, and `cancel().await` returns after the task's future (and
/// the stream it held) has been dropped.
#[test]
fn cancelling_a_task_cancels_its_gio_read() {
    watchdog("cancelling_a_task_cancels_its_gio_read", 30, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let (read_end, _write_end) = silent_socket();
        let (started_tx, started) = mpsc::channel();
        let (ended_tx, ended) = mpsc::channel::<Result<usize, glib::Error>>();
        let dropped = Arc::new(AtomicUsize::new(0));
        let guard = Counted(dropped.clone());
        let task = pool.scheduler().spawn_pinned(move || async move {
            let _guard = guard;
            let socket = gio::Socket::from_fd(read_end).unwrap();
            let connection = socket.connection_factory_create_connection();
            let stream = connection.input_stream();
            let cancellable = gdex::current_cancellable().expect("inside a task");
            let (done_tx, done) = futures::channel::oneshot::channel::<()>();
            stream.read_bytes_async(
                64,
                glib::Priority::DEFAULT,
                Some(&cancellable),
                move |result| {
                    ended_tx.send(result.map(|b| b.len())).unwrap();
                    let _ = done_tx.send(());
                },
            );
            started_tx.send(()).unwrap();
            let _ = done.await;
            drop(connection);
            unreachable!("the socket never gets data");
        });
        started.recv().unwrap();
        // Nothing comes: the read is really pending. Deliberate: a 50 ms
        // window in which nothing may happen; a correct read never ends in
        // it, however late the window.
        if let Ok(early) = ended.recv_timeout(Duration::from_millis(50)) {
            panic!("the read ended before the cancel: {early:?}");
        }
        assert_eq!(gdex::block_on(task.cancel()), None);
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            1,
            "cancel().await returned before the drop"
        );
        let result = ended
            .recv_timeout(Duration::from_secs(10))
            .expect("the read never ended");
        let err = result.expect_err("a read of a silent socket cannot succeed");
        assert!(
            err.matches(gio::IOErrorEnum::Cancelled),
            "the read ended with {err:?}, not G_IO_ERROR_CANCELLED"
        );
    });
}

/// X1: dropping the handle cancels the cancellable too, and a cancellable
/// asked for after the cancellation is born cancelled.
#[test]
fn dropping_a_task_cancels_its_cancellable() {
    watchdog("dropping_a_task_cancels_its_cancellable", 30, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let (tx, rx) = mpsc::channel();
        let task = pool.scheduler().spawn(async move {
            tx.send(gdex::current_cancellable().unwrap()).unwrap();
            std::future::pending::<()>().await
        });
        let cancellable = rx.recv().unwrap();
        assert!(!cancellable.is_cancelled());
        drop(task);
        assert!(cancellable.is_cancelled(), "the drop did not cancel it");

        // A blocking job's cancellable (sync GIO calls take one).
        let (tx, rx) = mpsc::channel();
        let (go_tx, go) = mpsc::channel::<()>();
        let job = pool.spawn_blocking(move || {
            tx.send(gdex::current_cancellable().unwrap()).unwrap();
            let _ = go.recv();
        });
        let cancellable = rx.recv().unwrap();
        drop(job);
        assert!(cancellable.is_cancelled());
        drop(go_tx);
    });
}

/// A `!Send` task on an owner thread's context (no pool worker: the
/// record's OFF_WORKER mark) asks for its cancellable while idle on that
/// context; dropping its handle cancels it after the future is dropped.
#[test]
fn a_context_task_off_any_worker_gets_its_cancellable_cancelled() {
    watchdog("a_context_task_off_any_worker", 30, || {
        common::on_own_context(|context| {
            let here = gdex::Scheduler::thread_default().unwrap();
            let (promise, waits) = Promise::<u32>::new();
            let (tx, rx) = mpsc::channel::<gio::Cancellable>();
            let dropped = Arc::new(AtomicUsize::new(0));
            let counted = Counted(dropped.clone());
            let task = here.spawn_local(async move {
                let _counted = counted;
                let cancellable = gdex::current_cancellable().unwrap();
                tx.send(cancellable).unwrap();
                waits.await
            });
            let cancellable = loop {
                common::pump(context);
                if let Ok(c) = rx.try_recv() {
                    break c;
                }
            };
            common::pump(context);
            assert!(!cancellable.is_cancelled());
            drop(task);
            common::pump_polling(context, || dropped.load(Ordering::SeqCst) == 1);
            assert!(cancellable.is_cancelled());
            drop(promise);
        })
    });
}

/// Cancelling a `gdex::Cancellable` rejects its waiters and stops a GIO
/// call made with its `gio::Cancellable` side.
#[test]
fn gdex_cancellable_rejects_waiters_and_stops_gio() {
    watchdog("gdex_cancellable_rejects_waiters_and_stops_gio", 30, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let cancellable = gdex::Cancellable::new();
        let polled = Arc::new(AtomicUsize::new(0));
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                pool.scheduler().spawn(common::after_first_poll(
                    &polled,
                    cancellable.future::<u32>(),
                ))
            })
            .collect();
        let (read_end, _write_end) = silent_socket();
        let gio_side: gio::Cancellable = cancellable.clone().into();
        let (started_tx, started) = mpsc::channel();
        let read = pool.scheduler().spawn_pinned(move || async move {
            let socket = gio::Socket::from_fd(read_end).unwrap();
            let connection = socket.connection_factory_create_connection();
            let stream = connection.input_stream();
            // (gio-rs's `_future` calls make their own cancellable: a
            // callback-style call takes ours.)
            let (tx, rx) = futures::channel::oneshot::channel();
            stream.read_bytes_async(64, glib::Priority::DEFAULT, Some(&gio_side), move |r| {
                let _ = tx.send(r.map(|b| b.len()));
            });
            started_tx.send(()).unwrap();
            let result = rx.await.unwrap();
            drop(connection);
            result
        });
        started.recv().unwrap();
        // Every waiter has been polled and waits: the cancel wakes them.
        common::wait_until(|| polled.load(Ordering::SeqCst) == 3);
        for w in &waiters {
            assert!(!w.is_finished(), "a waiter resolved before the cancel");
        }
        cancellable.cancel();
        for w in waiters {
            assert!(matches!(
                gdex::block_on(w).unwrap(),
                Err(gdex::Error::Cancelled)
            ));
        }
        let err = gdex::block_on(read)
            .unwrap()
            .expect_err("the read cannot succeed");
        assert!(err.matches(gio::IOErrorEnum::Cancelled), "{err:?}");
    });
}

/// The reverse bridge: cancelling a `gio::Cancellable` (as C code would)
/// rejects the waiters of the `gdex::Cancellable` made from it.
#[test]
fn gio_cancellable_cancels_gdex_waiters() {
    watchdog("gio_cancellable_cancels_gdex_waiters", 30, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let from_c = gio::Cancellable::new();
        let ours = gdex::Cancellable::from(from_c.clone());
        let dropped = Arc::new(AtomicUsize::new(0));
        let guard = Counted(dropped.clone());
        let polled = Arc::new(AtomicUsize::new(0));
        let work = {
            let ours = ours.clone();
            pool.scheduler()
                .spawn(common::after_first_poll(&polled, async move {
                    let _guard = guard;
                    ours.run(std::future::pending::<()>()).await
                }))
        };
        let waiter = pool
            .scheduler()
            .spawn(common::after_first_poll(&polled, ours.future::<()>()));
        // Both have been polled and wait: the cancel wakes them.
        common::wait_until(|| polled.load(Ordering::SeqCst) == 2);
        assert!(!work.is_finished() && !waiter.is_finished());
        assert!(!ours.is_cancelled());
        from_c.cancel();
        assert!(ours.is_cancelled());
        assert!(matches!(
            gdex::block_on(waiter).unwrap(),
            Err(gdex::Error::Cancelled)
        ));
        assert!(matches!(
            gdex::block_on(work).unwrap(),
            Err(gdex::Error::Cancelled)
        ));
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        // A cancellable cancelled before anyone waits rejects at once.
        assert!(gdex::block_on(ours.future::<()>())
            .unwrap_err()
            .is_cancelled());
    });
}

/// X2: dropping the last strong reference of a GObject cancels the task
/// bound to it: its future is dropped and its handle gives Cancelled. A
/// task that finishes first unhooks itself: the object lives on unharmed.
#[test]
fn disposing_an_object_cancels_its_bound_task() {
    watchdog("disposing_an_object_cancels_its_bound_task", 30, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        // On the pool, with a Send + Sync object.
        let object = gio::Cancellable::new();
        let dropped = Arc::new(AtomicUsize::new(0));
        let guard = Counted(dropped.clone());
        let (tx, rx) = mpsc::channel();
        let task = pool.scheduler().spawn_bound(&object, async move {
            let _guard = guard;
            tx.send(gdex::current_cancellable().unwrap()).unwrap();
            std::future::pending::<()>().await
        });
        let task_cancellable = rx.recv().unwrap();
        assert_eq!(dropped.load(Ordering::SeqCst), 0);
        drop(object);
        assert!(matches!(gdex::block_on(task), Err(gdex::Error::Cancelled)));
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            1,
            "the bound future was not dropped"
        );
        assert!(
            task_cancellable.is_cancelled(),
            "X1: its GIO calls stop too"
        );

        // On the main thread, with a plain (thread-bound) GObject.
        common::on_main(|| {
            let object = glib::Object::new::<glib::Object>();
            let dropped = Arc::new(AtomicUsize::new(0));
            let guard = Counted(dropped.clone());
            let weak = object.downgrade();
            let polled = Arc::new(AtomicUsize::new(0));
            let task = gdex::spawn_local_bound(
                &object,
                common::after_first_poll(&polled, async move {
                    let _guard = guard;
                    // Deliberate: a wait that outlives the test; only the
                    // object's disposal ends it.
                    gdex::sleep(Duration::from_secs(60)).await;
                    weak.upgrade().is_some()
                }),
            );
            // The bound task has started and waits: run the main context
            // until it has been polled, instead of a 5 ms block_on.
            common::pump_until(&glib::MainContext::default(), || {
                polled.load(Ordering::SeqCst) == 1
            });
            assert!(!task.is_finished());
            drop(object);
            assert!(matches!(gdex::block_on(task), Err(gdex::Error::Cancelled)));
            assert_eq!(dropped.load(Ordering::SeqCst), 1);

            // Finishing first unhooks the weak notification.
            let object = glib::Object::new::<glib::Object>();
            for _ in 0..100 {
                let t = gdex::spawn_local_bound(&object, async { 1 });
                assert_eq!(gdex::block_on(t).unwrap(), 1);
            }
            let watched = Arc::new(AtomicUsize::new(0));
            let w = watched.clone();
            object.add_weak_ref_notify(move || {
                w.fetch_add(1, Ordering::SeqCst);
            });
            drop(object);
            assert_eq!(watched.load(Ordering::SeqCst), 1);
        });
    });
}

/// X1 with F4: a fiber's cancellable is cancelled when its handle is
/// dropped, so a synchronous GIO call it makes afterwards refuses at once,
/// and the fiber still leaves through its own return.
#[test]
fn a_dropped_fiber_cancels_its_cancellable() {
    watchdog("a_dropped_fiber_cancels_its_cancellable", 30, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let (tx, rx) = mpsc::channel();
        let fiber = pool.scheduler().spawn_fiber(move || {
            let cancellable = gdex::current_cancellable().expect("a fiber is a task");
            tx.send(cancellable.clone()).unwrap();
            let waited = gdex::fiber::wait(std::future::pending::<()>());
            assert!(matches!(waited, Err(gdex::Error::Cancelled)));
            // A synchronous GIO call with the fiber's cancellable refuses.
            let file = gio::File::for_path("/proc/self/status");
            let read = file.load_contents(Some(&cancellable));
            tx.send(cancellable).unwrap();
            drop(tx);
            read.map(|_| ())
        });
        let cancellable = rx.recv().unwrap();
        assert!(!cancellable.is_cancelled());
        drop(fiber);
        let after = rx.recv().unwrap();
        assert!(after.is_cancelled());
        assert!(rx.recv().is_err(), "the fiber returned");
    });
}

/// A fiber on a context scheduler (F4, S5): dropping its handle cancels a
/// pending wait; a later wait on a ready future
/// still returns Ok (documented); a destructor's wait during the normal
/// cancellation return sees a live poll.
#[test]
fn held_fibers_on_context_schedulers_are_cancelled_by_handle_drop() {
    common::watchdog("fibers_on_context", 30, || {
        let context = glib::MainContext::new();
        let s = gdex::Scheduler::for_context(&context);
        let log = Arc::new(Mutex::new(Vec::<String>::new()));
        let (_keep, rx) = oneshot::channel::<()>();
        let l = log.clone();
        let fiber = s.spawn_fiber(move || {
            struct Flush(Arc<Mutex<Vec<String>>>);
            impl Drop for Flush {
                fn drop(&mut self) {
                    let r = gdex::fiber::wait_output(std::future::ready(1));
                    self.0.lock().unwrap().push(format!("flush {r:?}"));
                }
            }
            let _flush = Flush(l.clone());
            let r = gdex::fiber::wait(rx);
            l.lock().unwrap().push(format!("wait {r:?}"));
            let r = gdex::fiber::wait_output(std::future::ready(2));
            l.lock().unwrap().push(format!("ready {r:?}"));
            let r = gdex::fiber::yield_fiber();
            l.lock().unwrap().push(format!("yield {r:?}"));
        });
        context
            .with_thread_default(|| {
                common::pump(&context);
                drop(fiber);
                let t0 = Instant::now();
                while log.lock().unwrap().len() < 4 && t0.elapsed() < Duration::from_secs(5) {
                    context.iteration(false);
                }
            })
            .unwrap();
        assert_eq!(
            *log.lock().unwrap(),
            [
                "wait Err(Cancelled)",
                "ready Ok(2)",
                "yield Err(Cancelled)",
                "flush Ok(1)"
            ]
        );
    });
}

/// Cancels its cancellable when dropped.
struct CancelOnDrop(gdex::Cancellable);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// X1: a [`gdex::CancelledFuture`] dropped inside its own cancellable's
/// `cancelled` emission, on the emitting thread, lets its handler go
/// without waiting for that emission to end (GLib's
/// `g_cancellable_disconnect` waits for it, up to 2.74 at least: called
/// from inside the emission on the same thread, it waits for itself). The
/// drop happens so when a thread that owns a context exits: its queued
/// `!Send` work is dropped there, one destructor cancels the cancellable,
/// and a `!Send` task of that thread idle on the cancellable's future is
/// woken and, its thread being gone, dropped at once, on its own thread,
/// inside the emission.
#[test]
fn a_cancelled_future_dropped_inside_its_cancellation_does_not_wait_for_itself() {
    watchdog(
        "a_cancelled_future_dropped_inside_its_cancellation",
        30,
        || {
            let cancellable = gdex::Cancellable::new();
            let dropped = Arc::new(AtomicUsize::new(0));
            let (c, d) = (cancellable.clone(), dropped.clone());
            std::thread::Builder::new()
                .name("exiting-owner".into())
                .spawn(move || {
                    let context = glib::MainContext::new();
                    let scheduler = gdex::Scheduler::for_context(&context);
                    context
                        .with_thread_default(|| {
                            let polled = Arc::new(AtomicUsize::new(0));
                            let (guard, cancelled) = (Counted(d), c.future::<()>());
                            let not_send = std::rc::Rc::new(());
                            scheduler
                                .spawn_local(common::after_first_poll(&polled, async move {
                                    let _guard = guard;
                                    let _ = cancelled.await;
                                    drop(not_send);
                                }))
                                .detach();
                            common::pump_until(&context, || polled.load(Ordering::SeqCst) == 1);
                            // Queued, never run: dropped when this thread exits.
                            let cancel_on_drop = CancelOnDrop(c);
                            scheduler
                                .spawn_local(async move {
                                    let _cancel_on_drop = cancel_on_drop;
                                })
                                .detach();
                        })
                        .expect("a fresh context is free");
                })
                .unwrap()
                .join()
                .unwrap();
            assert!(cancellable.is_cancelled());
            assert_eq!(dropped.load(Ordering::SeqCst), 1, "the waiter was dropped");
        },
    );
}

/// S14: a `!Send` task's cancellation handlers run on its own thread. A
/// task of this thread's context connects a `connect_cancelled_local`
/// handler (a `!Send` reaction: glib-rs's thread guard aborts the process
/// if GLib emits it on another thread); its handle is dropped on another
/// thread, and another such task is cancelled (`cancel().await`) from
/// another thread: each handler runs here, on the owner thread, once.
#[test]
fn a_local_tasks_cancelled_handlers_run_on_its_own_thread() {
    watchdog(
        "a_local_tasks_cancelled_handlers_run_on_its_own_thread",
        30,
        || {
            common::on_own_context(|context| {
                let here = gdex::Scheduler::thread_default().unwrap();
                let me = std::thread::current().id();
                let ran = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
                let (armed_tx, armed) = mpsc::channel::<()>();
                let spawn = |tag: &'static str| {
                    let (ran, armed_tx) = (ran.clone(), armed_tx.clone());
                    here.spawn_local(async move {
                        let cancellable = gdex::current_cancellable().unwrap();
                        cancellable.connect_cancelled_local(move |_| {
                            ran.borrow_mut().push((tag, std::thread::current().id()));
                        });
                        armed_tx.send(()).unwrap();
                        std::future::pending::<()>().await
                    })
                };
                let dropped = spawn("dropped");
                let cancelled = spawn("cancelled");
                // Both tasks have connected their handler.
                let mut armed_count = 0;
                common::pump_polling(context, || {
                    armed_count += armed.try_iter().count();
                    armed_count == 2
                });
                std::thread::spawn(move || drop(dropped)).join().unwrap();
                let canceller = std::thread::spawn(move || gdex::wait_for(cancelled.cancel()));
                common::pump_polling(context, || {
                    ran.borrow().len() == 2 && canceller.is_finished()
                });
                assert_eq!(canceller.join().unwrap(), None);
                let mut seen = ran.borrow().clone();
                seen.sort_by_key(|(tag, _)| *tag);
                assert_eq!(seen, vec![("cancelled", me), ("dropped", me)]);
            });
        },
    );
}

/// S14 on a pool: a pinned task's `!Send` cancellation handler runs on its
/// worker when its handle is dropped on the test thread; a `Send` task's
/// cancellable is still cancelled at once by the drop (X1), on the dropping
/// thread.
#[test]
fn a_pinned_tasks_cancelled_handler_runs_on_its_worker() {
    watchdog(
        "a_pinned_tasks_cancelled_handler_runs_on_its_worker",
        30,
        || {
            let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
            let (tx, rx) = mpsc::channel::<(String, std::thread::ThreadId)>();
            let (armed_tx, armed) = mpsc::channel::<std::thread::ThreadId>();
            let task = pool.scheduler().spawn_pinned(move || async move {
                let cancellable = gdex::current_cancellable().unwrap();
                let only_here = std::rc::Rc::new(tx);
                cancellable.connect_cancelled_local(move |_| {
                    let name = std::thread::current().name().unwrap_or("").to_owned();
                    only_here.send((name, std::thread::current().id())).unwrap();
                });
                armed_tx.send(std::thread::current().id()).unwrap();
                std::future::pending::<()>().await
            });
            let worker = armed.recv().unwrap();
            drop(task);
            let (name, ran_on) = rx.recv().unwrap();
            assert_eq!(
                ran_on, worker,
                "the handler ran on {name:?}, not the task's worker"
            );

            let (tx, rx) = mpsc::channel();
            let task = pool.scheduler().spawn(async move {
                tx.send(gdex::current_cancellable().unwrap()).unwrap();
                std::future::pending::<()>().await
            });
            let cancellable = rx.recv().unwrap();
            drop(task);
            assert!(
                cancellable.is_cancelled(),
                "a Send task's drop cancels at once"
            );
        },
    );
}

/// S14 for a `Send` task of a context scheduler: it only ever runs on the
/// thread that iterates its context, so a `!Send` reaction to its
/// cancellable (`connect_cancelled_local`) is as natural there as in a
/// `spawn_local` task. Its handle dropped on another thread, the handler
/// runs on the context's thread.
#[test]
fn a_send_context_tasks_cancelled_handler_runs_on_its_contexts_thread() {
    watchdog("a_send_context_tasks_cancelled_handler", 30, || {
        let (handle_tx, handle_rx) = mpsc::channel::<gdex::Task<()>>();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let ran_on = Arc::new(Mutex::new(None::<std::thread::ThreadId>));
        let (r, seen) = (ran_on.clone(), ran_on.clone());
        let owner = std::thread::spawn(move || {
            let context = glib::MainContext::new();
            let scheduler = gdex::Scheduler::for_context(&context);
            let _held = context.acquire().unwrap();
            let (armed_tx, armed) = mpsc::channel::<()>();
            let task = scheduler.spawn(async move {
                let cancellable = gdex::current_cancellable().expect("inside a task");
                cancellable.connect_cancelled_local(move |_| {
                    *r.lock().unwrap() = Some(std::thread::current().id());
                });
                armed_tx.send(()).unwrap();
                std::future::pending::<()>().await
            });
            common::pump_polling(&context, || armed.try_recv().is_ok());
            handle_tx.send(task).unwrap();
            go_rx.recv().unwrap();
            common::pump_polling(&context, || seen.lock().unwrap().is_some());
            std::thread::current().id()
        });
        drop(handle_rx.recv().unwrap());
        go_tx.send(()).unwrap();
        let owner_id = owner.join().unwrap();
        assert_eq!(*ran_on.lock().unwrap(), Some(owner_id));
    });
}

/// A sets flag when dropped: the task's future was dropped.
struct DropFlag(Arc<std::sync::atomic::AtomicBool>);
impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// S14, X1: a thread-bound task cancelled from another thread whose owner
/// thread then exits without iterating again: its future is dropped on the
/// owner at the thread's exit, and its cancellable is cancelled there.
#[test]
fn a_cancelled_local_tasks_cancellable_is_cancelled_when_its_owner_exits() {
    watchdog(
        "a_cancelled_local_tasks_cancellable_owner_exits",
        30,
        || {
            let (cancellable_tx, cancellable_rx) = mpsc::channel::<gio::Cancellable>();
            let (handle_tx, handle_rx) = mpsc::channel::<gdex::Task<()>>();
            let (go_tx, go_rx) = mpsc::channel::<()>();
            let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let d = dropped.clone();
            let owner = std::thread::spawn(move || {
                common::on_own_context(|context| {
                    let here = gdex::Scheduler::thread_default().unwrap();
                    let polled = Arc::new(std::sync::atomic::AtomicBool::new(false));
                    let p = polled.clone();
                    let task = here.spawn_local(async move {
                        let _flag = DropFlag(d);
                        let cancellable = gdex::current_cancellable().expect("inside a task");
                        cancellable_tx.send(cancellable).unwrap();
                        p.store(true, Ordering::SeqCst);
                        std::future::pending::<()>().await
                    });
                    common::pump_polling(context, || polled.load(Ordering::SeqCst));
                    handle_tx.send(task).unwrap();
                    // The handle is dropped on the test thread meanwhile; this
                    // thread then exits without iterating its context again.
                    go_rx.recv().unwrap();
                });
            });
            let cancellable = cancellable_rx.recv().unwrap();
            drop(handle_rx.recv().unwrap());
            go_tx.send(()).unwrap();
            owner.join().unwrap();
            assert!(dropped.load(Ordering::SeqCst), "the future was dropped");
            assert!(
                cancellable.is_cancelled(),
                "its cancellable was never cancelled"
            );
        },
    );
}

/// S14, S9: a pinned task cancelled from the test thread while its worker
/// is busy in another poll; the pool then shuts down. Its future is
/// dropped on its worker, and its cancellable is cancelled.
#[test]
fn a_cancelled_pinned_tasks_cancellable_is_cancelled_at_shutdown() {
    watchdog(
        "a_cancelled_pinned_tasks_cancellable_at_shutdown",
        30,
        || {
            let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
            let (cancellable_tx, cancellable_rx) = mpsc::channel::<gio::Cancellable>();
            let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let d = dropped.clone();
            let pinned = pool.scheduler().spawn_pinned(move || async move {
                let _flag = DropFlag(d);
                let cancellable = gdex::current_cancellable().expect("inside a task");
                cancellable_tx.send(cancellable).unwrap();
                std::future::pending::<()>().await
            });
            let cancellable = cancellable_rx.recv().unwrap();
            let (running_tx, running) = mpsc::channel::<()>();
            let (release_tx, release) = mpsc::channel::<()>();
            let busy = pool.scheduler().spawn(async move {
                running_tx.send(()).unwrap();
                gdex::blocking::blocking(|| release.recv().unwrap());
            });
            running.recv().unwrap();
            // The worker is busy: the cancelled task is queued behind it.
            drop(pinned);
            std::thread::scope(|s| {
                s.spawn(|| pool.shutdown());
                std::thread::sleep(Duration::from_millis(50));
                release_tx.send(()).unwrap();
            });
            drop(busy);
            assert!(dropped.load(Ordering::SeqCst), "the future was dropped");
            assert!(
                cancellable.is_cancelled(),
                "its cancellable was never cancelled"
            );
        },
    );
}

/// The parent's `cancelled` handlers: whether any is connected.
fn has_handlers(parent: &gdex::Cancellable) -> bool {
    let cancelled = glib::subclass::SignalId::lookup("cancelled", gio::Cancellable::static_type())
        .expect("GCancellable has a cancelled signal");
    glib::signal::signal_has_handler_pending(parent.as_gio(), cancelled, None, true)
}

/// `Cancellable::child`: a parent's cancel reaches its children and theirs
/// (also through a child dropped between them); a child's cancel leaves
/// its parent and siblings alone; a child of a cancelled parent is born
/// cancelled; a child handed to GIO as a `gio::Cancellable` (the gdex side
/// dropped) still follows its parent.
#[test]
fn a_parents_cancel_reaches_every_descendant_and_no_ancestor() {
    let root = gdex::Cancellable::new();
    let (a, b) = (root.child(), root.child());
    let (a1, a2) = (a.child(), a.child());
    let a11 = a1.child();
    let handed: gio::Cancellable = b.child().into();
    // The child between them dropped: the grandchild still follows.
    let orphan = root.child().child();
    a1.cancel();
    assert!(a1.is_cancelled() && a11.is_cancelled());
    assert!(!a.is_cancelled() && !a2.is_cancelled() && !root.is_cancelled());
    root.cancel();
    for c in [&a, &b, &a2] {
        assert!(c.is_cancelled());
    }
    assert!(handed.is_cancelled(), "the link lives as long as the child");
    assert!(orphan.is_cancelled(), "a child keeps its parent");
    assert!(
        root.child().is_cancelled() && a2.child().is_cancelled(),
        "born cancelled"
    );
}

/// Cancelling a parent, from another thread, stops its descendants' work:
/// tasks running under a child (`Cancellable::run`) resolve to `Cancelled`
/// with their futures dropped, and a GIO read given a grandchild's
/// `gio::Cancellable` ends with `G_IO_ERROR_CANCELLED`.
#[test]
fn cancelling_a_parent_stops_its_childrens_tasks_and_gio_calls() {
    watchdog(
        "cancelling_a_parent_stops_its_childrens_tasks_and_gio_calls",
        30,
        || {
            let pool = common::quiet_pool(2);
            let parent = gdex::Cancellable::new();
            let dropped = Arc::new(AtomicUsize::new(0));
            let tasks: Vec<_> = (0..8)
                .map(|_| {
                    let child = parent.child();
                    let counted = Counted(dropped.clone());
                    pool.scheduler().spawn(async move {
                        child
                            .run(async move {
                                let _counted = counted;
                                std::future::pending::<()>().await;
                            })
                            .await
                    })
                })
                .collect();
            let grandchild = parent.child().child();
            let (read_end, _write_end) = silent_socket();
            let reader = std::thread::spawn(move || {
                let socket = gio::Socket::from_fd(read_end).unwrap();
                let connection = socket.connection_factory_create_connection();
                let mut buf = [0u8; 16];
                connection
                    .input_stream()
                    .read(&mut buf, Some(grandchild.as_gio()))
            });
            let canceller = std::thread::spawn(move || parent.cancel());
            canceller.join().unwrap();
            for task in tasks {
                assert!(matches!(
                    gdex::block_on(task).unwrap(),
                    Err(gdex::Error::Cancelled)
                ));
            }
            assert_eq!(
                dropped.load(Ordering::SeqCst),
                8,
                "every future dropped (X1)"
            );
            let err = reader
                .join()
                .unwrap()
                .expect_err("a silent socket gives nothing");
            assert!(err.matches(gio::IOErrorEnum::Cancelled), "{err}");
        },
    );
}

/// A child let go of leaves nothing on its parent: after a million
/// children made and dropped (`GDEX_STRESS` scales it), the parent has no
/// `cancelled` handler left, and the process's memory stayed flat (in a
/// process of its own, so that no other test's allocations count).
#[test]
fn dropped_children_leave_nothing_on_their_parent() {
    common::child_passes("child_dropped_children_leave_nothing", &[], 120);
}

#[test]
#[ignore = "run by dropped_children_leave_nothing_on_their_parent"]
fn child_dropped_children_leave_nothing() {
    fn rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
    let parent = gdex::Cancellable::new();
    let churn = |n: usize| {
        for _ in 0..n {
            let child = parent.child();
            // Some children are handed to GIO and dropped there.
            let gio_side: gio::Cancellable = child.into();
            drop(gio_side);
        }
    };
    let total = common::stress(1_000_000);
    churn(total / 10);
    let before = rss_kib();
    churn(total - total / 10);
    let grown = rss_kib().saturating_sub(before);
    assert!(!has_handlers(&parent), "a dropped child's handler stayed");
    // A handler left per child would be well over 64 bytes each (a
    // GClosure and its data): 55 MiB for 900,000. Flat allows for the
    // allocator's own slack.
    assert!(
        grown < 8 * 1024,
        "memory grew by {grown} KiB over {total} children"
    );
    // A kept child still follows.
    let kept = parent.child();
    assert!(has_handlers(&parent));
    parent.cancel();
    assert!(kept.is_cancelled());
    println!("CHILD-OK");
}

/// A line of children each made from the one before, the ones between
/// dropped (`token = token.child()` in a loop): each keeps its parent, so
/// cancelling the root reaches the last, and letting go of the last lets
/// go of the whole line, without a stack as deep as the line (on a thread
/// with Rust's default 2 MiB stack; `GDEX_STRESS` scales the line).
#[test]
fn a_long_line_of_children_cancels_and_drops_without_deep_recursion() {
    common::child_passes("child_long_line_of_children", &[], 120);
}

#[test]
#[ignore = "run by a_long_line_of_children_cancels_and_drops_without_deep_recursion"]
fn child_long_line_of_children() {
    let depth = common::stress(100_000);
    let line = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let root = gdex::Cancellable::new();
            let mut last = root.child();
            for _ in 1..depth {
                last = last.child();
            }
            let weak_root = root.as_gio().downgrade();
            root.cancel();
            assert!(last.is_cancelled(), "the root's cancel reached the end");
            drop(root);
            assert!(weak_root.upgrade().is_some(), "the line keeps its root");
            drop(last);
            assert!(weak_root.upgrade().is_none(), "the whole line is gone");
        })
        .unwrap();
    line.join().unwrap();
    println!("CHILD-OK");
}

/// Children made, dropped and kept on four threads while another thread
/// cancels their parent: no deadlock or crash, every kept child ends
/// cancelled (made before the cancel, or born cancelled after), and the
/// dropped ones leave no handler.
#[test]
fn children_made_and_dropped_on_many_threads_racing_a_cancel() {
    watchdog(
        "children_made_and_dropped_on_many_threads_racing_a_cancel",
        60,
        || {
            for round in 0..common::stress(20) {
                let parent = gdex::Cancellable::new();
                let makers: Vec<_> = (0..4)
                    .map(|_| {
                        let parent = parent.clone();
                        std::thread::spawn(move || {
                            let mut kept = Vec::new();
                            for i in 0..500 {
                                let child = parent.child();
                                if i % 5 == 0 {
                                    kept.push(child.child());
                                }
                            }
                            kept
                        })
                    })
                    .collect();
                if round % 2 == 0 {
                    std::thread::yield_now();
                    parent.cancel();
                }
                let kept: Vec<_> = makers.into_iter().flat_map(|m| m.join().unwrap()).collect();
                parent.cancel();
                assert_eq!(kept.len(), 400);
                assert!(
                    kept.iter().all(gdex::Cancellable::is_cancelled),
                    "round {round}"
                );
            }
            // With no cancel, the dropped children's handlers are gone and the
            // kept ones' stay.
            let parent = gdex::Cancellable::new();
            let kept: Vec<_> = (0..100)
                .map(|i| (i, parent.child()))
                .filter(|(i, _)| i % 2 == 0)
                .collect();
            assert!(has_handlers(&parent));
            drop(kept);
            assert!(!has_handlers(&parent));
        },
    );
}
