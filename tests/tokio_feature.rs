//! X6: with `--features tokio`, tokio I/O and timers work inside gdex tasks
//! on any worker, on the main scheduler, in fibers and blocking jobs, with
//! no tokio runtime set up by the test.
#![cfg(feature = "tokio")]

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::{is_child, on_main, run_child_passing, watchdog};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An echo server on a plain std thread: the other end of the connection
/// owes nothing to tokio.
fn echo_server() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let mut stream = stream.unwrap();
            std::thread::spawn(move || {
                let mut buf = [0; 64];
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 || stream.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

async fn round_trip(addr: std::net::SocketAddr, word: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(word.as_bytes()).await.unwrap();
    let mut buf = vec![0; word.len()];
    stream.read_exact(&mut buf).await.unwrap();
    // Deliberate (here and in the tests below): tokio's timers are under
    // test, not a wait for something else.
    tokio::time::sleep(Duration::from_millis(1)).await;
    String::from_utf8(buf).unwrap()
}

#[test]
fn tokio_tcp_and_timers_inside_gdex_tasks() {
    watchdog("tokio_tcp_and_timers_inside_gdex_tasks", 60, || {
        let addr = echo_server();
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        // Many tasks so that both workers run some.
        let tasks: Vec<_> = (0..16)
            .map(|i| {
                pool.scheduler().spawn(async move {
                    let name = std::thread::current().name().unwrap().to_owned();
                    (round_trip(addr, &format!("pool-{i}")).await, name)
                })
            })
            .collect();
        let mut workers = std::collections::HashSet::new();
        for (i, t) in tasks.into_iter().enumerate() {
            let (echo, worker) = gdex::block_on(t).unwrap();
            assert_eq!(echo, format!("pool-{i}"));
            workers.insert(worker);
        }
        assert!(workers.iter().all(|w| w.starts_with("gdex-worker-")));

        let fiber = pool
            .scheduler()
            .spawn_fiber(move || gdex::fiber::wait_output(round_trip(addr, "fiber")).unwrap());
        assert_eq!(gdex::block_on(fiber).unwrap(), "fiber");

        let blocking = pool.spawn_blocking(move || {
            tokio::runtime::Handle::current().block_on(round_trip(addr, "blocking"))
        });
        assert_eq!(gdex::block_on(blocking).unwrap(), "blocking");

        on_main(|| {
            let on_main = gdex::Scheduler::main().spawn_local(round_trip(addr, "main"));
            assert_eq!(gdex::block_on(on_main).unwrap(), "main");
        });
    });
}

/// The names of this process's threads (Linux: `/proc/self/task/*/comm`).
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_owned())
        .collect()
}

fn tokio_started() -> bool {
    thread_names().iter().any(|n| n == "gdex-tokio")
}

/// X6: the tokio runtime starts on first use. Building a pool, with its
/// workers up and parked, starts nothing; the pool's first task does, and
/// runs inside it.
#[test]
fn the_tokio_runtime_starts_at_the_first_task_not_when_a_pool_starts() {
    run_child_passing("child_pool_then_first_task", &[], 60, "1 passed");
}

#[test]
#[ignore = "run by the_tokio_runtime_starts_at_the_first_task_not_when_a_pool_starts"]
fn child_pool_then_first_task() {
    if !is_child() {
        return;
    }
    watchdog("child_pool_then_first_task", 30, || {
        assert!(
            !tokio_started(),
            "nothing has run yet: {:?}",
            thread_names()
        );
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        // Each worker is past its start: it has iterated its context.
        common::wait_until(|| {
            pool.metrics()
                .workers
                .iter()
                .all(|w| w.context_iterations > 0 || w.parks > 0)
        });
        assert!(
            !tokio_started(),
            "a pool that has run nothing started the tokio runtime: {:?}",
            thread_names()
        );
        let (tx, rx) = std::sync::mpsc::channel();
        pool.scheduler()
            .spawn(async move {
                let entered = tokio::runtime::Handle::try_current().is_ok();
                tokio::time::sleep(Duration::from_millis(1)).await;
                tx.send(entered).unwrap();
            })
            .detach();
        assert!(rx.recv().unwrap(), "the first task runs inside the runtime");
        assert!(tokio_started(), "{:?}", thread_names());
        pool.shutdown();
    });
}

/// X6: a `gdex::thread::spawn` thread is inside the tokio runtime for its
/// whole life: tokio timers and I/O made there (outside any `block_on`)
/// work.
#[test]
fn gdex_thread_spawn_threads_are_inside_the_tokio_runtime() {
    watchdog(
        "gdex_thread_spawn_threads_are_inside_the_tokio_runtime",
        60,
        || {
            let addr = echo_server();
            let thread = gdex::thread::spawn("tokio-user", move || {
                // Made outside any gdex wait: needs the thread's own entry.
                let sleep = tokio::time::sleep(Duration::from_millis(1));
                let connect = tokio::net::TcpStream::connect(addr);
                gdex::wait_for(sleep);
                let stream = gdex::wait_for(connect).unwrap();
                drop(stream);
                gdex::wait_for(round_trip(addr, "thread"))
            });
            assert_eq!(thread.join().unwrap(), "thread");
        },
    );
}

/// X6, the documented lifetime: one runtime for the whole process, never
/// shut down; it outlives every pool.
#[test]
fn the_tokio_runtime_outlives_the_pools_that_used_it() {
    watchdog(
        "the_tokio_runtime_outlives_the_pools_that_used_it",
        60,
        || {
            let first = gdex::ThreadPool::builder().workers(1).build().unwrap();
            let handle = gdex::block_on(first.scheduler().spawn(async {
                tokio::time::sleep(Duration::from_millis(1)).await;
                tokio::runtime::Handle::current()
            }))
            .unwrap();
            first.shutdown();
            assert!(std::ptr::eq(gdex::tokio_handle(), gdex::tokio_handle()));
            assert_eq!(handle.id(), gdex::tokio_handle().id());
            // Still driving timers after that pool is gone.
            let second = gdex::ThreadPool::builder().workers(1).build().unwrap();
            let task = second.scheduler().spawn(async {
                tokio::time::sleep(Duration::from_millis(1)).await;
                tokio::runtime::Handle::current().id()
            });
            assert_eq!(gdex::block_on(task).unwrap(), gdex::tokio_handle().id());
            second.shutdown();
        },
    );
}

/// tokio's `timeout(d, handle).await??` with gdex's `timeout`: over a
/// tokio `JoinHandle` inside a gdex task, the deadline's `Elapsed` and the
/// handle's `JoinError` both convert into `gdex::Error` with `?` (a
/// panicked tokio task is `Panicked` with its message); a deadline that
/// passes gives `Elapsed` and drops the handle, which (tokio's rule)
/// detaches the tokio task: it runs on.
#[test]
fn a_timeout_over_a_tokio_join_handle_takes_question_marks() {
    watchdog("timeout-over-tokio-handle", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let long = Duration::from_secs(10);
        async fn joined<T>(
            d: Duration,
            handle: tokio::task::JoinHandle<T>,
        ) -> Result<T, gdex::Error> {
            Ok(gdex::timeout(d, handle).await??)
        }
        let task = pool.scheduler().spawn(async move {
            let value = joined(long, tokio::spawn(async { 6 * 7 })).await;
            let panicked = joined(long, tokio::spawn(async { panic!("on purpose") })).await;
            (value, panicked)
        });
        let (value, panicked) = gdex::block_on(task).unwrap();
        assert_eq!(value.unwrap(), 42);
        assert!(
            matches!(&panicked, Err(gdex::Error::Panicked(m)) if m == "on purpose"),
            "{panicked:?}"
        );

        let (finished, ran_on) = std::sync::mpsc::channel();
        let (release, gate) = tokio::sync::oneshot::channel::<()>();
        let task = pool.scheduler().spawn(async move {
            let handle = tokio::spawn(async move {
                let _ = gate.await;
                finished.send(()).unwrap();
            });
            // Deliberate: the deadline is what is tested.
            joined(Duration::from_millis(5), handle).await
        });
        let elapsed = gdex::block_on(task).unwrap();
        assert!(matches!(elapsed, Err(gdex::Error::TimedOut)), "{elapsed:?}");
        release.send(()).unwrap();
        ran_on.recv().expect("the detached tokio task ran on");
    });
}

/// Messages per channel: many times tokio's budget of 128.
const MESSAGES: usize = 20_000;

/// P11 with the `tokio` feature (as in gtk-rs/gtk-rs-core#1251): a GLib
/// loop run inside a tokio task (a `block_on` in a task of an app's
/// current-thread runtime, or a `MainLoop` run in the runtime's
/// `block_on`, as under `#[tokio::main]`) polls gdex tasks whose tokio
/// futures would spend that tokio task's budget; once it was spent, tokio
/// deferred their wake-ups until the tokio task yielded, which it cannot
/// while the loop runs, and they stopped after 128 messages. Tokio
/// channels carry many thousands of messages both ways there: between two
/// gdex tasks of the nested loop's context, into `block_on`'s own future,
/// and into a context scheduler's task of a `MainLoop`.
#[test]
fn tokio_channels_in_gdex_tasks_inside_a_tokio_task_go_past_the_budget() {
    watchdog("tokio_channels_inside_a_tokio_task", 60, || {
        common::on_own_context(|context| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            // Two gdex tasks, a ping and a pong over tokio channels, in the
            // loop of a `block_on` inside a tokio task.
            let pinged = runtime.block_on(async {
                tokio::spawn(async {
                    let (ping, mut pinged) = tokio::sync::mpsc::channel::<usize>(16);
                    let (pong, mut ponged) = tokio::sync::mpsc::channel::<usize>(16);
                    let echo = gdex::spawn_local(async move {
                        while let Some(i) = pinged.recv().await {
                            pong.send(i).await.unwrap();
                        }
                    });
                    let pinger = gdex::spawn_local(async move {
                        let mut sum = 0;
                        for i in 0..MESSAGES {
                            ping.send(i).await.unwrap();
                            sum += ponged.recv().await.unwrap();
                        }
                        sum
                    });
                    let sum = gdex::block_on(pinger).unwrap();
                    gdex::block_on(echo).unwrap();
                    sum
                })
                .await
                .unwrap()
            });
            assert_eq!(pinged, (0..MESSAGES).sum::<usize>());

            // `block_on`'s own future, in the runtime's `block_on`.
            let received = runtime.block_on(async {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                for i in 0..MESSAGES {
                    tx.send(i).unwrap();
                }
                drop(tx);
                gdex::block_on(async move {
                    let mut n = 0;
                    while rx.recv().await.is_some() {
                        n += 1;
                    }
                    n
                })
            });
            assert_eq!(received, MESSAGES);

            // A `MainLoop` run in the runtime's `block_on`: a context
            // scheduler's task takes every message, then quits the loop.
            let main_loop = glib::MainLoop::new(Some(context), false);
            let quit = main_loop.clone();
            let received = runtime.block_on(async move {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                for i in 0..MESSAGES {
                    tx.send(i).unwrap();
                }
                drop(tx);
                let task = gdex::spawn_local(async move {
                    let mut n = 0;
                    while rx.recv().await.is_some() {
                        n += 1;
                    }
                    quit.quit();
                    n
                });
                main_loop.run();
                gdex::block_on(task).unwrap()
            });
            assert_eq!(received, MESSAGES);
        })
    });
}

/// The other way round: gdex channels used in tokio tasks (of an app's
/// current-thread runtime) carry many thousands of messages to and from a
/// gdex pool. A gdex future polled by tokio has no gdex budget (it runs in
/// no gdex poll), and tokio's budget does not apply to it.
#[test]
fn gdex_channels_inside_tokio_tasks_carry_many_thousands_of_messages() {
    watchdog("gdex_channels_inside_tokio_tasks", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (to_tokio, from_gdex) = gdex::channel(16);
        let (to_gdex, from_tokio) = gdex::channel(16);
        let producer = pool.scheduler().spawn(async move {
            for i in 0..MESSAGES {
                to_tokio.send(i).await.unwrap();
            }
        });
        let consumer = pool.scheduler().spawn(async move {
            let mut sum = 0;
            while let Ok(i) = from_tokio.recv().await {
                sum += i;
            }
            sum
        });
        let (received, ()) = runtime.block_on(async move {
            let receiving = tokio::spawn(async move {
                let mut sum = 0;
                while let Ok(i) = from_gdex.recv().await {
                    sum += i;
                }
                sum
            });
            let sending = tokio::spawn(async move {
                for i in 0..MESSAGES {
                    to_gdex.send(i).await.unwrap();
                }
            });
            (receiving.await.unwrap(), sending.await.unwrap())
        });
        let total = (0..MESSAGES).sum::<usize>();
        assert_eq!(received, total);
        gdex::block_on(producer).unwrap();
        assert_eq!(gdex::block_on(consumer).unwrap(), total);
    });
}
