//! SHA-256 of every file under a directory, the gdex way: `sha256sum`'s
//! output, `find -type f`'s walk, and both cores busy.
//!
//! ```text
//! checksum [PATH]...      sum every regular file under each PATH (a file
//!                         is summed itself); `.` if none is given
//! checksum -c SUMFILE     check the sums listed in SUMFILE (`-` for stdin)
//! ```
//!
//! - The walk runs on the blocking lane (`gdex::spawn_blocking`), a
//!   directory at a time, entries in byte order, symlinks not followed,
//!   only regular files kept (what `find PATH -type f` lists). It hands the
//!   files out through a bounded `gdex::channel` as it finds them, so the
//!   hashing starts with the first file.
//! - Hashing tasks on the pool (a few per worker) open and read each file
//!   with `gdex::aio` (io_uring on each worker, or the blocking lane where
//!   io_uring is not available) and hash it as the chunks come in.
//! - The main thread prints the results in the walk's order, as soon as
//!   each is next, and redraws a progress line on a terminal. A semaphore
//!   bounds how many files are between the walk and the printer, so memory
//!   stays bounded whatever the tree's size.
//! - Ctrl-C (SIGINT) races the work through `gdex::first`: the work is
//!   dropped, which cancels every task, and the program says so.
//!
//! Output is `sha256sum`'s, byte for byte: `<sha256>  <name>`, and a name
//! with a backslash, newline or carriage return written escaped on a line
//! that starts with a backslash. Files that cannot be read are reported on
//! stderr and make the exit status 1. `-c` prints `<name>: OK`, `FAILED`
//! or `FAILED open or read` and `sha256sum -c`'s warnings, with its exit
//! status.
//!
//! Run it with `cargo run --release --example checksum -- <directory>`.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::{BufRead, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use sha2::{Digest, Sha256};
use std::panic::AssertUnwindSafe;

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

fn main() {
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let check = args.first().is_some_and(|a| a == "-c" || a == "--check");
    if check {
        args.remove(0);
        if args.len() != 1 {
            eprintln!("usage: checksum -c SUMFILE");
            std::process::exit(2);
        }
    } else if args.is_empty() {
        args.push(".".into());
    }
    let progress = Arc::new(Progress::default());
    // SAFETY: isatty has no preconditions.
    let terminal = unsafe { libc::isatty(2) } == 1;
    let ticker = terminal.then(|| gdex::spawn_local(show_progress(progress.clone())));
    let interrupted = gdex::unix_signal(libc::SIGINT)
        .map(|()| Err(gdex::Error::Cancelled))
        .boxed_local();
    let work = run(args, check, progress.clone()).map(Ok).boxed_local();
    let outcome = gdex::block_on(gdex::first([work, interrupted]));
    if let Some(ticker) = ticker {
        drop(ticker); // cancelled: no wait for its next tick
        eprint!("\r\x1b[K");
    }
    match outcome {
        Ok(status) => std::process::exit(status),
        Err(_) => {
            eprintln!(
                "checksum: cancelled after {} files ({} bytes)",
                progress.done.load(Ordering::Relaxed),
                progress.bytes.load(Ordering::Relaxed)
            );
            std::process::exit(130);
        }
    }
}

/// Counters the workers bump and the progress line reads.
#[derive(Default)]
struct Progress {
    found: AtomicU64,
    done: AtomicU64,
    bytes: AtomicU64,
}

/// Consecutive files to sum or check, in the order the walk (or the sum
/// file) gives them.
struct Batch {
    /// The first one's place in that order.
    first: u64,
    works: Vec<Work>,
    /// Their places in the window; given back once they are printed.
    _permits: Vec<gdex::Permit>,
}

enum Work {
    /// Sum this file.
    Sum(PathBuf),
    /// Check this file against this digest.
    Check(PathBuf, [u8; 32]),
    /// The walk could not list this directory (or find this argument).
    Fail(PathBuf, String),
}

/// What the printer gets for a batch.
struct Done {
    first: u64,
    results: Vec<(Work, Result<[u8; 32], String>)>,
    _permits: Vec<gdex::Permit>,
}

/// The whole run; gives the exit status.
async fn run(args: Vec<OsString>, check: bool, progress: Arc<Progress>) -> i32 {
    let pool = gdex::ThreadPool::default().scheduler();
    let window = gdex::Semaphore::new(WINDOW);
    let (items, queue) = gdex::channel::<Batch>(WINDOW / BATCH);
    let (results, printed) = gdex::channel::<Done>(WINDOW / BATCH);
    // The feeder: the walk, or the sum file's lines.
    let feeder = {
        let progress = progress.clone();
        let window = window.clone();
        gdex::spawn_blocking(move || {
            if check {
                read_sum_file(&args[0], &items, &window, &progress)
            } else {
                let mut feed = Feed::new(&items, &window, &progress);
                for arg in &args {
                    feed.root(Path::new(arg));
                }
                feed.flush();
                Ok(SumFile::default())
            }
        })
    };
    // The hashers: a group, so that dropping `run` (Ctrl-C) cancels them.
    let group = gdex::TaskGroup::builder().scheduler(pool.clone()).build();
    let workers = gdex::ThreadPool::default().workers();
    for _ in 0..workers * HASHERS_PER_WORKER {
        let queue = queue.clone();
        let results = results.clone();
        let progress = progress.clone();
        group
            .spawn(async move {
                let mut buf = Vec::with_capacity(CHUNK);
                while let Ok(batch) = queue.recv().await {
                    let mut done = Vec::with_capacity(batch.works.len());
                    for work in batch.works {
                        let result = match &work {
                            Work::Sum(path) | Work::Check(path, _) => {
                                // A panic is this file's failure, not the
                                // run's end.
                                AssertUnwindSafe(hash_file(path, &mut buf, &progress))
                                    .catch_unwind()
                                    .await
                                    .unwrap_or_else(|panic| Err(panic_words(&*panic)))
                            }
                            Work::Fail(_, message) => Err(message.clone()),
                        };
                        progress.done.fetch_add(1, Ordering::Relaxed);
                        done.push((work, result));
                    }
                    let done = Done {
                        first: batch.first,
                        results: done,
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
    let mut printer = Printer::new(check);
    let mut waiting = BTreeMap::new();
    let mut next = 0u64;
    while let Ok(batches) = printed.recv_all().await {
        for done in batches {
            waiting.insert(done.first, done);
        }
        while let Some(done) = waiting.remove(&next) {
            next += done.results.len() as u64;
            for (work, result) in done.results {
                printer.print(work, result);
            }
        }
        printer.flush();
    }
    // Neither fails: a hasher catches its panics, and the feeder is never
    // cancelled. If one did all the same, the run says so and fails.
    let mut status = 0;
    if let Err(err) = group.close().await {
        eprintln!("checksum: internal error: a hashing task failed: {err}");
        status = 1;
    }
    let feeder = feeder
        .await
        .unwrap_or_else(|err| Err(format!("internal error: reading the list failed: {err}")));
    status.max(printer.finish(feeder))
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

/// Hashes one file with AIO reads; the error is the system's words
/// ("Permission denied").
async fn hash_file(
    path: &Path,
    buf: &mut Vec<u8>,
    progress: &Progress,
) -> Result<[u8; 32], String> {
    let os_words = |err: gdex::Error| {
        let text = err.to_string();
        text.rsplit(": ").next().unwrap_or(&text).to_owned()
    };
    if path.as_os_str().as_bytes().contains(&0) {
        // No file has such a name (the parser never makes one): the
        // system's words for what open(2) cannot even be asked.
        return Err("Invalid argument".to_owned());
    }
    let file = gdex::aio::File::open(path).await.map_err(os_words)?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut hasher = Sha256::new();
    let mut offset = 0u64;
    loop {
        let mut chunk = std::mem::take(buf);
        chunk.clear();
        if chunk.capacity() < CHUNK {
            chunk.reserve(CHUNK);
        }
        let chunk = file.read_at(chunk, offset).await.map_err(os_words)?;
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

/// The walk's side of the pipeline: numbers the files, takes a window
/// place for each (waiting, on this blocking-lane thread, while the window
/// is full) and hands them on in batches.
struct Feed<'a> {
    items: &'a gdex::Sender<Batch>,
    window: &'a gdex::Semaphore,
    progress: &'a Progress,
    /// The place of the next file.
    next: u64,
    pending: Vec<Work>,
    permits: Vec<gdex::Permit>,
    /// When the first pending file came.
    since: Instant,
}

impl<'a> Feed<'a> {
    fn new(
        items: &'a gdex::Sender<Batch>,
        window: &'a gdex::Semaphore,
        progress: &'a Progress,
    ) -> Self {
        Feed {
            items,
            window,
            progress,
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

    /// Flushes a batch whose first file has waited long enough.
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

    /// A command-line argument: a directory is walked (followed if it is a
    /// symlink, as `find -H` does), anything else summed as given.
    fn root(&mut self, path: &Path) {
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => self.walk(path.to_path_buf()),
            Ok(_) => self.push(Work::Sum(path.to_path_buf())),
            Err(err) => self.push(Work::Fail(path.to_path_buf(), os_words(&err))),
        }
    }

    /// Depth first, each directory's entries in byte order: regular files
    /// are summed, directories entered, symlinks and special files left
    /// alone (`find -type f`).
    fn walk(&mut self, dir: PathBuf) {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(err) => return self.push(Work::Fail(dir, os_words(&err))),
        };
        let mut listed: Vec<(OsString, std::fs::FileType)> = Vec::new();
        for entry in entries {
            match entry.and_then(|e| Ok((e.file_name(), e.file_type()?))) {
                Ok(entry) => listed.push(entry),
                Err(err) => return self.push(Work::Fail(dir, os_words(&err))),
            }
        }
        listed.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        for (name, kind) in listed {
            let path = dir.join(name);
            if kind.is_dir() {
                self.walk(path);
            } else if kind.is_file() {
                self.push(Work::Sum(path));
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

/// What `-c` found in the sum file besides the files to check.
#[derive(Default)]
struct SumFile {
    name: OsString,
    improper: u64,
    proper: u64,
}

/// Feeds the files listed in a sum file (`sha256sum`'s format, or the
/// BSD-tagged `SHA256 (name) = digest`).
fn read_sum_file(
    name: &OsStr,
    items: &gdex::Sender<Batch>,
    window: &gdex::Semaphore,
    progress: &Progress,
) -> Result<SumFile, String> {
    let source: Box<dyn std::io::Read> = if name == "-" {
        Box::new(std::io::stdin())
    } else {
        let file = std::fs::File::open(name)
            .map_err(|e| format!("{}: {}", name.to_string_lossy(), os_words(&e)))?;
        Box::new(file)
    };
    let mut reader = std::io::BufReader::new(source);
    let mut feed = Feed::new(items, window, progress);
    let mut found = SumFile {
        name: name.to_owned(),
        improper: 0,
        proper: 0,
    };
    let mut failed = None;
    loop {
        if reader.buffer().is_empty() {
            // The next read may wait (sums typed or piped in): what we
            // have goes now.
            feed.flush();
        }
        let mut line = Vec::new();
        let line = match reader.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {
                if line.last() == Some(&b'\n') {
                    line.pop();
                }
                line
            }
            Err(err) => {
                // The lines read so far are still checked.
                failed = Some(format!("{}: {}", name.to_string_lossy(), os_words(&err)));
                break;
            }
        };
        match parse_sum_line(&line) {
            Some((digest, path)) => {
                found.proper += 1;
                feed.push(Work::Check(path, digest));
            }
            None => found.improper += 1,
        }
    }
    feed.flush();
    match failed {
        Some(message) => Err(message),
        None => Ok(found),
    }
}

/// `<hex>  <name>`, `<hex> *<name>` or `SHA256 (<name>) = <hex>`; a
/// leading backslash means the name is escaped.
fn parse_sum_line(line: &[u8]) -> Option<([u8; 32], PathBuf)> {
    let (escaped, line) = match line.strip_prefix(b"\\") {
        Some(rest) => (true, rest),
        None => (false, line),
    };
    let (hex, name) = if let Some(rest) = line.strip_prefix(b"SHA256 (") {
        let close = rest.windows(4).rposition(|w| w == b") = ")?;
        (&rest[close + 4..], &rest[..close])
    } else {
        if line.len() < 66 || line[64] != b' ' || !matches!(line[65], b' ' | b'*') {
            return None;
        }
        (&line[..64], &line[66..])
    };
    if hex.len() != 64 || name.is_empty() {
        return None;
    }
    let mut digest = [0u8; 32];
    for (i, pair) in hex.chunks(2).enumerate() {
        let text = std::str::from_utf8(pair).ok()?;
        digest[i] = u8::from_str_radix(text, 16).ok()?;
    }
    // As sha256sum, whose names are C strings: an escaped name may not
    // hold a NUL, and a plain one ends at its first.
    let name = if escaped {
        unescape(name)?
    } else {
        name.split(|&b| b == 0).next().unwrap_or_default().to_vec()
    };
    Some((digest, PathBuf::from(OsString::from_vec(name))))
}

fn unescape(name: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(name.len());
    let mut bytes = name.iter();
    while let Some(&b) = bytes.next() {
        if b == 0 {
            return None;
        } else if b == b'\\' {
            match bytes.next()? {
                b'\\' => out.push(b'\\'),
                b'n' => out.push(b'\n'),
                b'r' => out.push(b'\r'),
                _ => return None,
            }
        } else {
            out.push(b);
        }
    }
    Some(out)
}

/// Writes results as `sha256sum` does, and keeps its counts.
struct Printer {
    check: bool,
    out: std::io::BufWriter<std::io::Stdout>,
    unreadable: u64,
    mismatched: u64,
}

impl Printer {
    fn new(check: bool) -> Printer {
        Printer {
            check,
            out: std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout()),
            unreadable: 0,
            mismatched: 0,
        }
    }

    fn print(&mut self, work: Work, result: Result<[u8; 32], String>) {
        let (path, expected) = match &work {
            Work::Sum(path) | Work::Fail(path, _) => (path, None),
            Work::Check(path, digest) => (path, Some(digest)),
        };
        let name = path.as_os_str().as_bytes();
        match (&result, expected) {
            (Ok(digest), None) => {
                let escape = name.iter().any(|b| matches!(b, b'\\' | b'\n' | b'\r'));
                let mut line = Vec::with_capacity(name.len() + 70);
                if escape {
                    line.push(b'\\');
                }
                line.extend(hex(digest).as_bytes());
                line.extend(b"  ");
                push_name(&mut line, name, escape);
                line.push(b'\n');
                self.write(&line);
            }
            (Ok(digest), Some(expected)) => {
                let ok = digest == expected;
                self.mismatched += u64::from(!ok);
                self.check_line(name, if ok { "OK" } else { "FAILED" });
            }
            (Err(message), expected) => {
                self.unreadable += 1;
                // Before the stderr line, so that the two streams interleave
                // as they would unbuffered.
                self.flush();
                eprintln!("checksum: {}: {message}", String::from_utf8_lossy(name));
                if expected.is_some() {
                    self.check_line(name, "FAILED open or read");
                }
            }
        }
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

    fn write(&mut self, line: &[u8]) {
        if self.out.write_all(line).is_err() {
            // stdout closed (a pipe to `head`): as sha256sum, stop.
            std::process::exit(1);
        }
    }

    fn flush(&mut self) {
        if self.out.flush().is_err() {
            std::process::exit(1);
        }
    }

    /// The closing warnings and the exit status.
    fn finish(mut self, feeder: Result<SumFile, String>) -> i32 {
        self.flush();
        if !self.check {
            return i32::from(self.unreadable > 0);
        }
        let sums = match feeder {
            Ok(sums) => sums,
            Err(message) => {
                eprintln!("checksum: {message}");
                return 1;
            }
        };
        let file = sums.name.to_string_lossy();
        if sums.proper == 0 {
            eprintln!("checksum: {file}: no properly formatted checksum lines found");
            return 1;
        }
        let plural = |n: u64, one: &str, many: &str| {
            if n == 1 {
                one.to_owned()
            } else {
                many.to_owned()
            }
        };
        if sums.improper > 0 {
            eprintln!(
                "checksum: WARNING: {} {} improperly formatted",
                sums.improper,
                plural(sums.improper, "line is", "lines are")
            );
        }
        if self.unreadable > 0 {
            eprintln!(
                "checksum: WARNING: {} listed {} could not be read",
                self.unreadable,
                plural(self.unreadable, "file", "files")
            );
        }
        if self.mismatched > 0 {
            eprintln!(
                "checksum: WARNING: {} computed {} did NOT match",
                self.mismatched,
                plural(self.mismatched, "checksum", "checksums")
            );
        }
        i32::from(self.unreadable > 0 || self.mismatched > 0)
    }
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

/// Redraws the progress line (on a terminal) ten times a second, until
/// it is dropped.
async fn show_progress(progress: Arc<Progress>) {
    loop {
        eprint!(
            "\r{} / {} files, {:.1} MB",
            progress.done.load(Ordering::Relaxed),
            progress.found.load(Ordering::Relaxed),
            progress.bytes.load(Ordering::Relaxed) as f64 / 1e6
        );
        gdex::sleep(Duration::from_millis(100)).await;
    }
}
