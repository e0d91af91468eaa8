//! The task dump (X8): every live task with its name, where it was
//! spawned, its scheduler, the thread of its last poll, its state and the
//! time since that poll.
//!
//! Tracking is off unless asked for, and then costs one branch per spawn
//! and per poll: `GDEX_TASK_DUMP=1` in the environment (read at the first
//! spawn) or [`enable_task_dump`] turns it on for the tasks spawned from
//! then on. A tracked task has an entry in one process-wide table, made at
//! spawn, updated around each poll (running, then waiting or done) and by
//! its waker (queued), and removed when its future is dropped. The task's
//! future holds the entry's key (`task::CatchUnwind`), so the task's block
//! does not grow.
//!
//! With `GDEX_TASK_DUMP=1`, `kill -USR1 <pid>` prints the dump on stderr
//! (a `gdex-task-dump` thread waits for the signal on a context of its
//! own, so it works while every scheduler is stuck), and the stall
//! watchdog's reports end with it.

use std::fmt;
use std::panic::Location;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

use slab::Slab;

use crate::util::Unpoisoned;

/// Off, on, or not decided yet (the environment is read at the first
/// spawn).
static TRACKING: AtomicU8 = AtomicU8::new(UNDECIDED);
const UNDECIDED: u8 = 0;
const OFF: u8 = 1;
const ON: u8 = 2;

/// The live tracked tasks.
static TABLE: Mutex<Slab<Arc<Entry>>> = Mutex::new(Slab::new());

/// Are tasks spawned now tracked?
#[inline]
pub(crate) fn tracking() -> bool {
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
        start_signal_thread();
    }
    TRACKING.load(Ordering::Acquire) == ON
}

/// Turns task tracking on for every task spawned from now on (tasks spawned
/// before stay out of [`dump`]), as `GDEX_TASK_DUMP=1` does from the start
/// (without the signal: show [`dump`] in your app's debug window, or print
/// it). It cannot be turned off again.
///
/// ```
/// gdex::enable_task_dump();
/// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
/// let (_keep, waiting) = gdex::Promise::<u32>::new();
/// let task = pool.scheduler().spawn_named("waits", waiting);
/// // Once it has waited once, it shows as waiting.
/// while !gdex::dump().tasks().iter().any(|t| t.name() == Some("waits") && t.state() == gdex::TaskState::Waiting) {
///     std::thread::sleep(std::time::Duration::from_millis(1));
/// }
/// println!("{}", gdex::dump());
/// drop(task);
/// ```
pub fn enable_task_dump() {
    TRACKING.store(ON, Ordering::Release);
}

/// What a tracked task is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskState {
    /// Spawned or woken, waiting for its scheduler to poll it.
    Queued,
    /// Being polled right now.
    Running,
    /// Its last poll returned `Pending`: it waits for a wake-up (a timer,
    /// I/O, a channel, another task).
    Waiting,
}

impl TaskState {
    fn from_u8(v: u8) -> TaskState {
        match v {
            1 => TaskState::Running,
            2 => TaskState::Waiting,
            _ => TaskState::Queued,
        }
    }
}

/// One tracked task's entry.
struct Entry {
    name: Option<Arc<str>>,
    location: &'static Location<'static>,
    scheduler: Arc<str>,
    spawned: Instant,
    state: AtomicU8,
    polls: AtomicU64,
    /// Nanoseconds after `spawned` when the last poll began; 0: never.
    last_poll: AtomicU64,
    /// The thread of the last poll.
    thread: Mutex<Option<Arc<str>>>,
    /// The waker handed to the task's future: marks the entry queued, then
    /// wakes the task's own waker (kept with it, to be reused while the
    /// task's waker does not change).
    waker: Mutex<Option<(Waker, Waker)>>,
    /// A word the task core keeps here for the task: its record in a
    /// registry of idle tasks (S9), for which its block has no room beside
    /// this entry's key.
    word: Mutex<u64>,
}

const QUEUED: u8 = 0;
const RUNNING: u8 = 1;
const WAITING: u8 = 2;

/// A tracked task's handle on its entry, kept by its future (as the key + 1,
/// so that 0 means untracked).
#[cold]
pub(crate) fn register(
    location: &'static Location<'static>,
    name: Option<Arc<str>>,
    scheduler: String,
) -> u32 {
    let entry = Arc::new(Entry {
        name,
        location,
        scheduler: scheduler.into(),
        spawned: Instant::now(),
        state: AtomicU8::new(QUEUED),
        polls: AtomicU64::new(0),
        last_poll: AtomicU64::new(0),
        thread: Mutex::new(None),
        waker: Mutex::new(None),
        word: Mutex::new(0),
    });
    let key = TABLE.lock().unpoisoned().insert(entry);
    u32::try_from(key + 1).expect("gdex: more than 4 billion tracked tasks")
}

fn entry(track: u32) -> Option<Arc<Entry>> {
    TABLE.lock().unpoisoned().get(track as usize - 1).cloned()
}

/// Runs `f` on the word a tracked task's entry keeps for the task core (0
/// at first). Only the task's own poll and drop call it, one at a time; the
/// entry goes only after its last call (see [`forget`]).
pub(crate) fn with_word(track: u32, f: impl FnOnce(&mut u64)) {
    if let Some(entry) = entry(track) {
        f(&mut entry.word.lock().unpoisoned());
    }
}

/// A tracked task's future is dropped: its entry goes.
pub(crate) fn forget(track: u32) {
    let removed = {
        let mut table = TABLE.lock().unpoisoned();
        table.try_remove(track as usize - 1)
    };
    drop(removed); // outside the table's lock: it may hold a waker
}

/// A poll of a tracked task begins: gives the waker to poll it with.
pub(crate) fn begin_poll(track: u32, waker: &Waker) -> Option<Waker> {
    let entry = entry(track)?;
    entry.state.store(RUNNING, Ordering::Release);
    entry.polls.fetch_add(1, Ordering::Relaxed);
    let since = entry.spawned.elapsed().as_nanos().max(1) as u64;
    entry.last_poll.store(since, Ordering::Relaxed);
    let thread = std::thread::current();
    let name: Arc<str> = match thread.name() {
        Some(name) => name.into(),
        None => format!("{:?}", thread.id()).into(),
    };
    {
        let mut current = entry.thread.lock().unpoisoned();
        if current.as_deref() != Some(&*name) {
            *current = Some(name);
        }
    }
    let mut cached = entry.waker.lock().unpoisoned();
    if let Some((inner, ours)) = &*cached {
        if inner.will_wake(waker) {
            return Some(ours.clone());
        }
    }
    let ours = Waker::from(Arc::new(Marking {
        entry: Arc::downgrade(&entry),
        inner: waker.clone(),
    }));
    let old = cached.replace((waker.clone(), ours.clone()));
    drop(cached);
    drop(old);
    Some(ours)
}

/// The poll ended: `pending` if it returned `Pending`.
pub(crate) fn end_poll(track: u32, pending: bool) {
    if let Some(entry) = entry(track) {
        let _ = entry.state.compare_exchange(
            RUNNING,
            if pending { WAITING } else { QUEUED },
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }
}

/// The waker a tracked task's future gets: marks its entry queued.
struct Marking {
    entry: std::sync::Weak<Entry>,
    inner: Waker,
}

impl Wake for Marking {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(entry) = self.entry.upgrade() {
            // A wake during the poll leaves it running; the poll's end then
            // makes it waiting, and the scheduler polls it again anyway.
            let _ =
                entry
                    .state
                    .compare_exchange(WAITING, QUEUED, Ordering::AcqRel, Ordering::Acquire);
        }
        self.inner.wake_by_ref();
    }
}

/// A snapshot of the live tracked tasks: see [`dump`]. Its `Display` is a
/// table, one task a line, longest-waiting first.
#[derive(Clone, Debug)]
pub struct TaskDump {
    enabled: bool,
    tasks: Vec<TaskInfo>,
}

/// One task of a [`TaskDump`].
#[derive(Clone, Debug)]
pub struct TaskInfo {
    name: Option<Arc<str>>,
    location: &'static Location<'static>,
    scheduler: Arc<str>,
    thread: Option<Arc<str>>,
    state: TaskState,
    polls: u64,
    age: Duration,
    since_last_poll: Option<Duration>,
}

impl TaskInfo {
    /// The name given with `spawn_named`, if any.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
    /// Where it was spawned (the caller of `spawn`, `spawn_local`, …).
    pub fn spawned_at(&self) -> &'static Location<'static> {
        self.location
    }
    /// Its scheduler ("main", "pool gdex-worker-0..1", …).
    pub fn scheduler(&self) -> &str {
        &self.scheduler
    }
    /// The thread of its last poll; `None` if it was never polled.
    pub fn thread(&self) -> Option<&str> {
        self.thread.as_deref()
    }
    /// Queued, running or waiting.
    pub fn state(&self) -> TaskState {
        self.state
    }
    /// How many times it has been polled.
    pub fn polls(&self) -> u64 {
        self.polls
    }
    /// How long since it was spawned.
    pub fn age(&self) -> Duration {
        self.age
    }
    /// How long since its last poll began; `None` if it was never polled.
    pub fn since_last_poll(&self) -> Option<Duration> {
        self.since_last_poll
    }
}

impl TaskDump {
    /// Whether tasks are tracked at all (see [`enable_task_dump`]).
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }
    /// The live tracked tasks, longest since its last poll (or spawn) first.
    pub fn tasks(&self) -> &[TaskInfo] {
        &self.tasks
    }
}

/// Every live tracked task (X8): its name, where it was spawned, its
/// scheduler, the thread of its last poll, whether it is queued, running or
/// waiting, and how long since its last poll. Empty, and saying how to turn
/// tracking on, unless `GDEX_TASK_DUMP=1` or [`enable_task_dump`] turned it
/// on before the tasks were spawned.
pub fn dump() -> TaskDump {
    let enabled = TRACKING.load(Ordering::Acquire) == ON;
    let entries: Vec<Arc<Entry>> = TABLE
        .lock()
        .unpoisoned()
        .iter()
        .map(|(_, e)| e.clone())
        .collect();
    let mut tasks: Vec<TaskInfo> = entries
        .iter()
        .map(|entry| {
            let age = entry.spawned.elapsed();
            let last = entry.last_poll.load(Ordering::Relaxed);
            TaskInfo {
                name: entry.name.clone(),
                location: entry.location,
                scheduler: entry.scheduler.clone(),
                thread: entry.thread.lock().unpoisoned().clone(),
                state: TaskState::from_u8(entry.state.load(Ordering::Acquire)),
                polls: entry.polls.load(Ordering::Relaxed),
                age,
                since_last_poll: (last > 0).then(|| age.saturating_sub(Duration::from_nanos(last))),
            }
        })
        .collect();
    tasks.sort_by_key(|t| std::cmp::Reverse(t.since_last_poll.unwrap_or(t.age)));
    TaskDump { enabled, tasks }
}

impl fmt::Display for TaskDump {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.enabled {
            return writeln!(
                f,
                "gdex task dump: task tracking is off; run with GDEX_TASK_DUMP=1 (or call \
                 gdex::enable_task_dump() before spawning) to list live tasks"
            );
        }
        writeln!(f, "gdex task dump: {} live tasks", self.tasks.len())?;
        for task in &self.tasks {
            let state = match task.state {
                TaskState::Queued => "queued",
                TaskState::Running => "running",
                TaskState::Waiting => "waiting",
            };
            let last = match task.since_last_poll {
                Some(d) => format!("last poll {} ms ago", d.as_millis()),
                None => format!("never polled, spawned {} ms ago", task.age.as_millis()),
            };
            writeln!(
                f,
                "  {:<8} {} spawned at {} on {}{}, {}, {} polls",
                state,
                task.name
                    .as_deref()
                    .map(|n| format!("\"{n}\""))
                    .unwrap_or_else(|| "(unnamed)".into()),
                task.location,
                task.scheduler,
                task.thread
                    .as_deref()
                    .map(|t| format!(" (thread {t})"))
                    .unwrap_or_default(),
                last,
                task.polls,
            )?;
        }
        Ok(())
    }
}

/// With `GDEX_TASK_DUMP=1`: a thread that prints the dump on stderr at each
/// `SIGUSR1`, from a context of its own (GLib's unix signal source).
fn start_signal_thread() {
    let started = std::thread::Builder::new()
        .name("gdex-task-dump".into())
        .spawn(|| {
            let context = glib::MainContext::new();
            let main_loop = glib::MainLoop::new(Some(&context), false);
            // SAFETY: SIGUSR1 is a signal GLib watches, so this returns a
            // new source we own; its callback takes no data, and the source
            // is attached once, then its reference given up (the context
            // keeps it for the thread's life).
            unsafe {
                let raw = crate::util::g_unix_signal_source_new(libc::SIGUSR1);
                assert!(!raw.is_null(), "g_unix_signal_source_new(SIGUSR1) failed");
                glib::ffi::g_source_set_callback(raw, Some(print_dump), std::ptr::null_mut(), None);
                glib::ffi::g_source_set_name(raw, c"gdex task dump".as_ptr());
                glib::ffi::g_source_attach(raw, context.as_ptr());
                glib::ffi::g_source_unref(raw);
            }
            context
                .with_thread_default(|| main_loop.run())
                .expect("a fresh context is free to push");
        });
    if let Err(err) = started {
        glib::g_warning!(
            "gdex",
            "GDEX_TASK_DUMP=1: cannot start the gdex-task-dump thread ({}); SIGUSR1 will not print the dump",
            err
        );
    }
}

/// The SIGUSR1 source's callback: prints the dump on stderr.
unsafe extern "C" fn print_dump(_data: glib::ffi::gpointer) -> glib::ffi::gboolean {
    let printed = std::panic::catch_unwind(|| {
        use std::io::Write;
        let _ = write!(std::io::stderr(), "{}", dump());
    });
    drop(printed); // a panic while printing must not unwind into GLib
    glib::ffi::GTRUE
}
