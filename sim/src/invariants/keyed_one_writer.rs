//! Per key, at most one member incarnation acts at any instant of true
//! time: the keyed form of the single-writer guarantee. A member's acting
//! interval runs from the start its work logged to its logged stop (or its
//! node's crash).

use super::keyed_acting::intervals;
use super::{Property, Violation};
use crate::history::Entry;

/// Reports the first overlap of each key.
pub fn check(entries: &[Entry], violations: &mut Vec<Violation>) {
    for (key, acting) in intervals(entries) {
        // In start order, an interval overlaps an earlier one exactly when
        // it starts before the latest stop so far of another incarnation.
        let mut latest: Option<&super::keyed_acting::Acting> = None;
        for later in &acting {
            if let Some(earlier) = latest
                && later.start_us < earlier.stop_us
                && (&later.node, &later.incarnation) != (&earlier.node, &earlier.incarnation)
            {
                violations.push(Violation {
                    property: Property::KeyedOneWriter,
                    at_us: later.start_us,
                    nodes: vec![earlier.node.clone(), later.node.clone()],
                    generation: Some(later.round),
                    detail: format!(
                        "k{key}: {} (round {}) started while {} (round {}) still acted for it, until {}",
                        later.node,
                        later.round,
                        earlier.node,
                        earlier.round,
                        if earlier.is_open() {
                            "the end".to_string()
                        } else {
                            format!("{:.3}s", earlier.stop_us as f64 / 1e6)
                        }
                    ),
                });
                break;
            }
            if latest.is_none_or(|l| later.stop_us > l.stop_us) {
                latest = Some(later);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Event;
    use crate::invariants::keyed_acting::tests::{started, stopped};
    use crate::invariants::test_support::at;

    #[test]
    fn two_members_acting_for_one_key_at_once_is_reported() {
        let bad = [started(0, "a", 7, 1), started(500, "b", 7, 2), stopped(900, "a", 7, 1)];
        let mut found = Vec::new();
        check(&bad, &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].property, found[0].at_us), (Property::KeyedOneWriter, 500_000));
        assert!(found[0].detail.contains("k7"), "{}", found[0].detail);
    }

    #[test]
    fn a_handover_after_the_stop_or_the_crash_is_clean() {
        let good = [
            started(0, "a", 7, 1),
            stopped(400, "a", 7, 1),
            started(500, "b", 7, 2),
            at(600, "b", Event::Crashed),
            started(600, "c", 7, 3),
            started(0, "a", 8, 1),
        ];
        let mut found = Vec::new();
        check(&good, &mut found);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn a_member_still_acting_at_the_end_overlaps_every_later_start() {
        let bad = [started(0, "a", 1, 1), started(100, "b", 1, 1), stopped(50, "b", 2, 1)];
        let mut found = Vec::new();
        check(&bad, &mut found);
        assert_eq!(found.len(), 1);
        assert!(found[0].detail.contains("until the end"), "{}", found[0].detail);
    }
}
