//! [`channel`]: a bounded, multi-producer multi-consumer channel whose
//! futures are cancel-safe.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use super::wait_queue::Locked;
use std::task::{Context, Poll};

use super::wait_queue::WaitQueue;
use crate::Error;

/// Makes a channel that holds up to `capacity` items (libdex's
/// `DexChannel`). Both ends can be cloned and sent to other threads.
///
/// Cancel safety, which libdex's receive lacks: a [`recv`](Receiver::recv)
/// future that is dropped never takes an item, and an item is only
/// accepted when [`send`](Sender::send) resolves.
///
/// Order: items leave in the order they were queued, whoever takes them,
/// so each sender's items arrive in the order it sent them.
///
/// Fairness: waiters are served in arrival order. An item that arrives
/// while receives wait is owed to the longest-waiting one until it takes
/// its turn: [`try_recv`](Receiver::try_recv) and newer receives take only
/// the items beyond those owed. What is owed is a turn, not a particular
/// item: whoever takes first takes the oldest item, and the woken receive
/// the oldest one left when it runs. Likewise, room made while sends wait
/// is kept for the longest-waiting send, and [`try_send`](Sender::try_send)
/// and newer sends cannot fill it. A woken future that goes away passes
/// its turn on to the next waiter (or frees it if none waits).
///
/// Closing: [`Sender::close`] (or dropping every sender) lets receivers
/// drain what is queued, then they get [`Error::Closed`];
/// [`Receiver::close`] (or dropping every receiver) refuses further sends,
/// which give their item back.
///
/// Budget (P11): a send or receive that completes spends one unit of the
/// running task's cooperative budget; once it is spent, the next one
/// yields first (see [`unconstrained`](crate::unconstrained)), so a loop
/// draining a full channel lets its neighbours run.
///
/// # Panics
/// If `capacity` is 0 (use 1 for a hand-over channel).
///
/// ```
/// let (tx, rx) = gdex::channel(2);
/// let producer = gdex::spawn(async move {
///     for i in 0..5 {
///         tx.send(i).await.unwrap();
///     }
/// });
/// let mut got = Vec::new();
/// while let Ok(i) = gdex::block_on(rx.recv()) {
///     got.push(i);
/// }
/// assert_eq!(got, [0, 1, 2, 3, 4]);
/// gdex::block_on(producer).unwrap();
/// ```
pub fn channel<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    assert!(
        capacity > 0,
        "gdex::channel(0): a channel needs room for at least one item; use capacity 1 or more"
    );
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            queue: VecDeque::new(),
            capacity,
            senders: 1,
            receivers: 1,
            send_closed: false,
            recv_closed: false,
            send_wait: WaitQueue::default(),
            recv_wait: WaitQueue::default(),
            room_kept: 0,
            items_owed: 0,
        }),
    });
    (
        Sender {
            shared: shared.clone(),
        },
        Receiver { shared },
    )
}

struct Shared<T> {
    state: Mutex<State<T>>,
}

struct State<T> {
    queue: VecDeque<T>,
    capacity: usize,
    senders: usize,
    receivers: usize,
    send_closed: bool,
    recv_closed: bool,
    /// Senders waiting for room.
    send_wait: WaitQueue,
    /// Receivers waiting for an item.
    recv_wait: WaitQueue,
    /// While open: free places kept for senders that were woken for room
    /// and have not pushed yet (one per sender notified in `send_wait`).
    /// Newcomers may fill only `capacity - queue.len() - room_kept` places.
    room_kept: usize,
    /// While open: how many of the queued items are owed to receivers
    /// that were woken for an item and have not taken their turn yet (one
    /// per receiver notified in `recv_wait`; never more than
    /// `queue.len()`). Newcomers take only `queue.len() - items_owed`.
    /// A count, not a place in the queue: every take is from the front, so
    /// items leave in the order they were queued.
    items_owed: usize,
}

impl<T> Shared<T> {
    fn lock(&self) -> Locked<'_, State<T>> {
        super::wait_queue::lock(&self.state)
    }
}

impl<T> State<T> {
    fn is_open(&self) -> bool {
        !self.send_closed && !self.recv_closed
    }

    fn close_send(&mut self) {
        self.send_closed = true;
        // Nothing is owed or kept once closed: whichever receiver comes
        // first drains what is queued (oldest first), senders are refused.
        self.items_owed = 0;
        self.room_kept = 0;
        self.recv_wait.notify_all();
        self.send_wait.notify_all();
    }

    fn close_recv(&mut self) -> Vec<T> {
        self.recv_closed = true;
        self.items_owed = 0;
        self.room_kept = 0;
        self.recv_wait.notify_all();
        self.send_wait.notify_all();
        self.queue.drain(..).collect()
    }

    /// True if a sender that holds no kept place may push now.
    fn has_free_room(&self) -> bool {
        self.queue.len() + self.room_kept < self.capacity
    }

    /// Queues `item` (the caller checked there is room for it) and owes a
    /// turn to the longest-waiting receiver, if one waits.
    fn push(&mut self, item: T) {
        self.queue.push_back(item);
        if self.recv_wait.notify_one() {
            self.items_owed += 1;
        }
    }

    /// After `n` items left the queue: keeps the places they freed for the
    /// longest-waiting senders, one each, while senders wait.
    fn made_room(&mut self, n: usize) {
        for _ in 0..n {
            if !self.send_wait.notify_one() {
                break;
            }
            self.room_kept += 1;
        }
    }

    /// Items a receiver that is owed no turn may take now.
    fn free_items(&self) -> usize {
        self.queue.len() - self.items_owed
    }

    /// Takes the oldest item (the caller checked it is there and may be
    /// taken), keeping the room it frees for a waiting sender. Allocates
    /// nothing.
    #[inline]
    fn take_one(&mut self) -> T {
        let item = self
            .queue
            .pop_front()
            .expect("the caller checked an item is queued");
        self.made_room(1);
        item
    }

    /// Takes the oldest `n` items (the caller checked they are there and
    /// may be taken), keeping the room they free for waiting senders.
    fn take_all(&mut self, n: usize) -> Vec<T> {
        let taken = self.queue.drain(..n).collect();
        self.made_room(n);
        taken
    }
}

/// A send refused because the channel is closed; holds the item.
#[derive(PartialEq, Eq)]
pub struct SendError<T>(pub T);

impl<T> SendError<T> {
    /// The item that was not sent.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> std::fmt::Debug for SendError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SendError(..)")
    }
}

impl<T> std::fmt::Display for SendError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the channel is closed; the item was not sent")
    }
}

impl<T> std::error::Error for SendError<T> {}

impl<T> From<SendError<T>> for Error {
    fn from(_: SendError<T>) -> Self {
        Error::Closed
    }
}

/// The sending end of a [`channel`].
pub struct Sender<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Sender<T> {
    /// Sends `item`, waiting while the channel is full. Resolves once the
    /// item is in the channel; fails with the item if the channel is closed.
    /// Dropping the future before it resolves drops the item unsent.
    pub fn send(&self, item: T) -> SendFuture<'_, T> {
        SendFuture {
            shared: &self.shared,
            item: Some(item),
            key: None,
        }
    }

    /// Sends `item` if there is room now. Room kept for a send that waited
    /// and was woken for it does not count: it is that send's.
    pub fn try_send(&self, item: T) -> Result<(), TrySendError<T>> {
        let mut state = self.shared.lock();
        if state.send_closed || state.recv_closed {
            return Err(TrySendError::Closed(item));
        }
        if !state.has_free_room() {
            return Err(TrySendError::Full(item));
        }
        state.push(item);
        Ok(())
    }

    /// Closes the sending side for every sender: receivers get what is
    /// queued, then [`Error::Closed`].
    pub fn close(&self) {
        self.shared.lock().close_send();
    }

    /// Items queued now.
    pub fn len(&self) -> usize {
        self.shared.lock().queue.len()
    }

    /// True if no item is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.shared.lock().senders += 1;
        Sender {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.senders -= 1;
        if state.senders == 0 {
            state.close_send();
        }
    }
}

impl<T> std::fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender").finish_non_exhaustive()
    }
}

/// Why [`Sender::try_send`] did not send.
#[derive(Debug, PartialEq, Eq)]
pub enum TrySendError<T> {
    /// No room now; here is the item back.
    Full(T),
    /// The channel is closed; here is the item back.
    Closed(T),
}

/// The receiving end of a [`channel`].
pub struct Receiver<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Receiver<T> {
    /// Receives the next item, waiting while the channel is empty. Fails
    /// with [`Error::Closed`] once the channel is closed and drained.
    pub fn recv(&self) -> RecvFuture<'_, T> {
        RecvFuture {
            shared: &self.shared,
            key: None,
            all: false,
        }
    }

    /// Waits for at least one item, then takes every queued item
    /// (libdex's `dex_channel_receive_all`), oldest first, except as many
    /// as are owed to other receives that waited and were woken for them.
    pub fn recv_all(&self) -> RecvAllFuture<'_, T> {
        RecvAllFuture(RecvFuture {
            shared: &self.shared,
            key: None,
            all: true,
        })
    }

    /// The oldest item if one is queued now beyond those owed to receives
    /// that waited and were woken for one (see [`channel`]: waiters keep
    /// their turn).
    pub fn try_recv(&self) -> Option<T> {
        let mut state = self.shared.lock();
        if state.free_items() == 0 {
            return None;
        }
        Some(state.take_one())
    }

    /// Closes the receiving side for every receiver: sends fail and give
    /// their item back. Returns the items that were queued and will now
    /// never be received, so none is dropped unseen.
    pub fn close(&self) -> Vec<T> {
        self.shared.lock().close_recv()
    }
}

impl<T> Clone for Receiver<T> {
    fn clone(&self) -> Self {
        self.shared.lock().receivers += 1;
        Receiver {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.receivers -= 1;
        if state.receivers == 0 {
            let left = state.close_recv();
            drop(state);
            drop(left);
        }
    }
}

impl<T> std::fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver").finish_non_exhaustive()
    }
}

/// The future of [`Sender::send`].
#[must_use = "futures do nothing unless awaited"]
pub struct SendFuture<'a, T> {
    shared: &'a Shared<T>,
    item: Option<T>,
    key: Option<usize>,
}

impl<T> Unpin for SendFuture<'_, T> {}

impl<T> Future for SendFuture<'_, T> {
    type Output = Result<(), SendError<T>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        crate::task::coop::poll_leaf(cx, |cx| this.poll_send(cx))
    }
}

impl<T> SendFuture<'_, T> {
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), SendError<T>>> {
        let this = self;
        let mut state = this.shared.lock();
        let item = this
            .item
            .take()
            .expect("a gdex channel Send future was polled after it completed");
        if !state.is_open() {
            state.send_wait.remove(&mut this.key);
            return Poll::Ready(Err(SendError(item)));
        }
        // Woken for room: a place is kept for this send.
        let kept = state.send_wait.is_notified(this.key);
        if kept || state.has_free_room() {
            if kept {
                debug_assert!(state.room_kept > 0 && state.queue.len() < state.capacity);
                state.room_kept -= 1;
            }
            state.send_wait.remove(&mut this.key);
            state.push(item);
            return Poll::Ready(Ok(()));
        }
        this.item = Some(item);
        state.send_wait.park(&mut this.key, cx.waker());
        Poll::Pending
    }
}

impl<T> Drop for SendFuture<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if self.key.is_some() {
            self.leave();
        }
    }
}

impl<T> SendFuture<'_, T> {
    /// Its drop while parked or woken: out of the line of senders.
    fn leave(&mut self) {
        let mut state = self.shared.lock();
        if state.send_wait.remove(&mut self.key) && state.is_open() {
            // Woken for room it will never fill: the room goes to the next
            // sender in line, or is free if none waits.
            if !state.send_wait.notify_one() {
                state.room_kept -= 1;
            }
        }
    }
}

impl<T> std::fmt::Debug for SendFuture<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendFuture")
            .field("queued", &self.key.is_some())
            .finish()
    }
}

/// The future of [`Receiver::recv`].
#[must_use = "futures do nothing unless awaited"]
pub struct RecvFuture<'a, T> {
    shared: &'a Shared<T>,
    key: Option<usize>,
    all: bool,
}

impl<T> RecvFuture<'_, T> {
    /// Takes the oldest item, or (with `all`) every item this receive may
    /// take, or parks: `take` is given the state and how many to take.
    #[inline]
    fn poll_take<R>(
        &mut self,
        cx: &mut Context<'_>,
        take: impl FnOnce(&mut State<T>, usize) -> R,
    ) -> Poll<Result<R, Error>> {
        let mut state = self.shared.lock();
        // Woken for an item while open: a turn is owed to this receive.
        let owed = state.is_open() && state.recv_wait.is_notified(self.key);
        if owed || state.free_items() > 0 {
            state.recv_wait.remove(&mut self.key);
            if owed {
                debug_assert!(state.items_owed > 0 && !state.queue.is_empty());
                state.items_owed -= 1;
            }
            // From the front, whether this receive's turn was owed or not:
            // the items left behind (as many as are still owed to others)
            // are the newer ones, so items leave in the order they came.
            let n = if self.all { state.free_items() } else { 1 };
            return Poll::Ready(Ok(take(&mut *state, n)));
        }
        if !state.is_open() {
            state.recv_wait.remove(&mut self.key);
            return Poll::Ready(Err(Error::Closed));
        }
        state.recv_wait.park(&mut self.key, cx.waker());
        Poll::Pending
    }
}

impl<T> Future for RecvFuture<'_, T> {
    type Output = Result<T, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        crate::task::coop::poll_leaf(cx, |cx| this.poll_take(cx, |state, _| state.take_one()))
    }
}

impl<T> Drop for RecvFuture<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if self.key.is_some() {
            self.leave();
        }
    }
}

impl<T> RecvFuture<'_, T> {
    /// Its drop while parked or woken: out of the line of receivers.
    fn leave(&mut self) {
        let mut state = self.shared.lock();
        if state.recv_wait.remove(&mut self.key) && state.is_open() {
            // Woken for an item it will never take: its turn goes to the
            // next receiver in line, or is freed if none waits.
            if !state.recv_wait.notify_one() {
                state.items_owed -= 1;
            }
        }
    }
}

impl<T> std::fmt::Debug for RecvFuture<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvFuture")
            .field("queued", &self.key.is_some())
            .finish()
    }
}

/// The future of [`Receiver::recv_all`].
#[must_use = "futures do nothing unless awaited"]
#[derive(Debug)]
pub struct RecvAllFuture<'a, T>(RecvFuture<'a, T>);

impl<T> Future for RecvAllFuture<'_, T> {
    type Output = Result<Vec<T>, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let recv = &mut self.get_mut().0;
        crate::task::coop::poll_leaf(cx, |cx| recv.poll_take(cx, State::take_all))
    }
}
