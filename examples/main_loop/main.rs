//! The gtk-rs book's chapter "The Main Event Loop", the gdex way: one window
//! with a row per scenario of the chapter.
//!
//! - *Compute*: a long computation, split over the pool; the window keeps
//!   drawing (the spinner turns) and the result comes back to a label.
//! - *Blocking call*: a call that blocks runs on the blocking lane
//!   (`gdex::spawn_blocking`, B2), its result back on the main thread.
//! - *Stream*: pool work sends its progress through a `gdex::channel` to a
//!   label.
//! - *Ready loop*: a main task pushes items through a `gdex::channel` and
//!   drains them for a second, every send and receive ready at once, so it
//!   never waits; gdex's cooperative budget (P11) ends its poll every 128
//!   of them, and the window keeps drawing. The label shows the longest
//!   gap between frames meanwhile.
//! - *Request*: a window makes a request through GIO (`gio::SocketClient`)
//!   to a local server. The request is a task bound to that window
//!   (`gdex::spawn_local_bound`, X2): closing the window mid-request
//!   cancels it, and the connection closes. *Ask the server* then asks the
//!   server whether it saw the request's connection close.
//!
//! Run it with `cargo run --features gtk --example main_loop`. The server is
//! `GDEX_MAIN_LOOP_SERVER=<host:port>` (the test starts one), or else one
//! the app starts on a thread of its own. It speaks lines: `HELLO` gets a
//! greeting, `SLOW` a greeting after 5 s, and `STATUS` says (waiting up to
//! 5 s) whether the last `SLOW` connection was closed by its client.
//!
//! With `GDEX_MAIN_LOOP_SELFTEST=<file.png>` the app clicks through every
//! row with GTK's own API, checks what it shows, saves a screenshot of its
//! window to that file, prints `SELFTEST OK` and quits; a failed check
//! exits with status 1. `tests/main_loop.rs` runs it under Xvfb, with its own server
//! (this example's `server.rs`) that checks the same from its side.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use gtk::prelude::*;
use gtk4 as gtk;

#[path = "../shared/selftest.rs"]
mod selftest;
mod server;
use selftest::{check, save_screenshot, until};

/// The computation: primes below this, counted in chunks on the pool.
const PRIMES_BELOW: u64 = 1_000_000;
const CHUNKS: u64 = 8;
/// Messages the stream sends.
const STREAM_LEN: u32 = 20;
/// How long the ready loop runs, and the items it sends before it drains
/// them (the channel's capacity).
const READY_LOOP: Duration = Duration::from_secs(1);
const READY_BATCH: usize = 1024;

/// The window's widgets, all on the main thread.
struct Ui {
    window: gtk::ApplicationWindow,
    server: String,
    spinner_frames: Rc<Cell<u64>>,
    /// While the ready loop runs: when the last frame came, and the longest
    /// gap between frames so far.
    ready_frames: Rc<Cell<Option<(Instant, Duration)>>>,
    /// The ready loop's last longest gap between frames.
    ready_gap: Cell<Option<Duration>>,
    compute: Row,
    blocking: Row,
    stream: Row,
    ready: Row,
    request: Row,
    status: Row,
    /// The open request window, if any (weak: closing it must free it).
    request_window: glib::WeakRef<gtk::Window>,
    /// Updates the stream row received.
    stream_updates: Cell<u32>,
}

/// A button and the label it reports to.
struct Row {
    button: gtk::Button,
    label: gtk::Label,
}

fn main() -> glib::ExitCode {
    let app = gtk::Application::builder()
        .application_id("org.gdex.MainLoop")
        .flags(gtk::gio::ApplicationFlags::NON_UNIQUE)
        .build();
    app.connect_activate(build_ui);
    app.run_with_args(&[] as &[&str])
}

fn build_ui(app: &gtk::Application) {
    let server = std::env::var("GDEX_MAIN_LOOP_SERVER").unwrap_or_else(|_| start_server());
    let window = gtk::ApplicationWindow::builder()
        .application(app)
        .title("The main event loop, the gdex way")
        .default_width(560)
        .build();
    let column = gtk::Box::new(gtk::Orientation::Vertical, 10);
    pad(&column, 14);
    let spinner = gtk::Spinner::new();
    spinner.start();
    column.append(&spinner);
    let row = |button: &str, label: &str| {
        let line = gtk::Box::new(gtk::Orientation::Horizontal, 12);
        let row = Row {
            button: gtk::Button::with_label(button),
            label: gtk::Label::new(Some(label)),
        };
        row.button.set_size_request(150, -1);
        row.label.set_xalign(0.0);
        row.label.set_hexpand(true);
        row.label.set_wrap(true);
        line.append(&row.button);
        line.append(&row.label);
        column.append(&line);
        row
    };
    let ui = Rc::new(Ui {
        compute: row("Compute", "count the primes on the pool"),
        blocking: row("Blocking call", "list a directory on the blocking lane"),
        stream: row("Stream", "pool work reports through a channel"),
        ready: row(
            "Ready loop",
            "a main task loops over always-ready futures for a second",
        ),
        request: row("Request", &format!("ask {server} in a window of its own")),
        status: row("Ask the server", "did the request's connection close?"),
        window: window.clone(),
        server,
        spinner_frames: Rc::new(Cell::new(0)),
        ready_frames: Rc::new(Cell::new(None)),
        ready_gap: Cell::new(None),
        request_window: glib::WeakRef::new(),
        stream_updates: Cell::new(0),
    });
    window.set_child(Some(&column));
    let (frames, ready_frames) = (ui.spinner_frames.clone(), ui.ready_frames.clone());
    spinner.add_tick_callback(move |_, _| {
        frames.set(frames.get() + 1);
        if let Some((last, worst)) = ready_frames.get() {
            let now = Instant::now();
            ready_frames.set(Some((now, worst.max(now.saturating_duration_since(last)))));
        }
        glib::ControlFlow::Continue
    });

    let u = ui.clone();
    ui.compute.button.connect_clicked(move |_| compute(&u));
    let u = ui.clone();
    ui.blocking
        .button
        .connect_clicked(move |_| blocking_call(&u));
    let u = ui.clone();
    ui.stream.button.connect_clicked(move |_| stream(&u));
    let u = ui.clone();
    ui.ready.button.connect_clicked(move |_| ready_loop(&u));
    let u = ui.clone();
    ui.request
        .button
        .connect_clicked(move |_| open_request_window(&u));
    let u = ui.clone();
    ui.status.button.connect_clicked(move |_| ask_status(&u));
    window.present();

    if let Some(screenshot) = std::env::var_os("GDEX_MAIN_LOOP_SELFTEST") {
        let app = app.clone();
        gdex::spawn_local(async move {
            match self_test(&ui, std::path::Path::new(&screenshot)).await {
                Ok(figures) => println!("SELFTEST OK {figures}"),
                Err(e) => {
                    eprintln!("SELFTEST FAILED: {e}");
                    std::process::exit(1);
                }
            }
            app.quit();
        })
        .detach();
    }
}

/// The same margin on every side of `widget`.
fn pad(widget: &impl IsA<gtk::Widget>, margin: i32) {
    widget.set_margin_top(margin);
    widget.set_margin_bottom(margin);
    widget.set_margin_start(margin);
    widget.set_margin_end(margin);
}

/// *Compute*: the chunks run on the pool; this task, on the main thread,
/// only awaits them and shows the sum. The window draws meanwhile.
fn compute(ui: &Rc<Ui>) {
    ui.compute.button.set_sensitive(false);
    ui.compute.label.set_text("counting…");
    let ui = ui.clone();
    gdex::spawn_local_bound(&ui.window.clone(), async move {
        let started = Instant::now();
        let step = PRIMES_BELOW / CHUNKS;
        let chunks =
            (0..CHUNKS).map(|i| gdex::spawn(async move { count_primes(i * step, (i + 1) * step) }));
        let counts = gdex::all(chunks.collect::<Vec<_>>()).await;
        match counts {
            Ok(counts) => ui.compute.label.set_text(&format!(
                "{} primes below {PRIMES_BELOW} ({} ms on the pool)",
                counts.iter().sum::<u64>(),
                started.elapsed().as_millis()
            )),
            Err(e) => ui.compute.label.set_text(&format!("failed: {e}")),
        }
        ui.compute.button.set_sensitive(true);
    })
    .detach();
}

fn count_primes(from: u64, to: u64) -> u64 {
    (from.max(2)..to)
        .filter(|&n| (2..).take_while(|d| d * d <= n).all(|d| n % d != 0))
        .count() as u64
}

/// *Blocking call*: `read_dir` blocks, so it runs on the blocking lane;
/// the main thread awaits its result.
fn blocking_call(ui: &Rc<Ui>) {
    ui.blocking.label.set_text("listing…");
    let ui = ui.clone();
    gdex::spawn_local_bound(&ui.window.clone(), async move {
        let listed = gdex::spawn_blocking(|| {
            let thread = std::thread::current().name().unwrap_or("?").to_owned();
            std::fs::read_dir("/usr/share").map(|d| (d.count(), thread))
        })
        .await;
        let text = match listed {
            Ok(Ok((n, thread))) => format!("{n} entries in /usr/share (listed on {thread})"),
            Ok(Err(e)) => format!("read_dir failed: {e}"),
            Err(e) => format!("failed: {e}"),
        };
        ui.blocking.label.set_text(&text);
    })
    .detach();
}

/// *Stream*: a pool task sends its progress; a main task shows each item.
fn stream(ui: &Rc<Ui>) {
    ui.stream.button.set_sensitive(false);
    ui.stream_updates.set(0);
    let (tx, rx) = gdex::channel(4);
    gdex::spawn(async move {
        for i in 1..=STREAM_LEN {
            gdex::sleep(Duration::from_millis(15)).await;
            if tx.send(i).await.is_err() {
                return; // the window is gone
            }
        }
    })
    .detach();
    let ui = ui.clone();
    gdex::spawn_local_bound(&ui.window.clone(), async move {
        while let Ok(i) = rx.recv().await {
            ui.stream_updates.set(ui.stream_updates.get() + 1);
            ui.stream
                .label
                .set_text(&format!("received {i} / {STREAM_LEN}"));
        }
        ui.stream.label.set_text(&format!(
            "stream done: {} updates from the pool",
            ui.stream_updates.get()
        ));
        ui.stream.button.set_sensitive(true);
    })
    .detach();
}

/// *Ready loop*: a main task fills a channel and drains it, again and
/// again for [`READY_LOOP`]. Every `send` and `recv` is ready at once, so
/// the loop never waits: without gdex's cooperative budget (P11) its first
/// poll would last the whole second and the window would draw nothing.
/// With it, the task's poll ends after 128 of them and the main loop draws
/// its frames between polls (X3). The label shows the longest gap between
/// frames, from the loop's start to the first frame after its end.
fn ready_loop(ui: &Rc<Ui>) {
    ui.ready.button.set_sensitive(false);
    ui.ready.label.set_text("looping…");
    let ui = ui.clone();
    gdex::spawn_local_bound(&ui.window.clone(), async move {
        let (tx, rx) = gdex::channel(READY_BATCH);
        let started = Instant::now();
        ui.ready_frames.set(Some((started, Duration::ZERO)));
        let mut items = 0u64;
        while started.elapsed() < READY_LOOP {
            for i in 0..READY_BATCH {
                tx.send(i).await.expect("the receiver is here");
            }
            for _ in 0..READY_BATCH {
                rx.recv().await.expect("the sender is here");
            }
            items += READY_BATCH as u64;
        }
        let looped = started.elapsed();
        // The gap that the loop's end leaves open closes at the next frame.
        let drawn = ui.spinner_frames.get();
        while ui.spinner_frames.get() == drawn {
            gdex::sleep(Duration::from_millis(2)).await;
        }
        let gap = ui
            .ready_frames
            .take()
            .map_or(Duration::ZERO, |(_, gap)| gap);
        ui.ready_gap.set(Some(gap));
        ui.ready.label.set_text(&format!(
            "ready loop done: {items} items in {} ms; the longest gap between frames {} ms",
            looped.as_millis(),
            gap.as_millis()
        ));
        ui.ready.button.set_sensitive(true);
    })
    .detach();
}

/// *Request*: a window of its own makes a slow request; its task is bound
/// to that window, so closing the window cancels the request (X2) and
/// drops the GIO calls, which closes the connection. The main window
/// learns the outcome by awaiting the bound task.
fn open_request_window(ui: &Rc<Ui>) {
    let window = gtk::Window::builder()
        .title("Request")
        .transient_for(&ui.window)
        .default_width(320)
        .build();
    let label = gtk::Label::new(Some("connecting…"));
    pad(&label, 20);
    window.set_child(Some(&label));
    window.present();
    ui.request_window.set(Some(&window));
    ui.request
        .label
        .set_text("waiting for the server (close the window to cancel)");

    let server = ui.server.clone();
    let weak_label = label.downgrade();
    let request = gdex::spawn_local_bound(&window, async move {
        let said = |text: &str| {
            if let Some(label) = weak_label.upgrade() {
                label.set_text(text);
            }
        };
        let reply = ask(&server, "SLOW", || said("sent; the server takes 5 s")).await;
        if let Ok(reply) = &reply {
            said(reply);
        }
        reply
    });
    // The window holds no strong reference to itself: once closed, it is
    // disposed, and its task cancelled.
    drop(window);
    let ui = ui.clone();
    gdex::spawn_local(async move {
        let text = match request.await {
            Ok(Ok(reply)) => format!("the server replied: {reply}"),
            Ok(Err(e)) => format!("failed: {e}"),
            Err(gdex::Error::Cancelled) => "cancelled: its window was closed".to_owned(),
            Err(e) => format!("failed: {e}"),
        };
        ui.request.label.set_text(&text);
    })
    .detach();
}

/// *Ask the server* whether the slow request's connection was closed.
fn ask_status(ui: &Rc<Ui>) {
    ui.status.label.set_text("asking…");
    let ui = ui.clone();
    gdex::spawn_local_bound(&ui.window.clone(), async move {
        let text = match ask(&ui.server, "STATUS", || {}).await {
            Ok(reply) => reply,
            Err(e) => format!("failed: {e}"),
        };
        ui.status.label.set_text(&text);
    })
    .detach();
}

/// One request through GIO: connect, send `line`, call `sent`, read the
/// reply's line. Dropped, its GIO calls are cancelled and the connection
/// is closed.
async fn ask(server: &str, line: &str, sent: impl FnOnce()) -> Result<String, glib::Error> {
    let connection = gio::SocketClient::new()
        .connect_to_host_future(server, 0)
        .await?;
    connection
        .output_stream()
        .write_all_future(format!("{line}\n"), glib::Priority::DEFAULT)
        .await
        .map_err(|(_, e)| e)?;
    sent();
    let input = gio::DataInputStream::new(&connection.input_stream());
    let reply = input.read_line_utf8_future(glib::Priority::DEFAULT).await?;
    Ok(reply.map(|r| r.to_string()).unwrap_or_default())
}

/// The server the app uses when it is given none: the same protocol as
/// the test's, on a thread of this process. Gives its address.
fn start_server() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a local port");
    let address = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || server::serve(listener, |_| {}));
    address
}

/// Clicks through every row and checks what the window shows.
async fn self_test(ui: &Rc<Ui>, screenshot: &std::path::Path) -> Result<String, String> {
    until("the window to be drawn", || ui.spinner_frames.get() > 2).await?;

    // Compute: the result comes, and the window drew frames meanwhile.
    let frames_before = ui.spinner_frames.get();
    ui.compute.button.emit_clicked();
    until("the primes", || {
        ui.compute.label.text().contains("primes below")
    })
    .await?;
    let spun = ui.spinner_frames.get() - frames_before;
    check(spun >= 3, || {
        format!("the window drew {spun} frames while the pool computed")
    })?;
    let shown = ui.compute.label.text();
    check(shown.starts_with("78498 primes below 1000000"), || {
        format!("the compute row shows {shown:?}")
    })?;

    // Blocking call: the count, listed on a blocking-lane thread.
    ui.blocking.button.emit_clicked();
    until("the listing", || {
        ui.blocking.label.text().contains("entries")
    })
    .await?;
    let shown = ui.blocking.label.text();
    let expected = std::fs::read_dir("/usr/share")
        .map(|d| d.count())
        .unwrap_or(0);
    check(
        shown.starts_with(&format!("{expected} entries")) && !shown.contains("main"),
        || format!("the blocking row shows {shown:?} (expected {expected} entries)"),
    )?;

    // Stream: every item reached the label, in order.
    ui.stream.button.emit_clicked();
    until("the stream's end", || {
        ui.stream.label.text().starts_with("stream done")
    })
    .await?;
    check(ui.stream_updates.get() == STREAM_LEN, || {
        format!("the stream row got {} updates", ui.stream_updates.get())
    })?;

    // Ready loop: it ends, and the window drew meanwhile; the test bounds
    // the longest gap between frames (printed below).
    ui.ready.button.emit_clicked();
    until("the ready loop's end", || {
        ui.ready.label.text().starts_with("ready loop done")
    })
    .await?;
    let ready_gap = ui.ready_gap.get().ok_or("the ready loop left no gap")?;

    // Request: open its window, wait for the request to be sent, close the
    // window: the request is cancelled, and the server saw its connection
    // close before it answered.
    ui.request.button.emit_clicked();
    let sent = || {
        ui.request_window
            .upgrade()
            .and_then(|w| w.child())
            .and_then(|c| c.downcast::<gtk::Label>().ok())
            .is_some_and(|l| l.text().starts_with("sent"))
    };
    until("the request to be sent", sent).await?;
    let closed_at = Instant::now();
    ui.request_window
        .upgrade()
        .ok_or("the request window is gone")?
        .close();
    until("the request's cancellation", || {
        ui.request.label.text().starts_with("cancelled")
    })
    .await?;
    let cancelled_ms = closed_at.elapsed().as_millis();
    check(ui.request_window.upgrade().is_none(), || {
        "the closed request window is still alive".into()
    })?;
    ui.status.button.emit_clicked();
    until("the server's answer", || {
        ui.status.label.text() != "asking…"
    })
    .await?;
    let shown = ui.status.label.text();
    check(shown.contains("closed by the app"), || {
        format!("the server says {shown:?}")
    })?;

    // The screenshot renders what the window last drew: wait for two
    // frames after the last label changed.
    let drawn = ui.spinner_frames.get();
    until("the window to redraw", || {
        ui.spinner_frames.get() >= drawn + 2
    })
    .await?;
    save_screenshot(&ui.window, screenshot)?;
    Ok(format!(
        "spinner_frames_while_computing={spun} stream_updates={} \
         ready_loop_longest_frame_gap_ms={} cancelled_after_ms={cancelled_ms}",
        ui.stream_updates.get(),
        ready_gap.as_secs_f64() * 1e3
    ))
}
