//! `examples/checksum.rs` (issue 8): its output equals `sha256sum` on a
//! generated tree of files of many sizes, unreadable files are reported
//! without stopping the run, and Ctrl-C cancels it cleanly.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::watchdog;

/// The example's binary, built by `cargo test` next to the test binaries.
fn example() -> PathBuf {
    let deps = std::env::current_exe().unwrap();
    let path = deps
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/checksum");
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds the examples; run it rather than one test binary alone",
        path.display()
    );
    path
}

/// A fresh directory under the system temp dir.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gdex-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write_file(path: &Path, len: usize, seed: u64) {
    let mut state = seed | 1;
    let bytes: Vec<u8> = (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    std::fs::write(path, bytes).unwrap();
}

/// `sha256sum <file>`: the digest, or None if it cannot read the file.
fn sha256sum(path: &Path) -> Option<String> {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum (coreutils)");
    out.status.success().then(|| {
        String::from_utf8(out.stdout)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned()
    })
}

#[test]
fn checksums_agree_with_sha256sum() {
    watchdog("checksums_agree_with_sha256sum", 120, || {
        let root = scratch("checksum");
        let sizes = [
            0, 1, 55, 64, 4095, 4096, 4097, 65_536, 262_143, 262_144, 262_145, 1_000_003, 3_000_000,
        ];
        let mut files = Vec::new();
        for (i, size) in sizes.iter().enumerate() {
            let dir = root.join(format!("d{}/e{}", i % 3, i % 2));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join(format!("file-{size}"));
            write_file(&path, *size, i as u64 + 7);
            files.push(path);
        }
        std::fs::create_dir_all(root.join("empty-dir")).unwrap();
        // Unreadable ones: no permissions (unreadable unless we are root),
        // a file whose reads fail for everyone, a dangling link.
        let locked = root.join("locked");
        write_file(&locked, 100, 3);
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
        files.push(locked);
        std::os::unix::fs::symlink("/proc/self/mem", root.join("d0/io-error")).unwrap();
        files.push(root.join("d0/io-error"));
        std::os::unix::fs::symlink(root.join("nowhere"), root.join("dangling")).unwrap();
        files.push(root.join("dangling"));
        // A FIFO is skipped (reading it would block), not reported.
        let fifo = root.join("fifo");
        let c_fifo = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_fifo.as_ptr(), 0o644) }, 0);

        let expected: BTreeMap<PathBuf, Option<String>> =
            files.iter().map(|p| (p.clone(), sha256sum(p))).collect();
        assert!(expected.values().filter(|v| v.is_none()).count() >= 2);

        let out = Command::new(example()).arg(&root).output().unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        let mut got = BTreeMap::new();
        for line in stdout.lines() {
            let (hex, path) = line.split_once("  ").expect("`<sha256>  <path>` lines");
            got.insert(PathBuf::from(path), hex.to_owned());
        }
        for (path, want) in &expected {
            match want {
                Some(hex) => assert_eq!(got.get(path), Some(hex), "{}\n{stderr}", path.display()),
                None => {
                    assert!(!got.contains_key(path), "{} cannot be read", path.display());
                    let named = format!("checksum: {}:", path.display());
                    assert!(
                        stderr.contains(&named),
                        "{} not reported:\n{stderr}",
                        path.display()
                    );
                }
            }
        }
        assert_eq!(
            got.len(),
            expected.values().filter(|v| v.is_some()).count(),
            "{stdout}"
        );
        assert!(!stdout.contains("fifo") && !stderr.contains("fifo"));
        let unreadable = expected.values().filter(|v| v.is_none()).count();
        assert!(
            stderr.contains(&format!("{} files, ", got.len()))
                && stderr.contains(&format!("{unreadable} unreadable"))
                && stderr.contains("MB/s"),
            "summary:\n{stderr}"
        );
        assert_eq!(
            out.status.code(),
            Some(1),
            "unreadable files make the status 1"
        );
        let _ = std::fs::remove_dir_all(&root);
    });
}

/// True once process `pid` catches SIGINT (its `SigCgt` mask in
/// /proc) and has one of the `sparse-*` files in `dir` open: it is in the
/// middle of a run that Ctrl-C can cancel.
fn hashing_with_sigint_handled(pid: u32, dir: &Path) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let caught = status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .unwrap_or(0);
    let handled = caught & (1 << (libc::SIGINT - 1)) != 0;
    let open = std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
        fds.flatten()
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .any(|p| {
                p.parent() == Some(dir)
                    && p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("sparse-"))
            })
    });
    handled && open
}

/// Ctrl-C during a long run: the example stops promptly, says it was
/// cancelled, and exits with 130.
#[test]
fn ctrl_c_cancels_cleanly() {
    watchdog("ctrl_c_cancels_cleanly", 120, || {
        let root = scratch("checksum-sigint");
        // Large sparse files: hashing them takes seconds, storing them nothing.
        for i in 0..4 {
            let f = std::fs::File::create(root.join(format!("sparse-{i}"))).unwrap();
            f.set_len(2 << 30).unwrap();
        }
        let mut child = Command::new(example())
            .arg(&root)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The child handles SIGINT and is hashing: wait for both (instead of
        // a 500 ms sleep that hoped so; a signal before the handler would
        // end the child with the default action).
        let root_path = root.canonicalize().unwrap();
        common::wait_until(|| {
            child.try_wait().unwrap().is_some()
                || hashing_with_sigint_handled(child.id(), &root_path)
        });
        assert!(
            child.try_wait().unwrap().is_none(),
            "finished before the signal"
        );
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
        let sent = Instant::now();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            sent.elapsed() < Duration::from_secs(5),
            "took {:?} to stop",
            sent.elapsed()
        );
        assert_eq!(out.status.code(), Some(130), "{stderr}");
        assert!(stderr.contains("checksum: cancelled after"), "{stderr}");
        assert!(out.stdout.is_empty());
        let _ = std::fs::remove_dir_all(&root);
    });
}
