//! L1: after the faults stop, somebody leads soon.
//!
//! Once the last fault has been applied or healed, some node must lead
//! within TTL·(1+ρ) + poll + lock-delay plus a round trip (the context's
//! `takeover_bound_us`). After a graceful release with no fault in the way,
//! the next leader must follow within a poll interval and a round trip.

use super::{Context, Property, Violation, terms};
use crate::history::{Entry, Event};

/// Reports a missed deadline after the quiet point and after each release.
pub fn check(entries: &[Entry], context: &Context, violations: &mut Vec<Violation>) {
    let terms = terms(entries, context.end_us);
    // Somebody leads within the bound after the faults stop.
    let deadline = context.quiet_from_us + context.takeover_bound_us;
    if deadline < context.end_us {
        let led = terms.iter().any(|term| term.start_us <= deadline && term.end_us > context.quiet_from_us);
        if !led {
            violations.push(Violation {
                property: Property::Liveness,
                at_us: deadline,
                nodes: Vec::new(),
                generation: None,
                detail: format!(
                    "nobody led within {:.3}s after the last fault at {:.3}s",
                    context.takeover_bound_us as f64 / 1e6,
                    context.quiet_from_us as f64 / 1e6
                ),
            });
        }
    }
    // A graceful release hands over within a poll and a round trip, when no
    // fault happens in that window and the store is reliable.
    if !context.store_reliable {
        return;
    }
    for (index, entry) in entries.iter().enumerate() {
        let Event::Stepped { generation, reason } = &entry.event else {
            continue;
        };
        if reason != "released" {
            continue;
        }
        let window_end = entry.at_us + context.handover_bound_us;
        if window_end >= context.end_us {
            continue;
        }
        let disturbed = entries[index..]
            .iter()
            .take_while(|later| later.at_us <= window_end)
            .any(|later| matches!(later.event, Event::Fault { .. } | Event::Crashed | Event::Paused { .. }));
        if disturbed {
            continue;
        }
        let next = terms.iter().any(|term| term.start_us >= entry.at_us && term.start_us <= window_end);
        if !next {
            violations.push(Violation {
                property: Property::Liveness,
                at_us: window_end,
                nodes: vec![entry.node.clone()],
                generation: Some(*generation),
                detail: format!(
                    "nobody took over within {:.3}s of {}'s release",
                    context.handover_bound_us as f64 / 1e6,
                    entry.node
                ),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invariants::test_support::at;

    fn context() -> Context {
        Context {
            takeover_bound_us: 7_000_000,
            handover_bound_us: 600_000,
            quiet_from_us: 10_000_000,
            store_reliable: true,
            end_us: 60_000_000,
            ..Context::default()
        }
    }

    fn released(generation: u64) -> Event {
        Event::Stepped { generation, reason: "released".into() }
    }

    #[test]
    fn a_prompt_takeover_passes_and_a_late_one_is_caught() {
        let prompt = [
            at(0, "a", Event::Acquired { generation: 1 }),
            at(5_000, "a", Event::Crashed),
            at(12_000, "b", Event::Acquired { generation: 2 }),
        ];
        let mut found = Vec::new();
        check(&prompt, &context(), &mut found);
        assert!(found.is_empty(), "{found:?}");
        let late = [
            at(0, "a", Event::Acquired { generation: 1 }),
            at(5_000, "a", Event::Crashed),
            at(18_000, "b", Event::Acquired { generation: 2 }),
        ];
        check(&late, &context(), &mut found);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].property, Property::Liveness);
    }

    #[test]
    fn a_slow_handover_after_release_is_caught() {
        let quiet = Context { quiet_from_us: 0, ..context() };
        let fast = [
            at(0, "a", Event::Acquired { generation: 1 }),
            at(20_000, "a", released(1)),
            at(20_300, "b", Event::Acquired { generation: 2 }),
        ];
        let mut found = Vec::new();
        check(&fast, &quiet, &mut found);
        assert!(found.is_empty(), "{found:?}");
        let slow = [
            at(0, "a", Event::Acquired { generation: 1 }),
            at(20_000, "a", released(1)),
            at(21_000, "b", Event::Acquired { generation: 2 }),
        ];
        check(&slow, &quiet, &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
    }
}
