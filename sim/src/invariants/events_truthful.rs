//! L5: the elector's events tell the truth about its terms.
//!
//! Users drive their work from the event stream (`Elector::subscribe`,
//! `Elector::run`) and page on its loss reasons, so a stream that skips an
//! end, reports one for a term it never announced, or blames the wrong
//! cause misleads them even when the elector itself stayed safe. Per node
//! process:
//!
//! - every `Lost` ends the term the stream last announced, with the same
//!   generation, and no term is announced while another is still open;
//! - the reason given is true of the run: `superseded` needs an applied
//!   write by someone other than this process since the term's record was
//!   written, `deleted` an applied deletion since then, and `abandoned` a
//!   workload that dropped the term's `lead` future;
//! - a term whose renewal the store refused for good (403 or 400: a wrong
//!   secret, a clock S3 will not accept) ends with `failed`, not as if it
//!   had merely run out or been taken;
//! - the copy of a term's work guard that a subscriber gets is detached
//!   (a stream nobody reads must not hold a release back), and the one
//!   `Elector::run` hands out is armed (the release waits for the work);
//! - `Event::Error` reports trouble, never a failed condition (another
//!   writer got there first): that is the protocol at work, and users who
//!   alert on errors would be paged for every contested race.
//!
//! Otherwise `expired`, `failed` and an unconfirmed release are the
//! holder's own account of its clock and its requests, and are not judged.

use std::collections::BTreeMap;

use super::{Property, Violation};
use crate::history::{Entry, Event, StoreOpKind};
use crate::history::{LossKind, StepReason};

/// What one node process's stream has said so far.
#[derive(Default)]
struct Process {
    /// `node#incarnation`, as the store's history names the client.
    client: String,
    /// The announced term not yet reported lost.
    open: Option<u64>,
    /// Generations whose `lead` future the workload dropped.
    dropped: Vec<u64>,
    /// The status of a refusal for good the store gave one of this
    /// process's renewals during the open term.
    refused: Option<u16>,
}

/// Reports every announcement and loss that does not match the run.
pub fn check(entries: &[Entry], violations: &mut Vec<Violation>) {
    let mut processes: BTreeMap<&str, Process> = BTreeMap::new();
    let condition_failed = hoplock::BackendError::LeaseHeld.to_string();
    let violation = |entry: &Entry, generation: u64, detail: String| Violation {
        property: Property::EventsTruthful,
        at_us: entry.at_us,
        nodes: vec![entry.node.clone()],
        generation: Some(generation),
        detail,
    };
    for (index, entry) in entries.iter().enumerate() {
        let node = entry.node.as_str();
        match &entry.event {
            Event::Started { incarnation } => {
                processes.insert(node, Process { client: format!("{node}#{incarnation}"), ..Process::default() });
            }
            Event::Stepped { generation, reason: StepReason::Dropped } => {
                processes.entry(node).or_default().dropped.push(*generation);
            }
            Event::ElectorError { message } if *message == condition_failed => {
                let generation = processes.get(node).and_then(|process| process.open).unwrap_or_default();
                let detail = format!("reported a failed condition as an error: {message}");
                violations.push(violation(entry, generation, detail));
            }
            Event::GuardHandedOut { generation, armed: false } => {
                let detail = "run() handed out a work guard that does not hold the release back".to_string();
                violations.push(violation(entry, *generation, detail));
            }
            Event::Announced { generation, armed } => {
                if *armed {
                    let detail = "a subscriber's copy of the term carried an armed work guard: a stream nobody \
                                  reads would hold the release back"
                        .to_string();
                    violations.push(violation(entry, *generation, detail));
                }
                let process = processes.entry(node).or_default();
                if let Some(open) = process.open.replace(*generation) {
                    let detail =
                        format!("announced generation {generation} while generation {open} was never reported lost");
                    violations.push(violation(entry, *generation, detail));
                }
            }
            Event::Lost { generation, reason } => {
                let process = processes.entry(node).or_default();
                let refused = process.refused.take();
                if process.open.take() != Some(*generation) {
                    let detail = format!(
                        "reported losing generation {generation} ({reason}), a term its events never announced"
                    );
                    violations.push(violation(entry, *generation, detail));
                    continue;
                }
                if let Some(status) = refused
                    && matches!(reason, LossKind::Expired | LossKind::Superseded | LossKind::Deleted)
                {
                    let detail = format!(
                        "its renewal was refused for good (HTTP {status}), but it reported the term lost as {reason}"
                    );
                    violations.push(violation(entry, *generation, detail));
                    continue;
                }
                // The store's history since the term's record was written,
                // looked at only for the reasons that name a store change.
                let during_term = || &entries[term_written(&entries[..index], &process.client, *generation)..index];
                let untrue = match reason {
                    LossKind::Superseded
                        if !during_term().iter().any(|e| applied_write_by_other(e, &process.client)) =>
                    {
                        "reported its record superseded, but nobody else wrote the key during its term"
                    }
                    LossKind::Deleted if !during_term().iter().any(applied_delete) => {
                        "reported its record deleted, but nobody deleted the key during its term"
                    }
                    LossKind::Abandoned if !process.dropped.contains(generation) => {
                        "reported its term abandoned, but its lead future was never dropped"
                    }
                    _ => continue,
                };
                violations.push(violation(entry, *generation, untrue.to_string()));
            }
            Event::Store(op) if matches!(op.status, Some(400 | 403)) && op.op == StoreOpKind::Update => {
                let Some((node, _)) = op.client.as_deref().and_then(|client| client.split_once('#')) else { continue };
                if let Some(process) = processes.get_mut(node)
                    && process.open.is_some()
                    && op.client.as_deref() == Some(process.client.as_str())
                {
                    process.refused = op.status;
                }
            }
            _ => {}
        }
    }
}

/// The index of the store operation that wrote `generation` for `client`,
/// or 0 if the history does not show it.
fn term_written(entries: &[Entry], client: &str, generation: u64) -> usize {
    entries
        .iter()
        .rposition(|entry| match &entry.event {
            Event::Store(op) => op.applied && op.generation == Some(generation) && op.client.as_deref() == Some(client),
            _ => false,
        })
        .unwrap_or(0)
}

fn applied_write_by_other(entry: &Entry, client: &str) -> bool {
    match &entry.event {
        Event::Store(op) => {
            op.applied
                && matches!(op.op, StoreOpKind::Create | StoreOpKind::Update | StoreOpKind::Put)
                && op.client.as_deref() != Some(client)
        }
        _ => false,
    }
}

fn applied_delete(entry: &Entry) -> bool {
    matches!(&entry.event, Event::Store(op) if op.applied && op.op == StoreOpKind::Delete)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::StoreOp;
    use crate::invariants::test_support::at;

    fn write(at_ms: u64, client: &str, generation: u64) -> Entry {
        let op = StoreOp {
            client: Some(client.into()),
            op: StoreOpKind::Update,
            applied: true,
            generation: Some(generation),
            ..StoreOp::default()
        };
        at(at_ms, "s3", Event::Store(op))
    }

    fn lost(at_ms: u64, generation: u64, reason: LossKind) -> Entry {
        at(at_ms, "a", Event::Lost { generation, reason })
    }

    fn run(entries: &[Entry]) -> Vec<Violation> {
        let mut violations = Vec::new();
        check(entries, &mut violations);
        violations
    }

    fn start() -> Vec<Entry> {
        vec![
            at(0, "a", Event::Started { incarnation: 0 }),
            write(10, "a#0", 1),
            at(20, "a", Event::Announced { generation: 1, armed: false }),
        ]
    }

    #[test]
    fn a_true_superseded_passes_and_a_false_one_is_flagged() {
        let mut honest = start();
        honest.extend([write(500, "operator", 2), lost(600, 1, LossKind::Superseded)]);
        assert!(run(&honest).is_empty(), "{:?}", run(&honest));

        // The holder's own renewal is not somebody else's write.
        let mut false_claim = start();
        false_claim.extend([write(500, "a#0", 1), lost(600, 1, LossKind::Superseded)]);
        let found = run(&false_claim);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].property, Property::EventsTruthful);
    }

    #[test]
    fn abandoned_needs_a_dropped_lead_future() {
        let mut dropped = start();
        dropped.extend([
            at(400, "a", Event::Stepped { generation: 1, reason: StepReason::Dropped }),
            lost(400, 1, LossKind::Abandoned),
        ]);
        assert!(run(&dropped).is_empty());

        let mut not_dropped = start();
        not_dropped.push(lost(400, 1, LossKind::Abandoned));
        assert_eq!(run(&not_dropped).len(), 1);
    }

    #[test]
    fn a_renewal_refused_for_good_ends_the_term_as_failed() {
        let refused = |at_ms| {
            let op = StoreOp {
                client: Some("a#0".into()),
                op: StoreOpKind::Update,
                status: Some(403),
                ..StoreOp::default()
            };
            at(at_ms, "s3", Event::Store(op))
        };
        let mut failed = start();
        failed.extend([refused(500), lost(510, 1, LossKind::Failed)]);
        assert!(run(&failed).is_empty());

        let mut ran_out = start();
        ran_out.extend([refused(500), lost(5500, 1, LossKind::Expired)]);
        assert_eq!(run(&ran_out).len(), 1);
    }

    #[test]
    fn a_failed_condition_is_not_reported_as_an_error() {
        let mut history = start();
        let message = hoplock::BackendError::LeaseHeld.to_string();
        history.push(at(700, "a", Event::ElectorError { message }));
        assert_eq!(run(&history).len(), 1);

        let mut trouble = start();
        trouble.push(at(700, "a", Event::ElectorError { message: "the request timed out".into() }));
        assert!(run(&trouble).is_empty());
    }

    #[test]
    fn only_the_run_stream_hands_out_an_armed_guard() {
        let mut armed_copy = start();
        armed_copy[2] = at(20, "a", Event::Announced { generation: 1, armed: true });
        assert_eq!(run(&armed_copy).len(), 1);

        let mut detached_for_run = start();
        detached_for_run.push(at(20, "a", Event::GuardHandedOut { generation: 1, armed: false }));
        assert_eq!(run(&detached_for_run).len(), 1);

        let mut armed_for_run = start();
        armed_for_run.push(at(20, "a", Event::GuardHandedOut { generation: 1, armed: true }));
        assert!(run(&armed_for_run).is_empty());
    }

    #[test]
    fn every_announced_term_ends_once_and_only_announced_terms_end() {
        // A second announcement without a loss between.
        let mut twice = start();
        twice.extend([write(900, "a#0", 2), at(910, "a", Event::Announced { generation: 2, armed: false })]);
        assert_eq!(run(&twice).len(), 1);

        // A loss of a term that was never announced (one lost in its
        // lock-delay, say).
        let never = vec![at(0, "a", Event::Started { incarnation: 0 }), lost(300, 4, LossKind::Expired)];
        assert_eq!(run(&never).len(), 1);

        // A restart forgets the crashed process's open term.
        let mut restarted = start();
        restarted.extend([
            at(700, "a", Event::Crashed),
            at(800, "a", Event::Started { incarnation: 1 }),
            write(810, "a#1", 2),
            at(820, "a", Event::Announced { generation: 2, armed: false }),
            lost(900, 2, LossKind::Released),
        ]);
        assert!(run(&restarted).is_empty(), "{:?}", run(&restarted));
    }
}
