//! Judging a scenario's runs against its expectation and its bounds: the
//! findings each run showed, and every bound a run broke.

use super::*;

/// The runs whose longest duration in `durations_us` exceeds `bound_ms`:
/// seed and that duration, in milliseconds. Nothing without a bound.
pub(super) fn over_bound_ms(
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
pub(super) fn over_bound_count(
    reports: &[Report],
    bound: Option<u64>,
    count: impl Fn(&Stats) -> usize,
) -> Vec<(u64, usize)> {
    let Some(bound) = bound else { return Vec::new() };
    reports
        .iter()
        .map(|report| (report.seed, count(&report.stats)))
        .filter(|(_, count)| *count as u64 > bound)
        .collect()
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
