//! The future-backed list model (L1): `gdex::ListModel`, a `gio::ListModel`
//! filled from a stream produced anywhere, with plain `gio::ListModel`
//! consumers (no GTK): items arrive in order, in batches, with
//! `items-changed` emitted on the owner thread; a batch keeps to the frame
//! budget and lets the owner's loop run between batches; a trickle is
//! gathered into about one batch per batch interval; a batch is sized so
//! that its `items-changed` handlers keep to the budget too; dropping the
//! model cancels its producer.

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{on_own_context, pump_polling, watchdog, Counted};
use futures::StreamExt;
use gdex::gio::prelude::*;
use gdex::glib;
use gdex::{ListModel, ThreadPool};

fn boxed(n: u64) -> glib::Object {
    glib::BoxedAnyObject::new(n).upcast()
}

fn value_at(model: &ListModel, position: u32) -> u64 {
    *model
        .item(position)
        .and_downcast::<glib::BoxedAnyObject>()
        .expect("a boxed item")
        .borrow::<u64>()
}

/// What the consumer saw of `items-changed`: (position, removed, added,
/// thread).
type Changes = Rc<RefCell<Vec<(u32, u32, u32, std::thread::ThreadId)>>>;

fn watch(model: &ListModel) -> Changes {
    let changes: Changes = Rc::default();
    let seen = changes.clone();
    model.connect_items_changed(move |model, position, removed, added| {
        // The model is consistent when the signal comes.
        assert_eq!(model.n_items(), position + added);
        seen.borrow_mut()
            .push((position, removed, added, std::thread::current().id()));
    });
    changes
}

/// 10,000 items produced on the pool arrive in order, in far fewer batches
/// than items, each announced on the owner thread at the position where it
/// was appended; `complete` is notified at the end.
#[test]
fn items_from_the_pool_arrive_in_order_in_batches_on_the_owner_thread() {
    watchdog("items_from_the_pool_arrive_in_order", 60, || {
        let pool = ThreadPool::builder().workers(2).build().unwrap();
        on_own_context(|context| {
            let count = common::stress(10_000) as u64;
            let model = ListModel::spawn(
                &pool.scheduler(),
                glib::BoxedAnyObject::static_type(),
                boxed,
                move |items| async move {
                    for n in 0..count {
                        if n % 100 == 0 {
                            gdex::yield_now().await;
                        }
                        items.send(n).await.unwrap();
                    }
                },
            );
            assert_eq!(model.item_type(), glib::BoxedAnyObject::static_type());
            let changes = watch(&model);
            let notified = Rc::new(RefCell::new(0));
            let seen = notified.clone();
            model.connect_notify_local(Some("complete"), move |_, _| *seen.borrow_mut() += 1);
            pump_polling(context, || model.is_complete());
            assert_eq!(model.n_items() as u64, count);
            for n in 0..count {
                assert_eq!(value_at(&model, n as u32), n);
            }
            assert_eq!(*notified.borrow(), 1);
            let changes = changes.borrow();
            let here = std::thread::current().id();
            let mut next = 0;
            for &(position, removed, added, thread) in changes.iter() {
                assert_eq!((position, removed), (next, 0), "appended in order");
                assert!(added > 0);
                assert_eq!(thread, here, "emitted on the owner thread");
                next += added;
            }
            assert_eq!(next as u64, count);
            assert!(
                (changes.len() as u64) < count / 10,
                "{} items-changed for {count} items: not batched",
                changes.len()
            );
        });
    });
}

/// Dropping the model cancels its producer on the pool (its future is
/// dropped), even one that would send forever.
#[test]
fn dropping_the_model_cancels_its_producer() {
    watchdog("dropping_the_model_cancels_its_producer", 60, || {
        let pool = ThreadPool::builder().workers(2).build().unwrap();
        let dropped = Arc::new(AtomicUsize::new(0));
        on_own_context(|context| {
            let marker = Counted(dropped.clone());
            let model = ListModel::spawn(
                &pool.scheduler(),
                glib::BoxedAnyObject::static_type(),
                boxed,
                move |items| async move {
                    let _marker = marker;
                    let mut n = 0u64;
                    loop {
                        // A sender to a dropped model fails; this producer
                        // ignores that, so only cancellation stops it.
                        let _ = items.send(n).await;
                        n += 1;
                        gdex::yield_now().await;
                    }
                },
            );
            pump_polling(context, || model.n_items() >= 100);
            assert!(!model.is_complete());
            assert_eq!(dropped.load(Ordering::SeqCst), 0);
            drop(model);
            pump_polling(context, || dropped.load(Ordering::SeqCst) == 1);
        });
    });
}

/// A batch keeps to the frame budget: with `map` taking 1 ms an item and a
/// budget of 5 ms, no batch holds more than the budget allows, and the
/// owner's other sources (a frame-rate timer here) run between batches.
#[test]
fn a_batch_keeps_to_the_frame_budget() {
    watchdog("a_batch_keeps_to_the_frame_budget", 60, || {
        on_own_context(|context| {
            let model = ListModel::from_stream(
                glib::BoxedAnyObject::static_type(),
                futures::stream::iter(0..200u64),
                |n| {
                    common::spin(Duration::from_millis(1));
                    boxed(n)
                },
            );
            model.set_frame_budget(Duration::from_millis(5));
            let changes = watch(&model);
            let (ticks, timer) = common::tick_counter(context);
            pump_polling(context, || model.is_complete());
            timer.destroy();
            assert_eq!(model.n_items(), 200);
            let changes = changes.borrow();
            let biggest = changes.iter().map(|c| c.2).max().unwrap();
            // 5 ms at 1 ms an item, plus the item that crosses the mark
            // (and slack for a slow clock read).
            assert!(biggest <= 7, "a batch of {biggest} items in a 5 ms budget");
            assert!(changes.len() >= 200 / 7, "{} batches", changes.len());
            assert!(
                ticks.load(Ordering::Relaxed) >= changes.len() / 2,
                "the loop ran {} times between {} batches",
                ticks.load(Ordering::Relaxed),
                changes.len()
            );
        });
    });
}

/// A trickle (a producer that sends each item as it finds it, here one
/// every ~100 µs from a plain thread) is gathered: batches go at most once
/// per batch interval, with whatever came meanwhile, not one per item or
/// two (GTK 4.8's list views pay per `items-changed`, more with each one).
/// The default interval is one 60 Hz frame; `set_batch_interval` changes it.
#[test]
fn a_trickle_is_gathered_into_one_batch_per_interval() {
    watchdog("a_trickle_is_gathered", 60, || {
        on_own_context(|context| {
            for interval in [None, Some(Duration::from_millis(30))] {
                let (tx, rx) = gdex::channel(1024);
                let model =
                    ListModel::from_receiver(glib::BoxedAnyObject::static_type(), rx, boxed);
                if let Some(interval) = interval {
                    model.set_batch_interval(interval);
                }
                // Batches split by the frame budget are not what this test
                // counts: on a loaded machine a batch preempted mid-way
                // runs out of budget (or is sized small from a preempted
                // one) and its rest goes a loop turn later, by design. It
                // failed about one run in ten with three test binaries on
                // two cores.
                model.set_frame_budget(Duration::from_secs(1));
                let interval = interval.unwrap_or(ListModel::DEFAULT_BATCH_INTERVAL);
                let times: Rc<RefCell<Vec<(Instant, u32)>>> = Rc::default();
                let seen = times.clone();
                model.connect_items_changed(move |_, _, _, added| {
                    seen.borrow_mut().push((Instant::now(), added));
                });
                let count = common::stress(1_500) as u64;
                let feeder = std::thread::spawn(move || {
                    for n in 0..count {
                        gdex::wait_for(tx.send(n)).unwrap();
                        std::thread::sleep(Duration::from_micros(100));
                    }
                });
                pump_polling(context, || model.is_complete());
                feeder.join().unwrap();
                assert_eq!(model.n_items() as u64, count);
                let times = times.borrow();
                // The first batches grow from 16 items (the feed learns what
                // an item costs); after that, one batch per interval.
                let span = times.last().unwrap().0 - times[0].0;
                let most = span.as_millis() / interval.as_millis() + 4;
                assert!(
                    times.len() as u128 <= most,
                    "{} batches in {span:?} with a {interval:?} interval ({count} items)",
                    times.len()
                );
                let mut gaps: Vec<Duration> = times.windows(2).map(|w| w[1].0 - w[0].0).collect();
                gaps.sort();
                // GLib's timers keep milliseconds: allow one early.
                let median = gaps[gaps.len() / 2];
                assert!(
                    median + Duration::from_millis(1) >= interval,
                    "batches {median:?} apart (the median) with a {interval:?} interval"
                );
            }
        });
    });
}

/// The frame budget holds the `items-changed` handlers too: a consumer
/// that spends 100 µs on each added item (a list view making rows) gets
/// batches sized to the budget, from what the last batch cost per item,
/// however many items are ready, and the owner's loop runs between them.
#[test]
fn a_batch_is_sized_so_that_its_handlers_keep_to_the_budget() {
    watchdog("a_batch_is_sized_to_the_budget", 60, || {
        on_own_context(|context| {
            let model = ListModel::from_stream(
                glib::BoxedAnyObject::static_type(),
                futures::stream::iter(0..400u64),
                boxed,
            );
            model.set_frame_budget(Duration::from_millis(5));
            let added: Rc<RefCell<Vec<u32>>> = Rc::default();
            let seen = added.clone();
            model.connect_items_changed(move |_, _, _, added| {
                common::spin(Duration::from_micros(100) * added);
                seen.borrow_mut().push(added);
            });
            let (ticks, timer) = common::tick_counter(context);
            pump_polling(context, || model.is_complete());
            timer.destroy();
            assert_eq!(model.n_items(), 400);
            let added = added.borrow();
            // 5 ms at 100 µs an item is 50; slack for a slow clock.
            let biggest = *added.iter().max().unwrap();
            assert!(
                biggest <= 60,
                "a batch of {biggest} items, {} ms of handlers, in a 5 ms budget",
                biggest / 10
            );
            assert!(
                ticks.load(Ordering::Relaxed) >= added.len() / 4,
                "the loop ran {} times between {} batches",
                ticks.load(Ordering::Relaxed),
                added.len()
            );
        });
    });
}

/// A consumer whose first items cost the most (a list view makes widgets
/// for the rows it shows, then only counts the rest) gets small batches
/// first, then batches that grow (at most fourfold each) once items turn
/// cheap: a big backlog needs few `items-changed`. And a stream that is
/// always ready is taken no further ahead of the list than a bounded
/// backlog.
#[test]
fn batches_grow_once_items_are_cheap_and_the_backlog_is_bounded() {
    watchdog("batches_grow_once_items_are_cheap", 60, || {
        on_own_context(|context| {
            let pulled = Rc::new(std::cell::Cell::new(0u64));
            let counter = pulled.clone();
            let model = ListModel::from_stream(
                glib::BoxedAnyObject::static_type(),
                futures::stream::iter(0..).map(move |n| {
                    counter.set(counter.get() + 1);
                    n
                }),
                boxed,
            );
            let added: Rc<RefCell<Vec<u32>>> = Rc::default();
            let seen = added.clone();
            model.connect_items_changed(move |model, position, _, added| {
                // The first 100 items are the "rows": 200 µs each.
                let rows = (position + added).min(100).saturating_sub(position);
                common::spin(Duration::from_micros(200) * rows);
                seen.borrow_mut().push(added);
                assert!(model.n_items() == position + added);
            });
            let target = common::stress(50_000) as u32;
            pump_polling(context, || {
                let backlog = pulled.get() - u64::from(model.n_items());
                assert!(
                    backlog <= 4096 + 4096,
                    "{backlog} items taken ahead of the list"
                );
                model.n_items() >= target
            });
            let added = added.borrow();
            // The rows' batches: none with more than the default 4 ms
            // budget's worth (20 rows), with slack for a slow clock.
            let mut position = 0u32;
            for &n in added.iter() {
                let rows = (position + n).min(100).saturating_sub(position);
                assert!(
                    rows <= 26,
                    "a batch made {rows} rows (200 µs each) in a 4 ms budget"
                );
                position += n;
            }
            assert!(
                added.len() < 200,
                "{} batches for {} items: batches did not grow",
                added.len(),
                model.n_items()
            );
        });
    });
}

/// A local stream (`!Send` items are fine: the stream is polled on the
/// owner thread) and a gdex channel fed from a plain thread both fill a
/// model; an empty stream completes an empty model.
#[test]
fn a_local_stream_and_a_channel_fill_a_model() {
    watchdog("a_local_stream_and_a_channel_fill_a_model", 60, || {
        on_own_context(|context| {
            let local = Rc::new(7u64);
            let model = ListModel::from_stream(
                glib::BoxedAnyObject::static_type(),
                futures::stream::iter((0..50u64).map(move |n| n * *local)),
                boxed,
            );
            pump_polling(context, || model.is_complete());
            assert_eq!(model.n_items(), 50);
            assert_eq!(value_at(&model, 49), 49 * 7);

            let (tx, rx) = gdex::channel(8);
            let model = ListModel::from_receiver(glib::BoxedAnyObject::static_type(), rx, boxed);
            let feeder = std::thread::spawn(move || {
                for n in 0..300u64 {
                    gdex::wait_for(tx.send(n)).unwrap();
                }
            });
            pump_polling(context, || model.is_complete());
            feeder.join().unwrap();
            assert_eq!(model.n_items(), 300);
            assert_eq!(value_at(&model, 299), 299);

            let empty = ListModel::from_stream(
                glib::BoxedAnyObject::static_type(),
                futures::stream::empty::<u64>(),
                boxed,
            );
            pump_polling(context, || empty.is_complete());
            assert_eq!(empty.n_items(), 0);
            assert!(empty.item(0).is_none());
        });
    });
}

/// `until_complete` resolves when the stream ends, and at once for a
/// complete model; misuse is refused with a message: an item type that is
/// not a GObject type.
#[test]
fn until_complete_and_misuse() {
    watchdog("until_complete_and_misuse", 60, || {
        on_own_context(|_| {
            let model = ListModel::from_stream(
                glib::BoxedAnyObject::static_type(),
                futures::stream::iter(0..10u64),
                boxed,
            );
            gdex::block_on(model.until_complete());
            assert!(model.is_complete());
            gdex::block_on(model.until_complete());
            let refused = std::panic::catch_unwind(|| {
                ListModel::from_stream(glib::Type::U32, futures::stream::empty::<u64>(), boxed)
            })
            .unwrap_err();
            let message = refused.downcast_ref::<String>().unwrap();
            assert!(message.contains("not a GObject type"), "{message}");
        });
    });
}

/// `map` making an object of another type than the model's item type stops
/// the feed as a panic in `map` does: the panic handler hears, naming both
/// types; the items before it are in the model, each readable, and the
/// model completes (L1). Appended, the object made gio-rs's `get_item`
/// panic where unwinding aborts the process: hence a child process.
#[test]
fn an_object_of_another_type_from_map_stops_the_feed_like_a_panic() {
    let (status, out) = common::run_child("child_object_of_another_type_from_map", &[], 60);
    assert!(
        status.is_some_and(|s| s.success()),
        "the child failed: {status:?}\n{out}"
    );
}

#[test]
#[ignore = "run by an_object_of_another_type_from_map_stops_the_feed_like_a_panic"]
fn child_object_of_another_type_from_map() {
    if !common::is_child() {
        return;
    }
    watchdog("child_object_of_another_type_from_map", 30, || {
        let reports: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
        let seen = reports.clone();
        gdex::set_panic_handler(move |event| seen.lock().unwrap().push(event.message.clone()));
        on_own_context(|context| {
            let model = ListModel::from_stream(
                glib::BoxedAnyObject::static_type(),
                futures::stream::iter(0..10u64),
                |n| {
                    if n == 5 {
                        glib::Object::new::<glib::Object>()
                    } else {
                        boxed(n)
                    }
                },
            );
            pump_polling(context, || model.is_complete());
            // What a list view does: read every item.
            for position in 0..model.n_items() {
                assert_eq!(value_at(&model, position), u64::from(position));
            }
            assert_eq!(model.n_items(), 5, "the items map made before");
        });
        let reports = reports.lock().unwrap();
        assert_eq!(reports.len(), 1, "{reports:?}");
        assert!(
            reports[0].contains("map made a GObject for a model of BoxedAnyObject items"),
            "{}",
            reports[0]
        );
    });
}
