//! The task dump (X8): every live task with its name, where it was
//! spawned, its scheduler, the thread of its last poll, its state and the
//! time since that poll, read from the per-task record (O1,
//! [`record`](super::record)).
//!
//! Tracking is off unless asked for, and then costs one branch per spawn
//! and per poll: `GDEX_TASK_DUMP=1` in the environment (read at the first
//! spawn) or [`enable_task_dump`] turns it on for the tasks spawned from
//! then on. The tasks another view tracks (a Sysprof capture, a `tracing`
//! subscriber) are in the dump too.
//!
//! With `GDEX_TASK_DUMP=1`, `kill -USR1 <pid>` prints the dump on stderr
//! (a `gdex-task-dump` thread waits for the signal on a context of its
//! own, so it works while every scheduler is stuck), and the stall
//! watchdog's reports end with it.

use std::fmt;
use std::panic::Location;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::record;
use crate::util::Unpoisoned;

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
    record::enable_dump();
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
            record::RUNNING | record::RUNNING_WOKEN => TaskState::Running,
            record::WAITING => TaskState::Waiting,
            _ => TaskState::Queued,
        }
    }
}

/// A snapshot of the live tracked tasks: see [`dump`]. Its `Display` is a
/// table, one task a line, longest-waiting first.
#[derive(Clone, Debug)]
pub struct TaskDump {
    enabled: bool,
    tasks: Vec<TaskInfo>,
    latency: Vec<super::latency::SchedulerMetrics>,
}

/// One task of a [`TaskDump`].
#[derive(Clone, Debug)]
pub struct TaskInfo {
    id: u64,
    kind: &'static str,
    name: Option<Arc<str>>,
    location: &'static Location<'static>,
    scheduler: Arc<str>,
    thread: Option<Arc<str>>,
    state: TaskState,
    polls: u64,
    busy: Duration,
    age: Duration,
    since_last_poll: Option<Duration>,
}

impl TaskInfo {
    /// The task's id: unique in the process, from 1. The stall watchdog's
    /// reports, Sysprof marks (`#7`) and `tracing` spans (`task.id`) give
    /// the same id for the same task (O1).
    pub fn id(&self) -> u64 {
        self.id
    }
    /// What it is: `"task"`, `"fiber"` or `"blocking"` (a job of a
    /// blocking lane), as Sysprof marks (their name) and `tracing` spans
    /// (their `kind`) tell it (O1).
    ///
    /// ```
    /// gdex::enable_task_dump();
    /// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
    /// let (_keep, waiting) = gdex::Promise::<u32>::new();
    /// let fiber = pool.scheduler().spawn_fiber(move || gdex::fiber::wait(waiting));
    /// let dump = gdex::dump();
    /// let info = dump.tasks().iter().find(|t| t.kind() == "fiber").unwrap();
    /// assert_eq!(info.scheduler(), "Scheduler::Pool { workers: 1 }");
    /// # drop(fiber);
    /// ```
    pub fn kind(&self) -> &str {
        self.kind
    }
    /// The name given with `spawn_named`, if any.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
    /// Where it was spawned (the caller of `spawn`, `spawn_local`, …).
    pub fn spawned_at(&self) -> &'static Location<'static> {
        self.location
    }
    /// Its scheduler, as its `Debug` names it (`"Scheduler::Main"`,
    /// `"Scheduler::Pool { workers: 4 }"`), with what binds the task to an
    /// object (`"Scheduler::Main, bound to a GtkButton"`, X2); a blocking
    /// job's is `"a blocking lane"`.
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
    /// The time spent in its polls, all told.
    pub fn busy(&self) -> Duration {
        self.busy
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
    /// Whether tasks are tracked at all: the dump is on ([`enable_task_dump`],
    /// `GDEX_TASK_DUMP=1`), or another view of the per-task record tracks
    /// them (a Sysprof capture, a `tracing` subscriber: O1).
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }
    /// The live tracked tasks, longest since its last poll (or spawn) first.
    pub fn tasks(&self) -> &[TaskInfo] {
        &self.tasks
    }
    /// The latency histograms (O1) of every live scheduler that has them
    /// on, in the order they were turned on; the `Display` gives each one
    /// line.
    pub fn latency(&self) -> &[super::latency::SchedulerMetrics] {
        &self.latency
    }
}

/// Every live tracked task (X8): its id, its name, where it was spawned, its
/// scheduler, the thread of its last poll, whether it is queued, running or
/// waiting, and how long since its last poll. Without `GDEX_TASK_DUMP=1`
/// or [`enable_task_dump`] (which track the tasks spawned after it), only
/// the tasks another view tracks (a Sysprof capture, a `tracing`
/// subscriber that takes their spans; O1) are listed; with none, the dump
/// is empty and says how to turn tracking on. It ends with the latency
/// histograms of every scheduler that has them on (O1: p50, p99 and max
/// of its wake-to-poll times and poll durations, one line each; see
/// [`Scheduler::enable_latency_histograms`](crate::Scheduler::enable_latency_histograms)).
pub fn dump() -> TaskDump {
    let enabled = record::dump_on() || super::views::want_every_task();
    let entries = record::entries();
    let mut tasks: Vec<TaskInfo> = entries
        .iter()
        .map(|entry| {
            let age = entry.spawned.elapsed();
            let last = entry.last_poll.load(Ordering::Relaxed);
            TaskInfo {
                id: entry.id,
                kind: entry.kind.as_str(),
                name: entry.name.clone(),
                location: entry.location,
                scheduler: entry.scheduler.clone(),
                thread: entry.thread.lock().unpoisoned().clone(),
                state: TaskState::from_u8(entry.state.load(Ordering::Acquire)),
                polls: entry.polls.load(Ordering::Relaxed),
                busy: Duration::from_nanos(entry.busy.load(Ordering::Relaxed)),
                age,
                since_last_poll: (last > 0).then(|| age.saturating_sub(Duration::from_nanos(last))),
            }
        })
        .collect();
    tasks.sort_by_key(|t| std::cmp::Reverse(t.since_last_poll.unwrap_or(t.age)));
    let enabled = enabled || !tasks.is_empty();
    TaskDump {
        enabled,
        tasks,
        latency: super::latency::listed()
            .into_iter()
            .map(|listed| listed.metrics)
            .collect(),
    }
}

impl fmt::Display for TaskDump {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_tasks(f)?;
        if !self.latency.is_empty() {
            writeln!(f, "gdex latency (wake-to-poll and poll durations):")?;
            for scheduler in &self.latency {
                writeln!(f, "  {scheduler}")?;
            }
        }
        Ok(())
    }
}

impl TaskDump {
    fn fmt_tasks(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
            // The task named as every view names it (O1): `#7 "fetch"
            // (fiber)`, or `#7 (fiber)` without a name.
            writeln!(
                f,
                "  {:<8} #{}{} ({}) spawned at {} on {}{}, {}, {} polls, {} ms busy",
                state,
                task.id,
                task.name
                    .as_deref()
                    .map(|n| format!(" \"{n}\""))
                    .unwrap_or_default(),
                task.kind,
                task.location,
                task.scheduler,
                task.thread
                    .as_deref()
                    .map(|t| format!(" (thread {t})"))
                    .unwrap_or_default(),
                last,
                task.polls,
                task.busy.as_millis(),
            )?;
        }
        Ok(())
    }
}

/// With `GDEX_TASK_DUMP=1`: a thread that prints the dump on stderr at each
/// `SIGUSR1`, from a context of its own (GLib's unix signal source).
pub(super) fn start_signal_thread() {
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
    // A panic while printing (or in its payload's drop) must not unwind
    // into GLib.
    if let Err(payload) = printed {
        super::panic::drop_payload(payload);
    }
    glib::ffi::GTRUE
}
