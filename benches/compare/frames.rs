//! Frames first against three floods (X3, P11, P12): a redraw-priority
//! source on the default main context ticks every 16 ms, as GTK's frame
//! clock would, while the main thread carries
//! (a) 100,000 short queued tasks,
//! (b) one task draining 2,000,000 items already in a channel (a loop over
//!     always-ready futures), bare and with 0.2 µs of work an item, or
//! (c) 1,000 batch tasks that spin 20 µs and yield, beside one latency
//!     task woken from another thread every 16 ms, at the default priority
//!     and at `G_PRIORITY_HIGH` (gdex's `Scheduler::with_priority`,
//!     glib-rs's `spawn_local_with_priority`; a `LocalSet` has none),
//!
//! each for gdex's main scheduler, glib-rs's executor
//! (`MainContext::spawn_local`) and tokio's `LocalSet`, itself a future
//! spawned onto the main context and so driven by the GLib loop (with a
//! tokio runtime entered, whose timers then fire: [`localset_timers_fire`]).
//! The figures: the longest gap between ticks, the ticks a second, and for
//! (c) the latency task's wake-to-poll delays.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::task::AtomicWaker;

use crate::figures::{spin, Figure};

/// GTK's redraw priority (`GDK_PRIORITY_REDRAW`, `G_PRIORITY_HIGH_IDLE + 20`).
const REDRAW: i32 = 120;
/// The ticks' interval: one frame at 60 Hz.
const FRAME: Duration = Duration::from_millis(16);

/// What the ticking source saw during one flood.
#[derive(Clone, Copy)]
pub struct Frames {
    /// The longest gap between ticks, from the flood's start to its end.
    pub worst: Duration,
    /// Ticks between the flood's start and its end.
    pub ticks: usize,
    /// The flood's length.
    pub elapsed: Duration,
}

impl Frames {
    fn per_second(&self) -> f64 {
        self.ticks as f64 / self.elapsed.as_secs_f64()
    }
}

/// Ticks a redraw-priority source (16 ms) on the default main context,
/// calls `start`, and iterates the context until `done`: the longest gap
/// between ticks (from `start`'s call to the end), the ticks, and the time
/// it all took.
pub fn ticked_gap(start: impl FnOnce(), done: impl Fn() -> bool) -> Frames {
    let context = glib::MainContext::default();
    let _owner = context.acquire().unwrap();
    let ticks = Arc::new(Mutex::new(Vec::new()));
    let t2 = ticks.clone();
    let source = glib::timeout_source_new(FRAME, None, glib::Priority::from(REDRAW), move || {
        t2.lock().unwrap().push(Instant::now());
        glib::ControlFlow::Continue
    });
    source.attach(Some(&context));
    let began = Instant::now();
    start();
    while !done() {
        context.iteration(true);
    }
    let end = Instant::now();
    source.destroy();
    let ticks = ticks.lock().unwrap();
    let mut last = began;
    let mut worst = Duration::ZERO;
    for t in ticks.iter().chain(std::iter::once(&end)) {
        worst = worst.max(t.duration_since(last));
        last = *t;
    }
    Frames {
        worst,
        ticks: ticks.len(),
        elapsed: end.duration_since(began),
    }
}

/// The executors under comparison, each on the default main context.
#[derive(Clone, Copy, PartialEq)]
enum Peer {
    Gdex,
    Glib,
    LocalSet,
}

const PEERS: [Peer; 3] = [Peer::Gdex, Peer::Glib, Peer::LocalSet];

type LocalFuture = Pin<Box<dyn Future<Output = ()>>>;

/// Spawns main-thread work for one peer. A `LocalSet` collects its tasks
/// and is spawned onto the main context by [`Spawner::go`].
struct Spawner {
    peer: Peer,
    local: Option<tokio::task::LocalSet>,
}

impl Spawner {
    fn new(peer: Peer) -> Spawner {
        let local = (peer == Peer::LocalSet).then(tokio::task::LocalSet::new);
        Spawner { peer, local }
    }

    /// A task at the executor's default priority, or (`high`) at
    /// `G_PRIORITY_HIGH` where the executor has priorities.
    fn spawn(&self, f: impl Future<Output = ()> + 'static, high: bool) {
        match (self.peer, &self.local) {
            (Peer::Gdex, _) => {
                let main = gdex::Scheduler::main();
                let main = if high {
                    main.with_priority(glib::Priority::HIGH)
                } else {
                    main
                };
                main.spawn_local(f).detach();
            }
            (Peer::Glib, _) => {
                let main = glib::MainContext::default();
                let priority = if high {
                    glib::Priority::HIGH
                } else {
                    glib::Priority::DEFAULT
                };
                drop(main.spawn_local_with_priority(priority, f));
            }
            (Peer::LocalSet, Some(local)) => {
                assert!(!high, "a LocalSet has no task priorities");
                drop(local.spawn_local(f));
            }
            (Peer::LocalSet, None) => unreachable!(),
        }
    }

    /// A short piece of work: gdex's work item (`Scheduler::push`, as the
    /// `main_frame_gap` figure always measured it), a task for the others.
    fn push(&self, f: impl FnOnce() + Send + 'static) {
        match self.peer {
            Peer::Gdex => gdex::Scheduler::main().push(f),
            _ => self.spawn(async move { f() }, false),
        }
    }

    /// Lets the work run: a `LocalSet` goes onto the main context as one
    /// glib-rs task at the default priority, as an app would spawn it.
    fn go(self) {
        if let Some(local) = self.local {
            drop(glib::MainContext::default().spawn_local(local));
        }
    }
}

/// (a) Short tasks queued on the main thread.
const FRAME_TASKS: usize = 100_000;

fn short_tasks(peer: Peer) -> Frames {
    let spawner = Spawner::new(peer);
    let done = Arc::new(AtomicUsize::new(0));
    for _ in 0..FRAME_TASKS {
        let done = done.clone();
        spawner.push(move || {
            spin(Duration::from_micros(2));
            done.fetch_add(1, Ordering::Relaxed);
        });
    }
    spawner.go();
    ticked_gap(|| {}, || done.load(Ordering::Relaxed) >= FRAME_TASKS)
}

/// (b) Items already in a channel that one main-thread task drains (P11's
/// always-ready flood).
pub const READY_ITEMS: usize = 2_000_000;

/// The work of an item in (b)'s second form: without it, the peers' drain
/// is shorter than a frame, and their gap says little.
const ITEM_WORK: Duration = Duration::from_nanos(200);

/// Each peer drains its own idiom's channel: gdex's, `futures`' unbounded
/// one for glib-rs, tokio's unbounded one in the `LocalSet`, spinning
/// `work` on each item if given. The filling is not measured.
fn ready_loop(peer: Peer, work: Option<Duration>) -> Frames {
    let work = move || {
        if let Some(work) = work {
            spin(work);
        }
    };
    let spawner = Spawner::new(peer);
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    let drain: LocalFuture = match peer {
        Peer::Gdex => {
            let (tx, rx) = gdex::channel(READY_ITEMS);
            for i in 0..READY_ITEMS {
                tx.try_send(i).unwrap();
            }
            Box::pin(async move {
                while rx.recv().await.is_ok() {
                    work();
                }
            })
        }
        Peer::Glib => {
            use futures::StreamExt;
            let (tx, mut rx) = futures::channel::mpsc::unbounded();
            for i in 0..READY_ITEMS {
                tx.unbounded_send(i).unwrap();
            }
            Box::pin(async move {
                while rx.next().await.is_some() {
                    work();
                }
            })
        }
        Peer::LocalSet => {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            for i in 0..READY_ITEMS {
                tx.send(i).unwrap();
            }
            Box::pin(async move {
                while rx.recv().await.is_some() {
                    work();
                }
            })
        }
    };
    ticked_gap(
        move || {
            spawner.spawn(
                async move {
                    drain.await;
                    flag.store(true, Ordering::Relaxed);
                },
                false,
            );
            spawner.go();
        },
        || done.load(Ordering::Relaxed),
    )
}

/// (c) Batch tasks: each spins `BATCH_SPIN` and yields, until stopped.
const BATCH_TASKS: usize = 1_000;
const BATCH_SPIN: Duration = Duration::from_micros(20);
/// How long (c) floods, and how often the latency task is woken.
const LATENCY_RUN: Duration = Duration::from_secs(2);
const LATENCY_WAKE: Duration = FRAME;

/// A wake-up from another thread, stamped when it was sent.
struct Signal {
    base: Instant,
    /// Nanoseconds after `base` (plus one) of the oldest wake-up not yet
    /// seen by the task; 0 if none.
    stamp: AtomicU64,
    waker: AtomicWaker,
}

impl Signal {
    /// Stamps a wake-up unless one is still waiting (its delay counts from
    /// the first), and wakes the task.
    fn send(&self) {
        let now = self.base.elapsed().as_nanos() as u64 + 1;
        let _ = self
            .stamp
            .compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire);
        self.waker.wake();
    }
}

/// Ready with the delay from the oldest unseen wake-up to this poll.
struct Woken<'a>(&'a Signal);

impl Future for Woken<'_> {
    type Output = Duration;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Duration> {
        let signal = self.0;
        signal.waker.register(cx.waker());
        match signal.stamp.swap(0, Ordering::AcqRel) {
            0 => Poll::Pending,
            stamp => {
                let now = signal.base.elapsed().as_nanos() as u64 + 1;
                Poll::Ready(Duration::from_nanos(now.saturating_sub(stamp)))
            }
        }
    }
}

/// What (c) measured: the frames and the latency task's delays.
struct Latency {
    frames: Frames,
    delays: Vec<Duration>,
}

fn latency_among_batch(peer: Peer, high: bool) -> Latency {
    let spawner = Spawner::new(peer);
    let stop = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicUsize::new(0));
    for _ in 0..BATCH_TASKS {
        let (stop, finished) = (stop.clone(), finished.clone());
        spawner.spawn(
            async move {
                while !stop.load(Ordering::Relaxed) {
                    spin(BATCH_SPIN);
                    gdex::yield_now().await;
                }
                finished.fetch_add(1, Ordering::Relaxed);
            },
            false,
        );
    }
    let signal = Arc::new(Signal {
        base: Instant::now(),
        stamp: AtomicU64::new(0),
        waker: AtomicWaker::new(),
    });
    let delays = Arc::new(Mutex::new(Vec::new()));
    let (s, d, st, fin) = (
        signal.clone(),
        delays.clone(),
        stop.clone(),
        finished.clone(),
    );
    spawner.spawn(
        async move {
            loop {
                let delay = Woken(&s).await;
                if st.load(Ordering::Relaxed) {
                    break;
                }
                d.lock().unwrap().push(delay);
            }
            fin.fetch_add(1, Ordering::Relaxed);
        },
        high,
    );
    spawner.go();
    let waker_thread = std::cell::Cell::new(None);
    let began = Instant::now();
    let frames = ticked_gap(
        || {
            let (signal, stop) = (signal.clone(), stop.clone());
            waker_thread.set(Some(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(LATENCY_WAKE);
                    signal.send();
                }
            })));
        },
        || began.elapsed() >= LATENCY_RUN,
    );
    stop.store(true, Ordering::Relaxed);
    waker_thread.take().unwrap().join().unwrap();
    // A wake-up after the stop: the latency task ends on it, the batch
    // tasks on their next turn.
    signal.send();
    let main = glib::MainContext::default();
    while finished.load(Ordering::Relaxed) < BATCH_TASKS + 1 {
        main.iteration(true);
    }
    let delays = std::mem::take(&mut *delays.lock().unwrap());
    Latency { frames, delays }
}

/// With a tokio runtime entered, a `LocalSet` driven by the GLib loop
/// runs tokio's timers too (the runtime's own thread drives them): a
/// 20 ms `tokio::time::sleep` in it ends.
fn localset_timers_fire() {
    let local = tokio::task::LocalSet::new();
    let slept = Arc::new(AtomicBool::new(false));
    let s = slept.clone();
    drop(local.spawn_local(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        s.store(true, Ordering::Relaxed);
    }));
    drop(glib::MainContext::default().spawn_local(local));
    let main = glib::MainContext::default();
    let t = Instant::now();
    while !slept.load(Ordering::Relaxed) {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "a tokio timer in a LocalSet on the GLib loop never fired"
        );
        main.iteration(true);
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Everything the frames table shows, one column a peer.
struct Column {
    idle: Frames,
    short: Frames,
    ready: Frames,
    ready_work: Frames,
    latency: Latency,
}

/// Measures every flood for every peer, prints the frames table, and gives
/// the figures of the summary table (`main_frame_gap`,
/// `main_frame_gap_ready_loop`, `ready_loop_drain`: gdex and glib-rs).
pub fn run() -> Vec<Figure> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let columns: Vec<Column> = PEERS
        .iter()
        .map(|&peer| {
            let _tokio = (peer == Peer::LocalSet).then(|| runtime.enter());
            if peer == Peer::LocalSet {
                localset_timers_fire();
            }
            Column {
                idle: ticked_gap(|| {}, {
                    let t = Instant::now();
                    move || t.elapsed() >= Duration::from_millis(500)
                }),
                short: short_tasks(peer),
                ready: ready_loop(peer, None),
                ready_work: ready_loop(peer, Some(ITEM_WORK)),
                latency: latency_among_batch(peer, false),
            }
        })
        .collect();
    let high = [
        latency_among_batch(Peer::Gdex, true),
        latency_among_batch(Peer::Glib, true),
    ];
    print(&columns, &high);

    let (gdex, glib) = (&columns[0], &columns[1]);
    let per_item = |f: &Frames| f.elapsed.as_secs_f64() * 1e9 / READY_ITEMS as f64;
    let row = |workload, unit, g: f64, l: f64| Figure {
        workload,
        unit,
        values: vec![
            ("gdex", format!("{g:.1}"), g),
            ("glib-main", format!("{l:.1}"), l),
        ],
    };
    vec![
        row(
            "main_frame_gap",
            "ms",
            ms(gdex.short.worst),
            ms(glib.short.worst),
        ),
        row(
            "main_frame_gap_ready_loop",
            "ms",
            ms(gdex.ready.worst),
            ms(glib.ready.worst),
        ),
        row(
            "ready_loop_drain",
            "ns/item",
            per_item(&gdex.ready),
            per_item(&glib.ready),
        ),
    ]
}

fn print(columns: &[Column], high: &[Latency; 2]) {
    println!();
    println!(
        "## Frames under floods (a redraw-priority source ticking every {} ms)",
        FRAME.as_millis()
    );
    println!();
    println!("| flood | figure | gdex | glib-rs executor | tokio LocalSet on the GLib loop |");
    println!("| --- | --- | ---: | ---: | ---: |");
    let line = |flood: &str, figure: &str, cell: &dyn Fn(&Column) -> String| {
        let cells: Vec<String> = columns.iter().map(cell).collect();
        println!("| {flood} | {figure} | {} |", cells.join(" | "));
    };
    let frames = |flood: &str, of: &dyn Fn(&Column) -> Frames| {
        line(flood, "longest gap, ms", &|c| {
            format!("{:.1}", ms(of(c).worst))
        });
        line(flood, "ticks a second", &|c| {
            let f = of(c);
            format!("{:.0} (over {:.0} ms)", f.per_second(), ms(f.elapsed))
        });
    };
    frames("none", &|c| c.idle);
    frames(
        &format!("(a) {} short tasks", thousands(FRAME_TASKS)),
        &|c| c.short,
    );
    let ready = format!(
        "(b) one task draining {} ready items",
        thousands(READY_ITEMS)
    );
    frames(&ready, &|c| c.ready);
    line(&ready, "drain, ns per item", &|c| {
        format!(
            "{:.1}",
            c.ready.elapsed.as_secs_f64() * 1e9 / READY_ITEMS as f64
        )
    });
    let work = format!(
        "(b) the same, with {} ns of work an item",
        ITEM_WORK.as_nanos()
    );
    frames(&work, &|c| c.ready_work);
    let latency = format!(
        "(c) {} batch tasks and a latency task, both at the default priority",
        thousands(BATCH_TASKS)
    );
    frames(&latency, &|c| c.latency.frames);
    line(&latency, "wake-to-poll p50 / p99, ms", &|c| {
        delays(&c.latency.delays)
    });
    let flood = "(c) the latency task at `G_PRIORITY_HIGH`";
    let [gdex, glib] = high.each_ref().map(|l| l.frames);
    println!(
        "| {flood} | longest gap, ms | {:.1} | {:.1} | — (no task priorities) |",
        ms(gdex.worst),
        ms(glib.worst)
    );
    println!(
        "| {flood} | ticks a second | {:.0} (over {:.0} ms) | {:.0} (over {:.0} ms) | — |",
        gdex.per_second(),
        ms(gdex.elapsed),
        glib.per_second(),
        ms(glib.elapsed)
    );
    println!(
        "| {flood} | wake-to-poll p50 / p99, ms | {} | {} | — |",
        delays(&high[0].delays),
        delays(&high[1].delays)
    );
    println!();
}

/// "p50 / p99 (n wake-ups, the longest)", or why there is none.
fn delays(delays: &[Duration]) -> String {
    if delays.is_empty() {
        return "— (not woken once)".into();
    }
    let mut sorted = delays.to_vec();
    sorted.sort();
    format!(
        "{:.2} / {:.2} ({} wake-ups, the longest {:.2})",
        ms(percentile(&sorted, 0.5)),
        ms(percentile(&sorted, 0.99)),
        sorted.len(),
        ms(sorted[sorted.len() - 1])
    )
}

/// `n` with a comma every three digits.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
