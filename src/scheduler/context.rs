//! A scheduler on one `GMainContext`: the main scheduler (S1) and the
//! scheduler of any other context (S2).
//!
//! Work pushed from any thread lands in an MPSC run queue and marks the
//! context's one gdex source ready; a second push before the source has run
//! costs one atomic swap and no syscall (coalesced). The source runs on the
//! thread that iterates the context, a bounded batch per dispatch, so the
//! context's other sources (GTK's frame clock, input, timers) get their turn.
//! A dispatch ends after 128 jobs or 4 ms, whichever comes first; the main
//! scheduler also runs below GTK's redraw priority (X3, frames first).
//!
//! `!Send` futures (`spawn_local`) are accepted only from the thread that owns
//! the context. That thread becomes the scheduler's *local owner* while any of
//! its `!Send` tasks is alive; once they are all gone, another thread that
//! owns the context may take over (a test harness runs each test on a new
//! thread; a GTK app keeps its main thread).

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::{self, ThreadId};

use crossbeam_deque::{Injector, Steal};
use glib::translate::ToGlibPtr;

use super::source::{Hooks, SourceRef};
use crate::task::Job;

/// How many jobs one dispatch runs before handing the loop back to GLib.
pub(crate) const DISPATCH_BATCH: usize = 128;

/// How long one dispatch may run jobs before handing the loop back (X3): a
/// quarter of a 60 Hz frame.
const DISPATCH_TIME: std::time::Duration = std::time::Duration::from_millis(4);

/// The main scheduler's priority (X3, frames first): below GTK's layout
/// (`G_PRIORITY_HIGH_IDLE + 10`) and redraw (`G_PRIORITY_HIGH_IDLE + 20`),
/// so a flood of main-thread tasks never delays a frame, and below input
/// and I/O (`G_PRIORITY_DEFAULT`); above default idle sources.
pub(crate) const MAIN_PRIORITY: i32 = glib::ffi::G_PRIORITY_HIGH_IDLE + 30;

pub(crate) struct ContextShared {
    context: glib::MainContext,
    source: SourceRef,
    queue: Injector<Job>,
    /// Jobs of `!Send` tasks: run only by their owner thread (`local_owner`),
    /// whoever else iterates the context.
    local_queue: Injector<Job>,
    /// Set while a wake-up of the source is pending (coalescing flag).
    notified: AtomicBool,
    /// How many times the source was actually marked ready (each a context
    /// lock and, from another thread, a wake-up write).
    wakeups: AtomicU64,
    /// The thread allowed to spawn `!Send` futures here, and how many of its
    /// `!Send` tasks are alive.
    local_owner: Mutex<LocalOwner>,
    is_main: bool,
    /// What the stall watchdog watches of this scheduler.
    runner: Arc<crate::stall::Runner>,
    /// `DISPATCH_TIME` in clock ticks.
    dispatch_ticks: u64,
}

/// Schedulers by context address. A live entry keeps nothing alive: the
/// `ContextShared` holds its context, so while the `Weak` upgrades the address
/// cannot have been reused.
fn registry() -> &'static Mutex<HashMap<usize, Weak<ContextShared>>> {
    static REGISTRY: OnceLock<Mutex<HashMap<usize, Weak<ContextShared>>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

fn context_key(context: &glib::MainContext) -> usize {
    let ptr: *mut glib_sys::GMainContext = context.to_glib_none().0;
    ptr as usize
}

struct ContextHooks {
    shared: Weak<ContextShared>,
}

impl Hooks for ContextHooks {
    fn dispatch(&self, source: *mut glib_sys::GSource) -> bool {
        match self.shared.upgrade() {
            Some(shared) => {
                shared.run_batch(source);
                true
            }
            None => false,
        }
    }
}

impl ContextShared {
    /// The scheduler of `context`, created on first use.
    pub(crate) fn for_context(context: &glib::MainContext) -> Arc<ContextShared> {
        let key = context_key(context);
        let mut map = registry().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(shared) = map.get(&key).and_then(Weak::upgrade) {
            return shared;
        }
        let is_main = *context == glib::MainContext::default();
        let shared = Arc::new_cyclic(|weak: &Weak<ContextShared>| {
            let name: &'static CStr = if is_main {
                c"[gdex-main]"
            } else {
                c"[gdex-context]"
            };
            let source = SourceRef::attach(
                context,
                Box::new(ContextHooks {
                    shared: weak.clone(),
                }),
                false,
                name,
                if is_main {
                    MAIN_PRIORITY
                } else {
                    glib::ffi::G_PRIORITY_DEFAULT
                },
                // A nested main loop (gdex::block_on inside a task, a modal
                // dialog's loop) must still run this scheduler's other tasks.
                true,
            );
            ContextShared {
                context: context.clone(),
                source,
                queue: Injector::new(),
                local_queue: Injector::new(),
                notified: AtomicBool::new(false),
                wakeups: AtomicU64::new(0),
                local_owner: Mutex::new(LocalOwner::default()),
                is_main,
                runner: crate::stall::Runner::new(
                    if is_main {
                        "the main scheduler".to_owned()
                    } else {
                        "a gdex context scheduler".to_owned()
                    },
                    crate::stall::default_threshold(),
                    None,
                ),
                dispatch_ticks: crate::clock::ticks(DISPATCH_TIME),
            }
        });
        map.insert(key, Arc::downgrade(&shared));
        shared
    }

    pub(crate) fn context(&self) -> &glib::MainContext {
        &self.context
    }

    pub(crate) fn is_main(&self) -> bool {
        self.is_main
    }

    /// Queues a job and wakes the context unless a wake-up is pending.
    #[inline]
    pub(crate) fn push(&self, job: Job) {
        self.queue.push(job);
        self.notify();
    }

    /// Queues a job of a `!Send` task, for the local owner thread only.
    #[inline]
    pub(crate) fn push_local(&self, job: Job) {
        self.local_queue.push(job);
        self.notify();
    }

    #[inline]
    fn notify(&self) {
        // AcqRel pairs with the swap in `run_batch`: either that swap sees
        // our `true` (and the drain after it sees our job), or we see its
        // `false` and mark the source ready again.
        if !self.notified.swap(true, Ordering::AcqRel) {
            self.mark_ready();
        }
    }

    fn mark_ready(&self) {
        self.wakeups.fetch_add(1, Ordering::Relaxed);
        self.source.set_ready();
    }

    /// Checks that the calling thread may spawn a `!Send` future here, makes
    /// it the local owner if there is none, and counts one more live local
    /// task. The returned guard, kept inside the task's future, counts it
    /// down when the future is dropped.
    pub(crate) fn enter_local(self: &Arc<Self>, what: &str) -> LocalTaskGuard {
        let me = thread::current().id();
        let mut owner = self.local_owner.lock().unwrap_or_else(|e| e.into_inner());
        match owner.thread {
            Some(thread) if owner.live > 0 && thread != me => panic!(
                "gdex: {what} called on thread {:?}, but this scheduler's !Send tasks belong to \
                 thread {thread:?}; a !Send future can only run on the thread that owns the \
                 context. Call it from that thread, or spawn a Send future with spawn().",
                thread::current().name().unwrap_or("<unnamed>")
            ),
            Some(thread) if thread == me => {}
            _ => {
                // The context must be ours: owned right now, or free to acquire.
                let owned = self.context.is_owner() || self.context.acquire().is_ok();
                if !owned {
                    panic!(
                        "gdex: {what} called on thread {:?}, which does not own the {} context: \
                         another thread is running it. A !Send future can only run on the thread \
                         that owns the context; call {what} from that thread, or spawn a Send \
                         future with spawn().",
                        thread::current().name().unwrap_or("<unnamed>"),
                        if self.is_main {
                            "main (default)"
                        } else {
                            "scheduler's"
                        }
                    );
                }
                owner.thread = Some(me);
            }
        }
        owner.live += 1;
        LocalTaskGuard {
            shared: self.clone(),
        }
    }

    /// True if the calling thread is this scheduler's local owner.
    pub(crate) fn is_local_owner(&self) -> bool {
        let owner = self.local_owner.lock().unwrap_or_else(|e| e.into_inner());
        owner.live > 0 && owner.thread == Some(thread::current().id())
    }

    /// The calling thread owns this scheduler's `!Send` tasks.
    fn runs_local_jobs(&self) -> bool {
        let owner = self.local_owner.lock().unwrap_or_else(|e| e.into_inner());
        owner.thread == Some(thread::current().id())
    }

    /// Runs up to a batch of jobs, taking turns between the two queues on
    /// the local owner's thread; `None` if everything it may run ran out.
    fn run_jobs(&self, local_too: bool) -> Option<()> {
        let deadline = crate::clock::now().wrapping_add(self.dispatch_ticks);
        let mut local_turn = false;
        let mut ran = 0;
        while ran < DISPATCH_BATCH {
            local_turn = local_too && !local_turn;
            let first = if local_turn {
                &self.local_queue
            } else {
                &self.queue
            };
            let job = match first.steal() {
                Steal::Success(job) => Some(job),
                Steal::Retry => continue,
                Steal::Empty if local_too => {
                    let other = if local_turn {
                        &self.queue
                    } else {
                        &self.local_queue
                    };
                    match other.steal() {
                        Steal::Success(job) => Some(job),
                        Steal::Retry => continue,
                        Steal::Empty => None,
                    }
                }
                Steal::Empty => None,
            };
            let job = job?;
            self.runner.enter_job();
            job.run();
            self.runner.leave_job();
            ran += 1;
            if crate::clock::now() >= deadline {
                break;
            }
        }
        Some(())
    }

    fn run_batch(&self, source: *mut glib_sys::GSource) {
        SourceRef::clear_ready(source);
        self.notified.swap(false, Ordering::AcqRel);
        let _current = super::enter_context(self);
        #[cfg(feature = "tokio")]
        let _tokio = crate::tokio_rt::enter();
        let _outside = crate::fiber::outside_fiber();
        let _runner = crate::stall::enter(&self.runner);
        self.runner.busy();
        let local_too = !self.local_queue.is_empty() && self.runs_local_jobs();
        self.run_jobs(local_too);
        self.runner.idle();
        // Work left: come back after the other sources.
        let more = !self.queue.is_empty() || (local_too && !self.local_queue.is_empty());
        if more && !self.notified.swap(true, Ordering::AcqRel) {
            self.mark_ready();
        } else if !local_too && !self.local_queue.is_empty() {
            // `!Send` jobs wait for their own thread, which is not iterating
            // the context now: look again a little later rather than spin.
            SourceRef::set_ready_in(source, std::time::Duration::from_millis(10));
        }
    }
}

#[derive(Default)]
pub(crate) struct LocalOwner {
    thread: Option<ThreadId>,
    live: usize,
}

/// Counts one live `!Send` task of a context scheduler.
pub(crate) struct LocalTaskGuard {
    shared: Arc<ContextShared>,
}

impl Drop for LocalTaskGuard {
    fn drop(&mut self) {
        let mut owner = self
            .shared
            .local_owner
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        owner.live -= 1;
    }
}

impl Drop for ContextShared {
    fn drop(&mut self) {
        self.source.destroy();
        let key = context_key(&self.context);
        let mut map = registry().lock().unwrap_or_else(|e| e.into_inner());
        if map.get(&key).is_some_and(|w| w.strong_count() == 0) {
            map.remove(&key);
        }
        // Jobs still queued are dropped here: their tasks resolve as
        // cancelled. (A queued job holds a strong reference to us through its
        // schedule function, so this only happens once the queue is empty or
        // the context is being torn down.)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// S1: pushes from other threads wake the context once until the source
    /// has run, and a dispatch runs a bounded batch.
    #[test]
    fn cross_thread_wakeups_coalesce() {
        let context = glib::MainContext::new();
        let shared = ContextShared::for_context(&context);
        let ran = Arc::new(AtomicUsize::new(0));
        let pushers: Vec<_> = (0..4)
            .map(|_| {
                let (shared, ran) = (shared.clone(), ran.clone());
                thread::spawn(move || {
                    for _ in 0..250 {
                        let ran = ran.clone();
                        shared.push(Job::Work(Box::new(move || {
                            ran.fetch_add(1, Ordering::Relaxed);
                        })));
                    }
                })
            })
            .collect();
        for p in pushers {
            p.join().unwrap();
        }
        assert_eq!(
            shared.wakeups.load(Ordering::Relaxed),
            1,
            "1000 pushes, one wake-up"
        );
        // One dispatch: one bounded batch (128 jobs, fewer if they took
        // 4 ms, as under valgrind), then the source re-arms itself once.
        context.iteration(false);
        let first = ran.load(Ordering::Relaxed);
        assert!((1..=DISPATCH_BATCH).contains(&first), "{first}");
        assert_eq!(shared.wakeups.load(Ordering::Relaxed), 2);
        // Each later dispatch that leaves work re-arms once more: one
        // wake-up per dispatch, never one per job.
        let mut dispatches = 1;
        while context.iteration(false) {
            dispatches += 1;
        }
        assert_eq!(ran.load(Ordering::Relaxed), 1000);
        assert!(dispatches >= 1000usize.div_ceil(DISPATCH_BATCH));
        assert_eq!(shared.wakeups.load(Ordering::Relaxed) as usize, dispatches);
    }
}
