//! Shutdown under load (issue: reliability): a pool with many queued tasks
//! and tasks awaiting each other shuts down promptly, joins every worker
//! thread, drops every future exactly once, and refuses later spawns with
//! `Error::Closed`.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Names of this process's threads, from /proc.
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .map(|dir| {
            dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
                .map(|s| s.trim().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn shutdown_with_a_full_queue_is_prompt_and_drops_everything_once() {
    common::watchdog("shutdown_under_load", 120, || {
        let workers = 4;
        let pool = gdex::ThreadPool::builder()
            .workers(workers)
            .stall_threshold(std::time::Duration::ZERO)
            .build()
            .unwrap();
        let s = pool.scheduler();
        // Hold every worker so that what follows stays queued.
        let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
        let gate_rx = Arc::new(std::sync::Mutex::new(gate_rx));
        let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
        for _ in 0..workers {
            let (gate_rx, held_tx) = (gate_rx.clone(), held_tx.clone());
            s.push(move || {
                held_tx.send(()).unwrap();
                let _ = gate_rx.lock().unwrap().recv();
            });
        }
        for _ in 0..workers {
            held_rx.recv().unwrap();
        }

        let queued = common::stress(1_000_000);
        let drops = Arc::new(AtomicUsize::new(0));
        for _ in 0..queued {
            let guard = Counted(drops.clone());
            s.spawn(async move {
                let _guard = guard;
            })
            .detach();
        }
        // Pairs of tasks awaiting each other's results (never completing).
        let pairs = 1000;
        let mut keep = Vec::new();
        for _ in 0..pairs {
            let (tx, rx) = futures::channel::oneshot::channel::<()>();
            let (g1, g2) = (Counted(drops.clone()), Counted(drops.clone()));
            let inner = s.spawn(async move {
                let _g = g1;
                let _ = rx.await;
            });
            s.spawn(async move {
                let _g = g2;
                let _ = inner.await;
            })
            .detach();
            keep.push(tx);
        }

        let started = std::time::Instant::now();
        let closer = {
            let pool = pool.clone();
            std::thread::spawn(move || pool.shutdown())
        };
        common::wait_until(|| pool.is_closed());
        for _ in 0..workers {
            gate_tx.send(()).unwrap();
        }
        closer.join().unwrap();
        let took = started.elapsed();
        // Every worker thread is gone.
        assert!(
            !thread_names().iter().any(|n| n.starts_with("gdex-worker")),
            "worker threads left: {:?}",
            thread_names()
        );
        // Dropping the senders wakes the waiting tasks after the shutdown:
        // their futures are dropped then, once.
        drop(keep);
        common::wait_until(|| drops.load(Ordering::Relaxed) >= queued + 2 * pairs);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(drops.load(Ordering::Relaxed), queued + 2 * pairs);
        assert!(matches!(
            gdex::block_on(s.spawn(async { 1 })),
            Err(gdex::Error::Closed)
        ));
        eprintln!("shutdown with {queued} queued tasks took {took:?}");
    });
}
