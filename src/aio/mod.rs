//! File I/O the libdex way (A1): [`File::open`], [`File::read_at`],
//! [`File::write_at`] and [`read_file`] as futures, on an io_uring ring of
//! the scheduler that awaits them.
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
//! assert_eq!(gdex::block_on(task).unwrap().unwrap(), b"hello, aio");
//! # std::fs::remove_file(&path).unwrap();
//! ```
//!
//! [`spawn_blocking`]: crate::spawn_blocking
//! [`blocking::blocking`]: crate::blocking::blocking

mod uring;

use std::ffi::CString;
use std::fmt;
use std::future::Future;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use crate::error::Error;
use crate::task::Task;

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

/// How to open a file, as `std::fs::OpenOptions` says it (the same options
/// and defaults, and the same `mode` default of `0o666` before the umask).
#[derive(Clone, Debug)]
pub struct OpenOptions {
    read: bool,
    write: bool,
    append: bool,
    truncate: bool,
    create: bool,
    create_new: bool,
    mode: u32,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions::new()
    }
}

impl OpenOptions {
    /// Every option off; `mode` `0o666`.
    pub fn new() -> OpenOptions {
        OpenOptions {
            read: false,
            write: false,
            append: false,
            truncate: false,
            create: false,
            create_new: false,
            mode: 0o666,
        }
    }
    /// Open for reading.
    pub fn read(&mut self, yes: bool) -> &mut Self {
        self.read = yes;
        self
    }
    /// Open for writing.
    pub fn write(&mut self, yes: bool) -> &mut Self {
        self.write = yes;
        self
    }
    /// Open for appending (implies writing).
    pub fn append(&mut self, yes: bool) -> &mut Self {
        self.append = yes;
        self
    }
    /// Truncate the file to 0 bytes if it exists (needs writing).
    pub fn truncate(&mut self, yes: bool) -> &mut Self {
        self.truncate = yes;
        self
    }
    /// Create the file if it does not exist (needs writing).
    pub fn create(&mut self, yes: bool) -> &mut Self {
        self.create = yes;
        self
    }
    /// Create the file, failing if it exists (needs writing).
    pub fn create_new(&mut self, yes: bool) -> &mut Self {
        self.create_new = yes;
        self
    }
    /// The permission bits of a file created (before the umask).
    pub fn mode(&mut self, mode: u32) -> &mut Self {
        self.mode = mode;
        self
    }

    /// Opens `path` with these options.
    ///
    /// The combinations `std::fs::OpenOptions::open` refuses fail the same
    /// way, with `InvalidArgument`: asking for nothing (neither read, write
    /// nor append), creating or truncating without writing, truncating
    /// while appending (unless with `create_new`). A path with a NUL byte,
    /// which no file name can hold, fails with `InvalidFilename`.
    ///
    /// A FIFO opens as `open(2)` opens it on both backends: for reading or
    /// for writing only, the open waits for the other end.
    ///
    /// ```
    /// let pool = gdex::ThreadPool::builder().workers(1).build().unwrap();
    /// let refused = gdex::aio::OpenOptions::new().append(true).truncate(true).open("/tmp/x");
    /// let err = gdex::block_on(pool.scheduler().spawn(refused)).unwrap().unwrap_err();
    /// assert!(err.matches(gdex::gio::IOErrorEnum::InvalidArgument), "{err}");
    /// ```
    pub fn open(&self, path: impl AsRef<Path>) -> Open {
        let path = path.as_ref();
        let refused = |why: &str| Open {
            op: Op::Refused(Some(error_for_code(
                gio::IOErrorEnum::InvalidArgument,
                "opening",
                Some(path),
                why,
            ))),
        };
        // The path first, as std takes it first.
        let Ok(c_path) = CString::new(path.as_os_str().as_bytes()) else {
            return Open {
                op: Op::Refused(Some(error_for_code(
                    gio::IOErrorEnum::InvalidFilename,
                    "opening",
                    Some(path),
                    "the path holds a NUL byte, which no file name can",
                ))),
            };
        };
        // The rules, and the flags, of `std::fs::OpenOptions` on Unix.
        let access = match (self.read, self.write, self.append) {
            (true, false, false) => libc::O_RDONLY,
            (false, true, false) => libc::O_WRONLY,
            (true, true, false) => libc::O_RDWR,
            (false, _, true) => libc::O_WRONLY | libc::O_APPEND,
            (true, _, true) => libc::O_RDWR | libc::O_APPEND,
            (false, false, false) => return refused(
                "neither read, write nor append was asked for (set one of them in the OpenOptions)",
            ),
        };
        match (self.write, self.append) {
            (true, false) => {}
            (false, false) if self.truncate || self.create || self.create_new => {
                return refused("create, create_new and truncate need write or append");
            }
            (_, true) if self.truncate && !self.create_new => {
                return refused("truncate and append together (ask for one of them)");
            }
            _ => {}
        }
        let creation = match (self.create, self.truncate, self.create_new) {
            (false, false, false) => 0,
            (true, false, false) => libc::O_CREAT,
            (false, true, false) => libc::O_TRUNC,
            (true, true, false) => libc::O_CREAT | libc::O_TRUNC,
            (_, _, true) => libc::O_CREAT | libc::O_EXCL,
        };
        Open {
            op: Op::new(Operation::Open {
                c_path,
                path: path.to_path_buf(),
                flags: access | creation | libc::O_CLOEXEC,
                mode: self.mode,
                blocking: false,
            }),
        }
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

/// One operation and what it owns while the kernel may use it: the path of
/// an open, the buffer and file of a read or write.
enum Operation {
    Open {
        c_path: CString,
        path: PathBuf,
        flags: i32,
        mode: u32,
        /// On io_uring: open in the kernel's worker threads, as `open(2)`
        /// does, skipping io_uring's first, non-blocking try (see
        /// [`Operation::needs_a_blocking_open`]).
        blocking: bool,
    },
    /// Waits until `fd` polls ready for `POLLIN` (or hangs up): on
    /// io_uring a one-shot `POLL_ADD`; on the blocking lane only a look, at
    /// once (0: nothing yet). Its result is the events.
    Poll { fd: OwnedFd },
    Read {
        file: Arc<FileInner>,
        buf: Vec<u8>,
        offset: u64,
    },
    /// Writes `buf[from..]`.
    Write {
        file: Arc<FileInner>,
        buf: Vec<u8>,
        from: usize,
        offset: u64,
    },
}

/// What an operation gives: its result (`res` as the kernel gives it, a
/// count, a new fd, or `-errno`) turned into the future's output.
enum Outcome {
    Opened(File),
    Read(Vec<u8>),
    Written(usize, Vec<u8>),
    /// The events a `Poll` found.
    Polled(i32),
}

/// What io_uring's non-blocking first try of an open asks for
/// ([`Operation::after_a_nonblocking_open`]).
enum Reopen {
    /// Nothing: the result stands.
    No,
    /// The same open again, blocking (the operation is readied for it).
    Blocking,
    /// A FIFO opened for reading with no writer yet: the blocking open,
    /// raced against a poll of this first fd, which stays open meanwhile.
    FifoRead(OwnedFd),
}

impl Operation {
    /// The offset of a read or write.
    fn offset(&self) -> Option<u64> {
        match self {
            Operation::Open { .. } | Operation::Poll { .. } => None,
            Operation::Read { offset, .. } | Operation::Write { offset, .. } => Some(*offset),
        }
    }

    /// Runs it here, as a plain system call (the blocking lane's way),
    /// giving the result the way io_uring gives it. A call interrupted by a
    /// signal before it did anything (`EINTR`) is made again, as std's
    /// `File::open` does, and as the io_uring backend does.
    fn run_blocking(&mut self) -> i32 {
        loop {
            let res = self.run_blocking_once();
            if res != -libc::EINTR {
                return res;
            }
        }
    }

    fn run_blocking_once(&mut self) -> i32 {
        let res = match self {
            Operation::Open {
                c_path,
                flags,
                mode,
                ..
            } => {
                // SAFETY: the path is a NUL-terminated string this
                // operation owns.
                let fd = unsafe { libc::openat(libc::AT_FDCWD, c_path.as_ptr(), *flags, *mode) };
                fd as isize
            }
            Operation::Read { file, buf, offset } => {
                let fd = file.fd.as_raw_fd();
                let spare = read_len(buf);
                // SAFETY: the pointer is one past the buffer's initialised
                // part, and `spare` bytes of capacity follow it; the fd is
                // open (owned by the file this operation holds).
                let into = unsafe { buf.as_mut_ptr().add(buf.len()) }.cast();
                // SAFETY: as above.
                let res = unsafe { libc::pread(fd, into, spare, *offset as libc::off_t) };
                if res < 0 && errno() == libc::ESPIPE {
                    // A stream (pipe, socket) has no position: io_uring
                    // ignores the offset and reads it as a plain read; do
                    // the same (`read_file` reads a FIFO at growing
                    // offsets).
                    // SAFETY: as above.
                    unsafe { libc::read(fd, into, spare) }
                } else {
                    res
                }
            }
            Operation::Write {
                file,
                buf,
                from,
                offset,
            } => {
                let fd = file.fd.as_raw_fd();
                let len = write_len(buf, *from);
                let from = buf[*from..].as_ptr().cast();
                // SAFETY: the buffer is this operation's own, `len` bytes
                // long at least; the fd is open (owned by the file this
                // operation holds).
                let res = unsafe { libc::pwrite(fd, from, len, *offset as libc::off_t) };
                if res < 0 && errno() == libc::ESPIPE {
                    // A stream: as for a read.
                    // SAFETY: as above.
                    unsafe { libc::write(fd, from, len) }
                } else {
                    res
                }
            }
            Operation::Poll { fd } => {
                let mut poll = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd; no wait.
                match unsafe { libc::poll(&mut poll, 1, 0) } {
                    1 => poll.revents as isize,
                    n => n as isize,
                }
            }
        };
        if res < 0 {
            -errno()
        } else {
            res as i32
        }
    }

    /// The output of an operation whose result is `res`.
    ///
    /// # Safety
    /// `res` must be this operation's own result, from the kernel (or
    /// [`run_blocking`](Self::run_blocking)): for a read, that many bytes
    /// were written into the buffer's spare capacity; for an open, `res` is
    /// a new fd nobody else owns.
    unsafe fn finish(self, res: i32) -> Result<Outcome, Error> {
        match self {
            Operation::Open { path, .. } => {
                if res < 0 {
                    return Err(error_for(-res, "opening", Some(&path), ""));
                }
                // SAFETY: per the contract, a fresh fd we now own.
                let fd = unsafe { OwnedFd::from_raw_fd(res) };
                Ok(Outcome::Opened(File::opened(fd, path)))
            }
            Operation::Read { file, mut buf, .. } => {
                if res < 0 {
                    return Err(error_for(-res, "reading", file.path.as_deref(), ""));
                }
                let read = res as usize;
                assert!(
                    read <= read_len(&buf),
                    "gdex::aio: the kernel read more than asked"
                );
                // SAFETY: per the contract, the kernel wrote `read` bytes
                // (at most the spare capacity, checked) right after `len`.
                unsafe { buf.set_len(buf.len() + read) };
                Ok(Outcome::Read(buf))
            }
            Operation::Write { file, buf, .. } => {
                if res < 0 {
                    return Err(error_for(-res, "writing to", file.path.as_deref(), ""));
                }
                Ok(Outcome::Written(res as usize, buf))
            }
            Operation::Poll { .. } => Ok(Outcome::Polled(res)),
        }
    }

    /// io_uring first tries an open without blocking (with `O_NONBLOCK`),
    /// which a FIFO answers unlike `open(2)`: for writing with no reader,
    /// `ENXIO` at once; for reading with no writer, an fd at once, whose
    /// reads then see the end of the file. Given such a result (`res`) of
    /// an open that did not ask for `O_NONBLOCK`, this says how to open as
    /// `open(2)` does: in the kernel's worker threads, which wait for the
    /// other end. For reading, the first fd stays open meanwhile (the
    /// writer's side saw a reader, which it must go on seeing), and since
    /// that first open let a writer waiting in its own open through, which
    /// may write and leave before the second open waits (which would then
    /// wait for another writer for good), the second open races a poll of
    /// the first fd: data or a hang-up there means a writer came, and the
    /// first open stands. Any other file opens without blocking the same as
    /// with, so only `ENXIO` and FIFOs pay more.
    fn after_a_nonblocking_open(&mut self, res: i32) -> Reopen {
        let Operation::Open {
            flags, blocking, ..
        } = self
        else {
            return Reopen::No;
        };
        if *blocking || *flags & libc::O_NONBLOCK != 0 {
            return Reopen::No;
        }
        match *flags & libc::O_ACCMODE {
            libc::O_WRONLY if res == -libc::ENXIO => {
                *blocking = true;
                Reopen::Blocking
            }
            libc::O_RDONLY if res >= 0 => {
                // SAFETY: `res` is the fd this open just made, which
                // nobody else owns.
                let fd = unsafe { OwnedFd::from_raw_fd(res) };
                // SAFETY: `st` is written by `fstat` before it is read.
                let is_fifo = unsafe {
                    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
                    libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) == 0
                        && st.assume_init().st_mode & libc::S_IFMT == libc::S_IFIFO
                };
                if is_fifo {
                    *blocking = true;
                    Reopen::FifoRead(fd)
                } else {
                    // Not ours to close: the caller goes on with `res`.
                    let _ = fd.into_raw_fd();
                    Reopen::No
                }
            }
            _ => Reopen::No,
        }
    }

    /// Releases what a finished operation made that nobody will take: the
    /// fd of an open whose future was dropped.
    fn discard(self, res: i32) {
        if let Operation::Open { .. } = self {
            if res >= 0 {
                // SAFETY: the open's own new fd; its future is gone, so
                // nobody else will own it.
                drop(unsafe { OwnedFd::from_raw_fd(res) });
            }
        }
    }
}

/// This thread's `errno`.
fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// How many bytes a read asks for: the spare capacity, capped as the
/// kernel's `u32` length is.
fn read_len(buf: &Vec<u8>) -> usize {
    (buf.capacity() - buf.len()).min(u32::MAX as usize)
}

/// How many bytes a write of `buf[from..]` gives the kernel, capped as
/// the kernel's `u32` length is (Linux writes at most a little under
/// 2 GiB at once: the rest is a short write).
fn write_len(buf: &[u8], from: usize) -> usize {
    (buf.len() - from).min(u32::MAX as usize)
}

/// A `G_IO_ERROR` from an errno, worded as GIO words its own ("Error
/// opening file “/x”: No such file or directory").
fn error_for(errno: i32, doing: &str, path: Option<&Path>, why: &str) -> Error {
    let errno = user_errno(errno);
    let os = std::io::Error::from_raw_os_error(errno).to_string();
    let os = os.split(" (os error").next().unwrap_or(&os);
    let why = if why.is_empty() { os } else { why };
    error_for_code(gio::io_error_from_errno(errno), doing, path, why)
}

/// A `G_IO_ERROR` with `code`, worded as [`error_for`] words it.
fn error_for_code(code: gio::IOErrorEnum, doing: &str, path: Option<&Path>, why: &str) -> Error {
    let message = match path {
        Some(path) => format!("Error {doing} file “{}”: {why}", path.display()),
        None => format!("Error {doing} file: {why}"),
    };
    // A GLib message is a C string: a NUL byte (of a path that holds one)
    // is written out.
    Error::Failed(glib::Error::new(code, &message.replace('\0', "\\0")))
}

/// The errno a user may see for `errno`: the kernel's internal codes
/// (512 and up, which io_uring can hand over as they are, and which have
/// no name in user space: "Unknown error 512") become the user-space
/// code they stand for. The io_uring backend restarts an operation the
/// restart codes stopped, so this is a last guard.
fn user_errno(errno: i32) -> i32 {
    const ENOTSUPP: i32 = 524;
    match errno {
        // ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND, ERESTART_RESTARTBLOCK:
        // a signal stopped the call.
        512..=514 | 516 => libc::EINTR,
        ENOTSUPP => libc::EOPNOTSUPP,
        512.. => libc::EIO,
        errno => errno,
    }
}

/// The state every AIO future shares: not started, in flight on a ring, or
/// in flight on the blocking lane.
enum Op {
    /// Not polled yet: the backend and ring are chosen at the first poll,
    /// on the thread that awaits. (Also an operation to start again: one
    /// that moved with its task, or that the kernel stopped before it ran.)
    Start(Option<Operation>),
    /// Refused before it started (the error, until the first poll).
    Refused(Option<Error>),
    Ring(uring::InFlight),
    Lane(Task<Ran>),
    /// An open of a FIFO for reading on io_uring, after its first,
    /// non-blocking try (see [`Operation::after_a_nonblocking_open`]): the
    /// blocking open, and a poll of the first fd, whichever ends first.
    FifoRead(Box<FifoRead>),
    Done,
}

struct FifoRead {
    /// The blocking open.
    reopen: Op,
    /// The poll of (a duplicate of) the first fd; `None` once it said
    /// nothing (on the blocking lane, where a poll only looks).
    writer: Option<Op>,
    /// The first, non-blocking open's fd.
    early: OwnedFd,
    path: PathBuf,
}

/// What the blocking lane gives back: an operation and its result. If
/// nobody takes it (the future was dropped while the call ran, so the
/// lane's task drops its output unseen), it releases what the call made:
/// the fd of an open, which would leak otherwise.
struct Ran(Option<(Operation, i32)>);

impl Drop for Ran {
    fn drop(&mut self) {
        if let Some((operation, res)) = self.0.take() {
            operation.discard(res);
        }
    }
}

impl Op {
    fn new(operation: Operation) -> Op {
        Op::Start(Some(operation))
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<Outcome, Error>> {
        loop {
            match self {
                Op::Start(operation) => {
                    let mut operation = operation.take().expect("an operation starts once");
                    if operation.offset().is_some_and(|at| at > i64::MAX as u64) {
                        // No file has such an offset, and io_uring would take
                        // `u64::MAX` (-1) as "the current position": refused
                        // here, the same way on both backends, as `pread`
                        // refuses it.
                        *self = Op::Done;
                        // SAFETY: `-EINVAL` makes no fd and reads nothing.
                        return Poll::Ready(unsafe { operation.finish(-libc::EINVAL) });
                    }
                    if backend() == Backend::IoUring {
                        match uring::InFlight::start(operation, cx.waker()) {
                            Ok(in_flight) => {
                                // Its waker is in: the next poll comes with
                                // the completion.
                                *self = Op::Ring(in_flight);
                                return Poll::Pending;
                            }
                            Err(given_back) => operation = given_back,
                        }
                    }
                    *self = Op::Lane(crate::spawn_blocking(move || {
                        let res = operation.run_blocking();
                        Ran(Some((operation, res)))
                    }));
                }
                Op::Ring(in_flight) => match std::task::ready!(in_flight.poll(cx)) {
                    uring::Polled::Done(mut operation, res) => {
                        match operation.after_a_nonblocking_open(res) {
                            Reopen::No => {}
                            Reopen::Blocking => {
                                *self = Op::Start(Some(operation));
                                continue;
                            }
                            Reopen::FifoRead(early) => {
                                let path = match &operation {
                                    Operation::Open { path, .. } => path.clone(),
                                    _ => unreachable!("only an open reopens"),
                                };
                                let writer = early
                                    .try_clone()
                                    .ok()
                                    .map(|fd| Op::new(Operation::Poll { fd }));
                                *self = Op::FifoRead(Box::new(FifoRead {
                                    reopen: Op::new(operation),
                                    writer,
                                    early,
                                    path,
                                }));
                                continue;
                            }
                        }
                        *self = Op::Done;
                        // SAFETY: the ring gives each operation its own
                        // result.
                        return Poll::Ready(unsafe { operation.finish(res) });
                    }
                    uring::Polled::Again(operation) => {
                        *self = Op::Start(Some(operation));
                    }
                },
                Op::Refused(err) => {
                    let err = err.take().expect("a refusal is given once");
                    *self = Op::Done;
                    return Poll::Ready(Err(err));
                }
                Op::FifoRead(fifo) => {
                    if let Poll::Ready(reopened) = fifo.reopen.poll(cx) {
                        let Op::FifoRead(fifo) = std::mem::replace(self, Op::Done) else {
                            unreachable!()
                        };
                        // The poll goes (cancelled), and the first fd is
                        // closed; if the blocking open failed (the path
                        // changed meanwhile), the first open stands.
                        let FifoRead { early, path, .. } = *fifo;
                        return Poll::Ready(match reopened {
                            Ok(opened) => Ok(opened),
                            Err(_) => Ok(Outcome::Opened(File::opened(early, path))),
                        });
                    }
                    let came = match &mut fifo.writer {
                        Some(writer) => match writer.poll(cx) {
                            Poll::Ready(Ok(Outcome::Polled(events))) if events > 0 => true,
                            // Nothing seen (the lane only looks), or the
                            // poll failed: the blocking open decides.
                            Poll::Ready(_) => {
                                fifo.writer = None;
                                false
                            }
                            Poll::Pending => false,
                        },
                        None => false,
                    };
                    if !came {
                        return Poll::Pending;
                    }
                    // A writer came: the first open stands, as `open(2)`
                    // would have returned; the blocking open is dropped
                    // (cancelled; an fd it made meanwhile is closed).
                    let Op::FifoRead(fifo) = std::mem::replace(self, Op::Done) else {
                        unreachable!()
                    };
                    let FifoRead { early, path, .. } = *fifo;
                    return Poll::Ready(Ok(Outcome::Opened(File::opened(early, path))));
                }
                Op::Lane(task) => {
                    let outcome = std::task::ready!(Pin::new(task).poll(cx));
                    *self = Op::Done;
                    return Poll::Ready(match outcome {
                        Ok(mut ran) => {
                            let (operation, res) =
                                ran.0.take().expect("a lane result is taken once");
                            // SAFETY: `run_blocking` gave this operation's
                            // own result.
                            unsafe { operation.finish(res) }
                        }
                        Err(err) => Err(err),
                    });
                }
                Op::Done => panic!("gdex::aio: an operation's future polled after it completed"),
            }
        }
    }

    fn state(&self) -> &'static str {
        match self {
            Op::Start(_) => "not started",
            Op::Refused(_) => "refused",
            Op::Ring(_) => "on io_uring",
            Op::Lane(_) => "on the blocking lane",
            Op::FifoRead(_) => "opening a FIFO, waiting for a writer",
            Op::Done => "done",
        }
    }
}

macro_rules! op_future {
    ($(#[$doc:meta])* $name:ident, $output:ty, $outcome:pat => $value:expr) => {
        $(#[$doc])*
        #[must_use = "futures do nothing unless awaited; dropping one cancels its operation"]
        pub struct $name {
            op: Op,
        }

        impl Future for $name {
            type Output = Result<$output, Error>;

            fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
                let outcome = std::task::ready!(self.get_mut().op.poll(cx));
                Poll::Ready(outcome.map(|outcome| match outcome {
                    $outcome => $value,
                    _ => unreachable!("an operation gives its own kind of outcome"),
                }))
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("state", &self.op.state())
                    .finish()
            }
        }
    };
}

op_future!(
    /// The future of [`File::open`], [`File::create`] and
    /// [`OpenOptions::open`]: the open file.
    Open, File, Outcome::Opened(file) => file
);
op_future!(
    /// The future of [`File::read_at`]: the buffer, with what was read
    /// appended.
    ReadAt, Vec<u8>, Outcome::Read(buf) => buf
);
op_future!(
    /// The future of [`File::write_at`]: how many bytes were written, and
    /// the buffer.
    WriteAt, (usize, Vec<u8>), Outcome::Written(count, buf) => (count, buf)
);
