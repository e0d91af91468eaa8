//! The future toolkit (DESIGN "Future toolkit"), `BlockingPool` (B3) and
//! `blocking::blocking` (B5) keep the promises their docs make: a
//! cancelled `Cancellable::run` never starts its future, the channel serves
//! waiters in arrival order even when `try_recv`/`try_send` race a woken
//! waiter, a `BlockingPool` close future holds one waker however often it
//! is polled, a late clone of a `PromiseFuture` resolves instead of
//! panicking, a one-worker pool's queue waits behind `blocking`, as
//! documented, and the primitives run no user code (a waker's drop, a
//! value's `clone`) under their own lock.

use crate::common;

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

// ---------------------------------------------------------------------------
// Point 8: the channel serves waiters in arrival order
// ---------------------------------------------------------------------------

/// A receive that waited and was woken for an item keeps its turn: a
/// `try_recv` or a newer receive polled before it cannot take the item it
/// is owed, and the woken receive does not lose its place in line to a
/// receive that came later.
#[test]
fn a_receive_woken_for_an_item_keeps_its_turn_against_try_recv_and_newer_receives() {
    let (tx, rx) = gdex::channel::<u32>(4);
    let (wa, wake_a) = count_waker();
    let (wb, wake_b) = count_waker();
    let mut first = pin!(rx.recv());
    let mut second = pin!(rx.recv());
    assert!(poll_with(first.as_mut(), &wake_a).is_pending());
    assert!(poll_with(second.as_mut(), &wake_b).is_pending());

    tx.try_send(1).unwrap();
    assert_eq!(
        (wakes(&wa), wakes(&wb)),
        (1, 0),
        "the first in line is woken"
    );
    // Before the woken receive runs, others race it for the item.
    assert_eq!(
        rx.try_recv(),
        None,
        "try_recv took the item of a woken receive"
    );
    let mut newcomer = pin!(rx.recv());
    let (wn, wake_n) = count_waker();
    assert!(
        poll_with(newcomer.as_mut(), &wake_n).is_pending(),
        "a newer receive took the item of a woken receive"
    );
    // The second waiter, polled spuriously, does not jump the line either.
    assert!(poll_with(second.as_mut(), &wake_b).is_pending());

    // The next item goes to the second in line, not to the newcomer.
    tx.try_send(2).unwrap();
    assert_eq!((wakes(&wb), wakes(&wn)), (1, 0));
    assert_eq!(rx.try_recv(), None);
    // The third item goes to the newcomer, third in line; a fourth has no
    // waiter left to owe it to: try_recv may take one item, the oldest (the
    // turns owed are turns, not items: items leave in the order they came),
    // and leaves three for the three woken receives.
    tx.try_send(3).unwrap();
    assert_eq!(wakes(&wn), 1, "the newcomer is third in line");
    tx.try_send(4).unwrap();
    assert_eq!(rx.try_recv(), Some(1), "a free turn is open to try_recv");
    assert_eq!(rx.try_recv(), None, "the other three are owed");

    assert!(matches!(
        poll_with(first.as_mut(), &wake_a),
        Poll::Ready(Ok(2))
    ));
    assert!(matches!(
        poll_with(second.as_mut(), &wake_b),
        Poll::Ready(Ok(3))
    ));
    assert!(matches!(
        poll_with(newcomer.as_mut(), &wake_n),
        Poll::Ready(Ok(4))
    ));
    assert_eq!(rx.try_recv(), None);
}

/// A woken receive that is dropped before it takes its item passes the
/// item on to the next in line; with nobody in line, the item is free for
/// `try_recv`.
#[test]
fn a_kept_item_passes_to_the_next_receive_or_back_to_the_queue() {
    let (tx, rx) = gdex::channel::<u32>(2);
    let (_, wake_a) = count_waker();
    let (wb, wake_b) = count_waker();
    let mut a = Box::pin(rx.recv());
    let mut b = Box::pin(rx.recv());
    assert!(poll_with(a.as_mut(), &wake_a).is_pending());
    assert!(poll_with(b.as_mut(), &wake_b).is_pending());
    tx.try_send(1).unwrap();
    drop(a);
    assert_eq!(wakes(&wb), 1, "the kept item was not passed on");
    assert_eq!(rx.try_recv(), None, "the item is b's now");
    drop(b);
    assert_eq!(
        rx.try_recv(),
        Some(1),
        "with nobody in line, the item is free"
    );

    // recv_all by a woken receive takes its item and every free one, and
    // leaves the items kept for others.
    let (_, wake_c) = count_waker();
    let (_, wake_d) = count_waker();
    let mut c = Box::pin(rx.recv_all());
    let mut d = Box::pin(rx.recv());
    assert!(poll_with(c.as_mut(), &wake_c).is_pending());
    assert!(poll_with(d.as_mut(), &wake_d).is_pending());
    tx.try_send(10).unwrap();
    tx.try_send(11).unwrap();
    // Both items are kept (one each): none is left for try_recv.
    assert_eq!(rx.try_recv(), None);
    match poll_with(c.as_mut(), &wake_c) {
        Poll::Ready(Ok(items)) => assert_eq!(items, [10]),
        other => panic!("recv_all: {other:?}"),
    }
    assert!(matches!(
        poll_with(d.as_mut(), &wake_d),
        Poll::Ready(Ok(11))
    ));
}

/// A send that waited and was woken for room keeps it: a `try_send` or a
/// newer send polled before it cannot fill it, and the items arrive in the
/// senders' order.
#[test]
fn a_send_woken_for_room_keeps_it_against_try_send_and_newer_sends() {
    let (tx, rx) = gdex::channel::<u32>(1);
    tx.try_send(0).unwrap();
    let (w1, wake_1) = count_waker();
    let (w2, wake_2) = count_waker();
    let mut first = pin!(tx.send(1));
    let mut second = pin!(tx.send(2));
    assert!(poll_with(first.as_mut(), &wake_1).is_pending());
    assert!(poll_with(second.as_mut(), &wake_2).is_pending());

    assert_eq!(rx.try_recv(), Some(0));
    assert_eq!(
        (wakes(&w1), wakes(&w2)),
        (1, 0),
        "the first in line is woken"
    );
    // Before the woken send runs, others race it for the room.
    assert_eq!(
        tx.try_send(9),
        Err(gdex::TrySendError::Full(9)),
        "try_send filled the room of a woken send"
    );
    let (wn, wake_n) = count_waker();
    let mut newcomer = pin!(tx.send(3));
    assert!(
        poll_with(newcomer.as_mut(), &wake_n).is_pending(),
        "a newer send filled the room of a woken send"
    );
    assert!(poll_with(second.as_mut(), &wake_2).is_pending());

    assert!(matches!(
        poll_with(first.as_mut(), &wake_1),
        Poll::Ready(Ok(()))
    ));
    assert_eq!(rx.try_recv(), Some(1));
    assert_eq!(
        (wakes(&w2), wakes(&wn)),
        (1, 0),
        "the second in line is next"
    );
    assert_eq!(tx.try_send(9), Err(gdex::TrySendError::Full(9)));
    assert!(matches!(
        poll_with(second.as_mut(), &wake_2),
        Poll::Ready(Ok(()))
    ));
    assert_eq!(rx.try_recv(), Some(2));
    assert_eq!(wakes(&wn), 1);
    assert!(matches!(
        poll_with(newcomer.as_mut(), &wake_n),
        Poll::Ready(Ok(()))
    ));
    assert_eq!(rx.try_recv(), Some(3));
    // Nobody waits: the room is free again.
    assert_eq!(tx.try_send(4), Ok(()));
}

/// Closing a channel while a woken receive still owes its turn: the
/// receive still gets a queued item, and a woken send is refused.
#[test]
fn closing_releases_the_turns_kept_for_woken_waiters() {
    let (tx, rx) = gdex::channel::<u32>(1);
    let (_, wake) = count_waker();
    let mut r = Box::pin(rx.recv());
    assert!(poll_with(r.as_mut(), &wake).is_pending());
    tx.try_send(1).unwrap();
    tx.close();
    assert!(matches!(poll_with(r.as_mut(), &wake), Poll::Ready(Ok(1))));
    assert!(matches!(
        gdex::block_on(rx.recv()),
        Err(gdex::Error::Closed)
    ));

    let (tx, rx) = gdex::channel::<u32>(1);
    tx.try_send(1).unwrap();
    let mut s = Box::pin(tx.send(2));
    assert!(poll_with(s.as_mut(), &wake).is_pending());
    assert_eq!(rx.try_recv(), Some(1)); // wakes `s` for the room
    assert_eq!(rx.close(), Vec::<u32>::new());
    assert!(matches!(
        poll_with(s.as_mut(), &wake),
        Poll::Ready(Err(gdex::SendError(2)))
    ));
}

/// Under contention on real threads, with `try_recv`, `try_send`,
/// `recv_all` and dropped receives and sends mixed in, every item is
/// received exactly once and nothing stalls: the turns kept for woken
/// waiters are always taken, passed on or freed.
#[test]
fn a_contended_channel_with_try_calls_and_dropped_waits_moves_every_item_once() {
    watchdog("channel_with_try_calls_moves_every_item_once", 120, || {
        let pool = gdex::ThreadPool::builder().workers(4).build().unwrap();
        let per_producer = stress(20_000).max(8);
        let producers_n = 3;
        let items = per_producer * producers_n;
        let (tx, rx) = gdex::channel::<usize>(2);
        let seen: Arc<Vec<AtomicUsize>> =
            Arc::new((0..items).map(|_| AtomicUsize::new(0)).collect());
        let producers: Vec<_> = (0..producers_n)
            .map(|k| {
                let tx = tx.clone();
                pool.scheduler().spawn(async move {
                    for (n, i) in (k * per_producer..(k + 1) * per_producer).enumerate() {
                        let mut item = i;
                        loop {
                            match n % 3 {
                                // try_send, yielding while full.
                                0 => match tx.try_send(item) {
                                    Ok(()) => break,
                                    Err(gdex::TrySendError::Full(back)) => {
                                        item = back;
                                        gdex::yield_now().await;
                                    }
                                    Err(gdex::TrySendError::Closed(_)) => panic!("closed"),
                                },
                                // A send raced against one yield: dropped
                                // (item unsent, sent again) if the yield wins.
                                1 => {
                                    let copy = item;
                                    let send = tx.send(item);
                                    match futures::future::select(
                                        pin!(gdex::yield_now()),
                                        pin!(send),
                                    )
                                    .await
                                    {
                                        futures::future::Either::Right((r, _)) => {
                                            r.unwrap();
                                            break;
                                        }
                                        futures::future::Either::Left(_) => item = copy,
                                    }
                                }
                                _ => {
                                    tx.send(item).await.unwrap();
                                    break;
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        drop(tx);
        let consumers: Vec<_> = (0..3)
            .map(|k| {
                let rx = rx.clone();
                let seen = seen.clone();
                pool.scheduler().spawn(async move {
                    let mut got = 0usize;
                    let mut turn = k;
                    loop {
                        turn += 1;
                        let batch: Vec<usize> = match turn % 4 {
                            0 => match rx.try_recv() {
                                Some(i) => vec![i],
                                None => {
                                    gdex::yield_now().await;
                                    continue;
                                }
                            },
                            1 => {
                                let recv = rx.recv();
                                match futures::future::select(pin!(gdex::yield_now()), pin!(recv))
                                    .await
                                {
                                    futures::future::Either::Right((r, _)) => match r {
                                        Ok(i) => vec![i],
                                        Err(gdex::Error::Closed) => return got,
                                        Err(e) => panic!("recv: {e}"),
                                    },
                                    futures::future::Either::Left(_) => continue,
                                }
                            }
                            2 => match rx.recv_all().await {
                                Ok(all) => all,
                                Err(gdex::Error::Closed) => return got,
                                Err(e) => panic!("recv_all: {e}"),
                            },
                            _ => match rx.recv().await {
                                Ok(i) => vec![i],
                                Err(gdex::Error::Closed) => return got,
                                Err(e) => panic!("recv: {e}"),
                            },
                        };
                        for i in batch {
                            seen[i].fetch_add(1, Ordering::Relaxed);
                            got += 1;
                        }
                    }
                })
            })
            .collect();
        drop(rx);
        for producer in producers {
            gdex::block_on(producer).unwrap();
        }
        let received: usize = consumers
            .into_iter()
            .map(|c| gdex::block_on(c).unwrap())
            .sum();
        assert_eq!(received, items);
        for (i, n) in seen.iter().enumerate() {
            assert_eq!(
                n.load(Ordering::Relaxed),
                1,
                "item {i} received {n:?} times"
            );
        }
    });
}

/// Items leave the channel in the order they were queued, whoever takes
/// them: a woken receive is owed *a* turn, not a particular item, so a
/// `try_recv`, a newer receive or a `recv_all` that takes what is not owed
/// takes the oldest items, and the woken receive the next one when it runs.
/// Also when a woken receive is dropped and its turn freed: the items it
/// was woken for are not left behind newer ones. (The channel's arrival
/// order, docs/libdex.md.)
#[test]
fn items_leave_in_send_order_when_woken_receives_race_or_go_away() {
    let (tx, rx) = gdex::channel::<u32>(8);
    let (_, wake_a) = count_waker();
    let (_, wake_b) = count_waker();
    let mut a = Box::pin(rx.recv());
    let mut b = Box::pin(rx.recv());
    assert!(poll_with(a.as_mut(), &wake_a).is_pending());
    assert!(poll_with(b.as_mut(), &wake_b).is_pending());
    // a, then b, is owed a turn.
    tx.try_send(1).unwrap();
    tx.try_send(2).unwrap();
    // `a` goes away woken; nobody else waits: its turn is freed.
    drop(a);
    tx.try_send(3).unwrap();
    // Queued: 1, 2, 3, with one turn owed (b's). Two are free, and they are
    // the oldest two: the item `a` was woken for is not passed over.
    assert_eq!(rx.try_recv(), Some(1), "an older item was passed over");
    assert_eq!(rx.try_recv(), Some(2));
    assert_eq!(rx.try_recv(), None, "b's turn was taken");
    assert!(matches!(poll_with(b.as_mut(), &wake_b), Poll::Ready(Ok(3))));

    // A newer receive polled before the woken one takes the oldest item.
    let (_, wake_c) = count_waker();
    let mut c = Box::pin(rx.recv());
    assert!(poll_with(c.as_mut(), &wake_c).is_pending());
    tx.try_send(4).unwrap(); // c is owed a turn
    tx.try_send(5).unwrap();
    let (_, wake_n) = count_waker();
    let mut newcomer = Box::pin(rx.recv());
    assert!(matches!(
        poll_with(newcomer.as_mut(), &wake_n),
        Poll::Ready(Ok(4))
    ));
    assert!(matches!(poll_with(c.as_mut(), &wake_c), Poll::Ready(Ok(5))));

    // recv_all takes the oldest items, leaving as many as are owed.
    let (_, wake_d) = count_waker();
    let mut d = Box::pin(rx.recv());
    assert!(poll_with(d.as_mut(), &wake_d).is_pending());
    for i in 6..=8 {
        tx.try_send(i).unwrap(); // d is owed a turn (for 6)
    }
    let mut all = Box::pin(rx.recv_all());
    match poll_with(all.as_mut(), &wake_n) {
        Poll::Ready(Ok(items)) => assert_eq!(items, [6, 7]),
        other => panic!("recv_all: {other:?}"),
    }
    assert!(matches!(poll_with(d.as_mut(), &wake_d), Poll::Ready(Ok(8))));

    // A woken recv_all takes its turn and every free item, oldest first,
    // leaving the turns owed to others.
    let (_, wake_e) = count_waker();
    let (_, wake_f) = count_waker();
    let mut e = Box::pin(rx.recv());
    let mut f = Box::pin(rx.recv_all());
    assert!(poll_with(e.as_mut(), &wake_e).is_pending());
    assert!(poll_with(f.as_mut(), &wake_f).is_pending());
    for i in 9..=12 {
        tx.try_send(i).unwrap(); // e owed (for 9), f owed (for 10)
    }
    match poll_with(f.as_mut(), &wake_f) {
        Poll::Ready(Ok(items)) => assert_eq!(items, [9, 10, 11]),
        other => panic!("recv_all: {other:?}"),
    }
    assert!(matches!(
        poll_with(e.as_mut(), &wake_e),
        Poll::Ready(Ok(12))
    ));
    assert_eq!(rx.try_recv(), None);
}

/// What one consumer step of the order test got.
enum Step {
    Got(Vec<usize>),
    Nothing,
    Closed,
}

/// One receive of a consumer, of a kind chosen by `turn`: most are
/// dropped mid-wait when no item comes soon (a timeout, a `select`
/// against a sleep, a receive polled once and dropped), beside plain
/// `recv` and `recv_all`.
async fn consumer_step(rx: &gdex::Receiver<usize>, turn: usize) -> Step {
    use futures::future::{select, Either};
    use std::time::Duration;
    let short = Duration::from_micros(50);
    let one = |r: Result<usize, gdex::Error>| match r {
        Ok(i) => Step::Got(vec![i]),
        Err(gdex::Error::Closed) => Step::Closed,
        Err(gdex::Error::TimedOut) => Step::Nothing,
        Err(e) => panic!("recv: {e}"),
    };
    match turn % 5 {
        0 => one(gdex::timeout(short, rx.recv())
            .await
            .unwrap_or_else(|elapsed| Err(elapsed.into()))),
        1 => match select(pin!(rx.recv()), pin!(gdex::sleep(short))).await {
            Either::Left((r, _)) => one(r),
            Either::Right(_) => Step::Nothing,
        },
        2 => {
            let mut recv = pin!(rx.recv());
            match futures::poll!(recv.as_mut()) {
                Poll::Ready(r) => one(r),
                // Dropped after one poll, possibly woken already.
                Poll::Pending => {
                    gdex::yield_now().await;
                    Step::Nothing
                }
            }
        }
        3 => match rx.recv_all().await {
            Ok(items) => Step::Got(items),
            Err(gdex::Error::Closed) => Step::Closed,
            Err(e) => panic!("recv_all: {e}"),
        },
        _ => one(rx.recv().await),
    }
}

/// Each producer's items arrive in the order it sent them, with consumers
/// that keep dropping receives mid-wait (woken ones among them) beside
/// plain `recv` and `recv_all`, and none is lost or received twice. The
/// two consumers (a task and a fiber) share one worker, so the order in
/// which they record items is the order they took them from the channel.
/// (The channel's arrival order, docs/libdex.md.)
#[test]
fn each_producers_items_arrive_in_send_order_despite_dropped_receives() {
    watchdog("each_producers_items_arrive_in_send_order", 120, || {
        const PRODUCERS: usize = 4;
        let per_producer = stress(5_000).max(8);
        let producing = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let consuming = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let (tx, rx) = gdex::channel::<usize>(8);
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let tx = tx.clone();
                producing.scheduler().spawn(async move {
                    for seq in 0..per_producer {
                        tx.send(p * per_producer + seq).await.unwrap();
                    }
                })
            })
            .collect();
        drop(tx);

        /// Per producer, the last sequence number taken; and how often an
        /// item came after a later one of its producer.
        struct Order {
            last: [Option<usize>; PRODUCERS],
            out_of_order: usize,
            first_example: Option<(usize, usize, usize)>,
        }
        let order = Arc::new(std::sync::Mutex::new(Order {
            last: [None; PRODUCERS],
            out_of_order: 0,
            first_example: None,
        }));
        let seen: Arc<Vec<AtomicUsize>> = Arc::new(
            (0..PRODUCERS * per_producer)
                .map(|_| AtomicUsize::new(0))
                .collect(),
        );
        let record = {
            let (order, seen) = (order.clone(), seen.clone());
            move |items: Vec<usize>| {
                let mut order = order.lock().unwrap();
                for i in items {
                    seen[i].fetch_add(1, Ordering::Relaxed);
                    let (p, seq) = (i / per_producer, i % per_producer);
                    match order.last[p] {
                        Some(last) if last > seq => {
                            order.out_of_order += 1;
                            order.first_example.get_or_insert((p, last, seq));
                        }
                        _ => order.last[p] = Some(seq),
                    }
                }
            }
        };

        let task = consuming.scheduler().spawn({
            let (rx, record) = (rx.clone(), record.clone());
            async move {
                let mut turn = 0;
                loop {
                    turn += 1;
                    match consumer_step(&rx, turn).await {
                        Step::Got(items) => record(items),
                        Step::Nothing => {}
                        Step::Closed => return,
                    }
                }
            }
        });
        let fiber = consuming.scheduler().spawn_fiber(move || {
            let mut turn = 2;
            loop {
                turn += 1;
                match gdex::fiber::wait_output(consumer_step(&rx, turn)).unwrap() {
                    Step::Got(items) => record(items),
                    Step::Nothing => {}
                    Step::Closed => return,
                }
            }
        });
        for producer in producers {
            gdex::block_on(producer).unwrap();
        }
        gdex::block_on(task).unwrap();
        gdex::block_on(fiber).unwrap();

        let order = order.lock().unwrap();
        assert_eq!(
            order.out_of_order,
            0,
            "items arrived after a later item of their producer (first: producer {}, \
             {} before {})",
            order.first_example.map_or(0, |e| e.0),
            order.first_example.map_or(0, |e| e.1),
            order.first_example.map_or(0, |e| e.2),
        );
        for (i, n) in seen.iter().enumerate() {
            assert_eq!(
                n.load(Ordering::Relaxed),
                1,
                "item {i} received {n:?} times"
            );
        }
    });
}

// ---------------------------------------------------------------------------
// Point 10: BlockingPool::close() keeps one waker
// ---------------------------------------------------------------------------

/// Clones of the counting waker alive now (the original excluded).
static LIVE_CLONES: AtomicUsize = AtomicUsize::new(0);

fn counted_raw() -> RawWaker {
    static VTABLE: RawWakerVTable = RawWakerVTable::new(
        |_| {
            LIVE_CLONES.fetch_add(1, Ordering::SeqCst);
            counted_raw()
        },
        |_| {
            LIVE_CLONES.fetch_sub(1, Ordering::SeqCst);
        },
        |_| {},
        |_| {
            LIVE_CLONES.fetch_sub(1, Ordering::SeqCst);
        },
    );
    RawWaker::new(std::ptr::null(), &VTABLE)
}

#[test]
fn a_blocking_pool_close_future_keeps_one_waker_however_often_it_is_polled() {
    watchdog("close_future_keeps_one_waker", 60, || {
        let pool = gdex::blocking::BlockingPool::new(1);
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let job = pool.submit(move || wait.recv().unwrap());
        // SAFETY: the vtable's functions keep RawWaker's contract: clone
        // makes another waker of the same (null) data, wake and drop
        // consume one, wake_by_ref does nothing; the data is never read.
        let original = unsafe { Waker::from_raw(counted_raw()) };
        let mut closing = pool.close(gdex::blocking::CloseMode::Drain);
        let polls = stress(200_000);
        for _ in 0..polls {
            assert!(poll_with(Pin::new(&mut closing), &original).is_pending());
        }
        let stored = LIVE_CLONES.load(Ordering::SeqCst);
        assert_eq!(
            stored, 1,
            "{polls} polls with one waker stored {stored} wakers"
        );

        // A second close future has its own single entry; dropping it
        // takes its waker away.
        let mut again = pool.close(gdex::blocking::CloseMode::CancelQueued);
        for _ in 0..1000 {
            assert!(poll_with(Pin::new(&mut again), &original).is_pending());
        }
        assert_eq!(LIVE_CLONES.load(Ordering::SeqCst), 2);
        drop(again);
        assert_eq!(
            LIVE_CLONES.load(Ordering::SeqCst),
            1,
            "a dropped close future's waker stayed"
        );

        go.send(()).unwrap();
        gdex::block_on(job).unwrap();
        gdex::block_on(&mut closing);
        // The last thread takes the wakers under the lane's lock and wakes
        // them after it lets go (no user code under a lock), so the future
        // may see the close done a moment before that thread has woken, and
        // so dropped, the stored waker: wait for it (a leak hangs here, and
        // the watchdog fails the test).
        common::wait_until(|| LIVE_CLONES.load(Ordering::SeqCst) == 0);
        drop(original);
    });
}

// ---------------------------------------------------------------------------
// Point 11: a late clone of a PromiseFuture
// ---------------------------------------------------------------------------

#[test]
fn a_clone_of_a_promise_future_that_took_the_value_resolves_with_an_error() {
    // Resolved: the only future takes the value; a clone made from it
    // afterwards resolves (it does not panic) with an error saying so.
    let (promise, mut future) = gdex::Promise::<String>::new();
    promise.resolve("value".into());
    assert_eq!(gdex::block_on(&mut future).unwrap(), "value");
    let late = future.clone();
    match gdex::block_on(late) {
        Err(gdex::Error::Failed(e)) => {
            assert!(e.matches(gio::IOErrorEnum::Failed), "{e}");
            assert!(e.message().contains("already moved out"), "{e}");
        }
        other => panic!("a late clone gave {other:?}"),
    }
    // Several late clones, each its own answer.
    let (a, b) = (future.clone(), future.clone());
    assert!(matches!(gdex::block_on(a), Err(gdex::Error::Failed(_))));
    assert!(matches!(gdex::block_on(b), Err(gdex::Error::Failed(_))));

    // Rejected: a late clone gets the same rejection.
    let (promise, mut future) = gdex::Promise::<u32>::new();
    promise.reject(gdex::Error::TimedOut);
    assert!(matches!(
        gdex::block_on(&mut future),
        Err(gdex::Error::TimedOut)
    ));
    assert!(matches!(
        gdex::block_on(future.clone()),
        Err(gdex::Error::TimedOut)
    ));

    // Dropped promise: the late clone gets Dropped too.
    let (promise, mut future) = gdex::Promise::<u32>::new();
    drop(promise);
    assert!(matches!(
        gdex::block_on(&mut future),
        Err(gdex::Error::Dropped)
    ));
    assert!(matches!(
        gdex::block_on(future.clone()),
        Err(gdex::Error::Dropped)
    ));

    // A clone made before the value was taken still gets the value.
    let (promise, future) = gdex::Promise::<u32>::new();
    let early = future.clone();
    promise.resolve(5);
    assert_eq!(gdex::block_on(future).unwrap(), 5);
    assert_eq!(gdex::block_on(early).unwrap(), 5);
}

#[test]
#[should_panic(expected = "polled again after it resolved")]
fn polling_the_promise_future_that_took_the_value_again_panics() {
    let (promise, mut future) = gdex::Promise::<u32>::new();
    promise.resolve(1);
    assert_eq!(gdex::block_on(&mut future).unwrap(), 1);
    let _ = gdex::block_on(&mut future);
}

// ---------------------------------------------------------------------------
// Docs line: blocking::blocking on a one-worker pool
// ---------------------------------------------------------------------------

/// On a pool of one worker there is no peer to take the queue: a task
/// spawned while the worker is inside `blocking` runs only after the
/// blocking call returns, as `blocking::blocking`'s docs say.
#[test]
fn on_a_one_worker_pool_a_task_queued_during_blocking_waits_for_it() {
    watchdog("one_worker_blocking", 30, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let (entered, inside) = std::sync::mpsc::channel::<()>();
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let other_ran = Arc::new(AtomicBool::new(false));
        let seen = other_ran.clone();
        let blocker = pool.scheduler().spawn(async move {
            gdex::blocking::blocking(move || {
                entered.send(()).unwrap();
                wait.recv().unwrap();
                // The only worker is here: the queued task cannot have run.
                seen.load(Ordering::SeqCst)
            })
        });
        inside.recv().unwrap();
        let ran = other_ran.clone();
        let queued = pool
            .scheduler()
            .spawn(async move { ran.store(true, Ordering::SeqCst) });
        release.send(()).unwrap();
        assert!(
            !gdex::block_on(blocker).unwrap(),
            "a task ran on a one-worker pool while its worker was in blocking()"
        );
        gdex::block_on(queued).unwrap();
        assert!(other_ran.load(Ordering::SeqCst));
    });
}

// ---------------------------------------------------------------------------
// No user code under a primitive's lock
// ---------------------------------------------------------------------------

/// A waker a channel's wait lets go of (replaced by the waker of a later
/// poll, or dropped with the future) is dropped with the channel's lock
/// released: a waker's drop is user code (the last reference to another
/// executor's task), and one that uses the channel must not deadlock. The
/// wait queue is the semaphore's, the promise's and the state machine's
/// interruptions' too.
#[test]
fn a_waker_a_channel_lets_go_of_is_dropped_with_its_lock_released() {
    watchdog("channel-waker-drop-unlocked", 30, || {
        let (tx, rx) = gdex::channel::<u32>(1);
        let ran = Arc::new(AtomicUsize::new(0));
        let probe = || {
            let (tx, ran) = (tx.clone(), ran.clone());
            common::waker_running_on_drop(move || {
                let _ = tx.len();
                ran.fetch_add(1, Ordering::SeqCst);
            })
        };
        let mut recv = Box::pin(rx.recv());
        assert!(poll_with(recv.as_mut(), &probe()).is_pending());
        assert_eq!(ran.load(Ordering::SeqCst), 0, "the receive keeps its waker");
        assert!(poll_with(recv.as_mut(), &probe()).is_pending());
        assert_eq!(ran.load(Ordering::SeqCst), 1, "replaced: dropped");
        let mut second = Box::pin(rx.recv());
        assert!(poll_with(second.as_mut(), &probe()).is_pending());
        drop(recv);
        assert_eq!(ran.load(Ordering::SeqCst), 2, "its future dropped: dropped");
        tx.try_send(7).unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), 3, "woken: used up");
        let (count, waker) = count_waker();
        assert!(matches!(
            poll_with(second.as_mut(), &waker),
            Poll::Ready(Ok(7))
        ));
        assert_eq!(wakes(&count), 0);
    });
}

/// A value whose `clone` drops a spare future of its own promise.
struct CloneUsesItsPromise(Arc<std::sync::Mutex<Option<gdex::PromiseFuture<CloneUsesItsPromise>>>>);

impl Clone for CloneUsesItsPromise {
    fn clone(&self) -> Self {
        drop(self.0.lock().unwrap().take());
        CloneUsesItsPromise(self.0.clone())
    }
}

/// A promise's waiters copy the value (`T::clone`, user code) with the
/// promise's lock released: a `clone` that uses the same promise does not
/// deadlock, and the last waiter still gets the value itself.
#[test]
fn a_promises_waiters_clone_the_value_with_its_lock_released() {
    watchdog("promise-clone-unlocked", 30, || {
        let (promise, last) = gdex::Promise::new();
        let early = last.clone();
        let spare = Arc::new(std::sync::Mutex::new(Some(last.clone())));
        promise.resolve(CloneUsesItsPromise(spare.clone()));
        let copy = gdex::block_on(early).expect("a copy");
        assert!(spare.lock().unwrap().is_none(), "the clone ran");
        let value = gdex::block_on(last).expect("the value");
        assert!(Arc::ptr_eq(&copy.0, &value.0));
    });
}
