//! D-Bus methods as gdex tasks: [`export`]; a well-known name owned as a
//! handle: [`own_name`] (D4).
//!
//! GIO dispatches a D-Bus method call to a handler on the main context of
//! the thread that registered the object. With [`export`], that handler
//! only makes the call's future and spawns it on a gdex scheduler (a pool,
//! so a thousand slow calls do not hold the main loop); the future's value
//! or error is the reply. The object's in-flight calls form a
//! [`TaskGroup`]: when the connection closes (the peer went away) or the
//! [`Export`] is dropped, every call still running is cancelled, its future
//! dropped on its scheduler (S5), and GIO calls it has in flight stop with
//! it (its [`current_cancellable`](crate::current_cancellable) is
//! cancelled).
//!
//! A call's file descriptors (the `GUnixFDList` of its message, which its
//! `h` arguments index) are the call's [`fds`](MethodCall::fds); a reply
//! carries file descriptors added with [`MethodCall::reply_fd`].
//!
//! A call is answered once. The future's outcome is the answer, unless the
//! call was answered before through its [`Invocation`] (on the thread GIO
//! dispatched it on); any later answer is refused with an error, never
//! sent: a caller gets one reply.
//!
//! A handler that panics answers its caller with an error
//! (`org.gtk.GDBus.UnmappedGError…` carrying gdex's `Panicked` code and the
//! message), and a call cancelled while its connection is still open (the
//! export was dropped) is answered with `G_IO_ERROR_CANCELLED`: a caller
//! never waits for a reply that will not come.

use std::future::IntoFuture;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use futures::FutureExt;
use gio::prelude::*;
use glib::translate::ToGlibPtr;

use crate::diagnostics::panic::PanicSource;
use crate::error::panic_message;
use crate::util::Unpoisoned;
use crate::{Error, Scheduler, TaskGroup};

pub use super::dbus_name::{own_name, NameOwner};

/// One D-Bus method call, as [`export`]'s handler gets it.
///
/// It is `Send + Sync` (the handler's future takes it to the pool), so
/// GIO's own objects for the call, which are not, are kept out of it: the
/// file descriptors sent with the call are duplicated into
/// [`fds`](Self::fds), and the [`invocation`](Self::invocation) (with its
/// message) is given only on the thread GIO dispatched the call on. A
/// clone is the same call: its reply (and the reply's file descriptors) is
/// shared.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MethodCall {
    /// The connection the call came on.
    pub connection: gio::DBusConnection,
    /// The caller's unique bus name (`None` on a peer-to-peer connection).
    pub sender: Option<String>,
    /// The object path called.
    pub object_path: String,
    /// The interface called.
    pub interface_name: String,
    /// The method called.
    pub method_name: String,
    /// The call's arguments, a tuple of the method's in-arguments.
    pub parameters: glib::Variant,
    /// The file descriptors that came with the call, in its `GUnixFDList`'s
    /// order.
    fds: Arc<[OwnedFd]>,
    /// The call's one answer, and the file descriptors it carries.
    answer: Arc<Answer>,
    /// The invocation, for the thread GIO dispatched the call on.
    invocation: Dispatched,
}

impl MethodCall {
    /// The file descriptors sent with the call (its message's
    /// `GUnixFDList`), in order: an `h` argument is an index into them (see
    /// [`fd`](Self::fd)). Duplicates, taken when the call came, open until
    /// the call and its clones are gone; empty if the caller sent none.
    pub fn fds(&self) -> &[OwnedFd] {
        &self.fds
    }

    /// The file descriptor an `h` argument refers to, or a
    /// `org.freedesktop.DBus.Error.InvalidArgs` error (for the caller) if
    /// the call came with no file descriptor at that index.
    /// [`try_clone_to_owned`](BorrowedFd::try_clone_to_owned) makes one to
    /// keep.
    ///
    /// ```no_run
    /// # use gdex::glib::prelude::*;
    /// # use gdex::{gio, glib};
    /// # use std::io::Read;
    /// # fn handler(call: gdex::dbus::MethodCall) -> impl std::future::Future<Output = Result<Option<glib::Variant>, glib::Error>> + Send {
    /// // A method `Count (h fd) -> (t bytes)`: reads what the fd gives, on the pool.
    /// async move {
    ///     let (handle,): (glib::variant::Handle,) = call.parameters.get().ok_or_else(|| {
    ///         glib::Error::new(gio::DBusError::InvalidArgs, "expected (h)")
    ///     })?;
    ///     let fd = call.fd(handle)?.try_clone_to_owned().map_err(|e| {
    ///         glib::Error::new(gio::IOErrorEnum::Failed, &e.to_string())
    ///     })?;
    ///     let mut bytes = Vec::new();
    ///     std::fs::File::from(fd).read_to_end(&mut bytes).map_err(|e| {
    ///         glib::Error::new(gio::IOErrorEnum::Failed, &e.to_string())
    ///     })?;
    ///     Ok(Some((bytes.len() as u64,).to_variant()))
    /// }
    /// # }
    /// ```
    pub fn fd(&self, handle: glib::variant::Handle) -> Result<BorrowedFd<'_>, glib::Error> {
        let fd = usize::try_from(handle.0)
            .ok()
            .and_then(|index| self.fds.get(index));
        match fd {
            Some(fd) => Ok(std::os::fd::AsFd::as_fd(fd)),
            None => Err(glib::Error::new(
                gio::DBusError::InvalidArgs,
                &format!(
                    "gdex::dbus: the handle {} of this {}.{} call refers to no file descriptor: \
                     the call came with {}",
                    handle.0,
                    self.interface_name,
                    self.method_name,
                    self.fds.len()
                ),
            )),
        }
    }

    /// Adds `fd` to the `GUnixFDList` the reply carries and gives its
    /// handle, the value of an `h` out-argument. It is sent with an `Ok`
    /// reply; an error reply (or one added after the reply went) closes
    /// it. A reply with file descriptors on a connection that cannot pass
    /// them (not a unix socket, or not negotiated) is answered with an
    /// error saying so.
    ///
    /// ```no_run
    /// # use gdex::glib::prelude::*;
    /// # use gdex::{gio, glib};
    /// # use std::io::Write;
    /// # fn handler(call: gdex::dbus::MethodCall) -> impl std::future::Future<Output = Result<Option<glib::Variant>, glib::Error>> + Send {
    /// // A method `Greeting () -> (h fd)`: a pipe to read the greeting from.
    /// async move {
    ///     let io = |e: std::io::Error| glib::Error::new(gio::IOErrorEnum::Failed, &e.to_string());
    ///     let (reader, mut writer) = std::io::pipe().map_err(io)?;
    ///     writer.write_all(b"hello").map_err(io)?;
    ///     drop(writer);
    ///     let handle = call.reply_fd(reader);
    ///     Ok(Some((handle,).to_variant()))
    /// }
    /// # }
    /// ```
    pub fn reply_fd(&self, fd: impl Into<OwnedFd>) -> glib::variant::Handle {
        let mut fds = self.answer.fds.lock().unpoisoned();
        fds.push(fd.into());
        glib::variant::Handle(i32::try_from(fds.len() - 1).unwrap_or(i32::MAX))
    }

    /// GIO's invocation of the call (its message, with the `GUnixFDList`
    /// as it came, its serial and flags; the method's info), on the thread
    /// GIO dispatched the call on: in the handler itself, and in the call's
    /// future if it runs there. Elsewhere `None`: GIO's message and fd list
    /// are not thread-safe objects.
    ///
    /// The call's future gives its reply; an [`Invocation`] can answer
    /// earlier (see there), once: whichever answer comes first is sent,
    /// and a later one is refused with an error.
    pub fn invocation(&self) -> Option<Invocation> {
        (self.invocation.thread == std::thread::current().id()).then(|| Invocation {
            invocation: self.invocation.invocation.0.clone(),
            answer: self.answer.clone(),
        })
    }
}

/// GIO's invocation of a [`MethodCall`], as [`MethodCall::invocation`]
/// gives it on the thread GIO dispatched the call on: what the call's
/// message says, and an early answer.
///
/// A call gets one answer: the first of an `Invocation`'s `return_*` or the
/// outcome of the handler's future. A `return_*` after that (the future's
/// outcome was sent, or another `return_*` came first) sends nothing and
/// gives an error saying so; GIO itself would send a second reply. A call
/// answered here has its future's outcome dropped: give `Ok(None)` from it
/// (anything else is reported with a warning, as it is not sent; a panic
/// of the handler or of its future, which no caller reads then, goes to the
/// panic handler, X5).
/// The answer is checked as the future's is (its type against the method's
/// out-arguments, its file descriptors from [`MethodCall::reply_fd`]
/// against the connection).
///
/// ```no_run
/// # use gdex::glib::prelude::*;
/// # use gdex::{gio, glib};
/// # fn handler(call: gdex::dbus::MethodCall) -> impl std::future::Future<Output = Result<Option<glib::Variant>, glib::Error>> + Send {
/// // A method `Start () -> (b started)` that answers at once, then works on.
/// let invocation = call.invocation().expect("the handler runs where GIO dispatched the call");
/// invocation.return_value(Some(&(true,).to_variant())).expect("the first answer");
/// async move {
///     // ... the work ...
///     Ok(None) // the call is answered already
/// }
/// # }
/// ```
pub struct Invocation {
    invocation: gio::DBusMethodInvocation,
    answer: Arc<Answer>,
}

impl Invocation {
    /// The call's message: its serial, flags, header fields and
    /// `GUnixFDList`, as it came.
    pub fn message(&self) -> gio::DBusMessage {
        self.invocation.message()
    }

    /// The method's introspection data, if GIO has it (`None` for the
    /// `org.freedesktop.DBus.Properties` calls, see [`export`]).
    pub fn method_info(&self) -> Option<gio::DBusMethodInfo> {
        self.invocation.method_info()
    }

    /// The property a `org.freedesktop.DBus.Properties` call is about, if
    /// GIO has its introspection data.
    pub fn property_info(&self) -> Option<gio::DBusPropertyInfo> {
        self.invocation.property_info()
    }

    /// True once the call is answered (by an `Invocation` or by its future).
    pub fn is_answered(&self) -> bool {
        self.answer.invocation.lock().unpoisoned().is_none()
    }

    /// Answers the call now with `outcome`, as a future's outcome would
    /// (`Ok(None)` for `()`, `Ok(Some(tuple))` or a lone value, or a
    /// `glib::Error`), with the file descriptors of
    /// [`MethodCall::reply_fd`]. Refused with an error
    /// (`G_IO_ERROR_FAILED`, naming the method) if the call was answered
    /// already: nothing is sent then.
    pub fn return_result(
        &self,
        outcome: Result<Option<glib::Variant>, glib::Error>,
    ) -> Result<(), glib::Error> {
        let Some(invocation) = self.answer.take() else {
            return Err(glib::Error::new(
                gio::IOErrorEnum::Failed,
                &format!(
                    "gdex::dbus: the call {} was answered already (a call gets one answer: \
                     its future's outcome, or one Invocation::return_*); this answer was not \
                     sent",
                    self.answer.method
                ),
            ));
        };
        self.answer.send(invocation, outcome);
        Ok(())
    }

    /// Answers the call now with `parameters` (`None` for `()`); see
    /// [`return_result`](Self::return_result).
    pub fn return_value(&self, parameters: Option<&glib::Variant>) -> Result<(), glib::Error> {
        self.return_result(Ok(parameters.cloned()))
    }

    /// Answers the call now with `error`; see
    /// [`return_result`](Self::return_result).
    pub fn return_gerror(&self, error: glib::Error) -> Result<(), glib::Error> {
        self.return_result(Err(error))
    }
}

impl std::fmt::Debug for Invocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Invocation")
            .field("invocation", &self.invocation)
            .field("answered", &self.is_answered())
            .finish()
    }
}

/// The invocation as [`MethodCall`] keeps it: given out only on the thread
/// GIO dispatched the call on.
#[derive(Clone)]
struct Dispatched {
    invocation: SendInvocation,
    thread: ThreadId,
}

// SAFETY: off the dispatching thread, a `Dispatched` is only cloned and
// dropped, which touches nothing but the invocation's reference count
// (atomic); `MethodCall::invocation` gives the object out on the
// dispatching thread alone. So `&Dispatched` shared between threads never
// lets two of them use GIO's non-thread-safe objects.
unsafe impl Sync for Dispatched {}

impl std::fmt::Debug for Dispatched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatched")
            .field("thread", &self.thread)
            .finish_non_exhaustive()
    }
}

/// An object exported with [`export`]. Dropping it unregisters the object
/// and cancels its calls in flight (each is answered with
/// `G_IO_ERROR_CANCELLED`).
pub struct Export {
    connection: gio::DBusConnection,
    /// The registration id (`g_dbus_connection_register_object_with_closures`).
    registration: Option<u32>,
    closed_handler: Option<glib::SignalHandlerId>,
    calls: Arc<Calls>,
}

/// The calls in flight, shared by the method handler, the connection's
/// `closed` handler and the [`Export`].
struct Calls {
    /// `None` once the connection closed or the export was dropped.
    group: Mutex<Option<TaskGroup<()>>>,
}

impl Calls {
    /// Cancels every call in flight and refuses new ones.
    fn cancel_all(&self) {
        let group = self.group.lock().unpoisoned().take();
        // Dropping the group cancels its members (outside the lock: a
        // member's guard takes the group's own lock, never ours).
        drop(group);
    }
}

/// Exports an object with `interface` at `object_path` on `connection`.
/// Each method call runs `handler(call)`'s future as a task on
/// `scheduler`; the future gives the reply's body (`Ok(None)` for a method
/// without out-arguments, `Ok(Some(tuple))` otherwise) or a `glib::Error`
/// (sent as a D-Bus error; a `gdex::Error` converts to one). `handler`
/// itself runs where GIO dispatches the calls: on this thread's
/// thread-default main context (the global default if none is pushed),
/// whichever thread iterates it; so it is `Send + Sync`, and should only
/// make the future.
///
/// A reply is checked against the method's out-arguments (`Ok(None)` is
/// `()`, a lone value a one-element tuple); one of another type is answered
/// with an error naming both types, where GLib would send nothing. The
/// interface's properties are not served by GIO here: its
/// `org.freedesktop.DBus.Properties` `Get`/`Set`/`GetAll` calls come to
/// `handler` too (expecting `(v)`, `()` and `(a{sv})`).
///
/// The calls in flight are cancelled when the connection closes or the
/// returned [`Export`] is dropped; see the [module docs](self).
///
/// ```no_run
/// use gdex::gio::prelude::*;
/// use gdex::{gio, glib};
///
/// const XML: &str = r#"<node><interface name="org.example.Sum">
///   <method name="Sum"><arg type="t" direction="in"/><arg type="t" direction="out"/></method>
/// </interface></node>"#;
///
/// fn serve(connection: &gio::DBusConnection, pool: &gdex::ThreadPool) -> gdex::dbus::Export {
///     let info = gio::DBusNodeInfo::for_xml(XML).unwrap();
///     let interface = info.lookup_interface("org.example.Sum").unwrap();
///     gdex::dbus::export(connection, "/org/example/Sum", &interface, &pool.scheduler(), |call| async move {
///         let (n,): (u64,) = call.parameters.get().ok_or_else(|| {
///             glib::Error::new(gio::DBusError::InvalidArgs, "expected (t)")
///         })?;
///         Ok(Some(((0..n).sum::<u64>(),).to_variant()))
///     })
///     .unwrap()
/// }
/// ```
pub fn export<H, F>(
    connection: &gio::DBusConnection,
    object_path: &str,
    interface: &gio::DBusInterfaceInfo,
    scheduler: &Scheduler,
    handler: H,
) -> Result<Export, glib::Error>
where
    H: Fn(MethodCall) -> F + Send + Sync + 'static,
    F: IntoFuture<Output = Result<Option<glib::Variant>, glib::Error>>,
    F::IntoFuture: Send + 'static,
{
    let calls = Arc::new(Calls {
        group: Mutex::new(Some(TaskGroup::on(scheduler.clone()))),
    });
    let spawner = calls.clone();
    // A `Send + Sync` closure of our own (gio-rs's builder makes a
    // thread-bound one): GIO calls it on the registration context and frees
    // it there after `unregister`, which may be another thread than ours.
    let method_call = glib::Closure::new(move |args: &[glib::Value]| -> Option<glib::Value> {
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
            dispatch(&handler, &spawner, args);
        }));
        if let Err(payload) = outcome {
            crate::diagnostics::panic::contain(
                crate::diagnostics::panic::PanicSource::Source,
                payload,
            );
        }
        None
    });
    let mut error = std::ptr::null_mut();
    // SAFETY: live connection and interface info, a valid path string (GIO
    // copies what it keeps), our closure (GIO takes a reference and sinks
    // it), no property closures (GIO then routes
    // `org.freedesktop.DBus.Properties` calls to `method_call`, see
    // `expected_reply`), and an out-pointer for the error.
    let id = unsafe {
        gio::ffi::g_dbus_connection_register_object_with_closures(
            connection.to_glib_none().0,
            object_path.to_glib_none().0,
            interface.to_glib_none().0,
            method_call.to_glib_none().0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut error,
        )
    };
    if !error.is_null() {
        // SAFETY: an error GIO handed over to us.
        return Err(unsafe { glib::translate::from_glib_full(error) });
    }
    let closing = calls.clone();
    let closed_handler = connection.connect_closed(move |_, _, _| closing.cancel_all());
    Ok(Export {
        connection: connection.clone(),
        registration: Some(id),
        closed_handler: Some(closed_handler),
        calls,
    })
}

/// One method call, as GIO hands it to the closure: makes the call's
/// future (a panic becomes the caller's error) and spawns it as a member of
/// the export's group.
fn dispatch<H, F>(handler: &H, calls: &Calls, args: &[glib::Value])
where
    H: Fn(MethodCall) -> F,
    F: IntoFuture<Output = Result<Option<glib::Variant>, glib::Error>>,
    F::IntoFuture: Send + 'static,
{
    let arg = |i: usize| &args[i];
    // GLib passes the invocation `transfer full` into the closure (a
    // known GLib leak that gio-rs's own builder works around the same way:
    // glib!4427), so we take that reference over.
    // SAFETY: argument 6 of GIO's method-call closure is the invocation, a
    // live object whose reference GLib leaves to us.
    let invocation: gio::DBusMethodInvocation = unsafe {
        glib::translate::from_glib_full(glib::gobject_ffi::g_value_get_object(arg(6).as_ptr())
            as *mut gio::ffi::GDBusMethodInvocation)
    };
    let fds = match call_fds(&invocation) {
        Ok(fds) => fds,
        Err(error) => {
            invocation.return_gerror(error);
            return;
        }
    };
    let dispatched = Dispatched {
        invocation: SendInvocation(invocation.clone()),
        thread: std::thread::current().id(),
    };
    let answer = Arc::new(Answer {
        method: format!(
            "{}.{}",
            invocation.interface_name().unwrap_or_default(),
            invocation.method_name()
        ),
        invocation: Mutex::new(Some(SendInvocation(invocation))),
        fds: Mutex::new(Vec::new()),
    });
    let reply = Reply(answer.clone());
    let call = MethodCall {
        connection: arg(0)
            .get::<gio::DBusConnection>()
            .expect("GIO passes the connection"),
        sender: arg(1)
            .get::<Option<String>>()
            .expect("GIO passes the sender"),
        object_path: arg(2).get::<String>().expect("GIO passes the object path"),
        interface_name: arg(3)
            .get::<Option<String>>()
            .expect("GIO passes the interface")
            .unwrap_or_default(),
        method_name: arg(4).get::<String>().expect("GIO passes the method"),
        parameters: arg(5)
            .get::<glib::Variant>()
            .expect("GIO passes the parameters"),
        fds,
        answer,
        invocation: dispatched,
    };
    // The handler and its `IntoFuture` run inside GIO's dispatch, where a
    // panic cannot unwind: it becomes the caller's error.
    let future = match std::panic::catch_unwind(AssertUnwindSafe(|| handler(call).into_future())) {
        Ok(future) => future,
        Err(payload) => {
            let message = panic_message(&*payload);
            crate::diagnostics::panic::drop_payload(payload);
            reply.panicked(message);
            return;
        }
    };
    let member = async move {
        match AssertUnwindSafe(future).catch_unwind().await {
            Ok(outcome) => reply.send(outcome),
            Err(payload) => reply.panicked(crate::diagnostics::panic::take_message(payload)),
        }
    };
    // Only a handle is taken under the lock: a member refused (the
    // connection closed, the pool shut down) is dropped inside `spawn`, and
    // its future may own the `Export`, whose drop takes that lock. Its
    // reply guard answers the caller.
    let group = calls
        .group
        .lock()
        .unpoisoned()
        .as_ref()
        .map(TaskGroup::handle);
    match group {
        Some(group) => {
            let _ = group.spawn(member);
        }
        None => drop(member),
    }
}

impl Export {
    /// The calls still running.
    pub fn in_flight(&self) -> usize {
        self.calls
            .group
            .lock()
            .unpoisoned()
            .as_ref()
            .map_or(0, TaskGroup::len)
    }
}

impl Drop for Export {
    fn drop(&mut self) {
        if let Some(id) = self.registration.take() {
            // SAFETY: a live connection and our registration's id; false
            // only if it is gone already (the connection closed).
            unsafe {
                gio::ffi::g_dbus_connection_unregister_object(self.connection.to_glib_none().0, id);
            }
        }
        if let Some(id) = self.closed_handler.take() {
            self.connection.disconnect(id);
        }
        self.calls.cancel_all();
    }
}

impl std::fmt::Debug for Export {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Export")
            .field("in_flight", &self.in_flight())
            .finish_non_exhaustive()
    }
}

/// Duplicates of the file descriptors that came with the call, or the
/// error to answer it with if they cannot be had (out of descriptors).
fn call_fds(invocation: &gio::DBusMethodInvocation) -> Result<Arc<[OwnedFd]>, glib::Error> {
    let Some(list) = invocation.message().unix_fd_list() else {
        return Ok(Arc::new([]));
    };
    (0..list.length())
        .map(|index| list.get(index))
        .collect::<Result<Vec<_>, _>>()
        .map(Arc::from)
        .map_err(|e| {
            glib::Error::new(
                gio::DBusError::LimitsExceeded,
                &format!("gdex::dbus: the call's file descriptors could not be taken: {e}"),
            )
        })
}

/// A method invocation on its way to a worker.
#[derive(Clone)]
struct SendInvocation(gio::DBusMethodInvocation);

// SAFETY: GDBus is thread-safe: a `GDBusMethodInvocation` is immutable
// once dispatched, and its `g_dbus_method_invocation_return_*` functions
// send the reply through the connection's own locked queue from any
// thread (GIO's docs for `GDBusInterfaceVTable` invite handling a call on
// another thread and returning later). The invocation's last reference may
// then go on that thread, which GObject's refcounting allows.
unsafe impl Send for SendInvocation {}

/// A call's one answer: the invocation until the call is answered, and
/// the file descriptors of [`MethodCall::reply_fd`]. Shared by the call's
/// [`Reply`], the call (and its clones) and its [`Invocation`]s: whoever
/// takes the invocation first answers.
struct Answer {
    invocation: Mutex<Option<SendInvocation>>,
    fds: Mutex<Vec<OwnedFd>>,
    /// `interface.method`, for the messages.
    method: String,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answer")
            .field("method", &self.method)
            .finish_non_exhaustive()
    }
}

impl Answer {
    /// The invocation, if the call is not answered yet; the taker must
    /// answer it ([`send`](Self::send)).
    fn take(&self) -> Option<SendInvocation> {
        self.invocation.lock().unpoisoned().take()
    }

    /// Answers `invocation` (taken from this answer) with `outcome` and the
    /// reply's file descriptors. Called without our locks held: GIO sends
    /// the reply.
    fn send(
        &self,
        invocation: SendInvocation,
        outcome: Result<Option<glib::Variant>, glib::Error>,
    ) {
        let SendInvocation(invocation) = invocation;
        // Taken whatever the outcome: an error reply closes them, and so
        // does the last clone of the call for any added later.
        let fds = std::mem::take(&mut *self.fds.lock().unpoisoned());
        let outcome = outcome
            .and_then(|body| checked_body(&invocation, body))
            .and_then(|body| fds_passable(&invocation, &fds).map(|()| body));
        match outcome {
            Ok(body) if !fds.is_empty() => {
                let list = gio::UnixFDList::from_array(fds);
                invocation.return_value_with_unix_fd_list(body.as_ref(), Some(&list));
            }
            outcome => invocation.return_result(outcome),
        }
    }
}

/// The call's task's hold on its [`Answer`]: sends the future's outcome,
/// unless an [`Invocation`] answered first; if dropped unanswered (the call
/// was cancelled or refused), answers with `G_IO_ERROR_CANCELLED`.
struct Reply(Arc<Answer>);

impl Reply {
    fn send(self, outcome: Result<Option<glib::Variant>, glib::Error>) {
        match self.0.take() {
            Some(invocation) => self.0.send(invocation, outcome),
            // Answered through an `Invocation`: `Ok(None)` says there is
            // nothing more; anything else is lost, so it is reported.
            None => {
                if !matches!(outcome, Ok(None)) {
                    glib::g_warning!(
                        "gdex",
                        "gdex::dbus: the call {} was answered through its Invocation, and its \
                         future gave {outcome:?} too: not sent (a call gets one answer; give \
                         Ok(None) from the future of a call answered early)",
                        self.0.method
                    );
                }
            }
        }
    }

    /// The handler (or its future) panicked: the caller's error, unless
    /// the call was answered through an [`Invocation`] already; then nobody
    /// reads the panic, and it goes to the panic handler (X5).
    fn panicked(self, message: String) {
        match self.0.take() {
            Some(invocation) => self
                .0
                .send(invocation, Err(Error::Panicked(message).into())),
            None => crate::diagnostics::panic::report(PanicSource::Task, message),
        }
    }
}

/// An error naming the reason if the reply's file descriptors cannot go
/// over the call's connection: GIO would only log it and send nothing,
/// leaving the caller waiting for its timeout.
fn fds_passable(
    invocation: &gio::DBusMethodInvocation,
    fds: &[OwnedFd],
) -> Result<(), glib::Error> {
    let capabilities = invocation.connection().capabilities();
    if fds.is_empty() || capabilities.contains(gio::DBusCapabilityFlags::UNIX_FD_PASSING) {
        return Ok(());
    }
    Err(glib::Error::new(
        gio::DBusError::NotSupported,
        &format!(
            "gdex::dbus: the reply of {}.{} carries {} file descriptors, but its connection \
             cannot pass file descriptors (not a unix socket, or the peers did not negotiate it)",
            invocation.interface_name().unwrap_or_default(),
            invocation.method_name(),
            fds.len()
        ),
    ))
}

/// The reply's body as GIO will send it (`None` is `()`, a lone value a
/// one-element tuple, as gio-rs does), if it has the type the method's
/// out-arguments say; otherwise an error naming both. GLib would only log
/// the mismatch and send nothing, leaving the caller waiting for its
/// timeout.
fn checked_body(
    invocation: &gio::DBusMethodInvocation,
    body: Option<glib::Variant>,
) -> Result<Option<glib::Variant>, glib::Error> {
    let body = match body {
        None => ().to_variant(),
        Some(v) if v.type_().is_tuple() => v,
        Some(v) => glib::Variant::tuple_from_iter([v]),
    };
    let Some(expected) = expected_reply(invocation) else {
        return Ok(Some(body));
    };
    if body.type_().as_str() == expected {
        return Ok(Some(body));
    }
    Err(glib::Error::new(
        gio::DBusError::Failed,
        &format!(
            "gdex::dbus: the handler of {}.{} replied with a value of type {}, but the method's \
             out-arguments are {expected}",
            invocation.interface_name().unwrap_or_default(),
            invocation.method_name(),
            body.type_(),
        ),
    ))
}

/// The type of the reply body the call expects: its method's out-arguments
/// as a tuple, or what the `org.freedesktop.DBus.Properties` calls that GIO
/// routes to the method handler expect (`export` registers no property
/// closures).
fn expected_reply(invocation: &gio::DBusMethodInvocation) -> Option<String> {
    if invocation.interface_name().as_deref() == Some("org.freedesktop.DBus.Properties") {
        return match invocation.method_name().as_str() {
            "Get" => Some("(v)".into()),
            "Set" => Some("()".into()),
            "GetAll" => Some("(a{sv})".into()),
            _ => None,
        };
    }
    let info = invocation.method_info()?;
    let mut signature = String::from("(");
    // SAFETY: the method info is live while we hold it; `out_args` is null
    // or a null-terminated array of live arg infos, each with a signature
    // string.
    unsafe {
        let mut arg = (*info.as_ptr()).out_args;
        while !arg.is_null() && !(*arg).is_null() {
            let sig = std::ffi::CStr::from_ptr((**arg).signature);
            signature.push_str(&sig.to_string_lossy());
            arg = arg.add(1);
        }
    }
    signature.push(')');
    Some(signature)
}

impl Drop for Reply {
    fn drop(&mut self) {
        if let Some(SendInvocation(invocation)) = self.0.take() {
            invocation.return_gerror(glib::Error::new(
                gio::IOErrorEnum::Cancelled,
                "gdex: the method call was cancelled (its object was unexported or its scheduler shut down)",
            ));
        }
    }
}
