//! gdex side by side with tokio's multi-thread runtime and smol's
//! async-executor, on the scheduler workloads of tokio's
//! `benches/rt_multi_threaded.rs` (same counts and completion signals; see
//! the project's BENCH.md). Every runtime uses the same number of worker
//! threads: `GDEX_BENCH_WORKERS`, default 2. A regression check, not a
//! showcase: read the ratios, not the absolute times.
//!
//! `cargo bench --bench compare` (add `-- --quick` for a short run).

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

const NUM_SPAWN: usize = 10_000;
const NUM_YIELD: usize = 1_000;
const TASKS_PER_CPU: usize = 100;
const PING_PONG: usize = 1_000;
const CHAIN: usize = 1_000;

fn workers() -> usize {
    std::env::var("GDEX_BENCH_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}

/// The little a workload needs from a runtime.
trait Runtime: Clone + Send + Sync + 'static {
    fn spawn<F: Future<Output = ()> + Send + 'static>(&self, f: F);
    fn spawn_join<F: Future<Output = ()> + Send + 'static>(&self, f: F) -> Join;
    fn block_on<F: Future<Output = ()> + Send + 'static>(&self, f: F);
}

/// A join handle, boxed so that workloads are written once.
type Join = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

#[derive(Clone)]
struct Gdex(gdex::Scheduler);

impl Runtime for Gdex {
    fn spawn<F: Future<Output = ()> + Send + 'static>(&self, f: F) {
        self.0.spawn(f).detach();
    }
    fn spawn_join<F: Future<Output = ()> + Send + 'static>(&self, f: F) -> Join {
        let t = self.0.spawn(f);
        Box::pin(async move { t.await.unwrap() })
    }
    fn block_on<F: Future<Output = ()> + Send + 'static>(&self, f: F) {
        gdex::block_on(self.0.spawn(f)).unwrap();
    }
}

#[derive(Clone)]
struct Tokio(Arc<tokio::runtime::Runtime>);

impl Runtime for Tokio {
    fn spawn<F: Future<Output = ()> + Send + 'static>(&self, f: F) {
        self.0.spawn(f);
    }
    fn spawn_join<F: Future<Output = ()> + Send + 'static>(&self, f: F) -> Join {
        let t = self.0.spawn(f);
        Box::pin(async move { t.await.unwrap() })
    }
    fn block_on<F: Future<Output = ()> + Send + 'static>(&self, f: F) {
        self.0.block_on(self.0.spawn(f)).unwrap();
    }
}

#[derive(Clone)]
struct Smol(Arc<async_executor::Executor<'static>>);

impl Runtime for Smol {
    fn spawn<F: Future<Output = ()> + Send + 'static>(&self, f: F) {
        self.0.spawn(f).detach();
    }
    fn spawn_join<F: Future<Output = ()> + Send + 'static>(&self, f: F) -> Join {
        Box::pin(self.0.spawn(f))
    }
    fn block_on<F: Future<Output = ()> + Send + 'static>(&self, f: F) {
        futures::executor::block_on(self.0.spawn(f));
    }
}

fn runtimes() -> (gdex::ThreadPool, Gdex, Tokio, Smol) {
    let n = workers();
    let pool = gdex::ThreadPool::builder().workers(n).build().unwrap();
    let gdex = Gdex(pool.scheduler());
    let tokio = Tokio(Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build()
            .unwrap(),
    ));
    let ex = Arc::new(async_executor::Executor::new());
    for i in 0..n {
        let ex = ex.clone();
        std::thread::Builder::new()
            .name(format!("smol-{i}"))
            .spawn(move || futures::executor::block_on(ex.run(futures::future::pending::<()>())))
            .unwrap();
    }
    (pool, gdex, tokio, Smol(ex))
}

fn spawn_many_local<R: Runtime>(rt: &R) {
    let (tx, rx) = mpsc::sync_channel(1);
    let rem = Arc::new(AtomicUsize::new(NUM_SPAWN));
    let rt2 = rt.clone();
    rt.spawn(async move {
        for _ in 0..NUM_SPAWN {
            let (rem, tx) = (rem.clone(), tx.clone());
            rt2.spawn(async move {
                if rem.fetch_sub(1, Ordering::Relaxed) == 1 {
                    tx.send(()).unwrap();
                }
            });
        }
    });
    rx.recv().unwrap();
}

fn spawn_many_remote_idle<R: Runtime>(rt: &R) {
    let handles: Vec<Join> = (0..NUM_SPAWN).map(|_| rt.spawn_join(async {})).collect();
    rt.block_on(async move {
        for h in handles {
            h.await;
        }
    });
}

fn ping_pong<R: Runtime>(rt: &R) {
    let (done_tx, done_rx) = mpsc::sync_channel(1);
    let rem = Arc::new(AtomicUsize::new(PING_PONG));
    let rt2 = rt.clone();
    rt.spawn(async move {
        for _ in 0..PING_PONG {
            let (rem, done_tx, rt3) = (rem.clone(), done_tx.clone(), rt2.clone());
            rt2.spawn(async move {
                let (tx1, rx1) = tokio::sync::oneshot::channel();
                let (tx2, rx2) = tokio::sync::oneshot::channel();
                rt3.spawn(async move {
                    rx1.await.unwrap();
                    tx2.send(()).unwrap();
                });
                tx1.send(()).unwrap();
                rx2.await.unwrap();
                if rem.fetch_sub(1, Ordering::Relaxed) == 1 {
                    done_tx.send(()).unwrap();
                }
            });
        }
    });
    done_rx.recv().unwrap();
}

fn yield_many<R: Runtime>(rt: &R) {
    let tasks = TASKS_PER_CPU * workers();
    let (tx, rx) = mpsc::sync_channel(tasks);
    for _ in 0..tasks {
        let tx = tx.clone();
        rt.spawn(async move {
            for _ in 0..NUM_YIELD {
                gdex::yield_now().await;
            }
            tx.send(()).unwrap();
        });
    }
    for _ in 0..tasks {
        rx.recv().unwrap();
    }
}

fn chained_spawn<R: Runtime>(rt: &R) {
    fn iter<R: Runtime>(rt: R, done: mpsc::SyncSender<()>, n: usize) {
        if n == 0 {
            done.send(()).unwrap();
        } else {
            let rt2 = rt.clone();
            rt.spawn(async move { iter(rt2, done, n - 1) });
        }
    }
    let (tx, rx) = mpsc::sync_channel(1);
    let rt2 = rt.clone();
    rt.spawn(async move { iter(rt2, tx, CHAIN) });
    rx.recv().unwrap();
}

macro_rules! group {
    ($c:expr, $name:literal, $f:ident, $gdex:expr, $tokio:expr, $smol:expr) => {{
        let mut g = $c.benchmark_group($name);
        let n = workers();
        g.bench_function(BenchmarkId::new("gdex", n), |b| b.iter(|| $f(&$gdex)));
        g.bench_function(BenchmarkId::new("tokio", n), |b| b.iter(|| $f(&$tokio)));
        g.bench_function(BenchmarkId::new("smol", n), |b| b.iter(|| $f(&$smol)));
        g.finish();
    }};
}

fn compare(c: &mut Criterion) {
    let (_pool, gdex, tokio, smol) = runtimes();
    group!(c, "spawn_many_local", spawn_many_local, gdex, tokio, smol);
    group!(
        c,
        "spawn_many_remote_idle",
        spawn_many_remote_idle,
        gdex,
        tokio,
        smol
    );
    group!(c, "ping_pong", ping_pong, gdex, tokio, smol);
    group!(c, "yield_many", yield_many, gdex, tokio, smol);
    group!(c, "chained_spawn", chained_spawn, gdex, tokio, smol);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    targets = compare
}
criterion_main!(benches);
