//! The runtimes under comparison, behind one small trait so that each
//! workload is written once. Every pool uses the same number of threads.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// The little an async workload needs from a runtime.
pub trait Runtime: Clone + Send + Sync + 'static {
    fn spawn<F: Future<Output = ()> + Send + 'static>(&self, f: F);
    fn spawn_join<F: Future<Output = ()> + Send + 'static>(&self, f: F) -> Join;
    /// Runs `f` on the runtime and waits for it from the calling thread.
    fn block_on<F: Future<Output = ()> + Send + 'static>(&self, f: F);
}

/// A join handle, boxed so that workloads are written once.
pub type Join = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What a work-item workload needs from a pool of closures.
pub trait Items: Clone + Send + Sync + 'static {
    fn push<F: FnOnce() + Send + 'static>(&self, f: F);
}

/// The pools' worker count: `GDEX_BENCH_WORKERS` (default 2), or the count
/// the `workers` table is measuring now ([`set_workers`]).
pub fn workers() -> usize {
    match WORKERS.load(std::sync::atomic::Ordering::Relaxed) {
        0 => std::env::var("GDEX_BENCH_WORKERS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2),
        n => n,
    }
}

static WORKERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Makes [`workers`] return `n` (for runtimes built from now on, and for the
/// workloads' task counts).
pub fn set_workers(n: usize) {
    WORKERS.store(n, std::sync::atomic::Ordering::Relaxed);
}

#[derive(Clone)]
pub struct Gdex(pub gdex::Scheduler);

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

impl Items for Gdex {
    fn push<F: FnOnce() + Send + 'static>(&self, f: F) {
        self.0.push(f);
    }
}

#[derive(Clone)]
pub struct Tokio(pub Arc<tokio::runtime::Runtime>);

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
pub struct Smol(pub Arc<async_executor::Executor<'static>>);

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

/// glib-rs's own executor: a `glib::MainContext` run by one thread (a main
/// context is single-threaded), spawned on with `MainContext::spawn`.
#[derive(Clone)]
pub struct GlibMain(pub glib::MainContext);

impl Runtime for GlibMain {
    fn spawn<F: Future<Output = ()> + Send + 'static>(&self, f: F) {
        drop(self.0.spawn(f));
    }
    fn spawn_join<F: Future<Output = ()> + Send + 'static>(&self, f: F) -> Join {
        let h = self.0.spawn(f);
        Box::pin(async move { h.await.unwrap() })
    }
    fn block_on<F: Future<Output = ()> + Send + 'static>(&self, f: F) {
        futures::executor::block_on(self.0.spawn(f)).unwrap();
    }
}

/// `glib::ThreadPool` for plain work items.
#[derive(Clone)]
pub struct GlibPool(pub Arc<glib::ThreadPool>);

impl Items for GlibPool {
    fn push<F: FnOnce() + Send + 'static>(&self, f: F) {
        drop(self.0.push(f).expect("push to a glib::ThreadPool"));
    }
}

/// One of each, with `workers()` threads for the pools.
pub struct All {
    /// Keeps the gdex pool running (its schedulers do not).
    pub _pool: gdex::ThreadPool,
    pub gdex: Gdex,
    pub tokio: Tokio,
    pub smol: Smol,
    pub glib_main: GlibMain,
    pub glib_pool: GlibPool,
}

impl All {
    pub fn new() -> All {
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
                .spawn(move || {
                    futures::executor::block_on(ex.run(futures::future::pending::<()>()))
                })
                .unwrap();
        }
        let context = glib::MainContext::new();
        let ctx = context.clone();
        std::thread::Builder::new()
            .name("glib-main".into())
            .spawn(move || {
                ctx.with_thread_default(|| glib::MainLoop::new(Some(&ctx), false).run())
                    .unwrap()
            })
            .unwrap();
        let glib_pool = GlibPool(Arc::new(glib::ThreadPool::exclusive(n as u32).unwrap()));
        All {
            _pool: pool,
            gdex,
            tokio,
            smol: Smol(ex),
            glib_main: GlibMain(context),
            glib_pool,
        }
    }
}
