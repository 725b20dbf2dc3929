//! `cargo xtask chaos`: the chaos worlds under `scenarios/chaos/`, run on
//! real processes and judged by the simulator's checkers.
//!
//! Each world is a scenario file of the simulator's format. The harness
//! builds the `hoplock` binary, starts a real S3 server (SeaweedFS, or the
//! fake S3 served over TCP with `--store fake`), and for each node starts
//! `hoplock run` with a command that writes to a fenced downstream, each
//! node behind a TCP fault proxy of its own. It applies the file's schedule
//! in real time (signals, the proxies' faults), records one history on its
//! own clock, and hands it to the same checkers as a simulated run. Then it
//! runs the same world in the simulator and prints both engines' figures
//! side by side.
//!
//! A world whose outcome is not what its file expects fails the task; each
//! failing run's history, logs and timeline are kept under `target/chaos/`
//! with the command that runs it again.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hoplock_sim::runner::Report;

mod child;
mod cluster;
mod faketime;
mod plan;
mod planted;
mod record;
mod report;
mod run;

use cluster::Launch;
use plan::Plan;
use report::{Figures, Row};
use run::StoreAt;

pub use child::run as child;

const USAGE: &str = "usage: cargo xtask chaos [options]

  --scenario FILE   run this world (a path, or a name under scenarios/chaos/);
                    may be given more than once (default: every world there)
  --store STORE     `weed` (SeaweedFS, the default) or `fake` (the fake S3
                    over TCP; needed for worlds with a provider mode)
  --runs N          runs of each world (default: each file's [chaos] runs)
  --seed S          the first run's seed (default 1); run k has seed S+k
  --duration D      run the worlds again and again, with fresh seeds, for D
                    (such as 30m or 2h), with a progress line: a nightly job
  --jobs N          runs at once (default 2)
  --sim-seeds N     seeds of the simulator's side of the table (default 8;
                    0 leaves it out)
  --planted NAME    run the worlds that show this planted bug with a binary
                    built with the `planted` feature, 4 times each: caught
                    means a safety violation in at least 3 of 4; `all` checks
                    every bug the worlds claim
  --keep            keep every run's history, logs and timeline, not only
                    those of worlds whose outcome was unexpected
  --out DIR         where runs are kept (default target/chaos)";

/// Parsed command line.
#[derive(Clone, Debug)]
pub struct Options {
    scenarios: Vec<String>,
    fake: bool,
    runs: Option<u64>,
    seed: u64,
    duration: Option<Duration>,
    jobs: usize,
    sim_seeds: u64,
    planted: Option<String>,
    keep: bool,
    out: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        scenarios: Vec::new(),
        fake: false,
        runs: None,
        seed: 1,
        duration: None,
        jobs: 2,
        sim_seeds: 8,
        planted: None,
        keep: false,
        out: None,
    };
    let mut flags = crate::flags::Flags::new(args, USAGE);
    while let Some(arg) = flags.next_flag() {
        match arg.as_str() {
            "--scenario" => options.scenarios.push(flags.value("--scenario")?),
            "--store" => {
                options.fake = match flags.value("--store")?.as_str() {
                    "weed" => false,
                    "fake" => true,
                    other => return Err(format!("--store takes `weed` or `fake`, not {other:?}")),
                }
            }
            "--runs" => options.runs = Some(flags.number("--runs")?.max(1)),
            "--seed" => options.seed = flags.number("--seed")?,
            "--duration" => options.duration = Some(parse_duration(&flags.value("--duration")?)?),
            "--jobs" => options.jobs = flags.number("--jobs")?.max(1) as usize,
            "--sim-seeds" => options.sim_seeds = flags.number("--sim-seeds")?,
            "--planted" => options.planted = Some(flags.value("--planted")?),
            "--keep" => options.keep = true,
            "--out" => options.out = Some(flags.value("--out")?.into()),
            other => return Err(format!("unknown option {other:?}\n\n{USAGE}")),
        }
    }
    if options.planted.is_some() && options.duration.is_some() {
        return Err("--planted runs each world 4 times; it goes without --duration".into());
    }
    Ok(options)
}

/// `30m`, `2h`, `90s`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| format!("{text:?} is not a duration such as 30m"))?;
    let seconds = match unit {
        "s" => number,
        "m" | "" => number.saturating_mul(60),
        "h" => number.saturating_mul(3600),
        _ => return Err(format!("{text:?} has an unknown unit; use s, m or h")),
    };
    Ok(Duration::from_secs(seconds))
}

/// Runs the task. `Ok` means every outcome was as expected.
pub fn run(args: &[String]) -> Result<(), String> {
    if crate::flags::Flags::help(args, USAGE) {
        return Ok(());
    }
    let options = parse(args)?;
    let root = crate::workspace_root()?;
    let out = options.out.clone().unwrap_or_else(|| root.join("target/chaos"));
    std::fs::create_dir_all(&out).map_err(|err| format!("cannot create {}: {err}", out.display()))?;
    let faketime = match faketime::install(root) {
        Ok(library) => Some(library),
        Err(err) => {
            eprintln!("==> libfaketime is not at hand ({err}); worlds with offset or drifting clocks are refused");
            None
        }
    };
    let files = world_files(root, &options.scenarios)?;
    let plans: Vec<Plan> = files.iter().map(|file| plan::load(file, faketime.is_some())).collect::<Result<_, _>>()?;
    if let Some(bug) = &options.planted {
        return planted::run(root, &out, &plans, bug, &options, faketime);
    }
    let hoplock = build_binary(root, &out, false)?;
    let runtime = runtime()?;
    let launch = launch(hoplock, faketime)?;
    let (store, server) = Store::start(root, options.fake)?;
    let rows = runtime.block_on(run_worlds(&plans, &options, &store, &launch, &out));
    // SeaweedFS stops whether or not the runs went through.
    drop(server);
    let mut rows = rows?;
    // The simulator runs its own runtime: outside the harness's.
    for (row, sim) in rows.iter_mut().zip(sim_figures(&plans, options.sim_seeds)?) {
        row.sim = sim;
    }
    print!("{}", report::table(&rows));
    if rows.iter().all(|row| row.as_expected) {
        Ok(())
    } else {
        Err("some chaos worlds' outcomes were not what their files expect".into())
    }
}

/// Every world's file: the ones asked for, or every file under
/// `scenarios/chaos/`.
fn world_files(root: &Path, asked: &[String]) -> Result<Vec<PathBuf>, String> {
    let directory = root.join("scenarios/chaos");
    if asked.is_empty() {
        return hoplock_sim::scenario::files_in(&directory)
            .map_err(|err| format!("cannot list {}: {err}", directory.display()));
    }
    asked
        .iter()
        .map(|name| {
            let path = PathBuf::from(name);
            let named = directory.join(format!("{name}.toml"));
            if path.is_file() {
                Ok(path)
            } else if named.is_file() {
                Ok(named)
            } else {
                Err(format!("no chaos world {name:?}: neither a file nor a name under {}", directory.display()))
            }
        })
        .collect()
}

/// Builds the `hoplock` binary (with the planted bugs when asked) and
/// copies it under `out/bin`, so that building the other flavour later does
/// not change the one a run uses.
pub fn build_binary(root: &Path, out: &Path, planted: bool) -> Result<PathBuf, String> {
    let mut args = vec!["build", "--quiet", "--profile", "test", "--package", "hoplock-cli"];
    if planted {
        args.extend(["--features", "planted"]);
    }
    eprintln!("==> cargo {}", args.join(" "));
    let status = std::process::Command::new(env!("CARGO"))
        .args(&args)
        .current_dir(root)
        .status()
        .map_err(|err| format!("could not start cargo: {err}"))?;
    if !status.success() {
        return Err(format!("cargo {} failed ({status})", args.join(" ")));
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let built = target.join("debug/hoplock");
    let bin = out.join("bin");
    std::fs::create_dir_all(&bin).map_err(|err| format!("cannot create {}: {err}", bin.display()))?;
    let copy = bin.join(if planted { "hoplock-planted" } else { "hoplock" });
    std::fs::copy(&built, &copy).map_err(|err| format!("cannot copy {}: {err}", built.display()))?;
    Ok(copy)
}

/// What every process is started with, but the store and the key.
fn launch(hoplock: PathBuf, faketime: Option<PathBuf>) -> Result<Launch, String> {
    let harness = std::env::current_exe().map_err(|err| format!("cannot find the harness's own binary: {err}"))?;
    Ok(Launch {
        hoplock,
        harness,
        bucket: String::new(),
        key: String::new(),
        access_key: String::new(),
        secret_key: String::new(),
        region: String::new(),
        downstream: String::new(),
        planted: None,
        faketime,
    })
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|err| format!("cannot start the async runtime: {err}"))
}

/// The store every run uses: SeaweedFS, started once and shared, or the
/// fake S3, started per run in the world's provider mode.
#[derive(Clone, Debug)]
pub enum Store {
    Weed(StoreAt),
    Fake,
}

impl Store {
    /// Starts SeaweedFS unless `fake`; the server handle, when there is
    /// one, must be kept until the runs are over.
    pub fn start(root: &Path, fake: bool) -> Result<(Store, Option<crate::s3_server::S3Server>), String> {
        if fake {
            return Ok((Store::Fake, None));
        }
        eprintln!("==> starting SeaweedFS for the chaos worlds");
        let server = crate::s3_server::start(root)?;
        let addr = server
            .endpoint
            .trim_start_matches("http://")
            .parse()
            .map_err(|err| format!("SeaweedFS's endpoint {:?}: {err}", server.endpoint))?;
        let at = StoreAt {
            addr,
            bucket: server.bucket.clone(),
            access_key: server.access_key.clone(),
            secret_key: server.secret_key.clone(),
            region: server.region.clone(),
        };
        Ok((Store::Weed(at), Some(server)))
    }
}

/// The fake S3 on a loopback port for one run, in the world's mode.
async fn start_fake(plan: &Plan, seed: u64) -> Result<StoreAt, String> {
    use hoplock_sim::fake_s3::{FakeS3, server};
    let (access_key, secret_key, bucket) = ("HOPLOCKCHAOS", "hoplock-chaos-secret", "hoplock-chaos");
    let s3 = FakeS3::builder(Arc::new(hoplock::clock::SystemClock::new()), seed)
        .mode(plan.world.s3.mode)
        .faults(plan.world.s3.faults.clone())
        .credentials(access_key, secret_key)
        .bucket(bucket)
        .build()
        .map_err(|err| format!("cannot build the fake S3: {err}"))?;
    let listener =
        tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|err| format!("cannot bind the fake S3: {err}"))?;
    let addr = listener.local_addr().map_err(|err| err.to_string())?;
    tokio::spawn(server::serve(s3, listener, std::future::pending()));
    Ok(StoreAt {
        addr,
        bucket: bucket.into(),
        access_key: access_key.into(),
        secret_key: secret_key.into(),
        region: "us-east-1".into(),
    })
}

/// Where a run's store is.
async fn store_for(store: &Store, plan: &Plan, seed: u64) -> Result<StoreAt, String> {
    match store {
        Store::Fake => start_fake(plan, seed).await,
        Store::Weed(_) if plan.needs_fake => {
            Err(format!("{}: a provider mode or store faults need the fake S3: run it with --store fake", plan.file))
        }
        Store::Weed(at) => Ok(at.clone()),
    }
}

/// One run of one world, its store included.
async fn run_one(plan: &Plan, seed: u64, store: &Store, launch: &Launch) -> Result<run::Outcome, String> {
    let at = store_for(store, plan, seed).await?;
    let launch = Launch {
        access_key: at.access_key.clone(),
        secret_key: at.secret_key.clone(),
        region: at.region.clone(),
        ..launch.clone()
    };
    run::run_once(plan, seed, &at, &launch).await
}

/// The runs of every world, `jobs` at a time, then each world's verdict.
#[allow(clippy::disallowed_methods)] // Real processes, real time.
async fn run_worlds(
    plans: &[Plan],
    options: &Options,
    store: &Store,
    launch: &Launch,
    out: &Path,
) -> Result<Vec<Row>, String> {
    let started = Instant::now();
    let mut rows = Vec::new();
    let mut round = 0u64;
    let mut done_runs = 0usize;
    let mut unexpected_runs = 0usize;
    let mut outcomes: Vec<Vec<(u64, run::Outcome)>> = plans.iter().map(|_| Vec::new()).collect();
    loop {
        // Every (world, seed) of this round.
        let mut work = Vec::new();
        for (index, plan) in plans.iter().enumerate() {
            let runs = options.runs.unwrap_or_else(|| plan.scenario.chaos.as_ref().map_or(1, |chaos| chaos.runs));
            for k in 0..runs {
                work.push((index, options.seed.saturating_add(round.saturating_mul(runs)).saturating_add(k)));
            }
        }
        let semaphore = Arc::new(tokio::sync::Semaphore::new(options.jobs));
        let mut tasks = tokio::task::JoinSet::new();
        for (index, seed) in work {
            let (plan, launch, semaphore) = (plans[index].clone(), launch.clone(), semaphore.clone());
            let store = store.clone();
            tasks.spawn(async move {
                let _permit = semaphore.acquire_owned().await;
                (index, seed, run_one(&plan, seed, &store, &launch).await)
            });
        }
        while let Some(joined) = tasks.join_next().await {
            let (index, seed, outcome) = joined.map_err(|err| format!("a chaos run panicked: {err}"))?;
            let outcome = outcome?;
            done_runs += 1;
            let verdict = plans[index].scenario.verdict(std::slice::from_ref(&outcome.report));
            if !verdict.unexpected.is_empty() {
                unexpected_runs += 1;
            }
            if let Some(duration) = options.duration {
                eprintln!(
                    "[{} of {}] {done_runs} runs, {unexpected_runs} with an unexpected violation; last: {} seed {seed}",
                    clock(started.elapsed()),
                    clock(duration),
                    plans[index].name
                );
            } else {
                eprintln!("==> {} seed {seed}: {} violation(s)", plans[index].name, outcome.report.violations.len());
                for violation in outcome.report.violations.iter().take(3) {
                    eprintln!("    {violation}");
                }
            }
            outcomes[index].push((seed, outcome));
        }
        round += 1;
        if options.duration.is_none_or(|duration| started.elapsed() >= duration) {
            break;
        }
    }
    for (plan, runs) in plans.iter().zip(&mut outcomes) {
        runs.sort_by_key(|(seed, _)| *seed);
        let reports: Vec<Report> = runs.iter().map(|(_, outcome)| outcome.report.clone()).collect();
        let verdict = plan.scenario.verdict(&reports);
        let mut real = Figures::default();
        for report in &reports {
            real.add(&Figures::of(report));
        }
        if !verdict.as_expected() || options.keep {
            let file = Path::new(&plan.file);
            let file = file.strip_prefix(crate::workspace_root()?).unwrap_or(file);
            let mut rerun = format!("cargo xtask chaos --scenario {} --runs 1", file.display());
            if matches!(store, Store::Fake) {
                rerun.push_str(" --store fake");
            }
            let failing: Vec<(u64, run::Outcome)> = std::mem::take(runs)
                .into_iter()
                .filter(|(_, outcome)| {
                    options.keep || !outcome.report.violations.is_empty() || !verdict.missing.is_empty()
                })
                .collect();
            eprint!("{}", report::keep_failures(out, plan, &failing, &rerun));
        }
        rows.push(Row {
            name: plan.name.clone(),
            runs: reports.len(),
            expected: plan.scenario.expect.to_string(),
            outcome: report::outcome(&verdict),
            as_expected: verdict.as_expected(),
            real,
            sim: None,
        });
    }
    Ok(rows)
}

/// The same worlds in the simulator, for the side-by-side figures.
fn sim_figures(plans: &[Plan], seeds: u64) -> Result<Vec<Option<Figures>>, String> {
    plans
        .iter()
        .map(|plan| {
            if seeds == 0 {
                return Ok(None);
            }
            let mut figures = Figures::default();
            for seed in 0..seeds {
                let report = hoplock_sim::runner::run(&plan.world, seed)
                    .map_err(|err| format!("{}: the simulator refused the world: {err}", plan.file))?;
                figures.add(&Figures::of(&report));
            }
            Ok(Some(figures))
        })
        .collect()
}

/// `mm:ss`.
fn clock(elapsed: Duration) -> String {
    let seconds = elapsed.as_secs();
    format!("{:02}:{:02}", seconds / 60, seconds % 60)
}
