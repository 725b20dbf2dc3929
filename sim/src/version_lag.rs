//! How soon followers see each new version of the lease record: the figure
//! the read schedule's promise is judged by.
//!
//! The schedule exists to see a new version soon after it lands, because a
//! takeover waits out the TTL from the first arrival of the last version
//! (I4): a version seen late is a takeover that comes late. Locked onto the
//! holder's renewals, a follower sees each within about a step (R/10) and a
//! round trip; a release within a renew interval and a round trip.
//!
//! For every version of the lease key that landed while a node followed
//! (it could contend and held no term; the run's first four TTLs left out,
//! as [`crate::follower_reads`] does), the lag is from when the version
//! provably existed (the store's answer to its write, or an earlier answer
//! to anyone's read that showed it) to the store's answer to that
//! follower's first read showing it or a later version. A version the
//! follower stopped following before it saw one is not counted. Both
//! instants are the store's, so the figure leaves out the follower's half
//! of the round trip.

use std::collections::BTreeMap;

use crate::follower_reads::{contending, subtract};
use crate::history::{Entry, Event, StoreOpKind};
use crate::invariants::{Context, Term};

/// Every follower's lag behind every version it followed, in µs.
pub fn lags_us(entries: &[Entry], terms: &[Term], context: &Context) -> Vec<u64> {
    let Some(ttl_us) = context.facts.iter().map(|facts| facts.ttl_us).max() else { return Vec::new() };
    let from_us = ttl_us.saturating_mul(4);
    // Versions in the order they were written, and when each provably
    // existed: the store's answer to its write, or an earlier answer to a
    // read that showed it (a write may commit before it is answered).
    let mut landed: Vec<u64> = Vec::new();
    let mut order: BTreeMap<&str, usize> = BTreeMap::new();
    for entry in entries {
        if let Event::Store(op) = &entry.event
            && op.applied
            && let Some(etag) = op.written.as_deref()
        {
            order.insert(etag, landed.len());
            landed.push(op.ended_us);
        }
    }
    for entry in entries {
        if let Event::Store(op) = &entry.event
            && op.op == StoreOpKind::Read
            && op.status.is_some()
            && let Some(&index) = op.read.as_deref().and_then(|etag| order.get(etag))
        {
            landed[index] = landed[index].min(op.ended_us);
        }
    }
    let mut lags = Vec::new();
    for node in &context.nodes {
        let leading: Vec<(u64, u64)> =
            terms.iter().filter(|term| term.node == *node).map(|term| (term.start_us, term.end_us)).collect();
        let following = subtract(&contending(context, node, from_us), &leading);
        // The node's reads: when the store answered, and the position of
        // the version shown (missing keys and unknown versions show none).
        let reads: Vec<(u64, Option<usize>)> = entries
            .iter()
            .filter_map(|entry| match &entry.event {
                Event::Store(op)
                    if op.op == StoreOpKind::Read && op.status.is_some() && op.node() == Some(node.as_str()) =>
                {
                    Some((op.ended_us, op.read.as_deref().and_then(|etag| order.get(etag).copied())))
                }
                _ => None,
            })
            .collect();
        for (index, landed_us) in landed.iter().enumerate() {
            let Some(&(_, span_end)) = following.iter().find(|(from, to)| (*from..*to).contains(landed_us)) else {
                continue;
            };
            // Only a read that came after the version committed shows it
            // or a later one.
            let seen = reads
                .iter()
                .find(|(answered_us, shown)| *answered_us < span_end && shown.is_some_and(|at| at >= index));
            if let Some((answered_us, _)) = seen {
                lags.push(answered_us.saturating_sub(*landed_us));
            }
        }
    }
    lags
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::StoreOp;
    use crate::invariants::NodeFacts;

    fn store(ended_us: u64, op: StoreOp) -> Entry {
        Entry { at_us: ended_us, node: "s3".into(), event: Event::Store(StoreOp { ended_us, status: Some(200), ..op }) }
    }

    fn write(ended_us: u64, etag: &str) -> Entry {
        store(
            ended_us,
            StoreOp {
                client: Some("a#1".into()),
                op: StoreOpKind::Update,
                written: Some(etag.into()),
                applied: true,
                ..StoreOp::default()
            },
        )
    }

    fn read(ended_us: u64, node: &str, etag: &str) -> Entry {
        store(
            ended_us,
            StoreOp {
                client: Some(format!("{node}#1")),
                op: StoreOpKind::Read,
                read: Some(etag.into()),
                ..StoreOp::default()
            },
        )
    }

    fn context() -> Context {
        Context {
            nodes: vec!["a".into(), "b".into()],
            contention: vec![(0, vec!["a".into(), "b".into()])],
            end_us: 100_000_000,
            facts: vec![NodeFacts { ttl_us: 1_000_000, ..NodeFacts::default() }],
            ..Context::default()
        }
    }

    #[test]
    fn a_follower_lags_until_its_first_read_that_shows_the_version_or_a_later_one() {
        let leader = Term { node: "a".into(), generation: 1, start_us: 0, end_us: 100_000_000, paused: Vec::new() };
        let entries = vec![
            write(10_000_000, "v1"),
            read(10_050_000, "b", "v0"), // before the write showed: a miss
            read(10_200_000, "b", "v1"),
            write(12_000_000, "v2"),
            write(14_000_000, "v3"),
            read(14_700_000, "b", "v3"), // v2 never seen: it counts until v3 shows
            read(15_000_000, "a", "v3"), // the leader's own reads are not a follower's
            // A write that committed before the store answered it: the
            // read that showed it first is when it provably existed.
            read(15_900_000, "b", "v3"),
            read(16_050_000, "b", "v4"),
            write(16_100_000, "v4"),
        ];
        let lags = lags_us(&entries, &[leader], &context());
        assert_eq!(lags, vec![200_000, 2_700_000, 700_000, 0]);
    }

    #[test]
    fn versions_before_the_steady_part_or_never_seen_are_not_counted() {
        let entries = vec![write(1_000_000, "v1"), read(1_100_000, "b", "v1"), write(20_000_000, "v2")];
        assert!(lags_us(&entries, &[], &context()).is_empty());
    }
}
