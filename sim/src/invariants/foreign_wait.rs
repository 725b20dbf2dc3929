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
use crate::history::OPERATOR;
use crate::history::{Entry, Event};

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
            Event::Fault { action } => match parse(action) {
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
                if op.op == "read" {
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

/// An operator's action on the lease key, from its fault label.
#[derive(Debug, PartialEq)]
enum Operator {
    Write { generation: Option<u64>, ttl_ms: Option<u64>, released: bool, corrupt: bool },
    Delete,
    Reset,
}

/// Reads an operator action from its label (`Action::label`).
fn parse(label: &str) -> Option<Operator> {
    let mut words = label.split(' ');
    match words.next()? {
        "delete-key" => Some(Operator::Delete),
        "reset-key" => Some(Operator::Reset),
        "write-record" => {
            let rest: Vec<&str> = words.collect();
            if rest.first() == Some(&"(corrupt") {
                return Some(Operator::Write { generation: None, ttl_ms: None, released: false, corrupt: true });
            }
            let generation = rest.get(1).and_then(|g| g.parse().ok());
            let ttl_ms = rest.get(3).and_then(|t| t.parse().ok());
            let released = rest.contains(&"released");
            Some(Operator::Write { generation, ttl_ms, released, corrupt: false })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::StoreOp;
    use crate::invariants::NodeFacts;
    use crate::invariants::test_support::at;

    fn context() -> Context {
        let node = |name: &str| NodeFacts { name: name.into(), rate: 1.0, ttl_us: 6_000_000, ..Default::default() };
        Context { facts: vec![node("a"), node("b")], tick_us: 10_000, ..Default::default() }
    }

    fn fault(ms: u64, action: &str) -> Entry {
        at(ms, "world", Event::Fault { action: action.into() })
    }

    fn op(ms: u64, client: &str, kind: &str, generation: u64) -> Entry {
        let op = StoreOp {
            client: Some(client.into()),
            op: kind.into(),
            applied: kind != "read",
            status: Some(200),
            read: (kind == "read").then(|| "etag".to_string()),
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
    fn labels_are_read_back() {
        assert_eq!(
            parse("write-record generation 7 ttl 6000 ms released"),
            Some(Operator::Write { generation: Some(7), ttl_ms: Some(6000), released: true, corrupt: false })
        );
        assert_eq!(
            parse("write-record generation 7 ttl none"),
            Some(Operator::Write { generation: Some(7), ttl_ms: None, released: false, corrupt: false })
        );
        assert_eq!(parse("delete-key"), Some(Operator::Delete));
        assert_eq!(parse("pause a for 5 ms"), None);
    }

    #[test]
    fn a_go_record_is_waited_out_for_the_assumed_ttl() {
        let early = [fault(1_000, "write-record generation 3 ttl none"), op(31_000, "b#0", "update", 4)];
        let found = judge(&early);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].detail.contains("the wait is 60.000s"), "{}", found[0].detail);
        let waited = [fault(1_000, "write-record generation 3 ttl none"), op(61_000, "b#0", "update", 4)];
        assert!(judge(&waited).is_empty());
    }

    #[test]
    fn a_deleted_key_is_waited_out_by_those_who_saw_a_record() {
        let entries = [
            op(0, "a#0", "create", 1),
            op(500, "b#0", "read", 1),
            fault(2_000, "delete-key"),
            op(4_000, "b#0", "create", 2),
        ];
        assert_eq!(judge(&entries).len(), 1, "b saw a record, so it must wait a TTL");
        let fresh = [op(0, "a#0", "create", 1), fault(2_000, "delete-key"), op(4_000, "c#0", "create", 2)];
        assert!(judge(&fresh).is_empty(), "a process that saw no record may create the key at once");
    }

    #[test]
    fn an_exhausted_generation_is_never_written_over() {
        let entries =
            [fault(1_000, "write-record generation 18446744073709551615 ttl 1000 ms"), op(90_000, "a#0", "update", 1)];
        assert_eq!(judge(&entries).len(), 1);
        let reset = [
            fault(1_000, "write-record generation 18446744073709551615 ttl 1000 ms"),
            fault(2_000, "reset-key floor 5"),
            op(3_000, "a#0", "update", 6),
        ];
        assert!(judge(&reset).is_empty());
    }
}
