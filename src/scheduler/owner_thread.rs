//! The wrappers that keep a task's future, and its cancellation, on the
//! thread that runs it: [`ThreadBound`] for pinned and `!Send` tasks and
//! fibers (S10), [`OnItsThread`] for a context scheduler's `Send` tasks;
//! both signal a cancellation from another thread on their own (S14).

use std::future::Future;

use crate::util::thread_token;

pin_project_lite::pin_project! {
    /// A `Send` task's future on a context scheduler (S14): the task is
    /// bound from its spawn, so a canceller on another thread leaves its
    /// cancellable alone, and the thread that runs the context cancels it
    /// (running its `cancelled` handlers, `!Send` ones included) before the
    /// future drops.
    pub(super) struct OnItsThread<F> {
        #[pin]
        pub(super) inner: F,
    }

    impl<F> PinnedDrop for OnItsThread<F> {
        fn drop(_this: Pin<&mut Self>) {
            // The drop that follows a cancellation is the closed task's
            // run, or its job's drop: the running task is this one.
            if let Some(meta) = running_meta() {
                meta.cancel_here();
            }
        }
    }
}

impl<F: Future> Future for OnItsThread<F> {
    type Output = F::Output;

    #[inline]
    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        self.project().inner.poll(cx)
    }
}

/// Pins a future to the first thread that polls it: a poll on another
/// thread panics, and a drop on another thread leaks the future instead of
/// running `!Send` destructors there.
///
/// Its task's cancellation reaches it on its thread too (S14): its task is
/// bound there from the first poll, so a canceller on another thread leaves
/// the task's cancellable alone, and the owner cancels it, running its
/// `cancelled` handlers, before dropping the future (a fiber's waits do it
/// too: it runs on after its cancellation, F4).
///
/// The task's metadata is not kept here (a waiting fiber's memory, F1):
/// it is the running task's (`running_task_meta`) in each poll, and in the
/// drop that follows a cancellation (the run of the closed task, on its
/// thread).
pub(super) struct ThreadBound<F> {
    /// The owning thread's [`thread_token`]; 0 until the first poll.
    owner: u64,
    inner: std::mem::ManuallyDrop<F>,
}

impl<F> ThreadBound<F> {
    /// Bound to the first thread that polls it (whatever it holds until
    /// then must be `Send`).
    pub(super) fn new(inner: F) -> Self {
        ThreadBound {
            owner: 0,
            inner: std::mem::ManuallyDrop::new(inner),
        }
    }

    /// Bound to the calling thread from the start: for a `!Send` future
    /// built here, which must not even be dropped elsewhere before its
    /// first poll.
    pub(super) fn here(inner: F) -> Self {
        ThreadBound {
            owner: thread_token(),
            inner: std::mem::ManuallyDrop::new(inner),
        }
    }
}

/// The metadata of the task running on this thread, if any.
fn running_meta<'a>() -> Option<&'a crate::task::TaskMeta> {
    // SAFETY: null, or the metadata of the task this thread runs now
    // (set by its `Job::run`, or a fiber's resumption), in that task's
    // block, which outlives the run; the borrow is used within it.
    unsafe { crate::task::running_task_meta().as_ref() }
}

impl<F: Future> Future for ThreadBound<F> {
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        // SAFETY: `inner` is structurally pinned (never moved out; only
        // dropped in place), `owner` is not.
        let this = unsafe { self.get_unchecked_mut() };
        let me = thread_token();
        match this.owner {
            0 => this.owner = me,
            owner => assert!(
                owner == me,
                "gdex: a pinned task or fiber was resumed on thread {:?}, but it lives on another \
                 thread; the context it was spawned on must always be iterated by the same thread",
                std::thread::current().name().unwrap_or("<unnamed>")
            ),
        }
        // S14: the task is bound to this thread from its first poll (a
        // load once bound).
        if let Some(meta) = running_meta() {
            meta.bind();
        }
        // SAFETY: see above.
        unsafe { std::pin::Pin::new_unchecked(&mut *this.inner) }.poll(cx)
    }
}

impl<F> Drop for ThreadBound<F> {
    fn drop(&mut self) {
        match self.owner {
            owner if owner == thread_token() => {
                // S14: the task's cancellation, signalled on its thread
                // before its future goes (X1: its GIO calls stop). The
                // drop is the closed task's run, or its job's drop (a
                // thread's exit, a shutdown): the running task is this one
                // either way.
                if let Some(meta) = running_meta() {
                    meta.cancel_here();
                }
                // SAFETY: dropped once, here, on its own thread.
                unsafe { std::mem::ManuallyDrop::drop(&mut self.inner) }
            }
            owner if owner != 0 => {
                glib::g_critical!(
                    "gdex",
                    "a pinned task or fiber was dropped on another thread than its own; it is \
                     leaked instead"
                );
            }
            // SAFETY: dropped once, here, on its own thread (or never polled,
            // when all it holds is Send).
            _ => unsafe { std::mem::ManuallyDrop::drop(&mut self.inner) },
        }
    }
}
