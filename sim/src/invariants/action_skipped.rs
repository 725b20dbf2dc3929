//! No vacuous pass: a scheduled fault aimed at `@leader` while nobody led
//! was skipped, so the scenario did not test what it says it tests. A
//! scenario must expect or tolerate it.

use super::{Property, Violation};
use crate::history::{Entry, Event};

/// Reports every scheduled action the runner had to skip.
pub fn check(entries: &[Entry], violations: &mut Vec<Violation>) {
    for entry in entries {
        let Event::Fault { action } = &entry.event else { continue };
        if !action.starts_with(SKIPPED) {
            continue;
        }
        violations.push(Violation {
            property: Property::ActionSkipped,
            at_us: entry.at_us,
            nodes: Vec::new(),
            generation: None,
            detail: format!("the scheduled action was not applied: {action}"),
        });
    }
}

/// How the runner labels an action it skipped.
pub const SKIPPED: &str = "skipped: ";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invariants::test_support::at;

    #[test]
    fn a_skipped_leader_action_is_reported_and_an_applied_one_is_not() {
        let history = [
            at(1, "world", Event::Fault { action: "crash a".into() }),
            at(2, "world", Event::Fault { action: format!("{SKIPPED}crash @leader (nobody leads)") }),
        ];
        let mut found = Vec::new();
        check(&history, &mut found);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].property, Property::ActionSkipped);
    }
}
