//! `cargo xtask sim`: runs the scenario files under `scenarios/` in the
//! deterministic simulator and says whether each outcome is what its file
//! expects.
//!
//! With no options every scenario runs over its default seeds, spread over
//! all cores. One table comes out, and the exit status is non-zero if any
//! outcome differs from what its file expects; for each such outcome the
//! exact command that replays it is printed. `--seed` runs one seed and
//! prints every violation with its simulated time; `--trace` and
//! `--timeline` write that one run's history and picture. `--swarm` draws
//! random scenarios instead, and `--planted` runs with one of the library's
//! deliberate bugs switched on.

use std::collections::BTreeSet;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hoplock_sim::runner::{self, Report};
use hoplock_sim::scenario::{Finding, Scenario, Verdict};
use hoplock_sim::world::ReadsSpec;
use serde::Serialize;

mod compare;
mod swarm;
pub(crate) mod table;
pub(crate) mod timeline;

const USAGE: &str = "usage: cargo xtask sim [options]

  --scenario NAME   run only this scenario (file name without .toml, or a path
                    to a .toml file); may be given more than once
  --seeds N         run seeds 0..N instead of each file's default
  --seed S          run seed S only, and print every violation
  --json            print a machine-readable report instead of the table
  --trace FILE      write the run's history as JSON lines (one run only)
  --timeline FILE   draw the run as an SVG picture (one run only)
  --jobs N          worker threads (default: all cores)
  --reads SCHEDULE  make every node read on this schedule: `poll` (every
                    TTL/15, the Go hoplock's) or `follow-renewals` (the
                    default); the scenarios' budgets are set for the default
  --compare WITH    run the scenarios again with every node on `poll` reads
                    or on the Go hoplock's rules (`seed`), and print both
                    side by side: requests, reads, failover and yearly cost
  --planted NAME    switch on one of the library's deliberate bugs; `all`
                    checks that the scenarios catch every one of them
  --swarm N         run N random scenarios; shrink and save the first failure
                    (--seed S picks the strategy's seed)
  --mode MODE       with --swarm: force this fake S3 provider mode
  --out DIR         with --swarm: where to write the shrunk scenario
                    (default target/swarm)";

/// Parsed command line.
#[derive(Debug, Default)]
struct Options {
    scenarios: Vec<String>,
    seeds: Option<u64>,
    seed: Option<u64>,
    json: bool,
    trace: Option<PathBuf>,
    timeline: Option<PathBuf>,
    jobs: Option<usize>,
    reads: Option<ReadsSpec>,
    compare: Option<compare::Against>,
    planted: Option<String>,
    swarm: Option<u64>,
    mode: Option<String>,
    out: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options::default();
    let mut flags = crate::flags::Flags::new(args, USAGE);
    while let Some(arg) = flags.next_flag() {
        match arg.as_str() {
            "--scenario" => options.scenarios.push(flags.value("--scenario")?),
            "--seeds" => {
                let seeds = flags.number("--seeds")?;
                if seeds == 0 {
                    return Err("--seeds must be at least 1".into());
                }
                options.seeds = Some(seeds);
            }
            "--seed" => options.seed = Some(flags.number("--seed")?),
            "--json" => options.json = true,
            "--trace" => options.trace = Some(flags.value("--trace")?.into()),
            "--timeline" => options.timeline = Some(flags.value("--timeline")?.into()),
            "--jobs" => options.jobs = Some(flags.number("--jobs")?.max(1) as usize),
            "--reads" => {
                options.reads = Some(match flags.value("--reads")?.as_str() {
                    "poll" => ReadsSpec::Poll,
                    "follow-renewals" => ReadsSpec::FollowRenewals,
                    other => return Err(format!("--reads takes `poll` or `follow-renewals`, not {other:?}")),
                })
            }
            "--compare" => options.compare = Some(compare::Against::parse(&flags.value("--compare")?)?),
            "--planted" => options.planted = Some(flags.value("--planted")?),
            "--swarm" => options.swarm = Some(flags.number("--swarm")?),
            "--mode" => options.mode = Some(flags.value("--mode")?),
            "--out" => options.out = Some(flags.value("--out")?.into()),
            other => return Err(format!("unknown option {other:?}\n\n{USAGE}")),
        }
    }
    if options.seeds.is_some() && options.seed.is_some() {
        return Err("give --seeds or --seed, not both".into());
    }
    if options.compare.is_some()
        && (options.reads.is_some()
            || options.json
            || options.trace.is_some()
            || options.timeline.is_some()
            || options.swarm.is_some())
    {
        return Err(
            "--compare prints its own table; it goes without --reads, --json, --trace, --timeline and --swarm".into()
        );
    }
    if options.mode.is_some() && options.swarm.is_none() {
        return Err("--mode goes with --swarm; a scenario file sets its own mode".into());
    }
    Ok(options)
}

/// Runs the task. `Ok` means every outcome was as expected.
pub fn run(args: &[String]) -> Result<(), String> {
    if crate::flags::Flags::help(args, USAGE) {
        return Ok(());
    }
    let options = parse(args)?;
    let root = crate::workspace_root()?;
    if let Some(planted) = &options.planted {
        if !cfg!(feature = "planted") {
            return planted::rerun_with_feature(args);
        }
        if planted == "all" {
            return planted::check_all(root, &options);
        }
        planted::plant(planted)?;
    }
    if let Some(count) = options.swarm {
        return swarm::run(root, count, &options);
    }
    let mut scenarios = load(root, &options.scenarios)?;
    if let Some(reads) = options.reads {
        for named in &mut scenarios {
            for node in &mut named.scenario.nodes {
                node.elector.reads = reads;
            }
        }
    }
    if let Some(against) = options.compare {
        return compare::run(&scenarios, &options, against);
    }
    let single = options.seed.is_some();
    if (options.trace.is_some() || options.timeline.is_some()) && !(single && scenarios.len() == 1) {
        return Err("--trace and --timeline draw one run: give one --scenario and a --seed".into());
    }
    // A default run replays one seed of every scenario: a world that gives
    // another trace for the same seed cannot be replayed from a failure.
    let replay = !single;
    let results = run_all(&scenarios, &options, options.trace.is_some() || options.timeline.is_some(), replay);
    report(&scenarios, &results, &options)
}

/// A loaded scenario and the name the table and replay commands use.
pub struct Named {
    pub name: String,
    pub scenario: Scenario,
}

/// Loads the named scenarios (all of `scenarios/` when none is named), in
/// name order.
pub fn load(root: &Path, names: &[String]) -> Result<Vec<Named>, String> {
    let directory = root.join("scenarios");
    let listed = || {
        hoplock_sim::scenario::files_in(&directory).map_err(|err| format!("cannot list {}: {err}", directory.display()))
    };
    let paths: Vec<PathBuf> = if names.is_empty() {
        listed()?
    } else {
        names
            .iter()
            .map(
                |name| {
                    if name.ends_with(".toml") { PathBuf::from(name) } else { directory.join(format!("{name}.toml")) }
                },
            )
            .collect()
    };
    let stem = |path: &Path| path.file_stem().map(|stem| stem.to_string_lossy().into_owned()).unwrap_or_default();
    let mut loaded = Vec::new();
    for path in paths {
        if !path.exists() {
            let known: Vec<String> = listed().unwrap_or_default().iter().map(|path| stem(path)).collect();
            return Err(format!("no scenario {}; known: {}", path.display(), known.join(", ")));
        }
        let scenario = Scenario::load(&path).map_err(|err| err.to_string())?;
        let name = if path.starts_with(&directory) { stem(&path) } else { path.display().to_string() };
        loaded.push(Named { name, scenario });
    }
    if loaded.is_empty() {
        return Err(format!("no scenario files in {}", directory.display()));
    }
    Ok(loaded)
}

/// One scenario's runs.
pub struct Outcome {
    pub reports: Vec<Report>,
    pub verdict: Verdict,
    /// Runs that could not start, with why.
    pub errors: Vec<(u64, String)>,
    /// How many seeds were run a second time to compare their traces.
    pub replayed: usize,
    /// Seeds whose replay gave another trace.
    pub diverged: Vec<Divergence>,
}

/// A seed run twice that gave two different histories.
pub struct Divergence {
    pub seed: u64,
    pub first: u64,
    pub again: u64,
}

impl Outcome {
    pub fn as_expected(&self) -> bool {
        self.errors.is_empty() && self.diverged.is_empty() && self.verdict.as_expected()
    }
}

/// The seeds to run `scenario` with.
fn seeds(scenario: &Scenario, options: &Options) -> Vec<u64> {
    match (options.seed, options.seeds) {
        (Some(seed), _) => vec![seed],
        (None, Some(count)) => (0..count).collect(),
        (None, None) => (0..scenario.seeds).collect(),
    }
}

/// One run to make: a scenario's index, a seed, and whether it replays a
/// seed that is run anyway.
#[derive(Clone, Copy)]
struct Job {
    scenario: usize,
    seed: u64,
    replay: bool,
}

/// Runs every (scenario, seed) pair on `jobs` threads with a progress bar.
/// Histories are dropped after checking unless `keep_entries`. With
/// `replay`, each scenario's first seed runs twice, on whichever threads
/// pick it up, and the two trace hashes must match: tokio draws some of its
/// own choices (which shard of a watch a waiter goes to, for one) from
/// numbers that differ per thread and per process, and a world that leans
/// on one of them gives another trace for the same seed.
fn run_all(scenarios: &[Named], options: &Options, keep_entries: bool, replay: bool) -> Vec<Outcome> {
    let mut jobs: Vec<Job> = Vec::new();
    for (scenario, named) in scenarios.iter().enumerate() {
        for (position, seed) in seeds(&named.scenario, options).into_iter().enumerate() {
            jobs.push(Job { scenario, seed, replay: false });
            // Right after the seed it replays, so that a long world's
            // replay runs beside the rest rather than last and alone.
            if replay && position == 0 {
                jobs.push(Job { scenario, seed, replay: true });
            }
        }
    }
    let worlds: Vec<_> = scenarios.iter().map(|named| named.scenario.world()).collect();
    let results: Mutex<Vec<Option<Result<Report, String>>>> = Mutex::new(vec![None; jobs.len()]);
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let threads = options.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let progress = Progress { total: jobs.len(), done: &done, quiet: options.json };
    std::thread::scope(|scope| {
        for _ in 0..threads.min(jobs.len()).max(1) {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, Ordering::SeqCst);
                    let Some(&Job { scenario, seed, replay }) = jobs.get(index) else { return };
                    // A panic in one run is reported as that run's error;
                    // it must not take the other runs or the progress bar
                    // down with it.
                    let run = std::panic::catch_unwind(|| runner::run(&worlds[scenario], seed));
                    let mut result = match run {
                        Ok(result) => result.map_err(|err| err.to_string()),
                        Err(panic) => Err(format!("the run panicked: {}", panic_message(&panic))),
                    };
                    if let Ok(report) = &mut result
                        && (replay || !keep_entries)
                    {
                        report.entries = Vec::new();
                    }
                    results.lock().unwrap_or_else(|poisoned| poisoned.into_inner())[index] = Some(result);
                    done.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        scope.spawn(|| progress.show_until_done());
    });
    let results = results.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut outcomes: Vec<Outcome> = scenarios
        .iter()
        .map(|_| Outcome {
            reports: Vec::new(),
            verdict: Verdict::default(),
            errors: Vec::new(),
            replayed: 0,
            diverged: Vec::new(),
        })
        .collect();
    let mut replays = Vec::new();
    for (Job { scenario, seed, replay }, result) in jobs.into_iter().zip(results) {
        let outcome = &mut outcomes[scenario];
        let result = result.unwrap_or_else(|| Err("the run did not finish".into()));
        match (result, replay) {
            (Ok(report), false) => outcome.reports.push(report),
            (Ok(report), true) => replays.push((scenario, seed, report.trace_hash)),
            (Err(err), false) => outcome.errors.push((seed, err)),
            (Err(err), true) => outcome.errors.push((seed, format!("its replay: {err}"))),
        }
    }
    for (scenario, seed, again) in replays {
        let outcome = &mut outcomes[scenario];
        // A first run that failed is already an error of its own.
        let Some(first) = outcome.reports.iter().find(|report| report.seed == seed) else { continue };
        outcome.replayed += 1;
        if first.trace_hash != again {
            outcome.diverged.push(Divergence { seed, first: first.trace_hash, again });
        }
    }
    for (named, outcome) in scenarios.iter().zip(&mut outcomes) {
        outcome.verdict = named.scenario.verdict(&outcome.reports);
    }
    outcomes
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|text| text.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

/// A progress bar on stderr: redrawn in place on a terminal, a line per
/// tenth otherwise (CI logs).
struct Progress<'a> {
    total: usize,
    done: &'a AtomicUsize,
    quiet: bool,
}

impl Progress<'_> {
    fn show_until_done(&self) {
        let terminal = std::io::stderr().is_terminal();
        let mut printed_tenth = 0;
        loop {
            let done = self.done.load(Ordering::SeqCst);
            if !self.quiet {
                let width = 40;
                let filled = (done * width).checked_div(self.total).unwrap_or(width);
                if terminal {
                    eprint!("\r[{}{}] {done}/{} runs", "#".repeat(filled), ".".repeat(width - filled), self.total);
                    let _ = std::io::stderr().flush();
                } else {
                    let tenth = (done * 10).checked_div(self.total).unwrap_or(10);
                    if tenth > printed_tenth {
                        printed_tenth = tenth;
                        eprintln!("  {done}/{} runs", self.total);
                    }
                }
            }
            if done >= self.total {
                if terminal && !self.quiet {
                    eprintln!();
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Prints the table (or JSON), the details of single-seed runs and the
/// replay commands; writes the trace and timeline.
fn report(scenarios: &[Named], outcomes: &[Outcome], options: &Options) -> Result<(), String> {
    if options.json {
        let json = json_report(scenarios, outcomes);
        println!("{}", serde_json::to_string_pretty(&json).map_err(|err| err.to_string())?);
    } else {
        print!("{}", table::render(scenarios, outcomes));
    }
    if options.seed.is_some() && !options.json {
        for (named, outcome) in scenarios.iter().zip(outcomes) {
            for report in &outcome.reports {
                details(&named.name, report);
            }
        }
    }
    if let (Some(path), Some(report)) = (&options.trace, outcomes.first().and_then(|o| o.reports.first())) {
        std::fs::write(path, hoplock_sim::history::to_json_lines(&report.entries))
            .map_err(|err| format!("cannot write {}: {err}", path.display()))?;
        eprintln!("trace written to {} ({} entries)", path.display(), report.entries.len());
    }
    if let (Some(path), Some(report)) = (&options.timeline, outcomes.first().and_then(|o| o.reports.first())) {
        let named = &scenarios[0];
        timeline::draw(&named.scenario.world(), report, &named.name, path)?;
        eprintln!("timeline drawn to {}", path.display());
    }
    let mut failed = 0;
    for (named, outcome) in scenarios.iter().zip(outcomes) {
        if outcome.as_expected() {
            continue;
        }
        failed += 1;
        explain(named, outcome, options);
    }
    if failed == 0 { Ok(()) } else { Err(format!("{failed} scenario(s) did not turn out as expected")) }
}

/// Says what differs from the expectation and how to replay it.
fn explain(named: &Named, outcome: &Outcome, options: &Options) {
    let name = &named.name;
    eprintln!("\n{name}: not as expected");
    let mut planted = options.planted.as_ref().map(|bug| format!(" --planted {bug}")).unwrap_or_default();
    if let Some(reads) = options.reads {
        planted.push_str(match reads {
            ReadsSpec::Poll => " --reads poll",
            ReadsSpec::FollowRenewals => " --reads follow-renewals",
        });
    }
    for (seed, err) in &outcome.errors {
        eprintln!("  seed {seed} could not run: {err}");
        eprintln!("  replay: cargo xtask sim --scenario {name} --seed {seed}{planted}");
    }
    for Divergence { seed, first, again } in &outcome.diverged {
        eprintln!("  seed {seed} is not deterministic: run twice, it gave trace hashes {first:016x} and {again:016x}");
        eprintln!(
            "  compare: cargo xtask sim --scenario {name} --seed {seed}{planted} --trace FILE, twice, and diff the files"
        );
    }
    for (finding, seeds) in &outcome.verdict.unexpected {
        let shown: Vec<String> = seeds.iter().take(8).map(u64::to_string).collect();
        eprintln!("  unexpected {finding} ({}) in seeds {}", finding.summary(), shown.join(", "));
        if let Some(report) = outcome.reports.iter().find(|report| Some(&report.seed) == seeds.first())
            && let Some(first) = report.violations.iter().find(|v| Finding::Violation(v.property) == *finding)
        {
            eprintln!("    first: {first}");
        }
    }
    for (seed, rate) in &outcome.verdict.over_budget {
        let (budget, per) = match named.scenario.max_requests_per_member_hour {
            Some(budget) => (budget, "member"),
            None => (named.scenario.max_requests_per_leader_hour.unwrap_or_default(), "leader"),
        };
        eprintln!("  seed {seed} made {rate:.0} S3 requests per {per}-hour; the budget is {budget}");
    }
    for (seed, rate) in &outcome.verdict.busy_followers {
        let budget = named.scenario.max_follower_reads_per_ttl.unwrap_or_default();
        eprintln!("  seed {seed}: followers read {rate:.2} times per TTL; the budget is {budget}");
    }
    for (seed, lag_ms) in &outcome.verdict.late_reads {
        let bound = named.scenario.max_version_lag_ms.unwrap_or_default();
        eprintln!(
            "  seed {seed}: a follower saw a new version {lag_ms:.0} ms after it landed; the bound is {bound} ms"
        );
    }
    for (seed, gap_ms) in &outcome.verdict.slow_failovers {
        let bound = named.scenario.max_failover_ms.unwrap_or_default();
        eprintln!("  seed {seed} took {gap_ms:.0} ms to hand over to another node; the bound is {bound} ms");
    }
    for (seed, ms) in &outcome.verdict.slow_stops {
        let bound = named.scenario.max_stop_ms.unwrap_or_default();
        eprintln!("  seed {seed} took {ms:.0} ms to honour a stop; the bound is {bound} ms");
    }
    for (seed, ms) in &outcome.verdict.slow_leaves {
        let bound = named.scenario.max_leave_handoff_ms.unwrap_or_default();
        eprintln!("  seed {seed} took {ms:.0} ms to hand a leaving member's keys on; the bound is {bound} ms");
    }
    for (seed, ms) in &outcome.verdict.slow_crashes {
        let bound = named.scenario.max_crash_handoff_ms.unwrap_or_default();
        eprintln!("  seed {seed} took {ms:.0} ms to hand a crashed member's keys on; the bound is {bound} ms");
    }
    for (seed, ms) in &outcome.verdict.slow_joins {
        let bound = named.scenario.max_join_handoff_ms.unwrap_or_default();
        eprintln!("  seed {seed} took {ms:.0} ms from a join to the joiner's first key; the bound is {bound} ms");
    }
    for (seed, ms) in &outcome.verdict.slow_creations {
        let bound = named.scenario.max_create_handoff_ms.unwrap_or_default();
        eprintln!(
            "  seed {seed} took {ms:.0} ms from creating the membership object to its first key; the bound is {bound} ms"
        );
    }
    for (seed, ms) in &outcome.verdict.slow_rewrite_stops {
        let bound = named.scenario.max_rewrite_stop_ms.unwrap_or_default();
        eprintln!(
            "  seed {seed} acted for a key {ms:.0} ms after the membership object was rewritten at a view the members know; the bound is {bound} ms"
        );
    }
    for (seed, ms) in &outcome.verdict.late_evictions {
        let bound = named.scenario.max_eviction_delay_ms.unwrap_or_default();
        eprintln!("  seed {seed} evicted a member {ms:.0} ms after its last write; the bound is {bound} ms");
    }
    for (seed, ms) in &outcome.verdict.slow_eviction_handoffs {
        let bound = named.scenario.max_eviction_handoff_ms.unwrap_or_default();
        eprintln!(
            "  seed {seed} took {ms:.0} ms from an eviction to the last of the evicted member's keys starting elsewhere; the bound is {bound} ms"
        );
    }
    for (seed, ms) in &outcome.verdict.slow_abandon_stops {
        let bound = named.scenario.max_abandon_stop_ms.unwrap_or_default();
        eprintln!(
            "  seed {seed} acted for a key {ms:.0} ms after its member's run future was dropped; the bound is {bound} ms"
        );
    }
    for (seed, lost) in &outcome.verdict.lost_terms {
        let bound = named.scenario.max_lost_terms.unwrap_or_default();
        eprintln!("  seed {seed} lost {lost} term(s) involuntarily; the bound is {bound}");
    }
    for (seed, aborted) in &outcome.verdict.aborted_stops {
        let bound = named.scenario.max_aborted_stops.unwrap_or_default();
        eprintln!("  seed {seed} aborted {aborted} key(s) before their work wound down; the bound is {bound}");
    }
    for finding in &outcome.verdict.missing {
        let ran = seeds(&named.scenario, options);
        eprintln!("  expected {finding} ({}), but none of {} seed(s) showed it", finding.summary(), ran.len());
    }
    let seeds = options.seeds.map(|count| format!(" --seeds {count}")).unwrap_or_default();
    match outcome.verdict.replay_seed() {
        Some(seed) => eprintln!("  replay: cargo xtask sim --scenario {name} --seed {seed}{planted}"),
        None if options.seed.is_some() => eprintln!(
            "  (one seed was run; an expected finding need not show in every seed: \
             cargo xtask sim --scenario {name}{planted})"
        ),
        None => eprintln!("  rerun: cargo xtask sim --scenario {name}{seeds}{planted}"),
    }
}

/// Every violation of one run, with its simulated time.
fn details(name: &str, report: &Report) {
    println!("\n{name} seed {}: trace hash {:016x}", report.seed, report.trace_hash);
    let stats = &report.stats;
    println!(
        "  {} terms, {} takeovers, {} S3 requests, {} stale writes rejected, {:.0} simulated s in {:.2} CPU s",
        stats.terms,
        stats.takeovers,
        stats.s3_requests,
        stats.stale_writes_rejected,
        stats.simulated_secs,
        stats.cpu_secs
    );
    if report.violations.is_empty() {
        println!("  no violations");
    }
    for violation in &report.violations {
        println!("  {violation}");
    }
}

mod json;
use json::*;

mod planted;
