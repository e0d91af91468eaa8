//! SHA-256 of every file under a directory, the gdex way: `sha256sum`'s
//! output, `find -type f`'s walk, and both cores busy.
//!
//! ```text
//! checksum [OPTION]... [PATH]...      sum every regular file under each
//!                                     PATH (a file is summed itself, `-`
//!                                     is standard input); `.` if none
//! checksum -c [OPTION]... [SUMFILE]...
//!                                     check the sums listed in each
//!                                     SUMFILE (`-`, or none: standard input)
//! ```
//!
//! The options are `sha256sum`'s: `-b`/`--binary`, `-t`/`--text`, `--tag`
//! and `-z`/`--zero` for sums; `--ignore-missing`, `--quiet`, `--status`,
//! `--strict` and `-w`/`--warn` for `-c`; `--help`, `--version` and `--`.
//! Misuse gets `sha256sum`'s message (getopt's words for an unknown or
//! ambiguous option) and its exit status, 1.
//!
//! - The walk runs on the blocking lane (`gdex::spawn_blocking`), a
//!   directory at a time, entries in byte order, symlinks not followed,
//!   only regular files kept (what `find PATH -type f` lists). It hands the
//!   files out through a bounded `gdex::channel` as it finds them, so the
//!   hashing starts with the first file.
//! - Hashing tasks on the pool (a few per worker) open and read each file
//!   with `gdex::aio` (io_uring on each worker, or the blocking lane where
//!   io_uring is not available) and hash it as the chunks come in, to the
//!   end of the file (a read that gives nothing: the size `stat` gives is
//!   only a hint, 0 for a FIFO or a /proc file that has content).
//! - The main thread prints the results in the walk's order, as soon as
//!   each is next, and redraws a progress line on a terminal. A semaphore
//!   bounds how many files are between the walk and the printer, so memory
//!   stays bounded whatever the tree's size.
//! - Ctrl-C (SIGINT) races the work through `gdex::first`: the work is
//!   dropped, which cancels every task, and the program says so.
//!
//! Output is `sha256sum`'s, byte for byte: `<sha256>  <name>` (`*` for
//! `-b`, `SHA256 (<name>) = <sha256>` for `--tag`), and a name with a
//! backslash, newline or carriage return written escaped on a line that
//! starts with a backslash (not with `-z`, whose lines end with a NUL).
//! Files that cannot be read are reported on stderr, their names quoted as
//! `sha256sum` quotes them, and make the exit status 1. `-c` reads sum
//! files as `sha256sum -c` does (both formats, comments, blank lines, CRLF,
//! escaped names, a `-` name for standard input) and prints `<name>: OK`,
//! `FAILED` or `FAILED open or read` and its warnings, with its exit
//! status. No input makes it panic: a failure is that file's.
//!
//! Run it with `cargo run --release --example checksum -- <directory>`.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::{BufRead, Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use sha2::{Digest, Sha256};

/// Bytes per read.
const CHUNK: usize = 256 * 1024;
/// Hashing tasks per pool worker.
const HASHERS_PER_WORKER: usize = 8;
/// Files between the walk and the printer, at most.
const WINDOW: usize = 4096;
/// Files handed from the walk to a hasher, and from a hasher to the
/// printer, at a time: one wake-up per batch, not per file.
const BATCH: usize = 32;
/// A batch that is not full goes anyway once its first file has waited
/// this long (a slow walk, sums typed on stdin).
const BATCH_WAIT: Duration = Duration::from_millis(2);
/// The name messages start with.
const PROGRAM: &str = "checksum";
/// Descriptors kept free beside the hashers' files, on top of those open
/// when the run starts and a ring per worker: the walk's directory, the
/// sum file, and what the runtime may open on the way.
const SPARE_FDS: u64 = 8;
/// How long an open that finds no free descriptor waits, at most, while
/// the hashers hold files they will close (and for a moment when they
/// hold none: something else may close one).
const EMFILE_PATIENCE: Duration = Duration::from_secs(60);
const EMFILE_GRACE: Duration = Duration::from_millis(20);

/// Whether the locale's character set is UTF-8 (else each byte is a
/// character, and only ASCII is printable), for quoting names.
static UTF8: AtomicBool = AtomicBool::new(false);

fn main() {
    // As sha256sum, which quotes a name's bytes as the locale sees them.
    // SAFETY: no other thread exists yet (setlocale is not thread-safe),
    // and both strings are NUL-terminated; nl_langinfo's result is read
    // before anything could change the locale again.
    let utf8 = unsafe {
        libc::setlocale(libc::LC_CTYPE, c"".as_ptr());
        std::ffi::CStr::from_ptr(libc::nl_langinfo(libc::CODESET)).to_bytes() == b"UTF-8"
    };
    UTF8.store(utf8, Ordering::Relaxed);
    let options = Options::parse(std::env::args_os().skip(1));
    let progress = Arc::new(Progress::default());
    // SAFETY: isatty has no preconditions.
    let terminal = unsafe { libc::isatty(2) } == 1;
    let ticker = terminal.then(|| gdex::spawn_local(show_progress(progress.clone())));
    let interrupted = gdex::unix_signal(libc::SIGINT)
        .map(|()| Err(gdex::Error::Cancelled))
        .boxed_local();
    let work = run(options, progress.clone()).map(Ok).boxed_local();
    let outcome = gdex::block_on(gdex::first([work, interrupted]));
    if let Some(ticker) = ticker {
        drop(ticker); // cancelled: no wait for its next tick
        let _ = std::io::stderr().write_all(b"\r\x1b[K");
    }
    match outcome {
        Ok(status) => std::process::exit(status),
        Err(_) => {
            say(&[format!(
                "cancelled after {} files ({} bytes)",
                progress.done.load(Ordering::Relaxed),
                progress.bytes.load(Ordering::Relaxed)
            )
            .as_bytes()]);
            std::process::exit(130);
        }
    }
}

/// The command line, as `sha256sum` reads it.
#[derive(Default)]
struct Options {
    check: bool,
    /// `-b` (true) or `-t` (false), whichever came last.
    binary: Option<bool>,
    tag: bool,
    zero: bool,
    ignore_missing: bool,
    status: bool,
    warn: bool,
    quiet: bool,
    strict: bool,
    operands: Vec<OsString>,
}

#[derive(Clone, Copy)]
enum Flag {
    Check,
    IgnoreMissing,
    Quiet,
    Status,
    Warn,
    Strict,
    Tag,
    Zero,
    Binary,
    Text,
    Help,
    Version,
}

/// `sha256sum`'s long options, in its order, which its messages keep.
const LONG_OPTIONS: [(&str, Flag); 12] = [
    ("check", Flag::Check),
    ("ignore-missing", Flag::IgnoreMissing),
    ("quiet", Flag::Quiet),
    ("status", Flag::Status),
    ("warn", Flag::Warn),
    ("strict", Flag::Strict),
    ("tag", Flag::Tag),
    ("zero", Flag::Zero),
    ("binary", Flag::Binary),
    ("text", Flag::Text),
    ("help", Flag::Help),
    ("version", Flag::Version),
];

impl Options {
    /// Reads the arguments as GNU getopt does: options anywhere (up to the
    /// first operand if `POSIXLY_CORRECT` is set) until `--`, short ones
    /// bundled, long ones by any unambiguous prefix. Misuse exits with
    /// `sha256sum`'s message and status; `--help` and `--version` print and
    /// exit when they are read.
    fn parse(args: impl Iterator<Item = OsString>) -> Options {
        let posix = std::env::var_os("POSIXLY_CORRECT").is_some();
        let mut options = Options::default();
        let mut args = args.map(OsString::into_vec);
        while let Some(arg) = args.next() {
            if arg == b"--" {
                options
                    .operands
                    .extend(args.by_ref().map(OsString::from_vec));
                break;
            }
            if let Some(long) = arg.strip_prefix(b"--") {
                let (name, value) = match long.iter().position(|&b| b == b'=') {
                    Some(at) => (&long[..at], Some(&long[at + 1..])),
                    None => (long, None),
                };
                let candidates: Vec<_> = match LONG_OPTIONS.iter().find(|o| o.0.as_bytes() == name)
                {
                    Some(exact) => vec![exact],
                    None => LONG_OPTIONS
                        .iter()
                        .filter(|o| o.0.as_bytes().starts_with(name))
                        .collect(),
                };
                let (full, flag) = match candidates[..] {
                    [] => usage_error(&[b"unrecognized option '", &arg, b"'"]),
                    [&one] => one,
                    _ => {
                        let mut message = b"option '".to_vec();
                        message.extend(&arg);
                        message.extend(b"' is ambiguous; possibilities:");
                        for (name, _) in candidates {
                            message.extend(format!(" '--{name}'").as_bytes());
                        }
                        usage_error(&[&message])
                    }
                };
                if value.is_some() {
                    usage_error(&[
                        b"option '--",
                        full.as_bytes(),
                        b"' doesn't allow an argument",
                    ]);
                }
                options.apply(flag);
            } else if arg.len() > 1 && arg[0] == b'-' {
                for &short in &arg[1..] {
                    let flag = match short {
                        b'b' => Flag::Binary,
                        b'c' => Flag::Check,
                        b't' => Flag::Text,
                        b'w' => Flag::Warn,
                        b'z' => Flag::Zero,
                        _ => usage_error(&[b"invalid option -- '", &[short], b"'"]),
                    };
                    options.apply(flag);
                }
            } else {
                options.operands.push(OsString::from_vec(arg));
                if posix {
                    options
                        .operands
                        .extend(args.by_ref().map(OsString::from_vec));
                    break;
                }
            }
        }
        options.validate();
        options
    }

    fn apply(&mut self, flag: Flag) {
        match flag {
            Flag::Check => self.check = true,
            Flag::IgnoreMissing => self.ignore_missing = true,
            // The last of these three wins.
            Flag::Quiet => (self.quiet, self.status, self.warn) = (true, false, false),
            Flag::Status => (self.quiet, self.status, self.warn) = (false, true, false),
            Flag::Warn => (self.quiet, self.status, self.warn) = (false, false, true),
            Flag::Strict => self.strict = true,
            Flag::Tag => (self.tag, self.binary) = (true, Some(true)),
            Flag::Zero => self.zero = true,
            Flag::Binary => self.binary = Some(true),
            Flag::Text => self.binary = Some(false),
            Flag::Help => {
                let help = HELP.replace("{PROGRAM}", PROGRAM);
                let _ = std::io::stdout().write_all(help.as_bytes());
                std::process::exit(0);
            }
            Flag::Version => {
                let version = format!("{PROGRAM} (gdex) {}\n", env!("CARGO_PKG_VERSION"));
                let _ = std::io::stdout().write_all(version.as_bytes());
                std::process::exit(0);
            }
        }
    }

    /// `sha256sum`'s checks of the options together, in its order.
    fn validate(&self) {
        let check = self.check;
        if self.tag && self.binary == Some(false) {
            usage_error(&[b"--tag does not support --text mode"]);
        }
        if self.zero && check {
            usage_error(&[b"the --zero option is not supported when verifying checksums"]);
        }
        if self.tag && check {
            usage_error(&[b"the --tag option is meaningless when verifying checksums"]);
        }
        if self.binary.is_some() && check {
            usage_error(&[
                b"the --binary and --text options are meaningless when verifying checksums",
            ]);
        }
        for (set, name) in [
            (self.ignore_missing, "--ignore-missing"),
            (self.status, "--status"),
            (self.warn, "--warn"),
            (self.quiet, "--quiet"),
            (self.strict, "--strict"),
        ] {
            if set && !check {
                usage_error(&[
                    b"the ",
                    name.as_bytes(),
                    b" option is meaningful only when verifying checksums",
                ]);
            }
        }
    }
}

const HELP: &str = "\
Usage: {PROGRAM} [OPTION]... [PATH]...
  or:  {PROGRAM} -c [OPTION]... [SUMFILE]...
Print or check SHA256 (256-bit) checksums, as sha256sum does, of every
regular file under each PATH: a directory is walked as `find PATH -type f`
walks it, a file is summed itself, and - is standard input. With no PATH,
sum the current directory; with -c and no SUMFILE, read standard input.

  -b, --binary          mark the files as read in binary mode ('*')
  -c, --check           read checksums from the SUMFILEs and check them
      --tag             create a BSD-style checksum
  -t, --text            mark the files as read in text mode (the default)
  -z, --zero            end each output line with NUL, not newline,
                          and disable file name escaping

The following five options are useful only when verifying checksums:
      --ignore-missing  don't fail or report status for missing files
      --quiet           don't print OK for each successfully verified file
      --status          don't output anything, status code shows success
      --strict          exit non-zero for improperly formatted checksum lines
  -w, --warn            warn about improperly formatted checksum lines

      --help            display this help and exit
      --version         output version information and exit

Output, verdicts, warnings and exit status are sha256sum's.
";

/// Misuse: the message, where to find help, and exit status 1.
fn usage_error(parts: &[&[u8]]) -> ! {
    say(parts);
    let try_help = format!("Try '{PROGRAM} --help' for more information.\n");
    let _ = std::io::stderr().write_all(try_help.as_bytes());
    std::process::exit(1);
}

/// Writes `checksum: ` and the parts as one line on stderr.
fn say(parts: &[&[u8]]) {
    let mut line = format!("{PROGRAM}: ").into_bytes();
    for part in parts {
        line.extend(*part);
    }
    line.push(b'\n');
    let _ = std::io::stderr().write_all(&line);
}

/// Counters the workers bump and the progress line reads.
#[derive(Default)]
struct Progress {
    found: AtomicU64,
    done: AtomicU64,
    bytes: AtomicU64,
}

/// Consecutive pieces of work, in the order the walk (or the sum file)
/// gives them.
struct Batch {
    /// The first one's place in that order.
    first: u64,
    works: Vec<Work>,
    /// Their places in the window; given back once they are printed.
    _permits: Vec<gdex::Permit>,
}

enum Work {
    /// Hash this file, and with `-c` check it against this digest.
    Hash(PathBuf, Option<[u8; 32]>),
    /// Known without hashing on the pool: passes the hashers as it is.
    Known(Item),
}

/// What the printer prints, in the feeder's order.
enum Item {
    /// A file's digest or failure, and with `-c` the digest listed.
    File {
        name: PathBuf,
        expected: Option<[u8; 32]>,
        result: Result<[u8; 32], Failure>,
    },
    /// `-w`: this line of this sum file is improperly formatted.
    Improper { sum_file: OsString, line: u64 },
    /// The end of a sum file: its closing warnings and its verdict.
    SumFileEnd(SumFileEnd),
}

/// Why a file has no digest.
struct Failure {
    /// The system's words ("Permission denied").
    message: String,
    /// It does not exist (`--ignore-missing` leaves it out).
    missing: bool,
}

impl Failure {
    fn new(message: String) -> Failure {
        Failure {
            message,
            missing: false,
        }
    }
}

/// What `-c` found in a sum file besides the files to check.
struct SumFileEnd {
    /// As messages name it (`standard input` for `-`).
    name: OsString,
    /// Whether it had a properly formatted line.
    proper: bool,
    improper: u64,
    /// It could not be opened or read to its end: this message, no
    /// closing warnings, and a failure.
    error: Option<Vec<u8>>,
}

/// What the printer gets for a batch.
struct Done {
    first: u64,
    items: Vec<Item>,
    _permits: Vec<gdex::Permit>,
}

/// The whole run; gives the exit status.
async fn run(options: Options, progress: Arc<Progress>) -> i32 {
    let pool = gdex::ThreadPool::default().scheduler();
    let window = gdex::Semaphore::new(WINDOW);
    let (items, queue) = gdex::channel::<Batch>(WINDOW / BATCH);
    let (results, printed) = gdex::channel::<Done>(WINDOW / BATCH);
    let workers = gdex::ThreadPool::default().workers();
    let files = Arc::new(OpenFiles::new(workers * HASHERS_PER_WORKER, workers));
    let check = options.check;
    let mut operands = options.operands.clone();
    if operands.is_empty() {
        operands.push(if check { "-" } else { "." }.into());
    }
    // The feeder: the walk, or the sum files' lines.
    let feeder = {
        let progress = progress.clone();
        let window = window.clone();
        let files = files.clone();
        let warn = options.warn;
        gdex::spawn_blocking(move || {
            let mut feed = Feed::new(&items, &window, &progress, &files);
            if check {
                let mut parser = SumParser::default();
                for name in &operands {
                    read_sum_file(name, &mut feed, &mut parser, warn);
                }
            } else {
                for arg in &operands {
                    feed.root(Path::new(arg));
                }
            }
            feed.flush();
        })
    };
    // The hashers: a group, so that dropping `run` (Ctrl-C) cancels them.
    let group = gdex::TaskGroup::builder().scheduler(pool.clone()).build();
    for _ in 0..workers * HASHERS_PER_WORKER {
        let queue = queue.clone();
        let results = results.clone();
        let progress = progress.clone();
        let files = files.clone();
        group
            .spawn(async move {
                let mut buf = Vec::with_capacity(CHUNK);
                while let Ok(batch) = queue.recv().await {
                    let mut done = Vec::with_capacity(batch.works.len());
                    for work in batch.works {
                        let item = match work {
                            Work::Hash(name, expected) => {
                                // A panic is this file's failure, not the
                                // run's end.
                                let result =
                                    AssertUnwindSafe(hash_file(&name, &mut buf, &progress, &files))
                                        .catch_unwind()
                                        .await
                                        .unwrap_or_else(|panic| {
                                            Err(Failure::new(panic_words(&*panic)))
                                        });
                                Item::File {
                                    name,
                                    expected,
                                    result,
                                }
                            }
                            Work::Known(item) => item,
                        };
                        progress.done.fetch_add(1, Ordering::Relaxed);
                        done.push(item);
                    }
                    let done = Done {
                        first: batch.first,
                        items: done,
                        _permits: batch._permits,
                    };
                    if results.send(done).await.is_err() {
                        break;
                    }
                }
            })
            .expect("the group is open");
    }
    drop((queue, results));
    // The printer: here, on the main thread, in the feeder's order.
    let mut printer = Printer::new(&options);
    let mut waiting = BTreeMap::new();
    let mut next = 0u64;
    while let Ok(batches) = printed.recv_all().await {
        for done in batches {
            waiting.insert(done.first, done);
        }
        while let Some(done) = waiting.remove(&next) {
            next += done.items.len() as u64;
            for item in done.items {
                printer.print(item);
            }
        }
        printer.flush();
    }
    // Neither fails: a hasher catches its panics, and the feeder is never
    // cancelled. If one did all the same, the run says so and fails.
    if let Err(err) = group.close().await {
        say(&[
            b"internal error: a hashing task failed: ",
            err.to_string().as_bytes(),
        ]);
        printer.ok = false;
    }
    if let Err(err) = feeder.await {
        say(&[
            b"internal error: the walk or the sum file's reader failed: ",
            err.to_string().as_bytes(),
        ]);
        printer.ok = false;
    }
    printer.finish()
}

/// A caught panic's message.
fn panic_words(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned());
    format!("internal error: {text}")
}

/// Hashes one file with AIO reads, to its end; the failure is in the
/// system's words ("Permission denied").
async fn hash_file(
    path: &Path,
    buf: &mut Vec<u8>,
    progress: &Progress,
    files: &OpenFiles,
) -> Result<[u8; 32], Failure> {
    let failure = |err: gdex::Error| {
        let text = err.to_string();
        Failure {
            message: text.rsplit(": ").next().unwrap_or(&text).to_owned(),
            missing: err.matches(gio::IOErrorEnum::NotFound),
        }
    };
    if path.as_os_str().as_bytes().contains(&0) {
        // No file has such a name (the parser never makes one): the
        // system's words for what open(2) cannot even be asked.
        return Err(Failure::new("Invalid argument".to_owned()));
    }
    // A place under the process's limit of open files, held until the
    // file is closed (dropped before it: declared first).
    let _place = match &files.places {
        Some(places) => Some(places.acquire().await.map_err(failure)?),
        None => None,
    };
    let mut patience = files.patience();
    let file = loop {
        match gdex::aio::File::open(path).await {
            Err(err)
                if err.matches(gio::IOErrorEnum::TooManyOpenFiles) && patience.wait_for(files) =>
            {
                gdex::sleep(patience.pause).await;
            }
            opened => break opened.map_err(failure)?,
        }
    };
    let _open = files.opened();
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut hasher = Sha256::new();
    let mut offset = 0u64;
    loop {
        let mut chunk = std::mem::take(buf);
        chunk.clear();
        if chunk.capacity() < CHUNK {
            chunk.reserve(CHUNK);
        }
        let chunk = file.read_at(chunk, offset).await.map_err(failure)?;
        let read = chunk.len();
        hasher.update(&chunk);
        *buf = chunk;
        offset += read as u64;
        progress.bytes.fetch_add(read as u64, Ordering::Relaxed);
        // The end: a read that gives nothing, as `sha256sum` reads to the
        // end. The size the file had when it was opened is only a hint
        // that saves that last read: a file whose size `stat` gives as 0
        // may have content all the same (a FIFO, /proc and /sys files,
        // which give a page or so per read), and one that grew goes on.
        if read == 0 || (size > 0 && offset == size) {
            break;
        }
    }
    Ok(hasher.finalize().into())
}

/// Keeps the hashers' open files under the process's limit
/// (`RLIMIT_NOFILE`): a file that finds no free descriptor (`EMFILE`,
/// `ENFILE`) waits for one, as `xargs sha256sum`, one file at a time,
/// never runs out.
struct OpenFiles {
    /// Places for the hashers' open files, if the limit leaves fewer than
    /// one per hasher (else no wait and no cost).
    places: Option<gdex::Semaphore>,
    /// How many files the hashers have open now.
    open: AtomicUsize,
}

impl OpenFiles {
    /// Room for what is open now, a ring per worker and [`SPARE_FDS`].
    fn new(hashers: usize, workers: usize) -> OpenFiles {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit only writes the struct it is given.
        let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
            limit.rlim_cur
        } else {
            libc::RLIM_INFINITY
        };
        let in_use = std::fs::read_dir("/proc/self/fd").map_or(16, |fds| fds.count()) as u64;
        let room = soft
            .saturating_sub(in_use + workers as u64 + SPARE_FDS)
            .max(1);
        OpenFiles {
            places: (room < hashers as u64).then(|| gdex::Semaphore::new(room as usize)),
            open: AtomicUsize::new(0),
        }
    }

    /// Counts a file open until the guard is dropped.
    fn opened(&self) -> impl Drop + '_ {
        struct Open<'a>(&'a AtomicUsize);
        impl Drop for Open<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.open.fetch_add(1, Ordering::Relaxed);
        Open(&self.open)
    }

    fn patience(&self) -> Patience {
        Patience {
            pause: Duration::from_millis(1),
            waited: Duration::ZERO,
        }
    }

    /// `open` (on this blocking-lane thread), waiting while it finds no
    /// free descriptor.
    fn retry<T>(&self, mut open: impl FnMut() -> std::io::Result<T>) -> std::io::Result<T> {
        let mut patience = self.patience();
        loop {
            match open() {
                Err(err)
                    if matches!(err.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
                        && patience.wait_for(self) =>
                {
                    std::thread::sleep(patience.pause)
                }
                other => return other,
            }
        }
    }
}

/// Waiting for a free descriptor: pauses that double up to 50 ms.
struct Patience {
    pause: Duration,
    waited: Duration,
}

impl Patience {
    /// Whether to wait once more (then for `self.pause`): while the
    /// hashers hold files, which they will close, or for a moment, up to
    /// [`EMFILE_PATIENCE`] in all.
    fn wait_for(&mut self, files: &OpenFiles) -> bool {
        let others = files.open.load(Ordering::Relaxed) > 0;
        if self.waited >= EMFILE_PATIENCE || (!others && self.waited >= EMFILE_GRACE) {
            return false;
        }
        if self.waited > Duration::ZERO {
            self.pause = (self.pause * 2).min(Duration::from_millis(50));
        }
        self.waited += self.pause;
        true
    }
}

/// Hashes standard input from where it is to its end, as `sha256sum`
/// reads `-` (again at its end the second time: the digest of nothing).
fn hash_stdin(progress: &Progress) -> Result<[u8; 32], Failure> {
    let mut stdin = std::io::stdin().lock();
    let mut hasher = Sha256::new();
    let mut buf = vec![0; CHUNK];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => return Ok(hasher.finalize().into()),
            Ok(read) => {
                hasher.update(&buf[..read]);
                progress.bytes.fetch_add(read as u64, Ordering::Relaxed);
            }
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(Failure::new(os_words(&err))),
        }
    }
}

/// The feeder's side of the pipeline: numbers the work, takes a window
/// place for each (waiting, on this blocking-lane thread, while the window
/// is full) and hands it on in batches.
struct Feed<'a> {
    items: &'a gdex::Sender<Batch>,
    window: &'a gdex::Semaphore,
    progress: &'a Progress,
    files: &'a OpenFiles,
    /// The place of the next piece of work.
    next: u64,
    pending: Vec<Work>,
    permits: Vec<gdex::Permit>,
    /// When the first pending piece came.
    since: Instant,
}

impl<'a> Feed<'a> {
    fn new(
        items: &'a gdex::Sender<Batch>,
        window: &'a gdex::Semaphore,
        progress: &'a Progress,
        files: &'a OpenFiles,
    ) -> Self {
        Feed {
            items,
            window,
            progress,
            files,
            next: 0,
            pending: Vec::with_capacity(BATCH),
            permits: Vec::with_capacity(BATCH),
            since: Instant::now(),
        }
    }

    fn push(&mut self, work: Work) {
        let permit = match self.window.try_acquire() {
            Some(permit) => permit,
            None => {
                // The window is full: what we hold must go first, or the
                // printer would wait for it while we wait for the printer.
                self.flush();
                gdex::wait_for(self.window.acquire()).expect("the window stays open")
            }
        };
        if self.pending.is_empty() {
            self.since = Instant::now();
        }
        self.pending.push(work);
        self.permits.push(permit);
        self.progress.found.fetch_add(1, Ordering::Relaxed);
        if self.pending.len() == BATCH || self.since.elapsed() >= BATCH_WAIT {
            self.flush();
        }
    }

    /// A file's outcome known here (standard input, a walk's failure).
    fn known(
        &mut self,
        name: PathBuf,
        expected: Option<[u8; 32]>,
        result: Result<[u8; 32], Failure>,
    ) {
        self.push(Work::Known(Item::File {
            name,
            expected,
            result,
        }));
    }

    /// Flushes a batch whose first piece has waited long enough.
    fn flush_if_waited(&mut self) {
        if !self.pending.is_empty() && self.since.elapsed() >= BATCH_WAIT {
            self.flush();
        }
    }

    /// Hands on what is pending.
    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let batch = Batch {
            first: self.next,
            works: std::mem::replace(&mut self.pending, Vec::with_capacity(BATCH)),
            _permits: std::mem::replace(&mut self.permits, Vec::with_capacity(BATCH)),
        };
        self.next += batch.works.len() as u64;
        // Fails only if the hashers are gone (Ctrl-C): stop quietly.
        let _ = gdex::wait_for(self.items.send(batch));
    }

    /// A command-line argument: `-` is standard input, a directory is
    /// walked (followed if it is a symlink, as `find -H` does), anything
    /// else summed as given.
    fn root(&mut self, path: &Path) {
        if path.as_os_str() == "-" {
            // Here, in order: a second `-` reads on from where the first
            // stopped, as in sha256sum.
            self.flush();
            let result = hash_stdin(self.progress);
            return self.known(path.to_path_buf(), None, result);
        }
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => self.walk(path.to_path_buf()),
            Ok(_) => self.push(Work::Hash(path.to_path_buf(), None)),
            Err(err) => self.known(path.to_path_buf(), None, Err(Failure::new(os_words(&err)))),
        }
    }

    /// Depth first, each directory's entries in byte order: regular files
    /// are summed, directories entered, symlinks and special files left
    /// alone (`find -type f`).
    fn walk(&mut self, dir: PathBuf) {
        let entries = match self.files.retry(|| std::fs::read_dir(&dir)) {
            Ok(entries) => entries,
            Err(err) => return self.known(dir, None, Err(Failure::new(os_words(&err)))),
        };
        let mut listed: Vec<(OsString, std::fs::FileType)> = Vec::new();
        for entry in entries {
            match entry.and_then(|e| Ok((e.file_name(), e.file_type()?))) {
                Ok(entry) => listed.push(entry),
                Err(err) => return self.known(dir, None, Err(Failure::new(os_words(&err)))),
            }
        }
        listed.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        for (name, kind) in listed {
            let path = dir.join(name);
            if kind.is_dir() {
                self.walk(path);
            } else if kind.is_file() {
                self.push(Work::Hash(path, None));
            }
        }
        // Before the next directory's listing, which may be slow.
        self.flush_if_waited();
    }
}

/// An I/O error in the system's words, as `sha256sum` prints them.
fn os_words(err: &std::io::Error) -> String {
    let text = err.to_string();
    text.split(" (os error").next().unwrap_or(&text).to_owned()
}

/// Feeds the files listed in one sum file, line by line as `sha256sum -c`
/// reads them, then the file's end with what it found.
fn read_sum_file(name: &OsStr, feed: &mut Feed, parser: &mut SumParser, warn: bool) {
    let is_stdin = name == "-";
    let shown: OsString = if is_stdin {
        "standard input".into()
    } else {
        name.to_owned()
    };
    let mut end = SumFileEnd {
        name: shown.clone(),
        proper: false,
        improper: 0,
        error: None,
    };
    let source: Box<dyn Read> = if is_stdin {
        Box::new(std::io::stdin())
    } else {
        match feed.files.retry(|| std::fs::File::open(name)) {
            Ok(file) => Box::new(file),
            Err(err) => {
                end.error = Some(
                    [
                        &quotef(name.as_bytes())[..],
                        b": ",
                        os_words(&err).as_bytes(),
                    ]
                    .concat(),
                );
                return feed.push(Work::Known(Item::SumFileEnd(end)));
            }
        }
    };
    let mut reader = std::io::BufReader::new(source);
    let mut number = 0u64;
    let mut line = Vec::new();
    loop {
        if reader.buffer().is_empty() {
            // The next read may wait (sums typed or piped in): what we
            // have goes now.
            feed.flush();
        }
        number += 1;
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(_) => {
                // The lines read so far are still checked; sha256sum says
                // no more than this.
                end.error = Some([&quotef(shown.as_bytes())[..], b": read error"].concat());
                break;
            }
        }
        if line[0] == b'#' {
            continue; // a comment
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if line.is_empty() {
            continue;
        }
        match parser.parse(&line) {
            Some((digest, file)) if !(is_stdin && file == b"-") => {
                end.proper = true;
                let file = PathBuf::from(OsString::from_vec(file));
                if file.as_os_str() == "-" {
                    // Standard input, here and in order, as `sha256sum`.
                    feed.flush();
                    let result = hash_stdin(feed.progress);
                    feed.known(file, Some(digest), result);
                } else {
                    feed.push(Work::Hash(file, Some(digest)));
                }
            }
            _ => {
                end.improper += 1;
                if warn {
                    feed.push(Work::Known(Item::Improper {
                        sum_file: shown.clone(),
                        line: number,
                    }));
                }
            }
        }
    }
    feed.push(Work::Known(Item::SumFileEnd(end)));
}

/// Reads sum lines as `sha256sum -c` does (coreutils 9.1's `split_3`).
#[derive(Default)]
struct SumParser {
    /// Whether the lines are BSD-reversed (`<hex> <name>`, one blank):
    /// unknown until a line says, then the same for every later line, in
    /// every later sum file.
    reversed: Option<bool>,
}

impl SumParser {
    /// One line without its line end: `<hex>  <name>`, `<hex> *<name>`,
    /// `<hex> <name>` or `SHA256 (<name>) = <hex>`, after blanks, with a
    /// backslash first if the name is escaped. Gives the digest and the
    /// name, or `None` for an improperly formatted line.
    fn parse(&mut self, s: &[u8]) -> Option<([u8; 32], Vec<u8>)> {
        // A C string's view: a NUL at the end.
        let at = |i: usize| s.get(i).copied().unwrap_or(0);
        let mut i = 0;
        while is_blank(at(i)) {
            i += 1;
        }
        let escaped = at(i) == b'\\';
        i += usize::from(escaped);
        if s[i..].starts_with(b"SHA256") {
            i += 6;
            i += usize::from(at(i) == b' ');
            if at(i) != b'(' {
                return None;
            }
            return tagged(&s[i + 1..], escaped);
        }
        // The digest, a blank, and at least a byte more (sha256sum's
        // minimum, one more if a second backslash follows).
        if s.len() - i < 66 + usize::from(at(i) == b'\\') {
            return None;
        }
        let hex = &s[i..i + 64];
        i += 64;
        if !is_blank(at(i)) {
            return None;
        }
        i += 1;
        let digest = parse_hex(hex)?;
        if s.len() - i == 1 || !matches!(at(i), b' ' | b'*') {
            // BSD-reversed: not after a line that was not.
            if self.reversed == Some(false) {
                return None;
            }
            self.reversed = Some(true);
        } else if self.reversed != Some(true) {
            // The mode marker (`*` binary, ` ` text) is not the name's.
            self.reversed = Some(false);
            i += 1;
        }
        Some((digest, c_name(&s[i..], escaped)?))
    }
}

/// The rest of `SHA256 (<name>) = <hex>` after the `(`: the name ends at
/// the last `)`, blanks may surround the `=`, and the digest ends the line
/// (or comes before a NUL).
fn tagged(s: &[u8], escaped: bool) -> Option<([u8; 32], Vec<u8>)> {
    let close = s.iter().rposition(|&b| b == b')')?;
    let name = c_name(&s[..close], escaped)?;
    let at = |i: usize| s.get(i).copied().unwrap_or(0);
    let mut i = close + 1;
    while is_blank(at(i)) {
        i += 1;
    }
    if at(i) != b'=' {
        return None;
    }
    i += 1;
    while is_blank(at(i)) {
        i += 1;
    }
    if at(i + 64) != 0 {
        return None;
    }
    Some((parse_hex(s.get(i..i + 64)?)?, name))
}

fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// A name as sha256sum's C strings hold it: an escaped name is unescaped
/// (`\\`, `\n`, `\r`; anything else, or a NUL, is improper), a plain one
/// ends at its first NUL.
fn c_name(name: &[u8], escaped: bool) -> Option<Vec<u8>> {
    if !escaped {
        return Some(name.split(|&b| b == 0).next().unwrap_or_default().to_vec());
    }
    let mut out = Vec::with_capacity(name.len());
    let mut bytes = name.iter();
    while let Some(&b) = bytes.next() {
        match b {
            0 => return None,
            b'\\' => match bytes.next()? {
                b'\\' => out.push(b'\\'),
                b'n' => out.push(b'\n'),
                b'r' => out.push(b'\r'),
                _ => return None,
            },
            _ => out.push(b),
        }
    }
    Some(out)
}

/// 64 hex digits, either case.
fn parse_hex(hex: &[u8]) -> Option<[u8; 32]> {
    let value = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    };
    let mut digest = [0u8; 32];
    for (byte, pair) in digest.iter_mut().zip(hex.chunks_exact(2)) {
        *byte = value(pair[0])? << 4 | value(pair[1])?;
    }
    (hex.len() == 64).then_some(digest)
}

/// Writes results as `sha256sum` does, and keeps its counts.
struct Printer {
    out: std::io::BufWriter<std::io::Stdout>,
    binary: bool,
    tag: bool,
    zero: bool,
    ignore_missing: bool,
    status: bool,
    quiet: bool,
    strict: bool,
    /// The current sum file's counts.
    unreadable: u64,
    mismatched: u64,
    matched: bool,
    /// No failure so far: the exit status.
    ok: bool,
}

impl Printer {
    fn new(options: &Options) -> Printer {
        Printer {
            out: std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout()),
            binary: options.binary == Some(true),
            tag: options.tag,
            zero: options.zero,
            ignore_missing: options.ignore_missing,
            status: options.status,
            quiet: options.quiet,
            strict: options.strict,
            unreadable: 0,
            mismatched: 0,
            matched: false,
            ok: true,
        }
    }

    fn print(&mut self, item: Item) {
        match item {
            Item::File {
                name,
                expected,
                result,
            } => {
                let name = name.as_os_str().as_bytes();
                match (result, expected) {
                    (Ok(digest), None) => self.sum_line(name, &digest),
                    (Ok(digest), Some(expected)) => {
                        if digest == expected {
                            self.matched = true;
                            if !self.status && !self.quiet {
                                self.check_line(name, "OK");
                            }
                        } else {
                            self.mismatched += 1;
                            if !self.status {
                                self.check_line(name, "FAILED");
                            }
                        }
                    }
                    (Err(failure), expected) => {
                        let checked = expected.is_some();
                        if checked && self.ignore_missing && failure.missing {
                            return;
                        }
                        // Before the stderr line, so that the two streams
                        // interleave as they would unbuffered.
                        self.flush();
                        say(&[&quotef(name), b": ", failure.message.as_bytes()]);
                        if !checked {
                            self.ok = false;
                            return;
                        }
                        self.unreadable += 1;
                        if !self.status {
                            self.check_line(name, "FAILED open or read");
                        }
                    }
                }
            }
            Item::Improper { sum_file, line } => {
                self.flush();
                say(&[
                    &quotef(sum_file.as_bytes()),
                    format!(": {line}: improperly formatted SHA256 checksum line").as_bytes(),
                ]);
            }
            Item::SumFileEnd(end) => self.end_of_sum_file(end),
        }
    }

    /// `<hex>  <name>`, `<hex> *<name>` or `SHA256 (<name>) = <hex>`, the
    /// name escaped (and the line marked) if it holds a backslash, newline
    /// or carriage return, unless lines end with a NUL.
    fn sum_line(&mut self, name: &[u8], digest: &[u8; 32]) {
        let escape = !self.zero && name.iter().any(|b| matches!(b, b'\\' | b'\n' | b'\r'));
        let mut line = Vec::with_capacity(name.len() + 80);
        if escape {
            line.push(b'\\');
        }
        if self.tag {
            line.extend(b"SHA256 (");
            push_name(&mut line, name, escape);
            line.extend(b") = ");
            line.extend(hex(digest).as_bytes());
        } else {
            line.extend(hex(digest).as_bytes());
            line.extend(if self.binary { b" *" } else { b"  " });
            push_name(&mut line, name, escape);
        }
        line.push(if self.zero { 0 } else { b'\n' });
        self.write(&line);
    }

    /// `sha256sum -c` escapes a name only if it holds a newline.
    fn check_line(&mut self, name: &[u8], verdict: &str) {
        let escape = name.contains(&b'\n');
        let mut line = Vec::with_capacity(name.len() + 24);
        if escape {
            line.push(b'\\');
        }
        push_name(&mut line, name, escape);
        line.extend(format!(": {verdict}\n").as_bytes());
        self.write(&line);
    }

    /// A sum file's closing warnings, and its part of the exit status.
    fn end_of_sum_file(&mut self, end: SumFileEnd) {
        self.flush();
        let name = quotef(end.name.as_bytes());
        let plural = |n: u64, one: &str, many: &str| {
            if n == 1 {
                one.to_owned()
            } else {
                many.to_owned()
            }
        };
        let ok = if let Some(error) = end.error {
            say(&[&error]);
            false
        } else if !end.proper {
            say(&[&name, b": no properly formatted checksum lines found"]);
            false
        } else {
            if !self.status {
                if end.improper > 0 {
                    say(&[format!(
                        "WARNING: {} {} improperly formatted",
                        end.improper,
                        plural(end.improper, "line is", "lines are")
                    )
                    .as_bytes()]);
                }
                if self.unreadable > 0 {
                    say(&[format!(
                        "WARNING: {} listed {} could not be read",
                        self.unreadable,
                        plural(self.unreadable, "file", "files")
                    )
                    .as_bytes()]);
                }
                if self.mismatched > 0 {
                    say(&[format!(
                        "WARNING: {} computed {} did NOT match",
                        self.mismatched,
                        plural(self.mismatched, "checksum", "checksums")
                    )
                    .as_bytes()]);
                }
                if self.ignore_missing && !self.matched {
                    say(&[&name, b": no file was verified"]);
                }
            }
            self.matched
                && self.mismatched == 0
                && self.unreadable == 0
                && !(self.strict && end.improper > 0)
        };
        self.ok &= ok;
        (self.unreadable, self.mismatched, self.matched) = (0, 0, false);
    }

    fn write(&mut self, line: &[u8]) {
        if let Err(err) = self.out.write_all(line) {
            write_failed(&err);
        }
    }

    fn flush(&mut self) {
        if let Err(err) = self.out.flush() {
            write_failed(&err);
        }
    }

    /// The exit status.
    fn finish(mut self) -> i32 {
        self.flush();
        i32::from(!self.ok)
    }
}

/// Standard output failed. A closed pipe (`| head`) ends the program as it
/// ends sha256sum, by `SIGPIPE` (Rust ignores the signal, so it is raised
/// again with its default action); any other failure (a full disk) is
/// sha256sum's "write error" and exit status 1.
fn write_failed(err: &std::io::Error) -> ! {
    if err.kind() == std::io::ErrorKind::BrokenPipe {
        // SAFETY: restoring a signal's default action and raising it have
        // no preconditions; the default action of SIGPIPE ends the process.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::raise(libc::SIGPIPE);
        }
    }
    // coreutils 9.1's words: its stdio has lost the errno by the time it
    // finds the failure, at exit.
    say(&[b"write error"]);
    std::process::exit(1);
}

fn push_name(line: &mut Vec<u8>, name: &[u8], escape: bool) {
    if !escape {
        line.extend(name);
        return;
    }
    for &b in name {
        match b {
            b'\\' => line.extend(b"\\\\"),
            b'\n' => line.extend(b"\\n"),
            b'\r' => line.extend(b"\\r"),
            _ => line.push(b),
        }
    }
}

fn hex(digest: &[u8; 32]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

/// A name as `sha256sum`'s messages quote it (gnulib's `quotef`, the
/// shell-escape style with `:` quoted too): as it is if no shell would
/// mind it; else in single quotes, with `$'\n'`-style escapes for control
/// characters and bytes the locale cannot print; or in double quotes if an
/// apostrophe is all that needs them.
fn quotef(name: &[u8]) -> Vec<u8> {
    let alone = name.len() == 1;
    let mut i = 0;
    let mut as_is = !name.is_empty();
    while as_is && i < name.len() {
        let c = name[i];
        let (len, printable) = character(name, i);
        as_is = match c {
            b'{' | b'}' => !alone,
            b'#' | b'~' => i != 0,
            _ if c < 0x80 => shell_plain(c),
            _ => printable,
        };
        i += len;
    }
    if as_is {
        return name.to_vec();
    }
    let (quoted, apostrophe, double_quotes_do, open) = shell_quoted(name, false);
    if !apostrophe {
        quoted
    } else if double_quotes_do {
        [&b"\""[..], name, b"\""].concat()
    } else if open {
        // gnulib (as in coreutils 9.1) quotes such a name a second time
        // starting as the first pass ended, inside a `$'...'`: what
        // `sha256sum` prints, odd as it is.
        shell_quoted(name, true).0
    } else {
        quoted
    }
}

/// `name` in single quotes, with `$'\n'`-style escapes for control
/// characters and bytes the locale cannot print; `escaping`: as if inside
/// a `$'...'` from the start. Also gives whether the name holds an
/// apostrophe, whether double quotes would do instead (only an apostrophe
/// needs quoting) and whether it ends inside a `$'...'`.
fn shell_quoted(name: &[u8], mut escaping: bool) -> (Vec<u8>, bool, bool, bool) {
    let alone = name.len() == 1;
    let mut out = vec![b'\''];
    let mut apostrophe = false;
    let mut double_quotes_do = true;
    let escape = |out: &mut Vec<u8>, escaping: &mut bool, text: &[u8]| {
        if !*escaping {
            out.extend(b"'$'");
            *escaping = true;
        }
        out.push(b'\\');
        out.extend(text);
    };
    let mut i = 0;
    while i < name.len() {
        let c = name[i];
        let (len, printable) = character(name, i);
        let letter = match c {
            0x07 => Some(b'a'),
            0x08 => Some(b'b'),
            0x0c => Some(b'f'),
            0x0b => Some(b'v'),
            b'\n' => Some(b'n'),
            b'\r' => Some(b'r'),
            b'\t' => Some(b't'),
            _ => None,
        };
        if c == 0 {
            // A C string has none; gnulib leaves them out.
        } else if let Some(letter) = letter {
            double_quotes_do = false;
            escape(&mut out, &mut escaping, &[letter]);
        } else if c == b'\'' {
            apostrophe = true;
            escaping = false;
            out.extend(b"'\\''");
        } else if printable {
            double_quotes_do &= match c {
                b'{' | b'}' => alone,
                b'#' | b'~' => i == 0,
                b' ' | b':' => true,
                _ if c < 0x80 => shell_plain(c),
                _ => true,
            };
            if std::mem::take(&mut escaping) {
                out.extend(b"''");
            }
            out.extend(&name[i..i + len]);
        } else {
            double_quotes_do = false;
            for &b in &name[i..i + len] {
                let octal = [b'0' + (b >> 6), b'0' + ((b >> 3) & 7), b'0' + (b & 7)];
                escape(&mut out, &mut escaping, &octal);
            }
        }
        i += len;
    }
    out.push(b'\'');
    (out, apostrophe, double_quotes_do, escaping)
}

/// Characters no shell minds, anywhere.
fn shell_plain(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"%+,-./]_@".contains(&c)
}

/// The character at `name[i..]`: its length, and whether the locale
/// prints it (a byte of invalid UTF-8 is a character it does not).
fn character(name: &[u8], i: usize) -> (usize, bool) {
    if name[i] < 0x80 {
        return (1, (0x20..0x7f).contains(&name[i]));
    }
    if !UTF8.load(Ordering::Relaxed) {
        return (1, false);
    }
    let end = name.len().min(i + 4);
    let valid = match std::str::from_utf8(&name[i..end]) {
        Ok(text) => text,
        Err(err) => std::str::from_utf8(&name[i..i + err.valid_up_to()]).unwrap_or_default(),
    };
    match valid.chars().next() {
        // Printable, as glibc's iswprint sees it, roughly (it also knows
        // which code points are unassigned): not a control, line or
        // paragraph separator, or non-character.
        Some(c) => {
            let unprintable = c.is_control()
                || matches!(c, '\u{2028}' | '\u{2029}' | '\u{FDD0}'..='\u{FDEF}')
                || (c as u32 & 0xFFFE) == 0xFFFE;
            (c.len_utf8(), !unprintable)
        }
        None => (1, false),
    }
}

/// Redraws the progress line (on a terminal) ten times a second, until
/// it is dropped.
async fn show_progress(progress: Arc<Progress>) {
    loop {
        let line = format!(
            "\r{} / {} files, {:.1} MB",
            progress.done.load(Ordering::Relaxed),
            progress.found.load(Ordering::Relaxed),
            progress.bytes.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = std::io::stderr().write_all(line.as_bytes());
        gdex::sleep(Duration::from_millis(100)).await;
    }
}
