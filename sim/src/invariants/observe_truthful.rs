//! L3: what `Elector::observe` reports is true of the store.
//!
//! Followers decide on what `observe` tells them: who leads, at which
//! generation, and for how long the record has not changed (a record
//! unchanged for longer than its TTL belongs to a holder that has stopped).
//! Each report is checked against the store's own history:
//!
//! - a reported generation was written to the key before the call ended;
//! - "nothing stored" is not reported while the key surely held a record
//!   for the whole call;
//! - "unchanged for d" is at most the time since the oldest version the
//!   read could have returned was written, on the observer's clock;
//! - "the generation went back" is reported only when a lower generation
//!   was written after a higher one;
//! - when nothing was written between two calls of one observer, the second
//!   reports the record unchanged for at least the time between them, on
//!   the observer's clock (an observer that forgets what it saw would make
//!   a stopped holder look alive forever).
//!
//! The last four assume reads return the current version; with a
//! provider whose reads may be stale they are not checked.

use std::collections::BTreeMap;

use super::{Context, Property, Violation};
use crate::history::{Entry, Event, StoreOp, StoreOpKind};

pub fn check(entries: &[Entry], context: &Context, violations: &mut Vec<Violation>) {
    let ops: Vec<&StoreOp> = entries
        .iter()
        .filter_map(|entry| match &entry.event {
            Event::Store(op) if op.applied => Some(op),
            _ => None,
        })
        .collect();
    let writes: Vec<&StoreOp> = ops.iter().copied().filter(|op| op.generation.is_some()).collect();
    let deletes: Vec<&StoreOp> = ops.iter().copied().filter(|op| op.op == StoreOpKind::Delete).collect();
    // Everything that gave the key a new version, corrupt bytes included.
    let changes: Vec<&StoreOp> = ops.iter().copied().filter(|op| op.op != StoreOpKind::Read).collect();
    let mut flag = |entry: &Entry, generation: Option<u64>, detail: String| {
        violations.push(Violation {
            property: Property::ObserveTruthful,
            at_us: entry.at_us,
            nodes: vec![entry.node.clone()],
            generation,
            detail,
        });
    };
    // Each observer's last call that reported a record: (started, ended).
    let mut previous: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for entry in entries {
        let end = entry.at_us;
        match &entry.event {
            Event::Observed { generation, started_us, unchanged_for_us } => {
                if !writes.iter().any(|op| op.generation == Some(*generation) && op.invoked_us <= end) {
                    flag(entry, Some(*generation), format!("observe reported generation {generation}, never written"));
                    continue;
                }
                if !context.reads_current {
                    continue;
                }
                let last = previous.insert(entry.node.as_str(), (*started_us, end));
                // Nothing written or deleted from the last call's start to
                // this call's end: both read the same version, which this
                // observer has known since the last call ended at the latest.
                if let Some((last_started, last_ended)) = last {
                    let quiet = !changes.iter().any(|op| op.invoked_us <= end && op.ended_us >= last_started);
                    let rate = context.node(&entry.node).map_or(1.0, |facts| facts.rate);
                    let gap = (started_us.saturating_sub(last_ended) as f64 * rate) as u64;
                    let at_least = gap.saturating_sub(2 * context.tick_us);
                    if quiet && *unchanged_for_us < at_least {
                        flag(
                            entry,
                            Some(*generation),
                            format!(
                                "observe reported the record unchanged for {:.3} s, but the same version was \
                                 already seen {:.3} s before",
                                *unchanged_for_us as f64 / 1e6,
                                at_least as f64 / 1e6
                            ),
                        );
                    }
                }
                // The version current when the call began was written no
                // earlier than the last write that had surely landed by then.
                let Some(oldest) = writes.iter().filter(|op| op.ended_us <= *started_us).map(|op| op.invoked_us).max()
                else {
                    continue;
                };
                let rate = context.node(&entry.node).map_or(1.0, |facts| facts.rate);
                let bound = ((end - oldest) as f64 * rate) as u64 + 2 * context.tick_us;
                if *unchanged_for_us > bound {
                    flag(
                        entry,
                        Some(*generation),
                        format!(
                            "observe reported the record unchanged for {:.3} s, but no version it could have read \
                             is older than {:.3} s",
                            *unchanged_for_us as f64 / 1e6,
                            bound as f64 / 1e6
                        ),
                    );
                }
            }
            // A restarted observer, or a call that reported no record or a
            // step back, remembers nothing to compare with.
            Event::Started { .. } | Event::Crashed => {
                previous.remove(entry.node.as_str());
            }
            Event::ObservedNothing { started_us } if context.reads_current => {
                previous.remove(entry.node.as_str());
                let Some(first) = writes.iter().filter(|op| op.ended_us <= *started_us).map(|op| op.invoked_us).min()
                else {
                    continue;
                };
                let deleted = deletes.iter().any(|op| op.invoked_us <= end && op.ended_us >= first);
                if !deleted {
                    flag(entry, None, "observe reported no record while the key held one throughout".into());
                }
            }
            Event::ObservedGoingBack { seen, found, .. } if context.reads_current => {
                previous.remove(entry.node.as_str());
                // Legitimate only if `found` was written after something at
                // `seen` or above had landed.
                let higher_landed =
                    writes.iter().filter(|op| op.generation.is_some_and(|g| g >= *seen)).map(|op| op.ended_us).min();
                let lower_after = higher_landed.is_some_and(|landed| {
                    writes
                        .iter()
                        .any(|op| op.generation == Some(*found) && op.ended_us >= landed && op.invoked_us <= end)
                });
                if found >= seen || !lower_after {
                    flag(
                        entry,
                        Some(*found),
                        format!(
                            "observe said the generation went back from {seen} to {found}, which the store never did"
                        ),
                    );
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(generation: u64, invoked_us: u64, ended_us: u64) -> Entry {
        Entry {
            at_us: ended_us,
            node: "s3".into(),
            event: Event::Store(StoreOp {
                op: StoreOpKind::Update,
                applied: true,
                generation: Some(generation),
                written: Some(format!("\"{invoked_us}\"")),
                invoked_us,
                ended_us,
                ..StoreOp::default()
            }),
        }
    }

    fn at(at_us: u64, event: Event) -> Entry {
        Entry { at_us, node: "w".into(), event }
    }

    fn context() -> Context {
        Context { reads_current: true, tick_us: 1_000, ..Context::default() }
    }

    fn run(entries: &[Entry]) -> Vec<Violation> {
        let mut violations = Vec::new();
        check(entries, &context(), &mut violations);
        violations
    }

    #[test]
    fn a_truthful_observer_passes() {
        let entries = [
            write(1, 0, 10_000),
            write(1, 1_000_000, 1_010_000),
            at(1_500_000, Event::Observed { generation: 1, started_us: 1_400_000, unchanged_for_us: 400_000 }),
            write(2, 2_000_000, 2_010_000),
            at(2_500_000, Event::Observed { generation: 2, started_us: 2_400_000, unchanged_for_us: 0 }),
        ];
        assert_eq!(run(&entries), []);
    }

    #[test]
    fn an_age_longer_than_any_readable_version_is_flagged() {
        // The version current at 1.4 s was written at 1.0 s at the
        // earliest: "unchanged for 1.2 s" at 1.5 s cannot be true.
        let entries = [
            write(1, 0, 10_000),
            write(1, 1_000_000, 1_010_000),
            at(1_500_000, Event::Observed { generation: 1, started_us: 1_400_000, unchanged_for_us: 1_200_000 }),
        ];
        assert_eq!(run(&entries)[0].property, Property::ObserveTruthful);
    }

    #[test]
    fn an_age_that_forgets_an_unchanged_version_is_flagged() {
        // The same version read at 1.5 s and again at 3.4 s with nothing
        // written in between: it has been unchanged for 1.9 s at least.
        let observed = |started_us, unchanged_for_us| Event::Observed { generation: 1, started_us, unchanged_for_us };
        let forgetful = [
            write(1, 1_000_000, 1_010_000),
            at(1_500_000, observed(1_400_000, 400_000)),
            at(3_500_000, observed(3_400_000, 0)),
        ];
        let found = run(&forgetful);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].detail.contains("already seen"), "{found:?}");
        let remembering = [
            write(1, 1_000_000, 1_010_000),
            at(1_500_000, observed(1_400_000, 400_000)),
            at(3_500_000, observed(3_400_000, 2_400_000)),
        ];
        assert_eq!(run(&remembering), []);
        // A write in between, or a restart of the observer, allows a fresh age.
        let rewritten = [
            write(1, 1_000_000, 1_010_000),
            at(1_500_000, observed(1_400_000, 400_000)),
            write(1, 2_000_000, 2_010_000),
            at(3_500_000, observed(3_400_000, 0)),
        ];
        assert_eq!(run(&rewritten), []);
        let restarted = [
            write(1, 1_000_000, 1_010_000),
            at(1_500_000, observed(1_400_000, 400_000)),
            at(2_000_000, Event::Started { incarnation: 1 }),
            at(3_500_000, observed(3_400_000, 0)),
        ];
        assert_eq!(run(&restarted), []);
    }

    #[test]
    fn nothing_while_a_record_was_stored_is_flagged_unless_it_was_deleted() {
        let nothing = at(2_000_000, Event::ObservedNothing { started_us: 1_900_000 });
        assert_eq!(run(&[write(1, 0, 10_000), nothing.clone()]).len(), 1);
        let delete = Entry {
            at_us: 1_500_000,
            node: "s3".into(),
            event: Event::Store(StoreOp {
                op: StoreOpKind::Delete,
                applied: true,
                invoked_us: 1_400_000,
                ended_us: 1_500_000,
                ..StoreOp::default()
            }),
        };
        assert_eq!(run(&[write(1, 0, 10_000), delete, nothing]), []);
    }

    #[test]
    fn going_back_is_true_only_after_a_lower_write() {
        let back = at(3_000_000, Event::ObservedGoingBack { seen: 4, found: 2, started_us: 2_900_000 });
        assert_eq!(run(&[write(4, 0, 10_000), back.clone()]).len(), 1, "never went back");
        assert_eq!(run(&[write(4, 0, 10_000), write(2, 1_000_000, 1_010_000), back]), []);
        let same = at(3_000_000, Event::ObservedGoingBack { seen: 4, found: 4, started_us: 2_900_000 });
        assert_eq!(run(&[write(4, 0, 10_000), write(4, 1_000_000, 1_010_000), same]).len(), 1);
    }

    #[test]
    fn a_generation_never_written_is_flagged_even_with_stale_reads() {
        let mut violations = Vec::new();
        let entries = [
            write(1, 0, 10_000),
            at(500_000, Event::Observed { generation: 7, started_us: 400_000, unchanged_for_us: 0 }),
        ];
        check(&entries, &Context { reads_current: false, ..context() }, &mut violations);
        assert_eq!(violations.len(), 1);
    }
}
