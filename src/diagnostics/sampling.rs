//! Sampled latency histograms (O1): which queueings and jobs are timed when
//! a scheduler counts about one task in `n` rather than every one.
//!
//! Timing every task costs two clock readings per task (its queueing, its
//! job's end), about 10 ns each on the machines gdex is measured on: a
//! fifth of the smallest task's spawn and run. Sampled, a thread counts
//! down between the events it times, with gaps drawn at random (about
//! `n / 2` to `3n / 2` events, `n` on average): no periodic pattern of the
//! workload (two tasks waking each other in turn) can hide from it or be
//! all it sees, as a fixed period would allow. (Go's runtime samples its
//! scheduling latencies too, one goroutine transition in eight, with a
//! fixed period from a random start per goroutine.)
//!
//! One countdown serves every scheduler a thread queues to, whatever each
//! one's `n`: it counts in fractions of a gap, and an event of a scheduler
//! sampling one in `n` takes `1/n` of a gap off it. So each scheduler's
//! events are sampled about one in its own `n` (a countdown in events, each
//! gap drawn for whichever scheduler took the last sample, gave a
//! scheduler fed in turn with one that samples more often a small fraction
//! of its share, and the other far more than its own). A thread's first
//! countdown starts at a random point of a gap, so its first event is
//! sampled with the same chance as any other (a thread that queues one
//! task and exits is no likelier to be sampled).

use std::cell::Cell;

/// A gap, in the countdown's fixed point.
const GAP: u64 = 1 << 32;

/// A scheduler's sampling as its hot path reads it, in one word: about one
/// task in `one_in` (0: off; 1: every one), and what each of its events
/// takes off a countdown (`GAP / one_in`: at most half a gap, `one_in`
/// being 2 or more; 0 when `one_in` is 0 or 1, which never count down).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sampling {
    pub(crate) one_in: u32,
    step: u32,
}

impl Sampling {
    /// About one in `one_in` (0: off; 1: every one).
    pub(crate) const fn new(one_in: u32) -> Sampling {
        let step = if one_in >= 2 {
            (GAP / one_in as u64) as u32
        } else {
            0
        };
        Sampling { one_in, step }
    }

    /// The word a scheduler's switch keeps.
    pub(crate) const fn pack(self) -> u64 {
        self.one_in as u64 | (self.step as u64) << 32
    }

    /// The sampling a switch's word holds.
    #[inline]
    pub(crate) const fn unpack(word: u64) -> Sampling {
        Sampling {
            one_in: word as u32,
            step: (word >> 32) as u32,
        }
    }

    /// Whether the histograms are on.
    #[inline]
    pub(crate) const fn is_on(self) -> bool {
        self.one_in != 0
    }
}

/// A countdown to the next sampled event, in `1 / GAP` parts of a mean
/// gap: above 0 between events, 0 before the first.
pub(crate) type Countdown = Cell<i64>;

thread_local! {
    /// This thread's countdown to the next queueing it stamps.
    static QUEUEINGS: Countdown = const { Cell::new(0) };
    /// This thread's random state (xorshift), seeded on first use.
    static RANDOM: Cell<u64> = const { Cell::new(0) };
}

/// 32 random bits from this thread's generator.
fn random() -> u64 {
    let mut x = RANDOM.get();
    if x == 0 {
        // Seeded from this thread's identity and the clock: threads draw
        // apart; never 0 (xorshift's one fixed point).
        x = (crate::util::thread_token().wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ crate::util::clock::now())
            | 1;
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    RANDOM.set(x);
    x >> 32
}

/// A gap between two sampled events, in `1 / GAP` parts of a mean gap:
/// uniform in `GAP / 2 .. 3 * GAP / 2` (mean `GAP`). At least half a gap,
/// so at one in 2 or more (a step of half a gap or less) one event never
/// passes two sampled points.
fn gap() -> i64 {
    (GAP / 2 + random()) as i64
}

/// Whether `countdown` has reached the next sampled event, for an event of
/// a scheduler sampling `sampling` (one in 2 or more; one in 1 is every
/// event, which callers check first). The fast path is a subtraction and
/// a branch; the rest is out of line, about once in `n` events.
#[inline]
pub(crate) fn take(countdown: &Countdown, sampling: Sampling) -> bool {
    debug_assert!(sampling.one_in >= 2);
    let step = i64::from(sampling.step);
    let left = countdown.get() - step;
    if left > 0 {
        countdown.set(left);
        return false;
    }
    reached(countdown, left, step)
}

/// `countdown` reached 0 or below (`left`, after an event of `step`): a
/// sampled event and a new gap; or, if it had not started (it was 0, and
/// between events it is above 0, so only then is `left` exactly `-step`),
/// a start at a random point of a gap, so that a thread's first event is
/// sampled with chance `step / GAP`, as any other.
#[inline(never)]
fn reached(countdown: &Countdown, left: i64, step: i64) -> bool {
    let left = if left == -step {
        // Uniform in `1..=GAP`, then this event.
        random() as i64 + 1 - step
    } else {
        left
    };
    if left > 0 {
        countdown.set(left);
        return false;
    }
    countdown.set(left + gap());
    true
}

/// Whether a task queued now on this thread is stamped, its scheduler
/// sampling `sampling` (on: one in 1 is every task).
#[inline]
pub(crate) fn stamp_this_queueing(sampling: Sampling) -> bool {
    sampling.one_in == 1 || QUEUEINGS.with(|left| take(left, sampling))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gaps stay within half a gap either side of one and average one: at
    /// one in `n`, `n / 2 - 1` to `3n / 2 + 1` events apart, `n` on
    /// average (means within 5%: more than five standard deviations of
    /// 1,250 gaps).
    #[test]
    fn gaps_average_n_within_their_range() {
        let draws: Vec<i64> = (0..20_000).map(|_| gap()).collect();
        let (low, high) = (GAP as i64 / 2, 3 * GAP as i64 / 2);
        assert!(draws.iter().all(|g| (low..high).contains(g)));
        let mean = draws.iter().map(|&g| g as f64).sum::<f64>() / draws.len() as f64;
        assert!((mean / GAP as f64 - 1.0).abs() <= 0.01, "mean gap {mean}");
        for n in [2u64, 16, 1000] {
            let countdown: Countdown = Cell::new(0);
            let mut gaps = Vec::new();
            let mut since = 0;
            for _ in 0..1_250 * n {
                since += 1;
                if take(&countdown, Sampling::new(n as u32)) {
                    gaps.push(since);
                    since = 0;
                }
            }
            // The first is from a random point of a gap.
            let later = &gaps[1..];
            let range = (n / 2).saturating_sub(1).max(1)..=3 * n / 2 + 1;
            assert!(later.iter().all(|g| range.contains(g)), "n {n}");
            let mean = later.iter().sum::<u64>() as f64 / later.len() as f64;
            assert!((mean - n as f64).abs() <= 0.05 * n as f64, "n {n}: {mean}");
        }
    }

    /// The largest sampling takes one part of a gap an event, and neither
    /// overflows nor stalls at a sampled event.
    #[test]
    fn one_in_u32_max_neither_overflows_nor_stalls() {
        let countdown: Countdown = Cell::new(0);
        let most = Sampling::new(u32::MAX);
        for _ in 0..1_000 {
            take(&countdown, most);
        }
        assert_eq!(most.step, 1);
        let due: Countdown = Cell::new(1);
        assert!(take(&due, most));
        assert!(due.get() >= GAP as i64 / 2);
    }

    /// One countdown fed in turn by events of one in 2 and one in 256
    /// samples about one in 2 and one in 256 of each (256,000 each: about
    /// 128,000 and 1,000; ranges of nine standard deviations or more).
    #[test]
    fn events_of_different_samplings_are_each_sampled_one_in_their_n() {
        let countdown: Countdown = Cell::new(0);
        let (mut often, mut rarely) = (0, 0);
        for _ in 0..256_000 {
            often += usize::from(take(&countdown, Sampling::new(2)));
            rarely += usize::from(take(&countdown, Sampling::new(256)));
        }
        assert!((124_000..132_000).contains(&often), "{often}");
        assert!((700..1_300).contains(&rarely), "{rarely}");
    }

    /// A fresh countdown's first event is sampled one time in `n`, as any
    /// other: of 16,000 fresh countdowns at one in 16, about 1,000 take
    /// their first (Binomial: deviation 31; the range is six either side).
    #[test]
    fn a_fresh_countdowns_first_event_is_sampled_one_time_in_n() {
        let first = (0..16_000)
            .filter(|_| take(&Cell::new(0), Sampling::new(16)))
            .count();
        assert!((810..1_190).contains(&first), "{first}");
    }

    /// About one queueing in `n` is stamped, never two in a row by a
    /// pattern of the caller.
    #[test]
    fn about_one_queueing_in_n_is_stamped() {
        let stamped = (0..64_000)
            .filter(|_| stamp_this_queueing(Sampling::new(16)))
            .count();
        assert!((3_000..5_000).contains(&stamped), "{stamped} of 64,000");
        assert!((0..10).all(|_| stamp_this_queueing(Sampling::new(1))));
    }
}
