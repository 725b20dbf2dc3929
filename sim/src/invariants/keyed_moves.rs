//! On a join or a leave, exactly the keys HRW predicts move, and a key is
//! started only by its owner in the view its round names.
//!
//! The store records every view written: the view generation, its member
//! ids and the change that made it. Between two successive views, the keys
//! whose HRW owner changes must be exactly those the joiner wins, or those
//! the removed member held. And since a round is the view in which its
//! holder started the key, every start must be by the key's owner in that
//! view.

use std::collections::BTreeMap;

use hoplock::hrw::{Member, MemberSet};

use super::keyed_acting::Intervals;
use super::{Context, Property, Violation};
use crate::history::{Entry, Event};

/// A view as first written: when, its member ids, its change and the entry
/// concerned.
type WrittenView = (u64, Vec<String>, String, String);

/// Reports the first view change that moved the wrong keys, and the first
/// start of each key by a member that did not own it in its round's view.
pub fn check(entries: &[Entry], intervals: &Intervals, context: &Context, violations: &mut Vec<Violation>) {
    let Some(keyed) = &context.keyed else { return };
    // Someone else deleting or rewriting the object starts a new lineage of
    // views, whose numbers may repeat the old ones: views are compared, and
    // rounds looked up, within one lineage.
    let replaced = super::keyed_acting::object_replaced(entries);
    let lineage = |at_us: u64| super::keyed_acting::lineage(&replaced, at_us);
    let mut views: BTreeMap<(usize, u64), WrittenView> = BTreeMap::new();
    for entry in entries {
        if let Event::View { view, members, change, entry: concerned } = &entry.event {
            views.entry((lineage(entry.at_us), *view)).or_insert((
                entry.at_us,
                members.clone(),
                change.clone(),
                concerned.clone(),
            ));
        }
    }
    let sets: BTreeMap<(usize, u64), MemberSet> = views
        .iter()
        .map(|(view, (_, ids, _, _))| (*view, MemberSet::new(ids.iter().map(|id| Member::new(id, "")))))
        .collect();
    // Each view's owner of every key, weighed once: the comparisons below
    // and the starts look them up by key number.
    let keys: Vec<String> = (0..keyed.keys).map(|k| format!("k{k}")).collect();
    let owners: BTreeMap<(usize, u64), Vec<Option<&str>>> = sets
        .iter()
        .map(|(view, set)| (*view, keys.iter().map(|key| set.owner(key).map(|m| m.id.as_str())).collect()))
        .collect();
    for ((&(line_before, before), old), (&(line_after, after), new)) in owners.iter().zip(owners.iter().skip(1)) {
        if line_before != line_after || after != before + 1 {
            continue;
        }
        let (at_us, _, change, concerned) = &views[&(line_after, after)];
        let moved: Vec<usize> = (0..keys.len()).filter(|&k| old[k] != new[k]).collect();
        // A join moves the keys the joiner now owns; a leave or an
        // eviction those the removed member owned.
        let predicting = if change == "join" { new } else { old };
        let predicted: Vec<usize> = (0..keys.len()).filter(|&k| predicting[k] == Some(concerned.as_str())).collect();
        if moved != predicted {
            let extra =
                moved.iter().find(|k| !predicted.contains(k)).or_else(|| predicted.iter().find(|k| !moved.contains(k)));
            violations.push(Violation {
                property: Property::KeyedMoves,
                at_us: *at_us,
                nodes: vec![concerned.clone()],
                generation: Some(after),
                detail: format!(
                    "view {after} ({change} of {concerned}) moved {} keys where HRW predicts {}; first differing: {}",
                    moved.len(),
                    predicted.len(),
                    extra.map_or("-", |&k| keys[k].as_str())
                ),
            });
            break;
        }
    }
    for (key, all) in intervals {
        for acting in all {
            let view = (lineage(acting.start_us), acting.round);
            let (Some(set), Some(view_owners)) = (sets.get(&view), owners.get(&view)) else { continue };
            let owner = match view_owners.get(*key as usize) {
                Some(owner) => *owner,
                // A key past the world's keys was not weighed above.
                None => set.owner(format!("k{key}")).map(|m| m.id.as_str()),
            };
            if owner != Some(keyed.id_of(&acting.node)) {
                violations.push(Violation {
                    property: Property::KeyedMoves,
                    at_us: acting.start_us,
                    nodes: vec![acting.node.clone()],
                    generation: Some(acting.round),
                    detail: format!(
                        "{} started k{key} at round {}, but view {} gives it to {}",
                        acting.node,
                        acting.round,
                        acting.round,
                        owner.unwrap_or("nobody")
                    ),
                });
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invariants::KeyedFacts;
    use crate::invariants::keyed_acting::tests::started;
    use crate::invariants::test_support::at;

    fn check(entries: &[Entry], context: &Context, violations: &mut Vec<Violation>) {
        super::check(entries, &crate::invariants::keyed_acting::intervals(entries), context, violations);
    }

    fn view(ms: u64, view: u64, members: &[&str], change: &str, entry: &str) -> Entry {
        let members = members.iter().map(|m| m.to_string()).collect();
        at(ms, "s3", Event::View { view, members, change: change.into(), entry: entry.into() })
    }

    fn context() -> Context {
        Context { keyed: Some(KeyedFacts { keys: 200, ..KeyedFacts::default() }), ..Context::default() }
    }

    #[test]
    fn a_view_that_changes_two_members_at_once_is_reported() {
        let bad = [view(0, 1, &["a", "b"], "join", "b"), view(10, 2, &["a", "c", "d"], "join", "d")];
        let mut found = Vec::new();
        check(&bad, &context(), &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].detail.contains("view 2 (join of d)"), "{}", found[0].detail);
        let good = [
            view(0, 1, &["a", "b"], "join", "b"),
            view(10, 2, &["a", "b", "c"], "join", "c"),
            view(20, 3, &["a", "c"], "leave", "b"),
        ];
        let mut found = Vec::new();
        check(&good, &context(), &mut found);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn a_start_by_a_member_that_does_not_own_the_key_in_its_rounds_view_is_reported() {
        let set = MemberSet::new([Member::new("a", ""), Member::new("b", "")]);
        let key = (0..200).find(|k| set.is_owner(format!("k{k}"), "b")).unwrap();
        let bad = [view(0, 1, &["a", "b"], "join", "b"), started(5, "a", key, 1)];
        let mut found = Vec::new();
        check(&bad, &context(), &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].detail.contains("gives it to b"), "{}", found[0].detail);
    }
}
