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

/// A countdown to the next sampled event (see the module's comment).
#[derive(Clone, Copy)]
pub(crate) struct Countdown {
    /// What is left of the gap to the next sampled event, in `1 / GAP`
    /// parts of a mean gap: above 0 between events.
    left: i64,
    /// The sampling `step` is for; 0 before the first event.
    one_in: u32,
    /// `GAP / one_in`: what an event takes off `left` (at most half a
    /// gap, `one_in` being 2 or more).
    step: u32,
}

impl Countdown {
    /// A countdown that has counted nothing yet.
    pub(crate) const NEW: Countdown = Countdown {
        left: 0,
        one_in: 0,
        step: 0,
    };
}

thread_local! {
    /// This thread's countdown to the next queueing it stamps.
    static QUEUEINGS: Cell<Countdown> = const { Cell::new(Countdown::NEW) };
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
/// passes two sampled points. Out of line: drawn about once in `n`
/// events.
#[inline(never)]
fn gap() -> i64 {
    (GAP / 2 + random()) as i64
}

/// Whether the countdown `countdown` has reached the next sampled event,
/// for an event of a scheduler sampling one in `one_in` (2 or more; one in
/// 1 is every event, which callers check first).
#[inline]
pub(crate) fn take(countdown: &Cell<Countdown>, one_in: u32) -> bool {
    debug_assert!(one_in >= 2);
    let mut c = countdown.get();
    if c.one_in != one_in {
        c = retuned(c, one_in);
    }
    c.left -= i64::from(c.step);
    let taken = c.left <= 0;
    if taken {
        c.left += gap();
    }
    countdown.set(c);
    taken
}

/// `countdown` for events sampled one in `one_in`: what is left of its gap
/// stays (a gap is the same length whatever the sampling), and a fresh
/// one starts anywhere in a gap. Out of line: on a thread that queues to
/// schedulers of one sampling, this happens once.
#[inline(never)]
fn retuned(mut countdown: Countdown, one_in: u32) -> Countdown {
    if countdown.one_in == 0 {
        // Uniform in `1..=GAP`: the first event is sampled with chance
        // `step / GAP`, as any other is.
        countdown.left = random() as i64 + 1;
    }
    countdown.one_in = one_in;
    countdown.step = (GAP / u64::from(one_in)) as u32;
    countdown
}

/// Whether a task queued now on this thread is stamped, its scheduler
/// counting about one task in `one_in` (1: every one).
#[inline]
pub(crate) fn stamp_this_queueing(one_in: u32) -> bool {
    one_in == 1 || QUEUEINGS.with(|left| take(left, one_in))
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
            let countdown = Cell::new(Countdown::NEW);
            let mut gaps = Vec::new();
            let mut since = 0;
            for _ in 0..1_250 * n {
                since += 1;
                if take(&countdown, n as u32) {
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
        let countdown = Cell::new(Countdown::NEW);
        for _ in 0..1_000 {
            take(&countdown, u32::MAX);
        }
        assert_eq!(countdown.get().step, 1);
        let due = Cell::new(Countdown {
            left: 1,
            ..countdown.get()
        });
        assert!(take(&due, u32::MAX));
        assert!(due.get().left >= GAP as i64 / 2);
    }

    /// One countdown fed in turn by events of one in 2 and one in 256
    /// samples about one in 2 and one in 256 of each (256,000 each: about
    /// 128,000 and 1,000; ranges of nine standard deviations or more).
    #[test]
    fn events_of_different_samplings_are_each_sampled_one_in_their_n() {
        let countdown = Cell::new(Countdown::NEW);
        let (mut often, mut rarely) = (0, 0);
        for _ in 0..256_000 {
            often += usize::from(take(&countdown, 2));
            rarely += usize::from(take(&countdown, 256));
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
            .filter(|_| take(&Cell::new(Countdown::NEW), 16))
            .count();
        assert!((810..1_190).contains(&first), "{first}");
    }

    /// About one queueing in `n` is stamped, never two in a row by a
    /// pattern of the caller.
    #[test]
    fn about_one_queueing_in_n_is_stamped() {
        let stamped = (0..64_000).filter(|_| stamp_this_queueing(16)).count();
        assert!((3_000..5_000).contains(&stamped), "{stamped} of 64,000");
        assert!((0..10).all(|_| stamp_this_queueing(1)));
    }
}
