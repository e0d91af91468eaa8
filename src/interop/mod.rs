//! GObject and GIO interop: GIO's `_async`/`_finish` pairs implemented
//! with futures ([`AsyncResult`](crate::AsyncResult)), D-Bus methods
//! served as tasks ([`dbus`](crate::dbus)), a `gio::ListModel` filled
//! from a stream ([`ListModel`](crate::ListModel)), and GObject signals as
//! streams ([`signal_stream`](crate::signal_stream)).

pub(crate) mod async_result;
pub mod dbus;
mod dbus_name;
pub(crate) mod list_model;
pub(crate) mod signal_stream;
