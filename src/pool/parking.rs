//! Who sleeps and who wakes whom: the pool's directed, coalesced wake-up
//! protocol (P6) and its parking rule (P7).
//!
//! This module holds no GLib type and makes no syscall. It only decides; the
//! pool performs the one `g_main_context_wakeup` a decision calls for. That
//! keeps the protocol small enough to model-check.
//!
//! # State
//!
//! Each worker has one state word, written by itself and by requesters:
//!
//! | state              | meaning                                                   |
//! |--------------------|-----------------------------------------------------------|
//! | `0`                | awake: running work or searching for it                   |
//! | `NOTIFIED`         | awake and holding a wake request: it will search peers and the injector once its own deque is drained (a busy peer may keep a request until then) |
//! | `PARKED`           | parked, but its thread is not asleep: between its park and its poll, or dispatching another source of its context (a GLib callback, a context scheduler's task). Busy, to a requester (P10) |
//! | `PARKED\|IN_POLL`  | asleep in its context's poll, nobody has asked it to help  |
//! | `PARKED\|IN_POLL\|NOTIFIED` | asleep, but a requester has woken it: it is on its way |
//! | `PARKED\|NOTIFIED` | out of its poll holding a request it has not acted on yet (woken in the poll, or marked as a busy peer) |
//! | `PARKED\|DIRECTED`, `PARKED\|IN_POLL\|DIRECTED` | woken for its own pinned inbox only (P10) |
//!
//! (`DIRECTED|NOTIFIED` with `PARKED` also occurs: a requester with local
//! work marked a worker already woken for its inbox, as it marks a busy
//! peer.) A parked worker's state that holds `NOTIFIED` or `DIRECTED` says
//! it was sent a wake-up it has not yet acted on: the stall monitor reports
//! one that stays so for its threshold ([`Parking::holds_wake_up`]).
//!
//! Two counters summarise the words so that the common request costs one or
//! two loads: `sleepers` counts `PARKED` and `PARKED|IN_POLL` workers,
//! `waking` counts `PARKED|IN_POLL|NOTIFIED` ones.
//!
//! `sleepers` is raised *before* the transition that makes it true and
//! lowered after the one that ends it: it may read above the true count for a
//! moment, which only makes a requester look further.
//!
//! `waking` is the one a requester trusts to *skip* work (it coalesces when
//! it reads above zero), so it must never read above zero unless some worker
//! really holds a request it has not yet acted on. It is therefore raised only
//! *after* a successful `PARKED → PARKED|NOTIFIED`, and lowered by the worker
//! after it left that state. Each decrement consumes the increment of the
//! notify that woke it, so whenever `waking > 0`, some notified worker has
//! not yet lowered it: that worker has yet to run its search and its park
//! re-check, both ordered after the requester's read, and it will find the
//! requester's job. The counter may read below the true count (or at `-1`,
//! when a woken worker lowers it before its notifier raised it): a requester
//! then scans, finds the worker `PARKED|NOTIFIED` and coalesces anyway.
//! (Were `waking` raised before the CAS and lowered after a failed one, a
//! requester reading that transient `1` would coalesce with a worker that
//! had un-parked itself and parked again: a lost wake-up.)
//!
//! # Directed wake-ups are their own (P10)
//!
//! Work only worker `i` may run (a pinned job, a fiber) wakes `i` with
//! [`Parking::notify`]: `PARKED → PARKED|DIRECTED`. That worker is woken for
//! its inbox, not for the pool: it may run a pinned job that polls for a
//! long time before it looks anywhere else. So a directed wake-up never
//! raises `waking`, and a request for help skips a `PARKED|DIRECTED` worker
//! as it skips an awake one, and wakes a plain sleeper instead. (Were the
//! directed wake-up counted in `waking`, an outside spawn right behind a
//! pinned push coalesced with it, and waited behind the pinned job's poll
//! while a peer slept.) The directed worker still re-checks every queue
//! before it parks again, so it never strands work either.
//!
//! # Only a worker in its poll is a sleeper (P10)
//!
//! A parked worker's thread does not only sleep: its context also
//! dispatches other sources (a GLib callback, a task of a scheduler made
//! for that context), for as long as they take, and its park does not end
//! for them. So the worker marks the poll itself: [`Parking::enter_poll`]
//! (`PARKED → PARKED|IN_POLL`) right before its poll may block, then
//! re-checks every queue; [`Parking::leave_poll`] when it returns. A
//! request wakes only a worker in its poll (`PARKED|IN_POLL`) and takes any
//! other parked one for busy, as it takes an awake one: it wakes a sleeper
//! in its poll instead, rather than one whose thread may be held for long
//! by another source, and the requests after it do not coalesce with that
//! one. A worker that leaves its poll with a request stops counting in
//! `waking` there: if another source runs before its own (one of a higher
//! priority), the next request wakes another sleeper, and the stall
//! monitor hands over what the request was for after a tick (B5). The
//! busy-in-another-source worker needs no wake-up: the re-check after its
//! `enter_poll` pairs with a publisher's fence as `try_park`'s does.
//!
//! Conversely a worker that consumed a general request (its
//! [`Woke::received`]) searches the shared queues before its own pinned
//! work: the request was sent for work any worker may run, and a pinned job
//! that arrived meanwhile must not keep that work waiting.
//!
//! # Requests
//!
//! A worker that published local work, a thief that found backlog, or an
//! outside thread that pushed to the injector asks for help with
//! [`Parking::request`]:
//!
//! 1. a sleeper is already on its way (`waking > 0`): *coalesced*, no syscall.
//!    That sleeper will ask for the next helper itself if its steal leaves
//!    backlog, so parallelism grows one worker at a time;
//! 2. otherwise one `PARKED` worker becomes `PARKED|NOTIFIED`: the caller
//!    must wake that one worker (one syscall);
//! 3. otherwise, for local work only, the requester's next peer is marked
//!    `NOTIFIED` (no syscall: it is awake), or the request *coalesces* with the
//!    one that peer already holds.
//!
//! # Parking
//!
//! A worker that found no work in its deque, the injector or any peer calls
//! [`Parking::try_park`] (`0 → PARKED`; refused if it holds a request, which it
//! then consumes and searches again), and then **re-checks every queue**. A
//! publisher to the injector pushes first and reads the states after a
//! `SeqCst` fence; the parker announces first and reads the queues after one. Of two such
//! threads, at least one sees the other: either the publisher finds the
//! `PARKED` worker and wakes it, or the parker finds the work and cancels its
//! park with [`Parking::wake_up`]. No wake-up is lost.

// Under `--cfg gdex_loom` the protocol runs on loom's atomics, so that the
// models in `loom_pool.rs` explore the interleavings of it.
#[cfg(gdex_loom)]
use loom::sync::atomic::{fence, AtomicIsize, AtomicU32, AtomicUsize, Ordering::SeqCst};
#[cfg(not(gdex_loom))]
use std::sync::atomic::{fence, AtomicIsize, AtomicU32, AtomicUsize, Ordering::SeqCst};

use crossbeam_utils::CachePadded;

const PARKED: u32 = 0b001;
const NOTIFIED: u32 = 0b010;
/// Woken for its own inbox only (P10): see the module docs.
const DIRECTED: u32 = 0b100;
/// Parked and asleep in its context's poll, the one state a request wakes
/// (P10): see the module docs.
const IN_POLL: u32 = 0b1000;

/// Whether a deque that just grew to `len` jobs should ask a peer for help
/// (P6): when it first holds more than the job its owner runs next, and
/// again each time it doubles. Requests in between would find the same
/// answer: a peer that parks later re-checks every deque before it sleeps,
/// so only peers already asleep need asking, and the first request reached
/// one of them. (Part of the protocol: the loom models ask the same way.)
#[inline]
pub(super) fn wants_help(len: usize) -> bool {
    len >= 2 && len.is_power_of_two()
}

/// How often a push that leaves the deque at the length its worker last
/// asked at asks again ([`push_asks`]).
pub(super) const REASK_EVERY: u32 = 64;

/// Whether a push that left its worker's deque at `len` jobs asks a peer
/// for help (P6), given the worker's record of its asks: `asked`, the
/// length at its last ask from a push (0 once a push found the deque
/// empty), and `repeats`, the pushes that left it at that length since.
/// Updates both.
///
/// [`wants_help`]'s lengths, once each: a deque that stays at a power of
/// two (jobs that yield, popped and pushed back) would otherwise ask at
/// every push, and each ask reads a peer's state to find it holding the
/// request already (busy) or awake (a worker does not park while a peer's
/// deque holds work). But a push's store and a parking peer's re-check are
/// not fenced against each other: both may miss the other, and the peer
/// park beside a deque of two. So the same length asks again every
/// [`REASK_EVERY`]th push: such a peer waits at most that many pushes.
/// (Part of the protocol: the loom models ask the same way.)
#[inline]
pub(super) fn push_asks(
    len: usize,
    asked: &std::cell::Cell<usize>,
    repeats: &std::cell::Cell<u32>,
) -> bool {
    if len <= 1 {
        // The deque was empty: its next growth asks again.
        asked.set(0);
        return false;
    }
    if !wants_help(len) {
        return false;
    }
    if len != asked.get() {
        asked.set(len);
        repeats.set(0);
        return true;
    }
    let n = repeats.get() + 1;
    if n == REASK_EVERY {
        repeats.set(0);
        true
    } else {
        repeats.set(n);
        false
    }
}

/// The outcome of a request for help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub(crate) enum Request {
    /// Worker `.0` was parked and now holds the request: the caller must wake
    /// its context.
    Wake(usize),
    /// Busy worker `.0` now holds the request; it needs no wake-up.
    Marked(usize),
    /// A pending request already covers this one.
    Coalesced,
    /// Nobody to ask: every peer is awake (remote requests do not mark busy
    /// workers; they take injector work when their deques run dry).
    Nobody,
}

/// The outcome of a directed wake-up ([`Parking::notify`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub(crate) enum Directed {
    /// The worker sleeps in its poll and is now woken for its inbox: the
    /// caller must wake its context.
    Wake,
    /// The worker is parked but its thread is busy in another source of its
    /// context: it is marked, needs no wake-up (it re-checks its inbox
    /// before it sleeps), and cannot run the work before that source
    /// returns. The caller lets the stall monitor watch it.
    Busy,
    /// The worker is awake, or already woken: nothing to do.
    No,
}

/// What a worker about to block in its context's poll must do
/// ([`Parking::enter_poll`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub(crate) enum EnterPoll {
    /// Now `PARKED|IN_POLL`: re-check every queue, and if one holds work,
    /// [`wake_up`](Parking::wake_up) and poll without blocking; else sleep,
    /// and call [`leave_poll`](Parking::leave_poll) when the poll returns.
    Sleep,
    /// It was sent a wake-up while out of its poll: poll without blocking
    /// (its source is ready).
    Woken,
    /// It is not parked: its source is ready, and the poll must not block
    /// (its own thread queued work for it since its source's prepare),
    /// unless the worker is inside a job's nested loop, whose poll blocks
    /// as GLib asked.
    Awake,
}

/// What a worker found when it woke up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Woke {
    /// It consumed a wake request sent by someone else.
    pub(crate) received: bool,
}

pub(crate) struct Parking {
    states: Box<[CachePadded<AtomicU32>]>,
    sleepers: CachePadded<AtomicUsize>,
    /// Signed: see the module docs (it may dip to -1 for a moment).
    waking: CachePadded<AtomicIsize>,
}

impl Parking {
    pub(crate) fn new(workers: usize) -> Parking {
        Parking {
            states: (0..workers)
                .map(|_| CachePadded::new(AtomicU32::new(0)))
                .collect(),
            sleepers: CachePadded::new(AtomicUsize::new(0)),
            waking: CachePadded::new(AtomicIsize::new(0)),
        }
    }

    fn len(&self) -> usize {
        self.states.len()
    }

    /// Asks one worker to help with published work (see the module docs).
    ///
    /// `from` is the requesting worker (`None` from outside the pool); `start`
    /// is where the scan for a sleeper begins, so that requests spread over
    /// the workers.
    ///
    /// The caller must have published its work before calling. If nobody
    /// else would ever run that work (it went to the injector), the caller
    /// must also issue a `SeqCst` fence between publishing and requesting:
    /// it pairs with the one in [`try_park`](Self::try_park), so that either
    /// the parker sees the work or we see it parked. Work on a worker's own
    /// deque needs no fence: its owner is awake and will run it, so a
    /// request for help with it is only a hint.
    ///
    /// Split in three so that the common outcomes cost two loads at every
    /// call site, whatever the compiler decides about the rest: `inject`
    /// calls this for each job pushed from outside the pool, and when this
    /// whole function was one body, whether it was inlined there changed
    /// with unrelated code elsewhere in the crate (`push_remote` ran 1.2×
    /// slower in a build that called it out of line).
    #[inline(always)]
    pub(crate) fn request(&self, from: Option<usize>, start: usize) -> Request {
        if self.waking.load(SeqCst) > 0 {
            return Request::Coalesced;
        }
        if self.sleepers.load(SeqCst) > 0 {
            return self.wake_sleeper(from, start);
        }
        match from {
            // No sleeper to wake, and remote requests do not mark busy peers.
            None => Request::Nobody,
            Some(from) => self.mark_busy_peer(from, start),
        }
    }

    /// [`request`](Self::request) when someone sleeps: wake the first parked
    /// worker from `start` on (not `from`), or fall back as if nobody slept.
    #[inline(never)]
    fn wake_sleeper(&self, from: Option<usize>, start: usize) -> Request {
        let n = self.len();
        for k in 0..n {
            let i = (start + k) % n;
            if Some(i) == from {
                continue;
            }
            if let Some(r) = self.notify_parked(i) {
                return r;
            }
        }
        match from {
            None => Request::Nobody,
            Some(from) => self.mark_busy_peer(from, start),
        }
    }

    /// [`request`](Self::request) from worker `from` with no sleeper to
    /// wake: its local work may still be handed to a busy peer, which will
    /// come for it once its own deque is drained.
    fn mark_busy_peer(&self, from: usize, start: usize) -> Request {
        let n = self.len();
        if n < 2 {
            return Request::Nobody;
        }
        let mut i = start % n;
        if i == from {
            i = (i + 1) % n;
        }
        let state = &self.states[i];
        let mut s = state.load(SeqCst);
        loop {
            if s & NOTIFIED != 0 {
                return Request::Coalesced;
            }
            if s == PARKED | IN_POLL {
                match self.notify_parked(i) {
                    Some(r) => return r,
                    None => {
                        s = state.load(SeqCst);
                        continue;
                    }
                }
            }
            match state.compare_exchange(s, s | NOTIFIED, SeqCst, SeqCst) {
                Ok(_) => {
                    if s == PARKED {
                        // Busy in another source of its context: no
                        // longer a plain sleeper.
                        self.sleepers.fetch_sub(1, SeqCst);
                    }
                    return Request::Marked(i);
                }
                Err(actual) => s = actual,
            }
        }
    }

    /// Tries `PARKED|IN_POLL → PARKED|IN_POLL|NOTIFIED` on worker `i`.
    /// `None` if it was not plainly asleep in its poll (then nothing
    /// changed): awake, woken already for its inbox, or parked but busy in
    /// another source of its context (P10).
    fn notify_parked(&self, i: usize) -> Option<Request> {
        let state = &self.states[i];
        let s = state.load(SeqCst);
        if s == PARKED | IN_POLL | NOTIFIED {
            return Some(Request::Coalesced);
        }
        if s != PARKED | IN_POLL {
            return None;
        }
        match state.compare_exchange(
            PARKED | IN_POLL,
            PARKED | IN_POLL | NOTIFIED,
            SeqCst,
            SeqCst,
        ) {
            Ok(_) => {
                // Raised only now that a worker really holds the request
                // (see the module docs: a failed CAS must leave no trace).
                self.waking.fetch_add(1, SeqCst);
                self.sleepers.fetch_sub(1, SeqCst);
                Some(Request::Wake(i))
            }
            Err(actual) => {
                if actual == PARKED | IN_POLL | NOTIFIED {
                    Some(Request::Coalesced)
                } else {
                    None
                }
            }
        }
    }

    /// Worker `i` found no work: announce that it parks. Returns `false` if it
    /// holds a request instead; it must then [`wake_up`](Self::wake_up) and
    /// search again.
    ///
    /// After `true`, the caller must re-check every queue (after a `SeqCst`
    /// fence) and call [`wake_up`](Self::wake_up) if it finds work.
    pub(crate) fn try_park(&self, i: usize) -> bool {
        self.sleepers.fetch_add(1, SeqCst);
        if self.states[i]
            .compare_exchange(0, PARKED, SeqCst, SeqCst)
            .is_ok()
        {
            fence(SeqCst);
            true
        } else {
            self.sleepers.fetch_sub(1, SeqCst);
            false
        }
    }

    /// Worker `i` is about to run: it leaves the parked state and consumes a
    /// pending request, if any. A directed wake-up (P10) is not a request.
    pub(crate) fn wake_up(&self, i: usize) -> Woke {
        let state = &self.states[i];
        // Cheap exit for the common case of an awake worker with no request.
        if state.load(SeqCst) == 0 {
            return Woke { received: false };
        }
        let prev = state.swap(0, SeqCst);
        if prev & !IN_POLL == PARKED {
            self.sleepers.fetch_sub(1, SeqCst);
        } else if prev == PARKED | IN_POLL | NOTIFIED {
            // The one state a request's `waking` increment stands for (a
            // worker out of its poll lowered it in `leave_poll`).
            self.waking.fetch_sub(1, SeqCst);
        }
        // Woken or marked otherwise: its notifier lowered `sleepers`.
        Woke {
            received: prev & NOTIFIED != 0,
        }
    }

    /// Work that only worker `i` may run (its pinned inbox) was published:
    /// if `i` is plainly parked it is marked `DIRECTED`, and if it sleeps
    /// in its poll the caller must wake its context ([`Directed::Wake`]).
    /// This is not a request for help: it raises no `waking`, so it absorbs
    /// nobody else's (P10). A worker already woken, or awake, needs
    /// nothing: it looks at its inbox before it parks, and the caller's
    /// `SeqCst` fence after publishing pairs with the one in
    /// [`try_park`](Self::try_park) and [`enter_poll`](Self::enter_poll).
    pub(crate) fn notify(&self, i: usize) -> Directed {
        let state = &self.states[i];
        let s = state.load(SeqCst);
        if s & !IN_POLL != PARKED {
            return Directed::No;
        }
        // A failed CAS means the worker left its park, entered or left its
        // poll, or was woken by someone else after our publish: it will
        // re-check its inbox before it sleeps.
        if state
            .compare_exchange(s, s | DIRECTED, SeqCst, SeqCst)
            .is_err()
        {
            return Directed::No;
        }
        self.sleepers.fetch_sub(1, SeqCst);
        if s & IN_POLL != 0 {
            Directed::Wake
        } else {
            Directed::Busy
        }
    }

    /// Worker `i`'s thread is about to block in its context's poll (the
    /// poll function, with a timeout that is not zero): see [`EnterPoll`].
    /// A parked worker becomes `PARKED|IN_POLL` and must then re-check
    /// every queue: the fence after the mark pairs with a publisher's, as
    /// in [`try_park`](Self::try_park).
    pub(crate) fn enter_poll(&self, i: usize) -> EnterPoll {
        match self.states[i].compare_exchange(PARKED, PARKED | IN_POLL, SeqCst, SeqCst) {
            Ok(_) => {
                fence(SeqCst);
                EnterPoll::Sleep
            }
            Err(s) if s & PARKED != 0 => EnterPoll::Woken,
            Err(_) => EnterPoll::Awake,
        }
    }

    /// Worker `i`'s poll returned (after [`EnterPoll::Sleep`] and no
    /// re-check that found work): it is out of its poll, and until its own
    /// source runs, its context may dispatch other sources for as long as
    /// they take. A request no longer takes it for a sleeper, nor for one
    /// on its way: one it holds stops counting in `waking` (see the module
    /// docs). Returns `true` if it holds a wake-up (a request or a directed
    /// one): its source is ready.
    pub(crate) fn leave_poll(&self, i: usize) -> bool {
        let prev = self.states[i].fetch_and(!IN_POLL, SeqCst);
        debug_assert!(prev & (PARKED | IN_POLL) == PARKED | IN_POLL);
        if prev == PARKED | IN_POLL | NOTIFIED {
            self.waking.fetch_sub(1, SeqCst);
        }
        prev & (NOTIFIED | DIRECTED) != 0
    }

    /// True unless worker `i` is plainly parked (in its poll or out of
    /// it): its source should dispatch.
    #[inline]
    pub(crate) fn should_run(&self, i: usize) -> bool {
        self.states[i].load(SeqCst) & !IN_POLL != PARKED
    }

    /// True if worker `i` is parked holding a wake-up it has not acted on
    /// (a request, or a directed one): see the module docs. For the stall
    /// monitor, which reports one that stays so (B5).
    pub(crate) fn holds_wake_up(&self, i: usize) -> bool {
        let s = self.states[i].load(SeqCst);
        s & PARKED != 0 && s & (NOTIFIED | DIRECTED) != 0
    }

    /// True if every worker sleeps in its poll and holds no wake-up: the
    /// pool has nothing to run (for a test clock's auto-advance). A
    /// snapshot, read word by word.
    pub(crate) fn all_asleep(&self) -> bool {
        self.states
            .iter()
            .all(|s| s.load(SeqCst) == PARKED | IN_POLL)
    }

    /// True if worker `i` is parked (with or without a request).
    #[inline]
    pub(crate) fn is_parked(&self, i: usize) -> bool {
        self.states[i].load(SeqCst) & PARKED != 0
    }
}

#[cfg(all(test, not(gdex_loom)))]
mod tests {
    use super::*;

    /// Worker `i` parks and sleeps in its poll, as an idle worker does.
    fn sleep(s: &Parking, i: usize) {
        assert!(s.try_park(i));
        assert_eq!(s.enter_poll(i), EnterPoll::Sleep);
    }

    /// P6: a deque asks for help when it first holds more than the next
    /// job, and again each time it doubles, not on every push.
    #[test]
    fn a_deque_asks_for_help_when_it_doubles() {
        let asks: Vec<usize> = (0..=17).filter(|&n| wants_help(n)).collect();
        assert_eq!(asks, [2, 4, 8, 16]);
    }

    /// P6: pushes that leave a deque at a length it asked at ask again
    /// only every `REASK_EVERY`th time; a new power of two asks at once,
    /// and a push that found the deque empty starts over.
    #[test]
    fn a_deque_at_the_same_length_asks_every_64th_push() {
        let (asked, repeats) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
        let ask = |len| push_asks(len, &asked, &repeats);
        let asks: Vec<usize> = (0..200).filter(|_| ask(2)).collect();
        assert_eq!(asks, [0, 64, 128, 192]);
        assert!(!ask(3));
        assert!(ask(4), "a new power of two asks at once");
        assert!(ask(2), "so does one shorter than the last");
        assert!(!ask(1), "one job asks for no help");
        assert!(ask(2), "a deque found empty asks again when it grows");
        assert!(!ask(2));
    }

    #[test]
    fn remote_request_wakes_one_sleeper_then_coalesces() {
        let s = Parking::new(3);
        for i in 0..3 {
            sleep(&s, i);
        }
        assert_eq!(s.request(None, 1), Request::Wake(1));
        // Worker 1 has not woken yet: a second request costs nothing.
        assert_eq!(s.request(None, 2), Request::Coalesced);
        assert_eq!(s.wake_up(1), Woke { received: true });
        // Now the next request wakes another sleeper, not all of them.
        assert_eq!(s.request(None, 0), Request::Wake(0));
        assert!(s.is_parked(2));
    }

    #[test]
    fn local_request_marks_a_busy_peer_once() {
        let s = Parking::new(2);
        assert_eq!(s.request(Some(0), 1), Request::Marked(1));
        assert_eq!(s.request(Some(0), 1), Request::Coalesced);
        assert_eq!(s.request(None, 1), Request::Nobody);
        // The busy peer drains its deque, then may not park while it holds
        // the request: it consumes it and searches.
        assert!(!s.try_park(1));
        assert_eq!(s.wake_up(1), Woke { received: true });
        // A busy worker's request was never counted as "on its way".
        assert_eq!(s.waking.load(SeqCst), 0);
        sleep(&s, 1);
        assert!(!s.should_run(1));
        assert_eq!(s.request(Some(0), 1), Request::Wake(1));
        assert!(s.should_run(1));
    }

    /// A request scans past awake workers to the parked one: an awake
    /// worker is not "on its way" and must not absorb the request.
    #[test]
    fn a_request_skips_awake_workers_to_wake_a_sleeper() {
        let s = Parking::new(3);
        sleep(&s, 2);
        assert_eq!(s.request(None, 0), Request::Wake(2));
        let s = Parking::new(3);
        sleep(&s, 1);
        assert_eq!(s.request(Some(2), 0), Request::Wake(1));
        assert_eq!(
            s.notify(0),
            Directed::No,
            "an awake worker needs no wake-up"
        );
        assert!(!s.is_parked(0));
    }

    /// With nobody asleep, local work is offered to the busy peer at
    /// `start`, or the next one if `start` is the requester itself; a
    /// remote request or a lone worker has nobody to mark (P6).
    #[test]
    fn local_requests_mark_the_peer_at_start_skipping_the_requester() {
        let ask = |from, start| Parking::new(3).request(Some(from), start);
        assert_eq!(ask(0, 2), Request::Marked(2));
        assert_eq!(ask(2, 2), Request::Marked(0), "the requester is skipped");
        assert_eq!(ask(0, 4), Request::Marked(1), "start wraps");
        let s = Parking::new(3);
        assert_eq!(s.request(Some(0), 2), Request::Marked(2));
        assert_eq!(s.request(Some(1), 2), Request::Coalesced, "2 holds one");
        assert_eq!(s.request(None, 1), Request::Nobody);
        let lone = Parking::new(1);
        assert_eq!(lone.request(Some(0), 1), Request::Nobody);
        assert!(lone.try_park(0), "a lone worker holds no request");
    }

    #[test]
    fn a_directed_notify_wakes_only_a_parked_worker() {
        let s = Parking::new(2);
        assert_eq!(
            s.notify(1),
            Directed::No,
            "an awake worker needs no wake-up"
        );
        assert!(!s.is_parked(1) && s.should_run(1));
        sleep(&s, 1);
        assert!(s.is_parked(1) && !s.should_run(1));
        assert_eq!(s.notify(1), Directed::Wake);
        assert!(s.is_parked(1) && s.should_run(1), "on its way");
        assert!(s.holds_wake_up(1));
        assert_eq!(s.notify(1), Directed::No, "a second notify coalesces");
        assert!(s.leave_poll(1), "its poll returns with the wake-up");
        assert_eq!(s.wake_up(1), Woke { received: false }, "not a request");
        assert_eq!(s.waking.load(SeqCst), 0);
        assert_eq!(s.sleepers.load(SeqCst), 0);
    }

    /// P10: a directed wake-up is not "a sleeper on its way": a request
    /// right behind it wakes another sleeper instead of coalescing.
    #[test]
    fn a_directed_wake_up_absorbs_no_request() {
        let s = Parking::new(3);
        for i in 0..3 {
            sleep(&s, i);
        }
        assert_eq!(s.notify(0), Directed::Wake);
        assert_eq!(s.waking.load(SeqCst), 0);
        // Scanning from the directed worker itself, remote and local.
        assert_eq!(s.request(None, 0), Request::Wake(1));
        assert_eq!(s.request(None, 0), Request::Coalesced, "1 is on its way");
        assert_eq!(s.wake_up(1), Woke { received: true });
        assert_eq!(s.request(Some(1), 0), Request::Wake(2));
        assert_eq!(s.wake_up(2), Woke { received: true });
        // Now only awake workers and the directed one: a remote request has
        // nobody to ask, a local one marks the directed worker as it marks a
        // busy peer.
        assert_eq!(s.request(None, 0), Request::Nobody);
        assert_eq!(s.request(Some(1), 0), Request::Marked(0));
        assert_eq!(s.wake_up(0), Woke { received: true }, "marked while woken");
        assert_eq!(s.waking.load(SeqCst), 0);
        assert_eq!(s.sleepers.load(SeqCst), 0);
        // A worker woken by a request first gets no directed wake-up on top.
        sleep(&s, 0);
        assert_eq!(s.request(None, 0), Request::Wake(0));
        assert_eq!(s.notify(0), Directed::No, "already on its way");
        assert_eq!(s.wake_up(0), Woke { received: true });
        assert_eq!(s.waking.load(SeqCst), 0);
    }

    /// P10: a parked worker whose thread is out of its poll, busy in
    /// another source of its context, is no sleeper: a request wakes one in
    /// its poll instead, and the next request does not coalesce with the
    /// busy one. It needs no wake-up: before its poll blocks it re-checks
    /// the queues (or finds the mark a busy peer or a directed push left).
    #[test]
    fn a_worker_busy_in_another_source_is_no_sleeper() {
        let s = Parking::new(3);
        for i in 0..3 {
            sleep(&s, i);
        }
        // Worker 1's poll returns for another source of its context.
        assert!(!s.leave_poll(1), "no wake-up held");
        assert!(s.is_parked(1) && !s.should_run(1), "still parked");
        assert_eq!(s.request(None, 1), Request::Wake(2), "1 is skipped");
        assert_eq!(s.request(None, 1), Request::Coalesced, "2 is on its way");
        assert!(s.leave_poll(2), "2's poll returns with its request");
        assert_eq!(
            s.waking.load(SeqCst),
            0,
            "and it no longer counts as on its way"
        );
        assert_eq!(s.request(None, 1), Request::Wake(0));
        assert!(s.leave_poll(0));
        assert_eq!(s.wake_up(0), Woke { received: true });
        assert_eq!(s.wake_up(2), Woke { received: true });
        // Nobody in a poll: a remote request asks nobody; a local one marks
        // the busy worker as it marks any busy peer.
        assert_eq!(s.request(None, 1), Request::Nobody);
        assert_eq!(s.request(Some(0), 1), Request::Marked(1));
        assert!(s.holds_wake_up(1) && s.should_run(1));
        assert_eq!(s.enter_poll(1), EnterPoll::Woken, "it must not sleep");
        assert_eq!(s.wake_up(1), Woke { received: true });
        assert_eq!(s.sleepers.load(SeqCst), 0);
        assert_eq!(s.waking.load(SeqCst), 0);
        // A directed push to a busy worker marks it, with no wake-up.
        sleep(&s, 1);
        assert!(!s.leave_poll(1));
        assert_eq!(s.notify(1), Directed::Busy);
        assert!(s.holds_wake_up(1) && s.should_run(1));
        assert_eq!(s.enter_poll(1), EnterPoll::Woken);
        assert_eq!(s.wake_up(1), Woke { received: false });
        assert_eq!(s.sleepers.load(SeqCst), 0);
        // A worker back in its poll is a sleeper again; an awake one is not
        // told to sleep.
        sleep(&s, 1);
        assert!(!s.leave_poll(1));
        assert_eq!(s.enter_poll(1), EnterPoll::Sleep);
        assert_eq!(s.request(None, 0), Request::Wake(1));
        assert_eq!(s.enter_poll(0), EnterPoll::Awake);
        assert!(s.leave_poll(1));
        assert_eq!(s.wake_up(1), Woke { received: true });
        assert_eq!(s.sleepers.load(SeqCst), 0);
        assert_eq!(s.waking.load(SeqCst), 0);
    }

    #[test]
    fn self_unpark_is_not_a_received_request() {
        let s = Parking::new(2);
        assert!(s.try_park(0));
        assert_eq!(s.wake_up(0), Woke { received: false });
        assert_eq!(s.sleepers.load(SeqCst), 0);
        assert_eq!(s.waking.load(SeqCst), 0);
    }
}
