//! I5: after an involuntary takeover, the new leader acts only once its
//! lock-delay has passed.
//!
//! The takeover is the first applied write of a generation that replaced a
//! live (not released) record. Its leader context must come no earlier than
//! the lock-delay after the write committed in the store (not after its
//! request arrived: a slow commit moves the takeover later), in true time:
//! the node's clock may run fast, so the bound is the delay divided by its
//! rate, less one tick for timer rounding.
//!
//! A release ends the lock-delay only if it is a holder's own: a takeover
//! whose term was never announced (it landed while its elector was being
//! stopped, say) and that was released at once gave nobody a term to end,
//! and the old holder's writes may still be in flight. The generation that
//! follows such a release inherits the takeover's obligation: it may act
//! no earlier than the lock-delay after the takeover committed.

use std::collections::{BTreeMap, BTreeSet};

use super::{Context, Property, Violation};
use crate::history::{Entry, Event, StoreOpKind};

/// Reports every leader context handed out before its lock-delay passed.
pub fn check(entries: &[Entry], context: &Context, violations: &mut Vec<Violation>) {
    // First the takeovers: generation → when the write that took it from a
    // live holder reached the store. A separate pass, because a store entry
    // may sort after the leader context it made possible.
    let mut takeovers: BTreeMap<u64, u64> = BTreeMap::new();
    let announced: BTreeSet<u64> = entries
        .iter()
        .filter_map(|entry| match entry.event {
            Event::Acquired { generation } => Some(generation),
            _ => None,
        })
        .collect();
    let mut first: BTreeSet<u64> = BTreeSet::new();
    let mut live = false;
    // The takeover commit a released record still owes its lock-delay to:
    // set when the record released is an unannounced takeover's.
    let mut owed: Option<u64> = None;
    for entry in entries {
        let Event::Store(op) = &entry.event else { continue };
        if !op.applied {
            continue;
        }
        if op.op == StoreOpKind::Delete {
            live = false;
            owed = None;
            continue;
        }
        if let Some(generation) = op.generation {
            // Only a generation's first write can be a takeover; the rest
            // are its renewals.
            // The entry's time is when the write committed, which may be
            // well after it arrived: the old holder's term ran until then.
            if first.insert(generation) {
                if live {
                    takeovers.insert(generation, entry.at_us);
                } else if let Some(written_us) = owed {
                    takeovers.insert(generation, written_us);
                }
            }
            // An operator's release (`lease reset`) is judged by I4a, not
            // passed on here.
            let by_elector = op.client.as_deref().is_some_and(|client| client != crate::history::OPERATOR);
            owed = match takeovers.get(&generation) {
                Some(&written_us) if by_elector && op.released && !announced.contains(&generation) => Some(written_us),
                _ => None,
            };
            live = !op.released;
        }
    }
    for entry in entries {
        let Event::Acquired { generation } = &entry.event else { continue };
        let Some(&written_us) = takeovers.get(generation) else { continue };
        let Some(node) = context.node(&entry.node) else { continue };
        if node.lock_delay_us == 0 {
            continue;
        }
        let least = super::least_true_wait_us(node.lock_delay_us, node.rate, context.tick_us);
        let waited = entry.at_us.saturating_sub(written_us);
        if waited < least {
            violations.push(Violation {
                property: Property::LockDelay,
                at_us: entry.at_us,
                nodes: vec![entry.node.clone()],
                generation: Some(*generation),
                detail: format!(
                    "acted {:.3}s after taking the lease from a live holder; its lock-delay is {:.3}s",
                    waited as f64 / 1e6,
                    node.lock_delay_us as f64 / 1e6
                ),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::StoreOp;
    use crate::invariants::{NodeFacts, test_support::at};

    fn write(generation: u64, released: bool) -> Event {
        Event::Store(StoreOp {
            client: Some("a#0".into()),
            op: StoreOpKind::Update,
            applied: true,
            generation: Some(generation),
            released,
            ..StoreOp::default()
        })
    }

    fn context() -> Context {
        let facts = NodeFacts {
            name: "b".into(),
            lock_delay_us: 2_000_000,
            rate: 1.0,
            drift_bound: 1e-3,
            ..NodeFacts::default()
        };
        Context { facts: vec![facts], tick_us: 10_000, ..Context::default() }
    }

    #[test]
    fn a_takeover_that_waits_passes_and_one_that_does_not_is_caught() {
        // The takeover commits at 0.5 s; the context comes 2 s after that.
        let waited = [
            at(0, "s3", write(1, false)),
            at(500, "s3", write(2, false)),
            at(2_500, "b", Event::Acquired { generation: 2 }),
        ];
        let mut found = Vec::new();
        check(&waited, &context(), &mut found);
        assert!(found.is_empty(), "{found:?}");

        let eager = [
            at(0, "s3", write(1, false)),
            at(1, "s3", write(2, false)),
            at(50, "b", Event::Acquired { generation: 2 }),
        ];
        check(&eager, &context(), &mut found);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].property, Property::LockDelay);
    }

    #[test]
    fn the_delay_counts_from_the_commit_not_from_the_request() {
        // The takeover request arrives at 0 but commits only at 0.8 s; the
        // old holder's term ran until the commit. Acting at 2.1 s is 2.1 s
        // after the request and only 1.3 s after the commit.
        let mut takeover = write(2, false);
        if let Event::Store(op) = &mut takeover {
            op.invoked_us = 0;
        }
        let entries =
            [at(0, "s3", write(1, false)), at(800, "s3", takeover), at(2_100, "b", Event::Acquired { generation: 2 })];
        let mut found = Vec::new();
        check(&entries, &context(), &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].detail.contains("acted 1.300s"), "{}", found[0].detail);
    }

    #[test]
    fn a_takeover_released_unannounced_passes_its_lock_delay_on() {
        // Generation 2 took over a live record at 0.5 s and was released at
        // once, its term never announced; generation 3 acting at 1 s is only
        // 0.5 s after the takeover.
        let entries = [
            at(0, "s3", write(1, false)),
            at(500, "s3", write(2, false)),
            at(600, "s3", write(2, true)),
            at(700, "s3", write(3, false)),
            at(1_000, "b", Event::Acquired { generation: 3 }),
        ];
        let mut found = Vec::new();
        check(&entries, &context(), &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
        // Had generation 2 announced its term, its release ends it.
        let mut announced = entries.to_vec();
        announced.insert(2, at(550, "a", Event::Acquired { generation: 2 }));
        let mut found = Vec::new();
        check(&announced, &context(), &mut found);
        assert!(found.is_empty(), "a holder's own release ends its lock-delay: {found:?}");
    }

    #[test]
    fn a_release_lets_the_next_leader_act_at_once() {
        let entries =
            [at(0, "s3", write(1, true)), at(1, "s3", write(2, false)), at(2, "b", Event::Acquired { generation: 2 })];
        let mut found = Vec::new();
        check(&entries, &context(), &mut found);
        assert!(found.is_empty(), "{found:?}");
    }
}
