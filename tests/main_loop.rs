//! The gtk-rs book's main-loop scenarios, the gdex way, in a real window:
//! `examples/main_loop` under Xvfb in self-test mode. It computes on the
//! pool while its spinner turns, makes a blocking call, streams from the
//! pool to a label, and makes a GIO request from a window that it closes
//! mid-request. This test runs the request's server (the example's own
//! `server.rs`), and checks from the server's side that the connection was
//! closed by the cancellation (X2), while the app still ran.

use crate::common;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use common::{example_exe, watchdog, Xvfb};

#[path = "../examples/main_loop/server.rs"]
mod server;

#[test]
fn the_main_loop_scenarios_work_in_a_real_window() {
    watchdog("the_main_loop_scenarios_work_in_a_real_window", 300, || {
        let app = example_exe("main_loop");
        let target = app.parent().unwrap().parent().unwrap().to_owned();
        let screenshot: PathBuf = target.join("main_loop.png");
        let _ = std::fs::remove_file(&screenshot);

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let events = Arc::new(Mutex::new(Vec::<String>::new()));
        let log = events.clone();
        std::thread::spawn(move || {
            server::serve(listener, move |event| {
                log.lock().unwrap().push(event.to_owned())
            })
        });

        let xvfb = Xvfb::start();
        let out = xvfb
            .gtk_command(&app)
            .env("GDEX_MAIN_LOOP_SERVER", &address)
            .env("GDEX_MAIN_LOOP_SELFTEST", &screenshot)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stdout.contains("SELFTEST OK"),
            "the app failed ({:?}):\n{stdout}\n{stderr}",
            out.status
        );
        // The server saw the slow request arrive and its connection closed
        // (not answered), and said so to the app's STATUS request while
        // the app still waited for that answer: the cancellation closed
        // it, not the app's exit. (The server logs "SLOW closed" before it
        // publishes the state that STATUS waits for.)
        let events = events.lock().unwrap().clone();
        assert_eq!(events, ["SLOW", "SLOW closed", "STATUS closed"], "{stdout}");
        let png = std::fs::read(&screenshot).expect("the screenshot");
        assert!(
            png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 1000,
            "not a PNG"
        );
        println!("{stdout}screenshot: {}", screenshot.display());
    });
}
