//! The toolkit keeps the promises its docs make (issue 19 points 7, 8, 10,
//! 11 and the `blocking::blocking` docs line): a cancelled `Cancellable::run`
//! never starts its future, the channel serves waiters in arrival order even
//! when `try_recv`/`try_send` race a woken waiter, a `BlockingPool` close
//! future holds one waker however often it is polled, a late clone of a
//! `PromiseFuture` resolves instead of panicking, and a one-worker pool's
//! queue waits behind `blocking`, as documented.

mod common;

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};

use common::{stress, watchdog, Counted};

/// A waker that counts its wakes.
struct CountWaker(AtomicUsize);

impl std::task::Wake for CountWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn count_waker() -> (Arc<CountWaker>, Waker) {
    let count = Arc::new(CountWaker(AtomicUsize::new(0)));
    (count.clone(), Waker::from(count))
}

fn wakes(count: &CountWaker) -> usize {
    count.0.load(Ordering::SeqCst)
}

fn poll_with<F: Future + ?Sized>(f: Pin<&mut F>, waker: &Waker) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(waker))
}

// ---------------------------------------------------------------------------
// Point 7: Cancellable::run
// ---------------------------------------------------------------------------

/// A future that records each poll and its drop, and never finishes.
struct Probe {
    polls: Arc<AtomicUsize>,
    _drop: Counted,
}

impl Future for Probe {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        Poll::Pending
    }
}

#[test]
fn cancellable_run_on_an_already_cancelled_cancellable_never_starts_the_future() {
    let cancellable = gdex::Cancellable::new();
    cancellable.cancel();
    let (polls, drops) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let probe = Probe {
        polls: polls.clone(),
        _drop: Counted(drops.clone()),
    };
    let result = gdex::block_on(cancellable.run(probe));
    assert!(matches!(result, Err(gdex::Error::Cancelled)), "{result:?}");
    assert_eq!(polls.load(Ordering::SeqCst), 0, "the future was started");
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "the future was not dropped"
    );

    // A future that would finish at once does not run either: its result
    // is the cancellation, not its value.
    let ran = AtomicBool::new(false);
    let result = gdex::block_on(cancellable.run(async {
        ran.store(true, Ordering::SeqCst);
        7
    }));
    assert!(matches!(result, Err(gdex::Error::Cancelled)), "{result:?}");
    assert!(!ran.load(Ordering::SeqCst), "the future ran once");

    // The same when the GIO side was cancelled.
    let gio_side = gio::Cancellable::new();
    gio::prelude::CancellableExt::cancel(&gio_side);
    let ran = AtomicBool::new(false);
    let result = gdex::block_on(
        gdex::Cancellable::from(gio_side).run(async { ran.store(true, Ordering::SeqCst) }),
    );
    assert!(matches!(result, Err(gdex::Error::Cancelled)), "{result:?}");
    assert!(!ran.load(Ordering::SeqCst), "the future ran once");
}

#[test]
fn cancellable_run_stops_polling_its_future_once_cancelled() {
    let cancellable = gdex::Cancellable::new();
    let (polls, drops) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let probe = Probe {
        polls: polls.clone(),
        _drop: Counted(drops.clone()),
    };
    let (woken, waker) = count_waker();
    let mut run = pin!(cancellable.run(probe));
    assert!(poll_with(run.as_mut(), &waker).is_pending());
    assert_eq!(polls.load(Ordering::SeqCst), 1);
    cancellable.cancel();
    assert!(wakes(&woken) >= 1, "cancelling did not wake the run");
    assert!(matches!(
        poll_with(run.as_mut(), &waker),
        Poll::Ready(Err(gdex::Error::Cancelled))
    ));
    assert_eq!(
        polls.load(Ordering::SeqCst),
        1,
        "the future was polled after the cancel"
    );
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "the future was not dropped"
    );
}
