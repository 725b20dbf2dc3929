//! How many member terms a keyed world lost: the keyed side of the
//! `max_lost_terms` bound, so that a world whose members stay connected can
//! assert that none of them ever lost its term.
//!
//! A member loses its term in one of two ways that the history shows:
//! another member evicts its entry (a view whose change is `evict`), or its
//! term runs out while its entry stays, and its keys stop and start again
//! under the same incarnation and round with no view between (a lapse).

use std::collections::{BTreeMap, BTreeSet};

use crate::history::{Entry, Event};

/// Evictions plus lapses. A lapse counts once per member incarnation and
/// instant its keys started again, however many keys did.
pub fn lost_terms(entries: &[Entry]) -> usize {
    let evictions = crate::invariants::keyed_acting::evictions(entries).len();
    // The round each (incarnation, key) last stopped at.
    let mut stopped: BTreeMap<(&str, u32), u64> = BTreeMap::new();
    let mut lapses: BTreeSet<(&str, u64)> = BTreeSet::new();
    for entry in entries {
        match &entry.event {
            Event::KeyStopped { key, round, incarnation, .. } => {
                stopped.insert((incarnation.as_str(), *key), *round);
            }
            Event::KeyStarted { key, round, incarnation } => {
                let resumed = stopped.remove(&(incarnation.as_str(), *key)) == Some(*round);
                if resumed {
                    lapses.insert((incarnation.as_str(), entry.at_us));
                }
            }
            _ => {}
        }
    }
    evictions + lapses.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invariants::keyed_acting::tests::{started, stopped};
    use crate::invariants::test_support::at;

    #[test]
    fn evictions_and_lapses_count_and_moves_do_not() {
        let view = |view: u64, change: &str| Event::View {
            view,
            members: vec!["a".into()],
            change: change.into(),
            entry: "b".into(),
        };
        let entries = [
            started(0, "a", 1, 1),
            started(0, "a", 2, 1),
            // A lapse of a's term: both keys stop and start again at round 1.
            stopped(1_000, "a", 1, 1),
            stopped(1_000, "a", 2, 1),
            started(2_000, "a", 1, 1),
            started(2_000, "a", 2, 1),
            // A move to another member is no lapse.
            stopped(3_000, "a", 2, 1),
            started(3_500, "b", 2, 2),
            at(4_000, "s3", view(2, "join")),
            at(5_000, "s3", view(3, "evict")),
            // A renewal in the eviction's view is no second eviction.
            at(5_500, "s3", view(3, "evict")),
        ];
        assert_eq!(lost_terms(&entries), 2, "one lapse (two keys at one instant) and one eviction");
    }
}
