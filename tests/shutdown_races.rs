//! S9 under races and re-entry: a pool's shutdown racing spawns, wake-ups
//! and waiters on other threads, a second shutdown, a shutdown from inside
//! the pool's own tasks or from a destructor that the reaper runs,
//! destructors run by the shutdown that wake, spawn and cancel. Whatever the interleaving, once `shutdown()` has returned
//! (and once a spawn racing it has returned) every task has resolved, every
//! future has been dropped exactly once, a pinned one on its own worker,
//! and no leak is reported.
//!
//! The tests run one at a time (`common::serial`): they count the "gdex"
//! log domain's leak reports for the whole process
//! (`common::leak_reports`) and busy both cores. A body that may abort or
//! hang the binary runs in a child process (`common::child_passes`).

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::{Duration, Instant};

use common::{
    child_passes, is_child, leak_reports, poll_with, quiet_pool, serial, wait_until, Counted,
    DroppedOn,
};
use futures::channel::oneshot;

/// A future whose drop takes a while: the worker's exit is still dropping it.
struct SlowDrop(Arc<AtomicUsize>, Duration);

impl Drop for SlowDrop {
    fn drop(&mut self) {
        // Deliberate: the slow drop is the behaviour under test.
        std::thread::sleep(self.1);
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A second `shutdown()` returns only once the pool is down (S9).
/// `ThreadPool::shutdown` promises that when it returns every task of the
/// pool has resolved and every future has been dropped, whoever calls it: a
/// second caller (another thread calling `shutdown()`, or dropping the last
/// `ThreadPool` handle, while the first shutdown is still joining the
/// workers) must not return at once (`if closed.swap(true) { return; }`)
/// while the workers are still dropping tasks.
#[test]
fn a_second_shutdown_returns_only_once_every_task_is_dropped() {
    let _one = serial();
    common::watchdog("concurrent_shutdown", 60, || {
        let pool = quiet_pool(1);
        let dropped = Arc::new(AtomicUsize::new(0));
        let started = Arc::new(AtomicBool::new(false));
        let (guard, st) = (
            SlowDrop(dropped.clone(), Duration::from_millis(500)),
            started.clone(),
        );
        let task = pool.scheduler().spawn(async move {
            let _guard = guard;
            st.store(true, Ordering::SeqCst);
            std::future::pending::<()>().await;
        });
        common::wait_until(|| started.load(Ordering::SeqCst));

        // First caller: joins the worker, which spends 500 ms dropping.
        let first = {
            let pool = pool.clone();
            std::thread::spawn(move || pool.shutdown())
        };
        common::wait_until(|| pool.is_closed());
        // Second caller.
        pool.shutdown();
        let dropped_at_return = dropped.load(Ordering::SeqCst);
        let finished_at_return = task.is_finished();
        first.join().unwrap();
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        assert_eq!(
            dropped_at_return, 1,
            "a second shutdown() returned while the first was still dropping the pool's \
             futures (task finished: {finished_at_return})"
        );
    });
}

/// A SIGUSR1 handler that holds the interrupted thread still for 300 ms.
extern "C" fn sleepy_handler(_: libc::c_int) {
    // Async-signal-safe: hold the interrupted thread still for a while.
    // Deliberate: it widens the race window under test; the checks hold
    // whether or not a trial lands in it.
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 300_000_000,
    };
    // SAFETY: nanosleep only reads `ts`, a valid timespec on this stack;
    // the remainder pointer may be null.
    unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
}

/// A pinned task woken from another thread, whose wake-up straddles its
/// worker's exit, is dropped on that worker (S9, F2).
/// async-task's wake is two steps: set `SCHEDULED` in the task's state, then
/// call the schedule function (`push_inbox`). If the worker closed its
/// registry between the two steps, its own wake of that task did nothing
/// (already scheduled), it drained, set `exited` and exited; the waker's
/// late push then found `exited` and dropped the runnable *on the waking
/// thread*: a pinned `!Send` future that ran on the worker, dropped on a
/// foreign thread (ThreadBound leaked it with a critical; its drop count
/// stayed short). So a closed registry counts the tasks it gave back that
/// are still out, and the worker waits for them before it exits.
///
/// The window is a few instructions wide; the test widens it by sending the
/// waking thread a signal whose handler sleeps 300 ms, while the pool shuts
/// down (without the worker's wait, it failed within 3 trials).
#[test]
fn a_pinned_wake_straddling_its_workers_exit_is_dropped_on_that_worker() {
    let _one = serial();
    leak_reports();
    common::watchdog("pinned_wake_straddling_exit", 300, || {
        // SAFETY: `sigaction` is plain data, all-zero valid; the handler is
        // async-signal-safe (it only calls nanosleep), and every pointer
        // passed points to that local or is null.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = sleepy_handler as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
        }
        let n = 20_000;
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut trials = 0;
        // Trials whose shutdown waited for the frozen waker: those that
        // landed in the window.
        let mut hits = 0;
        while Instant::now() < deadline && trials < 60 && hits < common::stress(3) {
            trials += 1;
            let leaks_before = leak_reports().load(Ordering::SeqCst);
            let pool = quiet_pool(1);
            let s = pool.scheduler();
            let places = Arc::new(Mutex::new(Vec::new()));
            let drops = Arc::new(AtomicUsize::new(0));
            let wakers = Arc::new(Mutex::new(Vec::with_capacity(n)));
            let mut tasks = Vec::with_capacity(n);
            for _ in 0..n {
                let (w, d, p) = (
                    wakers.clone(),
                    Counted(drops.clone()),
                    DroppedOn(places.clone()),
                );
                tasks.push(s.spawn_pinned(move || {
                    let not_send = std::rc::Rc::new(());
                    let mut first = true;
                    async move {
                        let _keep = (d, p, not_send);
                        std::future::poll_fn(move |cx| {
                            if first {
                                first = false;
                                w.lock().unwrap().push(cx.waker().clone());
                            }
                            std::task::Poll::<()>::Pending
                        })
                        .await
                    }
                }));
            }
            common::wait_until(|| wakers.lock().unwrap().len() == n);
            // Hold the worker, so that wake-ups pile up in its inbox without
            // a syscall each.
            let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
            let s2 = s.clone();
            s.push(move || {
                held_tx.send(()).unwrap();
                while futures::task::Spawn::status(&s2).is_ok() {
                    std::hint::spin_loop();
                }
            });
            held_rx.recv().unwrap();
            let wakers: Vec<std::task::Waker> = std::mem::take(&mut *wakers.lock().unwrap());
            let (tid_tx, tid_rx) = std::sync::mpsc::channel();
            let going = Arc::new(AtomicBool::new(false));
            let g = going.clone();
            let waker_thread = std::thread::Builder::new()
                .name("late-waker".into())
                .spawn(move || {
                    // SAFETY: pthread_self has no preconditions.
                    tid_tx.send(unsafe { libc::pthread_self() }).unwrap();
                    for (i, w) in wakers.iter().enumerate() {
                        if i == 500 {
                            g.store(true, Ordering::SeqCst);
                        }
                        w.wake_by_ref();
                    }
                    drop(wakers);
                })
                .unwrap();
            let tid = tid_rx.recv().unwrap();
            common::wait_until(|| going.load(Ordering::SeqCst));
            // SAFETY: `tid` is the waker thread, joined only below, so it
            // is alive; SIGUSR1 has the handler installed above.
            unsafe { libc::pthread_kill(tid, libc::SIGUSR1) };
            let t0 = Instant::now();
            pool.shutdown();
            if t0.elapsed() >= Duration::from_millis(250) {
                hits += 1;
            }
            waker_thread.join().unwrap();
            drop(tasks);
            let foreign: Vec<String> = places
                .lock()
                .unwrap()
                .iter()
                .filter(|p| !p.starts_with("gdex-worker-"))
                .cloned()
                .collect();
            let leaked = leak_reports().load(Ordering::SeqCst) - leaks_before;
            let dropped = drops.load(Ordering::SeqCst);
            if !foreign.is_empty() || leaked > 0 || dropped != n {
                panic!(
                    "trial {trials}: a pinned future that ran on its worker reached a foreign \
                     thread: ThreadBound reported {leaked} 'dropped on another thread; leaked' \
                     critical(s), {dropped} of {n} futures dropped, drops seen off-worker: \
                     {foreign:?}"
                );
            }
        }
        eprintln!(
            "pinned_wake_straddling_exit: held in {trials} trials, {hits} of them in the window"
        );
    });
}

/// (S9) Spawns (spawn, spawn_pinned, spawn_fiber) from plain threads race
/// shutdown(), in work-stealing and thread-per-core pools: once the
/// spawners have returned, every task has resolved, every future was
/// dropped exactly once, a polled pinned one on a worker thread.
#[test]
fn held_shutdown_racing_spawns_from_other_threads() {
    let _one = serial();
    leak_reports();
    common::watchdog("shutdown_racing_spawns", 120, || {
        for round in 0..common::stress(20) {
            let tpc = round % 2 == 1;
            let leaks_before = leak_reports().load(Ordering::SeqCst);
            let pool = gdex::ThreadPool::builder()
                .workers(2)
                .thread_per_core(tpc)
                .stall_threshold(Duration::ZERO)
                .build()
                .unwrap();
            let made = Arc::new(AtomicUsize::new(0));
            let drops = Arc::new(AtomicUsize::new(0));
            let places = Arc::new(Mutex::new(Vec::<(String, bool)>::new()));
            let go = Arc::new(AtomicBool::new(false));
            let mut spawners = Vec::new();
            for k in 0..3 {
                let s = pool.scheduler();
                let (made, drops, places, go) =
                    (made.clone(), drops.clone(), places.clone(), go.clone());
                spawners.push(std::thread::spawn(move || {
                    let mut tasks: Vec<Box<dyn FnOnce() -> bool + Send>> = Vec::new();
                    let mut i = 0usize;
                    while !go.load(Ordering::SeqCst) || i < 2000 {
                        i += 1;
                        if futures::task::Spawn::status(&s).is_err() && i > 200 {
                            break;
                        }
                        made.fetch_add(1, Ordering::SeqCst);
                        let guard = Counted(drops.clone());
                        match (k + i) % 3 {
                            0 => {
                                let t = s.spawn(async move {
                                    let _g = guard;
                                    for _ in 0..3 {
                                        gdex::yield_now().await;
                                    }
                                    glib::timeout_future(Duration::from_millis(5)).await;
                                    std::future::pending::<()>().await
                                });
                                tasks.push(Box::new(move || t.is_finished()));
                            }
                            1 => {
                                let places = places.clone();
                                let t = s.spawn_pinned(move || {
                                    let polled = std::rc::Rc::new(std::cell::Cell::new(false));
                                    struct Where(
                                        Arc<Mutex<Vec<(String, bool)>>>,
                                        std::rc::Rc<std::cell::Cell<bool>>,
                                    );
                                    impl Drop for Where {
                                        fn drop(&mut self) {
                                            let name = std::thread::current()
                                                .name()
                                                .unwrap_or("?")
                                                .to_owned();
                                            self.0.lock().unwrap().push((name, self.1.get()));
                                        }
                                    }
                                    let w = Where(places, polled.clone());
                                    async move {
                                        let _g = guard;
                                        let _w = w;
                                        polled.set(true);
                                        glib::timeout_future(Duration::from_millis(3)).await;
                                        std::future::pending::<()>().await
                                    }
                                });
                                tasks.push(Box::new(move || t.is_finished()));
                            }
                            _ => {
                                let f = s.spawn_fiber(move || {
                                    let _g = guard;
                                    while gdex::fiber::yield_fiber().is_ok() {}
                                });
                                tasks.push(Box::new(move || f.is_finished()));
                            }
                        }
                        if i == 200 {
                            go.store(true, Ordering::SeqCst);
                        }
                    }
                    tasks
                }));
            }
            common::wait_until(|| go.load(Ordering::SeqCst));
            // Deliberate: places the shutdown among the spawns; where it
            // lands is the race under test, and every placement must pass.
            std::thread::sleep(Duration::from_millis(2));
            pool.shutdown();
            let tasks: Vec<_> = spawners
                .into_iter()
                .flat_map(|t| t.join().unwrap())
                .collect();
            let unresolved = tasks.into_iter().map(|f| f()).filter(|done| !done).count();
            assert_eq!(
                unresolved, 0,
                "round {round} (tpc {tpc}): tasks not resolved"
            );
            assert_eq!(
                drops.load(Ordering::SeqCst),
                made.load(Ordering::SeqCst),
                "round {round} (tpc {tpc}): futures dropped"
            );
            let places = places.lock().unwrap().clone();
            let bad: Vec<_> = places
                .iter()
                .filter(|(t, polled)| *polled && !t.starts_with("gdex-worker-"))
                .collect();
            assert!(
                bad.is_empty(),
                "round {round}: polled pinned futures dropped on {bad:?}"
            );
            assert_eq!(
                leak_reports().load(Ordering::SeqCst),
                leaks_before,
                "round {round}: leaks"
            );
        }
    });
}

/// (S9) A pool task shuts its own pool down (and another drops the last
/// handle inside a task): every task still resolves shortly after, every
/// future is dropped once, pinned ones on worker threads, no leak warning.
#[test]
fn held_shutdown_from_inside_a_pool_task() {
    let _one = serial();
    leak_reports();
    common::watchdog("shutdown_from_inside", 60, || {
        for by_drop in [false, true] {
            let leaks_before = leak_reports().load(Ordering::SeqCst);
            let pool = quiet_pool(2);
            let s = pool.scheduler();
            let drops = Arc::new(AtomicUsize::new(0));
            let places = Arc::new(Mutex::new(Vec::new()));
            let polled = Arc::new(AtomicUsize::new(0));
            let mut tasks = Vec::new();
            for i in 0..200 {
                let g = Counted(drops.clone());
                if i % 2 == 0 {
                    tasks.push(s.spawn(common::after_first_poll(&polled, async move {
                        let _g = g;
                        glib::timeout_future(Duration::from_secs(60)).await;
                    })));
                } else {
                    let (p, polled) = (DroppedOn(places.clone()), polled.clone());
                    tasks.push(s.spawn_pinned(move || {
                        common::after_first_poll(&polled, async move {
                            let _g = (g, p, std::rc::Rc::new(()));
                            gdex::yield_now().await;
                            std::future::pending::<()>().await
                        })
                    }));
                }
            }
            // Every task has started and waits (instead of a 20 ms sleep).
            common::wait_until(|| polled.load(Ordering::SeqCst) == 200);
            let killer = if by_drop {
                let pool = pool.clone();
                s.spawn(async move {
                    gdex::yield_now().await;
                    drop(pool);
                })
            } else {
                let pool = pool.clone();
                s.spawn(async move {
                    pool.shutdown();
                    // Go on a little after shutdown() returned.
                    gdex::yield_now().await;
                    common::spin(Duration::from_millis(20));
                })
            };
            // With `by_drop`, the killer's clone is the last handle: its drop
            // inside the task shuts the pool down from a worker.
            drop(pool);
            let _ = gdex::wait_for(gdex::timeout(Duration::from_secs(5), killer));
            let t0 = Instant::now();
            while !tasks.iter().all(|t| t.is_finished()) && t0.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(5));
            }
            assert!(tasks.iter().all(|t| t.is_finished()), "by_drop {by_drop}");
            common::wait_until(|| {
                drops.load(Ordering::SeqCst) == 200 || t0.elapsed() > Duration::from_secs(5)
            });
            assert_eq!(drops.load(Ordering::SeqCst), 200, "by_drop {by_drop}");
            for t in tasks {
                assert!(matches!(gdex::wait_for(t), Err(gdex::Error::Cancelled)));
            }
            let places = places.lock().unwrap().clone();
            assert!(
                places.iter().all(|p| p.starts_with("gdex-worker-")),
                "{places:?}"
            );
            assert_eq!(leak_reports().load(Ordering::SeqCst), leaks_before);
        }
    });
}

/// (S9) Destructors of futures dropped by the shutdown wake other tasks
/// (idle on other workers, pinned), spawn (`spawn` gives Closed,
/// `spawn_local` on the pool from the drain is queued and dropped there
/// too), and cancel other tasks' handles; every task still resolves and
/// every future is dropped once, pinned ones on their worker.
#[test]
fn held_destructors_that_wake_spawn_and_cancel_during_the_drain() {
    let _one = serial();
    leak_reports();
    common::watchdog("destructors_during_drain", 60, || {
        for _ in 0..common::stress(10) {
            let leaks_before = leak_reports().load(Ordering::SeqCst);
            let pool = quiet_pool(2);
            let s = pool.scheduler();
            let drops = Arc::new(AtomicUsize::new(0));
            let made = Arc::new(AtomicUsize::new(0));
            let places = Arc::new(Mutex::new(Vec::new()));
            let handles = Arc::new(Mutex::new(Vec::<gdex::Task<()>>::new()));
            let polled = Arc::new(AtomicUsize::new(0));
            let mut tasks = Vec::new();
            struct OnDrop<F: FnMut()>(F);
            impl<F: FnMut()> Drop for OnDrop<F> {
                fn drop(&mut self) {
                    (self.0)();
                }
            }
            for i in 0..300 {
                let (tx, rx) = oneshot::channel::<()>();
                made.fetch_add(1, Ordering::SeqCst);
                let g = Counted(drops.clone());
                // The receiver: idle, pinned or not.
                if i % 2 == 0 {
                    let (p, polled) = (DroppedOn(places.clone()), polled.clone());
                    tasks.push(s.spawn_pinned(move || {
                        common::after_first_poll(&polled, async move {
                            let _g = (g, p, std::rc::Rc::new(()));
                            let _ = rx.await;
                            std::future::pending::<()>().await
                        })
                    }));
                } else {
                    tasks.push(s.spawn(common::after_first_poll(&polled, async move {
                        let _g = g;
                        let _ = rx.await;
                        gdex::yield_now().await;
                        std::future::pending::<()>().await
                    })));
                }
                // The sender: its destructor wakes the receiver, spawns, and
                // drops a handle it took from the shared list.
                made.fetch_add(1, Ordering::SeqCst);
                let g = Counted(drops.clone());
                let (s2, h, d2, m2) = (s.clone(), handles.clone(), drops.clone(), made.clone());
                tasks.push(s.spawn(common::after_first_poll(&polled, async move {
                    let _g = g;
                    let mut tx = Some(tx);
                    let _wake = OnDrop(move || {
                        drop(tx.take());
                        let t = s2.spawn(async {});
                        assert!(t.is_finished());
                        if gdex::Scheduler::thread_default().is_some() {
                            // spawn_local on the pool from a worker's drain.
                            m2.fetch_add(1, Ordering::SeqCst);
                            let g = Counted(d2.clone());
                            if let Ok(t) =
                                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                    s2.spawn_local(async move {
                                        let _g = g;
                                        std::future::pending::<()>().await
                                    })
                                }))
                            {
                                t.detach();
                            }
                        }
                        let taken = h.lock().unwrap().pop();
                        drop(taken);
                    });
                    glib::timeout_future(Duration::from_secs(60)).await;
                })));
            }
            // Some handles live in the shared list: dropped by destructors.
            for _ in 0..50 {
                made.fetch_add(1, Ordering::SeqCst);
                let g = Counted(drops.clone());
                handles
                    .lock()
                    .unwrap()
                    .push(s.spawn(common::after_first_poll(&polled, async move {
                        let _g = g;
                        std::future::pending::<()>().await
                    })));
            }
            // Every task has started and waits, its destructor armed
            // (instead of a 30 ms sleep).
            common::wait_until(|| polled.load(Ordering::SeqCst) == 650);
            pool.shutdown();
            assert!(tasks.iter().all(|t| t.is_finished()));
            handles.lock().unwrap().clear();
            let t0 = Instant::now();
            while drops.load(Ordering::SeqCst) != made.load(Ordering::SeqCst)
                && t0.elapsed() < Duration::from_secs(3)
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            assert_eq!(drops.load(Ordering::SeqCst), made.load(Ordering::SeqCst));
            let places = places.lock().unwrap().clone();
            assert!(
                places.iter().all(|p| p.starts_with("gdex-worker-")),
                "{places:?}"
            );
            assert_eq!(leak_reports().load(Ordering::SeqCst), leaks_before);
        }
    });
}

/// (S9, X1) After shutdown: `cancel().await`, `block_on` and `wait_for` of
/// pool tasks from plain threads (started before, during and after the
/// shutdown) all return `Cancelled` promptly.
#[test]
fn held_waiters_on_plain_threads_during_shutdown() {
    let _one = serial();
    common::watchdog("waiters_during_shutdown", 60, || {
        let pool = quiet_pool(2);
        let s = pool.scheduler();
        let mut waiters = Vec::new();
        for i in 0..40 {
            let t = if i % 2 == 0 {
                s.spawn(glib::timeout_future(Duration::from_secs(60)))
            } else {
                s.spawn_pinned(|| async {
                    let _rc = std::rc::Rc::new(());
                    std::future::pending::<()>().await
                })
            };
            waiters.push(std::thread::spawn(move || match i % 3 {
                0 => gdex::wait_for(t).err().map(|e| format!("{e:?}")),
                1 => gdex::block_on(t.cancel()).map(|_| "finished".to_string()),
                _ => gdex::block_on(t).err().map(|e| format!("{e:?}")),
            }));
            if i == 20 {
                pool.shutdown();
            }
        }
        for (i, w) in waiters.into_iter().enumerate() {
            let r = w.join().unwrap();
            match i % 3 {
                1 => assert_eq!(r, None, "{i}"),
                _ => assert!(
                    r.as_deref() == Some("Cancelled") || r.as_deref() == Some("ShutDown"),
                    "{i}: {r:?}"
                ),
            }
        }
    });
}

/// S9 for a spawn that races the shutdown: a spawn that returns after
/// `shutdown()` has returned gives a task that has already resolved, even
/// when it passed the pool's "closed?" check before the close and pushed
/// its job after the workers were gone (the job then goes to the reaper,
/// and the spawn waits for it). Without that wait such a task resolved on
/// the reaper's thread a little later: `is_finished()` was still false.
#[test]
fn a_spawn_that_returns_after_shutdown_gives_a_resolved_task() {
    let _one = serial();
    common::watchdog("spawn_racing_shutdown", 120, || {
        let mut late = 0;
        for _ in 0..common::stress(300) {
            let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
            let done = Arc::new(AtomicBool::new(false));
            let spawners: Vec<_> = (0..2)
                .map(|k| {
                    let s = pool.scheduler();
                    let done = done.clone();
                    std::thread::spawn(move || {
                        let mut unresolved = 0;
                        let mut after = 0;
                        loop {
                            let finished_before = done.load(Ordering::SeqCst);
                            let task = if k == 0 {
                                s.spawn(std::future::pending::<()>())
                            } else {
                                s.spawn_pinned(std::future::pending::<()>)
                            };
                            if done.load(Ordering::SeqCst) {
                                after += 1;
                                // Resolved: a poll gives its outcome now
                                // (`is_finished` alone is already true while
                                // the reaper is still dropping the future).
                                let mut task = task;
                                let waker = std::task::Waker::noop();
                                let mut cx = std::task::Context::from_waker(waker);
                                if std::future::Future::poll(std::pin::Pin::new(&mut task), &mut cx)
                                    .is_pending()
                                {
                                    unresolved += 1;
                                }
                                if finished_before {
                                    return (unresolved, after);
                                }
                            }
                        }
                    })
                })
                .collect();
            std::thread::yield_now();
            pool.shutdown();
            done.store(true, Ordering::SeqCst);
            for t in spawners {
                let (unresolved, after) = t.join().unwrap();
                late += after;
                assert_eq!(
                    unresolved, 0,
                    "spawns that returned after shutdown() gave unresolved tasks"
                );
            }
        }
        assert!(late > 0);
    });
}

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
    let a = quiet_pool(1);
    let other = quiet_pool(1);
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

/// A shutdown inside a destructor that the reaper runs does not wait for
/// itself (S9). `reaper::flush` (called by `settle_spawn` and by every
/// `shutdown()`'s `join_workers`) waits until the reaper has dropped every
/// batch handed over so far. Were that to include the one it is dropping
/// now, a flush run on the reaper thread itself (a reaped future's
/// destructor that shuts a pool down, or spawns on a pool that closes
/// meanwhile) would wait for itself: a 2 s stall of the reaper, and of every other shutdown and
/// racing spawn in the process, which then return with their reaped tasks
/// still pending (S9).
#[test]
fn a_shutdown_inside_a_drop_on_the_reaper_does_not_wait_for_itself() {
    if is_child() {
        return;
    }
    let _one = serial();
    child_passes("child_shutdown_on_the_reaper", &[], 60);
}

/// How a blocking-lane spawn ended: its task's outcome, and whether its
/// closure ran.
fn lane_outcome(pool: &gdex::ThreadPool) -> (String, bool) {
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    let task = pool.spawn_blocking(move || r.store(true, Ordering::SeqCst));
    let outcome = match gdex::block_on(task) {
        Ok(()) => "Ok".to_owned(),
        Err(e) => format!("{e:?}"),
    };
    (outcome, ran.load(Ordering::SeqCst))
}

/// (S9, B2) `spawn_blocking` racing `shutdown()`: a spawn onto the
/// blocking lane of a pool that is closed (`is_closed()` says so, and the
/// pool's other spawns give `ShutDown`) gives `ShutDown` at once, its
/// closure never run, as every spawn onto a shut-down pool does, whatever
/// the lane is doing; and once either of two racing `shutdown()`s has
/// returned, a job that was queued on the lane has resolved (`Cancelled`)
/// and a new spawn gives `ShutDown`.
///
/// A spawner spins on `is_closed()` and spawns onto the lane the moment the
/// pool closes, while the shutdown is still waking its workers; a second
/// thread calls `shutdown()` too. The lane has one thread, held by a job,
/// with a second job queued behind it.
#[test]
fn a_blocking_spawn_racing_shutdown_gives_shut_down() {
    let _one = serial();
    common::watchdog("blocking_spawn_racing_shutdown", 180, || {
        let mut wrong = Vec::new();
        for round in 0..common::stress(200) {
            let pool = gdex::ThreadPool::builder()
                .workers(2)
                .max_blocking_threads(1)
                .stall_threshold(Duration::ZERO)
                .build()
                .unwrap();
            // The lane's one thread is busy until `release`; `queued` waits.
            let (release, held) = std::sync::mpsc::channel::<()>();
            let busy = pool.spawn_blocking(move || {
                let _ = held.recv();
            });
            wait_until(|| pool.blocking_stats().threads == 1);
            let queued = Arc::new(Mutex::new(pool.spawn_blocking(|| ())));
            wait_until(|| pool.blocking_stats().queued == 1);

            let ready = Arc::new(AtomicUsize::new(0));
            let resolved_at_second = Arc::new(AtomicBool::new(false));
            let racer = |second_shutdown: bool| {
                let (pool, ready) = (pool.clone(), ready.clone());
                let (queued, resolved) = (queued.clone(), resolved_at_second.clone());
                std::thread::spawn(move || {
                    ready.fetch_add(1, Ordering::SeqCst);
                    while ready.load(Ordering::SeqCst) < 3 {
                        std::hint::spin_loop();
                    }
                    if second_shutdown {
                        pool.shutdown();
                        let done = queued.lock().unwrap().is_finished();
                        resolved.store(done, Ordering::SeqCst);
                    } else {
                        while !pool.is_closed() {
                            std::hint::spin_loop();
                        }
                    }
                    lane_outcome(&pool)
                })
            };
            let spawner = racer(false);
            let second = racer(true);
            ready.fetch_add(1, Ordering::SeqCst);
            while ready.load(Ordering::SeqCst) < 3 {
                std::hint::spin_loop();
            }
            pool.shutdown();
            let resolved_at_first = queued.lock().unwrap().is_finished();
            let after_first = lane_outcome(&pool);
            let racing = spawner.join().unwrap();
            let after_second = second.join().unwrap();
            release.send(()).unwrap();
            let resolved_at_second = resolved_at_second.load(Ordering::SeqCst);
            let queued = Arc::try_unwrap(queued).ok().unwrap().into_inner().unwrap();
            let queued = gdex::block_on(queued);
            let _ = gdex::block_on(busy);
            for (who, (outcome, ran)) in [
                ("the spawn that saw is_closed()", racing),
                ("a spawn after the first shutdown() returned", after_first),
                ("a spawn after the second shutdown() returned", after_second),
            ] {
                if outcome != "ShutDown" || ran {
                    wrong.push(format!(
                        "round {round}: {who} gave {outcome} (its closure ran: {ran})"
                    ));
                }
            }
            let cancelled = matches!(queued, Err(gdex::Error::Cancelled));
            if !(resolved_at_first && resolved_at_second && cancelled) {
                wrong.push(format!(
                    "round {round}: the queued job had resolved when the first shutdown() \
                     returned: {resolved_at_first}, when the second did: {resolved_at_second}; \
                     to {queued:?}"
                ));
            }
        }
        assert!(
            wrong.is_empty(),
            "{} wrong:\n{}",
            wrong.len(),
            wrong.join("\n")
        );
    });
}
