//! I4 for records the electors did not write: a record someone else wrote
//! is waited out for its own TTL (the assumed TTL when it states none, as
//! the Go library's records do), a key deleted under a holder is waited out
//! for the last holder's TTL from the arrival of the read that found it
//! missing, and a record whose generation has no successor is never
//! written over by an elector.
//!
//! The checker reads the operator's actions from the history's fault
//! entries and the electors' writes from the store's. The first elector
//! write the store applies after a live foreign record, or after a
//! deletion, is the takeover; it must commit no earlier than the wait after
//! the foreign write (or the deletion) committed, in true time: the taker's
//! clock may run fast, so the wait is divided by its rate, less one tick.
//! After a deletion the bound holds only for a process that had read a
//! record before: one that never saw a record has no term to respect.

use std::collections::BTreeSet;

use super::{Context, Property, Violation};
use crate::history::{Entry, Event, Fault, OPERATOR, StoreOpKind};
use crate::world::Action;

/// The elector's assumed TTL for a record without one, at least its own.
const ASSUMED_TTL_US: u64 = hoplock::elector::DEFAULT_ASSUMED_TTL.as_micros() as u64;

/// What the operator last did to the key, still waiting for a takeover.
#[derive(Debug)]
enum Pending {
    /// A live record: its TTL, or `None` for one that states none.
    Live { at_us: u64, ttl_us: Option<u64> },
    /// A record no elector may write over: an exhausted generation, or bytes
    /// that are not a record.
    Unusable { at_us: u64 },
    /// The key deleted; `last_ttl_us` is the TTL of the last live record.
    Deleted { at_us: u64, last_ttl_us: u64 },
}

/// Reports the first takeover of a foreign or deleted record that came too
/// early, and every elector write over an unusable record.
pub fn check(entries: &[Entry], context: &Context, violations: &mut Vec<Violation>) {
    let mut pending: Option<Pending> = None;
    let mut last_ttl_us = 0;
    // Processes (`node#process`) that have read a record, and when first.
    let mut readers: Vec<(String, u64)> = Vec::new();
    let mut seen_reader: BTreeSet<String> = BTreeSet::new();
    for entry in entries {
        match &entry.event {
            Event::Fault { action } => match operator(action) {
                Some(Operator::Write { generation, ttl_ms, released, corrupt }) => {
                    pending = if corrupt || generation == Some(u64::MAX) {
                        Some(Pending::Unusable { at_us: entry.at_us })
                    } else if released {
                        None
                    } else {
                        let ttl_us = ttl_ms.map(|ms| ms.saturating_mul(1000));
                        if let Some(ttl_us) = ttl_us {
                            last_ttl_us = ttl_us;
                        }
                        Some(Pending::Live { at_us: entry.at_us, ttl_us })
                    };
                }
                Some(Operator::Delete) => pending = Some(Pending::Deleted { at_us: entry.at_us, last_ttl_us }),
                Some(Operator::Reset) => pending = None,
                None => {}
            },
            Event::Store(op) => {
                let Some(client) = op.client.as_deref().filter(|client| *client != OPERATOR) else { continue };
                if op.op == StoreOpKind::Read {
                    if op.status == Some(200) && op.read.is_some() && seen_reader.insert(client.to_string()) {
                        readers.push((client.to_string(), entry.at_us));
                    }
                    continue;
                }
                if !op.applied {
                    continue;
                }
                let node = crate::history::node_of(client);
                let facts = context.node(node);
                let report = |detail: String| Violation {
                    property: Property::ForeignWait,
                    at_us: entry.at_us,
                    nodes: vec![node.to_string()],
                    generation: op.generation,
                    detail,
                };
                if let Some(pending) = pending.take() {
                    let rate = facts.map_or(1.0, |facts| facts.rate);
                    let own_ttl_us = facts.map_or(0, |facts| facts.ttl_us);
                    let (from_us, wait_us, what) = match pending {
                        Pending::Unusable { at_us } => {
                            violations.push(report(format!(
                                "{client} wrote over a record no elector may write over (written at {:.3}s)",
                                at_us as f64 / 1e6
                            )));
                            continue;
                        }
                        Pending::Live { at_us, ttl_us } => {
                            (at_us, ttl_us.unwrap_or(own_ttl_us.max(ASSUMED_TTL_US)), "a foreign record")
                        }
                        Pending::Deleted { at_us, last_ttl_us } => {
                            let read_before = readers.iter().any(|(reader, first)| reader == client && *first < at_us);
                            if !read_before {
                                continue;
                            }
                            (at_us, last_ttl_us.max(own_ttl_us), "the deleted key")
                        }
                    };
                    let least = super::least_true_wait_us(wait_us, rate, context.tick_us);
                    let waited = entry.at_us.saturating_sub(from_us);
                    if waited < least {
                        violations.push(report(format!(
                            "{client} took over {what} {:.3}s after it was written; the wait is {:.3}s",
                            waited as f64 / 1e6,
                            wait_us as f64 / 1e6
                        )));
                    }
                }
                if !op.released
                    && let Some(facts) = facts
                {
                    last_ttl_us = facts.ttl_us;
                }
            }
            _ => {}
        }
    }
}

/// An operator's action on the lease key.
#[derive(Debug, PartialEq)]
enum Operator {
    Write { generation: Option<u64>, ttl_ms: Option<u64>, released: bool, corrupt: bool },
    Delete,
    Reset,
}

/// The operator's action on the lease key a fault was, if any.
fn operator(fault: &Fault) -> Option<Operator> {
    match fault.applied()? {
        Action::WriteRecord { record } if record.raw.is_some() => {
            Some(Operator::Write { generation: None, ttl_ms: None, released: false, corrupt: true })
        }
        Action::WriteRecord { record } => Some(Operator::Write {
            generation: Some(record.generation),
            ttl_ms: record.ttl_ms,
            released: record.released,
            corrupt: false,
        }),
        Action::DeleteKey => Some(Operator::Delete),
        Action::ResetKey { .. } => Some(Operator::Reset),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::StoreOp;
    use crate::invariants::NodeFacts;
    use crate::invariants::test_support::at;
    use crate::world::ForeignRecord;

    fn context() -> Context {
        let node = |name: &str| NodeFacts { name: name.into(), rate: 1.0, ttl_us: 6_000_000, ..Default::default() };
        Context { facts: vec![node("a"), node("b")], tick_us: 10_000, ..Default::default() }
    }

    fn fault(ms: u64, action: Action) -> Entry {
        at(ms, "world", Event::Fault { action: Fault::Applied(action) })
    }

    fn write(generation: u64, ttl_ms: Option<u64>) -> Action {
        Action::WriteRecord { record: ForeignRecord { generation, ttl_ms, ..ForeignRecord::default() } }
    }

    fn op(ms: u64, client: &str, kind: StoreOpKind, generation: u64) -> Entry {
        let op = StoreOp {
            client: Some(client.into()),
            op: kind,
            applied: kind != StoreOpKind::Read,
            status: Some(200),
            read: (kind == StoreOpKind::Read).then(|| "etag".to_string()),
            generation: Some(generation),
            ..StoreOp::default()
        };
        at(ms, "s3", Event::Store(op))
    }

    fn judge(entries: &[Entry]) -> Vec<Violation> {
        let mut found = Vec::new();
        check(entries, &context(), &mut found);
        found
    }

    #[test]
    fn operator_actions_are_read_from_the_faults() {
        let released = Action::WriteRecord {
            record: ForeignRecord { generation: 7, ttl_ms: Some(6000), released: true, raw: None },
        };
        assert_eq!(
            operator(&Fault::Applied(released.clone())),
            Some(Operator::Write { generation: Some(7), ttl_ms: Some(6000), released: true, corrupt: false })
        );
        assert_eq!(
            operator(&Fault::Applied(write(7, None))),
            Some(Operator::Write { generation: Some(7), ttl_ms: None, released: false, corrupt: false })
        );
        assert_eq!(operator(&Fault::Applied(Action::DeleteKey)), Some(Operator::Delete));
        assert_eq!(operator(&Fault::Applied(Action::Pause { node: "a".into(), for_ms: 5 })), None);
        assert_eq!(operator(&Fault::Skipped(released)), None, "a skipped write wrote nothing");
    }

    #[test]
    fn a_go_record_is_waited_out_for_the_assumed_ttl() {
        let early = [fault(1_000, write(3, None)), op(31_000, "b#0", StoreOpKind::Update, 4)];
        let found = judge(&early);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].detail.contains("the wait is 60.000s"), "{}", found[0].detail);
        let waited = [fault(1_000, write(3, None)), op(61_000, "b#0", StoreOpKind::Update, 4)];
        assert!(judge(&waited).is_empty());
    }

    #[test]
    fn a_deleted_key_is_waited_out_by_those_who_saw_a_record() {
        let entries = [
            op(0, "a#0", StoreOpKind::Create, 1),
            op(500, "b#0", StoreOpKind::Read, 1),
            fault(2_000, Action::DeleteKey),
            op(4_000, "b#0", StoreOpKind::Create, 2),
        ];
        assert_eq!(judge(&entries).len(), 1, "b saw a record, so it must wait a TTL");
        let fresh = [
            op(0, "a#0", StoreOpKind::Create, 1),
            fault(2_000, Action::DeleteKey),
            op(4_000, "c#0", StoreOpKind::Create, 2),
        ];
        assert!(judge(&fresh).is_empty(), "a process that saw no record may create the key at once");
    }

    #[test]
    fn an_exhausted_generation_is_never_written_over() {
        let entries = [fault(1_000, write(u64::MAX, Some(1000))), op(90_000, "a#0", StoreOpKind::Update, 1)];
        assert_eq!(judge(&entries).len(), 1);
        let reset = [
            fault(1_000, write(u64::MAX, Some(1000))),
            fault(2_000, Action::ResetKey { generation_floor: 5 }),
            op(3_000, "a#0", StoreOpKind::Update, 6),
        ];
        assert!(judge(&reset).is_empty());
    }
}
