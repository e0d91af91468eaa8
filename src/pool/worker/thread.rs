//! The body of thread `gdex-worker-N`: it owns its context and runs it
//! until the pool closes, then ends what is left on it (shutdown steps 3
//! and 5); and the hooks through which its source, the stall watchdog (B5)
//! and `blocking()` reach the worker.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::fd_poll::{poll_fds, FdPoll, FD_POLL, FD_POLL_EVERY, FD_POLL_KEPT};
use super::{with_current, Core, CURRENT, SLICE_TIME};
use crate::pool::PoolShared;
use crate::source::{Hooks, SourceRef};
use crate::task::Job;
use crate::util::Unpoisoned;

/// The body of thread `gdex-worker-{index}`.
pub(crate) fn run(shared: Arc<PoolShared>, index: usize, local: crossbeam_deque::Worker<Job>) {
    let context = shared.remotes[index].context.clone();
    let result = context.with_thread_default(|| {
        // Held for the thread's life: the worker is the context's owner, as
        // GIO's async calls and glib-rs's source futures expect (P2).
        let _owner = context
            .acquire()
            .expect("a gdex worker's fresh context is acquired by its own thread");
        let core = Core {
            shared: shared.clone(),
            index,
            local,
            pinned: Default::default(),
            pinned_turn: Cell::new(false),
            inbox_turn: Cell::new(false),
            chain_left: Cell::new(0),
            chained: Cell::new(0),
            slice_deadline: Cell::new(0),
            slice_mask: Cell::new(0),
            searching: Cell::new(false),
            in_slice: Cell::new(false),
            urgent_run: Cell::new(0),
            asked_at: Cell::new(0),
            asked_repeats: Cell::new(0),
            woken: Default::default(),
            slice_ticks: crate::util::clock::ticks(SLICE_TIME),
            fiber_spin_ticks: crate::util::clock::ticks(super::FIBER_SPIN),
            clock_mask: Cell::new(7),
            runner: crate::diagnostics::stall::Runner::new(
                format!("gdex-worker-{index}"),
                shared.stall_threshold(),
                Some(Box::new(Watched {
                    pool: Arc::downgrade(&shared),
                    index,
                })),
            ),
            #[cfg(feature = "tokio")]
            tokio: Default::default(),
        };
        // Left (in reverse order) before `core` drops, also on unwind.
        let _worker = CURRENT.enter(&core);
        let _registry = crate::task::registry::enter(Some(&shared.remotes[index].registry));
        let hooks: &dyn crate::current::WorkerHooks = &core;
        let _hooks = crate::current::enter_worker_hooks(&hooks);
        let _runner = crate::diagnostics::stall::enter(&core.runner);
        let name = c"[gdex-worker]";
        let source = SourceRef::attach(
            &context,
            Box::new(WorkerHooks {
                shared: shared.clone(),
                index,
            }),
            true,
            name,
            glib::ffi::G_PRIORITY_DEFAULT,
            false,
        );
        FD_POLL.set(FdPoll {
            last: crate::util::clock::now(),
            every: crate::util::clock::ticks(FD_POLL_EVERY),
            // Nothing polled yet: the first turn polls.
            kept: 0,
            polled: [(0, 0); FD_POLL_KEPT],
        });
        // SAFETY: the context is this worker's, alive for the call; the
        // function has g_poll's signature and contract.
        unsafe { glib_sys::g_main_context_set_poll_func(context.as_ptr(), Some(poll_fds)) };
        let counters = &shared.remotes[index].counters;
        while !shared.closed.load(Ordering::Acquire) {
            context.iteration(true);
            counters.context_iterations.bump();
        }
        // Out of its park for good: a directed push from now on finds it
        // awake (it drains its inbox below), not a sleeper to wake nor a
        // busy worker for the stall monitor to watch (P10).
        shared.parking.wake_up(index);
        // `poll_fds` serves this worker's parking on this thread only:
        // whoever iterates the context from now on polls with GLib's own
        // function.
        // SAFETY: as above; `None` restores `g_poll`.
        unsafe { glib_sys::g_main_context_set_poll_func(context.as_ptr(), None) };
        source.destroy();
        core.finish_fibers();
        // Shutdown step 3, S9: every task that went idle on this worker is
        // woken, which queues it here (a pinned one on this very thread),
        // and dropped with the rest below: its handle resolves.
        let remote = &shared.remotes[index];
        for waker in remote.registry.close() {
            waker.wake();
        }
        // What ends with this worker (a scheduler of its context, whose
        // woken tasks the wake-ups above queued there) drops its tasks
        // here, on their thread.
        let retiring: Vec<_> = (remote.retiring.lock().unpoisoned().take())
            .into_iter()
            .flatten()
            .filter_map(|retire| retire.upgrade())
            .collect();
        let retire_all = || retiring.iter().for_each(|retire| retire.retire());
        retire_all();
        // Shutdown step 3: drop what is left, here (see `drop_queued`).
        let inbox = &shared.remotes[index].inbox;
        core.drop_queued();
        // A wake-up from another thread that straddled the close has marked
        // its task scheduled but not queued it yet: wait for it to land, so
        // that a pinned one too is dropped here (see `registry`). A `Send`
        // one may be queued anywhere: the injector is emptied meanwhile, and
        // a peer empties its own queues before it exits.
        if remote.registry.outstanding() > 0 {
            let deadline = std::time::Instant::now() + crate::task::registry::LATE_WAKE;
            while remote.registry.outstanding() > 0 && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_micros(200));
                shared.drain_injector();
                core.drop_queued();
                retire_all();
            }
        }
        retiring.iter().for_each(|retire| retire.finish());
        drop(retiring);
        // Shutdown step 5: from now on a pusher to our inbox hands what it
        // pushed to the reaper; a push that came before the flag is dropped
        // here.
        remote.exited.store(true, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        PoolShared::drain(inbox);
        drop(remote.take_mail());
        // A fiber of this worker whose future was not dropped here by now
        // never will be: its cell is retired while the pool is alive, so
        // that no wake of its stale waker reads the pool again (F3).
        crate::fiber::retire_cells_out();
    });
    if let Err(e) = result {
        glib::g_critical!(
            "gdex",
            "gdex-worker-{} could not own its context: {}",
            index,
            e
        );
    }
}

struct WorkerHooks {
    shared: Arc<PoolShared>,
    index: usize,
}

impl Hooks for WorkerHooks {
    /// Not once the pool is closed: a slice then returns at once, and a
    /// nested loop on the worker's context (in a GLib callback there) that
    /// found the source ready would spin through empty dispatches until it
    /// ended. The worker's own loop needs no dispatch to end: the shutdown
    /// wakes its context, and the loop looks at `closed` after each turn.
    #[inline]
    fn ready(&self) -> bool {
        self.shared.parking.should_run(self.index) && !self.shared.closed.load(Ordering::Acquire)
    }

    fn dispatch(&self, _source: *mut glib_sys::GSource) -> bool {
        // Our tasks record themselves in our registry (S9), also when this
        // dispatch runs inside another scheduler's, which entered its own.
        let _registry =
            crate::task::registry::enter(Some(&self.shared.remotes[self.index].registry));
        with_current(|core| {
            if let Some(core) = core {
                core.run_slice();
            }
        });
        true
    }
}

/// Worker `index` of `pool`, for the stall watchdog.
struct Watched {
    pool: std::sync::Weak<PoolShared>,
    index: usize,
}

impl crate::diagnostics::stall::Worker for Watched {
    fn has_peers(&self) -> bool {
        self.pool.upgrade().is_some_and(|pool| pool.workers() > 1)
    }

    fn thread_per_core(&self) -> bool {
        self.pool
            .upgrade()
            .is_some_and(|pool| pool.thread_per_core())
    }

    fn fire_overdue_timers(&self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.fire_overdue_timers(self.index);
            // Its AIO operations, likewise: a read queued on its ring
            // would wait for the poll to end before it even started.
            pool.service_stuck_ring(self.index);
        }
    }

    fn help(&self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.help_stuck_worker(self.index);
        }
    }

    fn hand_over_latency(&self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.hand_over_latency(self.index);
        }
    }

    fn in_blocking(&self) -> bool {
        self.pool
            .upgrade()
            .is_some_and(|pool| pool.in_blocking(self.index))
    }

    fn holds_wake_up(&self) -> bool {
        self.pool
            .upgrade()
            .is_some_and(|pool| pool.holds_wake_up(self.index))
    }
}

/// B5, `gdex::blocking::blocking` on this worker: while it blocks, its
/// deque is handed to its peers (to the injector, or in thread-per-core mode
/// to the other workers' inboxes), peers are woken to take it, and the
/// stall watchdog does not count the wait.
impl crate::current::WorkerHooks for Core {
    fn enter_blocking(&self) {
        // A count, not a flag: declarations nest (a `blocking` inside
        // another, or two fibers of this worker each inside one).
        self.shared.remotes[self.index]
            .in_blocking
            .fetch_add(1, Ordering::AcqRel);
        self.offload();
    }

    fn leave_blocking(&self) {
        self.shared.remotes[self.index]
            .in_blocking
            .fetch_sub(1, Ordering::AcqRel);
    }

    #[inline]
    fn next_resumption(&self, kind: *const ()) -> Option<usize> {
        self.next_resumption(kind)
    }

    fn spin_while_idle(&self, done: &mut dyn FnMut() -> bool) -> bool {
        self.spin_while_idle(done)
    }
}
