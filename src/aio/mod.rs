//! File I/O the libdex way (A1): [`File::open`], [`File::read_at`],
//! [`File::write_at`] and [`read_file`] as futures, on an io_uring ring of
//! the scheduler that awaits them; and a file as an async stream
//! ([`File::cursor`], a [`FileCursor`]: futures-io's and tokio's
//! `AsyncRead`, `AsyncBufRead`, `AsyncWrite` and `AsyncSeek`, as
//! `tokio::fs::File`).
//!
//! # Where the I/O happens
//!
//! Each `GMainContext` a gdex scheduler waits on (a pool worker's, the main
//! context, a context scheduler's) gets its own io_uring ring the first time
//! an operation is polled there, so each pool worker and the main thread
//! own one. The ring's fd is one source on that context:
//!
//! - an operation polled on the thread queues its request; all the requests
//!   queued during one turn of the loop go to the kernel together, in one
//!   `io_uring_enter`, when the context next prepares to poll;
//! - the thread sleeps in its context's `poll` with the ring's fd in the set,
//!   and when completions arrive the source wakes the awaiting tasks: no
//!   extra thread, and a read that hits the page cache completes during the
//!   submission itself.
//!
//! An operation follows the task that awaits it (A2): polled on another
//! context than its ring's (its task moved to another worker, its pool
//! was shut down, or a `block_on` loop stopped and the future is awaited
//! with [`wait_for`](crate::wait_for)), an operation not yet handed to the
//! kernel starts again there, and one in the kernel completes through the
//! first ring, which the new context then watches: no operation depends on
//! a loop that no longer runs. While a worker sits in one long poll (a
//! CPU-bound job, a call in [`blocking::blocking`]), the pool's monitor
//! reaps its ring and hands the operations queued there back to their
//! tasks, which run on a peer, as its overdue timers do.
//!
//! Only the thread that iterates a ring's context hands requests to the
//! kernel, which ties the work it queues for a request to the thread that
//! submitted it: a thread that drops an operation, or exits, fails no
//! other operation. A request the kernel stops before it ran (its
//! submitter exited, a signal came) starts again, as an interrupted
//! system call is restarted; the kernel's internal codes ("Unknown error
//! 512") never reach the caller.
//!
//! # Buffers and cancellation
//!
//! Buffers are owned: [`File::read_at`] takes a `Vec<u8>` and gives it back
//! with what was read appended, [`File::write_at`] takes one and gives it
//! back with the count written. No borrowed buffer can be freed while the
//! kernel writes into it. Dropping an operation's future while it is in
//! flight cancels the request (`IORING_OP_ASYNC_CANCEL`) and the ring keeps
//! the buffer (and the file) until the kernel has completed the request; an
//! `open` whose future was dropped closes the file it opened. The cancel
//! goes to the kernel with the drop, but a request the kernel has already
//! completed stays done: a dropped read of a stream (a pipe, a socket) may
//! have taken data, which is then lost with its buffer.
//!
//! A ring has room for 256 operations in the kernel at once (more wait in
//! its backlog, in order). Most complete at once; a read of a pipe or a
//! socket with no data waits, and holds its place while it waits: with 256
//! such reads waiting on one context, later operations there, plain-file
//! reads included, wait for one of them to complete. Wait for streams'
//! readiness with [`unix_fd`](crate::unix_fd) instead, and read them when
//! they are ready.
//!
//! # Without io_uring
//!
//! Where io_uring cannot be used (a kernel without it, `ENOSYS`, or one
//! where it is refused, `EPERM` under a seccomp filter, or
//! `/proc/sys/kernel/io_uring_disabled`), or when the environment variable
//! `GDEX_AIO=blocking` asks for it, the same API runs each operation as a
//! plain system call on the blocking lane ([`spawn_blocking`]). Dropping
//! the future then drops an operation still queued; one already running
//! finishes and its result is discarded (the file an open made is
//! closed). [`backend`] tells which is in use.
//!
//! Both backends open, read and write as `open(2)`, `pread(2)` and
//! `pwrite(2)` do, and refuse what `std::fs::OpenOptions` refuses (A2): a
//! FIFO opened for reading or writing only waits for its other end (on
//! io_uring too, whose first, non-blocking try would not); a call that a
//! signal interrupted is made again.
//!
//! Errors are [`Error::Failed`] with a `glib::Error` in `G_IO_ERROR`'s
//! domain (`gio::IOErrorEnum`, from the errno as `g_io_error_from_errno`
//! maps it), and a message that names the file, as GIO words its own.
//!
//! ```
//! let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
//! let path = std::env::temp_dir().join(format!("gdex-aio-doc-{}", std::process::id()));
//! let task = pool.scheduler().spawn({
//!     let path = path.clone();
//!     async move {
//!         let file = gdex::aio::File::create(&path).await?;
//!         file.write_all_at(b"hello, aio".to_vec(), 0).await?;
//!         let file = gdex::aio::File::open(&path).await?;
//!         let buf = file.read_at(Vec::with_capacity(64), 7).await?;
//!         assert_eq!(buf, b"aio");
//!         gdex::aio::read_file(&path).await
//!     }
//! });
//! assert_eq!(gdex::block_on(task)??, b"hello, aio");
//! # std::fs::remove_file(&path).unwrap();
//! # Ok::<(), gdex::Error>(())
//! ```
//!
//! [`spawn_blocking`]: crate::spawn_blocking
//! [`blocking::blocking`]: crate::blocking::blocking

mod cursor;
mod op;
mod open_options;
mod operation;
mod uring;
mod valgrind;

use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::error::Error;
pub use cursor::{FileCursor, DEFAULT_CAPACITY};
use op::Op;
pub use op::{Open, ReadAt, WriteAt};
pub use open_options::OpenOptions;
use operation::{error_for, Operation};

/// Which mechanism runs this process's AIO operations ([`backend`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// An io_uring ring per scheduler context.
    IoUring,
    /// Plain system calls on the blocking lane: io_uring is unavailable, or
    /// `GDEX_AIO=blocking` asked for it.
    BlockingLane,
}

/// The backend this process uses, chosen once, at the first call (or the
/// first operation): `GDEX_AIO=blocking` forces the blocking lane,
/// `GDEX_AIO=io_uring` (or no setting) uses io_uring if the kernel lets
/// this process set up a ring, and the blocking lane otherwise.
///
/// ```
/// let backend = gdex::aio::backend();
/// assert!(matches!(backend, gdex::aio::Backend::IoUring | gdex::aio::Backend::BlockingLane));
/// ```
pub fn backend() -> Backend {
    static BACKEND: OnceLock<Backend> = OnceLock::new();
    *BACKEND.get_or_init(|| {
        let forced = crate::util::env_setting(
            "GDEX_AIO",
            "`io_uring` or `blocking`",
            || "using io_uring where the kernel allows it".into(),
            |text| match text {
                "io_uring" | "io-uring" | "uring" => Some(Backend::IoUring),
                "blocking" | "posix" => Some(Backend::BlockingLane),
                _ => None,
            },
        );
        if forced == Some(Backend::BlockingLane) {
            return Backend::BlockingLane;
        }
        match uring::probe() {
            Ok(()) => Backend::IoUring,
            Err(err) => {
                glib::g_info!(
                    "gdex",
                    "io_uring is unavailable ({}); gdex::aio runs on the blocking lane",
                    err
                );
                Backend::BlockingLane
            }
        }
    })
}

/// An open file for AIO: cheap to clone (the clones share one descriptor,
/// closed when the last of them, and the last operation using it, is
/// gone). Made by [`File::open`], [`File::create`], [`OpenOptions::open`],
/// or from a `std::fs::File` or an `OwnedFd`.
#[derive(Clone)]
pub struct File {
    inner: Arc<FileInner>,
}

struct FileInner {
    fd: OwnedFd,
    /// For error messages; `None` for a file made from a descriptor.
    path: Option<PathBuf>,
}

impl File {
    /// The file of a new fd that an open of `path` made.
    fn opened(fd: OwnedFd, path: PathBuf) -> File {
        File {
            inner: Arc::new(FileInner {
                fd,
                path: Some(path),
            }),
        }
    }

    /// Opens `path` for reading, like `std::fs::File::open`.
    pub fn open(path: impl AsRef<Path>) -> Open {
        OpenOptions::new().read(true).open(path)
    }

    /// Opens `path` for writing, creating it if needed and truncating it
    /// if not, like `std::fs::File::create`.
    pub fn create(path: impl AsRef<Path>) -> Open {
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
    }

    /// Reads up to the buffer's spare capacity (`capacity() - len()`, at
    /// most `u32::MAX`) from the file at `offset`, appends what it read to
    /// the buffer and gives the buffer back. Fewer bytes than asked is a
    /// short read (read again from where it stopped); none at all is the end
    /// of the file. On a stream (a pipe, a socket) there is no position:
    /// `offset` is ignored and the read takes what the stream has, as
    /// `read(2)` does, on both backends. An `offset` past `i64::MAX`, which
    /// no file has, fails with `InvalidArgument` (to io_uring, `u64::MAX`
    /// would mean the file's current position).
    ///
    /// # Panics
    /// If the buffer has no spare capacity: there would be nothing to read
    /// into. Reserve room first (`Vec::with_capacity`, `reserve`).
    pub fn read_at(&self, buf: Vec<u8>, offset: u64) -> ReadAt {
        assert!(
            buf.capacity() > buf.len(),
            "gdex::aio::File::read_at: the buffer has no spare capacity (len {} == capacity); \
             a read appends to the buffer, so reserve room first, e.g. Vec::with_capacity(64 * 1024)",
            buf.len()
        );
        ReadAt {
            op: Op::new(Operation::Read {
                file: self.inner.clone(),
                buf,
                offset,
            }),
        }
    }

    /// Writes the buffer (at most `u32::MAX` bytes of it) to the file at
    /// `offset` and gives back how many bytes were written, which may be
    /// fewer (see [`write_all_at`](Self::write_all_at)), and the buffer.
    /// `offset` is as for [`read_at`](Self::read_at): ignored on a stream,
    /// refused past `i64::MAX`.
    pub fn write_at(&self, buf: Vec<u8>, offset: u64) -> WriteAt {
        self.write_from(buf, 0, offset)
    }

    /// Writes `buf[from..]` at `offset`.
    fn write_from(&self, buf: Vec<u8>, from: usize, offset: u64) -> WriteAt {
        WriteAt {
            op: Op::new(Operation::Write {
                file: self.inner.clone(),
                buf,
                from,
                offset,
            }),
        }
    }

    /// Writes the whole buffer at `offset`, going on after short writes
    /// (from where each stopped, in the same buffer: nothing is copied),
    /// and gives the buffer back.
    pub async fn write_all_at(&self, mut buf: Vec<u8>, offset: u64) -> Result<Vec<u8>, Error> {
        let total = buf.len();
        let mut done = 0;
        while done < total {
            let (written, back) = self
                .write_from(buf, done, offset.saturating_add(done as u64))
                .await?;
            buf = back;
            if written == 0 {
                return Err(self.error(
                    libc::EIO,
                    "writing to",
                    "the system wrote nothing (0 bytes)",
                ));
            }
            done += written;
        }
        Ok(buf)
    }

    /// The file's metadata (`fstat`: its size, type and times), read now.
    /// A plain system call, not an operation: on an open file it does not
    /// wait for the disk.
    pub fn metadata(&self) -> std::io::Result<std::fs::Metadata> {
        // SAFETY: the fd is open while `self` lives; the `ManuallyDrop`
        // keeps this borrowed `std::fs::File` from closing it.
        let file = std::mem::ManuallyDrop::new(unsafe {
            std::fs::File::from_raw_fd(self.inner.fd.as_raw_fd())
        });
        file.metadata()
    }

    /// The path this file was opened with, if it was opened by path.
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    fn error(&self, errno: i32, doing: &str, why: &str) -> Error {
        error_for(errno, doing, self.inner.path.as_deref(), why)
    }
}

impl From<std::fs::File> for File {
    fn from(file: std::fs::File) -> File {
        OwnedFd::from(file).into()
    }
}

impl From<OwnedFd> for File {
    fn from(fd: OwnedFd) -> File {
        File {
            inner: Arc::new(FileInner { fd, path: None }),
        }
    }
}

impl AsFd for File {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.fd.as_fd()
    }
}

impl AsRawFd for File {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.fd.as_raw_fd()
    }
}

impl fmt::Debug for File {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("File")
            .field("fd", &self.inner.fd.as_raw_fd())
            .field("path", &self.inner.path)
            .finish()
    }
}

/// Reads the whole file at `path`, as `std::fs::read` (and GIO's
/// `g_file_load_contents`) do: open, read to the end, close.
///
/// ```
/// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
/// let task = pool.scheduler().spawn(gdex::aio::read_file("/nonexistent/gdex"));
/// let err = gdex::block_on(task).unwrap().unwrap_err();
/// assert!(err.matches(gdex::gio::IOErrorEnum::NotFound), "{err}");
/// ```
pub async fn read_file(path: impl AsRef<Path>) -> Result<Vec<u8>, Error> {
    let file = File::open(path).await?;
    // The size now is a hint (the file may grow or shrink meanwhile): read
    // until a read gives nothing.
    let hint = file
        .metadata()
        .ok()
        .and_then(|meta| usize::try_from(meta.len()).ok())
        .unwrap_or(0);
    let mut buf = Vec::with_capacity(hint.saturating_add(1).min(1 << 30));
    loop {
        if buf.capacity() == buf.len() {
            buf.reserve((buf.len() / 2).max(64 * 1024));
        }
        let before = buf.len();
        buf = file.read_at(buf, before as u64).await?;
        if buf.len() == before {
            return Ok(buf);
        }
    }
}
