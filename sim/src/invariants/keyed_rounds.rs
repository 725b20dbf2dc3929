//! Rounds fence keyed writes: no (key, round) is started by two different
//! member incarnations, and per key the rounds of successive holders only
//! go up, so a downstream that rejects lower rounds shuts out every earlier
//! holder.

use std::collections::BTreeMap;

use super::keyed_acting::Intervals;
use super::{Property, Violation};

/// Reports the first reused or falling round of each key.
pub fn check(intervals: &Intervals, violations: &mut Vec<Violation>) {
    for (key, acting) in intervals {
        let mut starters: BTreeMap<u64, (&str, &str)> = BTreeMap::new();
        let mut previous: Option<&super::keyed_acting::Acting> = None;
        for now in acting {
            let who = (now.node.as_str(), now.incarnation.as_str());
            let broken = match starters.get(&now.round) {
                Some(first) if *first != who => Some(format!(
                    "k{key}: round {} started by {} ({}) and again by {} ({})",
                    now.round, first.0, first.1, now.node, now.incarnation
                )),
                // A holder may resume its own round (its term lapsed and
                // came back), but never start lower than the round before,
                // its own included: a fenced downstream would shut it out.
                _ => previous
                    .filter(|p| {
                        let same = (p.node.as_str(), p.incarnation.as_str()) == who;
                        now.round < p.round || (!same && now.round == p.round)
                    })
                    .map(|p| {
                        format!(
                            "k{key}: {} started round {} after {} held round {}",
                            now.node, now.round, p.node, p.round
                        )
                    }),
            };
            if let Some(detail) = broken {
                violations.push(Violation {
                    property: Property::KeyedRounds,
                    at_us: now.start_us,
                    nodes: vec![now.node.clone()],
                    generation: Some(now.round),
                    detail,
                });
                break;
            }
            starters.entry(now.round).or_insert(who);
            previous = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Entry;
    use crate::history::Event;
    use crate::invariants::keyed_acting::intervals;
    use crate::invariants::keyed_acting::tests::{started, stopped};
    use crate::invariants::test_support::at;

    fn check(entries: &[Entry], violations: &mut Vec<Violation>) {
        super::check(&intervals(entries), violations);
    }

    #[test]
    fn one_round_from_two_incarnations_is_reported() {
        // A restart under the same node and round: the same id, a new
        // incarnation.
        let bad = [
            started(0, "a", 3, 4),
            at(100, "a", Event::Crashed),
            at(200, "a", Event::KeyStarted { key: 3, round: 4, incarnation: "a-2".into() }),
        ];
        let mut found = Vec::new();
        check(&bad, &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].detail.contains("round 4 started by a (a-1) and again by a (a-2)"), "{}", found[0].detail);
    }

    #[test]
    fn a_round_that_falls_is_reported_and_one_that_rises_is_not() {
        let bad = [started(0, "a", 3, 5), stopped(100, "a", 3, 5), started(200, "b", 3, 2)];
        let mut found = Vec::new();
        check(&bad, &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].property, Property::KeyedRounds);
        let good = [
            started(0, "a", 3, 5),
            stopped(100, "a", 3, 5),
            started(200, "b", 3, 6),
            stopped(300, "b", 3, 6),
            started(400, "b", 3, 6),
        ];
        let mut found = Vec::new();
        check(&good, &mut found);
        assert!(found.is_empty(), "the same incarnation may resume its round: {found:?}");
        // The same incarnation starting below its own earlier round would be
        // refused by its downstream.
        let own = [started(0, "a", 3, 5), stopped(100, "a", 3, 5), started(200, "a", 3, 4)];
        let mut found = Vec::new();
        check(&own, &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].detail.contains("a started round 4 after a held round 5"), "{}", found[0].detail);
    }
}
