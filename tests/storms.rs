//! Storms (S5, S6): floods of panics, spawn-then-drop races and
//! wake-while-cancel races; the pool keeps working after each, and every
//! future is dropped exactly once. Its own binary: it silences the panic
//! hook while 100,000 tasks panic.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

use common::Counted;

fn still_works(pool: &gdex::ThreadPool) {
    let tasks: Vec<_> = (0..100)
        .map(|i| pool.scheduler().spawn(async move { i * 2 }))
        .collect();
    for (i, t) in tasks.into_iter().enumerate() {
        assert_eq!(gdex::block_on(t).unwrap(), i * 2);
    }
}

#[test]
fn storms() {
    common::watchdog("storms", 300, || {
        let pool = gdex::ThreadPool::builder().workers(4).build().unwrap();
        let s = pool.scheduler();

        // 1. 100,000 panicking tasks: every waiter gets Panicked.
        let n = common::stress(100_000);
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let tasks: Vec<_> = (0..n)
            .map(|i| s.spawn(async move { panic!("storm {i}") }))
            .collect();
        let mut panicked = 0;
        for (i, t) in tasks.into_iter().enumerate() {
            match gdex::block_on(t) {
                Err(gdex::Error::Panicked(msg)) if msg == format!("storm {i}") => panicked += 1,
                other => panic!("task {i}: {other:?}"),
            }
        }
        std::panic::set_hook(hook);
        assert_eq!(panicked, n);
        still_works(&pool);

        // 2. Spawn-then-drop races: each future is dropped exactly once,
        //    whether it ran or was cancelled first.
        let n = common::stress(1_000_000);
        let drops = Arc::new(AtomicUsize::new(0));
        let ran = Arc::new(AtomicUsize::new(0));
        for _ in 0..n {
            let (guard, ran) = (Counted(drops.clone()), ran.clone());
            drop(s.spawn(async move {
                let _guard = guard;
                ran.fetch_add(1, Ordering::Relaxed);
            }));
        }
        common::wait_until(|| drops.load(Ordering::Relaxed) >= n);
        // Deliberate: 20 ms in which a second drop would show; each future
        // is dropped once, however late the check.
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(
            drops.load(Ordering::Relaxed),
            n,
            "every future dropped exactly once"
        );
        assert!(ran.load(Ordering::Relaxed) <= n);
        still_works(&pool);

        // 3. A task woken from another thread while it is being cancelled.
        let rounds = common::stress(10_000);
        let drops = Arc::new(AtomicUsize::new(0));
        for _ in 0..rounds {
            let slot: Arc<Mutex<Option<Waker>>> = Arc::new(Mutex::new(None));
            let (slot2, guard) = (slot.clone(), Counted(drops.clone()));
            let task = s.spawn(async move {
                let _guard = guard;
                std::future::poll_fn(|cx| {
                    *slot2.lock().unwrap() = Some(cx.waker().clone());
                    Poll::<()>::Pending
                })
                .await
            });
            let waker_thread = std::thread::spawn(move || {
                for _ in 0..3 {
                    if let Some(w) = slot.lock().unwrap().clone() {
                        w.wake();
                    }
                    std::thread::yield_now();
                }
            });
            assert_eq!(gdex::block_on(task.cancel()), None);
            waker_thread.join().unwrap();
        }
        common::wait_until(|| drops.load(Ordering::Relaxed) >= rounds);
        assert_eq!(drops.load(Ordering::Relaxed), rounds);
        still_works(&pool);
    });
}
