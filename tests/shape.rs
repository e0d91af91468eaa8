//! The crate's shape (T1 and "Layers and modules" in docs/architecture.md):
//! its modules form layers, with no import cycle between them; no file of
//! `src/` is over 800 lines; the test files are named after what they check,
//! the one-at-a-time binary's tests take their lock, the optimised binary
//! runs what the others run, and `.ci/loom`'s record of the models' last
//! pass covers every file they compile.
//!
//! This reads `src/` as text: every `crate::…` and `super::…` path outside
//! comments and `#[cfg(test)] mod tests` (names re-exported at the crate
//! root count as their defining module) is an edge from the module that
//! writes it to the module it names. Two graphs must be acyclic:
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
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
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

/// Cuts line comments (doc comments included) and the unit-test module.
fn strip(source: &str) -> String {
    let source = match source.find("#[cfg(test)]\nmod tests") {
        Some(at) => &source[..at],
        None => source,
    };
    source
        .lines()
        .map(|line| match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path that follows `prefix` ("crate::" or "super::"), with `{a, b::c}`
/// groups expanded one level: "pool::worker::Core", "Error", …
fn paths_after(source: &str, prefix: &str) -> Vec<String> {
    let ident = |c: char| c.is_alphanumeric() || c == '_' || c == ':';
    let mut out = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().last();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue; // `foo_crate::` or `super::super::`
        }
        let end = rest.find(|c: char| !ident(c)).unwrap_or(rest.len());
        let head = rest[..end].trim_end_matches(':').to_owned();
        if rest[end..].starts_with('{') || (head.is_empty() && rest.starts_with('{')) {
            let group = &rest[end + 1..rest[end..].find('}').map_or(rest.len(), |e| end + e)];
            for item in group.split(',') {
                let item: String = item.trim().chars().take_while(|&c| ident(c)).collect();
                if !item.is_empty() && item != "self" {
                    out.push(if head.is_empty() {
                        item
                    } else {
                        format!("{head}::{item}")
                    });
                }
            }
        }
        if !head.is_empty() {
            out.push(head);
        }
    }
    out
}

/// The graph between modules: `a → b` if `a`'s source names `b`.
fn graph(modules: &BTreeMap<String, String>) -> Graph {
    // Root re-exports: `pub use pool::{ThreadPool, …}` names `pool`.
    let mut reexported: BTreeMap<String, String> = BTreeMap::new();
    for statement in modules[""].split(';') {
        let Some(body) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let (module, names) = match body.find("::{") {
            Some(at) => (&body[..at], body[at + 3..].trim_end_matches('}')),
            None => body.rsplit_once("::").unwrap_or(("", body)),
        };
        for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            reexported.insert(name.to_owned(), module.to_owned());
        }
    }
    let resolve = |path: &str| -> Option<String> {
        let parts: Vec<&str> = path.split("::").collect();
        for k in (1..=parts.len()).rev() {
            let candidate = parts[..k].join("::");
            if modules.contains_key(&candidate) {
                return Some(candidate);
            }
        }
        reexported.get(parts[0]).cloned()
    };
    let mut graph = Graph::new();
    for (name, source) in modules {
        if name.is_empty() {
            continue; // the crate root assembles the API from every module
        }
        let parent = name.rsplit_once("::").map_or("", |(p, _)| p);
        let mut named: Vec<String> = paths_after(source, "crate::");
        for path in paths_after(source, "super::") {
            let up = if parent.is_empty() {
                path
            } else {
                format!("{parent}::{path}")
            };
            named.push(up);
        }
        for target in named.iter().filter_map(|p| resolve(p)) {
            if &target != name {
                graph.entry(name.clone()).or_default().insert(target);
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

/// A wait or a timeout on something that already gives
/// `Result<T, gdex::Error>` gives one `Result` (`IntoResult`), and
/// `block_on`/`wait_for` take `IntoFuture`: the places a new user reads
/// first show neither a `Result` in a `Result` nor a manual `into_future`.
#[test]
fn the_first_pages_a_user_reads_have_no_nested_results() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for page in [
        "README.md",
        "src/lib.rs",
        "examples/tour.rs",
        "docs/libdex.md",
    ] {
        let text = std::fs::read_to_string(root.join(page)).unwrap();
        for (n, line) in text.lines().enumerate() {
            assert!(
                !line.contains(".unwrap().unwrap()") && !line.contains("IntoFuture::into_future"),
                "{page}:{}: {line}",
                n + 1
            );
        }
    }
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
    let modules = modules();
    let graph = graph(&modules);
    let mut reached = BTreeSet::new();
    let mut next = vec!["pool::loom_pool".to_owned()];
    while let Some(module) = next.pop() {
        if reached.insert(module.clone()) {
            next.extend(graph.get(&module).into_iter().flatten().cloned());
        }
    }
    assert!(
        reached.contains("pool::parking"),
        "the reader lost the models' edge to the protocol: {reached:?}"
    );
    for module in &reached {
        let file = module.replace("::", "/");
        let candidates = [format!("src/{file}.rs"), format!("src/{file}/mod.rs")];
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
