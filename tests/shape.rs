//! The crate's shape (T1 and "Layers and modules" in docs/architecture.md):
//! its modules form layers, with no import cycle between them; no file of
//! `src/` is over 800 lines; no comment cites an issue number; the test
//! files are named after what they check, the one-at-a-time binary's tests
//! take their lock, the optimised binary runs what the others run, and
//! `.ci/loom`'s record of the models' last pass covers every file they
//! compile.
//!
//! This reads `src/` as text: every `crate::…`, `super::…` and `self::…`
//! path outside comments and the unit tests (`mod tests` under a test
//! `cfg`), `use` groups expanded (names the crate root imports count as
//! the module they come from), is an edge from the module that writes it
//! to the module it names. Two graphs must be acyclic:
//! - the top-level modules (`task`, `pool`, `scheduler`, …), each folder
//!   counted as one;
//! - inside each folder, its files other than `mod.rs` (a folder's
//!   `mod.rs` is the module itself, which its parts may use and which
//!   declares them).
//!
//! `docs/architecture.md` ("Layers and modules") gives the order.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Every `.rs` file under `src/`, sorted.
fn source_files() -> Vec<std::path::PathBuf> {
    rs_files_under(&["src"])
}

/// Every `.rs` file under the crate's folders `dirs`, sorted.
fn rs_files_under(dirs: &[&str]) -> Vec<std::path::PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    for dir in dirs {
        walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join(dir), &mut files);
    }
    files.sort();
    files
}

/// Module path ("pool::worker") → source with comments and unit tests cut.
fn modules() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    source_files()
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(&root).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod") {
                parts.pop();
            }
            let name = if parts == ["lib"] {
                String::new()
            } else {
                parts.join("::")
            };
            (name, strip(&std::fs::read_to_string(&path).unwrap()))
        })
        .collect()
}

/// Cuts line comments (doc comments included) and the unit-test module
/// (`mod tests` under a `cfg` that needs `test`).
fn strip(source: &str) -> String {
    let lines: Vec<&str> = source.lines().collect();
    let tests = lines
        .windows(2)
        .position(|pair| {
            pair[0].starts_with("#[cfg(")
                && pair[0].contains("test")
                && !pair[0].contains("not(test")
                && pair[1].starts_with("mod tests")
        })
        .unwrap_or(lines.len());
    strip_comments(&lines[..tests].join("\n"))
}

/// Cuts line comments, doc comments included.
fn strip_comments(source: &str) -> String {
    source
        .lines()
        .map(|line| match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn join(path: &str, segment: &str) -> String {
    if path.is_empty() {
        segment.to_owned()
    } else {
        format!("{path}::{segment}")
    }
}

/// Reads the `use` tree at the start of `text` (a path, a `{…}` group of
/// trees or a `*`, written after `base`): pushes each path it ends in with
/// the name it binds (`a::b as c` binds `c`; a glob ends in `*`), and
/// gives the bytes read.
fn use_tree(text: &str, base: &str, out: &mut Vec<(String, String)>) -> usize {
    let mut path = base.to_owned();
    let mut at = 0;
    loop {
        let rest = &text[at..];
        if rest.starts_with('{') {
            at += 1;
            loop {
                let rest = &text[at..];
                let item = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
                at += rest.len() - item.len();
                if !item.starts_with(|c: char| is_ident(c) || c == '{' || c == '*') {
                    return at + usize::from(item.starts_with('}'));
                }
                at += use_tree(item, &path, out);
            }
        }
        if rest.starts_with('*') {
            out.push((join(&path, "*"), String::new()));
            return at + 1;
        }
        let len = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        let last = |path: &str| path.rsplit("::").next().unwrap_or("").to_owned();
        if len == 0 {
            // `Type::<T>`: the path so far.
            if path != base {
                out.push((path.clone(), last(&path)));
            }
            return at;
        }
        let segment = &rest[..len];
        at += len;
        // `{self, …}` names the group's own path.
        if segment != "self" || path.is_empty() {
            path = join(&path, segment);
        }
        if text[at..].starts_with("::") {
            at += 2;
            continue;
        }
        let mut name = last(&path);
        if let Some(alias) = text[at..].strip_prefix(" as ") {
            let len = alias.find(|c: char| !is_ident(c)).unwrap_or(alias.len());
            name = alias[..len].to_owned();
            at += 4 + len;
        }
        out.push((path, name));
        return at;
    }
}

/// Every path of `source` that starts in the crate (`crate::`, `$crate::`,
/// `super::`, `self::`, or a name of `aliases` for the crate), `use` groups
/// expanded: `crate::a::{b::C, d as e}` gives `crate::a::b::C` and
/// `crate::a::d` (binding `e`). Paths of `pub(in …)` are visibility, not use.
fn paths_in(source: &str, aliases: &[String]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(start) = source[at..].find(is_ident).map(|s| at + s) {
        let len = source[start..]
            .find(|c: char| !is_ident(c))
            .unwrap_or(source.len() - start);
        let word = &source[start..start + len];
        let starts_in_crate =
            ["crate", "super", "self"].contains(&word) || aliases.iter().any(|alias| alias == word);
        if starts_in_crate
            && source[start + len..].starts_with("::")
            && !source[..start].ends_with(':')
            && !source[..start].ends_with("in ")
        {
            at = start + use_tree(&source[start..], "", &mut out).max(len);
        } else {
            at = start + len;
        }
    }
    out
}

/// The modules of `src/` and how their paths resolve.
struct Crate<'a> {
    modules: &'a BTreeMap<String, String>,
    /// What the crate root's `use` items bind (`pub use pool::ThreadPool`
    /// binds `ThreadPool` to `pool::ThreadPool`): children name them
    /// `crate::ThreadPool`.
    root_uses: BTreeMap<String, String>,
    /// The crate's other names (`extern crate self as gdex`).
    aliases: Vec<String>,
}

impl<'a> Crate<'a> {
    fn new(modules: &'a BTreeMap<String, String>) -> Self {
        let root = modules.get("").map_or("", String::as_str);
        let mut root_uses = BTreeMap::new();
        for statement in root.split(';') {
            let Some((before, body)) = statement.split_once("use ") else {
                continue;
            };
            // After its attributes: `use` or `pub(…) use`, not `because `.
            let visibility = before.rsplit(['\n', ']', '}', '{']).next().unwrap_or("");
            let visibility = visibility.trim();
            if before.ends_with(is_ident)
                || !(visibility.is_empty() || visibility.starts_with("pub"))
            {
                continue;
            }
            let mut bound = Vec::new();
            use_tree(body.trim(), "", &mut bound);
            root_uses.extend(bound.into_iter().map(|(path, name)| (name, path)));
        }
        let mut aliases = Vec::new();
        for source in modules.values() {
            for (at, _) in source.match_indices("crate self as ") {
                let rest = &source[at + "crate self as ".len()..];
                aliases.push(
                    rest[..rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len())].to_owned(),
                );
            }
        }
        Crate {
            modules,
            root_uses,
            aliases,
        }
    }

    fn paths_in(&self, source: &str) -> Vec<(String, String)> {
        paths_in(source, &self.aliases)
    }

    /// The module whose text defines or imports what `path`, written in
    /// `from`, names (`""`: the crate root); `None` if the path leaves the
    /// crate (`std`, a dependency).
    fn locate(&self, from: &str, path: &str) -> Option<String> {
        self.locate_within(from, path, 8)
    }

    fn locate_within(&self, from: &str, path: &str, depth: usize) -> Option<String> {
        let mut parts: Vec<&str> = path.split("::").collect();
        let mut base = String::new();
        match parts[0] {
            "crate" => {
                parts.remove(0);
            }
            alias if self.aliases.iter().any(|a| a == alias) => {
                parts.remove(0);
            }
            "self" => {
                base = from.to_owned();
                parts.remove(0);
            }
            "super" => {
                base = from.to_owned();
                while parts.first() == Some(&"super") {
                    base = base
                        .rsplit_once("::")
                        .map_or("", |(parent, _)| parent)
                        .to_owned();
                    parts.remove(0);
                }
            }
            // A path the crate root's `use` wrote: a module of the crate, or outside it.
            first if !self.modules.contains_key(first) => return None,
            _ => {}
        }
        let mut module = base;
        let mut consumed = 0;
        for part in &parts {
            let next = join(&module, part);
            if !self.modules.contains_key(&next) {
                break;
            }
            module = next;
            consumed += 1;
        }
        if module.is_empty() && depth > 0 {
            if let Some(imported) = parts
                .get(consumed)
                .and_then(|name| self.root_uses.get(*name))
            {
                return self.locate_within("", imported, depth - 1);
            }
        }
        Some(module)
    }
}

/// The graph between modules: `a → b` if `a`'s source names `b`.
fn graph(modules: &BTreeMap<String, String>) -> Graph {
    let krate = Crate::new(modules);
    let mut graph = Graph::new();
    for (name, source) in modules {
        if name.is_empty() {
            continue; // the crate root assembles the API from every module
        }
        for (path, _) in krate.paths_in(source) {
            match krate.locate(name, &path) {
                Some(target) if !target.is_empty() && &target != name => {
                    graph.entry(name.clone()).or_default().insert(target);
                }
                _ => {}
            }
        }
    }
    graph
}

/// A cycle of `graph`, if it has one.
fn cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_owned(), 1);
        stack.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            match state.get(next.as_str()) {
                Some(1) => {
                    let from = stack.iter().position(|n| n == next).unwrap();
                    let mut found = stack[from..].to_vec();
                    found.push(next.clone());
                    return Some(found);
                }
                Some(_) => {}
                None => {
                    if let Some(found) = visit(next, graph, state, stack) {
                        return Some(found);
                    }
                }
            }
        }
        stack.pop();
        state.insert(node.to_owned(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if !state.contains_key(node) {
            if let Some(found) = visit(node, graph, &mut state, &mut Vec::new()) {
                return Some(found);
            }
        }
    }
    None
}

/// `graph` with each node cut to its first `depth` segments, keeping only
/// the edges whose both ends start with `within` (and are not `within`).
fn project(graph: &Graph, within: &str, depth: usize) -> Graph {
    let cut = |name: &str| -> Option<String> {
        let rest = if within.is_empty() {
            name
        } else {
            name.strip_prefix(within)?.strip_prefix("::")?
        };
        let head: Vec<&str> = rest.split("::").take(depth).collect();
        Some(if within.is_empty() {
            head.join("::")
        } else {
            format!("{within}::{}", head.join("::"))
        })
    };
    let mut out = Graph::new();
    for (from, targets) in graph {
        for to in targets {
            if let (Some(a), Some(b)) = (cut(from), cut(to)) {
                if a != b {
                    out.entry(a).or_default().insert(b);
                }
            }
        }
    }
    out
}

fn show(graph: &Graph) -> String {
    graph
        .iter()
        .map(|(from, to)| {
            format!(
                "  {from} -> {}\n",
                to.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect()
}

#[test]
fn the_top_level_modules_have_no_import_cycle() {
    let modules = modules();
    let top = project(&graph(&modules), "", 1);
    assert!(
        top.contains_key("pool") && top.contains_key("scheduler"),
        "the reader found no edges:\n{}",
        show(&top)
    );
    if let Some(found) = cycle(&top) {
        panic!(
            "import cycle between top-level modules: {}\nthe graph:\n{}",
            found.join(" -> "),
            show(&top)
        );
    }
}

#[test]
fn the_files_of_each_folder_have_no_import_cycle() {
    let modules = modules();
    let all = graph(&modules);
    let folders: BTreeSet<&str> = modules
        .keys()
        .filter_map(|m| m.rsplit_once("::").map(|(p, _)| p))
        .collect();
    for folder in folders {
        let inside = project(&all, folder, 1);
        if let Some(found) = cycle(&inside) {
            panic!(
                "import cycle inside {folder}/: {}\nthe graph:\n{}",
                found.join(" -> "),
                show(&inside)
            );
        }
    }
}

#[test]
fn the_reader_sees_a_cycle_when_there_is_one() {
    let mut modules = BTreeMap::new();
    modules.insert(String::new(), "pub use b::B;".to_owned());
    modules.insert("a".to_owned(), "use crate::B;".to_owned());
    modules.insert("b".to_owned(), "use crate::c::{x, y};".to_owned());
    modules.insert(
        "c".to_owned(),
        "fn f() { crate::a::g() } // crate::d".to_owned(),
    );
    modules.insert("c::x".to_owned(), "use super::y::Y;".to_owned());
    modules.insert("c::y".to_owned(), "use super::x::X;".to_owned());
    let all = graph(&modules);
    let top = project(&all, "", 1);
    assert_eq!(cycle(&top).unwrap(), ["a", "b", "c", "a"]);
    assert_eq!(
        cycle(&project(&all, "c", 1)).unwrap(),
        ["c::x", "c::y", "c::x"]
    );
    modules.insert("c".to_owned(), "fn f() {}".to_owned());
    assert_eq!(cycle(&project(&graph(&modules), "", 1)), None);
}

/// A fiber's wait on something that already gives `Result<T, gdex::Error>`
/// gives one `Result` (`IntoResult`), a `Result` in a `Result` (a task's, a
/// timeout's) is taken apart with `?`, and `block_on`/`wait_for` take
/// `IntoFuture`: the places a new user reads first (the README, the crate's
/// page, the migration guide, the libdex table, every example program and
/// every rustdoc example)
/// show neither a nested `unwrap` nor a manual `into_future`.
#[test]
fn the_first_pages_a_user_reads_have_no_nested_results() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    /// The example programs under `dir`: every `.rs` file but their tests.
    fn examples(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if !path.ends_with("tests") {
                    examples(&path, out);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut pages: Vec<_> = [
        "README.md",
        "src/lib.rs",
        "docs/migrating.md",
        "docs/libdex.md",
    ]
    .iter()
    .map(|page| root.join(page))
    .collect();
    examples(&root.join("examples"), &mut pages);
    // The rustdoc of every module: its examples are pages too.
    pages.extend(source_files());
    assert!(
        pages
            .iter()
            .any(|page| page.ends_with("examples/tracing.rs")),
        "the examples were not found: {pages:?}"
    );
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap();
        let only_docs = page.starts_with(root.join("src"));
        let page = page.strip_prefix(root).unwrap().display();
        for (n, line) in text.lines().enumerate() {
            let doc = line.trim_start().starts_with("///") || line.trim_start().starts_with("//!");
            if only_docs && !doc {
                continue;
            }
            assert!(
                !line.contains(".unwrap().unwrap()") && !line.contains("IntoFuture::into_future"),
                "{page}:{}: {line}",
                n + 1
            );
        }
    }
}

/// No comment of the code (`src/`, `tests/`, `examples/`, `benches/`) cites
/// an issue number (T1): a reader of the code has the contract codes and
/// docs/architecture.md, not the tracker; the commit that made a line says
/// which issue it answered. "issue" or "issues" followed by a number is
/// refused.
#[test]
fn no_comment_cites_an_issue_number() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = rs_files_under(&["src", "tests", "examples", "benches"]);
    let mut cited = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        for (n, line) in text.lines().enumerate() {
            let Some(at) = line.find("//") else { continue };
            if cites_an_issue(&line[at..]) {
                let file = path.strip_prefix(root).unwrap().display();
                cited.push(format!("  {file}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        cited.is_empty(),
        "these comments cite an issue number: say what the line does and which \
         contract it keeps (docs/architecture.md), and leave the issue to the commit \
         message:\n{}",
        cited.join("\n")
    );
}

/// Whether `comment` holds "issue" or "issues" followed by a number
/// (`#12`, `12`, `12,`).
fn cites_an_issue(comment: &str) -> bool {
    let lower = comment.to_ascii_lowercase();
    lower.match_indices("issue").any(|(at, _)| {
        let before_ok = !lower[..at].ends_with(|c: char| c.is_ascii_alphanumeric());
        let rest = lower[at + "issue".len()..].trim_start_matches('s');
        let rest = rest.trim_start().trim_start_matches('#');
        before_ok && rest.starts_with(|c: char| c.is_ascii_digit())
    })
}

#[test]
fn the_issue_reader_sees_citations_and_nothing_else() {
    // Built at run time, so that this file's own lines cite nothing.
    let issue = "issue";
    assert!(cites_an_issue(&format!(
        "// resumed directly ({issue} 38)."
    )));
    assert!(cites_an_issue(&format!(
        "//! File I/O (I{} #16, BENCH.md)",
        &issue[1..]
    )));
    assert!(cites_an_issue(&format!("// see {issue}s 12, 13")));
    assert!(!cites_an_issue("// an issue of the GLib loop: 2 threads"));
    assert!(!cites_an_issue("// reissue 3 requests"));
    assert!(!cites_an_issue("// the issue's 2nd point"));
}

/// No file of `src/` is over 800 lines, its unit tests counted (T1): a file
/// that long holds several roles, each of which gets a file named after it.
#[test]
fn no_source_file_is_over_800_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let long: Vec<String> = source_files()
        .iter()
        .filter_map(|path| {
            let lines = std::fs::read_to_string(path).unwrap().lines().count();
            (lines > 800).then(|| {
                format!(
                    "  {}: {lines} lines",
                    path.strip_prefix(root).unwrap().display()
                )
            })
        })
        .collect();
    assert!(
        long.is_empty(),
        "these files of src/ are over 800 lines: split each where a role stands apart, \
         into a file named after it:\n{}",
        long.join("\n")
    );
}

/// The files of `tests/` that `root` (a test binary's root file) gathers
/// as modules (`mod pool;`), `common` aside.
fn test_modules_of(root: &str) -> Vec<String> {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    std::fs::read_to_string(tests.join(root))
        .unwrap()
        .lines()
        .filter_map(|line| line.strip_prefix("mod ")?.strip_suffix(';'))
        .filter(|name| *name != "common")
        .map(str::to_owned)
        .collect()
}

/// Every test of the one-at-a-time binary (`tests/one_at_a_time.rs`) takes
/// `common::serial()` before anything else (T1): its files set or observe
/// the whole process (the panic handler, its CPU time, its fiber stacks,
/// both cores), and one test that forgot would run beside the others.
#[test]
fn every_test_of_the_one_at_a_time_binary_takes_the_lock_first() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut forgot = Vec::new();
    let modules = test_modules_of("one_at_a_time.rs");
    assert!(modules.len() >= 6, "one_at_a_time.rs gathers {modules:?}");
    for module in modules {
        let source = std::fs::read_to_string(tests.join(format!("{module}.rs"))).unwrap();
        let lines: Vec<&str> = source.lines().collect();
        for (at, line) in lines.iter().enumerate() {
            if line.trim() != "#[test]" {
                continue;
            }
            // The signature (after any other attributes), then its first line.
            let sig = (at + 1..lines.len())
                .find(|&i| lines[i].starts_with("fn "))
                .unwrap();
            let first = lines.get(sig + 1).copied().unwrap_or("");
            if !first.contains("serial()") {
                forgot.push(format!("  tests/{module}.rs:{}: {}", sig + 1, lines[sig]));
            }
        }
    }
    assert!(
        forgot.is_empty(),
        "these tests of the one-at-a-time binary do not start with \
         `let _one = common::serial();`:\n{}",
        forgot.join("\n")
    );
}

/// No test file is named after an issue or a review round (T1): each is
/// named after the contract or behaviour it checks, and every file a test
/// binary gathers exists.
#[test]
fn test_files_are_named_after_what_they_check() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut wrong = Vec::new();
    for entry in std::fs::read_dir(&tests).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let lower = name.to_lowercase();
        if ["attack", "issue", "review", "round", "holes", "misc"]
            .iter()
            .any(|word| lower.contains(word))
            || lower.chars().any(|c| c.is_ascii_digit())
        {
            wrong.push(name);
        }
    }
    assert!(
        wrong.is_empty(),
        "name these files of tests/ after the contract or behaviour they check: {wrong:?}"
    );
    for root in ["suite.rs", "one_at_a_time.rs", "apps.rs", "optimised.rs"] {
        for module in test_modules_of(root) {
            assert!(
                tests.join(format!("{module}.rs")).exists(),
                "{root} gathers `{module}`, which has no file"
            );
        }
    }
}

/// `tests/optimised.rs`, which `.ci/run` builds optimised, gathers only
/// files that `cargo test` runs too (T1), and `.ci/run` runs those of the
/// one-at-a-time binary one test at a time, as that binary does.
#[test]
fn the_optimised_binary_runs_what_the_others_run_the_way_they_run_it() {
    let suite = test_modules_of("suite.rs");
    let one_at_a_time = test_modules_of("one_at_a_time.rs");
    let optimised = test_modules_of("optimised.rs");
    assert!(optimised.len() >= 5, "optimised.rs gathers {optimised:?}");
    let ci = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/run"))
        .unwrap()
        .replace("\\\n", " ");
    let serial_pass = ci
        .lines()
        .find(|line| line.contains("--test optimised -- --test-threads=1"))
        .expect(".ci/run has no one-at-a-time pass of the optimised binary");
    let parallel_pass = ci
        .lines()
        .find(|line| line.contains("--test optimised -- --skip"))
        .expect(".ci/run has no parallel pass of the optimised binary");
    for module in &optimised {
        let filter = format!(" {module}::");
        if one_at_a_time.contains(module) {
            assert!(
                serial_pass.contains(&filter)
                    && parallel_pass.contains(&format!("--skip {module}::")),
                "`{module}` is a module of the one-at-a-time binary: .ci/run must skip it in \
                 the optimised binary's parallel pass and name it in its --test-threads=1 \
                 pass:\n{parallel_pass}\n{serial_pass}"
            );
        } else {
            assert!(
                suite.contains(module),
                "optimised.rs gathers `{module}`, which neither suite.rs nor \
                 one_at_a_time.rs gathers: `cargo test` would not run it"
            );
            assert!(
                !serial_pass.contains(&filter),
                "`{module}` runs beside others in `suite`: .ci/run's one-at-a-time pass \
                 need not name it"
            );
        }
    }
    // `--skip m::` matches names as substrings, in every binary of the
    // pass: it skips the tests of any module whose name ends in `m`. The
    // pass also runs the unit tests and other binaries, none of whose
    // modules may end so (their tests would not run optimised at all).
    let skipped: Vec<&str> = parallel_pass
        .split("--skip ")
        .skip(1)
        .filter_map(|rest| rest.split_whitespace().next()?.strip_suffix("::"))
        .collect();
    assert!(!skipped.is_empty(), "{parallel_pass}");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sources = Vec::new();
    if parallel_pass.contains(" --lib ") {
        sources.extend(source_files());
    }
    for binary in parallel_pass.split("--test ").skip(1) {
        let binary = binary.split_whitespace().next().unwrap();
        if binary != "optimised" {
            sources.push(root.join(format!("tests/{binary}.rs")));
        }
    }
    for source in sources {
        let text = strip_comments(&std::fs::read_to_string(&source).unwrap());
        let mut names = words_after(&text, "mod ");
        if let Ok(rel) = source.strip_prefix(root.join("src")) {
            let rel = rel.with_extension("");
            names.extend(rel.iter().map(|part| part.to_string_lossy().into_owned()));
        }
        for name in names {
            for skip in &skipped {
                assert!(
                    !name.ends_with(skip),
                    "{}: the module `{name}` runs in .ci/run's optimised pass beside \
                     `--skip {skip}::`, which skips its tests: rename it, or run that \
                     binary in a pass of its own",
                    source.display()
                );
            }
        }
    }
}

/// `.ci/loom --if-changed` skips the loom models (X7) when their inputs
/// match the record of their last pass; those inputs must include every
/// file of `src/` that the models reach, or a change to the protocol
/// would be taken for one the models already passed.
#[test]
fn the_loom_record_covers_every_file_the_models_compile() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = std::fs::read_to_string(root.join(".ci/loom")).unwrap();
    let inputs: Vec<&str> = script
        .lines()
        .find_map(|line| line.strip_prefix("inputs=(")?.strip_suffix(')'))
        .expect(".ci/loom has no `inputs=(...)` line")
        .split_whitespace()
        .collect();
    let reached = match reached_by_models(&modules()) {
        Ok(reached) => reached,
        Err(problems) => panic!(
            "the reader cannot tell what the loom models compile:\n{}",
            problems.join("\n")
        ),
    };
    assert!(
        reached.contains("pool::parking"),
        "the reader lost the models' edge to the protocol: {reached:?}"
    );
    for module in &reached {
        let file = module.replace("::", "/");
        let candidates = if module.is_empty() {
            vec!["src/lib.rs".to_owned()]
        } else {
            vec![format!("src/{file}.rs"), format!("src/{file}/mod.rs")]
        };
        assert!(
            candidates.iter().any(|c| inputs.contains(&c.as_str())),
            "the loom models reach `{module}` ({}), which .ci/loom's inputs {inputs:?} \
             leave out: add it, or a change to it would not run the models",
            candidates
                .iter()
                .find(|c| root.join(c).exists())
                .unwrap_or(&candidates[0])
        );
    }
    for input in &inputs {
        assert!(
            root.join(input).exists(),
            ".ci/loom's input {input} does not exist"
        );
    }
}

/// The modules of `src/` that the loom models (`pool::loom_pool`, X7)
/// compile into what they run, or what the reader cannot follow. A module
/// is reached if a reached one
/// - names it by a path (`crate::`, `super::`, `self::`, a glob, a name the
///   crate root imports, the crate under another name);
/// - declares it (`mod more;`: a file of its own);
/// - invokes a macro it defines (`macro_rules!` is in scope by place, not by
///   path);
///
/// or if it writes an `impl` (or invokes a macro of the crate naming) a type
/// or trait that a reached module defines, under that name or another (`use
/// … as`, `type … =`): the methods and trait impls (`Drop`, `From`, `Deref`)
/// of a type are its own wherever they are written.
///
/// What it cannot follow it reports: a `#[path]` anywhere (it reads each
/// file as the module its place names), and in a reached module an
/// `include!`, an inline module (its `super::` is one level off) or a read
/// of the environment other than the settings `.ci/loom` knows of
/// (`GDEX_LOOM_BOUND`, `LOOM_*`).
fn reached_by_models(modules: &BTreeMap<String, String>) -> Result<BTreeSet<String>, Vec<String>> {
    let krate = Crate::new(modules);
    let mut problems = Vec::new();
    let mut macros: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, source) in modules {
        for name in words_after(source, "macro_rules!") {
            macros.entry(name).or_default().insert(module.clone());
        }
        if has_path_attribute(source) {
            problems.push(format!(
                "`{module}` declares a module with #[path]: the reader takes each file for \
                 the module its place names"
            ));
        }
    }
    let mut reached = BTreeSet::new();
    let mut types = BTreeSet::new();
    let mut next = vec!["pool::loom_pool".to_owned()];
    while !next.is_empty() {
        while let Some(module) = next.pop() {
            let Some(source) = modules.get(&module) else {
                continue;
            };
            if !reached.insert(module.clone()) {
                continue;
            }
            for (path, _) in krate.paths_in(source) {
                next.extend(krate.locate(&module, &path));
            }
            let inside = join(&module, "");
            next.extend(modules.keys().filter(|m| m.starts_with(&inside)).cloned());
            for name in invoked_macros(source) {
                next.extend(macros.get(&name).into_iter().flatten().cloned());
            }
            types.extend(defined_types(source));
            problems.extend(
                unfollowable(source)
                    .into_iter()
                    .map(|p| format!("`{module}`: {p}")),
            );
        }
        // The reached types' other names, then whoever writes impls for them.
        loop {
            let known = types.len();
            for source in modules.values() {
                for (alias, named) in aliases_in(source) {
                    if mentions_any(&named, &types) {
                        types.insert(alias);
                    }
                }
            }
            if types.len() == known {
                break;
            }
        }
        for (module, source) in modules {
            if !reached.contains(module)
                && impls_in(source, &macros)
                    .iter()
                    .any(|header| mentions_any(header, &types))
            {
                next.push(module.clone());
            }
        }
    }
    if problems.is_empty() {
        Ok(reached)
    } else {
        Err(problems)
    }
}

/// The identifier after each `keyword` of `source` (`macro_rules! spin`).
fn words_after(source: &str, keyword: &str) -> Vec<String> {
    source
        .match_indices(keyword)
        .filter(|(at, _)| !source[..*at].ends_with(is_ident))
        .map(|(at, _)| {
            let rest = source[at + keyword.len()..].trim_start();
            rest[..rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len())].to_owned()
        })
        .filter(|word| !word.is_empty())
        .collect()
}

/// The identifiers of `text`.
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !is_ident(c)).filter(|w| !w.is_empty())
}

fn mentions_any(text: &str, names: &BTreeSet<String>) -> bool {
    words(text).any(|word| names.contains(word))
}

/// The macros `source` invokes (`name!(…)`, `name![…]`, `name! {…}`).
fn invoked_macros(source: &str) -> Vec<String> {
    source
        .match_indices('!')
        .filter(|(at, _)| source[at + 1..].trim_start().starts_with(['(', '[', '{']))
        .filter_map(|(at, _)| {
            let before = &source[..at];
            let start = before.rfind(|c: char| !is_ident(c)).map_or(0, |s| s + 1);
            let name = &before[start..];
            (!name.is_empty() && name != "macro_rules").then(|| name.to_owned())
        })
        .collect()
}

/// The types and traits `source` defines for other modules to use (`pub`,
/// `pub(crate)`, …): only those can be given an impl elsewhere.
fn defined_types(source: &str) -> Vec<String> {
    source
        .lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("pub")?;
            let rest = match rest.strip_prefix('(') {
                Some(inner) => &inner[inner.find(')')? + 1..],
                None => rest,
            };
            let rest = rest.trim_start();
            let rest = rest.strip_prefix("unsafe ").unwrap_or(rest);
            let kind = ["struct ", "enum ", "union ", "trait ", "type "]
                .into_iter()
                .find(|kind| rest.starts_with(kind))?;
            words(&rest[kind.len()..]).next().map(str::to_owned)
        })
        .collect()
}

/// The other names `source` gives to things: (`Awake`, what it stands for)
/// for `… Woke as Awake` and `type Awake = …;`.
fn aliases_in(source: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (at, _) in source.match_indices(" as ") {
        let before = &source[..at];
        let named = &before[before.rfind(|c: char| !is_ident(c)).map_or(0, |s| s + 1)..];
        if let Some(alias) = words(&source[at + 4..]).next() {
            out.push((alias.to_owned(), named.to_owned()));
        }
    }
    for (at, _) in source.match_indices("type ") {
        if source[..at].ends_with(is_ident) {
            continue;
        }
        let rest = &source[at + 5..];
        let (Some(alias), Some(eq)) = (words(rest).next(), rest.find('=')) else {
            continue;
        };
        let end = rest[eq..].find(';').map_or(rest.len(), |e| eq + e);
        out.push((alias.to_owned(), rest[eq..end].to_owned()));
    }
    out
}

/// The headers of the `impl` blocks of `source` (`impl Drop for Woke`),
/// and the input of each invocation of a macro of the crate (which may
/// write impls of its own).
fn impls_in(source: &str, macros: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in source.match_indices("impl") {
        let before = source[..at].trim_end();
        let starts_item = before.is_empty()
            || before.ends_with([';', '}', '{', ']'])
            || before.ends_with(" unsafe")
            || before == "unsafe";
        let after = &source[at + 4..];
        if starts_item && after.starts_with(|c: char| c.is_whitespace() || c == '<') {
            out.push(after[..after.find(['{', ';']).unwrap_or(after.len())].to_owned());
        }
    }
    for name in macros.keys() {
        for (at, _) in source.match_indices(&format!("{name}!")) {
            if source[..at].ends_with(is_ident) {
                continue;
            }
            let rest = source[at + name.len() + 1..].trim_start();
            let Some(open) = rest.chars().next().filter(|c| "([{".contains(*c)) else {
                continue;
            };
            let close = match open {
                '(' => ')',
                '[' => ']',
                _ => '}',
            };
            let mut depth = 0;
            let end = rest
                .char_indices()
                .find(|&(_, c)| {
                    depth += i32::from(c == open) - i32::from(c == close);
                    depth == 0
                })
                .map_or(rest.len(), |(e, _)| e);
            out.push(rest[..end].to_owned());
        }
    }
    out
}

/// Whether `source` has a `#[path = …]` (or a `cfg_attr` giving one).
fn has_path_attribute(source: &str) -> bool {
    source.match_indices("#[").any(|(at, _)| {
        let attribute = &source[at..];
        let attribute = &attribute[..attribute.find(']').unwrap_or(attribute.len())];
        attribute
            .match_indices("path")
            .any(|(p, _)| attribute[p + 4..].trim_start().starts_with('='))
    })
}

/// What the reader cannot follow in a module the models reach.
fn unfollowable(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    for name in invoked_macros(source) {
        if name.starts_with("include") {
            out.push(format!(
                "{name}! brings in a file the reader does not follow"
            ));
        }
    }
    for (at, _) in source.match_indices("mod ") {
        let rest = &source[at + 4..];
        let name = words(rest).next().unwrap_or("");
        let after = rest.trim_start()[name.len()..].trim_start();
        if !source[..at].ends_with(is_ident) && after.starts_with('{') {
            out.push(format!(
                "the inline module `{name}` (give it a file of its own)"
            ));
        }
    }
    for read in [
        "env!(",
        "option_env!(",
        "env::var(",
        "env::var_os(",
        "env::vars",
    ] {
        for (at, _) in source.match_indices(read) {
            let rest = &source[at + read.len()..];
            let name = rest
                .split('"')
                .nth(1)
                .filter(|_| rest.trim_start().starts_with('"'))
                .unwrap_or("");
            if name != "GDEX_LOOM_BOUND" && !name.starts_with("LOOM_") {
                out.push(format!(
                    "reads the environment ({read}…{name}): a setting that changes what a \
                     model does must be one .ci/loom does not record a pass under"
                ));
            }
        }
    }
    out
}

/// The reader behind the loom record (X7) follows every way a file of
/// `src/` can change what the models compile, not only `crate::` and
/// `super::` paths: a glob, a path up two levels, a group in a group, a
/// name the crate root imports, a file of the models' own, a method or a
/// trait impl written elsewhere for the protocol's types (under another
/// name too), a macro defined elsewhere, the crate under another name. What
/// it cannot follow (a `#[path]`, an `include!`, an inline module, a read of
/// the environment the record does not hold) it reports.
#[test]
fn the_loom_reader_follows_what_the_models_compile_besides_paths() {
    let crate_with = |files: &[(&str, &str)]| {
        let mut modules: BTreeMap<String, String> = [
            ("", "mod pool;\nmod util;"),
            (
                "pool",
                "mod loom_pool;\npub(crate) mod parking;\nmod worker;",
            ),
            ("pool::loom_pool", "use super::parking::{Parking, Woke};"),
            (
                "pool::parking",
                "pub(crate) struct Parking;\npub(crate) struct Woke;",
            ),
            (
                "pool::worker",
                "use super::parking::Parking;\nstruct Core;\nimpl Core {}",
            ),
            ("util", "pub(crate) fn helper() {}"),
        ]
        .into_iter()
        .map(|(name, source)| (name.to_owned(), source.to_owned()))
        .collect();
        for (name, source) in files {
            modules.insert((*name).to_owned(), strip(source));
        }
        reached_by_models(&modules)
    };
    assert_eq!(
        crate_with(&[]).unwrap(),
        BTreeSet::from(["pool::loom_pool".to_owned(), "pool::parking".to_owned()])
    );
    let models = "pool::loom_pool";
    type Files<'a> = &'a [(&'a str, &'a str)];
    let reaches: &[(&str, Files, &str)] = &[
        ("a glob", &[(models, "use super::*;")], "pool"),
        (
            "a path up two levels",
            &[(models, "use super::super::util::helper;")],
            "util",
        ),
        (
            "a group in a group",
            &[(
                models,
                "use crate::{pool::parking::{Parking}, util::helper};",
            )],
            "util",
        ),
        (
            "a self path",
            &[
                ("pool::parking", "fn f() { self::inner::g() }"),
                ("pool::parking::inner", ""),
            ],
            "pool::parking::inner",
        ),
        (
            "a file of their own",
            &[
                ("pool::parking", "mod more;\nuse more::X;"),
                ("pool::parking::more", ""),
            ],
            "pool::parking::more",
        ),
        (
            "an import of the root",
            &[
                ("", "mod pool;\nmod util;\nuse util::helper;"),
                (models, "fn f() { crate::helper() }"),
            ],
            "util",
        ),
        (
            "an item of the root",
            &[(models, "fn f() { crate::spawn() }")],
            "",
        ),
        (
            "a method written elsewhere",
            &[(
                "util",
                "impl crate::pool::parking::Parking {\n    pub(crate) fn help(&self) {}\n}",
            )],
            "util",
        ),
        (
            "a trait impl written elsewhere",
            &[(
                "util",
                "use crate::pool::parking::Woke;\n\
                 impl Drop for Woke {\n    fn drop(&mut self) {}\n}",
            )],
            "util",
        ),
        (
            "an impl under another name",
            &[
                (
                    "pool",
                    "mod loom_pool;\npub(crate) mod parking;\n\
                     pub(crate) use parking::Woke as Awake;",
                ),
                (
                    "util",
                    "impl Drop for crate::pool::Awake {\n    fn drop(&mut self) {}\n}",
                ),
            ],
            "util",
        ),
        (
            "a macro defined elsewhere",
            &[
                ("util", "macro_rules! spin { () => {} }"),
                (models, "fn f() { spin!(); }"),
            ],
            "util",
        ),
        (
            "an impl a macro writes",
            &[
                (
                    "util",
                    "macro_rules! drops {\n    \
                     ($t:ty) => { impl Drop for $t { fn drop(&mut self) {} } }\n}",
                ),
                ("pool::worker", "drops!(super::parking::Woke);"),
            ],
            "pool::worker",
        ),
        (
            "the crate under another name",
            &[
                ("", "extern crate self as gdex;\nmod pool;\nmod util;"),
                (models, "fn f() { gdex::util::helper() }"),
            ],
            "util",
        ),
    ];
    for (what, files, module) in reaches {
        match crate_with(files) {
            Ok(reached) => assert!(
                reached.contains(*module),
                "{what}: the models reach `{module}`, the reader found only {reached:?}"
            ),
            Err(problems) => panic!("{what}: {problems:?}"),
        }
    }
    let unreadable: &[(&str, Files)] = &[
        (
            "a #[path]",
            &[(
                "pool",
                "#[path = \"other.rs\"]\npub(crate) mod parking;\nmod loom_pool;",
            )],
        ),
        (
            "an include!",
            &[("pool::parking", "include!(\"more.rs\");")],
        ),
        (
            "an inline module",
            &[(
                "pool::parking",
                "mod inner {\n    use super::super::util::helper;\n}",
            )],
        ),
        (
            "a read of the environment",
            &[(
                "pool::parking",
                "fn spin() -> bool { std::env::var(\"GDEX_SPIN\").is_ok() }",
            )],
        ),
        (
            "a build-time read of it",
            &[(
                "pool::parking",
                "const V: &str = env!(\"CARGO_PKG_VERSION\");",
            )],
        ),
    ];
    for (what, files) in unreadable {
        assert!(
            crate_with(files).is_err(),
            "{what}: the reader must say it cannot follow it"
        );
    }
}

/// A copy of what `.ci/loom` reads, in a scratch folder, with a stand-in
/// for cargo whose "test binary" lists `models` and passes them all: the
/// script's own logic (what it records, when it runs the models) without a
/// loom build.
struct LoomScratch {
    dir: crate::common::TempDir,
    real_path: String,
}

impl LoomScratch {
    fn new(name: &str, models: &[&str]) -> LoomScratch {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let dir = crate::common::TempDir::new(name);
        for file in [
            ".ci/loom",
            "Cargo.toml",
            "Cargo.lock",
            "src/lib.rs",
            "src/pool/mod.rs",
            "src/pool/parking.rs",
            "src/pool/loom_pool.rs",
            "src/pool/loom_pool/models.rs",
        ] {
            std::fs::create_dir_all(dir.0.join(file).parent().unwrap()).unwrap();
            std::fs::copy(root.join(file), dir.0.join(file)).unwrap();
        }
        let list: String = models
            .iter()
            .map(|m| format!("echo '{m}: test'\n"))
            .collect();
        let bin = dir.0.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let script = |name: &str, body: &str| {
            let path = bin.join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
            std::process::Command::new("chmod")
                .arg("+x")
                .arg(&path)
                .status()
                .unwrap();
        };
        script(
            "models",
            &format!(
                "case \" $* \" in *' --list '*) {list} exit 0;; esac\necho 'test result: ok.'\n"
            ),
        );
        script(
            "cargo",
            &format!(
                "[ -z \"$SCRATCH_NO_BUILD\" ] || exit 101\necho '{{\"executable\":\"{}\"}}'\n",
                bin.join("models").display()
            ),
        );
        LoomScratch {
            dir,
            real_path: std::env::var("PATH").unwrap_or_default(),
        }
    }

    /// Runs `.ci/loom args`: (passed, what it said).
    fn run(&self, args: &[&str]) -> (bool, String) {
        self.run_with(args, &[])
    }

    /// The same where cargo fails: what `.ci/loom --if-changed` decides,
    /// without a record of the run.
    fn decide(&self) -> String {
        self.run_with(&["--if-changed"], &[("SCRATCH_NO_BUILD", "1")])
            .1
    }

    fn run_with(&self, args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
        let mut command = std::process::Command::new("bash");
        command.envs(env.iter().copied());
        command.arg(self.dir.0.join(".ci/loom")).args(args).env(
            "PATH",
            format!("{}:{}", self.dir.0.join("bin").display(), self.real_path),
        );
        for (name, _) in std::env::vars() {
            if name == "GDEX_LOOM_BOUND" || name.starts_with("LOOM_") {
                command.env_remove(name);
            }
        }
        let out = command.output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), said)
    }

    fn edit(&self, file: &str, edit: impl FnOnce(&str) -> String) -> String {
        let path = self.dir.0.join(file);
        let before = std::fs::read_to_string(&path).unwrap_or_default();
        std::fs::write(&path, edit(&before)).unwrap();
        before
    }
}

/// What the loom models compile is more than their files (X7): the
/// package's edition, the profile `.ci/loom` builds them with, the features
/// of their dependencies, a build script, cargo's configuration, and the
/// `cfg` that compiles them in at all. A change to any of these runs the
/// models again under `--if-changed`; a change elsewhere in the manifest
/// does not.
#[test]
fn the_loom_record_changes_with_how_the_models_build() {
    let scratch = LoomScratch::new(
        "loom-record",
        &["pool::loom_pool::loom_a", "pool::loom_pool::loom_b"],
    );
    let (passed, said) = scratch.run(&[]);
    assert!(passed, "the models' stand-in passes: {said}");
    let said = scratch.decide();
    assert!(said.contains("not run again"), "{said}");
    type Edit = fn(&str) -> String;
    let changes: &[(&str, &str, Edit)] = &[
        ("the edition", "Cargo.toml", |t| {
            t.replacen("edition = \"2021\"", "edition = \"2024\"", 1)
        }),
        ("debug assertions in release", "Cargo.toml", |t| {
            format!("{t}\n[profile.release]\ndebug-assertions = true\n")
        }),
        ("overflow checks in bench", "Cargo.toml", |t| {
            format!("{t}\n[profile.bench]\noverflow-checks = true\n")
        }),
        ("loom's features", "Cargo.toml", |t| {
            t.replacen(
                "loom = { version = \"0.7\", optional = true }",
                "loom = { version = \"0.7\", optional = true, features = [\"checkpoint\"] }",
                1,
            )
        }),
        ("the models' cfg", "src/pool/mod.rs", |t| {
            t.replacen(
                "#[cfg(all(test, gdex_loom))]",
                "#[cfg(all(test, gdex_loom, gdex_never))]",
                1,
            )
        }),
        ("a build script", "build.rs", |_| {
            "fn main() {}\n".to_owned()
        }),
        ("the library's root", "Cargo.toml", |t| {
            t.replacen(
                "[features]",
                "[lib]\npath = \"src/other.rs\"\n\n[features]",
                1,
            )
        }),
        ("the build script's path", "Cargo.toml", |t| {
            t.replacen(
                "autotests = false",
                "autotests = false\nbuild = \"gen.rs\"",
                1,
            )
        }),
        ("cargo's configuration", ".cargo/config.toml", |_| {
            "[build]\nrustflags = [\"-Cdebug-assertions\"]\n".to_owned()
        }),
    ];
    std::fs::create_dir_all(scratch.dir.0.join(".cargo")).unwrap();
    for (what, file, change) in changes {
        let before = scratch.edit(file, change);
        assert_ne!(
            std::fs::read_to_string(scratch.dir.0.join(file)).unwrap(),
            before,
            "the change of {what} no longer applies to {file}: update it"
        );
        let said = scratch.decide();
        assert!(
            said.contains("inputs differ"),
            "a change of {what} ({file}) must run the loom models again, .ci/loom said: {said}"
        );
        if before.is_empty() {
            std::fs::remove_file(scratch.dir.0.join(file)).unwrap();
        } else {
            scratch.edit(file, |_| before);
        }
    }
    scratch.edit("Cargo.toml", |t| {
        format!("{t}\n[[test]]\nname = \"another\"\n")
    });
    let said = scratch.decide();
    assert!(
        said.contains("not run again"),
        "a new test binary changes no model: {said}"
    );
}

/// `.ci/loom` records a pass only when models ran (X7): a test binary
/// with no model in it (the `cfg` of `mod loom_pool` never true, the
/// models renamed) fails instead of vouching for the protocol.
#[test]
fn the_loom_script_records_no_pass_when_no_model_ran() {
    let scratch = LoomScratch::new("loom-no-model", &[]);
    let (passed, said) = scratch.run(&[]);
    assert!(
        !passed,
        ".ci/loom passed with no model in its test binary: {said}"
    );
    assert!(
        !scratch.dir.0.join(".ci/loom.passed").exists(),
        ".ci/loom recorded a pass of no model: {said}"
    );
}
