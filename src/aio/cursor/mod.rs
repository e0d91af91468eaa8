//! [`FileCursor`]: a [`File`] and a position, as an async stream
//! (futures-io's `AsyncRead`, `AsyncBufRead`, `AsyncWrite`, `AsyncSeek`,
//! and tokio's behind the `tokio` feature), with a read-ahead buffer and a
//! write-behind one on top of [`File::read_at`] and [`File::write_at`].
//!
//! # The states
//!
//! A cursor is in one of five states, and its logical position `pos` (the
//! one `std::fs::File` would have) is always known from it:
//!
//! | state | what it holds | `pos` |
//! | --- | --- | --- |
//! | `Idle` | an empty buffer (kept for reuse) | anywhere |
//! | `ReadAhead` | a [`ReadAt`] in flight at `start` | `start` |
//! | `Reading` | `buf`, the file's bytes at `start..`, of which `consumed` were taken | `start + consumed` |
//! | `Writing` | `buf`, bytes accepted for `start..`, not yet handed to the kernel | `start + buf.len()` |
//! | `Flushing` | a [`WriteBehind`] in flight for `start..start + len` | `start + len` |
//!
//! A read settles the writes first (hands `Writing`'s bytes to the kernel
//! and waits for `Flushing`), so it reads what was written; a write drops
//! what was read ahead (a `ReadAhead` in flight is cancelled, as any
//! dropped operation is); a seek settles the writes, and keeps the read
//! buffer only when the new position falls inside it. One buffer is used
//! throughout: [`File::read_at`] and [`File::write_at`] take it and give it
//! back, so once it exists, no read or write allocates a buffer (and on
//! io_uring a read allocates nothing at all: `tests/alloc.rs`).
//!
//! A write-behind's error is given by the next call that waits for it (a
//! write, a read, a seek, a flush or a close): never dropped while the
//! cursor lives. A cursor dropped with writes pending hands them to a task
//! on the default pool, which finishes them (see [`FileCursor`]'s docs).
//!
//! The parts: the cursor and its states (here); a buffer's write as a
//! future it can hold and hand on (`write_behind.rs`); the futures-io and
//! tokio traits over them (`io_traits.rs`).

use std::fmt;
use std::future::Future;
use std::io::{self, SeekFrom};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

mod io_traits;
mod write_behind;

use super::op::ReadAt;
use super::operation::error_for;
use super::File;
use write_behind::WriteBehind;

/// The read-ahead and write-behind buffer's size unless
/// [`FileCursor::with_capacity`] says otherwise: large enough that a loop
/// reading lines costs one operation per 128 KiB, not one per line.
pub const DEFAULT_CAPACITY: usize = 128 * 1024;

/// A [`File`] read and written as a stream, from a position of its own:
/// `std::fs::File`'s and `tokio::fs::File`'s model (read, write, seek;
/// `futures::io::BufReader::lines`, `futures::io::copy`), on gdex's
/// io_uring operations (or the blocking lane, [`backend`](super::backend)).
///
/// It implements futures-io's `AsyncRead`, `AsyncBufRead`, `AsyncWrite`
/// and `AsyncSeek` (as `futures::io` re-exports them), and with the
/// `tokio` feature tokio's `AsyncRead`, `AsyncBufRead`, `AsyncWrite` and
/// `AsyncSeek`. Made by [`File::cursor`] (at position 0),
/// [`FileCursor::with_capacity`] or `From<File>`.
///
/// # Buffers
///
/// Reads go through a read-ahead buffer of [`DEFAULT_CAPACITY`] bytes: a
/// read takes what the buffer holds, and when it is empty one
/// [`File::read_at`] fills it again, so `lines()` costs one operation per
/// buffer, not one per line. No `BufReader` is needed on top (it would
/// copy twice). Writes are gathered in the same buffer and handed to the
/// kernel when it is full, or at `flush` / `close` (tokio: `shutdown`), a
/// read, or a seek: a write returns as soon as its bytes are copied in
/// (write-behind), and one operation at a time is in flight.
///
/// # Where it differs from `std::fs::File`
///
/// - Its position is its own: the descriptor's offset is never used or
///   moved (every operation is positional), so clones of the [`File`] and
///   other cursors on it do not share it, as `dup`'ed descriptors would.
/// - A write's error comes at the next call that waits for that write:
///   another write, a read, a seek, `flush` or `close`. Flush before you
///   are done to see it. After an error, the position is where the file's
///   data written through the cursor ends (right after the last byte the
///   kernel took).
/// - Data read ahead is the file's as it was read: a change made through
///   another descriptor to bytes already in the buffer is seen after a
///   seek outside the buffer, as with `std::io::BufReader`. A seek to a
///   position inside the buffer keeps it (a `stream_position` query costs
///   nothing).
/// - On a file opened for appending, writes go to the end of the file (as
///   `pwrite` does there on Linux), and the position after a write is
///   the file's size when the write began plus what was written since.
/// - Dropping a cursor with writes not yet done (accepted, but not
///   flushed) does not lose them: they go on in a task on the default
///   pool (on a thread of their own if the app shut that pool down), as
///   `tokio::fs::File`'s do on its blocking pool, and an error there is
///   logged (`G_LOG_DOMAIN` `gdex`, a warning). Flush first to know they
///   landed: a process that exits first loses them. A read in flight is
///   cancelled.
/// - A seek checks its target against `i64::MAX` (std's `off_t`), not
///   against the file system's largest file size, as `lseek(2)` does
///   (ext4: 16 TiB; std's seek past it fails with `InvalidInput`). A read
///   there gives the end of the file, a write fails (`EFBIG`).
/// - `flush` does not `fsync`: it hands the data to the kernel, as
///   `std::fs::File`'s `write` does. Use `std::fs::File::sync_all` on the
///   descriptor where that is needed.
///
/// Errors are `std::io::Error`s of the kind the `G_IO_ERROR` code gives,
/// carrying the [`Error`](crate::Error) (`gdex::Error::from(io_error)`
/// gives it back), whose message names the file.
///
/// ```
/// use futures::{AsyncBufReadExt, AsyncSeekExt, AsyncWriteExt, TryStreamExt};
///
/// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
/// let path = std::env::temp_dir().join(format!("gdex-cursor-doc-{}", std::process::id()));
/// let task = pool.scheduler().spawn({
///     let path = path.clone();
///     async move {
///         let mut out = gdex::aio::File::create(&path).await?.cursor();
///         out.write_all(b"one\ntwo\nthree\n").await?;
///         out.close().await?; // the write's error, if any, comes here
///
///         let mut lines = gdex::aio::File::open(&path).await?.cursor();
///         lines.seek(std::io::SeekFrom::Start(4)).await?;
///         let rest: Vec<String> = lines.lines().try_collect().await?;
///         assert_eq!(rest, ["two", "three"]);
///         Ok::<_, std::io::Error>(())
///     }
/// });
/// gdex::block_on(task)??;
/// # std::fs::remove_file(&path).unwrap();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct FileCursor {
    file: File,
    /// The logical position (the table in the module's docs).
    pos: u64,
    capacity: usize,
    state: State,
    access: Access,
    /// A seek tokio's `start_seek` asked for, done by the next poll.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    started_seek: Option<SeekFrom>,
}

/// What the descriptor allows, looked up once (`fcntl`, `lseek`).
#[derive(Clone, Copy, Debug)]
struct Access {
    read: bool,
    write: bool,
    append: bool,
    /// Not a pipe or socket (`lseek` works): a seek on one fails with
    /// `ESPIPE`, as std's does.
    seekable: bool,
}

enum State {
    Idle(Vec<u8>),
    ReadAhead {
        op: ReadAt,
        start: u64,
    },
    Reading {
        buf: Vec<u8>,
        start: u64,
        consumed: usize,
    },
    Writing {
        buf: Vec<u8>,
        start: u64,
    },
    Flushing(WriteBehind),
}

impl File {
    /// This file as a stream at position 0 ([`FileCursor`]): read, write
    /// and seek it as `tokio::fs::File`, with a read-ahead and
    /// write-behind buffer of [`DEFAULT_CAPACITY`] bytes. The `File` is
    /// shared (cloned), not moved.
    pub fn cursor(&self) -> FileCursor {
        FileCursor::with_capacity(DEFAULT_CAPACITY, self.clone())
    }
}

impl From<File> for FileCursor {
    fn from(file: File) -> FileCursor {
        FileCursor::with_capacity(DEFAULT_CAPACITY, file)
    }
}

impl FileCursor {
    /// A cursor on `file` at position 0 whose buffer holds `capacity`
    /// bytes (allocated at the first read or write, then reused): each
    /// read operation asks for that many, and writes are handed to the
    /// kernel that many at a time.
    ///
    /// # Panics
    /// If `capacity` is 0 (there would be nowhere to read into), or over
    /// `u32::MAX` (the most one operation moves).
    ///
    /// ```
    /// # let file = gdex::aio::File::from(std::fs::File::open("/dev/null").unwrap());
    /// let cursor = gdex::aio::FileCursor::with_capacity(1 << 20, file);
    /// assert_eq!(cursor.position(), 0);
    /// ```
    pub fn with_capacity(capacity: usize, file: File) -> FileCursor {
        assert!(
            (1..=u32::MAX as usize).contains(&capacity),
            "gdex::aio::FileCursor::with_capacity: a capacity of {capacity} bytes; give 1 to \
             u32::MAX (the default, DEFAULT_CAPACITY, is {DEFAULT_CAPACITY})"
        );
        let access = Access::of(&file);
        FileCursor {
            file,
            pos: 0,
            capacity,
            state: State::Idle(Vec::new()),
            access,
            started_seek: None,
        }
    }

    /// The position the next read or write starts at (bytes written but
    /// not yet flushed count, bytes read ahead but not yet taken do not).
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// The file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The buffer's size ([`with_capacity`](Self::with_capacity)).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// `buf`, emptied, to start a read or a write with; a new one if it
    /// holds fewer than `capacity` bytes (the first time).
    fn fresh_buffer(mut buf: Vec<u8>, capacity: usize) -> Vec<u8> {
        buf.clear();
        if buf.capacity() < capacity {
            buf = Vec::with_capacity(capacity);
        }
        buf
    }

    /// Drops what was read ahead, keeping the buffer; a read in flight is
    /// cancelled (dropped), and its buffer goes with it. `pos` stays.
    fn discard_reads(&mut self) {
        match &mut self.state {
            State::Reading { buf, .. } => {
                let buf = std::mem::take(buf);
                self.state = State::Idle(buf);
            }
            State::ReadAhead { .. } => self.state = State::Idle(Vec::new()),
            _ => {}
        }
    }

    /// Hands the bytes gathered to the kernel and waits until every write
    /// is done: `Ready(Ok)` leaves the cursor `Idle` or reading. A failed
    /// write leaves it `Idle` at the end of what was written.
    fn poll_settle_writes(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            match &mut self.state {
                State::Writing { buf, .. } if buf.is_empty() => {
                    let buf = std::mem::take(buf);
                    self.state = State::Idle(buf);
                }
                State::Writing { buf, start } => {
                    let (buf, start) = (std::mem::take(buf), *start);
                    self.state = State::Flushing(WriteBehind::new(&self.file, buf, start));
                }
                State::Flushing(write) => {
                    let done = ready!(Pin::new(write).poll(cx));
                    match done {
                        Ok(buf) => self.state = State::Idle(buf),
                        Err(failed) => {
                            self.pos = failed.written_to;
                            self.state = State::Idle(Vec::new());
                            return Poll::Ready(Err(failed.error.into()));
                        }
                    }
                }
                _ => return Poll::Ready(Ok(())),
            }
        }
    }

    /// Finishes a seek tokio's `start_seek` asked for, if any.
    fn poll_started_seek(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(to) = self.started_seek {
            let done = ready!(self.poll_seek_to(cx, to));
            self.started_seek = None;
            done?;
        }
        Poll::Ready(Ok(()))
    }

    /// Fills the read buffer if it is empty: `Ready(Ok)` leaves the cursor
    /// `Reading`, with nothing left in it only at the end of the file.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_started_seek(cx))?;
        if !self.access.read {
            return Poll::Ready(Err(self.refused("reading", "read")));
        }
        loop {
            match &mut self.state {
                State::Reading { buf, consumed, .. } if *consumed < buf.len() => {
                    return Poll::Ready(Ok(()));
                }
                State::Writing { .. } | State::Flushing(_) => {
                    ready!(self.poll_settle_writes(cx))?;
                }
                State::Idle(buf) | State::Reading { buf, .. } => {
                    let buf = Self::fresh_buffer(std::mem::take(buf), self.capacity);
                    self.state = State::ReadAhead {
                        op: self.file.read_at(buf, self.pos),
                        start: self.pos,
                    };
                }
                State::ReadAhead { op, start } => {
                    let start = *start;
                    match ready!(Pin::new(op).poll(cx)) {
                        Ok(buf) => {
                            self.state = State::Reading {
                                buf,
                                start,
                                consumed: 0,
                            };
                            return Poll::Ready(Ok(()));
                        }
                        Err(err) => {
                            self.state = State::Idle(Vec::new());
                            return Poll::Ready(Err(err.into()));
                        }
                    }
                }
            }
        }
    }

    /// A read of nothing: nothing done, but refused as std's (`read(2)`'s)
    /// is where reading is not allowed.
    fn poll_read_nothing(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_started_seek(cx))?;
        if !self.access.read {
            return Poll::Ready(Err(self.refused("reading", "read")));
        }
        Poll::Ready(Ok(()))
    }

    /// Whether a read can be served from the buffer as it is (no tokio
    /// seek waiting to be done first).
    #[inline]
    fn holds_read_data(&self) -> bool {
        matches!(&self.state, State::Reading { buf, consumed, .. } if *consumed < buf.len())
            && self.started_seek.is_none()
    }

    /// What the read buffer holds from the position on.
    #[inline]
    fn buffered(&self) -> &[u8] {
        match &self.state {
            State::Reading { buf, consumed, .. } => &buf[*consumed..],
            _ => &[],
        }
    }

    /// Takes `amt` bytes of the read buffer (at most what it holds).
    #[inline]
    fn consume_buffered(&mut self, amt: usize) {
        if let State::Reading { buf, consumed, .. } = &mut self.state {
            let amt = amt.min(buf.len() - *consumed);
            *consumed += amt;
            self.pos += amt as u64;
        }
    }

    /// Reads into `into` from the read buffer, filling it first if empty.
    fn poll_read_into(&mut self, cx: &mut Context<'_>, into: &mut [u8]) -> Poll<io::Result<usize>> {
        if into.is_empty() {
            return self.poll_read_nothing(cx).map_ok(|()| 0);
        }
        ready!(self.poll_fill(cx))?;
        let have = self.buffered();
        let n = have.len().min(into.len());
        into[..n].copy_from_slice(&have[..n]);
        self.consume_buffered(n);
        Poll::Ready(Ok(n))
    }

    /// Accepts up to a buffer's worth of `data` at the position; starts
    /// the write when the buffer is full.
    fn poll_write_from(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        ready!(self.poll_started_seek(cx))?;
        if !self.access.write {
            return Poll::Ready(Err(self.refused("writing to", "write")));
        }
        self.discard_reads();
        loop {
            match &mut self.state {
                State::Flushing(_) => ready!(self.poll_settle_writes(cx))?,
                State::Idle(_) if data.is_empty() => return Poll::Ready(Ok(0)),
                State::Idle(buf) => {
                    let buf = Self::fresh_buffer(std::mem::take(buf), self.capacity);
                    if self.access.append {
                        // The kernel appends whatever the offset: the data
                        // lands at the end, and the position follows it.
                        self.pos = self.file.metadata()?.len();
                    }
                    self.state = State::Writing {
                        buf,
                        start: self.pos,
                    };
                }
                State::Writing { buf, start } => {
                    let n = data.len().min(self.capacity - buf.len());
                    buf.extend_from_slice(&data[..n]);
                    self.pos += n as u64;
                    if buf.len() == self.capacity {
                        // Full: to the kernel now, and polled once so that
                        // it is queued (write-behind); its completion wakes
                        // this task once, harmlessly.
                        let (buf, start) = (std::mem::take(buf), *start);
                        let mut write = WriteBehind::new(&self.file, buf, start);
                        match Pin::new(&mut write).poll(cx) {
                            Poll::Pending => self.state = State::Flushing(write),
                            Poll::Ready(Ok(buf)) => self.state = State::Idle(buf),
                            Poll::Ready(Err(failed)) => {
                                // These bytes were accepted: the error is
                                // given with the next call, never lost.
                                self.state =
                                    State::Flushing(WriteBehind::failed(&self.file, failed));
                            }
                        }
                    }
                    return Poll::Ready(Ok(n));
                }
                State::ReadAhead { .. } | State::Reading { .. } => {
                    unreachable!("reads were discarded")
                }
            }
        }
    }

    /// Moves the position to `to`, once the writes are done.
    fn poll_seek_to(&mut self, cx: &mut Context<'_>, to: SeekFrom) -> Poll<io::Result<u64>> {
        ready!(self.poll_settle_writes(cx))?;
        if !self.access.seekable {
            let err = error_for(
                libc::ESPIPE,
                "seeking in",
                self.file.path(),
                "Illegal seek (the file is a pipe or a socket, which has no position)",
            );
            return Poll::Ready(Err(err.into()));
        }
        let target = match to {
            SeekFrom::Start(at) => Some(at),
            SeekFrom::Current(by) => self.pos.checked_add_signed(by),
            SeekFrom::End(by) => self.file.metadata()?.len().checked_add_signed(by),
        };
        let target = match target {
            Some(target) if target <= i64::MAX as u64 => target,
            _ => {
                let err = error_for(
                    libc::EINVAL,
                    "seeking in",
                    self.file.path(),
                    &format!(
                        "{to:?} from position {} is out of range (a position is 0 to \
                         i64::MAX)",
                        self.pos
                    ),
                );
                return Poll::Ready(Err(err.into()));
            }
        };
        match &mut self.state {
            State::Reading {
                buf,
                start,
                consumed,
            } if (*start..=*start + buf.len() as u64).contains(&target) => {
                *consumed = (target - *start) as usize;
            }
            State::ReadAhead { start, .. } if *start == target => {}
            _ => self.discard_reads(),
        }
        self.pos = target;
        Poll::Ready(Ok(target))
    }

    fn poll_flush_writes(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_started_seek(cx))?;
        self.poll_settle_writes(cx)
    }

    /// The error for a read or write the descriptor's mode does not allow
    /// (std's `EBADF`), saying so.
    fn refused(&self, doing: &str, verb: &str) -> io::Error {
        let how = if verb == "read" {
            "OpenOptions::read"
        } else {
            "OpenOptions::write or append"
        };
        error_for(
            libc::EBADF,
            doing,
            self.file.path(),
            &format!("Bad file descriptor (the file was not opened to {verb}; open it with {how})"),
        )
        .into()
    }
}

impl Access {
    fn of(file: &File) -> Access {
        let fd = file.as_raw_fd();
        // SAFETY: `fd` is open while `file` lives; F_GETFL reads flags only.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above; SEEK_CUR by 0 moves nothing, it only asks.
        let seekable = unsafe { libc::lseek(fd, 0, libc::SEEK_CUR) } >= 0;
        if flags < 0 {
            // Not a descriptor fcntl knows (cannot be, for an open one):
            // let the operations say what is wrong.
            return Access {
                read: true,
                write: true,
                append: false,
                seekable,
            };
        }
        let mode = flags & libc::O_ACCMODE;
        Access {
            read: mode == libc::O_RDONLY || mode == libc::O_RDWR,
            write: mode == libc::O_WRONLY || mode == libc::O_RDWR,
            append: flags & libc::O_APPEND != 0,
            seekable,
        }
    }
}

impl Drop for FileCursor {
    fn drop(&mut self) {
        let rest = match std::mem::replace(&mut self.state, State::Idle(Vec::new())) {
            State::Writing { buf, start } if !buf.is_empty() => {
                WriteBehind::new(&self.file, buf, start)
            }
            State::Flushing(write) => write,
            // A read in flight is dropped (cancelled) here.
            _ => return,
        };
        let finish = async move {
            if let Err(failed) = rest.await {
                glib::g_warning!(
                    "gdex",
                    "a gdex::aio::FileCursor was dropped with writes pending, and they failed: \
                     {}; flush (or close) the cursor before dropping it to see such errors",
                    failed.error
                );
            }
        };
        let pool = crate::ThreadPool::default();
        if !pool.is_closed() {
            pool.scheduler().spawn(finish).detach();
        } else if let Err(err) = std::thread::Builder::new()
            .name("gdex-cursor-flush".into())
            .spawn(move || crate::wait_for(finish))
        {
            // The app shut the default pool down, and no thread can start.
            glib::g_warning!(
                "gdex",
                "a gdex::aio::FileCursor was dropped with writes pending, and nothing can finish \
                 them (the default pool is shut down, and a thread cannot start: {err}); they are \
                 lost: flush the cursor before dropping it"
            );
        }
    }
}

impl fmt::Debug for FileCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Idle(_) => "idle",
            State::ReadAhead { .. } => "reading ahead",
            State::Reading { .. } => "holding read data",
            State::Writing { .. } => "holding written data",
            State::Flushing(_) => "writing",
        };
        f.debug_struct("FileCursor")
            .field("file", &self.file)
            .field("position", &self.pos)
            .field("state", &state)
            .field("capacity", &self.capacity)
            .finish()
    }
}
