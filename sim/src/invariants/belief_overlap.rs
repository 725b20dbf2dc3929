//! I3/I4: no two nodes believe they lead at the same instant.
//!
//! A node believes it leads from the moment its leader context is handed
//! out until the context is cancelled (or it crashes). A stop-the-world
//! pause is not belief: the process does nothing while paused. A deposed
//! leader whose work keeps writing after its context was cancelled is not
//! a belief overlap either; the fence must reject those writes, which
//! [`super::monotone_fencing`] checks.
//!
//! Only a violation while every clock's drift stays within the configured
//! bound: beyond it, the safety argument does not hold and never claimed to.

use super::{Context, Property, Term, Violation, terms};
use crate::history::Entry;

/// Reports every pair of terms on different nodes that overlap in time.
pub fn check(entries: &[Entry], context: &Context, violations: &mut Vec<Violation>) {
    if !context.drift_within_bound {
        return;
    }
    let terms = terms(entries, context.end_us);
    for (i, a) in terms.iter().enumerate() {
        for b in &terms[i + 1..] {
            if a.node == b.node {
                continue;
            }
            let overlap = overlap_us(a, b);
            if overlap > 0 {
                violations.push(Violation {
                    property: Property::NoBeliefOverlap,
                    at_us: a.start_us.max(b.start_us),
                    nodes: vec![a.node.clone(), b.node.clone()],
                    generation: Some(a.generation.max(b.generation)),
                    detail: format!(
                        "{} (generation {}) and {} (generation {}) both believed they led for {:.3}s",
                        a.node,
                        a.generation,
                        b.node,
                        b.generation,
                        overlap as f64 / 1e6
                    ),
                });
            }
        }
    }
}

/// How long two terms were both believed, not counting pauses.
fn overlap_us(a: &Term, b: &Term) -> u64 {
    let start = a.start_us.max(b.start_us);
    let end = a.end_us.min(b.end_us);
    if end <= start {
        return 0;
    }
    // Walk the shared span, subtracting every pause of either term.
    let mut pauses: Vec<(u64, u64)> = a
        .paused
        .iter()
        .chain(&b.paused)
        .map(|&(from, to)| (from.max(start), to.min(end)))
        .filter(|(from, to)| from < to)
        .collect();
    pauses.sort_unstable();
    let mut covered = 0;
    let mut cursor = start;
    for (from, to) in pauses {
        let from = from.max(cursor);
        if to > from {
            covered += to - from;
            cursor = to;
        }
    }
    (end - start).saturating_sub(covered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Event;
    use crate::invariants::test_support::at;

    fn context() -> Context {
        Context { drift_within_bound: true, end_us: 100_000_000, ..Context::default() }
    }

    fn stepped(generation: u64) -> Event {
        Event::Stepped { generation, reason: "cancelled".into() }
    }

    #[test]
    fn handover_without_overlap_passes() {
        let history = [
            at(0, "a", Event::Acquired { generation: 1 }),
            at(10, "a", stepped(1)),
            at(10, "b", Event::Acquired { generation: 2 }),
        ];
        let mut found = Vec::new();
        check(&history, &context(), &mut found);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn overlap_is_caught_with_its_length() {
        let history = [
            at(0, "a", Event::Acquired { generation: 1 }),
            at(8, "b", Event::Acquired { generation: 2 }),
            at(10, "a", stepped(1)),
        ];
        let mut found = Vec::new();
        check(&history, &context(), &mut found);
        assert_eq!(found.len(), 1);
        assert!(found[0].detail.contains("0.002s"), "{}", found[0].detail);
    }

    #[test]
    fn a_pause_is_not_belief_and_a_crash_ends_it() {
        let history = [
            at(0, "a", Event::Acquired { generation: 1 }),
            at(5, "a", Event::Paused { until_us: 50_000 }),
            at(20, "b", Event::Acquired { generation: 2 }),
            at(50, "a", stepped(1)),
            at(60, "b", Event::Crashed),
            at(61, "c", Event::Acquired { generation: 3 }),
        ];
        let mut found = Vec::new();
        check(&history, &context(), &mut found);
        assert!(found.is_empty(), "{found:?}");
        // Without the pause, a overlaps b.
        let unpaused: Vec<_> = history.iter().filter(|e| !matches!(e.event, Event::Paused { .. })).cloned().collect();
        check(&unpaused, &context(), &mut found);
        assert_eq!(found.len(), 1);
    }

    #[test]
    fn beyond_the_drift_bound_nothing_is_claimed() {
        let history = [at(0, "a", Event::Acquired { generation: 1 }), at(1, "b", Event::Acquired { generation: 2 })];
        let mut found = Vec::new();
        check(&history, &Context { drift_within_bound: false, ..context() }, &mut found);
        assert!(found.is_empty());
    }
}
