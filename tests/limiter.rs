//! `Limiter` and `Semaphore` (the toolkit's, DESIGN "Future toolkit"):
//! slots held by pool work, shared drains, what counts as queued, and
//! permits added in bulk.

use crate::common;

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use common::{wait_until, watchdog};

fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    let waker = futures::task::noop_waker();
    std::pin::Pin::new(f).poll(&mut Context::from_waker(&waker))
}

/// Counts how many jobs are inside their body at once, and the most seen.
#[derive(Clone, Default)]
struct Overlap {
    now: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

impl Overlap {
    fn enter(&self) {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
    }
    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
    fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }
}

/// Slots held by pool work: the caller of `run_on_pool` goes away while its
/// job is in the middle of a long poll on the pool. The job cannot stop
/// before that poll returns, so its slot must stay taken until then: the
/// next job, under a limit of 1, must not start beside it.
#[test]
fn a_dropped_run_on_pool_keeps_its_slot_until_the_pool_job_ends() {
    watchdog(
        "a_dropped_run_on_pool_keeps_its_slot_until_the_pool_job_ends",
        60,
        || {
            let limiter = gdex::Limiter::new(1);
            let overlap = Overlap::default();
            let a_started = Arc::new(AtomicBool::new(false));
            let a_may_end = Arc::new(AtomicBool::new(false));
            let b_started = Arc::new(AtomicBool::new(false));

            let mut a = Box::pin(limiter.run_on_pool({
                let (overlap, started, may_end) =
                    (overlap.clone(), a_started.clone(), a_may_end.clone());
                async move {
                    overlap.enter();
                    started.store(true, Ordering::SeqCst);
                    // One long poll: nothing can stop it from outside.
                    while !may_end.load(Ordering::SeqCst) {
                        std::hint::spin_loop();
                    }
                    overlap.leave();
                }
            }));
            // Takes the free slot and hands the job to the pool.
            assert!(poll_once(&mut a).is_pending());
            wait_until(|| a_started.load(Ordering::SeqCst));
            drop(a);

            let b = std::thread::spawn({
                let (limiter, overlap, started) =
                    (limiter.clone(), overlap.clone(), b_started.clone());
                move || {
                    gdex::block_on(limiter.run_on_pool(async move {
                        overlap.enter();
                        started.store(true, Ordering::SeqCst);
                        overlap.leave();
                    }))
                }
            });
            // Give a wrongly started `b` the time to show itself (it starts
            // within microseconds when the slot is free): `a` keeps its poll
            // going meanwhile. Well under the 100 ms stall threshold.
            // Deliberate: a window in which nothing may happen; a correct
            // limiter never starts `b` in it, however late the window.
            let window = Instant::now();
            while !b_started.load(Ordering::SeqCst) && window.elapsed() < Duration::from_millis(50)
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            let b_ran_beside_a = b_started.load(Ordering::SeqCst);
            a_may_end.store(true, Ordering::SeqCst);
            let b = b.join().expect("the thread awaiting b");
            assert!(
                !b_ran_beside_a,
                "the second job started while the dropped first one still ran"
            );
            assert_eq!(
                overlap.peak(),
                1,
                "{} jobs ran at once under a limit of 1",
                overlap.peak()
            );
            assert!(b.is_ok(), "{b:?}");
            assert!(b_started.load(Ordering::SeqCst));
        },
    );
}

/// Slots held by pool work, the other way a dropped caller's job ends:
/// parked in an await, it is cancelled (dropped on its worker), and the
/// slot is free again once it has been dropped, not before.
#[test]
fn a_dropped_run_on_pool_of_a_waiting_job_frees_its_slot_once_the_job_is_dropped() {
    watchdog(
        "a_dropped_run_on_pool_of_a_waiting_job_frees_its_slot_once_the_job_is_dropped",
        60,
        || {
            let limiter = gdex::Limiter::new(1);
            let dropped = Arc::new(AtomicUsize::new(0));
            let started = Arc::new(AtomicBool::new(false));
            let mut a = Box::pin(limiter.run_on_pool({
                let guard = common::Counted(dropped.clone());
                let started = started.clone();
                async move {
                    let _guard = guard;
                    started.store(true, Ordering::SeqCst);
                    std::future::pending::<()>().await
                }
            }));
            assert!(poll_once(&mut a).is_pending());
            wait_until(|| started.load(Ordering::SeqCst));
            drop(a);
            let seen = Arc::new(AtomicUsize::new(usize::MAX));
            let b = limiter.run_on_pool({
                let (dropped, seen) = (dropped.clone(), seen.clone());
                async move { seen.store(dropped.load(Ordering::SeqCst), Ordering::SeqCst) }
            });
            assert!(gdex::block_on(b).is_ok());
            assert_eq!(
                seen.load(Ordering::SeqCst),
                1,
                "the next job started before the cancelled one was dropped"
            );
        },
    );
}

/// Shared drains: two `close_after_drain` on one limiter of 2 with two jobs
/// running. Each used to take the permits the jobs gave back, one apiece,
/// and wait for the other's forever. They share one drain now, and both
/// return once the jobs are done.
#[test]
fn two_close_after_drain_on_one_limiter_share_the_drain_and_both_return() {
    watchdog(
        "two_close_after_drain_on_one_limiter_share_the_drain_and_both_return",
        60,
        || {
            let limiter = gdex::Limiter::new(2);
            let (release_1, wait_1) = gdex::Promise::<()>::new();
            let (release_2, wait_2) = gdex::Promise::<()>::new();
            let mut job_1 = Box::pin(limiter.run(wait_1));
            let mut job_2 = Box::pin(limiter.run(wait_2));
            assert!(poll_once(&mut job_1).is_pending());
            assert!(poll_once(&mut job_2).is_pending());

            let mut drain_1 = Box::pin(limiter.close_after_drain());
            let mut drain_2 = Box::pin(limiter.close_after_drain());
            assert!(poll_once(&mut drain_1).is_pending());
            assert!(poll_once(&mut drain_2).is_pending());

            release_1.resolve(());
            assert!(matches!(poll_once(&mut job_1), Poll::Ready(Ok(Ok(())))));
            assert!(
                poll_once(&mut drain_1).is_pending() && poll_once(&mut drain_2).is_pending(),
                "a drain returned while a job still ran"
            );
            release_2.resolve(());
            assert!(matches!(poll_once(&mut job_2), Poll::Ready(Ok(Ok(())))));
            assert!(
                poll_once(&mut drain_1).is_ready(),
                "the first drain did not return once the limiter was drained"
            );
            assert!(
                poll_once(&mut drain_2).is_ready(),
                "the second drain did not return once the limiter was drained"
            );
            // A third, after the drain: returns at once.
            assert!(poll_once(&mut Box::pin(limiter.close_after_drain())).is_ready());
            assert!(matches!(
                poll_once(&mut Box::pin(limiter.run(async {}))),
                Poll::Ready(Err(gdex::Error::Closed))
            ));
        },
    );
}

/// Shared drains, with real threads: several tasks drain one busy limiter
/// at once; every one of them returns, after every job finished.
#[test]
fn many_tasks_draining_one_limiter_all_return_after_the_last_job() {
    watchdog(
        "many_tasks_draining_one_limiter_all_return_after_the_last_job",
        60,
        || {
            let limiter = gdex::Limiter::new(3);
            let finished = Arc::new(AtomicUsize::new(0));
            let made = Arc::new(AtomicUsize::new(0));
            let jobs: Vec<_> = (0..12)
                .map(|_| {
                    let (limiter, made, finished) =
                        (limiter.clone(), made.clone(), finished.clone());
                    gdex::spawn(async move {
                        let job = limiter.run(async move {
                            // Deliberate: jobs that take a while; the drains
                            // wait for them however long.
                            gdex::sleep(Duration::from_millis(2)).await;
                            finished.fetch_add(1, Ordering::SeqCst);
                        });
                        made.fetch_add(1, Ordering::SeqCst);
                        job.await
                    })
                })
                .collect();
            // Every job is queued or running before the drains start.
            wait_until(|| made.load(Ordering::SeqCst) == 12);
            let drains: Vec<_> = (0..4)
                .map(|_| {
                    let (limiter, finished) = (limiter.clone(), finished.clone());
                    gdex::spawn(async move {
                        limiter.close_after_drain().await;
                        finished.load(Ordering::SeqCst)
                    })
                })
                .collect();
            for drain in drains {
                assert_eq!(
                    gdex::block_on(drain).unwrap(),
                    12,
                    "a drain returned before every job had finished"
                );
            }
            for job in jobs {
                assert!(matches!(gdex::block_on(job), Ok(Ok(()))));
            }
        },
    );
}

/// What counts as queued: a `run` (or `run_on_pool`) future counts as
/// queued from the moment it is made. Made before `close_after_drain`, it
/// runs even though it had not been polled yet, and the drain waits for it;
/// one made after is refused.
#[test]
fn a_run_made_before_close_after_drain_is_queued_and_runs() {
    watchdog(
        "a_run_made_before_close_after_drain_is_queued_and_runs",
        60,
        || {
            let limiter = gdex::Limiter::new(1);
            let ran = Arc::new(AtomicUsize::new(0));
            let count = |ran: &Arc<AtomicUsize>| {
                let ran = ran.clone();
                async move {
                    ran.fetch_add(1, Ordering::SeqCst);
                }
            };
            // Made, never polled before the drain starts.
            let mut here = Box::pin(limiter.run(count(&ran)));
            let on_pool = Box::pin(limiter.run_on_pool(count(&ran)));
            let mut drain = Box::pin(limiter.close_after_drain());
            assert!(
                poll_once(&mut drain).is_pending(),
                "the drain did not wait for the futures made before it"
            );
            let mut late = Box::pin(limiter.run(count(&ran)));
            assert!(matches!(
                poll_once(&mut late),
                Poll::Ready(Err(gdex::Error::Closed))
            ));

            assert!(
                matches!(poll_once(&mut here), Poll::Ready(Ok(()))),
                "a run made before close_after_drain was refused"
            );
            assert!(poll_once(&mut drain).is_pending());
            assert!(
                gdex::block_on(on_pool).is_ok(),
                "a run_on_pool made before close_after_drain was refused"
            );
            assert_eq!(ran.load(Ordering::SeqCst), 2);
            gdex::block_on(drain);
        },
    );
}

/// What counts as queued, the edges: a queued future that is dropped
/// unpolled no longer holds the drain, and `close()` refuses the queued
/// ones, polled or not, while the running one finishes.
#[test]
fn a_dropped_queued_run_releases_the_drain_and_close_refuses_unpolled_runs() {
    let limiter = gdex::Limiter::new(1);
    let never_polled = limiter.run(async {});
    let mut drain = Box::pin(limiter.close_after_drain());
    assert!(poll_once(&mut drain).is_pending());
    drop(never_polled);
    assert!(poll_once(&mut drain).is_ready());

    let limiter = gdex::Limiter::new(1);
    let (release, wait) = gdex::Promise::<()>::new();
    let mut running = Box::pin(limiter.run(wait));
    assert!(poll_once(&mut running).is_pending());
    let mut polled = Box::pin(limiter.run(async {}));
    assert!(poll_once(&mut polled).is_pending());
    let mut unpolled = Box::pin(limiter.run(async {}));
    let mut drain = Box::pin(limiter.close_after_drain());
    limiter.close();
    assert!(matches!(
        poll_once(&mut polled),
        Poll::Ready(Err(gdex::Error::Closed))
    ));
    assert!(matches!(
        poll_once(&mut unpolled),
        Poll::Ready(Err(gdex::Error::Closed))
    ));
    assert!(
        poll_once(&mut drain).is_pending(),
        "the drain returned while a job still ran"
    );
    release.resolve(());
    assert!(matches!(poll_once(&mut running), Poll::Ready(Ok(Ok(())))));
    assert!(poll_once(&mut drain).is_ready());
}

/// Counts its wake-ups.
struct WakeCount(AtomicUsize);

impl Wake for WakeCount {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Permits added in bulk: adding half of `usize::MAX` permits costs what
/// the waiters cost, not one step per permit (it used to loop that many
/// times under the lock, so it never returned): it returns, every waiter
/// gets its permit in order, and the rest are free.
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
                        gdex::block_on(acquire).expect("not closed")
                    })
                })
                .collect();
            wait_until(|| parked.load(Ordering::SeqCst) == 4);
            sem.add_permits(usize::MAX - 1);
            let held: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
            assert_eq!(sem.available_permits(), usize::MAX - 1 - 4);
            drop(held);
        },
    );
}

/// Permits added in bulk: the permit count never wraps. Adding more than
/// fits beside the permits there are, free or held, panics with a message
/// that names the counts, and leaves the semaphore as it was.
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

/// Polls `future` once with a waker that counts its wake-ups in `count`.
fn poll_counting<F: Future + Unpin>(future: &mut F, count: &Arc<WakeCount>) -> Poll<F::Output> {
    let waker = Waker::from(count.clone());
    std::pin::Pin::new(future).poll(&mut Context::from_waker(&waker))
}

/// Closing wakes the waiters but hands them nothing: `Semaphore::new(0)`,
/// three waiters, `close()`, and dropping them leaves 0 permits free (each
/// used to give back a permit it never had: 3 free of 0). The count stays
/// true, so `add_permits` up to `MAX_PERMITS` is accepted after that, and
/// one more is refused with the message, in debug and release alike.
#[test]
fn close_wakes_the_waiters_without_handing_them_permits() {
    let sem = gdex::Semaphore::new(0);
    let mut waiters: Vec<_> = (0..3)
        .map(|_| {
            let count = Arc::new(WakeCount(AtomicUsize::new(0)));
            (Box::pin(sem.acquire()), count)
        })
        .collect();
    for (acquire, count) in &mut waiters {
        assert!(poll_counting(acquire, count).is_pending());
    }
    sem.close();
    for (_, count) in &waiters {
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "close did not wake a waiter"
        );
    }
    // One looks and is refused; the others go away unpolled.
    let (mut first, count) = waiters.remove(0);
    assert!(matches!(
        poll_counting(&mut first, &count),
        Poll::Ready(Err(gdex::Error::Closed))
    ));
    drop(first);
    drop(waiters);
    assert_eq!(
        sem.available_permits(),
        0,
        "waiters woken by close gave back permits they were never handed"
    );

    sem.add_permits(gdex::Semaphore::MAX_PERMITS);
    assert_eq!(sem.available_permits(), gdex::Semaphore::MAX_PERMITS);
    let err = catch_unwind(AssertUnwindSafe(|| sem.add_permits(1)))
        .expect_err("an add past MAX_PERMITS was accepted");
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        msg.contains("add_permits(1)") && msg.contains("MAX_PERMITS"),
        "unclear message: {msg}"
    );
    assert_eq!(sem.available_permits(), gdex::Semaphore::MAX_PERMITS);
}

/// A waiter handed a permit before `close()` (by a release, or by
/// `add_permits`) and polled after it gets that permit, as in libdex, where
/// the post resolved its wait: it used to get `Closed`, and the permit was
/// lost. One dropped unpolled gives its permit back. Either way the free
/// and held permits add up to the total.
#[test]
fn a_waiter_handed_a_permit_before_close_keeps_it() {
    // Handed by a release, then polled.
    let sem = gdex::Semaphore::new(1);
    let held = sem.try_acquire().unwrap();
    let mut waiting = Box::pin(sem.acquire());
    assert!(poll_once(&mut waiting).is_pending());
    drop(held);
    sem.close();
    let Poll::Ready(Ok(permit)) = poll_once(&mut waiting) else {
        panic!("a waiter handed a permit before close lost it")
    };
    assert_eq!(sem.available_permits(), 0);
    drop(permit);
    assert_eq!(sem.available_permits(), 1, "the permit was not given back");
    assert!(
        sem.try_acquire().is_none(),
        "a closed semaphore gave a permit"
    );
    assert!(matches!(
        gdex::block_on(sem.acquire()),
        Err(gdex::Error::Closed)
    ));

    // Handed by `add_permits` to the first of two, then dropped unpolled:
    // the permit goes back to the free ones, not to the other waiter.
    let sem = gdex::Semaphore::new(0);
    let mut first = Box::pin(sem.acquire());
    let mut second = Box::pin(sem.acquire());
    assert!(poll_once(&mut first).is_pending() && poll_once(&mut second).is_pending());
    sem.add_permits(1);
    sem.close();
    drop(first);
    assert_eq!(sem.available_permits(), 1, "a handed permit was lost");
    assert!(matches!(
        poll_once(&mut second),
        Poll::Ready(Err(gdex::Error::Closed))
    ));
    drop(second);
    assert_eq!(sem.available_permits(), 1);
}

/// What one thread of the random interleaving holds when it stops.
#[derive(Default)]
struct Holdings<'a> {
    permits: Vec<gdex::Permit>,
    waiting: Vec<std::pin::Pin<Box<gdex::Acquire<'a>>>>,
}

/// One thread's random steps on `sem`; adds its `add_permits` to `total`.
fn random_steps<'a>(
    sem: &'a gdex::Semaphore,
    seed: u64,
    steps: usize,
    close_at: Option<usize>,
    total: &AtomicUsize,
) -> Holdings<'a> {
    let mut rng = common::Rng(seed);
    let mut mine = Holdings::default();
    let wakes = Arc::new(WakeCount(AtomicUsize::new(0)));
    for step in 0..steps {
        if close_at == Some(step) {
            sem.close();
        }
        match rng.below(8) {
            0 => mine.permits.extend(sem.try_acquire()),
            1 | 2 => {
                let mut acquire = Box::pin(sem.acquire());
                match poll_counting(&mut acquire, &wakes) {
                    Poll::Ready(Ok(p)) => mine.permits.push(p),
                    Poll::Ready(Err(_)) => {}
                    Poll::Pending => mine.waiting.push(acquire),
                }
            }
            3 if !mine.waiting.is_empty() => {
                let i = rng.below(mine.waiting.len() as u64) as usize;
                match poll_counting(&mut mine.waiting[i], &wakes) {
                    Poll::Ready(Ok(p)) => {
                        mine.permits.push(p);
                        drop(mine.waiting.swap_remove(i));
                    }
                    Poll::Ready(Err(_)) => drop(mine.waiting.swap_remove(i)),
                    Poll::Pending => {}
                }
            }
            4 if !mine.waiting.is_empty() => {
                let i = rng.below(mine.waiting.len() as u64) as usize;
                drop(mine.waiting.swap_remove(i));
            }
            5 | 6 if !mine.permits.is_empty() => {
                let i = rng.below(mine.permits.len() as u64) as usize;
                drop(mine.permits.swap_remove(i));
            }
            7 => {
                let n = rng.below(3) as usize;
                // Counted first: another thread may take these at once.
                total.fetch_add(n, Ordering::SeqCst);
                sem.add_permits(n);
            }
            _ => {}
        }
        if step % 16 == 0 {
            std::thread::yield_now();
        }
    }
    mine
}

/// A seeded random interleaving of `acquire` (polled, re-polled, dropped),
/// `try_acquire`, dropped permits, `add_permits` and `close` on four
/// threads: at the end the free permits and the held ones add up to every
/// permit there was, closed or not. (A close used to make permits up, and
/// a handed permit polled after it was lost.) `GDEX_STRESS` scales the
/// rounds; a failure names its seed.
#[test]
fn random_interleavings_conserve_permits() {
    watchdog("random_interleavings_conserve_permits", 120, || {
        for round in 0..common::stress(40) as u64 {
            let seed = 0x5e3a_0000 + round;
            let mut rng = common::Rng(seed);
            let start = rng.below(3) as usize;
            let sem = gdex::Semaphore::new(start);
            let total = AtomicUsize::new(start);
            // Half of the rounds close, at a random step of thread 0.
            let close_at = (round % 2 == 1).then(|| rng.below(300) as usize);
            let holdings: Vec<Holdings<'_>> = std::thread::scope(|s| {
                let threads: Vec<_> = (0..4)
                    .map(|t| {
                        let (sem, total) = (&sem, &total);
                        let seed = seed.wrapping_mul(31).wrapping_add(t + 1);
                        let close_at = if t == 0 { close_at } else { None };
                        s.spawn(move || random_steps(sem, seed, 300, close_at, total))
                    })
                    .collect();
                threads.into_iter().map(|t| t.join().unwrap()).collect()
            });
            let total = total.load(Ordering::SeqCst);
            let mut permits = Vec::new();
            let mut waiting = Vec::new();
            for h in holdings {
                permits.extend(h.permits);
                waiting.extend(h.waiting);
            }
            // Whatever is dropped or polled now: a handed permit is taken
            // or passed on, never lost or doubled.
            for mut acquire in waiting {
                if let Poll::Ready(Ok(p)) = poll_once(&mut acquire) {
                    permits.push(p);
                }
            }
            assert_eq!(
                sem.available_permits() + permits.len(),
                total,
                "seed {seed:#x} (closed: {}): {} free + {} held",
                sem.is_closed(),
                sem.available_permits(),
                permits.len()
            );
            drop(permits);
            assert_eq!(sem.available_permits(), total, "seed {seed:#x}");
        }
    });
}

/// libdex 1.2 `Limiter/basic`: an acquire takes the slot, a second waits
/// until the first is released (`dex_limiter_acquire`/`_release`).
#[test]
fn an_acquired_permit_holds_the_slot_until_released() {
    watchdog("limiter-acquire-basic", 30, || {
        let limiter = gdex::Limiter::new(1);
        assert_eq!(limiter.limit(), 1);
        let first = gdex::block_on(limiter.acquire()).unwrap();
        let mut second = Box::pin(limiter.acquire());
        assert!(poll_once(&mut second).is_pending());
        first.release();
        let second = gdex::block_on(second).unwrap();
        drop(second);
        assert!(gdex::block_on(limiter.acquire()).is_ok());
    });
}

/// libdex 1.2 `Limiter/discard_waiting`: a waiting acquire that is dropped
/// takes no slot with it; the next acquire gets the released one.
#[test]
fn a_dropped_waiting_acquire_takes_no_slot_with_it() {
    watchdog("limiter-discard-acquire", 30, || {
        let limiter = gdex::Limiter::new(1);
        let first = gdex::block_on(limiter.acquire()).unwrap();
        let mut second = Box::pin(limiter.acquire());
        assert!(poll_once(&mut second).is_pending());
        drop(first); // the slot goes to `second`, which never takes it...
        drop(second); // ...and passes it on
        let third = gdex::block_on(gdex::timeout(Duration::from_secs(5), limiter.acquire()));
        assert!(
            matches!(third, Ok(Ok(_))),
            "the slot was lost with a dropped acquire: {third:?}"
        );
    });
}

/// libdex 1.2 `Limiter/timeout_waiting_acquire`: an acquire that times out
/// waiting leaves the queue; a later one gets the slot when it is released.
#[test]
fn an_acquire_that_timed_out_leaves_the_queue() {
    watchdog("limiter-timeout-acquire", 30, || {
        let limiter = gdex::Limiter::new(1);
        let first = gdex::block_on(limiter.acquire()).unwrap();
        let timed_out = gdex::block_on(gdex::timeout(Duration::from_millis(1), limiter.acquire()));
        assert!(timed_out.is_err(), "{timed_out:?}");
        let mut third = Box::pin(limiter.acquire());
        assert!(poll_once(&mut third).is_pending());
        drop(first);
        let third = gdex::block_on(gdex::timeout(Duration::from_millis(100), third));
        assert!(matches!(third, Ok(Ok(_))), "{third:?}");
    });
}

/// libdex 1.2 `Limiter/close`: closing fails the waiting acquires and
/// later ones with `Closed`; a permit held through the close is released
/// without error, and gives no new slot.
#[test]
fn close_fails_waiting_and_later_acquires() {
    watchdog("limiter-close-acquire", 30, || {
        let limiter = gdex::Limiter::new(1);
        let held = gdex::block_on(limiter.acquire()).unwrap();
        let waiting = limiter.acquire();
        limiter.close();
        assert!(matches!(gdex::block_on(waiting), Err(gdex::Error::Closed)));
        assert!(matches!(
            gdex::block_on(limiter.acquire()),
            Err(gdex::Error::Closed)
        ));
        held.release();
        assert!(matches!(
            gdex::block_on(limiter.acquire()),
            Err(gdex::Error::Closed)
        ));
    });
}

/// libdex 1.2 `Limiter/close`, for a slot already on its way: a `run`
/// handed the slot a release gave back, but not yet polled when `close`
/// comes, is refused (libdex's acquire finds the limiter closed when its
/// permit arrives) and its job never starts; the slot is not lost.
#[test]
fn a_run_handed_a_slot_just_before_close_is_refused() {
    let limiter = gdex::Limiter::new(1);
    let held = gdex::block_on(limiter.acquire()).unwrap();
    let started = Arc::new(AtomicBool::new(false));
    let s = started.clone();
    let mut run = Box::pin(limiter.run(async move { s.store(true, Ordering::SeqCst) }));
    assert!(poll_once(&mut run).is_pending());
    held.release(); // the slot goes to `run`...
    limiter.close(); // ...which has not looked yet
    assert!(matches!(
        poll_once(&mut run),
        Poll::Ready(Err(gdex::Error::Closed))
    ));
    assert!(!started.load(Ordering::SeqCst), "a job started after close");
    let mut drain = Box::pin(limiter.close_after_drain());
    assert!(poll_once(&mut drain).is_ready());
}

/// libdex 1.2 `Limiter/close_after_drain`: the drain waits for the held
/// permit; the acquire queued behind it is refused (libdex 1.2's
/// behaviour), and the drain ends when the permit is released.
#[test]
fn a_drain_waits_for_held_permits_and_refuses_queued_acquires() {
    watchdog("limiter-drain-acquire", 30, || {
        let limiter = gdex::Limiter::new(1);
        let first = gdex::block_on(limiter.acquire()).unwrap();
        let mut next = Box::pin(limiter.acquire());
        assert!(poll_once(&mut next).is_pending());
        let mut drain = Box::pin(limiter.close_after_drain());
        assert!(poll_once(&mut drain).is_pending());
        let early = gdex::block_on(gdex::timeout(Duration::from_millis(1), drain.as_mut()));
        assert!(early.is_err(), "{early:?}");
        first.release();
        assert!(matches!(gdex::block_on(next), Err(gdex::Error::Closed)));
        gdex::block_on(drain);
    });
}

/// libdex 1.2 `dex_limiter_close_after_drain` closes at once: an acquire
/// waiting while a permit is held is woken by the drain and fails with
/// `Closed` before the permit comes back (it used to wait for the release,
/// so a holder that awaited it before releasing deadlocked). Then the
/// holder releases, and its drain returns.
#[test]
fn close_after_drain_refuses_a_waiting_acquire_while_a_permit_is_held() {
    watchdog(
        "close_after_drain_refuses_a_waiting_acquire_while_a_permit_is_held",
        60,
        || {
            // Step by step: the drain wakes the waiter, which fails.
            let limiter = gdex::Limiter::new(1);
            let held = gdex::block_on(limiter.acquire()).unwrap();
            let count = Arc::new(WakeCount(AtomicUsize::new(0)));
            let mut waiting = Box::pin(limiter.acquire());
            assert!(poll_counting(&mut waiting, &count).is_pending());
            let mut drain = Box::pin(limiter.close_after_drain());
            assert_eq!(
                count.0.load(Ordering::SeqCst),
                1,
                "the drain did not wake the waiting acquire"
            );
            assert!(
                matches!(
                    poll_counting(&mut waiting, &count),
                    Poll::Ready(Err(gdex::Error::Closed))
                ),
                "an acquire waiting when the drain began was not refused"
            );
            assert!(poll_once(&mut drain).is_pending(), "a permit is still held");
            held.release();
            assert!(poll_once(&mut drain).is_ready());

            // Real threads: the waiter blocks in another thread; the holder
            // waits for its answer, then releases and awaits the drain.
            let limiter = gdex::Limiter::new(1);
            let held = gdex::block_on(limiter.acquire()).unwrap();
            let polled = Arc::new(AtomicUsize::new(0));
            let (answer, answered) = std::sync::mpsc::channel();
            let waiter = {
                let acquire = common::after_first_poll(&polled, limiter.acquire());
                std::thread::spawn(move || {
                    let out = gdex::block_on(acquire).map(drop);
                    let _ = answer.send(out);
                })
            };
            wait_until(|| polled.load(Ordering::SeqCst) == 1);
            let drain = limiter.close_after_drain();
            let out = answered.recv_timeout(Duration::from_secs(20));
            assert!(
                matches!(out, Ok(Err(gdex::Error::Closed))),
                "the waiting acquire was not refused while the permit was held: {out:?}"
            );
            waiter.join().unwrap();
            held.release();
            gdex::block_on(drain);
        },
    );
}

/// Permits and `run` share one limit and one arrival order: a `run` made
/// before a drain still runs on the slot an acquire refused by the drain
/// gave back.
#[test]
fn permits_and_runs_share_the_limit_and_the_queue() {
    watchdog("limiter-acquire-run", 30, || {
        let limiter = gdex::Limiter::new(1);
        let held = gdex::block_on(limiter.acquire()).unwrap();
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        let mut acquire = Box::pin(limiter.acquire());
        assert!(poll_once(&mut acquire).is_pending());
        let mut run = Box::pin(limiter.run(async move { r.store(true, Ordering::SeqCst) }));
        assert!(poll_once(&mut run).is_pending());
        assert!(!ran.load(Ordering::SeqCst), "a run went past a held permit");
        let drain = limiter.close_after_drain();
        drop(held);
        assert!(matches!(gdex::block_on(acquire), Err(gdex::Error::Closed)));
        gdex::block_on(run).unwrap();
        assert!(ran.load(Ordering::SeqCst));
        gdex::block_on(drain);
    });
}

/// A permit can be held across threads and tasks: it is `Send`.
#[test]
fn a_permit_moves_to_another_thread() {
    watchdog("limiter-permit-send", 30, || {
        let limiter = gdex::Limiter::new(1);
        let permit = gdex::block_on(limiter.acquire()).unwrap();
        std::thread::spawn(move || drop(permit)).join().unwrap();
        assert!(gdex::block_on(limiter.acquire()).is_ok());
    });
}

/// One limited job of libdex's `run` cases: counts itself in and out
/// (`Overlap`), waits a timer, gives `value`.
async fn limited_item(overlap: Overlap, done: Arc<AtomicUsize>, value: u32) -> u32 {
    overlap.enter();
    gdex::sleep(Duration::from_millis(5)).await;
    overlap.leave();
    done.fetch_add(1, Ordering::SeqCst);
    value
}

/// libdex 1.2 `Limiter/run` and `run_on_pool`: 24 jobs through a limit of
/// 3, in the awaiting task or on the pool: at most 3 at once (and 3 in
/// `run`'s case, where nothing else limits them), every value back in
/// order.
#[test]
fn run_and_run_on_pool_keep_to_the_limit_and_give_every_value() {
    watchdog("limiter-run-24", 60, || {
        for on_pool in [false, true] {
            let limiter = gdex::Limiter::new(3);
            let overlap = Overlap::default();
            let done = Arc::new(AtomicUsize::new(0));
            let jobs: Vec<futures::future::BoxFuture<'static, Result<u32, gdex::Error>>> = (0..24)
                .map(|i| {
                    let item = limited_item(overlap.clone(), done.clone(), i);
                    if on_pool {
                        Box::pin(limiter.run_on_pool(item)) as _
                    } else {
                        Box::pin(limiter.run(item)) as _
                    }
                })
                .collect();
            let values = gdex::block_on(gdex::all(jobs)).unwrap();
            assert_eq!(values, (0..24).collect::<Vec<_>>());
            assert_eq!(done.load(Ordering::SeqCst), 24);
            assert!(overlap.peak() <= 3, "{} at once", overlap.peak());
            if !on_pool {
                assert_eq!(overlap.peak(), 3);
            }
            assert_eq!(overlap.now.load(Ordering::SeqCst), 0);
        }
    });
}

/// libdex 1.2 `Limiter/run_error` and `run_on_pool_error`: a job's error
/// comes back unchanged, and its slot is free again.
#[test]
fn a_failing_jobs_error_comes_back_unchanged() {
    watchdog("limiter-run-error", 30, || {
        let limiter = gdex::Limiter::new(1);
        let failing =
            || async { Err::<(), _>(glib::Error::new(gio::IOErrorEnum::Failed, "job failed")) };
        for out in [
            gdex::block_on(limiter.run(failing())).unwrap(),
            gdex::block_on(limiter.run_on_pool(failing())).unwrap(),
        ] {
            let err = out.unwrap_err();
            assert!(err.matches(gio::IOErrorEnum::Failed) && err.message() == "job failed");
        }
        assert!(gdex::block_on(limiter.acquire()).is_ok());
    });
}

/// libdex 1.2 `Limiter/discard_run`, where gdex differs on purpose: a
/// `run` future dropped while its job runs drops the job (libdex lets it
/// finish) and frees the slot at once. (`discard_run_on_pool`:
/// `a_dropped_run_on_pool_keeps_its_slot_until_the_pool_job_ends`.)
#[test]
fn a_dropped_run_drops_its_job_and_frees_the_slot() {
    watchdog("limiter-discard-run", 30, || {
        let limiter = gdex::Limiter::new(1);
        let started = Arc::new(AtomicUsize::new(0));
        let completed = Arc::new(AtomicUsize::new(0));
        let (s, c) = (started.clone(), completed.clone());
        let mut run = Box::pin(limiter.run(async move {
            s.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<()>().await;
            c.fetch_add(1, Ordering::SeqCst);
        }));
        assert!(poll_once(&mut run).is_pending());
        assert_eq!(started.load(Ordering::SeqCst), 1);
        drop(run);
        let mut next = Box::pin(limiter.acquire());
        assert!(matches!(poll_once(&mut next), Poll::Ready(Ok(_))));
        assert_eq!(completed.load(Ordering::SeqCst), 0);
    });
}

/// libdex 1.2 `Limiter/timeout_waiting_run`: a run that times out while it
/// waits for a slot never starts its job; the run queued after it gets the
/// slot when it is released.
#[test]
fn a_run_that_timed_out_waiting_never_starts() {
    watchdog("limiter-timeout-waiting-run", 30, || {
        let limiter = gdex::Limiter::new(1);
        let held = gdex::block_on(limiter.acquire()).unwrap();
        let blocked = Arc::new(AtomicUsize::new(0));
        let b = blocked.clone();
        let timed_out = gdex::block_on(gdex::timeout(
            Duration::from_millis(1),
            limiter.run(async move {
                b.fetch_add(1, Ordering::SeqCst);
            }),
        ));
        assert!(timed_out.is_err(), "{timed_out:?}");
        let mut next = Box::pin(limiter.run(async { 7 }));
        assert!(poll_once(&mut next).is_pending());
        drop(held);
        let next = gdex::block_on(gdex::timeout(Duration::from_millis(100), next));
        assert!(matches!(next, Ok(Ok(7))), "{next:?}");
        assert_eq!(
            blocked.load(Ordering::SeqCst),
            0,
            "the timed-out run's job started"
        );
    });
}

/// libdex 1.2 `Limiter/timeout_running_run`, where gdex differs on purpose:
/// a timeout around a running job drops the job (libdex lets it finish and
/// holds the slot until then) and the slot is free at once.
#[test]
fn a_run_that_timed_out_running_drops_its_job_and_frees_the_slot() {
    watchdog("limiter-timeout-running-run", 30, || {
        let limiter = gdex::Limiter::new(1);
        let started = Arc::new(AtomicUsize::new(0));
        let completed = Arc::new(AtomicUsize::new(0));
        let (s, c) = (started.clone(), completed.clone());
        let timed_out = gdex::block_on(gdex::timeout(
            Duration::from_millis(1),
            limiter.run(async move {
                s.fetch_add(1, Ordering::SeqCst);
                gdex::sleep(Duration::from_secs(3600)).await;
                c.fetch_add(1, Ordering::SeqCst);
            }),
        ));
        assert!(timed_out.is_err(), "{timed_out:?}");
        assert_eq!(started.load(Ordering::SeqCst), 1);
        let mut next = Box::pin(limiter.acquire());
        assert!(matches!(poll_once(&mut next), Poll::Ready(Ok(_))));
        assert_eq!(completed.load(Ordering::SeqCst), 0);
    });
}

/// `{:?}` of a semaphore or a limiter reads its state under its lock and
/// writes to the formatter after it: the formatter's sink is the caller's
/// code, and one that formats the same object again (a log line built from
/// it) would deadlock on the lock.
#[test]
fn formatting_a_semaphore_or_a_limiter_writes_with_its_lock_released() {
    struct Sink<'a> {
        again: &'a dyn std::fmt::Debug,
        nested: Option<String>,
        out: String,
    }
    impl std::fmt::Write for Sink<'_> {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            if self.nested.is_none() {
                self.nested = Some(format!("{:?}", self.again));
            }
            self.out.push_str(s);
            Ok(())
        }
    }
    fn format_twice(object: &dyn std::fmt::Debug) -> (String, String) {
        let mut sink = Sink {
            again: object,
            nested: None,
            out: String::new(),
        };
        std::fmt::Write::write_fmt(&mut sink, format_args!("{object:?}")).unwrap();
        (sink.out, sink.nested.unwrap())
    }
    watchdog("semaphore-debug-unlocked", 30, || {
        let semaphore = gdex::Semaphore::new(2);
        let (out, nested) = format_twice(&semaphore);
        assert_eq!(out, nested);
        assert!(out.contains("permits: 2"), "{out}");
        let limiter = gdex::Limiter::new(3);
        let (out, nested) = format_twice(&limiter);
        assert_eq!(out, nested);
        assert!(out.contains("limit: 3"), "{out}");
    });
}
