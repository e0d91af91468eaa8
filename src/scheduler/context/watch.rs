//! The main scheduler's idle watch (X4).
//!
//! **Work nobody runs (X4).** Main-scheduler work that has
//! waited [`idle_warn_delay`] (3 s; `GDEX_MAIN_IDLE_WARN_MS`) because no
//! thread iterates the default main context is reported with one
//! `g_warning`, once per episode (until the source runs again). The check is
//! a thread, `gdex-main-watch`, started on the first main-scheduler push; it
//! sleeps for good while nothing waits, and the first push of a new episode
//! wakes it.

use std::sync::atomic::{fence, Ordering};
use std::sync::{OnceLock, Weak};
use std::thread;
use std::time::Duration;

use super::ContextShared;

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

impl ContextShared {
    /// Wakes the idle watch thread if it sleeps for good, starting it on
    /// the first call.
    pub(super) fn wake_watch(&self) {
        let watch = self.watch.get_or_init(|| {
            let delay = idle_warn_delay()?;
            let shared = self.me.clone();
            thread::Builder::new()
                .name("gdex-main-watch".into())
                .spawn(move || watch_main(shared, delay))
                .ok()
                .map(|handle| handle.thread().clone())
        });
        if let Some(thread) = watch {
            // Pairs with the fence in `watch_main`: either it sees this wait,
            // or we see it sleeping.
            fence(Ordering::SeqCst);
            if self.watch_sleeping.load(Ordering::Relaxed)
                && self.watch_sleeping.swap(false, Ordering::AcqRel)
            {
                thread.unpark();
            }
        }
    }
}

/// The idle watch (X4): reports main-scheduler work that
/// has waited `delay` for a thread to iterate the default main context,
/// once per episode. Sleeps for good while there is nothing to watch.
fn watch_main(shared: Weak<ContextShared>, delay: Duration) {
    let delay_ticks = crate::util::clock::ticks(delay);
    let mut reported: Option<u64> = None;
    loop {
        let Some(main) = shared.upgrade() else { return };
        let pending = &main.pending;
        let waiting = |reported: Option<u64>| {
            pending.notified.load(Ordering::Acquire)
                && reported != Some(pending.dispatches.load(Ordering::Acquire))
        };
        if !waiting(reported) {
            main.watch_sleeping.store(true, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            if !waiting(reported) {
                drop(main);
                thread::park();
            }
            continue;
        }
        let episode = pending.dispatches.load(Ordering::Acquire);
        let waited = pending.waited();
        if waited < delay_ticks {
            let left = delay.mul_f64((delay_ticks - waited) as f64 / delay_ticks as f64);
            drop(main);
            thread::sleep(left.max(Duration::from_millis(1)));
            continue;
        }
        reported = Some(episode);
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
