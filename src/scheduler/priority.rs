//! Task priorities (P12): a scheduler handle at another GLib priority, and
//! what a pool's latency class refuses.

use super::context::ContextShared;
use super::{Kind, Scheduler};

impl Scheduler {
    /// This scheduler at GLib priority `priority` (P12): a handle whose
    /// spawns (of every kind) and pushes run at that priority, each task
    /// for its whole life. Priority is per spawn: inside such a task,
    /// [`thread_default`](Scheduler::thread_default) is the scheduler at its
    /// default priority, and so are the spawns through it.
    ///
    /// - **On the main scheduler and any context scheduler** the tasks run
    ///   from a source of their own at `priority`, among the context's
    ///   other sources as GLib orders them: at `glib::Priority::HIGH` they
    ///   run before GTK's layout and redraw, at
    ///   `glib::Priority::DEFAULT_IDLE` only when nothing more urgent is
    ///   ready. GLib's priorities are strict: a task at `HIGH` that stays
    ///   ready (a `yield_now` loop, or a loop over ready futures, which the
    ///   budget (P11) makes yield but not stop) holds every frame back
    ///   until it has nothing ready; keep such work short or below
    ///   redraw. The default stays where it is
    ///   ([`priority`](Scheduler::priority) says where): for the main
    ///   scheduler `G_PRIORITY_HIGH_IDLE + 30`, below redraw (X3), with
    ///   S11's catch-up slice, which every main-context priority above it
    ///   has too (below `glib::Priority::HIGH`, where the catch-up runs), so
    ///   that a task asked to run ahead of the default never waits longer
    ///   than it behind a busy loop; below that place there is no catch-up
    ///   (such a task asked to wait for an idle loop) and no idle-loop
    ///   warning (X4). Each priority runs its tasks in slices as the
    ///   default does (S1).
    /// - **On a thread pool** there are two classes: a priority more urgent
    ///   than `glib::Priority::DEFAULT` (numerically lower, as
    ///   `glib::Priority::HIGH`) is the **latency** class, anything else the
    ///   **batch** class, where every task is unless asked. Every worker
    ///   takes latency work before any other, from a queue of its own, so a
    ///   latency task waits for a worker to finish its current poll, not
    ///   for the batch work queued before it. A latency task has no home
    ///   worker (in thread-per-core mode too, P9: it runs on whichever
    ///   worker is free first), and pinned work cannot be in the class:
    ///   `spawn_local`, `spawn_pinned` and fibers panic there. A latency
    ///   task that stays ready (a `yield_now` loop, a loop over ready
    ///   futures that spends its budget) cannot keep a worker from the
    ///   batch class for good: after 32 latency jobs in a row a worker
    ///   runs one batch job.
    ///
    /// The priority shows in the scheduler's `Debug`, and so in the task
    /// dump, tokio-console and Sysprof's marks.
    ///
    /// ```
    /// let context = glib::MainContext::new();
    /// let scheduler = gdex::Scheduler::for_context(&context);
    /// let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    /// let idle = scheduler.with_priority(glib::Priority::DEFAULT_IDLE);
    /// let urgent = scheduler.with_priority(glib::Priority::HIGH);
    /// for (name, scheduler) in [("idle", &idle), ("default", &scheduler), ("urgent", &urgent)] {
    ///     let order = order.clone();
    ///     scheduler.push(move || order.lock().unwrap().push(name));
    /// }
    /// while context.iteration(false) {}
    /// assert_eq!(*order.lock().unwrap(), ["urgent", "default", "idle"]);
    /// assert_eq!(urgent.priority(), glib::Priority::HIGH);
    /// assert_eq!(format!("{urgent:?}").contains("G_PRIORITY_HIGH"), true);
    /// ```
    pub fn with_priority(&self, priority: glib::Priority) -> Scheduler {
        use glib::translate::IntoGlib;
        let value = priority.into_glib();
        match &self.kind {
            Kind::Context(shared) => Scheduler {
                kind: Kind::Context(ContextShared::at_priority(shared.context(), Some(value))),
                latency: false,
            },
            Kind::Pool(pool) => Scheduler {
                kind: Kind::Pool(pool.clone()),
                latency: value < glib::ffi::G_PRIORITY_DEFAULT,
            },
        }
    }

    /// The GLib priority this scheduler's tasks run at (P12): its source's
    /// on a context (`G_PRIORITY_HIGH_IDLE + 30` for the main scheduler
    /// unless [`with_priority`](Scheduler::with_priority) said otherwise,
    /// `G_PRIORITY_DEFAULT` for another context); on a pool
    /// `glib::Priority::HIGH` for the latency class and
    /// `glib::Priority::DEFAULT` for the batch class.
    ///
    /// ```
    /// let main = gdex::Scheduler::main();
    /// let redraw = glib::Priority::from(glib::ffi::G_PRIORITY_HIGH_IDLE + 20);
    /// assert!(main.priority() > redraw, "below GTK's redraw (X3)");
    /// ```
    pub fn priority(&self) -> glib::Priority {
        match &self.kind {
            Kind::Context(shared) => glib::Priority::from(shared.priority()),
            Kind::Pool(_) if self.latency => glib::Priority::HIGH,
            Kind::Pool(_) => glib::Priority::DEFAULT,
        }
    }

    /// Panics if this is a pool's latency class (P12): pinned work runs on
    /// its one worker, in turn with that worker's other pinned work.
    #[track_caller]
    pub(super) fn refuse_latency(&self, what: &str) {
        if self.latency {
            panic!(
                "gdex: {what} on a thread pool's latency class (Scheduler::with_priority with a \
                 priority above glib::Priority::DEFAULT): pinned work (spawn_local, \
                 spawn_pinned, fibers) runs on its one worker in turn with that worker's other \
                 pinned work, and cannot jump the queue. Spawn a Send future with spawn() in the \
                 latency class, or spawn the pinned work through the pool's own scheduler."
            );
        }
    }
}
