//! A scheduler on one `GMainContext`: the main scheduler (S1) and the
//! scheduler of any other context (S2).
//!
//! Work pushed from any thread lands in an MPSC run queue and marks the
//! context's one gdex source ready; a second push before the source has run
//! costs one atomic swap and no syscall (coalesced). The source runs on the
//! thread that iterates the context, a bounded batch per dispatch, so the
//! context's other sources (GTK's frame clock, input, timers) get their turn.
//! A dispatch starts no new job once it has run 128 jobs or 4 ms have
//! passed, whichever comes first; the job running at the 4 ms mark is not
//! interrupted, so a dispatch lasts at most 4 ms plus one job (one poll of
//! one task: a poll that takes 20 ms makes a 20 ms dispatch). The main
//! scheduler also runs below GTK's redraw priority (X3, frames first).
//!
//! **Progress (S11).** Sitting below redraw also puts the main scheduler
//! below every `G_PRIORITY_DEFAULT` source, and GLib only dispatches the
//! most urgent ready sources: an always-ready source would starve it. So the
//! main scheduler has a second, *progress* source at `G_PRIORITY_HIGH` whose
//! `prepare` (run on every iteration, a load and a clock read) reports ready
//! once the main source has been ready for [`PROGRESS_BOUND`] without being
//! dispatched; it then runs one slice ahead of everything else. A main loop
//! that keeps up never waits that long, so frames still come first.
//!
//! The parts: the scheduler and its sources (this file); its dispatch
//! (`dispatch.rs`); its `!Send` jobs, one queue per owner thread (S10,
//! `local.rs`); the watch that reports main-scheduler work nobody runs
//! (X4, `watch.rs`); what a test clock reads of it (`activity.rs`).

mod activity;
mod dispatch;
mod latency;
mod local;
mod siblings;
mod watch;

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use crossbeam_deque::Injector;
use glib::translate::ToGlibPtr;

use crate::source::{Hooks, SourceRef};
use crate::task::Job;
use crate::util::{drain, Unpoisoned};

pub(crate) use activity::{activity, Activity};
pub(crate) use local::LocalQueue;
pub(crate) use watch::idle_warn_delay;

/// How many jobs one dispatch runs before handing the loop back to GLib.
pub(crate) const DISPATCH_BATCH: usize = 128;

/// How long one dispatch may run jobs before handing the loop back (X3): a
/// quarter of a 60 Hz frame.
const DISPATCH_TIME: Duration = Duration::from_millis(4);

/// The main scheduler's priority (X3, frames first): below GTK's layout
/// (`G_PRIORITY_HIGH_IDLE + 10`) and redraw (`G_PRIORITY_HIGH_IDLE + 20`),
/// so a flood of main-thread tasks never delays a frame, and below input
/// and I/O (`G_PRIORITY_DEFAULT`); above default idle sources.
pub(crate) const MAIN_PRIORITY: i32 = glib::ffi::G_PRIORITY_HIGH_IDLE + 30;

/// The priority of a context's scheduler unless another is asked for
/// (P12): [`MAIN_PRIORITY`] on the default main context, GLib's default
/// elsewhere.
pub(crate) fn default_priority(is_main: bool) -> i32 {
    if is_main {
        MAIN_PRIORITY
    } else {
        glib::ffi::G_PRIORITY_DEFAULT
    }
}

/// How gdex names a GLib priority (P12): after GLib's nearest constant at
/// or above it, `"G_PRIORITY_HIGH_IDLE + 30"` for the main scheduler's.
pub(crate) fn priority_name(priority: i32) -> String {
    use glib::ffi::*;
    let named = [
        (G_PRIORITY_LOW, "G_PRIORITY_LOW"),
        (G_PRIORITY_DEFAULT_IDLE, "G_PRIORITY_DEFAULT_IDLE"),
        (G_PRIORITY_HIGH_IDLE, "G_PRIORITY_HIGH_IDLE"),
        (G_PRIORITY_DEFAULT, "G_PRIORITY_DEFAULT"),
        (G_PRIORITY_HIGH, "G_PRIORITY_HIGH"),
    ];
    match named.iter().find(|(value, _)| priority >= *value) {
        Some((value, name)) if priority == *value => (*name).to_owned(),
        // The difference of two i32s as an i64: it cannot overflow.
        Some((value, name)) => format!("{name} + {}", i64::from(priority) - i64::from(*value)),
        None => format!(
            "G_PRIORITY_HIGH - {}",
            i64::from(G_PRIORITY_HIGH) - i64::from(priority)
        ),
    }
}

/// S11: the longest a ready main-scheduler job waits behind other ready
/// sources, on a thread that iterates the default main context.
pub(crate) const PROGRESS_BOUND: Duration = Duration::from_millis(50);

/// The priority of the main scheduler's progress source: ahead of every
/// source a program normally has (GLib's own `G_PRIORITY_HIGH`).
const PROGRESS_PRIORITY: i32 = glib::ffi::G_PRIORITY_HIGH;

/// Whether a main-context scheduler at `priority` has a progress source
/// (S11, P12): at or above the main scheduler's place, below the progress
/// source's own (a source there is dispatched with the sources that would
/// starve it).
fn catches_up(priority: i32) -> bool {
    priority > PROGRESS_PRIORITY && priority <= MAIN_PRIORITY
}

/// The readiness of a scheduler's source, shared with its hooks so that
/// their `prepare` (run on every iteration of the context) need not touch
/// the scheduler itself.
#[derive(Default)]
struct Pending {
    /// Set while a wake-up of the source is pending (coalescing flag).
    notified: AtomicBool,
    /// When the source was last marked ready (`clock` ticks): the start of
    /// the current wait.
    since: AtomicU64,
    /// How many times the source was dispatched: the wait's episode number.
    dispatches: AtomicU64,
    /// `!Send` jobs queued for all owner threads together; 0 lets `ready`
    /// skip looking for the calling thread's queue.
    local_jobs: AtomicUsize,
}

pub(crate) struct ContextShared {
    context: glib::MainContext,
    source: SourceRef,
    /// The progress source (S11) of a main-context scheduler at or above
    /// the main scheduler's place ([`catches_up`]); `None` elsewhere.
    progress: Option<SourceRef>,
    queue: Injector<Job>,
    /// One queue of `!Send` jobs per owner thread (S10).
    locals: Mutex<Vec<Arc<LocalQueue>>>,
    pending: Arc<Pending>,
    /// How many times the source was actually marked ready (each a context
    /// lock and, from another thread, a wake-up write).
    wakeups: AtomicU64,
    is_main: bool,
    /// The GLib priority of `source` (P12): [`MAIN_PRIORITY`] or
    /// `G_PRIORITY_DEFAULT` unless the scheduler was made for another.
    priority: i32,
    /// Its context's more urgent schedulers (P12), whose wait ends our
    /// slices.
    siblings: siblings::Siblings,
    /// What the stall watchdog watches of this scheduler.
    runner: Arc<crate::diagnostics::stall::Runner>,
    /// `DISPATCH_TIME` in clock ticks.
    dispatch_ticks: u64,
    /// Ourselves, for the idle watch thread.
    me: Weak<ContextShared>,
    /// Whether the idle watch (X4) knows this main-context scheduler: it
    /// registers itself on its first push.
    watched: AtomicBool,
    /// How far the scheduler is in ending with the worker whose context
    /// it runs on ([`ORDINARY`] on any other context): only grows.
    stage: AtomicU8,
    /// The registry of idle tasks (S9) of the worker whose context this is,
    /// for our dispatches to enter: our tasks end with that worker, as the
    /// pool's own do. Unset on any other context: our dispatch then enters
    /// none, so that a task of ours polled on a worker (in a nested loop
    /// of our context) is not the pool's to wake and wait for at its
    /// shutdown. Set before the scheduler is published.
    registry: OnceLock<Arc<crate::task::registry::Registry>>,
    /// The latency histograms (O1, `latency.rs`).
    latency: latency::Histograms,
}

/// A scheduler of a context that is no pool worker's.
const ORDINARY: u8 = 0;
/// Of a pool worker's own context: it ends with the worker (`Retire`). Set
/// before the scheduler is published.
const ON_WORKER: u8 = 1;
/// The worker is exiting: jobs are dropped, never run (S9), by the worker,
/// on its thread; pushes leave theirs queued for it, so that a pinned task
/// or fiber it polled is dropped there.
const RETIRED: u8 = 2;
/// The worker has drained the queue for the last time
/// (`Retire::finish`): a push hands the queue to the reaper.
const FINISHED: u8 = 3;

/// Schedulers by context address and priority (P12). A live entry keeps
/// nothing alive: the `ContextShared` holds its context, so while the
/// `Weak` upgrades the address cannot have been reused.
type Schedulers = HashMap<(usize, i32), Weak<ContextShared>>;

/// The schedulers of every context.
fn registry() -> &'static Mutex<Schedulers> {
    static REGISTRY: OnceLock<Mutex<Schedulers>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

fn context_key(context: &glib::MainContext) -> usize {
    let ptr: *mut glib_sys::GMainContext = context.to_glib_none().0;
    ptr as usize
}

/// True if the calling thread holds a context that a gdex scheduler runs
/// on: blocking it without iterating stalls that scheduler.
pub(crate) fn holds_a_scheduler_context() -> bool {
    // Upgraded outside the lock's scope of use, dropped after it: dropping
    // the last reference to a scheduler takes the registry lock.
    let live: Vec<Arc<ContextShared>> = registry()
        .lock()
        .unpoisoned()
        .values()
        .filter_map(Weak::upgrade)
        .collect();
    live.iter().any(|shared| shared.context.is_owner())
}

struct ContextHooks {
    shared: Weak<ContextShared>,
    pending: Arc<Pending>,
}

impl Hooks for ContextHooks {
    /// `!Send` jobs that only the iterating thread may run: nobody marks the
    /// source ready for them when their thread comes back to the context.
    fn ready(&self) -> bool {
        self.pending.local_jobs.load(Ordering::Acquire) > 0
            && self.shared.upgrade().is_some_and(|shared| {
                shared
                    .local_queue_here()
                    .is_some_and(|queue| !queue.jobs.is_empty())
            })
    }

    fn dispatch(&self, _source: *mut glib_sys::GSource) -> bool {
        match self.shared.upgrade() {
            Some(shared) => {
                shared.run_batch();
                true
            }
            None => false,
        }
    }
}

/// The main scheduler's progress source (S11): ready once the main source
/// has waited `bound` ticks; its dispatch is one of the main source's.
struct ProgressHooks {
    shared: Weak<ContextShared>,
    pending: Arc<Pending>,
    bound: u64,
}

impl Hooks for ProgressHooks {
    fn ready(&self) -> bool {
        self.pending.notified.load(Ordering::Acquire) && self.pending.waited() >= self.bound
    }

    fn dispatch(&self, _source: *mut glib_sys::GSource) -> bool {
        match self.shared.upgrade() {
            Some(shared) => {
                shared.run_batch();
                true
            }
            None => false,
        }
    }
}

impl ContextShared {
    /// The scheduler of `context` at its default priority, created on
    /// first use.
    pub(crate) fn for_context(context: &glib::MainContext) -> Arc<ContextShared> {
        Self::at_priority(context, None)
    }

    /// The scheduler of `context` whose source runs at `priority` (P12;
    /// `None`: the default, [`MAIN_PRIORITY`] on the default context,
    /// `G_PRIORITY_DEFAULT` elsewhere), created on first use: one per
    /// context and priority.
    pub(crate) fn at_priority(
        context: &glib::MainContext,
        priority: Option<i32>,
    ) -> Arc<ContextShared> {
        let is_main = *context == glib::MainContext::default();
        let priority = priority.unwrap_or(default_priority(is_main));
        let key = (context_key(context), priority);
        let mut map = registry().lock().unpoisoned();
        // A scheduler retired with its worker is not handed out once the
        // worker's pool is gone (its context is no worker's any more): the
        // context is an ordinary one now (S2), though something may still
        // hold the retired scheduler (a handle kept, or a task of it whose
        // block the reaper frees a moment after the task resolved). It is
        // dropped after the map's lock (its drop takes the lock).
        let mut retired = None;
        if let Some(shared) = map.get(&key).and_then(Weak::upgrade) {
            if shared.stage.load(Ordering::Acquire) < RETIRED
                || crate::pool::is_worker_context(context)
            {
                return shared;
            }
            retired = Some(shared);
        }
        // B6 across priorities (P12): the schedulers of one context share
        // one runner, so that a nested loop of any of them suspends a job
        // of any other. (Dropped after the map's lock: dropping the last
        // reference to a scheduler takes it.)
        let siblings: Vec<Arc<ContextShared>> = map
            .iter()
            .filter(|(&(context, at), _)| context == key.0 && at != priority)
            .filter_map(|(_, weak)| weak.upgrade())
            .collect();
        let runner = match siblings.first() {
            Some(sibling) => sibling.runner.clone(),
            None => crate::diagnostics::stall::Runner::new(
                if is_main {
                    "the main scheduler".to_owned()
                } else {
                    "a gdex context scheduler".to_owned()
                },
                crate::diagnostics::stall::default_threshold(),
                None,
            ),
        };
        let shared = Arc::new_cyclic(|weak: &Weak<ContextShared>| {
            let name: &'static CStr = if is_main {
                c"[gdex-main]"
            } else {
                c"[gdex-context]"
            };
            let pending = Arc::new(Pending::default());
            let source = SourceRef::attach(
                context,
                Box::new(ContextHooks {
                    shared: weak.clone(),
                    pending: pending.clone(),
                }),
                // `prepare` finds the iterating thread's `!Send` jobs; pushes
                // mark the source ready through its ready time.
                true,
                name,
                priority,
                // A nested main loop (gdex::block_on inside a task, a modal
                // dialog's loop) must still run this scheduler's other tasks.
                true,
            );
            // A context scheduler runs at G_PRIORITY_DEFAULT: GLib
            // dispatches every ready source of that priority together, so
            // only the main context's schedulers can be starved. Below the
            // main scheduler's place a task asked to wait until the loop is
            // idle; at or above it (P12), up to the progress source's own
            // priority, it is starved by what starves the default, and
            // catches up as the default does: a task asked to run ahead of
            // the default never waits longer than it.
            let progress = (is_main && catches_up(priority)).then(|| {
                SourceRef::attach(
                    context,
                    Box::new(ProgressHooks {
                        shared: weak.clone(),
                        pending: pending.clone(),
                        bound: crate::util::clock::ticks(PROGRESS_BOUND),
                    }),
                    true,
                    c"[gdex-main-progress]",
                    PROGRESS_PRIORITY,
                    true,
                )
            });
            ContextShared {
                context: context.clone(),
                source,
                progress,
                queue: Injector::new(),
                locals: Mutex::new(Vec::new()),
                pending,
                wakeups: AtomicU64::new(0),
                is_main,
                priority,
                siblings: Default::default(),
                runner,
                dispatch_ticks: crate::util::clock::ticks(DISPATCH_TIME),
                me: weak.clone(),
                watched: AtomicBool::new(false),
                stage: AtomicU8::new(ORDINARY),
                registry: OnceLock::new(),
                latency: Default::default(),
            }
        });
        map.insert(key, Arc::downgrade(&shared));
        for sibling in &siblings {
            if sibling.priority > priority {
                sibling.siblings.add(shared.pending.clone());
            } else {
                shared.siblings.add(sibling.pending.clone());
            }
        }
        if is_main {
            // The main context lives as long as the process, and so do its
            // schedulers: a handle at a priority (P12) made for each spawn
            // finds the same one, with its source attached once.
            static KEPT: Mutex<Vec<Arc<ContextShared>>> = Mutex::new(Vec::new());
            KEPT.lock().unpoisoned().push(shared.clone());
        }
        // A pool worker's own context: the scheduler ends with the worker
        // (S9), or has ended already. Registered before the map's lock is
        // let go: nobody else has the scheduler yet.
        let retire: Weak<dyn crate::pool::Retire> = Arc::downgrade(&shared) as _;
        let stage = match crate::pool::at_worker_exit(context, retire) {
            crate::pool::WorkerContext::No => ORDINARY,
            crate::pool::WorkerContext::Retires(registry) => {
                let _ = shared.registry.set(registry);
                ON_WORKER
            }
            crate::pool::WorkerContext::Exited => FINISHED,
        };
        // `fetch_max`, not a store: the worker may have exited since
        // `at_worker_exit` registered us, and retired us (RETIRED, then
        // FINISHED); a store of ON_WORKER would undo that, leaving our
        // pushes for a loop that never runs again. The stage only grows.
        shared.stage.fetch_max(stage, Ordering::Relaxed);
        drop(map);
        drop(siblings);
        drop(retired);
        shared.latency_by_default();
        shared
    }

    pub(crate) fn context(&self) -> &glib::MainContext {
        &self.context
    }

    pub(crate) fn is_main(&self) -> bool {
        self.is_main
    }

    /// The GLib priority of this scheduler's source (P12).
    pub(crate) fn priority(&self) -> i32 {
        self.priority
    }

    /// Whether this is its context's scheduler at the default priority.
    pub(crate) fn at_default_priority(&self) -> bool {
        self.priority == default_priority(self.is_main)
    }

    /// Queues a job and wakes the context unless a wake-up is pending.
    #[inline]
    pub(crate) fn push(&self, mut job: Job) {
        self.latency.stamp(&mut job);
        self.queue.push(job);
        if self.stage.load(Ordering::Relaxed) != ORDINARY {
            // Pairs with the fence in `finish`: either its drain finds our
            // job, or we see the flag. (Until then the exiting worker
            // drains the queue itself, on its thread: a pusher must not
            // steal a job the worker polled, a pinned task's or a fiber's,
            // for the reaper.)
            fence(Ordering::SeqCst);
            if self.stage.load(Ordering::Relaxed) == FINISHED {
                self.drop_retired();
                return;
            }
        }
        self.notify();
    }

    /// Once the worker whose context this is has exited: drops what was
    /// pushed since, its tasks resolving as cancelled (S9). On a thread of
    /// its own (the pool's reaper), as a closed pool's pushes do: the pusher
    /// is often inside a wake-up, holding a lock that dropping the task's
    /// future may take.
    #[cold]
    fn drop_retired(&self) {
        crate::pool::reap(self.take_queued().collect());
    }

    /// Takes the jobs queued when called (or as many), no more: a thread
    /// that pushes without pause (spawns in a loop) must not keep a drain
    /// going forever. The queue is FIFO, so they are the oldest.
    fn take_queued(&self) -> impl Iterator<Item = Job> + '_ {
        drain(|| self.queue.steal()).take(self.queue.len())
    }

    #[inline]
    fn notify(&self) {
        // AcqRel pairs with the swap in `run_batch`: either that swap sees
        // our `true` (and the drain after it sees our job), or we see its
        // `false` and mark the source ready again.
        if !self.pending.notified.swap(true, Ordering::AcqRel) {
            self.mark_ready();
        }
    }

    fn mark_ready(&self) {
        self.wakeups.fetch_add(1, Ordering::Relaxed);
        if self.is_main {
            // The start of a wait: for the progress source (S11) and the
            // idle watch.
            self.pending
                .since
                .store(crate::util::clock::now(), Ordering::Relaxed);
            self.source.set_ready();
            // X4 watches for a loop nobody runs; a scheduler asked to run
            // below the main scheduler's place may wait for long on a busy
            // loop that does run.
            if self.priority <= MAIN_PRIORITY {
                self.wake_watch();
            }
        } else {
            self.source.set_ready();
        }
    }
}

/// How `Scheduler`'s `Debug` (and so the task dump, the views and the
/// latency histograms' lines) names a context's scheduler: a priority
/// other than the context's default is named (P12).
impl std::fmt::Debug for ContextShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let priority = || priority_name(self.priority);
        match (self.is_main, self.at_default_priority()) {
            (true, true) => f.write_str("Scheduler::Main"),
            (false, true) => f
                .debug_tuple("Scheduler::Context")
                .field(&self.context)
                .finish(),
            (true, false) => f
                .debug_struct("Scheduler::Main")
                .field("priority", &format_args!("{}", priority()))
                .finish(),
            (false, false) => f
                .debug_struct("Scheduler::Context")
                .field("context", &self.context)
                .field("priority", &format_args!("{}", priority()))
                .finish(),
        }
    }
}

/// A scheduler of a pool worker's own context ends with the worker (S9):
/// only that worker runs its tasks, so when the pool shuts down they resolve
/// as cancelled, as the pool's own do.
impl crate::pool::Retire for ContextShared {
    /// On the worker's thread as it exits, after its idle tasks were woken
    /// (a woken task of ours is in our queue by then): drops every queued
    /// job here, on the thread that ran them, this thread's `!Send` ones
    /// too; pushes from now on leave theirs queued for the next call. Again
    /// for the wake-ups that straddled the worker's close (their tasks were
    /// not queued yet the first time), and once more by `finish`.
    fn retire(&self) {
        self.stage.fetch_max(RETIRED, Ordering::Release);
        // (A thread spawning here in a loop leaves its later jobs for the
        // next call: the worker's exit does not wait for it to stop.)
        for job in self.take_queued() {
            drop_orphan(job);
        }
        if let Some(queue) = self.local_queue_here() {
            self.drain(&queue);
        }
    }

    /// The worker's last drain: from now on a push hands the queue to the
    /// reaper.
    fn finish(&self) {
        self.stage.store(FINISHED, Ordering::Relaxed);
        // Pairs with the fence in `push`.
        fence(Ordering::SeqCst);
        self.retire();
    }
}

/// Drops a `!Send` job whose owner thread is exiting or has exited, on the
/// calling thread: its task resolves as cancelled. On the owner thread (at
/// its exit) the future is dropped in place; on any other thread the
/// future, bound to its own thread, is leaked instead.
fn drop_orphan(job: Job) {
    if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(job)))
    {
        crate::diagnostics::panic::contain(crate::diagnostics::panic::PanicSource::Source, payload);
    }
}

impl Drop for ContextShared {
    fn drop(&mut self) {
        self.source.destroy();
        if let Some(progress) = &self.progress {
            progress.destroy();
        }
        let key = (context_key(&self.context), self.priority);
        let mut map = registry().lock().unpoisoned();
        if map.get(&key).is_some_and(|w| w.strong_count() == 0) {
            map.remove(&key);
        }
        // Our less urgent siblings stop looking at us (P12). Dropped after
        // the lock, as in `at_priority`.
        let siblings: Vec<Arc<ContextShared>> = map
            .iter()
            .filter(|((context, _), _)| *context == key.0)
            .filter_map(|(_, weak)| weak.upgrade())
            .collect();
        for sibling in &siblings {
            sibling.siblings.remove(&self.pending);
        }
        drop(map);
        drop(siblings);
        // Jobs still queued are dropped here. A queued task holds a strong
        // reference to us through its schedule function, so what is left is
        // work items (`Scheduler::push`): pushed through the last handle of
        // a context's scheduler (not the main context's: those live for the
        // process), they are dropped unrun with it. Said, not silent.
        let unrun = self.queue.len();
        if unrun > 0 {
            glib::g_warning!(
                "gdex",
                "{unrun} work item(s) pushed with Scheduler::push to a context scheduler were \
                 dropped without running: the last handle of that scheduler \
                 (Scheduler::for_context, with_priority) was dropped before the context ran \
                 them. Keep a handle while its work is queued, or spawn a task."
            );
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::thread;

    /// Runs `body`; if it has not returned after `secs` seconds, says which
    /// test hung and aborts, so that a hang fails the run instead of
    /// stopping it (the unit tests' copy of `tests/common`'s watchdog; the
    /// other unit tests that start threads use it too).
    pub(crate) fn watchdog<R>(name: &str, secs: u64, body: impl FnOnce() -> R) -> R {
        let (done, finished) = std::sync::mpsc::channel::<()>();
        let name = name.to_owned();
        let dog = thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                finished.recv_timeout(Duration::from_secs(secs))
            {
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "watchdog: test `{name}` still running after {secs} s; aborting"
                );
                std::process::abort();
            }
        });
        let out = body();
        drop(done);
        dog.join().expect("watchdog thread");
        out
    }

    /// S11, X4: a wait marked by another thread whose clock reads later
    /// than this thread's (a newer mark, stored after this thread read its
    /// clock; or another core's counter) is a wait of 0, never a wrapped
    /// difference of about 2^64 ticks: the progress source does not run
    /// the catch-up slice ahead of GTK's frames, and the idle watch has
    /// nothing to report.
    #[test]
    fn a_wait_marked_later_than_this_threads_clock_is_no_wait() {
        let pending = Arc::new(Pending::default());
        pending.notified.store(true, Ordering::Release);
        let later = crate::util::clock::now() + crate::util::clock::ticks(Duration::from_secs(1));
        pending.since.store(later, Ordering::Relaxed);
        let progress = ProgressHooks {
            shared: Weak::new(),
            pending: pending.clone(),
            bound: crate::util::clock::ticks(PROGRESS_BOUND),
        };
        assert!(!progress.ready(), "a wait from the future is overdue");
        assert_eq!(pending.waited(), 0);
        // An older mark is measured.
        let earlier = crate::util::clock::now()
            .saturating_sub(crate::util::clock::ticks(Duration::from_secs(1)));
        pending.since.store(earlier, Ordering::Relaxed);
        assert!(progress.ready());
        assert!(pending.waited() >= crate::util::clock::ticks(Duration::from_millis(999)));
    }

    /// S1: pushes from other threads wake the context once until the source
    /// has run, and a dispatch runs a bounded batch.
    #[test]
    fn cross_thread_wakeups_coalesce() {
        watchdog(
            "cross_thread_wakeups_coalesce",
            60,
            cross_thread_wakeups_coalesce_body,
        );
    }

    fn cross_thread_wakeups_coalesce_body() {
        let context = glib::MainContext::new();
        let shared = ContextShared::for_context(&context);
        let ran = Arc::new(AtomicUsize::new(0));
        let pushers: Vec<_> = (0..4)
            .map(|_| {
                let (shared, ran) = (shared.clone(), ran.clone());
                thread::spawn(move || {
                    for _ in 0..250 {
                        let ran = ran.clone();
                        shared.push(Job::work(move || {
                            ran.fetch_add(1, Ordering::Relaxed);
                        }));
                    }
                })
            })
            .collect();
        for p in pushers {
            p.join().unwrap();
        }
        assert_eq!(
            shared.wakeups.load(Ordering::Relaxed),
            1,
            "1000 pushes, one wake-up"
        );
        // One dispatch: one bounded batch (128 jobs, fewer if they took
        // 4 ms, as under valgrind), then the source re-arms itself once.
        context.iteration(false);
        let first = ran.load(Ordering::Relaxed);
        assert!((1..=DISPATCH_BATCH).contains(&first), "{first}");
        assert_eq!(shared.wakeups.load(Ordering::Relaxed), 2);
        // Each later dispatch that leaves work re-arms once more: one
        // wake-up per dispatch, never one per job.
        let mut dispatches = 1;
        while context.iteration(false) {
            dispatches += 1;
        }
        assert_eq!(ran.load(Ordering::Relaxed), 1000);
        assert!(dispatches >= 1000usize.div_ceil(DISPATCH_BATCH));
        assert_eq!(shared.wakeups.load(Ordering::Relaxed) as usize, dispatches);
    }
}
