//! How promptly a keyed world's members evict a silent member, and how
//! soon its keys start elsewhere once they have: the measured side of the
//! bounds that scenario files may assert with `max_eviction_delay_ms` and
//! `max_eviction_handoff_ms`.
//!
//! A member may evict an entry once the entry's TTL has passed, on its own
//! clock, since the first response that showed the entry's current nonce;
//! it wakes for that instant rather than waiting for its next read. So an
//! eviction commits within P (the read that first shows the last renewal),
//! two reads' RTT, TTL·(1+ρ), a tick or a retry gap (R/8, if a request was
//! just made), a read's RTT and the write's way to the store, counted from
//! the evicted member's last write. The keys the evicted member held start
//! on their new owners once those have read the eviction and waited out
//! their lock-delay from that read (or, for the evictor, from its write's
//! response): within P, a read's RTT, lock-delay·(1+ρ) and a tick of the
//! eviction's commit, and for the evictor itself within a write's RTT,
//! lock-delay·(1+ρ) and a tick.

use crate::history::{Entry, Event, StoreOpKind};
use crate::invariants::KeyedFacts;
use crate::invariants::keyed_acting::{Intervals, evictions};

/// Eviction delays in µs: one figure per eviction, from the commit of the
/// evicted member's last write before it to the eviction's commit. An
/// eviction of a member that never wrote is left out.
pub fn delays(entries: &[Entry], keyed: &KeyedFacts) -> Vec<u64> {
    evictions(entries)
        .into_iter()
        .filter_map(|(victim, evicted_us)| {
            let last_write = entries
                .iter()
                .take_while(|entry| entry.at_us < evicted_us)
                .filter_map(|entry| match &entry.event {
                    Event::Store(op) if op.applied && matches!(op.op, StoreOpKind::Create | StoreOpKind::Update) => {
                        (keyed.id_of(op.node()?) == victim).then_some(entry.at_us)
                    }
                    _ => None,
                })
                .max()?;
            Some(evicted_us - last_write)
        })
        .collect()
}

/// Eviction handoffs in µs: one figure per eviction of a member that was
/// the last to act for some key, from the eviction's commit to the last of
/// those keys starting under another member. Keys nobody took over before
/// the run ended are left out (`keyed-settled` judges those).
pub fn handoffs(entries: &[Entry], intervals: &Intervals, keyed: &KeyedFacts) -> Vec<u64> {
    evictions(entries)
        .into_iter()
        .filter_map(|(victim, evicted_us)| {
            intervals
                .values()
                .filter_map(|acting| {
                    let last = acting.iter().rfind(|a| a.start_us < evicted_us)?;
                    if keyed.id_of(&last.node) != victim {
                        return None;
                    }
                    let next = acting.iter().find(|a| a.start_us >= evicted_us && keyed.id_of(&a.node) != victim)?;
                    Some(next.start_us - evicted_us)
                })
                .max()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::StoreOp;
    use crate::invariants::keyed_acting::intervals;
    use crate::invariants::keyed_acting::tests::{started, stopped};
    use crate::invariants::test_support::at;

    fn write(ms: u64, client: &str) -> Entry {
        let op = StoreOp { client: Some(client.into()), op: StoreOpKind::Update, applied: true, ..StoreOp::default() };
        at(ms, "s3", Event::Store(op))
    }

    fn view(ms: u64, view: u64, change: &str, id: &str) -> Entry {
        at(ms, "s3", Event::View { view, members: vec![], change: change.into(), entry: id.into() })
    }

    #[test]
    fn an_eviction_is_timed_from_the_evicted_members_last_write() {
        let entries = [
            write(1_000, "a#0"),
            view(1_000, 1, "join", "a"),
            write(2_000, "b#0"),
            view(2_000, 2, "join", "b"),
            write(4_000, "a#0"),
            view(4_000, 2, "join", "b"),
            // A refused write of `a` is no renewal.
            at(
                5_000,
                "s3",
                Event::Store(StoreOp { client: Some("a#0".into()), op: StoreOpKind::Update, ..StoreOp::default() }),
            ),
            write(12_500, "b#0"),
            view(12_500, 3, "evict", "a"),
            // The same view again (a renewal): not another eviction.
            write(14_000, "b#0"),
            view(14_000, 3, "evict", "a"),
        ];
        assert_eq!(delays(&entries, &KeyedFacts::default()), [8_500_000]);
    }

    #[test]
    fn an_eviction_handoff_is_timed_to_the_last_key_started_elsewhere() {
        let entries = [
            started(0, "a", 1, 1),
            started(0, "a", 2, 1),
            started(0, "b", 3, 1),
            at(5_000, "a", Event::Crashed),
            stopped(5_000, "a", 1, 1),
            stopped(5_000, "a", 2, 1),
            view(12_000, 2, "evict", "a"),
            started(13_000, "b", 1, 2),
            started(13_400, "b", 2, 2),
            // `b`'s own key is no handoff of `a`'s.
            stopped(14_000, "b", 3, 1),
            started(14_500, "b", 3, 2),
        ];
        let handoffs = handoffs(&entries, &intervals(&entries), &KeyedFacts::default());
        assert_eq!(handoffs, [1_400_000], "k2 was the last of a's keys to start, 1.4 s after the eviction");
    }
}
