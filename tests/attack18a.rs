//! Attack 18a: `gdex::ListModel` (L1) under re-entrancy, the wrong thread,
//! cancellation, shutdown and odd streams; and the wait queue's per-thread
//! book of deferred wakers (no destructor since fb6186e).

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{on_own_context, pump_for, pump_polling, watchdog, Counted};
use futures::{FutureExt, StreamExt};
use gdex::gio::prelude::*;
use gdex::glib;
use gdex::glib::translate::ToGlibPtr;
use gdex::{ListModel, Scheduler, ThreadPool};

/// This binary's tests that set the process-wide panic handler take turns.
fn panic_handler_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn boxed(n: u64) -> glib::Object {
    glib::BoxedAnyObject::new(n).upcast()
}

fn ty() -> glib::Type {
    glib::BoxedAnyObject::static_type()
}

/// How many handlers `object` has for `notify::complete` (counted by
/// disconnecting them: call it last).
fn complete_handlers(object: &impl IsA<glib::Object>) -> u32 {
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

/// A stream whose every item needs one yield (a cooperative producer, a
/// stream with a poll budget such as tokio's): the first poll for an item
/// wakes itself and returns `Pending`, the next one has it. The feed's
/// `now_or_never` gets the `Pending` (the batch ends: "nothing ready"),
/// and its next `.await` then finds the item at once, so no batch ever
/// runs out of time and the feed never suspends: with a 1 ms `map` the
/// whole 200 ms stream ran in one poll and the owner's loop (the frame
/// clock) never ran. The budget must bound the time between suspensions,
/// not only one batch.
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
            // running (a timer tick) between two items.
            let longest = Rc::new(RefCell::new(Duration::ZERO));
            let last = Rc::new(RefCell::new((0usize, Instant::now())));
            let (l, t) = (longest.clone(), ticks.clone());
            model.connect_items_changed(move |_, _, _, _| {
                let now = Instant::now();
                let mut last = last.borrow_mut();
                let ticks = t.load(Ordering::Relaxed);
                if ticks != last.0 {
                    *last = (ticks, now);
                } else {
                    let held = now - last.1;
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
/// long as the producer keeps pace.
#[test]
fn a_producer_that_keeps_pace_with_a_slow_handler_still_lets_the_owner_loop_run() {
    watchdog("a_producer_that_keeps_pace_with_a_slow_handler", 60, || {
        on_own_context(|context| {
            let (tx, rx) = gdex::channel::<u64>(1024);
            let model = ListModel::from_receiver(ty(), rx, boxed);
            model.set_frame_budget(Duration::from_millis(5));
            let (ticks, timer) = common::tick_counter(context);
            let longest = Rc::new(RefCell::new(Duration::ZERO));
            let last = Rc::new(RefCell::new((usize::MAX, Instant::now())));
            let (l, t) = (longest.clone(), ticks.clone());
            model.connect_items_changed(move |_, _, _, _| {
                common::spin(Duration::from_millis(1));
                let now = Instant::now();
                let mut last = last.borrow_mut();
                let ticks = t.load(Ordering::Relaxed);
                if ticks != last.0 {
                    *last = (ticks, now);
                } else {
                    let mut longest = l.borrow_mut();
                    *longest = (*longest).max(now - last.1);
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
/// `select!` against a timeout, a cancelled task) leaves its
/// `notify::complete` handler connected, with its promise: one handler per
/// dropped wait, for as long as the model lives.
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
/// when the model completes; it leaves no handler behind in either case.
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
/// model completes (no more items will come).
#[test]
fn a_panic_in_map_is_reported_at_once_and_the_model_completes() {
    let _lock = panic_handler_lock();
    watchdog("a_panic_in_map_is_reported_at_once", 60, || {
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let s = seen.clone();
        gdex::set_panic_handler(move |event| {
            if event.message.contains("attack18a: map") {
                s.lock().unwrap().push(event.message.clone());
            }
        });
        on_own_context(|context| {
            let model = ListModel::from_stream(ty(), futures::stream::iter(0..10u64), |n| {
                if n == 5 {
                    panic!("attack18a: map refuses 5");
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

/// The items before a panic are kept. The feed holds items that arrive
/// within a batch interval unmapped (L1's batching): a stream that panics
/// after giving ten must not take those ten with it, nor a `map` that
/// panics on the sixth item take the five it made.
#[test]
fn the_items_before_a_panic_in_the_stream_or_map_are_in_the_model() {
    let _lock = panic_handler_lock();
    watchdog("the_items_before_a_panic_are_in_the_model", 60, || {
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let s = seen.clone();
        gdex::set_panic_handler(move |event| {
            if event.message.contains("attack18a: items before") {
                s.lock().unwrap().push(event.message.clone());
            }
        });
        on_own_context(|context| {
            // The stream: one item at once, nine a moment later (so they
            // wait for the next batch, a second away), then a panic.
            let stream = futures::stream::unfold(0u64, |n| async move {
                match n {
                    0 => {}
                    1 => gdex::sleep(Duration::from_millis(5)).await,
                    10 => panic!("attack18a: items before the stream's panic"),
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
                    panic!("attack18a: items before map's panic");
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

/// A panic in a `spawn` producer ends the stream (its `Sender` is dropped
/// while it unwinds): the model completes with the items sent so far, and
/// the panic sat in the producer's task output, held by the model and never
/// awaited, until the model was dropped. It is reported at once now.
#[test]
fn a_panic_in_the_producer_is_reported_at_once() {
    let _lock = panic_handler_lock();
    watchdog("a_panic_in_the_producer_is_reported_at_once", 60, || {
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let s = seen.clone();
        gdex::set_panic_handler(move |event| {
            if event.message.contains("attack18a: producer") {
                s.lock().unwrap().push(event.message.clone());
            }
        });
        let pool = ThreadPool::builder().workers(1).build().unwrap();
        on_own_context(|context| {
            let model = ListModel::spawn(&pool.scheduler(), ty(), boxed, |items| async move {
                for n in 0..10u64 {
                    items.send(n).await.unwrap();
                }
                panic!("attack18a: producer gives up");
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
/// producer is cancelled, and no panic is reported.
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
/// are still cancelled: the feed's future is dropped on the owner thread.
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
/// items) is cancelled when the model goes, without the owner iterating.
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
/// without a panic.
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
/// dropped, its `Sender` with it, and the stream ends: the model completes.
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
/// be gone. Nothing panics, and the pool producer is cancelled.
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
/// wake-up.
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
