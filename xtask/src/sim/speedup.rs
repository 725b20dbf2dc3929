//! `cargo xtask sim --speedup BASE.json NEW.json`: how much faster one
//! commit's simulator is than another's, from the `--json` reports of the
//! same run made by each.
//!
//! Both reports must hold the same scenarios and seeds; they should be made
//! at the same time on the same machine (`--jobs 1` each, side by side), so
//! that a noisy machine slows both alike. Speed is simulated seconds per CPU
//! second, summed over a set's runs. Trace hashes are compared run by run: an
//! optimisation that changes a schedule shows here, and the verdicts of
//! both runs say whether every expectation still holds.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::json::ReadScenario;
use super::*;

/// Reads the two reports and prints the comparison.
pub(super) fn run(root: &Path, options: &Options) -> Result<(), String> {
    let [base, new] = options.speedup.as_slice() else {
        return Err("--speedup takes two reports: the base commit's and the new one's".into());
    };
    let (base, new) = (read(base)?, read(new)?);
    let (base, new) = (only(base, &options.scenarios, "base")?, only(new, &options.scenarios, "new")?);
    let names: Vec<String> = new.iter().map(|scenario| scenario.scenario.clone()).collect();
    let keyed: BTreeMap<String, bool> =
        load(root, &names)?.into_iter().map(|named| (named.name, named.scenario.keyed.is_some())).collect();
    print!("{}", render(&base, &new, &keyed)?);
    Ok(())
}

/// The scenarios of `report` named in `wanted` (by file name, with or
/// without a directory and `.toml`), or all of them when none are named.
fn only(report: Vec<ReadScenario>, wanted: &[String], which: &str) -> Result<Vec<ReadScenario>, String> {
    if wanted.is_empty() {
        return Ok(report);
    }
    let wanted: Vec<&str> = wanted.iter().map(|name| bare_name(name)).collect();
    let kept: Vec<ReadScenario> =
        report.into_iter().filter(|scenario| wanted.contains(&bare_name(&scenario.scenario))).collect();
    if let Some(missing) =
        wanted.iter().find(|name| !kept.iter().any(|scenario| bare_name(&scenario.scenario) == **name))
    {
        return Err(format!("the {which} report has no scenario {missing}"));
    }
    Ok(kept)
}

/// A scenario's name without the directory and `.toml` a path gives it.
fn bare_name(name: &str) -> &str {
    let file = name.rsplit('/').next().unwrap_or(name);
    file.strip_suffix(".toml").unwrap_or(file)
}

fn read(path: &Path) -> Result<Vec<ReadScenario>, String> {
    let text = std::fs::read_to_string(path).map_err(|err| format!("cannot read {}: {err}", path.display()))?;
    serde_json::from_str(&text)
        .map_err(|err| format!("{} is not a report of `cargo xtask sim --json`: {err}", path.display()))
}

/// Simulated and CPU seconds over some runs.
#[derive(Clone, Copy, Default)]
struct Cost {
    simulated: f64,
    cpu: f64,
}

impl Cost {
    fn of(scenario: &ReadScenario) -> Cost {
        let mut cost = Cost::default();
        for run in &scenario.runs {
            cost.simulated += run.stats.simulated_secs;
            cost.cpu += run.stats.cpu_secs;
        }
        cost
    }

    fn add(&mut self, other: Cost) {
        self.simulated += other.simulated;
        self.cpu += other.cpu;
    }

    /// Simulated seconds per CPU second.
    fn speed(self) -> f64 {
        if self.cpu > 0.0 { self.simulated / self.cpu } else { 0.0 }
    }
}

/// The comparison as text: a row per keyed world, then the sets' totals.
fn render(base: &[ReadScenario], new: &[ReadScenario], keyed: &BTreeMap<String, bool>) -> Result<String, String> {
    let base_by_name: BTreeMap<&str, &ReadScenario> =
        base.iter().map(|scenario| (scenario.scenario.as_str(), scenario)).collect();
    if base.len() != new.len() {
        return Err(format!("the base report holds {} scenarios, the new one {}", base.len(), new.len()));
    }
    let header = ["keyed world", "runs", "base sim-s/CPU-s", "new sim-s/CPU-s", "speed-up", "traces unchanged"];
    let mut rows = Vec::new();
    let (mut keyed_base, mut keyed_new, mut all_base, mut all_new) =
        (Cost::default(), Cost::default(), Cost::default(), Cost::default());
    let (mut same, mut changed, mut runs) = (0usize, 0usize, 0usize);
    let mut slowest: Option<(f64, f64, &str)> = None;
    let (mut base_expected, mut new_expected) = (0, 0);
    for scenario in new {
        let name = scenario.scenario.as_str();
        let before = base_by_name.get(name).ok_or_else(|| format!("the base report has no scenario {name}"))?;
        let seeds = |s: &ReadScenario| s.runs.iter().map(|run| run.seed).collect::<Vec<_>>();
        if seeds(before) != seeds(scenario) {
            return Err(format!("{name} was run with other seeds in the two reports: not the same run"));
        }
        let unchanged = before.runs.iter().zip(&scenario.runs).filter(|(a, b)| a.trace_hash == b.trace_hash).count();
        same += unchanged;
        changed += scenario.runs.len() - unchanged;
        runs += scenario.runs.len();
        base_expected += usize::from(before.as_expected);
        new_expected += usize::from(scenario.as_expected);
        let (cost_before, cost_now) = (Cost::of(before), Cost::of(scenario));
        all_base.add(cost_before);
        all_new.add(cost_now);
        if keyed.get(name).copied().unwrap_or(false) {
            keyed_base.add(cost_before);
            keyed_new.add(cost_now);
            if slowest.is_none_or(|(speed, _, _)| cost_now.speed() < speed) {
                slowest = Some((cost_now.speed(), cost_before.speed(), name));
            }
            rows.push([
                name.to_string(),
                scenario.runs.len().to_string(),
                format!("{:.0}", cost_before.speed()),
                format!("{:.0}", cost_now.speed()),
                format!("{:.2}x", ratio(cost_now.speed(), cost_before.speed())),
                format!("{unchanged}/{}", scenario.runs.len()),
            ]);
        }
    }
    let mut out = table::columns(&header.map(String::from), &rows);
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "keyed worlds ({} files): {:.0}x real time -> {:.0}x, {:.2}x as fast ({:.1} -> {:.1} CPU s)",
        rows.len(),
        keyed_base.speed(),
        keyed_new.speed(),
        ratio(keyed_new.speed(), keyed_base.speed()),
        keyed_base.cpu,
        keyed_new.cpu
    );
    if let Some((now, before, name)) = slowest {
        let _ = writeln!(out, "slowest keyed world: {name} at {now:.0}x real time (base {before:.0}x)");
    }
    let _ = writeln!(
        out,
        "all runs ({} files, {runs} runs, {:.0} simulated s): {:.1} -> {:.1} CPU s, {:.2}x as fast",
        new.len(),
        all_new.simulated,
        all_base.cpu,
        all_new.cpu,
        ratio(all_base.cpu, all_new.cpu)
    );
    let _ = writeln!(
        out,
        "trace hashes: {same} unchanged, {changed} changed; as expected: base {base_expected}/{}, new {new_expected}/{}",
        base.len(),
        new.len()
    );
    Ok(out)
}

fn ratio(numerator: f64, denominator: f64) -> f64 {
    if denominator > 0.0 { numerator / denominator } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(name: &str, runs: &[(u64, &str, f64, f64)], as_expected: bool) -> ReadScenario {
        let runs: Vec<serde_json::Value> = runs
            .iter()
            .map(|(seed, hash, simulated, cpu)| {
                let mut stats = serde_json::to_value(hoplock_sim::runner::Stats::default()).unwrap();
                stats["simulated_secs"] = (*simulated).into();
                stats["cpu_secs"] = (*cpu).into();
                serde_json::json!({"seed": seed, "trace_hash": hash, "violations": [], "stats": stats})
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "scenario": name, "as_expected": as_expected, "runs": runs, "errors": [], "diverged": [],
            "replayed": 0, "shard": null, "planned_seeds": runs.len(), "sweep_seed": null
        }))
        .unwrap()
    }

    #[test]
    fn speeds_are_summed_per_set_and_traces_compared_run_by_run() {
        let base = [
            scenario("k", &[(0, "a", 100.0, 2.0), (1, "b", 100.0, 2.0)], true),
            scenario("e", &[(0, "c", 1000.0, 1.0)], true),
        ];
        let new = [
            scenario("k", &[(0, "a", 100.0, 1.0), (1, "x", 100.0, 0.5)], true),
            scenario("e", &[(0, "c", 1000.0, 0.5)], false),
        ];
        let keyed = BTreeMap::from([("k".to_string(), true), ("e".to_string(), false)]);
        let text = render(&base, &new, &keyed).unwrap();
        assert!(text.contains("k            2     50                133              2.67x     1/2"), "{text}");
        assert!(text.contains("keyed worlds (1 files): 50x real time -> 133x, 2.67x as fast (4.0 -> 1.5 CPU s)"));
        assert!(text.contains("slowest keyed world: k at 133x real time (base 50x)"));
        assert!(text.contains("all runs (2 files, 3 runs, 1200 simulated s): 5.0 -> 2.0 CPU s, 2.50x as fast"));
        assert!(text.contains("trace hashes: 2 unchanged, 1 changed; as expected: base 2/2, new 1/2"));
    }

    #[test]
    fn scenarios_named_are_the_only_ones_compared() {
        let report =
            || vec![scenario("dir/k.toml", &[(0, "a", 1.0, 1.0)], true), scenario("e", &[(0, "c", 1.0, 1.0)], true)];
        let kept = only(report(), &["k".to_string()], "base").unwrap();
        assert_eq!(kept.iter().map(|s| s.scenario.as_str()).collect::<Vec<_>>(), ["dir/k.toml"]);
        assert_eq!(only(report(), &[], "base").unwrap().len(), 2);
        let missing = only(report(), &["k".to_string(), "gone.toml".to_string()], "new").err();
        assert_eq!(missing.as_deref(), Some("the new report has no scenario gone"));
    }

    #[test]
    fn reports_of_different_runs_are_refused() {
        let keyed = BTreeMap::new();
        let base = [scenario("k", &[(0, "a", 1.0, 1.0)], true)];
        let other_seeds = [scenario("k", &[(1, "a", 1.0, 1.0)], true)];
        assert!(render(&base, &other_seeds, &keyed).unwrap_err().contains("other seeds"));
        let other_scenario = [scenario("j", &[(0, "a", 1.0, 1.0)], true)];
        assert!(render(&base, &other_scenario, &keyed).unwrap_err().contains("no scenario j"));
    }
}
