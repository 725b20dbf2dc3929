//! I1: at most one node ever acquires a given generation.
//!
//! A holder is a node *process*: a restarted node is a new holder, so the
//! seed's habit of renewing its predecessor's term at the same generation
//! (I10) shows up here too.

use std::collections::BTreeMap;

use super::{Property, Violation};
use crate::history::{Entry, Event};

/// Reports every generation acquired by more than one holder.
pub fn check(entries: &[Entry], violations: &mut Vec<Violation>) {
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
    use crate::invariants::test_support::at;

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
