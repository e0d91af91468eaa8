//! Attack review of fibers' cancellation living in their task's block (F4,
//! 40d8b74 and a91dc77): the handle marks the task cancelled and wakes it
//! with a waker taken at spawn; a worker shutting down sets its thread's
//! flag and wakes the fibers booked in its thread-local slab; a wait reads
//! both through pointers noted at the fiber's first poll.
//!
//! No bug was found: these are the strongest probes, kept as regression
//! tests (handle drops at every distance from the first suspension, from
//! other threads, on pools, context schedulers and as local fibers; fibers
//! of fibers; fibers nobody cancels: detached, awaited by a `TaskGroup`,
//! kept; shutdown with local, nested, detached and tracked fibers; memory
//! after many cancelled fibers, which fails if a fiber's future does not
//! unbook its waker). Each counts how its fibers left: by their own return,
//! or unwound from outside.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::Duration;

use common::{wait_until, watchdog};
use gdex::{fiber, Error, ThreadPool};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator, only counting bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// One test at a time: the memory probe reads a process-wide counter.
fn serial() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Counts how a fiber left: by its own return, or unwound from outside
/// (its drop while suspended: `std::thread::panicking()` during a forced
/// unwind).
#[derive(Clone, Default)]
struct Exits {
    returned: Arc<AtomicUsize>,
    unwound: Arc<AtomicUsize>,
}

struct Exit(Exits);

impl Drop for Exit {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.unwound.fetch_add(1, Ordering::SeqCst);
        } else {
            self.0.returned.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Exits {
    fn guard(&self) -> Exit {
        Exit(self.clone())
    }
    fn returned(&self) -> usize {
        self.returned.load(Ordering::SeqCst)
    }
    fn unwound(&self) -> usize {
        self.unwound.load(Ordering::SeqCst)
    }
}

/// A small xorshift, so each run spreads its handle drops the same way.
fn spread(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// F4's race: handles dropped on the test thread at every distance from
/// the fiber's first poll and first suspension (before it, during it,
/// after it), on a pool of two workers. Every fiber's wait on a future that
/// never wakes returns `Cancelled` and the fiber returns; none hangs, none
/// is unwound.
#[test]
fn handle_drops_racing_the_first_suspension_all_return() {
    let _one = serial();
    watchdog("handle_drops_racing_the_first_suspension", 60, || {
        let pool = ThreadPool::builder().workers(2).build().unwrap();
        let exits = Exits::default();
        let n = common::stress(400);
        let (tx, rx) = mpsc::channel();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..n {
            let (exit, tx) = (exits.guard(), tx.clone());
            let f = pool.scheduler().spawn_fiber(move || {
                let _exit = exit;
                let waited = fiber::wait_output(std::future::pending::<()>());
                tx.send(format!("{waited:?}")).unwrap();
            });
            common::spin(Duration::from_micros(
                spread(&mut seed) % (20 + i as u64 % 50),
            ));
            drop(f);
        }
        for _ in 0..n {
            let got = rx
                .recv_timeout(Duration::from_secs(10))
                .expect("a fiber hangs");
            assert_eq!(got, "Err(Cancelled)");
        }
        wait_until(|| exits.returned() == n);
        assert_eq!(exits.unwound(), 0);
        pool.shutdown();
    });
}

/// The same race on a context scheduler whose context another thread
/// iterates, and for local fibers of that thread whose handles are sent to
/// the test thread to be dropped there.
#[test]
fn handle_drops_from_another_thread_cancel_context_fibers() {
    let _one = serial();
    watchdog(
        "handle_drops_from_another_thread_cancel_context",
        60,
        || {
            let exits = Exits::default();
            let n = common::stress(200);
            let (handles_tx, handles_rx) = mpsc::channel::<gdex::Fiber<String>>();
            let (results_tx, results_rx) = mpsc::channel::<String>();
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let (e, st) = (exits.clone(), stop.clone());
            let thread = std::thread::spawn(move || {
                let context = glib::MainContext::new();
                context
                    .with_thread_default(|| {
                        let s = gdex::Scheduler::for_context(&context);
                        for i in 0..n {
                            let (exit, tx) = (e.guard(), results_tx.clone());
                            let body = move || {
                                let _exit = exit;
                                let waited = fiber::wait_output(std::future::pending::<()>());
                                let _ = tx.send(format!("{waited:?}"));
                                String::new()
                            };
                            let f = if i % 2 == 0 {
                                s.spawn_fiber(body)
                            } else {
                                // A local fiber: its body may be !Send.
                                let rc = std::rc::Rc::new(());
                                s.spawn_fiber_local(move || {
                                    let _rc = rc;
                                    body()
                                })
                            };
                            if i % 3 == 0 {
                                common::pump(&context);
                            }
                            handles_tx.send(f).unwrap();
                        }
                        while !st.load(Ordering::SeqCst) {
                            common::pump(&context);
                            std::thread::sleep(Duration::from_micros(200));
                        }
                    })
                    .unwrap();
            });
            for _ in 0..n {
                drop(handles_rx.recv().unwrap());
            }
            for _ in 0..n {
                let got = results_rx
                    .recv_timeout(Duration::from_secs(10))
                    .expect("a fiber hangs");
                assert_eq!(got, "Err(Cancelled)");
            }
            wait_until(|| exits.returned() == n);
            stop.store(true, Ordering::SeqCst);
            thread.join().unwrap();
            assert_eq!(exits.unwound(), 0);
        },
    );
}

/// Fibers spawned from inside fibers (on the parent's worker, as local
/// fibers, and anywhere on the pool): dropping the parent's handle cancels
/// the parent's wait on its children; the parent returns, dropping their
/// handles, which cancels them in turn. Everybody returns.
#[test]
fn fibers_of_fibers_are_cancelled_through_their_parents() {
    let _one = serial();
    watchdog("fibers_of_fibers_are_cancelled", 60, || {
        let pool = ThreadPool::builder().workers(2).build().unwrap();
        let exits = Exits::default();
        let n = common::stress(50);
        let started = Arc::new(AtomicUsize::new(0));
        let parents: Vec<_> = (0..n)
            .map(|_| {
                let (exits, started, s) = (exits.clone(), started.clone(), pool.scheduler());
                pool.scheduler().spawn_fiber(move || {
                    let _exit = exits.guard();
                    let child = |exit: Exit, started: Arc<AtomicUsize>| {
                        move || {
                            let _exit = exit;
                            started.fetch_add(1, Ordering::SeqCst);
                            let waited = fiber::wait_output(std::future::pending::<()>());
                            assert!(matches!(waited, Err(Error::Cancelled)), "{waited:?}");
                        }
                    };
                    let local = s.spawn_fiber_local(child(exits.guard(), started.clone()));
                    let far = s.spawn_fiber(child(exits.guard(), started.clone()));
                    started.fetch_add(1, Ordering::SeqCst);
                    let waited = fiber::wait(local);
                    assert!(matches!(waited, Err(Error::Cancelled)), "{waited:?}");
                    drop(far);
                })
            })
            .collect();
        wait_until(|| started.load(Ordering::SeqCst) == 3 * n);
        drop(parents);
        wait_until(|| exits.returned() + exits.unwound() == 3 * n);
        assert_eq!(exits.unwound(), 0);
        pool.shutdown();
    });
}

/// Nobody cancels a detached fiber, nor one a `TaskGroup` member awaits, nor
/// one whose handle is kept: each waits on many tasks and yields, and none
/// of its waits returns `Cancelled`; its task's cancellable stays
/// uncancelled.
#[test]
fn fibers_nobody_cancels_are_never_told_they_are() {
    let _one = serial();
    watchdog("fibers_nobody_cancels", 60, || {
        let pool = ThreadPool::builder().workers(2).build().unwrap();
        let n = common::stress(60);
        let body = |s: gdex::Scheduler| {
            move || -> Result<usize, Error> {
                let mut sum = 0;
                for i in 0..20 {
                    sum += fiber::wait(s.spawn(async move { i }))?;
                    fiber::yield_fiber()?;
                    fiber::wait(glib::timeout_future(Duration::from_micros(50)))?;
                }
                let cancellable = gdex::current_cancellable().expect("in a task");
                assert!(!gio::prelude::CancellableExt::is_cancelled(&cancellable));
                Ok(sum)
            }
        };
        let (tx, rx) = mpsc::channel();
        for _ in 0..n {
            let (tx, b) = (tx.clone(), body(pool.scheduler()));
            pool.scheduler()
                .spawn_fiber(move || tx.send(b()).unwrap())
                .detach();
        }
        let group = gdex::TaskGroup::<Result<usize, Error>>::builder()
            .scheduler(pool.scheduler())
            .keep_results(true)
            .build();
        for _ in 0..n {
            let fiber = pool.scheduler().spawn_fiber(body(pool.scheduler()));
            group.spawn(async move { fiber.await? }).unwrap();
        }
        let kept: Vec<_> = (0..n)
            .map(|_| pool.scheduler().spawn_fiber(body(pool.scheduler())))
            .collect();
        for _ in 0..n {
            assert_eq!(
                rx.recv_timeout(Duration::from_secs(20)).unwrap().unwrap(),
                190
            );
        }
        for result in gdex::block_on(group.close_with_results()) {
            assert_eq!(result.unwrap(), 190);
        }
        for fiber in kept {
            assert_eq!(gdex::block_on(fiber).unwrap().unwrap(), 190);
        }
        pool.shutdown();
    });
}

/// At shutdown, fibers of every kind on a worker (spawned on the pool,
/// local fibers spawned by them, detached ones, ones whose first poll comes
/// during the shutdown) return through their own code; none is unwound.
#[test]
fn shutdown_returns_fibers_of_every_kind() {
    let _one = serial();
    watchdog("shutdown_returns_fibers_of_every_kind", 60, || {
        let pool = ThreadPool::builder().workers(2).build().unwrap();
        let exits = Exits::default();
        let n = common::stress(40);
        let started = Arc::new(AtomicUsize::new(0));
        let mut kept = Vec::new();
        for i in 0..n {
            let (exits, started, s) = (exits.clone(), started.clone(), pool.scheduler());
            let f = pool.scheduler().spawn_fiber(move || {
                let _exit = exits.guard();
                let (e, st) = (exits.clone(), started.clone());
                let local = s.spawn_fiber_local(move || {
                    let _exit = e.guard();
                    st.fetch_add(1, Ordering::SeqCst);
                    loop {
                        if fiber::yield_fiber().is_err() {
                            break;
                        }
                        if fiber::wait(glib::timeout_future(Duration::from_millis(5))).is_err() {
                            break;
                        }
                    }
                });
                started.fetch_add(1, Ordering::SeqCst);
                let _ = fiber::wait(local);
                // Cancelled: wait on more (each returns at once).
                let _ = fiber::wait(std::future::pending::<()>());
                let _ = fiber::yield_fiber();
            });
            if i % 2 == 0 {
                f.detach();
            } else {
                kept.push(f);
            }
        }
        wait_until(|| started.load(Ordering::SeqCst) == 2 * n);
        pool.shutdown();
        assert_eq!(exits.unwound(), 0, "fibers unwound at shutdown");
        assert_eq!(exits.returned(), 2 * n);
        for f in kept {
            assert!(gdex::block_on(f).is_ok());
        }
    });
}

/// Memory: fibers cancelled mid-wait by their handles, fibers cancelled at
/// their worker's shutdown and detached fibers that finish leave nothing
/// behind (the slab of booked wakers keeps no task block once its fiber's
/// future is dropped).
#[test]
fn cancelled_and_finished_fibers_leave_no_memory_behind() {
    let _one = serial();
    watchdog("cancelled_fibers_leave_no_memory", 120, || {
        let pool = ThreadPool::builder().workers(2).build().unwrap();
        let round = |n: usize| {
            let exits = Exits::default();
            let started = Arc::new(AtomicUsize::new(0));
            let handles: Vec<_> = (0..n)
                .map(|i| {
                    let (exit, st) = (exits.guard(), started.clone());
                    let f = pool.scheduler().spawn_fiber(move || {
                        let _exit = exit;
                        st.fetch_add(1, Ordering::SeqCst);
                        if i % 2 == 0 {
                            let _ = fiber::wait_output(std::future::pending::<()>());
                        } else {
                            let _ = fiber::wait(glib::timeout_future(Duration::from_millis(1)));
                        }
                    });
                    if i % 2 == 1 {
                        f.detach();
                        None
                    } else {
                        Some(f)
                    }
                })
                .collect();
            wait_until(|| started.load(Ordering::SeqCst) == n);
            drop(handles);
            wait_until(|| exits.returned() == n);
            assert_eq!(exits.unwound(), 0);
        };
        // Warm up: stacks, slabs, queues reach their sizes.
        for _ in 0..3 {
            round(2000);
        }
        std::thread::sleep(Duration::from_millis(50));
        let before = LIVE.load(Ordering::Relaxed);
        for _ in 0..10 {
            round(2000);
        }
        std::thread::sleep(Duration::from_millis(50));
        let grown = LIVE.load(Ordering::Relaxed) - before;
        assert!(
            grown < 64 * 1024,
            "{grown} bytes more after 20000 cancelled or finished fibers"
        );
        pool.shutdown();
    });
}

/// A fiber on a context scheduler whose `Scheduler` handles are all gone:
/// its handle's drop still reaches it (the task's waker keeps its
/// scheduler's queue), and it returns on the context's next turns.
#[test]
fn a_fiber_outliving_its_context_scheduler_handle_is_cancelled() {
    let _one = serial();
    watchdog("a_fiber_outliving_its_context_scheduler_handle", 60, || {
        let exits = Exits::default();
        common::on_own_context(|context| {
            let s = gdex::Scheduler::for_context(context);
            let (started_tx, started_rx) = mpsc::channel();
            let exit = exits.guard();
            let f = s.spawn_fiber(move || {
                let _exit = exit;
                started_tx.send(()).unwrap();
                fiber::wait_output(std::future::pending::<()>())
            });
            common::pump_polling(context, || started_rx.try_recv().is_ok());
            drop(s);
            common::pump(context);
            drop(f);
            assert!(common::pump_for(context, Duration::from_secs(5), || exits
                .returned()
                == 1));
        });
        assert_eq!(exits.unwound(), 0);
    });
}

/// With the task dump on (X8), a fiber's task polls its future with a
/// marking waker, which is what its handle-free cancellation books on its
/// worker: fibers cancelled by their handles and by their worker's shutdown
/// still all return.
#[test]
fn tracked_fibers_are_cancelled_by_handle_and_by_shutdown() {
    let _one = serial();
    watchdog("tracked_fibers_are_cancelled", 60, || {
        gdex::enable_task_dump();
        let pool = ThreadPool::builder().workers(2).build().unwrap();
        let exits = Exits::default();
        let n = common::stress(100);
        let started = Arc::new(AtomicUsize::new(0));
        let mut kept = Vec::new();
        for i in 0..n {
            let (exit, st) = (exits.guard(), started.clone());
            let f = pool.scheduler().spawn_fiber(move || {
                let _exit = exit;
                st.fetch_add(1, Ordering::SeqCst);
                let waited = fiber::wait_output(std::future::pending::<()>());
                assert!(matches!(waited, Err(Error::Cancelled)), "{waited:?}");
            });
            if i % 2 == 0 {
                kept.push(f);
            }
        }
        wait_until(|| started.load(Ordering::SeqCst) == n);
        wait_until(|| exits.returned() == n - kept.len());
        pool.shutdown();
        assert_eq!(exits.returned(), n);
        assert_eq!(exits.unwound(), 0);
        for f in kept {
            assert!(gdex::block_on(f).is_ok());
        }
    });
}
