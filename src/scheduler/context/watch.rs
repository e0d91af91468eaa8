//! The main scheduler's idle watch (X4).
//!
//! **Work nobody runs (X4).** Main-scheduler work that has
//! waited [`idle_warn_delay`] (3 s; `GDEX_MAIN_IDLE_WARN_MS`) because no
//! thread iterates the default main context is reported with one
//! `g_warning`, once per episode (until the source runs again). The check is
//! a thread, `gdex-main-watch`, started on the first main-scheduler push,
//! one for the schedulers of every priority (P12) at or above the default;
//! it sleeps for good while nothing waits, and the first push of a new
//! episode wakes it.

use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread;
use std::time::Duration;

use super::ContextShared;
use crate::util::Unpoisoned;

/// How long main-scheduler work may wait for a thread to iterate the
/// default main context before it is reported: `GDEX_MAIN_IDLE_WARN_MS`
/// milliseconds (`0` turns the report off), 3 s by default.
pub(crate) fn idle_warn_delay() -> Option<Duration> {
    static DELAY: OnceLock<Option<Duration>> = OnceLock::new();
    *DELAY.get_or_init(|| {
        let ms = crate::util::env_setting(
            "GDEX_MAIN_IDLE_WARN_MS",
            "a number of milliseconds (0 turns the report off)",
            || "using 3000".to_owned(),
            |text| text.parse::<u64>().ok(),
        )
        .unwrap_or(3000);
        (ms > 0).then(|| Duration::from_millis(ms))
    })
}

impl super::Pending {
    /// How long the main source has been waiting, in clock ticks: 0 while
    /// another thread's newer mark is later than this thread's clock
    /// (`since` is loaded before the clock is read, and the difference
    /// saturates: it never wraps to about 2^64).
    pub(super) fn waited(&self) -> u64 {
        crate::util::clock::elapsed(self.since.load(Ordering::Relaxed))
    }
}

/// The one idle watch of the main context's schedulers (X4): the default
/// and those at other priorities (P12) that it watches, each registered on
/// its first push. One thread however many priorities a program uses: the
/// schedulers live as long as the process, and so would a thread each.
struct Watch {
    thread: thread::Thread,
    /// True while the thread sleeps for good.
    sleeping: AtomicBool,
    /// The schedulers watched, in the order they registered (they only
    /// come: the main context's schedulers are never dropped).
    watched: Mutex<Vec<Weak<ContextShared>>>,
}

/// The idle watch, its thread started on the first call; `None` if the
/// report is turned off.
fn watch() -> Option<&'static Watch> {
    static WATCH: OnceLock<Option<Watch>> = OnceLock::new();
    WATCH
        .get_or_init(|| {
            let delay = idle_warn_delay()?;
            // The thread's first `watch()` waits for this initialisation.
            let handle = thread::Builder::new()
                .name("gdex-main-watch".into())
                .spawn(move || watch_main(delay))
                .ok()?;
            Some(Watch {
                thread: handle.thread().clone(),
                sleeping: AtomicBool::new(false),
                watched: Mutex::new(Vec::new()),
            })
        })
        .as_ref()
}

impl ContextShared {
    /// Wakes the idle watch thread if it sleeps for good, starting it on
    /// the first call and registering this scheduler with it on its own.
    pub(super) fn wake_watch(&self) {
        let Some(watch) = watch() else { return };
        if !self.watched.load(Ordering::Relaxed) && !self.watched.swap(true, Ordering::AcqRel) {
            watch.watched.lock().unpoisoned().push(self.me.clone());
        }
        // Pairs with the fence in `watch_main`: either it sees this wait,
        // or we see it sleeping.
        fence(Ordering::SeqCst);
        if watch.sleeping.load(Ordering::Relaxed) && watch.sleeping.swap(false, Ordering::AcqRel) {
            watch.thread.unpark();
        }
    }
}

/// The schedulers the watch knows now, by the order they registered.
fn watched(watch: &Watch) -> Vec<Option<Arc<ContextShared>>> {
    // Upgraded under the lock, dropped after it (dropping the last
    // reference to a scheduler takes other locks).
    let list: Vec<Weak<ContextShared>> = watch.watched.lock().unpoisoned().clone();
    list.iter().map(Weak::upgrade).collect()
}

/// The idle watch (X4): reports main-context work that has waited `delay`
/// for a thread to iterate the default main context, once per episode of
/// the schedulers waiting when it reports (one warning for the loop,
/// however many priorities wait). Sleeps for good while nothing waits.
fn watch_main(delay: Duration) {
    let Some(watch) = watch() else { return };
    let delay_ticks = crate::util::clock::ticks(delay);
    // The episode last reported, by each scheduler's place in the list.
    let mut reported: Vec<Option<u64>> = Vec::new();
    let waiting = |main: &ContextShared, reported: Option<u64>| {
        let pending = &main.pending;
        pending.notified.load(Ordering::Acquire)
            && reported != Some(pending.dispatches.load(Ordering::Acquire))
    };
    let any_waiting = |schedulers: &[Option<Arc<ContextShared>>], reported: &[Option<u64>]| {
        schedulers.iter().enumerate().any(|(i, main)| {
            main.as_ref()
                .is_some_and(|main| waiting(main, reported.get(i).copied().flatten()))
        })
    };
    loop {
        let schedulers = watched(watch);
        reported.resize(schedulers.len(), None);
        if !any_waiting(&schedulers, &reported) {
            drop(schedulers);
            watch.sleeping.store(true, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            let schedulers = watched(watch);
            if !any_waiting(&schedulers, &reported) {
                drop(schedulers);
                thread::park();
            }
            continue;
        }
        // The longest wait, and how long until the first wait not yet due
        // is due.
        let mut longest = None;
        let mut left = delay_ticks;
        let mut episodes = Vec::new();
        for (i, main) in schedulers.iter().enumerate() {
            let Some(main) = main else { continue };
            if !waiting(main, reported[i]) {
                continue;
            }
            let episode = main.pending.dispatches.load(Ordering::Acquire);
            episodes.push((i, episode));
            let waited = main.pending.waited();
            if waited >= delay_ticks {
                longest = longest.max(Some(waited));
            } else {
                left = left.min(delay_ticks - waited);
            }
        }
        drop(schedulers);
        let Some(waited) = longest else {
            let left = delay.mul_f64(left as f64 / delay_ticks as f64);
            thread::sleep(left.max(Duration::from_millis(1)));
            continue;
        };
        // Every wait now in progress is this report's: the loop is what
        // nobody runs.
        for (i, episode) in episodes {
            reported[i] = Some(episode);
        }
        // What was measured, not the delay: a wait is reported once it
        // reached the delay, but the watch may have slept past it.
        let waited_ms = delay
            .mul_f64(waited as f64 / delay_ticks as f64)
            .as_millis();
        glib::g_warning!(
            "gdex",
            "main-scheduler work has been waiting for {} ms and no thread has run it: nobody \
             iterates the default main context (or its loop is blocked). Run the main loop \
             (a GMainLoop, or a GTK application) on the main thread, or wait with \
             gdex::block_on, which iterates the default main context there. (Reported once \
             per wait; GDEX_MAIN_IDLE_WARN_MS sets the delay, 0 turns this off.)",
            waited_ms
        );
    }
}
