//! I2: fencing tokens never go down.
//!
//! Three views of one rule: the generation stored in the lease key never
//! goes down (across releases and restarts too), the generations acquired
//! strictly increase in the order the terms began, and the downstream
//! resource never accepts a token below one it accepted before. Stale
//! writes that the downstream *rejected* are fine; they are counted by
//! [`stale_writes`] so scenarios can expect them.

use super::{Property, Violation};
use crate::history::{Entry, Event};

/// Reports every place a token went down.
pub fn check(entries: &[Entry], violations: &mut Vec<Violation>) {
    let mut stored: Option<u64> = None;
    let mut stored_max: Option<u64> = None;
    let mut acquired: Option<(u64, &str)> = None;
    // L2, per node process: the last generation `observe()` reported.
    let mut observed: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for entry in entries {
        match &entry.event {
            // The schedule's own writes may set any generation; what
            // matters is that the electors never go below what they stored.
            Event::Store(op) if op.applied && op.client.as_deref() != Some(crate::history::OPERATOR) => {
                let Some(generation) = op.generation else {
                    continue;
                };
                if let Some(previous) = stored
                    && generation < previous
                {
                    violations.push(Violation {
                        property: Property::MonotoneFencing,
                        at_us: entry.at_us,
                        nodes: op.client.iter().cloned().collect(),
                        generation: Some(generation),
                        detail: format!("the stored generation went down from {previous} to {generation}"),
                    });
                }
                stored = Some(generation);
                stored_max = Some(stored_max.map_or(generation, |max| generation.max(max)));
            }
            Event::Acquired { generation } => {
                // A leader context handed out for a generation the store has
                // already moved past belongs to a term that was over before
                // it began (lost during its lock-delay, say).
                if let Some(newest) = stored_max
                    && newest > *generation
                {
                    violations.push(Violation {
                        property: Property::MonotoneFencing,
                        at_us: entry.at_us,
                        nodes: vec![entry.node.clone()],
                        generation: Some(*generation),
                        detail: format!(
                            "{} began generation {generation} after the store already held generation {newest}",
                            entry.node
                        ),
                    });
                }
                if let Some((previous, node)) = acquired
                    && *generation <= previous
                {
                    violations.push(Violation {
                        property: Property::MonotoneFencing,
                        at_us: entry.at_us,
                        nodes: vec![node.to_string(), entry.node.clone()],
                        generation: Some(*generation),
                        detail: format!("generation {generation} was acquired after generation {previous}"),
                    });
                }
                acquired = Some((*generation, &entry.node));
            }
            Event::Started { .. } | Event::Crashed => {
                observed.remove(entry.node.as_str());
            }
            Event::Observed { generation, .. } => {
                if let Some(&previous) = observed.get(entry.node.as_str())
                    && *generation < previous
                {
                    violations.push(Violation {
                        property: Property::MonotoneFencing,
                        at_us: entry.at_us,
                        nodes: vec![entry.node.clone()],
                        generation: Some(*generation),
                        detail: format!("{}'s observer saw generation {generation} after {previous}", entry.node),
                    });
                }
                observed.insert(&entry.node, *generation);
            }
            _ => {}
        }
    }
    downstream(entries, violations);
}

/// The downstream's accepted tokens never go down, read in the order the
/// resource stored the writes (its sequence), not in the order of the
/// entries' times.
fn downstream(entries: &[Entry], violations: &mut Vec<Violation>) {
    let mut writes: Vec<(u64, &Entry, u64)> = entries
        .iter()
        .filter_map(|entry| match &entry.event {
            Event::Downstream { generation, accepted: true, sequence, .. } => Some((*sequence, entry, *generation)),
            _ => None,
        })
        .collect();
    // Stable: writes recorded without a sequence keep their entry order.
    writes.sort_by_key(|(sequence, ..)| *sequence);
    let mut accepted: Option<u64> = None;
    for (_, entry, generation) in writes {
        if let Some(previous) = accepted
            && generation < previous
        {
            violations.push(Violation {
                property: Property::MonotoneFencing,
                at_us: entry.at_us,
                nodes: vec![entry.node.clone()],
                generation: Some(generation),
                detail: format!("the downstream accepted {generation} after {previous}"),
            });
        }
        accepted = Some(accepted.map_or(generation, |previous| previous.max(generation)));
    }
}

/// Writes the downstream rejected for carrying a stale token.
pub fn stale_writes(entries: &[Entry]) -> usize {
    entries.iter().filter(|entry| matches!(entry.event, Event::Downstream { accepted: false, .. })).count()
}

/// Writes the downstream *accepted* although a newer term had already
/// begun: fencing let them through only because that term had not written
/// yet. Not a violation (no token went down), but what fencing alone would
/// not have stopped, so users see how often a lease has to do the work.
pub fn stale_writes_accepted(entries: &[Entry]) -> usize {
    let mut newest_begun = 0;
    let mut accepted = 0;
    for entry in entries {
        match &entry.event {
            Event::Acquired { generation } => newest_begun = newest_begun.max(*generation),
            Event::Downstream { generation, accepted: true, .. } if *generation < newest_begun => accepted += 1,
            _ => {}
        }
    }
    accepted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::StoreOp;
    use crate::history::StoreOpKind;
    use crate::invariants::test_support::at;

    fn stored(generation: u64) -> Event {
        Event::Store(StoreOp {
            op: StoreOpKind::Update,
            applied: true,
            generation: Some(generation),
            ..StoreOp::default()
        })
    }

    #[test]
    fn rising_tokens_pass_and_a_drop_is_caught_in_each_view() {
        let good = [
            at(1, "s3", stored(1)),
            at(1, "a", Event::Acquired { generation: 1 }),
            at(2, "a", Event::Downstream { generation: 1, accepted: true, highest_before: 0, sequence: 0 }),
            at(3, "s3", stored(1)),
            at(4, "s3", stored(2)),
            at(4, "b", Event::Acquired { generation: 2 }),
            at(5, "a", Event::Downstream { generation: 1, accepted: false, highest_before: 2, sequence: 0 }),
        ];
        let mut found = Vec::new();
        check(&good, &mut found);
        assert!(found.is_empty(), "{found:?}");
        assert_eq!(stale_writes(&good), 1);

        let reset = [at(1, "s3", stored(5)), at(2, "s3", stored(1))];
        check(&reset, &mut found);
        let reacquired = [at(1, "a", Event::Acquired { generation: 5 }), at(2, "b", Event::Acquired { generation: 1 })];
        check(&reacquired, &mut found);
        let downstream = [
            at(1, "a", Event::Downstream { generation: 5, accepted: true, highest_before: 0, sequence: 0 }),
            at(2, "b", Event::Downstream { generation: 1, accepted: true, highest_before: 5, sequence: 0 }),
        ];
        check(&downstream, &mut found);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found.iter().all(|v| v.property == Property::MonotoneFencing));
    }

    #[test]
    fn downstream_tokens_are_read_in_the_order_the_resource_stored_them() {
        // Two hosts' clocks differ by a millisecond within one tick: the
        // write of 3 was stored first (sequence 1) but carries the later
        // time. Time order shows 4 then 3; storage order shows no drop.
        let history = [
            at(10, "b", Event::Downstream { generation: 4, accepted: true, highest_before: 3, sequence: 2 }),
            at(11, "a", Event::Downstream { generation: 3, accepted: true, highest_before: 3, sequence: 1 }),
        ];
        let mut found = Vec::new();
        check(&history, &mut found);
        assert!(found.is_empty(), "{found:?}");
        // The same writes stored the other way round are a drop.
        let history = [
            at(10, "b", Event::Downstream { generation: 4, accepted: true, highest_before: 3, sequence: 1 }),
            at(11, "a", Event::Downstream { generation: 3, accepted: true, highest_before: 4, sequence: 2 }),
        ];
        check(&history, &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
    }

    #[test]
    fn an_observer_going_back_is_caught_and_a_restart_starts_afresh() {
        let history = [
            at(1, "w", Event::Observed { generation: 4, started_us: 0, unchanged_for_us: 0 }),
            at(2, "w", Event::Observed { generation: 3, started_us: 0, unchanged_for_us: 0 }),
            at(3, "w", Event::Crashed),
            at(4, "w", Event::Started { incarnation: 1 }),
            at(5, "w", Event::Observed { generation: 1, started_us: 0, unchanged_for_us: 0 }),
        ];
        let mut found = Vec::new();
        check(&history, &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].detail.contains("saw generation 3 after 4"), "{}", found[0].detail);
    }

    #[test]
    fn a_term_begun_after_the_store_moved_past_it_is_caught() {
        // b took generation 2 and lost it during its lock-delay; a took
        // generation 3. b's context, handed out afterwards, is for a term
        // that was already over. The acquisitions alone (2 before 3) look
        // fine.
        let history = [
            at(1, "s3", stored(1)),
            at(1, "a", Event::Acquired { generation: 1 }),
            at(24, "s3", stored(2)),
            at(38, "s3", stored(3)),
            at(39, "b", Event::Acquired { generation: 2 }),
            at(53, "a", Event::Acquired { generation: 3 }),
        ];
        let mut found = Vec::new();
        check(&history, &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].detail.contains("after the store already held generation 3"), "{}", found[0].detail);
    }

    #[test]
    fn stale_writes_accepted_before_the_newer_term_wrote_are_counted() {
        let history = [
            at(1, "a", Event::Acquired { generation: 1 }),
            at(2, "a", Event::Downstream { generation: 1, accepted: true, highest_before: 0, sequence: 0 }),
            at(3, "b", Event::Acquired { generation: 2 }),
            // a was paused and wakes: b has begun but not written yet.
            at(4, "a", Event::Downstream { generation: 1, accepted: true, highest_before: 1, sequence: 0 }),
            at(5, "b", Event::Downstream { generation: 2, accepted: true, highest_before: 1, sequence: 0 }),
            at(6, "a", Event::Downstream { generation: 1, accepted: false, highest_before: 2, sequence: 0 }),
        ];
        assert_eq!(stale_writes_accepted(&history), 1);
        assert_eq!(stale_writes(&history), 1);
        let mut found = Vec::new();
        check(&history, &mut found);
        assert!(found.is_empty(), "not a violation: {found:?}");
    }
}
