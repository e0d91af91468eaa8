//! Search as you type over a file tree, with GTK 4 and gdex.
//!
//! Type in the entry: each keystroke starts a search of the file names and
//! contents under the folder. The walk runs on the blocking lane and feeds
//! a channel; scanning tasks on the pool read each file with `gdex::aio`
//! and send the matches into a `gdex::ListModel`, which appends them to the
//! list on the main thread in batches that keep to the frame budget. The
//! next keystroke replaces the list's model: the old model is dropped, and
//! with it its producer, its scanning tasks (a `TaskGroup`) and, at its
//! next send, the walk. No result of an old search can reach the new list:
//! each search has a list of its own. The *Tasks* button opens a window
//! that shows `gdex::dump()` live (start with `GDEX_TASK_DUMP=1`).
//!
//! ```text
//! cargo run --release --features gtk --example search -- [FOLDER] [--glib]
//! ```
//!
//! `--glib` runs the same search with glib-rs's own tools, as an app does
//! today: `MainContext::spawn_local` on the main thread, `gio::spawn_blocking`
//! for the walk and for each chunk of files scanned, a `gio::ListStore`, and
//! a cancel flag the blocking jobs check.
//!
//! With `GDEX_SEARCH_SELFTEST=<file.png>` the app drives itself: it types a
//! query, scrolls, retypes another, checks that every item it ever showed
//! matched its query, writes the final list to `GDEX_SEARCH_RESULTS` (a
//! file), saves a screenshot, prints `SELFTEST OK` with its figures (time
//! from the keystroke to the first result, the longest frame gaps while
//! results stream, the time until an abandoned search's work stopped, and
//! the frame gaps of the same list scrolled with no search running, the
//! floor) and quits. `GDEX_SEARCH_QUERIES=first,second` sets the two queries.
//! `tests/search.rs` runs it under Xvfb.

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gtk::prelude::*;
use gtk4 as gtk;

#[path = "shared/selftest.rs"]
mod selftest;
use selftest::save_screenshot;

fn num_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
}

/// Scanning tasks per search.
const SCANNERS: usize = 16;
/// Paths per hand-off from the walk to the scanners.
const WALK_BATCH: usize = 32;
/// Files per blocking job in `--glib` mode.
const GLIB_CHUNK: usize = 256;

/// What one search has done, shared with its workers.
#[derive(Default)]
struct Stats {
    scanned: AtomicU64,
    matches: AtomicU64,
    /// Workers (the walk, the scanners) still alive.
    alive: AtomicUsize,
    /// When the last of them stopped.
    stopped: Mutex<Option<Instant>>,
    /// Every result is in the list (`--glib` mode; gdex's model says it
    /// itself).
    complete: AtomicBool,
}

/// Counts a worker alive for as long as it lives (also when its future is
/// dropped: a cancelled search).
struct Alive(Arc<Stats>);

impl Alive {
    fn new(stats: &Arc<Stats>) -> Alive {
        stats.alive.fetch_add(1, Ordering::SeqCst);
        Alive(stats.clone())
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        if self.0.alive.fetch_sub(1, Ordering::SeqCst) == 1 {
            *self.0.stopped.lock().unwrap() = Some(Instant::now());
        }
    }
}

/// Does this file match? Its name, or else its contents.
fn matches_name(path: &Path, query: &[u8]) -> bool {
    use std::os::unix::ffi::OsStrExt;
    path.file_name()
        .is_some_and(|name| memchr::memmem::find(name.as_bytes(), query).is_some())
}

/// Walks `root` depth first (symlinks not followed), calling `found` with
/// each regular file until it returns false.
fn walk(root: &Path, found: &mut dyn FnMut(PathBuf) -> bool) -> bool {
    let Ok(entries) = std::fs::read_dir(root) else {
        return true;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if !walk(&entry.path(), found) {
                return false;
            }
        } else if kind.is_file() && !found(entry.path()) {
            return false;
        }
    }
    true
}

/// A search the gdex way: the model, fed by a producer on the pool.
fn search_gdex(
    pool: &gdex::ThreadPool,
    root: PathBuf,
    query: String,
    stats: Arc<Stats>,
) -> gio::ListModel {
    let lane = pool.clone();
    let model = gdex::ListModel::spawn(
        &pool.scheduler(),
        gtk::StringObject::static_type(),
        |path: String| gtk::StringObject::new(&path).upcast(),
        move |matches| async move {
            let query: Arc<[u8]> = query.into_bytes().into();
            // Paths go from the walk to the scanners in batches: one
            // hand-off (and at most one wake-up) per batch, not per file.
            let (paths, queue) = gdex::channel::<Vec<PathBuf>>(64);
            // The walk: on the blocking lane; it stops at the first send
            // that fails (the scanners are gone).
            let walk_stats = stats.clone();
            // (The app's pool's lane: `gdex::spawn_blocking` would start
            // the default pool too.)
            let walker = lane.spawn_blocking(move || {
                let _alive = Alive::new(&walk_stats);
                let mut batch = Vec::with_capacity(WALK_BATCH);
                let finished = walk(&root, &mut |path| {
                    batch.push(path);
                    batch.len() < WALK_BATCH
                        || gdex::wait_for(paths.send(std::mem::take(&mut batch))).is_ok()
                });
                if finished && !batch.is_empty() {
                    let _ = gdex::wait_for(paths.send(batch));
                }
            });
            // The scanners: a group, cancelled with this future.
            let group =
                gdex::TaskGroup::on(gdex::Scheduler::thread_default().expect("on the pool"));
            for _ in 0..SCANNERS {
                let (queue, matches, query, stats) =
                    (queue.clone(), matches.clone(), query.clone(), stats.clone());
                let alive = Alive::new(&stats);
                group
                    .spawn(async move {
                        let _alive = alive;
                        while let Ok(batch) = queue.recv().await {
                            for path in batch {
                                stats.scanned.fetch_add(1, Ordering::Relaxed);
                                let hit = matches_name(&path, &query)
                                    || gdex::aio::read_file(&path).await.is_ok_and(|data| {
                                        memchr::memmem::find(&data, &query).is_some()
                                    });
                                if hit {
                                    stats.matches.fetch_add(1, Ordering::Relaxed);
                                    if matches.send(path.display().to_string()).await.is_err() {
                                        return;
                                    }
                                }
                            }
                        }
                    })
                    .expect("a fresh group is open");
            }
            drop((queue, matches));
            let _ = group.close().await;
            let _ = walker.await;
        },
    );
    model.upcast()
}

/// The same search with glib-rs's own tools, as an app does today.
struct GlibSearch {
    store: gio::ListStore,
    cancel: Arc<AtomicBool>,
    handle: glib::JoinHandle<()>,
}

impl Drop for GlibSearch {
    fn drop(&mut self) {
        // glib-rs cannot stop a blocking job: it checks the flag.
        self.cancel.store(true, Ordering::SeqCst);
        self.handle.abort();
    }
}

fn search_glib(root: PathBuf, query: String, stats: Arc<Stats>) -> GlibSearch {
    let store = gio::ListStore::new::<gtk::StringObject>();
    let cancel = Arc::new(AtomicBool::new(false));
    let handle = glib::MainContext::default().spawn_local({
        let (store, cancel) = (store.clone(), cancel.clone());
        async move {
            let _alive = Alive::new(&stats);
            let walk_cancel = cancel.clone();
            let walk_stats = stats.clone();
            let files = gio::spawn_blocking(move || {
                let _alive = Alive::new(&walk_stats);
                let mut files = Vec::new();
                walk(&root, &mut |path| {
                    files.push(path);
                    !walk_cancel.load(Ordering::Relaxed)
                });
                files
            })
            .await
            .unwrap_or_default();
            let query: Arc<[u8]> = query.into_bytes().into();
            for chunk in files.chunks(GLIB_CHUNK) {
                let (chunk, query, cancel, stats) =
                    (chunk.to_vec(), query.clone(), cancel.clone(), stats.clone());
                let found = gio::spawn_blocking(move || {
                    let _alive = Alive::new(&stats);
                    let mut found = Vec::new();
                    for path in chunk {
                        if cancel.load(Ordering::Relaxed) {
                            break;
                        }
                        stats.scanned.fetch_add(1, Ordering::Relaxed);
                        let hit = matches_name(&path, &query)
                            || std::fs::read(&path)
                                .is_ok_and(|data| memchr::memmem::find(&data, &query).is_some());
                        if hit {
                            stats.matches.fetch_add(1, Ordering::Relaxed);
                            found.push(path.display().to_string());
                        }
                    }
                    found
                })
                .await
                .unwrap_or_default();
                let objects: Vec<gtk::StringObject> =
                    found.iter().map(|p| gtk::StringObject::new(p)).collect();
                store.extend_from_slice(&objects);
            }
            stats.complete.store(true, Ordering::SeqCst);
        }
    });
    GlibSearch {
        store,
        cancel,
        handle,
    }
}

/// The search in flight, whichever its tools.
enum Running {
    Gdex(gio::ListModel),
    Glib(GlibSearch),
}

impl Running {
    fn model(&self) -> gio::ListModel {
        match self {
            Running::Gdex(model) => model.clone(),
            Running::Glib(search) => search.store.clone().upcast(),
        }
    }

    fn complete(&self, stats: &Stats) -> bool {
        match self {
            Running::Gdex(model) => model
                .downcast_ref::<gdex::ListModel>()
                .is_some_and(|m| m.is_complete()),
            Running::Glib(_) => stats.complete.load(Ordering::SeqCst),
        }
    }
}

/// One search: what it shows, and what it is measured by.
struct Search {
    query: String,
    running: Running,
    stats: Arc<Stats>,
    started: Instant,
    first_result: Rc<Cell<Option<Duration>>>,
    /// Every item the list got (each must match `query`).
    seen: Rc<RefCell<Vec<String>>>,
}

/// The window and its state, on the main thread.
struct App {
    window: gtk::ApplicationWindow,
    entry: gtk::Entry,
    tasks: gtk::Button,
    folder: RefCell<PathBuf>,
    folder_label: gtk::Label,
    list: gtk::ListView,
    scroller: gtk::ScrolledWindow,
    status: gtk::Label,
    pool: gdex::ThreadPool,
    glib_mode: bool,
    search: RefCell<Option<Search>>,
    /// Abandoned searches' stats, with when they were dropped.
    abandoned: RefCell<Vec<(Arc<Stats>, Instant)>>,
    /// Frame times from the window's frame clock.
    frames: RefCell<Vec<Instant>>,
}

fn main() -> glib::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let glib_mode = args.iter().any(|a| a == "--glib");
    let folder = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::current_dir().expect("a current directory"));
    let app = gtk::Application::builder()
        .application_id("org.gdex.Search")
        .flags(gio::ApplicationFlags::NON_UNIQUE)
        .build();
    app.connect_activate(move |app| build(app, folder.clone(), glib_mode));
    app.run_with_args(&[] as &[&str])
}

fn build(gtk_app: &gtk::Application, folder: PathBuf, glib_mode: bool) {
    let window = gtk::ApplicationWindow::builder()
        .application(gtk_app)
        .title(if glib_mode {
            "search (glib-rs)"
        } else {
            "search (gdex)"
        })
        .default_width(720)
        .default_height(520)
        .build();
    let column = gtk::Box::new(gtk::Orientation::Vertical, 6);
    for margin in [gtk::Box::set_margin_top, gtk::Box::set_margin_bottom] {
        margin(&column, 8);
    }
    column.set_margin_start(8);
    column.set_margin_end(8);
    let row = gtk::Box::new(gtk::Orientation::Horizontal, 6);
    let entry = gtk::Entry::builder()
        .placeholder_text("search names and contents")
        .hexpand(true)
        .build();
    let choose = gtk::Button::with_label("Folder…");
    let tasks = gtk::Button::with_label("Tasks");
    row.append(&entry);
    row.append(&choose);
    row.append(&tasks);
    let folder_label = gtk::Label::new(Some(&folder.display().to_string()));
    folder_label.set_xalign(0.0);
    let status = gtk::Label::new(Some("type to search"));
    status.set_xalign(0.0);
    let factory = gtk::SignalListItemFactory::new();
    factory.connect_setup(|_, item| {
        let item = item.downcast_ref::<gtk::ListItem>().expect("a list item");
        // GtkInscription, GTK's text widget for long lists: no size
        // negotiation per row, so binding rows as results stream is cheap.
        let label = gtk::Inscription::new(None);
        label.set_xalign(0.0);
        item.set_child(Some(&label));
    });
    factory.connect_bind(|_, item| {
        let item = item.downcast_ref::<gtk::ListItem>().expect("a list item");
        let text = item
            .item()
            .and_downcast::<gtk::StringObject>()
            .map(|s| s.string().to_string())
            .unwrap_or_default();
        if let Some(label) = item.child().and_downcast::<gtk::Inscription>() {
            label.set_text(Some(&text));
        }
    });
    let list = gtk::ListView::new(None::<gtk::NoSelection>, Some(factory));
    let scroller = gtk::ScrolledWindow::builder()
        .vexpand(true)
        .child(&list)
        .build();
    column.append(&row);
    column.append(&folder_label);
    column.append(&status);
    column.append(&scroller);
    window.set_child(Some(&column));

    let app = Rc::new(App {
        window: window.clone(),
        entry: entry.clone(),
        tasks: tasks.clone(),
        folder: RefCell::new(folder),
        folder_label,
        list,
        scroller,
        status,
        // One core is left to the main thread, which lays out and draws
        // the list while results stream: with every core scanning, frames
        // wait for the OS scheduler (on 2 cores the frame gaps' p99 went
        // from about 21 ms to 34 ms, and the search was no faster).
        pool: gdex::ThreadPool::builder()
            .workers(num_cpus().saturating_sub(1).max(1))
            .build()
            .expect("a pool"),
        glib_mode,
        search: RefCell::new(None),
        abandoned: RefCell::new(Vec::new()),
        frames: RefCell::new(Vec::new()),
    });

    // Search as you type: the entry's texts as a stream (its `changed`
    // signal), of which only the latest matters: a capacity of 1 keeps the
    // newest text if the loop is busy. The stream ends with the entry.
    let mut texts = gdex::signal_stream_local(&entry, "changed", |args| {
        let entry = args[0].get::<gtk::Entry>().expect("the signal's object");
        entry.text().to_string()
    })
    .with_capacity(1);
    gdex::spawn_local({
        let app = Rc::downgrade(&app);
        async move {
            while let Some(text) = futures::StreamExt::next(&mut texts).await {
                let Some(app) = app.upgrade() else { break };
                start(&app, text);
            }
        }
    })
    .detach();
    choose.connect_clicked({
        let app = Rc::downgrade(&app);
        move |_| {
            if let Some(app) = app.upgrade() {
                choose_folder(&app);
            }
        }
    });
    tasks.connect_clicked({
        let parent = window.clone();
        move |_| show_tasks(&parent)
    });
    window.add_tick_callback({
        let app = Rc::downgrade(&app);
        move |_, _| {
            if let Some(app) = app.upgrade() {
                app.frames.borrow_mut().push(Instant::now());
            }
            glib::ControlFlow::Continue
        }
    });
    // The status line, ten times a second.
    glib::timeout_add_local(Duration::from_millis(100), {
        let app = Rc::downgrade(&app);
        move || match app.upgrade() {
            Some(app) => {
                show_status(&app);
                glib::ControlFlow::Continue
            }
            None => glib::ControlFlow::Break,
        }
    });
    window.present();
    if let Some(screenshot) = std::env::var_os("GDEX_SEARCH_SELFTEST") {
        let app = app.clone();
        gdex::spawn_local(async move {
            let outcome = self_test(&app, Path::new(&screenshot)).await;
            match outcome {
                Ok(report) => println!("SELFTEST OK {report}"),
                Err(failure) => {
                    println!("SELFTEST FAILED {failure}");
                    std::process::exit(1);
                }
            }
            app.window.close();
        })
        .detach();
    }
}

/// Starts a search for `query`, dropping the one in flight.
fn start(app: &Rc<App>, query: String) {
    if let Some(old) = app.search.borrow_mut().take() {
        app.list.set_model(None::<&gtk::NoSelection>);
        // Measured from here: the old model's last reference goes now, and
        // with it its work.
        app.abandoned
            .borrow_mut()
            .push((old.stats.clone(), Instant::now()));
        drop(old);
    }
    if query.is_empty() {
        app.status.set_text("type to search");
        return;
    }
    let stats = Arc::new(Stats::default());
    let root = app.folder.borrow().clone();
    let running = if app.glib_mode {
        Running::Glib(search_glib(root, query.clone(), stats.clone()))
    } else {
        Running::Gdex(search_gdex(&app.pool, root, query.clone(), stats.clone()))
    };
    let model = running.model();
    let started = Instant::now();
    let first_result = Rc::new(Cell::new(None));
    // Every item this list ever gets, checked against the query at the
    // end of the self-test (not here: reading files on the main thread
    // would cost frames).
    let seen: Rc<RefCell<Vec<String>>> = Rc::default();
    model.connect_items_changed({
        let (first_result, seen) = (first_result.clone(), seen.clone());
        move |model, position, _, added| {
            if first_result.get().is_none() && added > 0 {
                first_result.set(Some(started.elapsed()));
            }
            let mut seen = seen.borrow_mut();
            for i in position..position + added {
                if let Some(item) = model.item(i).and_downcast::<gtk::StringObject>() {
                    seen.push(item.string().to_string());
                }
            }
        }
    });
    app.list
        .set_model(Some(&gtk::NoSelection::new(Some(model))));
    *app.search.borrow_mut() = Some(Search {
        query,
        running,
        stats,
        started,
        first_result,
        seen,
    });
}

fn show_status(app: &App) {
    let search = app.search.borrow();
    let Some(search) = search.as_ref() else {
        return;
    };
    let done = search.running.complete(&search.stats);
    app.status.set_text(&format!(
        "{} files scanned, {} matches{}",
        search.stats.scanned.load(Ordering::Relaxed),
        search.stats.matches.load(Ordering::Relaxed),
        if done { " (done)" } else { "…" }
    ));
}

fn choose_folder(app: &Rc<App>) {
    let dialog = gtk::FileChooserNative::new(
        Some("Search in"),
        Some(&app.window),
        gtk::FileChooserAction::SelectFolder,
        Some("Search here"),
        Some("Cancel"),
    );
    let app = app.clone();
    dialog.connect_response(move |dialog, response| {
        if response == gtk::ResponseType::Accept {
            if let Some(path) = dialog.file().and_then(|f| f.path()) {
                app.folder_label.set_text(&path.display().to_string());
                *app.folder.borrow_mut() = path;
                start(&app, app.entry.text().to_string());
            }
        }
        dialog.destroy();
    });
    dialog.show();
}

/// A window showing `gdex::dump()`, refreshed twice a second.
fn show_tasks(parent: &gtk::ApplicationWindow) {
    let window = gtk::Window::builder()
        .title(TASKS_TITLE)
        .transient_for(parent)
        .default_width(720)
        .default_height(360)
        .build();
    let text = gtk::TextView::builder()
        .editable(false)
        .monospace(true)
        .build();
    window.set_child(Some(&gtk::ScrolledWindow::builder().child(&text).build()));
    let refresh = move || text.buffer().set_text(&gdex::dump().to_string());
    refresh();
    let weak = window.downgrade();
    glib::timeout_add_local(Duration::from_millis(500), move || {
        if weak.upgrade().is_none() {
            return glib::ControlFlow::Break;
        }
        refresh();
        glib::ControlFlow::Continue
    });
    window.present();
}

/// The title of the window of [`show_tasks`].
const TASKS_TITLE: &str = "gdex tasks";

/// Opens the Tasks window with its button and gives the dump it shows.
async fn tasks_window_text(app: &App) -> Result<String, String> {
    app.tasks.emit_clicked();
    pause(Duration::from_millis(100)).await;
    let window = gtk::Window::list_toplevels()
        .into_iter()
        .filter_map(|w| w.downcast::<gtk::Window>().ok())
        .find(|w| w.title().as_deref() == Some(TASKS_TITLE))
        .ok_or("the Tasks button opened no window")?;
    let text = window
        .child()
        .and_downcast::<gtk::ScrolledWindow>()
        .and_then(|s| s.child())
        .and_downcast::<gtk::TextView>()
        .ok_or("the Tasks window shows no text")?
        .buffer();
    let text = text
        .text(&text.start_iter(), &text.end_iter(), false)
        .to_string();
    window.close();
    Ok(text)
}

/// Waits on the main loop (frames keep being drawn meanwhile).
async fn pause(d: Duration) {
    gdex::sleep(d).await;
}

/// Types `text` into the entry a key at a time.
async fn type_text(app: &App, text: &str) {
    let mut typed = String::new();
    for c in text.chars() {
        typed.push(c);
        app.entry.set_text(&typed);
        pause(Duration::from_millis(40)).await;
    }
}

/// The 99th percentile and the largest of the gaps between frames drawn
/// from `since` to `until`.
fn frame_gaps(frames: &[Instant], since: Instant, until: Instant) -> (f64, f64, usize) {
    let times: Vec<Instant> = frames
        .iter()
        .copied()
        .filter(|t| *t >= since && *t <= until)
        .collect();
    let mut gaps: Vec<f64> = times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64() * 1e3)
        .collect();
    if gaps.is_empty() {
        return (0.0, 0.0, 0);
    }
    gaps.sort_by(f64::total_cmp);
    let p99 = gaps[((gaps.len() - 1) as f64 * 0.99).round() as usize];
    (p99, *gaps.last().unwrap(), gaps.len())
}

async fn self_test(app: &Rc<App>, screenshot: &Path) -> Result<String, String> {
    let queries = std::env::var("GDEX_SEARCH_QUERIES").unwrap_or_else(|_| "alpha,beta".into());
    let (first, second) = queries
        .split_once(',')
        .ok_or("GDEX_SEARCH_QUERIES is first,second")?;
    // Let the window map and draw.
    pause(Duration::from_millis(300)).await;
    // The first search: typed, given a moment to stream, then abandoned
    // by typing over it.
    type_text(app, first).await;
    pause(Duration::from_millis(60)).await;
    app.scroller
        .vadjustment()
        .set_value(app.scroller.vadjustment().upper());
    app.entry.set_text("");
    type_text(app, second).await;
    let (started, first_result) = {
        let search = app.search.borrow();
        let search = search.as_ref().ok_or("no search running")?;
        (search.started, search.first_result.clone())
    };
    // The second runs to the end, scrolled as it streams.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let done = {
            let search = app.search.borrow();
            let search = search.as_ref().ok_or("no search running")?;
            search.running.complete(&search.stats)
        };
        if done {
            break;
        }
        if Instant::now() > deadline {
            return Err("the search did not finish in 120 s".into());
        }
        let adjustment = app.scroller.vadjustment();
        adjustment.set_value(adjustment.upper());
        pause(Duration::from_millis(50)).await;
    }
    let finished = Instant::now();
    // Let the last batch be drawn.
    pause(Duration::from_millis(200)).await;
    // The floor: the same list scrolled for a second with no search
    // running, so GTK's own frame time shows apart from the streaming's.
    let idle_start = Instant::now();
    let adjustment = app.scroller.vadjustment();
    for step in 0..25 {
        adjustment.set_value(adjustment.upper() * f64::from(step) / 25.0);
        pause(Duration::from_millis(40)).await;
    }
    let (idle_p99, _, _) = frame_gaps(&app.frames.borrow(), idle_start, Instant::now());
    // Every abandoned search has stopped all of its work.
    let abandoned = app.abandoned.borrow().clone();
    let mut stop_ms: f64 = 0.0;
    for (stats, dropped) in abandoned {
        let deadline = Instant::now() + Duration::from_secs(10);
        while stats.alive.load(Ordering::SeqCst) > 0 {
            if Instant::now() > deadline {
                return Err("an abandoned search's work is still running after 10 s".into());
            }
            pause(Duration::from_millis(5)).await;
        }
        let stopped = stats.stopped.lock().unwrap().unwrap_or(dropped);
        stop_ms = stop_ms.max(stopped.saturating_duration_since(dropped).as_secs_f64() * 1e3);
    }
    // The debug window shows the task dump (this self-test's own task is
    // live, so with tracking on it lists at least one).
    let tasks = tasks_window_text(app).await?;
    let dump_ok = if gdex::dump().is_enabled() {
        tasks.contains("live tasks") && tasks.contains("spawned at")
    } else {
        tasks.contains("GDEX_TASK_DUMP=1")
    };
    if !dump_ok {
        return Err(format!("the Tasks window shows no dump: {tasks:?}"));
    }
    // No await from here on: the search is borrowed.
    let search = app.search.borrow();
    let search = search.as_ref().ok_or("no search running")?;
    let query = search.query.as_bytes();
    let stale = search
        .seen
        .borrow()
        .iter()
        .filter(|p| {
            let path = Path::new(p.as_str());
            !(matches_name(path, query)
                || std::fs::read(path).is_ok_and(|d| memchr::memmem::find(&d, query).is_some()))
        })
        .count();
    if stale > 0 {
        return Err(format!(
            "{stale} items that do not match {:?} were shown",
            search.query
        ));
    }
    let model = search.running.model();
    let mut shown: Vec<String> = (0..model.n_items())
        .filter_map(|i| model.item(i).and_downcast::<gtk::StringObject>())
        .map(|s| s.string().to_string())
        .collect();
    shown.sort();
    if let Some(out) = std::env::var_os("GDEX_SEARCH_RESULTS") {
        std::fs::write(out, shown.join("\n")).map_err(|e| format!("writing the results: {e}"))?;
    }
    let (p99, worst, frames) = frame_gaps(&app.frames.borrow(), started, finished);
    save_screenshot(&app.window, screenshot)?;

    Ok(format!(
        "mode={} results={} first_result_ms={:.1} frame_gap_p99_ms={:.1} frame_gap_max_ms={:.1} frames={} abandoned_stop_ms={:.1} stream_ms={:.0} idle_scroll_gap_p99_ms={:.1}",
        if app.glib_mode { "glib" } else { "gdex" },
        shown.len(),
        first_result.get().map(|d| d.as_secs_f64() * 1e3).unwrap_or(f64::NAN),
        p99,
        worst,
        frames,
        stop_ms,
        (finished - started).as_secs_f64() * 1e3,
        idle_p99,
    ))
}
