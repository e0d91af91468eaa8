//! Fiber workloads of the project's BENCH.md: `fiber_spawn` (fibers that
//! return at once, awaited) and `fiber_switch` (two fibers handing control
//! back and forth through `fiber::wait`). The floor is corosensei's raw
//! coroutine create/resume on one reused stack (and, across workers, two
//! threads passing a turn through one atomic); libdex 1.0 measured 2.2 µs
//! per spawn and 2 µs per switch on a 2-core machine. A regression check:
//! read the per-element times criterion prints.
//!

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, CoroutineResult};
use criterion::{BenchmarkId, Criterion, Throughput};
use futures::task::AtomicWaker;

const SPAWNS: usize = 100_000;
const SWITCHES: usize = 100_000;

use crate::runtimes::workers;

pub fn fibers(c: &mut Criterion) {
    fiber_spawn(c);
    fiber_switch(c);
}

fn fiber_spawn(c: &mut Criterion) {
    let mut g = c.benchmark_group("fiber_spawn");
    g.throughput(Throughput::Elements(SPAWNS as u64));
    let n = workers();
    let pool = gdex::ThreadPool::builder().workers(n).build().unwrap();
    let s = pool.scheduler();
    g.bench_function(BenchmarkId::new("gdex", n), |b| b.iter(|| spawn_run(&s)));
    g.bench_function(BenchmarkId::new("gdex-batch", n), |b| {
        b.iter(|| spawn_batch_run(&s))
    });
    g.bench_function(BenchmarkId::new("corosensei-floor", 1), |b| {
        let mut stack = Some(DefaultStack::new(128 * 1024).unwrap());
        b.iter(|| {
            for i in 0..SPAWNS {
                let mut co: Coroutine<(), (), usize, _> =
                    Coroutine::with_stack(stack.take().unwrap(), move |_, ()| i);
                match co.resume(()) {
                    CoroutineResult::Return(v) => assert_eq!(v, i),
                    CoroutineResult::Yield(()) => unreachable!(),
                }
                stack = Some(co.into_stack());
            }
        })
    });
    g.finish();
}

/// Whose turn it is, and how to wake the other side.
struct Baton {
    turn: AtomicUsize,
    wakers: [AtomicWaker; 2],
}

struct MyTurn<'a> {
    baton: &'a Baton,
    me: usize,
}

impl Future for MyTurn<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.baton.turn.load(Ordering::Acquire) == self.me {
            return Poll::Ready(());
        }
        self.baton.wakers[self.me].register(cx.waker());
        if self.baton.turn.load(Ordering::Acquire) == self.me {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

fn player(baton: Arc<Baton>, me: usize, rounds: usize) {
    for _ in 0..rounds {
        gdex::fiber::wait(MyTurn { baton: &baton, me }).unwrap();
        baton.turn.store(1 - me, Ordering::Release);
        baton.wakers[1 - me].wake();
    }
}

thread_local! {
    /// Which coroutine of [`baton_floor`] was woken (1 or 2; 0: none).
    static NEXT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A waker that only marks its coroutine (its data, 1 or 2) as the next.
static MARK: std::task::RawWakerVTable = std::task::RawWakerVTable::new(
    |data| std::task::RawWaker::new(data, &MARK),
    |data| NEXT.with(|next| next.set(data as usize)),
    |data| NEXT.with(|next| next.set(data as usize)),
    |_| {},
);

/// Two coroutines passing a baton `rounds` times each, on this thread.
fn baton_floor(rounds: usize) {
    let baton = Arc::new(Baton {
        turn: AtomicUsize::new(0),
        wakers: [AtomicWaker::new(), AtomicWaker::new()],
    });
    let player = |me: usize| {
        let baton = baton.clone();
        move |y: &corosensei::Yielder<(), ()>, ()| {
            let baton = &*baton;
            // SAFETY: MARK's functions only copy the pointer-sized number
            // and write the thread-local.
            let waker = unsafe {
                std::task::Waker::from_raw(std::task::RawWaker::new((me + 1) as *const (), &MARK))
            };
            let mut cx = Context::from_waker(&waker);
            for _ in 0..rounds {
                let mut turn = std::pin::pin!(MyTurn { baton, me });
                while turn.as_mut().poll(&mut cx).is_pending() {
                    y.suspend(());
                }
                baton.turn.store(1 - me, Ordering::Release);
                baton.wakers[1 - me].wake();
            }
        }
    };
    let mut players: [Coroutine<(), (), (), DefaultStack>; 2] =
        [Coroutine::new(player(0)), Coroutine::new(player(1))];
    let _ = players[1].resume(());
    let _ = players[0].resume(());
    while let Some(i) = NEXT.with(|next| next.replace(0)).checked_sub(1) {
        if !players[i].done() {
            let _ = players[i].resume(());
        }
    }
    assert!(players.iter().all(Coroutine::done));
}

/// One side of the hand-off floor: waits for its turn spinning, passes it.
fn spin_player(turn: &AtomicUsize, me: usize, rounds: usize) {
    for _ in 0..rounds {
        while turn.load(Ordering::Acquire) != me {
            std::hint::spin_loop();
        }
        turn.store(1 - me, Ordering::Release);
    }
}

/// A child process for an instruction count
/// (`GDEX_BENCH_CHILD=fibers:<switch|spawn|spawn-batch>:<workers>:<times>`, under
/// `valgrind --tool=callgrind`): `times` runs of the gdex row of
/// `fiber_switch` (100,000 hand-offs) or `fiber_spawn` (100,000 fibers) on
/// a pool of `workers`. The difference between two `times`, over the runs
/// between them, is one run's instructions.
pub fn child(what: &str) {
    let usage = "fibers:<switch|spawn|spawn-batch>:<workers>:<times>";
    let mut parts = what.split(':');
    let (Some(row), Some(n), Some(times)) = (parts.next(), parts.next(), parts.next()) else {
        panic!("{usage}");
    };
    let (n, times): (usize, usize) = (n.parse().expect(usage), times.parse().expect(usage));
    let pool = gdex::ThreadPool::builder().workers(n).build().unwrap();
    let s = pool.scheduler();
    for _ in 0..times {
        match row {
            "switch" => switch_run(&s),
            "spawn" => spawn_run(&s),
            "spawn-batch" => spawn_batch_run(&s),
            other => panic!("{usage}: no row {other}"),
        }
    }
}

/// One run of `fiber_spawn`'s gdex row.
fn spawn_run(s: &gdex::Scheduler) {
    let fibers: Vec<_> = (0..SPAWNS).map(|i| s.spawn_fiber(move || i)).collect();
    gdex::block_on(async move {
        for f in fibers {
            f.await.unwrap();
        }
    })
}

/// One run of `fiber_spawn`'s gdex-batch row: the same fibers, spawned
/// with one `spawn_fibers`.
fn spawn_batch_run(s: &gdex::Scheduler) {
    let mut fibers = Vec::with_capacity(SPAWNS);
    s.spawn_fibers((0..SPAWNS).map(|i| move || i), &mut fibers);
    gdex::block_on(async move {
        for f in fibers {
            f.await.unwrap();
        }
    })
}

/// One run of `fiber_switch`'s gdex row.
fn switch_run(s: &gdex::Scheduler) {
    let baton = Arc::new(Baton {
        turn: AtomicUsize::new(0),
        wakers: [AtomicWaker::new(), AtomicWaker::new()],
    });
    let (b0, b1) = (baton.clone(), baton);
    let a = s.spawn_fiber(move || player(b0, 0, SWITCHES / 2));
    let b = s.spawn_fiber(move || player(b1, 1, SWITCHES / 2));
    gdex::block_on(async move {
        a.await.unwrap();
        b.await.unwrap();
    })
}

fn fiber_switch(c: &mut Criterion) {
    let mut g = c.benchmark_group("fiber_switch");
    g.throughput(Throughput::Elements(SWITCHES as u64));
    for n in [1, workers()] {
        // One worker: both fibers share a thread. More: round-robin places
        // them on two workers, so each hand-off crosses threads.
        let pool = gdex::ThreadPool::builder().workers(n).build().unwrap();
        let s = pool.scheduler();
        g.bench_function(BenchmarkId::new("gdex", n), |b| b.iter(|| switch_run(&s)));
    }
    // The floor of a hand-off across threads: two threads spinning on one
    // atomic, each passing the turn to the other. Each hand-off moves one
    // cache line from one core to the other; a fiber's hand-off across
    // workers moves several (the baton, the woken task's state, the
    // worker's inbox, its parking word).
    g.bench_function(BenchmarkId::new("handoff-floor", 2), |b| {
        b.iter(|| {
            let turn = Arc::new(AtomicUsize::new(0));
            let theirs = turn.clone();
            let other = std::thread::spawn(move || spin_player(&theirs, 1, SWITCHES / 2));
            spin_player(&turn, 0, SWITCHES / 2);
            other.join().unwrap();
        })
    });
    // The floor of the workload itself on one thread: two coroutines pass
    // the same baton, each woken through a waker that only says which one
    // to resume next, and a loop resumes it. Left: the baton's own cost
    // (its `AtomicWaker`'s register and wake, four atomic read-modify-writes
    // a hand-off) and two switches, with no executor at all.
    g.bench_function(BenchmarkId::new("baton-floor", 1), |b| {
        b.iter(|| baton_floor(SWITCHES / 2))
    });
    // The floor of the workload across two threads for any executor whose
    // wakes go through a per-fiber state and a per-thread queue: each
    // thread runs one player, whose waker moves its cell's state and puts
    // the cell in the other thread's one-word mailbox; the thread spins on
    // its mailbox. No stacks are switched (two switches cost 6 ns), nothing
    // else is scheduled.
    g.bench_function(BenchmarkId::new("queue-floor", 2), |b| {
        b.iter(|| queue_floor::run(SWITCHES / 2))
    });
    g.bench_function(BenchmarkId::new("corosensei-floor", 1), |b| {
        b.iter(|| {
            let mut co: Coroutine<(), (), ()> = Coroutine::new(|y, ()| loop {
                y.suspend(());
            });
            for _ in 0..SWITCHES {
                co.resume(());
            }
        })
    });
    g.finish();
}

/// [`fiber_switch`]'s `queue-floor` row: the baton passed between two
/// threads, each player woken the way a fiber on a gdex worker is from
/// another thread, with nothing else: a cell whose state a wake moves
/// (`WAITING` to `QUEUED` and a push, or `RUNNING` to notified), and a
/// one-word mailbox per thread that its thread spins on.
mod queue_floor {
    use std::sync::atomic::AtomicPtr;
    use std::task::{RawWaker, RawWakerVTable, Waker};

    use super::*;

    const RUNNING: usize = 1;
    const WAITING: usize = 2;
    const QUEUED: usize = 3;
    const NOTIFIED: usize = 4;

    /// On a line of its own, as a gdex worker's.
    #[repr(align(128))]
    struct Mailbox(AtomicPtr<Cell>);

    struct Cell {
        state: AtomicUsize,
        home: *const Mailbox,
    }

    // SAFETY: `state` is atomic, and `home` is only read, pointing to a
    // mailbox (atomic too) that outlives the cell (`run`).
    unsafe impl Sync for Cell {}

    static VTABLE: RawWakerVTable =
        RawWakerVTable::new(|data| RawWaker::new(data, &VTABLE), wake, wake, |_| {});

    fn wake(data: *const ()) {
        // SAFETY: the data is a `Cell` of `run`'s, which outlives both
        // players and so every wake.
        let cell = unsafe { &*data.cast::<Cell>() };
        let mut state = cell.state.load(Ordering::Acquire);
        loop {
            let next = match state {
                RUNNING => NOTIFIED,
                WAITING => QUEUED,
                _ => return,
            };
            match cell
                .state
                .compare_exchange(state, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) => state = now,
            }
        }
        if state == WAITING {
            // SAFETY: as above, for the mailbox.
            let home = unsafe { &*cell.home };
            home.0.store(data.cast_mut().cast(), Ordering::Release);
        }
    }

    fn player(baton: &Baton, cell: &Cell, me: usize, rounds: usize) {
        // SAFETY: `home` is the mailbox beside the cell in `run`.
        let mailbox = unsafe { &*cell.home };
        // SAFETY: the vtable's functions read the cell, which outlives every
        // wake: the other player's last pass may wake this one after it
        // returned (its waker still registered), so the cells are `run`'s.
        let waker =
            unsafe { Waker::from_raw(RawWaker::new((cell as *const Cell).cast(), &VTABLE)) };
        let mut cx = Context::from_waker(&waker);
        for _ in 0..rounds {
            let mut turn = std::pin::pin!(MyTurn { baton, me });
            while turn.as_mut().poll(&mut cx).is_pending() {
                // Suspend, unless woken meanwhile; then wait for the cell.
                if cell
                    .state
                    .compare_exchange(RUNNING, WAITING, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    cell.state.store(RUNNING, Ordering::Relaxed);
                    continue;
                }
                while mailbox.0.load(Ordering::Relaxed).is_null() {
                    std::hint::spin_loop();
                }
                mailbox.0.swap(std::ptr::null_mut(), Ordering::Acquire);
                cell.state
                    .compare_exchange(QUEUED, RUNNING, Ordering::AcqRel, Ordering::Relaxed)
                    .expect("a resumed player was queued");
            }
            baton.turn.store(1 - me, Ordering::Release);
            baton.wakers[1 - me].wake();
        }
    }

    pub fn run(rounds: usize) {
        let baton = Baton {
            turn: AtomicUsize::new(0),
            wakers: [AtomicWaker::new(), AtomicWaker::new()],
        };
        let mailboxes = [0, 1].map(|_| Mailbox(AtomicPtr::new(std::ptr::null_mut())));
        let cells = [0, 1].map(|i| Cell {
            state: AtomicUsize::new(RUNNING),
            home: &mailboxes[i],
        });
        std::thread::scope(|s| {
            s.spawn(|| player(&baton, &cells[1], 1, rounds));
            player(&baton, &cells[0], 0, rounds);
        });
    }
}
