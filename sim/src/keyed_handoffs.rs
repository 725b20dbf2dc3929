//! How long a keyed world's keys take to reach another member after a
//! member leaves gracefully or crashes: the measured side of the bounds
//! W + P + 2 RTT (leave) and TTL·(1+ρ) + 2P + lock-delay + 3 RTT (crash)
//! that scenario files may assert with `max_leave_handoff_ms` and
//! `max_crash_handoff_ms`.

use crate::history::{Entry, Event};
use crate::invariants::keyed_acting::{Acting, Intervals};
use crate::invariants::stop_honoured::STOP;

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
                if let Some(node) = action.strip_prefix(STOP) {
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
    let held = |a: &Acting| a.node == node && a.start_us <= at_us && a.stop_us >= at_us;
    intervals
        .values()
        .filter_map(|acting| {
            let gone = acting.iter().find(|a| held(a))?;
            let next = acting.iter().find(|a| a.start_us >= gone.stop_us && a.incarnation != gone.incarnation)?;
            Some(next.start_us.saturating_sub(at_us))
        })
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invariants::keyed_acting::intervals;
    use crate::invariants::keyed_acting::tests::{started, stopped};
    use crate::invariants::test_support::at;

    #[test]
    fn a_leave_and_a_crash_are_timed_to_the_last_key_taken_over() {
        let entries = [
            started(0, "a", 1, 1),
            started(0, "a", 2, 1),
            started(0, "b", 3, 1),
            at(10_000, "world", Event::Fault { action: "stop a".into() }),
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
}
