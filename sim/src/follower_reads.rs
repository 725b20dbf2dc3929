//! How often followers read: the figure the read schedule is judged by.
//!
//! A follower here is a node that could contend (it runs and reaches the
//! store both ways, as the runner records in [`Context::contention`]) and
//! holds no term. Its reads of the lease key are counted, retries included,
//! and divided by its time as a follower in units of the longest TTL. The
//! run's first four TTLs are left out: that is where followers find the
//! holder's renewals, and the figure is about the steady part of a run. A
//! node that joins later is counted from when it joins, search included,
//! and a new holder's lock-delay counts as follower time (its term starts
//! when its work does).

use crate::history::{Entry, Event, StoreOpKind};
use crate::invariants::{Context, Term};

/// Reads per TTL per follower over the steady part of the run, or `None`
/// when followers spent less than one TTL there.
pub fn reads_per_ttl(entries: &[Entry], terms: &[Term], context: &Context) -> Option<f64> {
    let ttl_us = context.facts.iter().map(|facts| facts.ttl_us).max()?.max(1);
    let from_us = ttl_us.saturating_mul(4);
    let (mut reads, mut follower_us) = (0u64, 0u64);
    for node in &context.nodes {
        let contending = contending(context, node, from_us);
        let leading: Vec<(u64, u64)> =
            terms.iter().filter(|term| term.node == *node).map(|term| (term.start_us, term.end_us)).collect();
        let following = subtract(&contending, &leading);
        follower_us += following.iter().map(|(from, to)| to - from).sum::<u64>();
        reads += entries
            .iter()
            .filter(|entry| match &entry.event {
                Event::Store(op) => op.op == StoreOpKind::Read && op.node() == Some(node.as_str()),
                _ => false,
            })
            .filter(|entry| following.iter().any(|(from, to)| (*from..*to).contains(&entry.at_us)))
            .count() as u64;
    }
    (follower_us >= ttl_us).then(|| reads as f64 * ttl_us as f64 / follower_us as f64)
}

/// The spans, from `from_us` on, in which `node` could contend.
pub(crate) fn contending(context: &Context, node: &str, from_us: u64) -> Vec<(u64, u64)> {
    let mut spans = Vec::new();
    for (index, (start, contenders)) in context.contention.iter().enumerate() {
        let end = context.contention.get(index + 1).map_or(context.end_us, |(next, _)| *next).min(context.end_us);
        let start = (*start).max(from_us);
        if start < end && contenders.iter().any(|name| name == node) {
            spans.push((start, end));
        }
    }
    spans
}

/// `spans` without any instant in `holes`. Both are lists of half-open
/// spans; `spans` in order and disjoint.
pub(crate) fn subtract(spans: &[(u64, u64)], holes: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut left = spans.to_vec();
    for (hole_start, hole_end) in holes {
        left = left
            .into_iter()
            .flat_map(|(start, end)| {
                let before = (start, end.min(*hole_start));
                let after = (start.max(*hole_end), end);
                [before, after].into_iter().filter(|(from, to)| from < to)
            })
            .collect();
    }
    left
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::StoreOp;
    use crate::invariants::NodeFacts;

    fn read(at_us: u64, node: &str) -> Entry {
        Entry {
            at_us,
            node: "s3".into(),
            event: Event::Store(StoreOp {
                client: Some(format!("{node}#1")),
                op: StoreOpKind::Read,
                ..StoreOp::default()
            }),
        }
    }

    fn context() -> Context {
        Context {
            nodes: vec!["a".into(), "b".into()],
            contention: vec![(0, vec!["a".into(), "b".into()])],
            end_us: 100_000_000,
            facts: ["a", "b"]
                .map(|name| NodeFacts { name: name.into(), ttl_us: 6_000_000, ..NodeFacts::default() })
                .to_vec(),
            ..Context::default()
        }
    }

    #[test]
    fn counts_reads_of_nodes_without_a_term_after_four_ttls() {
        let terms = vec![Term { node: "a".into(), generation: 1, start_us: 0, end_us: 100_000_000, paused: vec![] }];
        // b reads every 2 s for the whole run; a's reads, made while it
        // leads, and b's in the first four TTLs do not count.
        let mut entries: Vec<Entry> = (0..50).map(|n| read(n * 2_000_000 + 1, "b")).collect();
        entries.extend((0..50).map(|n| read(n * 2_000_000 + 2, "a")));
        let rate = reads_per_ttl(&entries, &terms, &context()).unwrap();
        assert!((rate - 3.0).abs() < 0.05, "{rate}");
    }

    #[test]
    fn nodes_that_cannot_contend_are_not_followers() {
        let mut context = context();
        // b is cut off from 24 s on: it follows for no time at all.
        context.contention.push((24_000_000, vec!["a".into()]));
        let terms = vec![Term { node: "a".into(), generation: 1, start_us: 0, end_us: 100_000_000, paused: vec![] }];
        let entries: Vec<Entry> = (0..50).map(|n| read(n * 2_000_000 + 1, "b")).collect();
        assert_eq!(reads_per_ttl(&entries, &terms, &context), None);
    }
}
