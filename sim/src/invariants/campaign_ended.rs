//! No vacuous pass: an elector whose campaign ended with an error takes no
//! further part in the run, so whatever the run checks afterwards it checks
//! without that node. A scenario must expect or tolerate it.

use super::{Property, Violation};
use crate::history::{Entry, Event};

/// Reports every campaign that ended with an error.
pub fn check(entries: &[Entry], violations: &mut Vec<Violation>) {
    for entry in entries {
        let Event::CampaignEnded { message } = &entry.event else { continue };
        violations.push(Violation {
            property: Property::CampaignEnded,
            at_us: entry.at_us,
            nodes: vec![entry.node.clone()],
            generation: None,
            detail: format!("{}'s campaign ended: {message}", entry.node),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invariants::test_support::at;

    #[test]
    fn an_ended_campaign_is_reported_and_a_stop_is_not() {
        let history = [
            at(1, "a", Event::ElectorError { message: "stopped".into() }),
            at(2, "b", Event::CampaignEnded { message: "the store cannot do conditional writes".into() }),
        ];
        let mut found = Vec::new();
        check(&history, &mut found);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].property, found[0].nodes.clone()), (Property::CampaignEnded, vec!["b".to_string()]));
    }
}
