//! Sampled latency histograms (O1): which queueings and jobs are timed when
//! a scheduler counts about one task in `n` rather than every one.
//!
//! Timing every task costs two clock readings per task (its queueing, its
//! job's end), about 10 ns each on the machines gdex is measured on: a
//! fifth of the smallest task's spawn and run. Sampled, a thread counts
//! down between the events it times, with gaps drawn at random from 1 to
//! `2n - 1` (`n` on average): no periodic pattern of the workload (two
//! tasks waking each other in turn) can hide from it or be all it sees, as
//! a fixed period would allow. Go's runtime samples its own scheduling
//! latencies the same way (one goroutine transition in eight), for the
//! same reason.

use std::cell::Cell;

thread_local! {
    /// Queueings on this thread left before the next one is stamped.
    static QUEUEINGS: Cell<u64> = const { Cell::new(0) };
    /// This thread's random state (xorshift), seeded on first use.
    static RANDOM: Cell<u64> = const { Cell::new(0) };
}

/// A gap between two sampled events: uniform in `1..=2n - 1` (mean `n`).
#[inline(never)]
pub(crate) fn gap(one_in: u32) -> u64 {
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
    let span = u64::from(one_in) * 2 - 1;
    // Lemire's multiply-shift: `span` values, no division (`span` < 2^33,
    // so the product fits 65 bits).
    1 + ((u128::from(x >> 32) * u128::from(span)) >> 32) as u64
}

/// Whether the countdown `left` has reached the next sampled event; if
/// so, it starts over from a fresh gap.
#[inline]
pub(crate) fn take(left: &Cell<u64>, one_in: u32) -> bool {
    match left.get() {
        0 => {
            left.set(gap(one_in) - 1);
            true
        }
        n => {
            left.set(n - 1);
            false
        }
    }
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

    /// Gaps stay in `1..=2n - 1` and average `n`; one in 1 is every one,
    /// and the largest `n` neither overflows nor stalls.
    #[test]
    fn gaps_average_n_within_their_range() {
        for n in [1u32, 2, 16, 1000] {
            let draws: Vec<u64> = (0..20_000).map(|_| gap(n)).collect();
            let most = 2 * u64::from(n) - 1;
            assert!(draws.iter().all(|&g| (1..=most).contains(&g)), "n {n}");
            let mean = draws.iter().map(|&g| g as f64).sum::<f64>() / draws.len() as f64;
            assert!(
                (mean - f64::from(n)).abs() <= 0.05 * f64::from(n),
                "n {n}: mean gap {mean}"
            );
        }
        let huge: Vec<u64> = (0..1_000).map(|_| gap(u32::MAX)).collect();
        assert!(huge
            .iter()
            .all(|&g| (1..2 * u64::from(u32::MAX)).contains(&g)));
        assert!(
            huge.iter().any(|&g| g > u64::from(u32::MAX)),
            "the upper half is drawn"
        );
        let left = Cell::new(0);
        assert!((0..100).all(|_| take(&left, 1)));
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
