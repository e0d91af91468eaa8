//! Batched spawns (smol's `Executor::spawn_many`, gdex's
//! `Scheduler::spawn_many`): `BATCH` empty tasks spawned from outside the
//! pool in one call, against the same spawned one by one, and tokio's
//! spawns (it has no batch call). Each iteration waits for every task.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};

use criterion::{BenchmarkId, Criterion, Throughput};

use crate::runtimes::All;

/// smol's figure was for 250 spawns.
const BATCH: usize = 250;

/// A task's end: the last one signals.
fn task_end(left: &AtomicUsize, done: &mpsc::SyncSender<()>) {
    if left.fetch_sub(1, Ordering::AcqRel) == 1 {
        done.send(()).unwrap();
    }
}

/// The futures of one iteration, and the receiver that hears the last.
fn tasks() -> (
    impl Iterator<Item = impl std::future::Future<Output = ()> + Send + 'static>,
    mpsc::Receiver<()>,
) {
    let (tx, rx) = mpsc::sync_channel(1);
    let shared = Arc::new((AtomicUsize::new(BATCH), tx));
    let futures = (0..BATCH).map(move |_| {
        let shared = shared.clone();
        async move { task_end(&shared.0, &shared.1) }
    });
    (futures, rx)
}

pub fn spawn_batch(c: &mut Criterion, all: &All) {
    let n = crate::runtimes::workers();
    let mut g = c.benchmark_group("spawn_batch");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function(BenchmarkId::new("gdex", n), |b| {
        let s = &all.gdex.0;
        let mut handles = Vec::with_capacity(BATCH);
        b.iter(|| {
            let (futures, done) = tasks();
            s.spawn_many(futures, &mut handles);
            handles.drain(..).for_each(gdex::Task::detach);
            done.recv().unwrap();
        })
    });
    g.bench_function(BenchmarkId::new("gdex-one-by-one", n), |b| {
        let s = &all.gdex.0;
        b.iter(|| {
            let (futures, done) = tasks();
            futures.for_each(|f| s.spawn(f).detach());
            done.recv().unwrap();
        })
    });
    g.bench_function(BenchmarkId::new("smol", n), |b| {
        let ex = &all.smol.0;
        let mut handles = Vec::with_capacity(BATCH);
        b.iter(|| {
            let (futures, done) = tasks();
            ex.spawn_many(futures, &mut handles);
            handles.drain(..).for_each(async_executor::Task::detach);
            done.recv().unwrap();
        })
    });
    g.bench_function(BenchmarkId::new("smol-one-by-one", n), |b| {
        let ex = &all.smol.0;
        b.iter(|| {
            let (futures, done) = tasks();
            futures.for_each(|f| ex.spawn(f).detach());
            done.recv().unwrap();
        })
    });
    g.bench_function(BenchmarkId::new("tokio", n), |b| {
        let rt = &all.tokio.0;
        b.iter(|| {
            let (futures, done) = tasks();
            futures.for_each(|f| drop(rt.spawn(f)));
            done.recv().unwrap();
        })
    });
    g.finish();
}
