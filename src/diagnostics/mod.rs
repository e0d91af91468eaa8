//! What gdex tells about itself: the panic policy (X5), the pool's counters,
//! the stall watchdog (B5, X4) and the task dump (X8).

pub(crate) mod dump;
pub(crate) mod metrics;
pub(crate) mod panic;
pub(crate) mod stall;
