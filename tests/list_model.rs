//! The future-backed list model (L1): `gdex::ListModel`, a `gio::ListModel`
//! filled from a stream produced anywhere, with plain `gio::ListModel`
//! consumers (no GTK): items arrive in order, in batches, with
//! `items-changed` emitted on the owner thread; a batch keeps to the frame
//! budget and lets the owner's loop run between batches; a trickle is
//! gathered into about one batch per batch interval; a batch is sized so
//! that its `items-changed` handlers keep to the budget too; dropping the
//! model cancels its producer.
//!
//! The model holds up under odd use: the owner's loop runs between batches
//! however the stream or the handlers pace the items (a stream that yields
//! for every item, a producer that keeps pace with a slow handler); a
//! dropped `until_complete` leaves no handler behind; a panic in `map` or
//! in the producer is reported at once and completes the model; re-entrant
//! handlers, a last reference dropped by C code on another thread, a
//! producer blocked in `send`, the pool shut down and the owner thread
//! exiting with the model in a thread-local all stop the work and panic
//! nothing. `tests/list_model_batching.rs` tests the batching itself.

mod common;
// The batching tests share this binary: every test of the two files that
// makes a panic reach the handler holds `common::panic_handler_lock`, and
// each records only the panics tagged with its file's words.
mod list_model_batching;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{
    boxed, on_own_context, panic_handler_lock, pump_for, pump_polling, record_panics, value_at,
    watchdog, Counted,
};
use futures::{FutureExt, StreamExt};
use gdex::gio::prelude::*;
use gdex::glib;
use gdex::glib::translate::ToGlibPtr;
use gdex::{ListModel, Scheduler, ThreadPool};

fn ty() -> glib::Type {
    glib::BoxedAnyObject::static_type()
}

/// How many handlers `object` has for `notify::complete` (counted by
/// disconnecting them: call it last).
fn complete_handlers(object: &impl IsA<glib::Object>) -> u32 {
    // SAFETY: `object` is a live GObject, borrowed for the whole call; the
    // signal and the quark are looked up by their static names, and every
    // handler id disconnected was just found on that instance.
    unsafe {
        let instance: *mut glib::gobject_ffi::GObject = object.as_ref().to_glib_none().0;
        let notify = glib::gobject_ffi::g_signal_lookup(
            c"notify".as_ptr(),
            glib::gobject_ffi::g_object_get_type(),
        );
        let detail = glib::ffi::g_quark_from_string(c"complete".as_ptr());
        // (disconnect_matched insists on a closure, func or data to match.)
        let mut count = 0;
        loop {
            let id = glib::gobject_ffi::g_signal_handler_find(
                instance as *mut _,
                glib::gobject_ffi::G_SIGNAL_MATCH_ID | glib::gobject_ffi::G_SIGNAL_MATCH_DETAIL,
                notify,
                detail,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            );
            if id == 0 {
                return count;
            }
            glib::gobject_ffi::g_signal_handler_disconnect(instance as *mut _, id);
            count += 1;
        }
    }
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

/// A stream whose every item needs one yield (a cooperative producer, a
/// stream with a poll budget such as tokio's): the first poll for an item
/// wakes itself and returns `Pending`, the next one has it. The feed's
/// `now_or_never` gets the `Pending` (the batch ends: "nothing ready"),
/// and its next `.await` then finds the item at once, so no batch ever
/// runs out of time and the feed never suspends: with a 1 ms `map` the
/// whole 200 ms stream ran in one poll and the owner's loop (the frame
/// clock) never ran. The budget must bound the time between suspensions,
/// not only one batch (L1).
#[test]
fn a_stream_that_yields_for_every_item_still_lets_the_owner_loop_run() {
    watchdog("a_stream_that_yields_for_every_item", 60, || {
        on_own_context(|context| {
            let stream = futures::stream::unfold(0u64, |n| async move {
                if n == 200 {
                    return None;
                }
                gdex::yield_now().await;
                Some((n, n + 1))
            });
            let model = ListModel::from_stream(ty(), stream, |n| {
                common::spin(Duration::from_millis(1));
                boxed(n)
            });
            model.set_frame_budget(Duration::from_millis(5));
            let (ticks, timer) = common::tick_counter(context);
            // The longest time the feed kept the thread without the loop
            // running (a timer tick) between two items: in the thread's
            // CPU time, which a loaded machine's preemptions do not add to.
            let longest = Rc::new(RefCell::new(Duration::ZERO));
            let last = Rc::new(RefCell::new((0usize, common::thread_cpu_time())));
            let (l, t) = (longest.clone(), ticks.clone());
            model.connect_items_changed(move |_, _, _, _| {
                let now = common::thread_cpu_time();
                let mut last = last.borrow_mut();
                let ticks = t.load(Ordering::Relaxed);
                if ticks != last.0 {
                    *last = (ticks, now);
                } else {
                    let held = now.saturating_sub(last.1);
                    let mut longest = l.borrow_mut();
                    *longest = (*longest).max(held);
                }
            });
            pump_polling(context, || model.is_complete());
            timer.destroy();
            assert_eq!(model.n_items(), 200);
            let longest = *longest.borrow();
            assert!(
                longest < Duration::from_millis(50),
                "the owner's loop did not run for {longest:?} (budget 5 ms); {} ticks in all",
                ticks.load(Ordering::Relaxed)
            );
        });
    });
}

/// The same starvation with a plain channel: a producer thread sends an
/// item every ~0.3 ms and `items-changed` takes 1 ms (GTK making rows). Each
/// batch ends with "nothing ready", the handler runs, items arrive
/// meanwhile, and the next `.await` finds one at once: no suspension for as
/// long as the producer keeps pace (L1).
#[test]
fn a_producer_that_keeps_pace_with_a_slow_handler_still_lets_the_owner_loop_run() {
    watchdog("a_producer_that_keeps_pace_with_a_slow_handler", 60, || {
        on_own_context(|context| {
            let (tx, rx) = gdex::channel::<u64>(1024);
            let model = ListModel::from_receiver(ty(), rx, boxed);
            model.set_frame_budget(Duration::from_millis(5));
            let (ticks, timer) = common::tick_counter(context);
            // As above, in the thread's CPU time.
            let longest = Rc::new(RefCell::new(Duration::ZERO));
            let last = Rc::new(RefCell::new((usize::MAX, common::thread_cpu_time())));
            let (l, t) = (longest.clone(), ticks.clone());
            model.connect_items_changed(move |_, _, _, _| {
                common::spin(Duration::from_millis(1));
                let now = common::thread_cpu_time();
                let mut last = last.borrow_mut();
                let ticks = t.load(Ordering::Relaxed);
                if ticks != last.0 {
                    *last = (ticks, now);
                } else {
                    let mut longest = l.borrow_mut();
                    *longest = (*longest).max(now.saturating_sub(last.1));
                }
            });
            // Started once the owner waits for items.
            pump_for(context, Duration::from_millis(5), || false);
            let feeder = std::thread::spawn(move || {
                for n in 0..400u64 {
                    gdex::wait_for(tx.send(n)).unwrap();
                    std::thread::sleep(Duration::from_micros(300));
                }
            });
            pump_polling(context, || model.is_complete());
            feeder.join().unwrap();
            timer.destroy();
            assert_eq!(model.n_items(), 400);
            let longest = *longest.borrow();
            assert!(
                longest < Duration::from_millis(50),
                "the owner's loop did not run for {longest:?} (budget 5 ms)"
            );
        });
    });
}

/// An `until_complete` future dropped before the model completes (a
/// `select!` against a timeout, a cancelled task) disconnects its
/// `notify::complete` handler: left connected, with its promise, there
/// would be one handler per dropped wait for as long as the model lives
/// (L1).
#[test]
fn a_dropped_until_complete_disconnects_its_handler() {
    watchdog(
        "a_dropped_until_complete_disconnects_its_handler",
        60,
        || {
            on_own_context(|_| {
                let model = ListModel::from_stream(ty(), futures::stream::pending::<u64>(), boxed);
                for _ in 0..100 {
                    let mut wait = Box::pin(model.until_complete());
                    assert!(wait.as_mut().now_or_never().is_none(), "not complete");
                    drop(wait);
                }
                assert_eq!(complete_handlers(&model), 0, "handlers left behind");
            });
        },
    );
}

/// `until_complete` resolves when the model is dropped while it waits, and
/// when the model completes; it leaves no handler behind in either case
/// (L1).
#[test]
fn until_complete_resolves_when_the_model_goes_or_completes() {
    watchdog("until_complete_resolves_when_the_model_goes", 60, || {
        on_own_context(|context| {
            let (tx, rx) = gdex::channel::<u64>(4);
            let model = ListModel::from_receiver(ty(), rx, boxed);
            let done = Rc::new(AtomicBool::new(false));
            let d = done.clone();
            let wait = model.until_complete();
            gdex::spawn_local(async move {
                wait.await;
                d.store(true, Ordering::SeqCst);
            })
            .detach();
            assert!(!pump_for(context, Duration::from_millis(50), || done
                .load(Ordering::SeqCst)));
            drop(model);
            pump_polling(context, || done.load(Ordering::SeqCst));
            drop(tx);

            let (tx, rx) = gdex::channel::<u64>(4);
            let model = ListModel::from_receiver(ty(), rx, boxed);
            let done = Rc::new(AtomicBool::new(false));
            let d = done.clone();
            let wait = model.until_complete();
            gdex::spawn_local(async move {
                wait.await;
                d.store(true, Ordering::SeqCst);
            })
            .detach();
            assert!(!pump_for(context, Duration::from_millis(50), || done
                .load(Ordering::SeqCst)));
            drop(tx);
            pump_polling(context, || done.load(Ordering::SeqCst));
            assert!(model.is_complete());
            assert_eq!(complete_handlers(&model), 0);
        });
    });
}

/// A panic in `map` stops the feed. It was kept in the feed task's output,
/// which the model holds and nobody awaits: the panic handler heard of it
/// only when the model was dropped (never, for a list kept on screen), and
/// `until_complete` waited for ever. It is reported at once now, and the
/// model completes (no more items will come) (L1, X5).
#[test]
fn a_panic_in_map_is_reported_at_once_and_the_model_completes() {
    let _lock = panic_handler_lock();
    watchdog("a_panic_in_map_is_reported_at_once", 60, || {
        let seen = record_panics("list model: map");
        on_own_context(|context| {
            let model = ListModel::from_stream(ty(), futures::stream::iter(0..10u64), |n| {
                if n == 5 {
                    panic!("list model: map refuses 5");
                }
                boxed(n)
            });
            let reported = pump_for(context, Duration::from_millis(500), || {
                !seen.lock().unwrap().is_empty()
            });
            let complete = model.is_complete();
            drop(model);
            pump_for(context, Duration::from_millis(100), || false);
            gdex::reset_panic_handler();
            assert!(
                reported,
                "the panic was not reported while the model lived (reports after the drop: {:?})",
                seen.lock().unwrap()
            );
            assert!(complete, "the model never completes: until_complete hangs");
            assert_eq!(seen.lock().unwrap().len(), 1, "reported once");
        });
    });
}

/// A panic in a `spawn` producer ends the stream (its `Sender` is dropped
/// while it unwinds): the model completes with the items sent so far, and
/// the panic sat in the producer's task output, held by the model and never
/// awaited, until the model was dropped. It is reported at once now (L1,
/// X5).
#[test]
fn a_panic_in_the_producer_is_reported_at_once() {
    let _lock = panic_handler_lock();
    watchdog("a_panic_in_the_producer_is_reported_at_once", 60, || {
        let seen = record_panics("list model: producer");
        let pool = ThreadPool::builder().workers(1).build().unwrap();
        on_own_context(|context| {
            let model = ListModel::spawn(&pool.scheduler(), ty(), boxed, |items| async move {
                for n in 0..10u64 {
                    items.send(n).await.unwrap();
                }
                panic!("list model: producer gives up");
            });
            pump_polling(context, || model.is_complete());
            let reported = pump_for(context, Duration::from_millis(500), || {
                !seen.lock().unwrap().is_empty()
            });
            assert_eq!(model.n_items(), 10);
            drop(model);
            pump_for(context, Duration::from_millis(100), || false);
            gdex::reset_panic_handler();
            assert!(
                reported,
                "the producer's panic was not reported while the model lived (after the drop: {:?})",
                seen.lock().unwrap()
            );
            assert_eq!(seen.lock().unwrap().len(), 1, "reported once");
        });
    });
}

/// Re-entrancy: an `items-changed` handler that drops the last outside
/// reference (the feed's own is the last: dispose then runs inside the
/// feed's poll and drops the feed's own task handle), reads the model, and
/// iterates the owner's context (a nested loop) — nothing breaks, the
/// producer is cancelled, and no panic is reported (L1).
#[test]
fn an_items_changed_handler_that_reads_nests_and_drops_the_model() {
    let _lock = panic_handler_lock();
    watchdog(
        "an_items_changed_handler_that_reads_nests_and_drops",
        60,
        || {
            let panics = Arc::new(AtomicUsize::new(0));
            let p = panics.clone();
            gdex::set_panic_handler(move |_| {
                p.fetch_add(1, Ordering::SeqCst);
            });
            let pool = ThreadPool::builder().workers(2).build().unwrap();
            let dropped = Arc::new(AtomicUsize::new(0));
            on_own_context(|context| {
                let marker = Counted(dropped.clone());
                let model =
                    ListModel::spawn(&pool.scheduler(), ty(), boxed, move |items| async move {
                        let _marker = marker;
                        let mut n = 0u64;
                        loop {
                            let _ = items.send(n).await;
                            n += 1;
                        }
                    });
                let slot = Rc::new(RefCell::new(Some(model.clone())));
                drop(model);
                let s = slot.clone();
                let ctx = context.clone();
                let calls = Rc::new(AtomicUsize::new(0));
                let c = calls.clone();
                let weak = slot.borrow().as_ref().unwrap().downgrade();
                slot.borrow().as_ref().unwrap().connect_items_changed(
                    move |model, position, _, added| {
                        assert_eq!(model.n_items(), position + added);
                        assert!(model.item(position + added - 1).is_some());
                        assert!(model.item(position + added).is_none());
                        // A nested loop inside the signal: the feed is running, it
                        // must not be polled again from here.
                        for _ in 0..3 {
                            ctx.iteration(false);
                        }
                        if c.fetch_add(1, Ordering::SeqCst) == 5 {
                            // The last outside reference goes.
                            drop(s.borrow_mut().take());
                        }
                    },
                );
                pump_polling(context, || weak.upgrade().is_none());
                pump_polling(context, || dropped.load(Ordering::SeqCst) == 1);
                assert!(calls.load(Ordering::SeqCst) >= 6);
            });
            gdex::reset_panic_handler();
            assert_eq!(panics.load(Ordering::SeqCst), 0);
        },
    );
}

/// The model is a GObject: C code may take its last reference on another
/// thread (glib-rs 0.22 keeps it `!Send`, even upcast), and dispose runs
/// there. The feed task (`!Send`, on the owner) and the producer
/// are still cancelled: the feed's future is dropped on the owner thread
/// (L1, S5).
#[test]
fn the_model_dropped_on_another_thread_cancels_its_work() {
    watchdog("the_model_dropped_on_another_thread", 60, || {
        let pool = ThreadPool::builder().workers(2).build().unwrap();
        let producer_gone = Arc::new(AtomicUsize::new(0));
        let stream_gone = Arc::new(AtomicUsize::new(0));
        on_own_context(|context| {
            let marker = Counted(producer_gone.clone());
            let model = ListModel::spawn(&pool.scheduler(), ty(), boxed, move |items| async move {
                let _marker = marker;
                let mut n = 0u64;
                loop {
                    let _ = items.send(n).await;
                    n += 1;
                    gdex::yield_now().await;
                }
            });
            pump_polling(context, || model.n_items() >= 10);
            // A local stream's model too: its feed's future must be dropped
            // on the owner thread.
            let owner = std::thread::current().id();
            let marker = Counted(stream_gone.clone());
            let on_owner_thread = Rc::new(AtomicBool::new(false));
            struct Where(Rc<AtomicBool>, std::thread::ThreadId);
            impl Drop for Where {
                fn drop(&mut self) {
                    self.0
                        .store(std::thread::current().id() == self.1, Ordering::SeqCst);
                }
            }
            let guard = Where(on_owner_thread.clone(), owner);
            let local = ListModel::from_stream(
                ty(),
                futures::stream::pending::<u64>().chain(futures::stream::once(async move {
                    let _ = (&marker, &guard);
                    0u64
                })),
                boxed,
            );
            pump_for(context, Duration::from_millis(20), || false);
            // glib-rs 0.22 keeps `glib::Object` !Send, so only C code can do
            // this (a C library taking the last reference on its thread).
            let raw: Vec<usize> = [model.upcast::<glib::Object>(), local.upcast()]
                .into_iter()
                .map(|o| {
                    let p: *mut glib::gobject_ffi::GObject =
                        glib::translate::IntoGlibPtr::into_glib_ptr(o);
                    p as usize
                })
                .collect();
            std::thread::spawn(move || {
                for p in raw {
                    // SAFETY: each pointer is a reference taken by
                    // `into_glib_ptr` above and released once, here.
                    unsafe { glib::gobject_ffi::g_object_unref(p as *mut _) };
                }
            })
            .join()
            .unwrap();
            pump_polling(context, || {
                producer_gone.load(Ordering::SeqCst) == 1 && stream_gone.load(Ordering::SeqCst) == 1
            });
            assert!(
                on_owner_thread.load(Ordering::SeqCst),
                "a local stream was dropped off its thread"
            );
        });
    });
}

/// A producer blocked in `send` on a full channel (the owner stopped taking
/// items) is cancelled when the model goes, without the owner iterating
/// (L1, S5).
#[test]
fn a_producer_blocked_in_send_is_cancelled_with_the_model() {
    watchdog("a_producer_blocked_in_send_is_cancelled", 60, || {
        let pool = ThreadPool::builder().workers(2).build().unwrap();
        let dropped = Arc::new(AtomicUsize::new(0));
        let sent = Arc::new(AtomicUsize::new(0));
        on_own_context(|_context| {
            let marker = Counted(dropped.clone());
            let s = sent.clone();
            let model = ListModel::spawn(&pool.scheduler(), ty(), boxed, move |items| async move {
                let _marker = marker;
                let mut n = 0u64;
                while items.send(n).await.is_ok() {
                    s.fetch_add(1, Ordering::SeqCst);
                    n += 1;
                }
            });
            // Nobody iterates the owner: the channel (1024) fills.
            let deadline = Instant::now() + Duration::from_secs(10);
            while sent.load(Ordering::SeqCst) < 1024 {
                assert!(
                    Instant::now() < deadline,
                    "the producer never filled the channel"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(20));
            assert_eq!(sent.load(Ordering::SeqCst), 1024, "blocked in send");
            drop(model);
            let deadline = Instant::now() + Duration::from_secs(10);
            while dropped.load(Ordering::SeqCst) == 0 {
                assert!(
                    Instant::now() < deadline,
                    "the blocked producer was not cancelled"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        });
    });
}

/// A frame budget of zero still makes progress (one item a batch), and a
/// map that drops the model mid-batch (through a slot) stops the feed
/// without a panic (L1).
#[test]
fn a_zero_budget_progresses_and_map_may_drop_the_model() {
    watchdog("a_zero_budget_progresses", 60, || {
        on_own_context(|context| {
            let model = ListModel::from_stream(ty(), futures::stream::iter(0..50u64), boxed);
            model.set_frame_budget(Duration::ZERO);
            let batches = Rc::new(AtomicUsize::new(0));
            let b = batches.clone();
            model.connect_items_changed(move |_, _, _, _| {
                b.fetch_add(1, Ordering::SeqCst);
            });
            pump_polling(context, || model.is_complete());
            assert_eq!(model.n_items(), 50);
            assert_eq!(batches.load(Ordering::SeqCst), 50);

            let slot: Rc<RefCell<Option<ListModel>>> = Rc::default();
            let s = slot.clone();
            let model = ListModel::from_stream(ty(), futures::stream::iter(0..50u64), move |n| {
                if n == 10 {
                    drop(s.borrow_mut().take());
                }
                boxed(n)
            });
            let weak = model.downgrade();
            *slot.borrow_mut() = Some(model);
            pump_polling(context, || weak.upgrade().is_none());
            pump_for(context, Duration::from_millis(20), || false);
        });
    });
}

/// The pool shut down while its producer runs: the producer's future is
/// dropped, its `Sender` with it, and the stream ends: the model completes
/// (L1, S9).
#[test]
fn the_pool_shut_down_under_a_producer() {
    watchdog("the_pool_shut_down_under_a_producer", 60, || {
        let pool = ThreadPool::builder().workers(1).build().unwrap();
        on_own_context(|context| {
            let model = ListModel::spawn(&pool.scheduler(), ty(), boxed, |items| async move {
                let mut n = 0u64;
                loop {
                    if items.send(n).await.is_err() {
                        return;
                    }
                    n += 1;
                    gdex::sleep(Duration::from_millis(1)).await;
                }
            });
            pump_polling(context, || model.n_items() >= 5);
            pool.shutdown();
            // The stream ended, so the model completes (nothing hangs). Note
            // that `complete` cannot tell this (or a producer that panicked)
            // from a producer that finished: the list is partial.
            pump_polling(context, || model.is_complete());
            assert!(model.n_items() >= 5);
        });
    });
}

thread_local! {
    static KEPT: RefCell<Option<ListModel>> = const { RefCell::new(None) };
}

/// The owner thread exits with the model in one of its thread-locals (and
/// its feed woken, queued on the thread's `!Send` queue): the model is
/// disposed during the thread's teardown, after other thread-locals may
/// be gone. Nothing panics, and the pool producer is cancelled (L1).
#[test]
fn the_owner_thread_exits_with_the_model_in_a_thread_local() {
    let _lock = panic_handler_lock();
    watchdog("the_owner_thread_exits_with_the_model", 60, || {
        let panics: Arc<Mutex<Vec<String>>> = Arc::default();
        let p = panics.clone();
        gdex::set_panic_handler(move |e| p.lock().unwrap().push(e.to_string()));
        let pool = ThreadPool::builder().workers(2).build().unwrap();
        for queued in [false, true] {
            let dropped = Arc::new(AtomicUsize::new(0));
            let marker = Counted(dropped.clone());
            let scheduler = pool.scheduler();
            std::thread::spawn(move || {
                let context = glib::MainContext::new();
                let _scheduler = Scheduler::for_context(&context);
                context
                    .with_thread_default(|| {
                        let model =
                            ListModel::spawn(&scheduler, ty(), boxed, move |items| async move {
                                let _marker = marker;
                                let mut n = 0u64;
                                loop {
                                    let _ = items.send(n).await;
                                    n += 1;
                                    gdex::sleep(Duration::from_micros(100)).await;
                                }
                            });
                        pump_polling(&context, || model.n_items() >= 10);
                        if queued {
                            // Let items arrive: the feed is woken, queued,
                            // and nobody will run it.
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        KEPT.with(|k| *k.borrow_mut() = Some(model));
                    })
                    .unwrap();
            })
            .join()
            .expect("the owner thread's exit panicked");
            let deadline = Instant::now() + Duration::from_secs(10);
            while dropped.load(Ordering::SeqCst) == 0 {
                assert!(
                    Instant::now() < deadline,
                    "the producer outlived its model's thread (queued: {queued})"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        gdex::reset_panic_handler();
        assert!(
            panics.lock().unwrap().is_empty(),
            "{:?}",
            panics.lock().unwrap()
        );
    });
}

/// A receiver fed in bursts from another thread through a channel of one:
/// the feed's `now_or_never` polls (a no-op waker) never lose an item or a
/// wake-up (L1).
#[test]
fn a_channel_of_one_fed_in_bursts_loses_nothing() {
    watchdog("a_channel_of_one_fed_in_bursts_loses_nothing", 60, || {
        on_own_context(|context| {
            let count = common::stress(5_000) as u64;
            let (tx, rx) = gdex::channel::<u64>(1);
            let model = ListModel::from_receiver(ty(), rx, boxed);
            model.set_frame_budget(Duration::from_micros(50));
            let feeder = std::thread::spawn(move || {
                for n in 0..count {
                    gdex::wait_for(tx.send(n)).unwrap();
                    if n % 64 == 0 {
                        std::thread::sleep(Duration::from_micros(50));
                    }
                }
            });
            pump_polling(context, || model.is_complete());
            feeder.join().unwrap();
            assert_eq!(model.n_items() as u64, count);
            for n in (0..count).step_by(97) {
                let item = model
                    .item(n as u32)
                    .and_downcast::<glib::BoxedAnyObject>()
                    .unwrap();
                assert_eq!(*item.borrow::<u64>(), n);
            }
        });
    });
}
