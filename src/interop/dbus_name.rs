//! A well-known D-Bus name owned as a handle (D4): libdex's
//! `dex_bus_own_name_on_connection`, with the name's two outcomes as
//! futures and its release on drop.
//!
//! GIO reports a name's fate through two callbacks on the main context
//! that was the thread-default one when the name was asked for; here they
//! only record the outcome and wake the futures waiting for it. As in
//! libdex, a loss is final: the name is given up then, and a
//! [`NameOwner`] does not follow a later re-acquisition (ask again).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use glib::translate::{IntoGlib, ToGlibPtr};

use crate::sync::wait_queue::{lock, WaitQueue};
use crate::Error;

#[derive(Default)]
struct State {
    /// `None` until the bus answered; then whether the name is ours.
    owned: Option<bool>,
    /// It was ours at some point (it may be lost since).
    was_acquired: bool,
    /// The owner was dropped before the bus answered.
    released: bool,
    /// GIO's owner id, until the name is given up (lost or dropped).
    id: Option<u32>,
    /// The futures waiting for an outcome (each leaves when dropped).
    waiting: WaitQueue,
}

struct Shared {
    name: String,
    state: Mutex<State>,
}

impl Shared {
    fn settle(&self, owned: bool) {
        let id = {
            let mut state = lock(&self.state);
            if state.owned == Some(false) {
                return; // lost already: final
            }
            state.owned = Some(owned);
            state.was_acquired |= owned;
            state.waiting.notify_all();
            if owned {
                None
            } else {
                state.id.take()
            }
        };
        // Lost: given up, as libdex does (outside the state's lock:
        // g_bus_unown_name takes GIO's own).
        if let Some(id) = id {
            unown(id);
        }
    }

    fn poll_with(
        &self,
        key: &mut Option<usize>,
        cx: &mut Context<'_>,
        want: impl Fn(Option<bool>) -> bool,
    ) -> Poll<()> {
        let mut state = lock(&self.state);
        if want(state.owned) {
            state.waiting.remove(key);
            return Poll::Ready(());
        }
        state.waiting.park(key, cx.waker());
        Poll::Pending
    }
}

/// Asks the bus behind `connection` for the well-known `name` (D4;
/// libdex's `dex_bus_own_name_on_connection`, GIO's
/// `g_bus_own_name_on_connection`). The returned [`NameOwner`] gives the
/// outcome ([`acquired`](NameOwner::acquired),
/// [`lost`](NameOwner::lost)) and releases the name when dropped.
///
/// GIO delivers the outcome on the calling thread's thread-default main
/// context: call this where one runs (a GTK app's main thread, a gdex
/// task on any scheduler), or the outcome never comes.
///
/// ```no_run
/// # async fn f(connection: gio::DBusConnection) -> Result<(), gdex::Error> {
/// let name = gdex::dbus::own_name(&connection, "org.example.App", gio::BusNameOwnerFlags::NONE);
/// name.acquired().await?; // ours; dropping `name` releases it
/// name.lost().await;      // another took it, or the connection closed
/// # Ok(()) }
/// ```
#[must_use = "dropping the NameOwner gives the name up at once"]
pub fn own_name(
    connection: &gio::DBusConnection,
    name: &str,
    flags: gio::BusNameOwnerFlags,
) -> NameOwner {
    let shared = Arc::new(Shared {
        name: name.to_owned(),
        state: Mutex::new(State::default()),
    });
    // The callbacks hold the state weakly, and once the owner is dropped
    // the state is final: a late callback changes nothing. They are
    // thread-safe closures (gio-rs's `bus_own_name_on_connection` makes
    // thread-bound ones, which panic when GIO frees them on another thread:
    // the thread that drops the owner, or a worker's).
    let closure = |acquired: bool| {
        let shared = Arc::downgrade(&shared);
        glib::Closure::new(move |_| {
            if let Some(shared) = shared.upgrade() {
                shared.settle(acquired);
            }
            None
        })
    };
    // SAFETY: every pointer is a live borrow for the call (the connection,
    // the name as a C string, the two closures, which GIO takes its own
    // references to); the closures' callbacks take the (connection, name)
    // arguments GIO passes and read neither.
    let id = unsafe {
        gio::ffi::g_bus_own_name_on_connection_with_closures(
            connection.to_glib_none().0,
            name.to_glib_none().0,
            flags.into_glib(),
            closure(true).to_glib_none().0,
            closure(false).to_glib_none().0,
        )
    };
    let mut state = lock(&shared.state);
    if state.owned == Some(false) {
        // Lost before we got the id (GIO answered at once): give it up.
        drop(state);
        unown(id);
    } else {
        state.id = Some(id);
        drop(state);
    }
    NameOwner { shared }
}

/// A well-known D-Bus name asked for with [`own_name`]: released when
/// dropped.
pub struct NameOwner {
    shared: Arc<Shared>,
}

impl NameOwner {
    /// The name asked for.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Whether the name is ours now (`false` before the bus answered).
    pub fn is_owned(&self) -> bool {
        lock(&self.shared.state).owned == Some(true)
    }

    /// Resolves once the name is ours, or fails (`G_IO_ERROR_FAILED`,
    /// naming it) if the bus gave it to another connection first, or the
    /// connection closed, as libdex's acquired future does, or with
    /// [`Error::Cancelled`] if the owner was dropped before the bus
    /// answered (the future does not keep the name).
    pub fn acquired(&self) -> impl Future<Output = Result<(), Error>> + Send + 'static {
        let shared = self.shared.clone();
        NameFuture {
            shared,
            want: |owned| owned.is_some(),
            key: None,
        }
        .map_owned(|shared| match *lock(&shared.state) {
            State {
                was_acquired: true, ..
            } => Ok(()),
            State { released: true, .. } => Err(Error::Cancelled),
            _ => Err(Error::Failed(glib::Error::new(
                gio::IOErrorEnum::Failed,
                &format!(
                    "the D-Bus name {} was not acquired: another connection owns it (and does \
                     not allow replacement), or the connection closed",
                    shared.name
                ),
            ))),
        })
    }

    /// Resolves once the name is lost (another connection replaced us, or
    /// the connection closed) or released (the owner dropped), whether or
    /// not it was ever ours. From then on the name is given up.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        NameFuture {
            shared: self.shared.clone(),
            want: |owned| owned == Some(false),
            key: None,
        }
        .map_owned(|_| ())
    }
}

impl Drop for NameOwner {
    fn drop(&mut self) {
        {
            let mut state = lock(&self.shared.state);
            state.released = state.owned.is_none();
        }
        // Given up as when lost: the futures, which outlive the owner,
        // learn it (no callback comes once it is), instead of waiting
        // forever. A callback between the two locks changes nothing that
        // matters: a name acquired meanwhile is then `was_acquired`.
        self.shared.settle(false);
    }
}

/// Gives the name of GIO's owner id `id` up (`g_bus_unown_name`, which may
/// be called from any thread), once: the id is taken out of the state
/// under its lock by whoever gives it up.
fn unown(id: u32) {
    // SAFETY: `id` came from g_bus_own_name_on_connection_with_closures
    // and is given up once (see above).
    unsafe { gio::ffi::g_bus_unown_name(id) }
}

impl std::fmt::Debug for NameOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Read, then written with the lock released: the formatter's sink
        // is the caller's code.
        let owned = lock(&self.shared.state).owned;
        f.debug_struct("NameOwner")
            .field("name", &self.shared.name)
            .field("owned", &owned)
            .finish()
    }
}

/// Waits until `want` holds of the name's state.
struct NameFuture {
    shared: Arc<Shared>,
    want: fn(Option<bool>) -> bool,
    /// Its entry among the waiting futures, once it waited.
    key: Option<usize>,
}

impl NameFuture {
    /// Then gives `f` of the state (which only moves forward: unanswered,
    /// ours, lost).
    async fn map_owned<T>(self, f: fn(&Shared) -> T) -> T {
        let shared = self.shared.clone();
        self.await;
        f(&shared)
    }
}

impl Future for NameFuture {
    type Output = ();

    /// A leaf (P11): the outcome spends one unit of the task's budget.
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        crate::task::coop::poll_leaf(cx, |cx| this.shared.poll_with(&mut this.key, cx, this.want))
    }
}

impl Drop for NameFuture {
    fn drop(&mut self) {
        if self.key.is_some() {
            lock(&self.shared.state).waiting.remove(&mut self.key);
        }
    }
}
