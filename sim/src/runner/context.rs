//! What the checkers are told about a world besides its history: each node's
//! settings, and the bounds (handover, settling, suspend) the library's
//! defaults and the world's faults imply.

use super::*;

/// A scenario's milliseconds as a duration, to read the library's defaults.
pub(super) fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// A duration in microseconds, as the checkers' bounds are computed.
pub(super) fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

pub(super) fn checker_context(world: &World) -> Context {
    let attempts = invariants::liveness::attempts(failure_probability(world));
    let mut handover_bound_us = 0;
    let mut facts = Vec::new();
    // Followers of a holder that advertises its renew interval read about
    // once per that interval; the longest any holder may advertise bounds
    // the gap between their reads.
    let renew_us = |spec: &crate::world::ElectorSpec| {
        spec.renew_ms.map_or(micros(term_timing::default_renew_interval(millis(spec.ttl_ms))), |ms| ms as f64 * 1000.0)
    };
    let advertised_us = world
        .nodes
        .iter()
        .filter(|node| node.elector.policy == PolicySpec::Ours)
        .map(|node| renew_us(&node.elector))
        .fold(0.0, f64::max);
    for node in &world.nodes {
        let spec = &node.elector;
        let poll = spec
            .poll_ms
            .map_or(micros(term_timing::default_poll_interval(millis(spec.ttl_ms))), |ms| ms as f64 * 1000.0);
        // The longest a follower goes between reads while a holder is
        // renewing: a poll, or under the default schedule the longest
        // advertised renew interval (never less than a poll).
        let read_gap = match spec.reads {
            ReadsSpec::Poll => poll,
            ReadsSpec::FollowRenewals => poll.max(advertised_us),
        };
        let timeout = spec
            .request_timeout_ms
            .map_or(micros(term_timing::default_request_timeout(millis(spec.ttl_ms))), |ms| ms as f64 * 1000.0);
        let latency = 4.0 * (world.network.latency_max_ms + world.tick_ms) as f64 * 1000.0;
        // After a release: one read gap, a round trip, and a read and a
        // write that may each take up to the timeout for every attempt the
        // store's failure rate calls for beyond the first.
        let retries = f64::from(attempts.saturating_sub(1)) * (read_gap + 3.0 * timeout);
        handover_bound_us = handover_bound_us.max((read_gap + latency + timeout + retries).min(u64::MAX as f64) as u64);
        facts.push(invariants::NodeFacts {
            name: node.name.clone(),
            lock_delay_us: spec.lock_delay_ms * 1000,
            rate: 1.0 + node.clock.drift_ppb as f64 / 1e9,
            drift_bound: spec.drift_bound,
            ttl_us: spec.ttl_ms * 1000,
            stop_margin_us: spec
                .stop_margin_ms
                .map_or(term_timing::default_stop_margin(millis(spec.ttl_ms)).as_micros() as u64, |ms| ms * 1000),
            // A read, a write, and the read-back that settles a write whose
            // reply was lost (I7), each up to the request timeout.
            attempt_us: (read_gap + 3.0 * timeout) as u64,
        });
    }
    // The elector's default assumed TTL for a record that states none.
    let assumed_us = world
        .nodes
        .iter()
        .map(|node| term_timing::default_assumed_ttl(millis(node.elector.ttl_ms)).as_micros() as u64)
        .max()
        .unwrap_or(0);
    let foreign_ttl_us = world
        .schedule
        .iter()
        .filter_map(|scheduled| match &scheduled.action {
            Action::WriteRecord { record } if !record.unusable() => {
                Some(record.ttl_ms.map_or(assumed_us, |ms| ms.saturating_mul(1000)))
            }
            _ => None,
        })
        .max()
        .unwrap_or(0);
    // A renewal sent just before its holder stopped commits when the store
    // gets to it: at most the store's longest latency and a one-way trip
    // later, whatever the sender's own timeout.
    let in_flight_us = world
        .s3
        .faults
        .longest_latency()
        .saturating_add(Duration::from_millis(world.network.latency_max_ms + world.tick_ms))
        .as_micros() as u64;
    let keyed = world.keyed.as_ref().map(|keyed| {
        // P: how often members read the object; R: how often they renew.
        let (mut read_us, mut ttl_us, mut lock_delay_us, mut rho) = (0u64, 0u64, 0u64, 0f64);
        let mut attempt_us = 0u64;
        for node in &world.nodes {
            let spec = &node.elector;
            let renew_ms =
                spec.renew_ms.unwrap_or(term_timing::default_renew_interval(millis(spec.ttl_ms)).as_millis() as u64);
            read_us = read_us.max(keyed.read_interval_ms.unwrap_or(renew_ms) * 1000);
            ttl_us = ttl_us.max(spec.ttl_ms * 1000);
            lock_delay_us = lock_delay_us.max(spec.lock_delay_ms * 1000);
            rho = rho.max(spec.drift_bound);
            // One try at a write the store failed: the retry gap, a read, the
            // write, and the read-back of an unknown outcome.
            let timeout_ms = spec
                .request_timeout_ms
                .unwrap_or(term_timing::default_request_timeout(millis(spec.ttl_ms)).as_millis() as u64);
            attempt_us = attempt_us.max((renew_ms / 8 + 3 * timeout_ms) * 1000);
        }
        let rtt_us = 2 * (world.network.latency_max_ms + world.tick_ms) * 1000 + in_flight_us;
        // The crash bound, TTL·(1+ρ) + 2P + lock-delay + 3 RTT, plus one
        // more P and five round trips for a restarted member, which joins
        // only once its predecessor's entry is gone and acts once the
        // others have adopted its join.
        // As the elector's liveness bound: a store that fails requests at
        // rate p may need k tries of each of those steps (k - 1 more).
        let retries_us = attempt_us.saturating_mul(u64::from(attempts.saturating_sub(1)));
        let settle_bound_us =
            (ttl_us as f64 * (1.0 + rho)) as u64 + 3 * read_us + lock_delay_us + 8 * rtt_us + retries_us;
        let ids = world.nodes.iter().filter_map(|n| n.owner.clone().map(|id| (n.name.clone(), id))).collect();
        let leases_per_key = keyed.protocol == crate::world::KeyedProtocol::LeasePerKey;
        invariants::KeyedFacts { keys: keyed.keys, ids, settle_bound_us, leases_per_key }
    });
    Context {
        keyed,
        nodes: world.node_names(),
        handover_bound_us,
        in_flight_us,
        foreign_ttl_us,
        contention: vec![(0, world.node_names())],
        attempts,
        end_us: world.duration_ms.saturating_mul(1000),
        facts,
        tick_us: world.tick_ms * 1000,
        reads_current: world.s3.mode != crate::fake_s3::ProviderMode::StaleReads,
    }
}

/// The chance that one request fails, for the liveness bound: the larger of
/// the rates injected for reads and for writes, plus the chance that random
/// message loss catches one of a request's messages (a link drops from when
/// it fails until it is repaired, about loss / (loss + repair) of the time;
/// a request and its reply are one message each).
pub(super) fn failure_probability(world: &World) -> f64 {
    let rate = |op: &fake_s3::OpFaults| {
        op.error_500_rate + op.slow_down_503_rate + op.throttle_429_rate + op.ambiguous_success_rate
    };
    let store = rate(&world.s3.faults.read).max(rate(&world.s3.faults.write));
    let (loss, repair) = (world.network.loss_rate, world.network.loss_repair_rate);
    let down = if loss > 0.0 { loss / (loss + repair.max(1e-9)) } else { 0.0 };
    let network = 1.0 - (1.0 - down).powi(2);
    (store + network).min(1.0)
}
