//! One test binary for the contracts whose tests share a process safely
//! (T1): they use their own pools and contexts, take `common::on_main`
//! for the default main context, and set nothing process-wide (no panic
//! handler, environment, allocator or signal shared with another file).
//! Each file below is one contract's or behaviour's home, as a module:
//! `cargo test --test suite pool::` runs one of them.
//!
//! The files that do set or observe something process-wide (the panic
//! handler, the task dump, the process's threads, fds or CPU time, a
//! counting allocator, `GDEX_*` read at start) are binaries of their own
//! (`Cargo.toml` lists them): one process each, as before.

mod common;

mod batched_spawn;
mod blocking;
mod budget;
mod cancellation;
mod checksum;
mod completion_order;
mod dbus;
mod dbus_client;
mod directed_wakeups;
mod docs;
mod fds;
mod fibers;
mod gobject_signals;
mod group;
mod interop;
mod latency;
mod limiter;
mod mixed_executors;
mod nested_loops;
mod nested_loops_on_workers;
mod paused_clock;
mod pool;
mod priorities;
mod random_programs;
mod schedulers;
mod shape;
mod state_machine;
mod storms;
mod task_tracker;
mod tasks;
mod timers;
mod toolkit;
mod toolkit_promises;
mod waiter_accounting;
