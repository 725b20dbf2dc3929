//! The figures of one run: requests, leader- and member-hours, handovers,
//! stops, reads and version lags, measured from the history.

use super::*;
use crate::history::LossKind;
use crate::history::StoreOpKind;
use crate::world::Action;

/// Figures from one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Stats {
    /// Simulated seconds run.
    pub simulated_secs: f64,
    /// CPU (wall) seconds the run took.
    pub cpu_secs: f64,
    /// Requests the fake S3 served on the lease key.
    pub s3_requests: usize,
    /// Of those, reads (GET), the rest being writes (PUT) and deletes.
    pub s3_reads: usize,
    /// Of those, deletes (free on AWS; the Go hoplock releases by one).
    pub s3_deletes: usize,
    /// Terms begun.
    pub terms: usize,
    /// Terms begun after another node's term: handovers.
    pub takeovers: usize,
    /// Gaps from the end of one node's term to the start of another's, µs.
    pub failover_gaps_us: Vec<u64>,
    /// From each scheduled `stop` to the stopped node's campaign returning
    /// `Stopped`, µs (up to its restart, crash or the end of the run if it
    /// never returned).
    pub stop_latencies_us: Vec<u64>,
    /// Terms the elector's events reported lost involuntarily: expired,
    /// superseded, deleted or failed.
    pub lost_terms: usize,
    /// How often each kind of fault fired.
    pub faults: BTreeMap<String, usize>,
    /// Writes the downstream rejected for a stale generation.
    pub stale_writes_rejected: usize,
    /// Writes the downstream accepted from an older term after a newer one
    /// had begun (before it wrote): what fencing alone let through.
    pub stale_writes_accepted: usize,
    /// Liveness windows judged, and skipped as too short for their bound
    /// or with nobody able to contend.
    pub liveness_windows: invariants::liveness::Windows,
    /// Overlapping terms not judged for belief overlap because the
    /// contender's clock ran faster than the holder's drift bound allows.
    pub overlap_pairs_unchecked: usize,
    /// Simulated leader-time, in hours.
    pub leader_hours: f64,
    /// In keyed worlds, simulated member-time (every member process from
    /// its start to its crash, its leave or the end of the run), in hours.
    pub member_hours: f64,
    /// In keyed worlds, from each graceful leave of a member holding keys
    /// to the last of its keys starting elsewhere, µs.
    pub leave_handoffs_us: Vec<u64>,
    /// In keyed worlds, the same from each crash.
    pub crash_handoffs_us: Vec<u64>,
    /// In keyed worlds, from each join's commit to the joiner's first key
    /// starting, µs.
    pub join_handoffs_us: Vec<u64>,
    /// In keyed worlds, from the commit of each object a member created to
    /// the first key started on it, µs.
    pub create_handoffs_us: Vec<u64>,
    /// In keyed worlds, key stops whose work was dropped before it wound
    /// down, a crashed node's left out ([`crate::keyed_aborts`]).
    pub aborted_stops: usize,
    /// In keyed worlds, from each rewrite of the membership object at the
    /// same view number to the last stop of a key acted for then, µs
    /// ([`crate::keyed_rewrites`]).
    pub rewrite_stops_us: Vec<u64>,
    /// In keyed worlds, from the last write of each evicted member to its
    /// eviction's commit, µs ([`crate::keyed_evictions`]).
    pub eviction_delays_us: Vec<u64>,
    /// In keyed worlds, from each eviction's commit to the last of the
    /// evicted member's keys starting elsewhere, µs.
    pub eviction_handoffs_us: Vec<u64>,
    /// In keyed worlds, from each abandon of a member to the last stop of
    /// a key it was acting for then, µs ([`crate::keyed_abandons`]).
    pub abandon_stops_us: Vec<u64>,
    /// In keyed worlds, fenced writes the downstream received.
    pub fenced_writes: usize,
    /// Reads per TTL per follower over the steady part of the run, retries
    /// included ([`crate::follower_reads`]); `None` when nobody followed
    /// for a TTL there.
    pub follower_reads_per_ttl: Option<f64>,
    /// In elector worlds, every follower's lag behind every new version of
    /// the lease record it followed, µs ([`crate::version_lag`]).
    pub version_lags_us: Vec<u64>,
}

/// How long each scheduled stop took to be honoured: from the `stop` to the
/// node recording that its campaign returned `Stopped`. A stop still
/// unanswered when the node is restarted or crashed, or the run ends,
/// counts until then.
/// Time every node process ran, from its start to its crash, its
/// campaign's end (a keyed member's leave) or `end_us`, in µs.
pub(super) fn member_us(entries: &[Entry], end_us: u64) -> u64 {
    let mut running: BTreeMap<&str, u64> = BTreeMap::new();
    let mut total = 0;
    for entry in entries {
        match &entry.event {
            Event::Started { .. } => {
                running.insert(entry.node.as_str(), entry.at_us);
            }
            Event::Crashed | Event::ElectorError { .. } | Event::CampaignEnded { .. } => {
                let ends = matches!(&entry.event, Event::ElectorError { message } if message == STOPPED)
                    || !matches!(entry.event, Event::ElectorError { .. });
                if ends && let Some(start) = running.remove(entry.node.as_str()) {
                    total += entry.at_us.min(end_us).saturating_sub(start);
                }
            }
            _ => {}
        }
    }
    total + running.values().map(|start| end_us.saturating_sub(*start)).sum::<u64>()
}

pub(super) fn stop_latencies(entries: &[Entry], end_us: u64) -> Vec<u64> {
    let mut latencies = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let Event::Fault { action } = &entry.event else { continue };
        let Some(Action::Stop { node }) = action.applied() else { continue };
        let answered = entries[index + 1..].iter().find_map(|later| match &later.event {
            Event::ElectorError { message } if later.node == *node && message == STOPPED => Some(later.at_us),
            Event::Crashed if later.node == *node => Some(later.at_us),
            Event::Fault { action } if matches!(action.applied(), Some(Action::Restart { node: restarted }) if restarted == node) => {
                Some(later.at_us)
            }
            _ => None,
        });
        latencies.push(answered.unwrap_or(end_us).saturating_sub(entry.at_us));
    }
    latencies
}

pub(super) fn stats(
    world: &World,
    entries: &[Entry],
    context: &Context,
    acting: &invariants::keyed_acting::Intervals,
    faults: BTreeMap<String, usize>,
    cpu: Duration,
) -> Stats {
    let terms = invariants::terms(entries, context.end_us);
    let mut failover_gaps_us = Vec::new();
    let mut takeovers = 0;
    for pair in terms.windows(2) {
        if pair[0].node != pair[1].node {
            takeovers += 1;
            // A paused leader stopped acting when the pause began, though
            // its term only ends when it wakes; a suspended one likewise,
            // its waking window (which follows the suspend) included.
            let mut ended = pair[0].end_us;
            while let Some((from, _)) = pair[0].paused.iter().find(|(from, until)| *from < ended && *until >= ended) {
                ended = *from;
            }
            failover_gaps_us.push(pair[1].start_us.saturating_sub(ended));
        }
    }
    let leader_us: u64 = terms.iter().map(|term| term.end_us.saturating_sub(term.start_us)).sum();
    let (mut leave_handoffs_us, mut crash_handoffs_us, mut stale_keyed, mut fenced_writes) = (vec![], vec![], 0, 0);
    let (mut join_handoffs_us, mut create_handoffs_us, mut rewrite_stops_us) = (Vec::new(), Vec::new(), Vec::new());
    let (mut eviction_delays_us, mut eviction_handoffs_us, mut abandon_stops_us) = (Vec::new(), Vec::new(), Vec::new());
    if let Some(keyed) = &context.keyed {
        (leave_handoffs_us, crash_handoffs_us) = crate::keyed_handoffs::handoffs(entries, acting);
        join_handoffs_us = crate::keyed_handoffs::joins(entries, acting, keyed);
        create_handoffs_us = crate::keyed_handoffs::creations(entries, acting);
        rewrite_stops_us = crate::keyed_rewrites::rewrite_stops(entries, acting, context.end_us);
        eviction_delays_us = crate::keyed_evictions::delays(entries, keyed);
        eviction_handoffs_us = crate::keyed_evictions::handoffs(entries, acting, keyed);
        abandon_stops_us = crate::keyed_abandons::abandon_stops(entries, acting);
        (stale_keyed, fenced_writes) = invariants::keyed_fencing::refused_writes(entries);
    }
    Stats {
        simulated_secs: world.duration_ms as f64 / 1000.0,
        cpu_secs: cpu.as_secs_f64(),
        s3_requests: entries.iter().filter(|entry| matches!(entry.event, Event::Store(_))).count(),
        s3_reads: entries
            .iter()
            .filter(|entry| matches!(&entry.event, Event::Store(op) if op.op == StoreOpKind::Read))
            .count(),
        s3_deletes: entries
            .iter()
            .filter(|entry| matches!(&entry.event, Event::Store(op) if op.op == StoreOpKind::Delete))
            .count(),
        terms: terms.len(),
        takeovers,
        failover_gaps_us,
        stop_latencies_us: stop_latencies(entries, context.end_us),
        lost_terms: if world.keyed.is_some() {
            crate::keyed_lapses::lost_terms(entries)
        } else {
            entries
                .iter()
                .filter(|entry| {
                    matches!(&entry.event, Event::Lost { reason, .. }
                        if matches!(reason, LossKind::Expired | LossKind::Superseded | LossKind::Deleted | LossKind::Failed))
                })
                .count()
        },
        faults,
        stale_writes_rejected: invariants::monotone_fencing::stale_writes(entries) + stale_keyed,
        stale_writes_accepted: invariants::monotone_fencing::stale_writes_accepted(entries)
            + if world.keyed.is_some() { invariants::keyed_fencing::stale_accepted(entries) } else { 0 },
        liveness_windows: invariants::liveness::windows(entries, context),
        overlap_pairs_unchecked: invariants::belief_overlap::unchecked_pairs(entries, context),
        leader_hours: leader_us as f64 / 3.6e9,
        member_hours: if world.keyed.is_some() { member_us(entries, context.end_us) as f64 / 3.6e9 } else { 0.0 },
        leave_handoffs_us,
        crash_handoffs_us,
        join_handoffs_us,
        create_handoffs_us,
        rewrite_stops_us,
        eviction_delays_us,
        eviction_handoffs_us,
        abandon_stops_us,
        aborted_stops: if world.keyed.is_some() { crate::keyed_aborts::aborted_stops(entries) } else { 0 },
        fenced_writes,
        follower_reads_per_ttl: crate::follower_reads::reads_per_ttl(entries, &terms, context),
        version_lags_us: if world.keyed.is_none() {
            crate::version_lag::lags_us(entries, &terms, context)
        } else {
            Vec::new()
        },
    }
}
