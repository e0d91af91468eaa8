//! Attacks on the task core's changes for speed: pinned, fiber and
//! thread-per-core tasks scheduled through their worker's `Home` (a thin
//! pointer into the pool, retained and released on the pool's `Arc`), and
//! work items of one word kept inline in their `Job`.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Sets its flag when dropped.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Attaches to the calling worker's context a source that never fires and
/// whose closure sets the returned flag when dropped: the context destroys
/// its sources when it is freed, which its pool does when it is freed. So
/// the flag going up says the pool (`PoolShared`) was freed.
fn sentinel_on_this_worker() -> Arc<AtomicBool> {
    let freed = Arc::new(AtomicBool::new(false));
    let guard = SetOnDrop(freed.clone());
    glib::timeout_source_new(
        Duration::from_secs(3600),
        None,
        glib::Priority::DEFAULT,
        move || {
            let _keep = &guard;
            glib::ControlFlow::Continue
        },
    )
    .attach(Some(&glib::MainContext::ref_thread_default()));
    freed
}

/// Waits up to `limit` for `flag`.
fn wait_flag(flag: &AtomicBool, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while !flag.load(Ordering::SeqCst) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Pinned,
    Fiber,
    ThreadPerCore,
    LocalOnWorker,
}

/// A pool of two workers, thread-per-core for `ThreadPerCore`.
fn pool_for(kind: Kind) -> gdex::ThreadPool {
    gdex::ThreadPool::builder()
        .workers(2)
        .thread_per_core(matches!(kind, Kind::ThreadPerCore))
        .build()
        .unwrap()
}

/// A pool of two workers (thread-per-core for `ThreadPerCore`), a task of
/// `kind` that plants the sentinel on its worker, then one task of `kind`
/// per channel, each woken from this thread (through its home's inbox,
/// `push_inbox_keeping`) and finishing. Gives the pool, the sentinel and
/// the tasks' handles.
fn finished_tasks_of(kind: Kind, n: usize) -> Arc<AtomicBool> {
    let pool = pool_for(kind);
    let s = pool.scheduler();
    let sentinel: Arc<Mutex<Option<Arc<AtomicBool>>>> = Arc::default();
    let mut senders = Vec::new();
    let mut tasks: Vec<gdex::Task<usize>> = Vec::new();
    for i in 0..n {
        let (tx, rx) = gdex::channel::<usize>(1);
        senders.push(tx);
        let sentinel = sentinel.clone();
        let plant = move || {
            let mut slot = sentinel.lock().unwrap();
            if slot.is_none() {
                *slot = Some(sentinel_on_this_worker());
            }
        };
        let task = match kind {
            Kind::Pinned => pool.spawn_pinned(move || async move {
                plant();
                rx.recv().await.unwrap() + i
            }),
            Kind::ThreadPerCore => s.spawn(async move {
                plant();
                rx.recv().await.unwrap() + i
            }),
            Kind::Fiber => {
                let fiber = s.spawn_fiber(move || {
                    plant();
                    gdex::fiber::wait_output(async move { rx.recv().await.unwrap() + i }).unwrap()
                });
                s.spawn(async move { fiber.await.unwrap() })
            }
            Kind::LocalOnWorker => {
                let s2 = s.clone();
                s.spawn(async move {
                    s2.spawn_local(async move {
                        plant();
                        rx.recv().await.unwrap() + i
                    })
                    .await
                    .unwrap()
                })
            }
        };
        tasks.push(task);
    }
    common::wait_until(|| sentinel.lock().unwrap().is_some());
    // Let them all go idle, so that each send is a wake-up from here.
    std::thread::sleep(Duration::from_millis(20));
    for (i, tx) in senders.iter().enumerate() {
        gdex::block_on(tx.send(i)).unwrap();
    }
    for (i, task) in tasks.into_iter().enumerate() {
        assert_eq!(gdex::block_on(task).unwrap(), 2 * i, "{kind:?}");
    }
    drop((senders, pool));
    let flag = sentinel.lock().unwrap().take().unwrap();
    // The sentinel works: a scheduler handle still holds the pool.
    std::thread::sleep(Duration::from_millis(20));
    assert!(!flag.load(Ordering::SeqCst), "{kind:?}: freed too early");
    drop(s);
    flag
}

/// Every retain of a home (one per pinned, fiber, local or thread-per-core
/// task, one per wake-up from another thread) is released: once its tasks
/// finished and its last handle is dropped, the pool is freed (its worker
/// contexts with it). A leaked count on the pool's `Arc` would keep it,
/// its contexts and their sources forever. (No other test checks that a
/// pool is freed at all.)
#[test]
fn a_pool_whose_homed_tasks_finished_is_freed() {
    common::watchdog("a_pool_whose_homed_tasks_finished_is_freed", 60, || {
        for kind in [
            Kind::Pinned,
            Kind::Fiber,
            Kind::ThreadPerCore,
            Kind::LocalOnWorker,
        ] {
            let freed = finished_tasks_of(kind, 8);
            assert!(
                wait_flag(&freed, Duration::from_secs(5)),
                "{kind:?}: the pool was not freed"
            );
        }
    });
}

/// The last pool handle goes while homed tasks are being woken from
/// another thread: each wake-up races the shutdown (S9), the worker's exit
/// and the reaper, and the task's block may hold the last count on the
/// pool. Nothing crashes, every task resolves, and the pool is freed.
#[test]
fn the_last_handle_dropped_while_homed_tasks_are_woken_from_another_thread() {
    common::watchdog(
        "the_last_handle_dropped_while_homed_tasks_are_woken_from_another_thread",
        120,
        || {
            let rounds = common::stress(40);
            for round in 0..rounds {
                let kind = [Kind::Pinned, Kind::ThreadPerCore, Kind::Fiber][round % 3];
                let pool = pool_for(kind);
                let s = pool.scheduler();
                let sentinel: Arc<Mutex<Option<Arc<AtomicBool>>>> = Arc::default();
                let idle = Arc::new(AtomicUsize::new(0));
                let mut senders = Vec::new();
                let mut tasks = Vec::new();
                const N: usize = 16;
                for _ in 0..N {
                    let (tx, rx) = gdex::channel::<()>(1);
                    senders.push(tx);
                    let (sentinel, idle) = (sentinel.clone(), idle.clone());
                    let body = move || {
                        {
                            let mut slot = sentinel.lock().unwrap();
                            if slot.is_none() {
                                *slot = Some(sentinel_on_this_worker());
                            }
                        }
                        idle.fetch_add(1, Ordering::SeqCst);
                    };
                    let task: gdex::Task<()> = match kind {
                        Kind::Pinned => pool.spawn_pinned(move || async move {
                            body();
                            let _ = rx.recv().await;
                            gdex::yield_now().await;
                        }),
                        Kind::ThreadPerCore => s.spawn(async move {
                            body();
                            let _ = rx.recv().await;
                            gdex::yield_now().await;
                        }),
                        _ => {
                            let fiber = s.spawn_fiber(move || {
                                body();
                                let _ = gdex::fiber::wait_output(async move { rx.recv().await });
                            });
                            s.spawn(async move {
                                let _ = fiber.await;
                            })
                        }
                    };
                    tasks.push(task);
                }
                common::wait_until(|| idle.load(Ordering::SeqCst) == N);
                let waker = std::thread::spawn(move || {
                    for tx in senders {
                        let _ = tx.try_send(());
                    }
                });
                drop(s);
                if round % 2 == 0 {
                    std::thread::yield_now();
                }
                drop(pool);
                waker.join().unwrap();
                for task in tasks {
                    // Finished, or cancelled by the shutdown.
                    let _ = gdex::block_on(task);
                }
                let flag = sentinel.lock().unwrap().take().unwrap();
                assert!(
                    wait_flag(&flag, Duration::from_secs(5)),
                    "round {round} ({kind:?}): the pool was not freed"
                );
            }
        },
    );
}

/// What a one-word capture saw: runs, drops.
#[derive(Default)]
struct Counts {
    runs: AtomicUsize,
    drops: AtomicUsize,
}

/// One word (an `Arc`): a closure capturing only this is kept inline in its
/// job. Its drop counts and, if `BOOM` says so, panics.
struct Bomb<const BOOM: bool>(Arc<Counts>);

impl<const BOOM: bool> Drop for Bomb<BOOM> {
    fn drop(&mut self) {
        self.0.drops.fetch_add(1, Ordering::SeqCst);
        if BOOM && !std::thread::panicking() {
            panic!("attack17b: a bomb went off");
        }
    }
}

/// Work items kept inline in their job (one word), on a pool: one whose
/// capture's destructor panics after it ran, one whose run panics, and
/// (with the worker held busy until the pool closes) one on the worker's
/// deque and one in the injector, never run, whose captures' destructors
/// panic when the shutdown drops them. Each closure runs at most once and
/// drops its capture exactly once; each panic reaches the panic handler
/// once, as `WorkItem` for a run and `Drop` for an unrun item. Boxed
/// neighbours (9 to 16 bytes, 16-byte aligned, zero-sized) run once too.
/// (tests/faults.rs covers boxed items only: its closures hold two
/// values.)
#[test]
fn inline_work_items_run_or_drop_once_and_report_their_panics_once() {
    common::watchdog(
        "inline_work_items_run_or_drop_once_and_report_their_panics_once",
        60,
        || {
            let events = Arc::new(Mutex::new(Vec::<gdex::PanicEvent>::new()));
            let log = events.clone();
            gdex::set_panic_handler(move |e| {
                if e.message.starts_with("attack17b") {
                    log.lock().unwrap().push(e.clone());
                }
            });
            let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
            let s = pool.scheduler();
            let done = Arc::new(AtomicUsize::new(0));

            // Runs, then its capture's destructor panics.
            let a = Arc::new(Counts::default());
            let bomb = Bomb::<true>(a.clone());
            let f = move || {
                let bomb = bomb;
                bomb.0.runs.fetch_add(1, Ordering::SeqCst);
            };
            assert_eq!(std::mem::size_of_val(&f), std::mem::size_of::<usize>());
            s.push(f);
            // Its run panics; its capture is dropped in the unwind.
            let b = Arc::new(Counts::default());
            let quiet = Bomb::<false>(b.clone());
            s.push(move || {
                quiet.0.runs.fetch_add(1, Ordering::SeqCst);
                panic!("attack17b: a run panicked");
            });
            // Boxed neighbours: 12 bytes, 16-byte aligned, zero-sized.
            let d = done.clone();
            let odd = (7u32, d);
            s.push(move || {
                let (seven, d) = &odd;
                assert_eq!(*seven, 7);
                d.fetch_add(1, Ordering::SeqCst);
            });
            #[repr(align(16))]
            struct Aligned(u64);
            let (aligned, d) = (Aligned(9), done.clone());
            s.push(move || {
                assert_eq!(aligned.0, 9);
                d.fetch_add(1, Ordering::SeqCst);
            });
            s.push(|| {});
            common::wait_until(|| {
                done.load(Ordering::SeqCst) == 2
                    && a.drops.load(Ordering::SeqCst) == 1
                    && b.drops.load(Ordering::SeqCst) == 1
                    && events.lock().unwrap().len() == 2
            });
            assert_eq!(a.runs.load(Ordering::SeqCst), 1);
            assert_eq!(b.runs.load(Ordering::SeqCst), 1);

            // Two inline items that never run.
            let c = Arc::new(Counts::default());
            let (s2, closing) = (s.clone(), pool.clone());
            let pushed = Arc::new(AtomicBool::new(false));
            let (p, on_worker) = (pushed.clone(), Bomb::<true>(c.clone()));
            s.spawn(async move {
                s2.push(move || {
                    on_worker.0.runs.fetch_add(1, Ordering::SeqCst);
                });
                p.store(true, Ordering::SeqCst);
                while !closing.is_closed() {
                    std::hint::spin_loop();
                }
            })
            .detach();
            common::wait_until(|| pushed.load(Ordering::SeqCst));
            let outside = Bomb::<true>(c.clone());
            s.push(move || {
                outside.0.runs.fetch_add(1, Ordering::SeqCst);
            });
            pool.shutdown();
            assert_eq!(c.runs.load(Ordering::SeqCst), 0);
            assert_eq!(c.drops.load(Ordering::SeqCst), 2, "each dropped once");
            gdex::reset_panic_handler();
            let mut seen: Vec<_> = events
                .lock()
                .unwrap()
                .iter()
                .map(|e| (e.source, e.message.clone()))
                .collect();
            seen.sort_by_key(|(source, m)| (format!("{source:?}"), m.clone()));
            let bomb = "attack17b: a bomb went off".to_owned();
            assert_eq!(
                seen,
                [
                    (gdex::PanicSource::Drop, bomb.clone()),
                    (gdex::PanicSource::Drop, bomb.clone()),
                    (gdex::PanicSource::WorkItem, bomb),
                    (
                        gdex::PanicSource::WorkItem,
                        "attack17b: a run panicked".into()
                    ),
                ]
            );
            // Nothing ran twice or dropped twice meanwhile.
            assert_eq!(
                (
                    a.drops.load(Ordering::SeqCst),
                    b.drops.load(Ordering::SeqCst)
                ),
                (1, 1)
            );
        },
    );
}
