//! Files as async streams: `gdex::aio::FileCursor` reads, writes and
//! seeks as `std::fs::File` does, through futures-io's traits and (with
//! the `tokio` feature) tokio's, on both AIO backends (a module of the
//! `aio` binary, which runs everything again on the blocking lane).
//!
//! The reference is `std::fs::File` itself, on seeded generated programs
//! of reads, writes, seeks and flushes (random sizes, positions past the
//! end, reads across buffer boundaries with buffers of 1 byte up), each
//! call given up after a random number of `Pending`s (a future dropped at
//! that await: std then did nothing, or for a started tokio seek, the
//! seek). At the edges: `lines()`, `futures::io::copy` and tokio's
//! helpers against std's; a cursor dropped, on another thread, with
//! writes pending (also once the default pool, which finishes them, is
//! shut down); a write error (`/dev/full`) given at the next call; a
//! pool shut down with cursors mid-read and mid-write; a task that panics
//! with writes pending; bad input refused with a message that says what
//! to do.

use super::*;

use std::future::Future;
use std::io::{Seek, SeekFrom};
use std::task::Context;

use futures::io::{AsyncRead, AsyncSeek, AsyncWrite};
use futures::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, TryStreamExt};
use gdex::aio::FileCursor;

/// Polls `op` until it is ready, or gives up (`None`) once it has
/// returned `Pending` `give_up_after` times: the future of that call
/// dropped at that await.
async fn until<T>(
    give_up_after: Option<usize>,
    mut op: impl FnMut(&mut Context<'_>) -> Poll<T>,
) -> Option<T> {
    let mut pendings = 0;
    std::future::poll_fn(move |cx| match op(cx) {
        Poll::Ready(value) => Poll::Ready(Some(value)),
        Poll::Pending if Some(pendings) == give_up_after => Poll::Ready(None),
        Poll::Pending => {
            pendings += 1;
            Poll::Pending
        }
    })
    .await
}

/// An error as compared: GIO's code (gdex's, or the one GIO gives std's
/// errno, `g_io_error_from_errno`).
fn code_of_ours(err: std::io::Error) -> String {
    match gdex::Error::from(err) {
        gdex::Error::Failed(glib) => match glib.kind::<IOErrorEnum>() {
            Some(code) => format!("{code:?}"),
            None => format!("not a GIO error: {glib}"),
        },
        other => format!("gdex::Error::{other:?}"),
    }
}

fn code_of_std(err: &std::io::Error) -> String {
    match err.raw_os_error() {
        Some(errno) => format!("{:?}", gdex::gio::io_error_from_errno(errno)),
        None => format!("std error without errno: {err}"),
    }
}

/// Which trait a call goes through.
#[derive(Clone, Copy, Debug)]
enum Api {
    Futures,
    #[cfg(feature = "tokio")]
    Tokio,
}

impl Api {
    /// tokio's traits if `tokio` (and the feature is on), else futures-io's.
    fn pick(tokio: bool) -> Api {
        #[cfg(feature = "tokio")]
        if tokio {
            return Api::Tokio;
        }
        let _ = tokio;
        Api::Futures
    }
}

enum Step {
    Read(usize),
    ReadUntil(u8),
    Write(Vec<u8>),
    Seek(SeekFrom),
    Flush,
}

impl std::fmt::Debug for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Read(n) => write!(f, "Read({n})"),
            Step::ReadUntil(byte) => write!(f, "ReadUntil({byte:#04x})"),
            Step::Write(data) => write!(f, "Write({} bytes)", data.len()),
            Step::Seek(to) => write!(f, "Seek({to:?})"),
            Step::Flush => write!(f, "Flush"),
        }
    }
}

/// One generated program's setting.
struct Program {
    seed: u64,
    capacity: usize,
    /// read, write, append
    mode: (bool, bool, bool),
    initial: Vec<u8>,
    steps: Vec<(Step, Api, Option<usize>)>,
    /// Ends by dropping the cursor (writes pending) instead of flushing.
    drop_at_end: bool,
}

const CAPACITIES: [usize; 7] = [1, 2, 7, 64, 4096, 65536, gdex::aio::DEFAULT_CAPACITY];
const MODES: [(bool, bool, bool); 6] = [
    (true, true, false),
    (true, true, false),
    (true, true, false),
    (true, false, true),
    (true, false, false),
    (false, true, false),
];

fn generate(seed: u64, steps: usize) -> Program {
    let mut rng = common::Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let capacity = CAPACITIES[rng.below(CAPACITIES.len() as u64) as usize];
    let mode = MODES[rng.below(MODES.len() as u64) as usize];
    // Sizes in units of the buffer, so that boundaries are crossed often,
    // but bounded for the large buffers.
    let unit = capacity.min(3000) as u64;
    let bytes = |rng: &mut common::Rng, n: u64| -> Vec<u8> {
        // Few distinct bytes, so that `ReadUntil` finds its byte.
        (0..n).map(|_| b"ab\n\0"[rng.below(4) as usize]).collect()
    };
    let n = rng.below(3 * unit + 2);
    let initial = bytes(&mut rng, n);
    let mut list = Vec::new();
    for _ in 0..steps {
        let step = match rng.below(12) {
            0..=2 => Step::Read(rng.below(2 * unit + 3) as usize),
            3 => Step::ReadUntil(b"ab\n\0"[rng.below(4) as usize]),
            4..=6 => {
                let n = rng.below(2 * unit + 3);
                Step::Write(bytes(&mut rng, n))
            }
            7..=9 => {
                let span = (4 * unit + 8) as i64;
                let delta = rng.below(2 * span as u64) as i64 - span;
                // Out of range: past `i64::MAX` or before 0 (a target up
                // to `i64::MAX` but past the file system's largest file,
                // 16 TiB on ext4, is refused by std, not here: see
                // `FileCursor`'s docs).
                Step::Seek(match rng.below(16) {
                    0 => SeekFrom::Start(u64::MAX - rng.below(1 << 62)),
                    1 => SeekFrom::Current(i64::MIN + rng.below(1 << 62) as i64),
                    2 => SeekFrom::End(i64::MIN),
                    3..=6 => SeekFrom::Start(rng.below(span as u64)),
                    7..=11 => SeekFrom::Current(delta),
                    _ => SeekFrom::End(delta),
                })
            }
            _ => Step::Flush,
        };
        let api = Api::pick(rng.below(2) == 0);
        let give_up = match rng.below(8) {
            0 => Some(0),
            1 => Some(1),
            2 => Some(rng.below(4) as usize),
            _ => None,
        };
        list.push((step, api, give_up));
    }
    Program {
        seed,
        capacity,
        mode,
        initial,
        steps: list,
        drop_at_end: rng.below(3) == 0,
    }
}

/// The std side: the file, and the error a started tokio seek left for
/// the next call (that call fails with it, and does nothing else).
struct Model {
    file: std::fs::File,
    pending: Option<String>,
}

impl Model {
    fn read_exactly(&mut self, n: usize) -> Result<Vec<u8>, String> {
        let mut bytes = vec![0; n];
        self.file
            .read_exact(&mut bytes)
            .map_err(|e| format!("std could not read {n} bytes: {e}"))?;
        Ok(bytes)
    }

    fn at_end(&mut self) -> bool {
        let here = self.file.stream_position().unwrap();
        let mut one = [0u8; 1];
        let n = self.file.read(&mut one).unwrap_or(0);
        self.file.seek(SeekFrom::Start(here)).unwrap();
        n == 0
    }
}

fn open_with(path: &Path, (read, write, append): (bool, bool, bool)) -> std::fs::File {
    std::fs::OpenOptions::new()
        .read(read)
        .write(write)
        .append(append)
        .open(path)
        .unwrap()
}

/// How gdex's failure compares with std's outcome of the same call:
/// the error a started seek left for it, or else the call's own.
fn compare_failure(
    ours: std::io::Error,
    pending: Option<String>,
    theirs: impl FnOnce() -> std::io::Result<String>,
) -> Option<String> {
    let ours = code_of_ours(ours);
    let theirs = match pending {
        Some(code) => Err(code),
        None => theirs().map_err(|e| code_of_std(&e)),
    };
    match theirs {
        Err(code) if code == ours => None,
        Err(code) => Some(format!("gdex failed with {ours}, std with {code}")),
        Ok(what) => Some(format!("gdex failed with {ours}, std {what}")),
    }
}

/// Runs `program` on the cursor over `ours` and on std over `theirs`;
/// gives every divergence, worded.
async fn run(program: &Program, ours: PathBuf, theirs: PathBuf) -> Vec<String> {
    let mut found = Vec::new();
    let (read, write, append) = program.mode;
    let file = OpenOptions::new()
        .read(read)
        .write(write)
        .append(append)
        .open(&ours)
        .await
        .unwrap();
    let mut cursor = FileCursor::with_capacity(program.capacity, file);
    let mut model = Model {
        file: open_with(&theirs, program.mode),
        pending: None,
    };
    for (i, (step, api, give_up)) in program.steps.iter().enumerate() {
        let (api, give_up) = (*api, *give_up);
        let mut notes: Vec<String> = Vec::new();
        // A tokio seek started and given up: std did it, gdex does it at
        // the next call.
        #[cfg_attr(not(feature = "tokio"), allow(unused_mut))]
        let mut seek_to_come = false;
        match step {
            Step::Read(n) => {
                let mut into = vec![0u8; *n];
                let got = until(give_up, |cx| match api {
                    Api::Futures => AsyncRead::poll_read(Pin::new(&mut cursor), cx, &mut into),
                    #[cfg(feature = "tokio")]
                    Api::Tokio => {
                        let mut buf = tokio::io::ReadBuf::new(&mut into);
                        tokio::io::AsyncRead::poll_read(Pin::new(&mut cursor), cx, &mut buf)
                            .map_ok(|()| buf.filled().len())
                    }
                })
                .await;
                match got {
                    None => {}
                    Some(Ok(k)) => {
                        if let Some(code) = model.pending.take() {
                            notes
                                .push(format!("read {k} bytes; std's seek had failed with {code}"));
                        } else if k == 0 && *n > 0 && !model.at_end() {
                            notes.push("read nothing before the end of the file".into());
                        } else {
                            match model.read_exactly(k) {
                                Ok(bytes) if bytes == into[..k] => {}
                                Ok(_) => notes.push(format!("read {k} bytes that differ")),
                                Err(e) => notes.push(e),
                            }
                        }
                    }
                    Some(Err(err)) => {
                        notes.extend(compare_failure(err, model.pending.take(), || {
                            let k = model.file.read(&mut vec![0u8; *n])?;
                            Ok(format!("read {k} bytes"))
                        }))
                    }
                }
            }
            Step::ReadUntil(byte) => {
                let mut line = Vec::new();
                let got = {
                    let mut future = cursor.read_until(*byte, &mut line);
                    until(give_up, |cx| Pin::new(&mut future).poll(cx)).await
                };
                match got {
                    Some(Err(err)) => {
                        notes.extend(compare_failure(err, model.pending.take(), || {
                            let k = model.file.read(&mut [0u8; 1])?;
                            Ok(format!("read {k} bytes"))
                        }))
                    }
                    got => {
                        // Given up or not, what was taken is in `line`.
                        if let Some(Ok(k)) = got {
                            if k != line.len() {
                                notes.push(format!("said {k} bytes, gave {}", line.len()));
                            }
                        }
                        if let (Some(code), false) = (&model.pending, line.is_empty()) {
                            notes.push(format!("read a line; std's seek had failed with {code}"));
                        }
                        if !line.is_empty() || got.is_some() {
                            model.pending = None;
                        }
                        match model.read_exactly(line.len()) {
                            Ok(bytes) if bytes == line => {}
                            Ok(_) => notes.push(format!("read {} bytes that differ", line.len())),
                            Err(e) => notes.push(e),
                        }
                        if got.is_some() && line.last() != Some(byte) && !model.at_end() {
                            notes.push("a line ended without its byte before the end".into());
                        }
                    }
                }
            }
            Step::Write(data) => {
                let got = until(give_up, |cx| match api {
                    Api::Futures => AsyncWrite::poll_write(Pin::new(&mut cursor), cx, data),
                    #[cfg(feature = "tokio")]
                    Api::Tokio => {
                        tokio::io::AsyncWrite::poll_write(Pin::new(&mut cursor), cx, data)
                    }
                })
                .await;
                match got {
                    None => {}
                    Some(Ok(k)) => {
                        if let Some(code) = model.pending.take() {
                            notes.push(format!(
                                "wrote {k} bytes; std's seek had failed with {code}"
                            ));
                        } else if k == 0 && !data.is_empty() {
                            notes.push("wrote nothing".into());
                        } else if let Err(e) = model.file.write_all(&data[..k]) {
                            notes.push(format!("wrote {k} bytes; std failed: {e}"));
                        }
                    }
                    Some(Err(err)) => {
                        notes.extend(compare_failure(err, model.pending.take(), || {
                            let k = model.file.write(data)?;
                            Ok(format!("wrote {k} bytes"))
                        }))
                    }
                }
            }
            Step::Seek(to) => {
                let to = *to;
                let got = match api {
                    Api::Futures => {
                        until(give_up, |cx| {
                            AsyncSeek::poll_seek(Pin::new(&mut cursor), cx, to)
                        })
                        .await
                    }
                    #[cfg(feature = "tokio")]
                    Api::Tokio => {
                        use tokio::io::AsyncSeek as _;
                        // As tokio's `seek()` does: wait for what runs,
                        // start, wait for the seek.
                        match until(give_up, |cx| Pin::new(&mut cursor).poll_complete(cx)).await {
                            None => None,
                            Some(Err(err)) => Some(Err(err)),
                            Some(Ok(_)) => {
                                if let Some(code) = model.pending.take() {
                                    notes.push(format!(
                                        "a started seek's error was not given: std's failed with {code}"
                                    ));
                                }
                                Pin::new(&mut cursor).start_seek(to).unwrap();
                                let done =
                                    until(give_up, |cx| Pin::new(&mut cursor).poll_complete(cx))
                                        .await;
                                if done.is_none() {
                                    // Started: it happens, at the next call.
                                    seek_to_come = true;
                                    if let Err(e) = model.file.seek(to) {
                                        model.pending = Some(code_of_std(&e));
                                    }
                                }
                                done
                            }
                        }
                    }
                };
                match got {
                    None => {}
                    Some(Ok(at)) => {
                        if let Some(code) = model.pending.take() {
                            notes
                                .push(format!("sought to {at}; std's seek had failed with {code}"));
                        } else {
                            match model.file.seek(to) {
                                Ok(theirs) if theirs == at => {}
                                theirs => notes.push(format!("at {at}, std: {theirs:?}")),
                            }
                        }
                    }
                    Some(Err(err)) => {
                        notes.extend(compare_failure(err, model.pending.take(), || {
                            let at = model.file.seek(to)?;
                            Ok(format!("sought to {at}"))
                        }))
                    }
                }
            }
            Step::Flush => {
                let got = until(give_up, |cx| match api {
                    Api::Futures => AsyncWrite::poll_flush(Pin::new(&mut cursor), cx),
                    #[cfg(feature = "tokio")]
                    Api::Tokio => tokio::io::AsyncWrite::poll_flush(Pin::new(&mut cursor), cx),
                })
                .await;
                match got {
                    None => {}
                    Some(Ok(())) => {
                        if let Some(code) = model.pending.take() {
                            notes.push(format!("flushed; std's seek had failed with {code}"));
                        }
                    }
                    Some(Err(err)) => {
                        notes.extend(compare_failure(err, model.pending.take(), || {
                            Ok("flushed".into())
                        }))
                    }
                }
            }
        }
        // Where both are (unless a started seek is still to happen here:
        // std did it already).
        let theirs = model.file.stream_position().unwrap();
        if !seek_to_come && cursor.position() != theirs {
            notes.push(format!("then at {}, std at {theirs}", cursor.position()));
        }
        for note in notes {
            found.push(format!(
                "seed {}, step {i} ({step:?} via {api:?}, given up after {give_up:?} pendings): {note}",
                program.seed
            ));
        }
        if found.len() > 5 {
            break;
        }
    }
    if program.drop_at_end {
        drop(cursor);
    } else if let Err(err) = cursor.flush().await {
        if model.pending.take().is_none() {
            found.push(format!(
                "seed {}: the last flush failed: {err}",
                program.seed
            ));
        }
    }
    found
}

/// Programs run by default, each of `STEPS` steps (times `GDEX_STRESS`).
const PROGRAMS: u64 = 60;
const STEPS: usize = 120;

/// (A2 for streams) The cursor against `std::fs::File` on generated
/// programs: every call's outcome (bytes read, count written, position
/// sought, error's GIO code) and the position after it agree, and the
/// files are equal at the end, when it was flushed or dropped with its
/// writes pending (they land: waited for). Calls are given up at awaits
/// (the call's future dropped) along the way.
#[test]
fn a_cursor_reads_writes_and_seeks_as_std_fs_does() {
    watchdog(
        "a_cursor_reads_writes_and_seeks_as_std_fs_does",
        240,
        || {
            let dir = TempDir::new("cursor-differential");
            let pool = pool(2);
            let seed0: u64 = std::env::var("GDEX_CURSOR_SEED")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0xC0_50);
            let mut found = Vec::new();
            for seed in seed0..seed0 + common::stress(PROGRAMS as usize) as u64 {
                let program = generate(seed, STEPS);
                let ours = dir.file(&format!("ours-{seed}"), &program.initial);
                let theirs = dir.file(&format!("std-{seed}"), &program.initial);
                let drop_at_end = program.drop_at_end;
                let task = pool.scheduler().spawn({
                    let (ours, theirs) = (ours.clone(), theirs.clone());
                    async move { run(&program, ours, theirs).await }
                });
                found.extend(gdex::block_on(task).unwrap());
                // The files agree: at once after a flush; after a drop, once
                // the writes it handed on have landed (bounded).
                let deadline = Instant::now() + Duration::from_secs(5);
                loop {
                    let (a, b) = (
                        std::fs::read(&ours).unwrap(),
                        std::fs::read(&theirs).unwrap(),
                    );
                    if a == b {
                        break;
                    }
                    if !drop_at_end || Instant::now() > deadline {
                        let at = a.iter().zip(&b).position(|(x, y)| x != y);
                        found.push(format!(
                        "seed {seed}: the files differ (gdex {} bytes, std {}, first difference at {at:?}){}",
                        a.len(),
                        b.len(),
                        if drop_at_end { " 5 s after the cursor was dropped" } else { "" }
                    ));
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                if found.len() > 10 {
                    break;
                }
            }
            assert!(
                found.is_empty(),
                "{} divergences from std::fs (rerun one with GDEX_CURSOR_SEED=<seed>):\n{}",
                found.len(),
                found.join("\n")
            );
        },
    );
}

/// Text of `lines` generated lines: empty ones, `\r\n` endings, lines
/// longer than any buffer, and maybe no newline at the end.
fn text(rng: &mut common::Rng, lines: usize, longest: u64) -> Vec<u8> {
    let mut text = Vec::new();
    for _ in 0..lines {
        let len = match rng.below(8) {
            0 => 0,
            1 => rng.below(longest * 3 + 1),
            _ => rng.below(80),
        };
        text.extend((0..len).map(|_| b'a' + rng.below(26) as u8));
        text.extend_from_slice(if rng.below(5) == 0 { b"\r\n" } else { b"\n" });
    }
    if rng.below(2) == 0 {
        text.extend_from_slice(b"no newline at the end");
    }
    text
}

/// `lines()` (on the cursor itself, and on a `futures::io::BufReader`
/// over it) gives std's `BufRead::lines`; `futures::io::copy` and
/// `copy_buf` copy the file whole; and with the `tokio` feature, tokio's
/// `lines()` and `tokio::io::copy` do the same, across buffer sizes of 1
/// byte up.
#[test]
fn lines_and_copy_agree_with_std() {
    watchdog("lines_and_copy_agree_with_std", 120, || {
        let dir = TempDir::new("cursor-lines");
        let pool = pool(2);
        for seed in 1..=common::stress(12) as u64 {
            let mut rng = common::Rng(seed.wrapping_mul(7919) | 1);
            let capacity = CAPACITIES[seed as usize % CAPACITIES.len()];
            // Few lines for the 1-byte buffers: each byte is an operation.
            let lines = 1 + rng.below(if capacity < 64 { 40 } else { 400 }) as usize;
            let text = text(&mut rng, lines, capacity.min(5000) as u64);
            let path = dir.file(&format!("lines-{seed}"), &text);
            let expected: Vec<String> = std::io::BufRead::lines(std::io::BufReader::new(
                std::fs::File::open(&path).unwrap(),
            ))
            .collect::<Result<_, _>>()
            .unwrap();
            let copies: Vec<PathBuf> = (0..4)
                .map(|i| dir.0.join(format!("copy-{seed}-{i}")))
                .collect();
            let task = pool.scheduler().spawn({
                let (path, copies) = (path.clone(), copies.clone());
                async move {
                    let file = File::open(&path).await?;
                    let cursor = || FileCursor::with_capacity(capacity, file.clone());
                    let direct: Vec<String> = cursor().lines().try_collect().await?;
                    let wrapped: Vec<String> = futures::io::BufReader::with_capacity(7, cursor())
                        .lines()
                        .try_collect()
                        .await?;
                    let mut sizes = Vec::new();
                    let mut to =
                        FileCursor::with_capacity(capacity, File::create(&copies[0]).await?);
                    sizes.push(futures::io::copy(cursor(), &mut to).await?);
                    to.close().await?;
                    let mut to =
                        FileCursor::with_capacity(capacity, File::create(&copies[1]).await?);
                    sizes.push(futures::io::copy_buf(cursor(), &mut to).await?);
                    to.close().await?;
                    #[cfg(feature = "tokio")]
                    let tokio_lines = {
                        let mut lines = tokio::io::AsyncBufReadExt::lines(cursor());
                        let mut all = Vec::new();
                        while let Some(line) = lines.next_line().await? {
                            all.push(line);
                        }
                        let mut to =
                            FileCursor::with_capacity(capacity, File::create(&copies[2]).await?);
                        sizes.push(tokio::io::copy(&mut cursor(), &mut to).await?);
                        tokio::io::AsyncWriteExt::shutdown(&mut to).await?;
                        let mut to =
                            FileCursor::with_capacity(capacity, File::create(&copies[3]).await?);
                        sizes.push(tokio::io::copy_buf(&mut cursor(), &mut to).await?);
                        tokio::io::AsyncWriteExt::shutdown(&mut to).await?;
                        all
                    };
                    #[cfg(not(feature = "tokio"))]
                    let tokio_lines = direct.clone();
                    Ok::<_, std::io::Error>((direct, wrapped, tokio_lines, sizes))
                }
            });
            let (direct, wrapped, tokio_lines, sizes) = gdex::block_on(task).unwrap().unwrap();
            let what = format!("seed {seed}, buffers of {capacity} bytes");
            assert_eq!(direct, expected, "lines() on the cursor, {what}");
            assert_eq!(wrapped, expected, "lines() on a BufReader over it, {what}");
            assert_eq!(tokio_lines, expected, "tokio's lines(), {what}");
            for (i, size) in sizes.iter().enumerate() {
                assert_eq!(*size, text.len() as u64, "copy {i} said, {what}");
                assert_eq!(std::fs::read(&copies[i]).unwrap(), text, "copy {i}, {what}");
            }
        }
    });
}

/// `count` bytes made from `seed`.
fn data(seed: u8, count: usize) -> Vec<u8> {
    (0..count)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

/// A cursor with writes pending, handed out of its pool task: 2,500 bytes
/// written through 1,000-byte buffers, the last 500 still held
/// (`in_flight`: false) or handed to the kernel by a flush given up at
/// its first await (true).
fn cursor_with_writes_pending(
    pool: &ThreadPool,
    path: &Path,
    bytes: &[u8],
    in_flight: bool,
) -> FileCursor {
    let task = pool.scheduler().spawn({
        let (path, bytes) = (path.to_path_buf(), bytes.to_vec());
        async move {
            let mut cursor = FileCursor::with_capacity(1000, File::create(&path).await.unwrap());
            cursor.write_all(&bytes).await.unwrap();
            if in_flight {
                let flushed = until(Some(0), |cx| {
                    AsyncWrite::poll_flush(Pin::new(&mut cursor), cx)
                })
                .await;
                assert!(flushed.is_none() || flushed.unwrap().is_ok());
            }
            cursor
        }
    });
    gdex::block_on(task).unwrap()
}

/// Waits (up to 5 s) until the file at `path` holds `bytes`.
fn lands(path: &Path, bytes: &[u8], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::read(path).unwrap() != bytes {
        assert!(
            Instant::now() < deadline,
            "{what}: the file holds {} bytes of {} after 5 s",
            std::fs::read(path).unwrap().len(),
            bytes.len()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A cursor dropped with writes pending, on another thread than the one
/// that wrote (a plain thread, with no gdex context), loses none of them:
/// held bytes and a write in flight both land, the former through a task
/// of the default pool. It is `Send`.
#[test]
fn a_cursor_dropped_on_another_thread_finishes_its_writes() {
    fn send<T: Send>(_: &T) {}
    watchdog(
        "a_cursor_dropped_on_another_thread_finishes_its_writes",
        60,
        || {
            let dir = TempDir::new("cursor-drop");
            let pool = pool(1);
            for round in 0..common::stress(20) {
                let in_flight = round % 2 == 1;
                let path = dir.0.join(format!("dropped-{round}"));
                let bytes = data(round as u8, 2500);
                let cursor = cursor_with_writes_pending(&pool, &path, &bytes, in_flight);
                send(&cursor);
                std::thread::spawn(move || drop(cursor)).join().unwrap();
                lands(
                    &path,
                    &bytes,
                    &format!("round {round} (a write in flight: {in_flight})"),
                );
            }
        },
    );
}

/// A cursor dropped with writes pending after the app shut the default
/// pool down (gdex never does) still finishes them, on a thread of its
/// own. In a child process: the default pool is the whole process's.
/// Only on io_uring: the blocking lane's operations run on the default
/// pool's lane, so with that pool shut down no operation runs at all
/// (they fail with `ShutDown`).
#[test]
fn a_cursor_dropped_after_the_default_pool_shut_down_finishes_its_writes() {
    if is_child() || gdex::aio::backend() != Backend::IoUring {
        return;
    }
    run_child_passing(
        "child_drops_cursors_after_the_default_pool_shut_down",
        &[],
        60,
        "CHILD-OK",
    );
}

#[test]
#[ignore = "run in a child by a_cursor_dropped_after_the_default_pool_shut_down_finishes_its_writes"]
fn child_drops_cursors_after_the_default_pool_shut_down() {
    let dir = TempDir::new("cursor-default-closed");
    let pool = pool(1);
    gdex::ThreadPool::default().shutdown();
    for in_flight in [false, true] {
        let path = dir.0.join(format!("late-{in_flight}"));
        let bytes = data(9, 2500);
        drop(cursor_with_writes_pending(&pool, &path, &bytes, in_flight));
        lands(&path, &bytes, &format!("a write in flight: {in_flight}"));
    }
    println!("CHILD-OK");
}

/// A task that panics (user code) with writes pending in its cursor
/// loses none of them: the cursor is dropped as the task unwinds, and its
/// writes go on; the task's handle says it panicked.
#[test]
fn a_task_that_panics_loses_no_write() {
    watchdog("a_task_that_panics_loses_no_write", 30, || {
        let dir = TempDir::new("cursor-panic");
        let pool = pool(1);
        let path = dir.0.join("panicked");
        let bytes = data(7, 2500);
        let task = pool.scheduler().spawn({
            let (path, bytes) = (path.clone(), bytes.clone());
            async move {
                let mut cursor =
                    FileCursor::with_capacity(1000, File::create(&path).await.unwrap());
                cursor.write_all(&bytes).await.unwrap();
                if !bytes.is_empty() {
                    panic!("user code panics with 500 bytes not yet flushed");
                }
            }
        });
        let outcome = gdex::block_on(task);
        assert!(
            matches!(outcome, Err(gdex::Error::Panicked(_))),
            "{outcome:?}"
        );
        lands(&path, &bytes, "after the panic");
    });
}

/// A pool shut down with a cursor mid-read (a pipe with no data) and one
/// with writes pending: both tasks resolve, the read is cancelled (on
/// io_uring the data written later stays in the pipe), and the writes
/// land.
#[test]
fn pool_shutdown_with_cursors_mid_read_and_mid_write() {
    watchdog(
        "pool_shutdown_with_cursors_mid_read_and_mid_write",
        30,
        || {
            let dir = TempDir::new("cursor-shutdown");
            let pool = pool(2);
            let (reader, mut writer) = pipe();
            let polled = Arc::new(AtomicUsize::new(0));
            let reading = pool.scheduler().spawn(after_first_poll(&polled, {
                let mut cursor = reader.cursor();
                async move {
                    let mut buf = [0u8; 16];
                    cursor.read(&mut buf).await
                }
            }));
            let path = dir.0.join("written");
            let bytes = data(3, 2500);
            let written = Arc::new(AtomicBool::new(false));
            let writing = pool.scheduler().spawn({
                let (path, bytes, written) = (path.clone(), bytes.clone(), written.clone());
                async move {
                    let mut cursor =
                        FileCursor::with_capacity(1000, File::create(&path).await.unwrap());
                    cursor.write_all(&bytes).await.unwrap();
                    written.store(true, Ordering::SeqCst);
                    std::future::pending::<()>().await
                }
            });
            // The reader waits on the pipe; the writer has its last 500 bytes
            // held (the rest written), and waits for ever.
            wait_until(|| polled.load(Ordering::SeqCst) == 1 && written.load(Ordering::SeqCst));
            pool.shutdown();
            assert!(gdex::block_on(reading).is_err(), "the read never completed");
            assert!(gdex::block_on(writing).is_err(), "the writer never ended");
            drop(pool);
            lands(&path, &bytes, "after the pool's shutdown");
            writer.write_all(b"later").unwrap();
            drop(writer);
            if gdex::aio::backend() == Backend::IoUring {
                assert_eq!(
                    rest_of_pipe(&reader),
                    b"later",
                    "a cancelled read took data"
                );
            }
        },
    );
}

/// A read given up mid-way (its future dropped while the read waits on a
/// pipe) takes nothing: the position stays, and the read in flight stays
/// with the cursor, so the next read gets the data that comes; nothing is
/// lost or read twice. (Given up at every await of every call against
/// std: `a_cursor_reads_writes_and_seeks_as_std_fs_does`.)
#[test]
fn a_read_given_up_mid_way_takes_nothing() {
    watchdog("a_read_given_up_mid_way_takes_nothing", 30, || {
        let pool = pool(1);
        let (reader, writer) = pipe();
        let task = pool.scheduler().spawn(async move {
            let mut cursor = reader.cursor();
            let mut buf = [0u8; 16];
            let given_up = {
                let mut read = cursor.read(&mut buf);
                poll_once(&mut read).await
            };
            assert!(!given_up, "the pipe is empty");
            assert_eq!(cursor.position(), 0);
            let writing = write_later(writer, 10, b"after");
            let n = cursor.read(&mut buf).await.unwrap();
            drop(writing.join().unwrap());
            assert_eq!(&buf[..n], b"after");
            let n = cursor.read(&mut buf).await.unwrap();
            assert_eq!(n, 0, "the end, once the writer is gone");
            cursor.position()
        });
        assert_eq!(gdex::block_on(task).unwrap(), 5);
    });
}

/// A write's error (`/dev/full`: no space) comes at the next call that
/// waits for that write: `flush`, or the next write once a full buffer
/// was handed on; the position is then where the data written ends, and
/// the cursor goes on working. `close` gives it too.
#[test]
fn a_write_error_comes_at_the_next_call() {
    watchdog("a_write_error_comes_at_the_next_call", 30, || {
        let pool = pool(1);
        let task = pool.scheduler().spawn(async {
            let full = OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .await
                .unwrap();
            let mut cursor = FileCursor::with_capacity(8, full);
            assert_eq!(cursor.write(b"1234").await.unwrap(), 4, "held");
            assert_eq!(cursor.position(), 4);
            let err = cursor.flush().await.unwrap_err();
            assert_eq!(cursor.position(), 0, "nothing was written");
            let err = gdex::Error::from(err);
            assert!(err.matches(IOErrorEnum::NoSpace), "{err}");
            assert!(err.to_string().contains("/dev/full"), "{err}");
            assert!(cursor.flush().await.is_ok(), "given once");
            assert_eq!(cursor.write(b"12345678").await.unwrap(), 8, "handed on");
            let err = cursor.write(b"9").await.unwrap_err();
            assert!(gdex::Error::from(err).matches(IOErrorEnum::NoSpace));
            assert_eq!(cursor.write(b"9").await.unwrap(), 1, "held again");
            assert!(cursor.close().await.is_err(), "close gives it");
            cursor.position()
        });
        assert_eq!(gdex::block_on(task).unwrap(), 0);
    });
}

/// Misuse is refused with a message that says what was wrong and what to
/// do: a write to a file opened only for reading, a read of one opened
/// only for writing, a seek before the start or past `i64::MAX`, a seek
/// on a pipe, a second tokio `start_seek` before the first completed, a
/// buffer of no bytes.
#[test]
fn misuse_is_refused_with_a_clear_error() {
    watchdog("misuse_is_refused_with_a_clear_error", 30, || {
        let dir = TempDir::new("cursor-misuse");
        let path = dir.file("misuse", b"some bytes");
        let pool = pool(1);
        let task = pool.scheduler().spawn({
            let path = path.clone();
            async move {
                let mut messages = Vec::new();
                let mut read_only = File::open(&path).await.unwrap().cursor();
                messages.push(read_only.write(b"x").await.unwrap_err().to_string());
                let write_only = OpenOptions::new().write(true).open(&path).await.unwrap();
                let mut write_only = write_only.cursor();
                messages.push(write_only.read(&mut [0; 4]).await.unwrap_err().to_string());
                use futures::AsyncSeekExt as _;
                let before = read_only.seek(SeekFrom::Current(-1)).await.unwrap_err();
                assert_eq!(before.kind(), std::io::ErrorKind::InvalidInput);
                messages.push(before.to_string());
                let past = read_only.seek(SeekFrom::Start(u64::MAX)).await.unwrap_err();
                messages.push(past.to_string());
                let (pipe, _writer) = pipe();
                let on_pipe = pipe.cursor().seek(SeekFrom::Start(0)).await.unwrap_err();
                messages.push(on_pipe.to_string());
                #[cfg(feature = "tokio")]
                {
                    use tokio::io::AsyncSeek as _;
                    Pin::new(&mut read_only)
                        .start_seek(SeekFrom::Start(1))
                        .unwrap();
                    let again = Pin::new(&mut read_only)
                        .start_seek(SeekFrom::Start(2))
                        .unwrap_err();
                    messages.push(again.to_string());
                    let at = tokio::io::AsyncSeekExt::stream_position(&mut read_only).await;
                    assert_eq!(at.unwrap(), 1, "the first seek stands");
                }
                messages
            }
        });
        let messages = gdex::block_on(task).unwrap();
        let expected = [
            "not opened to write; open it with OpenOptions::write or append",
            "not opened to read; open it with OpenOptions::read",
            "Current(-1) from position 0 is out of range (a position is 0 to i64::MAX)",
            "is out of range",
            "a pipe or a socket, which has no position",
            "a seek was started and not completed",
        ];
        for (message, expected) in messages.iter().zip(expected) {
            assert!(message.contains(expected), "{message:?} lacks {expected:?}");
        }
        assert!(
            messages[0].contains("misuse"),
            "names the file: {}",
            messages[0]
        );
        let zero = std::panic::catch_unwind(|| {
            FileCursor::with_capacity(0, File::from(std::fs::File::open(&path).unwrap()))
        })
        .unwrap_err();
        let zero = common::panic_message(zero);
        assert!(zero.contains("a capacity of 0 bytes; give 1 to"), "{zero}");
    });
}
