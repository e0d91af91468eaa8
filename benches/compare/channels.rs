//! Channels and semaphores: gdex's `channel` and
//! `Semaphore` against `futures::channel::mpsc` and tokio's `mpsc` and
//! `Semaphore`, every one driven by the same gdex pool, so that the rows
//! differ only by the primitive.
//!
//! - `channel_drain`: one task receives `DRAIN` items queued before it
//!   starts (the channel is filled in the untimed setup), until the
//!   channel is empty.
//! - `channel_ping_pong`: two tasks pass one item back and forth `ROUNDS`
//!   times through two channels (each receive wakes the other task).
//! - `semaphore_uncontended`: one task acquires and releases a permit
//!   `PERMITS` times.
//! - `semaphore_contended`: `CONTENDERS` tasks share one permit, each
//!   acquiring and releasing it `PERMITS / CONTENDERS` times.
//!
//! Bounded rows use a capacity that holds the whole drain (1 for the ping
//! pong's); gdex has only bounded channels, so its row stands beside both
//! kinds of peer. tokio's cooperative budget is not running here (no tokio
//! runtime); gdex's is (P11), so its drain yields once every 128 receives.

use std::future::Future;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput};
use futures::{SinkExt, StreamExt};

use crate::runtimes::All;
use crate::table::{fmt, median_ns};

const DRAIN: usize = 100_000;
const ROUNDS: usize = 10_000;
const PERMITS: usize = 100_000;
const CONTENDERS: usize = 4;

/// Runs `f` as a task of the gdex pool and waits for it.
fn on_pool<F: Future<Output = ()> + Send + 'static>(all: &All, f: F) {
    gdex::block_on(all.gdex.0.spawn(f)).unwrap();
}

pub fn channels(c: &mut Criterion, all: &All) {
    drain(c, all);
    ping_pong(c, all);
    semaphores(c, all);
}

fn drain(c: &mut Criterion, all: &All) {
    let n = crate::runtimes::workers();
    let mut g = c.benchmark_group("channel_drain");
    g.throughput(Throughput::Elements(DRAIN as u64));
    for who in PEERS_AND_GDEX {
        g.bench_function(BenchmarkId::new(who, n), |b| {
            b.iter_batched(
                || Filled::new(who),
                |rx| rx.drain(all),
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

/// A channel of `who`'s kind holding `DRAIN` items, its senders gone.
enum Filled {
    Gdex(gdex::Receiver<usize>),
    FuturesBounded(futures::channel::mpsc::Receiver<usize>),
    FuturesUnbounded(futures::channel::mpsc::UnboundedReceiver<usize>),
    TokioBounded(tokio::sync::mpsc::Receiver<usize>),
    TokioUnbounded(tokio::sync::mpsc::UnboundedReceiver<usize>),
}

impl Filled {
    fn new(who: &str) -> Filled {
        match who {
            "gdex" => {
                let (tx, rx) = gdex::channel(DRAIN);
                (0..DRAIN).for_each(|i| tx.try_send(i).unwrap());
                Filled::Gdex(rx)
            }
            "futures-bounded" => {
                let (mut tx, rx) = futures::channel::mpsc::channel(DRAIN);
                (0..DRAIN).for_each(|i| tx.try_send(i).unwrap());
                Filled::FuturesBounded(rx)
            }
            "futures-unbounded" => {
                let (tx, rx) = futures::channel::mpsc::unbounded();
                (0..DRAIN).for_each(|i| tx.unbounded_send(i).unwrap());
                Filled::FuturesUnbounded(rx)
            }
            "tokio-bounded" => {
                let (tx, rx) = tokio::sync::mpsc::channel(DRAIN);
                (0..DRAIN).for_each(|i| tx.try_send(i).unwrap());
                Filled::TokioBounded(rx)
            }
            "tokio-unbounded" => {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                (0..DRAIN).for_each(|i| tx.send(i).unwrap());
                Filled::TokioUnbounded(rx)
            }
            _ => panic!("unknown channel {who}"),
        }
    }

    /// Receives every item in one task of the pool, and waits for it.
    fn drain(self, all: &All) {
        match self {
            Filled::Gdex(rx) => on_pool(all, async move {
                let mut sum = 0usize;
                while let Ok(i) = rx.recv().await {
                    sum = sum.wrapping_add(i);
                }
                std::hint::black_box(sum);
            }),
            Filled::FuturesBounded(rx) => on_pool(all, stream_sum(rx)),
            Filled::FuturesUnbounded(rx) => on_pool(all, stream_sum(rx)),
            Filled::TokioBounded(mut rx) => on_pool(all, async move {
                let mut sum = 0usize;
                while let Some(i) = rx.recv().await {
                    sum = sum.wrapping_add(i);
                }
                std::hint::black_box(sum);
            }),
            Filled::TokioUnbounded(mut rx) => on_pool(all, async move {
                let mut sum = 0usize;
                while let Some(i) = rx.recv().await {
                    sum = sum.wrapping_add(i);
                }
                std::hint::black_box(sum);
            }),
        }
    }
}

async fn stream_sum<S: futures::Stream<Item = usize> + Unpin>(mut rx: S) {
    let mut sum = 0usize;
    while let Some(i) = rx.next().await {
        sum = sum.wrapping_add(i);
    }
    std::hint::black_box(sum);
}

fn ping_pong(c: &mut Criterion, all: &All) {
    let n = crate::runtimes::workers();
    let mut g = c.benchmark_group("channel_ping_pong");
    g.throughput(Throughput::Elements(ROUNDS as u64));
    for who in PEERS_AND_GDEX {
        g.bench_function(BenchmarkId::new(who, n), |b| {
            b.iter(|| ping_pong_once(all, who))
        });
    }
    g.finish();
}

const PEERS_AND_GDEX: [&str; 5] = [
    "gdex",
    "futures-bounded",
    "futures-unbounded",
    "tokio-bounded",
    "tokio-unbounded",
];

/// `ROUNDS` round trips between two tasks of the pool over `who`'s channels
/// (bounded ones of capacity 1).
fn ping_pong_once(all: &All, who: &str) {
    let s = &all.gdex.0;
    match who {
        "gdex" => {
            let (ping, pinged) = gdex::channel::<usize>(1);
            let (pong, ponged) = gdex::channel::<usize>(1);
            let echo = s.spawn(async move {
                while let Ok(i) = pinged.recv().await {
                    if pong.send(i).await.is_err() {
                        break;
                    }
                }
            });
            on_pool(all, async move {
                for i in 0..ROUNDS {
                    ping.send(i).await.unwrap();
                    assert_eq!(ponged.recv().await.unwrap(), i);
                }
            });
            gdex::block_on(echo).unwrap();
        }
        "futures-bounded" => {
            let (ping, pinged) = futures::channel::mpsc::channel::<usize>(1);
            let (pong, ponged) = futures::channel::mpsc::channel::<usize>(1);
            futures_ping_pong(all, ping, pinged, pong, ponged);
        }
        "futures-unbounded" => {
            let (ping, pinged) = futures::channel::mpsc::unbounded::<usize>();
            let (pong, ponged) = futures::channel::mpsc::unbounded::<usize>();
            futures_ping_pong(all, ping, pinged, pong, ponged);
        }
        "tokio-bounded" => {
            let (ping, mut pinged) = tokio::sync::mpsc::channel::<usize>(1);
            let (pong, mut ponged) = tokio::sync::mpsc::channel::<usize>(1);
            let echo = s.spawn(async move {
                while let Some(i) = pinged.recv().await {
                    if pong.send(i).await.is_err() {
                        break;
                    }
                }
            });
            on_pool(all, async move {
                for i in 0..ROUNDS {
                    ping.send(i).await.unwrap();
                    assert_eq!(ponged.recv().await.unwrap(), i);
                }
            });
            gdex::block_on(echo).unwrap();
        }
        "tokio-unbounded" => {
            let (ping, mut pinged) = tokio::sync::mpsc::unbounded_channel::<usize>();
            let (pong, mut ponged) = tokio::sync::mpsc::unbounded_channel::<usize>();
            let echo = s.spawn(async move {
                while let Some(i) = pinged.recv().await {
                    if pong.send(i).is_err() {
                        break;
                    }
                }
            });
            on_pool(all, async move {
                for i in 0..ROUNDS {
                    ping.send(i).unwrap();
                    assert_eq!(ponged.recv().await.unwrap(), i);
                }
            });
            gdex::block_on(echo).unwrap();
        }
        _ => panic!("unknown channel {who}"),
    }
}

/// A child process for an instruction count
/// (`GDEX_BENCH_CHILD=pingpong:<who>:<times>`): `times` ping pongs of
/// `ROUNDS` round trips over `who`'s channels. The difference between two
/// `times`, over the rounds between them, is what a round trip costs.
pub fn ping_pong_child(what: &str) {
    let (who, times) = what.split_once(':').expect("pingpong:<who>:<times>");
    let times: usize = times
        .parse()
        .expect("pingpong:<who>:<times>, times a number");
    let all = All::new();
    for _ in 0..times {
        ping_pong_once(&all, who);
    }
}

/// The ping pong over `futures`' channels, either kind (a `Sink` each way).
fn futures_ping_pong<Tx, Rx>(all: &All, mut ping: Tx, mut pinged: Rx, mut pong: Tx, mut ponged: Rx)
where
    Tx: futures::Sink<usize> + Unpin + Send + 'static,
    Rx: futures::Stream<Item = usize> + Unpin + Send + 'static,
{
    let echo = all.gdex.0.spawn(async move {
        while let Some(i) = pinged.next().await {
            if pong.send(i).await.is_err() {
                break;
            }
        }
    });
    on_pool(all, async move {
        for i in 0..ROUNDS {
            assert!(ping.send(i).await.is_ok());
            assert_eq!(ponged.next().await, Some(i));
        }
    });
    gdex::block_on(echo).unwrap();
}

fn semaphores(c: &mut Criterion, all: &All) {
    let n = crate::runtimes::workers();
    {
        let mut g = c.benchmark_group("semaphore_uncontended");
        g.throughput(Throughput::Elements(PERMITS as u64));
        g.bench_function(BenchmarkId::new("gdex", n), |b| {
            b.iter(|| {
                on_pool(all, async {
                    let semaphore = gdex::Semaphore::new(1);
                    for _ in 0..PERMITS {
                        drop(semaphore.acquire().await.unwrap());
                    }
                })
            })
        });
        g.bench_function(BenchmarkId::new("tokio", n), |b| {
            b.iter(|| {
                on_pool(all, async {
                    let semaphore = tokio::sync::Semaphore::new(1);
                    for _ in 0..PERMITS {
                        drop(semaphore.acquire().await.unwrap());
                    }
                })
            })
        });
        g.finish();
    }
    {
        let mut g = c.benchmark_group("semaphore_contended");
        g.throughput(Throughput::Elements(PERMITS as u64));
        let s = &all.gdex.0;
        g.bench_function(BenchmarkId::new("gdex", n), |b| {
            b.iter(|| {
                let semaphore = std::sync::Arc::new(gdex::Semaphore::new(1));
                let tasks: Vec<_> = (0..CONTENDERS)
                    .map(|_| {
                        let semaphore = semaphore.clone();
                        s.spawn(async move {
                            for _ in 0..PERMITS / CONTENDERS {
                                drop(semaphore.acquire().await.unwrap());
                            }
                        })
                    })
                    .collect();
                tasks.into_iter().for_each(|t| gdex::block_on(t).unwrap());
            })
        });
        g.bench_function(BenchmarkId::new("tokio", n), |b| {
            b.iter(|| {
                let semaphore = std::sync::Arc::new(tokio::sync::Semaphore::new(1));
                let tasks: Vec<_> = (0..CONTENDERS)
                    .map(|_| {
                        let semaphore = semaphore.clone();
                        s.spawn(async move {
                            for _ in 0..PERMITS / CONTENDERS {
                                drop(semaphore.acquire().await.unwrap());
                            }
                        })
                    })
                    .collect();
                tasks.into_iter().for_each(|t| gdex::block_on(t).unwrap());
            })
        });
        g.finish();
    }
}

/// A child process for an instruction count (`valgrind --tool=callgrind`
/// with `GDEX_BENCH_CHILD=drain:<who>:<fill|drain>`, `who` one of gdex,
/// futures-bounded, futures-unbounded, tokio-bounded, tokio-unbounded): ten
/// channels of `DRAIN` items filled, and, with `drain`, drained by one pool
/// task each (with `fill`, the receiver is leaked: dropping it would drain
/// it too). The difference of the two counts over `10 * DRAIN` is what a
/// receive costs, every instruction counted.
pub fn drain_child(what: &str) {
    let (who, mode) = what.split_once(':').expect("drain:<who>:<fill|drain>");
    let drain = match mode {
        "fill" => false,
        "drain" => true,
        _ => panic!("drain:<who>:<fill|drain>, not {mode}"),
    };
    let all = All::new();
    for _ in 0..10 {
        let filled = Filled::new(who);
        if drain {
            filled.drain(&all);
        } else {
            std::mem::forget(filled);
        }
    }
}

/// The rows of this run, ns per item, and gdex against the best peer.
pub fn print() {
    let n = crate::runtimes::workers();
    let rows: [(&str, f64, &[&str]); 4] = [
        (
            "channel_drain",
            DRAIN as f64,
            &[
                "futures-bounded",
                "futures-unbounded",
                "tokio-bounded",
                "tokio-unbounded",
            ],
        ),
        (
            "channel_ping_pong",
            ROUNDS as f64,
            &[
                "futures-bounded",
                "futures-unbounded",
                "tokio-bounded",
                "tokio-unbounded",
            ],
        ),
        ("semaphore_uncontended", PERMITS as f64, &["tokio"]),
        ("semaphore_contended", PERMITS as f64, &["tokio"]),
    ];
    println!();
    println!(
        "## Channels and semaphores ({n} workers, one gdex pool drives all; ns per item, medians)"
    );
    println!();
    println!("| workload | gdex | peers | gdex / best peer |");
    println!("| --- | ---: | --- | ---: |");
    for (group, items, peers) in rows {
        let per = |id: &str| median_ns(group, &format!("{id}/{n}")).map(|ns| ns / items);
        let Some(gdex) = per("gdex") else { continue };
        let found: Vec<(&str, f64)> = peers
            .iter()
            .filter_map(|p| per(p).map(|v| (*p, v)))
            .collect();
        let best = found.iter().map(|(_, v)| *v).fold(f64::INFINITY, f64::min);
        let listed: Vec<String> = found
            .iter()
            .map(|(p, v)| format!("{p} {}", fmt(*v)))
            .collect();
        let ratio = if best.is_finite() {
            format!("{:.2}", gdex / best)
        } else {
            "—".into()
        };
        println!(
            "| {group} | {} | {} | {ratio} |",
            fmt(gdex),
            listed.join(", ")
        );
    }
    println!();
}
