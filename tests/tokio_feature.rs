//! X6: with `--features tokio`, tokio I/O and timers work inside gdex tasks
//! on any worker, on the main scheduler, in fibers and blocking jobs, with
//! no tokio runtime set up by the test.
#![cfg(feature = "tokio")]

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::{on_main, watchdog};
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
            .spawn_fiber(move || gdex::fiber::wait(round_trip(addr, "fiber")).unwrap());
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
