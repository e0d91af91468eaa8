//! GObject signals as streams (`gdex::signal_stream`,
//! `gdex::signal_stream_local`): each emission once and in order, the
//! bounded buffer's policy (the oldest goes), disconnected when dropped
//! (also on another thread), ended when the object is disposed, a panic
//! in the map contained, emissions from many threads, and misuse refused
//! with a message that says what to do.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::watchdog;
use futures::StreamExt;
use gio::prelude::*;

/// Whether `object` has a handler connected to `signal`.
fn has_handler(object: &impl IsA<glib::Object>, signal: &str) -> bool {
    let object = object.upcast_ref::<glib::Object>();
    let (id, _) = glib::subclass::SignalId::parse_name(signal, object.type_(), false).unwrap();
    glib::signal::signal_has_handler_pending(object, id, None, true)
}

/// An action whose `activate` carries a number.
fn action() -> gio::SimpleAction {
    gio::SimpleAction::new("n", Some(glib::VariantTy::UINT32))
}

fn activate(action: &gio::SimpleAction, n: u32) {
    action.activate(Some(&n.to_variant()));
}

fn numbers(action: &gio::SimpleAction) -> gdex::LocalSignalStream<u32> {
    gdex::signal_stream_local(action, "activate", |args| {
        let parameter = args[1].get::<Option<glib::Variant>>().unwrap();
        parameter.and_then(|v| v.get::<u32>()).unwrap()
    })
}

/// Every emission comes once, in order, with what the map made of its
/// arguments; a detailed signal (`notify::enabled`) gives only its
/// detail's emissions.
#[test]
fn each_emission_comes_once_in_order() {
    let action = action();
    let mut stream = numbers(&action);
    let mut enabled = gdex::signal_stream_local(&action, "notify::enabled", |args| {
        args[0].get::<gio::SimpleAction>().unwrap().is_enabled()
    });
    for n in 0..10 {
        activate(&action, n);
    }
    action.set_enabled(false);
    action.set_state_hint(None); // another property: not counted
    action.set_enabled(true);
    let got: Vec<u32> = gdex::block_on(async { (&mut stream).take(10).collect().await });
    assert_eq!(got, (0..10).collect::<Vec<_>>());
    let flips: Vec<bool> = gdex::block_on(async { (&mut enabled).take(2).collect().await });
    assert_eq!(flips, [false, true]);
    assert_eq!(stream.missed(), 0);
}

/// A slow consumer: past the capacity the oldest items go, counted in
/// `missed`; a capacity of 1 keeps the latest; a capacity of 0 is refused.
#[test]
fn a_full_stream_drops_its_oldest_items_and_counts_them() {
    let action = action();
    let mut three = numbers(&action).with_capacity(3);
    let mut latest = numbers(&action).with_capacity(1);
    for n in 0..10 {
        activate(&action, n);
    }
    let got: Vec<u32> = gdex::block_on(async { (&mut three).take(3).collect().await });
    assert_eq!(got, [7, 8, 9]);
    assert_eq!(three.missed(), 7);
    assert_eq!(gdex::block_on(latest.next()), Some(9));
    assert_eq!(latest.missed(), 9);
    // Shrinking a stream that holds more drops the oldest too.
    for n in 0..5 {
        activate(&action, n);
    }
    let mut two = three.with_capacity(2);
    assert_eq!(gdex::block_on(two.next()), Some(3));
    assert_eq!(two.missed(), 10);
    let refused =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| latest.with_capacity(0)));
    let message = common::panic_message(refused.unwrap_err());
    assert!(
        message.contains("with_capacity(0): a stream holds at least one item"),
        "{message}"
    );
}

/// Dropping the stream disconnects its handler, from the object's thread
/// or (a thread-safe object's stream) another thread.
#[test]
fn dropping_the_stream_disconnects_its_handler() {
    let action = action();
    let stream = numbers(&action);
    assert!(has_handler(&action, "activate"));
    drop(stream);
    assert!(!has_handler(&action, "activate"));
    activate(&action, 1); // nobody listens: nothing happens

    let cancellable = gio::Cancellable::new();
    let stream = gdex::signal_stream(&cancellable, "cancelled", |_| ());
    assert!(has_handler(&cancellable, "cancelled"));
    std::thread::spawn(move || drop(stream)).join().unwrap();
    assert!(!has_handler(&cancellable, "cancelled"));
    cancellable.cancel();
}

/// The object disposed (its last reference dropped): the stream gives
/// what it holds, then ends; a stream dropped after that does not touch
/// the handler GObject already destroyed.
#[test]
fn the_stream_ends_when_its_object_is_disposed() {
    let action = action();
    let mut stream = numbers(&action);
    let mut second = numbers(&action);
    activate(&action, 1);
    activate(&action, 2);
    drop(action);
    let got: Vec<u32> = gdex::block_on(async { (&mut stream).collect().await });
    assert_eq!(got, [1, 2]);
    assert_eq!(gdex::block_on(stream.next()), None, "ended for good");
    drop(second.next()); // a poll made nothing pending
    drop(second);

    // Disposed while a task waits on it: the waiting task is woken.
    let context = glib::MainContext::new();
    let scheduler = gdex::Scheduler::for_context(&context);
    let action = self::action();
    let mut stream = numbers(&action);
    let waiter = scheduler.spawn_local(async move { stream.next().await });
    common::pump(&context);
    assert!(!waiter.is_finished());
    // SAFETY: nothing uses the action after its dispose but its drop.
    unsafe { action.run_dispose() };
    assert_eq!(context.block_on(waiter).unwrap(), None);
}

/// A panic in the map is contained (the emission, which cannot unwind
/// into GObject, gives no item) and the stream goes on.
#[test]
fn a_panic_in_the_map_loses_that_emission_only() {
    let action = action();
    let mut stream = gdex::signal_stream_local(&action, "activate", |args| {
        let n = args[1]
            .get::<Option<glib::Variant>>()
            .unwrap()
            .unwrap()
            .get::<u32>()
            .unwrap();
        assert!(n != 2, "the map refuses 2");
        n
    });
    for n in 1..=3 {
        activate(&action, n);
    }
    let got: Vec<u32> = gdex::block_on(async { (&mut stream).take(2).collect().await });
    assert_eq!(got, [1, 3]);
}

/// An item whose destructor panics when its number is odd.
struct PanicsWhenOdd(u32);

impl Drop for PanicsWhenOdd {
    fn drop(&mut self) {
        assert!(
            self.0.is_multiple_of(2),
            "item {} refuses to be dropped",
            self.0
        );
    }
}

/// The drops a stream makes inside GObject's emission and handler
/// teardown, which cannot unwind: an item a full stream lets go of, and
/// the map (with what it captured) when the stream is dropped. A panic in
/// either goes to the panic handler (X5), the stream goes on, and the
/// process does not abort.
#[test]
fn a_panic_in_an_items_drop_or_the_maps_drop_is_reported_not_an_abort() {
    if common::is_child() {
        return;
    }
    common::child_passes("child_panics_in_a_signal_streams_drops", &[], 60);
}

#[test]
#[ignore = "run by a_panic_in_an_items_drop_or_the_maps_drop_is_reported_not_an_abort"]
fn child_panics_in_a_signal_streams_drops() {
    if !common::is_child() {
        return;
    }
    let seen = common::record_panics("refuses to be dropped");
    let action = action();
    let captured = PanicsWhenOdd(3);
    let mut stream = gdex::signal_stream_local(&action, "activate", move |args| {
        let _ = &captured;
        let parameter = args[1].get::<Option<glib::Variant>>().unwrap();
        PanicsWhenOdd(parameter.and_then(|v| v.get::<u32>()).unwrap())
    })
    .with_capacity(1);
    activate(&action, 1);
    activate(&action, 2); // the full stream lets go of 1
    let item = gdex::block_on(stream.next()).unwrap();
    assert_eq!(item.0, 2);
    assert_eq!(stream.missed(), 1);
    drop(stream); // the map goes, and the 3 it holds
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "item 1 refuses to be dropped",
            "item 3 refuses to be dropped"
        ]
    );
    println!("CHILD-OK");
}

/// A thread-safe object's signal emitted on four threads, consumed by a
/// pool task: every emission arrives once (the buffer large enough), and
/// the stream is `Send`.
#[test]
fn emissions_from_many_threads_arrive_once() {
    watchdog("emissions_from_many_threads_arrive_once", 60, || {
        let pool = common::quiet_pool(2);
        let cancellables: Vec<gio::Cancellable> = (0..4).map(|_| gio::Cancellable::new()).collect();
        const ROUNDS: usize = 200;
        let total = Arc::new(AtomicUsize::new(0));
        let streams: Vec<_> = cancellables
            .iter()
            .enumerate()
            .map(|(i, c)| gdex::signal_stream(c, "cancelled", move |_| i).with_capacity(ROUNDS))
            .collect();
        let consumer = pool.scheduler().spawn({
            let total = total.clone();
            async move {
                let mut merged = futures::stream::select_all(streams);
                let mut seen = [0usize; 4];
                while let Some(i) = merged.next().await {
                    seen[i] += 1;
                    if total.fetch_add(1, Ordering::SeqCst) + 1 == 4 * ROUNDS {
                        break;
                    }
                }
                seen
            }
        });
        let emitters: Vec<_> = cancellables
            .into_iter()
            .map(|c| {
                std::thread::spawn(move || {
                    for _ in 0..ROUNDS {
                        c.cancel();
                        use glib::translate::ToGlibPtr;
                        // SAFETY: `c` is a live GCancellable (gio-rs does
                        // not bind its reset, which makes it emit again).
                        unsafe { gio::ffi::g_cancellable_reset(c.to_glib_none().0) };
                    }
                })
            })
            .collect();
        for e in emitters {
            e.join().unwrap();
        }
        assert_eq!(gdex::block_on(consumer).unwrap(), [ROUNDS; 4]);
    });
}

/// Misuse: a signal the object does not have, and one that returns a
/// value (a stream cannot answer it), each refused naming the type and
/// signal.
#[test]
fn a_missing_signal_or_one_that_returns_a_value_is_refused() {
    let action = action();
    let missing = std::panic::catch_unwind(|| {
        let _ = gdex::signal_stream_local(&action, "activated", |_| ());
    });
    let message = common::panic_message(missing.unwrap_err());
    assert_eq!(
        message,
        "gdex::signal_stream_local: GSimpleAction has no signal \"activated\""
    );
    let app = gio::Application::new(None, gio::ApplicationFlags::empty());
    let returns = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = gdex::signal_stream_local(&app, "command-line", |_| ());
    }));
    let message = common::panic_message(returns.unwrap_err());
    assert!(
        message.contains("GApplication's signal \"command-line\" returns a gint")
            && message.contains("connect a handler for it instead"),
        "{message}"
    );
}

/// Misuse: `notify::` of a property the object does not have, or named
/// otherwise than GObject notifies it (its canonical name), would never
/// give an item; refused, naming the property and the name to use.
#[test]
fn a_notify_of_a_property_the_object_lacks_is_refused() {
    let action = action();
    for (signal, said) in [
        ("notify::enabld", "GSimpleAction has no property \"enabld\""),
        (
            "notify::parameter_type",
            "notify::parameter-type (GObject notifies with the canonical name)",
        ),
    ] {
        let typo = std::panic::catch_unwind(|| {
            let _ = gdex::signal_stream_local(&action, signal, |_| ());
        });
        let message = common::panic_message(typo.unwrap_err());
        assert!(message.contains(said), "{message}");
    }
}
