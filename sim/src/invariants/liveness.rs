//! L1: whenever somebody could lead for long enough, somebody does.
//!
//! The run is cut into windows at every change in who can contend: a node
//! contends while it runs (not crashed, stopped or paused) and reaches the
//! store both ways. The runner records those changes as it applies the
//! schedule ([`Context::contention`]). In every window, no stretch without
//! a leader may last longer than the window's bound:
//!
//! the longest TTL of any node (the last holder may be any of them) times
//! (1+ρ), plus how long a write may still commit after its sender stopped
//! (the store's longest latency and a one-way trip: the last holder's final
//! renewal, sent before it stopped, may land that much later and is waited
//! out from then), plus the slowest contender's lock-delay + k·(read gap +
//! 3·timeout: a read, a write, and the read-back of a write whose reply was
//! lost), plus a few ticks. The read gap is the longest a contender
//! goes between reads: its poll interval, or, for followers of renewals
//! (the default schedule), the longest renew interval a holder advertises.
//!
//! k is how many read-and-write attempts a contender may need before one
//! pair goes through: with per-request failure probability p (the store's
//! injected rates, plus random message loss), k = ⌈ln(10⁻⁶) / ln(1 −
//! (1−p)²)⌉, at least 1. The window's opening gap counts too, so a leader
//! that steps down without a fault, and a crash, must both be followed by a
//! new leader within the bound. Windows shorter than their bound, or with
//! nobody able to contend, are skipped and counted ([`windows`]).
//!
//! A graceful release must be followed within the release bound (one read
//! gap, a round trip, a request timeout and k attempts), unless a fault
//! lands in that span. Under the default schedule that is about one renew
//! interval: the price of reading once per renewal instead of every poll.

use super::{Context, Property, Violation, terms};
use crate::history::StepReason;
use crate::history::{Entry, Event};

/// How many windows were judged and how many were too short (or had nobody
/// able to contend) to judge.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Windows {
    /// Windows long enough to hold the property to.
    pub checked: usize,
    /// Windows skipped.
    pub skipped: usize,
}

/// Reports every leaderless stretch longer than its window's bound, and
/// every slow handover after a release.
pub fn check(entries: &[Entry], context: &Context, violations: &mut Vec<Violation>) {
    judge(entries, context, Some(violations));
}

/// Counts the windows the check judged and skipped.
pub fn windows(entries: &[Entry], context: &Context) -> Windows {
    judge(entries, context, None)
}

fn judge(entries: &[Entry], context: &Context, mut violations: Option<&mut Vec<Violation>>) -> Windows {
    let terms = terms(entries, context.end_us);
    let mut counts = Windows::default();
    for (index, (from_us, contenders)) in context.contention.iter().enumerate() {
        let to_us = context.contention.get(index + 1).map_or(context.end_us, |(next, _)| *next).min(context.end_us);
        let bound_us = context.takeover_bound_us(contenders);
        if contenders.is_empty() || to_us.saturating_sub(*from_us) < bound_us {
            counts.skipped += 1;
            continue;
        }
        counts.checked += 1;
        // Walk the window's leaderless stretches, in order of start.
        let mut covered_until = *from_us;
        let mut spans: Vec<(u64, u64)> = terms
            .iter()
            .filter(|term| term.end_us > *from_us && term.start_us < to_us)
            .map(|term| (term.start_us.max(*from_us), term.end_us.min(to_us)))
            .collect();
        spans.sort_unstable();
        spans.push((to_us, to_us));
        for (start, end) in spans {
            if start > covered_until && start - covered_until > bound_us {
                if let Some(violations) = violations.as_deref_mut() {
                    violations.push(Violation {
                        property: Property::Liveness,
                        at_us: covered_until + bound_us,
                        nodes: contenders.clone(),
                        generation: None,
                        detail: format!(
                            "nobody led from {:.3}s for {:.3}s although {} could contend (bound {:.3}s)",
                            covered_until as f64 / 1e6,
                            (start - covered_until) as f64 / 1e6,
                            contenders.join(", "),
                            bound_us as f64 / 1e6
                        ),
                    });
                }
                // One report per window: the rest of it follows from this.
                break;
            }
            covered_until = covered_until.max(end);
        }
    }
    if let Some(violations) = violations {
        handovers(entries, &terms, context, violations);
    }
    counts
}

/// A graceful release hands over within the release bound when no fault
/// lands in that span.
fn handovers(entries: &[Entry], terms: &[super::Term], context: &Context, violations: &mut Vec<Violation>) {
    for (index, entry) in entries.iter().enumerate() {
        let Event::Stepped { generation, reason } = &entry.event else {
            continue;
        };
        if *reason != StepReason::Released {
            continue;
        }
        let window_end = entry.at_us + context.handover_bound_us;
        if window_end >= context.end_us {
            continue;
        }
        let disturbed = entries[index..].iter().take_while(|later| later.at_us <= window_end).any(|later| {
            matches!(later.event, Event::Fault { .. } | Event::Crashed | Event::Paused { .. } | Event::Suspended { .. })
        });
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

/// k: read-and-write attempts a contender may need, with per-request
/// failure probability `p`, so that all k fail with probability below 10⁻⁶.
pub fn attempts(p: f64) -> u32 {
    let both = (1.0 - p.clamp(0.0, 1.0)).powi(2);
    if both >= 1.0 {
        return 1;
    }
    if both <= 0.0 {
        return u32::MAX;
    }
    let k = (1e-6f64).ln() / (1.0 - both).ln();
    (k.ceil() as u32).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invariants::NodeFacts;
    use crate::invariants::test_support::at;

    fn node(name: &str) -> NodeFacts {
        // TTL 6 s, ρ 1e-3, no lock-delay, one attempt of 0.4 s poll + 2 s
        // timeouts.
        NodeFacts {
            name: name.into(),
            ttl_us: 6_000_000,
            drift_bound: 1e-3,
            attempt_us: 2_400_000,
            ..NodeFacts::default()
        }
    }

    fn context(contention: Vec<(u64, Vec<String>)>) -> Context {
        Context {
            facts: vec![node("a"), node("b"), node("c")],
            attempts: 1,
            handover_bound_us: 600_000,
            end_us: 60_000_000,
            contention,
            ..Context::default()
        }
    }

    fn all() -> Vec<String> {
        vec!["a".into(), "b".into(), "c".into()]
    }

    fn released(generation: u64) -> Event {
        Event::Stepped { generation, reason: StepReason::Released }
    }

    #[test]
    fn a_prompt_takeover_passes_and_a_late_one_is_caught() {
        // a crashes at 5 s: from then only b and c contend.
        let contention = vec![(0, all()), (5_000_000, vec!["b".into(), "c".into()])];
        let prompt = [
            at(0, "a", Event::Acquired { generation: 1 }),
            at(5_000, "a", Event::Crashed),
            at(12_000, "b", Event::Acquired { generation: 2 }),
        ];
        let mut found = Vec::new();
        check(&prompt, &context(contention.clone()), &mut found);
        assert!(found.is_empty(), "{found:?}");
        let late = [
            at(0, "a", Event::Acquired { generation: 1 }),
            at(5_000, "a", Event::Crashed),
            at(18_000, "b", Event::Acquired { generation: 2 }),
        ];
        check(&late, &context(contention), &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].property, Property::Liveness);
    }

    #[test]
    fn a_renewal_that_lands_after_its_holder_crashed_is_allowed_for() {
        // On a store that may take 1 s to commit, the crashed holder's last
        // renewal may land that long after the crash, and contenders wait
        // the TTL out from when they see it: a takeover 6 + 1 + 2.4 s after
        // the crash is in time, one a tick past every allowance is not.
        let contention = vec![(0, all()), (5_000_000, vec!["b".into(), "c".into()])];
        let mut slow = context(contention);
        slow.in_flight_us = 1_000_000;
        let bound = slow.takeover_bound_us(&["b".into(), "c".into()]);
        assert_eq!(bound, 6_006_000 + 1_000_000 + 2_400_000);
        let history = |taken_us: u64| {
            [
                at(0, "a", Event::Acquired { generation: 1 }),
                at(5_000, "a", Event::Crashed),
                Entry { at_us: taken_us, ..at(0, "b", Event::Acquired { generation: 2 }) },
            ]
        };
        let mut found = Vec::new();
        check(&history(5_000_000 + bound), &slow, &mut found);
        assert!(found.is_empty(), "{found:?}");
        check(&history(5_000_000 + bound + 10_000), &slow, &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
    }

    #[test]
    fn a_leader_that_steps_down_mid_run_without_a_fault_must_be_replaced() {
        // The old checker looked only once, after the last fault (here: at
        // the start), and a leader at that instant satisfied it for good.
        let history = [
            at(100, "a", Event::Acquired { generation: 1 }),
            at(20_000, "a", Event::Stepped { generation: 1, reason: StepReason::Cancelled }),
        ];
        let mut found = Vec::new();
        check(&history, &context(vec![(0, all())]), &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].detail.contains("from 20.000s"), "{}", found[0].detail);
    }

    #[test]
    fn a_store_with_fault_rates_is_still_held_to_a_widened_bound() {
        // The old checker switched liveness off for any store with faults.
        let mut faulty = context(vec![(0, all())]);
        faulty.attempts = attempts(0.1);
        assert_eq!(faulty.attempts, 9);
        let bound = faulty.takeover_bound_us(&all());
        assert_eq!(bound, 6_006_000 + 9 * 2_400_000);
        let never = [at(0, "a", Event::Started { incarnation: 0 })];
        let mut found = Vec::new();
        check(&never, &faulty, &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
        // A takeover inside the widened bound passes.
        let slow = [at(20_000, "b", Event::Acquired { generation: 1 })];
        let mut found = Vec::new();
        check(&slow, &faulty, &mut found);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn short_windows_and_windows_nobody_can_use_are_skipped_and_counted() {
        let contention = vec![(0, all()), (5_000_000, Vec::new()), (50_000_000, all()), (55_000_000, all())];
        let history = [at(0, "a", Event::Started { incarnation: 0 })];
        let mut found = Vec::new();
        check(&history, &context(contention.clone()), &mut found);
        assert!(found.is_empty(), "{found:?}");
        assert_eq!(windows(&history, &context(contention)), Windows { checked: 0, skipped: 4 });
    }

    #[test]
    fn a_slow_handover_after_release_is_caught() {
        let quiet = context(vec![(0, all())]);
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

    #[test]
    fn the_bound_waits_out_the_longest_ttl_even_when_its_node_cannot_contend() {
        // A node with a 12 s TTL led and crashed; the 3 s contender must
        // wait out the 12 s TTL its record states.
        let mut context = context(vec![(0, vec!["c".into()])]);
        context.facts[0].ttl_us = 12_000_000;
        context.facts[2].ttl_us = 3_000_000;
        assert_eq!(context.takeover_bound_us(&["c".to_string()]), 12_012_000 + 2_400_000);
    }

    #[test]
    fn attempts_grow_with_the_failure_rate() {
        assert_eq!(attempts(0.0), 1);
        assert_eq!(attempts(0.01), 4);
        assert_eq!(attempts(0.5), 49);
        assert_eq!(attempts(1.0), u32::MAX);
    }
}
