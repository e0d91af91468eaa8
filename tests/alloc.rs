//! S7: spawning is one allocation and one queue push; and memory follows
//! what lives (F4, P8). A counting global allocator sees how many
//! allocations a spawn makes (queue storage is amortised: crossbeam's
//! injector allocates a block per 63 pushes), and how many bytes stay
//! allocated after many fibers have finished or been cancelled, and after
//! a long timer has moved between workers thousands of times (the workers'
//! timer books keep no entry for where it no longer waits). And AIO's owned
//! buffers are not copied behind the caller's back (A1). The counters are
//! process-wide: the tests take turns.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use common::{serial, wait_until, watchdog, Exits};
use futures::FutureExt;
use gdex::{fiber, ThreadPool};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);
/// Bytes asked for by every allocation and growth.
static BYTES: AtomicUsize = AtomicUsize::new(0);
/// Bytes allocated and not yet freed.
static LIVE: std::sync::atomic::AtomicIsize = std::sync::atomic::AtomicIsize::new(0);
/// While set, allocations are counted by size, in 8-byte steps up to 256.
static BY_SIZE_ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static BY_SIZE: [AtomicUsize; 33] = [const { AtomicUsize::new(0) }; 33];

thread_local! {
    /// Allocations made by this thread: for a count that threads left
    /// over from an earlier test (a pool winding down) cannot add to.
    /// Const, with no destructor: reading it never allocates.
    static THREAD_ALLOCS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Allocations made by the calling thread so far.
fn thread_allocs() -> usize {
    THREAD_ALLOCS.with(std::cell::Cell::get)
}

// SAFETY: defers every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        let _ = THREAD_ALLOCS.try_with(|n| n.set(n.get() + 1));
        BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        if BY_SIZE_ON.load(Ordering::Relaxed) {
            BY_SIZE[layout.size().div_ceil(8).min(32)].fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours, passed through.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours, passed through.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        let _ = THREAD_ALLOCS.try_with(|n| n.set(n.get() + 1));
        BYTES.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: same contract as ours, passed through.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Holds a 1-worker pool's only worker until the returned sender sends (or
/// drops), so that what is spawned meanwhile stays queued and the worker
/// allocates nothing.
fn hold_the_worker(s: &gdex::Scheduler) -> std::sync::mpsc::Sender<()> {
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
    s.push(move || {
        started_tx.send(()).unwrap();
        let _ = gate_rx.recv();
    });
    started_rx.recv().unwrap();
    gate_tx
}

#[test]
fn a_spawn_is_one_allocation() {
    let _one = serial();
    common::watchdog("a_spawn_is_one_allocation", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let s = pool.scheduler();
        let gate_tx = hold_the_worker(&s);
        let n = 10_000;
        let mut tasks = Vec::with_capacity(n);
        let before = ALLOCS.load(Ordering::Relaxed);
        for i in 0..n {
            tasks.push(s.spawn(async move { i }));
        }
        let spawn_allocs = ALLOCS.load(Ordering::Relaxed) - before;
        let before = ALLOCS.load(Ordering::Relaxed);
        for i in 0..n {
            s.push(move || assert!(i < n));
        }
        let push_allocs = ALLOCS.load(Ordering::Relaxed) - before;
        gate_tx.send(()).unwrap();
        for (i, t) in tasks.into_iter().enumerate() {
            assert_eq!(gdex::block_on(t).unwrap(), i);
        }
        let per_spawn = spawn_allocs as f64 / n as f64;
        let per_push = push_allocs as f64 / n as f64;
        assert!(
            (1.0..1.05).contains(&per_spawn),
            "{per_spawn} allocations per spawn"
        );
        assert!(
            (1.0..1.05).contains(&per_push),
            "{per_push} allocations per work item"
        );
    });
}

/// S7: a task awaiting another task hands async-task its own waker, so an
/// await costs no allocation. (A `Task` handle polled with a waker that is
/// not its polling task's own gets a panic-containing wrapper instead, one
/// allocation, reused while the waker stays the same: tests/faults.rs,
/// and the test below.) Each round spawns a task from a task on a 1-worker
/// pool and awaits it while it is still queued: the spawn's allocation and
/// nothing more.
#[test]
fn awaiting_a_task_from_a_task_allocates_nothing() {
    let _one = serial();
    common::watchdog("awaiting_a_task_from_a_task_allocates_nothing", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let s = pool.scheduler();
        let n = 10_000;
        let s2 = s.clone();
        let rounds = s.spawn(async move {
            let before = ALLOCS.load(Ordering::Relaxed);
            for i in 0..n {
                let child = s2.spawn(async move { i });
                assert!(!child.is_finished());
                assert_eq!(child.await.unwrap(), i);
            }
            ALLOCS.load(Ordering::Relaxed) - before
        });
        let allocs = gdex::block_on(rounds).unwrap();
        let per_round = allocs as f64 / n as f64;
        assert!(
            (1.0..1.05).contains(&per_round),
            "{per_round} allocations per spawn and await"
        );
    });
}

/// Receiving from a gdex channel allocates nothing per item: a task drains
/// items already queued, and then a ping-pong through two channels; every
/// allocation counted is the queue's own growth, amortised (the receive
/// path once took each item out through a fresh `VecDeque`: one
/// allocation a receive).
#[test]
fn receiving_from_a_channel_allocates_nothing_per_item() {
    let _one = serial();
    common::watchdog(
        "receiving_from_a_channel_allocates_nothing_per_item",
        60,
        || {
            let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
            let n = 10_000;
            let (tx, rx) = gdex::channel::<u64>(n);
            let drained = pool.scheduler().spawn(async move {
                for i in 0..n as u64 {
                    tx.try_send(i).unwrap();
                }
                // The worker's own allocations (the pool's one worker runs
                // the task from end to end): the process-wide count also
                // took in threads of earlier tests still winding down
                // (16 counted once, in a full run of this file).
                let before = thread_allocs();
                let mut sum = 0;
                for _ in 0..n {
                    sum += rx.recv().await.unwrap();
                }
                for i in 0..n as u64 {
                    tx.try_send(i).unwrap();
                }
                for _ in 0..n {
                    sum += rx.try_recv().unwrap();
                }
                (thread_allocs() - before, sum)
            });
            let (allocs, sum) = gdex::block_on(drained).unwrap();
            assert_eq!(sum, 2 * (0..n as u64).sum::<u64>());
            assert!(allocs < 8, "{allocs} allocations for {} receives", 2 * n);
        },
    );
}

/// A task handle polled by a foreign executor (here a hand-made waker, as a
/// `glib::MainContext` or a `futures` combinator would use) gives
/// async-task a waker of gdex's that contains a panicking `wake` (X5): one
/// allocation for the first pending poll, none for the next ones while the
/// caller's waker stays the same (S7).
#[test]
fn repolling_a_task_with_the_same_foreign_waker_allocates_once() {
    use std::future::Future;
    use std::task::{Context, Wake, Waker};
    struct Foreign;
    impl Wake for Foreign {
        fn wake(self: std::sync::Arc<Self>) {}
    }
    let _one = serial();
    common::watchdog("repolling_a_task_allocates_once", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let (tx, rx) = futures::channel::oneshot::channel::<()>();
        let mut task = pool.scheduler().spawn(async move {
            let _ = rx.await;
        });
        let waker = Waker::from(std::sync::Arc::new(Foreign));
        let mut cx = Context::from_waker(&waker);
        assert!(std::pin::Pin::new(&mut task).poll(&mut cx).is_pending());
        let before = ALLOCS.load(Ordering::Relaxed);
        for _ in 0..1000 {
            assert!(std::pin::Pin::new(&mut task).poll(&mut cx).is_pending());
        }
        let allocs = ALLOCS.load(Ordering::Relaxed) - before;
        tx.send(()).unwrap();
        // The counter is process-wide, and the pool's own threads (the
        // watchdog's monitor) may allocate meanwhile: a few, where a
        // wrapper per poll would be 1000.
        assert!(
            allocs < 50,
            "{allocs} allocations for 1000 more pending polls"
        );
        assert!(gdex::block_on(task).is_ok());
    });
}

/// F4's bookkeeping does not grow with the fibers a worker has run: the
/// worker keeps a list of its live fibers (to cancel them at shutdown) and
/// forgets finished ones as the list fills. 20,000 fibers run one after
/// another leave (almost) no memory behind; a list that kept every
/// finished fiber's entry would hold on to each one's shared block.
#[test]
fn finished_fibers_leave_no_memory_behind() {
    let _one = serial();
    common::watchdog("finished_fibers_leave_no_memory_behind", 120, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let s = pool.scheduler();
        // Warm up: the stack pool, the list's first capacity.
        for i in 0..1000 {
            gdex::block_on(s.spawn_fiber(move || i)).unwrap();
        }
        let before = LIVE.load(Ordering::Relaxed);
        // Scaled down under memcheck (GDEX_STRESS=0.01), where only the
        // memory errors matter.
        for i in 0..common::stress(20_000) {
            gdex::block_on(s.spawn_fiber(move || i)).unwrap();
        }
        let grown = LIVE.load(Ordering::Relaxed) - before;
        assert!(
            grown < 64 * 1024,
            "{grown} bytes still allocated after 20,000 finished fibers"
        );
    });
}

/// BENCH.md's memory_per_task: the block of a task whose future is two
/// words (the benchmark's) is 72 bytes at most, which glibc serves from an
/// 80-byte chunk: async-task's header with gdex's one-word metadata (the
/// owner, with the cancellable's state in its low bits), and the future
/// beside its one-word S9 record. (At 88 bytes it took a 96-byte chunk.)
#[test]
fn a_two_word_task_is_a_block_of_72_bytes() {
    let _one = serial();
    common::watchdog("a_two_word_task_is_a_block_of_72_bytes", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let s = pool.scheduler();
        let gate_tx = hold_the_worker(&s);
        let n = 1000;
        let shared = std::sync::Arc::new(());
        let mut tasks = Vec::with_capacity(n);
        BY_SIZE_ON.store(true, Ordering::SeqCst);
        /// Two words, as the benchmark's future (an `async` block adds its
        /// state's byte, and a word with it).
        struct TwoWords(#[allow(dead_code)] std::sync::Arc<()>, bool);
        impl std::future::Future for TwoWords {
            type Output = bool;
            fn poll(
                self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
            ) -> std::task::Poll<bool> {
                std::task::Poll::Ready(self.1)
            }
        }
        const { assert!(std::mem::size_of::<TwoWords>() == 16) };
        for _ in 0..n {
            tasks.push(s.spawn(TwoWords(shared.clone(), true)));
        }
        BY_SIZE_ON.store(false, Ordering::SeqCst);
        gate_tx.send(()).unwrap();
        let counts: Vec<(usize, usize)> = BY_SIZE
            .iter()
            .enumerate()
            .map(|(steps, count)| (steps * 8, count.load(Ordering::Relaxed)))
            .filter(|&(_, count)| count > 0)
            .collect();
        let blocks: Vec<_> = counts.iter().filter(|&&(_, count)| count >= n).collect();
        assert_eq!(blocks.len(), 1, "allocations by size: {counts:?}");
        assert!(blocks[0].0 <= 72, "a task's block: {} bytes", blocks[0].0);
        for task in tasks {
            assert!(gdex::block_on(task).unwrap());
        }
    });
}

/// F1, S7: a fiber's spawn is one allocation, its task's block, as a task's
/// is. Its cancellation (F4) is a mark in the block's metadata and a waker
/// of the task in the handle; an `Arc` of a flag and a waker, shared by the
/// handle and the fiber, was a second allocation per fiber (BENCH.md's
/// fiber_spawn: the spawning thread's allocator time).
#[test]
fn a_fiber_spawn_is_one_allocation() {
    let _one = serial();
    common::watchdog("a_fiber_spawn_is_one_allocation", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let s = pool.scheduler();
        let gate_tx = hold_the_worker(&s);
        let n = 10_000;
        let mut fibers = Vec::with_capacity(n);
        let before = ALLOCS.load(Ordering::Relaxed);
        for i in 0..n {
            fibers.push(s.spawn_fiber(move || i));
        }
        let allocs = ALLOCS.load(Ordering::Relaxed) - before;
        gate_tx.send(()).unwrap();
        for (i, fiber) in fibers.into_iter().enumerate() {
            assert_eq!(gdex::block_on(fiber).unwrap(), i);
        }
        let per_spawn = allocs as f64 / n as f64;
        assert!(
            (1.0..1.05).contains(&per_spawn),
            "{per_spawn} allocations per fiber spawn"
        );
    });
}

/// (A1) `write_all_at` goes on after a short write from where the write
/// stopped, in the caller's own buffer: it copies nothing. 4 MiB into a
/// pipe (on io_uring, short writes of one pipe's worth each; copying the
/// rest after each would allocate over 100 MiB here, and a write of more
/// than 2 GiB to a file, which the kernel cuts short, would copy the rest
/// once more).
#[test]
fn write_all_at_copies_nothing_after_a_short_write() {
    use std::io::Read;
    let _one = serial();
    common::watchdog(
        "write_all_at_copies_nothing_after_a_short_write",
        60,
        || {
            let size = 4 << 20;
            let (mut reader, writer) = std::io::pipe().unwrap();
            let drain = std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 16];
                let mut total = 0;
                loop {
                    let n = reader.read(&mut buf).unwrap();
                    if n == 0 {
                        return total;
                    }
                    total += n;
                }
            });
            let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
            let file = gdex::aio::File::from(std::os::fd::OwnedFd::from(writer));
            let data = vec![7u8; size];
            let before = BYTES.load(Ordering::Relaxed);
            let task = pool.scheduler().spawn(async move {
                let back = file.write_all_at(data, 0).await?;
                Ok::<_, gdex::Error>(back.len())
            });
            let written = gdex::block_on(task).unwrap().unwrap();
            let allocated = BYTES.load(Ordering::Relaxed) - before;
            assert_eq!(written, size, "the buffer comes back whole");
            assert!(
                allocated < 1 << 20,
                "{allocated} bytes allocated while writing {size} bytes"
            );
            drop(pool);
            assert_eq!(drain.join().unwrap(), size);
        },
    );
}

/// (A1) A `FileCursor` reuses its one buffer (it goes into `read_at` and
/// comes back): on io_uring, 256 reads of 4 KiB (8 operations of its
/// 128 KiB buffer) allocate nothing at all; reading 8 MiB and writing it
/// back through another cursor allocates less than a few buffers in all,
/// not a buffer per operation.
#[test]
fn a_file_cursor_reads_and_writes_without_a_buffer_per_operation() {
    use futures::{AsyncReadExt, AsyncWriteExt};
    let _one = serial();
    watchdog("a_file_cursor_reuses_its_buffer", 60, || {
        let size = 8 << 20;
        let dir = std::env::temp_dir().join(format!("gdex-alloc-cursor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (from, to) = (dir.join("from"), dir.join("to"));
        std::fs::write(&from, vec![5u8; size]).unwrap();
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let task = pool.scheduler().spawn({
            let (from, to) = (from.clone(), to.clone());
            async move {
                let mut reader = gdex::aio::File::open(&from).await.unwrap().cursor();
                let mut writer = gdex::aio::File::create(&to).await.unwrap().cursor();
                let mut chunk = [0u8; 4096];
                // The first read and write make the buffers.
                reader.read_exact(&mut chunk).await.unwrap();
                writer.write_all(&chunk).await.unwrap();
                // Reads alone: on io_uring, none allocates.
                let before = ALLOCS.load(Ordering::Relaxed);
                for _ in 0..256 {
                    reader.read_exact(&mut chunk).await.unwrap();
                }
                let reading = ALLOCS.load(Ordering::Relaxed) - before;
                use futures::AsyncSeekExt as _;
                reader.seek(std::io::SeekFrom::Start(4096)).await.unwrap();
                let (calls, bytes) = (
                    ALLOCS.load(Ordering::Relaxed),
                    BYTES.load(Ordering::Relaxed),
                );
                let mut total = chunk.len();
                loop {
                    let n = reader.read(&mut chunk).await.unwrap();
                    if n == 0 {
                        break;
                    }
                    writer.write_all(&chunk[..n]).await.unwrap();
                    total += n;
                }
                writer.flush().await.unwrap();
                let calls = ALLOCS.load(Ordering::Relaxed) - calls;
                let bytes = BYTES.load(Ordering::Relaxed) - bytes;
                (total, calls, bytes, reading)
            }
        });
        let (total, calls, bytes, reading) = gdex::block_on(task).unwrap();
        drop(pool);
        assert_eq!(total, size);
        assert_eq!(std::fs::read(&to).unwrap().len(), size);
        let _ = std::fs::remove_dir_all(&dir);
        if gdex::aio::backend() == gdex::aio::Backend::IoUring {
            assert_eq!(
                reading, 0,
                "allocations by 256 reads of 4 KiB (8 operations) through a cursor"
            );
        }
        let operations = 2 * size / gdex::aio::DEFAULT_CAPACITY;
        assert!(
            calls <= 4 * operations,
            "{calls} allocations for {operations} operations and {} reads",
            size / 4096
        );
        assert!(
            bytes < 4 * gdex::aio::DEFAULT_CAPACITY,
            "{bytes} bytes allocated for {operations} operations of {} bytes each",
            gdex::aio::DEFAULT_CAPACITY
        );
    });
}

/// Memory: fibers cancelled mid-wait by their handles, fibers cancelled at
/// their worker's shutdown and detached fibers that finish leave nothing
/// behind (F4: the slab of booked wakers keeps no task block once its
/// fiber's future is dropped).
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

/// A shared `Sleep` polled by `spawn_pinned` tasks on alternating workers.
fn poll_on(pool: &gdex::ThreadPool, timer: &Arc<Mutex<Pin<Box<gdex::Sleep>>>>) {
    let timer = timer.clone();
    let task = pool.spawn_pinned(move || async move {
        std::future::poll_fn(|cx| {
            let _ = timer.lock().unwrap().as_mut().poll(cx);
            Poll::Ready(())
        })
        .await
    });
    gdex::block_on(task).unwrap();
}

/// A long timer that keeps moving between workers keeps the timer books
/// bounded (P8): each attachment has its own token, dropped when the timer
/// moves. The sequence that grew them: one long timer (an hour) whose task
/// keeps moving between two workers, as a `timeout(1h, loop { rx.recv() })`
/// session does when woken from different workers; here `spawn_pinned`
/// places the polls on worker 0, 1, 0, 1, ... Each poll on the other
/// context destroys the source, attaches a new one, and `note_timer`s it
/// again in that worker's `TimerBook`. The entries noted before stay: they
/// are weak but upgrade (the timer lives) and not raised, so
/// `TimerBook::note`'s prune keeps them all. The books grow by one entry
/// per move, for the timer's whole life: not "bounded by twice the live
/// timers". Measured with a live-byte counting allocator between the
/// 1,000th and the 11,000th move.
#[test]
fn a_long_timer_moving_between_workers_keeps_the_timer_books_bounded() {
    let _one = serial();
    watchdog("a_long_timer_that_moves", 60, || {
        let pool = gdex::ThreadPool::builder()
            .workers(2)
            .stall_threshold(Duration::ZERO)
            .build()
            .unwrap();
        let timer = Arc::new(Mutex::new(Box::pin(gdex::sleep(Duration::from_secs(3600)))));
        for _ in 0..1_000 {
            poll_on(&pool, &timer);
        }
        let before = LIVE.load(Ordering::SeqCst);
        for _ in 0..10_000 {
            poll_on(&pool, &timer);
        }
        let grown = LIVE.load(Ordering::SeqCst) - before;
        drop(timer);
        pool.shutdown();
        assert!(
            grown < 32 * 1024,
            "one live timer moved 10,000 times between two workers and the heap grew by \
             {grown} bytes: every move left a live entry in a TimerBook"
        );
    });
}

/// Control for the test above: the same loop with a fresh timer each time
/// (dropped after its poll) keeps the books pruned (P8).
#[test]
fn held_short_lived_timers_keep_the_timer_books_bounded() {
    let _one = serial();
    watchdog("held_short_lived_timers", 60, || {
        let pool = gdex::ThreadPool::builder()
            .workers(2)
            .stall_threshold(Duration::ZERO)
            .build()
            .unwrap();
        for _ in 0..1_000 {
            let timer = Arc::new(Mutex::new(Box::pin(gdex::sleep(Duration::from_secs(3600)))));
            poll_on(&pool, &timer);
        }
        let before = LIVE.load(Ordering::SeqCst);
        for _ in 0..5_000 {
            let timer = Arc::new(Mutex::new(Box::pin(gdex::sleep(Duration::from_secs(3600)))));
            poll_on(&pool, &timer);
        }
        let grown = LIVE.load(Ordering::SeqCst) - before;
        pool.shutdown();
        assert!(grown < 32 * 1024, "grew by {grown} bytes");
    });
}

/// F1: what a fiber waiting on a future costs in heap memory, all told:
/// its task's block, its handle's waker, whatever its wait keeps (here a
/// shared future's waker slot), and its cell on its worker's fiber
/// scheduler. Its stack (128 KiB mapped, a few pages resident) comes from
/// the thread's pool of stacks, not the heap.
///
/// Measured as the heap that 2,000 waiting fibers hold beyond what the
/// pool held after 2,000 others had waited at once and ended: so what
/// grows once and is reused (the worker's book of live fibers, its queues,
/// the shared future's slots, and the cells' chunks) is not counted, the
/// same on every run. A cell is: its share of its chunk (4 KiB for 170
/// cells) is added. 240.68 bytes before the fiber scheduler (this test at
/// bd8ab14), 216.68 + 24.09 = 240.77 with it: the cell is paid for by the
/// three words it let the fiber's block drop (the stack's guard range, the
/// resumer's `Context` and the shutdown flag's address), but for its share
/// of its chunk's 16-byte header (0.09 bytes). Counting what grows once as
/// well (no warm-up): 274 bytes before, 275 with it.
#[test]
fn a_waiting_fibers_heap_memory_is_as_stated() {
    let _one = serial();
    common::watchdog("a_waiting_fibers_heap_memory_is_as_stated", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let s = pool.scheduler();
        // 2,000 fibers waiting on one shared future; gives them the go once
        // all wait, then awaits them.
        let wait_all = |measure: &mut dyn FnMut()| {
            let n = 2_000;
            let (release_tx, release_rx) = futures::channel::oneshot::channel::<()>();
            let release = release_rx.shared();
            let waiting = Arc::new(AtomicUsize::new(0));
            let fibers: Vec<_> = (0..n)
                .map(|_| {
                    let (release, waiting) = (release.clone(), waiting.clone());
                    s.spawn_fiber(move || {
                        waiting.fetch_add(1, Ordering::SeqCst);
                        fiber::wait_output(release).unwrap().unwrap();
                    })
                })
                .collect();
            wait_until(|| waiting.load(Ordering::SeqCst) == n);
            measure();
            release_tx.send(()).unwrap();
            for f in fibers {
                gdex::block_on(f).unwrap();
            }
        };
        // The warm-up: the worker maps its stacks, grows its book and its
        // queues, and takes its cells.
        wait_all(&mut || {});
        let before = LIVE.load(Ordering::SeqCst);
        let mut held = 0;
        wait_all(&mut || held = LIVE.load(Ordering::SeqCst) - before);
        let measured = held as f64 / 2_000.0;
        let cell = 4096.0 / 170.0;
        let per_fiber = measured + cell;
        eprintln!(
            "heap per waiting fiber: {measured:.2} + its cell {cell:.2} = {per_fiber:.2} bytes"
        );
        assert!(
            per_fiber <= 241.0,
            "{per_fiber:.2} bytes of heap per waiting fiber (240.77 stated; 240.68 before the fiber scheduler)"
        );
    });
}
