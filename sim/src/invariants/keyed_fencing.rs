//! K6: the fenced downstream of a key only ever moves forward. Per key, the
//! rounds it accepts never go down in the order it stored them, and a write
//! it turns away was shut out by a holder that started the key later: a
//! write from the newest holder refused for an older holder's higher round
//! means rounds fell from one holder to the next, and fencing would lock
//! the rightful writer out.

use std::collections::{BTreeMap, BTreeSet};

use super::keyed_acting::Intervals;
use super::{Property, Violation};
use crate::history::{Entry, Event};

/// Reports the first accepted round that went down, and the first write of
/// a key's newest holder that its downstream refused, per key.
pub fn check(entries: &[Entry], intervals: &Intervals, violations: &mut Vec<Violation>) {
    let mut writes: Vec<(u64, &Entry)> = entries
        .iter()
        .filter_map(|entry| match &entry.event {
            Event::KeyDownstream { sequence, .. } => Some((*sequence, entry)),
            _ => None,
        })
        .collect();
    writes.sort_by_key(|(sequence, _)| *sequence);
    let mut accepted: BTreeMap<u32, u64> = BTreeMap::new();
    let mut reported: BTreeSet<u32> = BTreeSet::new();
    for (_, entry) in writes {
        let Event::KeyDownstream { key, round, incarnation, accepted: ok, highest_before, .. } = &entry.event else {
            continue;
        };
        if reported.contains(key) {
            continue;
        }
        let detail = if *ok {
            let previous = accepted.get(key).copied();
            accepted.insert(*key, previous.map_or(*round, |p| p.max(*round)));
            previous.filter(|p| round < p).map(|p| format!("k{key}: the downstream accepted round {round} after {p}"))
        } else {
            shut_out(intervals, *key, &entry.node, incarnation, *round, *highest_before)
        };
        if let Some(detail) = detail {
            reported.insert(*key);
            violations.push(Violation {
                property: Property::KeyedFencing,
                at_us: entry.at_us,
                nodes: vec![entry.node.clone()],
                generation: Some(*round),
                detail,
            });
        }
    }
}

/// Why a refused write is wrong, if it is: the holder whose round `highest`
/// refused it started the key no later than the writer did.
fn shut_out(
    intervals: &Intervals,
    key: u32,
    node: &str,
    incarnation: &str,
    round: u64,
    highest: u64,
) -> Option<String> {
    let acting = intervals.get(&key)?;
    let writer = acting.iter().find(|a| a.node == node && a.incarnation == incarnation && a.round == round)?;
    let blocker = acting.iter().find(|a| a.round == highest && (a.node != node || a.incarnation != incarnation))?;
    (blocker.start_us <= writer.start_us).then(|| {
        format!(
            "k{key}: {node}'s write at round {round} was refused for round {highest}, which {} started earlier, \
             at {:.3}s, than {node} started at {:.3}s",
            blocker.node,
            blocker.start_us as f64 / 1e6,
            writer.start_us as f64 / 1e6
        )
    })
}

/// Writes a keyed downstream accepted at a round below one a newer holder
/// of the key had already started: fencing let them through only because
/// the newer holder had not written yet. Reported, as for the elector,
/// never a violation: it is what fencing alone would not have stopped.
pub fn stale_accepted(entries: &[Entry]) -> usize {
    let mut newest_started: BTreeMap<u32, u64> = BTreeMap::new();
    let mut accepted = 0;
    for entry in entries {
        match &entry.event {
            Event::KeyStarted { key, round, .. } => {
                let newest = newest_started.entry(*key).or_default();
                *newest = (*newest).max(*round);
            }
            Event::KeyDownstream { key, round, accepted: true, .. }
                if newest_started.get(key).is_some_and(|newest| round < newest) =>
            {
                accepted += 1;
            }
            _ => {}
        }
    }
    accepted
}

/// Writes the keyed downstreams refused for a stale round, and all they
/// received: (refused, total).
pub fn refused_writes(entries: &[Entry]) -> (usize, usize) {
    let all = entries.iter().filter(|e| matches!(e.event, Event::KeyDownstream { .. }));
    let refused = all.clone().filter(|e| matches!(e.event, Event::KeyDownstream { accepted: false, .. })).count();
    (refused, all.count())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invariants::keyed_acting::intervals;
    use crate::invariants::keyed_acting::tests::{started, stopped};
    use crate::invariants::test_support::at;

    fn wrote(ms: u64, node: &str, key: u32, round: u64, accepted: bool, highest_before: u64, sequence: u64) -> Entry {
        let incarnation = format!("{node}-1");
        let event = Event::KeyDownstream { key, round, incarnation, sent_us: 0, accepted, highest_before, sequence };
        at(ms, node, event)
    }

    fn check(entries: &[Entry], violations: &mut Vec<Violation>) {
        super::check(entries, &intervals(entries), violations);
    }

    #[test]
    fn a_late_write_of_an_earlier_holder_may_be_refused() {
        let good = [
            started(0, "a", 1, 2),
            wrote(10, "a", 1, 2, true, 0, 1),
            stopped(100, "a", 1, 2),
            started(400, "b", 1, 3),
            wrote(410, "b", 1, 3, true, 2, 2),
            // a's write sent before it stopped arrives late, and is refused.
            wrote(500, "a", 1, 2, false, 3, 3),
        ];
        let mut found = Vec::new();
        check(&good, &mut found);
        assert!(found.is_empty(), "{found:?}");
        assert_eq!(refused_writes(&good), (1, 3));
        // Had a's late write arrived before b's first, it would have been
        // accepted: a stale write fencing alone lets through.
        let through = [
            started(0, "a", 1, 2),
            stopped(100, "a", 1, 2),
            started(400, "b", 1, 3),
            wrote(405, "a", 1, 2, true, 2, 2),
            wrote(410, "b", 1, 3, true, 2, 3),
        ];
        assert_eq!(stale_accepted(&through), 1);
        assert_eq!(stale_accepted(&good), 0);
    }

    #[test]
    fn an_accepted_round_below_an_earlier_one_is_reported() {
        let bad = [
            started(0, "a", 1, 5),
            wrote(10, "a", 1, 5, true, 0, 1),
            stopped(100, "a", 1, 5),
            started(400, "b", 1, 6),
            // Stored later, though its entry sorts first: order is by sequence.
            wrote(420, "b", 1, 4, true, 5, 3),
            wrote(410, "b", 1, 6, true, 5, 2),
        ];
        let mut found = Vec::new();
        check(&bad, &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].property, Property::KeyedFencing);
        assert!(found[0].detail.contains("accepted round 4 after 6"), "{}", found[0].detail);
    }

    #[test]
    fn the_newest_holder_shut_out_by_an_older_holders_round_is_reported() {
        // b takes the key over from a with a lower round, as a round from a
        // local counter would give it.
        let bad = [
            started(0, "a", 1, 7),
            wrote(10, "a", 1, 7, true, 0, 1),
            stopped(100, "a", 1, 7),
            started(400, "b", 1, 2),
            wrote(410, "b", 1, 2, false, 7, 2),
        ];
        let mut found = Vec::new();
        check(&bad, &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].detail.contains("refused for round 7"), "{}", found[0].detail);
    }
}
