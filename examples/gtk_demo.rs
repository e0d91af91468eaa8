//! A GTK 4 app driven by gdex.
//!
//! *Start* spawns a few thousand pool tasks into a `TaskGroup`; a progress
//! bar and a live counter are updated on the main thread by a task bound to
//! the window (`gdex::spawn_local_bound`, X2); *Cancel* stops the work with
//! `TaskGroup::cancel().await`, which returns once every task has stopped
//! (X1), so the counter it shows is final; the spinner keeps turning
//! throughout: the work runs on the pool, and what runs on the main thread
//! (the view, the dialogs) runs below GTK's redraw priority (X3). *Panic* makes a detached task panic: the app's panic handler (X5)
//! shows the message in a dialog instead of the process dying.
//!
//! Run it with `cargo run --features gtk --example gtk_demo`.
//!
//! With `GDEX_DEMO_SELFTEST=<file.png>` the app drives itself through
//! GTK's own API (`emit_clicked`), checks what it sees, saves a screenshot
//! of its window to that file, prints `SELFTEST OK` and quits; a failed
//! check exits with status 1. `tests/gtk_demo.rs` runs it under Xvfb.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gtk::prelude::*;
use gtk4 as gtk;

#[path = "shared/selftest.rs"]
mod selftest;
use selftest::{check, save_screenshot, until};

/// Tasks per run.
const TOTAL: usize = 4000;

/// One press of *Start*.
struct Run {
    group: gdex::TaskGroup<()>,
    done: Arc<AtomicUsize>,
    started: Instant,
}

/// The window's widgets and state, all on the main thread.
struct Ui {
    window: gtk::ApplicationWindow,
    start: gtk::Button,
    cancel: gtk::Button,
    panic: gtk::Button,
    bar: gtk::ProgressBar,
    counter: gtk::Label,
    spinner: gtk::Spinner,
    run: RefCell<Option<Rc<Run>>>,
    /// Frames drawn by the spinner: proof that it keeps turning.
    spinner_frames: Rc<Cell<u64>>,
    /// Panic dialogs shown.
    dialogs: Cell<usize>,
    /// Self-test only: the next run keeps its second half waiting until it
    /// is cancelled, so that Cancel always lands mid-run, however slowly
    /// the main loop gets to check the count on a loaded machine.
    hold_next_run: Cell<bool>,
}

fn main() -> glib::ExitCode {
    let app = gtk::Application::builder()
        .application_id("org.gdex.Demo")
        .flags(gtk::gio::ApplicationFlags::NON_UNIQUE)
        .build();
    app.connect_activate(build_ui);
    // No command-line parsing: the self-test passes its file by env var.
    app.run_with_args(&[] as &[&str])
}

fn build_ui(app: &gtk::Application) {
    let window = gtk::ApplicationWindow::builder()
        .application(app)
        .title("gdex demo")
        .default_width(420)
        .default_height(200)
        .build();
    let column = padded_column();
    let spinner = gtk::Spinner::new();
    spinner.start();
    let bar = gtk::ProgressBar::new();
    bar.set_show_text(true);
    let counter = gtk::Label::new(Some("press Start"));
    let buttons = gtk::Box::new(gtk::Orientation::Horizontal, 8);
    let start = gtk::Button::with_label("Start");
    let cancel = gtk::Button::with_label("Cancel");
    let panic = gtk::Button::with_label("Panic");
    cancel.set_sensitive(false);
    for b in [&start, &cancel, &panic] {
        buttons.append(b);
    }
    for w in [
        spinner.upcast_ref::<gtk::Widget>(),
        bar.upcast_ref(),
        counter.upcast_ref(),
        buttons.upcast_ref(),
    ] {
        column.append(w);
    }
    window.set_child(Some(&column));

    let spinner_frames = Rc::new(Cell::new(0));
    let frames = spinner_frames.clone();
    spinner.add_tick_callback(move |_, _| {
        frames.set(frames.get() + 1);
        glib::ControlFlow::Continue
    });

    let ui = Rc::new(Ui {
        window: window.clone(),
        start,
        cancel,
        panic,
        bar,
        counter,
        spinner,
        run: RefCell::new(None),
        spinner_frames,
        dialogs: Cell::new(0),
        hold_next_run: Cell::new(false),
    });

    let on_start = ui.clone();
    ui.start.connect_clicked(move |_| start_run(&on_start));
    let on_cancel = ui.clone();
    ui.cancel.connect_clicked(move |_| cancel_run(&on_cancel));
    ui.panic.connect_clicked(|_| {
        gdex::spawn(async { panic!("a pool task panicked on purpose") }).detach();
    });

    // X5: panics with no waiter come here, on whatever thread; a channel
    // takes them to the main thread, where a task shows each in a dialog.
    let (panics, panic_messages) = gdex::channel::<String>(16);
    gdex::set_panic_handler(move |event| {
        if let Err(gdex::TrySendError::Full(message) | gdex::TrySendError::Closed(message)) =
            panics.try_send(event.to_string())
        {
            eprintln!("gdex demo: {message}");
        }
    });
    let dialogs = ui.clone();
    gdex::spawn_local_bound(&window, async move {
        while let Ok(message) = panic_messages.recv().await {
            show_dialog(&dialogs, &message);
        }
    })
    .detach();

    // The live view: a main-thread task bound to the window (X2), so it
    // stops when the window goes.
    let view = ui.clone();
    gdex::spawn_local_bound(&window, async move {
        loop {
            refresh(&view);
            gdex::sleep(Duration::from_millis(30)).await;
        }
    })
    .detach();

    window.present();

    if let Some(screenshot) = std::env::var_os("GDEX_DEMO_SELFTEST") {
        let driver = ui.clone();
        let app = app.clone();
        gdex::spawn_local(async move {
            let result = self_test(&driver, std::path::Path::new(&screenshot)).await;
            match result {
                Ok(report) => println!("SELFTEST OK {report}"),
                Err(failure) => {
                    println!("SELFTEST FAILED {failure}");
                    std::process::exit(1);
                }
            }
            app.quit();
        })
        .detach();
    }
}

/// A vertical box with the app's spacing and margins.
fn padded_column() -> gtk::Box {
    let column = gtk::Box::new(gtk::Orientation::Vertical, 12);
    column.set_margin_top(16);
    column.set_margin_bottom(16);
    column.set_margin_start(16);
    column.set_margin_end(16);
    column
}

fn start_run(ui: &Rc<Ui>) {
    if ui.run.borrow().is_some() {
        return;
    }
    let run = Rc::new(Run {
        group: gdex::TaskGroup::new(),
        done: Arc::new(AtomicUsize::new(0)),
        started: Instant::now(),
    });
    let hold = ui.hold_next_run.replace(false);
    for i in 0..TOTAL {
        let done = run.done.clone();
        let held = hold && i >= TOTAL / 2;
        run.group
            .spawn(async move {
                if held {
                    // Until Cancel drops it.
                    std::future::pending::<()>().await;
                }
                // A little CPU work, then a yield, then a little more.
                let mut x = i as u64;
                for _ in 0..20_000 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                }
                gdex::yield_now().await;
                std::hint::black_box(x);
                done.fetch_add(1, Ordering::Relaxed);
            })
            .expect("a fresh group is open");
    }
    *ui.run.borrow_mut() = Some(run);
    ui.start.set_sensitive(false);
    ui.cancel.set_sensitive(true);
    ui.counter.set_text(&format!("0 / {TOTAL}"));
}

fn cancel_run(ui: &Rc<Ui>) {
    let Some(run) = ui.run.borrow_mut().take() else {
        return;
    };
    ui.cancel.set_sensitive(false);
    ui.counter.set_text("cancelling…");
    let ui = ui.clone();
    gdex::spawn_local(async move {
        // X1: returns once every member has stopped, so this count is final.
        run.group.cancel().await;
        let done = run.done.load(Ordering::Relaxed);
        ui.counter
            .set_text(&format!("cancelled at {done} / {TOTAL}"));
        ui.bar.set_fraction(done as f64 / TOTAL as f64);
        ui.start.set_sensitive(true);
    })
    .detach();
}

/// Redraws the progress from the current run; finishes it when complete.
fn refresh(ui: &Rc<Ui>) {
    let run = ui.run.borrow().clone();
    let Some(run) = run else { return };
    let done = run.done.load(Ordering::Relaxed);
    ui.bar.set_fraction(done as f64 / TOTAL as f64);
    if done < TOTAL {
        ui.counter.set_text(&format!("{done} / {TOTAL}"));
        return;
    }
    ui.run.borrow_mut().take();
    ui.counter.set_text(&format!(
        "done: {TOTAL} / {TOTAL} in {:.2} s",
        run.started.elapsed().as_secs_f64()
    ));
    ui.cancel.set_sensitive(false);
    ui.start.set_sensitive(true);
}

fn show_dialog(ui: &Rc<Ui>, message: &str) {
    let dialog = gtk::Window::builder()
        .title("A task panicked")
        .transient_for(&ui.window)
        .modal(true)
        .default_width(320)
        .build();
    let column = padded_column();
    let text = gtk::Label::new(Some(message));
    text.set_wrap(true);
    let ok = gtk::Button::with_label("OK");
    let close = dialog.clone();
    ok.connect_clicked(move |_| close.close());
    column.append(&text);
    column.append(&ok);
    dialog.set_child(Some(&column));
    dialog.present();
    ui.dialogs.set(ui.dialogs.get() + 1);
}

/// Clicks through the app and checks what it shows.
async fn self_test(ui: &Rc<Ui>, screenshot: &std::path::Path) -> Result<String, String> {
    until("the window to be drawn", || ui.spinner_frames.get() > 2).await?;

    // Start, let a tenth run, cancel: the count stops where cancel says.
    // The second half of this run waits for the cancel (see hold_next_run).
    ui.hold_next_run.set(true);
    ui.start.emit_clicked();
    let run = ui.run.borrow().clone().ok_or("Start did not start a run")?;
    until("a tenth of the tasks", || {
        run.done.load(Ordering::Relaxed) >= TOTAL / 10
    })
    .await?;
    let frames_before = ui.spinner_frames.get();
    ui.cancel.emit_clicked();
    until("the cancellation", || {
        ui.counter.text().starts_with("cancelled")
    })
    .await?;
    let at_cancel = run.done.load(Ordering::Relaxed);
    gdex::sleep(Duration::from_millis(100)).await;
    let later = run.done.load(Ordering::Relaxed);
    check(later == at_cancel, || {
        format!("{later} tasks ran after cancel stopped at {at_cancel}")
    })?;
    check(at_cancel < TOTAL, || {
        "the run finished before the cancel".into()
    })?;
    let shown = ui.counter.text();
    check(
        shown == format!("cancelled at {at_cancel} / {TOTAL}"),
        || format!("the counter shows {shown:?}"),
    )?;
    drop(run);

    // A full run: the bar reaches 1, the counter says done.
    ui.start.emit_clicked();
    until("the full run", || ui.counter.text().starts_with("done")).await?;
    check(ui.bar.fraction() >= 1.0, || {
        format!("the bar is at {}", ui.bar.fraction())
    })?;
    let spun = ui.spinner_frames.get() - frames_before;
    check(spun >= 10, || {
        format!("the spinner drew only {spun} frames while the work ran")
    })?;
    check(ui.spinner.is_spinning(), || "the spinner stopped".into())?;

    // X5: a panic in a detached task becomes a dialog; the app lives on.
    ui.panic.emit_clicked();
    until("the panic dialog", || ui.dialogs.get() == 1).await?;
    // Let the dialog be drawn before the screenshot.
    gdex::sleep(Duration::from_millis(100)).await;

    save_screenshot(&ui.window, screenshot)?;
    Ok(format!(
        "cancelled_at={at_cancel} total={TOTAL} spinner_frames={spun} dialogs={}",
        ui.dialogs.get()
    ))
}
