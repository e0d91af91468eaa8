//! X9 proof in an app: the search app in a real window. Runs
//! `examples/search.rs` under Xvfb in self-test mode on a generated tree,
//! with gdex and with glib-rs's own tools (`--glib`): it types a query,
//! retypes another, scrolls, and reports. Checked here: the final list is
//! exactly the matches of a direct scan of the tree, no item that did not
//! match its query was ever shown, every abandoned search's work stopped, a
//! screenshot was saved under `target/`, and the Tasks window shows the
//! task dump (X8). The three figures (first result, frame gaps, stop time)
//! are printed for both columns.
//!
//! The tree has `GDEX_SEARCH_FILES` files (default 20,000, scaled by
//! `GDEX_STRESS`; `benches/RESULTS.md` has the 100,000-file run), half of
//! them matching the second query, by name or by contents.

use crate::common;

use std::path::{Path, PathBuf};

use common::{watchdog, Xvfb};

/// The tree: `files` files in directories of 200; every other one matches
/// "needle" (alternately by name and by contents), every fifth "alpha"
/// (the query the test abandons). Made once per size.
fn tree(files: usize) -> PathBuf {
    let root = std::env::temp_dir().join(format!("gdex-search-tree-{files}"));
    if root.join(".complete").exists() {
        return root;
    }
    let _ = std::fs::remove_dir_all(&root);
    for i in 0..files {
        let dir = root.join(format!("dir{:04}", i / 200));
        if i % 200 == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        let name = if i % 4 == 0 {
            format!("needle-{i}.txt")
        } else {
            format!("file-{i}.txt")
        };
        let mut contents = format!("file {i}: some text to scan through\n").repeat(8);
        if i % 4 == 2 {
            contents.push_str("and here is a needle\n");
        }
        if i % 5 == 0 {
            contents.push_str("alpha\n");
        }
        std::fs::write(dir.join(name), contents).unwrap();
    }
    std::fs::write(root.join(".complete"), b"").unwrap();
    root
}

/// The matches of `query` by a direct scan, as the app shows them.
fn direct_scan(root: &Path, query: &str) -> Vec<String> {
    fn walk(dir: &Path, query: &str, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let kind = entry.file_type().unwrap();
            let path = entry.path();
            if kind.is_dir() {
                walk(&path, query, out);
            } else if kind.is_file() {
                let name = entry.file_name().to_string_lossy().contains(query);
                let data = std::fs::read(&path).unwrap();
                if name || memchr::memmem::find(&data, query.as_bytes()).is_some() {
                    out.push(path.display().to_string());
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(root, query, &mut out);
    out.sort();
    out
}

fn run(mode: &str, root: &Path, target: &Path, xvfb: &Xvfb) -> String {
    let app = target.join("examples/search");
    assert!(
        app.exists(),
        "{} is missing: run `cargo test --features gtk`",
        app.display()
    );
    let screenshot = target.join(format!("search-{mode}.png"));
    let results = target.join(format!("search-{mode}.txt"));
    let _ = std::fs::remove_file(&screenshot);
    let mut command = xvfb.gtk_command(&app);
    command
        .arg(root)
        .env("GDEX_SEARCH_SELFTEST", &screenshot)
        .env("GDEX_SEARCH_RESULTS", &results)
        .env("GDEX_SEARCH_QUERIES", "alpha,needle");
    if mode == "glib" {
        command.arg("--glib");
    } else {
        // The Tasks window then lists the live tasks (X8).
        command.env("GDEX_TASK_DUMP", "1");
    }
    let out = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report = stdout
        .lines()
        .find(|l| l.starts_with("SELFTEST"))
        .unwrap_or_else(|| panic!("no self-test report ({mode}):\n{stdout}\n{stderr}"))
        .to_owned();
    assert!(report.starts_with("SELFTEST OK"), "{report}\n{stderr}");
    assert!(
        screenshot.exists(),
        "no screenshot at {}",
        screenshot.display()
    );
    let shown = std::fs::read_to_string(&results).unwrap();
    let shown: Vec<String> = shown.lines().map(str::to_owned).collect();
    let expected = direct_scan(root, "needle");
    assert_eq!(
        shown.len(),
        expected.len(),
        "{mode}: the list has the wrong number of matches"
    );
    assert!(
        shown == expected,
        "{mode}: the list is not the direct scan's matches"
    );
    report
}

#[test]
fn the_search_app_finds_exactly_the_matches_and_drops_old_searches() {
    watchdog("the_search_app", 600, || {
        let files: usize = std::env::var("GDEX_SEARCH_FILES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| common::stress(20_000));
        let root = tree(files);
        let deps = std::env::current_exe().unwrap();
        let target = deps.parent().unwrap().parent().unwrap().to_path_buf();
        let xvfb = Xvfb::start();
        let gdex = run("gdex", &root, &target, &xvfb);
        let glib = run("glib", &root, &target, &xvfb);
        // The figures, side by side (the numbers are the benchmark's, not
        // asserted: see benches/RESULTS.md).
        println!("{files} files\n  gdex:    {gdex}\n  glib-rs: {glib}");
    });
}
