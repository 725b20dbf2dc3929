//! The table `cargo xtask sim` prints: one row per scenario.

use std::fmt::Write;

use super::{Named, Outcome};
use hoplock_sim::scenario::Finding;

/// Renders the table. Columns: scenario, seeds run, the expected outcome,
/// the outcome, the violations found (with how many seeds showed each),
/// failover gap p50/p99 over every takeover (in keyed worlds: leave and
/// crash handoffs, p50/max), S3 requests per hour of
/// leadership, followers' reads per TTL (mean over runs), and simulated
/// seconds per CPU second.
pub fn render(scenarios: &[Named], outcomes: &[Outcome]) -> String {
    let header = [
        "scenario",
        "seeds",
        "expected",
        "outcome",
        "violations",
        "failover p50/p99",
        "S3 req/leader-h",
        "reads/TTL",
        "sim-s/CPU-s",
    ];
    let mut rows: Vec<[String; 9]> = Vec::new();
    let (mut total_sim, mut total_cpu, mut total_runs) = (0.0, 0.0, 0);
    for (named, outcome) in scenarios.iter().zip(outcomes) {
        let runs = outcome.reports.len();
        let found: Vec<String> = outcome
            .verdict
            .found
            .iter()
            .filter(|(finding, _)| finding.is_violation())
            .map(|(finding, seeds)| format!("{finding} {}/{runs}", seeds.len()))
            .collect();
        let failover = failover(&outcome.reports);
        let requests: usize = outcome.reports.iter().map(|report| report.stats.s3_requests).sum();
        let leader_hours: f64 = outcome.reports.iter().map(|report| report.stats.leader_hours).sum();
        let member_hours: f64 = outcome.reports.iter().map(|report| report.stats.member_hours).sum();
        // Keyed worlds have no leader: their cost is per member-hour.
        let per_hour = if leader_hours > 0.0 {
            format!("{:.0}", requests as f64 / leader_hours)
        } else if member_hours > 0.0 {
            format!("{:.0} /member-h", requests as f64 / member_hours)
        } else {
            "-".into()
        };
        let sim: f64 = outcome.reports.iter().map(|report| report.stats.simulated_secs).sum();
        let cpu: f64 = outcome.reports.iter().map(|report| report.stats.cpu_secs).sum();
        (total_sim, total_cpu, total_runs) = (total_sim + sim, total_cpu + cpu, total_runs + runs);
        let mut outcome_text = if outcome.as_expected() { "as expected".to_string() } else { "UNEXPECTED".to_string() };
        let reported: Vec<String> = outcome
            .verdict
            .found
            .iter()
            .filter_map(|(finding, seeds)| {
                let label = match finding {
                    Finding::StaleWritesRejected => "stale writes fenced",
                    Finding::StaleWritesAccepted => "stale writes accepted",
                    Finding::Violation(_) => return None,
                };
                Some(format!("{label} {}/{runs}", seeds.len()))
            })
            .collect();
        if !reported.is_empty() {
            outcome_text.push_str(&format!(" ({})", reported.join(", ")));
        }
        rows.push([
            named.name.clone(),
            (runs + outcome.errors.len()).to_string(),
            named.scenario.expect.to_string(),
            outcome_text,
            if found.is_empty() { "none".into() } else { found.join(", ") },
            failover,
            per_hour,
            follower_reads(&outcome.reports),
            if cpu > 0.0 { format!("{:.0}", sim / cpu) } else { "-".into() },
        ]);
    }
    let mut out = columns(&header.map(String::from), &rows);
    let as_expected = outcomes.iter().filter(|outcome| outcome.as_expected()).count();
    let _ = writeln!(
        out,
        "\n{as_expected}/{} scenarios as expected; {total_runs} runs, {:.0} simulated s in {:.1} CPU s ({:.0}x)",
        outcomes.len(),
        total_sim,
        total_cpu,
        if total_cpu > 0.0 { total_sim / total_cpu } else { 0.0 }
    );
    let replayed: usize = outcomes.iter().map(|outcome| outcome.replayed).sum();
    if replayed > 0 {
        let diverged: usize = outcomes.iter().map(|outcome| outcome.diverged.len()).sum();
        let _ = writeln!(out, "same seed, same trace: {replayed} seeds run twice, {diverged} gave another trace");
    }
    // What the checkers could not judge, so a reader knows how much was.
    let reports = || outcomes.iter().flat_map(|outcome| outcome.reports.iter());
    let judged: usize = reports().map(|report| report.stats.liveness_windows.checked).sum();
    let skipped: usize = reports().map(|report| report.stats.liveness_windows.skipped).sum();
    let unchecked: usize = reports().map(|report| report.stats.overlap_pairs_unchecked).sum();
    let _ = writeln!(
        out,
        "liveness windows judged {judged}, skipped {skipped} (shorter than their bound, or nobody could contend); \
         overlapping pairs outside the drift bound {unchecked}"
    );
    out
}

/// Lays `rows` out under `header` in columns padded to their widest cell,
/// with a rule of dashes under the header.
pub fn columns<R: AsRef<[String]>>(header: &[String], rows: &[R]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|title| title.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row.as_ref()) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[String]| {
        let padded: Vec<String> =
            cells.iter().zip(&widths).map(|(cell, width)| format!("{cell:<width$}", width = *width)).collect();
        let _ = writeln!(out, "{}", padded.join("  ").trim_end());
    };
    line(&mut out, header);
    line(&mut out, &widths.iter().map(|width| "-".repeat(*width)).collect::<Vec<_>>());
    for row in rows {
        line(&mut out, row.as_ref());
    }
    out
}

/// Followers' reads per TTL over the steady part, averaged over the runs
/// that had followers there.
pub fn follower_reads(reports: &[hoplock_sim::runner::Report]) -> String {
    let rates: Vec<f64> = reports.iter().filter_map(|report| report.stats.follower_reads_per_ttl).collect();
    if rates.is_empty() { "-".into() } else { format!("{:.2}", rates.iter().sum::<f64>() / rates.len() as f64) }
}

/// Failover gap p50/p99 over every takeover of every run.
pub fn failover(reports: &[hoplock_sim::runner::Report]) -> String {
    let mut gaps: Vec<u64> = reports.iter().flat_map(|report| report.stats.failover_gaps_us.iter().copied()).collect();
    gaps.sort_unstable();
    if gaps.is_empty() {
        return keyed_handoffs(reports);
    }
    format!("{:.2}s/{:.2}s", percentile(&gaps, 50) as f64 / 1e6, percentile(&gaps, 99) as f64 / 1e6)
}

/// For keyed worlds, which have no leader to fail over: how long a leaving
/// and a crashed member's keys took to start elsewhere, p50/max over every
/// leave and crash.
fn keyed_handoffs(reports: &[hoplock_sim::runner::Report]) -> String {
    let summary = |label: &str, pick: fn(&hoplock_sim::runner::Stats) -> &Vec<u64>| {
        let mut times: Vec<u64> = reports.iter().flat_map(|report| pick(&report.stats).iter().copied()).collect();
        times.sort_unstable();
        let max = times.last().copied()?;
        Some(format!("{label} {:.2}/{:.2}s", percentile(&times, 50) as f64 / 1e6, max as f64 / 1e6))
    };
    let parts: Vec<String> = [summary("leave", |s| &s.leave_handoffs_us), summary("crash", |s| &s.crash_handoffs_us)]
        .into_iter()
        .flatten()
        .collect();
    if parts.is_empty() { "-".to_string() } else { parts.join(" ") }
}

/// The `p`th percentile of sorted values (nearest rank).
pub fn percentile(sorted: &[u64], p: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let values: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&values, 50), 50);
        assert_eq!(percentile(&values, 99), 99);
        assert_eq!(percentile(&[7], 99), 7);
        assert_eq!(percentile(&[], 50), 0);
    }
}
