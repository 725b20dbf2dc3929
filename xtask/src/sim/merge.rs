//! `cargo xtask sim --merge a.json b.json ...`: the `--json` reports of a
//! run's shards, put back together into the table, verdicts and exit status
//! the whole run would have given.
//!
//! Each scenario is judged again from every shard's runs against its file,
//! so an expected finding that showed in one shard's seeds counts, and one
//! that showed in none is missing. A set of reports that is not one whole
//! run (a shard missing or given twice, shards of different runs or
//! sweeps, a seed run by two shards) is refused rather than judged.

use std::collections::{BTreeMap, BTreeSet};

use super::json::ReadScenario;
use super::*;

/// Reads the reports named by `--merge`, checks that they are one whole
/// run, and reports it as the run would have.
pub(super) fn run(root: &Path, options: &Options) -> Result<(), String> {
    let mut reports = Vec::new();
    for path in &options.merge {
        let text = std::fs::read_to_string(path).map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        let scenarios: Vec<ReadScenario> = serde_json::from_str(&text)
            .map_err(|err| format!("{} is not a report of `cargo xtask sim --json`: {err}", path.display()))?;
        reports.push((path.display().to_string(), scenarios));
    }
    let Merged { names, mut outcomes, sweep } = combine(reports)?;
    let scenarios = load(root, &names)?;
    for (named, outcome) in scenarios.iter().zip(&mut outcomes) {
        outcome.verdict = named.scenario.verdict(&outcome.reports);
    }
    // As the whole run: its sweep, for the rerun commands, and no shard.
    let whole = Options { json: options.json, sweep, ..Options::default() };
    report(&scenarios, &outcomes, &whole)
}

/// The shards' reports put together.
pub(super) struct Merged {
    /// The scenarios, in the order the reports list them.
    pub(super) names: Vec<String>,
    /// Each one's runs, errors and replays, with its verdict still to be
    /// judged.
    pub(super) outcomes: Vec<Outcome>,
    /// The sweep the shards ran, if they ran one.
    pub(super) sweep: Option<plan::Sweep>,
}

/// Puts the shards' reports, each with its file's name, together.
pub(super) fn combine(reports: Vec<(String, Vec<ReadScenario>)>) -> Result<Merged, String> {
    let Some((first_file, first)) = reports.first() else {
        return Err("--merge needs the --json report of every shard".into());
    };
    let shard_of = |file: &str, scenarios: &[ReadScenario]| -> Result<plan::Shard, String> {
        let shard = scenarios.first().and_then(|scenario| scenario.shard.as_deref()).ok_or_else(|| {
            format!("{file} is the report of a whole run, not of a shard (run each with --shard K/N --json)")
        })?;
        let shard = plan::Shard::parse(shard).map_err(|err| format!("{file}: {err}"))?;
        if scenarios.iter().any(|scenario| scenario.shard.as_deref() != Some(shard.to_string().as_str())) {
            return Err(format!("{file} mixes the reports of several shards"));
        }
        Ok(shard)
    };
    let count = shard_of(first_file, first)?.count;
    let names: Vec<String> = first.iter().map(|scenario| scenario.scenario.clone()).collect();
    let sweep_seed = first.first().and_then(|scenario| scenario.sweep_seed);
    let mut seen: BTreeMap<u64, String> = BTreeMap::new();
    for (file, scenarios) in &reports {
        let shard = shard_of(file, scenarios)?;
        if shard.count != count {
            return Err(format!("{file} is shard {shard}, but {first_file} is one of {count}: not the same run"));
        }
        if let Some(earlier) = seen.insert(shard.index, file.clone()) {
            return Err(format!("{earlier} and {file} are both shard {shard}"));
        }
        let these: Vec<&str> = scenarios.iter().map(|scenario| scenario.scenario.as_str()).collect();
        if these != names.iter().map(String::as_str).collect::<Vec<_>>() {
            return Err(format!("{file} ran other scenarios than {first_file}: not the same run"));
        }
        if scenarios.iter().any(|scenario| scenario.sweep_seed != sweep_seed) {
            return Err(format!("{file} is of another sweep than {first_file} (its --sweep-seed differs)"));
        }
    }
    let missing: Vec<String> =
        (1..=count).filter(|index| !seen.contains_key(index)).map(|index| format!("{index}/{count}")).collect();
    if !missing.is_empty() {
        return Err(format!(
            "the reports of shard(s) {} are missing: a merge judges whole runs only",
            missing.join(", ")
        ));
    }
    let mut outcomes = Vec::new();
    for (position, name) in names.iter().enumerate() {
        let mut outcome = Outcome {
            reports: Vec::new(),
            verdict: Verdict::default(),
            errors: Vec::new(),
            replayed: 0,
            diverged: Vec::new(),
            partial: false,
            planned_seeds: 0,
        };
        let mut seeds = BTreeSet::new();
        for (file, scenarios) in &reports {
            let read = &scenarios[position];
            if outcome.planned_seeds != 0 && read.planned_seeds != outcome.planned_seeds {
                return Err(format!(
                    "{file} plans {} seeds of {name}, another report {}",
                    read.planned_seeds, outcome.planned_seeds
                ));
            }
            outcome.planned_seeds = read.planned_seeds;
            let ran = read.runs.iter().map(|run| run.seed).chain(read.errors.iter().map(|(seed, _)| *seed));
            for seed in ran {
                if !seeds.insert(seed) {
                    return Err(format!("seed {seed} of {name} is in two reports: not shards of one run"));
                }
            }
            for run in &read.runs {
                let trace_hash = u64::from_str_radix(&run.trace_hash, 16).map_err(|_| {
                    format!("{file}: {name} seed {}: trace hash {:?} is not hex", run.seed, run.trace_hash)
                })?;
                outcome.reports.push(Report {
                    seed: run.seed,
                    entries: Vec::new(),
                    trace_hash,
                    violations: run.violations.clone(),
                    stats: run.stats.clone(),
                });
            }
            outcome.errors.extend(read.errors.iter().cloned());
            outcome.replayed += read.replayed;
            for (seed, first, again) in &read.diverged {
                let hex =
                    |text: &str| u64::from_str_radix(text, 16).map_err(|_| format!("{file}: {text:?} is not hex"));
                outcome.diverged.push(Divergence { seed: *seed, first: hex(first)?, again: hex(again)? });
            }
        }
        if seeds.len() != outcome.planned_seeds {
            return Err(format!(
                "the reports hold {} of the {} seeds planned for {name}: not one whole run",
                seeds.len(),
                outcome.planned_seeds
            ));
        }
        // In seed order, as one process lists them.
        outcome.reports.sort_by_key(|report| report.seed);
        outcome.errors.sort_by_key(|(seed, _)| *seed);
        outcome.diverged.sort_by_key(|divergence| divergence.seed);
        outcomes.push(outcome);
    }
    let sweep =
        sweep_seed.map(|seed| plan::Sweep { runs: outcomes.first().map_or(0, |o| o.planned_seeds as u64), seed });
    Ok(Merged { names, outcomes, sweep })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table with every run's CPU time set to one second, so that two
    /// runs of the same seeds print the same table.
    fn table_of(scenarios: &[Named], outcomes: &mut [Outcome]) -> String {
        for outcome in outcomes.iter_mut() {
            for report in &mut outcome.reports {
                report.stats.cpu_secs = 1.0;
            }
        }
        table::render(scenarios, outcomes)
    }

    /// A shard's report as `--json` prints it and `--merge` reads it.
    fn through_json(scenarios: &[Named], outcomes: &[Outcome], options: &Options) -> Vec<ReadScenario> {
        let text = serde_json::to_string_pretty(&json_report(scenarios, outcomes, options)).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    fn quick_set() -> Vec<Named> {
        let root = crate::workspace_root().unwrap();
        // One world that must show a violation in some seed, and one that
        // must show none.
        load(root, &["provider-ignore-if-match".into(), "leader-crash".into()]).unwrap()
    }

    #[test]
    fn three_shards_merge_into_the_table_and_verdicts_of_one_run() {
        let scenarios = quick_set();
        let whole_options = Options { seeds: Some(5), ..Options::default() };
        let mut whole = run_all(&scenarios, &whole_options, false, true);
        let mut reports = Vec::new();
        for index in 1..=3 {
            let shard = plan::Shard { index, count: 3 };
            let options = Options { seeds: Some(5), shard: Some(shard), ..Options::default() };
            let outcomes = run_all(&scenarios, &options, false, true);
            assert!(outcomes.iter().all(|outcome| outcome.partial && outcome.as_expected()), "shard {shard}");
            reports.push((format!("shard-{index}.json"), through_json(&scenarios, &outcomes, &options)));
        }
        let Merged { names, mut outcomes, sweep } = combine(reports).unwrap();
        assert_eq!(names, ["provider-ignore-if-match", "leader-crash"]);
        assert_eq!(sweep, None);
        for (named, outcome) in scenarios.iter().zip(&mut outcomes) {
            outcome.verdict = named.scenario.verdict(&outcome.reports);
        }
        for (merged, one) in outcomes.iter().zip(&whole) {
            assert_eq!(merged.verdict, one.verdict);
            assert_eq!(merged.as_expected(), one.as_expected());
            assert_eq!(merged.replayed, one.replayed);
            let hashes = |outcome: &Outcome| outcome.reports.iter().map(|r| (r.seed, r.trace_hash)).collect::<Vec<_>>();
            assert_eq!(hashes(merged), hashes(one));
        }
        assert_eq!(table_of(&scenarios, &mut outcomes), table_of(&scenarios, &mut whole));
    }

    #[test]
    fn an_expected_finding_is_judged_over_every_shard_not_in_one() {
        let scenarios = quick_set();
        // provider-ignore-if-match expects a violation: a shard that ran
        // none of the seeds showing it is as expected so far, and a whole
        // run that ran none of them is not.
        let mut empty = Outcome {
            reports: Vec::new(),
            verdict: scenarios[0].scenario.verdict(&[]),
            errors: Vec::new(),
            replayed: 0,
            diverged: Vec::new(),
            partial: true,
            planned_seeds: 5,
        };
        assert!(!empty.verdict.missing.is_empty());
        assert!(empty.as_expected());
        empty.partial = false;
        assert!(!empty.as_expected());
    }

    #[test]
    fn reports_that_are_not_one_whole_run_are_refused() {
        let scenarios = quick_set();
        let shard = |index, count| {
            let options = Options { seeds: Some(2), shard: Some(plan::Shard { index, count }), ..Options::default() };
            let outcomes = run_all(&scenarios, &options, false, false);
            (format!("s{index}of{count}.json"), through_json(&scenarios, &outcomes, &options))
        };
        let error = |reports| combine(reports).err().unwrap();
        assert!(error(vec![shard(1, 2)]).contains("shard(s) 2/2 are missing"));
        assert!(error(vec![shard(1, 2), shard(1, 2)]).contains("are both shard 1/2"));
        assert!(error(vec![shard(1, 2), shard(2, 3)]).contains("not the same run"));
        let options = Options { seeds: Some(2), ..Options::default() };
        let outcomes = run_all(&scenarios, &options, false, false);
        let whole = ("whole.json".to_string(), through_json(&scenarios, &outcomes, &options));
        assert!(error(vec![whole]).contains("not of a shard"));
        assert!(combine(vec![shard(2, 2), shard(1, 2)]).is_ok());
    }
}
