//! [`OpenOptions`]: how to open a file, as `std::fs::OpenOptions` says it,
//! refusing what std refuses before any operation starts (A2).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::op::{Op, Open};
use super::operation::{error_for_code, Operation};

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
