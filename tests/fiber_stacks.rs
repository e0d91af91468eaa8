//! F1: fiber stacks are pooled per thread. In the one-at-a-time binary
//! (`tests/one_at_a_time.rs`), holding `common::serial()`:
//! `fiber::stacks_mapped()` counts for the whole process, and other tests'
//! fibers would count too.

use crate::common;

use gdex::fiber;

/// F1: spawning 10,000 fibers one after another reuses stacks from the
/// per-thread pool: only a handful are mapped.
#[test]
fn sequential_fibers_reuse_their_stacks() {
    let _one = common::serial();
    common::watchdog("sequential_fibers_reuse_their_stacks", 120, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let s = pool.scheduler();
        // Warm up each worker's stack pool.
        for i in 0..4 {
            gdex::block_on(s.spawn_fiber(move || i)).unwrap();
        }
        let before = fiber::stacks_mapped();
        for i in 0..10_000 {
            assert_eq!(gdex::block_on(s.spawn_fiber(move || i)).unwrap(), i);
        }
        let mapped = fiber::stacks_mapped() - before;
        assert!(
            mapped <= 4,
            "{mapped} new stacks mapped for 10,000 sequential fibers"
        );
    });
}
