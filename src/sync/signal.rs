//! [`unix_signal`]: a future of a Unix signal's arrival.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use glib::translate::ToGlibPtr;
use glib_sys as ffi;

use super::Flag;
use crate::scheduler::source::SourceRef;

extern "C" {
    // In glib-unix.h, which glib-sys does not bind; libglib-2.0 exports it.
    fn g_unix_signal_source_new(signum: libc::c_int) -> *mut ffi::GSource;
}

/// The signals GLib can watch (`g_unix_signal_source_new`).
const WATCHABLE: [(libc::c_int, &str); 6] = [
    (libc::SIGHUP, "SIGHUP"),
    (libc::SIGINT, "SIGINT"),
    (libc::SIGTERM, "SIGTERM"),
    (libc::SIGUSR1, "SIGUSR1"),
    (libc::SIGUSR2, "SIGUSR2"),
    (libc::SIGWINCH, "SIGWINCH"),
];

/// Resolves when the process receives `signum` (libdex's
/// `dex_unix_signal_new`). The watch starts now, so a signal that arrives
/// before the first poll is not missed; GLib handles the signal from then
/// on (the default action, such as SIGINT ending the process, no longer
/// happens) until the future is dropped.
///
/// As in libdex and GLib, the signal is delivered through the **default
/// main context**: it must be running (a GTK app's main loop, or
/// [`block_on`](crate::block_on) on the main thread).
///
/// # Panics
/// For a signal GLib cannot watch; these are SIGHUP, SIGINT, SIGTERM,
/// SIGUSR1, SIGUSR2 and SIGWINCH.
///
/// ```no_run
/// // Ctrl-C stops the work cleanly.
/// let work = gdex::spawn(std::future::pending::<()>());
/// gdex::block_on(gdex::unix_signal(libc::SIGINT));
/// gdex::block_on(work.cancel());
/// ```
pub fn unix_signal(signum: i32) -> UnixSignal {
    let Some(&(_, name)) = WATCHABLE.iter().find(|(s, _)| *s == signum) else {
        panic!(
            "gdex::unix_signal({signum}): GLib can only watch SIGHUP, SIGINT, SIGTERM, SIGUSR1, \
             SIGUSR2 and SIGWINCH"
        )
    };
    let fired = Arc::new(Flag::default());
    // SAFETY: `signum` is one GLib accepts, so this returns a new source we
    // own. The callback data is one strong count of `fired`, released by
    // `release` when the source is finalized; the callback only reads it.
    let source = unsafe {
        let raw = g_unix_signal_source_new(signum);
        assert!(!raw.is_null(), "g_unix_signal_source_new({name}) failed");
        ffi::g_source_set_callback(
            raw,
            Some(on_signal),
            Arc::into_raw(fired.clone()) as ffi::gpointer,
            Some(release),
        );
        ffi::g_source_set_name(raw, c"gdex unix signal".as_ptr());
        ffi::g_source_attach(raw, glib::MainContext::default().to_glib_none().0);
        SourceRef::from_raw(raw)
    };
    UnixSignal {
        name,
        fired,
        source,
    }
}

unsafe extern "C" fn on_signal(data: ffi::gpointer) -> ffi::gboolean {
    // SAFETY: `data` is the strong count given in `unix_signal`, alive
    // until `release` runs after the source is gone.
    let fired = unsafe { &*(data as *const Flag) };
    fired.raise();
    ffi::G_SOURCE_REMOVE
}

unsafe extern "C" fn release(data: ffi::gpointer) {
    // SAFETY: GLib calls this once, with the data given in `unix_signal`.
    drop(unsafe { Arc::from_raw(data as *const Flag) });
}

/// The future of [`unix_signal`].
#[must_use = "futures do nothing unless awaited"]
pub struct UnixSignal {
    name: &'static str,
    fired: Arc<Flag>,
    source: SourceRef,
}

impl Future for UnixSignal {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.fired.poll_raised(cx) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Drop for UnixSignal {
    fn drop(&mut self) {
        self.source.destroy();
    }
}

impl std::fmt::Debug for UnixSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnixSignal")
            .field("signal", &self.name)
            .field(
                "arrived",
                &self.fired.set.load(std::sync::atomic::Ordering::Relaxed),
            )
            .finish()
    }
}
