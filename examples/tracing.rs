//! gdex's `tracing` view (O1): a span per task, entered on each poll, and
//! events for wake-ups from other threads, steals, parks, fibers' waits and
//! stalls, printed by `tracing-subscriber`'s `fmt` layer.
//!
//! ```text
//! cargo run --features tracing --example tracing
//! RUST_LOG=gdex::task=trace,gdex::fiber=trace cargo run --features tracing --example tracing
//! ```
//!
//! `RUST_LOG` takes `tracing-subscriber`'s target filters (default
//! `gdex=trace`). Only the tasks spawned while the subscriber takes
//! `gdex::task` spans get one.

use std::time::Duration;

use tracing_subscriber::prelude::*;

fn main() -> Result<(), gdex::Error> {
    let filter: tracing_subscriber::filter::Targets = std::env::var("RUST_LOG")
        .unwrap_or_else(|_| "gdex=trace".into())
        .parse()
        .expect("RUST_LOG is a list of target=level filters");
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
                .with_thread_names(true)
                .with_target(true),
        )
        .with(filter)
        .init();

    let pool = gdex::ThreadPool::builder()
        .workers(2)
        .stall_threshold(Duration::from_millis(50))
        .build()?;

    // A task woken from another thread: this one, through a promise,
    // resolved once the task waits for it. (The dump lists the tasks whose
    // spans the subscriber takes: with a `RUST_LOG` that leaves out
    // `gdex::task`, none, and there is no wake-up event to see either.)
    let (promise, waiting) = gdex::Promise::<u32>::new();
    let woken = pool.scheduler().spawn_named("waits-for-main", waiting);
    let not_waiting_yet = || {
        gdex::dump()
            .tasks()
            .iter()
            .any(|t| t.name() == Some("waits-for-main") && t.state() != gdex::TaskState::Waiting)
    };
    while not_waiting_yet() {
        std::thread::sleep(Duration::from_millis(1));
    }
    promise.resolve(7);
    // `??`: the task's error (cancelled, panicked), then the promise's
    // (dropped unresolved).
    println!("waits-for-main gave {}", gdex::block_on(woken)??);

    // A fiber that waits twice.
    let fiber = pool.scheduler().spawn_fiber(|| {
        for _ in 0..2 {
            gdex::fiber::wait(gdex::sleep(Duration::from_millis(5))).unwrap();
        }
    });
    gdex::block_on(fiber)?;

    // A task that holds its worker past the stall threshold.
    let stuck = pool.scheduler().spawn_named("hogs-its-worker", async {
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_millis(80) {
            std::hint::spin_loop();
        }
    });
    gdex::block_on(stuck)?;
    Ok(())
}
