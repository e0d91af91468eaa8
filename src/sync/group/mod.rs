//! [`TaskGroup`]: a scope of tasks that finish, or are cancelled, together.
//!
//! The group keeps one slot per *live* member: the member's [`Task`]
//! handle, so that the group can cancel it. A member frees its slot itself
//! when it finishes (or is dropped), as libdex unlinks a finished child, so
//! the group's memory follows the members still running, not every member
//! it ever had. What a finished member leaves behind is
//! at most the group's first failure, or, in a group built with
//! [`keep_results`](TaskGroupBuilder::keep_results), its result.
//!
//! A member's slot goes through these states, each change under the
//! group's lock:
//!
//! - `Reserved`: [`spawn`](TaskGroup::spawn) made the slot and is handing
//!   the member to its scheduler (without the lock: a scheduler may drop
//!   the member right there, and the member's guard takes the lock);
//! - `Filled(task)`: the spawner stored the handle;
//! - `Taken`: a canceller took the handle (and drops it, which cancels the
//!   member: `cancel`, `abort_all`); the member's guard frees the slot
//!   when the member's future is dropped;
//! - `Done`: the member finished while its spawner still held `Reserved`;
//!   the spawner frees the slot;
//! - `Refused`: the scheduler dropped the member unpolled while its spawner
//!   still held `Reserved` (a shut-down pool): the spawner undoes the
//!   spawn, and fails with the error the refused task resolved to.
//!
//! The parts: the group's state (this file); what a member gives, seen by
//! the group ([`GroupOutput`], `output.rs`); a member's future and its
//! guard, and the spawn that reserves its slot (`member.rs`); the public
//! [`TaskGroup`], its builder and [`TaskGroupRef`] (`task_group.rs`); its
//! members in the order they finish, and `abort_all` (`join.rs`).

mod join;
mod member;
mod output;
mod task_group;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::task::Waker;

use slab::Slab;

use super::wait_queue::{Locked, Parked};
use crate::diagnostics::panic::PanicSource;
use crate::util::Unpoisoned;
use crate::{Error, Scheduler, Task};

pub use output::GroupOutput;
pub use task_group::{TaskGroup, TaskGroupBuilder, TaskGroupRef};

struct Shared<T> {
    scheduler: Scheduler,
    cancel_on_error: bool,
    keep_results: bool,
    state: Mutex<State<T>>,
}

/// A member's outcome as the group records it: its output, or why there is
/// none (it panicked, or was dropped unfinished).
type Outcome<T> = Result<T, Error>;

struct State<T> {
    /// One slot per member not yet finished (see the module docs).
    slots: Slab<Slot>,
    /// Members spawned and not yet finished or dropped (slots that are
    /// `Reserved`, `Filled` or `Taken`).
    live: usize,
    /// No new members from outside (closed, cancelled, or dropped).
    closed: bool,
    /// The group cancelled its members: later failures do not count, and
    /// every spawn is refused.
    cancelled: bool,
    /// `close` (or `close_with_results`) was called: its first future owns
    /// the members from then on, and the group's drop leaves them alone.
    close_called: bool,
    /// The first failure; in a group that keeps results, where it is.
    first: First<T>,
    /// With `keep_results`: the members after `first` whose failure
    /// counted, in the order they finished; when `join_next` gives `first`,
    /// the next of them becomes `first` (what `close` gives).
    later_failures: VecDeque<usize>,
    /// The number the next member spawned gets: its place in spawn order.
    next_seq: usize,
    /// With `keep_results`: the outcome of each member that finished and
    /// was not yet collected, by spawn order (what `close_with_results`
    /// gives, in that order).
    results: BTreeMap<usize, Outcome<T>>,
    /// With `keep_results`: the members of `results` in the order they
    /// finished (what `join_next` gives, in that order; one collected by
    /// `close_with_results` is skipped).
    completed: VecDeque<usize>,
    /// Futures waiting for `live == 0` (close, cancel). A waker let go of
    /// under the lock is dropped after its release ([`Parked`]).
    waiters: Slab<Option<Parked>>,
    /// Futures waiting for the next member to finish (`join_next`, the
    /// group's `Stream`).
    joiners: Slab<Option<Parked>>,
}

/// A registration for the next member to finish: what
/// [`TaskGroup::join_next`]'s future and the group's `Stream` share (its
/// polling is in `join.rs`).
struct Joiner<T> {
    key: Option<usize>,
    _members: std::marker::PhantomData<fn() -> T>,
}

impl<T> Default for Joiner<T> {
    fn default() -> Self {
        Joiner {
            key: None,
            _members: std::marker::PhantomData,
        }
    }
}

enum Slot {
    Reserved,
    Filled(Task<()>),
    Taken,
    Done,
    Refused,
}

enum First<T> {
    None,
    /// The failing member's outcome (a group that drops results).
    Here(Outcome<T>),
    /// The failing member's index in `results` (a group that keeps them).
    At(usize),
    /// `join_next` gave every failure so far: `close` has none to give,
    /// but the next failure is its to give.
    Given,
    /// A `close` took it.
    Taken,
}

impl<T> State<T> {
    /// Closes the group and takes the handle of every member that has one,
    /// for the caller to drop (which cancels them) once the lock is
    /// released: a member's future may be dropped right there, and its
    /// guard takes the lock.
    fn cancel_members(&mut self) -> Vec<Task<()>> {
        self.closed = true;
        self.cancelled = true;
        self.abort_members()
    }

    /// Wakes whoever waits for a member to finish (after one did), and
    /// whoever waits for the last member, once there is none.
    fn take_wakers(&mut self) -> Vec<Waker> {
        let mut wakers: Vec<Waker> = self
            .joiners
            .iter_mut()
            .filter_map(|(_, waker)| waker.take().map(Parked::into_waker))
            .collect();
        if self.live != 0 {
            return wakers;
        }
        if self.slots.is_empty() && self.slots.capacity() > 64 {
            // A burst of members is over: give its memory back.
            self.slots = Slab::new();
        }
        wakers.extend(
            self.waiters
                .iter_mut()
                .filter_map(|(_, waker)| waker.take().map(Parked::into_waker)),
        );
        wakers
    }

    /// Takes the handle of every member that has one, for the caller to
    /// drop once the lock is released (which cancels them), leaving the
    /// group open: [`TaskGroup::abort_all`].
    fn abort_members(&mut self) -> Vec<Task<()>> {
        let mut tasks = Vec::new();
        for (_, slot) in self.slots.iter_mut() {
            if matches!(slot, Slot::Filled(_)) {
                if let Slot::Filled(task) = std::mem::replace(slot, Slot::Taken) {
                    tasks.push(task);
                }
            }
        }
        tasks
    }
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        // A panic nobody read (the group was never closed, or its results
        // never collected) goes to the panic handler (X5).
        let state = self.state.get_mut().unpoisoned();
        if let First::Here(Err(Error::Panicked(message))) = &mut state.first {
            crate::diagnostics::panic::report(PanicSource::Task, std::mem::take(message));
        }
        for result in state.results.values_mut() {
            if let Err(Error::Panicked(message)) = result {
                crate::diagnostics::panic::report(PanicSource::Task, std::mem::take(message));
            }
        }
    }
}

fn lock<T>(shared: &Shared<T>) -> Locked<'_, State<T>> {
    super::wait_queue::lock(&shared.state)
}
