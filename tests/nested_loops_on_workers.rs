//! P7, P10: a nested main loop on a pool worker's context sleeps in its
//! poll while it waits, wherever it runs: inside one of the worker's jobs
//! (a task, a fiber: the worker is awake and its source is being
//! dispatched, so its queued work waits for that job), or outside its run
//! slice (a task of a scheduler of the worker's context, a GLib callback
//! there: the worker's source runs the work its own thread queued, then
//! the loop sleeps), also while the pool shuts down. Each loop is counted by a source that counts its
//! context's iterations (each prepares it once): a loop that polled
//! without blocking while it waited would iterate thousands of times.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long each nested loop waits (for a timeout source that quits it).
const NESTED: Duration = Duration::from_millis(50);

/// At most this many iterations of a context during one nested loop that
/// waits: the loop's own turns (a handful), not a spin's thousands.
const FEW: usize = 25;

/// Counts a context's iterations (a [`common::PrepareHook`] at the
/// default priority) until dropped.
struct IterationCounter {
    _hook: common::PrepareHook,
    count: Arc<AtomicUsize>,
}

impl IterationCounter {
    fn attach(context: &glib::MainContext) -> IterationCounter {
        let count = Arc::new(AtomicUsize::new(0));
        let counted = count.clone();
        let hook = common::PrepareHook::attach(context, glib::ffi::G_PRIORITY_DEFAULT, move || {
            counted.fetch_add(1, Ordering::Relaxed);
        });
        IterationCounter { _hook: hook, count }
    }
}

/// Runs a nested loop of the calling thread's thread-default context (a
/// worker's) until a timeout source on it quits the loop after `wait`;
/// returns how often the context iterated meanwhile (counted in `count`
/// by an [`IterationCounter`]).
fn nest(count: &AtomicUsize, wait: Duration) -> usize {
    let before = count.load(Ordering::Relaxed);
    let context = glib::MainContext::thread_default().expect("a worker's context");
    let nested = glib::MainLoop::new(Some(&context), false);
    let quit = nested.clone();
    glib::timeout_source_new(wait, None, glib::Priority::DEFAULT, move || {
        quit.quit();
        glib::ControlFlow::Break
    })
    .attach(Some(&context));
    nested.run();
    count.load(Ordering::Relaxed) - before
}

/// The context of the only worker of `pool`.
fn worker_context(pool: &gdex::ThreadPool) -> glib::MainContext {
    gdex::wait_for(
        pool.scheduler()
            .spawn(async { glib::MainContext::thread_default().expect("a worker's context") }),
    )
    .unwrap()
}

fn assert_few(iterations: usize, what: &str) {
    assert!(
        iterations <= FEW,
        "{what}: the worker's context iterated {iterations} times during a nested loop that \
         waited: it polled without blocking"
    );
}

/// Outside the worker's slice, on its thread: queues a pool task from
/// there (the worker is awake from then on), runs a nested loop, and says
/// how often the context iterated meanwhile (counted by `count`) and
/// whether the task ran in the loop.
fn queue_then_nest(pool: &gdex::Scheduler, count: &AtomicUsize) -> (usize, bool) {
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    let _queued = pool.spawn(async move { r.store(true, Ordering::SeqCst) });
    let iterations = nest(count, NESTED);
    (iterations, ran.load(Ordering::SeqCst))
}

/// What [`queue_then_nest`] saw: the task ran, the loop slept.
fn assert_ran_and_few((iterations, ran): (usize, bool), what: &str) {
    assert!(
        ran,
        "{what}: the pool task its worker's own thread queued did not run in the nested loop"
    );
    assert_few(iterations, what);
}

/// Inside a pool task: the worker is awake, in its slice, with another
/// task queued behind the job (spawned from it); its source cannot run
/// that task until the job returns, so the nested loop blocks as GLib asks
/// (`Core::before_poll` keeps GLib's timeout inside a slice: without that,
/// a loop of 200 ms here iterated about 480,000 times).
#[test]
fn a_nested_loop_inside_a_pool_task_sleeps() {
    common::watchdog("a_nested_loop_inside_a_pool_task_sleeps", 60, || {
        let pool = common::quiet_pool(1);
        let counter = IterationCounter::attach(&worker_context(&pool));
        let count = counter.count.clone();
        let s = pool.scheduler();
        let task = s.clone().spawn(async move {
            let queued = s.spawn(async {});
            let iterations = nest(&count, NESTED);
            queued.await.unwrap();
            iterations
        });
        assert_few(gdex::wait_for(task).unwrap(), "a pool task");
        drop(counter);
    });
}

/// Inside a fiber on a worker: as inside a task.
#[test]
fn a_nested_loop_inside_a_pool_fiber_sleeps() {
    common::watchdog("a_nested_loop_inside_a_pool_fiber_sleeps", 60, || {
        let pool = common::quiet_pool(1);
        let counter = IterationCounter::attach(&worker_context(&pool));
        let count = counter.count.clone();
        let s = pool.scheduler();
        let fiber = s.clone().spawn_fiber(move || {
            let queued = s.spawn(async {});
            let iterations = nest(&count, NESTED);
            gdex::fiber::wait(queued).unwrap();
            iterations
        });
        assert_few(gdex::wait_for(fiber).unwrap(), "a pool fiber");
        drop(counter);
    });
}

/// A one-worker pool, a counter of its worker's context's iterations, and
/// a scheduler of that context.
fn worker_context_scheduler() -> (gdex::ThreadPool, IterationCounter, gdex::Scheduler) {
    let pool = common::quiet_pool(1);
    let counter = IterationCounter::attach(&worker_context(&pool));
    let on_context = gdex::wait_for(pool.scheduler().spawn(async {
        gdex::Scheduler::for_context(&glib::MainContext::thread_default().unwrap())
    }))
    .unwrap();
    (pool, counter, on_context)
}

/// Outside the worker's slice, in a task of a scheduler of the worker's
/// context: the task spawns a pool task from the worker's thread (the
/// worker is awake from then on), and the nested loop runs it (the
/// worker's source dispatches there), then sleeps.
#[test]
fn a_nested_loop_inside_a_task_of_a_worker_contexts_scheduler_sleeps() {
    common::watchdog("a_nested_loop_inside_a_context_task_sleeps", 60, || {
        let (pool, counter, on_context) = worker_context_scheduler();
        let count = counter.count.clone();
        let s = pool.scheduler();
        let task = on_context.spawn(async move { queue_then_nest(&s, &count) });
        assert_ran_and_few(
            gdex::wait_for(task).unwrap(),
            "a task of a worker context's scheduler",
        );
        drop(counter);
    });
}

/// Outside the worker's slice, in a GLib callback on the worker's context:
/// as in a task of a scheduler of that context.
#[test]
fn a_nested_loop_inside_a_glib_callback_on_a_worker_context_sleeps() {
    common::watchdog("a_nested_loop_inside_a_glib_callback_sleeps", 60, || {
        let pool = common::quiet_pool(1);
        let context = worker_context(&pool);
        let counter = IterationCounter::attach(&context);
        let count = counter.count.clone();
        let s = pool.scheduler();
        let (done_tx, done) = std::sync::mpsc::channel();
        glib::idle_source_new(None, glib::Priority::DEFAULT, move || {
            let _ = done_tx.send(queue_then_nest(&s, &count));
            glib::ControlFlow::Break
        })
        .attach(Some(&context));
        assert_ran_and_few(done.recv().unwrap(), "a GLib callback");
        drop(counter);
    });
}

/// Outside the worker's slice, in a fiber of a scheduler of the worker's
/// context.
#[test]
fn a_nested_loop_inside_a_fiber_of_a_worker_contexts_scheduler_sleeps() {
    common::watchdog("a_nested_loop_inside_a_context_fiber_sleeps", 60, || {
        let (pool, counter, on_context) = worker_context_scheduler();
        let count = counter.count.clone();
        let s = pool.scheduler();
        let fiber = on_context.spawn_fiber(move || queue_then_nest(&s, &count));
        assert_ran_and_few(
            gdex::wait_for(fiber).unwrap(),
            "a fiber of a worker context's scheduler",
        );
        drop(counter);
    });
}

/// While the pool shuts down: a GLib callback on a worker's context runs a
/// nested loop, and the pool is closed meanwhile (its shutdown waits for
/// the worker, so for the loop). The worker's source has nothing to run
/// once the pool is closed (a slice returns at once): it must not say it
/// is ready, or the loop spins through empty dispatches until it ends
/// (690,585 iterations in the 300 ms here before it said so).
#[test]
fn a_nested_loop_on_a_worker_context_sleeps_while_the_pool_closes() {
    common::watchdog("a_nested_loop_while_the_pool_closes", 60, || {
        let pool = common::quiet_pool(1);
        let context = worker_context(&pool);
        let counter = IterationCounter::attach(&context);
        let count = counter.count.clone();
        let (entered_tx, entered) = std::sync::mpsc::channel();
        let (done_tx, done) = std::sync::mpsc::channel();
        glib::idle_source_new(None, glib::Priority::DEFAULT, move || {
            entered_tx.send(()).unwrap();
            let _ = done_tx.send(nest(&count, Duration::from_millis(300)));
            glib::ControlFlow::Break
        })
        .attach(Some(&context));
        entered.recv().unwrap();
        pool.shutdown();
        assert_few(
            done.recv().unwrap(),
            "a GLib callback's nested loop while the pool closed",
        );
        drop(counter);
    });
}
