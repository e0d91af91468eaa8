//! The concurrency-heavy modules of `suite` and `one_at_a_time` in one
//! binary, for `.ci/run` to build with gdex optimised (T1): optimisation
//! changes timings, inlining and what is one copy or two, and a difference
//! that only an optimised build shows must fail in CI, not in users'
//! builds. The files are the same as in the other two binaries; only the
//! set differs, so that CI compiles at `opt-level = 3` what it runs.
//!
//! `exactly_once` and `handover` belong to the one-at-a-time binary (each
//! test takes `common::serial()`, and the others here do not): `.ci/run`
//! runs them in a second pass with `--test-threads=1`.

// A subset of the modules uses a subset of the harness.
#[allow(dead_code)]
mod common;

mod cancellation;
mod exactly_once;
mod fibers;
mod handover;
mod pool;
mod random_programs;
mod schedulers;
mod storms;
mod toolkit_promises;
