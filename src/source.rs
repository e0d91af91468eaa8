//! The one custom `GSource` each gdex scheduler attaches to its context.
//!
//! A scheduler never creates a source per task: its queue is drained by one
//! `GSource` (S1, P2), written with `glib-sys` so that its readiness can be
//! tested without locks or allocation. Two flavours share one C struct:
//!
//! - *ready-time* sources (`prepare`/`check` unset), such as gdex timers:
//!   they are marked ready with `g_source_set_ready_time`, which is
//!   thread-safe and wakes the context if it sleeps;
//! - *polled* sources: `prepare` and `check` ask the hooks as well. A pool
//!   worker's own pushes then cost no syscall and a remote wake-up is one
//!   `g_main_context_wakeup`; a context scheduler uses both ways (pushes
//!   set the ready time, `prepare` finds the `!Send` jobs that only the
//!   iterating thread may run).
//!
//! A source's hooks are called by whichever thread iterates its context
//! (which may change over time) and dropped by whichever thread drops the
//! source's last reference, so they must be `Send + Sync`.
//!
//! Every callback runs on the thread that iterates the context and catches
//! panics: a panic out of an `extern "C"` callback would abort the process.

use std::ffi::CStr;
use std::panic::{catch_unwind, AssertUnwindSafe};

use glib::translate::ToGlibPtr;
use glib_sys as ffi;

/// What a source asks of its owner. `Send + Sync`: see the module comment;
/// this is what makes [`SourceRef`] sound to share.
pub(crate) trait Hooks: Send + Sync + 'static {
    /// For polled sources: is there work to dispatch now?
    fn ready(&self) -> bool {
        false
    }
    /// Runs a bounded slice of work. Returns `false` to remove the source.
    fn dispatch(&self, source: *mut ffi::GSource) -> bool;
}

#[repr(C)]
struct HookSource {
    base: ffi::GSource,
    /// Written once right after `g_source_new` (which zero-fills, and an
    /// all-zero `Option<Box<_>>` is `None`); taken in `finalize`.
    hooks: Option<Box<dyn Hooks>>,
    /// The tag of the one unix fd the source polls ([`SourceRef::attach_fd`]),
    /// or null. Written before the source is attached, then only read.
    fd_tag: ffi::gpointer,
}

/// Owns one reference to a gdex `GSource`.
pub(crate) struct SourceRef {
    raw: *mut ffi::GSource,
}

// SAFETY: the only calls made through `raw` are `g_source_set_ready_time`,
// `g_source_destroy` and `g_source_unref`, which GLib documents as
// thread-safe. Dropping the last reference on this thread finalizes the
// source here, dropping its hooks here, and the hooks may be called by any
// thread that iterates the context: both are sound because `Hooks: Send +
// Sync` (a source made by `from_raw` holds no hooks of ours).
unsafe impl Send for SourceRef {}
// SAFETY: as for `Send`: every method takes `&self` and is thread-safe, and
// the hooks behind it are `Sync`.
unsafe impl Sync for SourceRef {}

impl SourceRef {
    /// Creates a source with the given hooks and attaches it to `context`.
    /// `polled` selects the prepare/check flavour.
    pub(crate) fn attach(
        context: &glib::MainContext,
        hooks: Box<dyn Hooks>,
        polled: bool,
        name: &'static CStr,
        priority: i32,
        can_recurse: bool,
    ) -> SourceRef {
        Self::create(context, hooks, polled, None, name, priority, can_recurse)
    }

    /// Creates a source that also polls `fd` for `events` and attaches it
    /// to `context`: it dispatches when the fd is ready (see [`fd_revents`]
    /// for what it was ready for), when its ready time comes, and (if
    /// `polled`) when its hooks say it is ready.
    ///
    /// The caller keeps `fd` open until the source is destroyed.
    pub(crate) fn attach_fd(
        context: &glib::MainContext,
        hooks: Box<dyn Hooks>,
        polled: bool,
        fd: std::os::fd::RawFd,
        events: glib::IOCondition,
        name: &'static CStr,
        priority: i32,
    ) -> SourceRef {
        Self::create(
            context,
            hooks,
            polled,
            Some((fd, events)),
            name,
            priority,
            false,
        )
    }

    fn create(
        context: &glib::MainContext,
        hooks: Box<dyn Hooks>,
        polled: bool,
        fd: Option<(std::os::fd::RawFd, glib::IOCondition)>,
        name: &'static CStr,
        priority: i32,
        can_recurse: bool,
    ) -> SourceRef {
        let funcs: &'static ffi::GSourceFuncs = if polled { &POLLED } else { &READY_TIME };
        let size = std::mem::size_of::<HookSource>() as u32;
        // SAFETY: `g_source_new` allocates at least `size` zeroed bytes
        // whose prefix is a `GSource`; `funcs` is a `'static` table GLib
        // only reads; `hooks`, the fd and its tag are written before the
        // source is attached, so no callback can see them unset.
        unsafe {
            let raw = ffi::g_source_new(funcs as *const _ as *mut _, size);
            let hook_source = raw as *mut HookSource;
            std::ptr::addr_of_mut!((*hook_source).hooks).write(Some(hooks));
            if let Some((fd, events)) = fd {
                let tag = ffi::g_source_add_unix_fd(raw, fd, events.bits());
                std::ptr::addr_of_mut!((*hook_source).fd_tag).write(tag);
            }
            ffi::g_source_set_name(raw, name.as_ptr());
            ffi::g_source_set_priority(raw, priority);
            ffi::g_source_set_can_recurse(raw, can_recurse as ffi::gboolean);
            ffi::g_source_attach(raw, context.to_glib_none().0);
            SourceRef { raw }
        }
    }

    /// Takes over one reference to a source made elsewhere (any kind).
    ///
    /// # Safety
    /// `raw` must be a live `GSource` whose reference the caller owns and
    /// hands over. Only the thread-safe methods (`destroy`, drop) may be
    /// used on a source that is not a gdex hook source. Since a `SourceRef`
    /// is `Send + Sync`, its callback and callback data must be sound to
    /// call and to release on any thread.
    pub(crate) unsafe fn from_raw(raw: *mut ffi::GSource) -> SourceRef {
        SourceRef { raw }
    }

    /// Makes a ready-time source dispatch on its context's next iteration,
    /// waking the context if it sleeps. Thread-safe.
    #[inline]
    pub(crate) fn set_ready(&self) {
        // SAFETY: `raw` is alive (we own a reference); the call is thread-safe.
        unsafe { ffi::g_source_set_ready_time(self.raw, 0) }
    }

    /// Makes a source dispatch once the monotonic clock
    /// (`g_get_monotonic_time`, µs) reaches `time`; `-1` unsets it.
    /// Thread-safe.
    pub(crate) fn set_ready_time(&self, time: i64) {
        // SAFETY: `raw` is alive (we own a reference); the call is thread-safe.
        unsafe { ffi::g_source_set_ready_time(self.raw, time) }
    }

    pub(crate) fn destroy(&self) {
        // SAFETY: `raw` is alive (we own a reference); destroying an already
        // destroyed source is allowed and does nothing.
        unsafe { ffi::g_source_destroy(self.raw) }
    }
}

impl Drop for SourceRef {
    fn drop(&mut self) {
        // SAFETY: we own exactly one reference, given up here.
        unsafe { ffi::g_source_unref(self.raw) }
    }
}

static READY_TIME: ffi::GSourceFuncs = ffi::GSourceFuncs {
    prepare: None,
    check: None,
    dispatch: Some(dispatch),
    finalize: Some(finalize),
    closure_callback: None,
    closure_marshal: None,
};

static POLLED: ffi::GSourceFuncs = ffi::GSourceFuncs {
    prepare: Some(prepare),
    check: Some(check),
    dispatch: Some(dispatch),
    finalize: Some(finalize),
    closure_callback: None,
    closure_marshal: None,
};

/// For a source made by [`SourceRef::attach_fd`], called from its
/// [`Hooks::dispatch`]: what its fd was found ready for in this iteration
/// (empty if the source dispatched for another reason).
pub(crate) fn fd_revents(source: *mut ffi::GSource) -> glib::IOCondition {
    // SAFETY: `dispatch` passes its own live source, a `HookSource`, whose
    // `fd_tag` was written before it was attached.
    let tag = unsafe { (*(source as *mut HookSource)).fd_tag };
    assert!(
        !tag.is_null(),
        "gdex: fd_revents on a source that polls no fd"
    );
    // SAFETY: the tag is this source's own, from `g_source_add_unix_fd`; we
    // are in its dispatch, on the thread that iterates its context.
    let bits = unsafe { ffi::g_source_query_unix_fd(source, tag) };
    glib::IOCondition::from_bits_truncate(bits)
}

/// # Safety
/// `source` must be a live source created by [`SourceRef::attach`].
unsafe fn hooks<'a>(source: *mut ffi::GSource) -> Option<&'a dyn Hooks> {
    // SAFETY: per the contract, `source` points to a `HookSource` whose
    // `hooks` field was initialised before the source was attached.
    unsafe { (*(source as *mut HookSource)).hooks.as_deref() }
}

/// Calls `f` with the source's hooks (if any) and never unwinds: a panic is
/// reported with `g_critical` and answered with `true` (ready / keep the
/// source), so the loop goes on.
fn with_hooks(source: *mut ffi::GSource, f: impl FnOnce(Option<&dyn Hooks>) -> bool) -> bool {
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: GLib only calls back with our own live source.
        f(unsafe { hooks(source) })
    }))
    .unwrap_or_else(|payload| {
        crate::diagnostics::panic::contain(crate::diagnostics::panic::PanicSource::Source, payload);
        true
    })
}

fn ready_guarded(source: *mut ffi::GSource) -> bool {
    with_hooks(source, |h| h.is_some_and(|h| h.ready()))
}

unsafe extern "C" fn prepare(source: *mut ffi::GSource, timeout: *mut i32) -> ffi::gboolean {
    let ready = ready_guarded(source);
    // SAFETY: GLib passes a valid out-pointer for the poll timeout.
    unsafe { *timeout = if ready { 0 } else { -1 } };
    ready as ffi::gboolean
}

unsafe extern "C" fn check(source: *mut ffi::GSource) -> ffi::gboolean {
    ready_guarded(source) as ffi::gboolean
}

unsafe extern "C" fn dispatch(
    source: *mut ffi::GSource,
    _callback: ffi::GSourceFunc,
    _data: ffi::gpointer,
) -> ffi::gboolean {
    with_hooks(source, |h| h.is_some_and(|h| h.dispatch(source))) as ffi::gboolean
}

unsafe extern "C" fn finalize(source: *mut ffi::GSource) {
    // SAFETY: GLib finalizes our own source exactly once, after its last
    // reference is gone; nothing reads `hooks` afterwards.
    let hooks = unsafe { (*(source as *mut HookSource)).hooks.take() };
    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(hooks))) {
        crate::diagnostics::panic::contain(crate::diagnostics::panic::PanicSource::Source, payload);
    }
}
