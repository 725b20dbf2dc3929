//! I3/I4: no two nodes believe they lead at the same instant.
//!
//! A node believes it leads from the moment its leader context is handed
//! out until the context is cancelled (or it crashes). A stop-the-world
//! pause is not belief: the process does nothing while paused. A deposed
//! leader whose work keeps writing after its context was cancelled is not
//! a belief overlap either; the fence must reject those writes, which
//! [`super::monotone_fencing`] checks.
//!
//! The safety argument covers a holder H and a contender C only while C's
//! clock runs no faster against H's than H's own drift bound allows:
//! r_C / r_H ≤ (1+ρ_H)/(1−ρ_H), r being each clock's rate in local seconds
//! per true second. Each overlapping pair is judged on its own; pairs
//! outside that bound are skipped and counted ([`unchecked_pairs`]), and one
//! node far off its bound does not switch the check off for the others.

use super::{Context, Property, Term, Violation, terms, unpaused_us};
use crate::history::Entry;

/// Reports every pair of terms on different nodes that overlap in time,
/// where the clocks involved are within the holder's drift bound.
pub fn check(entries: &[Entry], context: &Context, violations: &mut Vec<Violation>) {
    let terms = terms(entries, context.end_us);
    for (i, a) in terms.iter().enumerate() {
        for b in &terms[i + 1..] {
            if a.node == b.node || !covered(&a.node, &b.node, context) {
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

/// Overlapping pairs of terms that were not judged because the
/// contender's clock ran faster against the holder's than the holder's
/// drift bound allows.
pub fn unchecked_pairs(entries: &[Entry], context: &Context) -> usize {
    let terms = terms(entries, context.end_us);
    let mut skipped = 0;
    for (i, a) in terms.iter().enumerate() {
        for b in &terms[i + 1..] {
            if a.node != b.node && !covered(&a.node, &b.node, context) && overlap_us(a, b) > 0 {
                skipped += 1;
            }
        }
    }
    skipped
}

/// Whether the safety argument covers `holder`'s term against `contender`:
/// r_C / r_H ≤ (1+ρ_H)/(1−ρ_H). A node the context does not know keeps
/// true time and claims no drift.
fn covered(holder: &str, contender: &str, context: &Context) -> bool {
    let facts = |name: &str| context.node(name).map_or((1.0, 0.0), |facts| (facts.rate, facts.drift_bound));
    let (holder_rate, rho) = facts(holder);
    let (contender_rate, _) = facts(contender);
    // A hair of slack for floating point at exactly the bound.
    contender_rate / holder_rate <= (1.0 + rho) / (1.0 - rho) * (1.0 + 1e-12)
}

/// How long two terms were both believed, not counting pauses.
fn overlap_us(a: &Term, b: &Term) -> u64 {
    let pauses: Vec<(u64, u64)> = a.paused.iter().chain(&b.paused).copied().collect();
    unpaused_us(a.start_us.max(b.start_us), a.end_us.min(b.end_us), &pauses)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Event;
    use crate::history::StepReason;
    use crate::invariants::test_support::at;

    fn context() -> Context {
        Context { end_us: 100_000_000, ..Context::default() }
    }

    fn node(name: &str, drift: f64, bound: f64) -> crate::invariants::NodeFacts {
        crate::invariants::NodeFacts { name: name.into(), rate: 1.0 + drift, drift_bound: bound, ..Default::default() }
    }

    fn stepped(generation: u64) -> Event {
        Event::Stepped { generation, reason: StepReason::Cancelled }
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
    fn a_suspended_holder_may_believe_until_its_wake_grace_and_no_longer() {
        // a's host sleeps from 5 to 50 ms; b takes over at 20 ms. a may
        // still believe for its suspend check after waking (until 55 ms).
        let suspended = at(5, "a", Event::Suspended { until_us: 50_000, stops_by_us: 55_000 });
        let history = [
            at(0, "a", Event::Acquired { generation: 1 }),
            suspended.clone(),
            at(20, "b", Event::Acquired { generation: 2 }),
            at(55, "a", stepped(1)),
        ];
        let mut found = Vec::new();
        check(&history, &context(), &mut found);
        assert!(found.is_empty(), "{found:?}");
        // Stopping later than the bound: its whole time awake counts.
        let late = [history[0].clone(), suspended, history[2].clone(), at(58, "a", stepped(1))];
        check(&late, &context(), &mut found);
        assert_eq!(found.len(), 1);
        assert!(found[0].detail.contains("0.008s"), "{}", found[0].detail);
    }

    #[test]
    fn a_term_that_outlived_a_short_suspend_is_belief_from_the_moment_it_wakes() {
        // a sleeps from 5 to 10 ms and its term goes on; b takes over at
        // 12 ms, inside a's waking window: an early takeover, caught whole.
        let history = [
            at(0, "a", Event::Acquired { generation: 1 }),
            at(5, "a", Event::Suspended { until_us: 10_000, stops_by_us: 15_000 }),
            at(12, "b", Event::Acquired { generation: 2 }),
            at(40, "a", stepped(1)),
        ];
        let mut found = Vec::new();
        check(&history, &context(), &mut found);
        assert_eq!(found.len(), 1);
        assert!(found[0].detail.contains("0.028s"), "{}", found[0].detail);
    }

    #[test]
    fn beyond_the_holders_drift_bound_the_pair_is_skipped_and_counted() {
        let history = [at(0, "a", Event::Acquired { generation: 1 }), at(1, "b", Event::Acquired { generation: 2 })];
        // b's clock runs 5 % fast; a allows 0.1 %.
        let context = Context { facts: vec![node("a", 0.0, 1e-3), node("b", 0.05, 1e-3)], ..context() };
        let mut found = Vec::new();
        check(&history, &context, &mut found);
        assert!(found.is_empty());
        assert_eq!(unchecked_pairs(&history, &context), 1);
        // A contender whose clock runs slow is no threat to the argument.
        let context = Context { facts: vec![node("a", 0.0, 1e-3), node("b", -0.05, 1e-3)], ..context };
        check(&history, &context, &mut found);
        assert_eq!(found.len(), 1);
    }

    #[test]
    fn one_node_off_its_bound_does_not_switch_the_check_off_for_the_others() {
        // x runs 5 % fast and never leads; a and b, both within bound,
        // overlap. The old run-wide gate passed this history.
        let history = [
            at(0, "a", Event::Acquired { generation: 1 }),
            at(5, "b", Event::Acquired { generation: 2 }),
            at(9, "a", stepped(1)),
        ];
        let facts = vec![node("a", 1e-3, 1e-3), node("b", -1e-3, 1e-3), node("x", 0.05, 1e-3)];
        let mut found = Vec::new();
        check(&history, &Context { facts, ..context() }, &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
    }
}
