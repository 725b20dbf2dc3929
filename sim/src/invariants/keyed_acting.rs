//! The acting intervals of keyed members, as their work logged them: the
//! shared reading of the history behind every keyed checker.

use std::collections::BTreeMap;

use crate::history::{Entry, Event};
use crate::world::Action;

/// One member incarnation acting for one key, from its start to its stop,
/// its node's crash, or the end of the run (`u64::MAX` while open).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acting {
    pub node: String,
    pub incarnation: String,
    pub key: u32,
    pub round: u64,
    pub start_us: u64,
    pub stop_us: u64,
    /// Stop-the-world pauses of its node while it acted: the process did
    /// nothing then, so these spans are not acting.
    pub paused: Vec<(u64, u64)>,
}

/// Every key's acting intervals, in key order, each key's in start order.
pub type Intervals = BTreeMap<u32, Vec<Acting>>;

impl Acting {
    /// Whether it was still acting when the history ends.
    pub fn is_open(&self) -> bool {
        self.stop_us == u64::MAX
    }

    /// Whether it was acting at `at_us`, its start and stop included.
    pub fn spans(&self, at_us: u64) -> bool {
        self.start_us <= at_us && at_us <= self.stop_us
    }
}

/// When someone other than the members deleted, rewrote or reset the
/// membership object (`delete-members`, `write-members`, `reset-members`),
/// in time order. Each starts a new lineage of views, whose numbers may
/// repeat the old ones.
pub fn object_replaced(entries: &[Entry]) -> Vec<u64> {
    entries
        .iter()
        .filter(|entry| {
            matches!(&entry.event, Event::Fault { action } if matches!(
                action.applied(),
                Some(Action::DeleteMembers | Action::WriteMembers { .. } | Action::ResetMembers { .. })
            ))
        })
        .map(|entry| entry.at_us)
        .collect()
}

/// Which lineage of views `at_us` falls in: how many replacements of the
/// object came at or before it.
pub fn lineage(replaced: &[u64], at_us: u64) -> usize {
    replaced.partition_point(|&fault| fault <= at_us)
}

/// The evictions the store committed: the evicted member id and when.
pub fn evictions(entries: &[Entry]) -> Vec<(&str, u64)> {
    changes(entries, "evict")
}

/// The membership changes of one kind (`join`, `leave`, `evict`) the store
/// committed: the member id concerned and when. Every write of the object
/// records its view, renewals too, so a change is the first write of its
/// view (within its lineage) whose change is `kind`.
pub fn changes<'a>(entries: &'a [Entry], kind: &str) -> Vec<(&'a str, u64)> {
    let replaced = object_replaced(entries);
    let mut views = std::collections::BTreeSet::new();
    entries
        .iter()
        .filter_map(|entry| match &entry.event {
            Event::View { view, change, entry: id, .. }
                if views.insert((lineage(&replaced, entry.at_us), *view)) && change == kind =>
            {
                Some((id.as_str(), entry.at_us))
            }
            _ => None,
        })
        .collect()
}

/// Every acting interval, per key in key order, each key's in start order.
pub fn intervals(entries: &[Entry]) -> Intervals {
    let mut by_key: BTreeMap<u32, Vec<Acting>> = BTreeMap::new();
    // Open intervals by (node, key): an incarnation runs a key at most once
    // at a time, and one node runs one incarnation at a time.
    let mut open: BTreeMap<(String, u32), usize> = BTreeMap::new();
    // For each open interval, the windows after a suspend in which it may
    // still act if it stops within them (`excuse_waking`).
    let mut woke: BTreeMap<(String, u32), Vec<(u64, u64)>> = BTreeMap::new();
    type Woke = BTreeMap<(String, u32), Vec<(u64, u64)>>;
    fn close(by_key: &mut Intervals, woke: &mut Woke, slot: (String, u32), index: usize, at_us: u64) {
        let acting = &mut by_key.get_mut(&slot.1).expect("opened above")[index];
        acting.stop_us = at_us;
        super::excuse_waking(&mut acting.paused, &woke.remove(&slot).unwrap_or_default(), at_us);
    }
    for entry in entries {
        match &entry.event {
            Event::KeyStarted { key, round, incarnation } => {
                let intervals = by_key.entry(*key).or_default();
                open.insert((entry.node.clone(), *key), intervals.len());
                intervals.push(Acting {
                    node: entry.node.clone(),
                    incarnation: incarnation.clone(),
                    key: *key,
                    round: *round,
                    start_us: entry.at_us,
                    stop_us: u64::MAX,
                    paused: Vec::new(),
                });
            }
            Event::KeyStopped { key, .. } => {
                let slot = (entry.node.clone(), *key);
                if let Some(index) = open.remove(&slot) {
                    close(&mut by_key, &mut woke, slot, index, entry.at_us);
                }
            }
            Event::Paused { until_us } => {
                for ((node, key), index) in &open {
                    if *node == entry.node {
                        by_key.get_mut(key).expect("opened above")[*index].paused.push((entry.at_us, *until_us));
                    }
                }
            }
            Event::Suspended { until_us, stops_by_us } => {
                for (slot, index) in &open {
                    if slot.0 == entry.node {
                        by_key.get_mut(&slot.1).expect("opened above")[*index].paused.push((entry.at_us, *until_us));
                        woke.entry(slot.clone()).or_default().push((*until_us, *stops_by_us));
                    }
                }
            }
            Event::Crashed => {
                let node = entry.node.clone();
                let closing: Vec<(String, u32)> = open.keys().filter(|(n, _)| *n == node).cloned().collect();
                for slot in closing {
                    let index = open.remove(&slot).expect("listed above");
                    close(&mut by_key, &mut woke, slot, index, entry.at_us);
                }
            }
            _ => {}
        }
    }
    for intervals in by_key.values_mut() {
        intervals.sort_by_key(|acting| acting.start_us);
    }
    by_key
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::invariants::test_support::at;

    pub fn started(ms: u64, node: &str, key: u32, round: u64) -> Entry {
        at(ms, node, Event::KeyStarted { key, round, incarnation: format!("{node}-1") })
    }

    pub fn stopped(ms: u64, node: &str, key: u32, round: u64) -> Entry {
        at(ms, node, Event::KeyStopped { key, round, incarnation: format!("{node}-1"), aborted: false })
    }

    #[test]
    fn intervals_close_at_the_stop_or_the_crash_and_stay_open_otherwise() {
        let entries = [
            started(0, "a", 1, 1),
            started(0, "a", 2, 1),
            started(0, "b", 3, 1),
            stopped(5, "a", 1, 1),
            at(7, "a", Event::Crashed),
        ];
        let found = intervals(&entries);
        assert_eq!(found[&1][0].stop_us, 5_000);
        assert_eq!(found[&2][0].stop_us, 7_000);
        assert!(found[&3][0].is_open());
    }

    #[test]
    fn a_pause_is_kept_with_every_interval_open_on_its_node() {
        let entries = [
            started(0, "a", 1, 1),
            started(0, "b", 2, 1),
            at(3, "a", Event::Paused { until_us: 9_000 }),
            stopped(10, "a", 1, 1),
        ];
        let found = intervals(&entries);
        assert_eq!(found[&1][0].paused, [(3_000, 9_000)]);
        assert!(found[&2][0].paused.is_empty());
    }
}
