//! K8: what a keyed member's handle reports is true of what the member
//! does. A lease it hands out (`Leases::acquire`) is one it acts under at
//! that instant, with that round; a key it says another member holds is
//! not one it acts for; the members it reports (`Membership::members`) and
//! the view its snapshot names are ones the store committed; and while it
//! acts under a term that holds, it does not keep refusing to name the
//! members.
//!
//! Users fence downstream writes with the handle's leases and route work
//! by its members, so a handle that lies hands out rounds nobody acts
//! under, or sends work to members of no view, however right the keys'
//! own contexts are.
//!
//! A member's loop updates what it runs in the same step as the key's work
//! starts, and after the work has stopped, so a lease handed out at an
//! instant must match an acting interval that covers it, ends included.
//! A refusal to name the members may come while keys wind down after the
//! object vanished, which takes the work's stop time; only two refusals in
//! a row within one acting interval (a second apart) count.

use std::collections::BTreeMap;

use super::keyed_acting::Intervals;
use super::{Context, Property, Violation};
use crate::history::{Entry, Event};

/// Reports the first untrue answer of each member incarnation's handle.
pub fn check(entries: &[Entry], acting: &Intervals, context: &Context, violations: &mut Vec<Violation>) {
    if context.keyed.is_none() {
        return;
    }
    let views: Vec<(u64, u64, Vec<&str>)> = entries
        .iter()
        .filter_map(|entry| match &entry.event {
            Event::View { view, members, .. } => {
                let mut members: Vec<&str> = members.iter().map(String::as_str).collect();
                members.sort_unstable();
                Some((entry.at_us, *view, members))
            }
            _ => None,
        })
        .collect();
    // Every acting span of each incarnation, whatever the key.
    let mut spans: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
    for interval in acting.values().flatten() {
        spans.entry(interval.incarnation.as_str()).or_default().push((interval.start_us, interval.stop_us));
    }
    let mut refused_while_acting: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let mut reported: Vec<&str> = Vec::new();
    for entry in entries {
        let Event::HandleProbe { key, incarnation, lease, holder, members, view, term_holds } = &entry.event else {
            continue;
        };
        if reported.contains(&incarnation.as_str()) {
            continue;
        }
        let at = entry.at_us;
        let mine =
            || acting.get(key).into_iter().flatten().filter(|a| a.node == entry.node && a.incarnation == *incarnation);
        let acting_span = spans
            .get(incarnation.as_str())
            .and_then(|spans| spans.iter().find(|(start, stop)| *start < at && at < *stop).copied());
        let committed = |view: u64| views.iter().any(|(when, number, _)| *when <= at && *number == view);
        let mut problem = None;
        if let Some(round) = lease
            && !mine().any(|a| a.round == *round && a.spans(at))
        {
            problem = Some(format!("handed out a lease on k{key} at round {round}, but did not act for it then"));
        }
        if let Some(holder) = holder
            && let Some(own) = mine().find(|a| a.start_us < at && at < a.stop_us)
        {
            problem = Some(format!("said {holder:?} holds k{key} while it acted for it at round {}", own.round));
        }
        match members {
            Some(list) => {
                let mut sorted: Vec<&str> = list.iter().map(String::as_str).collect();
                sorted.sort_unstable();
                if sorted.is_empty() || !views.iter().any(|(when, _, members)| *when <= at && *members == sorted) {
                    problem = Some(format!("reported the members {list:?}, which no committed view lists"));
                }
            }
            None if *term_holds => {
                if let Some(span) = acting_span {
                    let (seen_span, count) = refused_while_acting.entry(incarnation).or_insert((span.0, 0));
                    *count = if *seen_span == span.0 { *count + 1 } else { 1 };
                    *seen_span = span.0;
                    if *count >= 2 {
                        problem = Some("refused to name the members twice while it acted under a term".to_string());
                    }
                }
            }
            None => {}
        }
        if members.is_some() || !*term_holds {
            refused_while_acting.remove(incarnation.as_str());
        }
        match view {
            Some(view) if !committed(*view) => {
                problem = Some(format!("named view {view}, which the store never committed"));
            }
            None if acting_span.is_some() => problem = Some("named no view while it acted for keys".to_string()),
            _ => {}
        }
        if let Some(detail) = problem {
            reported.push(incarnation);
            violations.push(Violation {
                property: Property::KeyedHandleTruthful,
                at_us: at,
                nodes: vec![entry.node.clone()],
                generation: *lease,
                detail: format!("{}'s handle {detail}", entry.node),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invariants::KeyedFacts;
    use crate::invariants::keyed_acting::intervals;
    use crate::invariants::keyed_acting::tests::{started, stopped};
    use crate::invariants::test_support::at;

    fn view(ms: u64, view: u64, members: &[&str]) -> Entry {
        let members = members.iter().map(|m| m.to_string()).collect();
        at(ms, "s3", Event::View { view, members, change: "join".into(), entry: "a".into() })
    }

    fn probe(ms: u64, lease: Option<u64>, holder: Option<&str>, members: Option<&[&str]>, view: Option<u64>) -> Entry {
        at(
            ms,
            "a",
            Event::HandleProbe {
                key: 1,
                incarnation: "a-1".into(),
                lease,
                holder: holder.map(str::to_string),
                members: members.map(|list| list.iter().map(|m| m.to_string()).collect()),
                view,
                term_holds: true,
            },
        )
    }

    fn judge(entries: &[Entry]) -> Vec<Violation> {
        let context = Context { keyed: Some(KeyedFacts { keys: 2, ..KeyedFacts::default() }), ..Context::default() };
        let mut found = Vec::new();
        check(entries, &intervals(entries), &context, &mut found);
        found
    }

    #[test]
    fn true_answers_pass() {
        let entries = [
            view(0, 1, &["a", "b"]),
            probe(500, None, Some("b"), None, Some(1)),
            started(1_000, "a", 1, 1),
            probe(1_000, Some(1), None, Some(&["b", "a"]), Some(1)),
            probe(2_000, Some(1), None, Some(&["a", "b"]), Some(1)),
            stopped(3_000, "a", 1, 1),
            probe(3_000, Some(1), None, Some(&["a", "b"]), Some(1)),
            probe(4_000, None, Some("b"), Some(&["a", "b"]), Some(1)),
        ];
        assert!(judge(&entries).is_empty(), "{:?}", judge(&entries));
    }

    #[test]
    fn a_lease_on_a_key_it_does_not_act_for_is_reported() {
        let entries = [view(0, 1, &["a"]), probe(500, Some(1), None, None, Some(1)), started(1_000, "a", 1, 1)];
        let found = judge(&entries);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].detail.contains("lease on k1 at round 1"), "{}", found[0].detail);
        let wrong_round = [view(0, 1, &["a"]), started(0, "a", 1, 1), probe(500, Some(2), None, None, Some(1))];
        assert_eq!(judge(&wrong_round).len(), 1);
    }

    #[test]
    fn naming_another_holder_while_acting_is_reported() {
        let entries = [view(0, 1, &["a"]), started(0, "a", 1, 1), probe(500, None, Some("b"), None, Some(1))];
        assert!(judge(&entries)[0].detail.contains("said \"b\" holds k1"));
    }

    #[test]
    fn members_and_views_the_store_never_committed_are_reported() {
        let members = [view(0, 1, &["a", "b"]), probe(500, None, None, Some(&["a"]), Some(1))];
        assert!(judge(&members)[0].detail.contains("no committed view lists"));
        let empty = [view(0, 1, &["a", "b"]), probe(500, None, None, Some(&[]), Some(1))];
        assert_eq!(judge(&empty).len(), 1);
        let unseen = [view(0, 1, &["a"]), probe(500, None, None, None, Some(0))];
        assert!(judge(&unseen)[0].detail.contains("view 0"));
        let later = [probe(500, None, None, None, Some(2)), view(600, 2, &["a"])];
        assert_eq!(judge(&later).len(), 1, "a view committed after the answer does not excuse it");
        let none = [view(0, 1, &["a"]), started(0, "a", 0, 1), probe(500, None, None, None, None)];
        assert!(judge(&none)[0].detail.contains("named no view"));
    }

    #[test]
    fn refusing_the_members_twice_while_acting_is_reported_and_once_is_not() {
        let once = [view(0, 1, &["a"]), started(0, "a", 0, 1), probe(500, None, None, None, Some(1))];
        assert!(judge(&once).is_empty());
        let twice = [
            view(0, 1, &["a"]),
            started(0, "a", 0, 1),
            probe(500, None, None, None, Some(1)),
            probe(1_500, None, None, None, Some(1)),
        ];
        assert!(judge(&twice)[0].detail.contains("refused to name the members twice"));
    }
}
