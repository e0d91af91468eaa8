//! Faults (S6, X5): real failures from the kernel, from user code that
//! gdex calls back (wakers, destructors, GLib callbacks, the panic handler
//! itself), and what gdex promises when they happen: a panic is contained
//! and reported, never an abort, and every value is dropped once.
//!
//! Each test but one runs its body in a child process (this same binary,
//! re-executed on one `#[ignore]`d `child_*` test with `GDEX_TEST_CHILD=1`,
//! `common::child_passes`): the bodies lower the process's address-space
//! limit, set the process-wide panic handler, or may abort; a child keeps
//! that away from the other tests, and a child that hangs is killed, so a
//! bug fails instead of hanging. A child prints `CHILD-OK` at its end; the
//! parent checks it. The one in-process test (inline work items) sets the
//! panic handler in this process, where no other test sets it.
//!
//! Faults come from the real thing, not mocks: a thread stack or a fiber
//! stack that the kernel refuses to map (`RLIMIT_AS` lowered just before),
//! a `Waker` whose `wake` panics, a value whose `Drop` panics, a GLib
//! callback that panics.

use crate::common;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use common::{child_passes, is_child, poll_with, quiet_pool, run_child, thread_names, wait_until};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// The panic events the child's panic handler has seen.
fn events() -> &'static Mutex<Vec<gdex::PanicEvent>> {
    static EVENTS: OnceLock<Mutex<Vec<gdex::PanicEvent>>> = OnceLock::new();
    EVENTS.get_or_init(|| {
        gdex::set_panic_handler(|event| events().lock().unwrap().push(event.clone()));
        Mutex::new(Vec::new())
    })
}

/// The first event with `message` the panic handler has seen, if any.
fn find_event(message: &str) -> Option<gdex::PanicEvent> {
    let events = events().lock().unwrap();
    events.iter().find(|e| e.message == message).cloned()
}

/// Waits until the panic handler has seen an event with `message`, and
/// gives it. (The child's time limit bounds the wait.)
fn wait_for_event(message: &str) -> gdex::PanicEvent {
    loop {
        if let Some(event) = find_event(message) {
            return event;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The process's address space, in bytes (`VmSize`).
fn address_space() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmSize:"))
        .expect("VmSize in /proc/self/status");
    let kb: usize = line
        .trim_start_matches("VmSize:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kb * 1024
}

/// Lowers the soft `RLIMIT_AS` to `bytes` until the guard drops, when the
/// old limit comes back. The kernel then refuses any mapping that would
/// take the address space past it: a thread stack or a fiber stack.
struct AddressSpaceLimit(libc::rlimit);

impl AddressSpaceLimit {
    fn set(bytes: usize) -> AddressSpaceLimit {
        // SAFETY: rlimit is plain data; all-zero is a valid value.
        let mut old: libc::rlimit = unsafe { std::mem::zeroed() };
        // SAFETY: getrlimit writes the current limits into `old`.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut old) }, 0);
        let new = libc::rlimit {
            rlim_cur: (bytes as libc::rlim_t).min(old.rlim_max),
            rlim_max: old.rlim_max,
        };
        // SAFETY: setrlimit only reads `new`; lowering the soft limit is
        // always allowed.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &new) }, 0);
        AddressSpaceLimit(old)
    }
}

impl Drop for AddressSpaceLimit {
    fn drop(&mut self) {
        // SAFETY: setrlimit only reads the limits we read before; raising
        // the soft limit back up to the (unchanged) hard limit is allowed.
        let status = unsafe { libc::setrlimit(libc::RLIMIT_AS, &self.0) };
        assert_eq!(status, 0, "{}", std::io::Error::last_os_error());
    }
}

// ---------------------------------------------------------------------------
// A worker thread that cannot be spawned
// ---------------------------------------------------------------------------

/// Child body of [`a_worker_that_cannot_start_fails_the_build_and_leaks_nothing`].
#[test]
#[ignore = "child process of a_worker_that_cannot_start_fails_the_build_and_leaks_nothing"]
fn child_worker_that_cannot_start() {
    let _one = common::serial();
    if !is_child() {
        return;
    }
    const STACK: usize = 256 << 20;
    // Start the threads a pool starts once per process (the watchdog's
    // monitor, the reaper of its shutdown, and with the `tokio` feature the
    // tokio runtime's thread, started by the first task), so that the
    // counts below see only the pool's own. Each is waited for by its name,
    // which a new thread takes only once it runs (until then it has its
    // creator's).
    let warm = quiet_pool(2);
    gdex::block_on(warm.scheduler().spawn(async {})).unwrap();
    drop(warm);
    wait_until(|| {
        let names = thread_names();
        names.iter().any(|n| n == "gdex-watchdog")
            && names.iter().any(|n| n == "gdex-reaper")
            && (!cfg!(feature = "tokio") || names.iter().any(|n| n == "gdex-tokio"))
    });
    let threads_before = thread_names();
    println!("threads: {threads_before:?}");
    let space_before = address_space();
    let err = {
        // Room for two worker stacks and change, not for a third.
        let _limit = AddressSpaceLimit::set(space_before + 2 * STACK + STACK / 2);
        gdex::ThreadPool::builder()
            .workers(4)
            .stack_size(STACK)
            .build()
            .expect_err("a third 256 MiB worker stack does not fit")
    };
    let message = err.to_string();
    println!("build error: {message}");
    assert!(matches!(err, gdex::Error::Failed(_)), "{err:?}");
    // Which worker, and the OS's reason (glibc's pthread_create answers
    // EAGAIN when it cannot map a stack).
    let reason = std::io::Error::from_raw_os_error(libc::EAGAIN).to_string();
    assert!(
        message.contains("gdex-worker-2") && message.contains(&reason),
        "{message}"
    );
    // Nothing leaks: the two workers that had started were joined, and
    // their stacks unmapped.
    assert_eq!(thread_names(), threads_before);
    assert!(
        address_space() < space_before + STACK,
        "{} bytes mapped after the failed build, {space_before} before",
        address_space()
    );
    // With the limit back, the same pool builds and every worker runs.
    let pool = gdex::ThreadPool::builder()
        .workers(4)
        .stack_size(STACK)
        .stall_threshold(Duration::ZERO)
        .build()
        .unwrap();
    assert_eq!(thread_names().len(), threads_before.len() + 4);
    let s = pool.scheduler();
    // Fibers are placed round-robin (F2): one on each worker.
    let fibers: Vec<_> = (0..4)
        .map(|_| s.spawn_fiber(|| std::thread::current().name().unwrap().to_owned()))
        .collect();
    let mut names: Vec<String> = fibers
        .into_iter()
        .map(|f| gdex::block_on(f).unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "gdex-worker-0",
            "gdex-worker-1",
            "gdex-worker-2",
            "gdex-worker-3"
        ]
    );
    drop(pool);
    assert_eq!(thread_names(), threads_before);
    println!("CHILD-OK");
}

/// A pool whose third worker thread cannot be created (the kernel refuses
/// its stack: `RLIMIT_AS` leaves room for two 256 MiB stacks) fails to
/// build with [`gdex::Error::Failed`] naming `gdex-worker-2` and the OS's
/// reason; the two workers that had started are joined (the process has
/// as many threads as before, and their stacks are unmapped); with the
/// limit back, the same pool builds and runs work on all four workers.
#[test]
fn a_worker_that_cannot_start_fails_the_build_and_leaks_nothing() {
    let _one = common::serial();
    if is_child() {
        return;
    }
    // One arena: glibc would otherwise reserve 64 MiB of address space per
    // thread for its malloc arenas, and the limit would be hit there.
    child_passes(
        "child_worker_that_cannot_start",
        &[("MALLOC_ARENA_MAX", "1")],
        60,
    );
}

// ---------------------------------------------------------------------------
// A fiber stack that cannot be mapped
// ---------------------------------------------------------------------------

/// Child body of [`a_fiber_stack_that_cannot_be_mapped_fails_the_spawn_and_the_pool_goes_on`].
#[test]
#[ignore = "child process of a_fiber_stack_that_cannot_be_mapped_fails_the_spawn_and_the_pool_goes_on"]
fn child_fiber_stack_that_cannot_be_mapped() {
    let _one = common::serial();
    if !is_child() {
        return;
    }
    const BIG: usize = 1 << 30;
    let panics = Arc::new(AtomicUsize::new(0));
    let p = panics.clone();
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        p.fetch_add(1, Ordering::SeqCst);
        default_hook(info);
    }));
    let pool = quiet_pool(1);
    let s = pool.scheduler();
    // A default fiber stack is mapped and pooled on the worker.
    assert_eq!(gdex::block_on(s.spawn_fiber(|| 1)).unwrap(), 1);
    let mapped = gdex::fiber::stacks_mapped();
    let ran = Arc::new(AtomicBool::new(false));
    let result = {
        let _limit = AddressSpaceLimit::set(address_space() + BIG / 2);
        let r = ran.clone();
        let refused = gdex::fiber::Builder::new()
            .stack_size(BIG)
            .spawn(&s, move || r.store(true, Ordering::SeqCst));
        let result = gdex::block_on(refused);
        // The pool goes on meanwhile: tasks, and fibers on the pooled stack.
        assert_eq!(gdex::block_on(s.spawn(async { 2 })).unwrap(), 2);
        assert_eq!(gdex::block_on(s.spawn_fiber(|| 3)).unwrap(), 3);
        result
    };
    println!("refused fiber: {result:?}");
    assert!(!ran.load(Ordering::SeqCst), "the fiber ran without a stack");
    assert_eq!(gdex::fiber::stacks_mapped(), mapped);
    let reason = std::io::Error::from_raw_os_error(libc::ENOMEM).to_string();
    match &result {
        Err(gdex::Error::Failed(e)) => assert!(
            e.message().contains("fiber stack") && e.message().contains(&reason),
            "{e}"
        ),
        other => panic!("expected Error::Failed naming the fiber stack, got {other:?}"),
    }
    assert_eq!(
        panics.load(Ordering::SeqCst),
        0,
        "a refused mapping is no panic"
    );
    // With the limit back, the same fiber gets its stack.
    let fiber = gdex::fiber::Builder::new()
        .stack_size(BIG)
        .spawn(&s, || "big stack");
    assert_eq!(gdex::block_on(fiber).unwrap(), "big stack");
    assert_eq!(gdex::fiber::stacks_mapped(), mapped + 1);
    drop(pool);
    println!("CHILD-OK");
}

/// A fiber whose stack the kernel refuses to map (a 1 GiB stack under an
/// `RLIMIT_AS` with room for half of it) resolves to
/// [`gdex::Error::Failed`] naming the fiber stack and the OS's reason
/// (`ENOMEM`), without running its closure and without a panic; its worker
/// goes on running tasks and fibers meanwhile, and with the limit back the
/// same fiber runs.
#[test]
fn a_fiber_stack_that_cannot_be_mapped_fails_the_spawn_and_the_pool_goes_on() {
    let _one = common::serial();
    if is_child() {
        return;
    }
    child_passes("child_fiber_stack_that_cannot_be_mapped", &[], 60);
}

// ---------------------------------------------------------------------------
// A panicking waker
// ---------------------------------------------------------------------------

/// A waker whose `wake` panics; counts its calls.
struct PanickingWaker(AtomicUsize);

const WAKER_PANIC: &str = "a waker that panics";

impl Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
        panic!("{WAKER_PANIC}");
    }
}

fn panicking_waker() -> (Arc<PanickingWaker>, Waker) {
    let inner = Arc::new(PanickingWaker(AtomicUsize::new(0)));
    (inner.clone(), Waker::from(inner))
}

/// Child body of [`a_panicking_waker_of_a_task_handle_is_reported_not_an_abort`].
#[test]
#[ignore = "child process of a_panicking_waker_of_a_task_handle_is_reported_not_an_abort"]
fn child_panicking_waker_of_a_task_handle() {
    let _one = common::serial();
    if !is_child() {
        return;
    }
    events();
    let pool = quiet_pool(1);
    let s = pool.scheduler();
    let (promise, value) = gdex::Promise::<u32>::new();
    let mut task = s.spawn(async move { value.await.unwrap() + 1 });
    let (calls, waker) = panicking_waker();
    assert!(poll_with(&mut task, &waker).is_pending());
    // The task finishes on the worker, which wakes our waker.
    promise.resolve(41);
    let event = wait_for_event(WAKER_PANIC);
    assert_eq!(event.source, gdex::PanicSource::Waker, "{event:?}");
    assert_eq!(event.thread.as_deref(), Some("gdex-worker-0"));
    assert_eq!(calls.0.load(Ordering::SeqCst), 1);
    // The output waits for us, and the worker lives on.
    assert!(matches!(
        poll_with(&mut task, Waker::noop()),
        Poll::Ready(Ok(42))
    ));
    assert_eq!(gdex::block_on(s.spawn(async { 7 })).unwrap(), 7);
    pool.shutdown();
    println!("CHILD-OK");
}

/// A `Task` handle polled with a waker that panics, whose task then
/// finishes on a pool worker: the worker wakes the waker, the panic goes to
/// the panic handler as [`gdex::PanicSource::Waker`] naming the worker
/// (S6, X5), the process does not abort, the output is still there for the
/// handle, and the worker runs the next task.
#[test]
fn a_panicking_waker_of_a_task_handle_is_reported_not_an_abort() {
    let _one = common::serial();
    if is_child() {
        return;
    }
    child_passes("child_panicking_waker_of_a_task_handle", &[], 60);
}

/// Set while [`SlowDrop`]'s destructor runs.
static DROPPING: AtomicBool = AtomicBool::new(false);

/// A destructor that takes 300 ms.
struct SlowDrop;

impl Drop for SlowDrop {
    fn drop(&mut self) {
        DROPPING.store(true, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
#[ignore = "child process of a_handle_polled_while_its_task_is_dropped_contains_a_panicking_waker"]
fn child_handle_polled_while_its_task_is_dropped() {
    let _one = common::serial();
    if !is_child() {
        return;
    }
    let events = Arc::new(Mutex::new(Vec::<gdex::PanicEvent>::new()));
    let seen = events.clone();
    gdex::set_panic_handler(move |e| seen.lock().unwrap().push(e.clone()));
    let pool = quiet_pool(1);
    let polled = Arc::new(AtomicUsize::new(0));
    let mut task = pool
        .scheduler()
        .spawn(common::after_first_poll(&polled, async move {
            let _slow = SlowDrop;
            std::future::pending::<()>().await
        }));
    wait_until(|| polled.load(Ordering::SeqCst) == 1);
    // Shutdown step 3 drops the idle task on the worker: async-task marks
    // it CLOSED, then drops the future (300 ms), then clears SCHEDULED and
    // notifies the handle's waker, inside its abort_on_panic.
    let closer = {
        let pool = pool.clone();
        std::thread::spawn(move || pool.shutdown())
    };
    wait_until(|| DROPPING.load(Ordering::SeqCst));
    // The task is CLOSED but still SCHEDULED: `is_finished()` is true, so
    // `contain_waker` passes our waker to async-task unwrapped, and
    // async-task registers it (closed but its future not dropped yet).
    let (calls, waker) = panicking_waker();
    assert!(task.is_finished(), "closed while its future is dropped");
    assert!(poll_with(&mut task, &waker).is_pending());
    closer.join().unwrap();
    // With the shortcut the worker aborted the process in the wake above.
    assert_eq!(calls.0.load(Ordering::SeqCst), 1);
    assert!(events
        .lock()
        .unwrap()
        .iter()
        .any(|e| e.message == WAKER_PANIC && e.source == gdex::PanicSource::Waker));
    assert!(matches!(
        poll_with(&mut task, Waker::noop()),
        Poll::Ready(Err(gdex::Error::Cancelled))
    ));
    println!("CHILD-OK");
}

/// A task handle polled while its task is being dropped contains a waker
/// that panics (X5, S9). `contain_waker` must not hand async-task the
/// caller's own waker just because `FallibleTask::is_finished()` is true,
/// assuming a finished poll leaves no waker: `is_finished` is
/// `CLOSED | COMPLETED`, and a task whose
/// `Runnable` is being dropped (shutdown step 3, the reaper) is CLOSED while
/// still SCHEDULED: async-task's `poll_task` then *registers* the waker and
/// returns Pending, and wakes it from the dropping thread inside
/// `abort_on_panic`. A foreign waker that panics there aborts the process
/// (X5 says it goes to the panic handler).
#[test]
fn a_handle_polled_while_its_task_is_dropped_contains_a_panicking_waker() {
    let _one = common::serial();
    if is_child() {
        return;
    }
    child_passes("child_handle_polled_while_its_task_is_dropped", &[], 60);
}

/// Child body of [`a_panicking_waker_on_a_promise_costs_no_other_waiter_its_value`].
#[test]
#[ignore = "child process of a_panicking_waker_on_a_promise_costs_no_other_waiter_its_value"]
fn child_panicking_waker_on_a_promise() {
    let _one = common::serial();
    if !is_child() {
        return;
    }
    events();
    let pool = quiet_pool(1);
    let s = pool.scheduler();
    let (promise, mut first) = gdex::Promise::<String>::new();
    let second = first.clone();
    let (_calls, waker) = panicking_waker();
    assert!(poll_with(&mut first, &waker).is_pending());
    // The one worker runs the waiter first (it parks behind ours), then
    // the resolver.
    let other = s.spawn(second);
    let resolver = s.spawn(async move {
        promise.resolve("value".to_owned());
        "resolved"
    });
    assert_eq!(gdex::block_on(resolver).unwrap(), "resolved");
    assert_eq!(gdex::block_on(other).unwrap().unwrap(), "value");
    let event = wait_for_event(WAKER_PANIC);
    assert_eq!(event.source, gdex::PanicSource::Waker, "{event:?}");
    assert_eq!(event.thread.as_deref(), Some("gdex-worker-0"));
    assert!(matches!(
        poll_with(&mut first, Waker::noop()),
        Poll::Ready(Ok(v)) if v == "value"
    ));
    pool.shutdown();
    println!("CHILD-OK");
}

/// A promise with two waiters, the first parked with a waker that panics,
/// resolved from a pool task: the resolving task finishes normally, the
/// other waiter gets the value, the panic goes to the panic handler as
/// [`gdex::PanicSource::Waker`] naming the worker, and the first waiter too
/// finds the value when polled again.
#[test]
fn a_panicking_waker_on_a_promise_costs_no_other_waiter_its_value() {
    let _one = common::serial();
    if is_child() {
        return;
    }
    child_passes("child_panicking_waker_on_a_promise", &[], 60);
}

/// Child body of [`a_panicking_waker_on_a_channel_receive_keeps_the_item_for_it`].
#[test]
#[ignore = "child process of a_panicking_waker_on_a_channel_receive_keeps_the_item_for_it"]
fn child_panicking_waker_on_a_channel_receive() {
    let _one = common::serial();
    if !is_child() {
        return;
    }
    events();
    let pool = quiet_pool(1);
    let s = pool.scheduler();
    let (tx, rx) = gdex::channel::<u32>(1);
    let mut recv = rx.recv();
    let (_calls, waker) = panicking_waker();
    assert!(poll_with(&mut recv, &waker).is_pending());
    let sender = s.spawn(async move {
        let sent = tx.send(5).await.is_ok();
        (sent, tx)
    });
    let (sent, tx) = gdex::block_on(sender).unwrap();
    assert!(sent);
    let event = wait_for_event(WAKER_PANIC);
    assert_eq!(event.source, gdex::PanicSource::Waker, "{event:?}");
    // The item was kept for the woken receive, which takes it.
    assert_eq!(rx.try_recv(), None);
    assert!(matches!(
        poll_with(&mut recv, Waker::noop()),
        Poll::Ready(Ok(5))
    ));
    drop(recv);
    // The channel goes on as before.
    tx.try_send(6).unwrap();
    assert_eq!(gdex::block_on(rx.recv()).unwrap(), 6);
    pool.shutdown();
    println!("CHILD-OK");
}

/// A channel receive parked with a waker that panics, then an item sent
/// from a pool task: the send succeeds, the panic goes to the panic handler
/// as [`gdex::PanicSource::Waker`], the item stays kept for that receive
/// (`try_recv` cannot take it), the receive takes it when polled again, and
/// the channel works on.
#[test]
fn a_panicking_waker_on_a_channel_receive_keeps_the_item_for_it() {
    let _one = common::serial();
    if is_child() {
        return;
    }
    child_passes("child_panicking_waker_on_a_channel_receive", &[], 60);
}

const WAKER_DROP_PANIC: &str = "a waker whose drop panics";

/// Child body of [`a_waker_whose_drop_panics_is_reported_once_a_channel_lets_go_of_it`].
#[test]
#[ignore = "child process of a_waker_whose_drop_panics_is_reported_once_a_channel_lets_go_of_it"]
fn child_waker_drop_panics_on_a_channel_receive() {
    let _one = common::serial();
    if !is_child() {
        return;
    }
    events();
    let (tx, rx) = gdex::channel::<u32>(1);
    let mut recv = rx.recv();
    let waker = common::waker_running_on_drop(|| panic!("{WAKER_DROP_PANIC}"));
    assert!(poll_with(&mut recv, &waker).is_pending());
    drop(waker);
    // The receive lets go of the first waker: its drop panics, once the
    // channel's lock is released, into the panic handler.
    assert!(poll_with(&mut recv, Waker::noop()).is_pending());
    let event = wait_for_event(WAKER_DROP_PANIC);
    assert_eq!(event.source, gdex::PanicSource::Waker, "{event:?}");
    tx.try_send(3).unwrap();
    assert!(matches!(
        poll_with(&mut recv, Waker::noop()),
        Poll::Ready(Ok(3))
    ));
    println!("CHILD-OK");
}

/// A waker whose drop panics, let go of by a channel's receive (a later
/// poll came with another waker): the panic goes to the panic handler as
/// [`gdex::PanicSource::Waker`] once the channel's lock is released, the
/// poll returns as usual, and the channel works on (X5).
#[test]
fn a_waker_whose_drop_panics_is_reported_once_a_channel_lets_go_of_it() {
    let _one = common::serial();
    if is_child() {
        return;
    }
    child_passes("child_waker_drop_panics_on_a_channel_receive", &[], 30);
}

/// Child body of [`a_waker_whose_drop_panics_is_reported_once_a_task_handle_lets_go_of_it`].
#[test]
#[ignore = "child process of a_waker_whose_drop_panics_is_reported_once_a_task_handle_lets_go_of_it"]
fn child_waker_drop_panics_on_a_task_handle() {
    let _one = common::serial();
    if !is_child() {
        return;
    }
    events();
    let pool = quiet_pool(1);
    let (release, released) = gdex::Promise::<()>::new();
    let mut task = pool.scheduler().spawn(async move {
        let _ = released.await;
        7
    });
    let waker = common::waker_running_on_drop(|| panic!("{WAKER_DROP_PANIC}"));
    assert!(poll_with(&mut task, &waker).is_pending());
    drop(waker);
    // The handle, polled with another waker, lets go of the first one.
    assert!(poll_with(&mut task, Waker::noop()).is_pending());
    let event = wait_for_event(WAKER_DROP_PANIC);
    assert_eq!(event.source, gdex::PanicSource::Waker, "{event:?}");
    release.resolve(());
    assert_eq!(gdex::block_on(task).unwrap(), 7);
    pool.shutdown();
    println!("CHILD-OK");
}

/// A waker whose drop panics, let go of by a task handle polled since with
/// another waker (async-task drops the one it replaces where unwinding
/// aborts): the panic goes to the panic handler as
/// [`gdex::PanicSource::Waker`], not an abort, and the handle resolves
/// (X5).
#[test]
fn a_waker_whose_drop_panics_is_reported_once_a_task_handle_lets_go_of_it() {
    let _one = common::serial();
    if is_child() {
        return;
    }
    child_passes("child_waker_drop_panics_on_a_task_handle", &[], 30);
}

/// Where the child's panic handler forwards the events.
static FORWARD: OnceLock<gdex::Sender<String>> = OnceLock::new();

#[test]
#[ignore = "child process of the_panic_handler_may_send_on_the_channel_whose_waker_panicked"]
fn child_panic_handler_sends_on_the_same_channel() {
    let _one = common::serial();
    if !is_child() {
        return;
    }
    let (tx, rx) = gdex::channel::<String>(16);
    FORWARD.set(tx.clone()).ok().unwrap();
    // The pattern panic.rs suggests: the handler forwards the event to
    // whoever shows it, here over a gdex channel.
    gdex::set_panic_handler(|event| {
        let _ = FORWARD.get().unwrap().try_send(event.message.clone());
    });
    let (_calls, waker) = panicking_waker();
    {
        let mut recv = std::pin::pin!(rx.recv());
        assert!(recv
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        // The send wakes the receiver's waker under the channel's lock;
        // the panic goes to the handler, still under that lock, and the
        // handler's try_send takes the same lock: self-deadlock.
        let sent = std::thread::spawn(move || tx.try_send("first".to_owned()).is_ok());
        let deadline = Instant::now() + Duration::from_secs(5);
        while !sent.is_finished() {
            if Instant::now() > deadline {
                // Not a panic: unwinding would drop `recv`, which takes the
                // channel's lock too, and hang this thread as well.
                println!("try_send hung: the panic handler re-entered the channel's lock");
                std::process::exit(3);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(sent.join().unwrap());
    }
    assert_eq!(rx.try_recv().as_deref(), Some("first"));
    assert_eq!(rx.try_recv().as_deref(), Some(WAKER_PANIC));
    println!("CHILD-OK");
}

/// The panic handler may send on the channel whose waker panicked (X5).
/// Were `crate::panic::wake` called with the primitive's lock held (by
/// `WaitQueue::notify_one`: a channel's, a promise's, a semaphore's; the
/// blocking lane's state lock in `on_exit`), the user's panic handler would
/// run under that lock: a handler that forwards the event over a gdex
/// channel (what panic.rs suggests for a GTK app: "sends the event to the
/// main thread") would deadlock its thread when the waker that panicked
/// was a waiter of that same channel.
#[test]
fn the_panic_handler_may_send_on_the_channel_whose_waker_panicked() {
    let _one = common::serial();
    if is_child() {
        return;
    }
    child_passes("child_panic_handler_sends_on_the_same_channel", &[], 30);
}

/// Child body of [`a_panicking_waker_on_a_timer_leaves_the_watchdog_and_the_worker_running`].
#[test]
#[ignore = "child process of a_panicking_waker_on_a_timer_leaves_the_watchdog_and_the_worker_running"]
fn child_panicking_waker_on_a_timer() {
    let _one = common::serial();
    if !is_child() {
        return;
    }
    events();
    let pool = quiet_pool(2);
    let s = pool.scheduler();
    // 1. A timer due while its worker sits in one long poll is raised by
    //    the watchdog's monitor (P8: a timer follows its task): the worker
    //    does not dispatch its context meanwhile. (20 ms: long enough that
    //    the timer is surely pending when first polled, right after it is
    //    made.)
    let stuck = s.spawn(async {
        let (_calls, waker) = panicking_waker();
        let mut sleep = Box::pin(gdex::sleep(Duration::from_millis(20)));
        assert!(sleep
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        // Stay in this poll until the timer has been raised.
        loop {
            if let Some(event) = find_event(WAKER_PANIC) {
                return event;
            }
            std::hint::spin_loop();
        }
    });
    let event = gdex::block_on(stuck).unwrap();
    assert_eq!(event.source, gdex::PanicSource::Waker, "{event:?}");
    assert_eq!(event.thread.as_deref(), Some("gdex-watchdog"));
    events().lock().unwrap().clear();
    // The monitor lives on: it raises the next such timer too.
    let stuck = s.spawn(async {
        let woken = Arc::new(WokenOn::default());
        let waker = Waker::from(woken.clone());
        let mut sleep = Box::pin(gdex::sleep(Duration::from_millis(20)));
        assert!(sleep
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        loop {
            if let Some(thread) = woken.0.lock().unwrap().clone() {
                return thread;
            }
            std::hint::spin_loop();
        }
    });
    assert_eq!(gdex::block_on(stuck).unwrap(), "gdex-watchdog");
    // 2. A timer raised by its own worker's loop (gdex's timer source).
    let sleep = gdex::block_on(s.spawn(async {
        let (_calls, waker) = panicking_waker();
        let mut sleep = Box::pin(gdex::sleep(Duration::from_millis(20)));
        assert!(sleep
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        // Returns: the worker's loop dispatches the timer when it is due.
        // (Kept, not awaited: its waker is the one that panics.)
        Kept(sleep)
    }))
    .unwrap();
    let event = wait_for_event(WAKER_PANIC);
    assert_eq!(event.source, gdex::PanicSource::Waker, "{event:?}");
    assert!(event.thread.as_deref().unwrap().starts_with("gdex-worker-"));
    drop(sleep);
    assert_eq!(gdex::block_on(s.spawn(async { 7 })).unwrap(), 7);
    pool.shutdown();
    println!("CHILD-OK");
}

/// A future kept alive without being awaited.
struct Kept<F>(#[allow(dead_code)] F);

/// A waker that records the thread it was woken on.
#[derive(Default)]
struct WokenOn(Mutex<Option<String>>);

impl Wake for WokenOn {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let name = std::thread::current().name().map(str::to_owned);
        *self.0.lock().unwrap() = Some(name.unwrap_or_default());
    }
}

/// A gdex timer polled with a waker that panics, in two places. Due while
/// its worker sits in one long poll, it is raised by the watchdog's
/// monitor thread (P8): the panic goes to the panic handler as
/// [`gdex::PanicSource::Waker`] naming `gdex-watchdog`, and the monitor
/// lives on (it raises the next overdue timer of a stuck worker too).
/// Raised by its own worker's loop, it is reported the same way, naming
/// the worker, and the worker runs the next task.
#[test]
fn a_panicking_waker_on_a_timer_leaves_the_watchdog_and_the_worker_running() {
    let _one = common::serial();
    if is_child() {
        return;
    }
    child_passes("child_panicking_waker_on_a_timer", &[], 60);
}

/// A panic payload whose own destructor panics.
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        panic!("a panic payload's destructor");
    }
}

/// A waker whose `wake` panics with a [`PanicsOnDrop`] payload.
struct BombWaker;

impl Wake for BombWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        std::panic::panic_any(PanicsOnDrop);
    }
}

#[test]
#[ignore = "child process of a_waker_panic_whose_payload_panics_on_drop_is_contained"]
fn child_waker_payload_panics_on_drop() {
    let _one = common::serial();
    if !is_child() {
        return;
    }
    let events = Arc::new(Mutex::new(Vec::<gdex::PanicEvent>::new()));
    let seen = events.clone();
    gdex::set_panic_handler(move |e| seen.lock().unwrap().push(e.clone()));
    let pool = quiet_pool(1);
    let s = pool.scheduler();
    let (promise, value) = gdex::Promise::<u32>::new();
    let mut task = s.spawn(async move { value.await.unwrap() + 1 });
    let waker = Waker::from(Arc::new(BombWaker));
    assert!(poll_with(&mut task, &waker).is_pending());
    promise.resolve(41);
    wait_until(|| {
        events
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.source == gdex::PanicSource::Waker)
    });
    assert!(matches!(
        poll_with(&mut task, Waker::noop()),
        Poll::Ready(Ok(42))
    ));
    assert_eq!(gdex::block_on(s.spawn(async { 7 })).unwrap(), 7);
    println!("CHILD-OK");
}

/// A waker's panic whose payload panics when dropped is contained (X5).
/// `panic::wake` (and every other `catch_unwind` site: `report` callers in
/// task.rs, group.rs, source.rs) must not drop the caught payload outside
/// a catch: a payload whose destructor panics (std's `catch_unwind` docs
/// warn of it) would unwind out of `panic::wake`, here out of the
/// `ContainedWaker` inside async-task's `abort_on_panic` on the worker,
/// which aborts (X5 promises the panic handler).
#[test]
fn a_waker_panic_whose_payload_panics_on_drop_is_contained() {
    let _one = common::serial();
    if is_child() {
        return;
    }
    child_passes("child_waker_payload_panics_on_drop", &[], 60);
}

// ---------------------------------------------------------------------------
// A value whose Drop panics, sent through a channel or a promise
// ---------------------------------------------------------------------------

/// A value whose destructor panics (if `explode`), after counting itself.
struct Bomb {
    drops: Arc<AtomicUsize>,
    explode: bool,
}

const BOMB: &str = "a destructor that panics";

impl Drop for Bomb {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
        if self.explode {
            panic!("{BOMB}");
        }
    }
}

fn bomb(drops: &Arc<AtomicUsize>, explode: bool) -> Bomb {
    Bomb {
        drops: drops.clone(),
        explode,
    }
}

/// Child body of [`panicking_drops_of_channel_and_promise_values_reach_whoever_drops_them`].
#[test]
#[ignore = "child process of panicking_drops_of_channel_and_promise_values_reach_whoever_drops_them"]
fn child_panicking_drops_where_they_are_dropped() {
    let _one = common::serial();
    if !is_child() {
        return;
    }
    events();
    let pool = quiet_pool(1);
    let s = pool.scheduler();
    let drops = Arc::new(AtomicUsize::new(0));

    // A receiver dropped with items queued, in a task: the task panics.
    let (tx, rx) = gdex::channel(3);
    for explode in [false, true, false] {
        assert!(tx.try_send(bomb(&drops, explode)).is_ok());
    }
    let dropper = s.spawn(async move { drop(rx) });
    assert!(matches!(gdex::block_on(dropper), Err(gdex::Error::Panicked(m)) if m == BOMB));
    assert_eq!(drops.load(Ordering::SeqCst), 3, "each item dropped once");
    // The channel is closed, not broken: the sender is told.
    assert!(matches!(
        tx.try_send(bomb(&drops, false)),
        Err(gdex::TrySendError::Closed(_))
    ));
    assert_eq!(drops.load(Ordering::SeqCst), 4);
    drop(tx);

    // A whole channel dropped unreceived by a detached task: its panic has
    // no waiter and goes to the panic handler.
    drops.store(0, Ordering::SeqCst);
    let d = drops.clone();
    s.spawn(async move {
        let (tx, rx) = gdex::channel(2);
        assert!(tx.try_send(bomb(&d, true)).is_ok());
        assert!(tx.try_send(bomb(&d, false)).is_ok());
        drop((tx, rx));
    })
    .detach();
    let event = wait_for_event(BOMB);
    assert_eq!(event.source, gdex::PanicSource::Task, "{event:?}");
    assert_eq!(drops.load(Ordering::SeqCst), 2);
    events().lock().unwrap().clear();

    // A resolved promise whose future is dropped unread, in a task.
    drops.store(0, Ordering::SeqCst);
    let (promise, future) = gdex::Promise::new();
    promise.resolve(bomb(&drops, true));
    let dropper = s.spawn(async move { drop(future) });
    assert!(matches!(gdex::block_on(dropper), Err(gdex::Error::Panicked(m)) if m == BOMB));
    assert_eq!(drops.load(Ordering::SeqCst), 1);

    // A promise's value taken by its waiter is the waiter's to drop.
    let (promise, future) = gdex::Promise::new();
    let waiter = s.spawn(async move {
        let value = future.await;
        assert!(value.is_ok());
        drop(value);
    });
    promise.resolve(bomb(&drops, true));
    assert!(matches!(gdex::block_on(waiter), Err(gdex::Error::Panicked(m)) if m == BOMB));
    assert_eq!(drops.load(Ordering::SeqCst), 2);

    // The worker lived through all of it.
    assert_eq!(gdex::block_on(s.spawn(async { 7 })).unwrap(), 7);
    pool.shutdown();
    assert_eq!(drops.load(Ordering::SeqCst), 2, "nothing dropped twice");
    println!("CHILD-OK");
}

/// Values whose destructor panics, sent through a `gdex::channel` or a
/// `gdex::Promise`, are dropped exactly once, by whoever drops the channel
/// or promise, and the panic surfaces there the documented way (S6, X5): a
/// task that drops a receiver with such items queued (or a promise future
/// holding one) resolves to `Panicked`, the other items are dropped too,
/// the channel is closed cleanly (a sender gets `Closed` back); a detached
/// task's goes to the panic handler; a value taken by a waiter is the
/// waiter's to drop. The worker survives every one.
#[test]
fn panicking_drops_of_channel_and_promise_values_reach_whoever_drops_them() {
    let _one = common::serial();
    if is_child() {
        return;
    }
    child_passes("child_panicking_drops_where_they_are_dropped", &[], 60);
}

/// Child body of [`panicking_drops_of_values_inside_tasks_at_shutdown_go_to_the_panic_handler`].
#[test]
#[ignore = "child process of panicking_drops_of_values_inside_tasks_at_shutdown_go_to_the_panic_handler"]
fn child_panicking_drops_in_tasks_at_shutdown() {
    let _one = common::serial();
    if !is_child() {
        return;
    }
    events();
    let pool = quiet_pool(2);
    let s = pool.scheduler();
    let drops = Arc::new(AtomicUsize::new(0));
    let waiting = Arc::new(AtomicUsize::new(0));
    let (_never, never) = gdex::Promise::<()>::new();
    // A task holding a receiver with items queued, waiting on something
    // else.
    let (tx, rx) = gdex::channel(2);
    assert!(tx.try_send(bomb(&drops, true)).is_ok());
    assert!(tx.try_send(bomb(&drops, false)).is_ok());
    let w = waiting.clone();
    let holds_receiver = s.spawn(async move {
        let _rx = rx;
        w.fetch_add(1, Ordering::SeqCst);
        let _ = never.await;
    });
    // A pinned task holding a resolved promise's future.
    let (promise, future) = gdex::Promise::new();
    promise.resolve(bomb(&drops, true));
    let (_never, never) = gdex::Promise::<()>::new();
    let w = waiting.clone();
    let holds_promise = pool.spawn_pinned(move || async move {
        let _future = future;
        w.fetch_add(1, Ordering::SeqCst);
        let _ = never.await;
    });
    // A task blocked sending into a full channel.
    let (full_tx, full_rx) = gdex::channel(1);
    assert!(full_tx.try_send(bomb(&drops, false)).is_ok());
    let (w, d) = (waiting.clone(), drops.clone());
    let blocked_send = s.spawn(async move {
        w.fetch_add(1, Ordering::SeqCst);
        let _ = full_tx.send(bomb(&d, true)).await;
    });
    wait_until(|| waiting.load(Ordering::SeqCst) == 3);
    pool.shutdown();
    for task in [holds_receiver, holds_promise, blocked_send] {
        assert!(matches!(gdex::block_on(task), Err(gdex::Error::Cancelled)));
    }
    // Three bombs went off, each once, on a worker; the two quiet items
    // inside the pool went with them.
    assert_eq!(drops.load(Ordering::SeqCst), 4);
    let events = events().lock().unwrap().clone();
    let bombs: Vec<_> = events.iter().filter(|e| e.message == BOMB).collect();
    assert_eq!(bombs.len(), 3, "{events:?}");
    for e in &bombs {
        assert_eq!(e.source, gdex::PanicSource::Drop, "{e:?}");
        assert!(
            e.thread.as_deref().unwrap().starts_with("gdex-worker-"),
            "{e:?}"
        );
    }
    drop((tx, full_rx));
    assert_eq!(drops.load(Ordering::SeqCst), 5, "the full channel's item");
    println!("CHILD-OK");
}

/// At pool shutdown, values whose destructor panics inside tasks (a
/// receiver with such items queued, a resolved promise's future holding
/// one, a send blocked on a full channel holding one) are dropped on their
/// worker with the tasks' futures (S9), each once; each panic goes to the
/// panic handler as [`gdex::PanicSource::Drop`] naming the worker (S6,
/// X5), `shutdown` returns normally, and every task resolves to
/// `Cancelled`.
#[test]
fn panicking_drops_of_values_inside_tasks_at_shutdown_go_to_the_panic_handler() {
    let _one = common::serial();
    if is_child() {
        return;
    }
    child_passes("child_panicking_drops_in_tasks_at_shutdown", &[], 60);
}

/// Child body of [`panicking_drops_of_values_in_unrun_work_items_at_shutdown_go_to_the_panic_handler`].
#[test]
#[ignore = "child process of panicking_drops_of_values_in_unrun_work_items_at_shutdown_go_to_the_panic_handler"]
fn child_panicking_drops_in_work_items_at_shutdown() {
    let _one = common::serial();
    if !is_child() {
        return;
    }
    events();
    let criticals = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = criticals.clone();
    glib::log_set_handler(
        Some("gdex"),
        glib::LogLevels::LEVEL_CRITICAL,
        false,
        false,
        move |_, _, message| sink.lock().unwrap().push(message.to_owned()),
    );
    let pool = quiet_pool(1);
    let s = pool.scheduler();
    let drops = Arc::new(AtomicUsize::new(0));
    let ran = Arc::new(AtomicUsize::new(0));
    // Each work item holds a receiver with an item whose destructor
    // panics, and a promise whose waiter must hear of it.
    let item = |on: &str| {
        let (tx, rx) = gdex::channel(1);
        assert!(tx.try_send(bomb(&drops, true)).is_ok());
        let (promise, waiter) = gdex::Promise::<()>::new();
        let ran = ran.clone();
        let on = on.to_owned();
        let work = move || {
            let _ = (rx, promise);
            ran.fetch_add(1, Ordering::SeqCst);
            unreachable!("the work item {on} ran");
        };
        (work, waiter)
    };
    // The worker sits in one task until the pool closes; meanwhile one item
    // waits on its own deque and one in the injector. Neither ever runs.
    let (queued_on_worker, waiter_on_worker) = item("on the worker");
    let (queued_outside, waiter_outside) = item("outside");
    let (s2, closing) = (s.clone(), pool.clone());
    let pushed = Arc::new(AtomicBool::new(false));
    let p = pushed.clone();
    s.spawn(async move {
        s2.push(queued_on_worker);
        p.store(true, Ordering::SeqCst);
        while !closing.is_closed() {
            std::hint::spin_loop();
        }
    })
    .detach();
    wait_until(|| pushed.load(Ordering::SeqCst));
    s.push(queued_outside);
    pool.shutdown();
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    assert_eq!(drops.load(Ordering::SeqCst), 2, "each item dropped once");
    for waiter in [waiter_on_worker, waiter_outside] {
        assert!(matches!(gdex::block_on(waiter), Err(gdex::Error::Dropped)));
    }
    let events = events().lock().unwrap().clone();
    let bombs: Vec<_> = events.iter().filter(|e| e.message == BOMB).collect();
    assert_eq!(bombs.len(), 2, "{events:?}");
    for e in &bombs {
        assert_eq!(e.source, gdex::PanicSource::Drop, "{e:?}");
    }
    // Where each was dropped: by the worker, and by this thread's shutdown.
    // (This thread is the test harness's, named after the test's path.)
    let mut threads: Vec<_> = bombs.iter().map(|e| e.thread.clone().unwrap()).collect();
    threads.sort();
    let this = std::thread::current().name().unwrap().to_owned();
    assert!(this.ends_with("child_panicking_drops_in_work_items_at_shutdown"));
    assert_eq!(threads, [this.as_str(), "gdex-worker-0"]);
    let criticals = criticals.lock().unwrap().clone();
    assert!(
        criticals
            .iter()
            .all(|c| !c.contains("panicked during shutdown")),
        "{criticals:?}"
    );
    println!("CHILD-OK");
}

/// At pool shutdown, work items (S3) that never ran are dropped: one on
/// its worker's deque (dropped by the worker), one in the injector
/// (dropped by the thread that shuts the pool down). Each holds a receiver
/// with an item whose destructor panics, and a promise: each item is
/// dropped once, each panic goes to the panic handler as
/// [`gdex::PanicSource::Drop`] (as a cancelled task's would, S6, X5), the
/// worker thread does not die of it, `shutdown` returns normally, and the
/// promises' waiters get `Dropped`.
#[test]
fn panicking_drops_of_values_in_unrun_work_items_at_shutdown_go_to_the_panic_handler() {
    let _one = common::serial();
    if is_child() {
        return;
    }
    child_passes("child_panicking_drops_in_work_items_at_shutdown", &[], 60);
}

/// What a one-word capture saw: runs, drops.
#[derive(Default)]
struct Counts {
    runs: AtomicUsize,
    drops: AtomicUsize,
}

/// One word (an `Arc`): a closure capturing only this is kept inline in its
/// job. Its drop counts and, if `BOOM` says so, panics.
struct InlineBomb<const BOOM: bool>(Arc<Counts>);

impl<const BOOM: bool> Drop for InlineBomb<BOOM> {
    fn drop(&mut self) {
        self.0.drops.fetch_add(1, Ordering::SeqCst);
        if BOOM && !std::thread::panicking() {
            panic!("an inline item's bomb went off");
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
/// neighbours (9 to 16 bytes, 16-byte aligned, zero-sized) run once too
/// (S3, S6, X5). (The unrun items of
/// [`panicking_drops_of_values_in_unrun_work_items_at_shutdown_go_to_the_panic_handler`]
/// are boxed: their closures hold two values.)
#[test]
fn inline_work_items_run_or_drop_once_and_report_their_panics_once() {
    let _one = common::serial();
    common::watchdog(
        "inline_work_items_run_or_drop_once_and_report_their_panics_once",
        60,
        || {
            let events = Arc::new(Mutex::new(Vec::<gdex::PanicEvent>::new()));
            let log = events.clone();
            gdex::set_panic_handler(move |e| {
                if e.message.starts_with("an inline item's") {
                    log.lock().unwrap().push(e.clone());
                }
            });
            let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
            let s = pool.scheduler();
            let done = Arc::new(AtomicUsize::new(0));

            // Runs, then its capture's destructor panics.
            let a = Arc::new(Counts::default());
            let bomb = InlineBomb::<true>(a.clone());
            let f = move || {
                let bomb = bomb;
                bomb.0.runs.fetch_add(1, Ordering::SeqCst);
            };
            assert_eq!(std::mem::size_of_val(&f), std::mem::size_of::<usize>());
            s.push(f);
            // Its run panics; its capture is dropped in the unwind.
            let b = Arc::new(Counts::default());
            let quiet = InlineBomb::<false>(b.clone());
            s.push(move || {
                quiet.0.runs.fetch_add(1, Ordering::SeqCst);
                panic!("an inline item's run panicked");
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
            let (p, on_worker) = (pushed.clone(), InlineBomb::<true>(c.clone()));
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
            let outside = InlineBomb::<true>(c.clone());
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
            let bomb = "an inline item's bomb went off".to_owned();
            assert_eq!(
                seen,
                [
                    (gdex::PanicSource::Drop, bomb.clone()),
                    (gdex::PanicSource::Drop, bomb.clone()),
                    (gdex::PanicSource::WorkItem, bomb),
                    (
                        gdex::PanicSource::WorkItem,
                        "an inline item's run panicked".into()
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

// ---------------------------------------------------------------------------
// A GLib source callback that panics on a worker
// ---------------------------------------------------------------------------

/// Child body of [`a_panicking_glib_callback_on_a_worker_aborts_the_process_with_its_message`].
#[test]
#[ignore = "child process of a_panicking_glib_callback_on_a_worker_aborts_the_process_with_its_message"]
fn child_panicking_glib_callback_on_a_worker() {
    let _one = common::serial();
    if !is_child() {
        return;
    }
    events();
    let pool = quiet_pool(1);
    let s = pool.scheduler();
    // The same fault as a future awaited by a task is the task's panic.
    let contained = s.spawn(async {
        glib::timeout_future(Duration::from_millis(1)).await;
        panic!("a panic after a GLib timeout");
    });
    assert!(matches!(
        gdex::block_on(contained),
        Err(gdex::Error::Panicked(m)) if m == "a panic after a GLib timeout"
    ));
    println!("CONTAINED-OK");
    // A raw GLib callback, attached to the worker's context (its
    // thread-default one: `glib::idle_add_local` would attach to the global
    // default context, which only the main thread runs).
    let attached = s.spawn(async {
        glib::idle_source_new(None, glib::Priority::DEFAULT_IDLE, || {
            panic!("a GLib callback that panics")
        })
        .attach(Some(&glib::MainContext::ref_thread_default()));
    });
    gdex::block_on(attached).unwrap();
    // The worker dispatches it next; nothing returns from there.
    loop {
        std::thread::park();
    }
}

/// A GLib source callback that panics on a pool worker (here an idle
/// source a task attached to its worker's context) aborts the
/// process, with the panic's message and Rust's "panic in a function that
/// cannot unwind" on stderr. This is glib-rs's rule, on any thread: its
/// source trampolines are `extern "C"` functions, which cannot unwind, and
/// gdex has no frame between the callback and the trampoline where it could
/// catch the panic. What gdex guarantees is documented in `gdex::panic`
/// (X5): the same event awaited as a future in a task
/// (`glib::timeout_future(..).await` then the panic) is the task's panic,
/// `Error::Panicked` for its waiter, as the first half of the child shows.
#[test]
fn a_panicking_glib_callback_on_a_worker_aborts_the_process_with_its_message() {
    let _one = common::serial();
    if is_child() {
        return;
    }
    let (status, out) = run_child("child_panicking_glib_callback_on_a_worker", &[], 60);
    use std::os::unix::process::ExitStatusExt;
    let status = status.expect("the child ended by itself");
    assert!(out.contains("CONTAINED-OK"), "{out}");
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{status}:\n{out}");
    assert!(
        out.contains("a GLib callback that panics")
            && out.contains("panic in a function that cannot unwind"),
        "{out}"
    );
    assert!(out.contains("gdex-worker-0"), "{out}");
}

// ---------------------------------------------------------------------------
// A batch refused by a closed pool
// ---------------------------------------------------------------------------

const REFUSED: &str = "a refused closure's destructor";

/// Panics when dropped, with [`REFUSED`].
struct RefusedBomb;

impl Drop for RefusedBomb {
    fn drop(&mut self) {
        panic!("{REFUSED}");
    }
}

#[test]
#[ignore = "child process of a_batch_refused_by_a_closed_pool_contains_panicking_drops"]
fn child_batch_refused_by_a_closed_pool() {
    let _one = common::serial();
    if !is_child() {
        return;
    }
    let seen = events();
    // Each pool closes while its batch is made, after the call's own check.
    let pool = quiet_pool(2);
    let s = pool.scheduler();
    let mut fibers = Vec::new();
    s.spawn_fibers(
        (0..3).map(|i| {
            if i == 0 {
                pool.shutdown();
            }
            let bomb = RefusedBomb;
            move || drop(bomb)
        }),
        &mut fibers,
    );
    let other = quiet_pool(2);
    let mut tasks = Vec::new();
    other.scheduler().spawn_many(
        (0..2).map(|i| {
            if i == 0 {
                other.shutdown();
            }
            let bomb = RefusedBomb;
            async move { drop(bomb) }
        }),
        &mut tasks,
    );
    // The single spawns, for the same account.
    let single = s.spawn_fiber({
        let bomb = RefusedBomb;
        move || drop(bomb)
    });
    for fiber in fibers.into_iter().chain([single]) {
        assert!(matches!(gdex::block_on(fiber), Err(gdex::Error::ShutDown)));
    }
    for task in tasks {
        assert!(matches!(gdex::block_on(task), Err(gdex::Error::ShutDown)));
    }
    let events = seen.lock().unwrap().clone();
    let bombs: Vec<_> = events.iter().filter(|e| e.message == REFUSED).collect();
    assert_eq!(bombs.len(), 6, "{events:?}");
    for e in &bombs {
        assert_eq!(e.source, gdex::PanicSource::Drop, "{e:?}");
    }
    println!("CHILD-OK");
}

/// A batch (`spawn_fibers`, `spawn_many`) whose pool shuts down while it
/// is made refuses each item made after as a single spawn does (S9): each handle
/// resolves to `ShutDown`, and a closure or future whose destructor
/// panics is dropped unrun with its panic contained and sent to the panic
/// handler as [`gdex::PanicSource::Drop`] (S6, X5), not unwound into the
/// caller.
#[test]
fn a_batch_refused_by_a_closed_pool_contains_panicking_drops() {
    let _one = common::serial();
    if is_child() {
        return;
    }
    child_passes("child_batch_refused_by_a_closed_pool", &[], 60);
}
