//! Shared test helpers: a watchdog for multi-thread tests, stress scaling,
//! deterministic waits (pump a context, poll a condition, note a first
//! poll), and a lock for tests that use the process-wide default main
//! context.
#![allow(dead_code)]

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Runs `body`; if it has not returned after `secs` seconds, prints which test
/// hung and every thread's stack (see [`print_stacks`]), and aborts the
/// process, so a scheduler bug fails the run instead of hanging it, and says
/// where each thread was.
pub fn watchdog<R>(name: &str, secs: u64, body: impl FnOnce() -> R) -> R {
    let (done, finished) = mpsc::channel::<()>();
    let name = name.to_owned();
    let dog = std::thread::Builder::new()
        .name(format!("watchdog-{name}"))
        .spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) =
                finished.recv_timeout(Duration::from_secs(secs))
            {
                // Straight to fd 2: the test harness captures eprintln!, and
                // the capture is lost when we abort.
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "watchdog: test `{name}` still running after {secs} s; aborting"
                );
                print_stacks();
                std::process::abort();
            }
        })
        .expect("start the watchdog");
    let out = body();
    drop(done);
    dog.join().expect("watchdog thread");
    out
}

/// Prints every thread's stack of this process to stderr, with `gdb` if it
/// is installed (the CI installs it), before a watchdog aborts: a hang that
/// shows up once in a hundred runs is then a report of where each thread
/// waited, not a name. gdb writes to a file, not a pipe: while it is
/// attached every thread of this process is stopped, a reader of a pipe
/// too, and a gdb blocked on a full pipe would never detach (it did). It
/// runs under `timeout`, a process of its own, so a gdb that cannot
/// attach (no ptrace permission) or takes too long is ended after a
/// minute. `GDEX_WATCHDOG_STACKS=0` turns it off.
pub fn print_stacks() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    if std::env::var_os("GDEX_WATCHDOG_STACKS").is_some_and(|v| v == "0") {
        return;
    }
    let file = std::env::temp_dir().join(format!("gdex-stacks-{}.txt", std::process::id()));
    let status = Command::new("timeout")
        .args([
            "-k",
            "5",
            "60",
            "gdb",
            "-p",
            &std::process::id().to_string(),
        ])
        .args(["-batch", "-nx", "-ex", "set pagination off"])
        .args(["-ex", &format!("set logging file {}", file.display())])
        .args([
            "-ex",
            "set logging redirect on",
            "-ex",
            "set logging enabled on",
        ])
        .args(["-ex", "thread apply all bt 40"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let mut err = std::io::stderr();
    match (status, std::fs::read(&file)) {
        (Ok(_), Ok(out)) if !out.is_empty() => {
            let _ = writeln!(err, "watchdog: the threads' stacks, by gdb:");
            let _ = err.write_all(&out);
        }
        (status, _) => {
            let _ = writeln!(
                err,
                "watchdog: no stacks from gdb ({status:?}; is gdb installed, may it attach?)"
            );
        }
    }
    let _ = std::fs::remove_file(&file);
}

/// A GLib source that is never ready and calls its hook each time its
/// context prepares it (once an iteration, when no source of a higher
/// priority is ready): user code in GLib's prepare phase, or a count of a
/// context's iterations. Destroyed when dropped.
pub struct PrepareHook {
    raw: *mut glib::ffi::GSource,
}

/// The hook a [`PrepareHook`]'s source calls.
type Hook = Box<dyn Fn() + Send + Sync>;

#[repr(C)]
struct HookSource {
    base: glib::ffi::GSource,
    /// From `Box::into_raw`, released by `finalize`.
    hook: *mut Hook,
}

unsafe extern "C" fn hook_prepare(
    source: *mut glib::ffi::GSource,
    timeout: *mut std::os::raw::c_int,
) -> glib::ffi::gboolean {
    // SAFETY: GLib passes our own live source, a `HookSource` whose `hook`
    // was written before it was attached, and a valid out-pointer.
    unsafe {
        (*(*source.cast::<HookSource>()).hook)();
        *timeout = -1;
    }
    glib::ffi::GFALSE
}

unsafe extern "C" fn hook_check(_: *mut glib::ffi::GSource) -> glib::ffi::gboolean {
    glib::ffi::GFALSE
}

unsafe extern "C" fn hook_dispatch(
    _: *mut glib::ffi::GSource,
    _: glib::ffi::GSourceFunc,
    _: glib::ffi::gpointer,
) -> glib::ffi::gboolean {
    glib::ffi::GTRUE
}

unsafe extern "C" fn hook_finalize(source: *mut glib::ffi::GSource) {
    // SAFETY: finalized once, after its last reference; `hook` came from
    // `Box::into_raw` and is released here only.
    drop(unsafe { Box::from_raw((*source.cast::<HookSource>()).hook) });
}

static HOOK_FUNCS: glib::ffi::GSourceFuncs = glib::ffi::GSourceFuncs {
    prepare: Some(hook_prepare),
    check: Some(hook_check),
    dispatch: Some(hook_dispatch),
    finalize: Some(hook_finalize),
    closure_callback: None,
    closure_marshal: None,
};

impl PrepareHook {
    /// Attaches the source to `context` at `priority` (a GLib priority:
    /// prepared after the sources of a higher one, `G_PRIORITY_LOW` after
    /// a pool worker's own).
    pub fn attach(
        context: &glib::MainContext,
        priority: i32,
        hook: impl Fn() + Send + Sync + 'static,
    ) -> PrepareHook {
        let hook: *mut Hook = Box::into_raw(Box::new(Box::new(hook)));
        // SAFETY: `HOOK_FUNCS` is a `'static` table GLib only reads; the
        // source is allocated at our struct's size, and `hook` is written
        // before it is attached, so no callback sees it unset.
        let raw = unsafe {
            let raw = glib::ffi::g_source_new(
                std::ptr::addr_of!(HOOK_FUNCS).cast_mut(),
                std::mem::size_of::<HookSource>() as u32,
            );
            (*raw.cast::<HookSource>()).hook = hook;
            glib::ffi::g_source_set_priority(raw, priority);
            glib::ffi::g_source_attach(raw, context.as_ptr());
            raw
        };
        PrepareHook { raw }
    }
}

impl Drop for PrepareHook {
    fn drop(&mut self) {
        // SAFETY: our source, destroyed and released once.
        unsafe {
            glib::ffi::g_source_destroy(self.raw);
            glib::ffi::g_source_unref(self.raw);
        }
    }
}

/// `base` scaled by `GDEX_STRESS` (a multiplier, default 1).
pub fn stress(base: usize) -> usize {
    let factor = std::env::var("GDEX_STRESS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(1.0);
    ((base as f64) * factor).max(1.0) as usize
}

/// Tests that iterate or own the default main context take this lock, so
/// that tests running in parallel threads do not fight over it.
pub fn main_context_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Iterates `context` without blocking until it has nothing ready.
pub fn pump(context: &glib::MainContext) {
    while context.iteration(false) {}
}

/// Iterates `context`, blocking, until `done()` holds.
pub fn pump_until(context: &glib::MainContext, mut done: impl FnMut() -> bool) {
    while !done() {
        context.iteration(true);
    }
}

/// Iterates `context` without blocking until `done()` holds or `limit` has
/// passed (sleeping 200 µs when nothing is ready); true if `done()` held.
/// Unlike [`pump_until`], it cannot sleep forever in the context's poll
/// when another thread makes `done()` true without waking the context.
pub fn pump_for(
    context: &glib::MainContext,
    limit: Duration,
    mut done: impl FnMut() -> bool,
) -> bool {
    let deadline = Instant::now() + limit;
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        if !context.iteration(false) {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    true
}

/// [`pump_for`] with 20 s, failing the test if `done()` never holds.
pub fn pump_polling(context: &glib::MainContext, done: impl FnMut() -> bool) {
    assert!(
        pump_for(context, Duration::from_secs(20), done),
        "the condition never held"
    );
}

/// Runs `body` with a fresh context pushed as this thread's thread-default
/// and a gdex scheduler on it: an owner thread, as a GTK app's main thread
/// is.
pub fn on_own_context<R>(body: impl FnOnce(&glib::MainContext) -> R) -> R {
    let context = glib::MainContext::new();
    let _scheduler = gdex::Scheduler::for_context(&context);
    context
        .with_thread_default(|| body(&context))
        .expect("a fresh context is free")
}

/// The CPU time this thread has used: what a test that bounds how long
/// its thread was held measures, so that the time a loaded machine keeps
/// the thread off its cores does not count.
pub fn thread_cpu_time() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec; the clock id is a
    // constant every Linux has.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(r, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Polls `cond` every millisecond until it holds. For waiting on other
/// threads' progress (metrics) inside a watchdog.
pub fn wait_until(mut cond: impl FnMut() -> bool) {
    while !cond() {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `future`, which adds one to `polled` once its first poll has returned:
/// a test that waits for the count knows the future has registered its
/// waker wherever it waits (or finished), instead of sleeping and hoping.
pub fn after_first_poll<F: Future>(
    polled: &Arc<AtomicUsize>,
    future: F,
) -> impl Future<Output = F::Output> {
    let polled = polled.clone();
    let mut future = Box::pin(future);
    let mut first = true;
    std::future::poll_fn(move |cx| {
        let poll = future.as_mut().poll(cx);
        if std::mem::take(&mut first) {
            polled.fetch_add(1, Ordering::SeqCst);
        }
        poll
    })
}

/// Runs `body` with the default main context as this thread's thread-default
/// context (under [`main_context_lock`]), so that `gdex::block_on` here
/// iterates the main context, as it does on an app's main thread. Test
/// threads are not the process's main thread.
pub fn on_main<R>(body: impl FnOnce() -> R) -> R {
    let _lock = main_context_lock();
    glib::MainContext::default()
        .with_thread_default(body)
        .expect("the default main context is free")
}

/// Yields once to whichever executor polls it (it wakes itself, then
/// returns `Pending`): `gdex::yield_now` for any executor, glib-rs's
/// included, which has none.
pub fn yield_once() -> impl Future<Output = ()> {
    let mut yielded = false;
    std::future::poll_fn(move |cx| {
        if std::mem::replace(&mut yielded, true) {
            std::task::Poll::Ready(())
        } else {
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
}

/// Busy-waits for `d`: a task that occupies its worker.
pub fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Counts the drops of whatever holds it (a future, a fiber's state).
pub struct Counted(pub Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Runs the `#[ignore]`d test `name` of this test binary in a child process
/// (with `GDEX_TEST_CHILD=1` and the extra environment `env`), so that a test
/// that may crash, abort or start process-wide state runs alone; gives the
/// child's exit status (`None` if it was killed after `secs`) and its output.
pub fn run_child(
    name: &str,
    env: &[(&str, &str)],
    secs: u64,
) -> (Option<std::process::ExitStatus>, String) {
    let exe = std::env::current_exe().unwrap();
    let path = ignored_test_path(&exe, name);
    let mut child = std::process::Command::new(exe)
        .args([
            path.as_str(),
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("GDEX_TEST_CHILD", "1")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Drained while the child runs: a child that writes more than a pipe
    // holds (panic backtraces, with RUST_BACKTRACE set) would otherwise
    // block on its write, and look hung.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(mut pipe) = pipe {
                use std::io::Read;
                let _ = pipe.read_to_end(&mut text);
            }
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    );
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // The pipes close when the child (and anything it left running that
    // holds them) is gone.
    let mut out = stdout.join().unwrap_or_default();
    out.push_str(&stderr.join().unwrap_or_default());
    (status, out)
}

/// The full path of the `#[ignore]`d test `name` in the test binary `exe`:
/// in a binary made of several files (`tests/suite.rs`) a test's path
/// starts with its file's module (`shutdown::child_x`), which a caller
/// need not spell out. Panics unless exactly one test ends so.
fn ignored_test_path(exe: &std::path::Path, name: &str) -> String {
    let list = std::process::Command::new(exe)
        .args(["--list", "--ignored"])
        .output()
        .expect("list this binary's tests");
    let suffix = format!("::{name}");
    let found: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .filter_map(|line| line.strip_suffix(": test"))
        .filter(|path| *path == name || path.ends_with(&suffix))
        .map(str::to_owned)
        .collect();
    match found.as_slice() {
        [one] => one.clone(),
        _ => panic!(
            "run_child: want one #[ignore]d test named `{name}` in {}, found {found:?}",
            exe.display()
        ),
    }
}

/// True in a child process started by [`run_child`].
pub fn is_child() -> bool {
    std::env::var_os("GDEX_TEST_CHILD").is_some()
}

/// A fresh directory under the system temp dir, named after `name`, the
/// process and (for the AIO tests, which run again in a child on the
/// other backend) the AIO backend; removed when dropped.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "gdex-{}-{}-{:?}",
            name,
            std::process::id(),
            gdex::aio::backend()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    /// Writes a file `name` in it.
    pub fn file(&self, name: &str, contents: &[u8]) -> std::path::PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A private X server, for the GTK apps' tests; killed on drop.
pub struct Xvfb {
    child: std::process::Child,
    /// Its `DISPLAY`.
    pub display: String,
}

impl Xvfb {
    /// Starts one on a free display (`-displayfd`).
    pub fn start() -> Xvfb {
        use std::io::BufRead;
        let mut child = std::process::Command::new("Xvfb")
            .args([
                "-displayfd",
                "1",
                "-screen",
                "0",
                "1024x768x24",
                "-nolisten",
                "tcp",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("Xvfb is needed (Debian: apt-get install xvfb; .ci/run installs it)");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let number = line.trim();
        assert!(!number.is_empty(), "Xvfb did not report its display");
        Xvfb {
            child,
            display: format!(":{number}"),
        }
    }
}

impl Xvfb {
    /// The environment a GTK app needs to draw here: this `DISPLAY`, GDK's
    /// X11 backend, and GSK's cairo renderer (Xvfb has no GPU: it draws in
    /// software).
    pub fn gtk_env(&self) -> [(&'static str, &str); 3] {
        [
            ("DISPLAY", self.display.as_str()),
            ("GDK_BACKEND", "x11"),
            ("GSK_RENDERER", "cairo"),
        ]
    }

    /// A command for the GTK app `program`, drawing here (never on a
    /// Wayland display the test runs under).
    pub fn gtk_command(&self, program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
        let mut command = std::process::Command::new(program);
        command.envs(self.gtk_env()).env_remove("WAYLAND_DISPLAY");
        command
    }
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Keeps `context`'s thread busy for `busy` in a GLib callback (a 1 ms
/// timeout source whose callback sleeps): a worker busy outside its run
/// slice (P10). Returns once the callback has begun; the receiver hears
/// when it returns.
pub fn busy_in_a_callback(
    context: &glib::MainContext,
    busy: Duration,
) -> std::sync::mpsc::Receiver<()> {
    busy_in_a_callback_while(context, move || std::thread::sleep(busy))
}

/// [`busy_in_a_callback`] until the returned sender is used or dropped (at
/// most 10 s): for a test whose steps must all happen while the worker is
/// busy, however late a loaded machine runs them.
pub fn busy_in_a_callback_until(
    context: &glib::MainContext,
) -> (std::sync::mpsc::Sender<()>, std::sync::mpsc::Receiver<()>) {
    let (release, released) = std::sync::mpsc::channel::<()>();
    let left = busy_in_a_callback_while(context, move || {
        let _ = released.recv_timeout(Duration::from_secs(10));
    });
    (release, left)
}

fn busy_in_a_callback_while(
    context: &glib::MainContext,
    busy: impl FnOnce() + Send + 'static,
) -> std::sync::mpsc::Receiver<()> {
    let (entered_tx, entered) = std::sync::mpsc::channel::<()>();
    let (left_tx, left) = std::sync::mpsc::channel::<()>();
    let mut busy = Some(busy);
    glib::timeout_source_new(
        Duration::from_millis(1),
        None,
        glib::Priority::DEFAULT,
        move || {
            entered_tx.send(()).unwrap();
            // Deliberate: the busy callback the caller asked for.
            if let Some(busy) = busy.take() {
                busy();
            }
            let _ = left_tx.send(());
            glib::ControlFlow::Break
        },
    )
    .attach(Some(context));
    entered.recv().unwrap();
    left
}

/// A timer on `context` counting its ticks, one a millisecond while the
/// loop runs: how often the owner's loop got a turn. Destroy the source
/// when done.
pub fn tick_counter(context: &glib::MainContext) -> (Arc<AtomicUsize>, glib::Source) {
    let ticks = Arc::new(AtomicUsize::new(0));
    let tick = ticks.clone();
    let timer = glib::timeout_source_new(
        Duration::from_millis(1),
        None,
        glib::Priority::DEFAULT,
        move || {
            tick.fetch_add(1, Ordering::Relaxed);
            glib::ControlFlow::Continue
        },
    );
    timer.attach(Some(context));
    (ticks, timer)
}

/// Runs the child test `name` of this binary (see [`run_child`]) for at most
/// `secs` seconds, with the extra environment `env`, and checks that it
/// exited successfully after printing `CHILD-OK`; gives its output.
pub fn child_passes(name: &str, env: &[(&str, &str)], secs: u64) -> String {
    run_child_passing(name, env, secs, "CHILD-OK")
}

/// A pool of `workers` workers whose stall watchdog is off
/// (`stall_threshold(ZERO)`): for tests that sit in one poll on purpose,
/// or that count the "gdex" log domain's messages.
pub fn quiet_pool(workers: usize) -> gdex::ThreadPool {
    gdex::ThreadPool::builder()
        .workers(workers)
        .stall_threshold(Duration::ZERO)
        .build()
        .unwrap()
}

/// Tests of one binary that must not overlap take this lock, one at a
/// time: they set or count something process-wide (the panic handler, the
/// "gdex" log messages, the process's threads) or busy both cores.
pub fn serial() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Counts how fibers (or any code holding one of its guards) left: by their
/// own return, or unwound from outside (the guard's drop while suspended:
/// `std::thread::panicking()` during a forced unwind).
#[derive(Clone, Default)]
pub struct Exits {
    returned: Arc<AtomicUsize>,
    unwound: Arc<AtomicUsize>,
}

/// A guard of [`Exits`]: its drop counts how its holder left.
pub struct Exit(Exits);

impl Drop for Exit {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.unwound.fetch_add(1, Ordering::SeqCst);
        } else {
            self.0.returned.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Exits {
    /// A guard to hold until the fiber leaves.
    pub fn guard(&self) -> Exit {
        Exit(self.clone())
    }
    /// How many left by their own return.
    pub fn returned(&self) -> usize {
        self.returned.load(Ordering::SeqCst)
    }
    /// How many were unwound from outside.
    pub fn unwound(&self) -> usize {
        self.unwound.load(Ordering::SeqCst)
    }
}

/// A small xorshift generator: reproducible randomness without a crate
/// (the same run for the same seed, which must not be zero).
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Tests that set the process-wide panic handler (`gdex::set_panic_handler`)
/// take turns with this lock.
pub fn panic_handler_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sets a panic handler that keeps the messages containing `tag` (all of
/// them for `""`). Take [`panic_handler_lock`] first.
pub fn record_panics(tag: &'static str) -> Arc<Mutex<Vec<String>>> {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let s = seen.clone();
    gdex::set_panic_handler(move |event| {
        if event.message.contains(tag) {
            s.lock().unwrap().push(event.message.clone());
        }
    });
    seen
}

/// The list-model tests' item (L1): `n` in a `glib::BoxedAnyObject`.
pub fn boxed(n: u64) -> glib::Object {
    use glib::prelude::*;
    glib::BoxedAnyObject::new(n).upcast()
}

/// The number in the list model's item at `position` (made by [`boxed`]).
pub fn value_at(model: &gdex::ListModel, position: u32) -> u64 {
    use gio::prelude::*;
    *model
        .item(position)
        .and_downcast::<glib::BoxedAnyObject>()
        .expect("a boxed item")
        .borrow::<u64>()
}

/// Iterates `context` without blocking for `d`, so that whatever falls due
/// on it meanwhile (idles, results returned to it) has run: [`pump_for`]
/// with a condition that never holds.
pub fn pump_during(context: &glib::MainContext, d: Duration) {
    pump_for(context, d, || false);
}

/// [`run_child`], failing the test unless the child exited with success
/// within `secs` and its output holds `marker` (a line the child prints
/// once its body is through, or "" for none); gives the child's output.
pub fn run_child_passing(name: &str, env: &[(&str, &str)], secs: u64, marker: &str) -> String {
    let (status, out) = run_child(name, env, secs);
    assert!(
        status.is_some_and(|s| s.success()) && out.contains(marker),
        "the child `{name}` failed, or hung (status None: killed after {secs} s), or never \
         printed {marker:?} ({status:?}):\n{out}"
    );
    out
}

/// Records the name of the thread its holder is dropped on: a `!Send`
/// future must be dropped on its own thread.
pub struct DroppedOn(pub Arc<Mutex<Vec<String>>>);

impl Drop for DroppedOn {
    fn drop(&mut self) {
        let name = std::thread::current().name().unwrap_or("?").to_owned();
        self.0.lock().unwrap().push(name);
    }
}

/// How many "gdex" criticals and warnings said that a pinned future or
/// fiber was leaked, or dropped on another thread than its own. The first
/// call installs the log handler, for the whole process (it prints each
/// such message to stderr as well); call it before the test begins.
pub fn leak_reports() -> &'static AtomicUsize {
    static LEAKS: std::sync::OnceLock<AtomicUsize> = std::sync::OnceLock::new();
    LEAKS.get_or_init(|| {
        glib::log_set_handler(
            Some("gdex"),
            glib::LogLevels::LEVEL_CRITICAL | glib::LogLevels::LEVEL_WARNING,
            false,
            false,
            |_, level, message| {
                use std::io::Write;
                let _ = writeln!(std::io::stderr(), "[gdex {level:?}] {message}");
                if message.contains("leaked") || message.contains("another thread") {
                    leak_reports().fetch_add(1, Ordering::SeqCst);
                }
            },
        );
        AtomicUsize::new(0)
    })
}

/// The names of this process's threads now, sorted (from /proc).
pub fn thread_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_owned())
        .collect();
    names.sort();
    names
}

/// Polls `future` once with `waker`.
pub fn poll_with<F: Future + Unpin>(
    future: &mut F,
    waker: &std::task::Waker,
) -> std::task::Poll<F::Output> {
    std::pin::Pin::new(future).poll(&mut std::task::Context::from_waker(waker))
}

/// Sets its flag when dropped.
pub struct SetOnDrop(pub Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The example `name`'s binary, which `cargo test` builds beside the test
/// binaries; panics, saying how to build it, if it is missing or older
/// than its source.
pub fn example_exe(name: &str) -> std::path::PathBuf {
    use std::path::Path;
    let deps = std::env::current_exe().unwrap();
    let exe = deps
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("examples")
        .join(name);
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let modified = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    // One file, or a directory of them (`examples/<name>/main.rs` and its
    // modules): the newest counts.
    let sources: Vec<_> = match std::fs::read_dir(examples.join(name)) {
        Ok(dir) => dir.flatten().map(|e| e.path()).collect(),
        Err(_) => vec![examples.join(format!("{name}.rs"))],
    };
    let newest_source = sources.iter().filter_map(|s| modified(s)).max();
    assert!(
        newest_source.is_some(),
        "no source for the example {name} under {}",
        examples.display()
    );
    assert!(
        modified(&exe) >= newest_source,
        "{} is missing or older than its source: a plain `cargo test` builds the examples; \
         with a filter, build it first (`cargo build --example {name}`)",
        exe.display()
    );
    exe
}

/// A private message bus: `dbus-daemon --session` on a socket in a temp
/// dir of its own, stopped when dropped. `.ci/run` installs `dbus-daemon`.
pub struct PrivateBus {
    daemon: std::process::Child,
    pub address: String,
    _dir: TempDir,
}

impl PrivateBus {
    pub fn start(name: &str) -> PrivateBus {
        use std::io::BufRead;
        let dir = TempDir::new(&format!("bus-{name}"));
        let mut command = std::process::Command::new("dbus-daemon");
        // SAFETY: prctl is async-signal-safe and the closure allocates
        // nothing, as pre_exec requires. The daemon gets SIGTERM when the
        // thread that started it ends (the test's), or the process does,
        // even aborted by a watchdog: no daemon outlives its test.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let mut daemon = command
            .args(["--session", "--nofork", "--print-address=1"])
            .arg(format!("--address=unix:dir={}", dir.0.display()))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect(
                "cannot start dbus-daemon: install it (`apt-get install dbus-daemon`, as .ci/run \
                 does) to run the tests that need a message bus",
            );
        let mut address = String::new();
        std::io::BufReader::new(daemon.stdout.take().unwrap())
            .read_line(&mut address)
            .unwrap();
        assert!(!address.trim().is_empty(), "dbus-daemon printed no address");
        PrivateBus {
            daemon,
            address: address.trim().to_owned(),
            _dir: dir,
        }
    }

    /// A new connection to the bus (registered: it has a unique name).
    pub fn connect(&self) -> gio::DBusConnection {
        gio::DBusConnection::for_address_sync(
            &self.address,
            gio::DBusConnectionFlags::AUTHENTICATION_CLIENT
                | gio::DBusConnectionFlags::MESSAGE_BUS_CONNECTION,
            None,
            gio::Cancellable::NONE,
        )
        .expect("connect to the private bus")
    }
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

/// A flag a fiber or task waits on ([`lowered`](Baton::lowered)), raised and
/// woken from any thread; its future keeps the last waker it was polled with.
pub struct Baton {
    pub set: AtomicBool,
    pub waker: futures::task::AtomicWaker,
}

impl Baton {
    /// `n` batons, none raised.
    pub fn many(n: usize) -> Arc<Vec<Baton>> {
        Arc::new(
            (0..n)
                .map(|_| Baton {
                    set: AtomicBool::new(false),
                    waker: futures::task::AtomicWaker::new(),
                })
                .collect(),
        )
    }

    pub fn raise(&self) {
        self.set.store(true, Ordering::Release);
        self.waker.wake();
    }

    /// Ready once the baton is raised; lowers it again.
    pub fn lowered(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            if self.set.swap(false, Ordering::AcqRel) {
                return std::task::Poll::Ready(());
            }
            self.waker.register(cx.waker());
            if self.set.swap(false, Ordering::AcqRel) {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
    }
}

/// A waker that does nothing when woken and runs `on_drop` when its last
/// clone is dropped: user code that a primitive holding it must not run
/// under its lock (a drop that uses the same primitive would deadlock).
pub fn waker_running_on_drop(on_drop: impl FnOnce() + Send + 'static) -> std::task::Waker {
    type OnDrop = Mutex<Option<Box<dyn FnOnce() + Send>>>;
    struct RunOnDrop(OnDrop);
    impl std::task::Wake for RunOnDrop {
        fn wake(self: Arc<Self>) {}
    }
    impl Drop for RunOnDrop {
        fn drop(&mut self) {
            if let Some(f) = self.0.lock().unwrap().take() {
                f();
            }
        }
    }
    std::task::Waker::from(Arc::new(RunOnDrop(Mutex::new(Some(Box::new(on_drop))))))
}

/// The message of a caught panic (a `String` or a `&str` payload).
pub fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a panic without a message".to_owned())
}
