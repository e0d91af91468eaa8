//! Latency histograms (O1): per scheduler, how long tasks wait to be polled
//! once queued (wake-to-poll: from a task's spawn or wake-up to the start
//! of its poll) and how long each job runs (poll durations).
//!
//! Off unless asked for (`GDEX_LATENCY_HISTOGRAMS=1`,
//! [`ThreadPoolBuilder::latency_histograms`](crate::ThreadPoolBuilder::latency_histograms),
//! [`Scheduler::enable_latency_histograms`](crate::Scheduler::enable_latency_histograms)):
//! on, each queued task carries the clock's reading in its job (`task::Job`)
//! and the loop that runs it reads the clock once per job ([`Timer`]: a
//! job's end is the next one's start); off, it costs one branch on a flag
//! the scheduler already has in hand.
//!
//! The counts are kept by their one writer at a time (a pool worker; the
//! thread dispatching a context scheduler, which GLib's ownership of the
//! context serialises), in cells it alone writes: a count is a relaxed load
//! and store, not a locked read-modify-write. Readers sum them.
//!
//! Buckets are powers of two of microseconds: `[0, 1 µs)`, `[1, 2 µs)`,
//! `[2, 4 µs)`, …, `[2^19, 2^20 µs)` and `[2^20 µs ≈ 1.05 s, ∞)`: 22 of
//! them, each value counted within a factor of two, with the exact
//! largest kept beside them.

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use crate::diagnostics::sampling::Sampling;
use crate::util::Unpoisoned;

/// How many buckets a [`LatencyHistogram`] has.
pub(crate) const BUCKETS: usize = 22;

/// The bucket of a duration of `ns` nanoseconds.
#[inline]
fn bucket_of_nanos(ns: u64) -> usize {
    let micros = ns / 1_000;
    ((u64::BITS - micros.leading_zeros()) as usize).min(BUCKETS - 1)
}

/// The counts of one kind of latency, by one writer at a time.
#[derive(Default)]
struct Cells {
    counts: [AtomicU64; BUCKETS],
    /// The largest value counted, in clock ticks.
    max: AtomicU64,
}

impl Cells {
    /// Counts a value of `ticks` clock ticks, `micros_fp` being
    /// [`clock::micros_fp`](crate::util::clock::micros_fp). Only the cells'
    /// writer of the moment calls this (see the module's comment).
    #[inline]
    fn count(&self, ticks: u64, micros_fp: u64) {
        // Saturates past about an hour: the last bucket all the same.
        let micros = ticks.saturating_mul(micros_fp) >> 32;
        let bucket = ((u64::BITS - micros.leading_zeros()) as usize).min(BUCKETS - 1);
        let cell = &self.counts[bucket];
        cell.store(cell.load(Relaxed).wrapping_add(1), Relaxed);
        if ticks > self.max.load(Relaxed) {
            self.max.store(ticks, Relaxed);
        }
    }

    fn read(&self) -> LatencyHistogram {
        LatencyHistogram {
            counts: std::array::from_fn(|i| self.counts[i].load(Relaxed)),
            max_ns: crate::util::clock::nanos(self.max.load(Relaxed)),
        }
    }
}

/// One writer's histograms: a pool worker's, or a context scheduler's.
pub(crate) struct Recorder {
    /// [`clock::micros_fp`](crate::util::clock::micros_fp), read once.
    micros_fp: u64,
    wake_to_poll: Cells,
    polls: Cells,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            micros_fp: crate::util::clock::micros_fp(),
            wake_to_poll: Cells::default(),
            polls: Cells::default(),
        }
    }
}

impl Recorder {
    /// A job's run took `ticks` clock ticks (`util::clock`).
    #[inline]
    pub(crate) fn poll_took(&self, ticks: u64) {
        self.polls.count(ticks, self.micros_fp);
    }

    /// A task waited `ticks` clock ticks between being queued and its
    /// poll's start.
    #[inline]
    pub(crate) fn waited(&self, ticks: u64) {
        self.wake_to_poll.count(ticks, self.micros_fp);
    }

    /// A job started at clock reading `started` and ended at `ended`; its
    /// task was stamped `queued` (`Job::queued_at`), if it was.
    #[inline]
    pub(crate) fn job_ran(&self, started: u64, ended: u64, queued: Option<u64>) {
        self.poll_took(ended.saturating_sub(started));
        if let Some(queued) = queued {
            // Stamped on another thread perhaps, whose clock may read a
            // little ahead: a wait of 0 then, never a wrapped difference.
            self.waited(started.saturating_sub(queued));
        }
    }

    /// The wake-to-poll histogram so far.
    pub(crate) fn wake_to_poll(&self) -> LatencyHistogram {
        self.wake_to_poll.read()
    }

    /// The poll-duration histogram so far.
    pub(crate) fn poll_durations(&self) -> LatencyHistogram {
        self.polls.read()
    }
}

/// Times the jobs of one dispatch of a context scheduler into its
/// [`Recorder`], with one clock reading per job: a job ends where the next
/// one starts, unless the loop found no job in between (then its state is
/// not `fresh`), when the next start is read afresh. So a job's time
/// includes the look that found it (a queue pop: well under a microsecond,
/// the first bucket's width), and a task's wait ends where that look
/// began. A pool worker times its jobs the same way, with its state in
/// thread-locals (`pool::latency`).
pub(crate) struct Timer<'a> {
    recorder: &'a Recorder,
    /// The clock's reading at the last job's end (or the loop's start).
    last: u64,
    /// `last` is where the next job starts: no search came up empty since.
    fresh: bool,
}

impl<'a> Timer<'a> {
    /// A loop timed into `recorder` starts: at `now` if the caller has
    /// just read the clock, else at its first job.
    #[inline]
    pub(crate) fn new(recorder: &'a Recorder, now: Option<u64>) -> Self {
        Timer {
            recorder,
            last: now.unwrap_or(0),
            fresh: now.is_some(),
        }
    }

    /// Runs a job (`run`), counting how long it ran and, if its task was
    /// stamped `queued` (`Job::queued_at`), how long the task waited since;
    /// gives the clock's reading at its end.
    #[inline]
    pub(crate) fn run(&mut self, queued: Option<u64>, run: impl FnOnce()) -> u64 {
        let started = if self.fresh {
            self.last
        } else {
            crate::util::clock::now()
        };
        run();
        let ended = crate::util::clock::now();
        self.recorder.job_ran(started, ended, queued);
        self.last = ended;
        self.fresh = true;
        ended
    }
}

/// A histogram of latencies: wake-to-poll times or poll durations (O1),
/// from [`PoolMetrics`](crate::PoolMetrics), [`WorkerMetrics`](crate::WorkerMetrics)
/// or [`SchedulerMetrics`].
///
/// Its [`BUCKETS`](Self::BUCKETS) buckets are powers of two of microseconds (`[0, 1 µs)`,
/// `[1, 2 µs)`, `[2, 4 µs)`, …, the last from 2^20 µs, about 1.05 s, on),
/// so a value is known within a factor of two; the largest value counted is
/// kept exactly. Counts only grow: compare two snapshots with
/// [`since`](Self::since) to see what happened between them.
///
/// ```
/// use std::time::Duration;
/// use gdex::LatencyHistogram;
/// // 20 ms falls in [16.384 ms, 32.768 ms).
/// let bucket = LatencyHistogram::bucket_of(Duration::from_millis(20));
/// assert_eq!(
///     LatencyHistogram::bucket_range(bucket),
///     Duration::from_micros(16_384)..Duration::from_micros(32_768)
/// );
/// // An empty histogram has no percentiles.
/// assert_eq!(LatencyHistogram::default().p99(), None);
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct LatencyHistogram {
    counts: [u64; BUCKETS],
    max_ns: u64,
}

impl LatencyHistogram {
    /// How many buckets there are.
    pub const BUCKETS: usize = BUCKETS;

    /// The durations bucket `bucket` counts: `start..end`, the last one
    /// ending at `Duration::MAX`.
    ///
    /// # Panics
    /// If `bucket` is [`BUCKETS`](Self::BUCKETS) or more.
    pub fn bucket_range(bucket: usize) -> Range<Duration> {
        assert!(
            bucket < BUCKETS,
            "gdex: LatencyHistogram::bucket_range({bucket}): there are {BUCKETS} buckets, \
             numbered from 0"
        );
        let edge = |k: usize| match k {
            0 => Duration::ZERO,
            BUCKETS => Duration::MAX,
            k => Duration::from_micros(1 << (k - 1)),
        };
        edge(bucket)..edge(bucket + 1)
    }

    /// The bucket that counts `duration`.
    pub fn bucket_of(duration: Duration) -> usize {
        bucket_of_nanos(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX))
    }

    /// The count of each bucket, by bucket.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// Each bucket's range and count, in order.
    pub fn buckets(&self) -> impl Iterator<Item = (Range<Duration>, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .map(|(i, &count)| (Self::bucket_range(i), count))
    }

    /// How many values were counted.
    pub fn count(&self) -> u64 {
        self.counts
            .iter()
            .fold(0u64, |sum, &c| sum.saturating_add(c))
    }

    /// True if nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }

    /// The largest value counted, exactly; `None` if nothing was.
    pub fn max(&self) -> Option<Duration> {
        (!self.is_empty()).then(|| Duration::from_nanos(self.max_ns))
    }

    /// An upper bound of the `p`th percentile (`p` from 0 to 100): the end
    /// of the bucket that holds it, or the largest value if that is
    /// smaller; so at most twice the true figure. `None` if nothing was
    /// counted.
    ///
    /// # Panics
    /// If `p` is not a number from 0 to 100.
    pub fn percentile(&self, p: f64) -> Option<Duration> {
        assert!(
            (0.0..=100.0).contains(&p),
            "gdex: LatencyHistogram::percentile({p}): a percentile is from 0 to 100"
        );
        let total = self.count();
        if total == 0 {
            return None;
        }
        // The rank of the value asked for, from 1.
        let rank = ((p / 100.0 * total as f64).ceil() as u64).clamp(1, total);
        let max = Duration::from_nanos(self.max_ns);
        let mut seen = 0u64;
        for (i, &count) in self.counts.iter().enumerate() {
            seen = seen.saturating_add(count);
            if seen >= rank {
                return Some(Self::bucket_range(i).end.min(max));
            }
        }
        Some(max)
    }

    /// [`percentile(50.0)`](Self::percentile): an upper bound of the median.
    pub fn p50(&self) -> Option<Duration> {
        self.percentile(50.0)
    }

    /// [`percentile(99.0)`](Self::percentile).
    pub fn p99(&self) -> Option<Duration> {
        self.percentile(99.0)
    }

    /// Adds `other`'s counts to these (the largest value is the larger).
    pub fn merge(&mut self, other: &LatencyHistogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts) {
            *mine = mine.saturating_add(theirs);
        }
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// What was counted after `earlier`, an older snapshot of the same
    /// histogram. The largest value is the largest so far: it is not known
    /// for the interval alone.
    pub fn since(&self, earlier: &LatencyHistogram) -> LatencyHistogram {
        LatencyHistogram {
            counts: std::array::from_fn(|i| self.counts[i].saturating_sub(earlier.counts[i])),
            max_ns: self.max_ns,
        }
    }

    /// Counts `duration` (for tests, and for sums made by hand).
    #[cfg(test)]
    pub(crate) fn record(&mut self, duration: Duration) {
        let ns = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        let count = &mut self.counts[bucket_of_nanos(ns)];
        *count = count.saturating_add(1);
        self.max_ns = self.max_ns.max(ns);
    }
}

/// Only the buckets that counted something.
impl fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Buckets<'a>(&'a LatencyHistogram);
        impl fmt::Debug for Buckets<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_map()
                    .entries(self.0.buckets().filter(|(_, count)| *count > 0))
                    .finish()
            }
        }
        f.debug_struct("LatencyHistogram")
            .field("count", &self.count())
            .field("max", &self.max())
            .field("buckets", &Buckets(self))
            .finish()
    }
}

/// `"1234, p50 ≤ 8 µs, p99 ≤ 64 µs, max 210 µs"`, or `"none"`.
impl fmt::Display for LatencyHistogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.p50(), self.p99(), self.max()) {
            (Some(p50), Some(p99), Some(max)) => write!(
                f,
                "{}, p50 ≤ {}, p99 ≤ {}, max {}",
                self.count(),
                Short(p50),
                Short(p99),
                Short(max)
            ),
            _ => f.write_str("none"),
        }
    }
}

/// A duration in a few characters: `850 ns`, `64 µs`, `1.5 ms`, `2.25 s`.
struct Short(Duration);

impl fmt::Display for Short {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0.as_nanos();
        match ns {
            0..1_000 => write!(f, "{ns} ns"),
            1_000..1_000_000 => write!(f, "{} µs", ns / 1_000),
            1_000_000..1_000_000_000 => write!(f, "{:.1} ms", ns as f64 / 1e6),
            _ => write!(f, "{:.2} s", ns as f64 / 1e9),
        }
    }
}

/// A scheduler's latency histograms (O1), from
/// [`Scheduler::metrics`](crate::Scheduler::metrics) (and, for every
/// scheduler that has them on, in [`dump`](crate::dump)).
///
/// On a pool they are the sums of its workers' (which
/// [`ThreadPool::metrics`](crate::ThreadPool::metrics) gives one by one).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchedulerMetrics {
    /// The scheduler, as its `Debug` names it (`"Scheduler::Main"`).
    pub scheduler: String,
    /// Whether its latency histograms are on: off, they stay empty.
    pub latency_histograms: bool,
    /// How many tasks they count: 1, every one; `n`, about one in `n`
    /// ([`Scheduler::enable_sampled_latency_histograms`](crate::Scheduler::enable_sampled_latency_histograms));
    /// 0 while off.
    pub sampling: u32,
    /// From each task's spawn or wake-up to the start of its poll: how
    /// long it waited in the scheduler's queues. Sampled, about one
    /// queueing in [`sampling`](Self::sampling).
    pub wake_to_poll: LatencyHistogram,
    /// How long each job ran: a task's poll, a work item, a fiber's
    /// resumption on a pool worker (with the resumptions it hands straight
    /// on to, which run as one job). Sampled, on a pool: the jobs of the
    /// sampled queueings and about one other job in
    /// [`sampling`](Self::sampling); on a context scheduler every job (its
    /// dispatch reads the clock after each job anyway).
    pub poll_durations: LatencyHistogram,
}

/// `"Scheduler::Main: wake-to-poll 1234, p50 ≤ 8 µs, p99 ≤ 64 µs, max 210
/// µs; poll 1240, p50 ≤ 4 µs, p99 ≤ 16 µs, max 20.3 ms"`: the dump's line
/// (`"Scheduler::Main, about 1 in 16 sampled: …"` when sampled).
impl fmt::Display for SchedulerMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.scheduler)?;
        if self.sampling > 1 {
            write!(f, ", about 1 in {} sampled", self.sampling)?;
        }
        write!(
            f,
            ": wake-to-poll {}; poll {}",
            self.wake_to_poll, self.poll_durations
        )
    }
}

/// A scheduler whose histograms can be read and shown (its dump line, its
/// Sysprof counters).
pub(crate) trait LatencySource: Send + Sync {
    /// Its histograms now.
    fn latency_metrics(&self) -> SchedulerMetrics;
    /// A short name for Sysprof's counters: `"pool"`, `"main"`, `"context"`.
    #[cfg_attr(not(feature = "sysprof"), allow(dead_code))]
    fn short_name(&self) -> &'static str;
}

/// Whether a scheduler's histograms are on, and how many tasks they count:
/// one word in the scheduler, beside the flags its hot path reads (0: off;
/// 1: every task; `n`: about one in `n`, `sampling`); the rest of what the
/// histograms need is elsewhere ([`Recorder`]s, the list of [`listed`]
/// schedulers).
#[derive(Default)]
pub(crate) struct Switch(AtomicU64);

impl Switch {
    /// Are the histograms on? A relaxed load.
    #[inline]
    pub(crate) fn is_on(&self) -> bool {
        self.load().is_on()
    }

    /// 0 if the histograms are off, else about one task in how many they
    /// count (1: every one). A relaxed load.
    #[inline]
    pub(crate) fn sampling(&self) -> u32 {
        self.load().one_in
    }

    /// The sampling as the hot path uses it (one load: the rate and its
    /// countdown step).
    #[inline]
    pub(crate) fn load(&self) -> Sampling {
        Sampling::unpack(self.0.load(Relaxed))
    }

    /// Turns the histograms of `source` (whose switch this is) on, for
    /// good, counting about one task in `one_in` (at least 1, checked by
    /// the public calls; a later call changes it); the first time, lists
    /// it for the dump and the views.
    pub(crate) fn turn_on(&self, source: Weak<dyn LatencySource>, one_in: u32) {
        debug_assert!(one_in >= 1);
        if self.0.swap(Sampling::new(one_in).pack(), Relaxed) != 0 {
            return;
        }
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = NEXT.fetch_add(1, Relaxed);
        let mut sources = sources().lock().unpoisoned();
        sources.retain(|(_, s)| s.strong_count() > 0);
        sources.push((id, source));
    }
}

/// Checks the `one_in` of a public call that turns sampled histograms on.
///
/// # Panics
/// If it is 0, naming `call`.
pub(crate) fn check_one_in(call: &str, one_in: u32) {
    assert!(
        one_in >= 1,
        "gdex: {call}(0): a sample of one task in 0 means nothing; pass 1 to count every \
         task, or n > 1 to count about one in n"
    );
}

/// The schedulers whose histograms are on, each with its number (from 1),
/// in the order they were turned on. Weak: a listed scheduler ends as it
/// would have.
type Sources = Mutex<Vec<(u64, Weak<dyn LatencySource>)>>;

fn sources() -> &'static Sources {
    static SOURCES: OnceLock<Sources> = OnceLock::new();
    SOURCES.get_or_init(Default::default)
}

/// A live scheduler whose histograms are on, as [`listed`] gives it.
pub(crate) struct Listed {
    /// Its number among those turned on, from 1.
    #[cfg_attr(not(feature = "sysprof"), allow(dead_code))]
    pub(crate) id: u64,
    /// Its short name ([`LatencySource::short_name`]).
    #[cfg_attr(not(feature = "sysprof"), allow(dead_code))]
    pub(crate) short: &'static str,
    pub(crate) metrics: SchedulerMetrics,
}

/// Every live scheduler whose histograms are on, in the order they were
/// turned on.
pub(crate) fn listed() -> Vec<Listed> {
    // Upgraded under the lock, read and let go after it: reading is gdex's
    // own code, but a last reference dropped here ends its scheduler.
    let live: Vec<(u64, Arc<dyn LatencySource>)> = sources()
        .lock()
        .unpoisoned()
        .iter()
        .filter_map(|(id, s)| Some((*id, s.upgrade()?)))
        .collect();
    live.iter()
        .map(|(id, s)| Listed {
            id: *id,
            short: s.short_name(),
            metrics: s.latency_metrics(),
        })
        .collect()
}

/// `GDEX_LATENCY_HISTOGRAMS=1` (or `true`/`yes`/`on`) turns every
/// scheduler's histograms on from its start, counting every task;
/// `GDEX_LATENCY_HISTOGRAMS=1/n` (`n` ≥ 1) counts about one task in `n`;
/// `0`/`false`/`no`/`off` or unset leaves them off; anything else is
/// reported once with `g_warning` and ignored. 0: off; else the sampling.
pub(crate) fn on_by_default() -> u32 {
    static DEFAULT: OnceLock<u32> = OnceLock::new();
    *DEFAULT.get_or_init(|| {
        crate::util::env_setting(
            "GDEX_LATENCY_HISTOGRAMS",
            "a usable setting (use 1 to count every task, 1/16 to count about one in 16, \
             or 0)",
            || "latency histograms stay off".to_owned(),
            parse_setting,
        )
        .unwrap_or(0)
    })
}

/// `GDEX_LATENCY_HISTOGRAMS`'s value: 0 (off), 1 (every task) or `n`
/// (about one in `n`), or `None` if it is none of its forms.
fn parse_setting(text: &str) -> Option<u32> {
    match text.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(1),
        "0" | "false" | "no" | "off" | "" => Some(0),
        other => {
            let n: u32 = other.strip_prefix("1/")?.trim().parse().ok()?;
            (n >= 1).then_some(n)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// The buckets: 0 and everything under 1 µs in the first, powers of
    /// two of microseconds after, and everything from 2^20 µs on
    /// (`u64::MAX` nanoseconds, `Duration::MAX`) in the last.
    #[test]
    fn values_fall_in_power_of_two_buckets_from_0_to_the_largest() {
        assert_eq!(LatencyHistogram::bucket_of(Duration::ZERO), 0);
        assert_eq!(LatencyHistogram::bucket_of(Duration::from_nanos(999)), 0);
        assert_eq!(LatencyHistogram::bucket_of(us(1)), 1);
        assert_eq!(LatencyHistogram::bucket_of(us(3)), 2);
        assert_eq!(LatencyHistogram::bucket_of(us(4)), 3);
        assert_eq!(
            LatencyHistogram::bucket_of(Duration::from_millis(20)),
            15,
            "20 ms is in [16.384, 32.768) ms"
        );
        assert_eq!(LatencyHistogram::bucket_range(15), us(16_384)..us(32_768));
        assert_eq!(LatencyHistogram::bucket_of(us((1 << 20) - 1)), 20);
        assert_eq!(LatencyHistogram::bucket_of(us(1 << 20)), BUCKETS - 1);
        assert_eq!(
            LatencyHistogram::bucket_of(Duration::from_nanos(u64::MAX)),
            BUCKETS - 1
        );
        assert_eq!(LatencyHistogram::bucket_of(Duration::MAX), BUCKETS - 1);
        assert_eq!(LatencyHistogram::bucket_range(0), Duration::ZERO..us(1));
        assert_eq!(
            LatencyHistogram::bucket_range(BUCKETS - 1),
            us(1 << 20)..Duration::MAX
        );
        // The ranges tile the line: each starts where the last ended.
        for k in 1..BUCKETS {
            assert_eq!(
                LatencyHistogram::bucket_range(k - 1).end,
                LatencyHistogram::bucket_range(k).start
            );
        }
    }

    #[test]
    #[should_panic(expected = "there are 22 buckets")]
    fn a_bucket_past_the_last_is_refused() {
        let _ = LatencyHistogram::bucket_range(BUCKETS);
    }

    #[test]
    #[should_panic(expected = "a percentile is from 0 to 100")]
    fn a_percentile_above_100_is_refused() {
        let _ = LatencyHistogram::default().percentile(101.0);
    }

    /// An empty histogram has no percentiles and no largest value.
    #[test]
    fn an_empty_histogram_has_no_percentiles() {
        let empty = LatencyHistogram::default();
        assert!(empty.is_empty());
        assert_eq!(empty.count(), 0);
        assert_eq!((empty.p50(), empty.p99(), empty.max()), (None, None, None));
        assert_eq!(empty.percentile(0.0), None);
        assert_eq!(empty.percentile(100.0), None);
        assert_eq!(empty.to_string(), "none");
    }

    /// Percentiles are the end of the bucket holding them, capped by the
    /// largest value; 0 and 100 are the first and the largest.
    #[test]
    fn percentiles_are_bucket_ends_capped_by_the_largest() {
        let mut h = LatencyHistogram::default();
        for _ in 0..98 {
            h.record(us(5)); // [4, 8) µs
        }
        h.record(us(100)); // [64, 128) µs
        h.record(Duration::from_millis(20)); // [16.384, 32.768) ms
        assert_eq!(h.count(), 100);
        assert_eq!(h.p50(), Some(us(8)));
        assert_eq!(h.percentile(98.0), Some(us(8)));
        assert_eq!(h.p99(), Some(us(128)));
        assert_eq!(h.percentile(100.0), Some(Duration::from_millis(20)));
        assert_eq!(h.percentile(0.0), Some(us(8)));
        assert_eq!(h.max(), Some(Duration::from_millis(20)));
        assert_eq!(h.to_string(), "100, p50 ≤ 8 µs, p99 ≤ 128 µs, max 20.0 ms");
        // One value: every percentile is that value (its bucket's end is
        // larger).
        let mut one = LatencyHistogram::default();
        one.record(us(5));
        assert_eq!((one.p50(), one.p99()), (Some(us(5)), Some(us(5))));
    }

    /// Zero and `u64::MAX` nanoseconds are counted, the largest exactly;
    /// sums saturate rather than wrap.
    #[test]
    fn zero_and_the_largest_durations_are_counted() {
        let mut h = LatencyHistogram::default();
        h.record(Duration::ZERO);
        assert_eq!(
            (h.count(), h.p50(), h.max()),
            (1, Some(Duration::ZERO), Some(Duration::ZERO))
        );
        h.record(Duration::from_nanos(u64::MAX));
        assert_eq!(h.counts()[BUCKETS - 1], 1);
        assert_eq!(h.max(), Some(Duration::from_nanos(u64::MAX)));
        assert_eq!(h.percentile(100.0), Some(Duration::from_nanos(u64::MAX)));
        h.record(Duration::MAX);
        assert_eq!(h.counts()[BUCKETS - 1], 2);
        let mut big = h.clone();
        big.counts[0] = u64::MAX;
        big.merge(&h);
        assert_eq!(big.count(), u64::MAX);
        assert_eq!(big.since(&h).counts()[BUCKETS - 1], 2);
        assert!(big.since(&big).is_empty());
    }

    /// A timer counts each job it runs in its recorder, from clock ticks,
    /// a job ending where the next starts unless the loop went idle
    /// between; a stamp later than the poll's start (another core's
    /// clock) is a wait of 0.
    #[test]
    fn a_timer_counts_each_job_and_a_stamp_from_ahead_is_no_wait() {
        use crate::task::{builder, Job};
        let recorder = Recorder::default();
        let twenty = crate::util::clock::ticks(Duration::from_millis(20));
        recorder.poll_took(twenty);
        recorder.waited(0);
        let job = |queued: Option<u64>| {
            let (runnable, task) = builder().spawn(|_| async {}, |_| {});
            let mut job = Job::task(runnable);
            if let Some(at) = queued {
                job.stamp(at);
            }
            (job, task)
        };
        let mut timer = Timer::new(&recorder, None);
        let ahead = crate::util::clock::now() + twenty * 50;
        let (first, t1) = job(Some(ahead));
        let ended = timer.run(first.queued_at(), move || first.run());
        assert!(t1.is_finished());
        assert!(ended > 0);
        let (second, _t2) = job(None);
        // The loop went idle: the next start is read afresh.
        let mut timer = Timer::new(&recorder, None);
        timer.run(second.queued_at(), move || second.run());
        let polls = recorder.poll_durations();
        assert_eq!(polls.count(), 3);
        assert_eq!(polls.counts()[15], 1, "{polls:?}");
        let waits = recorder.wake_to_poll();
        assert_eq!(waits.count(), 2, "the unstamped job has no wait: {waits:?}");
        assert_eq!(waits.counts()[0], 2, "{waits:?}");
        assert_eq!(waits.max(), Some(Duration::ZERO));
    }

    /// The dump's line for a scheduler.
    #[test]
    fn a_schedulers_line_says_both_histograms() {
        let mut m = SchedulerMetrics {
            scheduler: "Scheduler::Main".into(),
            latency_histograms: true,
            sampling: 1,
            ..Default::default()
        };
        m.wake_to_poll.record(us(3));
        m.poll_durations.record(Duration::from_millis(2));
        assert_eq!(
            m.to_string(),
            "Scheduler::Main: wake-to-poll 1, p50 ≤ 3 µs, p99 ≤ 3 µs, max 3 µs; \
             poll 1, p50 ≤ 2.0 ms, p99 ≤ 2.0 ms, max 2.0 ms"
        );
        m.sampling = 16;
        assert!(
            m.to_string()
                .starts_with("Scheduler::Main, about 1 in 16 sampled: wake-to-poll 1,"),
            "{m}"
        );
    }

    /// `GDEX_LATENCY_HISTOGRAMS`'s forms: on, off, one in `n`; anything
    /// else (one in 0 included) is no setting.
    #[test]
    fn the_environments_setting_reads_on_off_and_one_in_n() {
        for (text, parsed) in [
            ("1", Some(1)),
            ("ON", Some(1)),
            ("0", Some(0)),
            ("off", Some(0)),
            ("", Some(0)),
            ("1/16", Some(16)),
            ("1/ 64", Some(64)),
            ("1/1", Some(1)),
            ("1/0", None),
            ("1/x", None),
            ("16", None),
            ("2/16", None),
        ] {
            assert_eq!(parse_setting(text), parsed, "{text:?}");
        }
    }
}
