//! Issue 18 point 2 (L1): `gdex::ListModel`, a `gio::ListModel` filled from
//! a stream produced anywhere, with plain `gio::ListModel` consumers (no
//! GTK): items arrive in order, in batches, with `items-changed` emitted on
//! the owner thread; a batch keeps to the frame budget and lets the owner's
//! loop run between batches; dropping the model cancels its producer.

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{on_own_context, pump_polling, watchdog, Counted};
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
            let ticks = Arc::new(AtomicUsize::new(0));
            let tick = ticks.clone();
            let timer = glib::timeout_source_new(
                Duration::from_millis(1),
                None,
                glib::Priority::DEFAULT,
                move || {
                    tick.fetch_add(1, Ordering::Relaxed);
                    glib::ControlFlow::Continue
                },
            );
            timer.attach(Some(context));
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
