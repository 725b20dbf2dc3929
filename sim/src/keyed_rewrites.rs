//! How long keys went on being acted for after someone rewrote, at the same
//! view number, the view the members know: the measured side of the
//! `max_rewrite_stop_ms` bound.
//!
//! A member that reads a view number it has seen with other members (an
//! entry removed by hand, or one copied in under another incarnation, the
//! view left as it was) must fail closed: it stops every key at once and
//! acts for nothing until a newer view shows up. It reads the object every
//! P, so every key open when the object was rewritten stops within P and a
//! read's round trip of the rewrite.

use crate::history::{Entry, Event};
use crate::invariants::keyed_acting::Intervals;
use crate::world::Action;

/// One figure per rewrite of the object at the same view number, in µs:
/// from the rewrite to the last stop of a key that was being acted for
/// then (to `end_us` for one still open when the run ended).
pub fn rewrite_stops(entries: &[Entry], intervals: &Intervals, end_us: u64) -> Vec<u64> {
    entries
        .iter()
        .filter(|entry| {
            matches!(&entry.event, Event::Fault { action } if matches!(
                action.applied(),
                Some(Action::WriteMembers { drop_member: Some(_), .. } | Action::WriteMembers { reincarnate_member: Some(_), .. })
            ))
        })
        .filter_map(|rewrite| {
            intervals
                .values()
                .flatten()
                .filter(|acting| acting.start_us < rewrite.at_us && acting.stop_us > rewrite.at_us)
                .map(|acting| acting.stop_us.min(end_us) - rewrite.at_us)
                .max()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Fault;
    use crate::invariants::keyed_acting::intervals;
    use crate::invariants::keyed_acting::tests::{started, stopped};
    use crate::invariants::test_support::at;

    fn members(views_back: Option<u64>, drop_member: Option<&str>) -> Action {
        Action::WriteMembers {
            raw: None,
            views_back,
            drop_member: drop_member.map(Into::into),
            reincarnate_member: None,
        }
    }

    #[test]
    fn the_last_key_open_at_a_rewrite_sets_the_figure() {
        let rewrite = |ms| at(ms, "world", Event::Fault { action: Fault::Applied(members(None, Some("c"))) });
        let entries = [
            started(0, "a", 1, 1),
            started(0, "b", 2, 1),
            // A stale copy restored is not a rewrite at the same view.
            at(500, "world", Event::Fault { action: Fault::Applied(members(Some(1), None)) }),
            rewrite(1_000),
            stopped(1_400, "a", 1, 1),
            stopped(2_900, "b", 2, 1),
            // Started after the rewrite: not judged.
            started(3_000, "a", 3, 2),
            rewrite(4_000),
        ];
        let acting = intervals(&entries);
        assert_eq!(rewrite_stops(&entries, &acting, 10_000_000), vec![1_900_000, 6_000_000]);
    }
}
