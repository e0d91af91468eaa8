//! S9 where a pool's workers meet context schedulers. A scheduler made
//! for a pool worker's own context (`Scheduler::for_context` on the context
//! a pool task sees as its thread-default, as GLib code that captures "the
//! caller's context" does) is run by that worker only, so its tasks end
//! with the pool: after the shutdown every one has resolved (`Cancelled`),
//! every future is dropped exactly once, a thread-bound one (`!Send`,
//! pinned, fiber) on its own thread; whatever races the shutdown (spawns
//! and wake-ups from other threads), and whatever the destructors that the
//! worker's retirement runs do (use schedulers of worker contexts, drop
//! the last pool handle, panic). Once the pool is freed, a former worker's
//! context is an ordinary one. No other task is the pool's: a task of
//! another context polled on a worker in a nested loop is left alone by
//! the shutdown, while a pool task polled inside another scheduler's
//! dispatch ends with the pool.
//!
//! The tests take turns (`common::serial`): some set the process-wide panic
//! handler, and the machine has two cores.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use common::{quiet_pool, serial, watchdog, Counted, DroppedOn};

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
                        panic!(
                            "Wait::drop: the signal's lock stayed held for 5 s (self-deadlock?)"
                        );
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
        live()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
        self.drops.fetch_add(1, Ordering::SeqCst);
        self.log.lock().unwrap_or_else(|e| e.into_inner()).push((
            self.kind,
            self.polled.take(),
            here(),
        ));
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

/// Waits (up to 10 s: the reaper drops some late) until as many probes
/// were dropped as were made, a little more for a second drop, then checks
/// that each was dropped once, a thread-bound one on its thread.
fn all_dropped(drops: &AtomicUsize, made: &AtomicUsize, log: &Log, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while drops.load(Ordering::SeqCst) < made.load(Ordering::SeqCst)
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        drops.load(Ordering::SeqCst),
        made.load(Ordering::SeqCst),
        "{what}: every future dropped exactly once; never dropped: {:?}",
        never_dropped()
    );
    check_places(log);
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
        let got = gdex::block_on(
            pool.scheduler()
                .spawn_pinned(|| async { (glib::MainContext::thread_default().unwrap(), here()) }),
        )
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
    assert!(
        matches!(r, Ok(Err(gdex::Error::Cancelled))),
        "{what}: {r:?}"
    );
}

// ---------------------------------------------------------------------------
// The pool's tasks, and no others.
// ---------------------------------------------------------------------------

/// S9 for a scheduler made for a pool worker's own context
/// (`Scheduler::for_context` on the context a pool task sees as its
/// thread-default, as GLib code that captures "the caller's context" does):
/// only that worker runs its tasks, so they end with the pool. After
/// `shutdown()` each has resolved to `Cancelled`, whatever it was doing: idle
/// on nothing, on a GLib timeout of that context, on a `gdex::sleep`; a
/// `!Send` one; one still queued. Each future is dropped once, on the
/// worker's thread. A spawn on the scheduler afterwards, or on a scheduler
/// made for the context afterwards, resolves to `Cancelled` at once. Before
/// the fix every one of them hung: the worker exited with them queued or
/// idle on a context nobody would iterate again.
#[test]
fn the_tasks_of_a_scheduler_of_a_worker_context_end_with_the_pool() {
    use std::future::pending;
    let _one = serial();
    common::watchdog("the_tasks_of_a_scheduler_of_a_worker_context", 60, || {
        let pool = common::quiet_pool(1);
        let drops = Arc::new(AtomicUsize::new(0));
        let places = Arc::new(std::sync::Mutex::new(Vec::new()));
        let started = Arc::new(AtomicUsize::new(0));
        let guard = || (Counted(drops.clone()), DroppedOn(places.clone()));
        let long = Duration::from_secs(3600);
        let (guards, st) = ((0..4).map(|_| guard()).collect::<Vec<_>>(), started.clone());
        let setup = pool.scheduler().spawn(async move {
            let context = glib::MainContext::thread_default().expect("a worker's context");
            let s = gdex::Scheduler::for_context(&context);
            let mut guards = guards.into_iter();
            let mut tasks = Vec::new();
            for what in 0..3 {
                let (g, st) = (guards.next().unwrap(), st.clone());
                tasks.push(s.spawn(async move {
                    let _g = g;
                    st.fetch_add(1, Ordering::SeqCst);
                    match what {
                        0 => pending::<()>().await,
                        1 => glib::timeout_future(long).await,
                        _ => gdex::sleep(long).await,
                    }
                }));
            }
            // The worker holds its context: it may spawn `!Send` work there.
            let (g, st) = (guards.next().unwrap(), st.clone());
            tasks.push(s.spawn_local(async move {
                let _g = g;
                let not_send = std::rc::Rc::new(());
                st.fetch_add(1, Ordering::SeqCst);
                pending::<()>().await;
                drop(not_send);
            }));
            (context, s, tasks)
        });
        let (context, s, mut tasks) = gdex::block_on(setup).unwrap();
        common::wait_until(|| started.load(Ordering::SeqCst) == 4);
        // One more, queued from the worker while the worker is held in a
        // poll until the shutdown has begun: its context's next turn, which
        // would run it, never comes.
        let go = Arc::new(AtomicBool::new(false));
        let (g, s2, go2) = (guard(), s.clone(), go.clone());
        let (queued_tx, queued_rx) = std::sync::mpsc::channel();
        pool.scheduler()
            .spawn(async move {
                queued_tx
                    .send(s2.spawn(async move {
                        let _g = g;
                        pending::<()>().await
                    }))
                    .unwrap();
                while !go2.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
            .detach();
        tasks.push(queued_rx.recv().unwrap());
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            go.store(true, Ordering::SeqCst);
        });
        pool.shutdown();
        release.join().unwrap();
        for (i, task) in tasks.iter().enumerate() {
            assert!(task.is_finished(), "task {i}: not resolved by shutdown()");
        }
        assert_eq!(drops.load(Ordering::SeqCst), 5, "every future dropped once");
        let places_now = places.lock().unwrap().clone();
        assert!(
            places_now.iter().all(|p| p == "gdex-worker-0"),
            "dropped on {places_now:?}"
        );
        for (i, task) in tasks.into_iter().enumerate() {
            let r = gdex::wait_for(task);
            assert!(matches!(r, Err(gdex::Error::Cancelled)), "task {i}: {r:?}");
        }
        // Later spawns: on the scheduler kept from before, and on one made
        // for the context afterwards (while the pool is still alive).
        let late = s.spawn(async { 1 });
        let r = gdex::wait_for(gdex::timeout(Duration::from_secs(5), late));
        assert!(matches!(r, Ok(Err(gdex::Error::Cancelled))), "{r:?}");
        drop(s);
        let again = gdex::Scheduler::for_context(&context);
        let r = gdex::wait_for(gdex::timeout(
            Duration::from_secs(5),
            again.spawn(async { 2 }),
        ));
        assert!(matches!(r, Ok(Err(gdex::Error::Cancelled))), "{r:?}");
        drop(pool);
    });
}

/// S9 ends the pool's own tasks (and those of its workers' own contexts),
/// no others: a task of a scheduler of another context, polled on a worker
/// because a pool task iterates that context in a nested loop, is not the
/// pool's. The pool's shutdown neither wakes nor cancels it, nor waits for
/// it; the task waits on, runs when its context is iterated later, and
/// resolves normally. (It used to be recorded in the worker's book of idle
/// tasks: the shutdown woke it into its context's queue, which nobody
/// iterated, and the worker sat out its 2 s wait for late wake-ups for it.)
#[test]
fn a_task_of_another_context_polled_on_a_worker_is_not_the_pools() {
    use std::time::Instant;
    let _one = serial();
    common::watchdog("a_task_of_another_context_polled_on_a_worker", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let context = glib::MainContext::new();
        let foreign_scheduler = gdex::Scheduler::for_context(&context);
        let polls = Arc::new(AtomicUsize::new(0));
        let (tx, mut rx) = futures::channel::oneshot::channel::<u32>();
        let p = polls.clone();
        let foreign = foreign_scheduler.spawn(std::future::poll_fn(move |cx| {
            p.fetch_add(1, Ordering::SeqCst);
            std::pin::Pin::new(&mut rx)
                .poll(cx)
                .map(|sent| sent.expect("the sender is kept") + 1)
        }));
        // A pool task runs the context in a nested loop until the foreign
        // task has been polled there once and gone idle.
        let (c, p) = (context.clone(), polls.clone());
        let nested = pool.scheduler().spawn(async move {
            c.with_thread_default(|| common::pump_until(&c, || p.load(Ordering::SeqCst) > 0))
                .expect("the context is free");
            std::thread::current().name().map(str::to_owned)
        });
        let ran_on = gdex::wait_for(nested).unwrap();
        assert_eq!(ran_on.as_deref(), Some("gdex-worker-0"));
        assert_eq!(polls.load(Ordering::SeqCst), 1);

        let began = Instant::now();
        pool.shutdown();
        let took = began.elapsed();
        // Nothing woke it: its context's queue is empty.
        common::pump(&context);
        assert_eq!(
            polls.load(Ordering::SeqCst),
            1,
            "the pool's shutdown woke a task that is not the pool's"
        );
        assert!(!foreign.is_finished(), "the pool's shutdown ended it");
        // The worker did not wait for it: well under the 2 s it waits for
        // late wake-ups of its own tasks.
        assert!(took < Duration::from_secs(1), "shutdown() took {took:?}");
        // It runs on when its context is iterated, and resolves normally.
        tx.send(41).unwrap();
        common::pump_until(&context, || foreign.is_finished());
        assert_eq!(gdex::wait_for(foreign).unwrap(), 42);
        assert_eq!(polls.load(Ordering::SeqCst), 2);
        drop(pool);
    });
}

/// S9, the other way round: a pool task polled inside another scheduler's
/// dispatch on a worker (a task of a scheduler of the worker's own context
/// runs a nested loop of another context, whose task runs the worker's
/// context in turn) is still the pool's, and ends with it. Each run loop
/// says where the tasks it polls record themselves, the worker's as well
/// as a context scheduler's: the inner one wins.
#[test]
fn a_pool_task_polled_inside_another_schedulers_dispatch_ends_with_the_pool() {
    use std::future::pending;
    let _one = serial();
    common::watchdog("a_pool_task_polled_inside_another_dispatch", 60, || {
        let pool = common::quiet_pool(1);
        let other_context = glib::MainContext::new();
        let other = gdex::Scheduler::for_context(&other_context);
        let polled = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = std::sync::mpsc::channel();
        let (pool_scheduler, p) = (pool.scheduler(), polled.clone());
        let setup = pool.scheduler().spawn(async move {
            let worker_context = glib::MainContext::thread_default().expect("a worker's context");
            let on_worker = gdex::Scheduler::for_context(&worker_context);
            on_worker
                .spawn(async move {
                    let c = other_context.clone();
                    other_context
                        .with_thread_default(move || {
                            let inner = other.spawn(async move {
                                let task = pool_scheduler
                                    .spawn(common::after_first_poll(&p, pending::<()>()));
                                common::pump_until(&worker_context, || {
                                    p.load(Ordering::SeqCst) > 0
                                });
                                tx.send(task).unwrap();
                            });
                            common::pump_until(&c, || inner.is_finished());
                        })
                        .expect("the other context is free");
                })
                .detach();
        });
        gdex::wait_for(setup).unwrap();
        let task = rx.recv().unwrap();
        assert_eq!(polled.load(Ordering::SeqCst), 1);
        pool.shutdown();
        assert!(task.is_finished(), "not resolved by shutdown()");
        assert!(matches!(gdex::wait_for(task), Err(gdex::Error::Cancelled)));
        drop(pool);
    });
}

// ---------------------------------------------------------------------------
// Races: spawns and wake-ups from other threads racing shutdown().
// ---------------------------------------------------------------------------

fn race_round(round: usize, in_lock: bool) {
    let pool = quiet_pool(2);
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
        let (stop, s, log, drops, made) = (
            stop.clone(),
            s.clone(),
            log.clone(),
            drops.clone(),
            made.clone(),
        );
        std::thread::spawn(move || {
            let mut late = Vec::new();
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                if n.is_multiple_of(3) {
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
        assert!(
            t.is_finished(),
            "round {round}: task {i} not resolved by shutdown()"
        );
    }
    for (i, f) in fibers.iter().enumerate() {
        assert!(
            f.is_finished(),
            "round {round}: fiber {i} not resolved by shutdown()"
        );
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
            matches!(r, Ok(Ok(()) | Err(gdex::Error::Cancelled))),
            "fiber: {r:?}"
        );
    }
    for t in late {
        resolved_cancelled(t, "late spawn");
    }
    drop(s);
    drop(pool);
    all_dropped(&drops, &made, &log, &format!("round {round}"));
}

/// (S9) Wake-ups (outside the lock) and spawns (Send, pinned) from
/// other threads race `shutdown()`, with Send, `!Send`, pinned tasks and
/// fibers idle on the scheduler of a worker's context.
#[test]
fn race_wakeups_and_spawns_with_shutdown() {
    let _one = serial();
    watchdog("race_wakeups_and_spawns_with_shutdown", 600, || {
        for round in 0..common::stress(30) {
            race_round(round, false);
        }
    });
}

/// (S9) The same, the wake-ups done while holding the lock that the
/// woken future's drop takes (a channel that wakes under its lock).
#[test]
fn race_wakeups_in_a_lock_with_shutdown() {
    let _one = serial();
    watchdog("race_wakeups_in_a_lock_with_shutdown", 600, || {
        for round in 0..common::stress(30) {
            race_round(round, true);
        }
    });
}

// ---------------------------------------------------------------------------
// Pinned tasks and fibers on that scheduler at shutdown (no race).
// ---------------------------------------------------------------------------

/// A pinned task (`spawn_pinned`) and a fiber (`spawn_fiber`,
/// `spawn_fiber_local`) on the scheduler of a worker's context, idle at
/// shutdown (on nothing, on a signal that another thread keeps firing, on a
/// GLib timeout): each resolves by `shutdown()`, each is dropped exactly
/// once, on the worker that polled it.
fn pinned_and_fibers_at_shutdown(keep_waking: bool, workers: usize) {
    let pool = quiet_pool(workers);
    let log: Log = Default::default();
    let drops = Arc::new(AtomicUsize::new(0));
    let made = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let sig = Signal::default();
    let (l, d, m, st, sg) = (
        log.clone(),
        drops.clone(),
        made.clone(),
        started.clone(),
        sig.clone(),
    );
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
        assert!(
            t.is_finished(),
            "pinned task {i} not resolved by shutdown()"
        );
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
                Ok(Ok(Ok(()) | Err(gdex::Error::Cancelled)) | Err(gdex::Error::Cancelled))
            ),
            "fiber: {r:?}"
        );
    }
    drop(s);
    drop(pool);
    all_dropped(&drops, &made, &log, "pinned tasks and fibers");
}

/// [`pinned_and_fibers_at_shutdown`] on pools of one and two workers
/// (S9, F2).
#[test]
fn pinned_tasks_and_fibers_at_shutdown() {
    let _one = serial();
    watchdog("pinned_tasks_and_fibers_at_shutdown", 60, || {
        pinned_and_fibers_at_shutdown(false, 1);
        pinned_and_fibers_at_shutdown(false, 2)
    });
}

/// [`pinned_and_fibers_at_shutdown`] while another thread keeps waking
/// the pinned tasks (S9, F2).
#[test]
fn pinned_tasks_and_fibers_at_shutdown_while_woken() {
    let _one = serial();
    watchdog(
        "pinned_tasks_and_fibers_at_shutdown_while_woken",
        120,
        || {
            for _ in 0..common::stress(10) {
                pinned_and_fibers_at_shutdown(true, 1);
                pinned_and_fibers_at_shutdown(true, 2)
            }
        },
    );
}

/// (S9, F2) Pinned tasks and fibers idle on the scheduler of a worker's
/// context, and another thread that keeps spawning Send tasks there while
/// the pool shuts down. Once the worker has set `retired`, each of those
/// spawns runs `drop_retired`, which must not steal the *whole* queue for
/// the reaper, racing the worker's own drain in `retire`: the pinned tasks
/// and fibers that the close's wake-all queued there would be dropped on
/// `gdex-reaper`, where `ThreadBound` refuses to drop them: they would be
/// leaked (g_critical "a pinned task or fiber was dropped on another
/// thread than its own; it is leaked instead").
#[test]
fn spawns_racing_retire_do_not_steal_thread_bound_jobs() {
    let _one = serial();
    watchdog(
        "spawns_racing_retire_do_not_steal_thread_bound_jobs",
        120,
        || {
            for round in 0..common::stress(10) {
                let pool = quiet_pool(1);
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
                all_dropped(&drops, &made, &log, &format!("round {round}"));
            }
        },
    );
}

/// Threads that spawn on the scheduler of a worker's context in a loop,
/// without pause, while the pool shuts down: the exiting worker's drains
/// take what was queued when each began and no more, so its exit (and
/// `shutdown()`) does not wait for the spawners to stop, which here only
/// happens once `shutdown()` has returned (S9). A drain to the empty queue
/// would chase them: `shutdown()` then took from 1 s to never (one run in
/// 20 hung at the watchdog).
#[test]
fn shutdown_returns_while_threads_spawn_there_in_a_loop() {
    let _one = serial();
    watchdog(
        "shutdown_returns_while_threads_spawn_there_in_a_loop",
        60,
        || {
            for _ in 0..common::stress(5) {
                let pool = quiet_pool(1);
                let (_context, s, _) = worker_context(&pool);
                let stop = Arc::new(AtomicBool::new(false));
                let spawners: Vec<_> = (0..2)
                    .map(|_| {
                        let (stop, s) = (stop.clone(), s.clone());
                        std::thread::spawn(move || {
                            while !stop.load(Ordering::Relaxed) {
                                s.spawn(async {}).detach();
                            }
                        })
                    })
                    .collect();
                std::thread::sleep(Duration::from_millis(5));
                pool.shutdown();
                stop.store(true, Ordering::Relaxed);
                for spawner in spawners {
                    spawner.join().unwrap();
                }
                let late = s.spawn(async { 1 });
                resolved_cancelled(late, "a spawn after the shutdown");
            }
        },
    );
}

// ---------------------------------------------------------------------------
// Deadlocks: destructors run by `retire`, on the worker.
// ---------------------------------------------------------------------------

/// Runs its closure when dropped.
struct OnDrop<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f()
        }
    }
}

/// (S9) An idle task of the scheduler of worker 0's context whose
/// future's drop (run by `retire`, on worker 0) makes a scheduler for the
/// same context and for worker 1's, spawns on both (Send and `!Send`),
/// spawns a pinned task, and drops the last `Scheduler` handles. No
/// deadlock; every task made there resolves to `Cancelled`; every future is
/// dropped exactly once.
#[test]
fn a_destructor_during_retire_uses_schedulers_of_worker_contexts() {
    let _one = serial();
    watchdog("a_destructor_during_retire_uses_schedulers", 60, || {
        for _ in 0..common::stress(5) {
            let pool = quiet_pool(2);
            let [(c0, _), (c1, _)] = two_worker_contexts(&pool);
            let drops = Arc::new(AtomicUsize::new(0));
            let made_in_drop: Arc<Mutex<Vec<gdex::Task<()>>>> = Default::default();
            let ran_drop = Arc::new(AtomicBool::new(false));
            let started = Arc::new(AtomicUsize::new(0));
            let (d, made, rd, st) = (
                drops.clone(),
                made_in_drop.clone(),
                ran_drop.clone(),
                started.clone(),
            );
            let (c0b, c1b) = (c0.clone(), c1.clone());
            let s0 = gdex::Scheduler::for_context(&c0);
            let task = s0.spawn(async move {
                let _hook = OnDrop(Some(move || {
                    let same = gdex::Scheduler::for_context(&c0b);
                    let other = gdex::Scheduler::for_context(&c1b);
                    let mut made = made.lock().unwrap();
                    for s in [&same, &other] {
                        let g = Counted(d.clone());
                        made.push(s.spawn(async move {
                            let _g = g;
                            std::future::pending::<()>().await
                        }));
                        let g = Counted(d.clone());
                        made.push(s.spawn_pinned(move || async move {
                            let _g = g;
                            std::future::pending::<()>().await
                        }));
                    }
                    // On worker 0, which still holds its context.
                    let g = Counted(d.clone());
                    made.push(same.spawn_local(async move {
                        let _g = g;
                        std::future::pending::<()>().await
                    }));
                    drop((same, other));
                    rd.store(true, Ordering::SeqCst);
                }));
                st.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<()>().await
            });
            common::wait_until(|| started.load(Ordering::SeqCst) == 1);
            drop(s0);
            pool.shutdown();
            assert!(task.is_finished());
            assert!(ran_drop.load(Ordering::SeqCst));
            resolved_cancelled(task, "the task");
            let made: Vec<_> = std::mem::take(&mut *made_in_drop.lock().unwrap());
            assert_eq!(made.len(), 5);
            for t in made {
                resolved_cancelled(t, "a task spawned in a destructor");
            }
            drop(pool);
            common::wait_until(|| drops.load(Ordering::SeqCst) == 5);
        }
    });
}

/// (S9) The last `ThreadPool` handle is held by an idle task of the
/// scheduler of a worker's context, which itself began the shutdown (from
/// the worker, inside that scheduler's dispatch). `retire` drops the
/// future, and with it the last handle, on the worker: no deadlock, the
/// task resolves.
#[test]
fn the_last_pool_handle_dropped_during_retire() {
    let _one = serial();
    watchdog("the_last_pool_handle_dropped_during_retire", 60, || {
        for _ in 0..common::stress(5) {
            let pool = quiet_pool(2);
            let (context, s, _) = worker_context(&pool);
            let go = Signal::default();
            let drops = Arc::new(AtomicUsize::new(0));
            let (p, g, go2) = (pool.clone(), Counted(drops.clone()), go.clone());
            let task = s.spawn(async move {
                let _g = g;
                go2.wait().await;
                p.shutdown();
                // Pending with the pool's last handle.
                let _p = p;
                std::future::pending::<()>().await
            });
            drop(pool);
            go.fire();
            common::wait_until(|| task.is_finished());
            resolved_cancelled(task, "the task holding the pool");
            assert_eq!(drops.load(Ordering::SeqCst), 1);
            let late = s.spawn(async { 3 });
            resolved_cancelled(late, "a spawn afterwards");
            drop((s, context));
        }
    });
}

/// (S9) After retirement, spawns done while holding a lock that the
/// spawned future's drop takes: a Send spawn goes to the reaper (no
/// deadlock). A `!Send` spawn from a thread that owns the freed worker
/// context is dropped inline by `push_local`, on its own thread: its drop
/// sees the lock held (a blocking `lock()` there would deadlock, as the
/// same pattern does on a closed pool's `spawn`, which drops its future in
/// the caller too).
#[test]
fn spawns_under_a_lock_after_retirement() {
    let _one = serial();
    watchdog("spawns_under_a_lock_after_retirement", 60, || {
        let pool = quiet_pool(1);
        let (context, s, _) = worker_context(&pool);
        pool.shutdown();
        let lock = Arc::new(Mutex::new(()));
        let saw_held = Arc::new(AtomicBool::new(false));
        {
            let _held = lock.lock().unwrap();
            // (The hooks are made outside the futures: they are never
            // polled, so only what they captured is dropped.)
            let (l, sh) = (lock.clone(), saw_held.clone());
            let hook = OnDrop(Some(move || {
                // On the reaper: waits for the spawner's lock.
                let _g = l.lock().unwrap();
                let _ = sh;
            }));
            let t = s.spawn(async move {
                let _hook = hook;
                std::future::pending::<()>().await
            });
            drop(_held);
            resolved_cancelled(t, "a Send spawn after retirement");
        }
        // The worker has exited and released its context: this thread may
        // own it now.
        let (l, sh) = (lock.clone(), saw_held.clone());
        let t = context
            .with_thread_default(|| {
                let _held = lock.lock().unwrap();
                let hook = OnDrop(Some(move || {
                    sh.store(l.try_lock().is_err(), Ordering::SeqCst);
                }));
                s.spawn_local(async move {
                    let _hook = hook;
                    std::future::pending::<()>().await
                })
            })
            .expect("the exited worker's context is free");
        resolved_cancelled(t, "a !Send spawn after retirement");
        assert!(
            saw_held.load(Ordering::SeqCst),
            "the !Send spawn is dropped inline, on its own thread, while the spawner holds its lock"
        );
        drop((s, pool));
    });
}

// ---------------------------------------------------------------------------
// Panics in destructors of retired tasks.
// ---------------------------------------------------------------------------

struct PanicOnDrop;

impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        panic!("a retired future panics in its drop");
    }
}

/// (S9, S6, X5) Futures of the scheduler of a worker's context that panic in
/// their drop, among others that do not: queued, idle, `!Send`, pinned, and
/// one spawned after retirement (dropped by the reaper). Each panic goes to
/// the panic handler; no abort; every other future is still dropped, once;
/// the reaper survives (a later spawn still resolves).
#[test]
fn panics_in_destructors_of_retired_tasks() {
    let _one = serial();
    watchdog("panics_in_destructors_of_retired_tasks", 60, || {
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let log = seen.clone();
        gdex::set_panic_handler(move |event| log.lock().unwrap().push(event.message.clone()));
        let pool = quiet_pool(1);
        let drops = Arc::new(AtomicUsize::new(0));
        let started = Arc::new(AtomicUsize::new(0));
        let (d, st) = (drops.clone(), started.clone());
        let (s, tasks) = gdex::block_on(pool.scheduler().spawn(async move {
            let context = glib::MainContext::thread_default().unwrap();
            let s = gdex::Scheduler::for_context(&context);
            let mut tasks = Vec::new();
            for i in 0..6 {
                let (g, st) = (Counted(d.clone()), st.clone());
                let panicky = i % 2 == 0;
                tasks.push(s.spawn(async move {
                    let _g = g;
                    let _p = panicky.then(|| PanicOnDrop);
                    st.fetch_add(1, Ordering::SeqCst);
                    std::future::pending::<()>().await
                }));
            }
            let (g, st2) = (Counted(d.clone()), st.clone());
            tasks.push(s.spawn_local(async move {
                let _g = g;
                let _p = PanicOnDrop;
                let _rc = std::rc::Rc::new(());
                st2.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<()>().await
            }));
            let (g, st3) = (Counted(d.clone()), st.clone());
            tasks.push(s.spawn_pinned(move || async move {
                let _g = g;
                let _p = PanicOnDrop;
                st3.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<()>().await
            }));
            (s, tasks)
        }))
        .unwrap();
        common::wait_until(|| started.load(Ordering::SeqCst) == 8);
        pool.shutdown();
        for t in tasks {
            resolved_cancelled(t, "a task");
        }
        assert_eq!(drops.load(Ordering::SeqCst), 8, "every future dropped once");
        // After retirement: to the reaper, which must survive the panic.
        // (Made outside the future: it is never polled, so only what it
        // captured is dropped.)
        let (g, p) = (Counted(drops.clone()), PanicOnDrop);
        let t = s.spawn(async move {
            let _g = g;
            let _p = p;
            std::future::pending::<()>().await
        });
        resolved_cancelled(t, "a spawn after retirement");
        let t = s.spawn(async { 1 });
        resolved_cancelled(t, "another spawn after retirement");
        std::thread::sleep(Duration::from_millis(200));
        gdex::reset_panic_handler();
        assert_eq!(drops.load(Ordering::SeqCst), 9, "every future dropped once");
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 6, "{seen:?}");
        assert!(
            seen.iter().all(|m| m.contains("panics in its drop")),
            "{seen:?}"
        );
        drop((s, pool));
    });
}

// ---------------------------------------------------------------------------
// Several pools; many schedulers; after the pool is freed.
// ---------------------------------------------------------------------------

/// (S9, S2) Three 1-worker pools, each with many schedulers made and
/// dropped for its worker's context (the `Weak` list pruning), then one kept
/// with an idle task. Shutting down one pool resolves its own task only:
/// the others' schedulers still run new work on their workers.
#[test]
fn several_pools_and_many_schedulers_per_worker_context() {
    let _one = serial();
    watchdog("several_pools_and_many_schedulers", 60, || {
        let pools: Vec<_> = (0..3).map(|_| quiet_pool(1)).collect();
        let mut kept = Vec::new();
        for p in &pools {
            let (context, s, name) = worker_context(p);
            drop(s);
            for i in 0..300 {
                let s = gdex::Scheduler::for_context(&context);
                if i % 50 == 0 {
                    assert_eq!(gdex::block_on(s.spawn(async { here() })).unwrap(), name);
                }
            }
            let s = gdex::Scheduler::for_context(&context);
            let idle = s.spawn(std::future::pending::<()>());
            kept.push((context, s, idle, name));
        }
        for (i, p) in pools.iter().enumerate() {
            p.shutdown();
            for (j, (_, s, idle, name)) in kept.iter().enumerate() {
                if j <= i {
                    assert!(
                        idle.is_finished(),
                        "pool {j}'s task after pool {i}'s shutdown"
                    );
                } else {
                    assert!(
                        !idle.is_finished(),
                        "pool {j}'s task after pool {i}'s shutdown"
                    );
                    let r = gdex::block_on(gdex::timeout(
                        Duration::from_secs(5),
                        s.spawn(async { here() }),
                    ));
                    assert!(matches!(&r, Ok(Ok(got)) if got == name), "{r:?}");
                }
            }
        }
        for (_, _, idle, _) in kept.drain(..) {
            resolved_cancelled(idle, "an idle task");
        }
    });
}

/// The context of the worker of a one-worker pool, and a scheduler made
/// for it while the pool lived, retired with the worker: the pool is freed
/// (its task idle on that scheduler resolved as cancelled).
fn retired_worker_context() -> (glib::MainContext, gdex::Scheduler) {
    let p = quiet_pool(1);
    let (context, s, _) = worker_context(&p);
    let idle = s.spawn(std::future::pending::<()>());
    drop(p);
    resolved_cancelled(idle, "the idle task");
    (context, s)
}

/// (S2) A retired scheduler still held (a handle kept past its pool, or,
/// for a moment after its tasks resolved, a task's block the reaper frees)
/// is not handed out for its context once the pool is freed: a new
/// `Scheduler::for_context` is an ordinary scheduler that runs its tasks,
/// while the kept handle still refuses its own. (It handed out the retired
/// one, whose spawns resolved as cancelled: the rare failure of
/// `after_the_pool_is_freed_a_worker_context_is_ordinary`, whose task
/// met a reaper still dropping a retired task's block.)
#[test]
fn a_retired_scheduler_kept_past_its_pool_is_not_handed_out_again() {
    let _one = serial();
    watchdog("a_retired_scheduler_kept_past_its_pool", 60, || {
        let (context, kept) = retired_worker_context();
        let fresh = gdex::Scheduler::for_context(&context);
        let (ran, refused) = context
            .with_thread_default(|| {
                let ran = fresh.spawn(async { 1 });
                let refused = kept.spawn(async { 2 });
                common::pump_polling(&context, || ran.is_finished() && refused.is_finished());
                (ran, refused)
            })
            .unwrap();
        assert_eq!(
            gdex::block_on(ran).unwrap(),
            1,
            "a scheduler made for a freed pool's context after it was retired"
        );
        resolved_cancelled(refused, "a spawn on the kept retired scheduler");
    });
}

/// (S2) Once the pool is freed (its last handle dropped, no scheduler
/// of it left), a scheduler made for a former worker's context, which the
/// test kept, is an ordinary context scheduler: a thread that owns and
/// iterates the context runs its tasks, `!Send` ones too. And fresh
/// contexts (whose address may be a freed worker context's) are never
/// taken for a worker's.
#[test]
fn after_the_pool_is_freed_a_worker_context_is_ordinary() {
    let _one = serial();
    watchdog("after_the_pool_is_freed", 120, || {
        let (context, s) = retired_worker_context();
        // The retired scheduler refuses what it is given.
        let late = s.spawn(async { 0 });
        resolved_cancelled(late, "a spawn on the retired scheduler");
        drop(s);
        let s = gdex::Scheduler::for_context(&context);
        let (a, b) = context
            .with_thread_default(|| {
                let a = s.spawn(async { 1 });
                let b = s.spawn_local(async {
                    let rc = std::rc::Rc::new(2);
                    glib::timeout_future(Duration::from_millis(1)).await;
                    *rc
                });
                common::pump_polling(&context, || a.is_finished() && b.is_finished());
                (a, b)
            })
            .unwrap();
        assert_eq!(gdex::block_on(a).unwrap(), 1);
        assert_eq!(gdex::block_on(b).unwrap(), 2);
        drop((s, context));

        // Address reuse: free pools and their contexts, then make fresh
        // contexts; each one's scheduler runs its work.
        let mut old = std::collections::HashSet::new();
        let mut reused = 0;
        for _ in 0..common::stress(20) {
            let p = quiet_pool(1);
            let (context, s, _) = worker_context(&p);
            old.insert(context.as_ptr() as usize);
            drop((s, context, p));
            for _ in 0..5 {
                let fresh = glib::MainContext::new();
                if old.contains(&(fresh.as_ptr() as usize)) {
                    reused += 1;
                }
                let s = gdex::Scheduler::for_context(&fresh);
                let t = s.spawn(async { 7 });
                common::pump_polling(&fresh, || t.is_finished());
                assert_eq!(gdex::block_on(t).unwrap(), 7);
            }
        }
        eprintln!("fresh contexts at a freed worker context's address: {reused}");
    });
}

/// (S9) Nested loops on the worker: a task of the scheduler of a
/// worker's context runs a nested `glib::MainLoop` on the worker's context
/// (`gdex::block_on` refuses a worker) over and over while the pool shuts
/// down; another one is idle. No hang; both resolve.
#[test]
fn a_nested_loop_inside_a_task_of_a_worker_context_at_shutdown() {
    let _one = serial();
    watchdog(
        "a_nested_loop_inside_a_task_of_a_worker_context",
        60,
        || {
            for _ in 0..common::stress(5) {
                let pool = quiet_pool(1);
                let (_context, s, _) = worker_context(&pool);
                let started = Arc::new(AtomicUsize::new(0));
                let st = started.clone();
                let busy = s.spawn(async move {
                    st.fetch_add(1, Ordering::SeqCst);
                    loop {
                        // (gdex::block_on refuses a pool worker: a GLib loop.)
                        let context = glib::MainContext::thread_default().unwrap();
                        let nested = glib::MainLoop::new(Some(&context), false);
                        let n = nested.clone();
                        // On this context (`timeout_add_local_once` would
                        // attach to the global default one, which nobody runs).
                        glib::timeout_source_new(
                            Duration::from_millis(1),
                            None,
                            glib::Priority::DEFAULT,
                            move || {
                                n.quit();
                                glib::ControlFlow::Break
                            },
                        )
                        .attach(Some(&context));
                        nested.run();
                        gdex::yield_now().await;
                    }
                });
                let idle = s.spawn(std::future::pending::<()>());
                common::wait_until(|| started.load(Ordering::SeqCst) == 1);
                std::thread::sleep(Duration::from_millis(5));
                pool.shutdown();
                assert!(busy.is_finished() && idle.is_finished());
                resolved_cancelled(busy, "the busy task");
                resolved_cancelled(idle, "the idle task");
            }
        },
    );
}
