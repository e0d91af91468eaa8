//! What a scheduler queues, and the handle a spawner gets back.
//!
//! A spawned future lives in one heap block allocated by `async-task`: its
//! header (state word, awaiter waker, vtable), the schedule function, the
//! future and, later, its output. The block's `Runnable` is what a queue
//! holds; running it polls the future once. The spawner's [`Task<T>`] is the
//! other reference to the block.
//!
//! The parts, each in its file:
//! - `meta.rs`: the one word of metadata in each block ([`TaskMeta`]: the
//!   task's owner and the state of its `gio::Cancellable`, X1), the task
//!   this thread is running, and the builders that put the metadata there;
//! - `owner.rs`: who runs a task wherever it is woken ([`Owner`]), held in
//!   the block through one thin pointer ([`OwnerRef`]);
//! - `job.rs`: what a run queue holds ([`Job`]: a task's `Runnable` or a
//!   work item's closure, in two plain words);
//! - `containment.rs`: panics never cross a scheduler (S6): [`CatchUnwind`]
//!   around every task's future, what a block stores as output
//!   ([`Outcome`]), and wakers whose panic is contained;
//! - `handle.rs`: the spawner's [`Task<T>`], and cancellation (S5);
//! - `yield_now.rs`: [`yield_now`];
//! - `coop.rs`: the cooperative budget (P11): what a poll may complete
//!   before gdex's leaf futures make it yield, [`unconstrained`] and
//!   [`consume_budget`];
//! - `registry.rs`: the book of tasks idle on a worker (S9);
//! - `flag.rs`: a one-way flag a task waits on.

mod containment;
pub(crate) mod coop;
pub(crate) mod flag;
mod handle;
mod job;
mod meta;
mod owner;
pub(crate) mod registry;
mod yield_now;

pub(crate) use containment::{enter_polling, CatchUnwind, Failure, Outcome};
pub use coop::{consume_budget, unconstrained, Unconstrained};
pub use handle::Task;
pub(crate) use job::{Job, WorkVtable};
pub use meta::current_cancellable;
pub(crate) use meta::{
    builder, builder_for, cancel_current_cancellable, enter_running, owned_builder, running_task,
    running_task_meta, schedule_on_owner, TaskMeta,
};
pub(crate) use owner::{Owner, OwnerHeader, OwnerRef, OwnerVtable};
pub use yield_now::{yield_now, YieldNow};

/// A task's `Runnable`, with the task's [`TaskMeta`] in its block.
pub(crate) type Runnable = async_task::Runnable<TaskMeta>;
