//! O1: tokio-console sees gdex's tasks. console-subscriber's own layer is
//! installed in this process with its gRPC server on a loopback port; gdex
//! tasks run on a pool; the test reads the server's task updates with
//! console-api's client, as `tokio-console` does, and checks each task's
//! name, kind, spawn site, poll count, busy time, wake-ups, the wakers a
//! waiting task holds, the time a woken task waited for its poll, and its
//! end.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use console_api::instrument::instrument_client::InstrumentClient;
use console_api::instrument::InstrumentRequest;
use console_api::tasks::{Stats, Task};
use tracing_subscriber::prelude::*;

/// What the console's server told of the tasks so far.
#[derive(Default)]
struct Seen {
    tasks: HashMap<u64, Task>,
    stats: HashMap<u64, Stats>,
}

impl Seen {
    /// The task whose `task.name` field is `name`.
    fn named(&self, name: &str) -> Option<(&Task, Option<&Stats>)> {
        self.tasks.iter().find_map(|(id, task)| {
            (field(task, "task.name").as_deref() == Some(name)).then(|| (task, self.stats.get(id)))
        })
    }
}

/// The value of a task's field `name`, as text.
fn field(task: &Task, name: &str) -> Option<String> {
    use console_api::field::{Name, Value};
    task.fields.iter().find_map(|f| {
        let Some(Name::StrName(n)) = &f.name else {
            return None;
        };
        if n != name {
            return None;
        }
        Some(match f.value.as_ref()? {
            Value::StrVal(s) | Value::DebugVal(s) => s.clone(),
            Value::U64Val(v) => v.to_string(),
            Value::I64Val(v) => v.to_string(),
            Value::BoolVal(v) => v.to_string(),
        })
    })
}

fn polls(stats: Option<&Stats>) -> u64 {
    stats
        .and_then(|s| s.poll_stats.as_ref())
        .map_or(0, |p| p.polls)
}

/// A free loopback port for the console's server.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Gdex tasks as tokio-console shows them: each named task with its name,
/// kind, spawn site, poll count, busy time and wake-ups, the wakers a
/// waiting task holds, and its end once it is done (O1).
#[test]
fn the_console_lists_gdex_tasks_with_their_figures() {
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchdog = {
        let done = done.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                if start.elapsed() > Duration::from_secs(120) {
                    eprintln!("watchdog: the console test still runs after 120 s; aborting");
                    std::process::abort();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };

    let port = free_port();
    let layer = console_subscriber::ConsoleLayer::builder()
        .server_addr(([127, 0, 0, 1], port))
        .publish_interval(Duration::from_millis(20))
        .retention(Duration::from_secs(600))
        .spawn();
    tracing_subscriber::registry().with(layer).init();

    let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
    let spawned_at = line!() + 1;
    let polled = pool.scheduler().spawn_named("console-polled", async {
        for _ in 0..3 {
            gdex::yield_now().await;
        }
        gdex::sleep(Duration::from_millis(20)).await;
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(5) {
            std::hint::spin_loop();
        }
        9
    });
    let (promise, waiting) = gdex::Promise::<u32>::new();
    let mut promise = Some(promise);
    let mut held_while_waiting = None;
    let woken = pool.scheduler().spawn_named("console-woken", waiting);
    let fiber = pool
        .scheduler()
        .spawn_fiber(|| gdex::fiber::wait(gdex::sleep(Duration::from_millis(5))));
    assert_eq!(gdex::block_on(polled).unwrap(), 9);
    gdex::block_on(fiber).unwrap().unwrap();
    // On one worker: a task waits; the next one wakes it, then holds the
    // worker for 30 ms (FIFO: the waiting one is polled first).
    let one = gdex::ThreadPool::builder().workers(1).build().unwrap();
    let (release, held) = gdex::Promise::<u32>::new();
    let scheduled = one.scheduler().spawn_named("console-scheduled", held);
    let busy = one.scheduler().spawn(async move {
        release.resolve(5);
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(30) {
            std::hint::spin_loop();
        }
    });
    gdex::block_on(busy).unwrap();
    assert_eq!(gdex::block_on(scheduled).unwrap().unwrap(), 5);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let seen = runtime.block_on(async {
        let mut client = loop {
            match InstrumentClient::connect(format!("http://127.0.0.1:{port}")).await {
                Ok(client) => break client,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        let mut updates = client
            .watch_updates(InstrumentRequest {})
            .await
            .expect("the console's server answers")
            .into_inner();
        let mut seen = Seen::default();
        loop {
            let update = updates
                .message()
                .await
                .expect("an update")
                .expect("the stream goes on");
            if let Some(tasks) = update.task_update {
                for task in tasks.new_tasks {
                    let id = task.id.as_ref().unwrap().id;
                    seen.tasks.insert(id, task);
                }
                seen.stats.extend(tasks.stats_update);
            }
            // Once the console has seen the waiting task's first poll end,
            // note the wakers it counts for it (the promise holds one),
            // then resolve it from this thread: one wake-up from afar.
            if let Some((_, Some(stats))) = seen.named("console-woken") {
                if stats
                    .poll_stats
                    .as_ref()
                    .is_some_and(|p| p.polls == 1 && p.last_poll_ended.is_some())
                {
                    if let Some(promise) = promise.take() {
                        held_while_waiting =
                            Some(stats.waker_clones as i64 - stats.waker_drops as i64);
                        promise.resolve(4);
                    }
                }
            }
            let polled_done = seen
                .named("console-polled")
                .is_some_and(|(_, s)| s.is_some_and(|s| s.dropped_at.is_some()));
            let woken_done = seen
                .named("console-woken")
                .is_some_and(|(_, s)| polls(s) == 2);
            let scheduled_done = seen
                .named("console-scheduled")
                .is_some_and(|(_, s)| polls(s) == 2);
            if polled_done && woken_done && scheduled_done {
                break seen;
            }
        }
    });
    assert_eq!(gdex::block_on(woken).unwrap().unwrap(), 4);

    let (task, stats) = seen.named("console-polled").unwrap();
    assert_eq!(field(task, "kind").as_deref(), Some("task"));
    assert!(field(task, "scheduler")
        .unwrap()
        .starts_with("Scheduler::Pool"));
    let location = task.location.as_ref().expect("a spawn site");
    assert!(
        location.file.as_deref().unwrap().ends_with("console.rs"),
        "{location:?}"
    );
    assert_eq!(location.line, Some(spawned_at));
    let stats = stats.unwrap();
    let poll_stats = stats.poll_stats.as_ref().unwrap();
    assert_eq!(
        poll_stats.polls, 5,
        "three yields and a sleep: five polls ({stats:?})"
    );
    let busy = poll_stats.busy_time.unwrap();
    assert!(
        busy.seconds > 0 || busy.nanos >= 5_000_000,
        "a 5 ms spin is busy time: {busy:?}"
    );
    assert!(
        stats.wakes >= 4,
        "three yields and a timer wake it: {stats:?}"
    );
    assert!(stats.dropped_at.is_some(), "the console saw it end");

    let (woken, stats) = seen.named("console-woken").unwrap();
    assert_eq!(field(woken, "task.name").as_deref(), Some("console-woken"));
    let stats = stats.unwrap();
    assert_eq!(
        stats.wakes, 1,
        "one wake-up, from the test's thread: {stats:?}"
    );
    assert_eq!(stats.self_wakes, 0, "{stats:?}");
    // Without the count, tokio-console warns that a waiting task "has lost
    // its waker".
    assert_eq!(
        held_while_waiting,
        Some(1),
        "while it waited, the console counted the one waker the promise holds"
    );

    // The console's scheduled time: from a wake-up (gdex's waker event)
    // to the poll's start (the span entered around it).
    let (_, stats) = seen.named("console-scheduled").unwrap();
    let scheduled = stats.unwrap().scheduled_time.unwrap();
    assert!(
        scheduled.seconds > 0 || scheduled.nanos >= 30_000_000,
        "woken behind a 30 ms poll, it waited that long: {stats:?}"
    );

    assert!(
        seen.tasks
            .values()
            .any(|t| field(t, "kind").as_deref() == Some("fiber")),
        "the fiber is listed as a fiber"
    );
    drop((pool, one));
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    watchdog.join().unwrap();
}
