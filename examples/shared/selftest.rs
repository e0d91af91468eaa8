//! What the GTK examples' self-tests share (`gtk_demo`, `search`,
//! `main_loop`): waiting on the main loop for a condition, a check that
//! says what it saw, and a screenshot of a window. Included with
//! `#[path]`; not an example of its own (cargo makes examples of
//! `examples/*.rs` and `examples/*/main.rs` only).

use std::time::{Duration, Instant};

use gtk::prelude::*;
use gtk4 as gtk;

/// Waits (on the main loop) until `done()` holds, or fails after 30 s.
#[allow(dead_code)] // not every example waits
pub async fn until(what: &str, mut done: impl FnMut() -> bool) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}"));
        }
        gdex::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// `Ok` if `ok`, else the error `what` describes.
#[allow(dead_code)] // not every example checks this way
pub fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}

/// Renders the window with its own renderer and saves it as a PNG.
pub fn save_screenshot(
    window: &gtk::ApplicationWindow,
    path: &std::path::Path,
) -> Result<(), String> {
    let (width, height) = (window.width() as f64, window.height() as f64);
    let paintable = gtk::WidgetPaintable::new(Some(window));
    let snapshot = gtk::Snapshot::new();
    paintable.snapshot(&snapshot, width, height);
    let node = snapshot.to_node().ok_or("the window drew nothing")?;
    let renderer = window.renderer().ok_or("the window has no renderer")?;
    renderer
        .render_texture(&node, None)
        .save_to_png(path)
        .map_err(|e| format!("saving {}: {e}", path.display()))
}
