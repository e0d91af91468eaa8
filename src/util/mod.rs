//! Small helpers shared by the modules.

pub(crate) mod clock;

use std::cell::Cell;
use std::sync::{LockResult, PoisonError};
use std::thread::LocalKey;

use crossbeam_deque::Steal;

/// Sets a thread-local `Cell` for a scope: the previous value comes back when
/// the guard drops, also on unwind, so scopes nest (a nested main loop, a
/// fiber resumed inside another's).
#[inline]
pub(crate) fn scoped<T: Copy + 'static>(key: &'static LocalKey<Cell<T>>, value: T) -> Scoped<T> {
    Scoped {
        key,
        previous: key.with(|cell| cell.replace(value)),
    }
}

/// The guard of [`scoped`].
pub(crate) struct Scoped<T: Copy + 'static> {
    key: &'static LocalKey<Cell<T>>,
    previous: T,
}

impl<T: Copy + 'static> Drop for Scoped<T> {
    #[inline]
    fn drop(&mut self) {
        self.key.with(|cell| cell.set(self.previous));
    }
}

/// True on the process's initial thread, the one GTK calls the main thread.
pub(crate) fn is_main_thread() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid and getpid have no preconditions.
        unsafe { libc::gettid() == libc::getpid() }
    }
    #[cfg(not(target_os = "linux"))]
    {
        std::thread::current().name() == Some("main")
    }
}

/// Takes a lock's guard whether or not the lock is poisoned. gdex's own locks
/// guard state that a panic cannot leave half-updated (no user code runs
/// while one is held: see `sync::wait_queue`), so a poisoned lock's data is
/// used as it is, and one panic does not turn into a panic on every later
/// lock.
pub(crate) trait Unpoisoned<G> {
    /// The guard, poisoned or not.
    fn unpoisoned(self) -> G;
}

impl<G> Unpoisoned<G> for LockResult<G> {
    #[inline]
    fn unpoisoned(self) -> G {
        self.unwrap_or_else(PoisonError::into_inner)
    }
}

/// One steal from a crossbeam queue, retried until it gives an item or finds
/// the queue empty (`Steal::Retry` only means a race with another thief was
/// lost).
#[inline]
pub(crate) fn steal_one<T>(mut steal: impl FnMut() -> Steal<T>) -> Option<T> {
    loop {
        match steal() {
            Steal::Success(item) => return Some(item),
            Steal::Empty => return None,
            Steal::Retry => continue,
        }
    }
}

/// Every item a crossbeam queue gives until it is empty, one steal at a time.
pub(crate) fn drain<T>(mut steal: impl FnMut() -> Steal<T>) -> impl Iterator<Item = T> {
    std::iter::from_fn(move || steal_one(&mut steal))
}

/// A setting read from the environment variable `name` (trimmed, then given
/// to `parse`): `None` if it is unset, or if `parse` refuses it, which one
/// `g_warning` reports as "`name`=value is not `expected`; `fallback`". The
/// caller uses its default in both cases.
pub(crate) fn env_setting<T>(
    name: &str,
    expected: &str,
    fallback: impl FnOnce() -> String,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Option<T> {
    let raw = std::env::var_os(name)?;
    let text = raw.to_string_lossy();
    let parsed = parse(text.trim());
    if parsed.is_none() {
        glib::g_warning!(
            "gdex",
            "{}={:?} is not {}; {}",
            name,
            text,
            expected,
            fallback()
        );
    }
    parsed
}

extern "C" {
    /// A source that dispatches when the process gets `signum` (one of
    /// SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGWINCH). In
    /// glib-unix.h, which glib-sys does not bind; libglib-2.0 exports it.
    pub(crate) fn g_unix_signal_source_new(signum: libc::c_int) -> *mut glib_sys::GSource;
}

/// A cheap identity of the calling thread, never 0 and never reused by a
/// later thread (a thread-local's address would be: a `!Send` future of an
/// exited thread must not pass for another's). `thread::current().id()`
/// clones an `Arc`. The thread-local has no destructor, so this works
/// during thread exit too.
#[inline]
pub(crate) fn thread_token() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static TOKEN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }
    TOKEN.with(|t| match t.get() {
        0 => {
            let token = NEXT.fetch_add(1, Ordering::Relaxed);
            t.set(token);
            token
        }
        token => token,
    })
}
