//! `--json`: the machine-readable report, one object per scenario with every
//! run's trace hash, findings, violations and figures. Other tools read it:
//! its field names and values do not change (fields are only added).
//! `cargo xtask sim --merge` reads it back: a shard's report carries which
//! slice it is and how many seeds the whole plan gives each scenario, so
//! the merge can tell a complete set of shards from a partial one.

use super::*;
use serde::Deserialize;

#[derive(Serialize)]
pub(super) struct JsonScenario<'a> {
    pub(super) scenario: &'a str,
    pub(super) description: &'a str,
    pub(super) expected: String,
    pub(super) as_expected: bool,
    pub(super) missing: Vec<Finding>,
    pub(super) unexpected: Vec<(Finding, Vec<u64>)>,
    pub(super) over_budget: Vec<(u64, f64)>,
    pub(super) busy_followers: Vec<(u64, f64)>,
    pub(super) late_reads: Vec<(u64, f64)>,
    pub(super) slow_failovers: Vec<(u64, f64)>,
    pub(super) slow_stops: Vec<(u64, f64)>,
    pub(super) lost_terms: Vec<(u64, usize)>,
    pub(super) aborted_stops: Vec<(u64, usize)>,
    pub(super) slow_leaves: Vec<(u64, f64)>,
    pub(super) slow_crashes: Vec<(u64, f64)>,
    pub(super) slow_joins: Vec<(u64, f64)>,
    pub(super) slow_creations: Vec<(u64, f64)>,
    pub(super) slow_rewrite_stops: Vec<(u64, f64)>,
    pub(super) late_evictions: Vec<(u64, f64)>,
    pub(super) slow_eviction_handoffs: Vec<(u64, f64)>,
    pub(super) slow_abandon_stops: Vec<(u64, f64)>,
    /// Replayed seeds whose second trace differed: seed, first and second
    /// trace hash.
    pub(super) diverged: Vec<(u64, String, String)>,
    pub(super) runs: Vec<JsonRun<'a>>,
    pub(super) errors: &'a [(u64, String)],
    /// Seeds run twice to compare their traces.
    pub(super) replayed: usize,
    /// `K/N` when this is one shard's slice of the runs.
    pub(super) shard: Option<String>,
    /// How many seeds the whole plan runs the scenario with, over every
    /// shard.
    pub(super) planned_seeds: usize,
    /// The seed a sweep drew its seeds from.
    pub(super) sweep_seed: Option<u64>,
}

#[derive(Serialize)]
pub(super) struct JsonRun<'a> {
    pub(super) seed: u64,
    pub(super) trace_hash: String,
    pub(super) findings: BTreeSet<Finding>,
    pub(super) violations: &'a [hoplock_sim::invariants::Violation],
    pub(super) stats: &'a hoplock_sim::runner::Stats,
}

pub(super) fn json_report<'a>(
    scenarios: &'a [Named],
    outcomes: &'a [Outcome],
    options: &Options,
) -> Vec<JsonScenario<'a>> {
    scenarios
        .iter()
        .zip(outcomes)
        .map(|(named, outcome)| JsonScenario {
            scenario: &named.name,
            description: &named.scenario.description,
            expected: named.scenario.expect.to_string(),
            as_expected: outcome.as_expected(),
            missing: outcome.verdict.missing.clone(),
            unexpected: outcome.verdict.unexpected.clone(),
            over_budget: outcome.verdict.over_budget.clone(),
            busy_followers: outcome.verdict.busy_followers.clone(),
            late_reads: outcome.verdict.late_reads.clone(),
            slow_failovers: outcome.verdict.slow_failovers.clone(),
            slow_stops: outcome.verdict.slow_stops.clone(),
            lost_terms: outcome.verdict.lost_terms.clone(),
            aborted_stops: outcome.verdict.aborted_stops.clone(),
            slow_leaves: outcome.verdict.slow_leaves.clone(),
            slow_crashes: outcome.verdict.slow_crashes.clone(),
            slow_joins: outcome.verdict.slow_joins.clone(),
            slow_creations: outcome.verdict.slow_creations.clone(),
            slow_rewrite_stops: outcome.verdict.slow_rewrite_stops.clone(),
            late_evictions: outcome.verdict.late_evictions.clone(),
            slow_eviction_handoffs: outcome.verdict.slow_eviction_handoffs.clone(),
            slow_abandon_stops: outcome.verdict.slow_abandon_stops.clone(),
            diverged: outcome
                .diverged
                .iter()
                .map(|d| (d.seed, format!("{:016x}", d.first), format!("{:016x}", d.again)))
                .collect(),
            runs: outcome
                .reports
                .iter()
                .map(|report| JsonRun {
                    seed: report.seed,
                    trace_hash: format!("{:016x}", report.trace_hash),
                    findings: hoplock_sim::scenario::findings(report),
                    violations: &report.violations,
                    stats: &report.stats,
                })
                .collect(),
            errors: &outcome.errors,
            replayed: outcome.replayed,
            shard: options.shard.map(|shard| shard.to_string()),
            planned_seeds: outcome.planned_seeds,
            sweep_seed: options.sweep.map(|sweep| sweep.seed),
        })
        .collect()
}

/// One scenario of a `--json` report, as `--merge` reads it back.
#[derive(Deserialize)]
pub(super) struct ReadScenario {
    pub(super) scenario: String,
    /// Whether the run turned out as its file expects; `--speedup` says.
    #[serde(default)]
    pub(super) as_expected: bool,
    pub(super) runs: Vec<ReadRun>,
    pub(super) errors: Vec<(u64, String)>,
    pub(super) diverged: Vec<(u64, String, String)>,
    /// Absent from reports of releases before sharding; `--speedup` reads
    /// those too.
    #[serde(default)]
    pub(super) replayed: usize,
    pub(super) shard: Option<String>,
    #[serde(default)]
    pub(super) planned_seeds: usize,
    pub(super) sweep_seed: Option<u64>,
}

/// One run of a `--json` report, as `--merge` reads it back.
#[derive(Deserialize)]
pub(super) struct ReadRun {
    pub(super) seed: u64,
    pub(super) trace_hash: String,
    pub(super) violations: Vec<hoplock_sim::invariants::Violation>,
    pub(super) stats: hoplock_sim::runner::Stats,
}
