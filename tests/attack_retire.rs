//! Attack probes for bac9f1c (S9 for a scheduler of a pool worker's own
//! context): `Scheduler::for_context` on the context a pool task sees as its
//! thread-default. After the pool shuts down every task of that scheduler
//! resolves promptly (`Cancelled`), every future is dropped exactly once, a
//! thread-bound one (`!Send`, pinned, fiber) on its own thread.
//!
//! Every test takes `ONE_AT_A_TIME`: some set the process-wide panic handler,
//! and the machine has two cores.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use common::{watchdog, Counted};


static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn here() -> String {
    std::thread::current().name().unwrap_or("?").to_owned()
}

/// A one-slot wake-up: `wait()` completes once per `fire`. The waiting
/// future's drop takes the lock (to forget its waker), so a wake done under
/// the lock (`fire_in_lock`) that dropped the woken task inline would
/// deadlock on itself.
#[derive(Clone, Default)]
struct Signal(Arc<Mutex<SigState>>);

#[derive(Default)]
struct SigState {
    fired: bool,
    waker: Option<Waker>,
}

impl Signal {
    fn fire(&self) {
        let waker = {
            let mut s = self.0.lock().unwrap();
            s.fired = true;
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Wakes while holding the lock the waiter's drop takes.
    fn fire_in_lock(&self) {
        let mut s = self.0.lock().unwrap();
        s.fired = true;
        if let Some(w) = s.waker.take() {
            w.wake();
        }
    }

    fn wait(&self) -> Wait {
        Wait(self.clone())
    }
}

struct Wait(Signal);

impl Future for Wait {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = (self.0).0.lock().unwrap();
        if std::mem::take(&mut s.fired) {
            Poll::Ready(())
        } else {
            s.waker = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        // `try_lock`: a self-deadlock shows as a recorded failure instead
        // of a hang (the watchdog would catch the hang too).
        match (self.0).0.try_lock() {
            Ok(mut s) => s.waker = None,
            Err(std::sync::TryLockError::WouldBlock) => {
                // Another thread may hold it for a moment: wait for it,
                // unless it is this very thread (then it never comes).
                let t = std::time::Instant::now();
                loop {
                    if let Ok(mut s) = (self.0).0.try_lock() {
                        s.waker = None;
                        break;
                    }
                    if t.elapsed() > Duration::from_secs(5) {
                        panic!("Wait::drop: the signal's lock stayed held for 5 s (self-deadlock?)");
                    }
                    std::thread::yield_now();
                }
            }
            Err(std::sync::TryLockError::Poisoned(_)) => {}
        }
    }
}

/// One record per dropped probe: (kind, thread of its first poll, thread of
/// its drop).
type Log = Arc<Mutex<Vec<(&'static str, Option<String>, String)>>>;

/// The probes alive now: id -> (kind, thread of its first poll).
type Live = Arc<Mutex<std::collections::HashMap<usize, (&'static str, Option<String>)>>>;

static LIVE: std::sync::OnceLock<Live> = std::sync::OnceLock::new();
fn live() -> &'static Live {
    LIVE.get_or_init(Default::default)
}
static NEXT_ID: AtomicUsize = AtomicUsize::new(0);

/// Counts its drop and records where it was first polled and dropped.
struct Probe {
    id: usize,
    kind: &'static str,
    polled: Option<String>,
    log: Log,
    drops: Arc<AtomicUsize>,
}

impl Probe {
    fn new(kind: &'static str, log: &Log, drops: &Arc<AtomicUsize>, made: &AtomicUsize) -> Probe {
        made.fetch_add(1, Ordering::SeqCst);
        let id = NEXT_ID.fetch_add(1, Ordering::SeqCst);
        live().lock().unwrap().insert(id, (kind, None));
        Probe {
            id,
            kind,
            polled: None,
            log: log.clone(),
            drops: drops.clone(),
        }
    }
    fn mark(&mut self) {
        if self.polled.is_none() {
            self.polled = Some(here());
            if let Some(e) = live().lock().unwrap().get_mut(&self.id) {
                e.1 = self.polled.clone();
            }
        }
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        live().lock().unwrap_or_else(|e| e.into_inner()).remove(&self.id);
        self.drops.fetch_add(1, Ordering::SeqCst);
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((self.kind, self.polled.take(), here()));
    }
}

/// The probes never dropped: (kind, polled on) -> how many.
fn never_dropped() -> std::collections::BTreeMap<(&'static str, Option<String>), usize> {
    let mut out = std::collections::BTreeMap::new();
    for (_, v) in live().lock().unwrap().iter() {
        *out.entry(v.clone()).or_insert(0) += 1;
    }
    out
}

/// Checks the log: each thread-bound probe that was polled was dropped on
/// the thread that polled it.
fn check_places(log: &Log) {
    let log = log.lock().unwrap();
    for (kind, polled, dropped) in log.iter() {
        if *kind == "send" {
            continue;
        }
        if let Some(p) = polled {
            assert_eq!(
                p, dropped,
                "a {kind} future first polled on {p} was dropped on {dropped}"
            );
            assert!(p.starts_with("gdex-worker-"), "{kind} polled on {p}");
        }
    }
}

fn pool(workers: usize) -> gdex::ThreadPool {
    gdex::ThreadPool::builder()
        .workers(workers)
        .stall_threshold(Duration::ZERO)
        .build()
        .unwrap()
}

/// The context of one of `pool`'s workers, its scheduler made there.
fn worker_context(pool: &gdex::ThreadPool) -> (glib::MainContext, gdex::Scheduler, String) {
    gdex::block_on(pool.scheduler().spawn(async {
        let context = glib::MainContext::thread_default().expect("a worker's context");
        let s = gdex::Scheduler::for_context(&context);
        (context, s, here())
    }))
    .unwrap()
}

/// The contexts of two distinct workers of a 2-worker pool.
fn two_worker_contexts(pool: &gdex::ThreadPool) -> [(glib::MainContext, String); 2] {
    let mut found: Vec<(glib::MainContext, String)> = Vec::new();
    for _ in 0..200 {
        let got = gdex::block_on(pool.scheduler().spawn_pinned(|| async {
            (glib::MainContext::thread_default().unwrap(), here())
        }))
        .unwrap();
        if !found.iter().any(|(_, n)| *n == got.1) {
            found.push(got);
        }
        if found.len() == 2 {
            let b = found.pop().unwrap();
            let a = found.pop().unwrap();
            return [a, b];
        }
    }
    panic!("never saw two workers");
}

fn resolved_cancelled<T: std::fmt::Debug>(task: gdex::Task<T>, what: &str) {
    let r = gdex::wait_for(gdex::timeout(Duration::from_secs(5), task));
    assert!(matches!(r, Err(gdex::Error::Cancelled)), "{what}: {r:?}");
}

// ---------------------------------------------------------------------------
// 1. Races: spawns and wake-ups from other threads racing shutdown().
// ---------------------------------------------------------------------------

fn race_round(round: usize, in_lock: bool) {
    let pool = pool(2);
    let log: Log = Default::default();
    let drops = Arc::new(AtomicUsize::new(0));
    let made = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let (l, d, m, st) = (log.clone(), drops.clone(), made.clone(), started.clone());
    let setup = pool.scheduler().spawn(async move {
        let context = glib::MainContext::thread_default().unwrap();
        let s = gdex::Scheduler::for_context(&context);
        let mut tasks = Vec::new();
        let mut fibers = Vec::new();
        let mut signals = Vec::new();
        for i in 0..14 {
            let sig = Signal::default();
            signals.push(sig.clone());
            let st = st.clone();
            match i % 7 {
                0..=2 => {
                    let mut g = Probe::new("send", &l, &d, &m);
                    tasks.push(s.spawn(async move {
                        g.mark();
                        st.fetch_add(1, Ordering::SeqCst);
                        loop {
                            sig.wait().await;
                        }
                    }));
                }
                3 => {
                    let mut g = Probe::new("local", &l, &d, &m);
                    tasks.push(s.spawn_local(async move {
                        g.mark();
                        let rc = std::rc::Rc::new(());
                        st.fetch_add(1, Ordering::SeqCst);
                        loop {
                            sig.wait().await;
                            let _ = rc.clone();
                        }
                    }));
                }
                4 | 5 => {
                    let mut g = Probe::new("pinned", &l, &d, &m);
                    tasks.push(s.spawn_pinned(move || async move {
                        g.mark();
                        let rc = std::rc::Rc::new(());
                        st.fetch_add(1, Ordering::SeqCst);
                        loop {
                            sig.wait().await;
                            let _ = rc.clone();
                        }
                    }));
                }
                _ => {
                    let mut g = Probe::new("fiber", &l, &d, &m);
                    fibers.push(s.spawn_fiber(move || {
                        g.mark();
                        st.fetch_add(1, Ordering::SeqCst);
                        loop {
                            if gdex::fiber::wait_output(sig.wait()).is_err() {
                                break;
                            }
                        }
                        drop(g);
                    }));
                }
            }
        }
        (s, tasks, fibers, signals)
    });
    let (s, tasks, fibers, signals) = gdex::block_on(setup).unwrap();
    common::wait_until(|| started.load(Ordering::SeqCst) == 14);
    let stop = Arc::new(AtomicBool::new(false));
    let waker = {
        let (stop, signals) = (stop.clone(), signals.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for sig in &signals {
                    if in_lock {
                        sig.fire_in_lock()
                    } else {
                        sig.fire()
                    }
                }
            }
        })
    };
    let spawner = {
        let (stop, s, log, drops, made) = (stop.clone(), s.clone(), log.clone(), drops.clone(), made.clone());
        std::thread::spawn(move || {
            let mut late = Vec::new();
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                if n % 3 == 0 {
                    let mut g = Probe::new("pinned", &log, &drops, &made);
                    late.push(s.spawn_pinned(move || async move {
                        g.mark();
                        let _rc = std::rc::Rc::new(());
                        std::future::pending::<()>().await
                    }));
                } else {
                    let mut g = Probe::new("send", &log, &drops, &made);
                    late.push(s.spawn(async move {
                        g.mark();
                        std::future::pending::<()>().await
                    }));
                }
                if late.len() > 2000 {
                    break;
                }
                std::thread::yield_now();
            }
            late
        })
    };
    std::thread::sleep(Duration::from_micros(300 * (round % 7) as u64));
    pool.shutdown();
    for (i, t) in tasks.iter().enumerate() {
        assert!(t.is_finished(), "round {round}: task {i} not resolved by shutdown()");
    }
    for (i, f) in fibers.iter().enumerate() {
        assert!(f.is_finished(), "round {round}: fiber {i} not resolved by shutdown()");
    }
    stop.store(true, Ordering::Relaxed);
    waker.join().unwrap();
    let late = spawner.join().unwrap();
    for t in tasks {
        resolved_cancelled(t, "setup task");
    }
    for f in fibers {
        let r = gdex::wait_for(gdex::timeout(Duration::from_secs(5), f));
        // A cancelled fiber returns from its loop (Ok) or is unwound (Cancelled).
        assert!(
            matches!(r, Ok(()) | Err(gdex::Error::Cancelled)),
            "fiber: {r:?}"
        );
    }
    for t in late {
        resolved_cancelled(t, "late spawn");
    }
    drop(s);
    drop(pool);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while drops.load(Ordering::SeqCst) < made.load(Ordering::SeqCst)
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(
        drops.load(Ordering::SeqCst),
        made.load(Ordering::SeqCst),
        "round {round}: every future dropped exactly once; never dropped: {:?}",
        never_dropped()
    );
    check_places(&log);
}

/// Probe 1a: wake-ups (outside the lock) and spawns (Send, pinned) from
/// other threads race `shutdown()`, with Send, `!Send`, pinned tasks and
/// fibers idle on the scheduler of a worker's context.
#[test]
fn race_wakeups_and_spawns_with_shutdown() {
    let _one = one_at_a_time();
    watchdog("race_wakeups_and_spawns_with_shutdown", 600, || {
        for round in 0..common::stress(30) {
            race_round(round, false);
        }
    });
}

/// Probe 1b: the same, the wake-ups done while holding the lock that the
/// woken future's drop takes (a channel that wakes under its lock).
#[test]
fn race_wakeups_in_a_lock_with_shutdown() {
    let _one = one_at_a_time();
    watchdog("race_wakeups_in_a_lock_with_shutdown", 600, || {
        for round in 0..common::stress(30) {
            race_round(round, true);
        }
    });
}

// ---------------------------------------------------------------------------
// 5. Pinned tasks and fibers on that scheduler at shutdown (no race).
// ---------------------------------------------------------------------------

/// Probe 5a: a pinned task (`spawn_pinned`) and a fiber (`spawn_fiber`,
/// `spawn_fiber_local`) on the scheduler of a worker's context, idle at
/// shutdown (on nothing, on a signal that another thread keeps firing, on a
/// GLib timeout): each resolves by `shutdown()`, each is dropped exactly
/// once, on the worker that polled it.
fn pinned_and_fibers_at_shutdown(keep_waking: bool, workers: usize) {
    let pool = pool(workers);
    let log: Log = Default::default();
    let drops = Arc::new(AtomicUsize::new(0));
    let made = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let sig = Signal::default();
    let (l, d, m, st, sg) = (log.clone(), drops.clone(), made.clone(), started.clone(), sig.clone());
    let (s, tasks, fibers) = gdex::block_on(pool.scheduler().spawn(async move {
        let context = glib::MainContext::thread_default().unwrap();
        let s = gdex::Scheduler::for_context(&context);
        let mut tasks = Vec::new();
        for what in 0..3 {
            let (mut g, st, sg) = (Probe::new("pinned", &l, &d, &m), st.clone(), sg.clone());
            tasks.push(s.spawn_pinned(move || async move {
                g.mark();
                let _rc = std::rc::Rc::new(());
                st.fetch_add(1, Ordering::SeqCst);
                match what {
                    0 => std::future::pending::<()>().await,
                    1 => loop {
                        sg.wait().await
                    },
                    _ => glib::timeout_future(Duration::from_secs(3600)).await,
                }
            }));
        }
        let mut fibers = Vec::new();
        for what in 0..2 {
            let (mut g, st) = (Probe::new("fiber", &l, &d, &m), st.clone());
            fibers.push(s.spawn_fiber(move || {
                g.mark();
                st.fetch_add(1, Ordering::SeqCst);
                let r = match what {
                    0 => gdex::fiber::wait_output(std::future::pending::<()>()),
                    _ => gdex::fiber::wait(glib::timeout_future(Duration::from_secs(3600))),
                };
                drop(g);
                r.map(|_| ())
            }));
        }
        let (mut g, st2) = (Probe::new("fiber", &l, &d, &m), st.clone());
        let local = s.spawn_fiber_local(move || {
            g.mark();
            let _rc = std::rc::Rc::new(());
            st2.fetch_add(1, Ordering::SeqCst);
            let r = gdex::fiber::wait_output(std::future::pending::<()>());
            drop(g);
            r.map(|_| ())
        });
        fibers.push(local);
        (s, tasks, fibers)
    }))
    .unwrap();
    common::wait_until(|| started.load(Ordering::SeqCst) == 6);
    let stop = Arc::new(AtomicBool::new(false));
    let waker = keep_waking.then(|| {
        let (stop, sig) = (stop.clone(), sig.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                sig.fire();
                std::thread::yield_now();
            }
        })
    });
    pool.shutdown();
    for (i, t) in tasks.iter().enumerate() {
        assert!(t.is_finished(), "pinned task {i} not resolved by shutdown()");
    }
    for (i, f) in fibers.iter().enumerate() {
        assert!(f.is_finished(), "fiber {i} not resolved by shutdown()");
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(w) = waker {
        w.join().unwrap();
    }
    for t in tasks {
        resolved_cancelled(t, "pinned task");
    }
    for f in fibers {
        let r = gdex::wait_for(gdex::timeout(Duration::from_secs(5), f));
        assert!(
            matches!(
                r,
                Ok(Ok(())) | Ok(Err(gdex::Error::Cancelled)) | Err(gdex::Error::Cancelled)
            ),
            "fiber: {r:?}"
        );
    }
    drop(s);
    drop(pool);
    common::wait_until(|| drops.load(Ordering::SeqCst) >= made.load(Ordering::SeqCst) || {
        std::thread::sleep(Duration::from_millis(50));
        true
    });
    assert_eq!(
        drops.load(Ordering::SeqCst),
        made.load(Ordering::SeqCst),
        "every future dropped exactly once; never dropped: {:?}",
        never_dropped()
    );
    check_places(&log);
}

#[test]
fn pinned_tasks_and_fibers_at_shutdown() {
    let _one = one_at_a_time();
    watchdog("pinned_tasks_and_fibers_at_shutdown", 60, || {
        pinned_and_fibers_at_shutdown(false, 1);
        pinned_and_fibers_at_shutdown(false, 2)
    });
}

#[test]
fn pinned_tasks_and_fibers_at_shutdown_while_woken() {
    let _one = one_at_a_time();
    watchdog("pinned_tasks_and_fibers_at_shutdown_while_woken", 120, || {
        for _ in 0..common::stress(10) {
            pinned_and_fibers_at_shutdown(true, 1);
            pinned_and_fibers_at_shutdown(true, 2)
        }
    });
}

/// Probe 1c (the bug's smallest reproduction): pinned tasks and fibers idle
/// on the scheduler of a worker's context, and another thread that keeps
/// spawning Send tasks there while the pool shuts down. Once the worker has
/// set `retired`, each of those spawns runs `drop_retired`, which steals the
/// *whole* queue for the reaper, racing the worker's own drain in `retire`:
/// the pinned tasks and fibers that the close's wake-all queued there are
/// dropped on `gdex-reaper`, where `ThreadBound` refuses to drop them: they
/// are leaked (g_critical "a pinned task or fiber was dropped on another
/// thread than its own; it is leaked instead").
#[test]
fn spawns_racing_retire_do_not_steal_thread_bound_jobs() {
    let _one = one_at_a_time();
    watchdog("spawns_racing_retire_do_not_steal_thread_bound_jobs", 120, || {
        for round in 0..common::stress(10) {
            let pool = pool(1);
            let log: Log = Default::default();
            let drops = Arc::new(AtomicUsize::new(0));
            let made = Arc::new(AtomicUsize::new(0));
            let started = Arc::new(AtomicUsize::new(0));
            let (l, d, m, st) = (log.clone(), drops.clone(), made.clone(), started.clone());
            let (s, tasks) = gdex::block_on(pool.scheduler().spawn(async move {
                let context = glib::MainContext::thread_default().unwrap();
                let s = gdex::Scheduler::for_context(&context);
                let tasks: Vec<_> = (0..50)
                    .map(|_| {
                        let (mut g, st) = (Probe::new("pinned", &l, &d, &m), st.clone());
                        s.spawn_pinned(move || async move {
                            g.mark();
                            let _rc = std::rc::Rc::new(());
                            st.fetch_add(1, Ordering::SeqCst);
                            std::future::pending::<()>().await
                        })
                    })
                    .collect();
                (s, tasks)
            }))
            .unwrap();
            common::wait_until(|| started.load(Ordering::SeqCst) == 50);
            let stop = Arc::new(AtomicBool::new(false));
            let spawner = {
                let (stop, s) = (stop.clone(), s.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        s.spawn(async {}).detach();
                    }
                })
            };
            pool.shutdown();
            stop.store(true, Ordering::Relaxed);
            spawner.join().unwrap();
            for t in tasks {
                resolved_cancelled(t, "pinned task");
            }
            drop((s, pool));
            std::thread::sleep(Duration::from_millis(20));
            assert_eq!(
                drops.load(Ordering::SeqCst),
                made.load(Ordering::SeqCst),
                "round {round}: never dropped: {:?}",
                never_dropped()
            );
            check_places(&log);
        }
    });
}
