//! Coordination between tasks: channels, semaphores and limiters, task
//! groups and trackers, state machines, and the cancel-safe wait queue
//! they share.

pub(crate) mod channel;
pub(crate) mod group;
pub(crate) mod semaphore;
pub(crate) mod state_machine;
pub(crate) mod tracker;
pub(crate) mod wait_queue;
