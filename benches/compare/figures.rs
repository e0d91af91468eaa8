//! The workloads that are not times per iteration (BENCH.md): timer
//! lateness under load, idle CPU, memory per pending task, a pool's
//! neighbours beside a ready loop, and the stall monitor's cost (the frame
//! gaps of a busy main loop are `frames.rs`'s). Each measures gdex and the
//! peers that can run it, in one run. Idle CPU and memory are measured in child processes
//! (this binary, re-run with `GDEX_BENCH_CHILD` set) so that nothing else
//! counts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::runtimes::{workers, All, Runtime};

/// One measured figure: a row of the final table.
pub struct Figure {
    pub workload: &'static str,
    pub unit: &'static str,
    /// (runtime, value as text, value for ratios)
    pub values: Vec<(&'static str, String, f64)>,
}

pub fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

fn percentiles(mut v: Vec<Duration>) -> (f64, f64, f64, f64) {
    v.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let at = |p: f64| us(v[((v.len() - 1) as f64 * p).round() as usize]);
    (us(v[0]), at(0.5), at(0.99), us(*v.last().unwrap()))
}

/// Background load: 2×N tasks that spin 100 µs and yield, until `stop`.
fn load<R: Runtime>(rt: &R, tasks: usize, stop: &Arc<AtomicBool>) {
    for _ in 0..tasks {
        let stop = stop.clone();
        rt.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                spin(Duration::from_micros(100));
                gdex::yield_now().await;
            }
        });
    }
}

fn lateness<R: Runtime, S, F>(rt: &R, tasks: usize, run_for: Duration, sleep: S) -> Vec<Duration>
where
    S: Fn(Duration) -> F + Send + Sync + 'static,
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    load(rt, tasks, &stop);
    let (tx, rx) = std::sync::mpsc::channel();
    rt.spawn(async move {
        let mut late = Vec::new();
        let t0 = Instant::now();
        while t0.elapsed() < run_for {
            let t = Instant::now();
            sleep(Duration::from_millis(10)).await;
            late.push(t.elapsed().saturating_sub(Duration::from_millis(10)));
        }
        tx.send(late).unwrap();
    });
    let late = rx.recv().unwrap();
    stop.store(true, Ordering::Relaxed);
    late
}

pub fn timer_lateness(all: &All) -> Vec<Figure> {
    let tasks = 2 * workers();
    let run_for = Duration::from_secs(1);
    let mut rows: Vec<(&'static str, Vec<Duration>)> = vec![
        (
            "gdex",
            lateness(&all.gdex, tasks, run_for, glib::timeout_future),
        ),
        (
            "tokio",
            lateness(&all.tokio, tasks, run_for, tokio::time::sleep),
        ),
        (
            "glib-main",
            lateness(&all.glib_main, tasks, run_for, glib::timeout_future),
        ),
    ];
    let mut p50 = Figure {
        workload: "timer_lateness p50",
        unit: "µs",
        values: vec![],
    };
    let mut p99 = Figure {
        workload: "timer_lateness p99",
        unit: "µs",
        values: vec![],
    };
    for (name, late) in rows.drain(..) {
        let (min, median, pct99, max) = percentiles(late);
        p50.values.push((name, format!("{median:.0}"), median));
        p99.values.push((
            name,
            format!("{pct99:.0} (min {min:.0}, max {max:.0})"),
            pct99,
        ));
    }
    vec![p50, p99]
}

/// Child process bodies, selected by `GDEX_BENCH_CHILD=<what>:<runtime>`.
pub fn child(what: &str) {
    let (what, rt) = what.split_once(':').expect("GDEX_BENCH_CHILD=what:runtime");
    match what {
        "idle" => idle_child(rt),
        "memory" => memory_child(rt),
        "monitor" => monitor_child(rt),
        "drain" => crate::channels::drain_child(rt),
        "pingpong" => crate::channels::ping_pong_child(rt),
        "row" => crate::workloads::row_child(rt),
        "fibers" => crate::fibers::child(rt),
        _ => panic!("unknown child {what}"),
    }
}

fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes into the zeroed struct we pass.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn burst<R: Runtime>(rt: &R) {
    let handles: Vec<_> = (0..10_000).map(|_| rt.spawn_join(async {})).collect();
    rt.block_on(async move {
        for h in handles {
            h.await;
        }
    });
}

fn idle_child(rt: &str) {
    let all = All::new();
    match rt {
        "gdex" => burst(&all.gdex),
        "tokio" => burst(&all.tokio),
        "smol" => burst(&all.smol),
        "glib-main" => burst(&all.glib_main),
        _ => panic!("unknown runtime {rt}"),
    }
    std::thread::sleep(Duration::from_millis(100));
    let before = cpu_time();
    std::thread::sleep(Duration::from_secs(2));
    println!("VALUE={}", (cpu_time() - before).as_secs_f64() * 1e3);
}

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize
}

const PENDING: usize = 1_000_000;

/// Pending until woken, keeping its waker where a wake-up could come from
/// (as a channel would): a task nobody can wake may be freed at once.
struct Parked(Arc<Mutex<Vec<Waker>>>, bool);

impl std::future::Future for Parked {
    type Output = ();
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if !self.1 {
            self.1 = true;
            self.0.lock().unwrap().push(cx.waker().clone());
        }
        Poll::Pending
    }
}

fn pending_tasks<R: Runtime>(rt: &R) -> f64 {
    let wakers = Arc::new(Mutex::new(Vec::with_capacity(PENDING)));
    let before = rss_bytes();
    for _ in 0..PENDING {
        rt.spawn(Parked(wakers.clone(), false));
    }
    while wakers.lock().unwrap().len() < PENDING {
        std::thread::sleep(Duration::from_millis(5));
    }
    let per_task = (rss_bytes() - before) as f64 / PENDING as f64;
    // Minus the waker list itself, the same for every runtime.
    per_task - std::mem::size_of::<Waker>() as f64
}

fn memory_child(rt: &str) {
    let all = All::new();
    std::thread::sleep(Duration::from_millis(50));
    let per_task = match rt {
        "gdex" => pending_tasks(&all.gdex),
        "tokio" => pending_tasks(&all.tokio),
        "smol" => pending_tasks(&all.smol),
        "glib-main" => pending_tasks(&all.glib_main),
        _ => panic!("unknown runtime {rt}"),
    };
    println!("VALUE={per_task}");
}

fn run_child(what: &str) -> f64 {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .env("GDEX_BENCH_CHILD", what)
        .output()
        .expect("run a bench child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("VALUE="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "child {what} printed no value:\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

pub fn idle_and_memory() -> Vec<Figure> {
    let runtimes = ["gdex", "tokio", "smol", "glib-main"];
    let mut idle = Figure {
        workload: "idle_cpu",
        unit: "ms per 2 s",
        values: vec![],
    };
    let mut memory = Figure {
        workload: "memory_per_task",
        unit: "bytes",
        values: vec![],
    };
    for rt in runtimes {
        let ms = run_child(&format!("idle:{rt}"));
        idle.values.push((rt, format!("{ms:.2}"), ms));
        let bytes = run_child(&format!("memory:{rt}"));
        memory.values.push((rt, format!("{bytes:.0}"), bytes));
    }
    vec![idle, memory]
}

/// P11 on a pool of one worker: while a task drains `READY_ITEMS` ready
/// items, a neighbour spawned from outside and a task sleeping 10 ms; how
/// long the neighbour waited to start and how late the timer fired (the
/// median of five runs each, each run's loop still draining when both
/// were done).
pub fn pool_ready_loop() -> Vec<Figure> {
    const READY_ITEMS: usize = crate::frames::READY_ITEMS;
    let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
    let mut starts = Vec::new();
    let mut lateness = Vec::new();
    for _ in 0..5 {
        let (tx, rx) = gdex::channel(READY_ITEMS);
        for i in 0..READY_ITEMS {
            tx.try_send(i).unwrap();
        }
        drop(tx);
        let running = Arc::new(AtomicBool::new(false));
        let flag = running.clone();
        let drain = pool.scheduler().spawn(async move {
            flag.store(true, Ordering::Relaxed);
            while rx.recv().await.is_ok() {}
            Instant::now()
        });
        while !running.load(Ordering::Relaxed) {
            std::hint::spin_loop();
        }
        let spawned = Instant::now();
        let neighbour = pool.scheduler().spawn(async { Instant::now() });
        let timer = pool.scheduler().spawn(async {
            let set = Instant::now();
            gdex::sleep(Duration::from_millis(10)).await;
            Instant::now()
                .duration_since(set)
                .saturating_sub(Duration::from_millis(10))
        });
        let started = gdex::block_on(neighbour).unwrap();
        let late = gdex::block_on(timer).unwrap();
        let done = Instant::now();
        let drained = gdex::block_on(drain).unwrap();
        assert!(
            drained > done,
            "pool_ready_loop: the drain ended before the neighbour and the timer were done: \
             make READY_ITEMS larger"
        );
        starts.push(started.duration_since(spawned));
        lateness.push(late);
    }
    pool.shutdown();
    starts.sort();
    lateness.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (start, late) = (ms(starts[2]), ms(lateness[2]));
    vec![
        Figure {
            workload: "pool_neighbour_start_beside_ready_loop",
            unit: "ms",
            values: vec![("gdex", format!("{start:.2}"), start)],
        },
        Figure {
            workload: "pool_timer_late_beside_ready_loop",
            unit: "ms",
            values: vec![("gdex", format!("{late:.2}"), late)],
        },
    ]
}

/// The CPU time so far of this process's thread named `name` (the first
/// one), from the scheduler's own account (`schedstat`, nanoseconds), or
/// `stat`'s clock ticks where the kernel keeps no schedstat.
fn thread_cpu_time(name: &str) -> Option<Duration> {
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let dir = task.ok()?.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        if let Ok(text) = std::fs::read_to_string(dir.join("schedstat")) {
            let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
            return Some(Duration::from_nanos(ns));
        }
        let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
        // The fields after the command's closing parenthesis; utime and
        // stime are the 14th and 15th of the line.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks: u64 = fields[11].parse::<u64>().ok()? + fields[12].parse::<u64>().ok()?;
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        return Some(Duration::from_nanos(ticks * 1_000_000_000 / hz));
    }
    None
}

/// B6: the stall monitor's own CPU (`gdex-watchdog`), in percent of a
/// core, while one fiber (`fiber:N`) or one task (`task:N`) on a pool of N
/// workers waits on a 1 ms GLib timeout in a loop, over 2 s.
fn monitor_child(what: &str) {
    let (kind, workers) = what.split_once('/').expect("monitor:kind/workers");
    let pool = gdex::ThreadPool::builder()
        .workers(workers.parse().expect("a worker count"))
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let sleeper = || glib::timeout_future(Duration::from_millis(1));
    let (fiber, task) = match kind {
        "fiber" => (
            Some(pool.scheduler().spawn_fiber(move || {
                while !s.load(Ordering::Relaxed) {
                    let _ = gdex::fiber::wait(sleeper());
                }
            })),
            None,
        ),
        "task" => (
            None,
            Some(pool.scheduler().spawn(async move {
                while !s.load(Ordering::Relaxed) {
                    sleeper().await;
                }
            })),
        ),
        _ => panic!("unknown monitor workload {kind}"),
    };
    std::thread::sleep(Duration::from_millis(300));
    let wakes = gdex::__stall_monitor_wakes();
    let cpu = thread_cpu_time("gdex-watchdog").expect("the gdex-watchdog thread");
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let wall = t.elapsed();
    let cpu = thread_cpu_time("gdex-watchdog").unwrap() - cpu;
    let wakes = gdex::__stall_monitor_wakes() - wakes;
    stop.store(true, Ordering::Relaxed);
    if let Some(fiber) = fiber {
        gdex::block_on(fiber).unwrap();
    }
    if let Some(task) = task {
        gdex::block_on(task).unwrap();
    }
    println!("WAKES={}", wakes as f64 / wall.as_secs_f64());
    println!("VALUE={}", cpu.as_secs_f64() / wall.as_secs_f64() * 100.0);
}

/// The stall monitor's own cost while work runs (B6: at most 0.5% of a
/// core): a fiber, then a task, waiting on a 1 ms timer in a loop, on 2
/// workers (a busy worker sampled every 1 ms, P6) and a fiber on 1 (no
/// hand-over: a slow tick). The median of three children each, and how
/// often a second the worker had to wake the monitor (a syscall) in the
/// median one.
pub fn monitor_cpu() -> Figure {
    let mut text = Vec::new();
    let mut worst = 0.0f64;
    for what in ["fiber/2", "task/2", "fiber/1"] {
        let mut runs: Vec<(f64, f64)> = (0..3)
            .map(|_| {
                let out = std::process::Command::new(std::env::current_exe().unwrap())
                    .env("GDEX_BENCH_CHILD", format!("monitor:{what}"))
                    .output()
                    .expect("run a bench child");
                let stdout = String::from_utf8_lossy(&out.stdout);
                let get = |key: &str| -> f64 {
                    stdout
                        .lines()
                        .find_map(|l| l.strip_prefix(key))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or_else(|| panic!("monitor child printed no {key}:\n{stdout}"))
                };
                (get("VALUE="), get("WAKES="))
            })
            .collect();
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (pct, wakes) = runs[1];
        worst = worst.max(pct);
        text.push(format!("{pct:.2} ({what} workers; {wakes:.0} wake-ups/s)"));
    }
    Figure {
        workload: "monitor_cpu",
        unit: "% of a core",
        values: vec![("gdex", text.join(", "), worst)],
    }
}
