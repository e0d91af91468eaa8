//! loom models of the pool's wake-up protocol (P6, P7, S9, X7) with real
//! queues: every interleaving of a few threads that push, run, steal, park
//! and shut down the way `PoolShared` and `worker::Core` do, with the
//! injector, each worker's deque and each worker's pinned inbox as queues
//! (`Mutex<VecDeque>`) and each worker's `GMainContext` as a sticky wake-up
//! flag that its poll blocks on.
//!
//! ```sh
//! .ci/loom   # cargo rustc --profile bench --lib --features loom -- --cfg gdex_loom
//! ```
//!
//! # What each model asserts
//!
//! - **Exactly once**: every pushed item is run exactly once (in the
//!   shutdown model: run or dropped, exactly once; nothing stays queued).
//! - **No lost wake-up**: the workers run until every item has run, and a
//!   worker that parks blocks in its context's poll until someone wakes it.
//!   If an item could stay queued while every worker that could run it
//!   sleeps, every thread ends up blocked, and loom fails the model with
//!   "deadlock" (that is the check: no timeout, no sleep).
//!
//! # The models, their bound and their time
//!
//! Every model runs with a preemption bound of 4, the two P10 models with
//! 3, which already shows what they check (`GDEX_LOOM_BOUND` overrides
//! it). Times are one run of each model alone, `--release`, on
//! the project's 2-core machine; `cargo test` runs them two at a time.
//!
//! | model | threads | bound | time |
//! |-------|---------|-------|------|
//! | [`loom_two_injectors_one_worker`](models::loom_two_injectors_one_worker) | 2 injectors, 1 worker re-checking before it sleeps | 4 | 5 s |
//! | [`loom_one_injector_two_workers`](models::loom_one_injector_two_workers) | 1 injector, 2 parked workers | 4 | 24 s |
//! | [`loom_self_unparking_worker`](models::loom_self_unparking_worker) | 2 injectors, 1 parked worker whose timer fires | 4 | 8 s |
//! | [`loom_shutdown_racing_a_push`](models::loom_shutdown_racing_a_push) | 1 caller that awaits its job then shuts down, 1 pinned pusher, 1 worker | 4 | 56 s |
//! | [`loom_shutdown_racing_an_inject`](models::loom_shutdown_racing_an_inject) | as above, the pusher injects | 4 | 100 s |
//! | [`loom_directed_notify_racing_a_park`](models::loom_directed_notify_racing_a_park) | 1 pinned pusher, 1 injector, 1 worker re-checking before it sleeps | 4 | 3 s |
//! | [`loom_directed_push_racing_an_inject`](models::loom_directed_push_racing_an_inject) | 1 pinned pusher whose job waits for the injected one, 1 injector, 2 parked workers | 3 | 4 s |
//! | [`loom_directed_push_and_inject_run_side_by_side`](models::loom_directed_push_and_inject_run_side_by_side) | as above, the two jobs must run at once | 3 | 9 s |
//! | [`loom_shutdown_racing_a_mailed_push`](models::loom_shutdown_racing_a_mailed_push) | as `loom_shutdown_racing_a_push`, the push a fiber's resumption (mailbox or inbox) | 4 | 89 s |
//! | [`loom_two_resumptions_racing_a_park`](models::loom_two_resumptions_racing_a_park) | 2 threads sending a fiber's resumption each, 1 worker re-checking before it sleeps | 4 | 9 s |
//! | [`loom_a_worker_busy_in_another_source_is_no_sleeper`](models::loom_a_worker_busy_in_another_source_is_no_sleeper) | 1 injector, 2 parked workers, one held by another source of its context until the injected job runs | 4 | 1 s |
//! | [`loom_a_worker_back_from_another_source_loses_no_wake_up`](models::loom_a_worker_back_from_another_source_loses_no_wake_up) | 2 injectors, 1 parked worker whose poll returns for another source | 4 | 8 s |
//!
//! Bound 3 is not enough to show the lost wake-up in most of them: the
//! requester's notify, the worker's un-park, the requester's failed CAS and
//! the worker's re-park must alternate, which takes 3 preemptions after the
//! first switch.
//!
//! # What they catch
//!
//! `.ci/loom-mutations` applies each mutation of `parking.rs` it lists (a
//! lost wake-up brought back, requests that coalesce with nobody on the
//! way, a woken worker that keeps `waking` raised, a parked worker taken
//! for a notified one, a lone sleeper unseen, a notified worker whose
//! source is not ready, P10 reverted) to a scratch copy and runs every
//! model in a process of its own; each mutation must fail at least one
//! model. [`loom_directed_push_racing_an_inject`](models::loom_directed_push_racing_an_inject) checks the worker's side
//! of P10 instead (`Core::searching`, mirrored in this file's `Core`):
//! with it removed, the model deadlocks. One run takes about 11 minutes on
//! the project's machine.
//!
//! The counter models this file replaced reduced the queues to one count
//! and never had two injectors race a worker that un-parks itself; they
//! passed with the lost wake-up in place.

use std::cell::Cell;
use std::collections::VecDeque;

use loom::sync::atomic::{
    fence, AtomicBool, AtomicUsize,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;

use super::parking::{push_asks, Directed, EnterPoll, Parking, Request, Woke};

type Item = usize;

mod models;

/// Runs `f` for every interleaving with at most `bound` preemptions
/// (`GDEX_LOOM_BOUND` overrides it, to explore further by hand).
fn model<F: Fn() + Sync + Send + 'static>(bound: usize, f: F) {
    let bound = std::env::var("GDEX_LOOM_BOUND")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(bound);
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(bound);
    builder.check(f);
}

/// A queue shared between threads: crossbeam's `Injector`, a worker's
/// `Stealer` side, or a pinned inbox.
#[derive(Default)]
struct Queue(Mutex<VecDeque<Item>>);

impl Queue {
    fn push(&self, item: Item) {
        self.0.lock().unwrap().push_back(item);
    }

    fn pop(&self) -> Option<Item> {
        self.0.lock().unwrap().pop_front()
    }

    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn take_all(&self) -> Vec<Item> {
        self.0.lock().unwrap().drain(..).collect()
    }

    /// `steal_batch_and_pop`: one item to run and one more moved to `dest`.
    /// Like crossbeam's, the move is not atomic: for a moment the second
    /// item is in neither queue (a thief's request for help covers it).
    fn pop_batch(&self, dest: &Queue) -> Option<Item> {
        let (first, second) = {
            let mut q = self.0.lock().unwrap();
            (q.pop_front(), q.pop_front())
        };
        if let Some(second) = second {
            dest.push(second);
        }
        first
    }
}

/// A worker's `GMainContext`, as far as the protocol sees it: a wake-up is
/// sticky until a poll (or the check before a dispatch) consumes it.
#[derive(Default)]
struct Context {
    wakeup: Mutex<bool>,
    cv: Condvar,
}

impl Context {
    /// `g_main_context_wakeup`.
    fn wakeup(&self) {
        *self.wakeup.lock().unwrap() = true;
        self.cv.notify_all();
    }

    /// A blocking poll with no source ready and no timeout: returns once
    /// woken, consuming the wake-up.
    fn poll(&self) {
        let mut woken = self.wakeup.lock().unwrap();
        while !*woken {
            woken = self.cv.wait(woken).unwrap();
        }
        *woken = false;
    }

    /// The iteration's check phase acknowledges a pending wake-up even when
    /// it dispatches without blocking.
    fn acknowledge(&self) {
        *self.wakeup.lock().unwrap() = false;
    }
}

struct Setup {
    workers: usize,
    /// Items in all; the workers stop once that many have run (0: they run
    /// until shutdown).
    total: usize,
    /// Where each worker's thread starts.
    start: Vec<Start>,
    /// Per worker, an item its timer queues at the first poll (a timer that
    /// fired wakes a task on the worker's own thread: `Core::push` outside
    /// a slice, which un-parks the worker itself).
    timers: Vec<Option<Item>>,
    /// An item whose run is announced to `wait_ran`.
    watched: Option<Item>,
    /// An item whose run blocks its worker until the watched item has run
    /// (a long poll that waits for another task).
    blocker: Option<Item>,
    /// Two items whose runs each block their worker until the other has
    /// started: they must run at the same time, on two workers.
    meet: Option<(Item, Item)>,
    /// Per worker: a source of its context that is not the pool's (a GLib
    /// callback, a task of a scheduler made for that context) fires at its
    /// first poll, and its callback holds the worker's thread until the
    /// watched item has run, if one is watched.
    foreign: Vec<bool>,
}

/// Where a worker's thread starts: any state the pool reaches.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Start {
    /// Awake with nothing queued, as a fresh worker is: it runs a slice,
    /// finds nothing and parks.
    Awake,
    /// Just announced its park (`try_park` returned `true`): it is about to
    /// re-check the queues, as a worker that ran dry is.
    Parking,
    /// Asleep in its context's poll, as an idle pool's worker is.
    Parked,
}

struct World {
    parking: Parking,
    start: Vec<Start>,
    injector: Queue,
    locals: Vec<Queue>,
    inboxes: Vec<Queue>,
    /// Each worker's mailbox (`Remote::mail`): an item + 1, or 0.
    mails: Vec<AtomicUsize>,
    exited: Vec<AtomicBool>,
    contexts: Vec<Context>,
    closed: AtomicBool,
    done: AtomicBool,
    total: usize,
    finished: AtomicUsize,
    runs: Vec<AtomicUsize>,
    drops: Vec<AtomicUsize>,
    timers: Vec<Option<Item>>,
    foreign: Vec<bool>,
    watched: Option<Item>,
    blocker: Option<Item>,
    meet: Option<(Item, Item)>,
    started: Mutex<Vec<bool>>,
    started_cv: Condvar,
    watched_ran: Mutex<bool>,
    watched_cv: Condvar,
    /// Set once a worker's thread is inside the other source's callback.
    in_foreign: Mutex<bool>,
    in_foreign_cv: Condvar,
}

/// Items are numbered below this in every model.
const ITEMS: usize = 6;

impl World {
    fn new(setup: Setup) -> Arc<World> {
        let n = setup.workers;
        let world = World {
            parking: Parking::new(n),
            start: setup.start.clone(),
            injector: Queue::default(),
            locals: (0..n).map(|_| Queue::default()).collect(),
            inboxes: (0..n).map(|_| Queue::default()).collect(),
            mails: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            exited: (0..n).map(|_| AtomicBool::new(false)).collect(),
            contexts: (0..n).map(|_| Context::default()).collect(),
            closed: AtomicBool::new(false),
            done: AtomicBool::new(false),
            total: setup.total,
            finished: AtomicUsize::new(0),
            runs: (0..ITEMS).map(|_| AtomicUsize::new(0)).collect(),
            drops: (0..ITEMS).map(|_| AtomicUsize::new(0)).collect(),
            timers: setup.timers,
            foreign: setup.foreign,
            watched: setup.watched,
            blocker: setup.blocker,
            meet: setup.meet,
            started: Mutex::new(vec![false; ITEMS]),
            started_cv: Condvar::new(),
            watched_ran: Mutex::new(false),
            watched_cv: Condvar::new(),
            in_foreign: Mutex::new(false),
            in_foreign_cv: Condvar::new(),
        };
        for (i, start) in setup.start.iter().enumerate() {
            if *start != Start::Awake {
                assert!(world.parking.try_park(i));
            }
            if *start == Start::Parked {
                assert_eq!(world.parking.enter_poll(i), EnterPoll::Sleep);
            }
        }
        Arc::new(world)
    }

    fn workers(&self) -> usize {
        self.locals.len()
    }

    /// `PoolShared::inject`: push, fence, then either take the item back
    /// (the pool closed) or ask for help.
    fn inject(&self, item: Item, start: usize) {
        self.injector.push(item);
        fence(SeqCst);
        if self.closed.load(SeqCst) {
            for item in self.injector.take_all() {
                self.dropped(item);
            }
            return;
        }
        if let Request::Wake(j) = self.parking.request(None, start) {
            self.contexts[j].wakeup();
        }
    }

    /// `PoolShared::push_inbox`: pinned work for worker `i`, with a directed
    /// wake-up, or taken back if `i` has exited.
    fn push_inbox(&self, i: usize, item: Item) {
        self.inboxes[i].push(item);
        fence(SeqCst);
        if self.exited[i].load(SeqCst) {
            for item in self.inboxes[i].take_all() {
                self.dropped(item);
            }
            return;
        }
        if self.parking.notify(i) == Directed::Wake {
            self.contexts[i].wakeup();
        }
    }

    /// `PoolShared::push_fiber`: a fiber's resumption for worker `i`, in its
    /// mailbox if that and the inbox are empty, else its inbox; a directed wake-up either
    /// way, or taken back if `i` has exited.
    fn push_fiber(&self, i: usize, item: Item) {
        let mail = &self.mails[i];
        // The orderings are `push_fiber`'s and `take_mail`'s own.
        if mail.load(Relaxed) != 0
            || !self.inboxes[i].is_empty()
            || mail
                .compare_exchange(0, item + 1, Release, Relaxed)
                .is_err()
        {
            return self.push_inbox(i, item);
        }
        fence(SeqCst);
        if self.exited[i].load(SeqCst) {
            if let Some(item) = self.take_mail(i) {
                self.dropped(item);
            }
        } else if self.parking.notify(i) == Directed::Wake {
            self.contexts[i].wakeup();
        }
    }

    /// `Remote::take_mail`.
    fn take_mail(&self, i: usize) -> Option<Item> {
        if self.mails[i].load(Relaxed) == 0 {
            return None;
        }
        self.mails[i].swap(0, Acquire).checked_sub(1)
    }

    /// `PoolShared::shutdown` (steps 1 and 4; the caller joins the workers
    /// between the two).
    fn close(&self) {
        if self.closed.swap(true, SeqCst) {
            return;
        }
        for context in &self.contexts {
            context.wakeup();
        }
    }

    fn drain_injector(&self) {
        for item in self.injector.take_all() {
            self.dropped(item);
        }
    }

    fn ran(&self, item: Item) {
        if Some(item) == self.blocker {
            self.wait_ran();
        }
        if let Some((a, b)) = self.meet {
            if item == a || item == b {
                let other = if item == a { b } else { a };
                let mut started = self.started.lock().unwrap();
                started[item] = true;
                self.started_cv.notify_all();
                while !started[other] {
                    started = self.started_cv.wait(started).unwrap();
                }
            }
        }
        self.runs[item].fetch_add(1, SeqCst);
        if Some(item) == self.watched {
            *self.watched_ran.lock().unwrap() = true;
            self.watched_cv.notify_all();
        }
        if self.finished.fetch_add(1, SeqCst) + 1 == self.total {
            self.done.store(true, SeqCst);
            for context in &self.contexts {
                context.wakeup();
            }
        }
    }

    fn dropped(&self, item: Item) {
        self.drops[item].fetch_add(1, SeqCst);
    }

    /// Blocks until the watched item has run (a caller awaiting its task).
    fn wait_ran(&self) {
        let mut ran = self.watched_ran.lock().unwrap();
        while !*ran {
            ran = self.watched_cv.wait(ran).unwrap();
        }
    }

    /// `worker::run`: the worker's loop of context iterations, with its
    /// source ready when `Parking::should_run` says so, and its poll
    /// function's marks around a poll that blocks (P10), then its exit.
    fn run_worker(&self, i: usize) {
        let core = Core {
            world: self,
            i,
            woken: Cell::new(None),
            searching: Cell::new(false),
            in_slice: Cell::new(false),
            asked_at: Cell::new(0),
            asked_repeats: Cell::new(0),
            timer: Cell::new(self.timers[i]),
            foreign: Cell::new(self.foreign[i]),
            in_poll: Cell::new(self.start[i] == Start::Parked),
        };
        if self.start[i] == Start::Parking && core.sees_work() {
            // The tail of `run_slice`: work arrived while we announced the
            // park.
            core.woke(self.parking.wake_up(i));
        }
        loop {
            if self.closed.load(SeqCst) || self.done.load(SeqCst) {
                break;
            }
            // prepare: is our source ready? (A worker that starts asleep
            // in its poll leaves it first.)
            if self.parking.should_run(i) || self.closed.load(SeqCst) {
                core.after_poll();
                self.contexts[i].acknowledge();
                core.run_slice();
                continue;
            }
            // poll: a due timer returns at once (GLib's timeout is 0: no
            // mark), else sleep until woken, or until the other source
            // fires.
            if let Some(item) = core.timer.take() {
                core.after_poll();
                self.contexts[i].acknowledge();
                core.push(item);
                continue;
            }
            if !core.in_poll.get() && !core.before_poll() {
                self.contexts[i].acknowledge();
                continue;
            }
            let foreign = core.foreign.take();
            if !foreign {
                self.contexts[i].poll();
            }
            core.after_poll();
            if foreign {
                // The poll returned for the other source; ours, if ready,
                // dispatches first (it was attached first, at the same
                // priority), then the callback holds the thread.
                if self.parking.should_run(i) {
                    self.contexts[i].acknowledge();
                    core.run_slice();
                }
                *self.in_foreign.lock().unwrap() = true;
                self.in_foreign_cv.notify_all();
                if self.watched.is_some() {
                    self.wait_ran();
                }
            }
        }
        if self.closed.load(SeqCst) {
            core.exit();
        }
    }

    /// Blocks until a worker's thread is inside the other source's callback
    /// (as a caller that waits for a context scheduler's task to start).
    fn wait_in_foreign(&self) {
        let mut entered = self.in_foreign.lock().unwrap();
        while !*entered {
            entered = self.in_foreign_cv.wait(entered).unwrap();
        }
    }

    /// Every item was run exactly once, and none was dropped.
    fn check_all_ran(&self, items: usize) {
        for item in 0..items {
            assert_eq!(self.runs[item].load(SeqCst), 1, "item {item} runs");
            assert_eq!(self.drops[item].load(SeqCst), 0, "item {item} drops");
        }
    }

    /// Every item was run or dropped, exactly once, and no queue holds one.
    fn check_resolved(&self, items: usize) {
        for item in 0..items {
            let (runs, drops) = (self.runs[item].load(SeqCst), self.drops[item].load(SeqCst));
            assert_eq!(runs + drops, 1, "item {item}: {runs} runs, {drops} drops");
        }
        assert!(self.injector.is_empty());
        for i in 0..self.workers() {
            assert!(self.locals[i].is_empty() && self.inboxes[i].is_empty());
            assert_eq!(self.mails[i].load(SeqCst), 0);
        }
    }
}

fn spawn_worker(world: &Arc<World>, i: usize) -> thread::JoinHandle<()> {
    let world = world.clone();
    thread::spawn(move || world.run_worker(i))
}

/// What only the worker's thread touches (`worker::Core`).
struct Core<'w> {
    world: &'w World,
    i: usize,
    woken: Cell<Option<Item>>,
    /// `Core::searching`: a consumed request sends the next search to the
    /// shared queues before the inbox (P10).
    searching: Cell<bool>,
    in_slice: Cell<bool>,
    /// `Core::asked_at` and `Core::asked_repeats`.
    asked_at: Cell<usize>,
    asked_repeats: Cell<u32>,
    timer: Cell<Option<Item>>,
    foreign: Cell<bool>,
    /// Marked asleep in its poll (`Core::before_poll`).
    in_poll: Cell<bool>,
}

impl Core<'_> {
    fn parking(&self) -> &Parking {
        &self.world.parking
    }

    fn local(&self) -> &Queue {
        &self.world.locals[self.i]
    }

    /// `Core::push`: outside a slice the first item takes the `woken` slot
    /// and the worker un-parks itself; inside one it goes to the deque, and a
    /// deque that doubled asks for help (`parking::push_asks`).
    fn push(&self, item: Item) {
        if !self.in_slice.get() && self.woken.get().is_none() {
            self.woken.set(Some(item));
            self.unpark_self();
            return;
        }
        self.local().push(item);
        if self.parking().is_parked(self.i) {
            self.unpark_self();
        } else if push_asks(self.local().len(), &self.asked_at, &self.asked_repeats) {
            self.request_help();
        }
    }

    /// `Core::before_poll`: mark the poll, re-check; `false` if the poll
    /// must not block.
    fn before_poll(&self) -> bool {
        match self.parking().enter_poll(self.i) {
            EnterPoll::Sleep => {
                if self.sees_work() {
                    self.woke(self.parking().wake_up(self.i));
                    return false;
                }
                self.in_poll.set(true);
                true
            }
            EnterPoll::Woken | EnterPoll::Awake => false,
        }
    }

    /// `Core::after_poll`.
    fn after_poll(&self) {
        if self.in_poll.replace(false) {
            let _ = self.parking().leave_poll(self.i);
        }
    }

    fn unpark_self(&self) {
        if self.parking().is_parked(self.i) {
            self.woke(self.parking().wake_up(self.i));
        }
    }

    /// `Core::woke`.
    fn woke(&self, woke: Woke) {
        if woke.received {
            self.searching.set(true);
        }
    }

    fn request_help(&self) {
        let n = self.world.workers();
        if let Request::Wake(j) = self.parking().request(Some(self.i), (self.i + 1) % n) {
            self.world.contexts[j].wakeup();
        }
    }

    /// `Core::run_slice` without its bounds (the models never reach them)
    /// and without its spin (which only finds work sooner).
    fn run_slice(&self) {
        if self.world.closed.load(SeqCst) {
            return;
        }
        if self.parking().is_parked(self.i) {
            self.woke(self.parking().wake_up(self.i));
        }
        self.in_slice.set(true);
        loop {
            if self.world.closed.load(SeqCst) {
                break;
            }
            if let Some(item) = self.find_job() {
                self.world.ran(item);
                continue;
            }
            if !self.parking().try_park(self.i) {
                self.woke(self.parking().wake_up(self.i));
                continue;
            }
            if self.sees_work() {
                self.woke(self.parking().wake_up(self.i));
                continue;
            }
            break;
        }
        self.in_slice.set(false);
    }

    /// `Core::find_job`: the woken slot, pinned work, the deque, the
    /// injector, then peers; a batch that leaves backlog asks for help. A
    /// worker that consumed a request looks at the shared queues first.
    fn find_job(&self) -> Option<Item> {
        if let Some(item) = self.woken.take() {
            return Some(item);
        }
        if self.searching.replace(false) {
            if let Some(item) = self.find_shared() {
                return Some(item);
            }
        }
        if let Some(item) = self.world.take_mail(self.i) {
            return Some(item);
        }
        if let Some(item) = self.world.inboxes[self.i].pop() {
            return Some(item);
        }
        self.find_shared()
    }

    /// The deque, the injector, then peers.
    fn find_shared(&self) -> Option<Item> {
        if let Some(item) = self.local().pop() {
            return Some(item);
        }
        if let Some(item) = self.world.injector.pop_batch(self.local()) {
            if !self.world.injector.is_empty() || !self.local().is_empty() {
                self.request_help();
            }
            return Some(item);
        }
        let n = self.world.workers();
        for k in 1..n {
            let victim = &self.world.locals[(self.i + k) % n];
            if let Some(item) = victim.pop_batch(self.local()) {
                if !victim.is_empty() || !self.local().is_empty() {
                    self.request_help();
                }
                return Some(item);
            }
        }
        None
    }

    /// `Core::sees_work`: the re-check after announcing a park.
    fn sees_work(&self) -> bool {
        let w = self.world;
        self.woken.get().is_some()
            || !w.inboxes[self.i].is_empty()
            || w.mails[self.i].load(Relaxed) != 0
            || !w.injector.is_empty()
            || w.locals.iter().any(|q| !q.is_empty())
    }

    /// `worker::run` after its loop (shutdown steps 3 and 5): drop what is
    /// queued here, then flag the exit and drain the inbox once more.
    fn exit(&self) {
        let w = self.world;
        let mut left: Vec<Item> = self.local().take_all();
        left.extend(self.woken.take());
        left.extend(w.inboxes[self.i].take_all());
        left.extend(w.take_mail(self.i));
        w.exited[self.i].store(true, SeqCst);
        fence(SeqCst);
        left.extend(w.inboxes[self.i].take_all());
        left.extend(w.take_mail(self.i));
        for item in left {
            w.dropped(item);
        }
    }
}
