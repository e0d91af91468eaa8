//! The docs say what is (T1): every contract code the code and the docs
//! cite is stated in docs/architecture.md, each section's range names its
//! contracts, and the figures the README's first screen quotes are the
//! measured ones of benches/RESULTS.md.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap()
}

/// The files a reader meets a contract code in: the README, docs/, and the
/// `.rs` files of src/, tests/, examples/ and benches/.
fn cited_in() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs" || e == "md") {
                out.push(path);
            }
        }
    }
    let mut files = vec![root().join("README.md")];
    for dir in ["docs", "src", "tests", "examples", "benches"] {
        walk(&root().join(dir), &mut files);
    }
    files.sort();
    files
}

/// Whether `word` has a contract code's shape: one of the contracts'
/// letters, then one or two digits.
fn is_code(word: &str) -> bool {
    let mut chars = word.chars();
    chars.next().is_some_and(|c| "PSFBGACDLMOTX".contains(c))
        && (2..=3).contains(&word.len())
        && chars.all(|c| c.is_ascii_digit())
        && !word[1..].starts_with('0')
}

fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
}

/// The codes `line` cites: those of a parenthesised group that opens with a
/// code ("(S4)", "(S13/S14, X1)", "(T1 and …)"), and both ends of a range
/// ("X1-X9").
fn citations(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in line.match_indices('(') {
        let inside = &line[at + 1..];
        let inside = &inside[..inside.find(')').unwrap_or(inside.len())];
        if words(inside).next().is_some_and(is_code) {
            found.extend(words(inside).filter(|w| is_code(w)).map(str::to_owned));
        }
    }
    for (a, b) in ranges(line) {
        found.extend([a.to_owned(), b.to_owned()]);
    }
    found
}

/// The ranges of contracts `line` gives ("X1-X9"): both ends, of one letter.
fn ranges(line: &str) -> impl Iterator<Item = (&str, &str)> {
    line.match_indices('-').filter_map(|(at, _)| {
        let a = line[..at]
            .rsplit(|c: char| !c.is_ascii_alphanumeric())
            .next()?;
        let b = line[at + 1..]
            .split(|c: char| !c.is_ascii_alphanumeric())
            .next()?;
        (is_code(a) && is_code(b) && a[..1] == b[..1]).then_some((a, b))
    })
}

/// The codes docs/architecture.md states: a `### CODE` heading, or a
/// heading that names one code in parentheses ("## Tests (T1)").
fn stated() -> BTreeSet<String> {
    let mut codes = BTreeSet::new();
    for line in read("docs/architecture.md").lines() {
        if let Some(title) = line.strip_prefix("### ") {
            if let Some(first) = words(title).next().filter(|w| is_code(w)) {
                codes.insert(first.to_owned());
            }
        }
        if line.starts_with('#') {
            if let Some(inside) = line.split('(').nth(1).and_then(|t| t.strip_suffix(')')) {
                if is_code(inside) {
                    codes.insert(inside.to_owned());
                }
            }
        }
    }
    codes
}

#[test]
fn every_contract_code_cited_is_stated_in_the_architecture() {
    let stated = stated();
    let mut unknown = Vec::new();
    for path in cited_in() {
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            for code in citations(line) {
                if !stated.contains(&code) {
                    let file = path.strip_prefix(root()).unwrap().display();
                    unknown.push(format!("  {file}:{}: {code}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "these lines cite a contract docs/architecture.md does not state: state it \
         there (a `### CODE title` section with its code and tests) or cite the right \
         one:\n{}",
        unknown.join("\n")
    );
}

/// A section of docs/architecture.md that announces a range ("## The pool
/// (P1-P10)") or a list ("(A1, A2)") announces exactly the contracts its
/// `###` sections state.
#[test]
fn each_sections_range_names_its_contracts() {
    let text = read("docs/architecture.md");
    let mut wrong = Vec::new();
    let mut section: Option<(String, Vec<String>)> = None;
    let mut close = |section: Option<(String, Vec<String>)>| {
        let Some((title, stated)) = section else {
            return;
        };
        let inside = &title[title.rfind('(').unwrap() + 1..title.len() - 1];
        let mut announced = Vec::new();
        for part in inside.split(", ") {
            match part.split_once('-') {
                Some((a, b)) => {
                    let (from, to): (u32, u32) = (a[1..].parse().unwrap(), b[1..].parse().unwrap());
                    announced.extend((from..=to).map(|n| format!("{}{n}", &a[..1])));
                }
                None => announced.push(part.to_owned()),
            }
        }
        let mut sorted_stated = stated.clone();
        sorted_stated.sort();
        announced.sort();
        if announced != sorted_stated && !(stated.is_empty() && announced.len() == 1) {
            wrong.push(format!("  {title}: its sections state {stated:?}"));
        }
    };
    for line in text.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            close(section.take());
            let ranged = title.ends_with(')')
                && title.rfind('(').is_some_and(|at| {
                    title[at + 1..]
                        .split(['-', ',', ')'])
                        .all(|w| is_code(w.trim()) || w.is_empty())
                });
            if ranged {
                section = Some((title.to_owned(), Vec::new()));
            }
        } else if let (Some(title), Some((_, stated))) =
            (line.strip_prefix("### "), section.as_mut())
        {
            if let Some(code) = words(title).next().filter(|w| is_code(w)) {
                stated.push(code.to_owned());
            }
        }
    }
    close(section.take());
    assert!(
        wrong.is_empty(),
        "these sections of docs/architecture.md announce other contracts than they state:\n{}",
        wrong.join("\n")
    );
}

/// A range of contracts that the README or the crate's page gives ("P1-P9
/// for the pool") names them all: it ends at the last one
/// docs/architecture.md states with that letter (a stale range there was
/// "P1-P9" after P10 and P11 came).
#[test]
fn the_first_pages_ranges_of_contracts_are_whole() {
    let stated = stated();
    let mut stale = Vec::new();
    for page in ["README.md", "src/lib.rs"] {
        for (n, line) in read(page).lines().enumerate() {
            for (a, b) in ranges(line) {
                let last = stated
                    .iter()
                    .filter(|code| code[..1] == b[..1])
                    .max_by_key(|code| code[1..].parse::<u32>().unwrap())
                    .unwrap();
                if last != b {
                    stale.push(format!("  {page}:{}: {a}-{b}, but {last} is stated", n + 1));
                }
            }
        }
    }
    assert!(
        stale.is_empty(),
        "these ranges of contracts end before the last one docs/architecture.md states:\n{}",
        stale.join("\n")
    );
}

/// The figures of `main_frame_gap` (gdex's and glib-rs's main-context
/// executor's) that the README's first screen quotes are those of
/// benches/RESULTS.md's table.
#[test]
fn the_readmes_frame_gap_figures_are_the_measured_ones() {
    let results = read("benches/RESULTS.md");
    let row = results
        .lines()
        .find(|l| l.starts_with("| main_frame_gap |"))
        .expect("benches/RESULTS.md has a main_frame_gap row");
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    // | workload | unit | gdex | tokio | smol | glib main | …
    let (gdex, glib) = (cells[3], cells[6]);
    let readme = read("README.md");
    let why = &readme[readme.find("**Why gdex").expect("the README says why gdex")..];
    let why = why[..why.find("\n\n").unwrap()].replace('\n', " ");
    for (who, figure) in [("gdex", gdex), ("glib-rs", glib)] {
        assert!(
            why.contains(&format!("{figure} ms with {who}")),
            "the README's \"Why gdex\" should quote {who}'s main_frame_gap of \
             benches/RESULTS.md, {figure} ms:\n{why}"
        );
    }
}

#[test]
fn the_citation_reader_finds_codes_and_nothing_else() {
    assert_eq!(citations("runs it (S4)."), ["S4"]);
    assert_eq!(citations("both (S13/S14, X1) hold"), ["S13", "S14", "X1"]);
    assert_eq!(
        citations("contracts (P1-P9, S1-S8)"),
        ["P1", "P9", "S1", "S8", "P1", "P9", "S1", "S8"]
    );
    assert!(citations("a queue (FIFO) of 4 (S0 is no code) and (see S4)").is_empty());
    // Built at run time, so that this file cites no unknown code itself.
    let line = format!("a B-tree, X1-Y9, (A{} and more)", 10);
    assert_eq!(citations(&line), ["A10"]);
}
