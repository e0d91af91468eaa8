//! A short tour of gdex: the main scheduler, the pool, awaiting across
//! schedulers, a GLib timeout inside a pool task, a fiber, blocking work,
//! cancellation, and the pool's metrics.
//!
//! Run it with `cargo run --example tour`.

use std::time::{Duration, Instant};

fn main() {
    let main_loop = glib::MainLoop::new(None, false);
    let pool = gdex::ThreadPool::builder()
        .workers(2)
        .build()
        .expect("start the pool");
    let pool_scheduler = pool.scheduler();
    println!(
        "gdex tour: a pool of {} workers, each running its own GMainContext",
        pool.workers()
    );

    let quit = main_loop.clone();
    let metrics_pool = pool.clone();
    // A task on the main scheduler: it may hold !Send state (an Rc here, a
    // widget in a GTK app) because it never leaves the main thread.
    gdex::Scheduler::main()
        .spawn_local(async move {
            let main_thread = std::thread::current().id();
            let label = std::rc::Rc::new("main");

            // 1. CPU work on the pool, awaited from the main thread.
            let started = Instant::now();
            let sums: Vec<_> = (0..8u64)
                .map(|chunk| {
                    pool_scheduler.spawn(async move {
                        (chunk * 1_000_000..(chunk + 1) * 1_000_000).sum::<u64>()
                    })
                })
                .collect();
            let mut total = 0;
            for task in sums {
                total += task.await.expect("a pool task");
            }
            println!(
                "[{label}] sum of 0..8e6 = {total}, computed on the pool in {:?}",
                started.elapsed()
            );
            assert_eq!(
                std::thread::current().id(),
                main_thread,
                "resumed on the main thread"
            );

            // 2. A GLib timeout inside a pool task: the worker's own context fires it.
            let timed = pool_scheduler.spawn(async {
                let t = Instant::now();
                glib::timeout_future(Duration::from_millis(20)).await;
                (
                    std::thread::current().name().unwrap_or("?").to_owned(),
                    t.elapsed(),
                )
            });
            let (worker, waited) = timed.await.expect("the timed task");
            println!("[{label}] a 20 ms glib::timeout_future fired on {worker} after {waited:?}");

            // 3. A pool task that awaits a main-scheduler task.
            let from_pool = pool_scheduler.spawn(async {
                let on_main = gdex::Scheduler::main().spawn(async {
                    gdex::Scheduler::thread_default().is_some_and(|s| s.is_main())
                });
                on_main.await.expect("the main task")
            });
            println!(
                "[{label}] a pool task awaited a main task that ran on the main scheduler: {}",
                from_pool.await.expect("the pool task")
            );

            // 4. A fiber: straight-line code that waits without blocking its worker.
            let s2 = pool_scheduler.clone();
            let fiber = pool_scheduler.spawn_fiber(move || {
                let a = gdex::fiber::wait(s2.spawn(async { 20 })).unwrap();
                gdex::fiber::wait(glib::timeout_future(Duration::from_millis(5))).unwrap();
                a + 22
            });
            println!(
                "[{label}] a fiber waited on a task and a timer: {}",
                fiber.await.expect("the fiber")
            );

            // 5. Blocking work goes to the blocking lane, never to a worker.
            let blocking =
                gdex::spawn_blocking(|| std::fs::read_dir("/").map(|d| d.count()).unwrap_or(0));
            println!(
                "[{label}] spawn_blocking listed {} entries in /",
                blocking.await.expect("the blocking job")
            );

            // 6. Cancellation: dropping a Task drops its future.
            let forever = pool_scheduler.spawn(std::future::pending::<()>());
            println!(
                "[{label}] cancel() of a pending task returned {:?}",
                forever.cancel().await
            );

            // 7. The pool's counters.
            for w in metrics_pool.metrics().workers {
                println!(
                    "  gdex-worker-{}: ran {} jobs, {} steals / {} attempts, {} injector pulls, \
                     wake requests {} sent / {} coalesced / {} received, {} parks, {} iterations",
                    w.index,
                    w.tasks_run,
                    w.steals,
                    w.steal_attempts,
                    w.injector_pulls,
                    w.wake_requests_sent,
                    w.wake_requests_coalesced,
                    w.wake_requests_received,
                    w.parks,
                    w.context_iterations
                );
            }
            quit.quit();
        })
        .detach();

    main_loop.run();
    println!("tour done");
}
