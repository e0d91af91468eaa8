//! P12's pool figure: how long a task that must react fast waits when it
//! is spawned behind a flood of batch work on two workers. gdex's latency
//! class against its batch class (where it would be without P12) and
//! tokio (no classes: it queues behind the flood as gdex's batch does).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use crate::figures::Figure;

/// Batch tasks queued ahead of the latency task, each spinning this long.
const FLOOD: usize = 10_000;
const BATCH_WORK: Duration = Duration::from_micros(1);

fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// One way of spawning: the flood's tasks, then the one that must react.
trait Spawner {
    fn batch(&self, f: Box<dyn FnOnce() + Send>);
    fn urgent(&self, f: Box<dyn FnOnce() + Send>);
}

struct Gdex {
    batch: gdex::Scheduler,
    urgent: gdex::Scheduler,
}

impl Spawner for Gdex {
    fn batch(&self, f: Box<dyn FnOnce() + Send>) {
        self.batch.spawn(async move { f() }).detach();
    }
    fn urgent(&self, f: Box<dyn FnOnce() + Send>) {
        self.urgent.spawn(async move { f() }).detach();
    }
}

struct Tokio(tokio::runtime::Runtime);

impl Spawner for Tokio {
    fn batch(&self, f: Box<dyn FnOnce() + Send>) {
        self.0.spawn(async move { f() });
    }
    fn urgent(&self, f: Box<dyn FnOnce() + Send>) {
        self.0.spawn(async move { f() });
    }
}

/// `trials` times: FLOOD batch tasks from outside, then one urgent task;
/// the urgent task's spawn-to-poll delays, each trial's flood drained
/// before the next.
fn delays(spawner: &dyn Spawner, trials: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(trials);
    for _ in 0..trials {
        let done = Arc::new(AtomicUsize::new(0));
        for _ in 0..FLOOD {
            let done = done.clone();
            spawner.batch(Box::new(move || {
                spin(BATCH_WORK);
                done.fetch_add(1, Ordering::Release);
            }));
        }
        let (tx, rx) = mpsc::channel();
        let spawned = Instant::now();
        spawner.urgent(Box::new(move || tx.send(spawned.elapsed()).unwrap()));
        out.push(rx.recv().unwrap());
        while done.load(Ordering::Acquire) < FLOOD {
            std::thread::yield_now();
        }
    }
    out
}

/// `cargo bench --bench compare -- priorities`: p50, p99 and max of the
/// spawn-to-poll delay of a task spawned behind 10,000 batch tasks of
/// 1 µs on two workers, over `GDEX_BENCH_TRIALS` trials (default 1,000).
pub fn pool_latency_among_batch() -> Vec<Figure> {
    let trials = std::env::var("GDEX_BENCH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
    let batch = pool.scheduler();
    let gdex_side = Gdex {
        urgent: batch.with_priority(glib::Priority::HIGH),
        batch: batch.clone(),
    };
    let gdex_batch = Gdex {
        urgent: batch.clone(),
        batch,
    };
    let tokio = Tokio(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap(),
    );
    let tokio_delays = delays(&tokio, trials);
    let mut figures = Vec::new();
    for (class, gdex_spawner, names) in [
        (
            "latency class",
            &gdex_side,
            [
                "pool_latency_among_batch_p50",
                "pool_latency_among_batch_p99",
                "pool_latency_among_batch_max",
            ],
        ),
        (
            "batch class",
            &gdex_batch,
            [
                "pool_latency_among_batch_p50 (gdex batch class)",
                "pool_latency_among_batch_p99 (gdex batch class)",
                "pool_latency_among_batch_max (gdex batch class)",
            ],
        ),
    ] {
        let ours = summary(delays(gdex_spawner, trials));
        let theirs = summary(tokio_delays.clone());
        eprintln!("gdex {class}: p50/p99/max {ours:?} µs; tokio {theirs:?} µs");
        for (i, workload) in names.into_iter().enumerate() {
            figures.push(Figure {
                workload,
                unit: "µs",
                values: vec![
                    ("gdex", format!("{:.0}", ours[i]), ours[i]),
                    ("tokio", format!("{:.0}", theirs[i]), theirs[i]),
                ],
            });
        }
    }
    drop(pool);
    figures
}

/// p50, p99 and max, in microseconds.
fn summary(mut v: Vec<Duration>) -> [f64; 3] {
    v.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let at = |p: f64| us(v[((v.len() - 1) as f64 * p).round() as usize]);
    [at(0.5), at(0.99), us(*v.last().unwrap())]
}
