//! Scenario files: a [`World`] plus how many seeds to run it with and what
//! the runs must show.
//!
//! A scenario is TOML (the format is documented in `scenarios/README.md`).
//! Loading one checks every field; a mistake comes back as a
//! [`ScenarioError`] naming the file, the line and column, and the field's
//! path, such as `nodes[1].elector.ttl_ms`.
//!
//! The expected outcome is either `"safe"` (no seed may break any property)
//! or a list of [`Finding`]s, each of which some seed must show; any other
//! violation is unexpected unless the file lists it under `tolerate`.
//!
//! ```
//! use hoplock_sim::scenario::{Expect, Scenario};
//!
//! let text = r#"
//! description = "Two nodes, nothing goes wrong."
//! expect = "safe"
//! duration_ms = 20000
//!
//! [[nodes]]
//! name = "a"
//!
//! [[nodes]]
//! name = "b"
//! "#;
//! let scenario = Scenario::parse("steady.toml", text)?;
//! assert_eq!(scenario.expect, Expect::Safe);
//! assert_eq!(scenario.seeds, hoplock_sim::scenario::DEFAULT_SEEDS);
//!
//! let typo = text.replace("duration_ms", "duration");
//! let err = Scenario::parse("steady.toml", &typo).unwrap_err();
//! assert_eq!(err.line, 4);
//! assert!(err.to_string().starts_with("steady.toml:4:"), "{err}");
//! # Ok::<(), hoplock_sim::scenario::ScenarioError>(())
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::invariants::Property;
use crate::runner::{self, Report, Stats};
use crate::world::{NetworkSpec, NodeSpec, S3Spec, Scheduled, World};

/// The seeds a scenario runs by default.
pub const DEFAULT_SEEDS: u64 = 48;

/// One scenario file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// One or two sentences: what happens and why it matters.
    pub description: String,
    /// How many seeds a default run uses (seeds `0..seeds`).
    #[serde(default = "default_seeds")]
    pub seeds: u64,
    /// What the runs must show.
    pub expect: Expect,
    /// Violations that may show without making the outcome unexpected.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerate: Vec<Finding>,
    /// A budget: the most S3 requests (of all nodes together) per hour of
    /// leadership that any run may make. A contender that polls in a busy
    /// loop is not unsafe, but it is a bug, and the bill shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_requests_per_leader_hour: Option<u64>,
    /// A budget for keyed worlds: the most S3 requests per member-hour
    /// (every member process from its start to its crash, its leave or the
    /// end of the run) that any run may make.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_requests_per_member_hour: Option<u64>,
    /// A bound: the longest any handover to another node may take, from
    /// the old leader's end to the new leader's start, as the failover
    /// figures measure it. A handover that should take one poll but waits
    /// out a TTL is not unsafe, but users pay for it in downtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failover_ms: Option<u64>,
    /// A budget: the most reads per TTL a follower may make on average
    /// over the steady part of any run, retries included, as
    /// [`crate::follower_reads`] counts them. Followers that go back to
    /// polling are not unsafe, but they multiply the bill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_follower_reads_per_ttl: Option<f64>,
    /// A bound: the longest any follower may take to see a new version of
    /// the lease record, as [`crate::version_lag`] measures it over the
    /// steady part of the run. A version seen late is a takeover that comes
    /// late; reads that follow the renewals see each within about a step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_version_lag_ms: Option<u64>,
    /// A bound: the longest any scheduled `stop` may take to be honoured,
    /// from the stop to the node's campaign returning `Stopped` (a term in
    /// progress is released first). An operator waiting on a shutdown
    /// waits this long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_stop_ms: Option<u64>,
    /// A bound: the most terms any run may lose involuntarily (expired,
    /// superseded, deleted or failed, as the elector's events report; in
    /// keyed worlds, evictions and terms that ran out under a live entry).
    /// A leader that steps down when its renewals could still have gone
    /// through is not unsafe, but every needless handover costs downtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_lost_terms: Option<u64>,
    /// A bound for keyed worlds: the most key stops any run may make by
    /// dropping work before it wound down, leaving out a crashed node's
    /// ([`crate::keyed_aborts`]). A key that moves while its member's term
    /// holds must be given until the term's end to stop; work that honours
    /// cancellation then always winds down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_aborted_stops: Option<u64>,
    /// A bound for keyed worlds: the longest any graceful leave may take to
    /// hand its keys on, from the scheduled stop to the last of them
    /// starting elsewhere (W + P + 2 RTT in the design).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_leave_handoff_ms: Option<u64>,
    /// A bound for keyed worlds: the same from a crash (TTL·(1+ρ) + 2P +
    /// lock-delay + 3 RTT in the design).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_crash_handoff_ms: Option<u64>,
    /// A bound for keyed worlds: the longest any join may take to become a
    /// view the joiner acts in, from the join's commit to the joiner's
    /// first key starting (P + W + P + 3 RTT in the design: every other
    /// member reads the join, stops what moves and adopts it at once, and
    /// the joiner reads that the view is active).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_join_handoff_ms: Option<u64>,
    /// A bound for keyed worlds: the longest any object a member created
    /// may take to have a key started on it, from the creation's commit
    /// ((TTL + lock-delay)·(1+ρ) + R/8 + 2 RTT in the design: the creator's
    /// wait, then its adoption, which makes the view active; the adoption
    /// comes a retry gap, R/8, after the creator's last request at most).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_create_handoff_ms: Option<u64>,
    /// A bound for keyed worlds: the longest any eviction may come after
    /// the evicted member's last write (P + TTL·(1+ρ) + R/8 + 3 RTT in the
    /// design: the evictor first sees that write on a read, and wakes for
    /// the instant its TTL has passed since; see [`crate::keyed_evictions`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_eviction_delay_ms: Option<u64>,
    /// A bound for keyed worlds: the longest the keys of an evicted member
    /// may take to start elsewhere, from the eviction's commit (P + RTT +
    /// lock-delay·(1+ρ) + a tick: the new owners read the eviction and
    /// wait out their lock-delay, waking for its end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_eviction_handoff_ms: Option<u64>,
    /// A bound for keyed worlds: the longest any key's work may go on
    /// after its member's run future was dropped (`abandon`), from the
    /// drop to the key's stop (a tick in the design: the key tasks are
    /// aborted as the future is dropped; see [`crate::keyed_abandons`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_abandon_stop_ms: Option<u64>,
    /// A bound for keyed worlds: the longest any key may still be acted
    /// for after someone rewrote the membership object at a view number
    /// the members know (P + a read's round trip in the design: members
    /// fail closed at their next read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rewrite_stop_ms: Option<u64>,
    /// How long each run lasts, in simulated milliseconds.
    pub duration_ms: u64,
    /// turmoil's tick, in milliseconds.
    #[serde(default = "crate::world::default_tick_ms")]
    pub tick_ms: u64,
    /// Latency and loss on every simulated link.
    #[serde(default)]
    pub network: NetworkSpec,
    /// The fake S3's mode and faults.
    #[serde(default)]
    pub s3: S3Spec,
    /// Keyed writers instead of electors, sharing this many keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyed: Option<crate::world::KeyedSpec>,
    /// The electing nodes.
    pub nodes: Vec<NodeSpec>,
    /// Faults at set times.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schedule: Vec<Scheduled>,
    /// What only the chaos harness reads; the simulator ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chaos: Option<ChaosSpec>,
}

fn default_seeds() -> u64 {
    DEFAULT_SEEDS
}

mod chaos;
pub use chaos::{ChaosAction, ChaosScheduled, ChaosSpec};
mod expect;
pub use expect::{Expect, Finding};
mod verdict;
use verdict::*;
pub use verdict::{Verdict, findings};

/// A scenario file that could not be read or is malformed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {field}{message}", field = if field.is_empty() { String::new() } else { format!("{field}: ") })]
pub struct ScenarioError {
    /// The file, as given.
    pub file: String,
    /// 1-based line; 0 when the whole file is at fault.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// The field's path, such as `nodes[1].elector.ttl_ms`; empty when the
    /// mistake is not in one field.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl Scenario {
    /// Reads and checks the scenario in `path`.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|err| ScenarioError {
            file: file.clone(),
            line: 0,
            column: 0,
            field: String::new(),
            message: format!("cannot read it: {err}"),
        })?;
        Scenario::parse(&file, &text)
    }

    /// Parses and checks scenario text; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<Scenario, ScenarioError> {
        let error = |span: Option<std::ops::Range<usize>>, field: String, message: String| {
            let (line, column) = span.map_or((0, 0), |span| line_and_column(text, span.start));
            ScenarioError { file: file.to_string(), line, column, field, message }
        };
        let deserializer = toml::Deserializer::parse(text)
            .map_err(|err| error(err.span(), String::new(), err.message().trim().to_string()))?;
        let scenario: Scenario = serde_path_to_error::deserialize(deserializer).map_err(|err| {
            let field = err.path().to_string();
            let inner = err.inner();
            let field = if field == "." { String::new() } else { field };
            error(inner.span(), field, inner.message().trim().to_string())
        })?;
        scenario.check().map_err(|(field, message)| {
            let span = field_span(text, &field);
            error(span, field, message)
        })?;
        Ok(scenario)
    }

    /// The scenario as TOML, ready to be saved under `scenarios/`.
    pub fn to_toml(&self) -> Result<String, String> {
        toml::to_string(self).map_err(|err| err.to_string())
    }

    /// The simulated world the scenario describes.
    pub fn world(&self) -> World {
        World {
            nodes: self.nodes.clone(),
            s3: self.s3.clone(),
            schedule: self.schedule.clone(),
            duration_ms: self.duration_ms,
            tick_ms: self.tick_ms,
            network: self.network.clone(),
            keyed: self.keyed.clone(),
        }
    }

    /// A scenario around `world`, for generated worlds.
    pub fn from_world(description: String, world: World, expect: Expect) -> Scenario {
        Scenario {
            description,
            seeds: DEFAULT_SEEDS,
            expect,
            tolerate: Vec::new(),
            max_requests_per_leader_hour: None,
            max_requests_per_member_hour: None,
            max_failover_ms: None,
            max_follower_reads_per_ttl: None,
            max_version_lag_ms: None,
            max_stop_ms: None,
            max_lost_terms: None,
            max_aborted_stops: None,
            max_leave_handoff_ms: None,
            max_crash_handoff_ms: None,
            max_join_handoff_ms: None,
            max_create_handoff_ms: None,
            max_eviction_delay_ms: None,
            max_eviction_handoff_ms: None,
            max_abandon_stop_ms: None,
            max_rewrite_stop_ms: None,
            duration_ms: world.duration_ms,
            tick_ms: world.tick_ms,
            network: world.network,
            s3: world.s3,
            keyed: world.keyed,
            nodes: world.nodes,
            schedule: world.schedule,
            chaos: None,
        }
    }

    /// Checks what serde cannot: the world must be runnable and the numbers
    /// sane. Returns the offending field and what is wrong.
    fn check(&self) -> Result<(), (String, String)> {
        if self.seeds == 0 {
            return Err(("seeds".into(), "must be at least 1".into()));
        }
        if self.tick_ms == 0 {
            return Err(("tick_ms".into(), "must be at least 1".into()));
        }
        for (index, node) in self.nodes.iter().enumerate() {
            if node.elector.ttl_ms == 0 {
                return Err((format!("nodes[{index}].elector.ttl_ms"), "must be more than zero".into()));
            }
            if !(0.0..0.1).contains(&node.elector.drift_bound) {
                return Err((format!("nodes[{index}].elector.drift_bound"), "must be in 0..0.1".into()));
            }
        }
        runner::validate(&self.world()).map_err(|err| match err {
            runner::SimError::InvalidWorld { field, message } => (field, message),
            other => (String::new(), other.to_string()),
        })
    }

    /// Judges the reports of this scenario's runs.
    pub fn verdict(&self, reports: &[Report]) -> Verdict {
        let mut found: BTreeMap<Finding, Vec<u64>> = BTreeMap::new();
        for report in reports {
            for finding in findings(report) {
                found.entry(finding).or_default().push(report.seed);
            }
        }
        let expected: BTreeSet<Finding> = match &self.expect {
            Expect::Safe => BTreeSet::new(),
            Expect::Findings(findings) => findings.iter().copied().collect(),
        };
        let missing = expected.iter().copied().filter(|finding| !found.contains_key(finding)).collect();
        let unexpected = found
            .iter()
            .filter(|(finding, _)| {
                finding.is_violation() && !expected.contains(finding) && !self.tolerate.contains(finding)
            })
            .map(|(finding, seeds)| (*finding, seeds.clone()))
            .collect();
        let per_hour = |budget: Option<u64>, hours: fn(&Stats) -> f64| match budget {
            Some(budget) => reports
                .iter()
                .filter(|report| hours(&report.stats) > 0.0)
                .map(|report| (report.seed, report.stats.s3_requests as f64 / hours(&report.stats)))
                .filter(|(_, rate)| *rate > budget as f64)
                .collect(),
            None => Vec::new(),
        };
        let mut over_budget = per_hour(self.max_requests_per_leader_hour, |stats| stats.leader_hours);
        over_budget.extend(per_hour(self.max_requests_per_member_hour, |stats| stats.member_hours));
        let slow_failovers = over_bound_ms(reports, self.max_failover_ms, |stats| &stats.failover_gaps_us);
        let busy_followers = match self.max_follower_reads_per_ttl {
            Some(budget) => reports
                .iter()
                .filter_map(|report| Some((report.seed, report.stats.follower_reads_per_ttl?)))
                .filter(|(_, rate)| *rate > budget)
                .collect(),
            None => Vec::new(),
        };
        let late_reads = over_bound_ms(reports, self.max_version_lag_ms, |stats| &stats.version_lags_us);
        let slow_stops = over_bound_ms(reports, self.max_stop_ms, |stats| &stats.stop_latencies_us);
        let lost_terms = over_bound_count(reports, self.max_lost_terms, |stats| stats.lost_terms);
        let aborted_stops = over_bound_count(reports, self.max_aborted_stops, |stats| stats.aborted_stops);
        let slow_leaves = over_bound_ms(reports, self.max_leave_handoff_ms, |stats| &stats.leave_handoffs_us);
        let slow_crashes = over_bound_ms(reports, self.max_crash_handoff_ms, |stats| &stats.crash_handoffs_us);
        let slow_joins = over_bound_ms(reports, self.max_join_handoff_ms, |stats| &stats.join_handoffs_us);
        let slow_creations = over_bound_ms(reports, self.max_create_handoff_ms, |stats| &stats.create_handoffs_us);
        let slow_rewrite_stops = over_bound_ms(reports, self.max_rewrite_stop_ms, |stats| &stats.rewrite_stops_us);
        let late_evictions = over_bound_ms(reports, self.max_eviction_delay_ms, |stats| &stats.eviction_delays_us);
        let slow_eviction_handoffs =
            over_bound_ms(reports, self.max_eviction_handoff_ms, |stats| &stats.eviction_handoffs_us);
        let slow_abandon_stops = over_bound_ms(reports, self.max_abandon_stop_ms, |stats| &stats.abandon_stops_us);
        Verdict {
            found,
            missing,
            unexpected,
            over_budget,
            busy_followers,
            late_reads,
            slow_failovers,
            slow_stops,
            lost_terms,
            aborted_stops,
            slow_leaves,
            slow_crashes,
            slow_joins,
            slow_creations,
            slow_rewrite_stops,
            late_evictions,
            slow_eviction_handoffs,
            slow_abandon_stops,
        }
    }
}

/// The scenario files (`*.toml`) in `directory`, in name order.
pub fn files_in(directory: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(directory)? {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "toml") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// 1-based line and column of byte `offset` in `text`.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |tail| tail.chars().count()) + 1;
    (line, column)
}

/// Where the field at `path` (such as `nodes[1].elector.ttl_ms`) is set in
/// `text`, found by reading the TOML again with spans. A field that is not
/// written out (it took its default) points at the nearest table that is.
fn field_span(text: &str, path: &str) -> Option<std::ops::Range<usize>> {
    use toml::de::{DeTable, DeValue};
    fn lookup<'i>(value: &DeValue<'i>, key: &str) -> Option<toml::Spanned<DeValue<'i>>> {
        let DeValue::Table(table) = value else { return None };
        table.iter().find(|(name, _)| name.get_ref().as_ref() == key).map(|(_, value)| value.clone())
    }
    let document = DeTable::parse(text).ok()?;
    let mut span = document.span();
    let mut current = DeValue::Table(document.into_inner());
    for part in path.split('.') {
        let (key, index) = match part.split_once('[') {
            Some((key, rest)) => (key, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        let Some(value) = lookup(&current, key) else { return Some(span) };
        span = value.span();
        current = value.into_inner();
        if let Some(index) = index {
            let DeValue::Array(items) = &current else { return Some(span) };
            let Some(item) = items.get(index).cloned() else { return Some(span) };
            span = item.span();
            current = item.into_inner();
        }
    }
    Some(span)
}

#[cfg(test)]
mod tests;
