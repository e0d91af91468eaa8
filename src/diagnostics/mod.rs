//! What gdex tells about itself: the panic policy (X5), the pool's counters
//! and the stall watchdog (B5, X4).

pub(crate) mod metrics;
pub(crate) mod panic;
pub(crate) mod stall;
