//! No vacuous pass: a scheduled fault aimed at `@leader` while nobody led
//! was skipped, so the scenario did not test what it says it tests. A
//! scenario must expect or tolerate it.

use super::{Property, Violation};
use crate::history::{Entry, Event, Fault};

/// Reports every scheduled action the runner had to skip.
pub fn check(entries: &[Entry], violations: &mut Vec<Violation>) {
    for entry in entries {
        let Event::Fault { action: skipped @ Fault::Skipped(_) } = &entry.event else { continue };
        violations.push(Violation {
            property: Property::ActionSkipped,
            at_us: entry.at_us,
            nodes: Vec::new(),
            generation: None,
            detail: format!("the scheduled action was not applied: {}", skipped.label()),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invariants::test_support::at;
    use crate::world::Action;

    #[test]
    fn a_skipped_leader_action_is_reported_and_an_applied_one_is_not() {
        let history = [
            at(1, "world", Event::Fault { action: Fault::Applied(Action::Crash { node: "a".into() }) }),
            at(2, "world", Event::Fault { action: Fault::Skipped(Action::Crash { node: "@leader".into() }) }),
        ];
        let mut found = Vec::new();
        check(&history, &mut found);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].property, Property::ActionSkipped);
        assert!(found[0].detail.ends_with("not applied: skipped: crash @leader (nobody leads)"), "{}", found[0].detail);
    }
}
