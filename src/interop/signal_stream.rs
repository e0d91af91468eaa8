//! GObject signals as streams: [`signal_stream`] for a thread-safe object,
//! [`signal_stream_local`] for a `!Send` one (a GTK widget), each a
//! `Stream` of what a closure makes of each emission's arguments.
//!
//! The handler pushes into a bounded buffer the stream drains; when the
//! buffer is full the oldest item goes (counted in `missed`), so a slow
//! consumer sees the newest emissions, which is what a UI wants of
//! `notify::` or `changed`. The stream ends when the object is disposed:
//! GObject then destroys its handlers, and the handler's closure owns a
//! [`Sink`] whose drop ends the stream. Dropping the stream disconnects
//! the handler.

use std::collections::VecDeque;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use futures::Stream;
use glib::prelude::*;

use crate::diagnostics::panic::PanicSource;
use crate::util::Unpoisoned;

/// How many items a signal stream holds for a slow consumer unless told
/// otherwise ([`SignalStream::with_capacity`]).
pub const DEFAULT_SIGNAL_CAPACITY: usize = 64;

struct Buffer<T> {
    items: VecDeque<T>,
    capacity: usize,
    missed: u64,
    /// The handler is gone (the object disposed, or the stream dropped):
    /// nothing more comes.
    ended: bool,
    waker: Option<Waker>,
}

struct Shared<T> {
    buffer: Mutex<Buffer<T>>,
}

impl<T> Shared<T> {
    /// Queues `item` (dropping the oldest if full) and wakes the consumer;
    /// what goes, and the waker, leave the lock first. Called in the
    /// emission: a panic in the drop of what goes is contained.
    fn push(&self, item: T) {
        let (evicted, waker) = {
            let mut buffer = self.buffer.lock().unpoisoned();
            if buffer.ended {
                (Some(item), None)
            } else {
                let evicted = if buffer.items.len() >= buffer.capacity {
                    buffer.missed += 1;
                    buffer.items.pop_front()
                } else {
                    None
                };
                buffer.items.push_back(item);
                (evicted, buffer.waker.take())
            }
        };
        drop(Contained(evicted));
        if let Some(waker) = waker {
            crate::diagnostics::panic::wake(waker);
        }
    }

    fn end(&self) {
        let waker = {
            let mut buffer = self.buffer.lock().unpoisoned();
            buffer.ended = true;
            buffer.waker.take()
        };
        if let Some(waker) = waker {
            crate::diagnostics::panic::wake(waker);
        }
    }
}

/// Owned by the handler's closure: its drop (the handler destroyed, by a
/// disconnect or the object's dispose) ends the stream.
struct Sink<T>(Arc<Shared<T>>);

/// Holds a value whose drop runs where a panic cannot unwind (in the
/// emission, or in GObject's teardown of the handler: its closure's
/// captures, the map's and the sink's, which may hold the last reference
/// to the items): a panic in that drop goes to the panic handler (X5)
/// instead of aborting the process.
struct Contained<V>(Option<V>);

impl<V> Drop for Contained<V> {
    fn drop(&mut self) {
        let value = self.0.take();
        if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(value))) {
            crate::diagnostics::panic::contain(PanicSource::Callback, payload);
        }
    }
}

impl<T> Drop for Sink<T> {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// What the handler's closure owns: the sink and the map, each dropped
/// with its panics contained (the sink first, so that the stream ends
/// whatever the map's drop does).
struct Handler<T, M> {
    sink: Contained<Sink<T>>,
    map: Contained<M>,
}

impl<T, M: Fn(&[glib::Value]) -> T> Handler<T, M> {
    fn new(sink: Sink<T>, map: M) -> Self {
        Handler {
            sink: Contained(Some(sink)),
            map: Contained(Some(map)),
        }
    }

    /// The work for one emission: `map` (user code, its panic contained:
    /// GObject's emission cannot unwind) then the push.
    fn emit(&self, args: &[glib::Value]) {
        let (Some(sink), Some(map)) = (&self.sink.0, &self.map.0) else {
            unreachable!("a handler holds its sink and map until dropped")
        };
        match catch_unwind(AssertUnwindSafe(|| map(args))) {
            Ok(item) => sink.0.push(item),
            Err(payload) => crate::diagnostics::panic::contain(PanicSource::Callback, payload),
        }
    }
}

/// Panics unless `object` has a signal `signal` (with its detail, as
/// `notify::text`) that returns nothing: a stream cannot answer one that
/// returns a value. For `notify::`, the property must be the object's, by
/// the name GObject notifies it with (its canonical one): another detail
/// would never be emitted, and the stream would wait for good.
fn check_signal(call: &str, object: &glib::Object, signal: &str) {
    let type_ = object.type_();
    let Some((id, _detail)) = glib::subclass::SignalId::parse_name(signal, type_, false) else {
        panic!("gdex::{call}: {type_} has no signal {signal:?}");
    };
    if let ("notify", Some((_, property))) = (id.name(), signal.split_once("::")) {
        match object.find_property(property) {
            None => panic!(
                "gdex::{call}: {type_} has no property {property:?}, so {signal:?} is never \
                 emitted"
            ),
            Some(spec) if spec.name() != property => panic!(
                "gdex::{call}: {signal:?} is never emitted: ask for notify::{} (GObject \
                 notifies with the canonical name)",
                spec.name()
            ),
            Some(_) => {}
        }
    }
    let returns = id.query().return_type().type_();
    assert!(
        returns == glib::Type::UNIT,
        "gdex::{call}: {type_}'s signal {signal:?} returns a {returns}, which a stream \
         cannot give back; connect a handler for it instead"
    );
}

/// A GObject signal's emissions as a `Stream`: from [`signal_stream`], or
/// (`!Send`) [`signal_stream_local`].
///
/// It holds at most its capacity of items ([`DEFAULT_SIGNAL_CAPACITY`]
/// unless set with [`with_capacity`](Self::with_capacity)); when the
/// consumer is slow and it is full, the oldest item is dropped to make
/// room for the newest ([`missed`](Self::missed) counts them): a
/// capacity of 1 keeps only the latest emission. It ends (after what it
/// holds) when the object is disposed; dropping it disconnects its
/// handler. Each item counts against the task's budget (P11).
#[must_use = "streams do nothing unless polled"]
pub struct SignalStream<T, Thread = Shareable> {
    shared: Arc<Shared<T>>,
    object: ObjectRef,
    handler: Option<glib::SignalHandlerId>,
    _thread: PhantomData<Thread>,
}

/// The stream's weak reference to its object, to disconnect from it.
struct ObjectRef(glib::WeakRef<glib::Object>);

// SAFETY: a `Shareable` stream's object is `Send + Sync` (`signal_stream`
// requires it), so upgrading the reference, disconnecting and letting go of
// the strong reference may happen on any thread; a `Local` stream is
// `!Send` and `!Sync` by its marker, so its reference never leaves the
// thread that made it.
unsafe impl Send for ObjectRef {}
// SAFETY: as for `Send`: the reference is only upgraded, and a `Local`
// stream is never shared.
unsafe impl Sync for ObjectRef {}

/// Marks a [`SignalStream`] of a thread-safe object: `Send` if its items
/// are.
#[derive(Debug)]
pub struct Shareable;

/// Marks a [`SignalStream`] of a `!Send` object ([`signal_stream_local`]):
/// the stream stays on the object's thread.
#[derive(Debug)]
pub struct Local(PhantomData<*const ()>);

/// A [`SignalStream`] that stays on its object's thread.
pub type LocalSignalStream<T> = SignalStream<T, Local>;

fn new_stream<T, Thread>(
    object: &glib::Object,
    connect: impl FnOnce(Sink<T>) -> glib::SignalHandlerId,
) -> SignalStream<T, Thread> {
    let shared = Arc::new(Shared {
        buffer: Mutex::new(Buffer {
            items: VecDeque::new(),
            capacity: DEFAULT_SIGNAL_CAPACITY,
            missed: 0,
            ended: false,
            waker: None,
        }),
    });
    let handler = connect(Sink(shared.clone()));
    SignalStream {
        shared,
        object: ObjectRef(object.downgrade()),
        handler: Some(handler),
        _thread: PhantomData,
    }
}

/// The emissions of `object`'s signal `signal` (with a detail if it has
/// one: `"notify::text"`), each made into an item by `map` from the
/// signal's arguments (the object first, as GObject gives them; `map` runs
/// in the emission, on the emitting thread). For a thread-safe object; a
/// GTK widget's go through [`signal_stream_local`].
///
/// ```
/// use futures::StreamExt;
/// use gio::prelude::*;
/// let cancellable = gio::Cancellable::new();
/// let mut cancelled = gdex::signal_stream(&cancellable, "cancelled", |_| "cancelled");
/// cancellable.cancel();
/// assert_eq!(gdex::block_on(cancelled.next()), Some("cancelled"));
/// ```
///
/// # Panics
/// If `object` has no such signal, or the signal returns a value (a
/// stream cannot give one back).
#[track_caller]
pub fn signal_stream<O, T, M>(object: &O, signal: &str, map: M) -> SignalStream<T>
where
    O: IsA<glib::Object> + Send + Sync,
    T: Send + 'static,
    M: Fn(&[glib::Value]) -> T + Send + Sync + 'static,
{
    let object = object.upcast_ref::<glib::Object>();
    check_signal("signal_stream", object, signal);
    new_stream(object, |sink| {
        let handler = Handler::new(sink, map);
        object.connect(signal, false, move |args| {
            handler.emit(args);
            None
        })
    })
}

/// [`signal_stream`] for a `!Send` object (a GTK widget), on the thread
/// that owns it (the main thread for GTK): the handler and `map` run
/// there, and the stream stays there.
///
/// ```
/// use futures::StreamExt;
/// use gio::prelude::*;
/// let action = gio::SimpleAction::new("search", Some(glib::VariantTy::STRING));
/// // Only the latest request matters (as for a search entry's "changed").
/// let mut requests = gdex::signal_stream_local(&action, "activate", |args| {
///     let parameter = args[1].get::<Option<glib::Variant>>().unwrap();
///     parameter.and_then(|v| v.get::<String>()).unwrap()
/// })
/// .with_capacity(1);
/// action.activate(Some(&"gd".to_variant()));
/// action.activate(Some(&"gdex".to_variant()));
/// assert_eq!(gdex::block_on(requests.next()).as_deref(), Some("gdex"));
/// assert_eq!(requests.missed(), 1);
/// ```
///
/// # Panics
/// As [`signal_stream`]. The signal must be emitted, and the object
/// disposed, on the thread that made the stream: elsewhere the handler
/// panics inside GObject, where a panic cannot unwind, and the process
/// aborts.
#[track_caller]
pub fn signal_stream_local<O, T, M>(object: &O, signal: &str, map: M) -> LocalSignalStream<T>
where
    O: IsA<glib::Object>,
    T: 'static,
    M: Fn(&[glib::Value]) -> T + 'static,
{
    let object = object.upcast_ref::<glib::Object>();
    check_signal("signal_stream_local", object, signal);
    new_stream(object, |sink| {
        let handler = Handler::new(sink, map);
        object.connect_local(signal, false, move |args| {
            handler.emit(args);
            None
        })
    })
}

impl<T, Thread> SignalStream<T, Thread> {
    /// Holds at most `capacity` items for a slow consumer (the oldest
    /// dropped beyond that); 1 keeps only the latest.
    ///
    /// # Panics
    /// If `capacity` is 0: an emission would have nowhere to go.
    pub fn with_capacity(self, capacity: usize) -> Self {
        assert!(
            capacity >= 1,
            "gdex::SignalStream::with_capacity(0): a stream holds at least one item; use 1 \
             to keep only the latest emission"
        );
        let evicted: Vec<T> = {
            let mut buffer = self.shared.buffer.lock().unpoisoned();
            buffer.capacity = capacity;
            let excess = buffer.items.len().saturating_sub(capacity);
            buffer.missed += excess as u64;
            buffer.items.drain(..excess).collect()
        };
        drop(evicted);
        self
    }

    /// How many items were dropped because the stream was full.
    pub fn missed(&self) -> u64 {
        self.shared.buffer.lock().unpoisoned().missed
    }
}

impl<T, Thread> Stream for SignalStream<T, Thread> {
    type Item = T;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let shared = &self.shared;
        crate::task::coop::poll_leaf(cx, |cx| {
            let old = {
                let mut buffer = shared.buffer.lock().unpoisoned();
                if let Some(item) = buffer.items.pop_front() {
                    return Poll::Ready(Some(item));
                }
                if buffer.ended {
                    return Poll::Ready(None);
                }
                match &buffer.waker {
                    Some(waker) if waker.will_wake(cx.waker()) => None,
                    _ => buffer.waker.replace(cx.waker().clone()),
                }
            };
            // A waker's drop is user code: after the release.
            drop(old);
            Poll::Pending
        })
    }
}

impl<T, Thread> Unpin for SignalStream<T, Thread> {}

impl<T, Thread> Drop for SignalStream<T, Thread> {
    fn drop(&mut self) {
        // Ended: the handler is gone already (the object was disposed),
        // and disconnecting it again would be a GLib warning.
        let ended = self.shared.buffer.lock().unpoisoned().ended;
        if let (false, Some(handler), Some(object)) =
            (ended, self.handler.take(), self.object.0.upgrade())
        {
            // The handler's closure goes (now, or after an emission under
            // way), and its sink ends the stream.
            object.disconnect(handler);
        }
    }
}

impl<T, Thread> std::fmt::Debug for SignalStream<T, Thread> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (held, missed, ended) = {
            let buffer = self.shared.buffer.lock().unpoisoned();
            (buffer.items.len(), buffer.missed, buffer.ended)
        };
        f.debug_struct("SignalStream")
            .field("held", &held)
            .field("missed", &missed)
            .field("ended", &ended)
            .finish_non_exhaustive()
    }
}
