//! S9: a pool's shutdown resolves every task, in every state it can be in:
//! queued (a million of them, and pairs awaiting each other), idle on a
//! GLib source, a `gdex::sleep`, a GIO call or a channel, pinned, a fiber,
//! moved between workers, running elsewhere when its worker closes. It is
//! prompt, joins every worker thread, drops every future exactly once (a
//! `!Send` one on its own worker), and refuses later spawns with
//! `Error::ShutDown`. Fibers are cancelled, not unwound (F4): each `wait`
//! returns `Cancelled` and the fiber leaves through its own return, within
//! a bounded grace period even when it loops on `yield_fiber`; a fiber
//! still suspended when that period ends is unwound, and a `wait` in its
//! destructors then neither polls a stale context nor fails on a ready
//! future.
//!
//! The shutdown racing other threads is tested in `shutdown_races.rs`,
//! schedulers of a worker's own context in `worker_context_shutdown.rs`.
//! The tests here take turns (`common::serial`): they look at every thread
//! of the process.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{is_child, run_child, Counted, DroppedOn};
use futures::channel::oneshot;

#[test]
fn shutdown_with_a_full_queue_is_prompt_and_drops_everything_once() {
    let _one = common::serial();
    common::watchdog("shutdown_under_load", 120, || {
        let workers = 4;
        let pool = common::quiet_pool(workers);
        let s = pool.scheduler();
        // Hold every worker so that what follows stays queued.
        let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
        let gate_rx = Arc::new(std::sync::Mutex::new(gate_rx));
        let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
        for _ in 0..workers {
            let (gate_rx, held_tx) = (gate_rx.clone(), held_tx.clone());
            s.push(move || {
                held_tx.send(()).unwrap();
                // Declared blocking: the worker first hands its queue (the
                // other holders, if it took a batch) to its peers.
                gdex::blocking::blocking(|| {
                    let _ = gate_rx.lock().unwrap().recv();
                });
            });
        }
        for _ in 0..workers {
            held_rx.recv().unwrap();
        }

        let queued = common::stress(1_000_000);
        let drops = Arc::new(AtomicUsize::new(0));
        for _ in 0..queued {
            let guard = Counted(drops.clone());
            s.spawn(async move {
                let _guard = guard;
            })
            .detach();
        }
        // Pairs of tasks awaiting each other's results (never completing).
        let pairs = 1000;
        let mut keep = Vec::new();
        for _ in 0..pairs {
            let (tx, rx) = futures::channel::oneshot::channel::<()>();
            let (g1, g2) = (Counted(drops.clone()), Counted(drops.clone()));
            let inner = s.spawn(async move {
                let _g = g1;
                let _ = rx.await;
            });
            s.spawn(async move {
                let _g = g2;
                let _ = inner.await;
            })
            .detach();
            keep.push(tx);
        }

        let started = std::time::Instant::now();
        let closer = {
            let pool = pool.clone();
            std::thread::spawn(move || pool.shutdown())
        };
        common::wait_until(|| pool.is_closed());
        for _ in 0..workers {
            gate_tx.send(()).unwrap();
        }
        closer.join().unwrap();
        let took = started.elapsed();
        // Every worker thread is gone.
        assert!(
            !common::thread_names()
                .iter()
                .any(|n| n.starts_with("gdex-worker")),
            "worker threads left: {:?}",
            common::thread_names()
        );
        // Dropping the senders wakes the waiting tasks after the shutdown:
        // their futures are dropped then, once.
        drop(keep);
        common::wait_until(|| drops.load(Ordering::Relaxed) >= queued + 2 * pairs);
        // Deliberate: 20 ms in which a second drop would show; a correct
        // pool drops each future once, however late the check.
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(drops.load(Ordering::Relaxed), queued + 2 * pairs);
        assert!(matches!(
            gdex::block_on(s.spawn(async { 1 })),
            Err(gdex::Error::ShutDown)
        ));
        eprintln!("shutdown with {queued} queued tasks took {took:?}");
    });
}

/// Fibers blocked in `wait` when their pool shuts down are cancelled (F4):
/// each wait returns Cancelled, the fiber leaves through its own return, and
/// its state is dropped once, on its own worker thread.
#[test]
fn shutdown_cancels_blocked_fibers_on_their_threads() {
    let _one = common::serial();
    common::watchdog("shutdown_cancels_blocked_fibers", 60, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let s = pool.scheduler();
        let n = 20;
        let drops = Arc::new(AtomicUsize::new(0));
        let returned = Arc::new(AtomicUsize::new(0));
        let dropped_on = Arc::new(std::sync::Mutex::new(Vec::new()));
        let started = Arc::new(AtomicUsize::new(0));
        let mut senders = Vec::new();
        let mut handles = Vec::new();
        for i in 0..n {
            let (tx, rx) = futures::channel::oneshot::channel::<()>();
            senders.push(tx);
            let guard = Counted(drops.clone());
            let (returned, dropped_on, started) =
                (returned.clone(), dropped_on.clone(), started.clone());
            let fiber = s.spawn_fiber(move || {
                struct Where(Arc<std::sync::Mutex<Vec<String>>>);
                impl Drop for Where {
                    fn drop(&mut self) {
                        let name = std::thread::current().name().unwrap_or("?").to_owned();
                        self.0.lock().unwrap().push(name);
                    }
                }
                let _guard = guard;
                let _where = Where(dropped_on);
                started.fetch_add(1, Ordering::SeqCst);
                let first = gdex::fiber::wait(rx);
                assert!(matches!(first, Err(gdex::Error::Cancelled)), "{first:?}");
                returned.fetch_add(1, Ordering::SeqCst);
            });
            // Half detached, half with their handle kept past the shutdown.
            if i % 2 == 0 {
                fiber.detach();
            } else {
                handles.push(fiber);
            }
        }
        common::wait_until(|| started.load(Ordering::SeqCst) == n);
        pool.shutdown();
        assert_eq!(returned.load(Ordering::SeqCst), n, "every fiber returned");
        assert_eq!(
            drops.load(Ordering::SeqCst),
            n,
            "every fiber's state dropped once"
        );
        let places = dropped_on.lock().unwrap().clone();
        assert!(
            places.iter().all(|p| p.starts_with("gdex-worker-")),
            "{places:?}"
        );
        drop(senders);
        drop(handles);
        assert_eq!(drops.load(Ordering::SeqCst), n);
    });
}

/// F4, S9: a fiber still queued when its pool's grace period ends is
/// unwound by its drop; a `fiber::wait` in a destructor during that unwind
/// has no live poll to use. It must return `Cancelled` without polling (on
/// cc53133 it polled with the `Context` of the fiber's last poll, long
/// freed: SIGSEGV, or an invalid read under memcheck).
#[test]
fn a_wait_in_a_destructor_during_a_forced_unwind_is_cancelled_without_polling() {
    let _one = common::serial();
    common::watchdog("wait_during_forced_unwind", 60, || {
        let pool = common::quiet_pool(1);
        let s = pool.scheduler();
        let (_a, rx_a) = futures::channel::oneshot::channel::<()>();
        let (_b, rx_b) = futures::channel::oneshot::channel::<()>();
        let (started_tx, started) = std::sync::mpsc::channel::<()>();
        let started_b = started_tx.clone();
        // The first fiber outlives the shutdown's grace period (500 ms)...
        s.spawn_fiber(move || {
            started_tx.send(()).unwrap();
            let _ = gdex::fiber::wait(rx_a);
            // Deliberate: outlives the 500 ms grace period, the situation
            // under test.
            std::thread::sleep(std::time::Duration::from_millis(700));
        })
        .detach();
        let outcome = Arc::new(std::sync::Mutex::new(None));
        let seen = outcome.clone();
        let probe = Arc::new(std::sync::Mutex::new(None));
        let probed = probe.clone();
        // ...so the second one, queued behind it, is dropped suspended.
        s.spawn_fiber(move || {
            /// Pending forever; records whether it was polled with the
            /// no-op waker (no live poll: the fiber's saved context was
            /// reset when the last poll ended) or with another one (a
            /// stale context: a use-after-free). The no-op waker is told
            /// by what it is, a null data pointer, not by its address:
            /// `will_wake(Waker::noop())` compares vtable addresses, and in
            /// a release build this crate and gdex each have their own copy
            /// of the no-op vtable. Reading the data pointer calls nothing
            /// through the waker.
            struct Probe(Arc<std::sync::Mutex<Option<String>>>);
            impl std::future::Future for Probe {
                type Output = ();
                fn poll(
                    self: std::pin::Pin<&mut Self>,
                    cx: &mut std::task::Context<'_>,
                ) -> std::task::Poll<()> {
                    let noop = cx.waker().data().is_null();
                    *self.0.lock().unwrap() = Some(format!("polled, noop waker: {noop}"));
                    std::task::Poll::Pending
                }
            }
            struct Cleanup(
                Arc<std::sync::Mutex<Option<String>>>,
                Arc<std::sync::Mutex<Option<String>>>,
            );
            impl Drop for Cleanup {
                fn drop(&mut self) {
                    let _ = gdex::fiber::wait(Probe(self.1.clone()));
                    let (_keep, rx) = futures::channel::oneshot::channel::<()>();
                    let r = gdex::fiber::wait(rx);
                    *self.0.lock().unwrap() = Some(format!("{r:?}"));
                }
            }
            let _c = Cleanup(seen, probed);
            started_b.send(()).unwrap();
            let _ = gdex::fiber::wait(rx_b);
        })
        .detach();
        started.recv().unwrap();
        started.recv().unwrap();
        pool.shutdown();
        assert_eq!(
            outcome.lock().unwrap().as_deref(),
            Some("Err(Cancelled)"),
            "the destructor's wait reports the cancellation"
        );
        let probe = probe.lock().unwrap().clone();
        assert!(
            probe.is_none() || probe.as_deref() == Some("polled, noop waker: true"),
            "a wait with no live poll used a stale context: {probe:?}"
        );
    });
}

/// A fiber first polled during the shutdown's fiber phase is cancelled,
/// not unwound (F4, S9). A fiber spawned before the shutdown but still in
/// its worker's inbox when the shutdown starts is first polled by
/// `finish_fibers` (which runs every pinned job while other live fibers
/// finish). It registers itself in `core.fibers`; if `finish_fibers` took
/// that list before, it is never cancelled, so its first `wait` suspends;
/// then the registry close wakes it and the drain drops it while suspended:
/// it is force-unwound. Its `wait` never returns `Cancelled`, the code after
/// it (its cleanup) never runs, and its handle says `Cancelled` instead of
/// the fiber's own result.
#[test]
fn a_fiber_first_polled_during_shutdown_is_cancelled_not_unwound() {
    let _one = common::serial();
    common::watchdog("fiber_first_polled_during_shutdown", 60, || {
        let pool = common::quiet_pool(1);
        let s = pool.scheduler();
        // Fiber A: suspended; makes the worker run `finish_fibers`.
        let (_keep_a, rx_a) = oneshot::channel::<()>();
        let a_started = Arc::new(AtomicBool::new(false));
        let st = a_started.clone();
        let fiber_a = s.spawn_fiber(move || {
            st.store(true, Ordering::SeqCst);
            let _ = gdex::fiber::wait(rx_a);
            "a"
        });
        common::wait_until(|| a_started.load(Ordering::SeqCst));
        // Hold the worker until the pool is closed.
        let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
        let s2 = s.clone();
        s.push(move || {
            held_tx.send(()).unwrap();
            while futures::task::Spawn::status(&s2).is_ok() {
                std::thread::yield_now();
            }
        });
        held_rx.recv().unwrap();
        // Fiber B: queued in the inbox of the held worker.
        let log = Arc::new(Mutex::new(Vec::<String>::new()));
        let (_keep_b, rx_b) = oneshot::channel::<()>();
        let l = log.clone();
        let fiber_b = s.spawn_fiber(move || {
            l.lock().unwrap().push("started".into());
            let r = gdex::fiber::wait(rx_b);
            l.lock().unwrap().push(format!("wait returned {r:?}"));
            "b"
        });
        pool.shutdown();
        let log = log.lock().unwrap().clone();
        let a = gdex::wait_for(fiber_a);
        let b = gdex::wait_for(fiber_b);
        assert!(matches!(a, Ok("a")), "fiber A: {a:?}");
        if log.is_empty() {
            // Never started: dropped unpolled, fine.
            assert!(matches!(b, Err(gdex::Error::Cancelled)), "{b:?}");
            panic!("setup did not reach the race (fiber B never started); re-run");
        }
        assert_eq!(
            log,
            ["started", "wait returned Err(Cancelled)"],
            "fiber B started during shutdown but its wait never returned (force-unwound)"
        );
        assert!(matches!(b, Ok("b")), "fiber B's handle: {b:?}");
    });
}

/// A cancelled fiber looping on `yield_fiber` does not hang the shutdown
/// (F4, F6, S9). The module docs promise the worker runs cancelled fibers
/// "for up to 500 ms" ("the deadline bounds a fiber that loops on its
/// own"). But once a fiber is cancelled, `wait` returns `Cancelled`
/// *without suspending* (the check right after registering the waker, and
/// the `resumed` check), so a fiber that loops on
/// `let _ = gdex::fiber::yield_fiber();` (fine and fair before the shutdown:
/// it yields every turn) must still give its worker back: else
/// `finish_fibers` is stuck inside `job.run()`, the deadline is never
/// checked, and `shutdown()` never returns.
#[test]
fn a_cancelled_fiber_looping_on_yield_does_not_hang_shutdown() {
    let _one = common::serial();
    common::watchdog("fiber_yield_loop_hangs_shutdown", 60, || {
        let pool = common::quiet_pool(1);
        let stop = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicBool::new(false));
        let (st, sp) = (started.clone(), stop.clone());
        let fiber = pool.scheduler().spawn_fiber(move || {
            st.store(true, Ordering::SeqCst);
            let mut turns = 0u64;
            // A polite background loop: yields every turn, ignores the result.
            while !sp.load(Ordering::SeqCst) {
                let _ = gdex::fiber::yield_fiber();
                turns += 1;
            }
            turns
        });
        common::wait_until(|| started.load(Ordering::SeqCst));
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let p = pool.clone();
        let t = std::thread::spawn(move || {
            p.shutdown();
            let _ = done_tx.send(());
        });
        // Deliberate: the 3 s bound is the check (the fiber phase is
        // bounded at 500 ms); a correct shutdown returns well inside it.
        let returned = done_rx.recv_timeout(Duration::from_secs(3)).is_ok();
        // Let the test end either way.
        stop.store(true, Ordering::SeqCst);
        t.join().unwrap();
        drop(fiber);
        assert!(
            returned,
            "shutdown() had not returned after 3 s (the fiber phase is bounded at 500 ms): a \
             cancelled fiber looping on yield_now() never suspends again"
        );
    });
}

/// Child body for [`a_ready_wait_in_a_destructor_during_a_forced_unwind_succeeds`].
#[test]
#[ignore = "child process of a_ready_wait_in_a_destructor_during_a_forced_unwind_succeeds"]
fn child_forced_unwind_with_a_flushing_destructor() {
    if !is_child() {
        return;
    }
    let pool = common::quiet_pool(1);
    let s = pool.scheduler();
    // Fiber C: when cancelled, does 800 ms of cleanup work, past the 500 ms
    // fiber phase.
    let (_keep_c, rx_c) = oneshot::channel::<()>();
    let started = Arc::new(AtomicUsize::new(0));
    let st = started.clone();
    let c = s.spawn_fiber(move || {
        st.fetch_add(1, Ordering::SeqCst);
        if gdex::fiber::wait(rx_c).is_err() {
            common::spin(Duration::from_millis(800));
        }
    });
    // Fiber D: suspended, holds a guard whose destructor finishes its work
    // with a wait on an already-ready future (as a "flush on drop" does).
    struct Flush;
    impl Drop for Flush {
        fn drop(&mut self) {
            gdex::fiber::wait(std::future::ready(()))
                .expect("waiting on a ready future in a fiber succeeds");
        }
    }
    let (_keep_d, rx_d) = oneshot::channel::<()>();
    let st = started.clone();
    let d = s.spawn_fiber(move || {
        let _flush = Flush;
        st.fetch_add(1, Ordering::SeqCst);
        let _ = gdex::fiber::wait(rx_d);
    });
    common::wait_until(|| started.load(Ordering::SeqCst) == 2);
    pool.shutdown();
    drop((c, d));
    println!("CHILD-SURVIVED");
}

/// A wait on a ready future in a destructor during a forced unwind
/// succeeds (S6, F4). When the shutdown's fiber phase runs out of time
/// (500 ms), a suspended fiber is dropped and `force_unwind`ed. During that
/// unwind `wait` must not return `Cancelled` for a future that is *ready*
/// (as it did with the `cx.is_null()` check before the poll): during a
/// normal cancellation the same `wait(ready)` returns `Ok`. A destructor
/// that treats that as a failure panics, and a panic during an unwind is
/// an abort: the whole process dies (S6: a fiber's panic never takes down a
/// worker; X5: it goes to the panic handler).
#[test]
fn a_ready_wait_in_a_destructor_during_a_forced_unwind_succeeds() {
    if is_child() {
        return;
    }
    let _one = common::serial();
    let (status, out) = run_child("child_forced_unwind_with_a_flushing_destructor", &[], 60);
    assert!(
        status.is_some_and(|s| s.success()) && out.contains("CHILD-SURVIVED"),
        "the child process died ({status:?}):\n{out}"
    );
}

/// S9: after `shutdown()` every task of the pool has resolved to
/// `Cancelled`, whatever it was waiting on: a GLib timeout on its worker's
/// context, a `gdex::sleep`, a GIO call, a channel, nothing at all; pinned
/// tasks and fibers too. Every future is dropped exactly once, a `!Send`
/// one on its own worker thread; `cancel().await` returns. On cc53133 the
/// idle tasks never resolved (a 2 s `with_timeout` gave `TimedOut`), and
/// pinned ones woken after their worker exited leaked.
#[test]
fn shutdown_resolves_every_task_whatever_it_waits_on() {
    let _one = common::serial();
    common::watchdog("shutdown_resolves_every_task", 60, || {
        let pool = common::quiet_pool(2);
        let s = pool.scheduler();
        let long = std::time::Duration::from_secs(3600);
        let drops = Arc::new(AtomicUsize::new(0));
        let started = Arc::new(AtomicUsize::new(0));
        let pinned_drops = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks: Vec<(&str, gdex::Task<()>)> = Vec::new();
        let mut senders = Vec::new();

        macro_rules! idle {
            ($what:expr, $fut:expr) => {{
                let (guard, started) = (Counted(drops.clone()), started.clone());
                let t = s.spawn(async move {
                    let _guard = guard;
                    started.fetch_add(1, Ordering::SeqCst);
                    $fut.await;
                });
                tasks.push(($what, t));
            }};
        }
        idle!("glib timeout", glib::timeout_future(long));
        idle!("gdex::sleep", gdex::sleep(long));
        idle!("pending forever", std::future::pending::<()>());
        let (tx, rx) = futures::channel::oneshot::channel::<()>();
        senders.push(tx);
        idle!("channel", async {
            let _ = rx.await;
        });
        // Pinned (!Send) tasks idle on a timer, on a channel that is only
        // woken after the pool is gone, on a GIO call.
        for i in 0..3 {
            let (tx, rx) = futures::channel::oneshot::channel::<()>();
            senders.push(tx);
            let (guard, started) = (Counted(drops.clone()), started.clone());
            let where_ = DroppedOn(pinned_drops.clone());
            let t = s.spawn_pinned(move || async move {
                let _guard = guard;
                let _where = where_;
                let not_send = std::rc::Rc::new(());
                started.fetch_add(1, Ordering::SeqCst);
                match i {
                    0 => glib::timeout_future(long).await,
                    1 => {
                        let _ = rx.await;
                    }
                    _ => {
                        use gio::prelude::*;
                        let listener = gio::SocketListener::new();
                        let loopback = gio::InetAddress::new_loopback(gio::SocketFamily::Ipv4);
                        listener
                            .add_address(
                                &gio::InetSocketAddress::new(&loopback, 0),
                                gio::SocketType::Stream,
                                gio::SocketProtocol::Tcp,
                                None::<&glib::Object>,
                            )
                            .expect("a loopback port");
                        let _ = listener.accept_future().await;
                    }
                }
                drop(not_send);
            });
            tasks.push(("pinned", t));
        }
        // A fiber waiting on a channel nobody sends on.
        let (tx, rx) = futures::channel::oneshot::channel::<()>();
        senders.push(tx);
        let (guard, started2) = (Counted(drops.clone()), started.clone());
        let fiber = s.spawn_fiber(move || {
            let _guard = guard;
            started2.fetch_add(1, Ordering::SeqCst);
            let _ = gdex::fiber::wait(rx);
        });
        let n = tasks.len() + 1;
        common::wait_until(|| started.load(Ordering::SeqCst) == n);

        pool.shutdown();
        for (what, task) in &tasks {
            assert!(task.is_finished(), "{what}: not resolved by shutdown()");
        }
        assert_eq!(drops.load(Ordering::SeqCst), n, "every future dropped once");
        let places = pinned_drops.lock().unwrap().clone();
        assert_eq!(places.len(), 3);
        assert!(
            places.iter().all(|p| p.starts_with("gdex-worker-")),
            "pinned futures dropped on {places:?}"
        );
        // Wake-ups after the workers are gone change nothing.
        drop(senders);
        let mut tasks = tasks.into_iter();
        let (_, first) = tasks.next().unwrap();
        let in_time = gdex::wait_for(gdex::timeout(std::time::Duration::from_secs(2), first));
        assert!(
            matches!(in_time, Ok(Err(gdex::Error::Cancelled))),
            "{in_time:?}"
        );
        for (what, task) in tasks {
            if what == "pinned" {
                assert_eq!(gdex::wait_for(task.cancel()), None, "{what}");
            } else {
                let r = gdex::wait_for(task);
                assert!(matches!(r, Err(gdex::Error::Cancelled)), "{what}: {r:?}");
            }
        }
        // The fiber was cancelled by the shutdown and returned through its
        // own return (F4): its handle has its result.
        let r = gdex::wait_for(fiber);
        assert!(matches!(r, Ok(())), "{r:?}");
        assert_eq!(drops.load(Ordering::SeqCst), n, "and only once");
    });
}

/// S9 with a worker that is busy in one long poll when the pool shuts down:
/// tasks it had run go idle meanwhile on the other worker, and still
/// resolve; a task that goes idle on a worker after the registry it was in
/// was closed records itself where it runs.
#[test]
fn shutdown_resolves_tasks_that_moved_between_workers() {
    let _one = common::serial();
    common::watchdog("shutdown_resolves_moved_tasks", 60, || {
        let pool = common::quiet_pool(2);
        let s = pool.scheduler();
        let drops = Arc::new(AtomicUsize::new(0));
        let hopped = Arc::new(AtomicUsize::new(0));
        let n = common::stress(200);
        let mut tasks = Vec::new();
        for _ in 0..n {
            let (guard, hopped) = (Counted(drops.clone()), hopped.clone());
            tasks.push(s.spawn(async move {
                let _guard = guard;
                // Hop between workers, idle on each worker's context.
                for i in 0..1000 {
                    gdex::yield_now().await;
                    glib::timeout_future(std::time::Duration::from_millis(1)).await;
                    if i == 2 {
                        hopped.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }));
        }
        // Every task has hopped a few times and is on its way (instead of a
        // 30 ms sleep); none is near its end.
        common::wait_until(|| hopped.load(Ordering::SeqCst) == n);
        pool.shutdown();
        assert!(tasks.iter().all(|t| t.is_finished()));
        assert_eq!(drops.load(Ordering::SeqCst), n);
        for t in tasks {
            assert!(matches!(gdex::wait_for(t), Err(gdex::Error::Cancelled)));
        }
    });
}

/// S9, shutdown step 3: a task that went idle on worker A, then was woken
/// and is running on worker B when A closes its book of idle tasks, still
/// ends with the shutdown: A's close wakes it (async-task queues it again
/// once the poll returns), and B drops it with its queue when it exits. Its
/// handle resolves to `Cancelled`.
///
/// The placement is arranged with two pinned tasks, one per worker
/// (round-robin): P1 spawns T and U on its worker A, then spins there so
/// that A cannot take T back; P2 wakes T on worker B. An attempt where the
/// first polls did not land on A (a peer stole one) is started again.
#[test]
fn a_task_running_elsewhere_when_its_worker_closes_still_ends() {
    fn name() -> String {
        std::thread::current().name().unwrap_or("").to_owned()
    }
    common::watchdog(
        "a_task_running_elsewhere_when_its_worker_closes",
        60,
        || {
            for _attempt in 0..20 {
                let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
                let s = pool.scheduler();
                let (wake_t, t_woken) = oneshot::channel::<()>();
                let (never_tx, never) = oneshot::channel::<()>();
                let t_first = Arc::new(std::sync::Mutex::new(String::new()));
                let t_on_b = Arc::new(std::sync::Mutex::new(String::new()));
                let u_first = Arc::new(std::sync::Mutex::new(String::new()));
                let u_dropped = Arc::new(AtomicBool::new(false));
                let (spin_tx, spin_rx) = oneshot::channel::<()>();
                let (go_tx, go_rx) = oneshot::channel::<oneshot::Sender<()>>();
                // P1, on worker A: spawns T and U here, then spins when told.
                let (t_handle_tx, t_handle_rx) = std::sync::mpsc::channel();
                let p1 = {
                    let (s, t_first, t_on_b, u_first, u_dropped) = (
                        s.clone(),
                        t_first.clone(),
                        t_on_b.clone(),
                        u_first.clone(),
                        u_dropped.clone(),
                    );
                    pool.spawn_pinned(move || async move {
                        let a = name();
                        let t = {
                            let (t_first, t_on_b, u_first, u_dropped) = (
                                t_first.clone(),
                                t_on_b.clone(),
                                u_first.clone(),
                                u_dropped.clone(),
                            );
                            s.spawn(async move {
                                *t_first.lock().unwrap() = name();
                                let _ = t_woken.await;
                                // Running again. If on another worker (B) than
                                // the one where T and U first ran (A), wait here
                                // until A has closed its book (U, idle on A, is
                                // dropped by A's close).
                                let here = name();
                                let first = t_first.lock().unwrap().clone();
                                let arranged = first != here && first == *u_first.lock().unwrap();
                                *t_on_b.lock().unwrap() = here;
                                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                                while arranged
                                    && !u_dropped.load(Ordering::SeqCst)
                                    && std::time::Instant::now() < deadline
                                {
                                    std::thread::yield_now();
                                }
                                let _ = never.await;
                            })
                        };
                        t_handle_tx.send(t).unwrap();
                        let on_drop = common::SetOnDrop(u_dropped);
                        s.spawn(async move {
                            let _on_drop = on_drop;
                            *u_first.lock().unwrap() = name();
                            std::future::pending::<()>().await
                        })
                        .detach();
                        let _ = spin_rx.await;
                        // Keep A busy until T runs on B (or give up).
                        let deadline = std::time::Instant::now() + Duration::from_secs(5);
                        while t_on_b.lock().unwrap().is_empty()
                            && std::time::Instant::now() < deadline
                        {
                            std::thread::yield_now();
                        }
                        a
                    })
                };
                // P2, on worker B: wakes T from there when told.
                let p2 = pool.spawn_pinned(move || async move {
                    let wake_t = go_rx.await.unwrap();
                    let _ = wake_t.send(());
                    name()
                });
                let t = t_handle_rx.recv().unwrap();
                common::wait_until(|| {
                    !t_first.lock().unwrap().is_empty() && !u_first.lock().unwrap().is_empty()
                });
                spin_tx.send(()).unwrap();
                go_tx.send(wake_t).unwrap();
                let b = gdex::wait_for(p2).unwrap();
                let a = gdex::wait_for(p1).unwrap_or_default();
                let arranged = {
                    let (tf, uf, tb) = (
                        t_first.lock().unwrap(),
                        u_first.lock().unwrap(),
                        t_on_b.lock().unwrap(),
                    );
                    a != b && *tf == a && *uf == a && *tb == b
                };
                if !arranged {
                    drop(never_tx);
                    pool.shutdown();
                    continue;
                }
                // T is running on B (waiting for A's close); shut down.
                let closer = std::thread::spawn(move || pool.shutdown());
                // `never_tx` stays alive: only the shutdown may end T.
                common::wait_until(|| t.is_finished());
                assert!(
                    matches!(gdex::wait_for(t), Err(gdex::Error::Cancelled)),
                    "T is dropped by B's shutdown"
                );
                closer.join().unwrap();
                drop(never_tx);
                return;
            }
            panic!("20 attempts, and the placement was never the one under test");
        },
    );
}

/// Shutdown step 1 for `spawn_local` too: a pool task still running after
/// the shutdown began cannot start new pinned work on its worker; the
/// spawn resolves at once to `ShutDown`, as every other spawn does.
#[test]
fn spawn_local_on_a_worker_of_a_closing_pool_is_refused() {
    common::watchdog("spawn_local_on_a_closing_pool", 30, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let (closer, watch) = (pool.clone(), pool.clone());
        let task = pool.scheduler().spawn(async move {
            let here = gdex::Scheduler::thread_default().unwrap();
            let shutting = std::thread::spawn(move || closer.shutdown());
            // The shutdown sets `closed` first, then waits for this worker.
            while !watch.is_closed() {
                std::thread::yield_now();
            }
            let late = here.spawn_local(async { 1 });
            (late.is_finished(), late, shutting)
        });
        let (finished, late, shutting) = gdex::wait_for(task).unwrap();
        assert!(finished, "refused at once");
        assert!(matches!(gdex::wait_for(late), Err(gdex::Error::ShutDown)));
        shutting.join().unwrap();
    });
}

/// A spawn onto a shut-down pool, whatever its kind, resolves at once to
/// `Error::ShutDown` (S9): one cause, one error. From outside the pool:
/// `spawn`, `spawn_named`, `spawn_bound`, `spawn_pinned` (the scheduler's
/// and the pool's), fibers (`spawn_fiber` and `fiber::Builder::spawn`), the
/// pool's `spawn_blocking`, and members of a `TaskGroup` on the pool (its
/// `spawn` and a `TaskGroupRef`'s fail with it). From a pool task still
/// running once the shutdown began: `spawn_local`, `spawn_local_bound` and
/// `spawn_fiber_local`.
#[test]
fn every_spawn_onto_a_shut_down_pool_gives_shut_down() {
    common::watchdog("every_spawn_onto_a_shut_down_pool", 30, || {
        use gdex::{Error, Task};
        fn shut_down<T: std::fmt::Debug>(what: &str, task: Task<T>) {
            assert!(task.is_finished(), "{what}: not refused at once");
            let r = gdex::block_on(task);
            assert!(matches!(r, Err(Error::ShutDown)), "{what}: {r:?}");
        }
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let s = pool.scheduler();
        let group = gdex::TaskGroup::<()>::on(s.clone());
        let member = group.handle();
        let object = gio::Cancellable::new();
        pool.shutdown();

        shut_down("spawn", s.spawn(async { 1 }));
        shut_down("spawn_named", s.spawn_named("late", async { 1 }));
        shut_down("spawn_bound", s.spawn_bound(&object, async { 1 }));
        shut_down("Scheduler::spawn_pinned", s.spawn_pinned(|| async { 1 }));
        shut_down(
            "ThreadPool::spawn_pinned",
            pool.spawn_pinned(|| async { 1 }),
        );
        shut_down("spawn_blocking", pool.spawn_blocking(|| 1));
        let fiber = s.spawn_fiber(|| 1);
        assert!(fiber.is_finished(), "spawn_fiber: not refused at once");
        let r = gdex::block_on(fiber);
        assert!(matches!(r, Err(Error::ShutDown)), "spawn_fiber: {r:?}");
        let fiber = gdex::fiber::Builder::new().spawn(&s, || 1);
        let r = gdex::block_on(fiber);
        assert!(matches!(r, Err(Error::ShutDown)), "Builder::spawn: {r:?}");
        let r = group.spawn(async {});
        assert!(matches!(r, Err(Error::ShutDown)), "TaskGroup::spawn: {r:?}");
        let r = member.spawn(async {});
        assert!(
            matches!(r, Err(Error::ShutDown)),
            "TaskGroupRef::spawn: {r:?}"
        );

        // The `!Send` spawns, from a task of the pool still running once
        // its shutdown began (the only threads they are allowed on).
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let (closer, watch) = (pool.clone(), pool.clone());
        let task = pool.scheduler().spawn(async move {
            let here = gdex::Scheduler::thread_default().unwrap();
            let shutting = std::thread::spawn(move || closer.shutdown());
            while !watch.is_closed() {
                std::thread::yield_now();
            }
            let object = glib::Object::new::<glib::Object>();
            let local = here.spawn_local(async { 1 });
            let bound = here.spawn_local_bound(&object, async { 1 });
            let fiber = here.spawn_fiber_local(|| 1);
            let at_once = [
                local.is_finished(),
                bound.is_finished(),
                fiber.is_finished(),
            ];
            let outcomes = [
                futures::FutureExt::now_or_never(local).map(|r| format!("{r:?}")),
                futures::FutureExt::now_or_never(bound).map(|r| format!("{r:?}")),
                futures::FutureExt::now_or_never(fiber).map(|r| format!("{r:?}")),
            ];
            (at_once, outcomes, shutting)
        });
        let (at_once, outcomes, shutting) = gdex::wait_for(task).unwrap();
        shutting.join().unwrap();
        for (what, (at_once, outcome)) in ["spawn_local", "spawn_local_bound", "spawn_fiber_local"]
            .into_iter()
            .zip(at_once.into_iter().zip(outcomes))
        {
            assert!(at_once, "{what}: not refused at once");
            assert_eq!(outcome.as_deref(), Some("Err(ShutDown)"), "{what}");
        }
    });
}

/// F4, S9 on the worker's fiber scheduler: stubborn fibers (they ignore their cancellation and
/// wait again) woken all the time from plain threads, whose destructors
/// wake each other's wakers while the shutdown force-unwinds them: the
/// shutdown returns and every fiber is unwound once, on its thread.
#[test]
fn stubborn_fibers_woken_from_other_threads_are_unwound_at_shutdown() {
    let _one = common::serial();
    use common::Baton;
    /// Wakes two other fibers when it drops (in the unwind), then counts
    /// the exit (its `Exit`, dropped after).
    struct WakeOnDrop {
        batons: Arc<Vec<Baton>>,
        i: usize,
        _exit: common::Exit,
    }
    impl Drop for WakeOnDrop {
        fn drop(&mut self) {
            let n = self.batons.len();
            self.batons[(self.i + 1) % n].raise();
            self.batons[(self.i + 3) % n].waker.wake();
        }
    }
    common::watchdog("stubborn_fibers", 120, || {
        for round in 0..5 {
            let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
            let n = 12;
            let batons: Arc<Vec<Baton>> = Baton::many(n);
            let exits = common::Exits::default();
            let started = Arc::new(AtomicUsize::new(0));
            let stop = Arc::new(AtomicBool::new(false));
            let hammers: Vec<_> = (0..2)
                .map(|t| {
                    let (batons, stop) = (batons.clone(), stop.clone());
                    std::thread::spawn(move || {
                        let mut i = t;
                        while !stop.load(Ordering::Acquire) {
                            batons[i % n].raise();
                            i += 1;
                        }
                    })
                })
                .collect();
            for i in 0..n {
                let (batons, exits, started) = (batons.clone(), exits.clone(), started.clone());
                pool.scheduler()
                    .spawn_fiber(move || {
                        let _guard = WakeOnDrop {
                            batons: batons.clone(),
                            i,
                            _exit: exits.guard(),
                        };
                        started.fetch_add(1, Ordering::SeqCst);
                        loop {
                            let _ = gdex::fiber::wait_output(batons[i].lowered());
                            if i % 2 == 0 {
                                let _ = gdex::fiber::yield_fiber();
                            }
                        }
                    })
                    .detach();
            }
            common::wait_until(|| started.load(Ordering::SeqCst) == n);
            std::thread::sleep(Duration::from_millis(5));
            let t = std::time::Instant::now();
            pool.shutdown();
            let took = t.elapsed();
            stop.store(true, Ordering::Release);
            for h in hammers {
                h.join().unwrap();
            }
            assert_eq!(exits.unwound(), n, "round {round}: unwound");
            assert_eq!(exits.returned(), 0, "round {round}");
            assert!(
                took < Duration::from_secs(5),
                "round {round}: shutdown took {took:?}"
            );
        }
    });
}
