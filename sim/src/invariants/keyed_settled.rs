//! After churn stops, every key has exactly one acting owner, the HRW owner
//! over the members still running, within the keyed crash bound: the
//! keyed form of liveness, and the check that the view the members settle
//! on is the true one.

use hoplock::hrw::{Member, MemberSet};

use super::keyed_acting::Intervals;
use super::{Context, Property, Violation};

/// Reports each key that is unowned, doubly owned or owned by the wrong
/// member at the end, or that was still moving later than the bound allows.
pub fn check(acting: &Intervals, context: &Context, violations: &mut Vec<Violation>) {
    let Some(keyed) = &context.keyed else { return };
    let Some((quiet_from_us, live)) = context.contention.last() else { return };
    let settle_by_us = quiet_from_us.saturating_add(keyed.settle_bound_us);
    if settle_by_us > context.end_us {
        // The run ends before the members could be expected to settle.
        return;
    }
    let ids: Vec<&str> = live.iter().map(|node| keyed.id_of(node)).collect();
    let set = MemberSet::new(ids.iter().map(|id| Member::new(*id, "")));
    let mut wrong = Vec::new();
    for key in 0..keyed.keys {
        let open: Vec<_> = acting.get(&key).map_or(Vec::new(), |all| all.iter().filter(|a| a.is_open()).collect());
        let owner = set.owner(format!("k{key}")).map(|m| m.id.as_str());
        let holder = match open.as_slice() {
            [one] if Some(keyed.id_of(&one.node)) == owner => {
                if one.start_us > settle_by_us {
                    Some(format!("k{key} reached its owner {} only at {:.3}s", one.node, one.start_us as f64 / 1e6))
                } else {
                    None
                }
            }
            [] => Some(format!("k{key} has no acting owner (HRW says {})", owner.unwrap_or("nobody"))),
            many => Some(format!(
                "k{key} is held by [{}] at the end, HRW over the live members says {}",
                many.iter().map(|a| a.node.as_str()).collect::<Vec<_>>().join(", "),
                owner.unwrap_or("nobody")
            )),
        };
        wrong.extend(holder);
    }
    if let Some(first) = wrong.first() {
        violations.push(Violation {
            property: Property::KeyedSettled,
            at_us: settle_by_us,
            nodes: live.clone(),
            generation: None,
            detail: format!(
                "{} of {} keys not settled {:.3}s after the last membership change at {:.3}s; first: {first}",
                wrong.len(),
                keyed.keys,
                keyed.settle_bound_us as f64 / 1e6,
                *quiet_from_us as f64 / 1e6
            ),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Entry;
    use crate::invariants::KeyedFacts;
    use crate::invariants::keyed_acting::intervals;
    use crate::invariants::keyed_acting::tests::{started, stopped};

    fn check(entries: &[Entry], context: &Context, violations: &mut Vec<Violation>) {
        super::check(&intervals(entries), context, violations);
    }

    fn context() -> Context {
        Context {
            end_us: 100_000_000,
            contention: vec![(0, vec!["a".into(), "b".into()]), (10_000_000, vec!["a".into()])],
            keyed: Some(KeyedFacts { keys: 2, settle_bound_us: 20_000_000, ..KeyedFacts::default() }),
            ..Context::default()
        }
    }

    #[test]
    fn keys_left_with_a_departed_member_are_reported() {
        // b left at 10 s, but k1 stays with it.
        let bad = [started(0, "a", 0, 1), started(0, "b", 1, 1)];
        let mut found = Vec::new();
        check(&bad, &context(), &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].property, Property::KeyedSettled);
        assert!(found[0].detail.contains("k1 is held by [b]"), "{}", found[0].detail);
    }

    #[test]
    fn keys_that_move_too_late_or_not_at_all_are_reported_and_a_prompt_move_is_not() {
        let late =
            [started(0, "a", 0, 1), started(0, "b", 1, 1), stopped(10_000, "b", 1, 1), started(31_000, "a", 1, 3)];
        let mut found = Vec::new();
        check(&late, &context(), &mut found);
        assert!(found[0].detail.contains("only at 31.000s"), "{}", found[0].detail);
        let unowned = [started(0, "a", 0, 1), started(0, "b", 1, 1), stopped(10_000, "b", 1, 1)];
        let mut found = Vec::new();
        check(&unowned, &context(), &mut found);
        assert!(found[0].detail.contains("no acting owner"), "{}", found[0].detail);
        let prompt =
            [started(0, "a", 0, 1), started(0, "b", 1, 1), stopped(10_000, "b", 1, 1), started(12_000, "a", 1, 3)];
        let mut found = Vec::new();
        check(&prompt, &context(), &mut found);
        assert!(found.is_empty(), "{found:?}");
    }
}
