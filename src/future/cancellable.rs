//! [`Cancellable`] (one object with `gio::Cancellable`) and [`Delayed`].

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use gio::prelude::*;

use crate::task::flag::Flag;
use crate::Error;

/// A cancellation flag whose future only rejects (libdex's
/// `DexCancellable`), and which *is* a `gio::Cancellable`: converting either
/// way shares the one object, so cancelling the GIO side rejects gdex
/// waiters, and cancelling the gdex side stops GIO calls made with it.
///
/// ```
/// use gio::prelude::*;
/// let cancellable = gdex::Cancellable::new();
/// let gio_side: gio::Cancellable = cancellable.clone().into();
/// let waiter = cancellable.future::<()>();
/// gio_side.cancel();
/// assert!(matches!(gdex::block_on(waiter), Err(gdex::Error::Cancelled)));
/// ```
#[derive(Clone, Debug, Default)]
pub struct Cancellable {
    gio: gio::Cancellable,
}

impl Cancellable {
    /// A new, uncancelled cancellable.
    pub fn new() -> Self {
        Cancellable {
            gio: gio::Cancellable::new(),
        }
    }

    /// Cancels it: waiters reject with [`Error::Cancelled`], GIO calls made
    /// with it end with `G_IO_ERROR_CANCELLED`. Cancelling twice does
    /// nothing more.
    pub fn cancel(&self) {
        self.gio.cancel();
    }

    /// True once cancelled (from either side).
    pub fn is_cancelled(&self) -> bool {
        self.gio.is_cancelled()
    }

    /// The `gio::Cancellable` it is, for GIO calls.
    pub fn as_gio(&self) -> &gio::Cancellable {
        &self.gio
    }

    /// A new cancellable that is cancelled when this one is (tokio-util's
    /// `CancellationToken::child_token`): born cancelled if this one is
    /// already; cancelling the child leaves this one alone. Children of
    /// children follow the whole line. It is a `gio::Cancellable` of its
    /// own, so GIO calls given it stop when any of its ancestors is
    /// cancelled, from any thread.
    ///
    /// A child keeps its parent alive (so a grandchild still follows the
    /// root when the child between them was dropped), but a parent does not
    /// keep its children: once a child is gone (its last reference, GIO's
    /// included, dropped) its link to this one goes too, so a long-lived
    /// parent with many short-lived children does not grow. A line of
    /// children each made from the one before (`token = token.child()` in
    /// a loop) keeps every one of them until its last is dropped; cancelling
    /// its root, and dropping its last, take no deeper a stack however long
    /// it is.
    ///
    /// ```
    /// let app = gdex::Cancellable::new();
    /// let search = app.child();
    /// let request = search.child();
    /// search.cancel(); // a new search: the old one's requests stop
    /// assert!(request.is_cancelled() && !app.is_cancelled());
    /// let next = app.child();
    /// app.cancel(); // quitting: everything stops
    /// assert!(next.is_cancelled());
    /// assert!(app.child().is_cancelled(), "born cancelled");
    /// ```
    pub fn child(&self) -> Cancellable {
        let child = gio::Cancellable::new();
        let weak_child = child.downgrade();
        // Runs at once, and gives no handler, if this is cancelled already.
        let handler = self.gio.connect_cancelled(move |_| {
            if let Some(child) = weak_child.upgrade() {
                cascade(Step::Cancel(child));
            }
        });
        if let Some(id) = handler {
            // The handler holds the child weakly; the child holds this one
            // (through this notification, which lives as long as the child)
            // and when it goes, takes its handler with it, on the thread
            // that let go of it (`disconnect` never waits for an emission
            // under way, which may be the one that let go of it).
            let parent = self.gio.clone();
            // The notification owns its data and is freed when it runs:
            // nothing to keep here.
            let _notify = child.add_weak_ref_notify(move || {
                disconnect(&parent, id);
                cascade(Step::Release(parent));
            });
        }
        Cancellable { gio: child }
    }

    /// A future that never resolves and rejects with [`Error::Cancelled`]
    /// once this is cancelled. Its value type is whatever the futures it
    /// races with need, so it fits in [`first`](crate::first).
    pub fn future<T>(&self) -> CancelledFuture<T> {
        CancelledFuture {
            gio: self.gio.clone(),
            shared: Arc::default(),
            handler: None,
            _value: PhantomData,
        }
    }

    /// Runs `future` until it completes or this is cancelled; if cancelled
    /// first, `future` is dropped (cancelling its work) and the result is
    /// [`Error::Cancelled`].
    ///
    /// The cancellable is checked before `future` on every poll: if it is
    /// already cancelled when the returned future is first polled, `future`
    /// is dropped without ever being polled (nothing of it runs), and once
    /// it is cancelled `future` is not polled again.
    ///
    /// ```
    /// let cancellable = gdex::Cancellable::new();
    /// cancellable.cancel();
    /// let ran = std::cell::Cell::new(false);
    /// let r = gdex::block_on(cancellable.run(async { ran.set(true) }));
    /// assert!(matches!(r, Err(gdex::Error::Cancelled)));
    /// assert!(!ran.get(), "a future run under a cancelled cancellable never starts");
    /// ```
    pub async fn run<F: Future>(&self, future: F) -> Result<F::Output, Error> {
        let mut future = std::pin::pin!(future);
        let mut cancelled = self.future::<()>();
        std::future::poll_fn(move |cx| {
            // Not under the budget (P11): a cancellation is never missed
            // for it, and the future's own leaves spend it.
            if cancelled.poll_cancelled(cx).is_ready() {
                return Poll::Ready(Err(Error::Cancelled));
            }
            future.as_mut().poll(cx).map(Ok)
        })
        .await
    }
}

impl From<gio::Cancellable> for Cancellable {
    fn from(gio: gio::Cancellable) -> Self {
        Cancellable { gio }
    }
}

impl From<Cancellable> for gio::Cancellable {
    fn from(c: Cancellable) -> Self {
        c.gio
    }
}

impl AsRef<gio::Cancellable> for Cancellable {
    fn as_ref(&self) -> &gio::Cancellable {
        &self.gio
    }
}

/// How many steps of a cascade one thread's stack holds: a parent's
/// handler cancelling its child, whose handler cancels its own child, …; or
/// a child's last reference going, which lets go of its parent's, which may
/// be that one's last, …. Past this depth the next step waits for the
/// outermost one on the thread, which runs it once its own is over (before
/// the `cancel` that started the cascade returns): a line of children of
/// any length then needs a stack of this depth, where each step nested in
/// the one before overflowed a 2 MiB stack at a few thousand.
const CASCADE_DEPTH: usize = 16;

/// A step of a cascade (see [`CASCADE_DEPTH`]).
enum Step {
    Cancel(gio::Cancellable),
    Release(gio::Cancellable),
}

impl Step {
    fn run(self) {
        match self {
            Step::Cancel(child) => child.cancel(),
            Step::Release(parent) => drop(parent),
        }
    }
}

/// This thread's cascade: how deep it is, and the steps that wait for its
/// outermost step.
struct Cascade {
    depth: std::cell::Cell<usize>,
    waiting: std::cell::RefCell<Vec<Step>>,
}

thread_local! {
    static CASCADE: Cascade = const {
        Cascade {
            depth: std::cell::Cell::new(0),
            waiting: std::cell::RefCell::new(Vec::new()),
        }
    };
}

/// Runs `step` now, or, [`CASCADE_DEPTH`] steps deep in a cascade, once
/// the outermost step of this thread's is over.
fn cascade(step: Step) {
    let mut step = Some(step);
    // A thread whose locals are gone (it is exiting) runs it in place.
    let _ = CASCADE.try_with(|cascade| {
        let depth = cascade.depth.get();
        if depth >= CASCADE_DEPTH {
            cascade.waiting.borrow_mut().extend(step.take());
            return;
        }
        cascade.depth.set(depth + 1);
        if let Some(step) = step.take() {
            step.run();
        }
        if depth == 0 {
            // The outermost step: those that waited for it, and theirs.
            loop {
                let next = cascade.waiting.borrow_mut().pop();
                let Some(next) = next else { break };
                next.run();
            }
        }
        cascade.depth.set(depth);
    });
    if let Some(step) = step {
        step.run();
    }
}

/// The future of [`Cancellable::future`].
#[must_use = "futures do nothing unless awaited"]
pub struct CancelledFuture<T> {
    gio: gio::Cancellable,
    shared: Arc<Flag>,
    handler: Option<gio::CancelledHandlerId>,
    _value: PhantomData<fn() -> T>,
}

impl<T> Future for CancelledFuture<T> {
    type Output = Result<T, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        crate::task::coop::poll_leaf(cx, |cx| this.poll_cancelled(cx))
            .map(|()| Err(Error::Cancelled))
    }
}

impl<T> CancelledFuture<T> {
    /// Ready once cancelled, outside the budget.
    fn poll_cancelled(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let this = self;
        if this.handler.is_none() && !this.shared.set.load(Ordering::Acquire) {
            let shared = this.shared.clone();
            // Runs at once if already cancelled (and then returns None).
            this.handler = this.gio.connect_cancelled(move |_| shared.raise());
        }
        if this.shared.poll_raised(cx) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl<T> Drop for CancelledFuture<T> {
    fn drop(&mut self) {
        if let Some(id) = self.handler.take() {
            disconnect(&self.gio, id);
        }
    }
}

/// Lets go of a `cancelled` handler of gdex's (one whose closure owns all it
/// uses) without waiting for an emission of the signal that is under way.
///
/// Not `g_cancellable_disconnect` (`disconnect_cancelled`): it waits for a
/// running emission to end, and GLib (2.74 at least) says that called from
/// a `cancelled` handler it therefore deadlocks, waiting for itself. gdex
/// can get there without calling it from a handler: a handler wakes a task,
/// and a wake-up may drop the task's future on the spot (a `!Send` task of
/// a thread that has exited, on that thread during its exit), and with it
/// the future that holds the handler. Its wait only protects a C caller
/// that frees the handler's data once the call returns. Ours is owned by
/// the handler's closure, which GObject keeps alive while the handler runs
/// and frees after it: the handler may still run once on another thread
/// after this returns, raising a flag nobody waits for any more.
pub(crate) fn disconnect(cancellable: &gio::Cancellable, id: gio::CancelledHandlerId) {
    use glib::translate::ToGlibPtr;
    let instance: *mut gio::ffi::GCancellable = cancellable.to_glib_none().0;
    // SAFETY: `cancellable` is alive (borrowed), and `id` is a handler
    // connected to it (`connect_cancelled`, i.e. `g_cancellable_connect`,
    // which connects with `g_signal_connect_data`) and not disconnected yet:
    // its holder gives it up here, once. The handler's closure owns its
    // data (the trampoline's box, freed by its destroy notify once GObject
    // drops its last reference to the closure, after any emission that is
    // running it), so nothing it uses goes away under it.
    unsafe {
        glib::gobject_ffi::g_signal_handler_disconnect(instance.cast(), id.as_raw());
    }
}

impl<T> std::fmt::Debug for CancelledFuture<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelledFuture").finish_non_exhaustive()
    }
}

pin_project_lite::pin_project! {
    /// Holds a future's result until released (libdex's `DexDelayed`): the
    /// wrapped future runs as soon as this is polled, but its output is given
    /// only once [`Release::release`] is called (or the `Release` is dropped,
    /// so that nothing is held forever). Dropping the `Delayed` drops the
    /// wrapped future.
    ///
    /// ```
    /// let (delayed, release) = gdex::Delayed::new(async { 5 });
    /// let waiter = gdex::spawn(delayed);
    /// std::thread::sleep(std::time::Duration::from_millis(5));
    /// assert!(!waiter.is_finished());
    /// release.release();
    /// assert_eq!(gdex::block_on(waiter).unwrap(), 5);
    /// ```
    #[must_use = "futures do nothing unless awaited"]
    pub struct Delayed<F: Future> {
        // Dropped in place (`Pin::set`) once it has given its output.
        #[pin]
        future: Option<F>,
        output: Option<F::Output>,
        gate: Arc<Flag>,
    }
}

/// Releases a [`Delayed`]. Dropping it releases too.
#[derive(Debug)]
pub struct Release {
    gate: Arc<Flag>,
}

impl<F: Future> Delayed<F> {
    /// Wraps `future`; its output is held until `Release` says so.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(future: F) -> (Delayed<F>, Release) {
        let gate = Arc::new(Flag::default());
        (
            Delayed {
                future: Some(future),
                output: None,
                gate: gate.clone(),
            },
            Release { gate },
        )
    }
}

impl Release {
    /// Lets the held (or future) output through.
    pub fn release(self) {
        drop(self);
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        self.gate.raise();
    }
}

impl<F: Future> Future for Delayed<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let mut future = this.future;
        if let Some(inner) = future.as_mut().as_pin_mut() {
            if let Poll::Ready(value) = inner.poll(cx) {
                *this.output = Some(value);
                future.set(None);
            }
        }
        if this.output.is_some() && this.gate.poll_raised(cx) {
            // A leaf (P11): the held output is given under the budget (the
            // wrapped future, polled above, spends its own).
            std::task::ready!(crate::task::coop::poll_proceed(cx)).made_progress();
            return Poll::Ready(this.output.take().expect("checked above"));
        }
        Poll::Pending
    }
}

impl<F: Future> std::fmt::Debug for Delayed<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delayed")
            .field("has_output", &self.output.is_some())
            .field("released", &self.gate.set.load(Ordering::Relaxed))
            .finish()
    }
}
