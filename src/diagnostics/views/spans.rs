//! The `tracing` view (O1, feature `tracing`): a span per tracked task,
//! entered on each of its polls, and events for what the scheduler does.
//!
//! Targets, for a subscriber's filter (`RUST_LOG=gdex=trace`):
//! - `gdex::task`: the task spans (`trace` level), named `runtime.spawn`
//!   with the fields tokio-console reads (`kind`, `task.name`, `task.id`,
//!   `loc.file`, `loc.line`, `loc.col`) and gdex's `scheduler`; and an
//!   event when a task is woken from another thread than its last poll's.
//! - `gdex::worker`: `trace` events for a pool worker's steals and parks.
//! - `gdex::fiber`: `trace` events for a fiber's waits (F2).
//! - `gdex::stall`: a `debug` event for each stall the watchdog reports
//!   (X4).
//! - `runtime::waker` (feature `console`): tokio-console's waker events,
//!   one per wake-up of a tracked task and per clone or drop of the waker
//!   its future got (the console counts a task's wakers by them).
//!
//! Whether an event is wanted is asked as an event (`enabled!` with kind
//! `EVENT`): a filter may take the events of a target and not the hint
//! that is `enabled!`'s default kind (console-subscriber's own filter
//! does just that).
//!
//! A task's span has no parent: a task spawned inside another's poll is
//! not part of that poll.

use std::time::Duration;

use tracing::Span;

use super::WorkerEvent;
use crate::diagnostics::record::{Entry, Spawn};

/// The span of a new task, disabled if no subscriber takes it; with it,
/// the task's id and its scheduler's name, made only if the span is
/// enabled (`id` None: a new one is taken).
pub(crate) fn task_span(
    id: Option<u64>,
    spawn: &Spawn,
    scheduler: impl FnOnce() -> String,
) -> (Span, Option<(u64, String)>) {
    let mut scheduler = Some(scheduler);
    let mut made: Option<(u64, String)> = None;
    // The field values are evaluated only if a subscriber takes the span.
    let span = tracing::trace_span!(
        target: "gdex::task",
        parent: None,
        "runtime.spawn",
        kind = spawn.kind.as_str(),
        task.name = spawn.name.as_deref().unwrap_or(""),
        task.id = {
            let (id, _) = made.insert((
                id.unwrap_or_else(crate::diagnostics::record::next_id),
                scheduler.take().map_or_else(String::new, |f| f()),
            ));
            *id
        },
        loc.file = spawn.location.file(),
        loc.line = spawn.location.line(),
        loc.col = spawn.location.column(),
        scheduler = made.as_ref().map_or("", |(_, label)| label.as_str()),
    );
    (span, made)
}

/// A tracked task was woken.
pub(crate) fn woken(entry: &Entry, elsewhere: bool, by_ref: bool) {
    if elsewhere {
        let thread = std::thread::current();
        tracing::trace!(
            target: "gdex::task",
            thread = thread.name().unwrap_or("(unnamed)"),
            task.id = entry.id,
            "woken from another thread"
        );
    }
    #[cfg(feature = "console")]
    if let Some(span) = entry.span.id() {
        // tokio-console's waker event: the span's id, not gdex's.
        let op = if by_ref {
            "waker.wake_by_ref"
        } else {
            "waker.wake"
        };
        let id = span.into_u64();
        tracing::trace!(target: "runtime::waker", op, task.id = id);
    }
    let _ = by_ref;
}

/// Does a subscriber take tokio-console's waker events?
#[cfg(feature = "console")]
#[inline]
pub(crate) fn waker_ops() -> bool {
    tracing::enabled!(
        kind: tracing::metadata::Kind::EVENT,
        target: "runtime::waker",
        tracing::Level::TRACE
    )
}

/// tokio-console's event for a clone of a tracked task's waker, or the
/// drop of one: with the wakes (a wake by value counts as a drop), what the
/// console counts a task's wakers by.
#[cfg(feature = "console")]
pub(crate) fn waker_counted(entry: &Entry, cloned: bool) {
    if let Some(span) = entry.span.id() {
        let op = if cloned { "waker.clone" } else { "waker.drop" };
        let id = span.into_u64();
        tracing::trace!(target: "runtime::waker", op, task.id = id);
    }
}

/// Does a subscriber take the pool workers' events?
#[inline]
pub(crate) fn worker_events() -> bool {
    tracing::enabled!(
        kind: tracing::metadata::Kind::EVENT,
        target: "gdex::worker",
        tracing::Level::TRACE
    )
}

pub(crate) fn worker_event(figures: &super::WorkerFigures, event: WorkerEvent) {
    match event {
        WorkerEvent::Stole => tracing::trace!(
            target: "gdex::worker",
            worker = figures.index,
            queued = figures.queued,
            steals = figures.steals,
            "stole work from a peer"
        ),
        WorkerEvent::Parked => tracing::trace!(
            target: "gdex::worker",
            worker = figures.index,
            parks = figures.parks,
            "parks: no work anywhere"
        ),
    }
}

/// The stall watchdog reported a stall (X4).
pub(crate) fn stall(runner: &str, task: &str, stuck_for: Duration) {
    tracing::debug!(
        target: "gdex::stall",
        runner,
        task,
        stuck_ms = u64::try_from(stuck_for.as_millis()).unwrap_or(u64::MAX),
        "stuck in one poll"
    );
}

/// The fiber running here suspends in a wait (F2): when it began, if a
/// subscriber takes fibers' events.
#[inline]
pub(crate) fn fiber_waits() -> Option<std::time::Instant> {
    if !tracing::enabled!(
        kind: tracing::metadata::Kind::EVENT,
        target: "gdex::fiber",
        tracing::Level::TRACE
    ) {
        return None;
    }
    tracing::trace!(target: "gdex::fiber", "waits");
    Some(std::time::Instant::now())
}

/// The fiber running here resumed after `waited`.
pub(crate) fn fiber_resumed(waited: Duration) {
    tracing::trace!(
        target: "gdex::fiber",
        waited_us = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX),
        "resumes"
    );
}
