//! C1: `examples/checksum` is `sha256sum`. It prints what `sha256sum`
//! prints, byte for byte, for the files `find -type f` lists (in a
//! byte-ordered depth-first walk), on a tree with odd names (spaces,
//! newline, backslash, carriage return, non-UTF-8), symlinks to directories
//! and files, a FIFO, and unreadable files and directories; and
//! `checksum -c` checks sum files as `sha256sum -c` does, with its
//! verdicts, warnings and exit status.
//!
//! The tool is the example binary `cargo test` builds next to this test.

use crate::common;

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The example binary, built by `cargo test` beside the test binaries.
fn checksum_exe() -> PathBuf {
    crate::common::example_exe("checksum")
}

/// A fresh directory (world-readable, so an unprivileged user can walk
/// it), removed when dropped.
struct Tree(PathBuf);

impl Tree {
    fn new(name: &str) -> Tree {
        let root = std::env::temp_dir().join(format!("gdex-sum-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        Tree(root)
    }

    fn dir(&self, rel: &str) -> PathBuf {
        let path = self.0.join(rel);
        std::fs::create_dir_all(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn file(&self, rel: impl AsRef<Path>, contents: &[u8]) -> PathBuf {
        let path = self.0.join(rel);
        std::fs::write(&path, contents).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        path
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        // Make everything removable again first.
        let _ = Command::new("chmod")
            .args(["-R", "u+rwx"])
            .arg(&self.0)
            .status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The odd names, as raw bytes.
fn odd_names() -> Vec<OsString> {
    [
        &b"plain.txt"[..],
        b"with space",
        b"back\\slash",
        b"new\nline",
        b"carriage\rreturn",
        b"both\\and\nnewline",
        b"\xff\xfenot-utf8",
        b"empty",
        b"-dash",
    ]
    .iter()
    .map(|name| OsString::from_vec(name.to_vec()))
    .collect()
}

/// A tree of odd names, nested directories, a file larger than a read
/// chunk, symlinks (to a directory, to a file, dangling) and a FIFO.
fn odd_tree(name: &str) -> Tree {
    let tree = Tree::new(name);
    for (i, name) in odd_names().into_iter().enumerate() {
        let contents = if name == "empty" {
            Vec::new()
        } else {
            format!("file {i}\n").into_bytes()
        };
        tree.file(&name, &contents);
        let nested = tree.dir("sub/deeper");
        tree.file(nested.join(&name), &contents.repeat(3));
    }
    // Sizes around the tool's read chunk (256 KiB) and a block.
    tree.dir("sizes");
    for size in [
        1usize, 4095, 4096, 262_143, 262_144, 262_145, 524_288, 3_000_001,
    ] {
        let data: Vec<u8> = (0..size).map(|i| (i * 31 % 253) as u8).collect();
        tree.file(format!("sizes/{size}"), &data);
    }
    std::os::unix::fs::symlink(tree.0.join("sub"), tree.0.join("link-to-dir")).unwrap();
    std::os::unix::fs::symlink(tree.0.join("plain.txt"), tree.0.join("link-to-file")).unwrap();
    std::os::unix::fs::symlink(tree.0.join("nowhere"), tree.0.join("dangling")).unwrap();
    let fifo = std::ffi::CString::new(tree.0.join("fifo").into_os_string().into_vec()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    tree
}

/// What `find root -type f` lists, depth first, each directory's entries
/// in byte order, as the tool walks; directories it cannot list are left
/// out (the tool reports them).
fn find_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(root) else {
        return out;
    };
    let mut entries: Vec<_> = entries.map(|e| e.unwrap()).collect();
    entries.sort_by_key(|e| e.file_name().into_vec());
    for entry in entries {
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            out.extend(find_files(&entry.path()));
        } else if kind.is_file() {
            out.push(entry.path());
        }
    }
    out
}

/// Runs `command`, as the unprivileged user `nobody` when `unprivileged`
/// (so that a file without read permission is unreadable even when the
/// tests run as root).
fn run(mut command: Command, unprivileged: bool) -> Output {
    // SAFETY: geteuid has no preconditions.
    if unprivileged && unsafe { libc::geteuid() } == 0 {
        command.uid(65534).gid(65534);
    }
    command.output().unwrap()
}

fn sha256sum(files: &[PathBuf], unprivileged: bool) -> Output {
    let mut command = Command::new("sha256sum");
    command.arg("--").args(files);
    run(command, unprivileged)
}

fn checksum(args: &[&std::ffi::OsStr], unprivileged: bool) -> Output {
    let mut command = Command::new(checksum_exe());
    command.args(args);
    run(command, unprivileged)
}

/// stderr with the program's name made the same, and without the
/// tool-specific lines (`find`'s messages).
fn stderr_of(output: &Output, program: &str) -> String {
    String::from_utf8_lossy(&output.stderr)
        .replace(&format!("{program}: "), "PROGRAM: ")
        .replace(&format!("'{program} --help'"), "'PROGRAM --help'")
}

/// The same bytes as `sha256sum` over the same files, in the walk's order:
/// odd names escaped as it escapes them, symlinks and the FIFO left out.
#[test]
fn the_output_is_sha256sums_byte_for_byte() {
    let tree = odd_tree("odd");
    let files = find_files(&tree.0);
    assert_eq!(files.len(), 2 * odd_names().len() + 8);
    let theirs = sha256sum(&files, false);
    let ours = checksum(&[tree.0.as_os_str()], false);
    assert!(theirs.status.success() && ours.status.success(), "{ours:?}");
    assert_eq!(
        String::from_utf8_lossy(&ours.stdout),
        String::from_utf8_lossy(&theirs.stdout)
    );
    assert_eq!(ours.stdout, theirs.stdout, "byte for byte");
    assert!(
        ours.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&ours.stderr)
    );
    // The same on the blocking lane (where io_uring is unavailable).
    let mut lane = Command::new(checksum_exe());
    lane.arg(&tree.0).env("GDEX_AIO", "blocking");
    let lane = run(lane, false);
    assert!(lane.status.success());
    assert_eq!(
        lane.stdout, theirs.stdout,
        "byte for byte, on the blocking lane"
    );
    // A file given as an argument is summed as given, as sha256sum does.
    let one = tree.0.join("back\\slash");
    let ours = checksum(&[one.as_os_str()], false);
    assert_eq!(ours.stdout, sha256sum(&[one], false).stdout);
}

/// Unreadable files (and a directory that cannot be listed) are reported
/// on stderr in the system's words and make the exit status 1; every
/// other file is still summed, as sha256sum sums them.
#[test]
fn unreadable_files_are_reported_and_fail_the_run() {
    let tree = Tree::new("unreadable");
    tree.file("a-readable", b"a");
    let secret = tree.file("b-secret", b"b");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o000)).unwrap();
    let closed = tree.dir("c-closed");
    tree.file("c-closed/hidden", b"c");
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o000)).unwrap();
    tree.file("d-after", b"d");
    let ours = checksum(&[tree.0.as_os_str()], true);
    // sha256sum over what the walk can list: the file it cannot read too.
    let files = vec![
        tree.0.join("a-readable"),
        secret.clone(),
        tree.0.join("d-after"),
    ];
    let theirs = sha256sum(&files, true);
    assert_eq!(ours.status.code(), Some(1), "{ours:?}");
    assert_eq!(theirs.status.code(), Some(1));
    assert_eq!(ours.stdout, theirs.stdout);
    let stderr = stderr_of(&ours, "checksum");
    assert_eq!(
        stderr,
        format!(
            "PROGRAM: {}: Permission denied\nPROGRAM: {}: Permission denied\n",
            secret.display(),
            closed.display()
        )
    );
    assert!(
        stderr.starts_with(&stderr_of(&theirs, "sha256sum")),
        "{stderr}"
    );
}

/// `checksum -c` against `sha256sum -c` on the same sum file: names with a
/// newline escaped (and only those), a mismatch, a missing file, an
/// improperly formatted line, upper-case digests, the binary marker and
/// the BSD-tagged format; the same stdout byte for byte, stderr and exit
/// status.
#[test]
fn check_mode_is_sha256sum_c() {
    let tree = odd_tree("check");
    let files = find_files(&tree.0);
    let mut sums = sha256sum(&files, false).stdout;
    // A digest that does not match, a file that is gone, a bad line, an
    // upper-case digest with the binary marker, and a tagged line.
    let plain = tree.0.join("plain.txt");
    let digest_of = |path: &Path| {
        let out = sha256sum(&[path.to_path_buf()], false).stdout;
        String::from_utf8(out[..64].to_vec()).unwrap()
    };
    sums.extend(format!("{}  {}\n", "0".repeat(64), plain.display()).as_bytes());
    sums.extend(format!("{}  {}/missing\n", "1".repeat(64), tree.0.display()).as_bytes());
    sums.extend(b"this line is not a checksum\n");
    sums.extend(
        format!(
            "{} *{}\n",
            digest_of(&plain).to_uppercase(),
            plain.display()
        )
        .as_bytes(),
    );
    sums.extend(format!("SHA256 ({}) = {}\n", plain.display(), digest_of(&plain)).as_bytes());
    let sum_file = tree.0.join("sums.txt");
    std::fs::write(&sum_file, &sums).unwrap();

    let mut theirs = Command::new("sha256sum");
    theirs.arg("-c").arg(&sum_file);
    let theirs = run(theirs, false);
    let ours = checksum(&["-c".as_ref(), sum_file.as_os_str()], false);
    assert_eq!(
        String::from_utf8_lossy(&ours.stdout),
        String::from_utf8_lossy(&theirs.stdout)
    );
    assert_eq!(ours.stdout, theirs.stdout, "byte for byte");
    assert_eq!(
        stderr_of(&ours, "checksum"),
        stderr_of(&theirs, "sha256sum")
    );
    assert_eq!(ours.status.code(), theirs.status.code());
    assert_eq!(ours.status.code(), Some(1));

    // Every line good: exit 0, and no warnings.
    let good = sha256sum(&files, false).stdout;
    std::fs::write(&sum_file, &good).unwrap();
    let ours = checksum(&["-c".as_ref(), sum_file.as_os_str()], false);
    assert_eq!(ours.status.code(), Some(0), "{ours:?}");
    assert!(ours.stderr.is_empty());

    // No properly formatted line at all: sha256sum's message, exit 1.
    std::fs::write(&sum_file, b"nothing here\n").unwrap();
    let mut theirs = Command::new("sha256sum");
    theirs.arg("-c").arg(&sum_file);
    let theirs = run(theirs, false);
    let ours = checksum(&["-c".as_ref(), sum_file.as_os_str()], false);
    assert_eq!(ours.status.code(), Some(1));
    assert_eq!(
        stderr_of(&ours, "checksum"),
        stderr_of(&theirs, "sha256sum")
    );
}

/// True once process `pid` catches SIGINT (its `SigCgt` mask in /proc) and
/// has one of the `sparse-*` files in `dir` open: it is in the middle of a
/// run that Ctrl-C can cancel.
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

/// Ctrl-C during a long run: the tool stops promptly (every task is
/// cancelled with the work future), says it was cancelled, and exits with
/// 130.
#[test]
fn ctrl_c_cancels_cleanly() {
    let tree = Tree::new("sigint");
    // Large sparse files: hashing them takes seconds, storing them nothing.
    for i in 0..4 {
        let f = std::fs::File::create(tree.0.join(format!("sparse-{i}"))).unwrap();
        f.set_len(8 << 30).unwrap();
    }
    let mut child = Command::new(checksum_exe())
        .arg(&tree.0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let root = tree.0.canonicalize().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() && !hashing_with_sigint_handled(child.id(), &root) {
        assert!(
            std::time::Instant::now() < deadline,
            "the tool never started hashing"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "finished before the signal"
    );
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let sent = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        sent.elapsed() < std::time::Duration::from_secs(5),
        "took {:?} to stop",
        sent.elapsed()
    );
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("checksum: cancelled after"), "{stderr}");
}

/// The work streams: `checksum -c -` prints the verdict of a line of sums
/// read from stdin while stdin is still open (the feed hands on what it has
/// before a read that may wait, and the printer writes each result as soon
/// as it is next), so hashing starts while the list (or the walk) goes on.
#[test]
fn verdicts_stream_while_the_list_is_still_coming() {
    use std::io::{BufRead, Write};
    let tree = Tree::new("stream");
    let first = tree.file("first", b"one");
    let second = tree.file("second", b"two");
    let sums = |path: &PathBuf| sha256sum(std::slice::from_ref(path), false).stdout;
    let mut child = Command::new(checksum_exe())
        .args(["-c", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    stdin.write_all(&sums(&first)).unwrap();
    stdin.flush().unwrap();
    // A watchdog: the verdict must come while stdin stays open.
    let pid = child.id();
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let dog = std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            finished.recv_timeout(std::time::Duration::from_secs(30))
        {
            // SAFETY: kill(2) on the child's pid, which we have not waited for.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    });
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    drop(done);
    dog.join().unwrap();
    assert_eq!(line, format!("{}: OK\n", first.display()));
    stdin.write_all(&sums(&second)).unwrap();
    drop(stdin);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    assert_eq!(rest, format!("{}: OK\n", second.display()));
    assert!(child.wait().unwrap().success());
}

/// Runs `command` with `stdin` as its standard input and gives its output;
/// kills it if it has not finished after 60 s (a hang fails the test, not
/// the run).
fn output_within(mut command: Command, stdin: &[u8]) -> Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let stdin = stdin.to_vec();
    // The child may not read it all (an error, or it has no `-` to read).
    let feeder = std::thread::spawn(move || {
        let _ = input.write_all(&stdin);
    });
    let pid = child.id();
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let dog = std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            finished.recv_timeout(std::time::Duration::from_secs(60))
        {
            // SAFETY: kill(2) on the child's pid, which is not yet waited for.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    });
    let output = child.wait_with_output().unwrap();
    drop(done);
    dog.join().unwrap();
    feeder.join().unwrap();
    assert_ne!(
        output.status.code(),
        None,
        "killed (hung for 60 s, or crashed): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// `sha256sum`'s line for `contents` under the name `name`.
fn sum_line_of(contents: &[u8], name: &Path) -> Vec<u8> {
    let theirs = output_within(Command::new("sha256sum"), contents);
    let mut line = theirs.stdout[..64].to_vec();
    line.extend(b"  ");
    line.extend(name.as_os_str().as_encoded_bytes());
    line.push(b'\n');
    line
}

/// A file whose size `stat` gives as 0 but that has content is hashed to
/// its end, as `sha256sum` reads it, not from its first read only: a FIFO
/// fed in pieces, and a /proc file that gives a page per read (C1).
#[test]
fn files_whose_stat_size_is_zero_are_hashed_to_the_end() {
    use std::io::Write;
    let tree = Tree::new("size-zero");
    let contents: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
    for lane in ["", "blocking"] {
        let fifo = tree.0.join(format!("fifo-{lane}"));
        let path = std::ffi::CString::new(fifo.clone().into_os_string().into_vec()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o644) }, 0);
        // The writer opens the FIFO once the tool has (a non-blocking open
        // fails until a reader is there), and stops if the tool goes away.
        let writer = {
            let (fifo, contents) = (fifo.clone(), contents.clone());
            std::thread::spawn(move || {
                use std::os::unix::fs::OpenOptionsExt;
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
                let mut file = loop {
                    match std::fs::OpenOptions::new()
                        .write(true)
                        .custom_flags(libc::O_NONBLOCK)
                        .open(&fifo)
                    {
                        Ok(file) => break file,
                        Err(_) if std::time::Instant::now() < deadline => {
                            std::thread::sleep(std::time::Duration::from_millis(1))
                        }
                        Err(err) => panic!("the tool never opened the FIFO: {err}"),
                    }
                };
                // Blocking writes from here, in pieces.
                // SAFETY: fcntl on the fd `file` owns.
                unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&file), libc::F_SETFL, 0) };
                for piece in contents.chunks(16 * 1024) {
                    if file.write_all(piece).is_err() {
                        break; // the tool closed it
                    }
                }
            })
        };
        let mut ours = Command::new(checksum_exe());
        ours.arg(&fifo);
        if !lane.is_empty() {
            ours.env("GDEX_AIO", lane);
        }
        let ours = output_within(ours, b"");
        writer.join().unwrap();
        assert_eq!(ours.status.code(), Some(0), "{ours:?}");
        assert_eq!(
            String::from_utf8_lossy(&ours.stdout),
            String::from_utf8_lossy(&sum_line_of(&contents, &fifo)),
            "a FIFO fed 1 MiB in 16 KiB pieces (lane: {lane:?})"
        );
    }
    // A /proc file with a stable content longer than one read.
    let stable = ["/proc/kallsyms", "/proc/crypto", "/proc/devices"]
        .into_iter()
        .map(Path::new)
        .find(|path| {
            use std::os::unix::fs::FileExt;
            let Ok(file) = std::fs::File::open(path) else {
                return false;
            };
            let mut first = vec![0; 256 * 1024];
            let Ok(read) = file.read_at(&mut first, 0) else {
                return false;
            };
            let (Ok(a), Ok(b)) = (std::fs::read(path), std::fs::read(path)) else {
                return false;
            };
            file.metadata().is_ok_and(|m| m.len() == 0) && a == b && a.len() > read
        });
    let Some(proc_file) = stable else {
        eprintln!("no stable /proc file longer than one read here: that part is skipped");
        return;
    };
    let theirs = sha256sum(&[proc_file.to_path_buf()], false);
    for lane in ["", "blocking"] {
        let mut ours = Command::new(checksum_exe());
        ours.arg(proc_file);
        if !lane.is_empty() {
            ours.env("GDEX_AIO", lane);
        }
        let ours = output_within(ours, b"");
        assert_eq!(ours.status.code(), Some(0), "{ours:?}");
        assert_eq!(
            String::from_utf8_lossy(&ours.stdout),
            String::from_utf8_lossy(&theirs.stdout),
            "{} (lane: {lane:?})",
            proc_file.display()
        );
    }
}

/// `checksum ARGS` and `sha256sum ARGS`, run in `dir` with `stdin` and
/// the locale `LC_ALL=locale`: the same stdout byte for byte, the same
/// stderr with the program's name made the same, the same exit status, and
/// no crash. Gives our output.
fn like_sha256sum(dir: &Path, args: &[&[u8]], stdin: &[u8], locale: &str) -> Output {
    let run_in_dir = |program: &Path| {
        let mut command = Command::new(program);
        command
            .args(args.iter().map(|a| std::ffi::OsStr::from_bytes(a)))
            .current_dir(dir)
            .env("LC_ALL", locale)
            .env_remove("POSIXLY_CORRECT");
        output_within(command, stdin)
    };
    let theirs = run_in_dir(Path::new("sha256sum"));
    let ours = run_in_dir(&checksum_exe());
    let shown: Vec<_> = args.iter().map(|a| String::from_utf8_lossy(a)).collect();
    assert!(
        !String::from_utf8_lossy(&ours.stderr).contains("panicked"),
        "{shown:?}: {}",
        String::from_utf8_lossy(&ours.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&ours.stdout),
        String::from_utf8_lossy(&theirs.stdout),
        "stdout, for {shown:?}"
    );
    assert_eq!(
        ours.stdout, theirs.stdout,
        "stdout byte for byte, for {shown:?}"
    );
    assert_eq!(
        stderr_of(&ours, "checksum"),
        stderr_of(&theirs, "sha256sum"),
        "stderr, for {shown:?}"
    );
    assert_eq!(
        ours.status.code(),
        theirs.status.code(),
        "exit status, for {shown:?}"
    );
    ours
}

/// `checksum -c` and `sha256sum -c` on `sums` (written to a file in `dir`,
/// and run there), as [`like_sha256sum`] compares them.
fn check_like_sha256sum(dir: &Path, sums: &[u8]) -> Output {
    std::fs::write(dir.join("sums.txt"), sums).unwrap();
    like_sha256sum(dir, &[b"-c", b"sums.txt"], b"", "C.UTF-8")
}

/// A NUL byte in a sum file's name is what `sha256sum -c` makes of it (a
/// plain name ends at it, an escaped one is improperly formatted), never a
/// crash: every other line still gets its verdict (C1).
#[test]
fn a_nul_in_a_listed_name_never_crashes_the_check() {
    let tree = Tree::new("nul");
    let file = tree.file("f", b"contents");
    let digest = String::from_utf8(sha256sum(&[file], false).stdout[..64].to_vec()).unwrap();
    let mut sums = Vec::new();
    for line in [
        format!("{digest}  f\0after"),
        format!("\\{digest}  f\0"),
        format!("SHA256 (f\0x) = {digest}"),
        format!("{digest}  missing\0f"),
        format!("{digest}  f"),
    ] {
        sums.extend(line.as_bytes());
        sums.push(b'\n');
    }
    let ours = check_like_sha256sum(&tree.0, &sums);
    assert_eq!(ours.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&ours.stdout),
        "f: OK\nf: OK\nmissing: FAILED open or read\nf: OK\n"
    );
}

/// The digest of `contents`, in hex.
fn digest_hex(contents: &[u8]) -> String {
    let out = output_within(Command::new("sha256sum"), contents);
    String::from_utf8(out.stdout[..64].to_vec()).unwrap()
}

/// A directory with a few files for the format and option tests: `f`,
/// `g`, `with space`, `back\slash`, `new\nline`, `-dash` and a
/// subdirectory `d`.
fn small_tree(name: &str) -> Tree {
    let tree = Tree::new(name);
    for (file, contents) in [
        ("f", &b"eff"[..]),
        ("g", b"gee"),
        ("with space", b"spaced"),
        ("back\\slash", b"slashed"),
        ("new\nline", b"two\nlines"),
        ("-dash", b"dashed"),
    ] {
        tree.file(file, contents);
    }
    tree.dir("d");
    tree
}

/// Sum files as `sha256sum -c` reads them: comments and blank lines are
/// not lines at all, CRLF is a line end, blanks may lead, one blank makes
/// the BSD-reversed format (for the rest of the run), the BSD-tagged
/// format with or without blanks around `=`, escaped names, upper-case but
/// not `+` digits, no trailing newline, `-` for standard input (improper
/// when the sum file is standard input), several sum files, a missing
/// one and one that cannot be read (C1).
#[test]
fn sum_files_are_read_as_sha256sum_reads_them() {
    let tree = small_tree("formats");
    let f = digest_hex(b"eff");
    let g = digest_hex(b"gee");
    let stdin_digest = digest_hex(b"from stdin");
    let upper = f.to_uppercase();
    let plus = format!("{}+", &f[..63]);
    let slashed = digest_hex(b"slashed");
    let two_lines = digest_hex(b"two\nlines");
    let spaced = digest_hex(b"spaced");
    let cases: Vec<String> = vec![
        format!("# a comment\n\n{f}  f\n#{g}  g\n"),
        format!("   \n{f}  f\n"),
        format!("{f}  f\r\n{g}  g\r\n"),
        format!("{f}  f\r"),
        format!("  \t{f}  f\n"),
        format!(" #{f}  f\n"),
        format!("{f} f\n{g}  g\n"),
        format!("{f}  f\n{g} g\n"),
        format!("{f}\tf\n{g} *g\n"),
        format!("{f} *f\n{f}\t f\n"),
        format!("SHA256 (f) = {f}\nSHA256(g)={g}\nSHA256 (f)\t=\t{f}\n"),
        format!("SHA256  (f) = {f}\nSHA256 (f) = {f} x\nsha256 (f) = {f}\n"),
        format!("SHA256 (with space) = {spaced}\nSHA256 (a (b)) = {f}\n"),
        format!("\\SHA256 (back\\\\slash) = {slashed}\n\\{two_lines}  new\\nline\n"),
        format!("\\{f}  a\\tb\n\\{f}  f\\\n{slashed}  back\\slash\n"),
        format!("{upper}  f\n{plus}  f\n{}  f\n{f}0  f\n", &f[..62]),
        format!("{f}  f\n{f}  f\n{g}  f\n"),
        format!("{f}  with space\n{spaced}  with space\n"),
        format!("{stdin_digest}  -\n{stdin_digest}  -\n"),
        format!("{f}  missing\n{f}  d\n{f}  f\n"),
        format!("{f}  f"),
        format!("{f}  "),
        format!("{f} *\n"),
        format!("\u{feff}{f}  f\n"),
        String::new(),
        "\n\n#\n".to_owned(),
    ];
    for case in &cases {
        std::fs::write(tree.0.join("sums.txt"), case).unwrap();
        for options in [&[][..], &[&b"-w"[..]], &[b"--strict"]] {
            let mut args: Vec<&[u8]> = vec![b"-c"];
            args.extend(options);
            args.push(b"sums.txt");
            like_sha256sum(&tree.0, &args, b"from stdin", "C.UTF-8");
        }
        // The same sum file on standard input: `-` lines are improper.
        like_sha256sum(&tree.0, &[b"-c", b"-w"], case.as_bytes(), "C.UTF-8");
    }
    // Several sum files, a missing one, one that cannot be read (a
    // directory), and the BSD-reversed format carried from one to the
    // next; no sum file at all is standard input.
    std::fs::write(tree.0.join("a.txt"), format!("{f} f\n")).unwrap();
    std::fs::write(tree.0.join("b.txt"), format!("{g}  g\n{f} f\n")).unwrap();
    like_sha256sum(
        &tree.0,
        &[b"-c", b"a.txt", b"missing.txt", b"d", b"b.txt"],
        b"",
        "C.UTF-8",
    );
    like_sha256sum(&tree.0, &[b"-c", b"b.txt", b"a.txt"], b"", "C.UTF-8");
    like_sha256sum(&tree.0, &[b"-c"], format!("{g}  g\n").as_bytes(), "C.UTF-8");
}

/// `sha256sum`'s options, as it reads them and with its outputs:
/// `-b`/`-t`, `--tag`, `-z`, `-` for standard input and `--` for sums;
/// `--quiet`, `--status` (the last of those and `-w` wins), `--strict`,
/// `--ignore-missing` for `-c`; bundled short options, abbreviated long
/// ones, options after operands. Misuse (an unknown, ambiguous or
/// misplaced option, one given an argument) gets its message and exit
/// status 1; `--help` and `--version` print and exit 0 (C1).
#[test]
fn options_are_sha256sums() {
    let tree = small_tree("options");
    let f = digest_hex(b"eff");
    let g = digest_hex(b"gee");
    let two_lines = digest_hex(b"two\nlines");
    std::fs::write(
        tree.0.join("sums.txt"),
        format!("{f}  f\n{f}  g\n{g}  missing\nbad line\n\\{two_lines}  new\\nline\n"),
    )
    .unwrap();
    std::fs::write(tree.0.join("good.txt"), format!("{f}  f\n{g}  g\n")).unwrap();
    std::fs::write(tree.0.join("gone.txt"), format!("{f}  missing\n")).unwrap();
    std::fs::write(tree.0.join("half.txt"), format!("{f}  missing\n{f}  f\n")).unwrap();
    std::fs::write(tree.0.join("improper.txt"), format!("{f}  f\nbad\n")).unwrap();
    let runs: &[&[&[u8]]] = &[
        // Sums.
        &[b"f", b"g"],
        &[b"-b", b"f", b"new\nline"],
        &[b"-t", b"f"],
        &[b"--binary", b"--text", b"f"],
        &[b"--tag", b"f", b"back\\slash", b"new\nline"],
        &[b"-z", b"f", b"new\nline", b"back\\slash"],
        &[b"--tag", b"-z", b"new\nline"],
        &[b"-zb", b"f"],
        &[b"--", b"-dash", b"f"],
        &[b"f", b"--", b"--tag"],
        &[b"-"],
        &[b"f", b"-", b"-"],
        &[b"f", b"missing", b"g"],
        &[b"f", b"--tag"],
        &[b"--ta", b"--bin", b"f"],
        // Checks.
        &[b"-c", b"sums.txt"],
        &[b"--check", b"--quiet", b"sums.txt"],
        &[b"-c", b"--status", b"sums.txt"],
        &[b"-c", b"--status", b"good.txt"],
        &[b"-c", b"--quiet", b"--status", b"sums.txt"],
        &[b"-c", b"--status", b"--quiet", b"sums.txt"],
        &[b"-c", b"--status", b"-w", b"sums.txt"],
        &[b"-cw", b"sums.txt"],
        &[b"-c", b"--strict", b"improper.txt"],
        &[b"-c", b"improper.txt"],
        &[b"-c", b"--ignore-missing", b"sums.txt"],
        &[b"-c", b"--ignore-missing", b"gone.txt"],
        &[b"-c", b"--ignore-missing", b"--status", b"gone.txt"],
        &[b"-c", b"--ignore-missing", b"half.txt"],
        &[b"sums.txt", b"--che", b"--qui"],
        &[b"-c", b"good.txt", b"--", b"-dash"],
        // Misuse.
        &[b"--foo"],
        &[b"--foo=bar", b"f"],
        &[b"-x", b"f"],
        &[b"-bx"],
        &[b"--st"],
        &[b"--t", b"f"],
        &[b"--=x"],
        &[b"--quiet=1", b"-c", b"good.txt"],
        &[b"--tag", b"-t", b"f"],
        &[b"-t", b"--tag", b"f"],
        &[b"-c", b"-z", b"good.txt"],
        &[b"-c", b"--tag", b"good.txt"],
        &[b"-c", b"-b", b"good.txt"],
        &[b"-c", b"-t", b"good.txt"],
        &[b"--quiet", b"f"],
        &[b"--status", b"f"],
        &[b"-w", b"f"],
        &[b"--strict", b"f"],
        &[b"--ignore-missing", b"f"],
        &[b"--foo", b"--help"],
    ];
    for args in runs {
        like_sha256sum(&tree.0, args, b"standard input", "C.UTF-8");
    }
    // Options stop at the first operand for POSIX.
    let posix = |program: &Path| {
        let mut command = Command::new(program);
        command
            .args(["f", "--tag"])
            .current_dir(&tree.0)
            .env("POSIXLY_CORRECT", "1");
        output_within(command, b"")
    };
    let (ours, theirs) = (posix(&checksum_exe()), posix(Path::new("sha256sum")));
    assert_eq!(ours.stdout, theirs.stdout);
    assert_eq!(
        stderr_of(&ours, "checksum"),
        stderr_of(&theirs, "sha256sum")
    );
    assert_eq!(ours.status.code(), theirs.status.code());
    // --help and --version: the tool's own words, on stdout, exit 0, when
    // they are read (a later misuse is not).
    for (args, start) in [
        (&["--help", "--foo"][..], "Usage: checksum "),
        (&["--he"], "Usage: checksum "),
        (&["--version"], "checksum (gdex) "),
    ] {
        let mut command = Command::new(checksum_exe());
        command.args(args);
        let ours = output_within(command, b"");
        assert_eq!(ours.status.code(), Some(0), "{args:?}: {ours:?}");
        assert!(
            String::from_utf8_lossy(&ours.stdout).starts_with(start),
            "{args:?}: {ours:?}"
        );
        assert!(ours.stderr.is_empty(), "{args:?}: {ours:?}");
    }
}

/// Names on stderr are quoted as `sha256sum` quotes them (gnulib's
/// shell-escape quoting, `:` too): as they are when no shell would mind,
/// else in single quotes with `$'\n'` escapes, in double quotes when an
/// apostrophe is all; bytes the locale cannot print escaped (C1).
#[test]
fn names_on_stderr_are_quoted_as_sha256sum_quotes_them() {
    let tree = Tree::new("quoting");
    let names: &[&[u8]] = &[
        b"plain",
        b"with space",
        b"colon:name",
        b"it's",
        b"it's here",
        b"it's\nnew line",
        b"new\nline",
        b"tab\there",
        b"back\\slash",
        b"#hash",
        b"a#b",
        b"~tilde",
        b"a~",
        b"{",
        b"a{b}",
        b"$dollar",
        b"a=b",
        b"star*",
        b"q?",
        b"[x]",
        b"@at",
        b"\x01control",
        b"\x7fdel",
        b"\xff",
        b"a\xffb",
        b"it's\xff",
        b"\xffit's",
        b"'",
        b"it's:x",
        b"it's#",
        "caf\u{e9}".as_bytes(),
        "arrow \u{2192}".as_bytes(),
        "sep\u{2028}arator".as_bytes(),
        "it's \u{e9}".as_bytes(),
        b"\xe2\x80",
        b"\xc2\x85",
        b"\x07\x08\x0c\x0b\r",
        b"",
    ];
    for locale in ["C.UTF-8", "C"] {
        // Files that do not exist, summed, and checked.
        let mut args: Vec<&[u8]> = vec![b"--"];
        args.extend(names.iter().filter(|n| !n.is_empty()));
        like_sha256sum(&tree.0, &args, b"", locale);
        let mut sums = Vec::new();
        for name in names {
            let escaped = name.contains(&b'\n') || name.contains(&b'\\');
            if escaped {
                sums.push(b'\\');
            }
            sums.extend("0".repeat(64).as_bytes());
            sums.extend(b"  ");
            for &b in *name {
                match b {
                    b'\n' if escaped => sums.extend(b"\\n"),
                    b'\\' if escaped => sums.extend(b"\\\\"),
                    b'\r' if escaped => sums.extend(b"\\r"),
                    _ => sums.push(b),
                }
            }
            sums.push(b'\n');
        }
        std::fs::write(tree.0.join("odd: sums"), &sums).unwrap();
        like_sha256sum(&tree.0, &[b"-c", b"-w", b"odd: sums"], b"", locale);
        like_sha256sum(&tree.0, &[b"-c", b"-w", b"not: there"], b"", locale);
    }
}

/// With few descriptors (`RLIMIT_NOFILE` of 20, as `ulimit -n 20`), where
/// `xargs sha256sum` sums every file, so does the tool: its hashers keep
/// under the limit and wait for a descriptor instead of failing a file
/// with "Too many open files", on both AIO backends (C1).
#[test]
fn few_descriptors_still_sum_every_file() {
    let tree = Tree::new("nofile");
    for dir in 0..4 {
        tree.dir(&format!("d{dir}"));
        for file in 0..100 {
            tree.file(
                format!("d{dir}/f{file:03}"),
                format!("{dir} {file}\n").as_bytes(),
            );
        }
    }
    let files = find_files(&tree.0);
    let theirs = sha256sum(&files, false);
    assert!(theirs.status.success());
    let aside = Tree::new("nofile-sums");
    let sums = aside.file("sums.txt", &theirs.stdout);
    let verdicts: Vec<u8> = files
        .iter()
        .flat_map(|f| format!("{}: OK\n", f.display()).into_bytes())
        .collect();
    for (lane, check) in [
        ("", false),
        ("blocking", false),
        ("", true),
        ("blocking", true),
    ] {
        let mut ours = Command::new(checksum_exe());
        if check {
            ours.arg("-c").arg(&sums);
        } else {
            ours.arg(&tree.0);
        }
        if !lane.is_empty() {
            ours.env("GDEX_AIO", lane);
        }
        // SAFETY: setrlimit is async-signal-safe, and the closure touches
        // nothing else of the parent's between fork and exec.
        unsafe {
            ours.pre_exec(|| {
                let mut limit = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                limit.rlim_cur = 20;
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let ours = output_within(ours, b"");
        assert_eq!(
            String::from_utf8_lossy(&ours.stderr),
            "",
            "no file fails (lane: {lane:?}, -c: {check})"
        );
        assert_eq!(ours.status.code(), Some(0));
        let expected = if check { &verdicts } else { &theirs.stdout };
        assert_eq!(
            String::from_utf8_lossy(&ours.stdout),
            String::from_utf8_lossy(expected),
            "lane: {lane:?}, -c: {check}"
        );
    }
}

/// xorshift64*: the seeded generator of the differential test.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        // Never zero (a fixed point), and seeds close together diverge.
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True `percent` times in a hundred.
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// A random file name: plain pieces and the bytes that make names odd
/// (blanks, backslash, newline, carriage return, quotes, `:`, `#`, `*`,
/// parentheses, `=`, a leading `-`, invalid UTF-8, non-ASCII letters).
fn random_name(rng: &mut Rng) -> Vec<u8> {
    const PIECES: &[&[u8]] = &[
        b"a",
        b"file",
        b"x1",
        b"data.txt",
        b" ",
        b"  ",
        b"\t",
        b"\\",
        b"\n",
        b"\r",
        b"'",
        b"\"",
        b":",
        b"#",
        b"*",
        b"(",
        b")",
        b"=",
        b"-",
        b"?",
        b"$",
        b"\xff",
        b"\xc3\xa9",
        b"\x01",
        b"SHA256 (",
        b") = ",
        b"~",
        b"{",
        b"\\n",
    ];
    loop {
        let mut name = Vec::new();
        for _ in 0..1 + rng.below(4) {
            name.extend(*rng.pick(PIECES));
        }
        if name != b"-" {
            return name;
        }
    }
}

/// One differential case: a random tree, summed by both programs with
/// random options, then random sum files (valid, wrong, missing, odd and
/// broken lines of every kind) checked by both with random options and
/// locales. Panics, naming what differed, if anything does.
fn differential_case(seed: u64) {
    let mut rng = Rng::new(seed);
    let tree = Tree::new(&format!("diff-{seed}"));
    let mut files: Vec<Vec<u8>> = Vec::new();
    for _ in 0..2 + rng.below(8) {
        let dir: &[u8] = if rng.chance(30) { b"sub/" } else { b"" };
        let name = [dir, &random_name(&mut rng)].concat();
        if files.contains(&name) {
            continue;
        }
        let size = match rng.below(10) {
            0 => 0,
            1 => 256 * 1024 + rng.below(3) - 1,
            _ => rng.below(5000),
        };
        let contents: Vec<u8> = (0..size).map(|_| rng.next() as u8).collect();
        tree.dir("sub");
        tree.file(OsString::from_vec(name.clone()), &contents);
        files.push(name);
    }
    let locale = *rng.pick(&["C.UTF-8", "C"]);
    let stdin: Vec<u8> = (0..rng.below(100)).map(|_| rng.next() as u8).collect();

    // Sums: the tool walks the tree; sha256sum sums what find lists.
    const SUM_OPTIONS: &[&[&[u8]]] = &[
        &[],
        &[b"-b"],
        &[b"-t"],
        &[b"--tag"],
        &[b"-z"],
        &[b"--tag", b"-z"],
    ];
    let sum_options = *rng.pick(SUM_OPTIONS);
    let listed = find_files(&tree.0);
    let run_sums = |program: &Path, operands: &[PathBuf]| {
        let mut command = Command::new(program);
        command
            .args(sum_options.iter().map(|a| std::ffi::OsStr::from_bytes(a)))
            .arg("--")
            .args(operands)
            .env("LC_ALL", locale);
        output_within(command, b"")
    };
    let theirs = run_sums(Path::new("sha256sum"), &listed);
    let ours = run_sums(&checksum_exe(), std::slice::from_ref(&tree.0));
    assert_eq!(
        String::from_utf8_lossy(&ours.stdout),
        String::from_utf8_lossy(&theirs.stdout),
        "sums with {sum_options:?}"
    );
    assert_eq!(ours.stdout, theirs.stdout, "sums, byte for byte");
    assert_eq!(ours.status.code(), theirs.status.code());
    assert_eq!(
        stderr_of(&ours, "checksum"),
        stderr_of(&theirs, "sha256sum")
    );

    // Sum files, from sha256sum's own lines (run in the tree, with
    // relative names) and lines made up.
    let relative: Vec<PathBuf> = files
        .iter()
        .map(|f| PathBuf::from(OsString::from_vec(f.clone())))
        .collect();
    let lines_of = |tag: bool| -> Vec<Vec<u8>> {
        let mut command = Command::new("sha256sum");
        if tag {
            command.arg("--tag");
        }
        command.arg("--").args(&relative).current_dir(&tree.0);
        let out = output_within(command, b"").stdout;
        out.split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect()
    };
    let (plain, tagged) = (lines_of(false), lines_of(true));
    let stdin_hex = digest_hex(&stdin);
    let hex_of = |rng: &mut Rng| -> String {
        (0..64)
            .map(|_| char::from(*rng.pick(b"0123456789abcdef")))
            .collect()
    };
    let sum_files = 1 + usize::from(rng.chance(20));
    let mut args: Vec<Vec<u8>> = vec![b"-c".to_vec()];
    for option in [
        &b"--quiet"[..],
        b"--status",
        b"-w",
        b"--strict",
        b"--ignore-missing",
    ] {
        if rng.chance(20) {
            args.push(option.to_vec());
        }
    }
    let on_stdin = sum_files == 1 && rng.chance(20);
    let mut input = stdin.clone();
    for n in 0..sum_files {
        let mut sums = Vec::new();
        for _ in 0..1 + rng.below(12) {
            let mut line: Vec<u8> = match rng.below(24) {
                0..=5 => rng.pick(&plain).clone(),
                6 | 7 => rng.pick(&tagged).clone(),
                8 => {
                    // A wrong digest.
                    let mut line = rng.pick(&plain).clone();
                    let at = usize::from(line[0] == b'\\') + rng.below(64);
                    line[at] = if line[at] == b'0' { b'1' } else { b'0' };
                    line
                }
                9 => format!("{}  missing-{}", hex_of(&mut rng), rng.below(3)).into_bytes(),
                10 => format!("{}  sub", hex_of(&mut rng)).into_bytes(),
                11 => [&b"#"[..], rng.pick(&plain).as_slice()].concat(),
                12 => rng.pick(&[&b""[..], b" ", b"\t", b"\r"]).to_vec(),
                13 => format!("{stdin_hex}  -").into_bytes(),
                14 => {
                    // The one-blank (BSD-reversed) format, or a tab.
                    let mut line = rng.pick(&plain).clone();
                    let at = usize::from(line[0] == b'\\') + 64;
                    line.remove(at + usize::from(rng.chance(50)));
                    if rng.chance(30) {
                        line[at] = b'\t';
                    }
                    line
                }
                15 => {
                    // Upper case, or a digit that is not one.
                    let mut line = rng.pick(&plain).clone();
                    let start = usize::from(line[0] == b'\\');
                    let bad = rng.pick(b"+g -");
                    if rng.chance(50) {
                        line[start..start + 64].make_ascii_uppercase();
                    } else {
                        line[start + rng.below(64)] = *bad;
                    }
                    line
                }
                16 => {
                    // Short or long digests, trailing garbage.
                    let mut line = rng.pick(&tagged).clone();
                    match rng.below(3) {
                        0 => {
                            line.pop();
                        }
                        1 => line.push(*rng.pick(b"0a ")),
                        _ => line.extend(b" x"),
                    }
                    line
                }
                17 => {
                    // A bad escape or a trailing backslash.
                    let mut line = b"\\".to_vec();
                    line.extend(hex_of(&mut rng).as_bytes());
                    line.extend(*rng.pick(&[&b"  a\\tb"[..], b"  end\\", b" *\\\\x"]));
                    line
                }
                18 => {
                    // A NUL somewhere.
                    let source = if rng.chance(50) { &plain } else { &tagged };
                    let mut line = rng.pick(source).clone();
                    let at = rng.below(line.len() + 1);
                    line.insert(at, 0);
                    line
                }
                19 => (0..rng.below(80))
                    .map(|_| rng.next() as u8)
                    .filter(|&b| b != b'\n')
                    .collect(),
                20 => {
                    // Leading blanks.
                    let mut line = rng.pick(&[&b" "[..], b"\t", b"  \t"]).to_vec();
                    line.extend(rng.pick(&plain));
                    line
                }
                21 => {
                    // The tagged format, spaced otherwise.
                    const SPACINGS: [&[u8]; 3] = [b")=", b")\t=  ", b")  = "];
                    let line = rng.pick(&tagged).clone();
                    let spaced = *rng.pick(&SPACINGS);
                    match line.windows(4).rposition(|w| w == b") = ") {
                        Some(at) => [&line[..at], spaced, &line[at + 4..]].concat(),
                        None => line,
                    }
                }
                22 => b"SHA256 ("
                    .iter()
                    .chain(rng.pick(&files))
                    .chain(b")")
                    .copied()
                    .collect(),
                _ => random_name(&mut rng),
            };
            if rng.chance(10) {
                line.push(b'\r');
            }
            sums.extend(line);
            sums.push(b'\n');
        }
        if rng.chance(15) {
            sums.pop(); // no newline at the end
        }
        if rng.chance(10) {
            let again = sums.clone();
            sums.extend(again); // every line twice
        }
        if on_stdin {
            input = sums;
            if rng.chance(50) {
                args.push(b"-".to_vec());
            }
        } else {
            let name = format!("sums-{n}.txt");
            std::fs::write(tree.0.join(&name), &sums).unwrap();
            args.push(name.into_bytes());
        }
    }
    let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    like_sha256sum(&tree.0, &args, &input, locale);
}

/// The differential test: seeded random trees and sum files, summed and
/// checked by the tool and by `sha256sum` with random options and locales;
/// stdout and exit status byte for byte, stderr with the program's name
/// made the same, and the tool never crashes. A failure names its seed;
/// `GDEX_SEED=<seed>` replays it alone, `GDEX_STRESS` scales the count
/// (C1).
#[test]
fn random_trees_and_sum_files_are_summed_and_checked_as_sha256sum_does() {
    let seeds: Vec<u64> = match std::env::var("GDEX_SEED") {
        Ok(seed) => vec![seed.parse().expect("GDEX_SEED=<u64>")],
        Err(_) => (1..=common::stress(40) as u64).collect(),
    };
    for seed in seeds {
        if let Err(panic) = std::panic::catch_unwind(|| differential_case(seed)) {
            eprintln!("differential case failed: seed {seed} (GDEX_SEED={seed} replays it)");
            std::panic::resume_unwind(panic);
        }
    }
}

/// (C1) Standard output that fails is sha256sum's failure: a full disk
/// (`/dev/full`) is "write error: No space left on device" and exit status
/// 1, in both modes; a closed pipe ends both programs by `SIGPIPE`.
#[test]
fn a_failing_standard_output_fails_as_sha256sums_does() {
    use std::os::unix::process::ExitStatusExt;
    let tree = small_tree("stdout-fails");
    let file = tree.0.join("f");
    let sums = tree.0.join("sums");
    std::fs::write(
        &sums,
        format!("{}  {}\n", digest_hex(b"eff"), file.display()),
    )
    .unwrap();
    for args in [
        vec![file.as_os_str()],
        vec!["-c".as_ref(), sums.as_os_str()],
    ] {
        let full = || {
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .unwrap()
        };
        let theirs = Command::new("sha256sum")
            .args(&args)
            .stdout(full())
            .output()
            .unwrap();
        let ours = Command::new(checksum_exe())
            .args(&args)
            .stdout(full())
            .output()
            .unwrap();
        assert_eq!(ours.status.code(), theirs.status.code(), "{args:?}");
        assert_eq!(
            stderr_of(&ours, "checksum"),
            stderr_of(&theirs, "sha256sum"),
            "{args:?}"
        );
        // A pipe whose reader is gone.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let ours = Command::new(checksum_exe())
            .args(&args)
            .stdout(writer.try_clone().unwrap())
            .output()
            .unwrap();
        let theirs = Command::new("sha256sum")
            .args(&args)
            .stdout(writer)
            .output()
            .unwrap();
        assert_eq!(ours.status.signal(), theirs.status.signal(), "{args:?}");
        assert_eq!(ours.status.signal(), Some(libc::SIGPIPE), "{args:?}");
    }
}
