//! `cargo xtask mutants`: the mutation score of the scenarios against the
//! decision and term-holding code of the elector, the keyed writer, and the
//! elector's read schedule, one part at a time (`--part`).
//!
//! `cargo mutants` makes one small change at a time to that code (a
//! comparison flipped, a branch skipped, a function that returns at once)
//! and runs the scenario files against each. A change that no scenario
//! notices is a hole in the testbed: either the code it touched does not
//! matter, or no scenario reaches the situation where it would.
//! `docs/mutation-testing.md` lists the survivors and why each survived, and
//! `docs/results/mutants.json` holds the tallies its score is written from.
//!
//! The selection is by function name rather than only by file, so it keeps
//! following the code if `src/elector.rs` is split further: every function
//! in `src/elector/core.rs`, and the term-holding functions (acquire, take,
//! give back, hold, renew, release, and the public calls that drive them)
//! wherever under `src/elector` they live.

use std::path::Path;
use std::process::Command;

const USAGE: &str = "usage: cargo xtask mutants [options] [-- cargo-mutants options]

  --part P    which code: elector (the default), keyed or reads
  --seeds N   seeds per scenario file for each mutant (default 4)
  --jobs N    mutants built and tested at once (default 1)
  --list      list the mutants that would be tried, and stop

The results land in target/mutants.out (caught.txt, missed.txt,
timeout.txt, unviable.txt). cargo-mutants is installed into .tools/ on first
use.";

/// The cargo-mutants release this task was written against.
const CARGO_MUTANTS_VERSION: &str = "27.1.0";

/// Which mutants count: all of the pure decision code, and the functions of
/// the async shell that acquire, hold, renew and give back a term. Builder
/// validation, subscriber plumbing and accessors are left to the unit tests.
const SELECTION: &str = concat!(
    r"src/elector/core\.rs",
    r"|src/term_timing\.rs.*\b(drift_shrunk|hold_for)\b",
    r"|Inner<B>::(acquire|take|give_back|renew|release|begin_term|end_term|observe_for_campaign|sleep_unless_stopped|timed|jittered)\b",
    r"|TermGuard<B>|Drop for TermGuard|may_still_land|Held::confirm|WorkGuard|WorkStopped",
    r"|Elector<B>::(lead|lead_until|observe|run)\b",
);

/// The keyed writer's part: every function of its decision core, and the
/// functions of the async shell and the term guard that hold, renew and end
/// a member's term or stop its keys. The builder, the handle's accessors
/// and the key context's plumbing are left to the unit tests.
const KEYED_SELECTION: &str = concat!(
    r"src/keyed/core(\.rs|/)",
    r"|KeyedWriter<O>::(serve|write|send|watch_write|take_in|stop_moved|stop_all|stop_keys|stop_if_term_lapsed|start_owned|leave_now|next_wake|retry_gap|publish_term|term)\b",
    r"|guard_terms|within_term|Tasks::|Drop for Task|Drop for AbandonOnDrop",
);

/// The elector's read schedule: when a follower or contender reads next.
const READS_SELECTION: &str = r"src/elector/reads\.rs";

/// One part of the code the mutants are drawn from: the files given to
/// `cargo mutants` and the regex its mutants' names must match.
struct Part {
    name: &'static str,
    files: &'static [&'static str],
    selection: &'static str,
    /// Which scenario worlds judge the part: the keyed writer runs only in
    /// keyed worlds, while the elector's helpers (drift arithmetic, term
    /// timing) also run in keyed ones, so its parts are judged by all.
    worlds: &'static str,
}

const PARTS: [Part; 3] = [
    Part {
        name: "elector",
        files: &["src/elector.rs", "src/elector/**/*.rs", "src/term_timing.rs"],
        selection: SELECTION,
        worlds: "all",
    },
    Part {
        name: "keyed",
        files: &[
            "src/keyed/core.rs",
            "src/keyed/core/*.rs",
            "src/keyed/writer.rs",
            "src/keyed/writer/*.rs",
            "src/keyed/term_guard.rs",
        ],
        selection: KEYED_SELECTION,
        worlds: "keyed",
    },
    Part { name: "reads", files: &["src/elector/reads.rs"], selection: READS_SELECTION, worlds: "all" },
];

/// How long the judge may take before a mutant counts as hanging: the
/// scenario test on 4 seeds takes well under a minute on two cores.
const TEST_TIMEOUT_SECS: u64 = 300;

/// How long one mutant's build may take; an incremental build of the
/// library and the simulator takes seconds to a minute.
const BUILD_TIMEOUT_SECS: u64 = 900;

/// The test the mutants are judged by: every scenario file, on `--seeds`
/// seeds each, must turn out as it expects.
const SCENARIO_TEST: &str = "scenarios::every_scenario_file_turns_out_as_it_expects";

pub fn run(args: &[String]) -> Result<(), String> {
    let mut seeds = 4u64;
    let mut jobs = 1u64;
    let mut list = false;
    let mut part = &PARTS[0];
    let mut extra: Vec<String> = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> Result<u64, String> {
            let text = args.next().ok_or_else(|| format!("{name} needs a value\n\n{USAGE}"))?;
            match text.parse::<u64>() {
                Ok(value) if value > 0 => Ok(value),
                _ => Err(format!("{name} takes a whole number above zero, not {text:?}")),
            }
        };
        match arg.as_str() {
            "--seeds" => seeds = number("--seeds")?,
            "--jobs" => jobs = number("--jobs")?,
            "--list" => list = true,
            "--part" => {
                let name = args.next().ok_or_else(|| format!("--part needs a value\n\n{USAGE}"))?;
                part = PARTS.iter().find(|part| part.name == name).ok_or_else(|| {
                    let known: Vec<&str> = PARTS.iter().map(|part| part.name).collect();
                    format!("unknown part {name:?}; known: {}", known.join(", "))
                })?;
            }
            "--" => extra.extend(args.by_ref().cloned()),
            "--help" | "-h" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => return Err(format!("unknown option {other:?}\n\n{USAGE}")),
        }
    }
    let root = crate::workspace_root()?;
    let tool = install(root)?;

    let mut command = Command::new(&tool);
    command.current_dir(root).arg("mutants").args(["--package", "hoplock", "--test-package", "hoplock-sim"]);
    // The planted bugs' switches are constant `false` without the `planted`
    // feature, so a mutant that replaces one with `false` is equivalent by
    // construction. (One that replaces it with `true` switches a bug on and
    // must be caught.)
    for file in part.files {
        command.args(["--file", file]);
    }
    command.args(["--re", part.selection]);
    command.args(["--exclude-re", r"planted::active\(Bug::\w+\) with false"]);
    if list {
        let status = command.arg("--list").status().map_err(|err| format!("could not start cargo-mutants: {err}"))?;
        return if status.success() { Ok(()) } else { Err(format!("cargo-mutants --list failed ({status})")) };
    }
    // The test profile builds the simulator optimised and incrementally, so
    // each mutant costs seconds to build; the scenario test is the only test
    // run, on `seeds` seeds per file, and it stops at the first file that
    // fails.
    //
    // No baseline run: cargo-mutants runs the baseline's tests in the
    // mutated package (the library), where the scenario test does not
    // exist, so it would time nothing and set the test timeout to its
    // 20 s floor. A judge slowed down by a busy machine would then count
    // as a timeout, which cargo-mutants reports apart but which is easily
    // read as caught. The timeouts are explicit instead, far above a
    // judge's usual time, so only a mutant that hangs reaches them.
    command.args(["--baseline", "skip", "--timeout", &TEST_TIMEOUT_SECS.to_string()]);
    command.args(["--build-timeout", &BUILD_TIMEOUT_SECS.to_string()]);
    command.args(["--profile", "test", "--jobs", &jobs.to_string(), "--output", "target"]);
    command.args(&extra);
    command.args(["--", "--test", "it", "--", SCENARIO_TEST, "--exact"]);
    command.env("HOPLOCK_SCENARIO_SEEDS", seeds.to_string());
    command.env("HOPLOCK_SCENARIO_FAIL_FAST", "1");
    command.env("HOPLOCK_SCENARIO_WORLDS", part.worlds);
    let judges = if part.worlds == "keyed" { "every keyed scenario" } else { "every scenario" };
    eprintln!("==> cargo mutants over the {} part, judged by {judges} on {seeds} seeds", part.name);
    let status = command.status().map_err(|err| format!("could not start cargo-mutants: {err}"))?;
    // cargo-mutants exits 2 when some mutants were missed and 3 when some
    // timed out; both are results, reported in the files it writes.
    match status.code() {
        Some(0) => Ok(()),
        Some(2 | 3) => {
            eprintln!("some mutants survived: see target/mutants.out/missed.txt and timeout.txt");
            Ok(())
        }
        _ => Err(format!("cargo-mutants failed ({status}); see target/mutants.out/debug.log")),
    }
}

/// The path of a `cargo-mutants` binary: the pinned release in `.tools/`,
/// installed there from crates.io the first time.
fn install(root: &Path) -> Result<std::path::PathBuf, String> {
    let tools = root.join(".tools");
    let binary = tools.join("bin").join(format!("cargo-mutants{}", std::env::consts::EXE_SUFFIX));
    if binary.exists() {
        return Ok(binary);
    }
    eprintln!("==> installing cargo-mutants {CARGO_MUTANTS_VERSION} into .tools/");
    let status = Command::new(env!("CARGO"))
        .args(["install", "--locked", "--version", CARGO_MUTANTS_VERSION, "--root"])
        .arg(&tools)
        .arg("cargo-mutants")
        .status()
        .map_err(|err| format!("could not start cargo install: {err}"))?;
    if status.success() { Ok(binary) } else { Err(format!("cargo install cargo-mutants failed ({status})")) }
}
