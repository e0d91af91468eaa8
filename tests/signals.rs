//! Future toolkit (unnumbered in DESIGN.md), the unix-signal futures:
//! `unix_signals` keeps a signal handled for its whole life, so a reload
//! loop survives signals that come while no `recv` waits; a dropped
//! `unix_signal` gives the signal its default action back, as documented;
//! and a signal future waiting while nobody iterates the default main
//! context is reported once.
//!
//! Tests that may be killed by a signal, or that need a fresh process (the
//! report's delay, a default main context nobody iterates), run their body
//! in a child process: this same binary, re-executed on one `#[ignore]`d
//! test with `GDEX_TEST_CHILD=1`.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use common::{is_child, on_main, pump, run_child, run_child_passing, wait_until, watchdog};
use futures::FutureExt;

fn raise(signum: i32) {
    // SAFETY: raise(3) has no preconditions; the tests only raise signals
    // that GLib handles at that point (or, on purpose, one it no longer
    // does, in a child process).
    assert_eq!(unsafe { libc::raise(signum) }, 0);
}

fn polled_once<F: std::future::Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    future.poll_unpin(&mut Context::from_waker(futures::task::noop_waker_ref()))
}

/// A reload loop: one `unix_signals` stream, each signal raised twice in a
/// row with no `recv` future alive in between. The process survives, and
/// no arrival is lost.
#[test]
fn a_unix_signals_stream_keeps_the_signal_handled_while_no_recv_waits() {
    run_child_passing("child_reload_loop", &[], 60, "survived every signal");
}

#[test]
#[ignore = "run by a_unix_signals_stream_keeps_the_signal_handled_while_no_recv_waits"]
fn child_reload_loop() {
    if !is_child() {
        return;
    }
    watchdog("child_reload_loop", 30, || {
        on_main(|| {
            for signum in [libc::SIGHUP, libc::SIGUSR1] {
                let mut signals = gdex::unix_signals(signum);
                assert_eq!(signals.signal(), signum);
                for _ in 0..3 {
                    // Two in a row, nobody waiting: the default action
                    // (ending the process) must not run.
                    raise(signum);
                    raise(signum);
                    gdex::block_on(signals.recv());
                }
                // As a Stream too.
                raise(signum);
                let next = gdex::block_on(futures::StreamExt::next(&mut signals));
                assert_eq!(next, Some(()));
            }
        });
        println!("survived every signal");
    });
}

/// The one-shot form, as documented: once its future is gone and nothing
/// else watches the signal, the signal's default action is back (here
/// SIGUSR1 ends the process). `unix_signals` is the form that stays.
#[test]
fn a_dropped_unix_signal_gives_the_signal_its_default_action_back() {
    let (status, out) = run_child("child_one_shot_then_again", &[], 60);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.and_then(|s| s.signal()),
        Some(libc::SIGUSR1),
        "the child was not ended by SIGUSR1 ({status:?}):\n{out}"
    );
    assert!(out.contains("first one handled"), "{out}");
}

#[test]
#[ignore = "run by a_dropped_unix_signal_gives_the_signal_its_default_action_back"]
fn child_one_shot_then_again() {
    if !is_child() {
        return;
    }
    watchdog("child_one_shot_then_again", 30, || {
        on_main(|| {
            let signal = gdex::unix_signal(libc::SIGUSR1);
            raise(libc::SIGUSR1);
            gdex::block_on(signal);
        });
        println!("first one handled");
        raise(libc::SIGUSR1);
        println!("still alive");
    });
}

/// A signal that arrives while nobody waits is kept for the next `recv`;
/// it is taken once, not again; several in a row give at least one.
#[test]
fn a_signal_that_arrives_while_nobody_waits_is_kept_for_the_next_recv() {
    watchdog(
        "a_signal_that_arrives_while_nobody_waits_is_kept_for_the_next_recv",
        30,
        || {
            on_main(|| {
                let context = glib::MainContext::default();
                let mut signals = gdex::unix_signals(libc::SIGUSR2);
                raise(libc::SIGUSR2);
                gdex::block_on(signals.recv());
                // Taken: nothing more is pending.
                pump(&context);
                assert!(polled_once(&mut signals.recv()).is_pending());
                // A dropped recv loses nothing.
                let mut dropped = signals.recv();
                assert!(polled_once(&mut dropped).is_pending());
                drop(dropped);
                raise(libc::SIGUSR2);
                raise(libc::SIGUSR2);
                gdex::block_on(signals.recv());
            });
        },
    );
}

/// Counts the `gdex` warnings that say a signal future waits on a main
/// context nobody iterates.
fn signal_warnings() -> Arc<AtomicUsize> {
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    glib::log_set_handler(
        Some("gdex"),
        glib::LogLevels::LEVEL_WARNING,
        false,
        false,
        move |_, _, message| {
            println!("[gdex warning] {message}");
            if message.contains("signal") && message.contains("default main context") {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        },
    );
    count
}

/// Nobody iterates the default main context while a signal future waits
/// (so Ctrl-C would do nothing): one warning says so, not one per check;
/// once the context runs again and then stops, the next wait is reported
/// again, for the stream form too.
#[test]
fn a_signal_future_nobody_can_deliver_to_is_reported_once() {
    run_child_passing(
        "child_nobody_iterates",
        &[("GDEX_MAIN_IDLE_WARN_MS", "50")],
        60,
        "reported once each time",
    );
}

#[test]
#[ignore = "run by a_signal_future_nobody_can_deliver_to_is_reported_once"]
fn child_nobody_iterates() {
    if !is_child() {
        return;
    }
    watchdog("child_nobody_iterates", 30, || {
        let warnings = signal_warnings();
        // The one-shot future waits; nobody iterates the main context.
        let mut signal = gdex::unix_signal(libc::SIGUSR2);
        assert!(polled_once(&mut signal).is_pending());
        wait_until(|| warnings.load(Ordering::SeqCst) >= 1);
        // Twenty more checks' worth: still one report. Deliberate: a
        // window in which no second report may come.
        std::thread::sleep(Duration::from_millis(1000));
        assert_eq!(warnings.load(Ordering::SeqCst), 1);
        // Somebody iterates it now: the signal arrives.
        raise(libc::SIGUSR2);
        on_main(|| gdex::block_on(&mut signal));
        drop(signal);

        // A new wait with nobody iterating again: reported again, once.
        let mut signals = gdex::unix_signals(libc::SIGUSR2);
        let mut recv = signals.recv();
        assert!(polled_once(&mut recv).is_pending());
        wait_until(|| warnings.load(Ordering::SeqCst) >= 2);
        // Deliberate: as above, no second report in this episode.
        std::thread::sleep(Duration::from_millis(1000));
        assert_eq!(warnings.load(Ordering::SeqCst), 2);
        drop(recv);
        drop(signals);
        println!("reported once each time");
    });
}
