//! [`AsyncResult`]: a GIO `_async`/`_finish` method pair implemented with a
//! future (libdex's `DexAsyncResult`).
//!
//! A library written with gdex keeps the API its callers know: C, Python
//! and JavaScript call `foo_async (self, …, cancellable, callback,
//! user_data)` and, in the callback, `foo_finish (self, result, &error)`.
//! Behind it, the work is a future on any gdex scheduler. The pieces:
//!
//! - the `GAsyncResult` is a `GTask`, made by [`AsyncResult::new`] (or
//!   [`AsyncResult::from_raw`] inside an `extern "C"` `_async`) on the
//!   caller's thread, so that GIO runs the callback on the caller's
//!   thread-default main context, as GIO requires, whichever thread the
//!   future finishes on;
//! - [`AsyncResult::spawn`] (or [`spawn_local`](AsyncResult::spawn_local))
//!   runs the future on a scheduler and returns its value or error to the
//!   `GTask`;
//! - cancelling the caller's `GCancellable` drops the future on its
//!   scheduler (cancel on discard, S5) and cancels the task's own
//!   [`current_cancellable`](crate::current_cancellable), so GIO calls the
//!   future has in flight stop too; `_finish` then gives
//!   `G_IO_ERROR_CANCELLED`;
//! - a panic in the future reaches the caller as a `gdex-error-quark`
//!   [`ErrorCode::Panicked`](crate::ErrorCode::Panicked) error, never an
//!   abort; a panic in a Rust callback goes to the panic handler;
//! - [`AsyncResult::propagate`] is the `_finish`: it checks that the result
//!   is one of gdex's, made for that source object, carrying that value
//!   type, with its callback called, and not taken before; misuse takes
//!   nothing from the callback's own `_finish`.

use std::any::TypeId;
use std::future::{Future, IntoFuture};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};

use gio::prelude::*;
use glib::translate::{
    from_glib_borrow, Borrowed, FromGlibPtrBorrow, IntoGlib, IntoGlibPtr, ToGlibPtr,
};

use crate::diagnostics::panic::{contain, drop_payload, PanicSource};
use crate::error::{panic_message, IntoResult};
use crate::util::Unpoisoned;
use crate::{Error, Scheduler, Task};

/// The running half of a GIO async operation: a `GTask` whose callback runs
/// on the caller's thread-default main context, completed by a future on
/// any gdex scheduler:
///
/// - the `GTask` is made on the caller's thread, so GIO runs the callback
///   on the caller's thread-default main context, whichever thread the
///   future finishes on (never inside the operation's own task);
/// - cancelling the caller's `GCancellable` drops the future on its
///   scheduler (S5) and cancels its
///   [`current_cancellable`](crate::current_cancellable); `_finish` then
///   gives `G_IO_ERROR_CANCELLED`. The work is dropped before the caller
///   hears;
/// - a panic in the future reaches the caller as a `gdex-error-quark`
///   [`ErrorCode::Panicked`](crate::ErrorCode::Panicked) error; a panic in a
///   Rust callback goes to the panic handler;
/// - [`propagate`](AsyncResult::propagate) is the `_finish`: it checks that
///   the result is one of gdex's, made for that source object, carrying
///   that value type, with its callback called (the callback's own
///   `_finish` comes first), and not taken before.
///
/// A GObject method pair written with it (the Rust callback flavour; a C
/// `_async` uses [`from_raw`](AsyncResult::from_raw) with the caller's
/// `GAsyncReadyCallback` and `user_data` instead):
///
/// ```
/// use gdex::gio::prelude::*;
/// use gdex::{gio, glib, AsyncResult};
///
/// /// `sum_async`: adds the numbers on the pool.
/// fn sum_async(
///     source: &glib::Object,
///     numbers: Vec<u64>,
///     cancellable: Option<&gio::Cancellable>,
///     pool: &gdex::ThreadPool,
///     callback: impl FnOnce(Option<&glib::Object>, &gio::AsyncResult) + 'static,
/// ) {
///     let result = AsyncResult::new(Some(source), cancellable, callback);
///     result.spawn(&pool.scheduler(), async move {
///         Ok::<_, glib::Error>(numbers.iter().sum::<u64>())
///     });
/// }
///
/// /// `sum_finish`.
/// fn sum_finish(source: &glib::Object, result: &gio::AsyncResult) -> Result<u64, glib::Error> {
///     AsyncResult::propagate(result, Some(source))
/// }
///
/// let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
/// let object = glib::Object::new::<glib::Object>();
/// let context = glib::MainContext::new();
/// context.with_thread_default(|| {
///     let answer = std::rc::Rc::new(std::cell::Cell::new(None));
///     let seen = answer.clone();
///     sum_async(&object, vec![1, 2, 3], None, &pool, move |source, result| {
///         seen.set(Some(sum_finish(source.unwrap(), result).unwrap()));
///     });
///     while answer.get().is_none() {
///         context.iteration(true);
///     }
///     assert_eq!(answer.get(), Some(6));
/// }).unwrap();
/// ```
///
/// An `AsyncResult` is `Send` (make it on the caller's thread, spawn it
/// anywhere) but not `Sync`: GIO's task setters are not safe to race.
///
/// ```compile_fail
/// fn shared<T: Sync>() {}
/// shared::<gdex::AsyncResult>();
/// ```
#[must_use = "an AsyncResult does nothing until spawned; dropped unspawned, its callback gets an error"]
pub struct AsyncResult {
    /// `None` once spawned (the future's wrapper owns it then).
    task: Option<TaskRef>,
    cancellable: Option<gio::Cancellable>,
}

/// One strong reference to a `GTask`.
struct TaskRef(NonNull<gio::ffi::GTask>);

// SAFETY: a `GTask`'s reference count, its `g_task_return_*` functions and
// its finalization may be used from any thread (GIO's `GTask` docs: the
// callback is always invoked in the task's own context, whichever thread
// returns the value). Not `Sync`: setters such as `g_task_set_name` free
// what they replace without a lock, so two threads must not share one.
unsafe impl Send for TaskRef {}

impl TaskRef {
    fn as_ptr(&self) -> *mut gio::ffi::GTask {
        self.0.as_ptr()
    }
}

impl Drop for TaskRef {
    fn drop(&mut self) {
        // SAFETY: we own one reference, given up once here.
        unsafe { glib::gobject_ffi::g_object_unref(self.0.as_ptr().cast()) }
    }
}

/// What gdex keeps on each of its `GTask`s (as qdata): the value type the
/// future returns, the caller's callback, and how far the operation got.
struct Marks {
    /// Set when the future is spawned; unset, the result was dropped
    /// unspawned (or is not spawned yet).
    value_type: OnceLock<(TypeId, &'static str)>,
    /// The caller's `GAsyncReadyCallback`, called by [`call_back`] (the
    /// callback GIO knows), with the caller's `user_data`, which GIO keeps.
    callback: gio::ffi::GAsyncReadyCallback,
    progress: Mutex<Progress>,
}

/// How far an operation got, as `_finish` sees it.
#[derive(Default)]
struct Progress {
    stage: Stage,
    /// `_finish` took the outcome.
    taken: bool,
}

/// Where the operation's callback is. GIO calls it only once it holds the
/// outcome, so the outcome is `_finish`'s to take from `Calling` on; before,
/// `g_task_propagate_pointer` would find none (a GIO critical), and a
/// `_finish` that claimed it would leave the callback's own `_finish`
/// nothing. While the callback runs, its thread's `_finish` takes it.
#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// The callback has not been called: no outcome to take yet.
    #[default]
    Pending,
    /// The callback runs on this thread: only it may take the outcome.
    Calling(std::thread::ThreadId),
    /// The callback returned: the outcome, if nobody took it, is anyone's.
    Called,
}

/// Why `_finish` may not take the outcome.
enum Refusal {
    NotYet,
    CallbackElsewhere,
    Taken,
}

impl Marks {
    /// Claims the outcome for this thread's `_finish`, or says why not.
    fn claim(&self) -> Result<(), Refusal> {
        let mut progress = self.progress.lock().unpoisoned();
        match progress.stage {
            Stage::Pending => return Err(Refusal::NotYet),
            Stage::Calling(thread) if thread != std::thread::current().id() => {
                return Err(Refusal::CallbackElsewhere)
            }
            Stage::Calling(_) | Stage::Called => {}
        }
        if std::mem::replace(&mut progress.taken, true) {
            return Err(Refusal::Taken);
        }
        Ok(())
    }

    fn enter(&self, stage: Stage) {
        self.progress.lock().unpoisoned().stage = stage;
    }
}

/// The qdata key of [`Marks`], with gdex's version in it: two copies of
/// gdex in one process must not read each other's marks.
fn marks_quark() -> glib::Quark {
    static QUARK: OnceLock<glib::Quark> = OnceLock::new();
    *QUARK.get_or_init(|| {
        glib::Quark::from_str(concat!("gdex-async-result-", env!("CARGO_PKG_VERSION")))
    })
}

unsafe extern "C" fn free_marks(data: glib::ffi::gpointer) {
    // SAFETY: the qdata's destroy notify, called once with the box we set.
    drop(unsafe { Box::from_raw(data as *mut Marks) });
}

/// The marks of a gdex `GTask`, or `None` for any other object.
///
/// # Safety
/// `task` is a live object for all of `'a`.
unsafe fn marks<'a>(task: *mut gio::ffi::GTask) -> Option<&'a Marks> {
    // SAFETY: `task` is live (by the caller); our quark's qdata is only
    // ever a `Marks` box we set, freed with the object, so it lives as long
    // as the task does.
    unsafe {
        let data = glib::gobject_ffi::g_object_get_qdata(task.cast(), marks_quark().into_glib());
        (!data.is_null()).then(|| &*(data as *const Marks))
    }
}

impl AsyncResult {
    /// Starts an async operation of `source_object` whose `callback` runs
    /// on this thread's thread-default main context (the main context if
    /// none was pushed) once the operation completes: call it in your
    /// `_async` method, then [`spawn`](Self::spawn) the work.
    ///
    /// The callback is called on the thread that made the result; if
    /// another thread iterates that context, the call is refused with a
    /// message to the panic handler instead of running a `!Send` closure
    /// elsewhere.
    pub fn new<S, C>(
        source_object: Option<&S>,
        cancellable: Option<&gio::Cancellable>,
        callback: C,
    ) -> AsyncResult
    where
        S: IsA<glib::Object>,
        C: FnOnce(Option<&glib::Object>, &gio::AsyncResult) + 'static,
    {
        let guarded = Box::new(glib::thread_guard::ThreadGuard::new(callback));
        // SAFETY: the object and cancellable are borrowed for the call;
        // `call_rust::<C>` is called once by GIO with `guarded`, which it
        // takes back.
        unsafe {
            AsyncResult::from_raw(
                source_object.map_or(std::ptr::null_mut(), |s| s.as_ref().to_glib_none().0),
                cancellable.map_or(std::ptr::null_mut(), |c| c.to_glib_none().0),
                Some(call_rust::<C>),
                Box::into_raw(guarded).cast(),
            )
        }
    }

    /// [`new`](Self::new) from what an `extern "C"` `_async` function or
    /// vfunc receives: the source object, the caller's cancellable, its
    /// `GAsyncReadyCallback` and `user_data`. A null `callback` is allowed
    /// (the caller does not care about the outcome), as in GIO.
    ///
    /// # Safety
    ///
    /// `source_object` and `cancellable` are null or live objects of their
    /// types; `callback` may be called with `user_data` once, on this
    /// thread's thread-default main context, as GIO's own `_async`
    /// functions would.
    pub unsafe fn from_raw(
        source_object: *mut glib::gobject_ffi::GObject,
        cancellable: *mut gio::ffi::GCancellable,
        callback: gio::ffi::GAsyncReadyCallback,
        user_data: glib::ffi::gpointer,
    ) -> AsyncResult {
        // SAFETY: by the caller, the pointers are null or live; `g_task_new`
        // takes its own references and returns one for us. GIO calls
        // `call_back`, which finds the caller's callback in the marks set
        // below, before the task can complete, and gets the caller's
        // `user_data` (which `g_async_result_get_user_data` still gives).
        let raw = unsafe {
            gio::ffi::g_task_new(
                source_object.cast(),
                cancellable,
                Some(call_back),
                user_data,
            )
        };
        let task = TaskRef(NonNull::new(raw).expect("g_task_new returns a task"));
        let marks = Box::into_raw(Box::new(Marks {
            value_type: OnceLock::new(),
            callback,
            progress: Mutex::default(),
        }));
        // SAFETY: our own new task; the box is freed by `free_marks` when
        // the task is finalized.
        unsafe {
            glib::gobject_ffi::g_object_set_qdata_full(
                raw.cast(),
                marks_quark().into_glib(),
                marks.cast(),
                Some(free_marks),
            );
            // A cancelled cancellable makes `_finish` give
            // G_IO_ERROR_CANCELLED whatever the future returned (GIO's
            // default, said out loud).
            gio::ffi::g_task_set_check_cancellable(raw, true.into_glib());
        }
        let cancellable = (!cancellable.is_null()).then(|| {
            // SAFETY: a live cancellable, by the caller.
            unsafe { from_glib_borrow::<_, gio::Cancellable>(cancellable) }.clone()
        });
        AsyncResult {
            task: Some(task),
            cancellable,
        }
    }

    fn task(&self) -> &TaskRef {
        self.task
            .as_ref()
            .expect("an AsyncResult holds its task until spawned")
    }

    /// Tags the result with the `_async` function it came from (GIO's
    /// `g_task_set_source_tag`), for `_finish` to check with
    /// `AsyncResultExt::is_tagged`.
    pub fn set_source_tag(&self, tag: *const std::ffi::c_void) {
        // SAFETY: our live task; the tag is only compared, never read.
        unsafe { gio::ffi::g_task_set_source_tag(self.task().as_ptr(), tag as glib::ffi::gpointer) }
    }

    /// Names the operation (GIO's `g_task_set_name`), for debugging.
    pub fn set_name(&self, name: &str) {
        // SAFETY: our live task; GIO copies the string.
        unsafe { gio::ffi::g_task_set_name(self.task().as_ptr(), name.to_glib_none().0) }
    }

    /// The operation as a `gio::AsyncResult` (the object `_finish` gets).
    pub fn as_async_result(&self) -> gio::AsyncResult {
        // SAFETY: our live task is a `GAsyncResult`; a new reference.
        unsafe {
            glib::translate::from_glib_none(self.task().as_ptr() as *mut gio::ffi::GAsyncResult)
        }
    }

    /// Runs `future` on `scheduler` (a pool, the main thread, any context)
    /// and completes the operation with its output: `Ok(value)` for
    /// `_finish` to take with [`propagate`](Self::propagate), or the error
    /// (a `gdex::Error` becomes a `glib::Error` in `gdex-error-quark`; a
    /// `glib::Error` stays itself). The caller's cancellable cancels the
    /// future; so does a scheduler that shuts down before it finishes (the
    /// caller then gets [`ErrorCode::ShutDown`](crate::ErrorCode::ShutDown)).
    #[track_caller]
    pub fn spawn<F>(self, scheduler: &Scheduler, future: F)
    where
        F: IntoFuture,
        F::IntoFuture: Send + 'static,
        F::Output: IntoResult,
        <F::Output as IntoResult>::Ok: Send + 'static,
    {
        let (completing, slot) = self.completing(future.into_future());
        let task = scheduler.spawn(completing);
        settle(slot, task);
    }

    /// [`spawn`](Self::spawn) for a `!Send` future, on a scheduler of this
    /// thread (the main thread's, a context scheduler's on its thread, or
    /// the pool worker this runs on), as [`Scheduler::spawn_local`] allows.
    #[track_caller]
    pub fn spawn_local<F>(self, scheduler: &Scheduler, future: F)
    where
        F: IntoFuture,
        F::IntoFuture: 'static,
        F::Output: IntoResult,
        <F::Output as IntoResult>::Ok: Send + 'static,
    {
        let (completing, slot) = self.completing(future.into_future());
        let task = scheduler.spawn_local(completing);
        settle(slot, task);
    }

    fn completing<F>(mut self, future: F) -> (Completing<F>, Arc<Mutex<Slot>>)
    where
        F: Future,
        F::Output: IntoResult,
        <F::Output as IntoResult>::Ok: Send + 'static,
    {
        let task = self.task.take().expect("an AsyncResult is spawned once");
        // SAFETY: our own task, alive while we hold it.
        let marks = unsafe { marks(task.as_ptr()) }.expect("our own task is marked");
        let _ = marks.value_type.set((
            TypeId::of::<<F::Output as IntoResult>::Ok>(),
            std::any::type_name::<<F::Output as IntoResult>::Ok>(),
        ));
        let slot = Arc::new(Mutex::new(Slot {
            watched: self.cancellable.is_some(),
            ..Slot::default()
        }));
        let hook = self.cancellable.as_ref().map(|cancellable| {
            let on_cancel = slot.clone();
            let id = cancellable.connect_cancelled(move |_| {
                let handle = {
                    let mut slot = on_cancel.lock().unpoisoned();
                    slot.cancelled = true;
                    slot.handle.take()
                };
                // Dropping the handle cancels the task: its future is
                // dropped on its own scheduler (S5), never here.
                drop(handle);
            });
            (cancellable.clone(), id)
        });
        let completing = Completing {
            future: Some(future),
            task: Some(task),
            hook,
            slot: slot.clone(),
        };
        (completing, slot)
    }

    /// The `_finish` of an operation made by [`AsyncResult`]: the value
    /// the future gave, or its error (`G_IO_ERROR_CANCELLED` if the
    /// caller's cancellable was cancelled).
    ///
    /// The outcome is there to take once the operation's callback is
    /// called: from the callback (as GIO asks), or after it returned. A
    /// result dropped unspawned gives the
    /// [`ErrorCode::Dropped`](crate::ErrorCode::Dropped) error it was
    /// completed with, whatever `T`.
    ///
    /// Misuse gets an error that says what was wrong, not a crash, and
    /// takes nothing (`G_IO_ERROR_INVALID_ARGUMENT`): a result that is not a
    /// gdex `GTask`, one made for another source object, a `T` other than
    /// the future's value type, a `_finish` before the callback is called
    /// (whichever thread the future finished on), one from another thread
    /// while the callback runs, or a second `_finish` of the same result.
    /// The callback's own `_finish` still gets the outcome.
    pub fn propagate<T: 'static>(
        result: &impl IsA<gio::AsyncResult>,
        source_object: Option<&impl IsA<glib::Object>>,
    ) -> Result<T, glib::Error> {
        let misuse = |what: String| glib::Error::new(gio::IOErrorEnum::InvalidArgument, &what);
        let raw: *mut gio::ffi::GAsyncResult = result.as_ref().to_glib_none().0;
        let raw = raw as *mut gio::ffi::GTask;
        let source = source_object.map_or(std::ptr::null_mut(), |s| s.as_ref().to_glib_none().0);
        // SAFETY: `raw` is a live object we borrow; `g_task_is_valid` checks
        // its type before anything else, and the source object is live.
        let valid = unsafe { gio::ffi::g_task_is_valid(raw.cast(), source.cast()) } != 0;
        // SAFETY: `raw` is live while `result` is borrowed, for this call.
        let marks = if valid { unsafe { marks(raw) } } else { None };
        let Some(marks) = marks else {
            return Err(misuse(
                "gdex: this GAsyncResult was not made by gdex::AsyncResult for this source object; \
                 finish an operation with the _finish of the _async that started it"
                    .into(),
            ));
        };
        let want = (TypeId::of::<T>(), std::any::type_name::<T>());
        // No value type: never spawned. Dropped so, its outcome is the
        // `Dropped` error, for any `T`; not dropped yet, `claim` refuses.
        let spawned = marks.value_type.get();
        if let Some(have) = spawned.filter(|have| have.0 != want.0) {
            return Err(misuse(format!(
                "gdex: AsyncResult::propagate::<{}> on an operation whose future gives {}",
                want.1, have.1
            )));
        }
        match marks.claim() {
            Ok(()) => {}
            Err(Refusal::NotYet) => {
                return Err(misuse(
                    "gdex: this operation has not completed yet; call _finish from its callback"
                        .into(),
                ))
            }
            Err(Refusal::CallbackElsewhere) => {
                return Err(misuse(
                    "gdex: this operation's callback is running on another thread, and its \
                     _finish is the one to take the result; call _finish from the callback"
                        .into(),
                ))
            }
            Err(Refusal::Taken) => {
                return Err(misuse(
                    "gdex: the result of this operation was already taken; call _finish once"
                        .into(),
                ))
            }
        }
        let mut error = std::ptr::null_mut();
        // SAFETY: a gdex task (marks checked) whose callback was called, so
        // GIO holds its outcome (the stage, under the marks' lock, orders
        // this after the return); the pointer, if any, is a `Box<T>` (value
        // type checked; only a spawned future returns a value), taken once
        // (`claim`); we own what it gives (GIO hands over the pointer or
        // the error).
        let value = unsafe { gio::ffi::g_task_propagate_pointer(raw, &mut error) };
        if !error.is_null() {
            // SAFETY: a `GError` GIO handed over to us.
            return Err(unsafe { glib::translate::from_glib_full(error) });
        }
        if spawned.is_none() || value.is_null() {
            // Never: an unspawned result is completed with an error, a
            // spawned one's value is a box.
            return Err(misuse(
                "gdex: this operation completed without a value; call _finish from its callback"
                    .into(),
            ));
        }
        // SAFETY: see above: a `Box<T>` given by `return_now::<T>`.
        Ok(*unsafe { Box::from_raw(value as *mut T) })
    }
}

/// Dropped without being spawned: the caller still hears, with an error
/// that says so, as GIO requires of every `_async`.
impl Drop for AsyncResult {
    fn drop(&mut self) {
        let mut task = self.task.take();
        if task.is_some() {
            let error = glib::Error::new(
                crate::ErrorCode::Dropped,
                "gdex: the AsyncResult was dropped without being spawned, so the operation never ran",
            );
            complete::<()>(&mut task, &mut None, Err(error));
        }
    }
}

impl std::fmt::Debug for AsyncResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncResult")
            .field("task", &self.task.as_ref().map(TaskRef::as_ptr))
            .field("cancellable", &self.cancellable.is_some())
            .finish()
    }
}

/// The callback GIO calls for every gdex `GTask` (it has the outcome by
/// then): marks the outcome as `_finish`'s to take, from this thread while
/// the caller's callback runs, then calls that callback.
unsafe extern "C" fn call_back(
    source: *mut glib::gobject_ffi::GObject,
    result: *mut gio::ffi::GAsyncResult,
    data: glib::ffi::gpointer,
) {
    // SAFETY: GIO calls this with the live `GTask` `from_raw` made (it
    // holds a reference for the call), which carries our marks.
    let Some(marks) = (unsafe { marks(result.cast()) }) else {
        return;
    };
    marks.enter(Stage::Calling(std::thread::current().id()));
    if let Some(callback) = marks.callback {
        // SAFETY: the caller's callback with its own `user_data`, called
        // once, on the task's context, as `from_raw`'s caller expects.
        unsafe { callback(source, result, data) };
    }
    marks.enter(Stage::Called);
}

/// The callback of [`AsyncResult::new`]: the Rust closure, on the thread
/// that made it.
unsafe extern "C" fn call_rust<C>(
    source: *mut glib::gobject_ffi::GObject,
    result: *mut gio::ffi::GAsyncResult,
    data: glib::ffi::gpointer,
) where
    C: FnOnce(Option<&glib::Object>, &gio::AsyncResult) + 'static,
{
    // SAFETY: GIO calls this once with the `user_data` `new` gave: our box.
    let guarded = unsafe { Box::from_raw(data as *mut glib::thread_guard::ThreadGuard<C>) };
    let outcome = catch_unwind(AssertUnwindSafe(move || {
        if !guarded.is_owner() {
            // Neither called nor dropped here: a `!Send` closure is leaked
            // rather than touched on a thread it does not belong to.
            std::mem::forget(guarded);
            panic!(
                "gdex: an AsyncResult's callback was due on another thread than the one that made it \
                 (its thread-default context is iterated elsewhere); it was not called"
            );
        }
        let callback = guarded.into_inner();
        // SAFETY: GIO passes a live source object (or null) and result for
        // the call.
        let source: Borrowed<Option<glib::Object>> = unsafe { from_glib_borrow(source) };
        // SAFETY: as above.
        let result: Borrowed<gio::AsyncResult> =
            unsafe { gio::AsyncResult::from_glib_borrow(result) };
        callback(source.as_ref().as_ref(), &result);
    }));
    if let Err(payload) = outcome {
        contain(PanicSource::Callback, payload);
    }
}

/// Who may cancel the running operation: the caller's cancellable, through
/// the task's handle.
#[derive(Default)]
struct Slot {
    handle: Option<Task<()>>,
    /// The caller's cancellable was cancelled.
    cancelled: bool,
    /// There is a caller's cancellable to keep the handle for.
    watched: bool,
}

/// Stores the task's handle where the caller's cancellable can drop it, or
/// drops it now if the cancellable was cancelled already (before or while
/// the task was spawned); without a cancellable, detaches it.
fn settle(slot: Arc<Mutex<Slot>>, task: Task<()>) {
    let mut guard = slot.lock().unpoisoned();
    if guard.cancelled {
        drop(guard);
        drop(task);
    } else if guard.watched {
        guard.handle = Some(task);
    } else {
        drop(guard);
        task.detach();
    }
}

pin_project_lite::pin_project! {
    /// The future a scheduler runs: the operation's, then its completion.
    struct Completing<F> {
        #[pin]
        future: Option<F>,
        task: Option<TaskRef>,
        hook: Option<(gio::Cancellable, Option<gio::CancelledHandlerId>)>,
        slot: Arc<Mutex<Slot>>,
    }

    impl<F> PinnedDrop for Completing<F> {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            if this.task.is_some() {
                // Dropped unfinished: cancelled, or its scheduler shut down.
                // The work goes before the caller hears (who may start the
                // next operation from its callback); a panic in its
                // destructor must not keep the caller from hearing.
                if let Err(payload) = catch_unwind(AssertUnwindSafe(|| this.future.set(None))) {
                    contain(PanicSource::Drop, payload);
                }
                let error = if this.slot.lock().unpoisoned().cancelled {
                    glib::Error::new(gio::IOErrorEnum::Cancelled, "the operation was cancelled")
                } else {
                    Error::ShutDown.into()
                };
                complete::<()>(this.task, this.hook, Err(error));
            }
        }
    }
}

impl<F> Future for Completing<F>
where
    F: Future,
    F::Output: IntoResult,
    <F::Output as IntoResult>::Ok: Send + 'static,
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        let Some(future) = this.future.as_mut().as_pin_mut() else {
            return Poll::Ready(());
        };
        let polled = catch_unwind(AssertUnwindSafe(|| {
            // The conversion is user code too (`Into<gdex::Error>`).
            future
                .poll(cx)
                .map(|output| output.into_result().map_err(to_glib))
        }));
        let outcome = match polled {
            Ok(Poll::Pending) => return Poll::Pending,
            Ok(Poll::Ready(outcome)) => outcome,
            Err(payload) => {
                let message = panic_message(&*payload);
                drop_payload(payload);
                Err(Error::Panicked(message).into())
            }
        };
        // The future (perhaps a panicked one) goes before the caller hears;
        // a panic in its destructor must not stop the caller hearing.
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| this.future.set(None))) {
            contain(PanicSource::Drop, payload);
        }
        complete(this.task, this.hook, outcome);
        Poll::Ready(())
    }
}

/// A gdex error as GIO's callers expect it: cancellation is GIO's own
/// `G_IO_ERROR_CANCELLED`.
fn to_glib(error: Error) -> glib::Error {
    match error {
        Error::Cancelled => {
            glib::Error::new(gio::IOErrorEnum::Cancelled, "the operation was cancelled")
        }
        other => other.into(),
    }
}

/// Returns `outcome` to the `GTask` (once) after letting the caller's
/// cancellable go.
fn complete<T: Send + 'static>(
    task: &mut Option<TaskRef>,
    hook: &mut Option<(gio::Cancellable, Option<gio::CancelledHandlerId>)>,
    outcome: Result<T, glib::Error>,
) {
    let Some(task) = task.take() else { return };
    if let Some((cancellable, Some(id))) = hook.take() {
        // Without waiting for an emission under way: this may run inside
        // the handler, whose dropped handle can drop our future on the spot
        // (a `!Send` operation of a thread that has exited, on that thread
        // during its exit). See `disconnect`.
        crate::future::cancellable::disconnect(&cancellable, id);
    }
    // SAFETY: our live task; the context is borrowed from it.
    let context = unsafe { gio::ffi::g_task_get_context(task.as_ptr()) };
    // SAFETY: a live context (the task holds it).
    if unsafe { glib::ffi::g_main_context_is_owner(context) } == 0 {
        // Another thread's context: GIO queues the callback there.
        return_now(task, outcome);
        return;
    }
    // On the caller's own context (the operation ran on its scheduler):
    // GIO would call the callback right here, inside the operation's task
    // (its cancellable current, its time charged to it). Return from the
    // context's next iteration instead.
    // SAFETY: a live context; a new reference for the source to attach to.
    let context: glib::MainContext = unsafe { glib::translate::from_glib_none(context) };
    let mut pending = Some((task, outcome));
    let source = glib::idle_source_new(
        Some("gdex AsyncResult return"),
        glib::Priority::DEFAULT,
        move || {
            if let Some((task, outcome)) = pending.take() {
                return_now(task, outcome);
            }
            glib::ControlFlow::Break
        },
    );
    source.attach(Some(&context));
}

/// Returns `outcome` to the `GTask` now (GIO calls [`call_back`], at once
/// or from the task's context, after it stored the outcome).
fn return_now<T: Send + 'static>(task: TaskRef, outcome: Result<T, glib::Error>) {
    match outcome {
        Ok(value) => {
            let value = Box::into_raw(Box::new(value));
            // SAFETY: our live task, returned once (`task` was taken); GIO
            // frees the box with `drop_box::<T>` unless `propagate` takes it.
            unsafe {
                gio::ffi::g_task_return_pointer(task.as_ptr(), value.cast(), Some(drop_box::<T>))
            }
        }
        Err(error) => {
            // SAFETY: our live task, returned once; GIO takes the error.
            unsafe { gio::ffi::g_task_return_error(task.as_ptr(), error.into_glib_ptr()) }
        }
    }
}

unsafe extern "C" fn drop_box<T>(value: glib::ffi::gpointer) {
    // SAFETY: GIO's destroy notify for the `Box<T>` `complete` returned,
    // called once, if `propagate` never took it. Unwinding out of it would
    // abort: a panicking destructor goes to the panic handler.
    let value = unsafe { Box::from_raw(value as *mut T) };
    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(value))) {
        contain(PanicSource::Drop, payload);
    }
}
