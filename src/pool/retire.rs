//! What ends with a pool worker: a scheduler of a worker's own context
//! registers here ([`at_worker_exit`]), so that its tasks end with the
//! pool's (S9, shutdown step 3).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::util::Unpoisoned;

/// What ends with one worker; `None` once it has exited. Shared by its
/// [`Remote`](super::Remote) and its entry in [`worker_contexts`].
pub(super) type Retiring = Mutex<Option<Vec<Weak<dyn Retire>>>>;

/// Something that ends with a pool worker: a scheduler of the worker's own
/// context, whose tasks only that worker runs (S9: they resolve when the
/// pool shuts down, as the pool's own do).
pub(crate) trait Retire: Send + Sync {
    /// Called on the worker's thread as it exits, after its idle tasks
    /// were woken (shutdown step 3), and again while it waits for
    /// late wake-ups.
    fn retire(&self);
    /// Called once, on the worker's thread, after its last `retire`, just
    /// before it exits.
    fn finish(&self);
}

/// What [`at_worker_exit`] found.
pub(crate) enum WorkerContext {
    /// Not the context of a worker of a live pool.
    No,
    /// A worker's: it will retire what was given when it exits. Until then
    /// the tasks the retiring scheduler runs record themselves in this, the
    /// worker's registry of idle tasks, as the pool's own do (S9: see
    /// [`registry`](crate::task::registry)).
    Retires(Arc<crate::task::registry::Registry>),
    /// A worker's that has exited already.
    Exited,
}

/// One worker of a live pool, as [`at_worker_exit`] finds it by its context.
#[derive(Clone)]
pub(super) struct WorkerEnd {
    pub(super) retiring: Arc<Retiring>,
    pub(super) registry: Arc<crate::task::registry::Registry>,
}

/// What ends with the worker of each context of a live pool, by the
/// context's address (a pool holds its workers' contexts, so an address
/// cannot be reused while its entry is here; the pool's drop removes them).
pub(super) fn worker_contexts() -> &'static Mutex<HashMap<usize, WorkerEnd>> {
    static CONTEXTS: OnceLock<Mutex<HashMap<usize, WorkerEnd>>> = OnceLock::new();
    CONTEXTS.get_or_init(Default::default)
}

pub(super) fn context_key(context: &glib::MainContext) -> usize {
    context.as_ptr() as usize
}

/// Whether `context` is a worker's of a live pool.
pub(crate) fn is_worker_context(context: &glib::MainContext) -> bool {
    worker_contexts()
        .lock()
        .unpoisoned()
        .contains_key(&context_key(context))
}

/// If `context` is a pool worker's own context, has `retire` retired on
/// that worker's thread when it exits (unless it has exited already: then
/// says so, and the caller retires it now). A scheduler made for a worker's
/// context registers here, so that its tasks end with the pool's (S9), and
/// gets the worker's registry of idle tasks, for its dispatches to enter.
/// Takes two locks and no count on the pool.
pub(crate) fn at_worker_exit(
    context: &glib::MainContext,
    retire: Weak<dyn Retire>,
) -> WorkerContext {
    let found = worker_contexts()
        .lock()
        .unpoisoned()
        .get(&context_key(context))
        .cloned();
    let Some(WorkerEnd { retiring, registry }) = found else {
        return WorkerContext::No;
    };
    let mut retiring = retiring.lock().unpoisoned();
    match retiring.as_mut() {
        Some(list) => {
            list.retain(|r| r.strong_count() > 0);
            list.push(retire);
            WorkerContext::Retires(registry)
        }
        None => WorkerContext::Exited,
    }
}
