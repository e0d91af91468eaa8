//! The local server of the `main_loop` example, also started by its test
//! (`tests/main_loop.rs`). It speaks lines: `HELLO` gets a greeting,
//! `SLOW` a greeting after 5 s unless its client closes the connection
//! first, and `STATUS` says, waiting up to 5 s for an open `SLOW` to end,
//! how the last `SLOW` ended.

use std::io::{BufRead, BufReader, Write};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Serves the protocol (see the module docs) on `listener`, telling
/// `event` what happens (`HELLO`, `SLOW`, `SLOW closed`, `SLOW answered`,
/// and `STATUS <state>`: what a `STATUS` answered).
pub fn serve(listener: std::net::TcpListener, event: impl Fn(&str) + Send + Sync + 'static) {
    // The state of the last SLOW connection: open, closed by its client,
    // or answered.
    let slow = Arc::new((Mutex::new("none"), Condvar::new()));
    let event = Arc::new(event);
    for stream in listener.incoming().flatten() {
        let (slow, event) = (slow.clone(), event.clone());
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut writer = stream;
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                return;
            }
            let set = |state| {
                *slow.0.lock().unwrap() = state;
                slow.1.notify_all();
            };
            match line.trim() {
                "HELLO" => {
                    event("HELLO");
                    let _ = writeln!(writer, "hello from the server");
                }
                "SLOW" => {
                    event("SLOW");
                    set("open");
                    // Answer in 5 s, unless the client closes first (a read
                    // of 0 bytes).
                    writer
                        .set_read_timeout(Some(Duration::from_secs(5)))
                        .unwrap();
                    let mut rest = String::new();
                    match reader.read_line(&mut rest) {
                        Ok(0) => {
                            event("SLOW closed");
                            set("closed");
                        }
                        _ => {
                            event("SLOW answered");
                            set("answered");
                            let _ = writeln!(writer, "hello, slowly");
                        }
                    }
                }
                "STATUS" => {
                    let (state, changed) = &*slow;
                    let guard = state.lock().unwrap();
                    let (guard, _) = changed
                        .wait_timeout_while(guard, Duration::from_secs(5), |s| *s == "open")
                        .unwrap();
                    // What the answer says, while the client still waits
                    // for it (so not closed by its exit).
                    event(&format!("STATUS {}", *guard));
                    let _ = match *guard {
                        "closed" => {
                            writeln!(writer, "the request's connection was closed by the app")
                        }
                        "answered" => writeln!(writer, "the request was answered"),
                        "open" => writeln!(writer, "the request's connection is still open"),
                        _ => writeln!(writer, "no request yet"),
                    };
                }
                other => {
                    let _ = writeln!(writer, "unknown request {other:?}");
                }
            }
        });
    }
}
