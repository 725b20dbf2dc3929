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
//! deliberate bugs switched on. `--sweep N` runs N fresh seeds of every
//! scenario; `--shard K/N` runs one slice of the plan and `--merge` puts
//! the slices' `--json` reports back together (see [`plan`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use hoplock_sim::runner::{self, Report};
use hoplock_sim::scenario::{Finding, Scenario, Verdict};
use hoplock_sim::world::ReadsSpec;
use serde::Serialize;

mod compare;
mod merge;
mod progress;
mod speedup;
use progress::{Estimate, Progress};
mod plan;
mod swarm;
pub(crate) mod table;
pub(crate) mod timeline;

const USAGE: &str = "usage: cargo xtask sim [options]

  --scenario NAME   run only this scenario (file name without .toml, or a path
                    to a .toml file); may be given more than once
  --seeds N         run seeds 0..N instead of each file's default
  --seed S          run seed S only, and print every violation
  --sweep N         run N fresh seeds of every scenario, above the default
                    range, drawn from a sweep seed that is printed
  --sweep-seed S    with --sweep: draw the seeds from S (to repeat a sweep,
                    and in every shard of one)
  --shard K/N       run only the K-th of N deterministic slices of the runs
                    (K from 1); with --json, the slices merge into one report
  --merge FILE...   read the --json reports of a run's shards and print the
                    table, verdicts and exit status the whole run would have
  --speedup BASE NEW
                    read the --json reports of one run made by two commits
                    (side by side, --jobs 1 each) and print how much faster
                    the second is: keyed worlds, the whole run, traces;
                    with --scenario, only those scenarios of the reports
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
    sweep: Option<plan::Sweep>,
    shard: Option<plan::Shard>,
    merge: Vec<PathBuf>,
    speedup: Vec<PathBuf>,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options::default();
    let mut flags = crate::flags::Flags::new(args, USAGE);
    let (mut sweep_runs, mut sweep_seed) = (None, None);
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
            "--sweep" => {
                let runs = flags.number("--sweep")?;
                if runs == 0 {
                    return Err("--sweep must be at least 1".into());
                }
                sweep_runs = Some(runs);
            }
            "--sweep-seed" => sweep_seed = Some(flags.number("--sweep-seed")?),
            "--shard" => options.shard = Some(plan::Shard::parse(&flags.value("--shard")?)?),
            "--merge" => options.merge = flags.values("--merge")?.into_iter().map(PathBuf::from).collect(),
            "--speedup" => options.speedup = flags.values("--speedup")?.into_iter().map(PathBuf::from).collect(),
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
    options.sweep = match (sweep_runs, sweep_seed) {
        (Some(runs), seed) => {
            if options.seed.is_some() || options.seeds.is_some() {
                return Err("--sweep picks its own seeds; it goes without --seed and --seeds".into());
            }
            if options.shard.is_some() && seed.is_none() {
                return Err(
                    "the shards of a sweep must draw the same seeds: give every shard the same --sweep-seed".into()
                );
            }
            Some(plan::Sweep { runs, seed: seed.unwrap_or_else(fresh_sweep_seed) })
        }
        (None, Some(_)) => return Err("--sweep-seed goes with --sweep".into()),
        (None, None) => None,
    };
    let another_mode = options.compare.is_some()
        || options.swarm.is_some()
        || options.trace.is_some()
        || options.timeline.is_some()
        || options.seed.is_some();
    if options.sweep.is_some() && another_mode {
        return Err("--sweep goes without --compare, --swarm, --trace, --timeline and --seed".into());
    }
    if options.shard.is_some() && another_mode {
        return Err(
            "--shard slices a whole run; it goes without --compare, --swarm, --trace, --timeline and --seed".into()
        );
    }
    if !options.speedup.is_empty() {
        if options.speedup.len() != 2 {
            return Err("--speedup takes two reports: the base commit's and the new one's".into());
        }
        if !options.merge.is_empty() || options.json || another_mode {
            return Err(
                "--speedup reads two finished reports and prints a table; it goes alone, or with --scenario to \
                 compare only those"
                    .into(),
            );
        }
    }
    if !options.merge.is_empty() {
        let alone = options.scenarios.is_empty()
            && options.seeds.is_none()
            && options.sweep.is_none()
            && options.shard.is_none()
            && options.reads.is_none()
            && options.planted.is_none()
            && !another_mode;
        if !alone {
            return Err("--merge reads finished reports; it goes with --json only".into());
        }
    }
    Ok(options)
}

/// A sweep seed when none is given: from the time, since a sweep's point is
/// seeds nobody has run yet. It is printed, so the sweep can be repeated.
#[allow(clippy::disallowed_methods)] // Picks which seeds to run, outside any simulation.
fn fresh_sweep_seed() -> u64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let mut state = nanos as u64 ^ u64::from(std::process::id()).rotate_left(32);
    hoplock::entropy::splitmix64(&mut state)
}

/// Runs the task. `Ok` means every outcome was as expected.
pub fn run(args: &[String]) -> Result<(), String> {
    if crate::flags::Flags::help(args, USAGE) {
        return Ok(());
    }
    let options = parse(args)?;
    let root = crate::workspace_root()?;
    if !options.merge.is_empty() {
        return merge::run(root, &options);
    }
    if !options.speedup.is_empty() {
        return speedup::run(root, &options);
    }
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
    if let Some(sweep) = options.sweep {
        eprintln!(
            "sweep seed {seed}: {runs} fresh seeds per scenario (again: cargo xtask sim --sweep {runs} --sweep-seed {seed})",
            seed = sweep.seed,
            runs = sweep.runs
        );
    }
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
    /// Whether these are one shard's runs of the scenario: an expected
    /// finding that none of them showed may show in another shard's, so
    /// its absence is judged only when the shards merge.
    pub partial: bool,
    /// How many seeds the whole plan runs the scenario with, over every
    /// shard.
    pub planned_seeds: usize,
}

/// A seed run twice that gave two different histories.
pub struct Divergence {
    pub seed: u64,
    pub first: u64,
    pub again: u64,
}

impl Outcome {
    pub fn as_expected(&self) -> bool {
        let judged = if self.partial {
            self.verdict.unexpected.is_empty() && !self.verdict.breaks_a_bound()
        } else {
            self.verdict.as_expected()
        };
        self.errors.is_empty() && self.diverged.is_empty() && judged
    }
}

/// Runs every (scenario, seed) pair on `jobs` threads with a progress bar.
/// Histories are dropped after checking unless `keep_entries`. With
/// `replay`, each scenario's first seed runs twice, on whichever threads
/// pick it up, and the two trace hashes must match: tokio draws some of its
/// own choices (which shard of a watch a waiter goes to, for one) from
/// numbers that differ per thread and per process, and a world that leans
/// on one of them gives another trace for the same seed.
fn run_all(scenarios: &[Named], options: &Options, keep_entries: bool, replay: bool) -> Vec<Outcome> {
    let jobs = plan::jobs(scenarios, options, replay);
    let worlds: Vec<_> = scenarios.iter().map(|named| named.scenario.world()).collect();
    let results: Mutex<Vec<Option<Result<Report, String>>>> = Mutex::new(vec![None; jobs.len()]);
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let threads = options.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let estimate = Mutex::new(Estimate::new(scenarios.len(), &jobs, threads));
    let progress = Progress { total: jobs.len(), done: &done, estimate: &estimate, quiet: options.json };
    std::thread::scope(|scope| {
        for _ in 0..threads.min(jobs.len()).max(1) {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, Ordering::SeqCst);
                    let Some(&plan::Job { scenario, seed, replay }) = jobs.get(index) else { return };
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
                    let took = result.as_ref().map_or(0.0, |report| report.stats.cpu_secs);
                    estimate.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).finished(scenario, took);
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
            partial: options.shard.is_some(),
            planned_seeds: 0,
        })
        .collect();
    let mut replays = Vec::new();
    for (plan::Job { scenario, seed, replay }, result) in jobs.into_iter().zip(results) {
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
        outcome.planned_seeds = plan::seeds(named, options).len();
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

/// Prints the table (or JSON), the details of single-seed runs and the
/// replay commands; writes the trace and timeline.
fn report(scenarios: &[Named], outcomes: &[Outcome], options: &Options) -> Result<(), String> {
    if options.json {
        let json = json_report(scenarios, outcomes, options);
        println!("{}", serde_json::to_string_pretty(&json).map_err(|err| err.to_string())?);
    } else {
        print!("{}", table::render(scenarios, outcomes));
        if let Some(shard) = options.shard {
            println!(
                "shard {shard}: these are one slice of the runs; an expected finding no run here showed is judged \
                 when the shards' --json reports merge (cargo xtask sim --merge)"
            );
        }
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
    // A shard's runs are a slice: what none of them showed may show in
    // another's.
    let missing = if outcome.partial { &[][..] } else { &outcome.verdict.missing[..] };
    for finding in missing {
        let ran = outcome.reports.len() + outcome.errors.len();
        eprintln!("  expected {finding} ({}), but none of {ran} seed(s) showed it", finding.summary());
    }
    let seeds = match (options.seeds, options.sweep) {
        (Some(count), _) => format!(" --seeds {count}"),
        (None, Some(sweep)) => format!(" --sweep {} --sweep-seed {}", sweep.runs, sweep.seed),
        (None, None) => String::new(),
    };
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
