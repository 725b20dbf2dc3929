//! No key is acted on after its member's term ended. A member's term runs
//! TTL·(1−ρ)/(1+ρ) on its own clock from the send of its last write that
//! landed (I3 applied to its entry); a write is sent no later than the
//! store receives it, so every acting instant must lie within that span of
//! some write by the same process the store applied before it, converted
//! to true time by the node's clock rate, plus one tick of timer lateness.

use super::keyed_acting::Intervals;
use super::{Context, Property, Violation, unpaused_us};
use crate::history::{Entry, Event};

/// Reports the first acting instant of each process that no landed write
/// of its covers.
pub fn check(entries: &[Entry], intervals: &Intervals, context: &Context, violations: &mut Vec<Violation>) {
    // Applied writes per process (`node#process`), in time order, at the
    // instant the store received them: in a keyed world every write is to
    // the membership object.
    let mut writes: std::collections::BTreeMap<String, Vec<u64>> = std::collections::BTreeMap::new();
    for entry in entries {
        if let Event::Store(op) = &entry.event
            && op.applied
            && op.op != "read"
            && let Some(client) = &op.client
        {
            writes.entry(client.clone()).or_default().push(op.invoked_us);
        }
    }
    let mut starts: std::collections::BTreeMap<&str, Vec<(u64, u32)>> = std::collections::BTreeMap::new();
    for entry in entries {
        if let Event::Started { incarnation } = entry.event {
            starts.entry(entry.node.as_str()).or_default().push((entry.at_us, incarnation));
        }
    }
    let mut reported = std::collections::BTreeSet::new();
    for acting in intervals.values().flatten() {
        let Some(facts) = context.node(&acting.node) else { continue };
        // The process that acted: the node's process running at the start.
        let process = process_at(starts.get(acting.node.as_str()).map_or(&[], Vec::as_slice), acting.start_us);
        let client = format!("{}#{process}", acting.node);
        if reported.contains(&client) {
            continue;
        }
        let hold_local = facts.ttl_us as f64 * (1.0 - facts.drift_bound) / (1.0 + facts.drift_bound);
        let hold_us = (hold_local / facts.rate) as u64 + context.tick_us;
        let stop = acting.stop_us.min(context.end_us);
        let own = writes.get(&client).map(Vec::as_slice).unwrap_or(&[]);
        // Walk the interval: from each instant, the latest write before it
        // covers up to its end of term. A gap in the cover counts only for
        // the time the process was not paused in it: a paused process does
        // nothing, and it stops its keys as soon as it runs again.
        let mut t = acting.start_us;
        let covered_until = loop {
            let covered = cover(own, t, hold_us, stop);
            if covered >= stop {
                break u64::MAX;
            }
            let next = own.iter().copied().find(|&w| w > covered).unwrap_or(stop).min(stop);
            if unpaused_us(covered, next, &acting.paused) > context.tick_us {
                break covered;
            }
            if next >= stop {
                break u64::MAX;
            }
            t = next;
        };
        if covered_until < stop {
            reported.insert(client.clone());
            violations.push(Violation {
                property: Property::KeyedTerm,
                at_us: covered_until,
                nodes: vec![acting.node.clone()],
                generation: Some(acting.round),
                detail: format!(
                    "{client} still acted for k{} at {:.3}s, after its term ended at {:.3}s (its last landed write \
                     before then plus TTL·(1−ρ)/(1+ρ) on its clock)",
                    acting.key,
                    stop as f64 / 1e6,
                    covered_until as f64 / 1e6
                ),
            });
        }
    }
}

/// How far the process's landed writes `own` cover acting from `from_us`:
/// the latest write at or before an instant holds the term for `hold_us`,
/// and a write landing within a term extends it. `u64::MAX` once `stop_us`
/// is covered.
fn cover(own: &[u64], from_us: u64, hold_us: u64, stop_us: u64) -> u64 {
    let mut t = from_us;
    loop {
        let Some(last) = own.iter().rev().find(|&&w| w <= t) else { return t };
        let end = last + hold_us;
        if end >= stop_us {
            return u64::MAX;
        }
        // The next write that landed before this term ended moves it on.
        match own.iter().find(|&&w| w > *last && w <= end) {
            Some(&next) if next > t => t = next,
            _ => return end,
        }
    }
}

/// The number of the node's process running at `at_us`, from its
/// `Started` events in time order (counted from 0).
fn process_at(starts: &[(u64, u32)], at_us: u64) -> u32 {
    let running = starts.partition_point(|&(started_us, _)| started_us <= at_us);
    running.checked_sub(1).map_or(0, |index| starts[index].1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::StoreOp;
    use crate::invariants::NodeFacts;
    use crate::invariants::keyed_acting::tests::{started, stopped};
    use crate::invariants::test_support::at;

    fn check(entries: &[Entry], context: &Context, violations: &mut Vec<Violation>) {
        super::check(entries, &crate::invariants::keyed_acting::intervals(entries), context, violations);
    }

    fn context() -> Context {
        let facts =
            NodeFacts { name: "a".into(), rate: 1.0, drift_bound: 0.0, ttl_us: 6_000_000, ..NodeFacts::default() };
        Context { facts: vec![facts], end_us: 60_000_000, tick_us: 10_000, ..Context::default() }
    }

    fn wrote(ms: u64) -> Entry {
        let op = StoreOp {
            client: Some("a#0".into()),
            op: "update".into(),
            applied: true,
            invoked_us: ms * 1000,
            ..StoreOp::default()
        };
        at(ms, "s3", Event::Store(op))
    }

    #[test]
    fn acting_past_the_last_renewals_term_is_reported() {
        // Renewals at 0, 2 and 4 s, then the store is cut off; the key runs
        // on to 12 s, beyond 4 s + 6 s.
        let bad = [
            at(0, "a", Event::Started { incarnation: 0 }),
            wrote(0),
            started(100, "a", 1, 1),
            wrote(2_000),
            wrote(4_000),
            stopped(12_000, "a", 1, 1),
        ];
        let mut found = Vec::new();
        check(&bad, &context(), &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].property, found[0].at_us), (Property::KeyedTerm, 10_010_000));
    }

    #[test]
    fn acting_within_renewed_terms_is_clean() {
        let good = [
            at(0, "a", Event::Started { incarnation: 0 }),
            wrote(0),
            started(100, "a", 1, 1),
            wrote(2_000),
            wrote(4_000),
            stopped(9_000, "a", 1, 1),
        ];
        let mut found = Vec::new();
        check(&good, &context(), &mut found);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn a_term_that_ends_during_a_pause_is_judged_by_the_time_after_it() {
        // The term (about 6 s) ends at 6 s, during a pause from 1 s to 20 s;
        // a stops its key the instant it runs again.
        let paused = [
            wrote(0),
            started(0, "a", 1, 1),
            at(1_000, "a", Event::Paused { until_us: 20_000_000 }),
            stopped(20_000, "a", 1, 1),
        ];
        let mut found = Vec::new();
        check(&paused, &context(), &mut found);
        assert!(found.is_empty(), "{found:?}");
        // Acting on for a second after the pause is past the term.
        let late = [
            wrote(0),
            started(0, "a", 1, 1),
            at(1_000, "a", Event::Paused { until_us: 20_000_000 }),
            stopped(21_000, "a", 1, 1),
        ];
        check(&late, &context(), &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
    }
}
