//! The lease key's history is linearizable as a compare-and-swap register.
//!
//! The fake S3 reports every request on the lease key with what it did:
//! applied or refused, and the ETags involved. This checker turns those
//! reports into register operations (ETags become version numbers) and asks
//! [`crate::linearizability`] whether some order of them, consistent with
//! real time, explains every answer. An honest store always passes; a store
//! that lets two conditional writes both win, ignores a condition, or serves
//! stale reads does not.
//!
//! The store's own view is used, so a dropped reply does not make an
//! operation indeterminate here: the store knows what it did. Only a failed
//! condition (412, or 404 for a conditional write on a missing key) says
//! something about the state; every other refusal (403, 400, 409, 500, 501,
//! 503, ...) changed nothing, promises nothing, and is left out.

use std::collections::BTreeMap;

use super::{Property, Violation};
use crate::history::{Entry, Event, StoreOp, StoreOpKind};
use crate::linearizability::{Call, Checker, Operation, Outcome, Verdict};

/// Search budget: far above what a run's few thousand operations need, and
/// small enough that a pathological history ends in seconds.
const MAX_STEPS: u64 = 2_000_000;

/// Checks the store operations in `entries`.
pub fn check(entries: &[Entry], violations: &mut Vec<Violation>) {
    let mut versions = Versions::default();
    let mut history = Vec::new();
    let mut times = Vec::new();
    for entry in entries {
        let Event::Store(op) = &entry.event else {
            continue;
        };
        if let Some(operation) = operation(op, history.len() as u64, &mut versions) {
            history.push(operation);
            times.push(op.invoked_us);
        }
    }
    if history.is_empty() {
        return;
    }
    let problem = match Checker::new().max_steps(MAX_STEPS).check(&history) {
        Ok(Verdict::Linearizable { .. }) => return,
        Ok(Verdict::NotLinearizable(counterexample)) => {
            let at_us = counterexample.blocking.iter().filter_map(|&i| times.get(i)).min().copied();
            (at_us, format!("the store's history is not linearizable:\n{}", counterexample.explain(&history, 6)))
        }
        Ok(Verdict::Unknown { steps }) => {
            (None, format!("the linearizability search gave up after {steps} steps; the history is unchecked"))
        }
        Err(err) => (None, format!("the store's history could not be checked: {err}")),
    };
    violations.push(Violation {
        property: Property::Linearizable,
        at_us: problem.0.unwrap_or_default(),
        nodes: vec!["s3".into()],
        generation: None,
        detail: problem.1,
    });
}

/// Numbers ETags in the order they are first seen.
#[derive(Default)]
struct Versions {
    ids: BTreeMap<String, u64>,
}

impl Versions {
    fn id(&mut self, etag: &str) -> u64 {
        let next = self.ids.len() as u64 + 1;
        *self.ids.entry(etag.to_string()).or_insert(next)
    }

    /// A version nobody ever stored: the value of a write that was refused.
    fn unused(&mut self) -> u64 {
        let next = self.ids.len() as u64 + 1;
        self.ids.insert(format!("\u{0}unused-{next}"), next);
        next
    }
}

fn operation(op: &StoreOp, client: u64, versions: &mut Versions) -> Option<Operation> {
    // A refusal is a statement about the state only when a condition
    // failed; authentication, validation, throttling and server errors are
    // not "condition false".
    let says_something = matches!(
        (op.op, op.status),
        (_, Some(412)) | (StoreOpKind::Update | StoreOpKind::Delete | StoreOpKind::Read, Some(404))
    );
    if !op.applied && !says_something {
        return None;
    }
    let written = |versions: &mut Versions| match &op.written {
        Some(etag) => versions.id(etag),
        None => versions.unused(),
    };
    let call = match op.op {
        StoreOpKind::Read => Call::Read,
        StoreOpKind::Create => Call::Create { value: written(versions) },
        StoreOpKind::Put => Call::Put { value: written(versions) },
        StoreOpKind::Update => {
            let expected = versions.id(op.expected.as_deref()?);
            Call::Update { expected, new: written(versions) }
        }
        StoreOpKind::Delete => match op.expected.as_deref() {
            Some(expected) => Call::Delete { expected: versions.id(expected) },
            None => Call::Remove,
        },
    };
    let outcome = match (&call, op.applied) {
        (Call::Read, true) => Outcome::Value(versions.id(op.read.as_deref()?)),
        (Call::Read, false) if op.status == Some(404) => Outcome::Missing,
        (Call::Read, false) => return None,
        (_, true) => Outcome::Ok,
        (_, false) => Outcome::Refused,
    };
    Some(Operation::completed(client, call, op.invoked_us, op.ended_us.max(op.invoked_us), outcome))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invariants::test_support::at;

    fn op(
        kind: StoreOpKind,
        expected: Option<&str>,
        written: Option<&str>,
        read: Option<&str>,
        status: u16,
        span: (u64, u64),
    ) -> Entry {
        let applied = status == 200;
        at(
            span.0,
            "s3",
            Event::Store(StoreOp {
                op: kind,
                expected: expected.map(String::from),
                written: written.map(String::from),
                read: read.map(String::from),
                status: Some(status),
                applied,
                invoked_us: span.0 * 1000,
                ended_us: span.1 * 1000,
                ..StoreOp::default()
            }),
        )
    }

    #[test]
    fn an_honest_sequence_passes() {
        let history = [
            op(StoreOpKind::Read, None, None, None, 404, (0, 1)),
            op(StoreOpKind::Create, None, Some("e1"), None, 200, (2, 3)),
            op(StoreOpKind::Create, None, None, None, 412, (4, 5)),
            op(StoreOpKind::Update, Some("e1"), Some("e2"), None, 200, (6, 7)),
            op(StoreOpKind::Update, Some("e1"), None, None, 412, (8, 9)),
            op(StoreOpKind::Read, None, None, Some("e2"), 200, (10, 11)),
        ];
        let mut found = Vec::new();
        check(&history, &mut found);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn two_winning_creates_and_a_stale_update_are_caught() {
        let two_creates = [
            op(StoreOpKind::Create, None, Some("e1"), None, 200, (0, 1)),
            op(StoreOpKind::Create, None, Some("e2"), None, 200, (2, 3)),
        ];
        let mut found = Vec::new();
        check(&two_creates, &mut found);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].property, Property::Linearizable);

        let stale = [
            op(StoreOpKind::Create, None, Some("e1"), None, 200, (0, 1)),
            op(StoreOpKind::Update, Some("e1"), Some("e2"), None, 200, (2, 3)),
            op(StoreOpKind::Update, Some("e1"), Some("e3"), None, 200, (4, 5)),
        ];
        let mut found = Vec::new();
        check(&stale, &mut found);
        assert_eq!(found.len(), 1);
    }

    #[test]
    fn refusals_that_are_not_failed_conditions_say_nothing_about_the_state() {
        // The key is missing throughout; a create refused for a bad
        // signature (403) or a malformed request (400) does not mean it
        // existed, and must not make this history look impossible.
        for status in [403, 400] {
            let history = [
                op(StoreOpKind::Read, None, None, None, 404, (0, 1)),
                op(StoreOpKind::Create, None, None, None, status, (2, 3)),
                op(StoreOpKind::Read, None, None, None, 404, (4, 5)),
            ];
            let mut found = Vec::new();
            check(&history, &mut found);
            assert!(found.is_empty(), "{status}: {found:?}");
        }
        // A failed condition still counts: a refused create on a key that
        // never existed is impossible.
        let history = [
            op(StoreOpKind::Read, None, None, None, 404, (0, 1)),
            op(StoreOpKind::Create, None, None, None, 412, (2, 3)),
        ];
        let mut found = Vec::new();
        check(&history, &mut found);
        assert_eq!(found.len(), 1);
    }

    #[test]
    fn an_unconditional_delete_is_part_of_the_history() {
        // Someone deletes the key without a condition; a read after it finds
        // nothing. Left out of the history, that read would be impossible.
        let history = [
            op(StoreOpKind::Create, None, Some("e1"), None, 200, (0, 1)),
            op(StoreOpKind::Delete, None, None, None, 200, (2, 3)),
            op(StoreOpKind::Read, None, None, None, 404, (4, 5)),
        ];
        let mut found = Vec::new();
        check(&history, &mut found);
        assert!(found.is_empty(), "{found:?}");
        // A read of e1 after the delete completed is still caught.
        let history = [
            op(StoreOpKind::Create, None, Some("e1"), None, 200, (0, 1)),
            op(StoreOpKind::Delete, None, None, None, 200, (2, 3)),
            op(StoreOpKind::Read, None, None, Some("e1"), 200, (4, 5)),
        ];
        check(&history, &mut found);
        assert_eq!(found.len(), 1);
    }

    #[test]
    fn a_stale_read_is_caught() {
        let history = [
            op(StoreOpKind::Create, None, Some("e1"), None, 200, (0, 1)),
            op(StoreOpKind::Update, Some("e1"), Some("e2"), None, 200, (2, 3)),
            op(StoreOpKind::Read, None, None, Some("e1"), 200, (4, 5)),
        ];
        let mut found = Vec::new();
        check(&history, &mut found);
        assert_eq!(found.len(), 1);
    }
}
