//! K7: a key whose holder lost it involuntarily starts elsewhere only once
//! the new holder's lock-delay has passed.
//!
//! A holder loses a key involuntarily when its entry is evicted, or when
//! the membership object it acted under is deleted or rewritten by someone
//! else: it did not stop the key's work and hand it on, its term simply ran
//! out, and writes it sent before may still be in flight. The next holder
//! (another incarnation) must start the key no earlier than the lock-delay
//! after the eviction committed in the store, or, for an object deleted or
//! rewritten under it, after the old holder stopped. Graceful handovers (a
//! leave, a key moved to a joiner) skip the lock-delay, as the design says.
//!
//! The bound is in true time: the new holder's clock may run fast, so the
//! delay is divided by its rate, less one tick for timer rounding.

use super::keyed_acting::{Acting, Intervals};
use super::{Context, Property, Violation};
use crate::history::Entry;

/// What ended a holder's right involuntarily: an eviction of a member id,
/// or the membership object deleted or rewritten under everyone.
#[derive(Debug)]
enum Loss<'a> {
    Evicted { id: &'a str, at_us: u64 },
    ObjectReplaced { at_us: u64 },
}

/// Reports every key started before its lock-delay passed.
pub fn check(entries: &[Entry], acting: &Intervals, context: &Context, violations: &mut Vec<Violation>) {
    let Some(keyed) = &context.keyed else { return };
    let evicted = super::keyed_acting::evictions(entries).into_iter().map(|(id, at_us)| Loss::Evicted { id, at_us });
    let replaced =
        super::keyed_acting::object_replaced(entries).into_iter().map(|at_us| Loss::ObjectReplaced { at_us });
    let losses: Vec<Loss<'_>> = evicted.chain(replaced).collect();
    for (key, intervals) in acting {
        for pair in intervals.windows(2) {
            let (before, next) = (&pair[0], &pair[1]);
            if before.incarnation == next.incarnation {
                continue;
            }
            let Some(node) = context.node(&next.node) else { continue };
            if node.lock_delay_us == 0 {
                continue;
            }
            let Some(from_us) = involuntary_end(before, next, &losses, keyed.id_of(&before.node)) else { continue };
            let least = super::least_true_wait_us(node.lock_delay_us, node.rate, context.tick_us);
            let waited = next.start_us.saturating_sub(from_us);
            if waited < least {
                violations.push(Violation {
                    property: Property::KeyedLockDelay,
                    at_us: next.start_us,
                    nodes: vec![next.node.clone(), before.node.clone()],
                    generation: Some(next.round),
                    detail: format!(
                        "k{key}: {} started it {:.3}s after {} lost it involuntarily; {}'s lock-delay is {:.3}s",
                        next.node,
                        waited as f64 / 1e6,
                        before.node,
                        next.node,
                        node.lock_delay_us as f64 / 1e6
                    ),
                });
                break;
            }
        }
    }
}

/// When `before`'s holder lost the key involuntarily, if it did, between
/// starting it and `next` starting it: the eviction's commit, or, for an
/// object replaced under it, the later of the replacement and its stop.
fn involuntary_end(before: &Acting, next: &Acting, losses: &[Loss<'_>], id: &str) -> Option<u64> {
    losses
        .iter()
        .filter_map(|loss| match *loss {
            Loss::Evicted { id: evicted, at_us } if evicted == id => {
                (before.start_us < at_us && at_us <= next.start_us).then_some(at_us)
            }
            // The object replaced while the holder acted: it lost the key
            // when it stopped.
            Loss::ObjectReplaced { at_us } => (before.start_us < at_us && at_us <= before.stop_us.min(next.start_us))
                .then_some(before.stop_us.min(next.start_us)),
            Loss::Evicted { .. } => None,
        })
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Event;
    use crate::history::Fault;
    use crate::invariants::keyed_acting::intervals;
    use crate::invariants::keyed_acting::tests::{started, stopped};
    use crate::invariants::test_support::at;
    use crate::invariants::{KeyedFacts, NodeFacts};
    use crate::world::Action;

    fn context() -> Context {
        let node =
            |name: &str| NodeFacts { name: name.into(), lock_delay_us: 2_000_000, rate: 1.0, ..Default::default() };
        Context {
            facts: vec![node("a"), node("b")],
            tick_us: 1_000,
            keyed: Some(KeyedFacts { keys: 1, ..Default::default() }),
            ..Default::default()
        }
    }

    fn evict(ms: u64, id: &str) -> Entry {
        at(ms, "s3", Event::View { view: 3, members: vec!["b".into()], change: "evict".into(), entry: id.into() })
    }

    fn judge(entries: &[Entry]) -> Vec<Violation> {
        let mut found = Vec::new();
        check(entries, &intervals(entries), &context(), &mut found);
        found
    }

    #[test]
    fn a_key_of_an_evicted_member_waits_the_lock_delay_from_the_eviction() {
        let early = [started(0, "a", 0, 1), stopped(5_000, "a", 0, 1), evict(9_000, "a"), started(10_000, "b", 0, 3)];
        let found = judge(&early);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].property, Property::KeyedLockDelay);
        assert!(found[0].detail.contains("1.000s after a lost it"), "{}", found[0].detail);
        let waited = [started(0, "a", 0, 1), stopped(5_000, "a", 0, 1), evict(9_000, "a"), started(11_000, "b", 0, 3)];
        assert!(judge(&waited).is_empty());
    }

    #[test]
    fn graceful_moves_skip_it_and_a_replaced_object_counts_from_the_stop() {
        let leave = [
            started(0, "a", 0, 1),
            stopped(5_000, "a", 0, 1),
            at(
                5_100,
                "s3",
                Event::View { view: 3, members: vec!["b".into()], change: "leave".into(), entry: "a".into() },
            ),
            started(5_200, "b", 0, 3),
        ];
        assert!(judge(&leave).is_empty(), "a leave hands the key on at once");
        let replaced = [
            started(0, "a", 0, 1),
            at(4_000, "world", Event::Fault { action: Fault::Applied(Action::DeleteMembers) }),
            stopped(5_000, "a", 0, 1),
            started(6_000, "b", 0, 1000),
        ];
        let found = judge(&replaced);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].detail.contains("1.000s after a lost it"), "{}", found[0].detail);
    }
}
