//! G1: a GObject method pair `sum_async`/`sum_finish` implemented with
//! `gdex::AsyncResult`, called the way C callers call GIO: an `extern "C"`
//! `_async` with a `GAsyncReadyCallback` and `user_data`, and a `_finish`
//! taking the `GAsyncResult` and a `GError**`. Called from the main loop,
//! from a pool worker's context and from a fiber, the callback runs on the
//! caller's thread and thread-default context; the caller's cancellable
//! drops the pool work and gives `G_IO_ERROR_CANCELLED`; a panic becomes an
//! error; misuse of `_finish` is an error that says so; and the same object
//! implements `GAsyncInitable` through it.
//!
//! The operation's edges, with plain `AsyncResult`s: one dropped unspawned
//! calls back with an error and frees its closure; a `_finish` called too
//! early (also under `G_DEBUG=fatal-criticals`, in a child process) leaves
//! the real one its value; a cancelled operation's future is gone before
//! its callback runs; the callback never runs inside the operation's task;
//! a panic in the error's conversion reaches the caller as `Panicked`; and
//! a pool shut down with the operation in any state gives `ShutDown`, once.

mod common;

use std::cell::Cell;
use std::ffi::c_void;
use std::ptr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::{
    is_child, on_main, pump_during, pump_until, run_child_passing, wait_until, watchdog, Counted,
};
use gdex::gio::prelude::*;
use gdex::glib::translate::{
    from_glib_borrow, Borrowed, FromGlibPtrBorrow, IntoGlibPtr, ToGlibPtr,
};
use gdex::{fiber, gio, glib, AsyncResult};

/// The pool the object's work runs on.
fn pool() -> &'static gdex::ThreadPool {
    static POOL: OnceLock<gdex::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| gdex::ThreadPool::builder().workers(2).build().unwrap())
}

/// What the cancellable test watches.
static STARTED: AtomicUsize = AtomicUsize::new(0);
static DROPPED: OnceLock<Arc<AtomicUsize>> = OnceLock::new();
static TASK_CANCELLABLE_CANCELLED: AtomicBool = AtomicBool::new(false);

/// Asks `sum_async` to wait forever (for the cancellation test).
const FOREVER: u64 = u64::MAX;
/// Asks `sum_async` to panic.
const PANIC: u64 = 13;

mod imp {
    use super::*;
    use gdex::gio::subclass::prelude::*;

    #[derive(Default)]
    pub struct Summer {
        /// Set by the `GAsyncInitable` implementation, on a pool worker.
        pub initialised_on: Mutex<Option<String>>,
    }

    #[glib::object_subclass]
    impl ObjectSubclass for Summer {
        const NAME: &'static str = "GdexTestSummer";
        type Type = super::Summer;
        type ParentType = glib::Object;
        type Interfaces = (gio::AsyncInitable,);
    }

    impl ObjectImpl for Summer {}

    /// Replaced by `init_async`/`init_finish` below (see `summer_type`):
    /// the interface's C vfuncs are what callers reach.
    impl AsyncInitableImpl for Summer {}
}

glib::wrapper! {
    pub struct Summer(ObjectSubclass<imp::Summer>) @implements gio::AsyncInitable;
}

/// The `GAsyncInitable` vfuncs, written as a C library would, with gdex:
/// the initialisation runs on the pool.
unsafe extern "C" fn init_async(
    initable: *mut gio::ffi::GAsyncInitable,
    _io_priority: i32,
    cancellable: *mut gio::ffi::GCancellable,
    callback: gio::ffi::GAsyncReadyCallback,
    user_data: glib::ffi::gpointer,
) {
    // SAFETY: GIO calls the vfunc with a live object of our type and the
    // caller's cancellable, callback and data.
    let result =
        unsafe { AsyncResult::from_raw(initable.cast(), cancellable, callback, user_data) };
    result.set_source_tag(init_async as *const c_void);
    // SAFETY: a live object, borrowed for the call.
    let this: Borrowed<glib::Object> =
        unsafe { from_glib_borrow(initable as *mut glib::gobject_ffi::GObject) };
    let this = this.downcast_ref::<Summer>().expect("our vfunc, our type");
    let this = this.clone();
    result.spawn(&pool().scheduler(), async move {
        let worker = std::thread::current().name().unwrap_or("?").to_owned();
        *this.imp().initialised_on.lock().unwrap() = Some(worker);
        Ok::<_, glib::Error>(())
    });
}

unsafe extern "C" fn init_finish(
    initable: *mut gio::ffi::GAsyncInitable,
    result: *mut gio::ffi::GAsyncResult,
    error: *mut *mut glib::ffi::GError,
) -> glib::ffi::gboolean {
    // SAFETY: GIO passes live objects for the call.
    let (this, result): (Borrowed<glib::Object>, Borrowed<gio::AsyncResult>) = unsafe {
        (
            from_glib_borrow(initable as *mut glib::gobject_ffi::GObject),
            gio::AsyncResult::from_glib_borrow(result),
        )
    };
    assert!(is_tagged(&result, init_async as *const c_void));
    match AsyncResult::propagate::<()>(&*result, Some(&*this)) {
        Ok(()) => glib::ffi::GTRUE,
        Err(e) => {
            if !error.is_null() {
                // SAFETY: GIO's out-pointer for the error.
                unsafe { *error = e.into_glib_ptr() };
            }
            glib::ffi::GFALSE
        }
    }
}

/// GIO's `g_async_result_is_tagged`: the check a `_finish` makes.
fn is_tagged(result: &gio::AsyncResult, tag: *const c_void) -> bool {
    // SAFETY: a live result; the tag is only compared.
    unsafe {
        gio::ffi::g_async_result_is_tagged(result.to_glib_none().0, tag as glib::ffi::gpointer) != 0
    }
}

/// The type, with its `GAsyncInitable` vfuncs set to gdex's ones (what a C
/// library does in its interface init).
fn summer_type() -> glib::Type {
    static PATCHED: OnceLock<()> = OnceLock::new();
    PATCHED.get_or_init(|| {
        // SAFETY: the class is referenced (and kept: type classes are not
        // unloaded for static types) before its interface vtable is read,
        // and the vfuncs are set before any instance exists.
        unsafe {
            let class = glib::gobject_ffi::g_type_class_ref(Summer::static_type().into_glib());
            let iface = glib::gobject_ffi::g_type_interface_peek(
                class,
                gio::AsyncInitable::static_type().into_glib(),
            ) as *mut gio::ffi::GAsyncInitableIface;
            (*iface).init_async = Some(init_async);
            (*iface).init_finish = Some(init_finish);
        }
    });
    Summer::static_type()
}

use glib::subclass::prelude::ObjectSubclassIsExt;
use glib::translate::IntoGlib;

/// `gdex_test_summer_sum_async`: sums `0..n` on the pool.
unsafe extern "C" fn sum_async(
    this: *mut glib::gobject_ffi::GObject,
    n: u64,
    cancellable: *mut gio::ffi::GCancellable,
    callback: gio::ffi::GAsyncReadyCallback,
    user_data: glib::ffi::gpointer,
) {
    // SAFETY: the caller's live object, cancellable, callback and data.
    let result = unsafe { AsyncResult::from_raw(this, cancellable, callback, user_data) };
    result.set_source_tag(sum_async as *const c_void);
    result.set_name("sum_async");
    result.spawn(&pool().scheduler(), async move {
        assert!(std::thread::current()
            .name()
            .unwrap()
            .starts_with("gdex-worker"));
        if n == FOREVER {
            let _counted = Counted(DROPPED.get().unwrap().clone());
            let mine = gdex::current_cancellable().expect("inside a gdex task");
            mine.connect_cancelled(|_| TASK_CANCELLABLE_CANCELLED.store(true, Ordering::SeqCst));
            STARTED.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<()>().await;
        }
        if n == PANIC {
            panic!("thirteen is unlucky");
        }
        gdex::yield_now().await;
        Ok::<_, glib::Error>((0..n).sum::<u64>())
    });
}

/// `gdex_test_summer_sum_finish`.
unsafe extern "C" fn sum_finish(
    this: *mut glib::gobject_ffi::GObject,
    result: *mut gio::ffi::GAsyncResult,
    error: *mut *mut glib::ffi::GError,
) -> u64 {
    // SAFETY: GIO passes live objects for the call.
    let (this, result): (Borrowed<glib::Object>, Borrowed<gio::AsyncResult>) = unsafe {
        (
            from_glib_borrow(this),
            gio::AsyncResult::from_glib_borrow(result),
        )
    };
    assert!(is_tagged(&result, sum_async as *const c_void));
    match AsyncResult::propagate::<u64>(&*result, Some(&*this)) {
        Ok(v) => v,
        Err(e) => {
            // SAFETY: GIO's out-pointer for the error.
            unsafe { *error = e.into_glib_ptr() };
            0
        }
    }
}

/// What the C callback saw.
#[derive(Debug)]
struct Seen {
    thread: std::thread::ThreadId,
    context: glib::MainContext,
    value: Result<u64, glib::Error>,
}

/// Where the callback leaves what it saw, and whom it wakes.
#[derive(Default)]
struct Recorded {
    seen: Mutex<Option<Seen>>,
    waker: futures::task::AtomicWaker,
}

impl Recorded {
    fn lock(&self) -> std::sync::LockResult<std::sync::MutexGuard<'_, Option<Seen>>> {
        self.seen.lock()
    }
}

type Record = Arc<Recorded>;

/// The caller's `GAsyncReadyCallback`: finishes the call and records where
/// it ran.
unsafe extern "C" fn on_ready(
    source: *mut glib::gobject_ffi::GObject,
    result: *mut gio::ffi::GAsyncResult,
    user_data: glib::ffi::gpointer,
) {
    // SAFETY: `call` leaked one `Arc` for this one call.
    let record = unsafe { Arc::from_raw(user_data as *const Recorded) };
    let mut error = ptr::null_mut();
    // SAFETY: the source and result GIO gave us; a valid out-pointer.
    let value = unsafe { sum_finish(source, result, &mut error) };
    let value = if error.is_null() {
        Ok(value)
    } else {
        // SAFETY: the error `sum_finish` handed over.
        Err(unsafe { glib::translate::from_glib_full(error) })
    };
    *record.lock().unwrap() = Some(Seen {
        thread: std::thread::current().id(),
        context: glib::MainContext::ref_thread_default(),
        value,
    });
    record.waker.wake();
}

/// Calls `sum_async` as C would; the record fills when the callback runs.
fn call(object: &Summer, n: u64, cancellable: Option<&gio::Cancellable>) -> Record {
    let record: Record = Arc::default();
    let data = Arc::into_raw(record.clone()) as glib::ffi::gpointer;
    let raw: *mut glib::gobject_ffi::GObject = object.upcast_ref::<glib::Object>().to_glib_none().0;
    let cancellable = cancellable.map_or(ptr::null_mut(), |c| c.to_glib_none().0);
    // SAFETY: live object and cancellable; `on_ready` takes `data` back.
    unsafe { sum_async(raw, n, cancellable, Some(on_ready), data) };
    record
}

/// A `Summer`, made as C makes one (`g_object_new`): glib-rs's
/// `Object::new` insists on `AsyncInitable::new` for initable types, which
/// would run the initialisation under test.
fn new_summer() -> Summer {
    // SAFETY: a registered, instantiable type with no construct-only
    // properties; we take the one reference `g_object_new` gives.
    unsafe {
        let raw = glib::gobject_ffi::g_object_new_with_properties(
            summer_type().into_glib(),
            0,
            ptr::null_mut(),
            ptr::null(),
        );
        glib::translate::from_glib_full(
            raw as *mut <imp::Summer as glib::subclass::types::ObjectSubclass>::Instance,
        )
    }
}

#[test]
fn called_from_the_main_loop_the_callback_runs_on_the_main_context() {
    watchdog("gio_async_main", 60, || {
        on_main(|| {
            let object = new_summer();
            let record = call(&object, 100, None);
            let main = glib::MainContext::default();
            pump_until(&main, || record.lock().unwrap().is_some());
            let seen = record.lock().unwrap().take().unwrap();
            assert_eq!(seen.thread, std::thread::current().id());
            assert_eq!(seen.context, main);
            assert_eq!(seen.value.unwrap(), 4950);
        })
    });
}

#[test]
fn called_from_a_pool_task_the_callback_runs_on_that_workers_context() {
    watchdog("gio_async_worker", 60, || {
        // A pool of its own: the caller's worker must not be the one the
        // object's pool uses, or this would not show the hop back.
        let callers = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let object = new_summer();
        let task = callers.scheduler().spawn(async move {
            let record = call(&object, 10, None);
            let context = glib::MainContext::thread_default().expect("a worker's context");
            (record, std::thread::current().id(), context)
        });
        let (record, thread, context) = gdex::block_on(task).unwrap();
        wait_until(|| record.lock().unwrap().is_some());
        let seen = record.lock().unwrap().take().unwrap();
        assert_eq!(seen.thread, thread, "the caller's worker thread");
        assert_eq!(seen.context, context, "the caller's worker context");
        assert_eq!(seen.value.unwrap(), 45);
    });
}

#[test]
fn called_from_a_fiber_the_fiber_waits_for_its_callback() {
    watchdog("gio_async_fiber", 60, || {
        let callers = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let object = new_summer();
        let fiber = callers.scheduler().spawn_fiber(move || {
            let record = call(&object, 1000, None);
            // The callback runs on this worker's context, which runs while
            // the fiber waits.
            let polled = record.clone();
            fiber::wait(std::future::poll_fn(move |cx| {
                polled.waker.register(cx.waker());
                if polled.lock().unwrap().is_some() {
                    std::task::Poll::Ready(Ok::<_, gdex::Error>(()))
                } else {
                    std::task::Poll::Pending
                }
            }))
            .unwrap();
            let seen = record.lock().unwrap().take().unwrap();
            assert_eq!(seen.thread, std::thread::current().id());
            assert_eq!(Some(seen.context), glib::MainContext::thread_default());
            seen.value.unwrap()
        });
        assert_eq!(gdex::block_on(fiber).unwrap(), 499_500);
    });
}

#[test]
fn cancelling_the_callers_cancellable_drops_the_pool_work() {
    watchdog("gio_async_cancel", 60, || {
        let dropped = DROPPED.get_or_init(Arc::default).clone();
        on_main(|| {
            let object = new_summer();
            let cancellable = gio::Cancellable::new();
            let record = call(&object, FOREVER, Some(&cancellable));
            wait_until(|| STARTED.load(Ordering::SeqCst) == 1);
            cancellable.cancel();
            // The future is dropped on its worker, and the task's own
            // cancellable (current_cancellable) is cancelled with it.
            wait_until(|| dropped.load(Ordering::SeqCst) == 1);
            wait_until(|| TASK_CANCELLABLE_CANCELLED.load(Ordering::SeqCst));
            let main = glib::MainContext::default();
            pump_until(&main, || record.lock().unwrap().is_some());
            let seen = record.lock().unwrap().take().unwrap();
            let err = seen.value.unwrap_err();
            assert!(err.matches(gio::IOErrorEnum::Cancelled), "{err}");
        })
    });
}

#[test]
fn an_already_cancelled_cancellable_never_starts_the_work() {
    watchdog("gio_async_cancelled_before", 60, || {
        on_main(|| {
            let object = new_summer();
            let cancellable = gio::Cancellable::new();
            cancellable.cancel();
            let record = call(&object, 5, Some(&cancellable));
            let main = glib::MainContext::default();
            pump_until(&main, || record.lock().unwrap().is_some());
            let err = record.lock().unwrap().take().unwrap().value.unwrap_err();
            assert!(err.matches(gio::IOErrorEnum::Cancelled), "{err}");
        })
    });
}

#[test]
fn a_panic_in_the_work_reaches_the_caller_as_an_error() {
    watchdog("gio_async_panic", 60, || {
        on_main(|| {
            let object = new_summer();
            let record = call(&object, PANIC, None);
            let main = glib::MainContext::default();
            pump_until(&main, || record.lock().unwrap().is_some());
            let err = record.lock().unwrap().take().unwrap().value.unwrap_err();
            assert!(err.matches(gdex::ErrorCode::Panicked), "{err}");
            assert!(err.message().contains("thirteen is unlucky"), "{err}");
        })
    });
}

#[test]
fn the_object_initialises_through_gasyncinitable_on_the_pool() {
    watchdog("gio_async_initable", 60, || {
        on_main(|| {
            let object = new_summer();
            let done = Arc::new(Mutex::new(None));
            let seen = done.clone();
            // The plain GIO call; it reaches our vfuncs.
            // SAFETY: a fresh object, initialised once.
            unsafe {
                object.init_async(glib::Priority::DEFAULT, gio::Cancellable::NONE, move |r| {
                    *seen.lock().unwrap() = Some(r);
                })
            };
            let main = glib::MainContext::default();
            pump_until(&main, || done.lock().unwrap().is_some());
            done.lock().unwrap().take().unwrap().unwrap();
            let worker = object.imp().initialised_on.lock().unwrap().clone().unwrap();
            assert!(worker.starts_with("gdex-worker"), "initialised on {worker}");
        })
    });
}

#[test]
fn finishing_wrongly_is_an_error_that_says_what_was_wrong() {
    watchdog("gio_async_misuse", 60, || {
        on_main(|| {
            let object = new_summer();
            let other = new_summer();
            let results: Arc<Mutex<Vec<gio::AsyncResult>>> = Arc::default();
            let keep = results.clone();
            let result = AsyncResult::new(Some(&object), None, move |_, r| {
                keep.lock().unwrap().push(r.clone())
            });
            result.spawn(&pool().scheduler(), async { Ok::<_, glib::Error>(7u32) });
            let main = glib::MainContext::default();
            pump_until(&main, || !results.lock().unwrap().is_empty());
            let r = results.lock().unwrap().pop().unwrap();
            let wrong_object = AsyncResult::propagate::<u32>(&r, Some(&other)).unwrap_err();
            assert!(
                wrong_object.message().contains("for this source object"),
                "{wrong_object}"
            );
            let wrong_type = AsyncResult::propagate::<u64>(&r, Some(&object)).unwrap_err();
            assert!(wrong_type.message().contains("u32"), "{wrong_type}");
            assert_eq!(AsyncResult::propagate::<u32>(&r, Some(&object)).unwrap(), 7);
            let twice = AsyncResult::propagate::<u32>(&r, Some(&object)).unwrap_err();
            assert!(twice.message().contains("already taken"), "{twice}");
            // A GAsyncResult gdex did not make.
            // SAFETY: the callback does nothing, and runs on this thread's
            // context, which this thread iterates.
            let foreign = unsafe {
                gio::Task::<bool>::new(
                    Some(&object),
                    gio::Cancellable::NONE,
                    |_, _: Option<&Summer>| {},
                )
            };
            let err = AsyncResult::propagate::<u32>(&foreign, Some(&object)).unwrap_err();
            assert!(
                err.message().contains("not made by gdex::AsyncResult"),
                "{err}"
            );
            // SAFETY: returned once, on the thread that made it.
            unsafe { foreign.return_result(Ok(true)) };
        })
    });
}

#[test]
fn a_rust_callback_due_on_another_thread_is_refused_not_run() {
    watchdog("gio_async_wrong_thread", 60, || {
        let reports = Arc::new(AtomicUsize::new(0));
        let seen = reports.clone();
        gdex::set_panic_handler(move |event| {
            if event.source == gdex::PanicSource::Callback {
                seen.fetch_add(1, Ordering::SeqCst);
            }
        });
        let context = glib::MainContext::new();
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        context
            .with_thread_default(|| {
                let result = AsyncResult::new(None::<&glib::Object>, None, move |_, _| {
                    flag.store(true, Ordering::SeqCst)
                });
                result.spawn(&pool().scheduler(), async { Ok::<_, glib::Error>(()) });
            })
            .unwrap();
        // Another thread iterates the context the callback is due on.
        let iterate = context.clone();
        let seen = reports.clone();
        std::thread::spawn(move || {
            iterate
                .with_thread_default(|| pump_until(&iterate, || seen.load(Ordering::SeqCst) == 1))
                .unwrap();
        })
        .join()
        .unwrap();
        assert!(!ran.load(Ordering::SeqCst));
        gdex::reset_panic_handler();
    });
}

/// A `gio::AsyncResult` handed to another thread, for a `_finish` called
/// there (misuse the test commits on purpose).
struct OnAnotherThread(gio::AsyncResult);

// SAFETY: `AsyncResult::propagate` is what the other thread calls, and it
// only reads the task's type, its qdata (both thread-safe in GObject) and
// gdex's marks (atomics and a lock) until the outcome is the caller's to
// take; the reference is dropped there, which GObject's refcounting allows.
unsafe impl Send for OnAnotherThread {}

/// Counts the GIO criticals logged while it lives (`g_return_if_fail`
/// failures: a `_finish` that read a task with no outcome yet).
struct Criticals {
    count: Arc<AtomicUsize>,
    handler: Option<glib::LogHandlerId>,
}

impl Criticals {
    fn watch() -> Criticals {
        let count = Arc::new(AtomicUsize::new(0));
        let seen = count.clone();
        let handler = glib::log_set_handler(
            Some("GLib-GIO"),
            glib::LogLevels::LEVEL_CRITICAL,
            false,
            false,
            move |_, _, message| {
                eprintln!("GLib-GIO-CRITICAL: {message}");
                seen.fetch_add(1, Ordering::SeqCst);
            },
        );
        Criticals {
            count,
            handler: Some(handler),
        }
    }
}

impl Drop for Criticals {
    fn drop(&mut self) {
        if let Some(handler) = self.handler.take() {
            glib::log_remove_handler(Some("GLib-GIO"), handler);
        }
    }
}

/// A `_finish` called from another thread while the operation completes
/// (before or while its callback runs) gets an error that says why and
/// takes nothing: the callback's own `_finish` gets the value, and GIO
/// logs no critical (G1). Each round races a thread that calls `_finish`
/// in a loop against the return of the value from a pool worker.
#[test]
fn a_finish_racing_the_completion_leaves_the_callback_its_value() {
    watchdog("gio_async_finish_race", 120, || {
        let criticals = Criticals::watch();
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let rounds = common::stress(200);
        // Rounds where the early `_finish` took the value, and rounds where
        // the callback's `_finish` did not get it.
        let (mut stolen, mut lost) = (0, Vec::new());
        for round in 0..rounds {
            let context = glib::MainContext::new();
            let (early, got) = context
                .with_thread_default(|| {
                    let (go, wait) = futures::channel::oneshot::channel::<()>();
                    let got: Arc<Mutex<Option<Result<u32, glib::Error>>>> = Arc::default();
                    let seen = got.clone();
                    let result = AsyncResult::new(None::<&glib::Object>, None, move |_, r| {
                        let value = AsyncResult::propagate::<u32>(r, None::<&glib::Object>);
                        *seen.lock().unwrap() = Some(value);
                    });
                    let view = OnAnotherThread(result.as_async_result());
                    result.spawn(&pool.scheduler(), async move {
                        let _ = wait.await;
                        Ok::<_, glib::Error>(7u32)
                    });
                    let spinning = Arc::new(AtomicBool::new(false));
                    let started = spinning.clone();
                    let finished = got.clone();
                    let early = std::thread::spawn(move || {
                        let view = view;
                        while finished.lock().unwrap().is_none() {
                            let early =
                                AsyncResult::propagate::<u32>(&view.0, None::<&glib::Object>);
                            started.store(true, Ordering::SeqCst);
                            match early {
                                Ok(value) => return Some(value),
                                // "Already taken" once the callback took it.
                                Err(e) => assert!(
                                    ["not completed yet", "callback is running", "already taken"]
                                        .iter()
                                        .any(|why| e.message().contains(why)),
                                    "{e}"
                                ),
                            }
                        }
                        None
                    });
                    wait_until(|| spinning.load(Ordering::SeqCst));
                    go.send(()).unwrap();
                    pump_until(&context, || got.lock().unwrap().is_some());
                    let early = early.join().unwrap();
                    let got = got.lock().unwrap().take().unwrap();
                    (early, got)
                })
                .unwrap();
            stolen += usize::from(early.is_some());
            if got.as_ref().ok() != Some(&7) {
                lost.push((round, got));
            }
        }
        assert!(
            stolen == 0 && lost.is_empty(),
            "of {rounds} rounds, the early _finish took the value in {stolen}, and the callback's \
             _finish did not get it in {} (first: {:?})",
            lost.len(),
            lost.first()
        );
        assert_eq!(criticals.count.load(Ordering::SeqCst), 0, "GIO criticals");
    });
}

/// An `AsyncResult` dropped without being spawned calls back, and its
/// `_finish` (whatever value type it asks for) gives the `Dropped` error it
/// was completed with, not a complaint about the caller (G1).
#[test]
fn an_unspawned_result_finishes_with_the_dropped_error() {
    watchdog("gio_async_unspawned", 60, || {
        let context = glib::MainContext::new();
        context
            .with_thread_default(|| {
                let got: Arc<Mutex<Option<glib::Error>>> = Arc::default();
                let seen = got.clone();
                let result = AsyncResult::new(None::<&glib::Object>, None, move |_, r| {
                    let err = AsyncResult::propagate::<u64>(r, None::<&glib::Object>)
                        .expect_err("nothing ran, so there is no value");
                    *seen.lock().unwrap() = Some(err);
                });
                drop(result);
                pump_until(&context, || got.lock().unwrap().is_some());
                let err = got.lock().unwrap().take().unwrap();
                assert!(err.matches(gdex::ErrorCode::Dropped), "{err}");
                assert!(err.message().contains("without being spawned"), "{err}");
            })
            .unwrap();
    });
}

/// Cancels its cancellable when dropped.
struct CancelOnDrop(gio::Cancellable);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// G1: the caller's cancellable, cancelled on the thread whose `!Send`
/// operation it cancels while that thread exits, ends the operation
/// without waiting for itself. The cancellation drops the operation's task
/// handle; the task is idle and its thread gone, so its future is dropped
/// at once, inside the cancellable's `cancelled` emission, and lets go of
/// its handler there (`g_cancellable_disconnect` would wait for the
/// emission to end, on GLib 2.74 for ever).
#[test]
fn an_operation_dropped_inside_its_callers_cancellation_does_not_wait_for_itself() {
    watchdog(
        "an_operation_dropped_inside_its_callers_cancellation",
        30,
        || {
            let cancellable = gio::Cancellable::new();
            let dropped = Arc::new(AtomicUsize::new(0));
            let (c, d) = (cancellable.clone(), dropped.clone());
            std::thread::Builder::new()
                .name("exiting-caller".into())
                .spawn(move || {
                    let context = glib::MainContext::new();
                    let scheduler = gdex::Scheduler::for_context(&context);
                    context
                        .with_thread_default(|| {
                            let polled = Arc::new(AtomicUsize::new(0));
                            let (guard, not_send) = (Counted(d), std::rc::Rc::new(()));
                            let result =
                                AsyncResult::new(None::<&glib::Object>, Some(&c), |_, _| {});
                            result.spawn_local(
                                &scheduler,
                                common::after_first_poll(&polled, async move {
                                    let _guard = guard;
                                    std::future::pending::<()>().await;
                                    drop(not_send);
                                    Ok::<(), glib::Error>(())
                                }),
                            );
                            pump_until(&context, || polled.load(Ordering::SeqCst) == 1);
                            // Queued, never run: dropped when this thread exits.
                            let cancel_on_drop = CancelOnDrop(c);
                            scheduler
                                .spawn_local(async move {
                                    let _cancel_on_drop = cancel_on_drop;
                                })
                                .detach();
                        })
                        .expect("a fresh context is free");
                })
                .unwrap()
                .join()
                .unwrap();
            assert!(cancellable.is_cancelled());
            assert_eq!(dropped.load(Ordering::SeqCst), 1, "the work was dropped");
        },
    );
}

// ---------------------------------------------------------------------------
// The operation's life at its edges: never spawned, finished too early,
// cancelled, completed on the caller's own context, failing in the error
// conversion, and shut down in every state.
// ---------------------------------------------------------------------------

const NO_SOURCE: Option<&glib::Object> = None;

/// Runs `body` on a fresh context pushed as this thread's thread-default
/// (no gdex scheduler on it: a plain GIO caller's).
fn on_private<R>(body: impl FnOnce(&glib::MainContext) -> R) -> R {
    let context = glib::MainContext::new();
    context
        .with_thread_default(|| body(&context))
        .expect("a fresh context is free")
}

/// Whether `cell` holds a value (taken and put back: a `Cell` of a
/// non-`Copy` value lends none).
fn holds<T>(cell: &Cell<Option<T>>) -> bool {
    let value = cell.take();
    let held = value.is_some();
    cell.set(value);
    held
}

/// Drop sets its flag only after a pause: a future that holds one takes a
/// while to go.
struct SlowDrop(Arc<AtomicBool>);

impl Drop for SlowDrop {
    fn drop(&mut self) {
        std::thread::sleep(Duration::from_millis(400));
        self.0.store(true, Ordering::SeqCst);
    }
}

/// An `AsyncResult` dropped unspawned calls its callback with an error, and
/// the callback's captures are freed (G1; its `#[must_use]` says so).
/// Without a `Drop` for `AsyncResult`, the `GTask` was finalized without
/// ever returning: the callback was never called and the boxed
/// `ThreadGuard<C>` (with the closure's captures) leaked.
#[test]
fn an_unspawned_result_calls_back_with_an_error() {
    watchdog("gio_async_unspawned_calls_back", 30, || {
        on_private(|context| {
            let calls = Rc::new(Cell::new(0));
            let captured = Arc::new(AtomicUsize::new(0));
            let seen = calls.clone();
            let guard = Counted(captured.clone());
            let result = AsyncResult::new(NO_SOURCE, None, move |_, r| {
                let _keep = &guard;
                assert!(AsyncResult::propagate::<()>(r, NO_SOURCE).is_err());
                seen.set(seen.get() + 1);
            });
            drop(result);
            pump_during(context, Duration::from_millis(300));
            assert_eq!(
                calls.get(),
                1,
                "an AsyncResult dropped unspawned must call its callback with an error"
            );
            assert_eq!(
                captured.load(Ordering::SeqCst),
                1,
                "the callback's captures leaked"
            );
        })
    });
}

/// A `_finish` called before the operation completed gets "has not
/// completed yet" and takes nothing: the real `_finish` in the callback
/// gets the value (G1). When `propagate` set `taken` before it knew the
/// operation had completed, the callback's `_finish` got "already taken"
/// instead (and GIO printed a critical for `task->result_set`).
#[test]
fn finishing_too_early_leaves_the_real_finish_its_value() {
    watchdog("gio_async_early_finish", 30, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        on_private(|context| {
            let (go, wait) = futures::channel::oneshot::channel::<()>();
            let got: Rc<Cell<Option<Result<u32, String>>>> = Rc::default();
            let seen = got.clone();
            let result = AsyncResult::new(NO_SOURCE, None, move |_, r| {
                seen.set(Some(
                    AsyncResult::propagate::<u32>(r, NO_SOURCE).map_err(|e| e.to_string()),
                ));
            });
            let early_view = result.as_async_result();
            result.spawn(&pool.scheduler(), async move {
                let _ = wait.await;
                Ok::<_, glib::Error>(7u32)
            });
            let early = AsyncResult::propagate::<u32>(&early_view, NO_SOURCE).unwrap_err();
            assert!(early.message().contains("not completed yet"), "{early}");
            go.send(()).unwrap();
            pump_until(context, || holds(&got));
            assert_eq!(
                got.take().unwrap(),
                Ok(7),
                "the callback's _finish lost the value"
            );
        })
    });
}

/// The same early `_finish` under `G_DEBUG=fatal-criticals`, in a child
/// process: misuse gets an error, not a crash (G1), and
/// `g_task_propagate_pointer` on an unfinished task is a GLib critical.
#[test]
fn finishing_too_early_is_no_glib_critical() {
    run_child_passing(
        "child_finish_too_early",
        &[("G_DEBUG", "fatal-criticals")],
        30,
        "",
    );
}

#[test]
#[ignore = "run by finishing_too_early_is_no_glib_critical"]
fn child_finish_too_early() {
    if !is_child() {
        return;
    }
    let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
    on_private(|_| {
        let (go, wait) = futures::channel::oneshot::channel::<()>();
        let result = AsyncResult::new(NO_SOURCE, None, |_, _| {});
        let view = result.as_async_result();
        result.spawn(&pool.scheduler(), async move {
            let _ = wait.await;
            Ok::<_, glib::Error>(1u32)
        });
        let err = AsyncResult::propagate::<u32>(&view, NO_SOURCE).unwrap_err();
        assert!(err.message().contains("not completed yet"), "{err}");
        go.send(()).unwrap();
    });
}

// (A task name set from two threads through a shared `&AsyncResult` is a
// compile error: `AsyncResult` is not `Sync`; see the `compile_fail`
// example in its docs.)

/// A cancelled operation's future is dropped before the caller's callback
/// runs (G1), as on the poll path ("the future goes before the caller
/// hears"): the callback may start the next operation, which must not find
/// the cancelled work still holding its resources. On the cancel (and
/// shutdown) path, `PinnedDrop` used to return the error to the `GTask`
/// first and drop the future field afterwards.
#[test]
fn a_cancelled_operation_drops_its_future_before_calling_back() {
    watchdog("gio_async_cancel_order", 30, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        on_private(|context| {
            let cancellable = gio::Cancellable::new();
            let (dropped, started) = (
                Arc::new(AtomicBool::new(false)),
                Arc::new(AtomicBool::new(false)),
            );
            let seen: Rc<Cell<Option<bool>>> = Rc::default();
            let (record, flag) = (seen.clone(), dropped.clone());
            let result = AsyncResult::new(NO_SOURCE, Some(&cancellable), move |_, r| {
                let err = AsyncResult::propagate::<()>(r, NO_SOURCE).unwrap_err();
                assert!(err.matches(gio::IOErrorEnum::Cancelled), "{err}");
                record.set(Some(flag.load(Ordering::SeqCst)));
            });
            let (guard, go) = (SlowDrop(dropped.clone()), started.clone());
            result.spawn(&pool.scheduler(), async move {
                let _guard = guard;
                go.store(true, Ordering::SeqCst);
                std::future::pending::<()>().await;
                Ok::<_, glib::Error>(())
            });
            wait_until(|| started.load(Ordering::SeqCst));
            cancellable.cancel();
            pump_until(context, || {
                let v = seen.get();
                v.is_some()
            });
            assert_eq!(
                seen.get(),
                Some(true),
                "the callback ran while the cancelled future was still being dropped"
            );
        })
    });
}

/// The caller's callback is main-loop code, not task code: it runs outside
/// the operation's gdex task, even when the operation completes on the
/// caller's own context (G1). GIO completes a `GTask` synchronously when
/// `g_task_return_*` is called from a source of the task's own context in
/// a later iteration: without gdex's idle hop, the callback ran inside the
/// operation's task poll (`Completing::poll` -> `complete`), where
/// `current_cancellable()` was the finished operation's and the stall
/// watchdog charged the callback to it.
#[test]
fn the_callback_runs_outside_the_operations_task() {
    watchdog("gio_async_sync_callback", 30, || {
        let context = glib::MainContext::new();
        let scheduler = gdex::Scheduler::for_context(&context);
        context
            .with_thread_default(|| {
                let seen: Rc<Cell<Option<bool>>> = Rc::default();
                let record = seen.clone();
                let result = AsyncResult::new(NO_SOURCE, None, move |_, r| {
                    record.set(Some(gdex::current_cancellable().is_some()));
                    assert_eq!(AsyncResult::propagate::<u32>(r, NO_SOURCE).unwrap(), 1);
                });
                std::thread::sleep(Duration::from_millis(2));
                result.spawn(&scheduler, async { Ok::<_, glib::Error>(1u32) });
                pump_until(&context, || seen.get().is_some());
                assert_eq!(
                    seen.get(),
                    Some(false),
                    "the GAsyncReadyCallback ran inside the operation's gdex task"
                );
            })
            .unwrap();
    });
}

/// An error type whose conversion into `gdex::Error` panics.
struct Weird;

impl From<Weird> for gdex::Error {
    fn from(_: Weird) -> Self {
        panic!("converting the error panicked")
    }
}

/// A panic in the user's `Into<gdex::Error>` conversion of the future's
/// error reaches the caller as `Panicked` (G1, S6). When
/// `output.into_result()` ran outside `Completing::poll`'s `catch_unwind`,
/// its panic left `task` set, the `Completing` was dropped unfinished and
/// the caller heard `ShutDown` instead.
#[test]
fn a_panic_in_the_error_conversion_reaches_the_caller_as_panicked() {
    watchdog("gio_async_into_result_panic", 30, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        on_private(|context| {
            let seen: Rc<Cell<Option<glib::Error>>> = Rc::default();
            let record = seen.clone();
            let result = AsyncResult::new(NO_SOURCE, None, move |_, r| {
                record.set(Some(
                    AsyncResult::propagate::<u32>(r, NO_SOURCE).unwrap_err(),
                ));
            });
            result.spawn(&pool.scheduler(), async { Err::<u32, Weird>(Weird) });
            pump_until(context, || holds(&seen));
            let err = seen.take().unwrap();
            assert!(err.matches(gdex::ErrorCode::Panicked), "got {err}");
        })
    });
}

/// Scheduler shutdown with the operation in every state: spawned after the
/// pool closed, queued behind a busy task, running (in a long poll), and
/// waiting; with and without a caller's cancellable. The caller always
/// hears `ShutDown`, once (G1, S9).
#[test]
fn holds_shutdown_in_every_state_gives_shut_down() {
    watchdog("gio_async_shutdown_every_state", 60, || {
        for with_cancellable in [false, true] {
            for state in ["closed before spawn", "queued", "running", "waiting"] {
                on_private(|context| {
                    let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
                    let scheduler = pool.scheduler();
                    let cancellable = with_cancellable.then(gio::Cancellable::new);
                    let calls = Rc::new(Cell::new(0));
                    let seen: Rc<Cell<Option<glib::Error>>> = Rc::default();
                    let (c, s) = (calls.clone(), seen.clone());
                    let result = AsyncResult::new(NO_SOURCE, cancellable.as_ref(), move |_, r| {
                        c.set(c.get() + 1);
                        s.set(AsyncResult::propagate::<()>(r, NO_SOURCE).err());
                    });
                    let started = Arc::new(AtomicBool::new(false));
                    let go = started.clone();
                    let work = async move {
                        go.store(true, Ordering::SeqCst);
                        if state == "running" {
                            common::spin(Duration::from_millis(200));
                        }
                        std::future::pending::<()>().await;
                        Ok::<_, glib::Error>(())
                    };
                    match state {
                        "closed before spawn" => {
                            pool.shutdown();
                            result.spawn(&scheduler, work);
                        }
                        "queued" => {
                            let busy = Arc::new(AtomicBool::new(false));
                            let b = busy.clone();
                            scheduler
                                .spawn(async move {
                                    b.store(true, Ordering::SeqCst);
                                    common::spin(Duration::from_millis(200));
                                })
                                .detach();
                            wait_until(|| busy.load(Ordering::SeqCst));
                            result.spawn(&scheduler, work);
                            pool.shutdown();
                            assert!(!started.load(Ordering::SeqCst));
                        }
                        _ => {
                            result.spawn(&scheduler, work);
                            wait_until(|| started.load(Ordering::SeqCst));
                            pool.shutdown();
                        }
                    }
                    pump_until(context, || calls.get() > 0);
                    pump_during(context, Duration::from_millis(20));
                    assert_eq!(calls.get(), 1, "{state}");
                    let err = seen.take().expect("an error");
                    assert!(err.matches(gdex::ErrorCode::ShutDown), "{state}: {err}");
                    if let Some(c) = cancellable {
                        c.cancel(); // after completion: nothing happens
                    }
                })
            }
        }
    });
}
