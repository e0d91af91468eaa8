//! The scheduler workloads of tokio's `benches/rt_multi_threaded.rs` (same
//! counts and completion signals), plus `push_remote` and
//! `main_pool_roundtrip`; see the project's BENCH.md.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};

use crate::runtimes::{All, Items, Join, Runtime};

const NUM_SPAWN: usize = 10_000;
const NUM_YIELD: usize = 1_000;
const TASKS_PER_CPU: usize = 100;
const PING_PONG: usize = 1_000;
const CHAIN: usize = 1_000;
const BUSY2_SPAWNS: usize = 1_000;
const PUSH_REMOTE: usize = 100_000;
const ROUNDTRIPS: usize = 10_000;

fn stall(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Counts down to zero, then signals once.
#[derive(Clone)]
struct Latch(Arc<(AtomicUsize, mpsc::SyncSender<()>)>);

impl Latch {
    fn new(n: usize) -> (Latch, mpsc::Receiver<()>) {
        let (tx, rx) = mpsc::sync_channel(1);
        (Latch(Arc::new((AtomicUsize::new(n), tx))), rx)
    }
    fn count_down(&self) {
        if self.0 .0.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0 .1.send(()).unwrap();
        }
    }
}

fn spawn_many_local<R: Runtime>(rt: &R) {
    let (latch, done) = Latch::new(NUM_SPAWN);
    let rt2 = rt.clone();
    rt.spawn(async move {
        for _ in 0..NUM_SPAWN {
            let latch = latch.clone();
            rt2.spawn(async move { latch.count_down() });
        }
    });
    done.recv().unwrap();
}

fn spawn_many_local_items<I: Items>(pool: &I) {
    let (latch, done) = Latch::new(NUM_SPAWN);
    let pool2 = pool.clone();
    pool.push(move || {
        for _ in 0..NUM_SPAWN {
            let latch = latch.clone();
            pool2.push(move || latch.count_down());
        }
    });
    done.recv().unwrap();
}

fn spawn_many_remote_idle<R: Runtime>(rt: &R) {
    let handles: Vec<Join> = (0..NUM_SPAWN).map(|_| rt.spawn_join(async {})).collect();
    rt.block_on(async move {
        for h in handles {
            h.await;
        }
    });
}

fn spawn_many_remote_idle_items<I: Items>(pool: &I) {
    let (latch, done) = Latch::new(NUM_SPAWN);
    for _ in 0..NUM_SPAWN {
        let latch = latch.clone();
        pool.push(move || latch.count_down());
    }
    done.recv().unwrap();
}

/// Background load for busy1: tasks that loop `yield; stall 10 µs`.
fn busy_background<R: Runtime>(rt: &R, tasks: usize) -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    for _ in 0..tasks {
        let stop = stop.clone();
        rt.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                gdex::yield_now().await;
                stall(Duration::from_micros(10));
            }
        });
    }
    stop
}

fn spawn_many_remote_busy1<R: Runtime>(rt: &R) {
    let stop = busy_background(rt, 2 * crate::runtimes::workers());
    spawn_many_remote_idle(rt);
    stop.store(true, Ordering::Relaxed);
}

fn spawn_many_remote_busy1_items<I: Items>(pool: &I) {
    let stop = Arc::new(AtomicBool::new(false));
    fn again<I: Items>(pool: I, stop: Arc<AtomicBool>) {
        if !stop.load(Ordering::Relaxed) {
            stall(Duration::from_micros(10));
            let p = pool.clone();
            pool.push(move || again(p, stop));
        }
    }
    for _ in 0..2 * crate::runtimes::workers() {
        let (p, s) = (pool.clone(), stop.clone());
        pool.push(move || again(p, s));
    }
    spawn_many_remote_idle_items(pool);
    stop.store(true, Ordering::Relaxed);
}

fn spawn_many_remote_busy2<R: Runtime>(rt: &R) {
    fn chain<R: Runtime>(rt: R, stop: Arc<AtomicBool>) {
        if !stop.load(Ordering::Relaxed) {
            stall(Duration::from_micros(10));
            let rt2 = rt.clone();
            rt.spawn(async move { chain(rt2, stop) });
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    for _ in 0..crate::runtimes::workers() {
        let (rt2, s) = (rt.clone(), stop.clone());
        rt.spawn(async move { chain(rt2, s) });
    }
    let (latch, done) = Latch::new(BUSY2_SPAWNS);
    for _ in 0..BUSY2_SPAWNS {
        let latch = latch.clone();
        rt.spawn(async move { latch.count_down() });
    }
    done.recv().unwrap();
    stop.store(true, Ordering::Relaxed);
}

fn spawn_many_remote_busy2_items<I: Items>(pool: &I) {
    fn chain<I: Items>(pool: I, stop: Arc<AtomicBool>) {
        if !stop.load(Ordering::Relaxed) {
            stall(Duration::from_micros(10));
            let p = pool.clone();
            pool.push(move || chain(p, stop));
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    for _ in 0..crate::runtimes::workers() {
        let (p, s) = (pool.clone(), stop.clone());
        pool.push(move || chain(p, s));
    }
    let (latch, done) = Latch::new(BUSY2_SPAWNS);
    for _ in 0..BUSY2_SPAWNS {
        let latch = latch.clone();
        pool.push(move || latch.count_down());
    }
    done.recv().unwrap();
    stop.store(true, Ordering::Relaxed);
}

fn ping_pong<R: Runtime>(rt: &R) {
    let (latch, done) = Latch::new(PING_PONG);
    let rt2 = rt.clone();
    rt.spawn(async move {
        for _ in 0..PING_PONG {
            let (latch, rt3) = (latch.clone(), rt2.clone());
            rt2.spawn(async move {
                let (tx1, rx1) = tokio::sync::oneshot::channel();
                let (tx2, rx2) = tokio::sync::oneshot::channel();
                rt3.spawn(async move {
                    rx1.await.unwrap();
                    tx2.send(()).unwrap();
                });
                tx1.send(()).unwrap();
                rx2.await.unwrap();
                latch.count_down();
            });
        }
    });
    done.recv().unwrap();
}

fn yield_many<R: Runtime>(rt: &R) {
    let tasks = TASKS_PER_CPU * crate::runtimes::workers();
    let (latch, done) = Latch::new(tasks);
    for _ in 0..tasks {
        let latch = latch.clone();
        rt.spawn(async move {
            for _ in 0..NUM_YIELD {
                gdex::yield_now().await;
            }
            latch.count_down();
        });
    }
    done.recv().unwrap();
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

fn chained_spawn_items<I: Items>(pool: &I) {
    fn iter<I: Items>(pool: I, done: mpsc::SyncSender<()>, n: usize) {
        if n == 0 {
            done.send(()).unwrap();
        } else {
            let p = pool.clone();
            pool.push(move || iter(p, done, n - 1));
        }
    }
    let (tx, rx) = mpsc::sync_channel(1);
    let p = pool.clone();
    pool.push(move || iter(p, tx, CHAIN));
    rx.recv().unwrap();
}

fn uneven_fanout<R: Runtime>(rt: &R) {
    let rt2 = rt.clone();
    rt.block_on(async move {
        let children: Vec<Join> = (0..NUM_SPAWN)
            .map(|i| {
                rt2.spawn_join(async move {
                    stall(Duration::from_micros(if i % 100 == 0 { 100 } else { 1 }));
                })
            })
            .collect();
        for c in children {
            c.await;
        }
    });
}

fn uneven_fanout_items<I: Items>(pool: &I) {
    let (latch, done) = Latch::new(NUM_SPAWN);
    let p = pool.clone();
    pool.push(move || {
        for i in 0..NUM_SPAWN {
            let latch = latch.clone();
            p.push(move || {
                stall(Duration::from_micros(if i % 100 == 0 { 100 } else { 1 }));
                latch.count_down();
            });
        }
    });
    done.recv().unwrap();
}

fn push_remote<I: Items>(pool: &I) {
    let (latch, done) = Latch::new(PUSH_REMOTE);
    for _ in 0..PUSH_REMOTE {
        let latch = latch.clone();
        pool.push(move || latch.count_down());
    }
    done.recv().unwrap();
}

/// A task on the main thread's executor awaits a pool task, many times.
fn main_pool_roundtrip_gdex(rt: &crate::runtimes::Gdex) {
    let pool = rt.0.clone();
    let main = gdex::Scheduler::main().spawn(async move {
        for i in 0..ROUNDTRIPS {
            assert_eq!(pool.spawn(async move { i }).await.unwrap(), i);
        }
    });
    gdex::block_on(main).unwrap();
}

fn main_pool_roundtrip_tokio(rt: &crate::runtimes::Tokio) {
    rt.0.block_on(async {
        for i in 0..ROUNDTRIPS {
            assert_eq!(rt.0.spawn(async move { i }).await.unwrap(), i);
        }
    });
}

fn main_pool_roundtrip_smol(rt: &crate::runtimes::Smol) {
    futures::executor::block_on(async {
        for i in 0..ROUNDTRIPS {
            assert_eq!(rt.0.spawn(async move { i }).await, i);
        }
    });
}

/// glib-rs: a task on the default main context awaits `glib::ThreadPool`
/// work through `push_future`.
fn main_pool_roundtrip_glib(pool: &crate::runtimes::GlibPool) {
    let pool = pool.0.clone();
    glib::MainContext::default().block_on(async move {
        for i in 0..ROUNDTRIPS {
            assert_eq!(pool.push_future(move || i).unwrap().await.unwrap(), i);
        }
    });
}

/// A named workload on one runtime.
pub type Row<R> = (&'static str, fn(&R));

/// The tokio-suite rows, for the worker-count table (`scaling.rs`).
pub fn suite<R: Runtime>() -> [Row<R>; 8] {
    [
        ("spawn_many_local", spawn_many_local::<R>),
        ("spawn_many_remote_idle", spawn_many_remote_idle::<R>),
        ("spawn_many_remote_busy1", spawn_many_remote_busy1::<R>),
        ("spawn_many_remote_busy2", spawn_many_remote_busy2::<R>),
        ("ping_pong", ping_pong::<R>),
        ("yield_many", yield_many::<R>),
        ("chained_spawn", chained_spawn::<R>),
        ("uneven_fanout", uneven_fanout::<R>),
    ]
}

/// A child process for an instruction count
/// (`GDEX_BENCH_CHILD=row:<row>:<times>`, under `valgrind --tool=callgrind`;
/// `row:<row>:<times>:tokio` runs it on a tokio runtime instead):
/// one of the tokio-suite rows run `times` times on a gdex pool (or tokio) alone. The
/// difference between two `times`, over the runs between them, is one run's
/// instructions: the measure that tells a 3% change apart on this machine,
/// as criterion's times cannot (a build with the observability features
/// against one without, say).
pub fn row_child(what: &str) {
    let mut parts = what.split(':');
    let (Some(row), Some(times)) = (parts.next(), parts.next()) else {
        panic!("row:<row>:<times>[:tokio|smol]");
    };
    let times: usize = times
        .parse()
        .expect("row:<row>:<times>[:tokio|smol], times a number");
    let n = crate::runtimes::workers();
    match parts.next().unwrap_or("gdex") {
        "gdex" => {
            let pool = gdex::ThreadPool::builder().workers(n).build().unwrap();
            run_row(&crate::runtimes::Gdex(pool.scheduler()), row, times);
        }
        // The same row on a peer, for its instructions beside gdex's.
        "tokio" => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(n)
                .enable_all()
                .build()
                .unwrap();
            run_row(&crate::runtimes::Tokio(std::sync::Arc::new(rt)), row, times);
        }
        other => panic!("row:<row>:<times>:{other}: gdex or tokio"),
    }
}

fn run_row<R: Runtime>(rt: &R, row: &str, times: usize) {
    let Some((_, f)) = suite::<R>().into_iter().find(|(name, _)| *name == row) else {
        panic!("row:<row>:..: no row {row} in the tokio suite");
    };
    for _ in 0..times {
        f(rt);
    }
}

macro_rules! bench {
    ($g:expr, $name:literal, $threads:expr, $f:expr, $rt:expr) => {{
        let rt = &$rt;
        $g.bench_function(BenchmarkId::new($name, $threads), |b| b.iter(|| $f(rt)));
    }};
}

pub fn compare(c: &mut Criterion, all: &All) {
    let n = crate::runtimes::workers();
    {
        let mut g = c.benchmark_group("spawn_many_local");
        bench!(g, "gdex", n, spawn_many_local, all.gdex);
        bench!(g, "tokio", n, spawn_many_local, all.tokio);
        bench!(g, "smol", n, spawn_many_local, all.smol);
        bench!(g, "glib-main", 1, spawn_many_local, all.glib_main);
        bench!(g, "glib-pool", n, spawn_many_local_items, all.glib_pool);
        g.finish();
    }
    {
        let mut g = c.benchmark_group("spawn_many_remote_idle");
        bench!(g, "gdex", n, spawn_many_remote_idle, all.gdex);
        bench!(g, "tokio", n, spawn_many_remote_idle, all.tokio);
        bench!(g, "smol", n, spawn_many_remote_idle, all.smol);
        bench!(g, "glib-main", 1, spawn_many_remote_idle, all.glib_main);
        bench!(
            g,
            "glib-pool",
            n,
            spawn_many_remote_idle_items,
            all.glib_pool
        );
        g.finish();
    }
    {
        let mut g = c.benchmark_group("spawn_many_remote_busy1");
        bench!(g, "gdex", n, spawn_many_remote_busy1, all.gdex);
        bench!(g, "tokio", n, spawn_many_remote_busy1, all.tokio);
        bench!(g, "smol", n, spawn_many_remote_busy1, all.smol);
        bench!(g, "glib-main", 1, spawn_many_remote_busy1, all.glib_main);
        bench!(
            g,
            "glib-pool",
            n,
            spawn_many_remote_busy1_items,
            all.glib_pool
        );
        g.finish();
    }
    {
        let mut g = c.benchmark_group("spawn_many_remote_busy2");
        bench!(g, "gdex", n, spawn_many_remote_busy2, all.gdex);
        bench!(g, "tokio", n, spawn_many_remote_busy2, all.tokio);
        bench!(g, "smol", n, spawn_many_remote_busy2, all.smol);
        bench!(g, "glib-main", 1, spawn_many_remote_busy2, all.glib_main);
        bench!(
            g,
            "glib-pool",
            n,
            spawn_many_remote_busy2_items,
            all.glib_pool
        );
        g.finish();
    }
    {
        let mut g = c.benchmark_group("ping_pong");
        bench!(g, "gdex", n, ping_pong, all.gdex);
        bench!(g, "tokio", n, ping_pong, all.tokio);
        bench!(g, "smol", n, ping_pong, all.smol);
        bench!(g, "glib-main", 1, ping_pong, all.glib_main);
        g.finish();
    }
    {
        let mut g = c.benchmark_group("yield_many");
        bench!(g, "gdex", n, yield_many, all.gdex);
        bench!(g, "tokio", n, yield_many, all.tokio);
        bench!(g, "smol", n, yield_many, all.smol);
        bench!(g, "glib-main", 1, yield_many, all.glib_main);
        g.finish();
    }
    {
        let mut g = c.benchmark_group("chained_spawn");
        bench!(g, "gdex", n, chained_spawn, all.gdex);
        bench!(g, "tokio", n, chained_spawn, all.tokio);
        bench!(g, "smol", n, chained_spawn, all.smol);
        bench!(g, "glib-main", 1, chained_spawn, all.glib_main);
        bench!(g, "glib-pool", n, chained_spawn_items, all.glib_pool);
        g.finish();
    }
    {
        let mut g = c.benchmark_group("uneven_fanout");
        bench!(g, "gdex", n, uneven_fanout, all.gdex);
        bench!(g, "tokio", n, uneven_fanout, all.tokio);
        bench!(g, "smol", n, uneven_fanout, all.smol);
        bench!(g, "glib-main", 1, uneven_fanout, all.glib_main);
        bench!(g, "glib-pool", n, uneven_fanout_items, all.glib_pool);
        g.finish();
    }
    {
        let mut g = c.benchmark_group("push_remote");
        g.throughput(Throughput::Elements(PUSH_REMOTE as u64));
        bench!(g, "gdex", n, push_remote, all.gdex);
        bench!(g, "glib-pool", n, push_remote, all.glib_pool);
        g.finish();
    }
    {
        let mut g = c.benchmark_group("main_pool_roundtrip");
        g.throughput(Throughput::Elements(ROUNDTRIPS as u64));
        bench!(g, "gdex", n, main_pool_roundtrip_gdex, all.gdex);
        bench!(g, "tokio", n, main_pool_roundtrip_tokio, all.tokio);
        bench!(g, "smol", n, main_pool_roundtrip_smol, all.smol);
        bench!(g, "glib-pool", n, main_pool_roundtrip_glib, all.glib_pool);
        g.finish();
    }
}
