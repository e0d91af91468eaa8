//! P10 with B5: a pool worker sent a wake-up that it has not acted on (its
//! thread busy outside its run slice, in another source of its context)
//! is watched by the monitor: what waits for it goes to a peer, and past
//! the threshold it is reported once.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{monitor, Runner, HAND_OVER_AFTER};
use crate::util::Unpoisoned;

/// A pool worker was sent a wake-up that may not be acted on soon (P10: it
/// is parked, but its thread is busy in another source of its context):
/// the monitor, if it sleeps for good, wakes and looks at every worker, and
/// keeps looking while one holds a wake-up ([`check_wake_up`]).
pub(crate) fn look() {
    // Pairs with the monitor's park: either it sees the wake-up held, or
    // we see it parked and wake it.
    std::sync::atomic::fence(Ordering::SeqCst);
    monitor().wake();
}

pub(super) fn holds_wake_up(runner: &Runner) -> bool {
    runner.worker.as_ref().is_some_and(|w| w.holds_wake_up())
}

/// A worker sent a wake-up that it has not acted on (B5, P10): its thread
/// is busy outside its run slice (in another source of its context: a GLib
/// callback, a task of a context scheduler made for it), or its poll did
/// not return. Past [`HAND_OVER_AFTER`], what may wait for it in its deque
/// or the injector goes to a peer (the request it holds was for that; in
/// thread-per-core mode only the latency class's queue, P12); past
/// the threshold, it is reported once per wake-up. True while it holds one
/// (the monitor keeps watching).
pub(super) fn check_wake_up(runner: &Runner, now: Instant) -> bool {
    let Some(worker) = &runner.worker else {
        return false;
    };
    let mut unwoken = runner.unwoken.lock().unpoisoned();
    if !worker.holds_wake_up() {
        *unwoken = (None, false);
        return false;
    }
    let since = *unwoken.0.get_or_insert(now);
    let waited = now.saturating_duration_since(since);
    if runner.hands_over && waited >= HAND_OVER_AFTER {
        if !worker.thread_per_core() {
            worker.help();
        } else {
            // P9 keeps the worker's own tasks home; the latency class
            // (P12) its wake-up may have been for goes to a peer.
            worker.hand_over_latency();
        }
    }
    if !runner.threshold.is_zero() && waited >= runner.threshold && !unwoken.1 {
        unwoken.1 = true;
        // The log handler is user code: not under a gdex lock.
        drop(unwoken);
        glib::g_warning!(
            "gdex",
            "{} was sent a wake-up {} ms ago and has not woken: its thread is busy outside its \
             run slice, in another source of its context (a GLib callback, or a task of a \
             Scheduler::for_context made for that context), or its poll did not return. Keep \
             such sources short on a worker's context. Its queued tasks go to its peers \
             meanwhile; its pinned tasks and fibers wait for it.",
            runner.label,
            waited.as_millis(),
        );
    }
    true
}
