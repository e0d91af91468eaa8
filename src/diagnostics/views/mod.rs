//! The views of the per-task record (O1) that features turn on: Sysprof
//! marks (feature `sysprof`), `tracing` spans and events (feature
//! `tracing`) and tokio-console's waker events (feature `console`).
//!
//! Every function here is what the rest of gdex calls at a moment a view
//! may want to see: a task's poll or end, a wake-up, a slice of a context
//! scheduler, a stall, a steal, a park, a fiber's wait. Without the
//! features each is empty and inlined away; with them, each asks its view
//! whether it is on (a capture, a subscriber) before doing anything.

use std::time::{Duration, Instant};

use super::record::Entry;

#[cfg(feature = "tracing")]
pub(crate) mod spans;
#[cfg(feature = "sysprof")]
pub(crate) mod sysprof;

/// Does a view want every task tracked from its spawn (a Sysprof capture
/// is being made)?
#[inline]
pub(crate) fn want_every_task() -> bool {
    #[cfg(feature = "sysprof")]
    if sysprof::active() {
        return true;
    }
    false
}

/// A tracked task's future is gone: it finished or was dropped.
#[inline]
pub(crate) fn task_ended(entry: &Entry) {
    #[cfg(feature = "sysprof")]
    sysprof::task_ended(entry);
    let _ = entry;
}

/// A poll of a tracked task that began at `started` took `took`.
#[inline]
pub(crate) fn poll_ended(entry: &Entry, started: Instant, took: Duration) {
    #[cfg(feature = "sysprof")]
    sysprof::poll_ended(entry, started, took);
    let _ = (entry, started, took);
}

/// A tracked task was woken: `elsewhere` if not on the thread of its last
/// poll, `by_ref` if its waker was kept.
///
/// This runs inside the task's waker, wherever it is woken: async-task
/// aborts the process if a wake unwinds (it wakes the task awaiting a
/// finished one), a GLib callback cannot unwind, and the task must still
/// get its wake-up. So a view's panic (a `tracing` subscriber's) goes to
/// the panic handler (X5) instead.
#[inline]
pub(crate) fn woken(entry: &Entry, elsewhere: bool, by_ref: bool) {
    #[cfg(feature = "tracing")]
    contained(super::panic::PanicSource::Waker, || {
        spans::woken(entry, elsewhere, by_ref)
    });
    let _ = (entry, elsewhere, by_ref);
}

/// The future of a tracked task cloned the waker it got (`cloned`), or
/// dropped a clone: tokio-console counts the wakers a task holds (feature
/// `console`). Inside the waker, like [`woken`].
#[cfg(feature = "console")]
pub(crate) fn waker_counted(entry: &Entry, cloned: bool) {
    contained(super::panic::PanicSource::Waker, || {
        spans::waker_counted(entry, cloned)
    });
}

/// Runs a view's `show`, called from gdex's own machinery (a waker, a
/// worker's loop), where an unwinding panic would abort the process or
/// leave that machinery half done: a panic there (a `tracing`
/// subscriber's) goes to the panic handler as `source` (X5).
#[cfg(feature = "tracing")]
#[inline]
fn contained(source: super::panic::PanicSource, show: impl FnOnce()) {
    if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(show)) {
        super::panic::contain(source, payload);
    }
}

/// A slice of a context scheduler's jobs (X3: on the main context, one
/// dispatch of the main scheduler's source) runs until this drops.
pub(crate) struct Slice {
    #[cfg(feature = "sysprof")]
    began: Option<(Instant, bool)>,
}

/// A context scheduler begins a slice of its jobs; `main` if it is the
/// main context's.
#[inline]
pub(crate) fn slice(main: bool) -> Slice {
    let _ = main;
    Slice {
        #[cfg(feature = "sysprof")]
        began: sysprof::active().then(|| (Instant::now(), main)),
    }
}

impl Drop for Slice {
    #[inline]
    fn drop(&mut self) {
        #[cfg(feature = "sysprof")]
        if let Some((began, main)) = self.began {
            sysprof::slice(began, main);
        }
    }
}

/// The stall watchdog reported `runner` stuck since `since` in a poll of
/// `task`, with `report` (X4).
pub(crate) fn stall(runner: &str, task: &str, since: Instant, report: &str) {
    #[cfg(feature = "sysprof")]
    sysprof::stall(since, report);
    #[cfg(feature = "tracing")]
    spans::stall(runner, task, since.elapsed());
    let _ = (runner, task, since, report);
}

/// A pool worker's counters after a steal or a park: for the views that
/// chart them over time.
#[cfg_attr(not(any(feature = "tracing", feature = "sysprof")), allow(dead_code))]
pub(crate) struct WorkerFigures {
    pub(crate) index: usize,
    pub(crate) queued: usize,
    pub(crate) parks: u64,
    pub(crate) steals: u64,
}

/// A pool worker stole work from a peer.
#[inline]
pub(crate) fn stole(figures: impl FnOnce() -> WorkerFigures) {
    worker_event(figures, WorkerEvent::Stole);
}

/// A pool worker parks: it found no work anywhere.
#[inline]
pub(crate) fn parked(figures: impl FnOnce() -> WorkerFigures) {
    worker_event(figures, WorkerEvent::Parked);
}

/// What a pool worker did, for [`worker_event`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum WorkerEvent {
    Stole,
    Parked,
}

#[inline]
fn worker_event(figures: impl FnOnce() -> WorkerFigures, event: WorkerEvent) {
    #[cfg(feature = "tracing")]
    let traced = spans::worker_events();
    #[cfg(not(feature = "tracing"))]
    let traced = false;
    #[cfg(feature = "sysprof")]
    let charted = sysprof::active();
    #[cfg(not(feature = "sysprof"))]
    let charted = false;
    if traced || charted {
        worker_event_cold(figures(), event, traced, charted);
    }
}

#[cold]
#[inline(never)]
fn worker_event_cold(figures: WorkerFigures, event: WorkerEvent, traced: bool, charted: bool) {
    // In the worker's loop: a subscriber's panic must not unwind out of it
    // (a steal's would drop the job just stolen: a task lost, cancelled).
    #[cfg(feature = "tracing")]
    if traced {
        contained(super::panic::PanicSource::Source, || {
            spans::worker_event(&figures, event)
        });
    }
    #[cfg(feature = "sysprof")]
    if charted {
        sysprof::counters(&figures, false);
    }
    let _ = (figures, event, traced, charted);
}

/// A pool worker starts a slice of its jobs: a sample of its counters for
/// the views that chart them.
#[inline]
pub(crate) fn worker_slice(figures: impl FnOnce() -> WorkerFigures) {
    #[cfg(feature = "sysprof")]
    if sysprof::active() {
        sysprof::counters(&figures(), true);
    }
    let _ = figures;
}

/// A scheduler whose latency histograms are on starts a slice of its jobs
/// (a pool worker's, a context scheduler's dispatch): a sample of every
/// such scheduler's for the views that chart them (Sysprof's counters, at
/// most every 10 ms).
#[inline]
pub(crate) fn latency_slice() {
    #[cfg(feature = "sysprof")]
    if sysprof::active() {
        sysprof::latency();
    }
}

/// A wait of the fiber running here (F2), from its suspension to its
/// resumption.
pub(crate) struct FiberWait {
    #[cfg(feature = "tracing")]
    since: Option<Instant>,
}

/// The fiber running here suspends in `fiber::wait` (F2).
#[inline]
pub(crate) fn fiber_waits() -> FiberWait {
    FiberWait {
        #[cfg(feature = "tracing")]
        since: spans::fiber_waits(),
    }
}

impl FiberWait {
    /// The fiber resumed.
    #[inline]
    pub(crate) fn resumed(self) {
        #[cfg(feature = "tracing")]
        if let Some(since) = self.since {
            spans::fiber_resumed(since.elapsed());
        }
    }
}
