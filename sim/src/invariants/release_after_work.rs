//! I6: a lease is released only after the leader-only work has stopped.
//!
//! The simulated work waits for each downstream write to land before it
//! looks at its context again, so once it has returned none of its writes is
//! in flight. A write carrying generation `g` that lands after the
//! `released` record of `g` was stored therefore means the release came
//! before the work stopped.

use std::collections::BTreeMap;

use super::{Property, Violation};
use crate::history::{Entry, Event};

/// Reports every downstream write that landed after its term was released.
pub fn check(entries: &[Entry], violations: &mut Vec<Violation>) {
    let mut released: BTreeMap<u64, u64> = BTreeMap::new();
    let mut reported: BTreeMap<u64, ()> = BTreeMap::new();
    for entry in entries {
        match &entry.event {
            // A reset by the schedule is not the holder's release.
            Event::Store(op) if op.applied && op.released && op.client.as_deref() != Some(crate::history::OPERATOR) => {
                if let Some(generation) = op.generation {
                    released.entry(generation).or_insert(entry.at_us);
                }
            }
            Event::Downstream { generation, .. } => {
                let Some(&released_us) = released.get(generation) else { continue };
                if reported.insert(*generation, ()).is_some() {
                    continue;
                }
                violations.push(Violation {
                    property: Property::ReleaseAfterWork,
                    at_us: entry.at_us,
                    nodes: vec![entry.node.clone()],
                    generation: Some(*generation),
                    detail: format!(
                        "a write of generation {generation} landed {:.3}s after the lease was released",
                        entry.at_us.saturating_sub(released_us) as f64 / 1e6
                    ),
                });
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::StoreOp;
    use crate::history::StoreOpKind;
    use crate::invariants::test_support::at;

    fn release(generation: u64) -> Event {
        Event::Store(StoreOp {
            op: StoreOpKind::Update,
            applied: true,
            generation: Some(generation),
            released: true,
            ..StoreOp::default()
        })
    }

    fn write(generation: u64) -> Event {
        Event::Downstream { generation, accepted: true, highest_before: generation, sequence: 0 }
    }

    #[test]
    fn writes_before_the_release_pass_and_one_after_it_is_caught() {
        let good = [at(0, "a", write(1)), at(10, "s3", release(1)), at(20, "b", write(2))];
        let mut found = Vec::new();
        check(&good, &mut found);
        assert!(found.is_empty(), "{found:?}");

        let bad = [at(10, "s3", release(1)), at(20, "a", write(1)), at(30, "a", write(1))];
        check(&bad, &mut found);
        assert_eq!(found.len(), 1, "one report per generation");
        assert_eq!(found[0].property, Property::ReleaseAfterWork);
    }
}
