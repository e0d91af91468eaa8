//! X2: tasks bound to a GObject, cancelled when it is disposed; and the
//! thread identity behind tasks bound to a thread ([`thread_token`](crate::util::thread_token)).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use glib::prelude::*;

use crate::task::flag::Flag;
use crate::task::{CatchUnwind, Failure, Outcome};
use crate::{Error, Scheduler, Task};

pin_project_lite::pin_project! {
    /// A task's future, stopped when its object is disposed.
    struct Bound<F, O: ObjectType> {
        #[pin]
        future: CatchUnwind<F>,
        // Raised by the object's weak-ref notification.
        disposed: Arc<Flag>,
        // Only to unhook the notification when the task ends first. (Its
        // type is the caller's: upgrading it where the task ends must be
        // allowed, which for a `Send` task means `O: Send + Sync`.)
        object: glib::WeakRef<O>,
    }

    impl<F, O: ObjectType> PinnedDrop for Bound<F, O> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            unhook(this.disposed, this.object);
        }
    }
}

impl<F, O: ObjectType> Bound<F, O> {
    /// Binds `future`, to be spawned on `scheduler`, to `object`.
    #[track_caller]
    fn new(scheduler: &Scheduler, object: &O, future: F) -> Bound<F, O> {
        let disposed = Arc::new(Flag::default());
        // GLib's side holds one strong count of the flag, given back in
        // `on_dispose` or, if the task ends first, in `Drop`.
        let data = Arc::into_raw(disposed.clone());
        // SAFETY: `object` is alive (we borrow it); `on_dispose` matches
        // the data it is given.
        unsafe {
            glib::gobject_ffi::g_object_weak_ref(
                object.as_ptr() as *mut glib::gobject_ffi::GObject,
                Some(on_dispose),
                data as glib::ffi::gpointer,
            );
        }
        Bound {
            // What the views say after "spawned at … on".
            future: CatchUnwind::new(future, || {
                format!("{scheduler:?}, bound to a {}", object.type_().name())
            }),
            disposed,
            object: object.downgrade(),
        }
    }
}

unsafe extern "C" fn on_dispose(
    data: glib::ffi::gpointer,
    _object: *mut glib::gobject_ffi::GObject,
) {
    // SAFETY: the strong count handed to GLib in `Bound::new`; GLib calls a
    // weak notification at most once, and `Drop` unhooks it otherwise.
    let disposed = unsafe { Arc::from_raw(data as *const Flag) };
    disposed.raise();
}

impl<F: Future, O: ObjectType> Future for Bound<F, O> {
    type Output = Outcome<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if this.disposed.poll_raised(cx) {
            // Stop like a cancelled task: its GIO calls too (X1). The
            // future is dropped by async-task right after this.
            crate::task::cancel_current_cancellable();
            return Poll::Ready(Err(Failure::error(Error::Cancelled)));
        }
        this.future.poll(cx)
    }
}

/// The end of a bound task's future: unhooks the disposal notification
/// unless it has run.
fn unhook<O: ObjectType>(disposed: &Arc<Flag>, object: &glib::WeakRef<O>) {
    if disposed.set.load(std::sync::atomic::Ordering::Acquire) {
        return; // the notification has run and taken its count
    }
    // While we hold a strong reference the object cannot be disposed by
    // its last unref, so the notification cannot run meanwhile. (An
    // explicit g_object_run_dispose on another thread right now would
    // be the one race; GLib gives no way to close it.)
    if let Some(object) = object.upgrade() {
        let data = Arc::as_ptr(disposed);
        // SAFETY: the notification registered in `new` is still hooked
        // (not raised), so unhooking it succeeds and GLib's count of
        // the flag comes back to us.
        unsafe {
            glib::gobject_ffi::g_object_weak_unref(
                object.as_ptr() as *mut glib::gobject_ffi::GObject,
                Some(on_dispose),
                data as glib::ffi::gpointer,
            );
            drop(Arc::from_raw(data));
        }
    }
    // Otherwise the object is being disposed: the notification will run
    // and take its count.
}

impl Scheduler {
    /// Spawns a `Send` future bound to `object` (X2): the task holds only a
    /// weak reference to it (so the object's type must be `Send + Sync`; for
    /// widgets and other thread-bound objects use
    /// [`spawn_local_bound`](Scheduler::spawn_local_bound) or
    /// [`gdex::spawn_local_bound`](crate::spawn_local_bound) on their thread), and is
    /// cancelled (its future dropped, its
    /// [`current_cancellable`](crate::current_cancellable) cancelled) when
    /// the object is disposed, for example when a widget is destroyed or
    /// the last strong reference goes. Awaiting the task then gives
    /// [`Error::Cancelled`].
    ///
    /// ```
    /// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
    /// let object = gio::Cancellable::new(); // any Send + Sync GObject
    /// let task = pool.scheduler().spawn_bound(&object, std::future::pending::<()>());
    /// drop(object);
    /// assert!(matches!(gdex::block_on(task), Err(gdex::Error::Cancelled)));
    /// ```
    #[track_caller]
    pub fn spawn_bound<O, F>(&self, object: &O, future: F) -> Task<F::Output>
    where
        O: IsA<glib::Object> + Send + Sync,
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.spawn_outcome(Bound::new(self, object, future))
    }

    /// [`spawn_bound`](Scheduler::spawn_bound) for a `!Send` future, with
    /// the rules of [`spawn_local`](Scheduler::spawn_local).
    #[track_caller]
    pub fn spawn_local_bound<O, F>(&self, object: &O, future: F) -> Task<F::Output>
    where
        O: IsA<glib::Object>,
        F: Future + 'static,
        F::Output: 'static,
    {
        self.spawn_local_outcome(
            "Scheduler::spawn_local_bound",
            Bound::new(self, object, future),
        )
    }
}

/// Spawns a `!Send` future bound to `object` (X2) on the calling thread's
/// scheduler (as [`spawn_local`](crate::spawn_local) does): the task holds
/// only a weak reference, and is cancelled when the object is disposed. The
/// way to tie work to a widget or window on the main thread.
///
/// # Panics
/// As [`spawn_local`](crate::spawn_local): on a thread that does not own
/// its scheduler's context.
///
/// ```
/// use glib::prelude::*;
/// let object = glib::Object::new::<glib::Object>();
/// let weak = object.downgrade();
/// let task = gdex::spawn_local_bound(&object, async move {
///     gdex::sleep(std::time::Duration::from_secs(60)).await;
///     weak.upgrade().is_some()
/// });
/// drop(object); // disposed: the task stops
/// assert!(matches!(gdex::block_on(task), Err(gdex::Error::Cancelled)));
/// ```
#[track_caller]
pub fn spawn_local_bound<O, F>(object: &O, future: F) -> Task<F::Output>
where
    O: IsA<glib::Object>,
    F: Future + 'static,
    F::Output: 'static,
{
    let scheduler = Scheduler::thread_default().unwrap_or_else(Scheduler::main);
    scheduler.spawn_local_outcome(
        "gdex::spawn_local_bound",
        Bound::new(&scheduler, object, future),
    )
}

/// Spawns a `Send` future bound to `object` (X2) on the default pool (as
/// [`spawn`](crate::spawn) does); see [`Scheduler::spawn_bound`]. For a
/// widget, or any object that must stay on its thread, use
/// [`spawn_local_bound`].
///
/// ```
/// let object = gio::Cancellable::new(); // any Send + Sync GObject
/// let task = gdex::spawn_bound(&object, std::future::pending::<()>());
/// drop(object);
/// assert!(matches!(gdex::block_on(task), Err(gdex::Error::Cancelled)));
/// ```
#[track_caller]
pub fn spawn_bound<O, F>(object: &O, future: F) -> Task<F::Output>
where
    O: IsA<glib::Object> + Send + Sync,
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    crate::ThreadPool::default()
        .scheduler()
        .spawn_bound(object, future)
}

#[cfg(test)]
mod tests {
    /// Threads started one after the other, each after the previous one
    /// exited (so each may reuse its stack and thread-locals), never share
    /// the identity `ThreadBound` gives them (S10: a value bound to a thread
    /// is never taken for another's).
    #[test]
    fn thread_tokens_are_never_reused() {
        crate::scheduler::context::tests::watchdog(
            "thread_tokens_are_never_reused",
            60,
            thread_tokens_are_never_reused_body,
        );
    }

    fn thread_tokens_are_never_reused_body() {
        use crate::util::thread_token;
        let mut seen = std::collections::HashSet::new();
        assert!(seen.insert(thread_token()));
        for _ in 0..100 {
            let token = std::thread::spawn(thread_token).join().unwrap();
            assert_ne!(token, 0);
            assert!(seen.insert(token), "token {token} given to two threads");
        }
        assert_eq!(thread_token(), thread_token());
    }
}
