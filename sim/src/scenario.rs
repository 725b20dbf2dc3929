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
}

fn default_seeds() -> u64 {
    DEFAULT_SEEDS
}

/// What a scenario's runs must show.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawExpect", into = "RawExpect")]
pub enum Expect {
    /// No seed breaks any property.
    Safe,
    /// Each finding shows in at least one seed.
    Findings(Vec<Finding>),
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum RawExpect {
    Word(String),
    List(Vec<String>),
}

impl TryFrom<RawExpect> for Expect {
    type Error = String;

    fn try_from(raw: RawExpect) -> Result<Expect, String> {
        match raw {
            RawExpect::Word(word) if word == "safe" => Ok(Expect::Safe),
            RawExpect::Word(word) => Err(format!(
                "expect must be \"safe\" or a list of findings such as [\"one-holder-per-generation\"], not {word:?}"
            )),
            RawExpect::List(names) if names.is_empty() => {
                Err("expect = [] would accept anything; write expect = \"safe\" instead".into())
            }
            RawExpect::List(names) => {
                names.iter().map(|name| name.parse()).collect::<Result<_, _>>().map(Expect::Findings)
            }
        }
    }
}

impl From<Expect> for RawExpect {
    fn from(expect: Expect) -> RawExpect {
        match expect {
            Expect::Safe => RawExpect::Word("safe".into()),
            Expect::Findings(findings) => RawExpect::List(findings.iter().map(|f| f.name().to_string()).collect()),
        }
    }
}

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expect::Safe => f.write_str("safe"),
            Expect::Findings(findings) => {
                let names: Vec<&str> = findings.iter().map(|finding| finding.name()).collect();
                f.write_str(&names.join(", "))
            }
        }
    }
}

/// Something a run can show: a broken property, or stale writes that the
/// fence rejected (not a violation, but a scenario may require it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Finding {
    /// A property was broken.
    Violation(Property),
    /// A leader's writes arrived after its term and the fence rejected
    /// every one of them.
    StaleWritesRejected,
    /// An older term's writes were accepted after a newer term began,
    /// because it had not written yet. Reported, never a violation.
    StaleWritesAccepted,
}

impl Finding {
    /// The name scenario files use.
    pub fn name(self) -> &'static str {
        match self {
            Finding::Violation(property) => property.name(),
            Finding::StaleWritesRejected => "stale-writes-rejected",
            Finding::StaleWritesAccepted => "stale-writes-accepted",
        }
    }

    /// What it looks like, in words.
    pub fn summary(self) -> &'static str {
        match self {
            Finding::Violation(property) => property.summary(),
            Finding::StaleWritesRejected => "stale writes, all rejected by the fence",
            Finding::StaleWritesAccepted => "stale writes accepted before the newer term wrote",
        }
    }

    /// Every finding, in report order.
    pub fn all() -> Vec<Finding> {
        let mut all: Vec<Finding> = Property::ALL.into_iter().map(Finding::Violation).collect();
        all.push(Finding::StaleWritesRejected);
        all.push(Finding::StaleWritesAccepted);
        all
    }

    /// Whether it is a broken property.
    pub fn is_violation(self) -> bool {
        matches!(self, Finding::Violation(_))
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Finding {
    type Err = String;

    fn from_str(name: &str) -> Result<Finding, String> {
        Finding::all().into_iter().find(|finding| finding.name() == name).ok_or_else(|| {
            let known: Vec<&str> = Finding::all().into_iter().map(Finding::name).collect();
            format!("unknown finding {name:?}; known: {}", known.join(", "))
        })
    }
}

impl TryFrom<String> for Finding {
    type Error = String;

    fn try_from(name: String) -> Result<Finding, String> {
        name.parse()
    }
}

impl From<Finding> for String {
    fn from(finding: Finding) -> String {
        finding.name().to_string()
    }
}

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

/// The runs whose longest duration in `durations_us` exceeds `bound_ms`:
/// seed and that duration, in milliseconds. Nothing without a bound.
fn over_bound_ms(
    reports: &[Report],
    bound_ms: Option<u64>,
    durations_us: impl Fn(&Stats) -> &[u64],
) -> Vec<(u64, f64)> {
    let Some(bound_ms) = bound_ms else { return Vec::new() };
    reports
        .iter()
        .filter_map(|report| {
            let longest = durations_us(&report.stats).iter().copied().max()?;
            (longest > bound_ms.saturating_mul(1000)).then_some((report.seed, longest as f64 / 1000.0))
        })
        .collect()
}

/// The runs whose `count` is above `bound`, if the file sets one: seed
/// and count.
fn over_bound_count(reports: &[Report], bound: Option<u64>, count: impl Fn(&Stats) -> usize) -> Vec<(u64, usize)> {
    let Some(bound) = bound else { return Vec::new() };
    reports
        .iter()
        .map(|report| (report.seed, count(&report.stats)))
        .filter(|(_, count)| *count as u64 > bound)
        .collect()
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

/// What one run showed.
pub fn findings(report: &Report) -> BTreeSet<Finding> {
    let mut findings: BTreeSet<Finding> =
        report.violations.iter().map(|violation| Finding::Violation(violation.property)).collect();
    if report.stats.stale_writes_rejected > 0 {
        findings.insert(Finding::StaleWritesRejected);
    }
    if report.stats.stale_writes_accepted > 0 {
        findings.insert(Finding::StaleWritesAccepted);
    }
    findings
}

/// How a scenario's runs compare with what it expects.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Verdict {
    /// Every finding, with the seeds that showed it.
    pub found: BTreeMap<Finding, Vec<u64>>,
    /// Expected findings no seed showed.
    pub missing: Vec<Finding>,
    /// Violations neither expected nor tolerated, with the seeds that
    /// showed them.
    pub unexpected: Vec<(Finding, Vec<u64>)>,
    /// Runs over the request budget: seed and requests per leader-hour (or
    /// per member-hour, in keyed worlds).
    pub over_budget: Vec<(u64, f64)>,
    /// Runs whose followers read more often than
    /// `max_follower_reads_per_ttl`: seed and reads per TTL.
    pub busy_followers: Vec<(u64, f64)>,
    /// Runs in which a follower saw a new version later than
    /// `max_version_lag_ms`: seed and the longest lag, in milliseconds.
    pub late_reads: Vec<(u64, f64)>,
    /// Runs with a handover slower than `max_failover_ms`: seed and the
    /// slowest handover, in milliseconds.
    pub slow_failovers: Vec<(u64, f64)>,
    /// Runs with a stop slower than `max_stop_ms`: seed and the slowest
    /// stop, in milliseconds.
    pub slow_stops: Vec<(u64, f64)>,
    /// Runs that lost more terms than `max_lost_terms`: seed and count.
    pub lost_terms: Vec<(u64, usize)>,
    /// Runs that aborted more key stops than `max_aborted_stops`: seed and
    /// count.
    pub aborted_stops: Vec<(u64, usize)>,
    /// Runs with a keyed leave slower than `max_leave_handoff_ms`: seed and
    /// the slowest, in milliseconds.
    pub slow_leaves: Vec<(u64, f64)>,
    /// Runs with a keyed crash handoff slower than `max_crash_handoff_ms`.
    pub slow_crashes: Vec<(u64, f64)>,
    /// Runs with a keyed join slower than `max_join_handoff_ms`.
    pub slow_joins: Vec<(u64, f64)>,
    /// Runs with a created object slower to act on than
    /// `max_create_handoff_ms`.
    pub slow_creations: Vec<(u64, f64)>,
    /// Runs in which a key was acted for longer than `max_rewrite_stop_ms`
    /// after a rewrite of the object at the same view.
    pub slow_rewrite_stops: Vec<(u64, f64)>,
    /// Runs with an eviction later than `max_eviction_delay_ms` after the
    /// evicted member's last write.
    pub late_evictions: Vec<(u64, f64)>,
    /// Runs in which an evicted member's keys took longer than
    /// `max_eviction_handoff_ms` to start elsewhere.
    pub slow_eviction_handoffs: Vec<(u64, f64)>,
    /// Runs in which a key's work went on longer than
    /// `max_abandon_stop_ms` after its member's run future was dropped.
    pub slow_abandon_stops: Vec<(u64, f64)>,
}

impl Verdict {
    /// Whether the outcome is what the scenario expects.
    pub fn as_expected(&self) -> bool {
        self.missing.is_empty() && self.unexpected.is_empty() && !self.breaks_a_bound()
    }

    /// Whether a run broke one of the file's bounds or budgets (requests,
    /// follower reads, failover, stop, lost terms, aborted stops, keyed
    /// handoffs, stops after a rewrite of the membership object, evictions, or stops
    /// after an abandon).
    pub fn breaks_a_bound(&self) -> bool {
        !(self.over_budget.is_empty()
            && self.busy_followers.is_empty()
            && self.late_reads.is_empty()
            && self.slow_failovers.is_empty()
            && self.slow_stops.is_empty()
            && self.lost_terms.is_empty()
            && self.aborted_stops.is_empty()
            && self.slow_leaves.is_empty()
            && self.slow_crashes.is_empty()
            && self.slow_joins.is_empty()
            && self.slow_creations.is_empty()
            && self.slow_rewrite_stops.is_empty()
            && self.late_evictions.is_empty()
            && self.slow_eviction_handoffs.is_empty()
            && self.slow_abandon_stops.is_empty())
    }

    /// A seed that reproduces the outcome's first problem: the first seed
    /// of the first unexpected violation, else the first run over budget or
    /// with a slow handover, or `None` when only an expected finding is
    /// missing (no single seed shows an absence).
    pub fn replay_seed(&self) -> Option<u64> {
        let violation = self.unexpected.first().and_then(|(_, seeds)| seeds.first().copied());
        violation
            .or_else(|| self.over_budget.first().map(|(seed, _)| *seed))
            .or_else(|| self.busy_followers.first().map(|(seed, _)| *seed))
            .or_else(|| self.late_reads.first().map(|(seed, _)| *seed))
            .or_else(|| self.slow_failovers.first().map(|(seed, _)| *seed))
            .or_else(|| self.slow_stops.first().map(|(seed, _)| *seed))
            .or_else(|| self.lost_terms.first().map(|(seed, _)| *seed))
            .or_else(|| self.aborted_stops.first().map(|(seed, _)| *seed))
            .or_else(|| self.slow_leaves.first().map(|(seed, _)| *seed))
            .or_else(|| self.slow_crashes.first().map(|(seed, _)| *seed))
            .or_else(|| self.slow_joins.first().map(|(seed, _)| *seed))
            .or_else(|| self.slow_creations.first().map(|(seed, _)| *seed))
            .or_else(|| self.slow_rewrite_stops.first().map(|(seed, _)| *seed))
            .or_else(|| self.late_evictions.first().map(|(seed, _)| *seed))
            .or_else(|| self.slow_eviction_handoffs.first().map(|(seed, _)| *seed))
            .or_else(|| self.slow_abandon_stops.first().map(|(seed, _)| *seed))
    }
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
mod tests {
    use super::*;

    const MINIMAL: &str = "description = \"x\"\nexpect = \"safe\"\nduration_ms = 1000\n\n[[nodes]]\nname = \"a\"\n";

    fn error(text: &str) -> ScenarioError {
        Scenario::parse("s.toml", text).unwrap_err()
    }

    #[test]
    fn a_minimal_file_takes_the_defaults() {
        let scenario = Scenario::parse("s.toml", MINIMAL).unwrap();
        assert_eq!(scenario.seeds, DEFAULT_SEEDS);
        assert_eq!(scenario.tick_ms, 10);
        assert_eq!(scenario.world().nodes[0].elector.ttl_ms, 6_000);
    }

    #[test]
    fn a_wrong_type_names_the_line_and_the_field_path() {
        let err = error(&format!("{MINIMAL}\n[nodes.elector]\nttl_ms = \"six\"\n"));
        assert_eq!(err.line, 9, "{err}");
        assert_eq!(err.field, "nodes[0].elector.ttl_ms", "{err}");
        assert!(err.message.contains("invalid type"), "{err}");
    }

    #[test]
    fn an_unknown_field_is_refused_with_its_name() {
        let err = error(&MINIMAL.replace("name = \"a\"", "name = \"a\"\nttl = 5"));
        assert_eq!(err.line, 7, "{err}");
        assert!(err.message.contains("unknown field `ttl`"), "{err}");
    }

    #[test]
    fn a_missing_field_and_bad_syntax_are_reported() {
        let err = error(&MINIMAL.replace("duration_ms = 1000\n", ""));
        assert!(err.message.contains("duration_ms"), "{err}");
        let err = error("description = \"x\nexpect = 1");
        assert_eq!(err.line, 1, "{err}");
        assert!(err.field.is_empty());
    }

    #[test]
    fn work_that_returns_under_the_run_api_is_refused() {
        // run() has no voluntary release, so the history would record a
        // release the elector never made and judge a handover that cannot
        // happen.
        let text = format!("{MINIMAL}workload = {{ api = \"run\", release_after_ms = 4000 }}\n");
        let err = error(&text);
        assert!(
            err.field.ends_with("workload.release_after_ms") && err.message.contains("no voluntary release"),
            "{err}"
        );
        let text = format!("{MINIMAL}workload = {{ api = \"lead\", release_after_ms = 4000 }}\n");
        Scenario::parse("s.toml", &text).unwrap();
    }

    #[test]
    fn expectations_are_checked_by_name() {
        let err = error(&MINIMAL.replace("\"safe\"", "[\"two leaders\"]"));
        assert_eq!((err.line, err.field.as_str()), (2, "expect"), "{err}");
        assert!(err.message.contains("one-holder-per-generation"), "lists the known names: {err}");
        let err = error(&MINIMAL.replace("\"safe\"", "\"fine\""));
        assert!(err.message.contains("\"safe\""), "{err}");
        let err = error(&MINIMAL.replace("\"safe\"", "[]"));
        assert!(err.message.contains("accept anything"), "{err}");
    }

    #[test]
    fn a_schedule_naming_an_unknown_node_or_mode_is_refused() {
        let err = error(&format!("{MINIMAL}\n[[schedule]]\nat_ms = 5\naction = \"crash\"\nnode = \"zz\"\n"));
        assert_eq!(err.field, "schedule", "{err}");
        assert_eq!(err.line, 8, "{err}");
        assert!(err.message.contains("\"zz\""), "{err}");
        let err = error(&format!("{MINIMAL}\n[[schedule]]\nat_ms = 5\naction = \"explode\"\nnode = \"a\"\n"));
        assert!(err.message.contains("explode"), "{err}");
        let err = error(&format!("{MINIMAL}\n[[schedule]]\nat_ms = 5\naction = \"pause\"\nnode = \"a\"\nfor = 3\n"));
        assert_eq!(err.field, "schedule[0]", "{err}");
        assert!(err.message.contains("unknown field `for`"), "{err}");
        let err = error(&format!("{MINIMAL}\n[[schedule]]\nat_ms = 5\naction = \"crash\"\nnode = \"s3\"\n"));
        assert!(err.message.contains("applies to nodes"), "{err}");
        let err = error(&format!("{MINIMAL}\n[s3]\nmode = \"garage\"\n"));
        assert_eq!(err.field, "s3.mode", "{err}");
        assert!(err.message.contains("ignore-if-none-match"), "{err}");
    }

    #[test]
    fn a_membership_edit_takes_exactly_one_form_and_a_known_member() {
        let keyed = format!("{MINIMAL}\n[keyed]\nkeys = 4\n");
        let edit = |fields: &str| format!("{keyed}\n[[schedule]]\nat_ms = 5\naction = \"write-members\"\n{fields}");
        for fields in ["", "raw = \"x\"\nviews_back = 1\n", "views_back = 1\ndrop_member = \"a\"\n"] {
            let err = error(&edit(fields));
            assert_eq!(err.field, "schedule", "{err}");
            assert!(
                err.message.contains("exactly one of raw, views_back, drop_member and reincarnate_member"),
                "{err}"
            );
        }
        for field in ["drop_member", "reincarnate_member"] {
            let err = error(&edit(&format!("{field} = \"zz\"\n")));
            assert!(err.message.contains("\"zz\", which is no member's id"), "{err}");
            Scenario::parse("s.toml", &edit(&format!("{field} = \"a\"\n"))).unwrap();
        }
    }

    #[test]
    fn zero_seeds_and_zero_ttl_are_refused() {
        let err = error(&MINIMAL.replace("expect", "seeds = 0\nexpect"));
        assert_eq!((err.line, err.field.as_str()), (2, "seeds"), "{err}");
        let err = error(&format!("{MINIMAL}\n[nodes.elector]\nttl_ms = 0\n"));
        assert_eq!((err.line, err.field.as_str()), (9, "nodes[0].elector.ttl_ms"), "{err}");
    }

    #[test]
    fn a_stop_margin_shorter_than_the_tick_is_refused() {
        let err = error(&format!("{MINIMAL}\n[nodes.elector]\nstop_margin_ms = 5\n"));
        assert_eq!((err.line, err.field.as_str()), (9, "nodes[0].elector.stop_margin_ms"), "{err}");
        assert!(err.message.contains("tick"), "{err}");
        assert!(Scenario::parse("s.toml", &format!("{MINIMAL}\n[nodes.elector]\nstop_margin_ms = 10\n")).is_ok());
    }

    #[test]
    fn a_scenario_survives_a_round_trip_through_toml() {
        let mut scenario = Scenario::parse("s.toml", MINIMAL).unwrap();
        scenario.expect = Expect::Findings(vec![Finding::Violation(Property::NoBeliefOverlap)]);
        scenario.schedule.push(Scheduled { at_ms: 5, action: crate::world::Action::Crash { node: "a".into() } });
        let text = scenario.to_toml().unwrap();
        assert_eq!(Scenario::parse("again.toml", &text).unwrap(), scenario, "{text}");
    }

    #[test]
    fn the_verdict_wants_every_expected_finding_and_no_other_violation() {
        let scenario = Scenario::parse("s.toml", MINIMAL).unwrap();
        let verdict = Verdict { found: BTreeMap::new(), ..Verdict::default() };
        assert!(verdict.as_expected());
        let expecting = Scenario {
            expect: Expect::Findings(vec![Finding::StaleWritesRejected]),
            tolerate: vec![Finding::Violation(Property::Liveness)],
            ..scenario
        };
        assert_eq!(expecting.verdict(&[]).missing, vec![Finding::StaleWritesRejected]);
    }

    #[test]
    fn a_handover_slower_than_the_bound_is_unexpected() {
        let report = |seed, gaps_ms: &[u64]| Report {
            seed,
            entries: Vec::new(),
            trace_hash: 0,
            violations: Vec::new(),
            stats: crate::runner::Stats {
                failover_gaps_us: gaps_ms.iter().map(|ms| ms * 1000).collect(),
                ..Default::default()
            },
        };
        let reports = [report(0, &[300, 900]), report(1, &[6100, 200]), report(2, &[])];
        let unbounded = Scenario::parse("s.toml", MINIMAL).unwrap();
        assert!(unbounded.verdict(&reports).as_expected());
        let bounded = Scenario { max_failover_ms: Some(1000), ..unbounded };
        let verdict = bounded.verdict(&reports);
        assert_eq!(verdict.slow_failovers, vec![(1, 6100.0)]);
        assert!(!verdict.as_expected());
        assert_eq!(verdict.replay_seed(), Some(1));
        let text = format!("max_failover_ms = 1000\n{MINIMAL}");
        assert_eq!(Scenario::parse("s.toml", &text).unwrap().max_failover_ms, Some(1000));
    }

    #[test]
    fn a_keyed_handoff_slower_than_its_bound_is_unexpected() {
        let report = |seed, leaves_ms: &[u64], crashes_ms: &[u64], joins_ms: &[u64], creations_ms: &[u64]| Report {
            seed,
            entries: Vec::new(),
            trace_hash: 0,
            violations: Vec::new(),
            stats: crate::runner::Stats {
                leave_handoffs_us: leaves_ms.iter().map(|ms| ms * 1000).collect(),
                crash_handoffs_us: crashes_ms.iter().map(|ms| ms * 1000).collect(),
                join_handoffs_us: joins_ms.iter().map(|ms| ms * 1000).collect(),
                create_handoffs_us: creations_ms.iter().map(|ms| ms * 1000).collect(),
                ..Default::default()
            },
        };
        let reports = [
            report(0, &[800], &[6_500], &[900], &[6_100]),
            report(1, &[2_600], &[6_600], &[1_000], &[6_100]),
            report(2, &[900], &[11_000], &[1_000], &[6_100]),
            report(3, &[900], &[6_000], &[1_900], &[6_100]),
            report(4, &[900], &[6_000], &[1_000], &[7_300]),
        ];
        let text = format!(
            "max_leave_handoff_ms = 2300\nmax_crash_handoff_ms = 10200\nmax_join_handoff_ms = 1500\n\
             max_create_handoff_ms = 6500\n{MINIMAL}"
        );
        let bounded = Scenario::parse("s.toml", &text).unwrap();
        let verdict = bounded.verdict(&reports);
        assert_eq!(verdict.slow_leaves, vec![(1, 2600.0)]);
        assert_eq!(verdict.slow_crashes, vec![(2, 11000.0)]);
        assert_eq!(verdict.slow_joins, vec![(3, 1900.0)]);
        assert_eq!(verdict.slow_creations, vec![(4, 7300.0)]);
        assert!(!verdict.as_expected());
        assert_eq!(verdict.replay_seed(), Some(1));
    }

    #[test]
    fn an_aborted_stop_over_the_bound_is_unexpected() {
        let report = |seed, aborted_stops| Report {
            seed,
            entries: Vec::new(),
            trace_hash: 0,
            violations: Vec::new(),
            stats: crate::runner::Stats { aborted_stops, ..Default::default() },
        };
        let reports = [report(0, 0), report(1, 3)];
        let unbounded = Scenario::parse("s.toml", MINIMAL).unwrap();
        assert!(unbounded.verdict(&reports).as_expected());
        let bounded = Scenario::parse("s.toml", &format!("max_aborted_stops = 0\n{MINIMAL}")).unwrap();
        let verdict = bounded.verdict(&reports);
        assert_eq!(verdict.aborted_stops, vec![(1, 3)]);
        assert!(!verdict.as_expected());
        assert_eq!(verdict.replay_seed(), Some(1));
    }
}
