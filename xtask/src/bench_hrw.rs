//! `cargo xtask bench-hrw`: runs `benches/hrw.rs` and prints one table.
//!
//! The table has a row per operation and method and a column per member
//! count; each cell is criterion's median in nanoseconds followed by the
//! speed-up over the naive baseline (the Go seed's algorithm done naively in
//! Rust) and over the fastest peer crate, all from the same run. The issue's
//! speed gates follow, each marked met or missed.
//!
//! Options:
//! - `--quick`: criterion's quick mode, for a short run.
//! - `--json`: print the results and gates as JSON instead of the table; the
//!   benchmark's own output goes to stderr.
//! - `--no-run`: report the results already on disk without benchmarking.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// The member counts the benchmark measures, in column order.
const SIZES: [u64; 5] = [3, 10, 100, 1_000, 10_000];

/// The operations, in row order, as named in the benchmark's group ids.
const OPERATIONS: [&str; 3] = ["owner", "is_owner", "replicas3"];

/// The baseline every method is compared with.
const NAIVE: &str = "naive-sha256";

/// Methods whose name starts with this are peer crates.
const PEER_PREFIX: &str = "peer-";

/// Method order within an operation; methods not listed follow by name.
const METHOD_ORDER: [&str; 9] = [
    NAIVE,
    "go-sha256",
    "fast",
    "fast-scalar",
    "fast-weighted",
    "fast-unprepared",
    "peer-hash-rings",
    "peer-hrw",
    "peer-rendezvous_hash",
];

struct Options {
    quick: bool,
    json: bool,
    run: bool,
}

impl Options {
    fn parse(args: &[String]) -> Result<Options, String> {
        let mut options = Options { quick: false, json: false, run: true };
        for arg in args {
            match arg.as_str() {
                "--quick" => options.quick = true,
                "--json" => options.json = true,
                "--no-run" => options.run = false,
                other => {
                    return Err(format!(
                        "unknown option {other:?}; usage: cargo xtask bench-hrw [--quick] [--json] [--no-run]"
                    ));
                }
            }
        }
        Ok(options)
    }
}

/// Medians in nanoseconds by operation, then method, then member count.
type Results = BTreeMap<String, BTreeMap<String, BTreeMap<u64, f64>>>;

pub fn run(args: &[String]) -> Result<(), String> {
    let options = Options::parse(args)?;
    let criterion_dir = target_dir()?.join("criterion");
    if options.run {
        // Old results would mix with this run's; the table must come from
        // one run.
        for operation in OPERATIONS {
            let dir = criterion_dir.join(format!("hrw-{operation}"));
            if dir.exists() {
                std::fs::remove_dir_all(&dir).map_err(|err| format!("cannot clear {}: {err}", dir.display()))?;
            }
        }
        run_benchmark(&options)?;
    }
    let results = read_results(&criterion_dir)?;
    if results.is_empty() {
        return Err(format!("no HRW results under {}; run without --no-run", criterion_dir.display()));
    }
    let gates = gates(&results);
    if options.json {
        println!("{}", to_json(&results, &gates));
    } else {
        print!("{}", table(&results));
        println!();
        print!("{}", gate_report(&gates));
    }
    Ok(())
}

/// The table and the gates from a stored `--json` document, as the docs
/// show them (`cargo xtask docs` writes them into `docs/hrw-bench.md`).
pub fn render_stored(stored: &Value) -> Result<String, String> {
    let results = results_from_json(stored)?;
    Ok(format!("{}\n{}", table(&results), gate_report(&gates(&results))))
}

/// The headline figures of a stored run in one sentence, for the README.
pub fn summary_stored(stored: &Value) -> Result<String, String> {
    let results = results_from_json(stored)?;
    let gates = gates(&results);
    let value = |name: &str| {
        gates
            .iter()
            .find(|gate| gate.name.starts_with(name))
            .and_then(|gate| gate.value)
            .map(format_ratio)
            .ok_or_else(|| format!("the stored benchmark has no figure for {name:?}"))
    };
    let met = gates.iter().filter(|gate| gate.met() == Some(true)).count();
    Ok(format!(
        "In the recorded run, the fast `owner` at N=1000 is {} the fastest peer crate and {} the naive port of \
         the Go algorithm, and the fast `is_owner` at N=1000 is {} the naive one and takes {:.1} ns; {met} of {} \
         speed gates are met.\n",
        value("fast owner, N=1000: speed-up over the fastest peer crate")?,
        value("fast owner, N=1000: speed-up over naive")?,
        value("fast is_owner, N=1000: speed-up")?,
        median(&results, "is_owner", "fast", 1_000)
            .ok_or_else(|| "the stored benchmark has no median for the fast is_owner at N=1000".to_string())?,
        gates.len()
    ))
}

/// The medians of a stored `--json` document.
fn results_from_json(stored: &Value) -> Result<Results, String> {
    let rows = stored["results"].as_array().ok_or("the stored benchmark has no `results` list")?;
    let mut results = Results::new();
    for row in rows {
        let (Some(operation), Some(method), Some(size), Some(median)) =
            (row["operation"].as_str(), row["method"].as_str(), row["members"].as_u64(), row["median_ns"].as_f64())
        else {
            return Err(format!("a stored benchmark row lacks a field: {row}"));
        };
        results.entry(operation.to_owned()).or_default().entry(method.to_owned()).or_default().insert(size, median);
    }
    if results.is_empty() {
        return Err("the stored benchmark holds no results".into());
    }
    Ok(results)
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

/// The cargo target directory: `CARGO_TARGET_DIR` if set, else what
/// `cargo metadata` reports.
fn target_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let output = Command::new(cargo())
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|err| format!("could not start cargo metadata: {err}"))?;
    if !output.status.success() {
        return Err(format!("cargo metadata failed ({})", output.status));
    }
    let metadata: Value =
        serde_json::from_slice(&output.stdout).map_err(|err| format!("cargo metadata printed invalid JSON: {err}"))?;
    metadata["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .ok_or_else(|| "cargo metadata did not name a target directory".to_owned())
}

fn run_benchmark(options: &Options) -> Result<(), String> {
    let mut args = vec!["bench", "--package", "hoplock", "--bench", "hrw", "--", "--noplot"];
    if options.quick {
        args.push("--quick");
    }
    eprintln!("==> cargo {}", args.join(" "));
    let mut command = Command::new(cargo());
    command.args(&args);
    if options.json {
        // Keep stdout for the JSON document.
        command.stdout(Stdio::from(std::io::stderr()));
    }
    let status = command.status().map_err(|err| format!("could not start cargo: {err}"))?;
    if status.success() { Ok(()) } else { Err(format!("cargo {} failed ({status})", args.join(" "))) }
}

/// Reads every `new/benchmark.json` and `new/estimates.json` pair that
/// criterion wrote for the `hrw-*` groups.
fn read_results(criterion_dir: &Path) -> Result<Results, String> {
    let mut results = Results::new();
    let mut pending = vec![criterion_dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                // `base` and `change` hold older runs and comparisons.
                if path.file_name().is_some_and(|name| name != "base" && name != "change" && name != "report") {
                    pending.push(path);
                }
                continue;
            }
            if path.file_name().is_none_or(|name| name != "benchmark.json")
                || path.parent().and_then(Path::file_name).is_none_or(|name| name != "new")
            {
                continue;
            }
            let benchmark = read_json(&path)?;
            let estimates = read_json(&path.with_file_name("estimates.json"))?;
            let Some(operation) = benchmark["group_id"].as_str().and_then(|g| g.strip_prefix("hrw-")) else {
                continue;
            };
            let method = benchmark["function_id"].as_str().unwrap_or_default();
            let size = benchmark["value_str"].as_str().and_then(|v| v.parse::<u64>().ok());
            let median = estimates["median"]["point_estimate"].as_f64();
            if let (Some(size), Some(median)) = (size, median) {
                results
                    .entry(operation.to_owned())
                    .or_default()
                    .entry(method.to_owned())
                    .or_default()
                    .insert(size, median);
            }
        }
    }
    Ok(results)
}

fn read_json(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|err| format!("cannot read {}: {err}", path.display()))?;
    serde_json::from_str(&text).map_err(|err| format!("{} is not JSON: {err}", path.display()))
}

fn median(results: &Results, operation: &str, method: &str, size: u64) -> Option<f64> {
    results.get(operation)?.get(method)?.get(&size).copied()
}

/// The fastest peer crate's median for an operation and size.
fn best_peer(results: &Results, operation: &str, size: u64) -> Option<(String, f64)> {
    results
        .get(operation)?
        .iter()
        .filter(|(method, _)| method.starts_with(PEER_PREFIX))
        .filter_map(|(method, by_size)| by_size.get(&size).map(|m| (method.clone(), *m)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

fn ordered_methods(by_method: &BTreeMap<String, BTreeMap<u64, f64>>) -> Vec<&String> {
    let mut methods: Vec<&String> = by_method.keys().collect();
    let rank = |m: &str| METHOD_ORDER.iter().position(|o| *o == m).unwrap_or(METHOD_ORDER.len());
    methods.sort_by(|a, b| rank(a).cmp(&rank(b)).then(a.cmp(b)));
    methods
}

fn format_ns(ns: f64) -> String {
    if ns < 100.0 { format!("{ns:.1}") } else { crate::docs::thousands(ns.round() as u64) }
}

fn format_ratio(ratio: f64) -> String {
    if ratio >= 10.0 { format!("{ratio:.0}×") } else { format!("{ratio:.2}×") }
}

fn table(results: &Results) -> String {
    let mut out = String::new();
    out.push_str("Median ns per lookup (16-byte keys). In each cell: median · speed-up over naive-sha256 · speed-up over the fastest peer crate for the same operation and N (higher is better).\n\n");
    out.push_str("| operation | method |");
    for size in SIZES {
        out.push_str(&format!(" N={size} |"));
    }
    out.push_str("\n|---|---|");
    for _ in SIZES {
        out.push_str("---|");
    }
    out.push('\n');
    for operation in OPERATIONS {
        let Some(by_method) = results.get(operation) else {
            continue;
        };
        for method in ordered_methods(by_method) {
            out.push_str(&format!("| {operation} | {method} |"));
            for size in SIZES {
                let cell = match median(results, operation, method, size) {
                    None => "–".to_owned(),
                    Some(ns) => {
                        let naive =
                            median(results, operation, NAIVE, size).map_or("–".to_owned(), |n| format_ratio(n / ns));
                        let peer =
                            best_peer(results, operation, size).map_or("–".to_owned(), |(_, p)| format_ratio(p / ns));
                        format!("{} · {naive} · {peer}", format_ns(ns))
                    }
                };
                out.push_str(&format!(" {cell} |"));
            }
            out.push('\n');
        }
    }
    out
}

struct Gate {
    name: String,
    /// The measured ratio, if both sides were measured.
    value: Option<f64>,
    required: f64,
    /// Whether higher values pass (a speed-up) or lower ones (a cost ratio).
    at_least: bool,
    /// What the value is in: `×` for a ratio, ` ns` for a median.
    unit: &'static str,
}

impl Gate {
    fn met(&self) -> Option<bool> {
        self.value.map(|v| if self.at_least { v >= self.required } else { v <= self.required })
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(a? / b?)
}

fn gates(results: &Results) -> Vec<Gate> {
    let m = |operation: &str, method: &str, size: u64| median(results, operation, method, size);
    let mut gates = vec![
        Gate {
            name: "fast owner, N=1000: speed-up over the fastest peer crate".into(),
            value: ratio(best_peer(results, "owner", 1_000).map(|p| p.1), m("owner", "fast", 1_000)),
            required: 10.0,
            at_least: true,
            unit: "×",
        },
        Gate {
            name: "fast owner, N=1000: speed-up over naive".into(),
            value: ratio(m("owner", NAIVE, 1_000), m("owner", "fast", 1_000)),
            required: 40.0,
            at_least: true,
            unit: "×",
        },
        Gate {
            name: "fast is_owner, N=1000: speed-up over naive is_owner".into(),
            value: ratio(m("is_owner", NAIVE, 1_000), m("is_owner", "fast", 1_000)),
            required: 50.0,
            at_least: true,
            unit: "×",
        },
        // An absolute bound as well as the ratios: a member asks whether
        // it owns a key on every request it serves.
        Gate {
            name: "fast is_owner, N=1000: median".into(),
            value: m("is_owner", "fast", 1_000),
            required: 30.0,
            at_least: false,
            unit: " ns",
        },
    ];
    for size in SIZES {
        gates.push(Gate {
            name: format!("go-sha256 owner, N={size}: speed-up over naive"),
            value: ratio(m("owner", NAIVE, size), m("owner", "go-sha256", size)),
            required: 1.6,
            at_least: true,
            unit: "×",
        });
    }
    for method in ["fast", "fast-scalar", "go-sha256"] {
        for size in [100, 1_000, 10_000] {
            gates.push(Gate {
                name: format!("{method} replicas(3) / owner, N={size}"),
                value: ratio(m("replicas3", method, size), m("owner", method, size)),
                required: 1.5,
                at_least: false,
                unit: "×",
            });
        }
    }
    gates
}

fn gate_report(gates: &[Gate]) -> String {
    let mut out = String::from("| gate | measured | required | result |\n|---|---|---|---|\n");
    for gate in gates {
        let measured = gate.value.map_or("not measured".to_owned(), |v| format!("{v:.2}{}", gate.unit));
        let required = format!("{} {:.1}{}", if gate.at_least { "≥" } else { "≤" }, gate.required, gate.unit);
        let result = match gate.met() {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "–",
        };
        out.push_str(&format!("| {} | {measured} | {required} | {result} |\n", gate.name));
    }
    out
}

fn to_json(results: &Results, gates: &[Gate]) -> Value {
    let mut rows = Vec::new();
    for (operation, by_method) in results {
        for (method, by_size) in by_method {
            for (size, ns) in by_size {
                rows.push(json!({
                    "operation": operation,
                    "method": method,
                    "members": size,
                    "median_ns": ns,
                    "speedup_vs_naive": median(results, operation, NAIVE, *size).map(|n| n / ns),
                    "speedup_vs_best_peer": best_peer(results, operation, *size).map(|p| p.1 / ns),
                }));
            }
        }
    }
    let gates: Vec<Value> = gates
        .iter()
        .map(|g| {
            json!({
                "gate": g.name,
                "measured": g.value,
                "required": g.required,
                "at_least": g.at_least,
                "met": g.met(),
            })
        })
        .collect();
    json!({ "results": rows, "gates": gates })
}
