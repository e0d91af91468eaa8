//! Prints one Markdown table of everything measured in this run: criterion's
//! estimates (read back from its output directory) and the figures.

use crate::figures::Figure;
use crate::runtimes::workers;

const PEERS: [&str; 4] = ["tokio", "smol", "glib-main", "glib-pool"];

/// (group, per-element divisor: 1 for µs per iteration, else elements)
const GROUPS: [(&str, f64); 10] = [
    ("spawn_many_local", 1.0),
    ("spawn_many_remote_idle", 1.0),
    ("spawn_many_remote_busy1", 1.0),
    ("spawn_many_remote_busy2", 1.0),
    ("ping_pong", 1.0),
    ("yield_many", 1.0),
    ("chained_spawn", 1.0),
    ("uneven_fanout", 1.0),
    ("push_remote", 100_000.0),
    ("main_pool_roundtrip", 10_000.0),
];

/// The workspace's target directory: `cargo bench` runs this in the
/// package's own directory, two levels below the workspace's.
pub fn target_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

fn criterion_dir() -> std::path::PathBuf {
    target_dir().join("criterion")
}

/// The median estimate in nanoseconds of `group/id`, if this run made one.
pub fn median_ns(group: &str, id: &str) -> Option<f64> {
    let path = criterion_dir()
        .join(group)
        .join(id)
        .join("new")
        .join("estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json["median"]["point_estimate"].as_f64()
}

pub fn fmt(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

pub fn print(figures: &[Figure]) {
    let n = workers();
    println!();
    println!("## gdex and its peers ({n} workers; medians)");
    println!();
    println!(
        "| workload | unit | gdex | tokio | smol | glib main | glib pool | gdex / best peer |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (group, per) in GROUPS {
        let unit = if per == 1.0 { "µs/iter" } else { "ns/item" };
        let scale = |ns: f64| if per == 1.0 { ns / 1e3 } else { ns / per };
        let gdex = median_ns(group, &format!("gdex/{n}")).map(scale);
        let peers: Vec<Option<f64>> = PEERS
            .iter()
            .map(|p| {
                let threads = if *p == "glib-main" { 1 } else { n };
                median_ns(group, &format!("{p}/{threads}")).map(scale)
            })
            .collect();
        if gdex.is_none() && peers.iter().all(Option::is_none) {
            continue;
        }
        let best = peers
            .iter()
            .flatten()
            .cloned()
            .fold(f64::INFINITY, f64::min);
        let ratio = match gdex {
            Some(g) if best.is_finite() => format!("{:.2}", g / best),
            _ => "—".into(),
        };
        let cell = |v: Option<f64>| v.map(fmt).unwrap_or_else(|| "—".into());
        println!(
            "| {group} | {unit} | {} | {} | {} | {} | {} | {ratio} |",
            cell(gdex),
            cell(peers[0]),
            cell(peers[1]),
            cell(peers[2]),
            cell(peers[3]),
        );
    }
    for (group, elements) in [("fiber_spawn", 100_000.0), ("fiber_switch", 100_000.0)] {
        let per = |id: &str| median_ns(group, id).map(|ns| ns / elements);
        let floor = per("corosensei-floor/1");
        let gdex_one = per("gdex/1");
        let gdex_n = per(&format!("gdex/{n}"));
        if gdex_n.is_none() && gdex_one.is_none() {
            continue;
        }
        let gdex = match (gdex_one, gdex_n) {
            (Some(one), Some(many)) if group == "fiber_switch" => {
                format!("{} (1 worker), {} ({n} workers)", fmt(one), fmt(many))
            }
            (_, Some(many)) => fmt(many),
            (Some(one), None) => fmt(one),
            _ => "—".into(),
        };
        let libdex = if group == "fiber_spawn" {
            "2201"
        } else {
            "2021"
        };
        let handoff = match per("handoff-floor/2") {
            Some(ns) => format!("; thread hand-off floor {}", fmt(ns)),
            None => String::new(),
        };
        println!(
            "| {group} | ns/fiber | {gdex} | — | — | — | — | corosensei floor {}{handoff}; libdex 1.0: {libdex} |",
            floor.map(fmt).unwrap_or_else(|| "—".into())
        );
    }
    for f in figures {
        let get = |name: &str| f.values.iter().find(|(n, _, _)| *n == name);
        let gdex = get("gdex");
        let best = f
            .values
            .iter()
            .filter(|(n, _, _)| *n != "gdex")
            .map(|(_, _, v)| *v)
            .fold(f64::INFINITY, f64::min);
        let ratio = match gdex {
            Some((_, _, g)) if best.is_finite() && best > 0.0 => format!("{:.2}", g / best),
            _ => "—".into(),
        };
        let cell = |name: &str| {
            get(name)
                .map(|(_, s, _)| s.clone())
                .unwrap_or_else(|| "—".into())
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {ratio} |",
            f.workload,
            f.unit,
            cell("gdex"),
            cell("tokio"),
            cell("smol"),
            cell("glib-main"),
            cell("glib-pool"),
        );
    }
    println!();
}
