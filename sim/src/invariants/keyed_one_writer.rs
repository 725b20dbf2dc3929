//! Per key, at most one member incarnation acts at any instant of true
//! time: the keyed form of the single-writer guarantee. A member's acting
//! interval runs from the start its work logged to its logged stop (or its
//! node's crash).

use super::keyed_acting::{Acting, Intervals};
use super::{Property, Violation, unpaused_us};

/// Reports the first overlap of each key.
pub fn check(acting: &Intervals, violations: &mut Vec<Violation>) {
    for (key, intervals) in acting {
        if let Some((earlier, later)) = first_overlap(intervals) {
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
        }
    }
}

/// The first pair of intervals of different incarnations that both acted
/// at one instant, pauses of either not counting as acting.
fn first_overlap(intervals: &[Acting]) -> Option<(&Acting, &Acting)> {
    for (i, later) in intervals.iter().enumerate() {
        for earlier in &intervals[..i] {
            if (&later.node, &later.incarnation) == (&earlier.node, &earlier.incarnation) {
                continue;
            }
            let pauses: Vec<(u64, u64)> = earlier.paused.iter().chain(&later.paused).copied().collect();
            if unpaused_us(later.start_us, earlier.stop_us.min(later.stop_us), &pauses) > 0 {
                return Some((earlier, later));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Entry, Event};
    use crate::invariants::keyed_acting::intervals;
    use crate::invariants::keyed_acting::tests::{started, stopped};

    fn check(entries: &[Entry], violations: &mut Vec<Violation>) {
        super::check(&intervals(entries), violations);
    }
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

    #[test]
    fn a_paused_member_does_not_act_while_paused() {
        // a is paused from 1 s to 9 s; b acts from 5 s to 8 s, all inside
        // the pause, and a stops the instant it resumes.
        let paused = [
            started(0, "a", 1, 1),
            at(1_000, "a", Event::Paused { until_us: 9_000_000 }),
            started(5_000, "b", 1, 2),
            stopped(8_000, "b", 1, 2),
            stopped(9_000, "a", 1, 1),
        ];
        let mut found = Vec::new();
        check(&paused, &mut found);
        assert!(found.is_empty(), "{found:?}");
        // Acting on after the pause, while b holds the key, is two writers.
        let late = [
            started(0, "a", 1, 1),
            at(1_000, "a", Event::Paused { until_us: 9_000_000 }),
            started(5_000, "b", 1, 2),
            stopped(9_500, "a", 1, 1),
        ];
        check(&late, &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
    }
}
