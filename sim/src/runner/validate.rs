//! Checking that a world can run before it runs: names unique and known,
//! numbers sane, every error naming the field at fault.

use super::*;

/// The most fenced writes a keyed world may send in one run: the downstream
/// keeps them all until it lands them after the run.
pub const MAX_FENCED_WRITES: u64 = 10_000_000;

/// Checks that `world` can be run: names are unique and known, numbers sane.
/// The error names the field at fault, so scenario files can point at it.
pub fn validate(world: &World) -> Result<(), SimError> {
    let invalid = |field: String, message: String| Err(SimError::InvalidWorld { field, message });
    if world.nodes.is_empty() {
        return invalid("nodes".into(), "a world needs at least one node".into());
    }
    let mut names = std::collections::BTreeSet::new();
    for (index, node) in world.nodes.iter().enumerate() {
        let field = |name: &str| format!("nodes[{index}].{name}");
        if node.name == S3_HOST || node.name == "world" || node.name.is_empty() || node.name.starts_with('@') {
            let message =
                format!("{:?} is not a usable node name (s3, world and names starting with @ are reserved)", node.name);
            return invalid(field("name"), message);
        }
        if !names.insert(node.name.as_str()) {
            return invalid(field("name"), format!("node {:?} is named twice", node.name));
        }
        if node.clock.drift_ppb.unsigned_abs() >= 100_000_000 {
            return invalid(field("clock.drift_ppb"), "must be within ±100000000 (10 %)".into());
        }
        // Timers fire up to one tick late, and the stop margin is what
        // absorbs that; the elector's builder refuses less.
        if node.elector.stop_margin_ms.is_some_and(|margin| margin < world.tick_ms.max(1)) {
            let message = format!("must be at least the tick, {} ms: timers fire up to one tick late", world.tick_ms);
            return invalid(field("elector.stop_margin_ms"), message);
        }
        // `Elector::run` has no voluntary release: its terms end by a stop
        // or a loss. Work that returned early would be recorded as a
        // release the elector never made.
        if node.workload.api == crate::world::Api::Run && node.workload.release_after_ms.is_some() {
            let message = "the run() API has no voluntary release (a term ends by a stop or a loss); \
                           use api = \"lead\" for work that returns"
                .to_string();
            return invalid(field("workload.release_after_ms"), message);
        }
        if node.workload.api == crate::world::Api::Run && node.workload.rest_after_term_ms.is_some() {
            let message = "the run() API campaigns on its own after every term; \
                           use api = \"lead\" to rest between terms"
                .to_string();
            return invalid(field("workload.rest_after_term_ms"), message);
        }
    }
    let host = |name: &str| name == S3_HOST || name == LEADER || names.contains(name);
    for scheduled in &world.schedule {
        let named = scheduled.action.hosts();
        let node_only = !matches!(
            scheduled.action,
            Action::Partition { .. }
                | Action::PartitionOneway { .. }
                | Action::Repair { .. }
                | Action::Hold { .. }
                | Action::Release { .. }
        );
        if node_only && named.contains(&S3_HOST) {
            let message = format!(
                "the schedule at {} ms: {} applies to nodes, not the store",
                scheduled.at_ms,
                scheduled.action.verb()
            );
            return invalid("schedule".into(), message);
        }
        if let Action::Outage { status, .. } = scheduled.action
            && !fake_s3::http::OUTAGE_STATUSES.contains(&status)
        {
            let message =
                format!("the schedule at {} ms: {}", scheduled.at_ms, fake_s3::http::UnknownOutageStatus(status));
            return invalid("schedule".into(), message);
        }
        if let Action::Abandon { .. } = &scheduled.action
            && world.keyed.as_ref().is_none_or(|keyed| keyed.protocol != crate::world::KeyedProtocol::Membership)
        {
            let message = format!(
                "the schedule at {} ms: abandon drops a keyed member's run future, and only keyed worlds of the membership protocol have those",
                scheduled.at_ms
            );
            return invalid("schedule".into(), message);
        }
        if let Action::DeleteMembers | Action::WriteMembers { .. } | Action::ResetMembers { .. } = &scheduled.action
            && world.keyed.as_ref().is_none_or(|keyed| keyed.protocol != crate::world::KeyedProtocol::Membership)
        {
            let message = format!(
                "the schedule at {} ms: {} acts on the membership object, which only keyed worlds of the membership protocol have",
                scheduled.at_ms,
                scheduled.action.verb()
            );
            return invalid("schedule".into(), message);
        }
        if let Action::WriteMembers { raw, views_back, drop_member, reincarnate_member } = &scheduled.action {
            let given = [raw.is_some(), views_back.is_some(), drop_member.is_some(), reincarnate_member.is_some()];
            if given.iter().filter(|&&is| is).count() != 1 {
                let message = format!(
                    "the schedule at {} ms: write-members takes exactly one of raw, views_back, drop_member and reincarnate_member",
                    scheduled.at_ms
                );
                return invalid("schedule".into(), message);
            }
            let member_ids = || world.nodes.iter().map(|node| node.owner.as_deref().unwrap_or(&node.name));
            if let Some(member) = drop_member.as_ref().or(reincarnate_member.as_ref())
                && !member_ids().any(|id| id == member)
            {
                let message = format!(
                    "the schedule at {} ms: write-members names member {member:?}, which is no member's id",
                    scheduled.at_ms
                );
                return invalid("schedule".into(), message);
            }
        }
        if let Action::ResetMembers { view_floor, wait_ms } = &scheduled.action
            && let Err(error) = MembershipReset::new(*view_floor, Duration::from_millis(*wait_ms))
        {
            let message = format!("the schedule at {} ms: reset-members: {error}", scheduled.at_ms);
            return invalid("schedule".into(), message);
        }
        if let Some(unknown) = named.into_iter().find(|name| !host(name)) {
            let message = format!("the schedule at {} ms names unknown host {unknown:?}", scheduled.at_ms);
            return invalid("schedule".into(), message);
        }
    }
    if world.duration_ms == 0 || world.duration_ms > MAX_DURATION_MS {
        return invalid("duration_ms".into(), format!("must be 1 to {MAX_DURATION_MS} (a week)"));
    }
    if let Some(keyed) = &world.keyed {
        if keyed.fenced_every_ms == 0 || keyed.fenced_latency_ms > MAX_DURATION_MS {
            let message = format!("fenced_every_ms must be at least 1 and fenced_latency_ms at most {MAX_DURATION_MS}");
            return invalid("keyed".into(), message);
        }
        // The downstream keeps every fenced write of a run until it lands
        // them after the run.
        let fenced = keyed.fenced_keys.min(keyed.keys);
        let writes = u64::from(fenced).saturating_mul(world.duration_ms / keyed.fenced_every_ms);
        if writes > MAX_FENCED_WRITES {
            let message = format!(
                "{fenced} fenced keys writing every {} ms for {} ms would send about {writes} writes, more than \
                 {MAX_FENCED_WRITES}: fence fewer keys (fenced_keys) or write less often (fenced_every_ms)",
                keyed.fenced_every_ms, world.duration_ms
            );
            return invalid("keyed.fenced_every_ms".into(), message);
        }
    }
    for (what, rate) in [("loss_rate", world.network.loss_rate), ("loss_repair_rate", world.network.loss_repair_rate)] {
        if !(0.0..=1.0).contains(&rate) {
            return invalid(format!("network.{what}"), format!("must be within 0..=1, not {rate}"));
        }
    }
    world
        .s3
        .faults
        .validate()
        .map_err(|err| SimError::InvalidWorld { field: "s3.faults".into(), message: err.to_string() })
}
