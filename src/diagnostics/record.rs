//! The per-task record (O1): one entry per tracked task, from which every
//! view reads: the task dump (X8), the stall watchdog's reports (X4), and,
//! with their features, Sysprof marks, `tracing` spans and tokio-console.
//! There is no other registry of tasks.
//!
//! This module is the data (the table of entries and what an entry holds);
//! [`tracking`](super::tracking) decides which tasks get one and keeps
//! their entries up to date through their lives.

use std::panic::Location;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::Instant;

use slab::Slab;

use crate::util::Unpoisoned;

/// Off, on, or not decided yet (the environment is read at the first
/// spawn): whether the dump wants every task.
pub(crate) static TRACKING: AtomicU8 = AtomicU8::new(UNDECIDED);
pub(crate) const UNDECIDED: u8 = 0;
pub(crate) const OFF: u8 = 1;
pub(crate) const ON: u8 = 2;

/// Turns the dump's tracking on for every task spawned from now on.
pub(crate) fn enable_dump() {
    TRACKING.store(ON, Ordering::Release);
}

/// Whether the dump is on (`GDEX_TASK_DUMP=1` or `enable_task_dump`), as
/// decided so far (undecided before the first spawn: off).
pub(crate) fn dump_on() -> bool {
    TRACKING.load(Ordering::Acquire) == ON
}

/// The live tracked tasks.
static TABLE: Mutex<Slab<Arc<Entry>>> = Mutex::new(Slab::new());

/// The next task id ([`Entry::id`]); ids start at 1.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A new task id.
pub(crate) fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// What kind of work a task is, for the views (a Sysprof mark's name, the
/// span's `kind` field).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An async task.
    Task,
    /// A fiber's task (F1).
    Fiber,
    /// A job of a blocking lane (B1).
    Blocking,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Task => "task",
            Kind::Fiber => "fiber",
            Kind::Blocking => "blocking",
        }
    }
}

/// Where a task comes from: what its spawn knew of it.
pub(crate) struct Spawn {
    pub(crate) kind: Kind,
    pub(crate) name: Option<Arc<str>>,
    pub(crate) location: &'static Location<'static>,
}

/// A task's state, as [`Entry::state`] keeps it.
pub(crate) const QUEUED: u8 = 0;
pub(crate) const RUNNING: u8 = 1;
pub(crate) const WAITING: u8 = 2;
/// Running, and woken meanwhile: queued again once the poll returns.
pub(crate) const RUNNING_WOKEN: u8 = 3;

/// One tracked task's record: everything the views tell of it.
pub(crate) struct Entry {
    /// Unique in the process, from 1: `#7` in the dump, the stall report
    /// and the marks, `task.id` in the span.
    pub(crate) id: u64,
    pub(crate) kind: Kind,
    pub(crate) name: Option<Arc<str>>,
    pub(crate) location: &'static Location<'static>,
    pub(crate) scheduler: Arc<str>,
    pub(crate) spawned: Instant,
    pub(crate) state: AtomicU8,
    pub(crate) polls: AtomicU64,
    /// Nanoseconds after `spawned` when the last poll began; 0: never.
    pub(crate) last_poll: AtomicU64,
    /// Nanoseconds spent in polls, all told.
    pub(crate) busy: AtomicU64,
    /// The [`thread_number`] of the last poll's thread; 0: never polled.
    pub(crate) last_thread: AtomicU64,
    /// The thread of the last poll.
    pub(crate) thread: Mutex<Option<Arc<str>>>,
    /// What the waker handed to the task's future wakes (a
    /// `tracking::Marking`, kept as `Any`: this module is below
    /// `tracking`): marks the entry queued, then wakes the task's own
    /// waker (kept with it, to be reused while the task's waker does not
    /// change).
    pub(crate) waker: Mutex<Option<(Waker, Arc<dyn std::any::Any + Send + Sync>)>>,
    /// A word the task core keeps here for the task: its record in a
    /// registry of idle tasks (S9), for which its block has no room beside
    /// this entry's key.
    pub(crate) word: Mutex<u64>,
    /// The task's span, entered on each poll (feature `tracing`).
    #[cfg(feature = "tracing")]
    pub(crate) span: ::tracing::Span,
}

/// The span closes with the record's last reader, which is not always the
/// task's end ([`forget`](super::tracking::forget)): a waker, the dump or
/// the watchdog may hold the record a moment longer, on another thread. A
/// subscriber's panic in `on_close` goes to the panic handler (X5) there
/// too, instead of unwinding into that reader (a wake-up, async-task's
/// abort).
#[cfg(feature = "tracing")]
impl Drop for Entry {
    fn drop(&mut self) {
        let span = std::mem::replace(&mut self.span, ::tracing::Span::none());
        let closed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(span)));
        if let Err(payload) = closed {
            super::panic::contain(super::panic::PanicSource::Drop, payload);
        }
    }
}

impl Entry {
    /// "#7 "fetch" (fiber)": the task as every view names it.
    pub(crate) fn describe(&self) -> String {
        let name = match &self.name {
            Some(name) => format!(" \"{name}\""),
            None => String::new(),
        };
        format!("#{}{} ({})", self.id, name, self.kind.as_str())
    }

    /// When its last poll began, if it was ever polled: the start of the
    /// poll a stall report is about, as the poll's own views tell it.
    pub(crate) fn poll_began(&self) -> Option<Instant> {
        let last = self.last_poll.load(Ordering::Relaxed);
        (last > 0).then(|| self.spawned + std::time::Duration::from_nanos(last))
    }
}

/// The live entries, for the dump.
pub(crate) fn entries() -> Vec<Arc<Entry>> {
    TABLE
        .lock()
        .unpoisoned()
        .iter()
        .map(|(_, e)| e.clone())
        .collect()
}

pub(crate) fn entry(track: u32) -> Option<Arc<Entry>> {
    TABLE.lock().unpoisoned().get(track as usize - 1).cloned()
}

/// Puts `entry` in the table; gives its key + 1 (0 means untracked).
pub(crate) fn insert(entry: Arc<Entry>) -> u32 {
    let key = TABLE.lock().unpoisoned().insert(entry);
    u32::try_from(key + 1).expect("gdex: more than 4 billion tracked tasks")
}

/// Takes the entry of `track` out of the table.
pub(crate) fn remove(track: u32) -> Option<Arc<Entry>> {
    TABLE.lock().unpoisoned().try_remove(track as usize - 1)
}

/// A small number for this thread, to tell whether a wake-up comes from
/// the thread that last polled a task.
pub(crate) fn thread_number() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static NUMBER: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    NUMBER.try_with(|n| *n).unwrap_or(0)
}
