//! `Limiter` and `Semaphore`: slots held by pool work, shared drains, what
//! counts as queued, and permits added in bulk (issue 19 points 3, 5, 6, 9;
//! issue 20 point 2).

mod common;

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use common::{wait_until, watchdog};

fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    let waker = futures::task::noop_waker();
    std::pin::Pin::new(f).poll(&mut Context::from_waker(&waker))
}

/// Counts its wake-ups.
struct WakeCount(AtomicUsize);

impl Wake for WakeCount {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Issue 19 point 9: adding half of `usize::MAX` permits costs what the
/// waiters cost, not one step per permit (it used to loop that many times
/// under the lock, so it never returned): it returns, every waiter gets
/// its permit in order, and the rest are free.
#[test]
fn add_permits_of_half_usize_max_returns_and_wakes_every_waiter() {
    watchdog(
        "add_permits_of_half_usize_max_returns_and_wakes_every_waiter",
        30,
        || {
            let sem = gdex::Semaphore::new(0);
            let mut waiters: Vec<_> = (0..3)
                .map(|_| {
                    let count = Arc::new(WakeCount(AtomicUsize::new(0)));
                    (Box::pin(sem.acquire()), count)
                })
                .collect();
            for (acquire, count) in &mut waiters {
                let waker = Waker::from(count.clone());
                let poll = acquire.as_mut().poll(&mut Context::from_waker(&waker));
                assert!(poll.is_pending());
            }
            sem.add_permits(usize::MAX / 2);
            let mut permits = Vec::new();
            for (acquire, count) in &mut waiters {
                assert_eq!(count.0.load(Ordering::SeqCst), 1, "a waiter was not woken");
                let Poll::Ready(Ok(permit)) = poll_once(acquire) else {
                    panic!("a woken waiter got no permit")
                };
                permits.push(permit);
            }
            assert_eq!(sem.available_permits(), usize::MAX / 2 - 3);
            drop(permits);
            assert_eq!(sem.available_permits(), usize::MAX / 2);

            // Real threads waiting in `block_on`, then a huge add.
            let sem = gdex::Semaphore::new(0);
            let parked = Arc::new(AtomicUsize::new(0));
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    let (sem, parked) = (sem.clone(), parked.clone());
                    std::thread::spawn(move || {
                        let mut acquire = Box::pin(sem.acquire());
                        if poll_once(&mut acquire).is_pending() {
                            parked.fetch_add(1, Ordering::SeqCst);
                        }
                        let permit = gdex::block_on(acquire).expect("not closed");
                        std::mem::forget(permit);
                    })
                })
                .collect();
            wait_until(|| parked.load(Ordering::SeqCst) == 4);
            sem.add_permits(usize::MAX - 1);
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(sem.available_permits(), usize::MAX - 1 - 4);
        },
    );
}

/// Issue 19 point 9: the permit count never wraps. Adding more than fits
/// beside the permits there are, free or held, panics with a message that
/// names the counts, and leaves the semaphore as it was.
#[test]
fn add_permits_that_would_overflow_panics_naming_the_count() {
    let sem = gdex::Semaphore::new(usize::MAX);
    // One held: the free count alone would have room for one more, but
    // giving the held one back would then wrap.
    let held = sem.try_acquire().unwrap();
    let Err(err) = catch_unwind(AssertUnwindSafe(|| sem.add_permits(1))) else {
        // Giving `held` back now would wrap the count.
        std::mem::forget(held);
        panic!("an add past usize::MAX permits (free and held) was accepted");
    };
    let msg = err
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_else(|| format!("{:?}", err.downcast_ref::<&str>()));
    assert!(
        msg.contains("add_permits(1)") && msg.contains(&usize::MAX.to_string()),
        "unclear message: {msg}"
    );
    assert!(msg.contains("overflow"), "unclear message: {msg}");
    assert_eq!(sem.available_permits(), usize::MAX - 1);
    drop(held);
    assert_eq!(sem.available_permits(), usize::MAX);

    let sem = gdex::Semaphore::new(5);
    let err = catch_unwind(AssertUnwindSafe(|| sem.add_permits(usize::MAX)))
        .expect_err("an add past usize::MAX permits was accepted");
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        msg.contains(&format!("add_permits({})", usize::MAX)) && msg.contains("already has 5"),
        "unclear message: {msg}"
    );
    assert_eq!(sem.available_permits(), 5);
    // Still usable.
    assert!(sem.try_acquire().is_some());
}
