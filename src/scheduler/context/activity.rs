//! What a test clock reads of the gdex schedulers of a context it drives
//! (`future::clock`): how many dispatches they have made, and whether one
//! has work queued. Read from each scheduler's `Pending`: nothing is added
//! to the scheduler's own path.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{registry, ContextShared};
use crate::util::Unpoisoned;

/// What gdex's schedulers of one context have done and have left to do,
/// for a test clock deciding whether the context is idle
/// (`future::clock`).
pub(crate) struct Activity {
    /// Their dispatches so far, together (wrapping).
    pub(crate) dispatches: u64,
    /// Whether one has work queued that it has not taken yet.
    pub(crate) queued: bool,
}

/// The [`Activity`] of the schedulers of the context at `context_key`
/// (its address).
pub(crate) fn activity(context_key: usize) -> Activity {
    let live: Vec<Arc<ContextShared>> = registry()
        .lock()
        .unpoisoned()
        .iter()
        .filter(|((context, _), _)| *context == context_key)
        .filter_map(|(_, weak)| weak.upgrade())
        .collect();
    let activity = Activity {
        dispatches: live.iter().fold(0, |n: u64, shared| {
            n.wrapping_add(shared.pending.dispatches.load(Ordering::Relaxed))
        }),
        queued: live.iter().any(|shared| {
            shared.pending.notified.load(Ordering::Acquire)
                || shared.pending.local_jobs.load(Ordering::Acquire) > 0
        }),
    };
    // Dropped after the registry's lock: dropping the last reference to a
    // scheduler takes it.
    drop(live);
    activity
}
