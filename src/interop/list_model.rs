//! A `gio::ListModel` filled from a stream (L1): libdex's
//! `DexFutureListModel`, for a GTK list fed by work running anywhere.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use futures::{FutureExt, Stream};

use gio::prelude::*;
use gio::subclass::prelude::*;

use crate::scheduler::Scheduler;
use crate::sync::channel::{channel, Receiver, Sender};
use crate::task::Task;

/// Items a producer may send before the model has taken them: a producer
/// that is faster than the list waits (memory stays bounded).
const CHANNEL_CAPACITY: usize = 1024;

/// Items the feed takes from the stream ahead of mapping them: with this
/// many waiting, a batch goes at once, and the stream is not polled again
/// until fewer wait (a stream that is always ready does not fill memory).
const MAX_PENDING: usize = 4096;

/// The most items in a batch before the feed knows what an item costs.
const FIRST_BATCH: usize = 16;

/// The longest batch interval the feed keeps to: longer is the same (the
/// next batch goes when the stream ends, the backlog is full or a batch
/// runs out of budget). An `Instant` plus `Duration::MAX` overflows: a
/// "never" interval made the feed panic after its first batch.
const LONGEST_INTERVAL: Duration = Duration::from_secs(365 * 24 * 60 * 60);

mod imp {
    use super::*;

    #[derive(Debug, Default)]
    pub struct ListModel {
        pub(super) items: RefCell<Vec<glib::Object>>,
        pub(super) item_type: Cell<Option<glib::Type>>,
        pub(super) budget: Cell<Option<Duration>>,
        pub(super) interval: Cell<Option<Duration>>,
        pub(super) complete: Cell<bool>,
        /// The feed's waker while it sleeps on its batch interval, for
        /// [`set_batch_interval`](super::ListModel::set_batch_interval).
        pub(super) feed_waker: RefCell<Option<std::task::Waker>>,
        /// The task that takes items from the stream, on the owner thread.
        pub(super) feed: RefCell<Option<Task<()>>>,
        /// The producer of [`ListModel::spawn`](super::ListModel::spawn).
        pub(super) producer: RefCell<Option<Task<()>>>,
    }

    #[glib::object_subclass]
    impl ObjectSubclass for ListModel {
        const NAME: &'static str = "GdexListModel";
        type Type = super::ListModel;
        type Interfaces = (gio::ListModel,);
    }

    impl ObjectImpl for ListModel {
        fn properties() -> &'static [glib::ParamSpec] {
            static PROPERTIES: std::sync::OnceLock<Vec<glib::ParamSpec>> =
                std::sync::OnceLock::new();
            PROPERTIES.get_or_init(|| {
                vec![glib::ParamSpecBoolean::builder("complete")
                    .nick("Complete")
                    .blurb("The stream has ended: no more items will come")
                    .read_only()
                    .explicit_notify()
                    .build()]
            })
        }

        fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
            match pspec.name() {
                "complete" => self.complete.get().to_value(),
                name => unreachable!("GdexListModel has no property {name}"),
            }
        }

        fn dispose(&self) {
            // The model is going: stop feeding it, and stop what produces
            // its items (cancel on discard).
            drop(self.feed.take());
            drop(self.producer.take());
            // The feed's own waker (it slept on its interval): nothing to
            // wake any more.
            drop(self.feed_waker.take());
        }
    }

    impl ListModelImpl for ListModel {
        fn item_type(&self) -> glib::Type {
            self.item_type.get().unwrap_or(glib::Object::static_type())
        }

        fn n_items(&self) -> u32 {
            self.items.borrow().len() as u32
        }

        fn item(&self, position: u32) -> Option<glib::Object> {
            self.items.borrow().get(position as usize).cloned()
        }
    }
}

glib::wrapper! {
    /// A `gio::ListModel` filled from a stream of items produced anywhere
    /// (L1; libdex's `DexFutureListModel`). Give it to a `GtkListView`
    /// (through a selection model) and the list fills as the work goes on.
    ///
    /// - The items come from a [`Stream`] ([`from_stream`]), a gdex
    ///   [`channel`](crate::channel) ([`from_receiver`]), or a producer
    ///   future that gets a [`Sender`] and runs on any scheduler, such as the
    ///   pool ([`spawn`]). Producers send plain Rust values (`Send`, for a
    ///   pool producer); `map` turns each into the model's `GObject` on the
    ///   owner thread.
    /// - The model belongs to the thread that made it (the owner: usually
    ///   the main thread), which must run a gdex scheduler (see
    ///   [`Scheduler::thread_default`]). Items are appended there, and
    ///   `items-changed` is emitted there, once per batch. Items that arrive
    ///   in a trickle are gathered: a batch goes at most once per batch
    ///   interval ([`ListModel::DEFAULT_BATCH_INTERVAL`], one 60 Hz frame;
    ///   [`set_batch_interval`]), with everything that came meanwhile, so a
    ///   list view gets about one `items-changed` per frame however the
    ///   producer sends. And the owner thread is held for at most the frame
    ///   budget ([`ListModel::DEFAULT_FRAME_BUDGET`], [`set_frame_budget`])
    ///   at a time, the `items-changed` handlers included: a batch is sized
    ///   to fit it, from what the last batch cost per item, and a backlog
    ///   goes in several batches with the owner's loop (frames) run between
    ///   them.
    /// - When the stream ends the `complete` property turns true (and is
    ///   notified).
    /// - Dropping the model (its last reference) cancels the task that feeds
    ///   it, and with it the stream, and the producer of [`spawn`]: a search
    ///   whose list is replaced stops its work. So do not capture the model
    ///   strongly in `map` or in an `items-changed` handler (use
    ///   `model.downgrade()`): the model would hold itself, never be
    ///   disposed, and its producer would run to its end.
    ///
    /// ```
    /// use gdex::glib::prelude::*;
    /// use gdex::gio::prelude::*;
    ///
    /// let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
    /// // A GTK app's main thread runs the main scheduler; so does this test's.
    /// let model = gdex::ListModel::spawn(
    ///     &pool.scheduler(),
    ///     glib::BoxedAnyObject::static_type(),
    ///     |n: u64| glib::BoxedAnyObject::new(n).upcast(),
    ///     |items| async move {
    ///         for n in 0..1000u64 {
    ///             // Work on the pool, then hand the result to the list.
    ///             if items.send(n * n).await.is_err() {
    ///                 return; // the model is gone
    ///             }
    ///         }
    ///     },
    /// );
    /// gdex::block_on(model.until_complete());
    /// assert_eq!(model.n_items(), 1000);
    /// let last = model.item(999).and_downcast::<glib::BoxedAnyObject>().unwrap();
    /// assert_eq!(*last.borrow::<u64>(), 999 * 999);
    /// ```
    ///
    /// [`from_stream`]: ListModel::from_stream
    /// [`from_receiver`]: ListModel::from_receiver
    /// [`spawn`]: ListModel::spawn
    /// [`set_frame_budget`]: ListModel::set_frame_budget
    /// [`set_batch_interval`]: ListModel::set_batch_interval
    pub struct ListModel(ObjectSubclass<imp::ListModel>) @implements gio::ListModel;
}

impl ListModel {
    /// How long the model may hold the owner thread at a time by default: a
    /// quarter of a 60 Hz frame, so that the frame clock keeps its pace
    /// while items stream in.
    pub const DEFAULT_FRAME_BUDGET: Duration = Duration::from_millis(4);

    /// The shortest time between two batches of a stream that trickles, by
    /// default: one 60 Hz frame, so a list gets at most about one
    /// `items-changed` per frame however its items arrive.
    pub const DEFAULT_BATCH_INTERVAL: Duration = Duration::from_millis(16);

    /// A model of `item_type` items, filled on this thread from `stream`,
    /// each item made by `map`.
    ///
    /// `map` must make an `item_type` (or an object of a subtype): an object
    /// of another type stops the feed as a panic in `map` does. It goes to
    /// the panic handler, with both types named; the items before it stay
    /// in the model, and the model is complete.
    ///
    /// # Panics
    /// If this thread runs no gdex scheduler that it owns (see
    /// [`gdex::spawn_local`](crate::spawn_local)), or if `item_type` is not
    /// a `GObject` type.
    #[track_caller]
    pub fn from_stream<S, F>(item_type: glib::Type, stream: S, map: F) -> ListModel
    where
        S: Stream + 'static,
        F: FnMut(S::Item) -> glib::Object + 'static,
    {
        assert!(
            item_type.is_a(glib::Object::static_type()),
            "gdex::ListModel: the item type {item_type} is not a GObject type; a gio::ListModel holds GObjects \
             (glib::BoxedAnyObject wraps any Rust value)"
        );
        let model: ListModel = glib::Object::new();
        let imp = model.imp();
        imp.item_type.set(Some(item_type));
        let weak = model.downgrade();
        let feed = crate::spawn_local(async move {
            // The model holds this task and never awaits it, so a panic (in
            // `map`, or in the stream) would sit in its output, unreported,
            // for as long as the model lives: report it now. The stream (and
            // the feed) is dropped by then; no more items will come, so the
            // model completes and `until_complete` does not wait for ever.
            let fed = AssertUnwindSafe(feed(weak.clone(), Box::pin(stream), map))
                .catch_unwind()
                .await;
            if let Err(payload) = fed {
                report_panic(payload);
                if let Some(list) = weak.upgrade() {
                    list.set_complete();
                }
            }
        });
        imp.feed.replace(Some(feed));
        model
    }

    /// A model filled from a gdex channel's receiving end: the senders may
    /// be anywhere. The stream ends when every sender is gone (or closed).
    #[track_caller]
    pub fn from_receiver<T, F>(item_type: glib::Type, receiver: Receiver<T>, map: F) -> ListModel
    where
        T: 'static,
        F: FnMut(T) -> glib::Object + 'static,
    {
        let stream = futures::stream::unfold(receiver, |receiver| async move {
            let item = receiver.recv().await.ok()?;
            Some((item, receiver))
        });
        ListModel::from_stream(item_type, stream, map)
    }

    /// A model filled by `producer`, a future spawned on `scheduler` (the
    /// pool, usually) that sends the items: it gets the [`Sender`] of a
    /// bounded channel (so a producer faster than the list waits). Dropping
    /// the model cancels the producer's task; a send then fails too.
    #[track_caller]
    pub fn spawn<T, M, P, Fut>(
        scheduler: &Scheduler,
        item_type: glib::Type,
        map: M,
        producer: P,
    ) -> ListModel
    where
        T: Send + 'static,
        M: FnMut(T) -> glib::Object + 'static,
        P: FnOnce(Sender<T>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (sender, receiver) = channel(CHANNEL_CAPACITY);
        let model = ListModel::from_receiver(item_type, receiver, map);
        let producer = AssertUnwindSafe(producer(sender)).catch_unwind();
        // As for the feed: the model holds the producer's task and never
        // awaits it, so its panic is reported now, not when the model goes.
        // (Its `Sender` is gone by then: the model completes with the items
        // sent before the panic.)
        let producer = scheduler.spawn(async move {
            if let Err(payload) = producer.await {
                report_panic(payload);
            }
        });
        model.imp().producer.replace(Some(producer));
        model
    }

    /// How long the model may hold the owner thread at a time (default
    /// [`ListModel::DEFAULT_FRAME_BUDGET`]), its `items-changed` handlers
    /// included: a batch holds as many items as fit in what is left of it,
    /// at the last batch's cost per item (at most four times the biggest
    /// batch so far, and 16 items before anything is known), and ends early
    /// if mapping runs out of time; once the budget has gone, the owner's
    /// loop runs before the next batch.
    pub fn set_frame_budget(&self, budget: Duration) {
        self.imp().budget.set(Some(budget));
    }

    /// The shortest time from one batch to the next (default
    /// [`ListModel::DEFAULT_BATCH_INTERVAL`]): items that arrive sooner wait
    /// and go together in the next batch. The first batch goes as soon as
    /// there is an item, and so does a batch after a quiet spell longer than
    /// the interval; a batch that ran out of the frame budget is followed
    /// by the rest after one turn of the owner's loop, not an interval
    /// later. `Duration::ZERO` gives a batch per item that is ready when
    /// the feed runs, as a consumer that must see each item at once may want.
    /// A new interval applies to the next batch (counted from the last),
    /// also when set from an `items-changed` handler or while items wait.
    /// An interval longer than a year counts as a year: as good as never,
    /// the items then go when the stream ends or 4,096 of them wait. The
    /// interval is timed as [`gdex::sleep`](crate::sleep) is: on a context
    /// a [`TestClock`](crate::TestClock) drives, on that clock.
    pub fn set_batch_interval(&self, interval: Duration) {
        self.imp().interval.set(Some(interval));
        // A feed asleep on the old interval, with items waiting, counts the
        // new one from the last batch: it slept to the old one's end.
        let waker = self.imp().feed_waker.take();
        if let Some(waker) = waker {
            crate::diagnostics::panic::wake(waker);
        }
    }

    /// The frame budget and the batch interval.
    fn bounds(&self) -> (Duration, Duration) {
        let imp = self.imp();
        (
            imp.budget.get().unwrap_or(ListModel::DEFAULT_FRAME_BUDGET),
            imp.interval
                .get()
                .unwrap_or(ListModel::DEFAULT_BATCH_INTERVAL)
                .min(LONGEST_INTERVAL),
        )
    }

    /// True once the stream has ended: every item is in the model. (Also
    /// once the feed stopped on a panic in `map` (or an object of another
    /// type than the model's item type from it) or in the stream, or a
    /// [`spawn`](ListModel::spawn) producer panicked: the panic goes to the
    /// panic handler, and no more items will come. The items before the
    /// panic are in the model: every item the stream gave before it
    /// panicked, or every item `map` made before the one it panicked on.)
    pub fn is_complete(&self) -> bool {
        self.imp().complete.get()
    }

    /// Resolves once the model is complete (at once if it is), or once the
    /// model is gone. To be awaited on the owner thread.
    pub fn until_complete(&self) -> impl Future<Output = ()> + 'static {
        let weak = self.downgrade();
        async move {
            loop {
                let Some(model) = weak.upgrade() else { return };
                if model.is_complete() {
                    drop(model);
                    // A leaf (P11): resolving at once spends a unit of the
                    // budget, as the promise below does when it resolves.
                    crate::task::consume_budget().await;
                    return;
                }
                let (promise, done) = crate::Promise::<()>::new();
                let promise = RefCell::new(Some(promise));
                let id = model.connect_notify_local(Some("complete"), move |_, _| {
                    if let Some(promise) = promise.take() {
                        promise.resolve(());
                    }
                });
                // Disconnected however the wait ends: resolved, or this
                // future dropped first (a timeout, a cancelled task), which
                // used to leave the handler and its promise on the model.
                let _handler = Handler {
                    model: weak.clone(),
                    id: Some(id),
                };
                drop(model);
                // Resolved by the notify, or dropped with the model.
                let _ = done.await;
            }
        }
    }

    fn append(&self, batch: Vec<glib::Object>) {
        let added = batch.len() as u32;
        if added == 0 {
            return;
        }
        let position = {
            let mut items = self.imp().items.borrow_mut();
            let position = items.len() as u32;
            items.extend(batch);
            position
        };
        self.items_changed(position, 0, added);
    }

    fn set_complete(&self) {
        self.imp().complete.set(true);
        self.notify("complete");
    }
}

/// A signal handler of [`ListModel::until_complete`], disconnected when the
/// wait ends or is dropped.
struct Handler {
    model: glib::WeakRef<ListModel>,
    id: Option<glib::SignalHandlerId>,
}

impl Drop for Handler {
    fn drop(&mut self) {
        let (Some(model), Some(id)) = (self.model.upgrade(), self.id.take()) else {
            return;
        };
        // A disposed model has dropped its handlers already.
        // SAFETY: the id is only read, to ask GObject about it.
        let connected = unsafe {
            glib::gobject_ffi::g_signal_handler_is_connected(
                model.as_ptr() as *mut glib::gobject_ffi::GObject,
                id.as_raw(),
            ) != 0
        };
        if connected {
            model.disconnect(id);
        }
    }
}

/// Hands a panic caught in the model's feed or producer, whose tasks nobody
/// awaits, to the panic handler (X5) at once.
fn report_panic(payload: Box<dyn std::any::Any + Send>) {
    crate::diagnostics::panic::contain(crate::diagnostics::panic::PanicSource::Task, payload);
}

/// The owner thread's task: takes the stream's items as they come and
/// appends them in batches, emitting `items-changed` once per batch. Holds
/// the model weakly: the model owns this task.
///
/// Two bounds shape the batches:
/// - **The batch interval**: after a batch that took every item waiting,
///   the next one goes no sooner than the interval later; items arriving
///   meanwhile wait (unmapped) in `pending`. A stream that trickles (a
///   producer that sends each match as it finds it) would otherwise give
///   one `items-changed` per few items, thousands a second, and a consumer's
///   cost per signal is not small: GTK 4.8's list views spent most of the
///   main thread's time handling them, more with every signal, while
///   50,000 results streamed (the search app, X9).
/// - **The frame budget**: the time between two suspensions of this task
///   (draining, mapping and the `items-changed` handlers together). A batch
///   holds as many items as the budget has room for at the last batch's
///   cost per item, handlers included (a list view's first rows cost far
///   more than the rest: it makes their widgets), and at most four times
///   the biggest batch so far; it also ends when mapping runs out of time.
///   What is left goes in the next batch, after the owner's loop has run
///   once (frames are drawn), not an interval later: a slow `map` or
///   consumer still runs at the budget's pace.
async fn feed<T>(
    model: glib::WeakRef<ListModel>,
    mut stream: Pin<Box<dyn Stream<Item = T>>>,
    mut map: impl FnMut(T) -> glib::Object,
) {
    // Items taken from the stream, not yet mapped and appended.
    let mut pending: VecDeque<T> = VecDeque::new();
    let mut ended = false;
    // The stream's panic, resumed once the items before it are appended
    // (reported by `Held` if the feed stops first).
    let mut broken = Held(None);
    // When the last batch that took every waiting item went: the next one
    // goes an interval later. `None`: as soon as there is an item. (The
    // interval is read at each poll, not added here: one changed since, by
    // an `items-changed` handler or while the feed sleeps, applies to the
    // next batch.)
    let mut last: Option<Instant> = None;
    // The timer for the next batch's time, made when first needed.
    let mut timer: Option<(Instant, crate::future::time::Sleep)> = None;
    // When this task last resumed from a suspension (`None` while it is
    // suspended): the start of the time the budget bounds.
    let mut resumed: Option<Instant> = None;
    // What each item of the last batch cost, mapped and announced (its
    // share of the `items-changed` handlers included), and the biggest
    // batch so far.
    let mut cost: Option<(Duration, usize)> = None;
    loop {
        // Take what the stream has ready, until a batch is due.
        let next = std::future::poll_fn(|cx| {
            let Some(list) = model.upgrade() else {
                return Poll::Ready(Next::Gone);
            };
            let (budget, interval) = list.bounds();
            let start = *resumed.get_or_insert_with(Instant::now);
            // The stream was left ready (out of time): no wake-up will come
            // from it.
            let mut left_ready = false;
            while !ended && pending.len() < MAX_PENDING {
                match std::panic::catch_unwind(AssertUnwindSafe(|| stream.as_mut().poll_next(cx))) {
                    Ok(Poll::Ready(Some(item))) => {
                        pending.push_back(item);
                        if start.elapsed() >= budget {
                            left_ready = true;
                            break;
                        }
                    }
                    Ok(Poll::Ready(None)) => ended = true,
                    Ok(Poll::Pending) => break,
                    Err(payload) => {
                        // The items it gave before are appended first.
                        broken.0 = Some(payload);
                        ended = true;
                    }
                }
            }
            if pending.is_empty() && !ended {
                resumed = None;
                return Poll::Pending;
            }
            // The interval is a timer's: on the clock of the context the
            // feed's timer waits on (a `TestClock`'s, if one drives it),
            // as `last` is, read only when a last batch holds the next
            // back. (The budget is the frame's: real time.) A last batch
            // after now was timed on another clock (one attached to the
            // context since, or let go of): it counts as one now, so that
            // the next waits an interval, not the two clocks' difference
            // too (an hour, after a clock advanced by an hour is let go
            // of).
            let due = last.as_mut().map(|last| {
                let now = crate::now();
                *last = (*last).min(now);
                (*last + interval, now)
            });
            // The stream has ended, a batch's worth waits, or nothing
            // holds the next batch back: it goes now.
            let due_now =
                ended || pending.len() >= MAX_PENDING || due.is_none_or(|(due, now)| now >= due);
            if left_ready {
                // Out of time: back after a turn of the loop. A batch that
                // is due then goes first, with the whole budget, before the
                // stream is polled again: going at once, it got what the
                // drain had left of the budget, nothing (one item), and a
                // stream always ready but slower than the budget allows
                // got ever further ahead of the list (a quarter of a second
                // of its items by the 300th, at 1 ms an item).
                return Poll::Ready(if due_now {
                    Next::BatchAfterTurn
                } else {
                    Next::DrainAfterTurn
                });
            }
            let Some((due, now)) = due.filter(|_| !due_now) else {
                return Poll::Ready(Next::Batch);
            };
            if timer.as_ref().is_none_or(|(at, _)| *at != due) {
                timer = Some((due, crate::sleep(due.saturating_duration_since(now))));
            }
            let (_, sleep) = timer.as_mut().expect("made above");
            if Pin::new(sleep).poll(cx).is_ready() {
                return Poll::Ready(Next::Batch);
            }
            // For `set_batch_interval`: the new interval may make the batch
            // due sooner.
            list.imp().feed_waker.replace(Some(cx.waker().clone()));
            resumed = None;
            Poll::Pending
        })
        .await;
        match next {
            Next::Gone => return,
            Next::Batch => {}
            Next::DrainAfterTurn | Next::BatchAfterTurn => {
                crate::yield_now().await;
                resumed = None;
                if matches!(next, Next::DrainAfterTurn) {
                    continue;
                }
            }
        }
        if pending.is_empty() {
            // Ended, with every item appended.
            if let Some(payload) = broken.0.take() {
                // The stream panicked: on to the feed's report.
                std::panic::resume_unwind(payload);
            }
            break;
        }
        let Some(list) = model.upgrade() else { return };
        let budget = list.bounds().0;
        let start = *resumed.get_or_insert_with(Instant::now);
        // As many items as the budget has room for, at what items cost in
        // the last batch; at most four times the biggest batch so far, so
        // that an estimate from a few items (a list view makes widgets for
        // its first rows) is checked on a bigger batch before a big one.
        let limit = match cost {
            None => FIRST_BATCH,
            Some((per_item, biggest)) => {
                let left = budget.saturating_sub(start.elapsed()).as_nanos();
                let fits = left / per_item.as_nanos().max(1);
                // (A budget of years fits more than a `usize` counts.)
                usize::try_from(fits)
                    .unwrap_or(usize::MAX)
                    .clamp(1, biggest.saturating_mul(4).max(FIRST_BATCH))
            }
        };
        let item_type = imp::ListModel::item_type(list.imp());
        let batch_start = Instant::now();
        let mut batch = Vec::with_capacity(pending.len().min(limit));
        while batch.len() < limit {
            let Some(item) = pending.pop_front() else {
                break;
            };
            let mapped = std::panic::catch_unwind(AssertUnwindSafe(|| map(item)))
                .and_then(|object| of_item_type(object, item_type));
            match mapped {
                Ok(object) => batch.push(object),
                Err(payload) => {
                    // The items mapped before it are appended; the feed
                    // stops (the rest are dropped) and reports the panic
                    // (or the object of another type).
                    list.append(batch);
                    // A panic of the stream after this item came first:
                    // reported first, not dropped with the feed.
                    if let Some(held) = broken.0.take() {
                        report_panic(held);
                    }
                    std::panic::resume_unwind(payload);
                }
            }
            if start.elapsed() >= budget {
                break;
            }
        }
        let size = batch.len();
        list.append(batch);
        drop(list);
        let biggest = cost.map_or(size, |(_, biggest)| biggest.max(size));
        cost = Some((batch_start.elapsed() / size as u32, biggest));
        // Items left behind (out of time, or beyond the batch's size) go
        // after a turn of the owner's loop; otherwise the next batch waits
        // for the interval.
        last = pending.is_empty().then(crate::now);
        // The timer was for this batch, which may have gone before it
        // fired (the interval shortened, the stream ended, a backlog
        // full): it goes too, leaving no wake-up on the context and no
        // waiter in a test clock's book, whose auto-advance would jump to
        // it.
        timer = None;
        if !pending.is_empty() || start.elapsed() >= budget {
            // A backlog, or out of time (this batch, or the time since the
            // last suspension, and the `items-changed` handlers): let the
            // owner's loop (and the frame) run before the next batch.
            crate::yield_now().await;
            resumed = None;
        }
    }
    if let Some(list) = model.upgrade() {
        list.set_complete();
    }
}

/// `object`, if it is an `item_type` (or a subtype); otherwise a panic
/// payload that names both types, for the feed to stop on as on a panic in
/// `map`. Appended, such an object made gio-rs's `get_item` panic at its
/// first read, where unwinding aborts: in a GTK app, inside the list view
/// during a frame, far from the `map` that made it.
fn of_item_type(
    object: glib::Object,
    item_type: glib::Type,
) -> Result<glib::Object, Box<dyn std::any::Any + Send>> {
    if object.type_().is_a(item_type) {
        return Ok(object);
    }
    Err(Box::new(format!(
        "gdex::ListModel: map made a {} for a model of {item_type} items; every item must be \
         of the model's item type or a subtype of it (the feed stopped here; fix map, or make \
         the model with the type map makes)",
        object.type_()
    )))
}

/// What the feed does once it has taken what the stream had ready.
enum Next {
    /// Emits a batch now.
    Batch,
    /// Out of time: lets the owner's loop run, then takes more.
    DrainAfterTurn,
    /// Out of time with a batch due: lets the owner's loop run, then emits
    /// the batch.
    BatchAfterTurn,
    /// The model is gone.
    Gone,
}

/// A stream's panic held by the feed until the items the stream gave
/// before it are appended. Reported if the feed stops without resuming it:
/// the model went meanwhile (the feed returns, or its task is dropped with
/// the model), where a plain `Option` dropped it unreported.
struct Held(Option<Box<dyn std::any::Any + Send>>);

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(payload) = self.0.take() {
            report_panic(payload);
        }
    }
}
