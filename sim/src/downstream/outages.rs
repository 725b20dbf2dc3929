//! A node's outages as its history tells them (pauses, suspends, crashes
//! and restarts), and what they do to a timer of the node's: what the
//! keyed downstream needs to send and land its writes after the run as the
//! node's own timers would have.

use std::collections::BTreeMap;

use crate::history::{Entry, Event};

/// When each node was held (paused or suspended) or lost its process, in
/// microseconds since the start.
#[derive(Debug, Default)]
pub struct Outages {
    /// Per node, by when they began: (from, until) of every pause and
    /// suspend, which hold the node's timers until they end.
    holds: BTreeMap<String, Vec<(u64, u64)>>,
    /// Per node, in order: the stretches it was suspended, merged where
    /// they overlap as the simulated clock merges them, which stop its
    /// timers' clock.
    suspends: BTreeMap<String, Vec<(u64, u64)>>,
    /// Per node, in order: when its process was crashed or restarted.
    losses: BTreeMap<String, Vec<u64>>,
    /// When the run stopped every host.
    ended_us: u64,
}

impl Outages {
    /// The outages `entries` record, in a run whose hosts were all stopped
    /// at `ended_us`.
    pub fn read(entries: &[Entry], ended_us: u64) -> Outages {
        let mut outages = Outages { ended_us, ..Outages::default() };
        for entry in entries {
            let until_us = match entry.event {
                Event::Paused { until_us } => until_us,
                Event::Suspended { until_us, .. } => {
                    outages.suspends.entry(entry.node.clone()).or_default().push((entry.at_us, until_us));
                    until_us
                }
                Event::Crashed => {
                    outages.losses.entry(entry.node.clone()).or_default().push(entry.at_us);
                    continue;
                }
                _ => continue,
            };
            outages.holds.entry(entry.node.clone()).or_default().push((entry.at_us, until_us));
        }
        for holds in outages.holds.values_mut() {
            holds.sort_unstable();
        }
        for suspends in outages.suspends.values_mut() {
            *suspends = crate::clocks::merged(std::mem::take(suspends));
        }
        for losses in outages.losses.values_mut() {
            losses.sort_unstable();
        }
        outages
    }

    /// When a timer `node` armed at `armed_us` for `due_us` fires, as the
    /// simulated clock fires it.
    pub fn fired(&self, node: &str, armed_us: u64, due_us: u64) -> u64 {
        let holds = self.holds.get(node).map_or(&[][..], Vec::as_slice);
        let suspends = self.suspends.get(node).map_or(&[][..], Vec::as_slice);
        // The timer's clock stands still while the host sleeps, so a suspend
        // that begins before the timer is due makes it that much later.
        let mut at = due_us;
        for &(from, until) in suspends {
            if armed_us <= from && from < at {
                at = at.saturating_add(until - from);
            }
        }
        // Due while the node is held, it fires when the hold ends (and a
        // hold that began meanwhile and ends later holds it on). A hold that
        // begins just as the timer is due comes too late for it: the node's
        // timers up to the instant an outage is applied have fired.
        while let Some(until) = holds.iter().filter(|&&(from, until)| from < at && at < until).map(|h| h.1).max() {
            at = until;
        }
        at
    }

    /// When a write `node` sent at `sent_us`, due at `due_us`, lands, if it
    /// does: held as a timer of the sender's would be, and lost if the
    /// sender's process ends before then (one that lands as its process
    /// ends is delivered).
    pub fn landing(&self, node: &str, sent_us: u64, due_us: u64) -> Option<u64> {
        let at = self.fired(node, sent_us, due_us);
        (self.stopped(node, sent_us) >= at).then_some(at)
    }

    /// When `node`'s process running at `since_us` ended: its first crash
    /// or restart from then, or the end of the run.
    pub fn stopped(&self, node: &str, since_us: u64) -> u64 {
        let losses = self.losses.get(node).map_or(&[][..], Vec::as_slice);
        losses.iter().copied().find(|&lost| lost >= since_us).unwrap_or(self.ended_us).min(self.ended_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000;

    fn outages(events: &[(u64, &str, Event)]) -> Outages {
        let entries: Vec<Entry> = events
            .iter()
            .map(|(ms, node, event)| Entry { at_us: ms * MS, node: node.to_string(), event: event.clone() })
            .collect();
        Outages::read(&entries, 10_000 * MS)
    }

    #[test]
    fn a_pause_holds_a_timer_due_during_it_until_it_ends() {
        let outages = outages(&[(1_200, "a", Event::Paused { until_us: 3_000 * MS })]);
        assert_eq!(outages.fired("a", 1_000 * MS, 1_100 * MS), 1_100 * MS, "due before the pause");
        assert_eq!(outages.fired("a", 1_000 * MS, 1_500 * MS), 3_000 * MS);
        assert_eq!(outages.fired("a", 1_000 * MS, 3_500 * MS), 3_500 * MS, "due after it");
        assert_eq!(outages.fired("b", 1_000 * MS, 1_500 * MS), 1_500 * MS, "another node's pause");
    }

    #[test]
    fn a_suspend_makes_a_timer_armed_before_it_late_by_the_time_slept() {
        let suspended = Event::Suspended { until_us: 1_700 * MS, stops_by_us: 1_800 * MS };
        let outages = outages(&[(1_200, "a", suspended)]);
        assert_eq!(outages.fired("a", 1_000 * MS, 1_500 * MS), 2_000 * MS);
        assert_eq!(outages.fired("a", 1_000 * MS, 5_000 * MS), 5_500 * MS);
        assert_eq!(outages.fired("a", 1_000 * MS, 1_100 * MS), 1_100 * MS, "due before the suspend");
    }

    #[test]
    fn overlapping_suspends_stop_the_timer_clock_once() {
        let first = Event::Suspended { until_us: 15_000 * MS, stops_by_us: 15_100 * MS };
        let inner = Event::Suspended { until_us: 14_000 * MS, stops_by_us: 14_100 * MS };
        let outages = outages(&[(10_000, "a", first), (11_000, "a", inner)]);
        // Armed at 9 s for 12 s: the clock stood still from 10 s to 15 s.
        assert_eq!(outages.fired("a", 9_000 * MS, 12_000 * MS), 17_000 * MS);
    }

    #[test]
    fn a_crash_a_restart_or_the_end_of_the_run_loses_a_write_still_on_its_way() {
        let outages = outages(&[(1_200, "a", Event::Crashed), (1_300, "c", Event::Crashed)]);
        assert_eq!(outages.landing("a", 1_000 * MS, 1_100 * MS), Some(1_100 * MS));
        assert_eq!(outages.landing("a", 1_000 * MS, 1_500 * MS), None);
        assert_eq!(outages.landing("a", 2_000 * MS, 2_500 * MS), Some(2_500 * MS), "sent after the restart");
        assert_eq!(outages.landing("b", 1_000 * MS, 1_500 * MS), Some(1_500 * MS), "another node's crash");
        assert_eq!(outages.landing("b", 9_800 * MS, 10_300 * MS), None, "the end of the run");
        assert_eq!(outages.stopped("a", 0), 1_200 * MS);
        assert_eq!(outages.stopped("a", 1_201 * MS), 10_000 * MS);
    }
}
