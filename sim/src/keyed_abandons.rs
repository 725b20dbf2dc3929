//! How soon a keyed member's work ends when its run future is dropped
//! (`abandon`): the measured side of the `max_abandon_stop_ms` bound.
//!
//! An application that drops the future (it selects on a shutdown signal,
//! or aborts the task the member runs in) tells the member nothing else.
//! Its key tasks run apart from that future, so each must be aborted as
//! the future is dropped: left running, they would go on until the term's
//! end, acting for keys on behalf of a member that no longer renews or
//! reads.

use crate::history::{Entry, Event};
use crate::invariants::keyed_acting::Intervals;
use crate::world::Action;

/// Abandon stops in µs: one figure per abandon of a member that was acting
/// for some key, from the abandon to the last of those keys' stops.
pub fn abandon_stops(entries: &[Entry], intervals: &Intervals) -> Vec<u64> {
    entries
        .iter()
        .filter_map(|entry| match &entry.event {
            Event::Fault { action } => match action.applied() {
                Some(Action::Abandon { node }) => Some((node.as_str(), entry.at_us)),
                _ => None,
            },
            _ => None,
        })
        .filter_map(|(node, at_us)| {
            intervals
                .values()
                .flatten()
                .filter(|a| a.node == node && a.spans(at_us))
                .map(|a| a.stop_us.saturating_sub(at_us))
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

    #[test]
    fn an_abandon_is_timed_to_the_last_stop_of_the_keys_acted_for_then() {
        let entries = [
            started(0, "a", 1, 1),
            started(0, "a", 2, 1),
            started(0, "b", 3, 1),
            at(10_000, "world", Event::Fault { action: Fault::Applied(Action::Abandon { node: "a".into() }) }),
            stopped(10_000, "a", 1, 1),
            stopped(14_500, "a", 2, 1),
            // Nothing was acting on `b`'s behalf when it was abandoned.
            stopped(15_000, "b", 3, 1),
            at(20_000, "world", Event::Fault { action: Fault::Applied(Action::Abandon { node: "b".into() }) }),
        ];
        assert_eq!(abandon_stops(&entries, &intervals(&entries)), [4_500_000], "k2 ran on 4.5 s after the abandon");
    }
}
