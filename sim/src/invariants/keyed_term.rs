//! No key is acted on after its member's term ended. A member's term runs
//! TTL·(1−ρ)/(1+ρ) minus the stop margin, on its own clock, from the send
//! of its last write that landed *and that it knew had landed* (I3 applied
//! to its entry): its reply came back, or a later read of its showed it.
//! A write is sent no later than the store receives it, so every acting
//! instant must lie within that span of some such write by the same
//! process, converted to true time by the node's clock rate, plus one tick
//! of timer lateness. A write that landed unbeknown to its sender renews
//! nothing: a member that acted on it guessed.

use super::keyed_acting::Intervals;
use super::{Context, Property, Violation, unpaused_us};
use crate::history::{Entry, Event, StoreOpKind};

/// A write of a process that landed: when the store received it, and when
/// the process could first know it had landed.
#[derive(Clone, Copy, Debug)]
struct Landed {
    received_us: u64,
    known_us: u64,
}

/// Reports the first acting instant of each process that no landed write
/// of its covers.
pub fn check(entries: &[Entry], intervals: &Intervals, context: &Context, violations: &mut Vec<Violation>) {
    let writes = landed_writes(entries);
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
        let hold_local =
            facts.ttl_us as f64 * (1.0 - facts.drift_bound) / (1.0 + facts.drift_bound) - facts.stop_margin_us as f64;
        let hold_us = (hold_local.max(0.0) / facts.rate) as u64 + context.tick_us;
        let stop = acting.stop_us.min(context.end_us);
        let own = writes.get(&client).map(Vec::as_slice).unwrap_or(&[]);
        if let Some(ended_us) = first_uncovered(own, acting.start_us, stop, hold_us, &acting.paused, context.tick_us) {
            reported.insert(client.clone());
            violations.push(Violation {
                property: Property::KeyedTerm,
                at_us: ended_us,
                nodes: vec![acting.node.clone()],
                generation: Some(acting.round),
                detail: format!(
                    "{client} still acted for k{} at {:.3}s, after its term ended at {:.3}s (its last landed write \
                     it knew of before then plus TTL·(1−ρ)/(1+ρ) less the stop margin, on its clock)",
                    acting.key,
                    stop as f64 / 1e6,
                    ended_us as f64 / 1e6
                ),
            });
        }
    }
}

/// Every process's landed writes (`node#process`), in the order the store
/// received them. In a keyed world every write is to the membership
/// object. A write is known once its success reply was sent, or once the
/// same process's next read that the store answered after the write had
/// applied was answered.
fn landed_writes(entries: &[Entry]) -> std::collections::BTreeMap<String, Vec<Landed>> {
    let mut writes: std::collections::BTreeMap<String, Vec<(u64, Landed)>> = std::collections::BTreeMap::new();
    let mut reads: std::collections::BTreeMap<&str, Vec<(u64, u64)>> = std::collections::BTreeMap::new();
    for entry in entries {
        let Event::Store(op) = &entry.event else { continue };
        let Some(client) = &op.client else { continue };
        if op.op == StoreOpKind::Read {
            if op.status == Some(200) && !op.reply_dropped {
                reads.entry(client.as_str()).or_default().push((entry.at_us, op.ended_us));
            }
        } else if op.applied {
            let answered = !op.reply_dropped && op.status.is_some_and(|status| (200..300).contains(&status));
            let known_us = if answered { op.ended_us } else { u64::MAX };
            writes
                .entry(client.clone())
                .or_default()
                .push((entry.at_us, Landed { received_us: op.invoked_us, known_us }));
        }
    }
    writes
        .into_iter()
        .map(|(client, mut landed)| {
            let own_reads = reads.get(client.as_str()).map(Vec::as_slice).unwrap_or(&[]);
            for (applied_us, write) in &mut landed {
                let seen = own_reads.iter().filter(|(read_at, _)| read_at >= applied_us).map(|(_, ended)| *ended).min();
                write.known_us = write.known_us.min(seen.unwrap_or(u64::MAX));
            }
            let mut landed: Vec<Landed> = landed.into_iter().map(|(_, write)| write).collect();
            landed.sort_by_key(|write| write.received_us);
            (client, landed)
        })
        .collect()
}

/// The first instant in `start_us..stop_us` at which no write of `own`
/// known by then holds the term, if there is one. A gap counts only for
/// the time the process was not paused in it (a paused process does
/// nothing, and stops its keys as soon as it runs again), and only beyond
/// one tick.
fn first_uncovered(
    own: &[Landed],
    start_us: u64,
    stop_us: u64,
    hold_us: u64,
    paused: &[(u64, u64)],
    tick_us: u64,
) -> Option<u64> {
    // Instants at which the process learnt of a landing, in order.
    let mut learnt: Vec<u64> = own.iter().map(|write| write.known_us).filter(|&k| k < stop_us).collect();
    learnt.sort_unstable();
    let term_end = |at: u64| {
        own.iter().filter(|write| write.known_us <= at).map(|write| write.received_us + hold_us).max().unwrap_or(0)
    };
    let mut t = start_us;
    // Where the current stretch without a term began: a gap is measured
    // whole, however many landings it learnt of that did not cover it.
    let mut uncovered_since: Option<u64> = None;
    loop {
        let end = term_end(t);
        if end >= stop_us {
            return None;
        }
        // The next instant the process learns of a landing that may move
        // its term on.
        let next = learnt.iter().copied().find(|&k| k > t).unwrap_or(stop_us).min(stop_us);
        let gap_from = if end > t { end } else { *uncovered_since.get_or_insert(end.max(start_us)) };
        if end > t {
            uncovered_since = None;
        }
        if next > gap_from && unpaused_us(gap_from, next, paused) > tick_us {
            return Some(gap_from.max(start_us));
        }
        if next >= stop_us {
            return None;
        }
        if next >= end {
            uncovered_since.get_or_insert(end.max(start_us));
        }
        t = next;
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
            op: StoreOpKind::Update,
            applied: true,
            status: Some(200),
            invoked_us: ms * 1000,
            ended_us: ms * 1000,
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
