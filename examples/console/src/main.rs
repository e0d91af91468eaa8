//! gdex's tasks in tokio-console (O1, feature `console`).
//!
//! Run it, then `tokio-console` in another terminal (it connects to
//! `http://127.0.0.1:6669`):
//!
//! ```text
//! cargo run -p gdex-console            # runs until Ctrl-C
//! GDEX_CONSOLE_SECS=30 cargo run -p gdex-console
//! tokio-console                        # in another terminal
//! ```
//!
//! It keeps a few named tasks busy on a pool and on the main loop: a
//! ticker, a producer and a consumer on a channel, a fiber that waits, a
//! task that hogs its worker now and then, and a main-scheduler task.
//! `console_subscriber::init()` is all an app adds: gdex's task spans are
//! named `runtime.spawn` and its wake-ups are `runtime::waker` events, as
//! tokio-console's subscriber expects.

use std::time::Duration;

fn main() {
    console_subscriber::init();
    let pool = gdex::ThreadPool::builder()
        .workers(2)
        .build()
        .expect("start the pool");
    let scheduler = pool.scheduler();

    scheduler
        .spawn_named("ticker", async {
            loop {
                gdex::sleep(Duration::from_millis(100)).await;
            }
        })
        .detach();

    let (tx, rx) = gdex::channel::<u64>(8);
    scheduler
        .spawn_named("producer", async move {
            for n in 0.. {
                if tx.send(n).await.is_err() {
                    break;
                }
                gdex::sleep(Duration::from_millis(20)).await;
            }
        })
        .detach();
    scheduler
        .spawn_named("consumer", async move {
            let mut sum = 0u64;
            while let Ok(n) = rx.recv().await {
                sum = sum.wrapping_add(n);
            }
            sum
        })
        .detach();

    scheduler
        .spawn_named("hog", async {
            loop {
                // Busy for 30 ms every second: a long poll in the console.
                let started = std::time::Instant::now();
                while started.elapsed() < Duration::from_millis(30) {
                    std::hint::spin_loop();
                }
                gdex::sleep(Duration::from_secs(1)).await;
            }
        })
        .detach();

    let fiber = scheduler.spawn_fiber(|| loop {
        if gdex::fiber::wait(gdex::sleep(Duration::from_millis(250))).is_err() {
            break;
        }
    });

    let main_loop = glib::MainLoop::new(None, false);
    gdex::Scheduler::main()
        .spawn_local(async {
            loop {
                gdex::sleep(Duration::from_millis(500)).await;
            }
        })
        .detach();
    if let Some(secs) = std::env::var("GDEX_CONSOLE_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        let quit = main_loop.clone();
        glib::timeout_add_local_once(Duration::from_secs(secs), move || quit.quit());
    }
    println!("gdex-console: tasks running; connect with `tokio-console` (Ctrl-C to stop)");
    main_loop.run();
    drop(fiber);
    drop(pool);
}
