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
    /// A channel, [`Semaphore`](crate::Semaphore), [`Limiter`](crate::Limiter),
    /// [`TaskGroup`](crate::TaskGroup) or
    /// [`BlockingPool`](crate::blocking::BlockingPool) was closed: nothing
    /// new is accepted. (A thread pool that has shut down gives
    /// [`Error::ShutDown`].)
    Closed,
    /// The thread pool has shut down: [`ThreadPool::shutdown`] was called,
    /// or its last [`ThreadPool`] handle was dropped. Every spawn onto it
    /// gives this, whatever its kind (a task, a pinned or `!Send` one, a
    /// fiber, [`ThreadPool::spawn_blocking`], a
    /// [`TaskGroup`](crate::TaskGroup) member). A
    /// [`Scheduler`](crate::Scheduler) does not keep its pool running: keep
    /// the `ThreadPool` for as long as you spawn on it
    /// (`ThreadPool::builder().build()?.scheduler()` drops it at once).
    ///
    /// [`ThreadPool`]: crate::ThreadPool
    /// [`ThreadPool::shutdown`]: crate::ThreadPool::shutdown
    /// [`ThreadPool::spawn_blocking`]: crate::ThreadPool::spawn_blocking
    ShutDown,
    /// A fiber-only call was made outside a fiber.
    NotOnFiber,
    /// A [`Promise`](crate::Promise) was dropped before it gave a value.
    /// (A channel whose other side is gone gives [`Error::Closed`], not
    /// this.)
    Dropped,
    /// A [`StateMachine`](crate::StateMachine) was asked for a transition
    /// it does not declare (no edge from its state to the target), or was
    /// built with an edge declared twice (M1). The message names the
    /// states.
    InvalidTransition(String),
    /// A GLib or GIO error, carried unchanged.
    Failed(glib::Error),
}

impl Error {
    /// True for [`Error::Cancelled`], and for a GIO error
    /// `G_IO_ERROR_CANCELLED` (a GIO call stopped by its cancellable).
    pub fn is_cancelled(&self) -> bool {
        match self {
            Error::Cancelled => true,
            Error::Failed(err) => err.matches(gio::IOErrorEnum::Cancelled),
            _ => false,
        }
    }

    /// The code of this error in gdex's GLib error domain; `None` for
    /// [`Error::Failed`], which keeps its own domain.
    pub fn code(&self) -> Option<ErrorCode> {
        Some(match self {
            Error::Cancelled => ErrorCode::Cancelled,
            Error::Panicked(_) => ErrorCode::Panicked,
            Error::TimedOut => ErrorCode::TimedOut,
            Error::Closed => ErrorCode::Closed,
            Error::ShutDown => ErrorCode::ShutDown,
            Error::NotOnFiber => ErrorCode::NotOnFiber,
            Error::Dropped => ErrorCode::Dropped,
            Error::InvalidTransition(_) => ErrorCode::InvalidTransition,
            Error::Failed(_) => return None,
        })
    }

    /// True if this is a GLib error ([`Error::Failed`]) with the code
    /// `code`, in that code's domain: `err.matches(gio::IOErrorEnum::NotFound)`.
    ///
    /// ```
    /// let err = gdex::Error::Failed(glib::Error::new(gdex::gio::IOErrorEnum::NotFound, "gone"));
    /// assert!(err.matches(gdex::gio::IOErrorEnum::NotFound));
    /// assert!(!gdex::Error::Cancelled.matches(gdex::gio::IOErrorEnum::NotFound));
    /// ```
    pub fn matches<E: glib::error::ErrorDomain>(&self, code: E) -> bool {
        matches!(self, Error::Failed(err) if err.matches(code))
    }

    /// True for [`Error::Panicked`].
    pub fn is_panicked(&self) -> bool {
        matches!(self, Error::Panicked(_))
    }
}

/// A future's output that gdex can merge with its own errors, so that a
/// wait on it gives one `Result<T, gdex::Error>` rather than a `Result` of
/// a `Result`: a `Result<T, E>` whose error converts into [`Error`] (gdex's
/// own futures, and GIO's with their `glib::Error`), or `()` (a plain
/// timer, a yield).
///
/// [`fiber::wait`](crate::fiber::wait) takes futures with such outputs; for
/// any other output use [`fiber::wait_output`](crate::fiber::wait_output),
/// or wrap the future: `async { Ok::<_, gdex::Error>(fut.await) }`.
/// ([`timeout`](crate::timeout) takes any output and gives tokio's
/// `Result<T, Elapsed>`.)
///
/// ```
/// use gdex::IntoResult;
/// let io: Result<u8, glib::Error> = Err(glib::Error::new(glib::FileError::Noent, "gone"));
/// assert!(matches!(io.into_result(), Err(gdex::Error::Failed(_))));
/// assert!(().into_result().is_ok());
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an output gdex can merge its errors into",
    note = "fiber::wait gives `Result<T, gdex::Error>`: the future must give `Result<T, E>` with `E: Into<gdex::Error>` (gdex's and GIO's futures) or `()`",
    note = "for another output use gdex::fiber::wait_output, or wrap the future: `async {{ Ok::<_, gdex::Error>(fut.await) }}`"
)]
pub trait IntoResult {
    /// The value when there is no error.
    type Ok;
    /// This output as gdex's result.
    fn into_result(self) -> Result<Self::Ok, Error>;
}

impl<T, E: Into<Error>> IntoResult for Result<T, E> {
    type Ok = T;

    fn into_result(self) -> Result<T, Error> {
        self.map_err(Into::into)
    }
}

impl IntoResult for () {
    type Ok = ();

    fn into_result(self) -> Result<(), Error> {
        Ok(())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Cancelled => f.write_str("the task was cancelled"),
            Error::Panicked(msg) => write!(f, "{PANICKED}{msg}"),
            Error::TimedOut => f.write_str("the operation timed out"),
            Error::Closed => f.write_str(
                "closed (a channel, semaphore, task group or blocking pool): nothing new is accepted",
            ),
            Error::ShutDown => f.write_str(
                "the thread pool has shut down (ThreadPool::shutdown was called, or its last \
                 ThreadPool handle was dropped: a Scheduler does not keep its pool running)",
            ),
            Error::NotOnFiber => f.write_str("this call is only valid inside a fiber"),
            Error::Dropped => f.write_str("the promise was dropped before it gave a value"),
            Error::InvalidTransition(msg) => f.write_str(msg),
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

/// A `glib::Error` back to the gdex error it came from (same domain and
/// code), or [`Error::Failed`] carrying it unchanged.
impl From<glib::Error> for Error {
    fn from(err: glib::Error) -> Self {
        match err.kind::<ErrorCode>() {
            Some(ErrorCode::Cancelled) => Error::Cancelled,
            Some(ErrorCode::Panicked) => Error::Panicked(
                err.message()
                    .strip_prefix(PANICKED)
                    .unwrap_or(err.message())
                    .to_owned(),
            ),
            Some(ErrorCode::TimedOut) => Error::TimedOut,
            Some(ErrorCode::Closed) => Error::Closed,
            Some(ErrorCode::ShutDown) => Error::ShutDown,
            Some(ErrorCode::NotOnFiber) => Error::NotOnFiber,
            Some(ErrorCode::Dropped) => Error::Dropped,
            Some(ErrorCode::InvalidTransition) => {
                Error::InvalidTransition(err.message().to_owned())
            }
            None => Error::Failed(err),
        }
    }
}

const PANICKED: &str = "the task panicked: ";

/// A glib-rs task's [`glib::JoinError`] (from awaiting the `JoinHandle` of
/// `glib::spawn_future_local` or `MainContext::spawn`): one that panicked
/// is [`Error::Panicked`] with its message; any other is
/// [`Error::Cancelled`]. So a glib-rs handle awaits in a fiber, or with
/// `?`, as a gdex `Task` does.
///
/// An aborted glib-rs task (`JoinHandle::abort`) gives no `JoinError`:
/// its handle never resolves (docs/migrating.md).
///
/// ```
/// let handle = glib::MainContext::default().spawn_local(async { panic!("on purpose") });
/// let err: gdex::Error = gdex::block_on(handle).unwrap_err().into();
/// assert!(matches!(err, gdex::Error::Panicked(message) if message == "on purpose"));
/// ```
impl From<glib::JoinError> for Error {
    fn from(err: glib::JoinError) -> Self {
        match err.try_into_panic() {
            Ok(payload) => Error::Panicked(take_message(payload)),
            Err(_) => Error::Cancelled,
        }
    }
}

/// The error of [`timeout`](crate::timeout) and
/// [`timeout_at`](crate::timeout_at): the deadline passed before the future
/// gave its output (tokio's `time::error::Elapsed`).
///
/// It displays as tokio's does, converts into [`Error::TimedOut`], and into
/// an [`std::io::Error`] of kind [`TimedOut`](std::io::ErrorKind::TimedOut)
/// (which converts back into [`Error::TimedOut`]).
///
/// ```
/// use std::time::Duration;
///
/// let elapsed = gdex::block_on(gdex::timeout(Duration::ZERO, std::future::pending::<()>()))
///     .unwrap_err();
/// assert_eq!(elapsed.to_string(), "deadline has elapsed");
/// assert!(matches!(gdex::Error::from(elapsed), gdex::Error::TimedOut));
/// let io = std::io::Error::from(elapsed);
/// assert_eq!(io.kind(), std::io::ErrorKind::TimedOut);
/// assert!(matches!(gdex::Error::from(io), gdex::Error::TimedOut));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Elapsed(());

impl Elapsed {
    pub(crate) fn new() -> Self {
        Elapsed(())
    }
}

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

/// [`Error::TimedOut`].
impl From<Elapsed> for Error {
    fn from(_: Elapsed) -> Self {
        Error::TimedOut
    }
}

/// An error of kind [`TimedOut`](std::io::ErrorKind::TimedOut), as tokio's;
/// unlike tokio's, it carries the `Elapsed`: it displays as one and
/// converts back into [`Error::TimedOut`].
impl From<Elapsed> for std::io::Error {
    fn from(elapsed: Elapsed) -> Self {
        std::io::Error::new(std::io::ErrorKind::TimedOut, elapsed)
    }
}

/// An I/O error as a gdex error: one that carries a gdex [`Error`], an
/// [`Elapsed`] or a `glib::Error` (as the conversions into
/// `std::io::Error` of gdex, of [`Elapsed`] and of gio-rs's
/// streams make) gives that error back; any other is [`Error::Failed`]
/// with a GIO error (`G_IO_ERROR`) whose code is GLib's for its `errno`
/// (`g_io_error_from_errno`), or else the one for its kind, and whose
/// message is its own.
///
/// ```
/// let missing = std::fs::read("/no/such/file").unwrap_err();
/// let err = gdex::Error::from(missing);
/// assert!(err.matches(gdex::gio::IOErrorEnum::NotFound));
/// assert!(err.to_string().contains("os error 2"), "{err}");
/// let timed_out: std::io::Error = gdex::Error::TimedOut.into();
/// assert!(matches!(gdex::Error::from(timed_out), gdex::Error::TimedOut));
/// ```
impl From<std::io::Error> for Error {
    fn from(err: std::io::Error) -> Self {
        if err.get_ref().is_some_and(|inner| {
            inner.is::<Error>() || inner.is::<Elapsed>() || inner.is::<glib::Error>()
        }) {
            let inner = err.into_inner().expect("checked: it has an inner error");
            let inner = match inner.downcast::<Error>() {
                Ok(gdex) => return *gdex,
                Err(other) => other,
            };
            return match inner.downcast::<glib::Error>() {
                Ok(glib) => Error::from(*glib),
                Err(_) => Error::TimedOut, // the Elapsed
            };
        }
        let code = match err.raw_os_error() {
            Some(errno) => gio::io_error_from_errno(errno),
            None => io_error_code(err.kind()),
        };
        Error::Failed(glib::Error::new(code, &err.to_string()))
    }
}

/// The GIO code of an I/O error's kind: the inverse of gio-rs's
/// `From<IOErrorEnum> for io::ErrorKind`, so that a kind makes the round
/// trip; `G_IO_ERROR_FAILED` for the kinds GIO has no code of its own for.
fn io_error_code(kind: std::io::ErrorKind) -> gio::IOErrorEnum {
    use gio::IOErrorEnum as G;
    use std::io::ErrorKind as K;
    match kind {
        K::NotFound => G::NotFound,
        K::AlreadyExists => G::Exists,
        K::InvalidInput => G::InvalidArgument,
        K::PermissionDenied => G::PermissionDenied,
        K::AddrInUse => G::AddressInUse,
        K::TimedOut => G::TimedOut,
        K::WouldBlock => G::WouldBlock,
        K::InvalidData => G::InvalidData,
        K::ConnectionRefused => G::ConnectionRefused,
        K::BrokenPipe => G::BrokenPipe,
        K::NotConnected => G::NotConnected,
        _ => G::Failed,
    }
}

/// A gdex error as an I/O error that carries it (so `?` takes a task's
/// result in a function that returns `std::io::Result`, as tokio's
/// `JoinError` does): of kind [`TimedOut`](std::io::ErrorKind::TimedOut)
/// for [`Error::TimedOut`], the kind gio-rs gives a GIO error for a
/// [`Error::Failed`] in `G_IO_ERROR`, and [`Other`](std::io::ErrorKind::Other)
/// for the rest (an I/O kind such as `Interrupted` would tell `std`'s
/// readers to retry). It converts back into the same gdex error.
///
/// ```
/// let io = std::io::Error::from(gdex::Error::Cancelled);
/// assert_eq!(io.kind(), std::io::ErrorKind::Other);
/// assert_eq!(io.to_string(), "the task was cancelled");
/// assert!(gdex::Error::from(io).is_cancelled());
/// ```
impl From<Error> for std::io::Error {
    fn from(err: Error) -> Self {
        let kind = match &err {
            Error::TimedOut => std::io::ErrorKind::TimedOut,
            Error::Failed(glib) => glib
                .kind::<gio::IOErrorEnum>()
                .map_or(std::io::ErrorKind::Other, Into::into),
            _ => std::io::ErrorKind::Other,
        };
        std::io::Error::new(kind, err)
    }
}

/// A tokio task's `JoinError` (feature `tokio`): one that panicked is
/// [`Error::Panicked`] with its message; a cancelled one (aborted, or its
/// runtime shut down) is [`Error::Cancelled`]. So `?` takes a tokio
/// `JoinHandle`'s result as it takes a gdex `Task`'s.
///
/// ```
/// let task = gdex::spawn(async {
///     let err = tokio::spawn(async { panic!("on purpose") }).await.unwrap_err();
///     gdex::Error::from(err)
/// });
/// assert!(matches!(gdex::block_on(task).unwrap(), gdex::Error::Panicked(m) if m == "on purpose"));
/// ```
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl From<tokio::task::JoinError> for Error {
    fn from(err: tokio::task::JoinError) -> Self {
        match err.try_into_panic() {
            Ok(payload) => Error::Panicked(take_message(payload)),
            Err(_) => Error::Cancelled,
        }
    }
}

/// A `futures` oneshot whose sender was dropped: the other side of the
/// channel is gone, which gdex calls [`Error::Closed`].
impl From<futures::channel::oneshot::Canceled> for Error {
    fn from(_: futures::channel::oneshot::Canceled) -> Self {
        Error::Closed
    }
}

/// A gdex error as a `glib::Error`, for GObject code that hands errors to C
/// callers: gdex's own errors in the `gdex-error-quark` domain
/// ([`ErrorCode`]), a GLib or GIO error unchanged.
///
/// ```
/// let err: glib::Error = gdex::Error::TimedOut.into();
/// assert!(err.matches(gdex::ErrorCode::TimedOut));
/// assert_eq!(err.domain().as_str(), "gdex-error-quark");
/// assert!(matches!(gdex::Error::from(err), gdex::Error::TimedOut));
/// ```
impl From<Error> for glib::Error {
    fn from(err: Error) -> Self {
        match err.code() {
            Some(code) => glib::Error::new(code, &err.to_string()),
            None => match err {
                Error::Failed(err) => err,
                _ => unreachable!("every other variant has a code"),
            },
        }
    }
}

/// The codes of gdex's GLib error domain, `gdex-error-quark`: how a gdex
/// [`Error`] looks to C callers as a `GError`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(i32)]
pub enum ErrorCode {
    /// [`Error::Cancelled`].
    Cancelled = 1,
    /// [`Error::Panicked`]; the message holds the panic's.
    Panicked = 2,
    /// [`Error::TimedOut`].
    TimedOut = 3,
    /// [`Error::Closed`].
    Closed = 4,
    /// [`Error::NotOnFiber`].
    NotOnFiber = 5,
    /// [`Error::Dropped`].
    Dropped = 6,
    /// [`Error::ShutDown`].
    ShutDown = 7,
    /// [`Error::InvalidTransition`]; libdex's `DEX_ERROR_INVALID_TRANSITION`.
    InvalidTransition = 8,
}

impl glib::error::ErrorDomain for ErrorCode {
    fn domain() -> glib::Quark {
        static QUARK: std::sync::OnceLock<glib::Quark> = std::sync::OnceLock::new();
        *QUARK.get_or_init(|| glib::Quark::from_str("gdex-error-quark"))
    }

    fn code(self) -> i32 {
        self as i32
    }

    fn from(code: i32) -> Option<Self> {
        Some(match code {
            1 => ErrorCode::Cancelled,
            2 => ErrorCode::Panicked,
            3 => ErrorCode::TimedOut,
            4 => ErrorCode::Closed,
            5 => ErrorCode::NotOnFiber,
            6 => ErrorCode::Dropped,
            7 => ErrorCode::ShutDown,
            8 => ErrorCode::InvalidTransition,
            _ => return None,
        })
    }
}

/// Drops a caught panic's payload without unwinding: a payload's own
/// destructor may panic (`std::panic::catch_unwind`'s docs), and that
/// panic must not escape where the first one was contained. Its payload is
/// leaked.
pub(crate) fn drop_payload(payload: Box<dyn std::any::Any + Send>) {
    if let Err(again) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(payload))) {
        std::mem::forget(again);
    }
}

/// The message of a caught panic; its payload is dropped without unwinding
/// ([`drop_payload`]).
pub(crate) fn take_message(payload: Box<dyn std::any::Any + Send>) -> String {
    let message = panic_message(&*payload);
    drop_payload(payload);
    message
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every gdex error goes to a GError in the gdex domain and back.
    #[test]
    fn errors_round_trip_through_glib_error() {
        for err in [
            Error::Cancelled,
            Error::Panicked("boom".into()),
            Error::TimedOut,
            Error::Closed,
            Error::ShutDown,
            Error::NotOnFiber,
            Error::Dropped,
            Error::InvalidTransition("no transition from A to B is declared".into()),
        ] {
            let code = err.code().unwrap();
            let before = err.to_string();
            let g: glib::Error = err.into();
            assert!(g.matches(code));
            assert_eq!(g.domain().as_str(), "gdex-error-quark");
            assert_eq!(g.message(), before);
            let back = Error::from(g);
            assert_eq!(back.code(), Some(code));
            assert_eq!(back.to_string(), before);
        }
    }

    /// A GIO error is carried through unchanged, both ways.
    #[test]
    fn gio_errors_pass_through_unchanged() {
        let gio_err = glib::Error::new(gio::IOErrorEnum::NotFound, "no such file");
        let err = Error::from(gio_err.clone());
        assert!(matches!(&err, Error::Failed(e) if e.matches(gio::IOErrorEnum::NotFound)));
        assert!(err.code().is_none());
        let again: glib::Error = err.into();
        assert_eq!(again.domain(), gio_err.domain());
        assert!(again.matches(gio::IOErrorEnum::NotFound));
        assert_eq!(again.message(), "no such file");
        let cancelled = Error::from(glib::Error::new(gio::IOErrorEnum::Cancelled, "x"));
        assert!(cancelled.is_cancelled());
    }

    /// An I/O error becomes a GIO error with GLib's code for its `errno`,
    /// or for its kind, and its own message; a gdex error, an `Elapsed` or
    /// a GLib error carried in an I/O error comes back as it was; a gdex
    /// error goes into an I/O error of the matching kind.
    #[test]
    fn io_errors_convert_both_ways() {
        use std::io::ErrorKind;

        let os = std::io::Error::from_raw_os_error(libc::EACCES);
        let message = os.to_string();
        let err = Error::from(os);
        assert!(err.matches(gio::IOErrorEnum::PermissionDenied), "{err:?}");
        assert_eq!(err.to_string(), message);
        assert_eq!(
            std::io::Error::from(err).kind(),
            ErrorKind::PermissionDenied
        );

        for kind in [
            ErrorKind::NotFound,
            ErrorKind::AlreadyExists,
            ErrorKind::InvalidInput,
            ErrorKind::PermissionDenied,
            ErrorKind::AddrInUse,
            ErrorKind::TimedOut,
            ErrorKind::WouldBlock,
            ErrorKind::InvalidData,
            ErrorKind::ConnectionRefused,
            ErrorKind::BrokenPipe,
            ErrorKind::NotConnected,
            ErrorKind::Other,
        ] {
            let err = Error::from(std::io::Error::new(kind, "why"));
            assert!(
                matches!(&err, Error::Failed(g) if g.message() == "why"),
                "{err:?}"
            );
            assert_eq!(std::io::Error::from(err).kind(), kind, "{kind:?}");
        }
        let unmapped = Error::from(std::io::Error::from(ErrorKind::UnexpectedEof));
        assert!(unmapped.matches(gio::IOErrorEnum::Failed), "{unmapped:?}");

        let panicked = std::io::Error::from(Error::Panicked("boom".into()));
        assert_eq!(panicked.kind(), ErrorKind::Other);
        assert!(matches!(Error::from(panicked), Error::Panicked(m) if m == "boom"));
        let timed_out = std::io::Error::from(Error::TimedOut);
        assert_eq!(timed_out.kind(), ErrorKind::TimedOut);
        assert!(matches!(Error::from(timed_out), Error::TimedOut));
        let elapsed = std::io::Error::from(Elapsed::new());
        assert!(matches!(Error::from(elapsed), Error::TimedOut));
        let glib = std::io::Error::other(glib::Error::new(ErrorCode::Closed, "closed"));
        assert!(matches!(Error::from(glib), Error::Closed));
    }
}
