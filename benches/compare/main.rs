//! gdex side by side with its peers: tokio's multi-thread runtime, smol's
//! async-executor, glib-rs's main-context executor and `glib::ThreadPool`,
//! on the workloads of the project's BENCH.md, all with the same number of
//! worker threads (`GDEX_BENCH_WORKERS`, default 2). It is a regression
//! check, not a showcase: read the ratios, not the absolute times.
//!
//! ```sh
//! cargo bench --bench compare -- --quick   # everything, under 3 minutes
//! cargo bench --bench compare              # the full run (benches/RESULTS.md)
//! cargo bench --bench compare -- ping_pong # one group (no figures, no table)
//! cargo bench --bench compare -- figures   # only the non-timing figures
//! cargo bench --bench compare -- monitor   # only the stall monitor's cost
//! cargo bench --bench compare -- frames    # only the frames under floods (X3, P11, P12)
//! cargo bench --bench compare -- priorities  # only the latency class behind a batch flood (P12)
//! cargo bench --bench compare -- aio_read  # only the I/O rows and table
//! cargo bench --bench compare -- aio_lines # only a 1 GiB file line by line (not in --quick)
//! cargo bench --bench compare -- workers   # only the worker-count table
//! cargo bench --bench compare -- channel   # only channels and semaphores, and their table
//! ```
//!
//! `GDEX_LATENCY_HISTOGRAMS=1` in its environment measures gdex with its
//! schedulers' latency histograms on (O1): the pools here are built with
//! the builder's defaults, which read it.
//!
//! It ends by printing one Markdown table: every workload, gdex's figure,
//! each peer's, and gdex / best peer.

mod batch;
mod channels;
mod fibers;
mod figures;
mod frames;
mod io;
mod priorities;
mod runtimes;
mod scaling;
mod table;
mod workloads;

use std::time::Duration;

use criterion::Criterion;

fn main() {
    if let Ok(what) = std::env::var("GDEX_BENCH_CHILD") {
        figures::child(&what);
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let figures_only = args.iter().any(|a| a == "figures");
    if args.iter().any(|a| a == "monitor") {
        // Only the stall monitor's own cost (B6).
        table::print(&[figures::monitor_cpu()]);
        return;
    }
    if args.iter().any(|a| a == "frames") {
        // Only the frame gaps of a busy main loop (X3, P11, P12) and
        // the pool beside a ready loop (P11).
        let mut figures = frames::run();
        figures.extend(figures::pool_ready_loop());
        table::print(&figures);
        return;
    }
    if args.iter().any(|a| a == "priorities") {
        // Only P12's pool figure: a latency task behind a batch flood.
        table::print(&priorities::pool_latency_among_batch());
        return;
    }
    if args.iter().any(|a| a == "workers") {
        // The tokio suite again at 2, 4, 8 and 16 workers (scaling.rs).
        let mut c = Criterion::default()
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(1))
            .sample_size(10)
            .configure_from_args();
        scaling::workers(&mut c);
        c.final_summary();
        scaling::print();
        return;
    }
    let filtered = args.iter().any(|a| !a.starts_with('-')) && !figures_only;
    let mut c = if quick {
        Criterion::default()
            .warm_up_time(Duration::from_millis(200))
            .measurement_time(Duration::from_millis(500))
            .sample_size(10)
    } else {
        Criterion::default()
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3))
            .sample_size(20)
    }
    .configure_from_args();
    let all = runtimes::All::new();
    workloads::compare(&mut c, &all);
    batch::spawn_batch(&mut c, &all);
    channels::channels(&mut c, &all);
    fibers::fibers(&mut c);
    io::reads(&mut c, &all);
    // A GiB per iteration: too long for `--quick` unless asked for.
    let lines_asked = args.iter().any(|a| a.starts_with("aio_lines"));
    if lines_asked || (!quick && !filtered && !figures_only) {
        io::lines(&mut c, &all);
    }
    c.final_summary();
    if args.iter().any(|a| a.starts_with("aio_read")) {
        io::print();
        return;
    }
    if lines_asked {
        io::print_lines();
        return;
    }
    if args
        .iter()
        .any(|a| a.starts_with("channel") || a.starts_with("semaphore"))
    {
        channels::print();
        return;
    }
    if filtered {
        return;
    }
    let mut figures = figures::timer_lateness(&all);
    figures.extend(figures::idle_and_memory());
    figures.extend(frames::run());
    figures.extend(figures::pool_ready_loop());
    figures.extend(priorities::pool_latency_among_batch());
    figures.push(figures::monitor_cpu());
    table::print(&figures);
    channels::print();
    io::print();
    io::print_lines();
}
