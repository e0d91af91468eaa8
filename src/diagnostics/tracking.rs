//! Which tasks get an entry in the per-task record (O1), and the entry's
//! life: made at spawn, updated around each poll (running, then waiting or
//! done) and by the task's waker (queued), taken out when its future is
//! dropped; the views see each of those moments.
//!
//! A task is tracked when something wants to see it at its spawn: the dump
//! (`GDEX_TASK_DUMP=1` or [`enable_task_dump`](crate::enable_task_dump)), a
//! Sysprof capture the process runs under (feature `sysprof`), or a
//! `tracing` subscriber that takes gdex's task spans (feature `tracing`).
//! Otherwise it costs one branch at spawn (and, with the `tracing`
//! feature, a load of tracing's global level) and none per poll. The
//! task's future holds the entry's key (`task::CatchUnwind`), so the task's
//! block does not grow.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, RawWaker, RawWakerVTable, Waker};
use std::time::{Duration, Instant};

use super::record::{
    self, Entry, Spawn, OFF, ON, QUEUED, RUNNING, RUNNING_WOKEN, TRACKING, UNDECIDED, WAITING,
};
use super::views;
use crate::util::Unpoisoned;

/// Does the dump track the tasks spawned now (`GDEX_TASK_DUMP=1` or
/// [`enable_task_dump`](crate::enable_task_dump))?
#[inline]
pub(crate) fn dump_tracking() -> bool {
    match TRACKING.load(Ordering::Relaxed) {
        ON => true,
        OFF => false,
        _ => decide(),
    }
}

#[cold]
fn decide() -> bool {
    let on = crate::util::env_setting(
        "GDEX_TASK_DUMP",
        "1 or 0",
        || "task tracking stays off".into(),
        |text| match text {
            "1" | "yes" | "true" | "on" => Some(true),
            "0" | "no" | "false" | "off" | "" => Some(false),
            _ => None,
        },
    )
    .unwrap_or(false);
    let decided = if on { ON } else { OFF };
    if TRACKING
        .compare_exchange(UNDECIDED, decided, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
        && on
    {
        super::dump::start_signal_thread();
    }
    TRACKING.load(Ordering::Acquire) == ON
}

/// The key of a new task's entry (+ 1) if a view wants the task, else 0.
/// `scheduler` names the task's scheduler; it is called only for a tracked
/// task.
#[inline]
pub(crate) fn track(spawn: Spawn, scheduler: impl FnOnce() -> String) -> u32 {
    if dump_tracking() || views::want_every_task() {
        return register(spawn, scheduler());
    }
    #[cfg(feature = "tracing")]
    if ::tracing::level_enabled!(::tracing::Level::TRACE) {
        return track_for_tracing(spawn, scheduler);
    }
    0
}

/// With a subscriber that takes `trace` events somewhere: tracked if it
/// takes this task's span (which is made with the id and the scheduler's
/// name only then).
#[cfg(feature = "tracing")]
#[cold]
#[inline(never)]
fn track_for_tracing(spawn: Spawn, scheduler: impl FnOnce() -> String) -> u32 {
    match views::spans::task_span(None, &spawn, scheduler) {
        (span, Some((id, scheduler))) if !span.is_disabled() => {
            register_with(id, spawn, scheduler, span)
        }
        _ => 0,
    }
}

#[cold]
#[inline(never)]
fn register(spawn: Spawn, scheduler: String) -> u32 {
    let id = record::next_id();
    #[cfg(feature = "tracing")]
    let span = views::spans::task_span(Some(id), &spawn, || scheduler.clone()).0;
    register_with(
        id,
        spawn,
        scheduler,
        #[cfg(feature = "tracing")]
        span,
    )
}

fn register_with(
    id: u64,
    spawn: Spawn,
    scheduler: String,
    #[cfg(feature = "tracing")] span: ::tracing::Span,
) -> u32 {
    let entry = Arc::new(Entry {
        id,
        kind: spawn.kind,
        name: spawn.name,
        location: spawn.location,
        scheduler: scheduler.into(),
        spawned: Instant::now(),
        state: AtomicU8::new(QUEUED),
        polls: AtomicU64::new(0),
        last_poll: AtomicU64::new(0),
        busy: AtomicU64::new(0),
        last_thread: AtomicU64::new(0),
        thread: Mutex::new(None),
        waker: Mutex::new(None),
        word: Mutex::new(0),
        #[cfg(feature = "tracing")]
        span,
    });
    record::insert(entry)
}

/// Runs `f` on the word a tracked task's entry keeps for the task core (0
/// at first). Only the task's own poll and drop call it, one at a time; the
/// entry goes only after its last call (see [`forget`]).
pub(crate) fn with_word(track: u32, f: impl FnOnce(&mut u64)) {
    if let Some(entry) = record::entry(track) {
        f(&mut entry.word.lock().unpoisoned());
    }
}

/// A tracked task's future is dropped (it finished, or was cancelled): its
/// entry goes, and the views see the end of its life.
///
/// This runs in the drop of the task's future, where a panic would abort
/// the process (async-task): a view's panic (a `tracing` subscriber's
/// `on_close`, as the span goes with the entry) goes to the panic handler
/// instead (X5).
pub(crate) fn forget(track: u32) {
    // Taken out under the table's lock, dropped outside it (it may hold a
    // waker).
    let Some(entry) = record::remove(track) else {
        return;
    };
    let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        views::task_ended(&entry);
        drop(entry);
    }));
    if let Err(payload) = ended {
        super::panic::contain(super::panic::PanicSource::Drop, payload);
    }
}

/// Polls a tracked task: `poll` (which contains the future's panics) runs
/// with the waker the task's future gets (one that marks the entry queued
/// when woken), inside the task's span (feature `tracing`), its runner
/// naming the task to the stall watchdog. A view's panic around the poll
/// (a `tracing` subscriber's `on_enter` or `on_exit`) is the task's panic,
/// contained as the future's own are (S6).
pub(crate) fn poll<T>(
    track: u32,
    waker: &Waker,
    poll: impl FnOnce(&Waker) -> std::thread::Result<Poll<T>>,
) -> std::thread::Result<Poll<T>> {
    let Some(entry) = record::entry(track) else {
        return poll(waker);
    };
    // The poll's start, as the record keeps it (`last_poll`) and every view
    // tells it (a poll's mark, a stall's).
    let started = Instant::now();
    let marking = begin_poll(&entry, waker, started);
    let ours = marking.lend();
    let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _named = super::stall::polling_entry(&entry);
        #[cfg(feature = "tracing")]
        let _entered = entry.span.enter();
        poll(&ours)
    }))
    .and_then(|polled| polled);
    let took = started.elapsed();
    end_poll(&entry, matches!(polled, Ok(Poll::Pending)), started, took);
    polled
}

/// A poll of a tracked task begins at `started`: gives the waker to poll
/// it with.
fn begin_poll(entry: &Arc<Entry>, waker: &Waker, started: Instant) -> Arc<Marking> {
    entry.state.store(RUNNING, Ordering::Release);
    entry.polls.fetch_add(1, Ordering::Relaxed);
    let since = started.duration_since(entry.spawned).as_nanos().max(1) as u64;
    entry.last_poll.store(since, Ordering::Relaxed);
    let number = record::thread_number();
    if entry.last_thread.swap(number, Ordering::Relaxed) != number {
        let thread = std::thread::current();
        let name: Arc<str> = match thread.name() {
            Some(name) => name.into(),
            None => format!("{:?}", thread.id()).into(),
        };
        *entry.thread.lock().unpoisoned() = Some(name);
    }
    let mut cached = entry.waker.lock().unpoisoned();
    if let Some((inner, ours)) = &*cached {
        if inner.will_wake(waker) {
            if let Ok(ours) = ours.clone().downcast::<Marking>() {
                return ours;
            }
        }
    }
    let ours = Arc::new(Marking {
        entry: Arc::downgrade(entry),
        inner: waker.clone(),
    });
    let old = cached.replace((waker.clone(), ours.clone()));
    drop(cached);
    drop(old);
    ours
}

/// The poll that began at `started` ended after `took`: `pending` if it
/// returned `Pending`.
fn end_poll(entry: &Entry, pending: bool, started: Instant, took: Duration) {
    let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
    entry.busy.fetch_add(nanos, Ordering::Relaxed);
    // Pending: waiting for a wake-up, unless one came during the poll (a
    // yield), which queued the task again.
    let _ = entry
        .state
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |state| match state {
            RUNNING if pending => Some(WAITING),
            RUNNING | RUNNING_WOKEN => Some(QUEUED),
            _ => None,
        });
    views::poll_ended(entry, started, took);
}

/// The waker a tracked task's future gets: marks its entry queued, and
/// tells the views of the wake-up.
///
/// Its waker is made by hand ([`MARKING`]) so that the views can count the
/// wakers the future holds (tokio-console's `waker.clone` and
/// `waker.drop`, feature `console`): gdex itself keeps the `Marking` as an
/// `Arc` (in the entry, for the next poll) and lends the future a waker
/// that holds no count of its own ([`Marking::lend`]), so that only the
/// future's clones and their drops are counted.
pub(crate) struct Marking {
    entry: std::sync::Weak<Entry>,
    inner: Waker,
}

impl Marking {
    /// The waker to poll the task with: it borrows this `Arc`'s count (the
    /// caller keeps the `Arc` for the whole poll) and is never dropped, so
    /// lending it is not a clone the views count.
    fn lend(self: &Arc<Self>) -> std::mem::ManuallyDrop<Waker> {
        let data = Arc::as_ptr(self).cast::<()>();
        // SAFETY: `data` is an `Arc<Marking>`'s, as MARKING's functions
        // expect; the waker is never dropped (ManuallyDrop), so it gives
        // back no count it did not take, and the caller's `Arc` keeps the
        // `Marking` alive while it is used (a clone the future keeps takes
        // a count of its own).
        std::mem::ManuallyDrop::new(unsafe { Waker::from_raw(RawWaker::new(data, &MARKING)) })
    }

    fn mark(&self, by_ref: bool) {
        if let Some(entry) = self.entry.upgrade() {
            // A wake during the poll leaves it running, and marks it woken:
            // the poll's end then makes it queued, not waiting.
            let _ = entry
                .state
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |state| match state {
                    WAITING => Some(QUEUED),
                    RUNNING => Some(RUNNING_WOKEN),
                    _ => None,
                });
            let polled_on = entry.last_thread.load(Ordering::Relaxed);
            let elsewhere = polled_on != 0 && polled_on != record::thread_number();
            views::woken(&entry, elsewhere, by_ref);
        }
    }

    /// The future cloned its waker (`cloned`) or dropped a clone.
    #[inline]
    fn counted(&self, cloned: bool) {
        #[cfg(feature = "console")]
        if views::spans::waker_ops() {
            if let Some(entry) = self.entry.upgrade() {
                views::waker_counted(&entry, cloned);
            }
        }
        let _ = cloned;
    }
}

// A waker is shared across threads (it is `Send + Sync`): so must its data
// be, which the vtable below cannot check for itself (`Wake` did).
const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<Marking>()
};

/// True if `waker` is a tracked task's (a [`Marking`]'s): a fiber whose
/// task's poll gives it one keeps its waits in that task's polls, so that
/// the views see each of them (`fiber::sched`).
pub(crate) fn is_marking(waker: &Waker) -> bool {
    std::ptr::eq(waker.vtable(), &MARKING)
}

/// The vtable of a [`Marking`]'s waker; its data is `Arc::into_raw` of
/// the `Arc<Marking>` (or, for the lent waker, `Arc::as_ptr`). One
/// `static`, so that `Waker::will_wake` knows two of its wakers apart only
/// by their `Marking`.
static MARKING: RawWakerVTable = RawWakerVTable::new(
    clone_marking,
    wake_marking,
    wake_marking_by_ref,
    drop_marking,
);

/// # Safety
/// `data` points at a live `Marking` of an `Arc` (see [`MARKING`]).
unsafe fn clone_marking(data: *const ()) -> RawWaker {
    // SAFETY: `data` is a live `Arc<Marking>`'s (the waker being cloned
    // holds it alive); the new waker owns the count taken here.
    unsafe { Arc::increment_strong_count(data.cast::<Marking>()) };
    // SAFETY: as above.
    unsafe { &*data.cast::<Marking>() }.counted(true);
    RawWaker::new(data, &MARKING)
}

/// # Safety
/// `data` is a count of an `Arc<Marking>` this waker owns.
unsafe fn wake_marking(data: *const ()) {
    // SAFETY: a wake by value gives the waker's count up: taken back here
    // and dropped at the end (the console counts the wake as the drop).
    let marking = unsafe { Arc::from_raw(data.cast::<Marking>()) };
    marking.mark(false);
    marking.inner.wake_by_ref();
}

/// # Safety
/// `data` points at a live `Marking` of an `Arc`.
unsafe fn wake_marking_by_ref(data: *const ()) {
    // SAFETY: the waker being woken keeps the `Arc` alive meanwhile.
    let marking = unsafe { &*data.cast::<Marking>() };
    marking.mark(true);
    marking.inner.wake_by_ref();
}

/// # Safety
/// `data` is a count of an `Arc<Marking>` this waker owns.
unsafe fn drop_marking(data: *const ()) {
    // SAFETY: the waker's own count, given up with it. (The lent waker is
    // never dropped.)
    let marking = unsafe { Arc::from_raw(data.cast::<Marking>()) };
    marking.counted(false);
}
