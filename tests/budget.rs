//! The cooperative budget (P11): a task that loops over gdex futures that
//! are always ready yields to its neighbours, because each of gdex's leaf
//! futures spends one unit of the poll's budget (128) when it completes and
//! returns `Pending` once, having woken the task, when it is spent; under
//! `gdex::unconstrained` it does not. Every scheduler gives each poll a
//! full budget: a context scheduler's (the main scheduler's kind), a pool's
//! (stealable, pinned, thread-per-core), `block_on`'s and `wait_for`'s own
//! polls, and fibers (a fiber's wait counts as its poll).
//!
//! Each leaf's test is deterministic, with no timing: the loop spawns a
//! neighbour on its own scheduler (a fresh context's, or a one-worker
//! pool's), which can only run if the loop yields, and reports whether it
//! ran before the loop's 10,000 ready operations ended.
//!
//! The last tests port tokio's `tests/coop_budget.rs` and the budget cases
//! of its `tests/rt_common.rs` (`coop`, `coop_unconstrained`,
//! `coop_consume_budget`). Not ported: `coop_yield_defers_until_park`,
//! which checks that tokio defers a budget yield's wake-up until its I/O
//! driver has been polled; a gdex task that yields goes to the back of its
//! queue, and its worker's GLib loop runs between slices (P8, S12), which
//! `tests/pool.rs` and `tests/schedulers.rs` check. tokio's UDP
//! send/receive case runs here on a gdex channel (gdex has no UDP socket).

use crate::common;

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use common::{on_main, on_own_context, pump_until, watchdog, PrivateBus};
use glib::prelude::StaticType;

/// Ready operations per loop: many times the budget.
const N: usize = 10_000;

/// The budget a poll starts with (tokio's figure; `gdex::unconstrained`'s
/// documentation gives it).
const BUDGET: usize = 128;

/// Spawns a neighbour on the scheduler running this code: the flag it sets
/// when it runs.
fn neighbour() -> Arc<AtomicBool> {
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    gdex::Scheduler::thread_default()
        .expect("a gdex scheduler runs the loop")
        .spawn(async move { flag.store(true, SeqCst) })
        .detach();
    ran
}

/// Spawns a [`neighbour`], then awaits `each(i)` for `i` in `0..n`: true
/// if the neighbour ran before the loop ended (it can only if the loop
/// yielded).
async fn over<F: Future>(n: usize, mut each: impl FnMut(usize) -> F) -> bool {
    let ran = neighbour();
    for i in 0..n {
        each(i).await;
    }
    ran.load(SeqCst)
}

/// Runs the loop `make` gives as a task of a fresh context's scheduler,
/// then again under `gdex::unconstrained`: the neighbour runs during the
/// first, not during the second.
fn yields_on_a_context<F>(what: &str, mut make: impl FnMut() -> F)
where
    F: Future<Output = bool> + 'static,
{
    watchdog(what, 60, || {
        on_own_context(|_| {
            let budgeted = gdex::block_on(gdex::spawn_local(make())).unwrap();
            let free = gdex::block_on(gdex::spawn_local(gdex::unconstrained(make()))).unwrap();
            assert!(
                budgeted,
                "{what}: a loop over ready operations never let its neighbour run"
            );
            assert!(
                !free,
                "{what}: an unconstrained loop let its neighbour run (it yielded)"
            );
        })
    })
}

/// [`yields_on_a_context`] for a task of a one-worker pool.
fn yields_on_a_pool<F>(what: &str, pool: &gdex::ThreadPool, make: impl Fn() -> F)
where
    F: Future<Output = bool> + Send + 'static,
{
    watchdog(what, 60, || {
        let budgeted = gdex::block_on(pool.scheduler().spawn(make())).unwrap();
        let free = gdex::block_on(pool.scheduler().spawn(gdex::unconstrained(make()))).unwrap();
        assert!(
            budgeted,
            "{what}: a loop over ready operations never let its neighbour run"
        );
        assert!(
            !free,
            "{what}: an unconstrained loop let its neighbour run (it yielded)"
        );
    })
}

fn one_worker() -> gdex::ThreadPool {
    gdex::ThreadPool::builder().workers(1).build().unwrap()
}

/// A channel holding `n` items (0, 1, …), its sender gone.
fn filled(n: usize) -> gdex::Receiver<usize> {
    let (tx, rx) = gdex::channel(n);
    for i in 0..n {
        tx.try_send(i).unwrap();
    }
    rx
}

/// In a fiber: spawns a [`neighbour`], then waits for `N` receives from
/// `rx` (under `gdex::unconstrained` if `free`): true if the neighbour ran
/// meanwhile.
fn fiber_drains(rx: &gdex::Receiver<usize>, free: bool) -> bool {
    let ran = neighbour();
    for _ in 0..N {
        if free {
            gdex::fiber::wait(gdex::unconstrained(rx.recv())).unwrap();
        } else {
            gdex::fiber::wait(rx.recv()).unwrap();
        }
    }
    ran.load(SeqCst)
}

/// A loop receiving `N` items already in a channel.
fn draining() -> impl Future<Output = bool> + Send {
    let rx = filled(N);
    async move {
        over(N, |_| {
            let rx = &rx;
            async move { rx.recv().await.unwrap() }
        })
        .await
    }
}

// --- Every scheduler resets the budget for each poll ---

#[test]
fn a_context_schedulers_task_draining_a_channel_yields() {
    yields_on_a_context("context scheduler, channel receive", draining);
}

#[test]
fn a_pool_task_draining_a_channel_yields() {
    let pool = one_worker();
    yields_on_a_pool("pool, channel receive", &pool, draining);
}

#[test]
fn a_thread_per_core_task_draining_a_channel_yields() {
    let pool = gdex::ThreadPool::builder()
        .workers(1)
        .thread_per_core(true)
        .build()
        .unwrap();
    yields_on_a_pool("thread-per-core pool, channel receive", &pool, draining);
}

#[test]
fn a_pinned_task_draining_a_channel_yields() {
    watchdog("pinned task, channel receive", 60, || {
        let pool = one_worker();
        let budgeted = gdex::block_on(pool.scheduler().spawn_pinned(draining)).unwrap();
        let free = gdex::block_on(
            pool.scheduler()
                .spawn_pinned(|| gdex::unconstrained(draining())),
        )
        .unwrap();
        assert!(
            budgeted && !free,
            "budgeted {budgeted}, unconstrained {free}"
        );
    })
}

/// The main scheduler itself (S1), on the default main context.
#[test]
fn a_main_task_draining_a_channel_yields() {
    watchdog("main scheduler, channel receive", 60, || {
        on_main(|| {
            let main = gdex::Scheduler::main();
            let budgeted = gdex::block_on(main.spawn(draining())).unwrap();
            let free = gdex::block_on(main.spawn(gdex::unconstrained(draining()))).unwrap();
            assert!(
                budgeted && !free,
                "budgeted {budgeted}, unconstrained {free}"
            );
        })
    })
}

/// `block_on`'s own polls have a budget: a drain under it lets the
/// context's tasks run (S12), and an unconstrained one does not.
#[test]
fn a_drain_under_block_on_lets_the_contexts_tasks_run() {
    watchdog("block_on, channel receive", 60, || {
        on_own_context(|_| {
            assert!(gdex::block_on(draining()), "block_on's loop never yielded");
            assert!(
                !gdex::block_on(gdex::unconstrained(draining())),
                "an unconstrained loop under block_on yielded"
            );
        })
    })
}

/// `wait_for`'s own polls have a budget too; outside any gdex poll (another
/// executor's) there is none.
#[test]
fn wait_for_polls_with_a_budget_and_other_executors_without() {
    watchdog("wait_for, channel receive", 60, || {
        let drain_in_one_poll = || {
            let rx = filled(1000);
            std::future::poll_fn(move |cx| {
                let mut pending = 0;
                let mut taken = 0;
                while taken < 1000 {
                    match pin!(rx.recv()).poll(cx) {
                        Poll::Ready(_) => taken += 1,
                        Poll::Pending if pending == 0 => pending = 1,
                        Poll::Pending => break,
                    }
                }
                Poll::Ready((taken, pending))
            })
        };
        let (taken, pending) = std::thread::spawn(move || gdex::wait_for(drain_in_one_poll()))
            .join()
            .unwrap();
        assert_eq!(
            (taken, pending),
            (BUDGET, 1),
            "wait_for's poll had no budget"
        );
        let (taken, pending) = futures::executor::block_on(drain_in_one_poll());
        assert_eq!(
            (taken, pending),
            (1000, 0),
            "another executor's poll had a budget"
        );
    })
}

/// A fiber's wait counts as its poll: a fiber on a pool worker (resumed by
/// its worker's fiber scheduler) draining a channel lets a neighbour run.
#[test]
fn a_fiber_draining_a_channel_on_a_pool_yields() {
    watchdog("fiber on a pool, channel receive", 60, || {
        let pool = one_worker();
        let fiber = |free: bool| {
            let rx = filled(N);
            pool.scheduler().spawn_fiber(move || {
                // From here on the fiber is resumed by its worker's fiber
                // scheduler, not in its task's first poll.
                gdex::fiber::yield_fiber().unwrap();
                fiber_drains(&rx, free)
            })
        };
        assert!(
            gdex::block_on(fiber(false)).unwrap(),
            "the fiber never yielded"
        );
        assert!(
            !gdex::block_on(fiber(true)).unwrap(),
            "an unconstrained fiber yielded"
        );
    })
}

/// The same for a fiber of a context scheduler, resumed in its task's poll.
#[test]
fn a_fiber_draining_a_channel_on_a_context_yields() {
    watchdog("fiber on a context, channel receive", 60, || {
        on_own_context(|context| {
            let scheduler = gdex::Scheduler::for_context(context);
            let fiber = |free: bool| {
                let rx = filled(N);
                scheduler.spawn_fiber(move || fiber_drains(&rx, free))
            };
            assert!(
                gdex::block_on(fiber(false)).unwrap(),
                "the fiber never yielded"
            );
            assert!(
                !gdex::block_on(fiber(true)).unwrap(),
                "an unconstrained fiber yielded"
            );
        })
    })
}

// --- Each leaf future ---

#[test]
fn a_loop_sending_into_a_channel_with_room_yields() {
    yields_on_a_context("channel send", || {
        let (tx, rx) = gdex::channel(N);
        async move {
            let ran = over(N, |i| {
                let tx = &tx;
                async move { tx.send(i).await.unwrap() }
            })
            .await;
            drop(rx);
            ran
        }
    });
}

#[test]
fn a_loop_over_recv_all_yields() {
    yields_on_a_context("channel recv_all", || {
        let (tx, rx) = gdex::channel(2);
        async move {
            over(N, |i| {
                tx.try_send(i).unwrap();
                let rx = &rx;
                async move { assert_eq!(rx.recv_all().await.unwrap(), [i]) }
            })
            .await
        }
    });
}

#[test]
fn a_loop_over_a_resolved_promise_yields() {
    yields_on_a_context("promise", || {
        let (promise, future) = gdex::Promise::new();
        promise.resolve(7u32);
        async move { over(N, |_| future.clone()).await }
    });
}

#[test]
fn a_loop_over_a_free_semaphores_acquire_yields() {
    yields_on_a_context("Semaphore::acquire", || {
        let semaphore = gdex::Semaphore::new(1);
        async move { over(N, |_| async { drop(semaphore.acquire().await.unwrap()) }).await }
    });
}

#[test]
fn a_loop_over_a_free_limiters_acquire_yields() {
    yields_on_a_context("Limiter::acquire", || {
        let limiter = gdex::Limiter::new(1);
        async move { over(N, |_| async { drop(limiter.acquire().await.unwrap()) }).await }
    });
}

#[test]
fn a_loop_over_a_closed_limiters_refusals_yields() {
    yields_on_a_context("a closed Limiter's refusals", || {
        let limiter = gdex::Limiter::new(1);
        limiter.close();
        async move {
            over(N, |i| {
                let limiter = &limiter;
                async move {
                    let refused = match i % 3 {
                        0 => limiter.acquire().await.is_err(),
                        1 => limiter.run(async {}).await.is_err(),
                        _ => limiter.run_on_pool(async {}).await.is_err(),
                    };
                    assert!(refused);
                }
            })
            .await
        }
    });
}

#[test]
fn a_loop_over_a_drained_limiters_close_after_drain_yields() {
    yields_on_a_context("Limiter::close_after_drain", || {
        let limiter = gdex::Limiter::new(1);
        async move { over(N, |_| limiter.close_after_drain()).await }
    });
}

#[test]
fn a_loop_closing_empty_task_groups_yields() {
    yields_on_a_context("TaskGroup::close", || async {
        over(N, |_| async {
            gdex::TaskGroup::<()>::new().close().await.unwrap()
        })
        .await
    });
    yields_on_a_context("TaskGroup::close_with_results", || async {
        over(N, |_| async {
            let group = gdex::TaskGroup::<()>::builder().keep_results(true).build();
            assert!(group.close_with_results().await.is_empty());
        })
        .await
    });
    yields_on_a_context("TaskGroup::cancel", || async {
        over(N, |_| async { gdex::TaskGroup::<()>::new().cancel().await }).await
    });
}

#[test]
fn a_loop_over_finished_threads_join_handles_yields() {
    // A thread each: fewer than `N`, still over twice the budget.
    const THREADS: usize = 3 * BUDGET;
    yields_on_a_context("thread::spawn's JoinHandle", || {
        let mut threads: Vec<_> = (0..THREADS)
            .map(|i| gdex::thread::spawn("budget", move || i))
            .collect();
        while !threads.iter().all(gdex::thread::JoinHandle::is_finished) {
            std::thread::yield_now();
        }
        threads.reverse();
        async move {
            over(THREADS, |i| {
                let thread = threads.pop().unwrap();
                async move { assert_eq!(thread.await.unwrap(), i) }
            })
            .await
        }
    });
}

#[test]
fn a_loop_over_a_closed_blocking_pools_close_yields() {
    yields_on_a_context("BlockingPool::close", || {
        let pool = gdex::blocking::BlockingPool::new(1);
        gdex::block_on(pool.close(gdex::blocking::CloseMode::Drain));
        async move { over(N, |_| pool.close(gdex::blocking::CloseMode::Drain)).await }
    });
}

#[test]
fn a_loop_over_released_delayed_futures_yields() {
    yields_on_a_context("Delayed", || async {
        over(N, |i| {
            let (delayed, release) = gdex::Delayed::new(async move { i });
            release.release();
            delayed
        })
        .await
    });
}

#[test]
fn a_loop_over_a_cancelled_cancellables_future_yields() {
    yields_on_a_context("Cancellable::future", || {
        let cancellable = gdex::Cancellable::new();
        cancellable.cancel();
        async move {
            over(N, |_| {
                let wait = cancellable.future::<()>();
                async move { assert!(wait.await.is_err()) }
            })
            .await
        }
    });
}

#[test]
fn a_loop_over_due_sleeps_yields() {
    yields_on_a_context("sleep", || async {
        over(N, |_| gdex::sleep(Duration::ZERO)).await
    });
}

#[test]
fn a_loop_over_due_reject_afters_yields() {
    yields_on_a_context("reject_after", || async {
        over(N, |_| gdex::reject_after::<()>(Duration::ZERO)).await
    });
}

#[test]
fn a_loop_over_elapsed_timeouts_yields() {
    yields_on_a_context("timeout", || async {
        over(N, |_| {
            gdex::timeout(Duration::ZERO, std::future::pending::<()>())
        })
        .await
    });
}

/// A timeout around a future that spends the last unit is still checked in
/// that poll (as tokio's is): a deadline that has passed is not missed
/// for the budget.
#[test]
fn a_timeout_fires_in_the_poll_whose_future_spent_the_budget() {
    watchdog("timeout after the budget", 30, || {
        on_own_context(|_| {
            let task = gdex::spawn_local(async {
                for _ in 0..BUDGET - 1 {
                    gdex::consume_budget().await;
                }
                // The future spends the last unit and is pending: the
                // deadline, long passed, is checked anyway.
                let spends_the_last = std::future::poll_fn(|cx| {
                    let _ = pin!(gdex::consume_budget()).poll(cx);
                    Poll::<()>::Pending
                });
                let mut timed = pin!(gdex::timeout(Duration::ZERO, spends_the_last));
                std::future::poll_fn(|cx| Poll::Ready(timed.as_mut().poll(cx).is_ready())).await
            });
            assert!(gdex::block_on(task).unwrap(), "the deadline waited a poll");
        })
    })
}

#[test]
fn a_loop_over_a_ready_fd_yields() {
    yields_on_a_context("unix_fd", || {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        async move {
            let mut writable = gdex::unix_fd(&ours, glib::IOCondition::OUT);
            (&mut writable).await.unwrap();
            let ran = neighbour();
            for _ in 0..N {
                (&mut writable).await.unwrap();
            }
            drop(theirs);
            ran.load(SeqCst)
        }
    });
}

/// A `unix_signal` that has arrived stays ready. (SIGWINCH: its default
/// action is to be ignored, so a stray one harms no test.)
#[test]
fn a_loop_over_an_arrived_signal_yields() {
    watchdog("unix_signal", 60, || {
        let arrived = |signal: &mut gdex::UnixSignal| {
            // The watch is on the default main context.
            on_main(|| {
                // SAFETY: raise(3) has no preconditions; GLib handles
                // SIGWINCH while `signal` lives.
                assert_eq!(unsafe { libc::raise(libc::SIGWINCH) }, 0);
                gdex::block_on(&mut *signal);
            })
        };
        let mut first = gdex::unix_signal(libc::SIGWINCH);
        arrived(&mut first);
        let mut second = gdex::unix_signal(libc::SIGWINCH);
        arrived(&mut second);
        let mut signals = [Some(first), Some(second)].into_iter();
        yields_on_a_context("unix_signal", move || {
            let mut signal = signals.next().flatten().expect("two runs");
            async move {
                let ran = neighbour();
                for _ in 0..N {
                    (&mut signal).await;
                }
                ran.load(SeqCst)
            }
        });
    })
}

/// A `unix_signals` stream is ready once per arrival, so no loop over it
/// is always ready: with the budget spent, an arrival waiting is given at
/// the next poll, after a yield, and not lost.
#[test]
fn a_signal_stream_yields_when_the_budget_is_spent() {
    watchdog("unix_signals", 60, || {
        on_main(|| {
            let mut signals = gdex::unix_signals(libc::SIGWINCH);
            // SAFETY: raise(3) has no preconditions; GLib handles SIGWINCH
            // while `signals` lives.
            assert_eq!(unsafe { libc::raise(libc::SIGWINCH) }, 0);
            // Until the main context has delivered it.
            let context = glib::MainContext::default();
            pump_until(&context, || {
                format!("{signals:?}").contains("pending: true")
            });
            let task = gdex::Scheduler::main().spawn_local(async move {
                let polls = spend_then_count_polls(signals.recv()).await;
                drop(signals);
                polls
            });
            assert_eq!(
                gdex::block_on(task).unwrap(),
                2,
                "not given after one yield"
            );
        })
    })
}

/// Spends the whole budget of this poll, then polls `leaf` until it is
/// ready: how many polls that took.
async fn spend_then_count_polls<F: Future>(leaf: F) -> usize {
    for _ in 0..BUDGET {
        gdex::consume_budget().await;
    }
    let mut leaf = pin!(leaf);
    let mut polls = 0;
    std::future::poll_fn(|cx| {
        polls += 1;
        leaf.as_mut().poll(cx)
    })
    .await;
    polls
}

#[test]
fn a_loop_over_refused_aio_operations_yields() {
    let dir = common::TempDir::new("budget-aio");
    let path = dir.file("data", b"some bytes");
    yields_on_a_context("aio read_at", || {
        let path = path.clone();
        async move {
            let file = gdex::aio::File::open(&path).await.unwrap();
            // An offset no file has: refused at once, with no I/O.
            over(N, |_| {
                let read = file.read_at(Vec::with_capacity(16), u64::MAX);
                async move { assert!(read.await.is_err()) }
            })
            .await
        }
    });
}

#[test]
fn a_loop_over_finished_tasks_yields() {
    yields_on_a_context("Task", || async {
        let mut tasks: Vec<_> = (0..N)
            .map(|i| gdex::spawn_local(async move { i }))
            .collect();
        while !tasks.iter().all(gdex::Task::is_finished) {
            gdex::yield_now().await;
        }
        tasks.reverse();
        over(N, |i| {
            let task = tasks.pop().unwrap();
            async move { assert_eq!(task.await.unwrap(), i) }
        })
        .await
    });
}

#[test]
fn a_loop_cancelling_finished_tasks_yields() {
    yields_on_a_context("Task::cancel", || async {
        let mut tasks: Vec<_> = (0..N)
            .map(|i| gdex::spawn_local(async move { i }))
            .collect();
        while !tasks.iter().all(gdex::Task::is_finished) {
            gdex::yield_now().await;
        }
        tasks.reverse();
        over(N, |i| {
            let task = tasks.pop().unwrap();
            async move { assert_eq!(task.cancel().await, Some(i)) }
        })
        .await
    });
}

#[test]
fn a_loop_over_finished_fibers_yields() {
    const FIBERS: usize = 1000;
    yields_on_a_context("Fiber", || async {
        let scheduler = gdex::Scheduler::thread_default().unwrap();
        let mut fibers: Vec<_> = (0..FIBERS)
            .map(|i| scheduler.spawn_fiber(move || i))
            .collect();
        while !fibers.iter().all(gdex::Fiber::is_finished) {
            gdex::yield_now().await;
        }
        fibers.reverse();
        over(FIBERS, |i| {
            let fiber = fibers.pop().unwrap();
            async move { assert_eq!(fiber.await.unwrap(), i) }
        })
        .await
    });
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Light {
    Off,
    On,
}

fn machine() -> gdex::StateMachine<Light> {
    gdex::StateMachine::builder(Light::Off)
        .edge(Light::Off, Light::On, |_| std::future::ready(Ok(())))
        .edge(Light::On, Light::Off, |_| std::future::ready(Ok(())))
        .build()
        .unwrap()
}

#[test]
fn a_loop_waiting_for_the_current_state_yields() {
    yields_on_a_context("wait_for_state", || {
        let machine = machine();
        async move {
            over(N, |_| {
                let wait = machine.wait_for_state(Light::Off);
                async move { assert_eq!(wait.await.unwrap(), Light::Off) }
            })
            .await
        }
    });
}

#[test]
fn a_loop_over_finished_transition_requests_yields() {
    yields_on_a_context("transition", || async {
        let machine = machine();
        let targets = |i: usize| {
            if i.is_multiple_of(2) {
                Light::On
            } else {
                Light::Off
            }
        };
        let mut requests: Vec<_> = (0..N).map(|i| machine.transition(targets(i))).collect();
        // Requests run in order: once the last is done, all are.
        let last = requests.pop().unwrap();
        assert_eq!(last.await.unwrap(), targets(N - 1));
        requests.reverse();
        over(N - 1, |i| {
            let request = requests.pop().unwrap();
            async move { assert_eq!(request.await.unwrap(), targets(i)) }
        })
        .await
    });
}

#[test]
fn a_loop_over_an_ended_transitions_interruptions_yields() {
    yields_on_a_context("TransitionContext::interrupted", || async {
        let kept = Arc::new(std::sync::Mutex::new(None));
        let keep = kept.clone();
        let machine = gdex::StateMachine::builder(Light::Off)
            .edge(Light::Off, Light::On, move |cx| {
                *keep.lock().unwrap() = Some(cx);
                std::future::ready(Ok(()))
            })
            .build()
            .unwrap();
        machine.transition(Light::On).await.unwrap();
        let cx = kept.lock().unwrap().take().expect("the transition ran");
        // Ended: each interruption future rejects at once.
        over(N, |_| {
            let interrupted = cx.interrupted();
            async move { assert!(interrupted.await.is_err()) }
        })
        .await
    });
}

#[test]
fn a_loop_over_a_lost_d_bus_names_futures_yields() {
    let bus = PrivateBus::start("budget-name");
    let connection = bus.connect();
    yields_on_a_context("D-Bus name lost", || {
        let connection = connection.clone();
        async move {
            let owner =
                gdex::dbus::own_name(&connection, "org.gdex.Budget", gio::BusNameOwnerFlags::NONE);
            let mut lost: Vec<_> = (0..N).map(|_| owner.lost()).collect();
            drop(owner); // released: every future is ready
            over(N, |_| lost.pop().unwrap()).await
        }
    });
}

#[test]
fn a_loop_over_a_complete_list_models_until_complete_yields() {
    yields_on_a_context("ListModel::until_complete", || async {
        let model = gdex::ListModel::from_stream(
            glib::Object::static_type(),
            futures::stream::empty::<u32>(),
            |_| glib::Object::new::<glib::Object>(),
        );
        model.until_complete().await;
        over(N, |_| model.until_complete()).await
    });
}

/// `consume_budget` is the budget's yield point for code that awaits no
/// leaf: a loop over it alone yields, and only once per budget.
#[test]
fn a_loop_over_consume_budget_yields_once_per_budget() {
    yields_on_a_context("consume_budget", || async {
        over(N, |_| gdex::consume_budget()).await
    });
}

/// `yield_now` is no leaf: it always yields, spends nothing, and the poll
/// after it has a whole budget. A loop of one yield and 127 receives is
/// never made to yield a second time by the budget (it would be if
/// `yield_now` counted).
#[test]
fn yield_now_does_not_spend_the_budget() {
    watchdog("yield_now", 30, || {
        on_own_context(|_| {
            let rx = filled(N);
            let task = gdex::spawn_local(async move {
                let mut budget_yields = 0;
                for _ in 0..50 {
                    gdex::yield_now().await;
                    for _ in 0..BUDGET {
                        let mut recv = pin!(rx.recv());
                        if std::future::poll_fn(|cx| Poll::Ready(recv.as_mut().poll(cx)))
                            .await
                            .is_pending()
                        {
                            budget_yields += 1;
                            recv.await.unwrap();
                        }
                    }
                }
                budget_yields
            });
            assert_eq!(gdex::block_on(task).unwrap(), 0);
        })
    })
}

// --- tokio's coop tests ---

/// tokio's `coop_budget_udp_send_recv`, on a gdex channel: a loop of one
/// send and one receive per round yields every 64 rounds (two units a
/// round), so a neighbour that counts its turns and yields counts one turn
/// per 64 rounds (and one for the yield before the loop).
#[test]
fn a_send_and_receive_loop_yields_every_half_budget_of_rounds() {
    const ROUNDS: usize = 1024;
    watchdog("coop_budget_udp_send_recv", 30, || {
        on_own_context(|_| {
            let task = gdex::spawn_local(async {
                let (tx, rx) = gdex::channel(1);
                let turns = Arc::new(AtomicUsize::new(0));
                let counting = turns.clone();
                let stop = Arc::new(AtomicBool::new(false));
                let stopping = stop.clone();
                gdex::spawn_local(async move {
                    while !stopping.load(SeqCst) {
                        counting.fetch_add(1, SeqCst);
                        gdex::yield_now().await;
                    }
                })
                .detach();
                gdex::yield_now().await;
                for i in 0..ROUNDS {
                    tx.send(i).await.unwrap();
                    assert_eq!(rx.recv().await.unwrap(), i);
                }
                stop.store(true, SeqCst);
                turns.load(SeqCst)
            });
            assert_eq!(gdex::block_on(task).unwrap(), ROUNDS / (BUDGET / 2));
        })
    })
}

/// tokio's `test_has_budget_remaining`, through what gdex shows: after a
/// whole budget of `consume_budget`, a ready leaf yields once.
#[test]
fn a_ready_leaf_yields_once_after_a_whole_budget_is_consumed() {
    watchdog("test_has_budget_remaining", 30, || {
        on_own_context(|_| {
            let task = gdex::spawn_local(async {
                let (tx, rx) = gdex::channel(1);
                tx.try_send(1).unwrap();
                spend_then_count_polls(rx.recv()).await
            });
            assert_eq!(gdex::block_on(task).unwrap(), 2);
        })
    })
}

/// tokio's `rt_common::coop`: 1,000 ready receives in one poll: at least
/// one is pending.
#[test]
fn one_poll_of_a_thousand_ready_receives_is_cut_short() {
    watchdog("rt_common::coop", 30, || {
        let pool = one_worker();
        let task = pool.scheduler().spawn(async {
            let rx = filled(1000);
            std::future::poll_fn(|cx| {
                for _ in 0..1000 {
                    if pin!(rx.recv()).poll(cx).is_pending() {
                        return Poll::Ready(true);
                    }
                }
                Poll::Ready(false)
            })
            .await
        });
        assert!(gdex::block_on(task).unwrap(), "did not yield");
    })
}

/// tokio's `rt_common::coop_unconstrained`.
#[test]
fn one_unconstrained_poll_of_a_thousand_ready_receives_takes_them_all() {
    watchdog("rt_common::coop_unconstrained", 30, || {
        let pool = one_worker();
        let task = pool.scheduler().spawn(async {
            let rx = filled(1000);
            gdex::unconstrained(std::future::poll_fn(|cx| {
                for i in 0..1000 {
                    match pin!(rx.recv()).poll(cx) {
                        Poll::Ready(item) => assert_eq!(item.unwrap(), i),
                        Poll::Pending => panic!("an unconstrained receive yielded"),
                    }
                }
                Poll::Ready(())
            }))
            .await
        });
        gdex::block_on(task).unwrap();
    })
}

/// tokio's `rt_common::coop_consume_budget`: a worker future consuming
/// budget in a loop of 1,000 is pending before it ends.
#[test]
fn consume_budget_in_a_loop_is_cut_short() {
    watchdog("rt_common::coop_consume_budget", 30, || {
        let pool = one_worker();
        let task = pool.scheduler().spawn(async {
            std::future::poll_fn(|cx| {
                let counter = Arc::new(AtomicUsize::new(0));
                let counting = counter.clone();
                let mut worker = Box::pin(async move {
                    for _ in 0..1000 {
                        counting.fetch_add(1, SeqCst);
                        gdex::consume_budget().await;
                    }
                });
                assert!(worker.as_mut().poll(cx).is_pending());
                Poll::Ready(counter.load(SeqCst))
            })
            .await
        });
        let counted = gdex::block_on(task).unwrap();
        assert!(counted < 1000, "{counted}");
        assert_eq!(counted, BUDGET + 1, "the budget, and the one that yielded");
    })
}
