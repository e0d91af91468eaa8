//! SHA-256 of every file under a directory, the gdex way.
//!
//! - The directory walk and the file reads are GIO async calls, made inside
//!   pinned tasks on the pool's workers (each worker runs its own
//!   `GMainContext`, where GIO delivers their callbacks).
//! - Hashing (GLib's `GChecksum`) happens on the pool too, chunk by chunk
//!   as the reads come in; a `Limiter` bounds how many files are open.
//! - A task on the main scheduler redraws a progress line in place (on a
//!   terminal) from the main loop, while `gdex::block_on` runs that loop.
//! - Ctrl-C (SIGINT) races the work through `gdex::first`: the work is
//!   dropped, which cancels every task, and the program says so.
//!
//! Output: `<sha256>  <path>` per file on stdout, sorted by path, as
//! `sha256sum` prints it; files that cannot be read are reported on stderr
//! and the exit status is 1; a summary (files, bytes, MB/s) goes to stderr.
//!
//! Run it with `cargo run --release --example checksum -- <directory>`.

use std::cell::Cell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use gio::prelude::*;

/// How many files are read at once.
const OPEN_FILES: usize = 16;
/// Bytes per read.
const CHUNK: usize = 256 * 1024;

/// Counters the workers bump and the progress line reads.
#[derive(Default)]
struct Progress {
    found: AtomicU64,
    done: AtomicU64,
    bytes: AtomicU64,
}

/// One file's outcome.
type Outcome = (PathBuf, Result<String, String>);

fn main() {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: checksum <directory>");
        std::process::exit(2);
    };
    if !dir.is_dir() {
        eprintln!("checksum: {} is not a directory", dir.display());
        std::process::exit(2);
    }
    let progress = Arc::new(Progress::default());
    let started = Instant::now();

    // The progress line: a main-scheduler task, so it is drawn from the main
    // loop that block_on runs below.
    let finished = Rc::new(Cell::new(false));
    let ticker = gdex::spawn_local(show_progress(progress.clone(), finished.clone()));

    // Ctrl-C: the watch starts now; GLib delivers it through the main loop.
    let interrupted = gdex::unix_signal(libc::SIGINT)
        .map(|()| Err(gdex::Error::Cancelled))
        .boxed_local();
    let work = checksum_tree(dir, progress.clone()).map(Ok).boxed_local();
    let outcome = gdex::block_on(gdex::first([work, interrupted]));
    finished.set(true);
    gdex::block_on(ticker).expect("the progress task");

    let elapsed = started.elapsed();
    let mut results = match outcome {
        Ok(results) => results,
        Err(_) => {
            // The work future was dropped by `first`: every task it spawned
            // has been cancelled with it.
            eprintln!(
                "checksum: cancelled after {} files ({} bytes)",
                progress.done.load(Ordering::Relaxed),
                progress.bytes.load(Ordering::Relaxed)
            );
            std::process::exit(130);
        }
    };
    results.sort_by(|a, b| a.0.cmp(&b.0));
    let mut errors = 0;
    for (path, result) in &results {
        match result {
            Ok(hex) => println!("{hex}  {}", path.display()),
            Err(message) => {
                errors += 1;
                eprintln!("checksum: {}: {message}", path.display());
            }
        }
    }
    let bytes = progress.bytes.load(Ordering::Relaxed);
    let secs = elapsed.as_secs_f64().max(1e-6);
    eprintln!(
        "{} files, {} bytes in {:.2} s ({:.1} MB/s), {} unreadable",
        results.len() - errors,
        bytes,
        secs,
        bytes as f64 / 1e6 / secs,
        errors
    );
    if errors > 0 {
        std::process::exit(1);
    }
}

/// Walks `dir` and hashes every file found, on the default pool.
async fn checksum_tree(dir: PathBuf, progress: Arc<Progress>) -> Vec<Outcome> {
    let pool = gdex::ThreadPool::default().scheduler();
    let limiter = gdex::Limiter::new(OPEN_FILES);
    // The walk: one pinned task (gio-rs's async calls are !Send and want the
    // worker's context) that finds every file.
    let walk_progress = progress.clone();
    let (files, mut outcomes) = pool
        .spawn_pinned(move || walk(dir, walk_progress))
        .await
        .expect("the walk task");
    // A group: if this future is dropped (Ctrl-C), the group goes with it
    // and cancels every hash still running. It keeps each member's result
    // for `close_with_results`.
    let group = gdex::TaskGroup::builder()
        .scheduler(pool.clone())
        .keep_results(true)
        .build();
    for path in files {
        let limiter = limiter.clone();
        let progress = progress.clone();
        let hash = pool.spawn_pinned(move || hash_file(path, progress));
        group
            .spawn(async move { limiter.run(hash).await.and_then(|hashed| hashed) })
            .expect("the group is open");
    }
    for result in group.close_with_results().await {
        outcomes.push(result.expect("hash tasks neither panic nor are cancelled while awaited"));
    }
    outcomes
}

/// Lists the files under `dir` with GIO's async enumeration; what cannot be
/// listed becomes an outcome of its own.
async fn walk(dir: PathBuf, progress: Arc<Progress>) -> (Vec<PathBuf>, Vec<Outcome>) {
    let mut files = Vec::new();
    let mut failed = Vec::new();
    let mut pending = vec![dir];
    while let Some(dir) = pending.pop() {
        let listing = gio::File::for_path(&dir)
            .enumerate_children_future(
                "standard::name,standard::type",
                gio::FileQueryInfoFlags::NOFOLLOW_SYMLINKS,
                glib::Priority::DEFAULT,
            )
            .await;
        let enumerator = match listing {
            Ok(enumerator) => enumerator,
            Err(e) => {
                failed.push((dir, Err(e.message().to_owned())));
                continue;
            }
        };
        loop {
            let batch = match enumerator
                .next_files_future(64, glib::Priority::DEFAULT)
                .await
            {
                Ok(batch) => batch,
                Err(e) => {
                    failed.push((dir.clone(), Err(e.message().to_owned())));
                    break;
                }
            };
            if batch.is_empty() {
                break;
            }
            for info in batch {
                let path = dir.join(info.name());
                match info.file_type() {
                    gio::FileType::Directory => pending.push(path),
                    // FIFOs, sockets, devices: reading them could block.
                    gio::FileType::Special => {}
                    _ => {
                        progress.found.fetch_add(1, Ordering::Relaxed);
                        files.push(path);
                    }
                }
            }
        }
    }
    (files, failed)
}

/// Reads `path` with GIO async reads and hashes it as the chunks arrive.
async fn hash_file(path: PathBuf, progress: Arc<Progress>) -> Outcome {
    let result = async {
        let stream = gio::File::for_path(&path)
            .read_future(glib::Priority::DEFAULT)
            .await?;
        let mut checksum =
            glib::Checksum::new(glib::ChecksumType::Sha256).expect("GLib has SHA-256");
        loop {
            let chunk = stream
                .read_bytes_future(CHUNK, glib::Priority::DEFAULT)
                .await?;
            if chunk.is_empty() {
                break;
            }
            checksum.update(&chunk);
            progress
                .bytes
                .fetch_add(chunk.len() as u64, Ordering::Relaxed);
        }
        Ok::<_, glib::Error>(checksum.string().expect("a fresh checksum has a digest"))
    }
    .await
    .map_err(|e| e.message().to_owned());
    progress.done.fetch_add(1, Ordering::Relaxed);
    (path, result)
}

/// Redraws the progress line ten times a second while the work runs, on a
/// terminal only.
async fn show_progress(progress: Arc<Progress>, finished: Rc<Cell<bool>>) {
    // SAFETY: isatty has no preconditions.
    let terminal = unsafe { libc::isatty(2) } == 1;
    while !finished.get() {
        if terminal {
            eprint!(
                "\r{} / {} files, {:.1} MB",
                progress.done.load(Ordering::Relaxed),
                progress.found.load(Ordering::Relaxed),
                progress.bytes.load(Ordering::Relaxed) as f64 / 1e6
            );
        }
        gdex::sleep(Duration::from_millis(100)).await;
    }
    if terminal {
        eprint!("\r\x1b[K");
    }
}
