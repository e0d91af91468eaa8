//! File I/O (BENCH.md's I/O targets).
//!
//! - **Read throughput**: a 16 MiB file read whole per iteration in 4 KiB
//!   or 64 KiB blocks by 32 concurrent readers (reader `i` takes blocks
//!   `i`, `i + 32`, …), from the page cache (`*_cached`) and with the file
//!   dropped from it before each iteration (`*_cold`, with
//!   `posix_fadvise(POSIX_FADV_DONTNEED)`, which needs no privilege):
//!   `gdex::aio` in pool tasks; GIO's async reads (`g_input_stream_read_async`
//!   after a seek) in pinned pool tasks; `tokio::fs` on tokio's runtime;
//!   and plain `pread` on as many threads as workers, the floor.
//! - **Lines** (`aio_lines_1g`): a 1 GiB text file (seeded lines of 0 to
//!   159 bytes) read line by line from the page cache, each line a
//!   `String`, by one task: `gdex::aio::FileCursor`'s `lines()` (its own
//!   128 KiB read-ahead) in a pool task; gio-rs's
//!   `InputStream::into_async_buf_read` (128 KiB) in a pinned pool task;
//!   `tokio::fs::File` under `tokio::io::BufReader` (its default 8 KiB, and
//!   128 KiB) on tokio's runtime; std's `BufReader` (128 KiB) on a thread,
//!   the floor. Not in `--quick` runs unless asked for by name.
//! - **The checksum example** against `sha256sum` (one process for the
//!   whole list) and `xargs -0 -P2 -n64 sha256sum`, on a tree of 20,000
//!   small files and one of 4 large files, generated here (seeded) under
//!   `target/gdex-bench-io`, with a warm cache; and its peak RSS on a tree
//!   of 100,000 files.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};

use crate::runtimes::{workers, All};

const FILE_SIZE: usize = 16 << 20;
const READERS: usize = 32;

fn io_dir() -> PathBuf {
    let dir = crate::table::target_dir().join("gdex-bench-io");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A small seeded generator (xorshift64*), so that the data and the trees
/// are the same on every run.
struct Seeded(u64);

impl Seeded {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(n + 8);
        while out.len() < n {
            out.extend(self.next().to_le_bytes());
        }
        out.truncate(n);
        out
    }
}

fn data_file() -> PathBuf {
    let path = io_dir().join("data.bin");
    if std::fs::metadata(&path).map(|m| m.len()).ok() != Some(FILE_SIZE as u64) {
        std::fs::write(&path, Seeded(0x5eed).bytes(FILE_SIZE)).unwrap();
    }
    path
}

/// Drops the file's pages from the page cache (clean pages: no privilege
/// needed).
fn evict(path: &Path) {
    let file = std::fs::File::open(path).unwrap();
    // SAFETY: a valid open fd; the advice only affects the page cache.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0, "posix_fadvise");
}

/// Blocks reader `reader` reads: `reader`, `reader + READERS`, …
fn blocks_of(reader: usize, block: usize) -> impl Iterator<Item = u64> {
    (reader..FILE_SIZE / block)
        .step_by(READERS)
        .map(move |b| (b * block) as u64)
}

fn read_gdex(sched: &gdex::Scheduler, path: &Path, block: usize) {
    let file = gdex::block_on(sched.spawn(gdex::aio::File::open(path)))
        .unwrap()
        .unwrap();
    let tasks: Vec<_> = (0..READERS)
        .map(|reader| {
            let file = file.clone();
            sched.spawn(async move {
                let mut buf = Vec::with_capacity(block);
                for offset in blocks_of(reader, block) {
                    buf.clear();
                    buf = file.read_at(buf, offset).await.unwrap();
                    assert_eq!(buf.len(), block);
                }
            })
        })
        .collect();
    for task in tasks {
        gdex::block_on(task).unwrap();
    }
}

fn read_gio(sched: &gdex::Scheduler, path: &Path, block: usize) {
    use gio::prelude::*;
    let tasks: Vec<_> = (0..READERS)
        .map(|reader| {
            let path = path.to_path_buf();
            sched.spawn_pinned(move || async move {
                let stream = gio::File::for_path(&path)
                    .read_future(glib::Priority::DEFAULT)
                    .await
                    .unwrap();
                let mut buf = vec![0u8; block];
                for offset in blocks_of(reader, block) {
                    stream
                        .seek(offset as i64, glib::SeekType::Set, gio::Cancellable::NONE)
                        .unwrap();
                    let (back, read) = stream
                        .read_future(buf, glib::Priority::DEFAULT)
                        .await
                        .unwrap();
                    assert_eq!(read, block);
                    buf = back;
                }
            })
        })
        .collect();
    for task in tasks {
        gdex::block_on(task).unwrap();
    }
}

fn read_tokio(rt: &tokio::runtime::Runtime, path: &Path, block: usize) {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let path = Arc::new(path.to_path_buf());
    rt.block_on(async {
        let tasks: Vec<_> = (0..READERS)
            .map(|reader| {
                let path = path.clone();
                tokio::spawn(async move {
                    let mut file = tokio::fs::File::open(&*path).await.unwrap();
                    let mut buf = vec![0u8; block];
                    for offset in blocks_of(reader, block) {
                        file.seek(std::io::SeekFrom::Start(offset)).await.unwrap();
                        file.read_exact(&mut buf).await.unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
}

fn read_blocking(path: &Path, block: usize) {
    use std::os::unix::fs::FileExt;
    let file = Arc::new(std::fs::File::open(path).unwrap());
    let threads = workers();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let file = file.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; block];
                for reader in (t..READERS).step_by(threads) {
                    for offset in blocks_of(reader, block) {
                        file.read_exact_at(&mut buf, offset).unwrap();
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

/// The read-throughput groups.
pub fn reads(c: &mut Criterion, all: &All) {
    let path = data_file();
    let n = workers();
    for (cold, suffix) in [(false, "cached"), (true, "cold")] {
        for block in [4096usize, 65536] {
            let name = format!("aio_read_{}k_{suffix}", block / 1024);
            let mut group = c.benchmark_group(&name);
            group.throughput(Throughput::Bytes(FILE_SIZE as u64));
            if cold {
                group.sample_size(10);
            }
            let mut run = |who: &str, read: &dyn Fn()| {
                group.bench_function(BenchmarkId::new(who, n), |b| {
                    b.iter_custom(|iters| {
                        let mut spent = Duration::ZERO;
                        for _ in 0..iters {
                            if cold {
                                evict(&path);
                            }
                            let t = Instant::now();
                            read();
                            spent += t.elapsed();
                        }
                        spent
                    })
                });
            };
            run("gdex", &|| read_gdex(&all.gdex.0, &path, block));
            run("gio", &|| read_gio(&all.gdex.0, &path, block));
            run("tokio", &|| read_tokio(&all.tokio.0, &path, block));
            run("blocking", &|| read_blocking(&path, block));
            group.finish();
        }
    }
}

const LINES_SIZE: u64 = 1 << 30;
/// The read-ahead of every line reader but tokio's default one.
const LINES_BUFFER: usize = 128 * 1024;

/// The 1 GiB text file, made once (seeded lines of 0 to 159 lowercase
/// letters, each ending in `\n`).
fn lines_file() -> PathBuf {
    let path = io_dir().join("lines-1g.txt");
    if std::fs::metadata(&path).map(|m| m.len()).ok() == Some(LINES_SIZE) {
        return path;
    }
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&path).unwrap());
    let mut rng = Seeded(0x11_4e5);
    let mut written = 0u64;
    let mut line = Vec::with_capacity(256);
    while written < LINES_SIZE {
        line.clear();
        let r = rng.next();
        let len = (r % 160) as usize;
        let mut bits = rng.next();
        for i in 0..len {
            if i % 12 == 11 {
                bits = rng.next();
            }
            line.push(b'a' + (bits % 26) as u8);
            bits /= 26;
        }
        line.push(b'\n');
        let room = (LINES_SIZE - written) as usize;
        if line.len() > room {
            // The last line is cut to fit, and still ends with a newline.
            line.truncate(room);
            *line.last_mut().unwrap() = b'\n';
        }
        out.write_all(&line).unwrap();
        written += line.len() as u64;
    }
    out.flush().unwrap();
    path
}

/// Lines and their bytes (newlines not counted), so that nothing is
/// optimised away and the readers can be checked against each other.
type Counted = (u64, u64);

/// Lines and their bytes (without the line ends), from a futures-io
/// reader's `lines()`.
async fn count_lines(
    mut lines: impl futures::Stream<Item = std::io::Result<String>> + Unpin,
) -> Counted {
    use futures::StreamExt;
    let (mut n, mut bytes) = (0, 0);
    while let Some(line) = lines.next().await {
        n += 1;
        bytes += line.unwrap().len() as u64;
    }
    (n, bytes)
}

fn lines_gdex(sched: &gdex::Scheduler, path: &Path) -> Counted {
    use futures::AsyncBufReadExt;
    let path = path.to_path_buf();
    gdex::block_on(sched.spawn(async move {
        let file = gdex::aio::File::open(&path).await.unwrap();
        count_lines(file.cursor().lines()).await
    }))
    .unwrap()
}

fn lines_gio(sched: &gdex::Scheduler, path: &Path) -> Counted {
    use futures::AsyncBufReadExt;
    use gio::prelude::*;
    let path = path.to_path_buf();
    gdex::block_on(sched.spawn_pinned(move || async move {
        let stream = gio::File::for_path(&path)
            .read_future(glib::Priority::DEFAULT)
            .await
            .unwrap();
        count_lines(stream.into_async_buf_read(LINES_BUFFER).lines()).await
    }))
    .unwrap()
}

fn lines_tokio(rt: &tokio::runtime::Runtime, path: &Path, buffer: Option<usize>) -> Counted {
    use tokio::io::AsyncBufReadExt;
    rt.block_on(async {
        let file = tokio::fs::File::open(path).await.unwrap();
        let reader = match buffer {
            Some(size) => tokio::io::BufReader::with_capacity(size, file),
            None => tokio::io::BufReader::new(file),
        };
        let mut lines = reader.lines();
        let (mut n, mut bytes) = (0, 0);
        while let Some(line) = lines.next_line().await.unwrap() {
            n += 1;
            bytes += line.len() as u64;
        }
        (n, bytes)
    })
}

fn lines_std(path: &Path) -> Counted {
    use std::io::BufRead;
    let file = std::fs::File::open(path).unwrap();
    let (mut n, mut bytes) = (0, 0);
    for line in std::io::BufReader::with_capacity(LINES_BUFFER, file).lines() {
        n += 1;
        bytes += line.unwrap().len() as u64;
    }
    (n, bytes)
}

/// The line-reading group: each reader's lines and bytes must agree.
pub fn lines(c: &mut Criterion, all: &All) {
    let path = lines_file();
    let n = workers();
    let expected = lines_std(&path); // also warms the cache
    let mut group = c.benchmark_group("aio_lines_1g");
    group.throughput(Throughput::Bytes(LINES_SIZE));
    group.sample_size(10);
    group.sampling_mode(criterion::SamplingMode::Flat);
    let mut run = |who: &str, read: &dyn Fn() -> Counted| {
        group.bench_function(BenchmarkId::new(who, n), |b| {
            b.iter(|| {
                let counted = read();
                assert_eq!(counted, expected, "{who} read other lines than std");
                counted
            })
        });
    };
    let readers: [(&str, &dyn Fn() -> Counted); 5] = [
        ("gdex", &|| lines_gdex(&all.gdex.0, &path)),
        ("gio", &|| lines_gio(&all.gdex.0, &path)),
        ("tokio", &|| lines_tokio(&all.tokio.0, &path, None)),
        ("tokio_128k", &|| {
            lines_tokio(&all.tokio.0, &path, Some(LINES_BUFFER))
        }),
        ("std", &|| lines_std(&path)),
    ];
    for (who, read) in readers {
        run(who, read);
    }
    group.finish();
    // Then the readers in turn, round after round: on a shared machine a
    // neighbour's load then falls on every reader alike, where criterion
    // measures one reader after the other.
    let rounds = std::env::var("GDEX_LINES_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); readers.len()];
    for _ in 0..rounds {
        for (i, (who, read)) in readers.iter().enumerate() {
            let t = Instant::now();
            assert_eq!(read(), expected, "{who} read other lines than std");
            times[i].push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    let medians = readers
        .iter()
        .zip(times)
        .map(|((who, _), t)| (who.to_string(), median(t)))
        .collect();
    *ALTERNATING.lock().unwrap() = Some((rounds, medians));
}

/// The alternating rounds' count and each reader's median, in ms.
type Rounds = (usize, Vec<(String, f64)>);
static ALTERNATING: std::sync::Mutex<Option<Rounds>> = std::sync::Mutex::new(None);

/// Prints the lines table, from this run's criterion estimates.
pub fn print_lines() {
    let n = workers();
    let group = "aio_lines_1g";
    let ms = |who: &str| crate::table::median_ns(group, &format!("{who}/{n}")).map(|ns| ns / 1e6);
    let Some(gdex) = ms("gdex") else { return };
    let alternating = ALTERNATING.lock().unwrap().clone().unwrap_or_default();
    let turn = |who: &str| {
        alternating
            .1
            .iter()
            .find(|(w, _)| w == who)
            .map(|(_, t)| *t)
    };
    println!();
    println!("## A 1 GiB file line by line, cached ({n} workers; medians)");
    println!();
    println!(
        "Criterion's median of 10 runs, then the median of {} rounds running the \
         readers in turn (the ratio is of the rounds).",
        alternating.0
    );
    println!();
    println!("| reader | ms per GiB (criterion) | ms per GiB (rounds) | MB/s (rounds) | gdex / it (time) |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for (who, label) in [
        ("gdex", "gdex `FileCursor::lines()` (128 KiB read-ahead)"),
        ("gio", "gio-rs `into_async_buf_read(128 KiB).lines()`"),
        ("tokio", "`tokio::fs::File` + `BufReader::new` (8 KiB)"),
        (
            "tokio_128k",
            "`tokio::fs::File` + `BufReader::with_capacity(128 KiB)`",
        ),
        ("std", "std `BufReader` (128 KiB), blocking, the floor"),
    ] {
        if let Some(t) = ms(who) {
            let (r, base) = (turn(who).unwrap_or(t), turn("gdex").unwrap_or(gdex));
            println!(
                "| {label} | {t:.0} | {r:.0} | {:.0} | {:.2} |",
                LINES_SIZE as f64 / 1e6 / (r / 1e3),
                base / r
            );
        }
    }
    let _ = std::io::stdout().flush();
}

/// MB/s of `group/id` from criterion's median, if this run measured it.
fn mb_per_s(group: &str, id: &str) -> Option<f64> {
    crate::table::median_ns(group, id).map(|ns| FILE_SIZE as f64 / 1e6 / (ns / 1e9))
}

/// Prints the I/O section: read throughput from this run's criterion
/// estimates, then the checksum runs.
pub fn print() {
    let n = workers();
    println!();
    println!("## I/O ({n} workers; medians)");
    println!();
    println!("| reads | gdex aio | GIO async | tokio::fs | blocking pread | aio / GIO | aio / tokio::fs |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for suffix in ["cached", "cold"] {
        for block in [4, 64] {
            let group = format!("aio_read_{block}k_{suffix}");
            let get = |who: &str| mb_per_s(&group, &format!("{who}/{n}"));
            let (g, gio, tokio, blocking) =
                (get("gdex"), get("gio"), get("tokio"), get("blocking"));
            if g.is_none() {
                continue;
            }
            let cell = |v: Option<f64>| {
                v.map(|v| format!("{v:.0} MB/s"))
                    .unwrap_or_else(|| "—".into())
            };
            let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) => format!("{:.2}×", a / b),
                _ => "—".into(),
            };
            println!(
                "| {block} KiB, {suffix} | {} | {} | {} | {} | {} | {} |",
                cell(g),
                cell(gio),
                cell(tokio),
                cell(blocking),
                ratio(g, gio),
                ratio(g, tokio)
            );
        }
    }
    println!();
    checksum_table();
}

/// The checksum example, built in release mode (cargo lets a second build
/// run while a bench runs).
fn checksum_exe() -> Option<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // From the workspace's root: the example is gdex's, not this package's.
    let status = Command::new(cargo)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .args(["build", "--release", "--quiet", "--example", "checksum"])
        .status()
        .ok()?;
    if !status.success() {
        eprintln!("io: cannot build the checksum example; skipping its rows");
        return None;
    }
    Some(crate::table::target_dir().join("release/examples/checksum"))
}

/// A tree of `files` files of `size` bytes each (drawn from the seeded
/// generator), in directories of 100, made once.
fn tree(name: &str, files: usize, size: impl Fn(&mut Seeded) -> usize) -> PathBuf {
    let root = io_dir().join(name);
    let done = root.join(".complete");
    if done.exists() {
        return root;
    }
    let _ = std::fs::remove_dir_all(&root);
    let mut rng = Seeded(files as u64 ^ 0x9e37_79b9);
    for i in 0..files {
        let dir = root.join(format!("d{:04}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        let len = size(&mut rng);
        std::fs::write(dir.join(format!("f{:03}.dat", i % 100)), rng.bytes(len)).unwrap();
    }
    std::fs::write(done, b"").unwrap();
    root
}

/// Wall time and peak RSS (KiB, the exec'd program's own `VmHWM`, read
/// from `/proc` while it runs: `wait4`'s `ru_maxrss` would count this big
/// process's pages, which the child shares until it execs) of one run of
/// `command`, output discarded.
fn timed(command: &mut Command) -> (f64, u64) {
    let t = Instant::now();
    let mut child = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        let text = std::fs::read_to_string(&status_file).unwrap_or_default();
        let hwm = text
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok());
        peak = peak.max(hwm.unwrap_or(0));
        std::thread::sleep(Duration::from_millis(2));
    };
    assert!(status.success(), "{command:?} failed: {status}");
    (t.elapsed().as_secs_f64(), peak)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn checksum_table() {
    let Some(exe) = checksum_exe() else { return };
    let small = tree("small-20000", 20_000, |rng| {
        // About 5 KiB on average, 1 byte to 30 KB: source files and docs.
        let r = rng.next();
        let pick = (r >> 8) as usize;
        if r % 100 < 85 {
            1 + pick % 6000
        } else {
            6000 + pick % 24000
        }
    });
    let large = tree("large-4", 4, |_| 48 << 20);
    println!("| checksum (warm cache) | gdex checksum | sha256sum (one process) | xargs -0 -P2 -n64 sha256sum | gdex / xargs |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for (label, root) in [
        ("20,000 small files", &small),
        ("4 files of 48 MiB", &large),
    ] {
        let list = io_dir().join("list.bin");
        let found = Command::new("find")
            .arg(root)
            .args(["-type", "f", "-print0"])
            .output()
            .unwrap()
            .stdout;
        std::fs::write(&list, found).unwrap();
        let ours = || {
            let mut c = Command::new(&exe);
            c.arg(root);
            c
        };
        let shell = |xargs: &str| {
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg(format!(
                    "find \"$0\" -type f -print0 | xargs -0 {xargs} sha256sum"
                ))
                .arg(root);
            c
        };
        // Warm the cache, then alternate the three, five rounds.
        let _ = timed(&mut ours());
        let _ = timed(&mut shell(""));
        let (mut g, mut single, mut parallel) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..5 {
            g.push(timed(&mut ours()).0);
            single.push(timed(&mut shell("")).0);
            parallel.push(timed(&mut shell("-P2 -n64")).0);
        }
        let (g, single, parallel) = (median(g), median(single), median(parallel));
        println!(
            "| {label} | {:.0} ms | {:.0} ms | {:.0} ms | {:.2} |",
            g * 1e3,
            single * 1e3,
            parallel * 1e3,
            g / parallel
        );
        let _ = std::io::stdout().flush();
    }
    let huge = tree("tiny-100000", 100_000, |rng| {
        64 + (rng.next() % 448) as usize
    });
    let (secs, rss) = timed(Command::new(&exe).arg(&huge));
    println!();
    println!(
        "checksum on 100,000 files: {:.0} ms, peak RSS {:.1} MiB (target < 64 MiB)",
        secs * 1e3,
        rss as f64 / 1024.0
    );
}
