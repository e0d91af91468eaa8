//! The one error type every gdex future resolves with.

use std::fmt;

/// Why a gdex future did not produce its value.
///
/// Awaiting a [`Task`](crate::Task) gives `Result<T, Error>`: the task's
/// output, or the reason there is none.
///
/// ```
/// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
/// let task = pool.scheduler().spawn(async { panic!("boom") });
/// match gdex::block_on(task) {
///     Err(gdex::Error::Panicked(msg)) => assert_eq!(msg, "boom"),
///     other => unreachable!("{other:?}"),
/// }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// The task was cancelled before it finished: its handle was dropped or
    /// cancelled, or its scheduler shut down with the task still queued.
    Cancelled,
    /// The task panicked; the payload is the panic message.
    Panicked(String),
    /// A deadline passed before the value arrived.
    TimedOut,
    /// The scheduler (or channel, pool, …) was closed: nothing new is accepted.
    Closed,
    /// A fiber-only call was made outside a fiber.
    NotOnFiber,
    /// A GLib or GIO error.
    Failed(glib::Error),
}

impl Error {
    /// True for [`Error::Cancelled`].
    pub fn is_cancelled(&self) -> bool {
        matches!(self, Error::Cancelled)
    }

    /// True for [`Error::Panicked`].
    pub fn is_panicked(&self) -> bool {
        matches!(self, Error::Panicked(_))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Cancelled => f.write_str("the task was cancelled"),
            Error::Panicked(msg) => write!(f, "the task panicked: {msg}"),
            Error::TimedOut => f.write_str("the operation timed out"),
            Error::Closed => f.write_str("the scheduler or queue is closed"),
            Error::NotOnFiber => f.write_str("this call is only valid inside a fiber"),
            Error::Failed(err) => write!(f, "{err}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Failed(err) => Some(err),
            _ => None,
        }
    }
}

impl From<glib::Error> for Error {
    fn from(err: glib::Error) -> Self {
        Error::Failed(err)
    }
}

/// The message of a panic payload, as `panic!` formatted it.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}
