//! The Sysprof view (O1, feature `sysprof`): marks and counters in the
//! capture of a process that runs under Sysprof.
//!
//! Sysprof hands a profiled process one of two ends, which
//! libsysprof-capture (linked statically) writes to:
//! - `SYSPROF_TRACE_FD`: a file descriptor to write a whole capture to
//!   (what GTK and GJS use; Sysprof merges it into its own capture, and a
//!   test can point it at a plain file). Its writer is not thread-safe, so
//!   one lock guards it. It buffers what it is given; a `gdex-sysprof`
//!   thread flushes it [`FLUSH_EVERY`] (100 ms) after a mark (or counter)
//!   comes into an empty buffer, so that a capture keeps the marks of an
//!   app stopped by a signal (Ctrl-C, SIGTERM: no `atexit` handler runs
//!   then) but for the last 100 ms or so; it sleeps while nothing is
//!   written. At a normal exit, an `atexit` handler flushes the rest.
//! - `SYSPROF_CONTROL_FD`: the collector's socket, through which each
//!   thread gets a ring buffer of its own (what GLib's `g_trace_mark`
//!   uses).
//!
//! Which one is decided once, at the first question; without either, the
//! view is off and every task stays untracked (unless another view wants
//! it).
//!
//! Marks, all in the group `gdex`:
//! - `task`, `fiber`, `blocking`: a task's life of [`long_life`] or more
//!   (1 ms, or `GDEX_SYSPROF_TASK_US`; 0: every task), from its spawn to
//!   the drop of its future, with its id, name, spawn site and scheduler
//!   (for a task still alive when the process exits normally, its life so
//!   far, marked "alive at exit"). A spawn-heavy app's tasks of a few
//!   microseconds would otherwise fill the capture (hundreds of megabytes
//!   in seconds);
//! - `poll`: a poll of a task longer than [`long_poll`] (1 ms, or
//!   `GDEX_SYSPROF_POLL_US`), with the same message;
//! - `main slice` / `context slice`: each slice of a context scheduler's
//!   jobs (X3; the main scheduler's are what a frame waits for);
//! - `stall`: each stall the watchdog reports (X4), from the moment the
//!   poll began, with the report.
//!
//! Counters, per pool worker (category `gdex-worker-N`): its queued jobs,
//! its parks and its steals, set when it steals or parks and, at most once
//! a millisecond, when it starts a slice of its jobs. Per scheduler whose
//! latency histograms are on (category `gdex-pool-N`, `gdex-main-N`,
//! `gdex-context-N`, N its number among those): the p99 of its
//! wake-to-poll times and of its poll durations, in microseconds, over the
//! last 10 ms or more (0 if nothing ran), set at most every 10 ms as a
//! slice of any of them starts.

use std::ffi::{c_char, c_int, c_uint, CString};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::WorkerFigures;
use crate::diagnostics::latency::LatencyHistogram;
use crate::diagnostics::record::{Entry, Kind};
use crate::util::Unpoisoned;

/// libsysprof-capture's `SysprofCaptureWriter` (opaque).
#[repr(C)]
struct Writer {
    _opaque: [u8; 0],
}

/// libsysprof-capture's `SysprofCaptureCounterValue`.
#[repr(C)]
#[derive(Clone, Copy)]
union CounterValue {
    v64: i64,
    _vdbl: f64,
}

/// libsysprof-capture's `SysprofCaptureCounter`: 116 bytes of strings,
/// the id (24 bits) and type (8 bits) in one word, then the value.
#[repr(C)]
struct Counter {
    category: [c_char; 32],
    name: [c_char; 32],
    description: [c_char; 52],
    id_and_type: u32,
    value: CounterValue,
}

const _: () = assert!(std::mem::size_of::<Counter>() == 128);

extern "C" {
    fn sysprof_clock_init();
    fn sysprof_capture_writer_new_from_env(buffer_size: usize) -> *mut Writer;
    fn sysprof_capture_writer_add_mark(
        writer: *mut Writer,
        time: i64,
        cpu: c_int,
        pid: i32,
        duration: u64,
        group: *const c_char,
        name: *const c_char,
        message: *const c_char,
    ) -> bool;
    fn sysprof_capture_writer_flush(writer: *mut Writer) -> bool;
    fn sysprof_capture_writer_request_counter(writer: *mut Writer, n_counters: c_uint) -> c_uint;
    fn sysprof_capture_writer_define_counters(
        writer: *mut Writer,
        time: i64,
        cpu: c_int,
        pid: i32,
        counters: *const Counter,
        n_counters: c_uint,
    ) -> bool;
    fn sysprof_capture_writer_set_counters(
        writer: *mut Writer,
        time: i64,
        cpu: c_int,
        pid: i32,
        counters_ids: *const c_uint,
        values: *const CounterValue,
        n_counters: c_uint,
    ) -> bool;
    fn sysprof_collector_init();
    fn sysprof_collector_is_active() -> bool;
    fn sysprof_collector_mark(
        time: i64,
        duration: i64,
        group: *const c_char,
        mark: *const c_char,
        message: *const c_char,
    );
    fn sysprof_collector_request_counters(n_counters: c_uint) -> c_uint;
    fn sysprof_collector_define_counters(counters: *const Counter, n_counters: c_uint);
    fn sysprof_collector_set_counters(
        counters_ids: *const c_uint,
        values: *const CounterValue,
        n_counters: c_uint,
    );
}

/// Where marks go.
enum Sink {
    /// A capture writer on `SYSPROF_TRACE_FD`, behind its lock.
    Writer(Mutex<WriterRef>),
    /// The collector of `SYSPROF_CONTROL_FD` (thread-safe).
    Collector,
}

/// The writer, made once and never freed (flushed by [`flusher`] while the
/// process runs, and at exit).
struct WriterRef(NonNull<Writer>);

// SAFETY: the writer is used only under the `Mutex` that holds this, one
// thread at a time; libsysprof-capture's writer keeps no thread-local
// state.
unsafe impl Send for WriterRef {}

static SINK: OnceLock<Option<Sink>> = OnceLock::new();

/// Is the process being profiled by Sysprof?
#[inline]
pub(crate) fn active() -> bool {
    SINK.get_or_init(open).is_some()
}

fn sink() -> Option<&'static Sink> {
    SINK.get_or_init(open).as_ref()
}

#[cold]
fn open() -> Option<Sink> {
    if let Some(named) = std::env::var_os("SYSPROF_TRACE_FD") {
        // libsysprof-capture takes 2 (stderr) as well, and would write the
        // binary capture among the app's messages.
        let fd = named
            .to_str()
            .and_then(|text| text.trim().parse::<i32>().ok());
        if fd.is_none_or(|fd| fd <= 2) {
            glib::g_warning!(
                "gdex",
                "SYSPROF_TRACE_FD={:?} is not a file descriptor above 2 (stdin, stdout and \
                 stderr are no captures); gdex writes no Sysprof marks there",
                named
            );
            return open_collector();
        }
        // SAFETY: reads the environment variable and dups the descriptor it
        // names; 0 asks for the default buffer size. Null if it is not a
        // descriptor number.
        let writer = unsafe {
            sysprof_clock_init();
            sysprof_capture_writer_new_from_env(0)
        };
        match NonNull::new(writer) {
            Some(writer) => {
                // SAFETY: `at_exit` is an `extern "C" fn()` that never
                // unwinds.
                unsafe { libc::atexit(at_exit) };
                start_flusher();
                return Some(Sink::Writer(Mutex::new(WriterRef(writer))));
            }
            None => glib::g_warning!(
                "gdex",
                "SYSPROF_TRACE_FD={:?} is not a descriptor libsysprof-capture can write to; \
                 gdex writes no Sysprof marks",
                std::env::var_os("SYSPROF_TRACE_FD").unwrap_or_default()
            ),
        }
    }
    open_collector()
}

/// The collector, if Sysprof gave the process its control socket.
fn open_collector() -> Option<Sink> {
    if std::env::var_os("SYSPROF_CONTROL_FD").is_some() {
        // SAFETY: initialises the collector once (it is idempotent), then
        // asks whether this thread got a ring buffer from Sysprof.
        let active = unsafe {
            sysprof_collector_init();
            sysprof_collector_is_active()
        };
        if active {
            // SAFETY: as above.
            unsafe { libc::atexit(at_exit) };
            return Some(Sink::Collector);
        }
    }
    None
}

/// How long a mark (or a counter's value) waits in the writer's buffer, at
/// most, before [`flusher`] writes it to the capture: a signal that stops
/// the app (Ctrl-C, SIGTERM; no `atexit` handler runs then) loses only
/// what the last 100 ms or so wrote.
const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// Whether the writer's buffer holds something written since the last
/// flush, and what wakes [`flusher`] when it begins to.
struct Pending {
    written: AtomicBool,
    wake: Mutex<()>,
    woken: Condvar,
}

static PENDING: Pending = Pending {
    written: AtomicBool::new(false),
    wake: Mutex::new(()),
    woken: Condvar::new(),
};

/// Something was put in the writer's buffer (after its lock was let go):
/// the first thing since the last flush wakes [`flusher`]; the rest cost
/// one atomic swap each.
fn written() {
    if !PENDING.written.swap(true, Ordering::AcqRel) {
        let _wake = PENDING.wake.lock().unpoisoned();
        PENDING.woken.notify_one();
    }
}

/// Starts the `gdex-sysprof` thread ([`flusher`]); if it cannot start,
/// says so: the capture is then flushed only at a normal exit.
fn start_flusher() {
    let started = std::thread::Builder::new()
        .name("gdex-sysprof".into())
        .spawn(flusher);
    if let Err(err) = started {
        glib::g_warning!(
            "gdex",
            "cannot start the gdex-sysprof thread ({}): the Sysprof capture on \
             SYSPROF_TRACE_FD is written only at a normal exit, and an app stopped by a \
             signal loses its last marks",
            err
        );
    }
}

/// The `gdex-sysprof` thread: it sleeps until something is written, waits
/// [`FLUSH_EVERY`] for more to gather, then flushes the writer (outside
/// any signal handler: flushing writes and takes a lock). What is written
/// while it flushes, or after, wakes it again.
fn flusher() {
    loop {
        let mut wake = PENDING.wake.lock().unpoisoned();
        while !PENDING.written.load(Ordering::Acquire) {
            wake = PENDING.woken.wait(wake).unpoisoned();
        }
        drop(wake);
        std::thread::sleep(FLUSH_EVERY);
        // Cleared before the flush: whatever is written from here on
        // sets it again, and is flushed this time or the next.
        PENDING.written.store(false, Ordering::Release);
        flush();
    }
}

/// Writes the writer's buffer to its descriptor, if there is a writer.
fn flush() {
    if let Some(Some(Sink::Writer(writer))) = SINK.get() {
        let writer = writer.lock().unpoisoned();
        // SAFETY: the writer is live (never freed) and used under its
        // lock.
        unsafe { sysprof_capture_writer_flush(writer.0.as_ptr()) };
    }
}

/// When the process exits normally (registered with `atexit`): marks the
/// life so far of every task still alive, if it is long enough (a capture
/// would not show them otherwise: a task's mark is written when it ends),
/// then flushes the writer.
extern "C" fn at_exit() {
    let flushed = std::panic::catch_unwind(|| {
        for entry in crate::diagnostics::record::entries() {
            let life = entry.spawned.elapsed();
            if life >= long_life() {
                mark(
                    time_of(entry.spawned),
                    life,
                    kind_name(&entry),
                    &format!("{} (alive at exit)", message(&entry)),
                );
            }
        }
        flush();
    });
    drop(flushed); // a panic must not unwind into libc's exit
}

/// Sysprof's clock (`CLOCK_MONOTONIC`, which `Instant` reads too) now, in
/// nanoseconds.
fn now_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Sysprof's time of `instant`. Both read `CLOCK_MONOTONIC`, so one pair
/// of readings, taken once, maps every instant: the same instant always
/// gets the same time, so two marks of one moment (a poll's start, and its
/// stall's) begin together, and their order is the instants' own.
fn time_of(instant: Instant) -> i64 {
    static ANCHOR: OnceLock<(Instant, i64)> = OnceLock::new();
    let &(at, ns) = ANCHOR.get_or_init(|| (Instant::now(), now_ns()));
    if instant >= at {
        ns.saturating_add(nanos(instant - at))
    } else {
        ns.saturating_sub(nanos(at - instant))
    }
}

fn nanos(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX)
}

/// A C string of `text`, without its NULs.
fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', "")).unwrap_or_default()
}

/// Writes a mark of `name` in the group `gdex`.
fn mark(time: i64, duration: Duration, name: &std::ffi::CStr, message: &str) {
    let Some(sink) = sink() else { return };
    let message = c_string(message);
    match sink {
        Sink::Writer(writer) => {
            let writer = writer.lock().unpoisoned();
            // SAFETY: the writer is live and used under its lock; every
            // string is NUL-terminated (the writer copies the group and the
            // name into fixed fields, truncating).
            unsafe {
                sysprof_capture_writer_add_mark(
                    writer.0.as_ptr(),
                    time,
                    -1,
                    libc::getpid(),
                    u64::try_from(nanos(duration)).unwrap_or(0),
                    c"gdex".as_ptr(),
                    name.as_ptr(),
                    message.as_ptr(),
                )
            };
            drop(writer);
            written();
        }
        // SAFETY: the collector is thread-safe; every string is
        // NUL-terminated.
        Sink::Collector => unsafe {
            sysprof_collector_mark(
                time,
                nanos(duration),
                c"gdex".as_ptr(),
                name.as_ptr(),
                message.as_ptr(),
            )
        },
    }
}

/// "#7 "fetch" (task) spawned at src/app.rs:12:5 on Scheduler::Main".
fn message(entry: &Entry) -> String {
    format!(
        "{} spawned at {} on {}",
        entry.describe(),
        entry.location,
        entry.scheduler
    )
}

/// A tracked task's future is gone: its life is one mark, if it lasted
/// [`long_life`] or more.
pub(crate) fn task_ended(entry: &Entry) {
    if !active() {
        return;
    }
    let life = entry.spawned.elapsed();
    if life < long_life() {
        return;
    }
    mark(
        time_of(entry.spawned),
        life,
        kind_name(entry),
        &message(entry),
    );
}

/// Tasks that live at least this long get a mark of their life: 1 ms, or
/// `GDEX_SYSPROF_TASK_US` microseconds (0: every task).
pub(crate) fn long_life() -> Duration {
    static THRESHOLD: OnceLock<Duration> = OnceLock::new();
    *THRESHOLD.get_or_init(|| {
        crate::util::env_setting(
            "GDEX_SYSPROF_TASK_US",
            "a number of microseconds",
            || "tasks that live 1 ms or more get a mark".into(),
            |text| text.parse::<u64>().ok(),
        )
        .map_or(Duration::from_millis(1), Duration::from_micros)
    })
}

/// The mark's name for a task's life: its kind.
fn kind_name(entry: &Entry) -> &'static std::ffi::CStr {
    match entry.kind {
        Kind::Task => c"task",
        Kind::Fiber => c"fiber",
        Kind::Blocking => c"blocking",
    }
}

/// Polls at least this long get a mark: 1 ms, or `GDEX_SYSPROF_POLL_US`
/// microseconds (0: every poll).
pub(crate) fn long_poll() -> Duration {
    static THRESHOLD: OnceLock<Duration> = OnceLock::new();
    *THRESHOLD.get_or_init(|| {
        crate::util::env_setting(
            "GDEX_SYSPROF_POLL_US",
            "a number of microseconds",
            || "polls of 1 ms or more get a mark".into(),
            |text| text.parse::<u64>().ok(),
        )
        .map_or(Duration::from_millis(1), Duration::from_micros)
    })
}

/// A poll of a tracked task ended. (A blocking job runs in one poll: its
/// life's mark says it all.)
pub(crate) fn poll_ended(entry: &Entry, started: Instant, took: Duration) {
    if took < long_poll() || entry.kind == Kind::Blocking || !active() {
        return;
    }
    mark(time_of(started), took, c"poll", &message(entry));
}

/// A context scheduler's slice that began at `began` ended.
pub(crate) fn slice(began: Instant, main: bool) {
    let (name, message) = if main {
        (c"main slice", "the main scheduler's tasks (X3)")
    } else {
        (c"context slice", "a context scheduler's tasks")
    };
    mark(time_of(began), began.elapsed(), name, message);
}

/// The watchdog reported a stall of a poll that began at `since`.
pub(crate) fn stall(since: Instant, report: &str) {
    if !active() {
        return;
    }
    mark(time_of(since), since.elapsed(), c"stall", report);
}

/// The first of worker `index`'s three counter ids (defined on first
/// use), if its counters are to be set now: always for a steal or a park,
/// at most once a millisecond for a slice's sample (`throttled`).
fn counter_ids(index: usize, now: i64, throttled: bool) -> Option<c_uint> {
    /// Per worker: the first id (0: none) and when its counters were last
    /// set.
    static IDS: Mutex<Vec<(c_uint, i64)>> = Mutex::new(Vec::new());
    let mut ids = IDS.lock().unpoisoned();
    while ids.len() <= index {
        let worker = ids.len();
        ids.push((define_counters(worker), i64::MIN));
    }
    let (first, last) = &mut ids[index];
    if *first == 0 || (throttled && now.saturating_sub(*last) < 1_000_000) {
        return None;
    }
    *last = now;
    Some(*first)
}

/// Defines worker `index`'s three counters; gives the first id (0 if
/// there is no sink).
fn define_counters(index: usize) -> c_uint {
    define(
        &format!("gdex-worker-{index}"),
        &[
            ("queued", "Jobs queued on the worker's own deque"),
            ("parks", "Times the worker parked"),
            ("steals", "Times the worker stole from a peer"),
        ],
    )
}

/// Defines counters of `category`, one per `(name, description)`, of
/// consecutive ids; gives the first (0 if there is no sink).
fn define(category: &str, named: &[(&str, &str)]) -> c_uint {
    let Some(sink) = sink() else { return 0 };
    let n = named.len() as c_uint;
    let first = match sink {
        Sink::Writer(writer) => {
            let writer = writer.lock().unpoisoned();
            // SAFETY: the writer is live and used under its lock.
            unsafe { sysprof_capture_writer_request_counter(writer.0.as_ptr(), n) }
        }
        // SAFETY: the collector is thread-safe.
        Sink::Collector => unsafe { sysprof_collector_request_counters(n) },
    };
    if first == 0 {
        return 0;
    }
    let counters: Vec<Counter> = named
        .iter()
        .zip(first..)
        .map(|(&(name, description), id)| Counter {
            category: c_field(category),
            name: c_field(name),
            description: c_field(description),
            // The type (SYSPROF_CAPTURE_COUNTER_INT64 = 0) in the top byte.
            id_and_type: id & 0x00ff_ffff,
            value: CounterValue { v64: 0 },
        })
        .collect();
    match sink {
        Sink::Writer(writer) => {
            let writer = writer.lock().unpoisoned();
            // SAFETY: the writer is live and used under its lock;
            // `counters` holds `n` initialised counters.
            unsafe {
                sysprof_capture_writer_define_counters(
                    writer.0.as_ptr(),
                    now_ns(),
                    -1,
                    libc::getpid(),
                    counters.as_ptr(),
                    n,
                )
            };
            drop(writer);
            written();
        }
        // SAFETY: as above, through the thread-safe collector.
        Sink::Collector => unsafe { sysprof_collector_define_counters(counters.as_ptr(), n) },
    }
    first
}

/// A fixed C string field of `text`, truncated and NUL-terminated.
fn c_field<const N: usize>(text: &str) -> [c_char; N] {
    let mut field = [0 as c_char; N];
    for (slot, byte) in field.iter_mut().zip(text.bytes().take(N - 1)) {
        *slot = byte as c_char;
    }
    field
}

/// Sets a worker's counters: at a steal or a park, or (`throttled`, at
/// most once a millisecond) at the start of a slice of its jobs, when its
/// queue is what it is busy with.
pub(crate) fn counters(figures: &WorkerFigures, throttled: bool) {
    let now = now_ns();
    let Some(first) = counter_ids(figures.index, now, throttled) else {
        return;
    };
    let wide = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    set(
        first,
        now,
        &[
            wide(figures.queued as u64),
            wide(figures.parks),
            wide(figures.steals),
        ],
    );
}

/// Sets the counters of consecutive ids from `first` to `values`, at
/// `now`.
fn set(first: c_uint, now: i64, values: &[i64]) {
    let Some(sink) = sink() else { return };
    let n = values.len() as c_uint;
    let ids: Vec<c_uint> = (first..first + n).collect();
    let values: Vec<CounterValue> = values.iter().map(|&v64| CounterValue { v64 }).collect();
    match sink {
        Sink::Writer(writer) => {
            let writer = writer.lock().unpoisoned();
            // SAFETY: the writer is live and used under its lock; `n` ids
            // and `n` values.
            unsafe {
                sysprof_capture_writer_set_counters(
                    writer.0.as_ptr(),
                    now,
                    -1,
                    libc::getpid(),
                    ids.as_ptr(),
                    values.as_ptr(),
                    n,
                )
            };
            drop(writer);
            written();
        }
        // SAFETY: as above, through the thread-safe collector.
        Sink::Collector => unsafe {
            sysprof_collector_set_counters(ids.as_ptr(), values.as_ptr(), n)
        },
    }
}

/// How often, at most, a scheduler's latency counters are set.
const LATENCY_EVERY: Duration = Duration::from_millis(10);

/// A scheduler whose latency histograms are on starts a slice: at most
/// every [`LATENCY_EVERY`], each such scheduler's two counters (defined on
/// first use) are set to the p99 of what it counted since they were last
/// set.
pub(crate) fn latency() {
    static EVERY: OnceLock<u64> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let every = *EVERY.get_or_init(|| crate::util::clock::ticks(LATENCY_EVERY));
    let now = crate::util::clock::now();
    let next = NEXT.load(Ordering::Relaxed);
    if now < next
        || NEXT
            .compare_exchange(
                next,
                now.saturating_add(every),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_err()
    {
        return;
    }
    /// Per scheduler (by its number): its counters' first id and its
    /// histograms when they were last set.
    type Sampled = (c_uint, LatencyHistogram, LatencyHistogram);
    static SAMPLED: Mutex<Vec<(u64, Sampled)>> = Mutex::new(Vec::new());
    for listed in crate::diagnostics::latency::listed() {
        let mut sampled = SAMPLED.lock().unpoisoned();
        let at = match sampled.iter().position(|(of, _)| *of == listed.id) {
            Some(at) => at,
            None => {
                let first = define(
                    &format!("gdex-{}-{}", listed.short, listed.id),
                    &[
                        ("wake-to-poll p99 (us)", "Tasks' waits to be polled, p99"),
                        ("poll p99 (us)", "Jobs' run times, p99"),
                    ],
                );
                let empty = LatencyHistogram::default();
                sampled.push((listed.id, (first, empty.clone(), empty)));
                sampled.len() - 1
            }
        };
        let (first, waits, polls) = &mut sampled[at].1;
        let p99 = |now: &LatencyHistogram, then: &LatencyHistogram| {
            now.since(then)
                .p99()
                .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        };
        let metrics = listed.metrics;
        let values = [
            p99(&metrics.wake_to_poll, waits),
            p99(&metrics.poll_durations, polls),
        ];
        let first = *first;
        *waits = metrics.wake_to_poll;
        *polls = metrics.poll_durations;
        drop(sampled);
        if first != 0 {
            set(first, now_ns(), &values);
        }
    }
}
