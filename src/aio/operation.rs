//! One operation and what it owns while the kernel may use it; how it runs
//! as a plain system call (the blocking lane's way); how its result
//! becomes its future's output, or a `G_IO_ERROR` worded as GIO words its
//! own.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{File, FileInner};
use crate::error::Error;

/// One operation and what it owns while the kernel may use it: the path of
/// an open, the buffer and file of a read or write.
pub(super) enum Operation {
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
pub(super) enum Outcome {
    Opened(File),
    Read(Vec<u8>),
    Written(usize, Vec<u8>),
    /// The events a `Poll` found.
    Polled(i32),
}

/// What io_uring's non-blocking first try of an open asks for
/// ([`Operation::after_a_nonblocking_open`]).
pub(super) enum Reopen {
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
    pub(super) fn offset(&self) -> Option<u64> {
        match self {
            Operation::Open { .. } | Operation::Poll { .. } => None,
            Operation::Read { offset, .. } | Operation::Write { offset, .. } => Some(*offset),
        }
    }

    /// Runs it here, as a plain system call (the blocking lane's way),
    /// giving the result the way io_uring gives it. A call interrupted by a
    /// signal before it did anything (`EINTR`) is made again, as std's
    /// `File::open` does, and as the io_uring backend does.
    pub(super) fn run_blocking(&mut self) -> i32 {
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
    pub(super) unsafe fn finish(self, res: i32) -> Result<Outcome, Error> {
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
                // memcheck does not see an io_uring completion write them
                // (nothing on a CPU: see `valgrind`).
                super::valgrind::kernel_wrote(buf.as_ptr().wrapping_add(buf.len()), read);
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
    pub(super) fn after_a_nonblocking_open(&mut self, res: i32) -> Reopen {
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
    pub(super) fn discard(self, res: i32) {
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
pub(super) fn read_len(buf: &Vec<u8>) -> usize {
    (buf.capacity() - buf.len()).min(u32::MAX as usize)
}

/// How many bytes a write of `buf[from..]` gives the kernel, capped as
/// the kernel's `u32` length is (Linux writes at most a little under
/// 2 GiB at once: the rest is a short write).
pub(super) fn write_len(buf: &[u8], from: usize) -> usize {
    (buf.len() - from).min(u32::MAX as usize)
}

/// A `G_IO_ERROR` from an errno, worded as GIO words its own ("Error
/// opening file “/x”: No such file or directory").
pub(super) fn error_for(errno: i32, doing: &str, path: Option<&Path>, why: &str) -> Error {
    let errno = user_errno(errno);
    let os = std::io::Error::from_raw_os_error(errno).to_string();
    let os = os.split(" (os error").next().unwrap_or(&os);
    let why = if why.is_empty() { os } else { why };
    error_for_code(gio::io_error_from_errno(errno), doing, path, why)
}

/// A `G_IO_ERROR` with `code`, worded as [`error_for`] words it.
pub(super) fn error_for_code(
    code: gio::IOErrorEnum,
    doing: &str,
    path: Option<&Path>,
    why: &str,
) -> Error {
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
