//! `cargo xtask docs`: the documentation's figures, written from stored
//! results.
//!
//! Every table or figure in the docs that comes from a run sits between two
//! marker lines, `<!-- generated: NAME -->` and `<!-- end generated: NAME -->`.
//! This task rewrites each such block from the result files committed under
//! `docs/results/` (each written by the command [`SOURCES`] names), and
//! `cargo xtask docs --check` fails when a committed block differs from what
//! it would write: a block edited by hand, or one left behind when its
//! results were recorded again. CI runs the check, not the runs: they take
//! minutes to hours and their timings depend on the machine.
//!
//! Prose around a block quotes no figure of its own; where a sentence needs
//! one, the figure gets a block.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

mod sim_results;
mod store_costs;

use sim_results::SimResults;

/// A stored result file and the command that records it again.
pub struct Source {
    /// The file, relative to the workspace root.
    pub file: &'static str,
    /// The command that writes it.
    pub command: &'static str,
}

/// The scenario table of a whole `cargo xtask sim` run.
const SIM: Source = Source { file: "docs/results/sim.txt", command: "cargo xtask sim > docs/results/sim.txt" };
/// The simulator's speed against an earlier commit's, the same run made by
/// both side by side.
const SIM_SPEED: Source = Source {
    file: "docs/results/sim-speed.txt",
    command: "cargo xtask sim --json --jobs 1 > new.json, and at the same time the same with the base commit's \
              xtask > base.json; then cargo xtask sim --speedup base.json new.json > docs/results/sim-speed.txt",
};
/// The same comparison over the scenarios the default run held when the
/// simulator's speed was first worked on (their names are in
/// `docs/results/sim-speed-early-set.txt`), so that the run of then and the
/// same run now are set side by side although the default run has grown.
const SIM_SPEED_EARLY: Source = Source {
    file: "docs/results/sim-speed-early.txt",
    command: "the reports of docs/results/sim-speed.txt; then cargo xtask sim --speedup base.json new.json \
              $(sed 's/^/--scenario /' docs/results/sim-speed-early-set.txt) > docs/results/sim-speed-early.txt",
};
/// The planted bugs and the scenarios that catch each.
const PLANTED: Source = Source {
    file: "docs/results/planted.txt",
    command: "cargo xtask sim --planted all --seeds 2 > docs/results/planted.txt",
};
/// Every scenario on the default read schedule and on the Go library's poll.
const COMPARE_POLL: Source = Source {
    file: "docs/results/compare-poll.txt",
    command: "cargo xtask sim --compare poll > docs/results/compare-poll.txt",
};
/// The HRW benchmark's medians.
const HRW_BENCH: Source = Source {
    file: "docs/results/hrw-bench.json",
    command: "cargo xtask bench-hrw --json > docs/results/hrw-bench.json",
};
/// `hoplock check-s3` against the SeaweedFS server the test command starts.
const CHECK_S3: Source = Source {
    file: "docs/results/check-s3-seaweedfs.txt",
    command: "cargo xtask s3-server, then hoplock check-s3 --endpoint URL --bucket hoplock-test --path-style \
              > docs/results/check-s3-seaweedfs.txt",
};
/// The mutation runs' tallies, per part of the code.
const MUTANTS: Source = Source {
    file: "docs/results/mutants.json",
    command: "cargo xtask mutants --part PART, then the caught and judged counts of its outcomes.json",
};

/// The chaos worlds on real processes, beside the simulator's figures.
const CHAOS: Source = Source { file: "docs/results/chaos.txt", command: "cargo xtask chaos > docs/results/chaos.txt" };
/// The planted bugs the chaos worlds catch.
const CHAOS_PLANTED: Source = Source {
    file: "docs/results/chaos-planted.txt",
    command: "cargo xtask chaos --planted all > docs/results/chaos-planted.txt",
};

/// Every stored result, for `--help` and the error messages.
pub const SOURCES: [&Source; 10] = [
    &SIM,
    &SIM_SPEED,
    &SIM_SPEED_EARLY,
    &PLANTED,
    &COMPARE_POLL,
    &HRW_BENCH,
    &CHECK_S3,
    &MUTANTS,
    &CHAOS,
    &CHAOS_PLANTED,
];

/// One kind of generated block: its name in the markers and how it is
/// written from the stored results.
struct Block {
    name: &'static str,
    render: fn(&Path) -> Result<String, String>,
}

/// Every block the docs may hold, registered once each.
const BLOCKS: &[Block] = &[
    Block { name: "sim-table", render: |root| Ok(fenced(&read(root, &SIM)?)) },
    Block { name: "sim-totals", render: |root| SimResults::parse(&read(root, &SIM)?)?.totals() },
    Block { name: "sim-speed", render: |root| Ok(fenced(&read(root, &SIM_SPEED)?)) },
    Block { name: "sim-speed-early", render: |root| Ok(fenced(&read(root, &SIM_SPEED_EARLY)?)) },
    Block { name: "keyed-costs", render: |root| SimResults::parse(&read(root, &SIM)?)?.keyed_costs() },
    Block { name: "planted", render: |root| Ok(fenced(&read(root, &PLANTED)?)) },
    Block { name: "compare-poll", render: |root| Ok(fenced(&read(root, &COMPARE_POLL)?)) },
    Block { name: "hrw-bench", render: |root| crate::bench_hrw::render_stored(&json(root, &HRW_BENCH)?) },
    Block { name: "hrw-summary", render: |root| crate::bench_hrw::summary_stored(&json(root, &HRW_BENCH)?) },
    Block { name: "check-s3-seaweedfs", render: |root| Ok(fenced(&normalise_ports(&read(root, &CHECK_S3)?))) },
    Block { name: "mutants", render: |root| mutants(&json(root, &MUTANTS)?) },
    Block { name: "chaos", render: |root| Ok(fenced(&read(root, &CHAOS)?)) },
    Block { name: "chaos-planted", render: |root| Ok(fenced(&read(root, &CHAOS_PLANTED)?)) },
    Block { name: "store-costs", render: |_| Ok(store_costs::render()) },
];

const USAGE: &str = "usage: cargo xtask docs [--check]

Rewrites every generated block of the docs (between `<!-- generated: NAME -->`
and `<!-- end generated: NAME -->`) from the results stored in docs/results/.
--check writes nothing and fails if any block differs from what it would write.";

pub fn run(args: &[String]) -> Result<(), String> {
    let check = match args {
        [] => false,
        [flag] if flag == "--check" => true,
        [flag] if flag == "-h" || flag == "--help" => {
            println!("{USAGE}\n\nstored results:");
            for source in SOURCES {
                println!("  {:<38} {}", source.file, source.command);
            }
            return Ok(());
        }
        _ => return Err(format!("unexpected arguments {args:?}\n\n{USAGE}")),
    };
    let root = crate::workspace_root()?;
    let mut stale = Vec::new();
    let mut blocks = 0;
    for path in markdown_files(root)? {
        let text = std::fs::read_to_string(&path).map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        let relative = path.strip_prefix(root).unwrap_or(&path).display().to_string();
        let (written, names) = rewrite(&text, root).map_err(|err| format!("{relative}: {err}"))?;
        blocks += names.len();
        if written == text {
            continue;
        }
        let changed: Vec<&str> =
            names.iter().filter(|name| block_of(&text, name) != block_of(&written, name)).copied().collect();
        if check {
            stale.push(format!("{relative}: {}", changed.join(", ")));
        } else {
            std::fs::write(&path, &written).map_err(|err| format!("cannot write {relative}: {err}"))?;
            eprintln!("rewrote {relative}: {}", changed.join(", "));
        }
    }
    if !stale.is_empty() {
        return Err(format!(
            "generated blocks differ from what their stored results give (edited by hand, or left stale):\n  {}\n\
             run `cargo xtask docs` to write them again; to change a figure, record its results again \
             (`cargo xtask docs --help` lists the commands)",
            stale.join("\n  ")
        ));
    }
    eprintln!("{blocks} generated blocks {}", if check { "match their stored results" } else { "written" });
    Ok(())
}

/// Every Markdown file of the project: the root, `docs/`, `sim/`,
/// `scenarios/` and the crates, not build output or vendored code.
fn markdown_files(root: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|err| format!("cannot list {}: {err}", dir.display()))?;
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if path.is_dir() {
                if !name.starts_with('.') && !["target", "vendor", "node_modules"].contains(&name.as_ref()) {
                    pending.push(path);
                }
            } else if name.ends_with(".md") {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

fn start_marker(name: &str) -> String {
    format!("<!-- generated: {name} -->")
}

fn end_marker(name: &str) -> String {
    format!("<!-- end generated: {name} -->")
}

/// The text with every block written again, and the names of the blocks.
fn rewrite(text: &str, root: &Path) -> Result<(String, Vec<&'static str>), String> {
    let mut out = String::with_capacity(text.len());
    let mut names = Vec::new();
    let mut lines = text.split_inclusive('\n');
    while let Some(line) = lines.next() {
        out.push_str(line);
        let Some(name) = line.trim().strip_prefix("<!-- generated: ").and_then(|rest| rest.strip_suffix(" -->")) else {
            continue;
        };
        let block = BLOCKS
            .iter()
            .find(|block| block.name == name)
            .ok_or_else(|| format!("unknown generated block {name:?}"))?;
        // Skip the old contents up to the end marker, which stays.
        let end = end_marker(name);
        let closing = lines.by_ref().find(|line| line.trim() == end).ok_or_else(|| format!("no `{end}` line"))?;
        let rendered = (block.render)(root).map_err(|err| format!("block {name}: {err}"))?;
        out.push_str(&rendered);
        if !rendered.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(closing);
        names.push(block.name);
    }
    Ok((out, names))
}

/// The contents of the block `name` in `text`, for naming the changed ones.
fn block_of<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let start = text.find(&start_marker(name))?;
    let end = text[start..].find(&end_marker(name))?;
    Some(&text[start..start + end])
}

fn read(root: &Path, source: &Source) -> Result<String, String> {
    std::fs::read_to_string(root.join(source.file))
        .map_err(|err| format!("cannot read {} ({err}); record it with `{}`", source.file, source.command))
}

fn json(root: &Path, source: &Source) -> Result<Value, String> {
    serde_json::from_str(&read(root, source)?).map_err(|err| format!("{} is not JSON: {err}", source.file))
}

/// A stored command output as a Markdown code block.
fn fenced(output: &str) -> String {
    format!("```text\n{}\n```\n", output.trim_end())
}

/// `127.0.0.1:PORT` for every loopback port: the server's port changes
/// from run to run and says nothing.
fn normalise_ports(text: &str) -> String {
    let marker = "127.0.0.1:";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(marker) {
        let (head, tail) = rest.split_at(at + marker.len());
        out.push_str(head);
        let digits = tail.chars().take_while(char::is_ascii_digit).count();
        if digits > 0 {
            out.push_str("PORT");
        }
        rest = &tail[digits..];
    }
    out.push_str(rest);
    out
}

/// The mutation table: per part, the mutants judged and caught.
fn mutants(record: &Value) -> Result<String, String> {
    let parts = record["parts"].as_array().ok_or("mutants.json has no `parts` list")?;
    let mut out = String::from("| part | what is mutated | judged | caught | score |\n|---|---|---|---|---|\n");
    let (mut all_judged, mut all_caught) = (0, 0);
    for part in parts {
        let field = |key: &str| part[key].as_u64().ok_or_else(|| format!("a part has no number `{key}`"));
        let (judged, caught) = (field("judged")?, field("caught")?);
        if caught > judged || judged == 0 {
            return Err(format!("part {}: {caught} caught of {judged} judged", part["part"]));
        }
        (all_judged, all_caught) = (all_judged + judged, all_caught + caught);
        let _ = writeln!(
            out,
            "| `{}` | {} | {judged} | {caught} | {:.1} % |",
            part["part"].as_str().ok_or("a part has no name")?,
            part["selects"].as_str().ok_or("a part does not say what it selects")?,
            100.0 * caught as f64 / judged as f64
        );
    }
    let _ = writeln!(
        out,
        "| **all** | | {all_judged} | {all_caught} | {:.1} % |",
        100.0 * all_caught as f64 / all_judged.max(1) as f64
    );
    Ok(out)
}

/// `1234567` as `1,234,567`.
pub fn thousands(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_written_between_its_markers_and_nothing_else_moves() {
        let root = crate::workspace_root().unwrap();
        let text = "intro\n<!-- generated: sim-table -->\nhand-edited\n<!-- end generated: sim-table -->\noutro\n";
        let (written, names) = rewrite(text, root).unwrap();
        assert_eq!(names, ["sim-table"]);
        assert!(written.starts_with("intro\n<!-- generated: sim-table -->\n```text\nscenario"), "{written}");
        assert!(written.ends_with("```\n<!-- end generated: sim-table -->\noutro\n"), "{written}");
        assert!(!written.contains("hand-edited"));
        // Written again, it stays the same: a fresh block is not stale.
        assert_eq!(rewrite(&written, root).unwrap().0, written);
    }

    #[test]
    fn unknown_and_unclosed_blocks_are_errors() {
        let root = crate::workspace_root().unwrap();
        let unknown = rewrite("<!-- generated: nothing -->\n<!-- end generated: nothing -->\n", root);
        assert!(unknown.unwrap_err().contains("unknown generated block \"nothing\""));
        let unclosed = rewrite("<!-- generated: sim-table -->\ntext\n", root);
        assert!(unclosed.unwrap_err().contains("no `<!-- end generated: sim-table -->` line"));
    }

    #[test]
    fn ports_are_normalised_and_numbers_grouped() {
        assert_eq!(
            normalise_ports("http://127.0.0.1:8333/ and 127.0.0.1:PORT"),
            "http://127.0.0.1:PORT/ and 127.0.0.1:PORT"
        );
        assert_eq!(thousands(5033), "5,033");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn every_guide_is_compiled_as_a_doctest() {
        // A page whose Rust snippets are not compiled can rot unseen: each
        // page of docs/ must be included in the library's doctest module.
        let root = crate::workspace_root().unwrap();
        let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
        for entry in std::fs::read_dir(root.join("docs")).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".md") {
                let include = format!("include_str!(\"../docs/{name}\")");
                assert!(lib.contains(&include), "src/lib.rs does not compile docs/{name} as a doctest");
            }
        }
        assert!(lib.contains("include_str!(\"../README.md\")"));
    }

    #[test]
    fn the_mutation_table_refuses_impossible_tallies() {
        let record = serde_json::json!({"parts": [{"part": "x", "selects": "y", "judged": 3, "caught": 4}]});
        assert!(mutants(&record).is_err());
        let record = serde_json::json!({"parts": [{"part": "x", "selects": "y", "judged": 4, "caught": 3}]});
        assert!(mutants(&record).unwrap().contains("| `x` | y | 4 | 3 | 75.0 % |"));
    }
}
