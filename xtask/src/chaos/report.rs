//! What a chaos run prints and keeps: the table of worlds with their
//! outcomes and the real-versus-simulated figures, and for every world
//! whose outcome was not what its file expects, each failing run's history,
//! logs and timeline under the output directory with the command that runs
//! it again.

use std::fmt::Write as _;
use std::path::Path;

use hoplock_sim::history::{Event, to_json_lines};
use hoplock_sim::invariants;
use hoplock_sim::runner::Report;
use hoplock_sim::scenario::Verdict;

use super::plan::Plan;
use crate::sim::table::{columns, percentile};

/// The figures the two engines are compared on, from one run's history.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    /// From the end of a term that was not released to the next node's
    /// term, µs: crashes, partitions, pauses.
    pub failovers_us: Vec<u64>,
    /// From a released term's end to the next node's term, µs.
    pub releases_us: Vec<u64>,
    /// Requests to the store on the lease key.
    pub requests: usize,
    /// Hours somebody led.
    pub leader_hours: f64,
}

impl Figures {
    /// The figures of one run.
    pub fn of(report: &Report) -> Figures {
        let end_us = report.stats.simulated_secs as u64 * 1_000_000;
        let terms = invariants::terms(&report.entries, end_us);
        let released = |generation: u64| {
            report.entries.iter().any(|entry| {
                matches!(&entry.event, Event::Store(op)
                    if op.applied && op.released && op.generation == Some(generation))
            })
        };
        let mut figures = Figures {
            requests: report.stats.s3_requests,
            leader_hours: report.stats.leader_hours,
            ..Figures::default()
        };
        let mut by_start = terms.clone();
        by_start.sort_by_key(|term| term.start_us);
        for pair in by_start.windows(2) {
            if pair[0].node == pair[1].node {
                continue;
            }
            // A paused leader stopped acting when its pause began, as the
            // simulator's figures count it.
            let mut ended = pair[0].end_us;
            while let Some((from, _)) = pair[0].paused.iter().find(|(from, until)| *from < ended && *until >= ended) {
                ended = *from;
            }
            let gap = pair[1].start_us.saturating_sub(ended);
            if released(pair[0].generation) { figures.releases_us.push(gap) } else { figures.failovers_us.push(gap) }
        }
        figures
    }

    /// Adds another run's figures.
    pub fn add(&mut self, other: &Figures) {
        self.failovers_us.extend(&other.failovers_us);
        self.releases_us.extend(&other.releases_us);
        self.requests += other.requests;
        self.leader_hours += other.leader_hours;
    }

    fn gaps(values: &[u64]) -> String {
        let mut sorted = values.to_vec();
        sorted.sort_unstable();
        if sorted.is_empty() {
            return "-".into();
        }
        format!("{:.2}/{:.2}s", percentile(&sorted, 50) as f64 / 1e6, percentile(&sorted, 99) as f64 / 1e6)
    }

    /// Failover p50/p99.
    pub fn failover(&self) -> String {
        Figures::gaps(&self.failovers_us)
    }

    /// Release handoff p50/p99.
    pub fn release(&self) -> String {
        Figures::gaps(&self.releases_us)
    }

    /// Requests per leader-hour.
    pub fn per_leader_hour(&self) -> String {
        if self.leader_hours <= 0.0 { "-".into() } else { format!("{:.0}", self.requests as f64 / self.leader_hours) }
    }
}

/// One world's line of the table.
pub struct Row {
    pub name: String,
    pub runs: usize,
    pub expected: String,
    pub outcome: String,
    pub as_expected: bool,
    pub real: Figures,
    pub sim: Option<Figures>,
}

/// The table: each world's outcome, then its figures in the real run and
/// in the simulator side by side.
pub fn table(rows: &[Row]) -> String {
    let header: Vec<String> = [
        "world",
        "runs",
        "expected",
        "outcome",
        "failover p50/p99 real",
        "sim",
        "release handoff real",
        "sim",
        "req/leader-h real",
        "sim",
    ]
    .map(String::from)
    .to_vec();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            let sim = |pick: fn(&Figures) -> String| row.sim.as_ref().map_or("-".into(), pick);
            vec![
                row.name.clone(),
                row.runs.to_string(),
                row.expected.clone(),
                if row.as_expected { row.outcome.clone() } else { format!("UNEXPECTED: {}", row.outcome) },
                row.real.failover(),
                sim(Figures::failover),
                row.real.release(),
                sim(Figures::release),
                row.real.per_leader_hour(),
                sim(Figures::per_leader_hour),
            ]
        })
        .collect();
    columns(&header, &cells)
}

/// What the runs showed, in words: `safe`, or the findings.
pub fn outcome(verdict: &Verdict) -> String {
    let found: Vec<&str> = verdict.found.keys().map(|finding| finding.name()).collect();
    let mut words = if found.is_empty() { "safe".to_string() } else { found.join(", ") };
    if verdict.breaks_a_bound() {
        words.push_str(" (a bound broken)");
    }
    words
}

/// Writes each failing run's history, logs and timeline under `out`, and
/// returns the lines to print: where they are and how to run them again.
pub fn keep_failures(out: &Path, plan: &Plan, runs: &[(u64, super::run::Outcome)], rerun: &str) -> String {
    let mut said = String::new();
    for (seed, outcome) in runs {
        let report = &outcome.report;
        let dir = out.join(format!("{}-seed{seed}", plan.name));
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(dir.join("history.jsonl"), to_json_lines(&report.entries));
        let mut logs = String::new();
        for (process, line) in &outcome.logs {
            let _ = writeln!(logs, "{process}: {line}");
        }
        let _ = std::fs::write(dir.join("logs.txt"), logs);
        let mut violations = String::new();
        for violation in &report.violations {
            let _ = writeln!(violations, "{violation}");
        }
        let _ = std::fs::write(dir.join("violations.txt"), &violations);
        let title = format!("{} (chaos, seed {seed})", plan.name);
        let timeline = dir.join("timeline.svg");
        let drawn = crate::sim::timeline::draw(&plan.world, report, &title, &timeline)
            .map_or_else(|err| format!(" (no timeline: {err})"), |()| String::new());
        let _ = writeln!(
            said,
            "  {} seed {seed}: {} violation(s); kept in {}{drawn}",
            plan.name,
            report.violations.len(),
            dir.display()
        );
        for violation in report.violations.iter().take(5) {
            let _ = writeln!(said, "    {violation}");
        }
        let _ = writeln!(said, "    run it again: {rerun} --seed {seed}");
    }
    said
}
