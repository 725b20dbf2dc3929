//! L4: a stopped elector starts no term.
//!
//! `Elector::stop` promises that a campaign in progress returns `Stopped`
//! and that later campaigns return at once. A node the schedule stopped
//! must therefore hand out no leader context until it is restarted, even if
//! the stop arrived while it was winning a takeover or waiting out its
//! lock-delay (the term is then given back without starting). Work that
//! starts after a stop runs for a process its operator has told to shut
//! down.
//!
//! A term that the elector had already handed out when the stop arrived may
//! show up to two ticks later (the work records its start when it is first
//! polled), so acquisitions within two ticks of the stop are not judged.

use std::collections::BTreeMap;

use super::{Context, Property, Violation};
use crate::history::{Entry, Event};
use crate::world::Action;

/// Reports every term a node started after it was stopped and before it
/// was restarted.
pub fn check(entries: &[Entry], context: &Context, violations: &mut Vec<Violation>) {
    let slack_us = 2 * context.tick_us;
    // When each node was stopped, while it stays stopped.
    let mut stopped: BTreeMap<&str, u64> = BTreeMap::new();
    for entry in entries {
        match &entry.event {
            Event::Fault { action } => match action.applied() {
                Some(Action::Stop { node }) => {
                    stopped.insert(node, entry.at_us);
                }
                Some(Action::Restart { node }) => {
                    stopped.remove(node.as_str());
                }
                _ => {}
            },
            Event::Started { .. } => {
                stopped.remove(entry.node.as_str());
            }
            Event::Acquired { generation } => {
                let Some(&since) = stopped.get(entry.node.as_str()) else { continue };
                if entry.at_us > since + slack_us {
                    violations.push(Violation {
                        property: Property::StopHonoured,
                        at_us: entry.at_us,
                        nodes: vec![entry.node.clone()],
                        generation: Some(*generation),
                        detail: format!(
                            "{} started a term {:.3}s after it was stopped",
                            entry.node,
                            (entry.at_us - since) as f64 / 1e6
                        ),
                    });
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Fault;
    use crate::invariants::test_support::at;

    fn stop(at_ms: u64, node: &str) -> Entry {
        at(at_ms, "world", Event::Fault { action: Fault::Applied(Action::Stop { node: node.into() }) })
    }

    fn found(history: &[Entry]) -> Vec<Violation> {
        let context = Context { tick_us: 10_000, ..Context::default() };
        let mut violations = Vec::new();
        check(history, &context, &mut violations);
        violations
    }

    #[test]
    fn a_term_started_after_a_stop_is_flagged() {
        let history = [stop(10_000, "b"), at(15_000, "b", Event::Acquired { generation: 4 })];
        let violations = found(&history);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert_eq!(violations[0].property, Property::StopHonoured);
        assert_eq!(violations[0].generation, Some(4));
    }

    #[test]
    fn a_term_already_under_way_a_restart_or_another_node_is_not() {
        let history = [
            stop(10_000, "b"),
            // Handed out in the same tick as the stop.
            at(10_010, "b", Event::Acquired { generation: 4 }),
            at(11_000, "c", Event::Acquired { generation: 5 }),
            at(12_000, "world", Event::Fault { action: Fault::Applied(Action::Restart { node: "b".into() }) }),
            at(15_000, "b", Event::Acquired { generation: 6 }),
        ];
        assert!(found(&history).is_empty());
    }
}
