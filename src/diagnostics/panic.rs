//! X5: the panic policy. What happens to a panic that has nobody to go to.
//!
//! A task's panic normally reaches whoever awaits the task, as
//! [`Error::Panicked`](crate::Error::Panicked) (S6). Some panics have no
//! such waiter: a detached task's, one whose handle was dropped after it
//! finished, a work item's, one raised while a cancelled task's future was
//! being dropped, one in a gdex `GSource` callback, one in the `wake` of a
//! waker gdex calls. Those go to the panic handler. The default handler logs
//! them with `g_critical` (domain `gdex`) and the program keeps running;
//! [`set_panic_handler`] lets an app show a dialog, log elsewhere, or quit
//! cleanly.
//!
//! A waker that panics when gdex wakes it (the waker a `Task` handle, a
//! promise, a channel, a semaphore or a timer was polled with) is such a
//! panic: it does not unwind into gdex (which may be a pool worker, the
//! watchdog's thread, a GLib callback or a primitive's lock), the wake-up
//! counts as done, and the other waiters are woken as if nothing happened.
//! So is a waker whose drop panics when gdex lets go of it (a primitive's
//! or a `Task` handle's: a newer waker replaced it, or its future was
//! dropped): a primitive drops it once its lock is released, and goes on.
//!
//! What gdex cannot contain: a panic in a callback that GLib calls through
//! glib-rs (a closure attached as a GLib source, say with
//! `glib::idle_source_new(..).attach(..)` or `glib::timeout_add`, or a
//! signal handler), on a pool worker as on the main thread. glib-rs calls it
//! from an `extern "C"` trampoline, which cannot unwind, so Rust aborts the
//! process (after printing the panic's message, then "panic in a function
//! that cannot unwind"), and there is no gdex frame in between to catch it.
//! Await the event as a future inside a task instead (`gdex::sleep`,
//! `glib::timeout_future`, a GIO `*_future` call): its panic is then the
//! task's, [`Error::Panicked`](crate::Error::Panicked) for its waiter.

use crate::util::Unpoisoned;
use std::sync::{Arc, RwLock};

/// Where an unobserved panic came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PanicSource {
    /// A task (or fiber) that panicked with nobody awaiting it: detached,
    /// or its handle dropped after it finished.
    Task,
    /// A work item ([`Scheduler::push`](crate::Scheduler::push)).
    WorkItem,
    /// The destructor of a cancelled task's future, or of a work item
    /// dropped without running (its pool shut down first).
    Drop,
    /// The destructor of a task's output that nobody took (the task was
    /// detached, or its handle dropped after it finished).
    Output,
    /// A gdex `GSource` callback (a scheduler's own machinery).
    Source,
    /// The `wake` of a waker that gdex called to say a future is ready
    /// (the waker a [`Task`](crate::Task), a promise, channel, semaphore,
    /// timer or signal wait was last polled with). The wake-up counts as
    /// done. Also the drop of a waker that gdex let go of: a promise,
    /// channel, semaphore, task group or state machine's, or a
    /// [`Task`](crate::Task) handle's, polled since with another waker.
    Waker,
    /// The Rust callback of an [`AsyncResult`](crate::AsyncResult), which
    /// GIO calls from its main context, where a panic cannot unwind; or the
    /// `map` of a [`signal_stream`](crate::signal_stream), which runs in
    /// the signal's emission (that emission gives no item), and the drops
    /// the stream makes where a panic cannot unwind: an item a full stream
    /// lets go of in the emission, its map and the items it holds when
    /// GObject lets go of its handler.
    Callback,
}

/// A panic that reached the panic handler.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PanicEvent {
    /// What panicked.
    pub source: PanicSource,
    /// The panic message.
    pub message: String,
    /// The name of the thread it happened on (`gdex-worker-0`, `main`, …).
    pub thread: Option<String>,
}

impl std::fmt::Display for PanicEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.source {
            PanicSource::Task => "a task panicked and nobody awaited it",
            PanicSource::WorkItem => "a work item panicked",
            PanicSource::Drop => "a task panicked while being dropped",
            PanicSource::Output => "a task's output panicked while being dropped",
            PanicSource::Source => "a gdex source panicked",
            PanicSource::Waker => "a waker panicked when gdex woke or dropped it",
            PanicSource::Callback => {
                "a callback GLib called (an AsyncResult's, a signal stream's map, or a drop a \
                 signal stream made in GObject's emission or teardown) panicked"
            }
        };
        write!(f, "{what}: {}", self.message)
    }
}

type Handler = Arc<dyn Fn(&PanicEvent) + Send + Sync>;

static HANDLER: RwLock<Option<Handler>> = RwLock::new(None);

/// Sets the handler for panics that have no waiter (X5), replacing the
/// default, which logs them with `g_critical` and goes on. The handler runs
/// on the thread where the panic was caught (a pool worker, the main
/// thread), right after it; a GTK app that wants a dialog sends the event
/// to the main thread. A panic inside the handler is logged and ignored.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let log = seen.clone();
/// gdex::set_panic_handler(move |event| log.lock().unwrap().push(event.message.clone()));
///
/// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
/// pool.scheduler().push(|| panic!("lost in a work item"));
/// while seen.lock().unwrap().is_empty() {
///     std::thread::sleep(std::time::Duration::from_millis(1));
/// }
/// assert_eq!(*seen.lock().unwrap(), ["lost in a work item"]);
/// gdex::reset_panic_handler();
/// ```
pub fn set_panic_handler<F>(handler: F)
where
    F: Fn(&PanicEvent) + Send + Sync + 'static,
{
    replace_handler(Some(Arc::new(handler)));
}

/// Goes back to the default handler (`g_critical`, keep running).
pub fn reset_panic_handler() {
    replace_handler(None);
}

/// Installs `handler`. The one it replaces is dropped with the lock
/// released: its drop is user code (what the closure captured), which may
/// report a panic, and so read the handler.
fn replace_handler(handler: Option<Handler>) {
    let old = std::mem::replace(&mut *HANDLER.write().unpoisoned(), handler);
    drop(old);
}

/// Wakes `waker`; a panic in its `wake` goes to the panic handler
/// ([`PanicSource::Waker`]) instead of unwinding into the caller, which may
/// hold a lock, be a worker's or the watchdog's thread, or a C callback
/// (where unwinding aborts).
pub(crate) fn wake(waker: std::task::Waker) {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| waker.wake()));
    if let Err(payload) = outcome {
        contain(PanicSource::Waker, payload);
    }
}

/// Drops `waker`; a panic in its drop goes to the panic handler
/// ([`PanicSource::Waker`]) instead of unwinding into the caller: a
/// waker's drop is user code as much as its `wake` is.
pub(crate) fn drop_waker(waker: std::task::Waker) {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(waker)));
    if let Err(payload) = outcome {
        contain(PanicSource::Waker, payload);
    }
}

/// [`wake`] without giving the waker up.
pub(crate) fn wake_by_ref(waker: &std::task::Waker) {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| waker.wake_by_ref()));
    if let Err(payload) = outcome {
        contain(PanicSource::Waker, payload);
    }
}

pub(crate) use crate::error::{drop_payload, take_message};

/// Reports a panic caught on this thread ([`report`]) and drops its payload
/// without unwinding ([`drop_payload`]): a payload whose `Drop` panics
/// must not escape where the first panic was contained (X5).
pub(crate) fn contain(source: PanicSource, payload: Box<dyn std::any::Any + Send>) {
    report(source, take_message(payload));
}

/// Hands an unobserved panic, caught on this thread, to the handler.
pub(crate) fn report(source: PanicSource, message: String) {
    report_from(
        source,
        message,
        std::thread::current().name().map(str::to_owned),
    );
}

/// Hands an unobserved panic to the handler; `thread` is where it happened
/// (which may not be the thread reporting it: a task's panic is reported
/// when its report is dropped unread, wherever that is).
pub(crate) fn report_from(source: PanicSource, message: String, thread: Option<String>) {
    let handler = HANDLER.read().unpoisoned().clone();
    let event = PanicEvent {
        source,
        message,
        thread,
    };
    match handler {
        None => glib::g_critical!("gdex", "{}", event),
        Some(handler) => {
            let outcome =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(&event)));
            if let Err(payload) = outcome {
                glib::g_critical!(
                    "gdex",
                    "the gdex panic handler panicked ({}) while handling: {}",
                    take_message(payload),
                    event
                );
            }
        }
    }
}
