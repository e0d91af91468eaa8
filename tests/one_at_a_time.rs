//! One test binary for the contracts whose tests set or observe the whole
//! process (T1): the panic handler (S6, X5: `faults`, `panic_policy`,
//! `exactly_once`'s shutdown), its CPU time (P7: `idle`), its mapped fiber
//! stacks (F1: `fiber_stacks`) or both cores at once (P6: `handover`).
//! Every test here takes `common::serial()` before anything else, so they
//! run one at a time; `tests/shape.rs` checks that none forgets.

mod common;

mod exactly_once;
mod faults;
mod fiber_stacks;
mod handover;
mod idle;
mod panic_policy;
