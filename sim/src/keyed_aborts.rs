//! How many times a keyed member's work was cut off instead of winding
//! down: the measured side of the `max_aborted_stops` bound.
//!
//! A key that moves away while its member's term holds is cancelled, and
//! its work is given until the term's end to return; only work still
//! running then is aborted. Work that honours cancellation therefore winds
//! down whenever the term lasts longer than the work takes to stop. It is
//! aborted by design when the term ends first (a member cut off from the
//! store), when the object vanishes or the member finds itself removed
//! (it stops everything at once), and when its host crashes. A world with
//! none of these, such as joins, graceful leaves and crashes of other
//! members, may assert that no stop was an abort.

use std::collections::BTreeSet;

use crate::history::{Entry, Event};

/// Stops of keys whose work was dropped before it wound down, leaving out
/// those of a node at the instant it crashed.
pub fn aborted_stops(entries: &[Entry]) -> usize {
    let crashes: BTreeSet<(&str, u64)> = entries
        .iter()
        .filter(|entry| matches!(entry.event, Event::Crashed))
        .map(|entry| (entry.node.as_str(), entry.at_us))
        .collect();
    entries
        .iter()
        .filter(|entry| matches!(entry.event, Event::KeyStopped { aborted: true, .. }))
        .filter(|entry| !crashes.contains(&(entry.node.as_str(), entry.at_us)))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invariants::keyed_acting::tests::{started, stopped};
    use crate::invariants::test_support::at;

    fn aborted(ms: u64, node: &str, key: u32) -> Entry {
        at(ms, node, Event::KeyStopped { key, round: 1, incarnation: format!("{node}-1"), aborted: true })
    }

    #[test]
    fn aborts_count_and_wind_downs_and_crashes_do_not() {
        let entries = [
            started(0, "a", 1, 1),
            started(0, "a", 2, 1),
            started(0, "b", 3, 1),
            // Key 1 winds down; key 2 is cut off while the term holds.
            stopped(1_000, "a", 1, 1),
            aborted(1_000, "a", 2),
            // b crashes: its work is dropped with its host.
            at(2_000, "b", Event::Crashed),
            aborted(2_000, "b", 3),
        ];
        assert_eq!(aborted_stops(&entries), 1);
    }
}
