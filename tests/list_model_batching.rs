//! L1's batching: the feed drains the stream into an unmapped backlog,
//! emits a batch at most once per batch interval (a `gdex::sleep` timer),
//! sizes batches to the frame budget from the last batch's cost per item,
//! and holds a stream's panic until the items before it are appended.
//! Checked against odd streams (ready, pending or ended; spurious wake-ups,
//! a forgotten waker, slow polls), odd bounds (zero, huge, changed from a
//! handler or from outside while the feed sleeps), re-entrancy, panics, and
//! the model, its pool or its thread going while the feed sleeps on its
//! timer. `tests/list_model.rs` has the model's other promises.

use crate::common;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use common::{
    boxed, is_child, on_own_context, panic_handler_lock, pump_for, pump_polling, record_panics,
    run_child, value_at, watchdog, Counted, Rng,
};
use futures::StreamExt;
use gdex::gio::prelude::*;
use gdex::glib;
use gdex::glib::translate::ToGlibPtr;
use gdex::{ListModel, Scheduler, ThreadPool};

fn ty() -> glib::Type {
    glib::BoxedAnyObject::static_type()
}

/// The model holds exactly `0..count`, in order.
fn assert_in_order(model: &ListModel, count: u64) {
    assert_eq!(model.n_items() as u64, count, "items in the model");
    for n in 0..count {
        assert_eq!(value_at(model, n as u32), n, "the item at {n}");
    }
}

/// Sends `n` on a channel with room (the owner thread must not block).
fn put(tx: &gdex::Sender<u64>, n: u64) {
    tx.try_send(n)
        .expect("the channel is open (the feed has not stopped) and has room");
}

/// The time GLib's poll would wait on `context` now, from its sources'
/// ready times: `None` for no timeout (nothing timed is attached).
fn next_timeout(context: &glib::MainContext) -> Option<Duration> {
    let ctx: *mut glib::ffi::GMainContext = context.to_glib_none().0;
    // SAFETY: `context` is alive and this thread may acquire it (it is this
    // test thread's own, pushed as its thread-default); prepare and query
    // are called on an acquired context, as GLib requires, and query gets
    // no fd buffer (0 entries: it only reports how many it would need).
    unsafe {
        assert!(glib::ffi::g_main_context_acquire(ctx) != 0, "our context");
        let mut priority = 0;
        glib::ffi::g_main_context_prepare(ctx, &mut priority);
        let mut timeout = -1;
        glib::ffi::g_main_context_query(ctx, i32::MAX, &mut timeout, std::ptr::null_mut(), 0);
        glib::ffi::g_main_context_release(ctx);
        u64::try_from(timeout).ok().map(Duration::from_millis)
    }
}

/// The items before a panic are kept. The feed holds items that arrive
/// within a batch interval unmapped (L1's batching): a stream that panics
/// after giving ten must not take those ten with it, nor a `map` that
/// panics on the sixth item take the five it made (L1, X5).
#[test]
fn the_items_before_a_panic_in_the_stream_or_map_are_in_the_model() {
    let _lock = panic_handler_lock();
    watchdog("the_items_before_a_panic_are_in_the_model", 60, || {
        let seen = record_panics("batching: items before");
        on_own_context(|context| {
            // The stream: one item at once, nine a moment later (so they
            // wait for the next batch, a second away), then a panic.
            let stream = futures::stream::unfold(0u64, |n| async move {
                match n {
                    0 => {}
                    1 => gdex::sleep(Duration::from_millis(5)).await,
                    10 => panic!("batching: items before the stream's panic"),
                    _ => {}
                }
                Some((n, n + 1))
            });
            let model = ListModel::from_stream(ty(), stream, boxed);
            model.set_batch_interval(Duration::from_secs(1));
            pump_for(context, Duration::from_secs(5), || model.is_complete());
            assert!(
                model.is_complete(),
                "the stream's panic completes the model"
            );
            assert_eq!(
                model.n_items(),
                10,
                "the items the stream gave before its panic"
            );

            let model = ListModel::from_stream(ty(), futures::stream::iter(0..10u64), |n| {
                if n == 5 {
                    panic!("batching: items before map's panic");
                }
                boxed(n)
            });
            pump_for(context, Duration::from_secs(5), || model.is_complete());
            assert!(model.is_complete(), "map's panic completes the model");
            assert_eq!(model.n_items(), 5, "the items map made before its panic");
        });
        gdex::reset_panic_handler();
        assert_eq!(seen.lock().unwrap().len(), 2, "each panic reported once");
    });
}

/// A huge batch interval (`Duration::MAX`: "never by time, only when
/// the stream ends, the backlog is full or the budget calls") made the feed
/// panic after its first batch: `Instant::now() + interval` overflows. The
/// panic went to the handler and the model completed with that first batch:
/// the rest of the stream was lost. The items now wait, the stream's end
/// flushes them at once, and nothing panics (L1).
#[test]
fn a_huge_batch_interval_waits_but_never_overflows() {
    let _lock = panic_handler_lock();
    watchdog("a_huge_batch_interval_waits", 60, || {
        let seen = record_panics("");
        on_own_context(|context| {
            let (tx, rx) = gdex::channel::<u64>(16);
            let model = ListModel::from_receiver(ty(), rx, boxed);
            model.set_batch_interval(Duration::MAX);
            put(&tx, 0);
            // The first batch goes at once.
            pump_polling(context, || model.n_items() == 1);
            put(&tx, 1);
            put(&tx, 2);
            assert!(
                !pump_for(context, Duration::from_millis(100), || model.n_items() > 1),
                "the interval did not hold the next items back"
            );
            drop(tx);
            // The end flushes what waits; `complete` does not wait for the
            // interval either.
            let started = Instant::now();
            assert!(
                pump_for(context, Duration::from_secs(2), || model.is_complete()),
                "complete waited for the interval"
            );
            assert!(started.elapsed() < Duration::from_secs(2));
            assert_in_order(&model, 3);
        });
        gdex::reset_panic_handler();
        let seen = seen.lock().unwrap().clone();
        assert!(seen.is_empty(), "the feed panicked: {seen:?}");
    });
}

/// A budget of years (`Duration::MAX`) sizes batches by the growth cap
/// alone: the room it leaves, in items, is more than a `usize` counts, and
/// a plain cast truncated it to an arbitrary size (one item, at worst; a
/// probe: the sizes it gave here happened to be large). 5,000 ready
/// items go in the cap's steps (16, 64, 256, 1,024, the rest): a handful
/// of batches (L1).
#[test]
fn a_budget_of_years_sizes_batches_by_the_cap_alone() {
    watchdog("a_budget_of_years", 60, || {
        on_own_context(|context| {
            let model = ListModel::from_stream(ty(), futures::stream::iter(0..5_000u64), boxed);
            model.set_frame_budget(Duration::MAX);
            let batches = Rc::new(Cell::new(0u32));
            let counted = batches.clone();
            model.connect_items_changed(move |_, _, _, _| counted.set(counted.get() + 1));
            pump_polling(context, || model.is_complete());
            assert_in_order(&model, 5_000);
            assert!(
                batches.get() <= 8,
                "{} batches for 5,000 ready items",
                batches.get()
            );
        });
    });
}

/// A stream that is always ready but slower than the budget allows
/// (work done on the owner thread, 1 ms an item; map and handlers cheap):
/// the drain spent the whole budget taking items, and a batch due then got
/// what was left of it, nothing: one item a batch (the minimum). Each turn
/// took four items and appended one, so the list fell ever further behind
/// the stream (225 items, a quarter of a second of its work, by the 300th),
/// up to the 4,096-item backlog, and nearly every `items-changed` carried
/// one item. The feed before batching mapped as it drained: no lag. Now a
/// drain that runs out of time with a batch due lets the loop run, then the
/// batch goes first, with the whole budget (L1).
#[test]
fn an_always_ready_stream_slower_than_the_budget_is_not_left_behind() {
    watchdog("an_always_ready_slow_stream", 60, || {
        on_own_context(|context| {
            let produced = Rc::new(Cell::new(0u64));
            let p = produced.clone();
            let stream = futures::stream::poll_fn(move |_| {
                let n = p.get();
                if n == 300 {
                    return Poll::Ready(None);
                }
                common::spin(Duration::from_millis(1));
                p.set(n + 1);
                Poll::Ready(Some(n))
            });
            let model = ListModel::from_stream(ty(), stream, boxed);
            let lag = Rc::new(Cell::new(0u64));
            let sizes: Rc<RefCell<Vec<u32>>> = Rc::default();
            let (l, s) = (lag.clone(), sizes.clone());
            model.connect_items_changed(move |model, _, _, added| {
                // Taken from the stream and not in the list yet.
                l.set(l.get().max(produced.get() - u64::from(model.n_items())));
                s.borrow_mut().push(added);
            });
            pump_polling(context, || model.is_complete());
            assert_in_order(&model, 300);
            let sizes = sizes.borrow();
            let singles = sizes.iter().filter(|&&n| n == 1).count();
            assert!(
                lag.get() <= 40,
                "the list fell {} items behind the stream; {} batches, {singles} of one item",
                lag.get(),
                sizes.len()
            );
        });
    });
}

/// A stream's panic is held until the items it gave before it are
/// appended, a batch a loop turn. If the model went meanwhile (a
/// handler of the first batch dropped the list, a search replaced), the
/// feed was cancelled with the panic in it: never reported, where the feed
/// before batching reported it at once. A held panic is now reported when
/// the feed goes without having resumed it (L1).
#[test]
fn a_stream_panic_is_reported_when_the_model_goes_first() {
    let _lock = panic_handler_lock();
    watchdog("a_stream_panic_is_reported_when_the_model_goes", 60, || {
        let seen = record_panics("batching: stream");
        on_own_context(|context| {
            let stream = futures::stream::iter(0..100u64).chain(futures::stream::poll_fn(
                |_| -> Poll<Option<u64>> { panic!("batching: stream breaks after 100 items") },
            ));
            let model = ListModel::from_stream(ty(), stream, boxed);
            let weak = model.downgrade();
            let slot = Rc::new(RefCell::new(Some(model)));
            let s = slot.clone();
            slot.borrow()
                .as_ref()
                .unwrap()
                .connect_items_changed(move |_, _, _, _| drop(s.borrow_mut().take()));
            pump_polling(context, || weak.upgrade().is_none());
            pump_for(context, Duration::from_millis(200), || {
                !seen.lock().unwrap().is_empty()
            });
        });
        gdex::reset_panic_handler();
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen.len(),
            1,
            "the stream's panic was not reported once: {seen:?}"
        );
    });
}

/// The same held panic, when `map` panics on one of the items before
/// it: the map's panic was reported and the stream's dropped unreported.
/// Both are reported now (the stream's first: it came first), and the model
/// completes with the items map made (L1).
#[test]
fn a_map_panic_does_not_swallow_the_streams_panic() {
    let _lock = panic_handler_lock();
    watchdog("a_map_panic_does_not_swallow_the_streams", 60, || {
        let seen = record_panics("batching: both");
        on_own_context(|context| {
            let stream = futures::stream::iter(0..20u64).chain(futures::stream::poll_fn(
                |_| -> Poll<Option<u64>> { panic!("batching: both: the stream breaks") },
            ));
            let model = ListModel::from_stream(ty(), stream, |n| {
                if n == 3 {
                    panic!("batching: both: map refuses 3");
                }
                boxed(n)
            });
            pump_polling(context, || model.is_complete());
            pump_for(context, Duration::from_millis(100), || false);
            assert_in_order(&model, 3);
        });
        gdex::reset_panic_handler();
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2, "both panics, once each: {seen:?}");
        assert!(seen[0].contains("stream breaks"), "{seen:?}");
        assert!(seen[1].contains("map refuses"), "{seen:?}");
    });
}

/// `set_batch_interval` called from an `items-changed` handler (a
/// consumer that wants each item at once from now on) did not apply to the
/// next batch: the feed read the interval before the batch and set the
/// next one's time from that. With a 30 s interval, an item sent after the
/// handler switched to zero waited 30 s (L1).
#[test]
fn a_batch_interval_shortened_in_a_handler_applies_to_the_next_batch() {
    watchdog("a_batch_interval_shortened_in_a_handler", 60, || {
        on_own_context(|context| {
            let (tx, rx) = gdex::channel::<u64>(16);
            let model = ListModel::from_receiver(ty(), rx, boxed);
            model.set_batch_interval(Duration::from_secs(30));
            model.connect_items_changed(|model, _, _, _| {
                model.set_batch_interval(Duration::ZERO);
            });
            put(&tx, 0);
            pump_polling(context, || model.n_items() == 1);
            put(&tx, 1);
            assert!(
                pump_for(context, Duration::from_secs(2), || model.n_items() == 2),
                "the next item waited for the interval the handler replaced"
            );
            drop(tx);
            pump_polling(context, || model.is_complete());
            assert_in_order(&model, 2);
        });
    });
}

/// The same from outside, while the feed sleeps on its timer with
/// items waiting: the new interval counts from the last batch, and the
/// feed wakes up to it (it slept until the old one's end) (L1).
#[test]
fn a_batch_interval_shortened_while_the_feed_sleeps_wakes_it() {
    watchdog(
        "a_batch_interval_shortened_while_the_feed_sleeps",
        60,
        || {
            on_own_context(|context| {
                let (tx, rx) = gdex::channel::<u64>(16);
                let model = ListModel::from_receiver(ty(), rx, boxed);
                model.set_batch_interval(Duration::from_secs(30));
                put(&tx, 0);
                pump_polling(context, || model.n_items() == 1);
                put(&tx, 1);
                // The feed takes item 1 and sleeps on its timer.
                pump_for(context, Duration::from_millis(50), || false);
                assert_eq!(model.n_items(), 1, "the interval holds item 1 back");
                model.set_batch_interval(Duration::from_millis(1));
                assert!(
                    pump_for(context, Duration::from_secs(2), || model.n_items() == 2),
                    "the waiting item kept to the old interval"
                );
                // And a longer one holds the next batch back again.
                model.set_batch_interval(Duration::from_secs(30));
                put(&tx, 2);
                assert!(!pump_for(context, Duration::from_millis(100), || model
                    .n_items()
                    == 3));
                drop(tx);
                pump_polling(context, || model.is_complete());
                assert_in_order(&model, 3);
            });
        },
    );
}

/// A model fed from a channel (room for 16 items) with a batch interval
/// of `interval`: the channel's sender, and the model.
fn fed_every(interval: Duration) -> (gdex::Sender<u64>, ListModel) {
    let (tx, rx) = gdex::channel::<u64>(16);
    let model = ListModel::from_receiver(ty(), rx, boxed);
    model.set_batch_interval(interval);
    (tx, model)
}

/// Ends the stream of a model [`fed_every`] fed, and checks that it
/// completes holding `0..count` in order.
fn complete_in_order(
    context: &glib::MainContext,
    tx: gdex::Sender<u64>,
    model: &ListModel,
    count: u64,
) {
    drop(tx);
    pump_polling(context, || model.is_complete());
    assert_in_order(model, count);
}

/// The batch interval is a gdex timer's, so it keeps the time of the
/// `TestClock` that drives the feed's context: while the clock is paused,
/// real time passing does not let a held-back batch go (it used to: the
/// interval was counted on `Instant::now`, and the next wake-up of the
/// feed found it over), and advancing the clock by the interval does
/// (L1, T1).
#[test]
fn the_batch_interval_keeps_a_test_clocks_time() {
    watchdog("the_batch_interval_keeps_a_test_clocks_time", 60, || {
        on_own_context(|context| {
            let clock = gdex::TestClock::paused();
            let _driven = clock.attach(context);
            let interval = Duration::from_millis(100);
            let (tx, model) = fed_every(interval);
            put(&tx, 0);
            pump_polling(context, || model.n_items() == 1);
            put(&tx, 1);
            // Twice the interval in real time, none on the clock; then a
            // new item wakes the feed.
            pump_for(context, 2 * interval, || false);
            put(&tx, 2);
            pump_for(context, Duration::from_millis(50), || false);
            assert_eq!(
                model.n_items(),
                1,
                "a batch went when real time, not the paused clock, passed its interval"
            );
            clock.advance(interval);
            assert!(
                pump_for(context, Duration::from_secs(2), || model.n_items() == 3),
                "the batch did not go when the clock passed its interval"
            );
            complete_in_order(context, tx, &model, 3);
        });
    });
}

/// A clock attached to the feed's context after a batch went on real time
/// (or let go of it after a batch went on the clock's time) puts that
/// batch's time on another scale than the next reading: the next batch
/// still waits one interval on the clock the feed now runs on, not the
/// two clocks' difference too. (It waited the difference: a clock paused
/// 200 ms behind real time held the batch until advanced by 200 ms more
/// than the interval, and a clock advanced by an hour and let go of held
/// it for an hour of real time.) (L1, T1)
#[test]
fn a_clock_attached_or_let_go_between_batches_holds_the_next_one_interval() {
    watchdog("a_clock_attached_or_let_go_between_batches", 60, || {
        let interval = Duration::from_millis(100);
        // Attached after a batch: the clock reads 200 ms earlier.
        on_own_context(|context| {
            let clock = gdex::TestClock::paused();
            let (tx, model) = fed_every(interval);
            pump_for(context, Duration::from_millis(200), || false);
            put(&tx, 0);
            pump_polling(context, || model.n_items() == 1);
            let _driven = clock.attach(context);
            put(&tx, 1);
            pump_for(context, Duration::from_millis(50), || false);
            assert_eq!(model.n_items(), 1, "the batch waits for the clock");
            clock.advance(interval);
            assert!(
                pump_for(context, Duration::from_secs(2), || model.n_items() == 2),
                "a batch after the clock was attached waited longer than the interval"
            );
            complete_in_order(context, tx, &model, 2);
        });
        // Let go of after a batch on a clock an hour ahead of real time.
        on_own_context(|context| {
            let clock = gdex::TestClock::paused();
            let driven = clock.attach(context);
            clock.advance(Duration::from_secs(3600));
            let (tx, model) = fed_every(interval);
            put(&tx, 0);
            pump_polling(context, || model.n_items() == 1);
            drop(driven);
            put(&tx, 1);
            assert!(
                pump_for(context, Duration::from_secs(5), || model.n_items() == 2),
                "a batch after the clock was let go of waited for the clock's lead"
            );
            complete_in_order(context, tx, &model, 2);
        });
    });
}

/// A batch that goes before its interval timer fires (the interval was
/// shortened, the stream ended, a backlog filled) takes the timer with it:
/// no waiter is left in a `TestClock`'s book, where auto-advance would
/// jump the clock to a deadline nobody waits for (nor a `GSource` on the
/// context, whose poll would wake for it) (L1, T1).
#[test]
fn a_batch_that_goes_before_its_timer_leaves_no_timer() {
    watchdog("a_batch_before_its_timer", 60, || {
        on_own_context(|context| {
            let clock = gdex::TestClock::paused();
            let _driven = clock.attach(context);
            let (tx, model) = fed_every(Duration::from_secs(3600));
            put(&tx, 0);
            pump_polling(context, || model.n_items() == 1);
            put(&tx, 1);
            pump_polling(context, || clock.pending_timers() == 1);
            model.set_batch_interval(Duration::ZERO);
            pump_polling(context, || model.n_items() == 2);
            assert_eq!(
                clock.pending_timers(),
                0,
                "the batch went, and its timer still waits on the clock"
            );
            clock.set_auto_advance(true);
            pump_for(context, Duration::from_millis(100), || false);
            assert_eq!(
                clock.elapsed(),
                Duration::ZERO,
                "auto-advance moved the clock though nothing waits"
            );
            complete_in_order(context, tx, &model, 2);
        });
    });
}

/// Streams that alternate ready items, yields, short sleeps, spurious
/// wake-ups and bursts, while an `items-changed` handler changes the
/// interval and the budget (zero included) and sometimes runs a nested
/// loop: every item arrives once, in order, each batch at the end of the
/// list, and the model completes (L1).
#[test]
fn random_streams_and_bounds_lose_and_reorder_nothing() {
    watchdog("random_streams_and_bounds", 120, || {
        on_own_context(|context| {
            for seed in 1..=6u64 {
                let count = 400u64;
                let rng = Rc::new(RefCell::new(Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15))));
                let r = rng.clone();
                let stream = futures::stream::unfold(0u64, move |n| {
                    let action = r.borrow_mut().below(10);
                    let micros = r.borrow_mut().below(1500);
                    async move {
                        if n == count {
                            return None;
                        }
                        match action {
                            0 | 1 => gdex::yield_now().await,
                            2 => gdex::sleep(Duration::from_micros(micros)).await,
                            3 => {
                                // A spurious wake-up: woken, then pending once.
                                let mut once = false;
                                std::future::poll_fn(|cx| {
                                    if std::mem::replace(&mut once, true) {
                                        Poll::Ready(())
                                    } else {
                                        cx.waker().wake_by_ref();
                                        Poll::Pending
                                    }
                                })
                                .await
                            }
                            _ => {}
                        }
                        Some((n, n + 1))
                    }
                });
                let model = ListModel::from_stream(ty(), stream, boxed);
                let next = Rc::new(Cell::new(0u32));
                let (nx, r, ctx) = (next.clone(), rng.clone(), context.clone());
                model.connect_items_changed(move |model, position, removed, added| {
                    assert_eq!((position, removed), (nx.get(), 0), "appended at the end");
                    assert!(added > 0);
                    nx.set(position + added);
                    let (pick, nest) = {
                        let mut r = r.borrow_mut();
                        (r.below(8), r.below(10) == 0)
                    };
                    match pick {
                        0 => model.set_batch_interval(Duration::ZERO),
                        1 => model.set_batch_interval(Duration::from_millis(1)),
                        2 => model.set_batch_interval(Duration::from_millis(5)),
                        3 => model.set_frame_budget(Duration::ZERO),
                        4 => model.set_frame_budget(Duration::from_micros(50)),
                        5 => model.set_frame_budget(ListModel::DEFAULT_FRAME_BUDGET),
                        _ => {}
                    }
                    if nest {
                        ctx.iteration(false);
                    }
                });
                assert!(
                    pump_for(context, Duration::from_secs(20), || model.is_complete()),
                    "seed {seed}: never completed ({} items)",
                    model.n_items()
                );
                assert_in_order(&model, count);
                assert_eq!(
                    next.get() as u64,
                    count,
                    "seed {seed}: every batch announced"
                );
            }
        });
    });
}

/// A stream that ends while the feed sleeps on a long interval with items
/// waiting: they go at once, and `complete` (and `until_complete`) does not
/// wait for the interval (L1).
#[test]
fn a_stream_that_ends_while_the_feed_sleeps_flushes_at_once() {
    watchdog("a_stream_that_ends_while_the_feed_sleeps", 60, || {
        on_own_context(|context| {
            let (tx, rx) = gdex::channel::<u64>(16);
            let model = ListModel::from_receiver(ty(), rx, boxed);
            model.set_batch_interval(Duration::from_secs(30));
            put(&tx, 0);
            pump_polling(context, || model.n_items() == 1);
            put(&tx, 1);
            put(&tx, 2);
            pump_for(context, Duration::from_millis(50), || false);
            assert_eq!(model.n_items(), 1);
            let done = Rc::new(Cell::new(false));
            let d = done.clone();
            let wait = model.until_complete();
            gdex::spawn_local(async move {
                wait.await;
                d.set(true);
            })
            .detach();
            drop(tx);
            assert!(
                pump_for(context, Duration::from_secs(2), || done.get()),
                "until_complete waited for the interval"
            );
            assert_in_order(&model, 3);
        });
    });
}

/// The model dropped while its feed sleeps on the interval timer with an
/// item waiting: the feed's future goes at once, with the stream, and the
/// timer's GSource leaves the context (GLib's poll no longer has a 30 s
/// timeout); a `spawn` producer on the pool is cancelled the same way (L1).
#[test]
fn the_model_dropped_while_the_feed_sleeps_takes_the_timer_and_the_stream() {
    watchdog("the_model_dropped_while_the_feed_sleeps", 60, || {
        let stream_gone = Arc::new(AtomicUsize::new(0));
        let producer_gone = Arc::new(AtomicUsize::new(0));
        let pool = ThreadPool::builder().workers(1).build().unwrap();
        on_own_context(|context| {
            let marker = Counted(stream_gone.clone());
            let stream = futures::stream::unfold(0u64, |n| async move {
                match n {
                    0 => {}
                    1 => gdex::sleep(Duration::from_millis(5)).await,
                    _ => std::future::pending::<()>().await,
                }
                Some((n, n + 1))
            })
            .map(move |n| {
                let _ = &marker;
                n
            });
            let model = ListModel::from_stream(ty(), stream, boxed);
            model.set_batch_interval(Duration::from_secs(30));
            pump_polling(context, || model.n_items() == 1);
            pump_for(context, Duration::from_millis(50), || false);
            assert_eq!(model.n_items(), 1, "item 1 waits for the interval");
            let before = next_timeout(context);
            assert!(
                before.is_some_and(|t| t > Duration::from_secs(20)),
                "the feed's timer is not on the context: {before:?}"
            );
            drop(model);
            pump_for(context, Duration::from_millis(20), || false);
            assert_eq!(stream_gone.load(Ordering::SeqCst), 1, "the stream lives on");
            let after = next_timeout(context);
            assert!(
                after.is_none_or(|t| t < Duration::from_secs(1)),
                "the feed's timer outlived it: {after:?}"
            );

            let marker = Counted(producer_gone.clone());
            let model = ListModel::spawn(&pool.scheduler(), ty(), boxed, move |items| async move {
                let _marker = marker;
                let mut n = 0u64;
                loop {
                    let _ = items.send(n).await;
                    n += 1;
                    gdex::sleep(Duration::from_millis(2)).await;
                }
            });
            model.set_batch_interval(Duration::from_secs(30));
            // (The pool may send more than one item before the first batch.)
            pump_polling(context, || model.n_items() >= 1);
            let first = model.n_items();
            pump_for(context, Duration::from_millis(30), || false);
            assert_eq!(model.n_items(), first, "items wait for the interval");
            drop(model);
            pump_polling(context, || producer_gone.load(Ordering::SeqCst) == 1);
        });
    });
}

/// The pool shut down under a `spawn` producer while the feed sleeps on a
/// long interval with items waiting: the producer's `Sender` goes with its
/// future, the stream ends, and the waiting items go at once: the model
/// completes with every item sent (L1).
#[test]
fn the_pool_shut_down_while_items_wait_for_the_interval() {
    watchdog("the_pool_shut_down_while_items_wait", 60, || {
        let pool = ThreadPool::builder().workers(1).build().unwrap();
        let sent = Arc::new(AtomicUsize::new(0));
        on_own_context(|context| {
            let s = sent.clone();
            let model = ListModel::spawn(&pool.scheduler(), ty(), boxed, move |items| async move {
                let mut n = 0u64;
                // (Cancelled only at the sleep: a send to a channel with
                // room is ready at once, so `sent` counts what was sent.)
                while items.send(n).await.is_ok() {
                    s.fetch_add(1, Ordering::SeqCst);
                    n += 1;
                    gdex::sleep(Duration::from_millis(1)).await;
                }
            });
            model.set_batch_interval(Duration::from_secs(30));
            // (The pool may send more than one item before the first batch.)
            pump_polling(context, || model.n_items() >= 1);
            let first = model.n_items();
            // Items sent after the first batch (however slowly the
            // producer's worker gets the CPU) wait for the interval.
            assert!(
                pump_for(context, Duration::from_secs(10), || {
                    sent.load(Ordering::SeqCst) > first as usize
                }),
                "the producer sent nothing after the first batch"
            );
            assert_eq!(model.n_items(), first, "items wait for the interval");
            pool.shutdown();
            assert!(
                pump_for(context, Duration::from_secs(2), || model.is_complete()),
                "the waiting items kept to the interval after the stream ended"
            );
            let sent = sent.load(Ordering::SeqCst) as u64;
            assert!(sent > u64::from(first), "items were waiting");
            assert_in_order(&model, sent);
        });
    });
}

/// A panic in `map` on the very first item: the model completes empty, the
/// panic is reported once, and the stream is dropped (L1).
#[test]
fn a_panic_in_map_on_the_first_item() {
    let _lock = panic_handler_lock();
    watchdog("a_panic_in_map_on_the_first_item", 60, || {
        let seen = record_panics("batching: first");
        let gone = Arc::new(AtomicUsize::new(0));
        on_own_context(|context| {
            let marker = Counted(gone.clone());
            let stream = futures::stream::iter(0..10u64).map(move |n| {
                let _ = &marker;
                n
            });
            let model = ListModel::from_stream(ty(), stream, |_| -> glib::Object {
                panic!("batching: first item refused")
            });
            pump_polling(context, || model.is_complete());
            assert_eq!(model.n_items(), 0);
            assert_eq!(gone.load(Ordering::SeqCst), 1, "the stream was dropped");
        });
        gdex::reset_panic_handler();
        assert_eq!(seen.lock().unwrap().len(), 1);
    });
}

/// A stream that panics with the backlog full (4,096 items taken ahead,
/// the stream not polled until there is room): every item before the
/// panic is appended, in order, and the panic is reported once, after (L1).
#[test]
fn a_stream_panic_with_a_full_backlog_keeps_every_item_before_it() {
    let _lock = panic_handler_lock();
    watchdog("a_stream_panic_with_a_full_backlog", 60, || {
        let seen = record_panics("batching: full");
        on_own_context(|context| {
            let stream = futures::stream::iter(0..5000u64).chain(futures::stream::poll_fn(
                |_| -> Poll<Option<u64>> { panic!("batching: full backlog, then a panic") },
            ));
            let model = ListModel::from_stream(ty(), stream, boxed);
            let reported_at = Rc::new(Cell::new(None::<u32>));
            let (r, s) = (reported_at.clone(), seen.clone());
            model.connect_items_changed(move |model, _, _, _| {
                if r.get().is_none() && !s.lock().unwrap().is_empty() {
                    r.set(Some(model.n_items()));
                }
            });
            pump_polling(context, || model.is_complete());
            assert_in_order(&model, 5000);
            assert_eq!(reported_at.get(), None, "reported before every item was in");
        });
        gdex::reset_panic_handler();
        assert_eq!(seen.lock().unwrap().len(), 1);
    });
}

/// Re-entrancy on the panic path: `map` panics mid-batch, and the
/// `items-changed` handler of the items mapped before it drops the last
/// outside reference. The feed's own reference then goes while the panic
/// unwinds through the feed (dispose drops the feed's task inside its own
/// poll): no abort, the panic is reported once, the stream is dropped (L1).
#[test]
fn a_handler_drops_the_model_in_the_batch_whose_map_panics() {
    let _lock = panic_handler_lock();
    watchdog("a_handler_drops_the_model_while_map_panics", 60, || {
        let seen = record_panics("batching: unwinding");
        let gone = Arc::new(AtomicUsize::new(0));
        on_own_context(|context| {
            let marker = Counted(gone.clone());
            let stream = futures::stream::iter(0..20u64).map(move |n| {
                let _ = &marker;
                n
            });
            let model = ListModel::from_stream(ty(), stream, |n| {
                if n == 5 {
                    panic!("batching: unwinding through a disposed model");
                }
                boxed(n)
            });
            let weak = model.downgrade();
            let slot = Rc::new(RefCell::new(Some(model)));
            let s = slot.clone();
            slot.borrow()
                .as_ref()
                .unwrap()
                .connect_items_changed(move |model, _, _, added| {
                    assert_eq!((model.n_items(), added), (5, 5));
                    drop(s.borrow_mut().take());
                });
            pump_polling(context, || weak.upgrade().is_none());
            pump_polling(context, || gone.load(Ordering::SeqCst) == 1);
            pump_for(context, Duration::from_millis(50), || false);
        });
        gdex::reset_panic_handler();
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 1, "{seen:?}");
    });
}

/// The child of the next test: an `items-changed` handler that panics (L1).
#[test]
#[ignore]
fn child_a_panicking_items_changed_handler() {
    if !is_child() {
        return;
    }
    on_own_context(|context| {
        let model = ListModel::from_stream(ty(), futures::stream::iter(0..10u64), boxed);
        model.connect_items_changed(|_, _, _, _| panic!("batching: handler panics"));
        pump_for(context, Duration::from_secs(2), || model.is_complete());
    });
    println!("CHILD-SURVIVED");
}

/// A panic in an `items-changed` handler is not the feed's to catch: GObject
/// emits the signal through glib-rs's `extern "C"` trampoline, which a
/// panic cannot unwind through, so Rust aborts the process with the
/// handler's message (as it does for any glib-rs signal handler). Pinned so
/// that a change there is noticed (L1).
#[test]
fn a_panic_in_an_items_changed_handler_aborts_the_process() {
    if is_child() {
        return;
    }
    let (status, out) = run_child("child_a_panicking_items_changed_handler", &[], 60);
    let status = status.expect("the child hung");
    assert!(
        !status.success() && !out.contains("CHILD-SURVIVED"),
        "the child survived ({status:?}):\n{out}"
    );
    assert!(out.contains("batching: handler panics"), "{out}");
}

/// A stream that wakes itself and then returns `Pending` (a spurious
/// wake-up, every other poll) while items wait for the interval: each
/// wake-up polls the feed again (reusing its timer), and nothing is lost
/// or early (L1).
#[test]
fn spurious_wake_ups_while_items_wait() {
    watchdog("spurious_wake_ups_while_items_wait", 60, || {
        on_own_context(|context| {
            let polls = Rc::new(Cell::new(0u64));
            let p = polls.clone();
            let mut next = 0u64;
            let started = Instant::now();
            let stream = futures::stream::poll_fn(move |cx| {
                p.set(p.get() + 1);
                // An item every 2 ms; spurious wake-ups in between.
                if next == 50 {
                    return Poll::Ready(None);
                }
                if started.elapsed() >= Duration::from_millis(2) * next as u32 {
                    next += 1;
                    return Poll::Ready(Some(next - 1));
                }
                cx.waker().wake_by_ref();
                Poll::Pending
            });
            let model = ListModel::from_stream(ty(), stream, boxed);
            let sizes: Rc<RefCell<Vec<u32>>> = Rc::default();
            let s = sizes.clone();
            model.connect_items_changed(move |_, _, _, added| s.borrow_mut().push(added));
            pump_polling(context, || model.is_complete());
            assert_in_order(&model, 50);
            // ~100 ms of items at 16 ms a batch: a handful of batches, not
            // one per wake-up.
            assert!(
                sizes.borrow().len() <= 12,
                "{} batches for 50 items ({} polls)",
                sizes.borrow().len(),
                polls.get()
            );
        });
    });
}

/// A stream that forgets to register its waker (`Pending` with no wake-up
/// to come) while items wait for the interval is polled again when the
/// interval's timer fires: the model still completes. (With nothing
/// waiting, such a stream stalls the feed for ever, as it would any
/// executor: the stream breaks the `Stream` contract.) (L1)
#[test]
fn a_stream_that_forgets_its_waker_is_rescued_by_the_interval_timer() {
    watchdog("a_stream_that_forgets_its_waker", 60, || {
        on_own_context(|context| {
            let mut poll = 0u32;
            let stream = futures::stream::poll_fn(move |_| {
                poll += 1;
                match poll {
                    1 => Poll::Ready(Some(0u64)),
                    3 => Poll::Ready(Some(1)),
                    5 => Poll::Ready(None),
                    _ => Poll::Pending, // and no wake-up
                }
            });
            let model = ListModel::from_stream(ty(), stream, boxed);
            assert!(
                pump_for(context, Duration::from_secs(2), || model.is_complete()),
                "stalled with {} items",
                model.n_items()
            );
            assert_in_order(&model, 2);
        });
    });
}

/// An always-ready endless stream and a consumer slower than it: the feed
/// takes at most 4,096 items ahead of the list, at any moment (checked in
/// every handler and between loop turns), and the list keeps growing (L1).
#[test]
fn an_endless_ready_stream_stays_within_the_backlog_cap() {
    watchdog("an_endless_ready_stream_stays_within_the_cap", 60, || {
        on_own_context(|context| {
            let pulled = Rc::new(Cell::new(0u64));
            let p = pulled.clone();
            let model = ListModel::from_stream(
                ty(),
                futures::stream::iter(0..).map(move |n| {
                    p.set(p.get() + 1);
                    n
                }),
                boxed,
            );
            let most = Rc::new(Cell::new(0u64));
            let (m, p) = (most.clone(), pulled.clone());
            model.connect_items_changed(move |model, _, _, added| {
                common::spin(Duration::from_micros(2) * added);
                m.set(m.get().max(p.get() - u64::from(model.n_items())));
            });
            pump_polling(context, || {
                most.set(most.get().max(pulled.get() - u64::from(model.n_items())));
                model.n_items() >= 30_000
            });
            assert!(most.get() <= 4096, "{} items taken ahead", most.get());
            for n in (0..30_000u32).step_by(997) {
                assert_eq!(value_at(&model, n), u64::from(n));
            }
        });
    });
}

/// Zero interval and zero budget together, with a trickle from another
/// thread: one item a batch, each at once, all in order (L1).
#[test]
fn zero_interval_and_zero_budget() {
    watchdog("zero_interval_and_zero_budget", 60, || {
        on_own_context(|context| {
            let (tx, rx) = gdex::channel::<u64>(64);
            let model = ListModel::from_receiver(ty(), rx, boxed);
            model.set_batch_interval(Duration::ZERO);
            model.set_frame_budget(Duration::ZERO);
            let batches = Rc::new(Cell::new(0u32));
            let b = batches.clone();
            model.connect_items_changed(move |_, _, _, added| {
                assert_eq!(added, 1);
                b.set(b.get() + 1);
            });
            let feeder = std::thread::spawn(move || {
                for n in 0..500u64 {
                    gdex::wait_for(tx.send(n)).unwrap();
                    if n % 50 == 0 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            });
            pump_polling(context, || model.is_complete());
            feeder.join().unwrap();
            assert_in_order(&model, 500);
            assert_eq!(batches.get(), 500);
        });
    });
}

thread_local! {
    static KEPT: RefCell<Option<ListModel>> = const { RefCell::new(None) };
}

/// The owner thread ends while the feed sleeps on its interval timer with
/// items waiting: the model dropped at the end of its scope, or kept in a
/// thread-local and disposed in the thread's teardown. The stream is
/// dropped, nothing panics (L1).
#[test]
fn the_owner_thread_ends_while_the_feed_sleeps() {
    let _lock = panic_handler_lock();
    watchdog("the_owner_thread_ends_while_the_feed_sleeps", 60, || {
        let seen = record_panics("");
        for kept in [false, true] {
            let gone = Arc::new(AtomicUsize::new(0));
            let marker = Counted(gone.clone());
            std::thread::spawn(move || {
                let context = glib::MainContext::new();
                let _scheduler = Scheduler::for_context(&context);
                context
                    .with_thread_default(|| {
                        let stream = futures::stream::unfold(0u64, |n| async move {
                            if n > 0 {
                                gdex::sleep(Duration::from_millis(2)).await;
                            }
                            Some((n, n + 1))
                        })
                        .map(move |n| {
                            let _ = &marker;
                            n
                        });
                        let model = ListModel::from_stream(ty(), stream, boxed);
                        model.set_batch_interval(Duration::from_secs(30));
                        pump_polling(&context, || model.n_items() == 1);
                        pump_for(&context, Duration::from_millis(20), || false);
                        assert_eq!(model.n_items(), 1, "items wait for the interval");
                        if kept {
                            KEPT.with(|k| *k.borrow_mut() = Some(model));
                        }
                    })
                    .unwrap();
            })
            .join()
            .expect("the owner thread's end panicked");
            assert_eq!(gone.load(Ordering::SeqCst), 1, "kept: {kept}");
        }
        gdex::reset_panic_handler();
        let seen = seen.lock().unwrap().clone();
        assert!(seen.is_empty(), "{seen:?}");
    });
}
