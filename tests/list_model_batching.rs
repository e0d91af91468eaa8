//! L1's batching: the feed drains the stream into an unmapped backlog,
//! emits a batch at most once per batch interval (a `gdex::sleep` timer),
//! sizes batches to the frame budget from the last batch's cost per item,
//! and holds a stream's panic until the items before it are appended.
//! Checked against odd streams (ready, pending or ended; spurious wake-ups,
//! a forgotten waker, slow polls), odd bounds (zero, huge, changed from a
//! handler or from outside while the feed sleeps), re-entrancy, panics, and
//! the model, its pool or its thread going while the feed sleeps on its
//! timer. `tests/list_model.rs` has the model's other promises.

mod common;

use std::time::Duration;

use common::{boxed, on_own_context, panic_handler_lock, pump_for, record_panics, watchdog};
use gdex::gio::prelude::*;
use gdex::glib;
use gdex::ListModel;

fn ty() -> glib::Type {
    glib::BoxedAnyObject::static_type()
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
