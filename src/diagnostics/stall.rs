//! The stall watchdog (B5, X4): notices a pool worker or a context
//! scheduler (the main loop) stuck in one poll longer than a threshold,
//! reports it once with `g_warning` naming the task and the scheduler, and
//! gets the stuck worker's queued tasks taken by its peers.
//!
//! Cost on the hot path: every runner (a worker, or a context scheduler
//! while it dispatches) bumps a sequence number it alone writes, before and
//! after each job: odd means "inside a job". One monitor thread,
//! `gdex-watchdog`, samples the sequences a few times per threshold; a
//! sequence that stays odd and unchanged for the threshold is a stall. The
//! monitor sleeps for good while every runner is idle, and the first runner
//! to start working again wakes it, so an idle program pays nothing.
//!
//! The monitor also watches every pool worker, watchdog threshold or not
//! (P6, B5): while a worker is busy it samples every
//! [`HAND_OVER_AFTER`] (1 ms), and a worker that has sat in one poll that
//! long gets its queued jobs taken by a peer. A job pushed behind a long
//! poll asks for no help itself (one queued job never does: asking on every
//! push would cost chained workloads a wake-up each), so this is what moves
//! it within a couple of milliseconds.
//!
//! The monitor's own cost while work runs (B6): for a few looks after a
//! pool worker worked, the monitor does not park but looks every
//! [`WATCH_TICK`] (5 ms), so that a worker that starts a short slice every
//! millisecond (a 1 ms timer) wakes nobody, and the monitor wakes about 200
//! times a second rather than 1000. A long poll that begins while the
//! monitor watches is seen within a watch tick, then sampled every 1 ms:
//! its queue moves within about 6 ms rather than 2.
//!
//! Names: a task spawned with [`Scheduler::spawn_named`](crate::Scheduler::spawn_named)
//! publishes its name on its runner while it is polled.
//!
//! A stopped process is no stall (B5). A debugger's breakpoint, `SIGSTOP`
//! (a shell's Ctrl-Z) or a paused VM stops every thread, the monitor's
//! too: its next look comes late by the whole stop, and the job it saw
//! running before would look stuck for all of it. A look that comes more
//! than [`STOPPED_AFTER`] (20 ms) later than the monitor asked excuses the
//! excess: the stall clocks running then start that much later. Time the
//! monitor spent waiting for a CPU (a loaded machine, where the job ran
//! meanwhile) is no stop, and is not excused (`cpu_wait`). A stop
//! inside the panic hook (below) is excused once: it is no longer hook
//! time.
//!
//! Panics are not stalls (X4). A panicking poll runs the
//! process's panic hook before it unwinds, and std's default hook, with
//! `RUST_BACKTRACE=1`, captures and symbolizes a backtrace there: easily
//! longer than a threshold. The time a job spends inside the panic hook is
//! excused: the monitor subtracts it from the job's stall clock, the part
//! of it since the clock started (at the monitor's first look at the job).
//! To see it, gdex *wraps* the panic hook in place when the monitor starts
//! (the first watched runner): the wrapper notes the time on the current
//! runner and calls the hook it wrapped, the app's or std's default,
//! unchanged. A hook the app sets later replaces the wrapper (the app's
//! hook is then the only one, as it asked); the time spent in it then
//! counts toward a stall again.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::record::Entry;
use crate::current::{Entered, Role, Slot};
use crate::util::Unpoisoned;

mod cpu_wait;
mod nesting;
mod panic_hook;
mod wake_up;
use cpu_wait::CpuWait;
pub(crate) use nesting::{suspend_current, suspend_current_of};
use panic_hook::{wrap_panic_hook, HookTime};
pub(crate) use wake_up::look;
use wake_up::{check_wake_up, holds_wake_up};

/// A pool worker, as the watchdog sees it: what the monitor can do for one
/// that is stuck in a poll. The pool implements it; once the pool is gone,
/// every method does nothing (and answers `false`).
pub(crate) trait Worker: Send + Sync {
    /// The worker has peers to hand its queue to.
    fn has_peers(&self) -> bool;
    /// The pool runs thread-per-core (P9).
    fn thread_per_core(&self) -> bool;
    /// Fires the worker's overdue gdex timers from the calling thread, and
    /// submits and reaps its AIO ring's operations (see `aio::uring::ring::service`).
    fn fire_overdue_timers(&self);
    /// Hands the worker's queue to its peers and wakes them (P6).
    fn help(&self);
    /// Wakes a peer for the pool's latency class (P12), which has no home
    /// worker in thread-per-core mode either.
    fn hand_over_latency(&self);
    /// The worker declared that it blocks (`gdex::blocking::blocking`).
    fn in_blocking(&self) -> bool;
    /// The worker was sent a wake-up (a request for help, or one for its
    /// pinned work) that it has not acted on yet ([`check_wake_up`]).
    fn holds_wake_up(&self) -> bool;
}

/// One thing that runs jobs and can get stuck in one: a pool worker, or a
/// context scheduler.
pub(crate) struct Runner {
    /// Odd while a job runs. Written only by the runner's thread.
    seq: AtomicU64,
    /// True while the runner works through a slice of jobs.
    active: AtomicBool,
    /// The name of the named task being polled, if any.
    name: Mutex<Option<Arc<str>>>,
    /// The record of the tracked task being polled, if any (O1): the
    /// report names it as the dump and the other views do.
    entry: Mutex<Option<Arc<Entry>>>,
    /// "gdex-worker-1", "the main scheduler", ...
    label: String,
    threshold: Duration,
    /// For a worker: what the monitor can do for it.
    worker: Option<Box<dyn Worker>>,
    /// A worker of a pool with peers: its queue and overdue timers are
    /// handed over after [`HAND_OVER_AFTER`] in one poll (P6), so it is
    /// sampled every tick while busy. (A lone worker has nobody to hand
    /// them to.)
    hands_over: bool,
    /// Watched at all: a stall threshold is set, or it hands over.
    watched: bool,
    /// The monitor's bookkeeping (only the monitor touches it).
    track: Mutex<Track>,
    /// Time the current job spent in the panic hook (written by the
    /// runner's thread from the panic-hook wrapper, read by the monitor).
    in_panic_hook: Mutex<HookTime>,
    /// For a worker: since when the monitor has seen it hold a wake-up, and
    /// whether that was reported ([`check_wake_up`]; only the monitor
    /// touches it).
    unwoken: Mutex<(Option<Instant>, bool)>,
}

#[derive(Default)]
struct Track {
    seq: u64,
    since: Option<Instant>,
    /// The job's time in the panic hook when its clock started (X4): hook
    /// time before that is no part of the clock, and is not subtracted
    /// from it.
    hook_before: Duration,
    reported: bool,
    /// When the job went on after a nested loop (B6), its clock restarted
    /// with the time it had run before: a stop of the process before that
    /// was not on it ([`Runner::excuse`]).
    resumed: Option<Instant>,
}

impl Runner {
    pub(crate) fn new(
        label: String,
        threshold: Duration,
        worker: Option<Box<dyn Worker>>,
    ) -> Arc<Runner> {
        let runner = Runner::unregistered(label, threshold, worker);
        if runner.watched {
            monitor().register(&runner);
        }
        runner
    }

    /// A runner the monitor's thread does not know of (for [`new`], and
    /// for tests that look at a runner in the monitor's place).
    ///
    /// [`new`]: Runner::new
    fn unregistered(
        label: String,
        threshold: Duration,
        worker: Option<Box<dyn Worker>>,
    ) -> Arc<Runner> {
        let hands_over = worker.as_ref().is_some_and(|w| w.has_peers());
        Arc::new(Runner {
            seq: AtomicU64::new(0),
            active: AtomicBool::new(false),
            name: Mutex::new(None),
            entry: Mutex::new(None),
            label,
            threshold,
            hands_over,
            watched: !threshold.is_zero() || hands_over,
            worker,
            track: Mutex::new(Track::default()),
            in_panic_hook: Mutex::new(HookTime::default()),
            unwoken: Mutex::new((None, false)),
        })
    }

    /// A job starts on this runner's thread.
    #[inline]
    pub(crate) fn enter_job(&self) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s | 1, Ordering::Relaxed);
    }

    /// The job has returned.
    #[inline]
    pub(crate) fn leave_job(&self) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store((s | 1) + 1, Ordering::Relaxed);
    }

    /// The runner starts a slice of jobs: make sure the monitor watches.
    /// Pairs with the monitor's `park`: either it sees us active, or we see
    /// it parked and wake it.
    #[inline]
    pub(crate) fn busy(&self) {
        if self.watched {
            self.active.store(true, Ordering::Relaxed);
            std::sync::atomic::fence(Ordering::SeqCst);
            let monitor = monitor();
            let mut woke = monitor.wake();
            if self.hands_over {
                // Sampled every tick while busy (P6): cut a slow sleep short.
                woke |= monitor.wake_slow();
            }
            if woke {
                // Only past a syscall: the count costs nothing beside it.
                RUNNER_WAKES.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The slice is over.
    #[inline]
    pub(crate) fn idle(&self) {
        if self.watched {
            self.active.store(false, Ordering::Relaxed);
        }
    }

    /// The monitor, asleep since `asleep_at`, woke `stopped` later than it
    /// asked (and than [`STOPPED_AFTER`] allows): the process was stopped
    /// meanwhile, every thread of it, the running job's and the monitor's
    /// alike (B5). That time was no job's: the stall clocks of the job the
    /// monitor saw running, and of a wake-up the worker holds, start that
    /// much later; and what of it the job spent in the panic hook (X4) is
    /// no longer hook time, which the monitor subtracts too.
    fn excuse(&self, stopped: Duration, asleep_at: Instant, now: Instant) {
        let later =
            |since: Instant, by: Duration| since.checked_add(by).map_or(now, |s| s.min(now));
        {
            let mut track = self.track.lock().unpoisoned();
            // A job that went on after a nested loop during the sleep (B6)
            // restarted its clock then, with the time it had run before:
            // the stop was on it only if it came after (every thread is
            // stopped alike, so it then fits between the two).
            let on_it = track
                .resumed
                .map_or(stopped, |at| stopped.min(now.saturating_duration_since(at)));
            track.since = track.since.map(|since| later(since, on_it));
        }
        self.in_panic_hook
            .lock()
            .unpoisoned()
            .excuse(stopped, asleep_at, now);
        let mut unwoken = self.unwoken.lock().unpoisoned();
        unwoken.0 = unwoken.0.map(|since| later(since, stopped));
    }
}

/// The runner whose job is being polled on this thread.
// SAFETY: `diagnostics::stall` owns `Role::Runner`; this is its one slot.
const CURRENT: Slot<Runner> = unsafe { Slot::new(Role::Runner) };

/// Makes `runner` this thread's current runner until the guard drops.
pub(crate) fn enter(runner: &Runner) -> Entered {
    CURRENT.enter(runner)
}

/// How long a pool worker may sit in one poll before the jobs queued behind
/// it are handed to a peer (P6), and the monitor's tick while a worker is
/// busy: a queued job waits at most about two ticks for an idle peer (plus
/// a [`WATCH_TICK`] if the poll began while the monitor only watched).
pub(crate) const HAND_OVER_AFTER: Duration = Duration::from_millis(1);

/// The threshold a runner gets unless told otherwise: `GDEX_STALL_MS`
/// (0 turns the watchdog off), else 100 ms. An unusable value is reported
/// once.
/// Work that a context keeps for its next turn and that the monitor can do
/// from its own thread for a stuck worker, registered by the layer that
/// owns it (the AIO ring registers its `service`), so that the pool names
/// no layer above it.
static CONTEXT_SERVICES: Mutex<Vec<fn(&glib::MainContext)>> = Mutex::new(Vec::new());

/// Registers `service` (once, however often it is called).
pub(crate) fn add_context_service(service: fn(&glib::MainContext)) {
    let mut services = CONTEXT_SERVICES.lock().unpoisoned();
    if !services.iter().any(|s| std::ptr::fn_addr_eq(*s, service)) {
        services.push(service);
    }
}

/// The thread that iterates `context` is stuck in one poll: does, from
/// this thread, the work every registered service keeps for its next turn.
pub(crate) fn service_stuck_context(context: &glib::MainContext) {
    let services = CONTEXT_SERVICES.lock().unpoisoned().clone();
    for service in services {
        service(context);
    }
}

pub(crate) fn default_threshold() -> Duration {
    static DEFAULT: OnceLock<Duration> = OnceLock::new();
    *DEFAULT.get_or_init(|| {
        crate::util::env_setting(
            "GDEX_STALL_MS",
            "a number of milliseconds (0 turns the stall watchdog off)",
            || "using 100".to_owned(),
            |text| text.parse().ok().map(Duration::from_millis),
        )
        .unwrap_or(Duration::from_millis(100))
    })
}

/// Publishes the record of the tracked task about to be polled on this
/// thread's runner, until the guard drops (O1).
pub(crate) fn polling_entry(entry: &Arc<Entry>) -> impl Drop + '_ {
    let runner = CURRENT.get();
    // SAFETY: CURRENT points at a runner that outlives the poll running on
    // this thread (set by the worker loop or a context dispatch).
    let runner = unsafe { runner.as_ref() };
    // The entry of a poll this one is nested in (a nested main loop inside
    // a task's poll runs other tasks on the same runner) comes back after.
    let outer = runner.and_then(|r| r.entry.lock().unpoisoned().replace(entry.clone()));
    struct Restore<'a>(Option<&'a Runner>, Option<Arc<Entry>>);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            if let Some(r) = self.0 {
                let gone = std::mem::replace(&mut *r.entry.lock().unpoisoned(), self.1.take());
                drop(gone);
            }
        }
    }
    Restore(runner, outer)
}

pin_project_lite::pin_project! {
    /// A future that publishes its task's name on the runner polling it.
    pub(crate) struct Named<F> {
        name: Arc<str>,
        #[pin]
        future: F,
    }
}

impl<F> Named<F> {
    pub(crate) fn new(name: Arc<str>, future: F) -> Self {
        Named { name, future }
    }
}

impl<F: Future> Future for Named<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let runner = CURRENT.get();
        // SAFETY: CURRENT points at a runner that outlives the poll running
        // on this thread (set by the worker loop or a context dispatch).
        let runner = unsafe { runner.as_ref() };
        // The name of a poll this one is nested in comes back after (B6).
        let outer = runner.and_then(|r| r.name.lock().unpoisoned().replace(this.name.clone()));
        struct Restore<'a>(Option<&'a Runner>, Option<Arc<str>>);
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                if let Some(r) = self.0 {
                    *r.name.lock().unpoisoned() = self.1.take();
                }
            }
        }
        let _restore = Restore(runner, outer);
        this.future.poll(cx)
    }
}

/// What one look at a runner saw.
struct Seen {
    /// It is inside a job or a slice of jobs.
    working: bool,
    /// It has run a job since the look before (or runs one now).
    worked: bool,
}

/// The monitor's tick while no pool worker is busy but one worked a moment
/// ago (in the last [`WATCH_LINGER`] looks): it is not parked, so a worker
/// starting a slice wakes nobody (no syscall on the worker), and it sees a
/// poll that has gone on since within this tick, then samples it every
/// [`HAND_OVER_AFTER`]. A wake-up of the monitor costs 10-20 µs of CPU on a
/// loaded 2-core VM: ticking every 1 ms through the gaps of a worker that
/// wakes every 1 ms (a 1 ms timer) would cost 1-2% of a core, as did waking
/// it at most slices; every 5 ms costs a fifth of that (B6: at most 0.5%;
/// every 4 ms measured 0.44% there, too close to the line).
const WATCH_TICK: Duration = Duration::from_millis(5);

/// How many looks in a row that saw no pool worker work the monitor keeps
/// watching (every [`WATCH_TICK`]) before it parks, or sleeps its slow
/// period. Two cover a worker that starts a slice every few milliseconds;
/// one that starts slices rarely costs at most two extra wake-ups per slice.
const WATCH_LINGER: u32 = 2;

/// How much later than it asked the monitor may wake before the excess is
/// taken for a stop of the process (a debugger's breakpoint, `SIGSTOP`, a
/// paused VM or container) and counted against no job's stall clock
/// ([`Runner::excuse`]). The time it waited for a CPU meanwhile (a loaded
/// machine, where it can be late by tens of milliseconds) is no stop and
/// still counts (`cpu_wait`): so a real stall is not hidden by the load
/// that comes with it.
const STOPPED_AFTER: Duration = Duration::from_millis(20);

/// The time the monitor excused as stops of the process, in nanoseconds:
/// see [`excused_stops`].
static EXCUSED_STOPS: AtomicU64 = AtomicU64::new(0);

/// For gdex's tests: the time the monitor has excused as stops of the
/// process (B5) since the process started.
pub(crate) fn excused_stops() -> Duration {
    Duration::from_nanos(EXCUSED_STOPS.load(Ordering::Relaxed))
}

/// How often a runner starting a slice had to wake the monitor (a syscall
/// on the runner's thread): see [`runner_wakes`].
static RUNNER_WAKES: AtomicU64 = AtomicU64::new(0);

/// How often, since the process started, a runner (a pool worker, a
/// context scheduler) starting a slice of jobs had to wake the stall
/// monitor with a syscall (B6: the monitor's cost while work runs).
pub(crate) fn runner_wakes() -> u64 {
    RUNNER_WAKES.load(Ordering::Relaxed)
}

struct Monitor {
    runners: Mutex<Vec<Weak<Runner>>>,
    /// The monitor thread sleeps until woken (every runner was idle).
    parked: AtomicBool,
    /// The monitor sleeps its slow period (no pool worker was busy): a pool
    /// worker that starts a slice wakes it, to sample every tick again.
    slow: AtomicBool,
    thread: OnceLock<std::thread::Thread>,
}

fn monitor() -> &'static Monitor {
    static MONITOR: OnceLock<Monitor> = OnceLock::new();
    MONITOR.get_or_init(|| Monitor {
        runners: Mutex::new(Vec::new()),
        parked: AtomicBool::new(false),
        slow: AtomicBool::new(false),
        thread: OnceLock::new(),
    })
}

impl Monitor {
    fn register(&'static self, runner: &Arc<Runner>) {
        self.runners
            .lock()
            .unpoisoned()
            .push(Arc::downgrade(runner));
        self.thread.get_or_init(|| {
            wrap_panic_hook();
            std::thread::Builder::new()
                .name("gdex-watchdog".into())
                .spawn(move || self.run())
                .expect("start the gdex stall watchdog")
                .thread()
                .clone()
        });
        self.wake();
    }

    /// Cuts a slow sleep short; true if it did.
    #[inline]
    fn wake_slow(&self) -> bool {
        if self.slow.load(Ordering::Relaxed) && self.slow.swap(false, Ordering::SeqCst) {
            if let Some(thread) = self.thread.get() {
                thread.unpark();
                return true;
            }
        }
        false
    }

    /// Wakes the parked monitor; true if it did.
    #[inline]
    fn wake(&self) -> bool {
        if self.parked.load(Ordering::Relaxed) && self.parked.swap(false, Ordering::SeqCst) {
            if let Some(thread) = self.thread.get() {
                thread.unpark();
                return true;
            }
        }
        false
    }

    fn run(&self) {
        // The runners of this look, in a buffer kept across looks (a look
        // allocates nothing); emptied after each look, so that the parked
        // monitor keeps no runner alive.
        let mut runners: Vec<Arc<Runner>> = Vec::new();
        // Looks in a row that saw no pool worker working, nor one that had
        // worked since the look before: the monitor watches until
        // WATCH_LINGER of them.
        let mut quiet = WATCH_LINGER;
        // The monitor's own wait for a CPU, which a late look does not take
        // for a stop of the process (B5).
        let mut cpu_wait = CpuWait::of_this_thread();
        loop {
            {
                let mut list = self.runners.lock().unpoisoned();
                list.retain(|w| w.strong_count() > 0);
                runners.extend(list.iter().filter_map(Weak::upgrade));
            }
            if runners.is_empty() {
                self.parked.store(true, Ordering::SeqCst);
                self.park();
                continue;
            }
            // A busy pool worker is sampled every tick, so that a job queued
            // behind its long poll moves within a couple of ticks; stalls
            // need only a few samples per threshold. A pool worker that
            // worked in the last few looks, idle now, is watched every
            // WATCH_TICK with no wake-up asked of it: one that starts a
            // slice every millisecond or so (a 1 ms timer) then wakes
            // nobody, and the monitor wakes a few hundred times a second,
            // not a thousand (B6: the monitor costs little while work runs).
            let workers_busy = runners
                .iter()
                .any(|r| r.hands_over && r.active.load(Ordering::Relaxed));
            // Its wait for a CPU so far (first: a wait between the two is
            // then no stop); how long it means to sleep, from when.
            cpu_wait.before_sleep();
            let asleep_at = Instant::now();
            let mut asked = Duration::ZERO;
            if workers_busy {
                asked = HAND_OVER_AFTER;
                std::thread::park_timeout(asked);
            } else if quiet < WATCH_LINGER {
                asked = WATCH_TICK;
                std::thread::park_timeout(asked);
            } else {
                let period = runners
                    .iter()
                    .map(|r| r.threshold)
                    .filter(|t| !t.is_zero())
                    .min()
                    .map_or(HAND_OVER_AFTER, |min| {
                        (min / 4).clamp(Duration::from_millis(5), Duration::from_millis(250))
                    });
                // Pairs with the fence in `Runner::busy`: either a worker
                // that starts now sees `slow` and unparks us, or we see it
                // active and do not sleep slowly.
                self.slow.store(true, Ordering::SeqCst);
                std::sync::atomic::fence(Ordering::SeqCst);
                let started = runners
                    .iter()
                    .any(|r| r.hands_over && r.active.load(Ordering::Relaxed));
                if !started {
                    asked = period;
                    std::thread::park_timeout(asked);
                }
                self.slow.store(false, Ordering::SeqCst);
            }
            let mut busy = false;
            let mut workers_worked = false;
            let woke = Instant::now();
            // Woken far later than asked, not for want of a CPU: the
            // process was stopped (B5).
            let late = woke
                .saturating_duration_since(asleep_at)
                .saturating_sub(asked);
            let stopped = if late > STOPPED_AFTER {
                let waited = cpu_wait.since_reading(woke);
                late.saturating_sub(waited).saturating_sub(STOPPED_AFTER)
            } else {
                Duration::ZERO
            };
            if !stopped.is_zero() {
                let nanos = u64::try_from(stopped.as_nanos()).unwrap_or(u64::MAX);
                EXCUSED_STOPS.fetch_add(nanos, Ordering::Relaxed);
            }
            for runner in &runners {
                // Each runner's look at its own time: the looks at the
                // runners before (a report, user code, among them) take
                // time, and a job first seen now starts its clock now.
                let now = Instant::now();
                if !stopped.is_zero() {
                    runner.excuse(stopped, asleep_at, now);
                }
                let seen = self.check(runner, now);
                busy |= seen.working;
                // P10: a worker that holds a wake-up it has not acted on.
                busy |= check_wake_up(runner, now);
                workers_worked |= runner.hands_over && seen.worked;
            }
            quiet = if workers_worked {
                0
            } else {
                quiet.saturating_add(1)
            };

            runners.clear();
            if !busy && quiet >= WATCH_LINGER {
                self.parked.store(true, Ordering::SeqCst);
                // Every runner registered by now, not just this tick's
                // snapshot: one registered since may already be working,
                // having seen the flag still down.
                let any_active = self
                    .runners
                    .lock()
                    .unpoisoned()
                    .iter()
                    .filter_map(Weak::upgrade)
                    .any(|r| r.active.load(Ordering::SeqCst) || holds_wake_up(&r));
                if any_active {
                    self.parked.store(false, Ordering::SeqCst);
                    continue;
                }
                self.park();
            }
        }
    }

    /// Looks at one runner: whether it is working, and whether it has
    /// since the last look.
    fn check(&self, runner: &Runner, now: Instant) -> Seen {
        // The sequence is read under the track's lock: a job suspended or
        // resumed around a nested loop (B6) changes both together.
        let mut track = runner.track.lock().unpoisoned();
        let seq = runner.seq.load(Ordering::Relaxed);
        let worked = seq != track.seq;
        if seq & 1 == 0 {
            *track = Track {
                seq,
                ..Track::default()
            };
            return Seen {
                working: runner.active.load(Ordering::Relaxed),
                worked,
            };
        }
        let seen = Seen {
            working: true,
            worked: true,
        };
        if track.seq != seq || track.since.is_none() {
            *track = Track {
                seq,
                since: Some(now),
                // The clock starts at this look, which may come long after
                // the job did (the monitor woken late, or the process
                // stopped before it could look): what the job spent in the
                // hook until now is none of the clock's time (and what it
                // spent there after `now` is).
                hook_before: runner.panic_hook_time(seq, now),
                ..Track::default()
            };
            return seen;
        }
        let stuck_for = now.duration_since(track.since.unwrap_or(now));
        if let Some(worker) = &runner.worker {
            if runner.hands_over && stuck_for >= HAND_OVER_AFTER {
                // P6: whatever sits on a worker's deque behind one long poll
                // goes to a peer, whether or not the poll counts as a stall
                // (a peer that parked saw an empty deque and nobody asked it
                // for help, since one queued job asks for none). Its overdue
                // gdex timers fire from here, their tasks woken for a peer
                // to run (P8: a timer follows its task).
                worker.fire_overdue_timers();
                // In thread-per-core mode (P9) tasks stay home unless the
                // poll is a stall (below).
                if !worker.thread_per_core() {
                    worker.help();
                }
            }
        }
        if runner.threshold.is_zero() || stuck_for < runner.threshold {
            return seen;
        }
        if let Some(worker) = &runner.worker {
            if worker.in_blocking() {
                // Declared with gdex::blocking::blocking: not a stall.
                return seen;
            }
            if worker.thread_per_core() {
                // A stall: even thread-per-core hands its queue over.
                worker.help();
            }
        }
        // Time in the panic hook (a backtrace being symbolized) is the panic
        // report's, not the task's: not a stall, though the queue above
        // was handed over meanwhile all the same. Only the hook time since
        // the clock started: subtracting the time before too left a job
        // that spun after a long hook unreported (or reported far late).
        let in_hook = runner
            .panic_hook_time(seq, now)
            .saturating_sub(track.hook_before);
        let stuck_for = stuck_for.saturating_sub(in_hook);
        if stuck_for < runner.threshold {
            return seen;
        }
        if !track.reported {
            track.reported = true;
            let name = runner.name.lock().unpoisoned().clone();
            let entry = runner.entry.lock().unpoisoned().clone();
            // A tracked task's record knows when the stuck poll began; the
            // watchdog only when it first saw it (up to a tick later).
            let began = entry.as_ref().and_then(|e| e.poll_began());
            let task = match (entry, name) {
                // A tracked task (O1): as the dump names it.
                (Some(entry), _) => {
                    format!("task {} spawned at {}", entry.describe(), entry.location)
                }
                (None, Some(name)) => format!("task \"{name}\""),
                (None, None) => {
                    "an unnamed task (name tasks with Scheduler::spawn_named to see them here)"
                        .to_owned()
                }
            };
            // With task tracking on (X8), the live tasks, the stuck one
            // among them as "running".
            let tasks = if super::record::dump_on() {
                format!("\n{}", super::dump::dump())
            } else {
                String::new()
            };
            let report = format!(
                "{} has been stuck in one poll of {} for {} ms. A task must not block its \
                 scheduler: move blocking work to gdex::spawn_blocking, or wrap it in \
                 gdex::blocking::blocking.{}",
                runner.label,
                task,
                stuck_for.as_millis(),
                if runner.worker.is_some() {
                    " Its queued tasks go to its peers meanwhile."
                } else {
                    ""
                },
            );
            // A view's panic (a `tracing` subscriber's) must not take the
            // watchdog down: the report still goes out below.
            let since = began.unwrap_or(track.since.unwrap_or(now));
            // The views and the log handler are user code: not under the
            // track's lock (which a runner takes to suspend a job, B6).
            drop(track);
            let viewed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                super::views::stall(&runner.label, &task, since, &report)
            }));
            if let Err(payload) = viewed {
                super::panic::contain(super::panic::PanicSource::Source, payload);
            }
            glib::g_warning!("gdex", "{}{}", report, tasks);
        }
        seen
    }

    /// Sleeps until a runner starts working again (`parked` is set).
    fn park(&self) {
        loop {
            std::thread::park();
            if !self.parked.load(Ordering::SeqCst) {
                return;
            }
        }
    }
}
