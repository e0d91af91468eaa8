//! X5: panics that have no waiter go to the app's panic handler; the
//! default logs them with g_critical and keeps running. A task's output
//! whose destructor panics is contained (S6), and a report names the
//! worker the panic happened on. (The tests take turns, `common::serial`:
//! the handler is process-wide.)

use crate::common;

use std::sync::{Arc, Mutex};

use common::{wait_until, watchdog};

struct PanicsOnDrop;
impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        panic!("a destructor that panics");
    }
}

#[test]
fn unobserved_panics_reach_the_panic_handler() {
    let _one = common::serial();
    watchdog("unobserved_panics_reach_the_panic_handler", 60, || {
        let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
        let s = pool.scheduler();

        // The default: a g_critical in the gdex domain, and the pool goes on.
        let criticals = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = criticals.clone();
        let log_handler = glib::log_set_handler(
            Some("gdex"),
            glib::LogLevels::LEVEL_CRITICAL,
            false,
            false,
            move |_, _, message| sink.lock().unwrap().push(message.to_owned()),
        );
        s.push(|| panic!("default policy"));
        wait_until(|| !criticals.lock().unwrap().is_empty());
        assert_eq!(
            criticals.lock().unwrap()[0],
            "a work item panicked: default policy"
        );

        let events = Arc::new(Mutex::new(Vec::<gdex::PanicEvent>::new()));
        let sink = events.clone();
        gdex::set_panic_handler(move |event| {
            if event.message == "handler, panic yourself" {
                panic!("the handler's own panic");
            }
            sink.lock().unwrap().push(event.clone())
        });

        // An awaited panic goes to its waiter, not to the handler.
        let awaited = s.spawn(async { panic!("awaited") });
        assert!(matches!(gdex::block_on(awaited), Err(gdex::Error::Panicked(m)) if m == "awaited"));

        // A detached task's panic, a work item's, a cancelled task's
        // destructor's.
        s.spawn(async { panic!("detached task") }).detach();
        s.push(|| panic!("work item"));
        let (started_tx, started) = std::sync::mpsc::channel();
        let doomed = s.spawn(async move {
            let _bomb = PanicsOnDrop;
            started_tx.send(()).unwrap();
            std::future::pending::<()>().await
        });
        started.recv().unwrap();
        assert_eq!(gdex::block_on(doomed.cancel()), None);
        wait_until(|| events.lock().unwrap().len() == 3);
        let mut seen: Vec<(gdex::PanicSource, String)> = events
            .lock()
            .unwrap()
            .iter()
            .map(|e| (e.source, e.message.clone()))
            .collect();
        seen.sort_by(|a, b| a.1.cmp(&b.1));
        assert_eq!(
            seen,
            [
                (
                    gdex::PanicSource::Drop,
                    "a destructor that panics".to_owned()
                ),
                (gdex::PanicSource::Task, "detached task".to_owned()),
                (gdex::PanicSource::WorkItem, "work item".to_owned()),
            ]
        );
        for event in events.lock().unwrap().iter() {
            let thread = event.thread.as_deref().unwrap_or_default();
            assert!(thread.starts_with("gdex-worker-"), "{thread}");
        }

        // X5: a task that panicked before its handle was detached (or
        // dropped) is reported as the worker's panic, not as the panic of
        // the thread that detaches. (On cc53133 the event named the
        // detaching thread.)
        events.lock().unwrap().clear();
        let early = s.spawn(async { panic!("finished before detach") });
        wait_until(|| early.is_finished());
        early.detach();
        let early = s.spawn(async { panic!("finished before drop") });
        wait_until(|| early.is_finished());
        drop(early);
        wait_until(|| events.lock().unwrap().len() == 2);
        for event in events.lock().unwrap().iter() {
            assert_eq!(event.source, gdex::PanicSource::Task);
            let thread = event.thread.as_deref().unwrap_or_default();
            assert!(
                thread.starts_with("gdex-worker-"),
                "{:?} reported on {thread}",
                event.message
            );
        }

        // S6: an output whose destructor panics, with nobody to take it
        // (detached), is contained and reported (X5): on cc53133 async-task
        // aborted the process ("panic in a destructor during cleanup").
        // Same for a finished task whose handle is dropped.
        events.lock().unwrap().clear();
        s.spawn(async { PanicsOnDrop }).detach();
        wait_until(|| events.lock().unwrap().len() == 1);
        let finished = s.spawn(async { PanicsOnDrop });
        wait_until(|| finished.is_finished());
        drop(finished);
        wait_until(|| events.lock().unwrap().len() == 2);
        for event in events.lock().unwrap().iter() {
            assert_eq!(event.source, gdex::PanicSource::Output);
            assert_eq!(event.message, "a destructor that panics");
        }
        // An output that is taken is the waiter's to drop, as any value.
        let taken = gdex::block_on(s.spawn(async { 7u8 })).unwrap();
        assert_eq!(taken, 7);
        assert_eq!(gdex::block_on(s.spawn(async { 5 })).unwrap(), 5);
        events.lock().unwrap().clear();

        // A handler that panics is logged, and nothing else breaks.
        criticals.lock().unwrap().clear();
        s.push(|| panic!("handler, panic yourself"));
        wait_until(|| !criticals.lock().unwrap().is_empty());
        let logged = criticals.lock().unwrap()[0].clone();
        assert!(
            logged.contains("the gdex panic handler panicked")
                && logged.contains("handler, panic yourself"),
            "{logged}"
        );
        assert_eq!(gdex::block_on(s.spawn(async { 5 })).unwrap(), 5);

        gdex::reset_panic_handler();
        s.push(|| panic!("default again"));
        wait_until(|| criticals.lock().unwrap().len() == 2);
        assert_eq!(events.lock().unwrap().len(), 0);
        // The workers are gone before the log handler is: none can still be
        // inside it when GLib frees it (a 1 ms sleep after the removal stood
        // here).
        pool.shutdown();
        glib::log_remove_handler(Some("gdex"), log_handler);
    });
}

/// S6, X5: a task's output whose destructor panics (detached, or its handle
/// dropped after it finished) goes to the panic handler; a task's panic
/// nobody reads names the worker it panicked on, not the dropper's thread.
#[test]
fn held_output_drop_panics_are_contained_and_panic_reports_name_the_worker() {
    let _one = common::serial();
    common::watchdog("output_drop_panics", 30, || {
        let events = Arc::new(Mutex::new(Vec::<gdex::PanicEvent>::new()));
        let e = events.clone();
        gdex::set_panic_handler(move |ev| e.lock().unwrap().push(ev.clone()));
        struct Bomb;
        impl Drop for Bomb {
            fn drop(&mut self) {
                panic!("output bomb");
            }
        }
        let pool = common::quiet_pool(1);
        let s = pool.scheduler();
        s.spawn(async { Bomb }).detach();
        let t = s.spawn(async { Bomb });
        common::wait_until(|| t.is_finished());
        drop(t);
        let p = s.spawn(async { panic!("unread") });
        common::wait_until(|| p.is_finished());
        drop(p);
        common::wait_until(|| events.lock().unwrap().len() >= 3);
        pool.shutdown();
        gdex::reset_panic_handler();
        let events = events.lock().unwrap().clone();
        let bombs = events
            .iter()
            .filter(|e| e.source == gdex::PanicSource::Output && e.message == "output bomb")
            .count();
        assert_eq!(bombs, 2, "{events:?}");
        let unread = events
            .iter()
            .find(|e| e.message == "unread")
            .expect("the unread panic was reported");
        assert_eq!(unread.source, gdex::PanicSource::Task);
        assert_eq!(
            unread.thread.as_deref(),
            Some("gdex-worker-0"),
            "{unread:?}"
        );
    });
}

/// X5: a caught panic whose payload's own destructor panics is contained
/// where it was caught, never unwound into async-task's or GLib's frames:
/// the panic handler's own panic (with such a payload), a work item's and
/// a detached task's are reported, and the process and the pool run on.
#[test]
fn panic_payloads_whose_drop_panics_are_contained() {
    let _one = common::serial();
    watchdog("panic_payloads_whose_drop_panics_are_contained", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let s = pool.scheduler();
        let messages = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = messages.clone();
        gdex::set_panic_handler(move |event| {
            sink.lock().unwrap().push(event.message.clone());
            if event.message == "the handler panics with a bomb" {
                std::panic::panic_any(PanicsOnDrop);
            }
        });
        s.push(|| panic!("the handler panics with a bomb"));
        s.push(|| std::panic::panic_any(PanicsOnDrop));
        s.spawn(async { std::panic::panic_any(PanicsOnDrop) })
            .detach();
        wait_until(|| messages.lock().unwrap().len() == 3);
        assert_eq!(gdex::block_on(s.spawn(async { 7 })).unwrap(), 7);
        gdex::reset_panic_handler();
    });
}

/// Replacing the panic handler drops the one it replaces with the
/// handler's lock released: what that closure captured may report a panic
/// as it goes (here the handle of a task that panicked, dropped unread),
/// which reaches the new handler instead of deadlocking (X5).
#[test]
fn a_replaced_panic_handler_is_dropped_with_the_handlers_lock_released() {
    let _one = common::serial();
    watchdog("replaced-panic-handler", 60, || {
        let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
        let task = pool.scheduler().spawn(async { panic!("read by nobody") });
        wait_until(|| task.is_finished());
        gdex::set_panic_handler(move |_| {
            let _ = &task;
        });
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = seen.clone();
        gdex::set_panic_handler(move |event| sink.lock().unwrap().push(event.message.clone()));
        assert_eq!(*seen.lock().unwrap(), ["read by nobody"]);
        gdex::reset_panic_handler();
    });
}
