//! How long a keyed world's keys take to reach another member after a
//! member leaves gracefully or crashes, to reach a member that joins, and
//! to start at all on an object a member created: the measured side of the
//! bounds W + P + 2 RTT (leave), TTL·(1+ρ) + 2P + lock-delay + 3 RTT
//! (crash), P + W + P + 3 RTT (join) and (TTL + lock-delay)·(1+ρ) + R/8 +
//! 2 RTT (creation) that scenario files may assert with `max_leave_handoff_ms`,
//! `max_crash_handoff_ms`, `max_join_handoff_ms` and
//! `max_create_handoff_ms`.

use crate::history::{Entry, Event};
use crate::invariants::KeyedFacts;
use crate::invariants::keyed_acting::{Acting, Intervals, changes, lineage, object_replaced};
use crate::world::Action;

/// Handoff times in µs: (graceful leaves, crashes). One figure per leave or
/// crash of a member that held keys, from the scheduled stop or the crash
/// to the last of its keys starting under another incarnation. Keys nobody
/// took over before the run ended are left out (`keyed-settled` judges
/// those).
pub fn handoffs(entries: &[Entry], intervals: &Intervals) -> (Vec<u64>, Vec<u64>) {
    let (mut leaves, mut crashes) = (Vec::new(), Vec::new());
    for entry in entries {
        match &entry.event {
            Event::Fault { action } => {
                if let Some(Action::Stop { node }) = action.applied() {
                    leaves.extend(handoff(intervals, node, entry.at_us));
                }
            }
            Event::Crashed => crashes.extend(handoff(intervals, &entry.node, entry.at_us)),
            _ => {}
        }
    }
    (leaves, crashes)
}

/// The latest start, after `at_us`, of a key `node` was acting for at
/// `at_us`, under an incarnation other than the one that held it.
fn handoff(intervals: &Intervals, node: &str, at_us: u64) -> Option<u64> {
    let held = |a: &Acting| a.node == node && a.spans(at_us);
    intervals
        .values()
        .filter_map(|acting| {
            let gone = acting.iter().find(|a| held(a))?;
            let next = acting.iter().find(|a| a.start_us >= gone.stop_us && a.incarnation != gone.incarnation)?;
            Some(next.start_us.saturating_sub(at_us))
        })
        .max()
}

/// Join times in µs: one figure per join whose joiner went on to act, from
/// the commit of the view the join made to the first key the joiner
/// started after it. The joiner acts only once every member has adopted
/// the view, so the figure is how fast the others read a join and adopt
/// it. Left out: a join the joiner never acted after (it crashed, or was
/// evicted first), and a join to an object nobody has acted under yet,
/// which waits for its creator's wait (TTL + lock-delay) to end instead.
pub fn joins(entries: &[Entry], intervals: &Intervals, keyed: &KeyedFacts) -> Vec<u64> {
    let replaced = object_replaced(entries);
    let starts = || intervals.values().flatten();
    changes(entries, "join")
        .into_iter()
        .filter(|(_, at_us)| {
            // The object this join wrote to: since the last replacement.
            let since = lineage(&replaced, *at_us).checked_sub(1).map_or(0, |last| replaced[last]);
            starts().any(|a| a.start_us >= since && a.start_us < *at_us)
        })
        .filter_map(|(id, at_us)| {
            let first =
                starts().filter(|a| keyed.id_of(&a.node) == id && a.start_us >= at_us).map(|a| a.start_us).min()?;
            Some(first - at_us)
        })
        .collect()
}

/// Creation times in µs: one figure per membership object a member
/// created, from the commit of its first view to the first key any member
/// started on it. No view of a new object is active before its creator's
/// wait (its TTL and lock-delay from the creation's reply) is over, and the
/// creator adopts the view, so making it active, as that wait ends, or one
/// retry gap (R/8) after its last request if that is later. Left
/// out: objects an operator wrote (their first view names no member), and
/// objects nobody acted on before the next replacement.
pub fn creations(entries: &[Entry], intervals: &Intervals) -> Vec<u64> {
    let replaced = object_replaced(entries);
    // The first view of each object: which object, when, and whether a
    // member (not the reset tool's placeholder) made it.
    let mut firsts: Vec<(usize, u64, bool)> = Vec::new();
    for entry in entries {
        if let Event::View { entry: id, .. } = &entry.event {
            let object = lineage(&replaced, entry.at_us);
            if firsts.last().is_none_or(|(last, ..)| *last != object) {
                firsts.push((object, entry.at_us, id != hoplock::keyed::RESET_ENTRY_ID));
            }
        }
    }
    firsts
        .into_iter()
        .filter(|(.., by_member)| *by_member)
        .filter_map(|(object, at_us, _)| {
            let until = replaced.get(object).copied().unwrap_or(u64::MAX);
            let first = intervals.values().flatten().map(|a| a.start_us).filter(|&s| s >= at_us && s < until).min()?;
            Some(first - at_us)
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

    #[test]
    fn a_leave_and_a_crash_are_timed_to_the_last_key_taken_over() {
        let entries = [
            started(0, "a", 1, 1),
            started(0, "a", 2, 1),
            started(0, "b", 3, 1),
            at(10_000, "world", Event::Fault { action: Fault::Applied(Action::Stop { node: "a".into() }) }),
            stopped(10_200, "a", 1, 1),
            stopped(10_300, "a", 2, 1),
            started(11_000, "b", 1, 2),
            started(12_500, "b", 2, 2),
            at(20_000, "b", Event::Crashed),
            started(27_000, "c", 1, 3),
        ];
        let (leaves, crashes) = handoffs(&entries, &intervals(&entries));
        assert_eq!(leaves, [2_500_000], "k2 was the last to move, 2.5 s after the stop");
        assert_eq!(crashes, [7_000_000], "k1 moved 7 s after the crash; k2 and k3 never did");
    }

    #[test]
    fn a_join_is_timed_from_its_view_to_the_joiners_first_key() {
        let view = |ms: u64, view: u64, change: &str, id: &str| {
            at(ms, "s3", Event::View { view, members: vec![], change: change.into(), entry: id.into() })
        };
        let entries = [
            view(0, 1, "join", "a"),
            // Joins while nobody acts yet wait for the creator's wait.
            view(200, 2, "join", "d"),
            started(6_000, "a", 1, 1),
            started(6_100, "d", 4, 1),
            view(7_000, 3, "join", "b"),
            // A renewal reports the same view again: not another join.
            view(8_000, 3, "join", "b"),
            started(8_300, "b", 2, 2),
            view(9_000, 4, "join", "c"),
        ];
        let keyed = KeyedFacts::default();
        let joins = joins(&entries, &intervals(&entries), &keyed);
        assert_eq!(joins, [1_300_000], "a and d joined before anyone acted; c never acted");
    }

    #[test]
    fn a_creation_is_timed_from_its_first_view_to_the_first_key_on_the_object() {
        let view = |ms: u64, view: u64, id: &str| {
            at(ms, "s3", Event::View { view, members: vec![], change: "join".into(), entry: id.into() })
        };
        let entries = [
            view(100, 1, "a"),
            view(300, 2, "b"),
            started(6_200, "b", 1, 2),
            started(6_400, "a", 2, 1),
            at(20_000, "world", Event::Fault { action: Fault::Applied(Action::DeleteMembers) }),
            // Recreated by a member: timed from its own first view.
            view(21_000, 9, "b"),
            started(27_500, "b", 1, 9),
            at(
                40_000,
                "world",
                Event::Fault { action: Fault::Applied(Action::ResetMembers { view_floor: 10, wait_ms: 1_000 }) },
            ),
            // Written by the reset tool: not a creation.
            view(40_000, 20, hoplock::keyed::RESET_ENTRY_ID),
            started(47_000, "a", 2, 20),
        ];
        let creations = creations(&entries, &intervals(&entries));
        assert_eq!(creations, [6_100_000, 6_500_000]);
    }
}
