//! What gdex tells about itself: the panic policy (X5), the pool's counters,
//! the schedulers' latency histograms (O1), the stall watchdog (B5, X4),
//! the task dump (X8), and the per-task record those and the features'
//! views (O1: Sysprof, `tracing`, tokio-console) read.

pub(crate) mod dump;
pub(crate) mod latency;
pub(crate) mod metrics;
pub(crate) mod panic;
pub(crate) mod record;
pub(crate) mod sampling;
pub(crate) mod stall;
pub(crate) mod tracking;
pub(crate) mod views;
