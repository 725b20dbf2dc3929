//! No vacuous pass: a run in which nobody ever leads checks none of the
//! safety properties, so it is an outcome of its own that a scenario must
//! expect or tolerate.

use super::{Context, Property, Violation};
use crate::history::{Entry, Event};

/// Reports a run with no leader context ever handed out.
pub fn check(entries: &[Entry], context: &Context, violations: &mut Vec<Violation>) {
    if entries.iter().any(|entry| matches!(entry.event, Event::Acquired { .. })) {
        return;
    }
    violations.push(Violation {
        property: Property::NobodyLed,
        at_us: context.end_us,
        nodes: Vec::new(),
        generation: None,
        detail: format!("nobody led in {:.3}s, so no safety property was exercised", context.end_us as f64 / 1e6),
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invariants::test_support::at;

    #[test]
    fn a_run_without_a_leader_is_reported_and_one_with_a_leader_is_not() {
        let context = Context { end_us: 60_000_000, ..Context::default() };
        let idle = [at(0, "a", Event::Started { incarnation: 0 }), at(5, "a", Event::Crashed)];
        let mut found = Vec::new();
        check(&idle, &context, &mut found);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].property, Property::NobodyLed);
        let led = [at(0, "a", Event::Started { incarnation: 0 }), at(1, "a", Event::Acquired { generation: 1 })];
        let mut found = Vec::new();
        check(&led, &context, &mut found);
        assert!(found.is_empty());
    }
}
