//! `--compare`: the scenarios on the default read schedule and again with
//! every node switched to another one, side by side, with what a lease would
//! cost a year at AWS list prices on each.

use std::fmt::Write;

use hoplock_sim::clocks::Monotonic;
use hoplock_sim::runner::{Report, Stats};
use hoplock_sim::world::{PolicySpec, ReadsSpec};

use super::{Named, Options, Outcome, run_all, table};

/// AWS S3 Standard, us-east-1, 2026 list prices per 1,000 requests: PUT
/// (and LIST) $0.005, GET $0.0004. DELETE is free.
const PUT_PER_THOUSAND: f64 = 0.005;
const GET_PER_THOUSAND: f64 = 0.0004;
const HOURS_PER_YEAR: f64 = 8766.0;

/// What every node is switched to for the second run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Against {
    /// Every node reads every poll interval, as the Go hoplock does, with
    /// the library's own decision rules.
    Poll,
    /// Every node follows the Go hoplock's rules (`policy = "seed"`), whose
    /// records advertise no renew interval, so its followers poll, on the
    /// clock Go reads: `CLOCK_MONOTONIC`, which stops while the host is
    /// suspended.
    Seed,
}

impl Against {
    pub fn parse(text: &str) -> Result<Against, String> {
        match text {
            "poll" => Ok(Against::Poll),
            "seed" => Ok(Against::Seed),
            other => Err(format!("--compare takes `poll` or `seed`, not {other:?}")),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Against::Poll => "poll",
            Against::Seed => "seed",
        }
    }

    fn apply(self, scenarios: &[Named]) -> Vec<Named> {
        scenarios
            .iter()
            .map(|named| {
                let mut scenario = named.scenario.clone();
                for node in &mut scenario.nodes {
                    match self {
                        Against::Poll => node.elector.reads = ReadsSpec::Poll,
                        Against::Seed => {
                            node.elector.policy = PolicySpec::Seed;
                            node.clock.monotonic = Monotonic::StopsInSuspend;
                        }
                    }
                }
                Named { name: named.name.clone(), scenario }
            })
            .collect()
    }
}

/// Runs both sets and prints the comparison. Fails when the default set is
/// not as expected; the other set is only reported, since scenario budgets
/// are set for the default schedule and a switched set is expected to
/// break some of them.
pub fn run(scenarios: &[Named], options: &Options, against: Against) -> Result<(), String> {
    let ours = run_all(scenarios, options, false, false);
    let switched_scenarios = against.apply(scenarios);
    let theirs = run_all(&switched_scenarios, options, false, false);
    print!("{}", render(scenarios, &ours, &theirs, against));
    let failed: Vec<&str> = scenarios
        .iter()
        .zip(&ours)
        .filter(|(_, outcome)| !outcome.as_expected())
        .map(|(named, _)| named.name.as_str())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("not as expected on the default schedule: {}", failed.join(", ")))
    }
}

/// Requests per leader-hour and the yearly cost of one lease at that rate.
fn rate_and_cost(reports: &[Report]) -> (String, String) {
    let stats: Vec<&Stats> = reports.iter().map(|report| &report.stats).collect();
    rate_and_cost_of(&stats)
}

fn rate_and_cost_of(stats: &[&Stats]) -> (String, String) {
    let leader_hours: f64 = stats.iter().map(|stats| stats.leader_hours).sum();
    if leader_hours <= 0.0 {
        return ("-".into(), "-".into());
    }
    let requests: usize = stats.iter().map(|stats| stats.s3_requests).sum();
    let reads: usize = stats.iter().map(|stats| stats.s3_reads).sum();
    let deletes: usize = stats.iter().map(|stats| stats.s3_deletes).sum();
    let writes = requests.saturating_sub(reads + deletes);
    let per_hour = |count: usize| count as f64 / leader_hours;
    let dollars = (per_hour(reads) * GET_PER_THOUSAND + per_hour(writes) * PUT_PER_THOUSAND) / 1000.0;
    (format!("{:.0}", per_hour(requests)), format!("{:.2}", dollars * HOURS_PER_YEAR))
}

fn render(scenarios: &[Named], ours: &[Outcome], theirs: &[Outcome], against: Against) -> String {
    let other = against.label();
    let header = ["scenario".to_string(), "req/leader-h".into(), format!("req/leader-h {other}")]
        .into_iter()
        .chain([
            "reads/TTL".to_string(),
            format!("reads/TTL {other}"),
            "failover p50/p99".into(),
            format!("failover {other}"),
            "$/lease-year".into(),
            format!("$/lease-year {other}"),
            format!("{other} as expected"),
        ])
        .collect::<Vec<String>>();
    let mut rows = Vec::new();
    for ((named, ours), theirs) in scenarios.iter().zip(ours).zip(theirs) {
        let (our_rate, our_cost) = rate_and_cost(&ours.reports);
        let (their_rate, their_cost) = rate_and_cost(&theirs.reports);
        rows.push(vec![
            named.name.clone(),
            our_rate,
            their_rate,
            table::follower_reads(&ours.reports),
            table::follower_reads(&theirs.reports),
            table::failover(&ours.reports),
            table::failover(&theirs.reports),
            our_cost,
            their_cost,
            if theirs.as_expected() { "yes".into() } else { "no".into() },
        ]);
    }
    let mut out = table::columns(&header, &rows);
    let _ = writeln!(
        out,
        "\nCost: one lease for a year at the rate measured, S3 Standard us-east-1 list prices \
         (PUT ${PUT_PER_THOUSAND} and GET ${GET_PER_THOUSAND} per 1,000; DELETE free)."
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_year_of_one_leader_hour_rate_at_list_prices() {
        // 1,800 renewals and 3,600 reads in one leader-hour.
        let stats = Stats { s3_requests: 5400, s3_reads: 3600, leader_hours: 1.0, ..Stats::default() };
        let (rate, cost) = rate_and_cost_of(&[&stats]);
        assert_eq!(rate, "5400");
        // (3600 × 0.0004 + 1800 × 0.005) / 1000 × 8766 = 91.52
        assert_eq!(cost, "91.52");
    }
}
