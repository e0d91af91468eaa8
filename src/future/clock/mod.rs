//! A clock a test controls: [`TestClock`] (and [`now`](crate::now) reads it).
//!
//! gdex's own timers ([`sleep`](crate::sleep), [`timeout`](crate::timeout),
//! [`timeout_at`](crate::timeout_at), [`reject_after`](crate::reject_after),
//! [`interval`](crate::interval)) wait on a `GSource` with a ready time on
//! GLib's monotonic clock. A timer polled on a context that a `TestClock`
//! drives waits in the clock's book instead, and fires when the clock is
//! moved past its deadline: by [`TestClock::advance`], or, with auto-advance
//! on, as soon as every context and pool the clock drives is idle.
//!
//! Which timers a clock reaches: the clock is found through the context a
//! timer waits on (the worker's on a pool, the thread-default one, ...): a
//! pool built with
//! [`ThreadPoolBuilder::clock`](crate::ThreadPoolBuilder::clock) (each of
//! its workers' contexts), or a context given to [`TestClock::attach`] (the
//! main context, or one a test iterates). GLib's own timeout sources
//! (`glib::timeout_add*`, `glib::timeout_future`, a GIO call's own timeout)
//! run on GLib's monotonic clock, which nothing in a process can pause:
//! they keep real time. A [`Delayed`](crate::Delayed) is held back by its
//! release, not by time: a timer it wraps waits on the clock as any other.
//!
//! Auto-advance is described in [`TestClock`]'s docs; how the clock knows
//! that what it drives is idle is in `idle.rs`.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::source::SourceRef;
use crate::task::flag::Flag;
use crate::util::Unpoisoned;

mod idle;

use idle::{Driver, Probe};

/// Contexts driven by some clock: while 0, a timer looks no clock up.
static DRIVEN: AtomicUsize = AtomicUsize::new(0);

/// The clock of each driven context, by the context's address. The clock
/// holds the context (so the address is not reused while it is here) and
/// takes it out when it lets it go.
fn driven() -> &'static Mutex<HashMap<usize, Weak<ClockInner>>> {
    static DRIVEN_BY: OnceLock<Mutex<HashMap<usize, Weak<ClockInner>>>> = OnceLock::new();
    DRIVEN_BY.get_or_init(Default::default)
}

fn context_key(context: &glib::MainContext) -> usize {
    use glib::translate::ToGlibPtr;
    let ptr: *mut glib_sys::GMainContext = context.to_glib_none().0;
    ptr as usize
}

/// Whether some clock drives some context: while not, no timer looks a
/// clock up. One relaxed load.
#[inline]
pub(crate) fn any_driven() -> bool {
    DRIVEN.load(Ordering::Relaxed) != 0
}

/// The clock that drives `context`, if one does.
pub(crate) fn for_context(context: &glib::MainContext) -> Option<Arc<ClockInner>> {
    let map = driven().lock().unpoisoned();
    map.get(&context_key(context)).and_then(Weak::upgrade)
}

/// A paused clock for gdex's timers in tests: time stands still until the
/// test [`advance`](Self::advance)s it, or, with
/// [`auto-advance`](Self::set_auto_advance), jumps to the next deadline
/// whenever every context and pool the clock drives is idle (tokio's
/// `time::pause`, `advance` and `start_paused`).
///
/// A clock drives a pool built with
/// [`ThreadPoolBuilder::clock`](crate::ThreadPoolBuilder::clock) and the
/// contexts given to [`attach`](Self::attach): the main context, or one a
/// test iterates. gdex's timers ([`sleep`](crate::sleep),
/// [`timeout`](crate::timeout), [`timeout_at`](crate::timeout_at),
/// [`reject_after`](crate::reject_after), [`interval`](crate::interval))
/// polled there wait on the clock. GLib's own timeout sources
/// (`glib::timeout_add*`, `glib::timeout_future`) keep real time: nothing
/// can pause GLib's monotonic clock.
///
/// A timer made elsewhere (on the test's thread, say, before it is spawned)
/// counts its whole duration from its first poll on a driven context: under
/// a paused clock, the real time before it does not count. The other way
/// round, a timer made or first polled on a driven context stays on that
/// clock wherever it is polled later (a `Sleep` made in a pool task and
/// awaited on the test's thread fires when the clock passes it).
///
/// A deadline given as an `Instant` ([`timeout_at`](crate::timeout_at),
/// [`interval_at`](crate::interval_at)) is read on the time of the thread
/// that makes the timer: from [`gdex::now`](crate::now) in a task the clock
/// drives, it is on the clock's time; made on the test's thread, it is
/// taken as a duration from the real time then, counted from the first
/// poll (so there `clock.now() + d`, after an advance of an hour, fires
/// about an hour and `d` after that poll). Compute deadlines inside the
/// clock's tasks.
///
/// `TestClock` is a cheap handle (`Clone`, `Send`, `Sync`); the clock lives
/// while a handle, or a pool built on it, does.
///
/// ```
/// use std::time::Duration;
///
/// // A debounce: the task acts 300 ms after the last keystroke.
/// let clock = gdex::TestClock::paused();
/// let pool = gdex::ThreadPool::builder().workers(1).clock(&clock).build().unwrap();
/// let (keys, typed) = gdex::channel::<char>(8);
/// let task = pool.scheduler().spawn(async move {
///     let mut text = String::new();
///     loop {
///         match gdex::timeout(Duration::from_millis(300), typed.recv()).await {
///             Ok(Ok(c)) => text.push(c),
///             Ok(Err(_)) | Err(_) => return text,
///         }
///     }
/// });
/// gdex::block_on(keys.send('h')).unwrap();
/// gdex::block_on(keys.send('i')).unwrap();
/// // `advance` lets the pool take both keys before the clock moves.
/// clock.advance(Duration::from_millis(299));
/// clock.settle();
/// assert!(!task.is_finished());
/// clock.advance(Duration::from_millis(1));
/// assert_eq!(gdex::block_on(task).unwrap(), "hi");
/// ```
///
/// # Auto-advance
///
/// With auto-advance on ([`auto_advancing`](Self::auto_advancing),
/// [`set_auto_advance`](Self::set_auto_advance)), the clock jumps to its
/// next deadline, and fires what is due, whenever everything it drives is
/// idle at once: each attached context (an iteration of it found nothing
/// else to dispatch since its tasks last ran) and each pool (every worker
/// asleep in its poll, nothing queued, no job in its blocking lane).
///
/// What auto-advance cannot see is work outside gdex: a GIO call in flight
/// in GLib's worker threads, a GLib timeout source a task waits on
/// (`glib::timeout_future`), a plain thread that will send on a channel, a
/// job in the blocking lane of a pool the clock does not drive
/// ([`gdex::spawn_blocking`](crate::spawn_blocking) uses the default
/// pool's, even from a task of a driven pool: call the driven pool's own
/// [`ThreadPool::spawn_blocking`](crate::ThreadPool::spawn_blocking)).
/// The test's own thread is such a thread: between two spawns from it the
/// pool may go idle and the clock jump, so spawn what must start at the
/// same moment from one task, or in one
/// [`spawn_many`](crate::Scheduler::spawn_many). A task that waits on such
/// work under a timeout may see the timeout fire first, as with tokio's
/// `start_paused`. Leave auto-advance off for such a test and
/// [`advance`](Self::advance) by hand.
#[derive(Clone)]
pub struct TestClock {
    inner: Arc<ClockInner>,
}

pub(crate) struct ClockInner {
    state: Mutex<State>,
    /// The real time at which the clock was made, and GLib's monotonic
    /// time then (µs): the clock's time is `start + elapsed`.
    start: Instant,
    start_us: i64,
    /// Shared with the driver thread, which must not keep the clock alive.
    driver: Arc<Driver>,
    /// Itself, for the map of driven contexts and the driver thread.
    me: Weak<ClockInner>,
}

struct State {
    /// µs since `start`.
    elapsed: i64,
    /// Waiting timers by (deadline in µs on GLib's monotonic scale, entry
    /// number): the order they fire in.
    book: BTreeMap<(i64, u64), Arc<Flag>>,
    next_entry: u64,
    auto: bool,
    /// Bumped at every jump and every time a pool goes idle: a context's
    /// idle report counts for the epoch it was made in.
    epoch: u64,
    /// Set while a jump raises what it fired (outside the lock).
    jumping: bool,
    contexts: Vec<Attached>,
    pools: Vec<Weak<crate::pool::PoolShared>>,
    /// Worker contexts of the pools, held so their addresses stay theirs.
    worker_contexts: Vec<glib::MainContext>,
    next_attachment: u64,
}

struct Attached {
    id: u64,
    context: glib::MainContext,
    probe: SourceRef,
    /// The epoch of the context's last idle report, and how many
    /// dispatches its gdex schedulers had made then.
    reported: Option<(u64, u64)>,
}

/// The largest time a clock reaches, in µs past its start: far beyond any
/// test, and far from `i64` overflow on GLib's scale.
const MAX_ELAPSED: i64 = i64::MAX / 4;

fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(MAX_ELAPSED)
}

impl TestClock {
    /// A clock stopped at the present moment, with auto-advance off.
    pub fn paused() -> TestClock {
        TestClock {
            inner: Arc::new_cyclic(|me| ClockInner {
                state: Mutex::new(State {
                    elapsed: 0,
                    book: BTreeMap::new(),
                    next_entry: 0,
                    auto: false,
                    epoch: 0,
                    jumping: false,
                    contexts: Vec::new(),
                    pools: Vec::new(),
                    worker_contexts: Vec::new(),
                    next_attachment: 0,
                }),
                start: Instant::now(),
                start_us: glib::monotonic_time(),
                driver: Arc::default(),
                me: me.clone(),
            }),
        }
    }

    /// A clock stopped at the present moment, with auto-advance on: as
    /// tokio's `start_paused`. A test of a 30 s timeout then takes as long
    /// as its work.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let clock = gdex::TestClock::auto_advancing();
    /// let pool = gdex::ThreadPool::builder().workers(2).clock(&clock).build().unwrap();
    /// let task = pool.scheduler().spawn(async {
    ///     gdex::timeout(Duration::from_secs(30), std::future::pending::<()>()).await
    /// });
    /// assert!(gdex::block_on(task).unwrap().is_err());
    /// assert!(clock.elapsed() >= Duration::from_secs(30));
    /// ```
    pub fn auto_advancing() -> TestClock {
        let clock = TestClock::paused();
        clock.set_auto_advance(true);
        clock
    }

    /// The clock's time: the moment it was made, plus every advance and
    /// every jump.
    pub fn now(&self) -> Instant {
        self.inner.now()
    }

    /// How far the clock has been advanced.
    pub fn elapsed(&self) -> Duration {
        Duration::from_micros(self.inner.lock().elapsed as u64)
    }

    /// Moves the clock `by` forward and fires every timer whose deadline is
    /// then passed, in deadline order.
    ///
    /// First it lets the pools the clock drives settle: it waits until each
    /// is idle (every task waits: its workers sleep, nothing is queued, its
    /// blocking lane is empty), so that a task woken just before (by a
    /// send from the test, say) has made its next timer on the clock's
    /// present time before the clock moves. (Called on a worker of such a
    /// pool, or in one of its blocking jobs, it cannot wait for its own
    /// thread, and does not wait.) It then
    /// moves the clock and wakes the timers' tasks; it does not wait for
    /// them to run. Attached contexts are not waited for: the test iterates
    /// them.
    ///
    /// # Panics
    /// If a task of a driven pool never lets the pool settle (it loops
    /// without waiting) for a minute.
    pub fn advance(&self, by: Duration) {
        self.inner.settle("TestClock::advance");
        let fired = {
            let mut state = self.inner.lock();
            state.elapsed = state.elapsed.saturating_add(micros(by)).min(MAX_ELAPSED);
            let now = self.inner.start_us + state.elapsed;
            state.epoch += 1;
            take_due(&mut state, now)
        };
        self.inner.raise(fired);
    }

    /// Waits until every pool the clock drives is idle, as
    /// [`advance`](Self::advance) does before it moves the clock: the
    /// tasks the last advance woke have run, up to their next wait.
    ///
    /// # Panics
    /// As `advance`.
    pub fn settle(&self) {
        self.inner.settle("TestClock::settle");
    }

    /// Turns auto-advance on or off: with it on, whenever every context and
    /// pool the clock drives is idle, the clock jumps to its next deadline
    /// and fires what is due (see [auto-advance](TestClock#auto-advance)
    /// for what idle means and what it cannot see).
    pub fn set_auto_advance(&self, on: bool) {
        let contexts: Vec<glib::MainContext> = {
            let mut state = self.inner.lock();
            state.auto = on;
            state.epoch += 1;
            state.contexts.iter().map(|a| a.context.clone()).collect()
        };
        if on {
            for context in contexts {
                context.wakeup();
            }
            self.inner.pool_went_idle();
        }
    }

    /// Whether auto-advance is on.
    pub fn auto_advance(&self) -> bool {
        self.inner.lock().auto
    }

    /// How many timers wait on the clock now.
    pub fn pending_timers(&self) -> usize {
        self.inner.lock().book.len()
    }

    /// The deadline of the next timer to fire, on the clock's time
    /// ([`now`](Self::now)'s scale).
    pub fn next_deadline(&self) -> Option<Instant> {
        let state = self.inner.lock();
        let (&(deadline, _), _) = state.book.first_key_value()?;
        Some(self.inner.instant_at(deadline))
    }

    /// Drives `context`'s gdex timers with this clock until the returned
    /// guard is dropped: the main context (`&glib::MainContext::default()`)
    /// for a GTK app's tasks, or a context the test iterates. Timers already
    /// waiting there keep real time; those that wait on the clock when the
    /// guard goes stay on it.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let context = glib::MainContext::new();
    /// let clock = gdex::TestClock::auto_advancing();
    /// let _driven = clock.attach(&context);
    /// let scheduler = gdex::Scheduler::for_context(&context);
    /// let task = scheduler.spawn(async {
    ///     gdex::sleep(Duration::from_secs(60)).await;
    ///     "a minute later"
    /// });
    /// while !task.is_finished() {
    ///     context.iteration(true);
    /// }
    /// assert_eq!(gdex::block_on(task).unwrap(), "a minute later");
    /// assert_eq!(clock.elapsed(), Duration::from_secs(60));
    /// ```
    ///
    /// # Panics
    /// If another clock drives `context` already, or `context` is a pool
    /// worker's (build the pool with
    /// [`ThreadPoolBuilder::clock`](crate::ThreadPoolBuilder::clock)).
    pub fn attach(&self, context: &glib::MainContext) -> ClockAttachment {
        assert!(
            !crate::pool::is_worker_context(context),
            "gdex: TestClock::attach: this context is a pool worker's; \
             build the pool with ThreadPoolBuilder::clock to drive its timers"
        );
        self.inner.drive(context, "TestClock::attach");
        let id = {
            let mut state = self.inner.lock();
            state.next_attachment += 1;
            state.next_attachment
        };
        // Its hooks find the attachment by id: until it is in the state
        // below, the probe is never ready.
        let probe = SourceRef::attach(
            context,
            Box::new(Probe {
                clock: Arc::downgrade(&self.inner),
                id,
                context: context_key(context),
            }),
            true,
            c"[gdex-test-clock]",
            i32::MAX,
            false,
        );
        self.inner.lock().contexts.push(Attached {
            id,
            context: context.clone(),
            probe,
            reported: None,
        });
        context.wakeup();
        ClockAttachment {
            clock: self.inner.clone(),
            id,
        }
    }
}

/// Removes and gives every entry of the book due at `now`, in order.
fn take_due(state: &mut State, now: i64) -> Vec<Arc<Flag>> {
    let later = state.book.split_off(&(now.saturating_add(1), 0));
    std::mem::replace(&mut state.book, later)
        .into_values()
        .collect()
}

impl fmt::Debug for TestClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.inner.lock();
        f.debug_struct("TestClock")
            .field("elapsed", &Duration::from_micros(state.elapsed as u64))
            .field("pending_timers", &state.book.len())
            .field("auto_advance", &state.auto)
            .finish()
    }
}

/// What [`TestClock::attach`] gives: the context's gdex timers wait on the
/// clock until this is dropped.
#[must_use = "the context is driven by the clock only while this lives"]
pub struct ClockAttachment {
    clock: Arc<ClockInner>,
    id: u64,
}

impl fmt::Debug for ClockAttachment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClockAttachment").finish_non_exhaustive()
    }
}

impl Drop for ClockAttachment {
    fn drop(&mut self) {
        let gone = {
            let mut state = self.clock.lock();
            let at = state.contexts.iter().position(|a| a.id == self.id);
            at.map(|at| state.contexts.swap_remove(at))
        };
        if let Some(attached) = gone {
            attached.probe.destroy();
            self.clock.let_go(&attached.context);
            // The others may have waited only for this one.
            self.clock.recheck();
        }
    }
}

impl ClockInner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock.
        self.state.lock().unpoisoned()
    }

    pub(crate) fn instant_at(&self, deadline_us: i64) -> Instant {
        let since = deadline_us.saturating_sub(self.start_us);
        let by = Duration::from_micros(since.unsigned_abs());
        if since >= 0 {
            self.start + by
        } else {
            // Before the clock was made (an `interval_at` in the past).
            self.start.checked_sub(by).unwrap_or(self.start)
        }
    }

    pub(crate) fn now(&self) -> Instant {
        self.start + Duration::from_micros(self.lock().elapsed as u64)
    }

    /// The clock's time in µs on GLib's monotonic scale.
    pub(crate) fn now_us(&self) -> i64 {
        self.start_us + self.lock().elapsed
    }

    /// Raises what a move of the clock fired, in order, outside the lock
    /// (a waker is user code).
    fn raise(&self, fired: Vec<Arc<Flag>>) {
        for flag in &fired {
            flag.raise();
        }
        drop(fired);
    }

    /// Puts `context` under this clock. `what` names the caller for the
    /// panic message.
    fn drive(&self, context: &glib::MainContext, what: &str) {
        let mut map = driven().lock().unpoisoned();
        let key = context_key(context);
        if map.get(&key).is_some_and(|c| c.strong_count() > 0) {
            panic!(
                "gdex: {what}: another TestClock drives this context already; \
                 drop its ClockAttachment (or its pool) first"
            );
        }
        if map.insert(key, self.me.clone()).is_none() {
            DRIVEN.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Takes `context` out from under this clock.
    fn let_go(&self, context: &glib::MainContext) {
        let mut map = driven().lock().unpoisoned();
        let key = context_key(context);
        let ours = map
            .get(&key)
            .is_some_and(|c| std::ptr::eq(c.as_ptr(), self));
        if ours {
            map.remove(&key);
            DRIVEN.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Registers a waiting timer: its entry number in the book.
    pub(crate) fn note(&self, deadline: i64, flag: &Arc<Flag>) -> Option<u64> {
        let mut state = self.lock();
        if deadline <= self.start_us + state.elapsed {
            return None; // due already
        }
        let entry = state.next_entry;
        state.next_entry += 1;
        state.book.insert((deadline, entry), flag.clone());
        Some(entry)
    }

    /// A timer of this clock began to wait, polled on `context`. Unless
    /// the clock drives that context, nothing tells it when the thread
    /// there idles (a timer made on a pool, awaited on the test's thread):
    /// auto-advance looks again now.
    pub(crate) fn waits_on(&self, context: &glib::MainContext) {
        let ours = for_context(context).is_some_and(|c| std::ptr::eq(Arc::as_ptr(&c), self));
        if !ours {
            self.recheck();
        }
    }

    /// A timer that waited as `(deadline, entry)` is dropped or moved.
    pub(crate) fn forget(&self, deadline: i64, entry: u64) {
        let flag = self.lock().book.remove(&(deadline, entry));
        drop(flag); // outside the lock: it may hold the last waker
    }
}

impl crate::pool::PoolClock for ClockInner {
    fn drive_pool(&self, pool: Weak<crate::pool::PoolShared>, contexts: Vec<glib::MainContext>) {
        for context in &contexts {
            self.drive(context, "ThreadPoolBuilder::clock");
        }
        {
            let mut state = self.lock();
            state.pools.push(pool);
            state.worker_contexts.extend(contexts);
        }
        self.start_driver();
    }

    fn pool_went_idle(&self) {
        ClockInner::pool_went_idle(self);
    }
}

impl crate::ThreadPoolBuilder {
    /// Drives the pool's gdex timers with a [`TestClock`](crate::TestClock)
    /// (for tests): [`sleep`](crate::sleep), [`timeout`](crate::timeout)
    /// and the other gdex timers polled in the pool's tasks wait until the
    /// clock is advanced past their deadline, or, with auto-advance, until
    /// every task of the pool waits. GLib's own timeout sources on the
    /// workers' contexts keep real time.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let clock = gdex::TestClock::paused();
    /// let pool = gdex::ThreadPool::builder().workers(1).clock(&clock).build().unwrap();
    /// let task = pool.scheduler().spawn(gdex::sleep(Duration::from_secs(600)));
    /// clock.advance(Duration::from_secs(599));
    /// clock.settle();
    /// assert!(!task.is_finished());
    /// clock.advance(Duration::from_secs(1));
    /// gdex::block_on(task).unwrap();
    /// ```
    pub fn clock(self, clock: &TestClock) -> Self {
        self.with_clock(clock.inner.clone())
    }
}

impl Drop for ClockInner {
    fn drop(&mut self) {
        let state = match self.state.get_mut() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        };
        let contexts = std::mem::take(&mut state.worker_contexts);
        for context in &contexts {
            self.let_go(context);
        }
        self.driver.stop();
    }
}
