//! Every task runs exactly once (P6: no lost wake-up; P3-P5: no duplicated
//! job), whether spawned from outside the pool, from inside workers, or woken
//! across workers. One million tasks by default; `GDEX_STRESS` scales.
//!
//! And every job that never runs is dropped exactly once (S9): tasks, boxed
//! and inline work items and pinned tasks left in a pool's deques, pinned
//! queues, inboxes and injector at shutdown, and `!Send` jobs left in a
//! context scheduler's queues when its thread exits; a panic in one of
//! their destructors goes to the panic handler (S6, X5). That test sets
//! the process-wide panic handler: no other test here panics.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::channel::oneshot;

fn check_counts(counts: &[AtomicU32]) {
    let wrong: Vec<(usize, u32)> = counts
        .iter()
        .enumerate()
        .map(|(i, c)| (i, c.load(Ordering::Relaxed)))
        .filter(|&(_, c)| c != 1)
        .take(10)
        .collect();
    assert!(
        wrong.is_empty(),
        "tasks not run exactly once (index, runs): {wrong:?}"
    );
}

#[test]
fn a_million_tasks_each_run_exactly_once_on_4_workers() {
    let _one = common::serial();
    common::watchdog("a_million_tasks_on_4_workers", 300, || {
        run(4, common::stress(1_000_000))
    });
}

#[test]
fn tasks_each_run_exactly_once_on_1_and_2_workers() {
    let _one = common::serial();
    common::watchdog("tasks_on_1_and_2_workers", 300, || {
        run(1, common::stress(100_000));
        run(2, common::stress(200_000));
    });
}

/// `total` tasks: two fifths spawned from outside, two fifths from inside
/// workers, one fifth woken across workers by a oneshot.
fn run(workers: usize, total: usize) {
    {
        let outside = total * 2 / 5;
        let inside = total * 2 / 5;
        let woken = total - outside - inside;
        let pool = gdex::ThreadPool::builder()
            .workers(workers)
            .build()
            .unwrap();
        let s = pool.scheduler();
        let counts: Arc<Vec<AtomicU32>> = Arc::new((0..total).map(|_| AtomicU32::new(0)).collect());
        let finished = Arc::new(AtomicUsize::new(0));
        let (all_done_tx, all_done) = std::sync::mpsc::channel::<()>();
        let done = {
            let finished = finished.clone();
            move |counts: &Vec<AtomicU32>, i: usize, tx: &std::sync::mpsc::Sender<()>| {
                counts[i].fetch_add(1, Ordering::Relaxed);
                if finished.fetch_add(1, Ordering::AcqRel) + 1 == total {
                    tx.send(()).unwrap();
                }
            }
        };

        // 1. Spawned from outside the pool: the injector.
        for i in 0..outside {
            let (counts, tx, done) = (counts.clone(), all_done_tx.clone(), done.clone());
            s.spawn(async move { done(&counts, i, &tx) }).detach();
        }

        // 2. Spawned from inside workers: local deques, stolen by peers.
        let spawners = 8;
        for k in 0..spawners {
            let (counts, tx, done, s2) =
                (counts.clone(), all_done_tx.clone(), done.clone(), s.clone());
            s.spawn(async move {
                let lo = outside + k * inside / spawners;
                let hi = outside + (k + 1) * inside / spawners;
                for i in lo..hi {
                    let (counts, tx, done) = (counts.clone(), tx.clone(), done.clone());
                    s2.spawn(async move { done(&counts, i, &tx) }).detach();
                    if i % 64 == 0 {
                        gdex::yield_now().await;
                    }
                }
            })
            .detach();
        }

        // 3. Woken across workers: each waiter parks on a oneshot that a task
        //    (probably on another worker) completes.
        for i in outside + inside..total {
            let (tx_wake, rx_wake) = oneshot::channel::<()>();
            let (counts, tx, done) = (counts.clone(), all_done_tx.clone(), done.clone());
            s.spawn(async move {
                rx_wake.await.unwrap();
                done(&counts, i, &tx)
            })
            .detach();
            s.spawn(async move {
                tx_wake.send(()).unwrap();
            })
            .detach();
        }

        all_done.recv().unwrap();
        // Give a duplicate run a chance to show before counting.
        pool.shutdown();
        assert_eq!(finished.load(Ordering::Acquire), total);
        check_counts(&counts);
        // Every job counted by the workers: at least one poll per task.
        assert!(pool.metrics().tasks_run() as usize >= total + woken + spawners);
    }
}

/// Drop and run counts per id, and the panic events seen.
#[derive(Default)]
struct Book {
    drops: Mutex<Vec<usize>>,
    runs: Mutex<Vec<usize>>,
    armed: Mutex<Vec<bool>>,
}

impl Book {
    fn new_id(&self, armed: bool) -> usize {
        let mut drops = self.drops.lock().unwrap();
        self.runs.lock().unwrap().push(0);
        self.armed.lock().unwrap().push(armed);
        drops.push(0);
        drops.len() - 1
    }
}

/// Counts its drop; panics in its drop while armed (it is disarmed when the
/// job that holds it runs).
struct Tracked {
    id: usize,
    book: Arc<Book>,
    armed: bool,
}

impl Tracked {
    fn new(book: &Arc<Book>, armed: bool) -> Tracked {
        Tracked {
            id: book.new_id(armed),
            book: book.clone(),
            armed,
        }
    }

    fn ran(&mut self) {
        self.armed = false;
        self.book.runs.lock().unwrap()[self.id] += 1;
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.book.drops.lock().unwrap()[self.id] += 1;
        if self.armed {
            panic!("tracked {} dropped unrun", self.id);
        }
    }
}

/// Queues on `s`, `n` times: a task, a boxed work item (a `Tracked` is
/// three words), an inline one (one `Arc`) and a pinned task, each holding
/// a `Tracked` (armed every third time).
fn queue_some(s: &gdex::Scheduler, book: &Arc<Book>, n: usize, tasks: &Mutex<Vec<gdex::Task<()>>>) {
    for k in 0..n {
        let armed = k % 3 == 0;
        let mut t = Tracked::new(book, armed);
        let task = s.spawn(async move { t.ran() });
        tasks.lock().unwrap().push(task);

        let mut t = Tracked::new(book, armed);
        s.push(move || t.ran());

        // One word: an `Arc` alone (inline in the job). It counts a drop of
        // its own through a Tracked inside the Arc.
        let inner = Arc::new(Mutex::new(Tracked::new(book, armed)));
        s.push(move || inner.lock().unwrap().ran());

        let mut t = Tracked::new(book, armed);
        let task = s.spawn_pinned(move || async move { t.ran() });
        tasks.lock().unwrap().push(task);
    }
}

/// With both workers busy, jobs are queued on the deque, the pinned queue
/// and the inbox (from a worker), and on the injector and the inboxes (from
/// outside); then the pool shuts down while they wait. Every job runs once
/// or is dropped once, and every armed one dropped unrun reports its panic
/// to the handler (`PanicSource::Drop`) without killing its worker: the
/// worker's later jobs are still dropped.
///
/// Gives how many armed jobs were dropped unrun.
fn shutdown_with_every_queue_full(thread_per_core: bool) -> usize {
    let pool = gdex::ThreadPool::builder()
        .workers(2)
        .thread_per_core(thread_per_core)
        .build()
        .unwrap();
    let s = pool.scheduler();
    let book: Arc<Book> = Arc::default();
    let tasks: Arc<Mutex<Vec<gdex::Task<()>>>> = Arc::default();
    let gate = Arc::new(AtomicBool::new(false));
    let blocked = Arc::new(AtomicUsize::new(0));
    let mut blockers = Vec::new();
    for w in 0..2 {
        let (gate, blocked, book, tasks, inner) = (
            gate.clone(),
            blocked.clone(),
            book.clone(),
            tasks.clone(),
            s.clone(),
        );
        blockers.push(s.spawn_pinned(move || async move {
            if w == 0 {
                // From a worker: deque, own pinned queue, peer's inbox.
                queue_some(&inner, &book, 40, &tasks);
            }
            blocked.fetch_add(1, Ordering::SeqCst);
            while !gate.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }));
    }
    common::wait_until(|| blocked.load(Ordering::SeqCst) == 2);
    // From outside: injector (or inboxes, thread-per-core) and inboxes.
    queue_some(&s, &book, 40, &tasks);
    let opener = {
        let gate = gate.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            gate.store(true, Ordering::SeqCst);
        })
    };
    pool.shutdown();
    opener.join().unwrap();
    for t in blockers {
        let _ = gdex::block_on(t);
    }
    let tasks = std::mem::take(&mut *tasks.lock().unwrap());
    for t in tasks {
        let _ = gdex::block_on(t);
    }
    let drops = book.drops.lock().unwrap().clone();
    let runs = book.runs.lock().unwrap().clone();
    let wrong: Vec<_> = drops
        .iter()
        .zip(&runs)
        .enumerate()
        .filter(|(_, (d, r))| **d != 1 || **r > 1)
        .collect();
    assert!(
        wrong.is_empty(),
        "jobs not dropped exactly once (or run twice): {wrong:?} of {}",
        drops.len()
    );
    let armed = book.armed.lock().unwrap();
    let unrun = (0..drops.len())
        .filter(|&i| armed[i] && runs[i] == 0)
        .count();
    // (In practice none runs: a worker's slice stops at the close.)
    assert!(unrun > 0, "every job ran: nothing was left queued");
    unrun
}

/// A context scheduler's `!Send` queue of a thread that exits with jobs in
/// it (`OwnedQueues`' drop: each job dropped on its own thread), and its
/// shared queue with work items that ran. Gives how many armed jobs were
/// dropped unrun.
fn context_queues_at_thread_exit() -> usize {
    let book: Arc<Book> = Arc::default();
    let b = book.clone();
    let tasks = std::thread::spawn(move || {
        let context = glib::MainContext::new();
        let _owner = context.acquire().unwrap();
        let s = gdex::Scheduler::for_context(&context);
        let mut tasks = Vec::new();
        for k in 0..100 {
            let mut t = Tracked::new(&b, k % 3 == 0);
            tasks.push(s.spawn_local(async move { t.ran() }));
            let mut t = Tracked::new(&b, false);
            s.push(move || t.ran());
        }
        // One dispatch: one batch (128 jobs or 4 ms) of the 200; the rest
        // waits for a thread that exits.
        context.iteration(false);
        tasks
    })
    .join()
    .unwrap();
    for t in tasks {
        let _ = gdex::block_on(t);
    }
    let drops = book.drops.lock().unwrap().clone();
    let runs = book.runs.lock().unwrap().clone();
    assert!(
        drops.iter().zip(&runs).all(|(d, r)| *d == 1 && *r <= 1),
        "drops {drops:?} runs {runs:?}"
    );
    let armed = book.armed.lock().unwrap();
    let unrun = (0..drops.len())
        .filter(|&i| armed[i] && runs[i] == 0)
        .count();
    assert!(unrun > 0, "every job ran: nothing was dropped at the exit");
    unrun
}

/// Each job runs once or is dropped once, in every queue a pool or a
/// context scheduler has, when the pool shuts down or the context's thread
/// exits (S9, P3-P5): a job is two plain words (a task's raw `Runnable` or
/// a work item's closure, and a vtable), and the raw `Runnable` is taken
/// back by `Job::run`, `Job`'s drop and (borrowed) `Job::task_owner`. A
/// panic in what a job drops reaches the panic handler once, not the
/// worker (S6, X5).
#[test]
fn shutdown_with_every_queue_full_drops_each_job_once() {
    let _one = common::serial();
    common::watchdog(
        "shutdown_with_every_queue_full_drops_each_job_once",
        120,
        || {
            let events: Arc<Mutex<Vec<gdex::PanicEvent>>> = Arc::default();
            let log = events.clone();
            gdex::set_panic_handler(move |e| log.lock().unwrap().push(e.clone()));
            let mut unrun = 0;
            for tpc in [false, true] {
                unrun += shutdown_with_every_queue_full(tpc);
            }
            unrun += context_queues_at_thread_exit();
            gdex::reset_panic_handler();
            let events = events.lock().unwrap();
            assert!(
                events
                    .iter()
                    .all(|e| e.source == gdex::PanicSource::Drop
                        && e.message.starts_with("tracked ")),
                "{events:?}"
            );
            // Each armed job dropped unrun reported its panic once.
            assert_eq!(events.len(), unrun, "{events:?}");
        },
    );
}
