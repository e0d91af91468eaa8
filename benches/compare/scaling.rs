//! The worker-count table (`cargo bench --bench compare -- workers`): the
//! tokio-suite rows with 2, 4, 8 and 16 workers for gdex, tokio and smol
//! alike, and for gdex, per 1,000 jobs, the wake requests its workers and
//! outside threads sent, the times its workers parked, and their scans of
//! each other's deques (`ThreadPool::metrics`).
//!
//! On a 2-core machine 16 workers are 14 more threads than cores: what the
//! table shows is whether the wake-up protocol's work grows with the pool.
//! With directed, coalesced wake-ups (P6, P7) a job wakes at most one
//! sleeper and a sleeper is woken once however many jobs arrive, so the
//! counts per job stay flat; a notify-all design's grow with the count.

use std::sync::Mutex;

use criterion::{BenchmarkId, Criterion};
use gdex::PoolMetrics;

use crate::runtimes::{set_workers, All};
use crate::table::{fmt, median_ns};
use crate::workloads::suite;

pub const COUNTS: [usize; 4] = [2, 4, 8, 16];

/// Iterations of each workload run (outside criterion's timing) to count
/// gdex's wake-ups.
const COUNTED_RUNS: usize = 10;

/// gdex's counters for one workload at one worker count, per 1,000 jobs.
struct Counts {
    workload: &'static str,
    workers: usize,
    jobs: u64,
    wakes: f64,
    coalesced: f64,
    parks: f64,
    steal_attempts: f64,
}

static COUNTED: Mutex<Vec<Counts>> = Mutex::new(Vec::new());

fn totals(m: &PoolMetrics) -> [u64; 5] {
    let sum = |f: fn(&gdex::WorkerMetrics) -> u64| m.workers.iter().map(f).sum::<u64>();
    [
        m.tasks_run(),
        sum(|w| w.wake_requests_sent) + m.external_wake_requests_sent,
        sum(|w| w.wake_requests_coalesced) + m.external_wake_requests_coalesced,
        sum(|w| w.parks),
        sum(|w| w.steal_attempts),
    ]
}

pub fn workers(c: &mut Criterion) {
    for n in COUNTS {
        set_workers(n);
        let all = All::new();
        let gdex_rows = suite();
        let tokio_rows = suite();
        let smol_rows = suite();
        for i in 0..gdex_rows.len() {
            let (name, on_gdex) = gdex_rows[i];
            let mut g = c.benchmark_group(format!("workers_{name}"));
            g.bench_function(BenchmarkId::new("gdex", n), |b| {
                b.iter(|| on_gdex(&all.gdex))
            });
            g.bench_function(BenchmarkId::new("tokio", n), |b| {
                b.iter(|| (tokio_rows[i].1)(&all.tokio))
            });
            g.bench_function(BenchmarkId::new("smol", n), |b| {
                b.iter(|| (smol_rows[i].1)(&all.smol))
            });
            g.finish();

            let before = totals(&all._pool.metrics());
            for _ in 0..COUNTED_RUNS {
                on_gdex(&all.gdex);
            }
            let after = totals(&all._pool.metrics());
            let d: Vec<u64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
            let per = |x: u64| x as f64 * 1000.0 / d[0].max(1) as f64;
            COUNTED.lock().unwrap().push(Counts {
                workload: name,
                workers: n,
                jobs: d[0] / COUNTED_RUNS as u64,
                wakes: per(d[1]),
                coalesced: per(d[2]),
                parks: per(d[3]),
                steal_attempts: per(d[4]),
            });
        }
    }
    set_workers(0);
}

pub fn print() {
    let counted = COUNTED.lock().unwrap();
    if counted.is_empty() {
        return;
    }
    println!();
    println!("## Worker counts (medians; gdex's counts per 1,000 jobs)");
    println!();
    println!(
        "| workload | workers | gdex µs | tokio µs | smol µs | gdex / best peer | jobs per run | wake requests | coalesced | parks | steal scans |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for row in counted.iter() {
        let group = format!("workers_{}", row.workload);
        let time = |rt: &str| median_ns(&group, &format!("{rt}/{}", row.workers)).map(|t| t / 1e3);
        let (g, t, s) = (time("gdex"), time("tokio"), time("smol"));
        let show = |v: Option<f64>| v.map(fmt).unwrap_or_else(|| "—".into());
        let ratio = match (g, t, s) {
            (Some(g), Some(t), Some(s)) => format!("{:.2}", g / t.min(s)),
            _ => "—".into(),
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            row.workload,
            row.workers,
            show(g),
            show(t),
            show(s),
            ratio,
            row.jobs,
            fmt(row.wakes),
            fmt(row.coalesced),
            fmt(row.parks),
            fmt(row.steal_attempts),
        );
    }
    println!();
    println!("Growth from 2 to 16 workers (16-worker count / 2-worker count):");
    println!();
    println!("| workload | wake requests | parks | steal scans |");
    println!("| --- | ---: | ---: | ---: |");
    let names: Vec<&str> = counted
        .iter()
        .map(|r| r.workload)
        .fold(Vec::new(), |mut v, n| {
            if !v.contains(&n) {
                v.push(n);
            }
            v
        });
    for name in names {
        let at = |n: usize| {
            counted
                .iter()
                .find(|r| r.workload == name && r.workers == n)
        };
        if let (Some(a), Some(b)) = (at(COUNTS[0]), at(COUNTS[3])) {
            // A count that was zero at 2 workers has no ratio: show both.
            let growth = |x: f64, y: f64| {
                if x < 0.005 {
                    format!("{} → {}", fmt(x), fmt(y))
                } else {
                    format!("{:.2}", y / x)
                }
            };
            println!(
                "| {name} | {} | {} | {} |",
                growth(a.wakes, b.wakes),
                growth(a.parks, b.parks),
                growth(a.steal_attempts, b.steal_attempts)
            );
        }
    }
}
