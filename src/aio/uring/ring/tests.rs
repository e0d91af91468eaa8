//! The ring's unit tests (A1, A2): submissions, refusals, hand-backs.

use std::future::Future as _;

use super::*;
use std::cell::Cell;
use std::sync::atomic::AtomicBool;
use std::task::{Context, Poll, Waker};

use super::super::state::{FAIL_SUBMITS, TAKE_ONE};

/// The slots a context's ring holds (operations not yet taken).
fn held(context: &glib::MainContext) -> usize {
    let ring = Ring::of(context).unwrap();
    let state = ring.state.lock().unpoisoned();
    state.slots.len()
}

/// (A2) Entries that a submission left queued (the kernel short of
/// memory: `EAGAIN`, made up here) go to the kernel again a moment
/// later by themselves: nothing else need wake the loop. Here the only
/// other thing that would is a 5 s timeout.
#[test]
fn a_submission_the_kernel_refused_is_made_again_without_another_wake_up() {
    if crate::aio::backend() != crate::aio::Backend::IoUring {
        return;
    }
    let path = std::env::temp_dir().join(format!("gdex-uring-retry-{}", std::process::id()));
    std::fs::write(&path, b"retried").unwrap();
    let file = crate::aio::File::from(std::fs::File::open(&path).unwrap());
    std::fs::remove_file(&path).unwrap();
    let context = glib::MainContext::new();
    context
        .with_thread_default(|| {
            let _owner = context.acquire().unwrap();
            let late = Arc::new(AtomicBool::new(false));
            let guard = glib::timeout_source_new(
                std::time::Duration::from_secs(5),
                None,
                // Above the ring's sources: it dispatches in the turn
                // it fires in, whatever else is ready.
                glib::Priority::HIGH,
                {
                    let late = late.clone();
                    move || {
                        late.store(true, Ordering::SeqCst);
                        glib::ControlFlow::Break
                    }
                },
            );
            guard.attach(Some(&context));
            let mut cx = Context::from_waker(Waker::noop());
            // A first read sets the ring up; then the loop settles
            // (nothing is pending that would wake it).
            let mut first = Box::pin(file.read_at(Vec::with_capacity(16), 0));
            while first.as_mut().poll(&mut cx).is_pending() {
                context.iteration(true);
            }
            while context.iteration(false) {}
            let mut read = Box::pin(file.read_at(Vec::with_capacity(16), 0));
            FAIL_SUBMITS.with(|fail| fail.set(1));
            assert!(read.as_mut().poll(&mut cx).is_pending());
            let got = loop {
                context.iteration(true);
                assert!(
                    !late.load(Ordering::SeqCst),
                    "the refused submission waited for an unrelated wake-up"
                );
                if let Poll::Ready(got) = read.as_mut().poll(&mut cx) {
                    break got.unwrap();
                }
            };
            assert_eq!(FAIL_SUBMITS.with(Cell::get), 0, "the refusal was made up");
            assert_eq!(got, b"retried");
            guard.destroy();
        })
        .unwrap();
}

/// A waker that notes it was woken.
#[derive(Default)]
struct Woken(AtomicBool);

impl std::task::Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Polls `read` once on this thread's ring (`home`, owned here), then
/// runs the loop's last turn, in which every submission is refused
/// (`EAGAIN`, made up): the read is left as such a turn leaves it.
fn refused_in_the_last_turn<F: std::future::Future + Unpin>(
    home: &glib::MainContext,
    read: &mut F,
    waker: &Waker,
) {
    let mut cx = Context::from_waker(waker);
    assert!(std::pin::Pin::new(&mut *read).poll(&mut cx).is_pending());
    FAIL_SUBMITS.with(|fail| fail.set(100));
    home.iteration(false);
    let left = FAIL_SUBMITS.with(|fail| fail.replace(0));
    assert!(left < 100, "no submission was made");
}

/// Awaits `read` under `block_on` on a fresh context (up to 2 s).
fn awaited_elsewhere<F>(read: &mut F) -> Vec<u8>
where
    F: std::future::Future<Output = Result<Vec<u8>, crate::Error>> + Unpin,
{
    let elsewhere = glib::MainContext::new();
    let got = elsewhere
        .with_thread_default(|| {
            crate::block_on(crate::timeout(std::time::Duration::from_secs(2), read))
        })
        .unwrap();
    got.unwrap_or_else(|elapsed| panic!("the refused operation never completed: {elapsed}"))
        .unwrap_or_else(|err| panic!("the refused operation failed: {err}"))
}

/// (A2) An operation whose submission the kernel refused for a
/// passing reason (`EAGAIN`, made up here) completes when it is awaited
/// elsewhere after its context's loop stopped (a `block_on` that
/// returned): nobody else would submit it, so the refused entry does
/// not stay in the submission queue; it is back in the backlog, and
/// moves with its poller.
#[test]
fn an_operation_left_in_the_submission_queue_completes_awaited_elsewhere() {
    if crate::aio::backend() != crate::aio::Backend::IoUring {
        return;
    }
    let (reader, mut writer) = std::io::pipe().unwrap();
    let file = crate::aio::File::from(std::os::fd::OwnedFd::from(reader));
    let home = glib::MainContext::new();
    let mut read = home
        .with_thread_default(|| {
            let _owner = home.acquire().unwrap();
            let mut read = Box::pin(file.read_at(Vec::with_capacity(16), 0));
            refused_in_the_last_turn(&home, &mut read, Waker::noop());
            read
        })
        .unwrap();
    use std::io::Write;
    writer.write_all(b"queued").unwrap();
    assert_eq!(awaited_elsewhere(&mut read), b"queued");
    drop(home);
}

/// (A2) The same when the loop stopped because its thread exited: the
/// exit hands the refused operation back to its task (its waker is
/// woken, as for the backlog), whose next poll, elsewhere, starts it
/// there.
#[test]
fn an_operation_refused_before_its_thread_exits_completes_awaited_elsewhere() {
    if crate::aio::backend() != crate::aio::Backend::IoUring {
        return;
    }
    crate::scheduler::context::tests::watchdog(
        "an_operation_refused_before_its_thread_exits_completes_awaited_elsewhere",
        30,
        || {
            let (reader, mut writer) = std::io::pipe().unwrap();
            let file = crate::aio::File::from(std::os::fd::OwnedFd::from(reader));
            let woken = Arc::new(Woken::default());
            let mut read = std::thread::spawn({
                let woken = woken.clone();
                move || {
                    let home = glib::MainContext::new();
                    home.with_thread_default(|| {
                        let _owner = home.acquire().unwrap();
                        let mut read = Box::pin(file.read_at(Vec::with_capacity(16), 0));
                        refused_in_the_last_turn(&home, &mut read, &Waker::from(woken));
                        read
                    })
                    .unwrap()
                }
            })
            .join()
            .unwrap();
            assert!(
                woken.0.load(Ordering::SeqCst),
                "the thread's exit did not hand the refused operation back to its task"
            );
            use std::io::Write;
            writer.write_all(b"exited").unwrap();
            assert_eq!(awaited_elsewhere(&mut read), b"exited");
        },
    );
}

/// (A2) The pool's monitor, serving a context whose thread sits in one
/// long poll ([`service`]), hands an operation the kernel refused back
/// to its task as it does the backlog: the task, run elsewhere (a
/// peer), starts it there, while the owner is still busy.
#[test]
fn the_monitor_hands_a_refused_operation_of_a_busy_owner_back_to_its_task() {
    if crate::aio::backend() != crate::aio::Backend::IoUring {
        return;
    }
    crate::scheduler::context::tests::watchdog(
        "the_monitor_hands_a_refused_operation_of_a_busy_owner_back_to_its_task",
        30,
        || {
            let (reader, mut writer) = std::io::pipe().unwrap();
            let file = crate::aio::File::from(std::os::fd::OwnedFd::from(reader));
            let woken = Arc::new(Woken::default());
            let (refused, refused_here) = std::sync::mpsc::channel();
            let (release, released) = std::sync::mpsc::channel::<()>();
            let owner = std::thread::spawn({
                let woken = woken.clone();
                move || {
                    let home = glib::MainContext::new();
                    home.with_thread_default(|| {
                        let _owner = home.acquire().unwrap();
                        let mut read = Box::pin(file.read_at(Vec::with_capacity(16), 0));
                        refused_in_the_last_turn(&home, &mut read, &Waker::from(woken));
                        refused.send((read, home.clone())).unwrap();
                        // One long poll: the loop does not turn again
                        // until the test is over.
                        released.recv().unwrap();
                    })
                    .unwrap();
                }
            });
            let (mut read, home) = refused_here.recv().unwrap();
            service(&home);
            assert!(
                woken.0.load(Ordering::SeqCst),
                "the monitor did not hand the refused operation back to its task"
            );
            use std::io::Write;
            writer.write_all(b"served").unwrap();
            assert_eq!(awaited_elsewhere(&mut read), b"served");
            release.send(()).unwrap();
            owner.join().unwrap();
        },
    );
}

/// (A2) A submission the kernel took in part (offered only its first
/// entry here, as a kernel short of memory after the first would take
/// it): what it took is in the kernel and completes; what it did not
/// is back at the front of the backlog, not in the submission queue,
/// and moves with its poller. Nothing is submitted twice.
#[test]
fn a_submission_the_kernel_took_in_part_gives_back_only_the_rest() {
    if crate::aio::backend() != crate::aio::Backend::IoUring {
        return;
    }
    let path = std::env::temp_dir().join(format!("gdex-uring-part-{}", std::process::id()));
    std::fs::write(&path, b"first second").unwrap();
    let file = crate::aio::File::from(std::fs::File::open(&path).unwrap());
    std::fs::remove_file(&path).unwrap();
    let home = glib::MainContext::new();
    let _owner = home.acquire().unwrap();
    let (mut first, mut second) = home
        .with_thread_default(|| {
            let mut cx = Context::from_waker(Waker::noop());
            let mut first = Box::pin(file.read_at(Vec::with_capacity(5), 0));
            let mut second = Box::pin(file.read_at(Vec::with_capacity(6), 6));
            assert!(first.as_mut().poll(&mut cx).is_pending());
            assert!(second.as_mut().poll(&mut cx).is_pending());
            // The owner's submission, as its source's `prepare` makes it
            // (a whole turn would submit the rest again in its `check`).
            let ring = Ring::of(&home).unwrap();
            assert!(ring.owned_here());
            let mut state = ring.state.lock().unpoisoned();
            TAKE_ONE.with(|take| take.set(1));
            ring.submit(&mut state);
            assert_eq!(TAKE_ONE.with(Cell::get), 0, "no submission was made");
            let offset = |key: usize| {
                state.slots[key]
                    .operation
                    .as_ref()
                    .and_then(crate::aio::operation::Operation::offset)
            };
            assert_eq!(
                state.backlog.len(),
                1,
                "the entry not taken is in the backlog"
            );
            let left = state.backlog[0];
            assert_eq!(
                offset(left),
                Some(6),
                "the entry not taken is the last one queued"
            );
            assert_eq!(state.slots[left].phase, Phase::Backlog);
            let taken: Vec<usize> = state
                .slots
                .iter()
                .map(|(key, _)| key)
                .filter(|key| *key != left)
                .collect();
            assert_eq!(taken.len(), 1);
            assert_eq!(
                offset(taken[0]),
                Some(0),
                "the entry taken is the first one queued"
            );
            assert_eq!(state.slots[taken[0]].phase, Phase::InKernel);
            assert_eq!((state.in_flight, state.ops_in_flight), (1, 1));
            assert!(
                state.ring.submission().is_empty(),
                "nothing is left in the submission queue"
            );
            drop(state);
            (first, second)
        })
        .unwrap();
    assert_eq!(awaited_elsewhere(&mut second), b"second");
    let got = home
        .with_thread_default(|| {
            let mut cx = Context::from_waker(Waker::noop());
            loop {
                if let Poll::Ready(got) = first.as_mut().poll(&mut cx) {
                    break got.unwrap();
                }
                home.iteration(true);
            }
        })
        .unwrap();
    assert_eq!(got, b"first");
    let ring = Ring::of(&home).unwrap();
    let state = ring.state.lock().unpoisoned();
    assert_eq!(
        (state.in_flight, state.slots.len()),
        (0, 0),
        "nothing ran twice"
    );
}

/// (A2) A context is not freed while a thread that read its ring
/// `alive` holds the ring's lock (as `wake_loop_at` does, to set the
/// wake source's ready time, which touches the context): `alive` turns
/// false before the context's memory goes. GLib frees a dying context
/// before it finalizes its sources, so the ring source's drop alone
/// would be too late. Seen here by the context's wake-up eventfd, which
/// GLib closes just before it frees the context.
#[test]
fn a_context_is_not_freed_under_a_thread_that_read_its_ring_alive() {
    if crate::aio::backend() != crate::aio::Backend::IoUring {
        return;
    }
    let context = glib::MainContext::new();
    let (ring, wakeup) = context
        .with_thread_default(|| {
            let ring = Ring::of(&context).unwrap();
            // The fds the context polls: its wake-up eventfd among them.
            let mut priority = 0;
            let mut timeout = 0;
            let mut fds = [glib::ffi::GPollFD {
                fd: -1,
                events: 0,
                revents: 0,
            }; 16];
            use glib::translate::ToGlibPtr;
            let raw: *mut glib::ffi::GMainContext = context.to_glib_none().0;
            // SAFETY: this thread owns the context (pushed); the array
            // has room for the 16 fds it is told of.
            let n = unsafe {
                glib::ffi::g_main_context_prepare(raw, &mut priority);
                glib::ffi::g_main_context_query(raw, i32::MAX, &mut timeout, fds.as_mut_ptr(), 16)
            };
            let wakeup = fds[..n.clamp(0, 16) as usize]
                .iter()
                .map(|fd| fd.fd)
                .find(|&fd| is_eventfd(fd))
                .expect("a context polls its wake-up eventfd");
            (ring, wakeup)
        })
        .unwrap();
    let state = ring.state.lock().unpoisoned();
    assert!(ring.alive.load(Ordering::Acquire));
    // The last reference to the context goes on another thread, while
    // this one holds the lock having read `alive` true.
    let dropper = std::thread::spawn(move || drop(context));
    std::thread::sleep(std::time::Duration::from_millis(200));
    let still_there = is_eventfd(wakeup);
    drop(state);
    dropper.join().unwrap();
    assert!(
        still_there,
        "the context was freed while a thread that read its ring alive held the ring's lock"
    );
    assert!(!ring.alive.load(Ordering::Acquire));
}

fn is_eventfd(fd: i32) -> bool {
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .is_ok_and(|target| target.to_string_lossy().contains("eventfd"))
}

/// A read dropped while the kernel waits on it (a pipe with no data)
/// is cancelled, and its buffer stays with the ring until the kernel's
/// completion comes; the data written afterwards is still in the pipe.
#[test]
fn a_read_dropped_in_flight_is_cancelled_and_its_buffer_kept_until_it_completes() {
    if crate::aio::backend() != crate::aio::Backend::IoUring {
        return; // nothing to cancel on the blocking lane
    }
    let context = glib::MainContext::new();
    context
        .with_thread_default(|| {
            let _owner = context.acquire().unwrap();
            let (reader, writer) = std::io::pipe().unwrap();
            let file = crate::aio::File::from(std::os::fd::OwnedFd::from(reader));
            let mut read = Box::pin(file.read_at(Vec::with_capacity(16), 0));
            let mut cx = Context::from_waker(Waker::noop());
            assert!(read.as_mut().poll(&mut cx).is_pending());
            // One turn of the loop submits it; the pipe has no data.
            context.iteration(false);
            assert!(read.as_mut().poll(&mut cx).is_pending());
            assert_eq!(held(&context), 1);
            drop(read);
            // The cancel went in with the drop; the completion of the
            // read (cancelled) frees the slot when it is reaped.
            assert_eq!(
                held(&context),
                1,
                "the buffer stays until the completion is reaped"
            );
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while held(&context) > 0 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the cancelled read never completed"
                );
                context.iteration(false);
            }
            use std::io::{Read, Write};
            let mut writer = writer;
            writer.write_all(b"still here").unwrap();
            drop(writer);
            let mut rest = String::new();
            let mut reader = std::fs::File::from(file.inner.fd.try_clone().unwrap());
            reader.read_to_string(&mut rest).unwrap();
            assert_eq!(rest, "still here", "the cancelled read took nothing");
        })
        .unwrap();
}
