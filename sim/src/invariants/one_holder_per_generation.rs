//! I1: at most one node ever acquires a given generation.
//!
//! A holder is a node *process*: a restarted node is a new holder, so the
//! seed's habit of renewing its predecessor's term at the same generation
//! (I10) shows up here too.
//!
//! Two views, because either can be fooled alone. The nodes' reports say who
//! handed out a leader context for which generation. The store's committed
//! writes say who *created* each generation: a write that landed carrying
//! generation g, conditional on no record, on a released record, or on a
//! record of a lower generation. Two processes creating one generation is a
//! violation even if neither ever reported leading (a node may crash, stop
//! or be cut off between its write landing and its report).

use std::collections::BTreeMap;

use super::{Property, Violation};
use crate::history::{Entry, Event, StoreOpKind, node_of};

/// Reports every generation acquired by more than one holder, by the
/// nodes' reports and by what landed in the store.
pub fn check(entries: &[Entry], violations: &mut Vec<Violation>) {
    reported(entries, violations);
    landed(entries, violations);
}

/// Reports every generation that two node processes' committed writes
/// created.
fn landed(entries: &[Entry], violations: &mut Vec<Violation>) {
    // Every record a write stored, by ETag: (generation, released).
    let mut stored: BTreeMap<&str, (u64, bool)> = BTreeMap::new();
    let mut creators: BTreeMap<u64, &str> = BTreeMap::new();
    for entry in entries {
        let Event::Store(op) = &entry.event else { continue };
        let (true, Some(generation), Some(etag)) = (op.applied, op.generation, op.written.as_deref()) else {
            continue;
        };
        let creates = match op.op {
            StoreOpKind::Create => true,
            StoreOpKind::Update => op
                .expected
                .as_deref()
                .and_then(|expected| stored.get(unquoted(expected)))
                .is_some_and(|&(previous, released)| released || previous < generation),
            // An unconditional put is nobody's takeover; the scenario's own
            // writes use it.
            _ => false,
        };
        stored.insert(unquoted(etag), (generation, op.released));
        let Some(client) = op.client.as_deref() else { continue };
        if !creates {
            continue;
        }
        match creators.get(&generation) {
            Some(first) if *first != client => violations.push(Violation {
                property: Property::OneHolderPerGeneration,
                at_us: entry.at_us,
                nodes: vec![node_of(first).into(), node_of(client).into()],
                generation: Some(generation),
                detail: format!(
                    "two takeover writes created generation {generation} in the store: one from {first}, one \
                     from {client}"
                ),
            }),
            Some(_) => {}
            None => {
                creators.insert(generation, client);
            }
        }
    }
}

fn unquoted(etag: &str) -> &str {
    etag.trim_matches('"')
}

/// Reports every generation two node processes said they acquired.
fn reported(entries: &[Entry], violations: &mut Vec<Violation>) {
    let mut incarnation: BTreeMap<&str, u32> = BTreeMap::new();
    let mut holders: BTreeMap<u64, (String, u32)> = BTreeMap::new();
    for entry in entries {
        match &entry.event {
            Event::Started { incarnation: started } => {
                incarnation.insert(&entry.node, *started);
            }
            Event::Acquired { generation } => {
                let holder = (entry.node.clone(), incarnation.get(entry.node.as_str()).copied().unwrap_or(0));
                match holders.get(generation) {
                    Some(first) if *first != holder => violations.push(Violation {
                        property: Property::OneHolderPerGeneration,
                        at_us: entry.at_us,
                        nodes: vec![first.0.clone(), holder.0.clone()],
                        generation: Some(*generation),
                        detail: format!(
                            "two leaders in one generation: {} (process {}) and {} (process {}) both acquired it",
                            first.0, first.1, holder.0, holder.1
                        ),
                    }),
                    Some(_) => {}
                    None => {
                        holders.insert(*generation, holder);
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::StoreOp;
    use crate::invariants::test_support::at;

    fn write(
        client: &str,
        op: StoreOpKind,
        expected: Option<&str>,
        written: &str,
        generation: u64,
        released: bool,
    ) -> Event {
        Event::Store(StoreOp {
            client: Some(client.into()),
            op,
            expected: expected.map(|etag| format!("\"{etag}\"")),
            written: Some(format!("\"{written}\"")),
            applied: true,
            generation: Some(generation),
            released,
            ..StoreOp::default()
        })
    }

    #[test]
    fn two_landed_takeovers_of_one_generation_are_caught_though_nobody_reported_leading() {
        // Neither node reported an acquisition (say, both crashed right
        // after their writes landed); the store shows both created gen 2.
        let bad = [
            at(0, "a", Event::Started { incarnation: 0 }),
            at(1, "s3", write("a#0", StoreOpKind::Create, None, "e1", 1, false)),
            at(2, "s3", write("a#0", StoreOpKind::Update, Some("e1"), "e2", 1, false)),
            at(9, "s3", write("b#0", StoreOpKind::Update, Some("e2"), "e3", 2, false)),
            at(9, "s3", write("c#0", StoreOpKind::Update, Some("e2"), "e4", 2, false)),
        ];
        let mut found = Vec::new();
        check(&bad, &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].generation, found[0].nodes.clone()), (Some(2), vec!["b".into(), "c".into()]));

        // The same store history with honest renewals, a release and a
        // takeover of the released record passes.
        let good = [
            at(1, "s3", write("a#0", StoreOpKind::Create, None, "e1", 1, false)),
            at(2, "s3", write("a#0", StoreOpKind::Update, Some("e1"), "e2", 1, false)),
            at(3, "s3", write("a#0", StoreOpKind::Update, Some("e2"), "e3", 1, true)),
            at(4, "s3", write("b#0", StoreOpKind::Update, Some("e3"), "e4", 2, false)),
            at(5, "s3", write("b#0", StoreOpKind::Update, Some("e4"), "e5", 2, false)),
        ];
        let mut found = Vec::new();
        check(&good, &mut found);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn a_restarted_process_creating_its_predecessors_generation_is_caught() {
        let bad = [
            at(1, "s3", write("a#0", StoreOpKind::Create, None, "e1", 1, false)),
            at(7, "s3", write("a#1", StoreOpKind::Create, None, "e2", 1, false)),
        ];
        let mut found = Vec::new();
        check(&bad, &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
    }

    #[test]
    fn distinct_generations_pass_and_a_shared_one_is_caught() {
        let good = [
            at(0, "a", Event::Started { incarnation: 0 }),
            at(1, "a", Event::Acquired { generation: 1 }),
            at(9, "b", Event::Acquired { generation: 2 }),
        ];
        let mut found = Vec::new();
        check(&good, &mut found);
        assert!(found.is_empty());

        let bad = [at(1, "a", Event::Acquired { generation: 1 }), at(2, "b", Event::Acquired { generation: 1 })];
        check(&bad, &mut found);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].property, Property::OneHolderPerGeneration);
        assert_eq!(found[0].generation, Some(1));
    }

    #[test]
    fn a_restarted_node_is_a_different_holder() {
        let bad = [
            at(0, "a", Event::Started { incarnation: 0 }),
            at(1, "a", Event::Acquired { generation: 3 }),
            at(5, "a", Event::Crashed),
            at(6, "a", Event::Started { incarnation: 1 }),
            at(7, "a", Event::Acquired { generation: 3 }),
        ];
        let mut found = Vec::new();
        check(&bad, &mut found);
        assert_eq!(found.len(), 1);
    }
}
