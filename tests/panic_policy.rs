//! X5: panics that have no waiter go to the app's panic handler; the
//! default logs them with g_critical and keeps running. (One test function:
//! the handler is process-wide.)

mod common;

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
