//! D-Bus methods as gdex tasks: [`export`].
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
//! A handler that panics answers its caller with an error
//! (`org.gtk.GDBus.UnmappedGError…` carrying gdex's `Panicked` code and the
//! message), and a call cancelled while its connection is still open (the
//! export was dropped) is answered with `G_IO_ERROR_CANCELLED`: a caller
//! never waits for a reply that will not come.

use std::future::IntoFuture;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use gio::prelude::*;

use crate::error::panic_message;
use crate::util::Unpoisoned;
use crate::{Error, Scheduler, TaskGroup};

/// One D-Bus method call, as [`export`]'s handler gets it.
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
}

/// An object exported with [`export`]. Dropping it unregisters the object
/// and cancels its calls in flight (each is answered with
/// `G_IO_ERROR_CANCELLED`).
pub struct Export {
    connection: gio::DBusConnection,
    registration: Option<gio::RegistrationId>,
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
/// itself runs on this thread's thread-default main context (where GIO
/// dispatches the calls), so it should only make the future.
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
    H: Fn(MethodCall) -> F + 'static,
    F: IntoFuture<Output = Result<Option<glib::Variant>, glib::Error>>,
    F::IntoFuture: Send + 'static,
{
    let calls = Arc::new(Calls {
        group: Mutex::new(Some(TaskGroup::on(scheduler.clone()))),
    });
    let spawner = calls.clone();
    let registration = connection
        .register_object(object_path, interface)
        .method_call(
            move |connection, sender, path, iface, method, parameters, invocation| {
                let call = MethodCall {
                    connection,
                    sender: sender.map(str::to_owned),
                    object_path: path.to_owned(),
                    interface_name: iface.unwrap_or_default().to_owned(),
                    method_name: method.to_owned(),
                    parameters,
                };
                let reply = Reply(Some(SendInvocation(invocation)));
                // The handler runs inside GIO's dispatch, where a panic
                // cannot unwind: it becomes the caller's error.
                let future = match std::panic::catch_unwind(AssertUnwindSafe(|| handler(call))) {
                    Ok(future) => future.into_future(),
                    Err(payload) => {
                        let message = panic_message(&*payload);
                        crate::diagnostics::panic::drop_payload(payload);
                        reply.send(Err(Error::Panicked(message).into()));
                        return;
                    }
                };
                let member = async move {
                    let outcome = AssertUnwindSafe(future).catch_unwind().await;
                    let outcome = match outcome {
                        Ok(result) => result,
                        Err(payload) => Err(Error::Panicked(panic_message(&*payload)).into()),
                    };
                    reply.send(outcome);
                };
                // A member refused (the connection closed, the pool shut down)
                // is dropped, and its reply guard answers the caller.
                if let Some(group) = &*spawner.group.lock().unpoisoned() {
                    let _ = group.spawn(member);
                }
            },
        )
        .build()?;
    let closing = calls.clone();
    let closed_handler = connection.connect_closed(move |_, _, _| closing.cancel_all());
    Ok(Export {
        connection: connection.clone(),
        registration: Some(registration),
        closed_handler: Some(closed_handler),
        calls,
    })
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
            // Fails only if the connection unregistered it already (closed).
            let _ = self.connection.unregister_object(id);
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

/// A method invocation on its way to a worker.
struct SendInvocation(gio::DBusMethodInvocation);

// SAFETY: GDBus is thread-safe: a `GDBusMethodInvocation` is immutable
// once dispatched, and its `g_dbus_method_invocation_return_*` functions
// send the reply through the connection's own locked queue from any
// thread (GIO's docs for `GDBusInterfaceVTable` invite handling a call on
// another thread and returning later). The invocation's last reference may
// then go on that thread, which GObject's refcounting allows.
unsafe impl Send for SendInvocation {}

/// Answers the call once: with the outcome, or, if dropped unanswered (the
/// call was cancelled or refused), with `G_IO_ERROR_CANCELLED`.
struct Reply(Option<SendInvocation>);

impl Reply {
    fn send(mut self, outcome: Result<Option<glib::Variant>, glib::Error>) {
        if let Some(SendInvocation(invocation)) = self.0.take() {
            invocation.return_result(outcome);
        }
    }
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
