//! Applying the scenario's schedule to a running world: the operator's writes
//! to the store, partitions and held links, pauses, suspends, crashes and
//! restarts, and recording what the fake S3 did in the history.

use super::*;
use crate::history::StoreOpKind;

/// A write to the lease key by someone other than the electors.
#[derive(Debug)]
pub(super) enum OperatorOp {
    Write(Vec<u8>),
    Delete,
    /// `hoplock lease reset --generation-floor`: a released record at the
    /// floor or the stored generation, whichever is higher; refused, as the
    /// tool refuses, when that generation has no successor.
    Reset(u64),
    /// Every request refused for this long, with this status.
    Outage(Duration, u16),
    /// The membership object deleted.
    DeleteMembers,
    /// These bytes stored as the membership object.
    WriteMembers(Vec<u8>),
    /// The membership object stored again with its view this much lower.
    StaleMembers(u64),
    /// The membership object stored again without this member's entry, at
    /// the same view.
    DropMember(String),
    /// The membership object stored again with this member's entry under
    /// another incarnation, at the same view.
    ReincarnateMember(String),
    /// `hoplock members reset --force`: the operator's own code plans the
    /// object, so the simulator judges what the tool writes.
    ResetMembers(MembershipReset),
}

impl OperatorOp {
    pub(super) fn apply(self, s3: &FakeS3) {
        match self {
            OperatorOp::Write(bytes) => {
                s3.put_direct(BUCKET, KEY, bytes.into(), OPERATOR);
            }
            OperatorOp::Delete => s3.delete_direct(BUCKET, KEY, OPERATOR),
            OperatorOp::Reset(floor) => {
                let stored = s3
                    .object(BUCKET, KEY)
                    .and_then(|object| hoplock::lease::LeaseRecord::decode(object.body()).ok())
                    .map_or(0, |record| record.generation.get());
                let generation = hoplock::Generation(floor.max(stored));
                if generation.next().is_none() {
                    return;
                }
                // The operator's own record, with a nonce from the world
                // rather than the OS, so a seed replays the same bytes.
                let record = hoplock::lease::LeaseRecord::reset(generation, format!("reset-{generation}"));
                s3.put_direct(BUCKET, KEY, record.encode().into(), OPERATOR);
            }
            // The status was checked when the scenario was validated.
            OperatorOp::Outage(duration, status) => {
                let _ = s3.outage(duration, status);
            }
            OperatorOp::DeleteMembers => s3.delete_direct(BUCKET, MEMBERS_KEY, OPERATOR),
            OperatorOp::WriteMembers(bytes) => {
                s3.put_direct(BUCKET, MEMBERS_KEY, bytes.into(), OPERATOR);
            }
            OperatorOp::StaleMembers(back) => edit_members(s3, |record| {
                // Kept a valid object: a view below 1, or a last join
                // above the view, would be refused as corrupt instead.
                record.view = record.view.saturating_sub(back).max(1);
                record.last_join = record.last_join.min(record.view);
                for entry in &mut record.entries {
                    entry.adopted = entry.adopted.min(record.view);
                }
                if record.change.kind == hoplock::keyed::record::ChangeKind::Join {
                    record.last_join = record.view;
                }
            }),
            // Nothing else changes, the view number included: the members
            // must see that the view they know was rewritten.
            OperatorOp::DropMember(member) => {
                edit_members(s3, |record| record.entries.retain(|entry| entry.id != member))
            }
            // The same member id under an incarnation no process has: the
            // view number, the change and the member ids stay.
            OperatorOp::ReincarnateMember(member) => edit_members(s3, |record| {
                for entry in record.entries.iter_mut().filter(|entry| entry.id == member) {
                    entry.incarnation = format!("{}-copied", entry.incarnation);
                }
            }),
            OperatorOp::ResetMembers(reset) => {
                let stored = s3.object(BUCKET, MEMBERS_KEY).map(|object| object.body().to_vec());
                // The tool's own nonce and incarnation are random; these are
                // fixed so a run replays exactly. The view in the body keeps
                // every reset's ETag distinct.
                let plan = reset.plan(stored.as_deref(), "reset-nonce".into(), "reset".into(), true);
                // A reset the tool refuses (no view after the stored one)
                // writes nothing, as the tool writes nothing.
                if let Ok(plan) = plan {
                    s3.put_direct(BUCKET, MEMBERS_KEY, plan.record.encode().into(), OPERATOR);
                }
            }
        }
    }
}

/// An edit of the membership object as it stands, written back over it
/// unconditionally; nothing is written when the stored object is missing
/// or is not a membership object.
pub(super) fn edit_members(s3: &FakeS3, edit: impl FnOnce(&mut MembershipRecord)) {
    let Some(mut record) =
        s3.object(BUCKET, MEMBERS_KEY).and_then(|object| MembershipRecord::decode(object.body()).ok())
    else {
        return;
    };
    edit(&mut record);
    s3.put_direct(BUCKET, MEMBERS_KEY, record.encode().into(), OPERATOR);
}

impl Controls {
    pub(super) fn operate(&self, op: OperatorOp) {
        if let Some(operator) = &self.operator {
            let _ = operator.send(op);
        }
    }
}

/// Who can contend for the lease, kept as the runner applies the schedule:
/// a node contends while it runs (not crashed, stopped or paused) and
/// reaches the store both ways.
#[derive(Default)]
pub struct Reach {
    pub(super) down: BTreeSet<String>,
    pub(super) paused_until: BTreeMap<String, Duration>,
    /// Directed links the schedule partitioned: (from, to).
    pub(super) partitioned: BTreeSet<(String, String)>,
    /// Links the schedule holds, in both directions.
    pub(super) held: BTreeSet<(String, String)>,
    /// Whether the key holds a record no elector may take over.
    pub(super) store_unusable: bool,
    /// Until when the store refuses every request.
    pub(super) outage_until: Option<Duration>,
}

impl Reach {
    pub fn apply(&mut self, action: &Action, now: Duration) {
        let pair = |a: &str, b: &str| [(a.to_string(), b.to_string()), (b.to_string(), a.to_string())];
        match action {
            Action::Partition { a, b } => self.partitioned.extend(pair(a, b)),
            Action::Hold { a, b } => self.held.extend(pair(a, b)),
            Action::PartitionOneway { from, to } => {
                self.partitioned.insert((from.clone(), to.clone()));
            }
            Action::Repair { a, b } => {
                for link in pair(a, b) {
                    self.partitioned.remove(&link);
                }
            }
            Action::Release { a, b } => {
                for link in pair(a, b) {
                    self.held.remove(&link);
                }
            }
            Action::Crash { node } | Action::Stop { node } | Action::Abandon { node } => {
                self.down.insert(node.clone());
            }
            Action::Restart { node } => {
                self.down.remove(node);
            }
            Action::Pause { node, for_ms } | Action::Suspend { node, for_ms } => {
                let until = now + Duration::from_millis(*for_ms);
                let paused = self.paused_until.entry(node.clone()).or_default();
                *paused = (*paused).max(until);
            }
            // The elector times everything on its monotonic clock.
            Action::StepClock { .. } => {}
            // Nobody can lead on a record no elector may take over, until
            // the key is reset or deleted.
            Action::WriteRecord { record } => self.store_unusable = record.unusable(),
            Action::DeleteKey | Action::ResetKey { .. } => self.store_unusable = false,
            // Keyed worlds judge the membership object's faults by their
            // own checkers; who may lead the election key is unchanged.
            Action::DeleteMembers | Action::WriteMembers { .. } | Action::ResetMembers { .. } => {}
            Action::Outage { for_ms, .. } => self.outage_until = Some(now + Duration::from_millis(*for_ms)),
        }
    }

    /// Whether an outage has just ended: who can contend changes then.
    pub fn outage_ended(&mut self, now: Duration) -> bool {
        let ended = self.outage_until.is_some_and(|until| until <= now);
        if ended {
            self.outage_until = None;
        }
        ended
    }

    /// Whether the schedule has partitioned (either way) or held the link
    /// between `a` and `b`.
    pub(super) fn cut(&self, a: &str, b: &str) -> bool {
        let (ab, ba) = ((a.to_string(), b.to_string()), (b.to_string(), a.to_string()));
        self.partitioned.contains(&ab) || self.partitioned.contains(&ba) || self.held.contains(&ab)
    }

    /// Links partitioned in one direction only: (from, to).
    pub(super) fn one_way(&self) -> impl Iterator<Item = (&str, &str)> {
        self.partitioned
            .iter()
            .filter(|(from, to)| !self.partitioned.contains(&(to.clone(), from.clone())))
            .map(|(from, to)| (from.as_str(), to.as_str()))
    }

    pub fn contenders(&self, nodes: &[String], now: Duration) -> Vec<String> {
        if self.store_unusable || self.outage_until.is_some_and(|until| now < until) {
            return Vec::new();
        }
        nodes
            .iter()
            .filter(|node| !self.down.contains(*node))
            .filter(|node| self.paused_until.get(*node).is_none_or(|until| *until <= now))
            .filter(|node| !self.cut(node, S3_HOST))
            .cloned()
            .collect()
    }
}

/// The runner's handles on each node, by name.
#[derive(Default)]
pub(super) struct Controls {
    /// Every host: the store and the nodes.
    pub(super) hosts: Vec<String>,
    /// The schedule's own writes to the lease key, for the store's host.
    pub(super) operator: Option<tokio::sync::mpsc::UnboundedSender<OperatorOp>>,
    pub(super) clocks: BTreeMap<String, ClockControl>,
    pub(super) stops: BTreeMap<String, Arc<tokio::sync::watch::Sender<bool>>>,
    pub(super) abandons: BTreeMap<String, Arc<tokio::sync::watch::Sender<bool>>>,
    /// How long after waking from a suspend each node may still act on a
    /// term that ended while it slept: its suspend check, in true time, and
    /// two ticks of timer lateness.
    pub(super) wake_grace: BTreeMap<String, Duration>,
}

/// How long after a suspend ends a node whose term ended in its sleep may
/// still act (I9a): one suspend check on its clock, in true time, and two
/// ticks, one for the check's timer and one for the tasks it wakes.
pub(super) fn wake_grace(clock: &crate::clocks::ClockSpec, suspend_check: Duration, tick: Duration) -> Duration {
    clock.true_duration(suspend_check) + 2 * tick
}

/// How often `node` reads its safety deadlines again: the library's
/// default if the schedule may suspend its host, else once a run (see the
/// clocks module: a clock that never stops makes the slices idle).
pub(super) fn suspend_check(world: &World, node: &str) -> Duration {
    let suspended = world.schedule.iter().any(|scheduled| match &scheduled.action {
        Action::Suspend { node: target, .. } => target == node || target == crate::world::LEADER,
        _ => false,
    });
    if suspended { hoplock::clock::DEFAULT_SUSPEND_CHECK } else { crate::clocks::quiet_suspend_check() }
}

/// Applies one fault and records it.
pub(super) fn apply(
    sim: &mut turmoil::Sim<'_>,
    action: &Action,
    controls: &Controls,
    reach: &Reach,
    resumes: &mut Vec<(Duration, String, Vec<String>)>,
    now: Duration,
    history: &History,
) {
    match action {
        Action::Partition { a, b } => sim.partition(a.as_str(), b.as_str()),
        Action::PartitionOneway { from, to } => sim.partition_oneway(from.as_str(), to.as_str()),
        Action::Repair { a, b } => sim.repair(a.as_str(), b.as_str()),
        Action::Hold { a, b } => sim.hold(a.as_str(), b.as_str()),
        Action::Release { a, b } => sim.release(a.as_str(), b.as_str()),
        Action::Crash { node } => {
            sim.crash(node.as_str());
            history.record(now, node, Event::Crashed);
            return;
        }
        Action::Restart { node } => {
            if let Some(stop) = controls.stops.get(node) {
                stop.send_replace(false);
            }
            if let Some(abandon) = controls.abandons.get(node) {
                abandon.send_replace(false);
            }
            // Restarting a running node kills its process first; the
            // history must show that its terms ended there.
            history.record(now, node, Event::Crashed);
            sim.bounce(node.as_str());
        }
        Action::Pause { node, for_ms } | Action::Suspend { node, for_ms } => {
            let until = now + Duration::from_millis(*for_ms);
            let suspend = matches!(action, Action::Suspend { .. });
            if let Some(clock) = controls.clocks.get(node) {
                if suspend {
                    clock.suspend(now, until);
                } else {
                    clock.pause_until(until);
                }
            }
            // No messages in or out while the process is stopped. A link
            // the schedule has cut stays cut (holding it would turn dropped
            // messages into delayed ones, and releasing it would heal it).
            let held: Vec<String> =
                controls.hosts.iter().filter(|other| *other != node && !reach.cut(node, other)).cloned().collect();
            for other in &held {
                sim.hold(node.as_str(), other.as_str());
            }
            resumes.push((until, node.clone(), held));
            let until_us = until.as_micros() as u64;
            let event = match controls.wake_grace.get(node) {
                Some(grace) if suspend => {
                    Event::Suspended { until_us, stops_by_us: (until + *grace).as_micros() as u64 }
                }
                _ => Event::Paused { until_us },
            };
            history.record(now, node, event);
            return;
        }
        Action::Stop { node } => {
            if let Some(stop) = controls.stops.get(node) {
                stop.send_replace(true);
            }
        }
        Action::Abandon { node } => {
            if let Some(abandon) = controls.abandons.get(node) {
                abandon.send_replace(true);
            }
        }
        Action::StepClock { node, by_ms } => {
            if let Some(clock) = controls.clocks.get(node) {
                clock.step_wall(*by_ms);
            }
        }
        Action::WriteRecord { record } => controls.operate(OperatorOp::Write(record.bytes())),
        Action::DeleteKey => controls.operate(OperatorOp::Delete),
        Action::ResetKey { generation_floor } => controls.operate(OperatorOp::Reset(*generation_floor)),
        Action::DeleteMembers => controls.operate(OperatorOp::DeleteMembers),
        Action::WriteMembers { raw: Some(raw), .. } => {
            controls.operate(OperatorOp::WriteMembers(raw.as_bytes().to_vec()))
        }
        Action::WriteMembers { drop_member: Some(member), .. } => {
            controls.operate(OperatorOp::DropMember(member.clone()))
        }
        Action::WriteMembers { reincarnate_member: Some(member), .. } => {
            controls.operate(OperatorOp::ReincarnateMember(member.clone()))
        }
        Action::WriteMembers { views_back, .. } => controls.operate(OperatorOp::StaleMembers(views_back.unwrap_or(0))),
        // The settings were checked when the scenario was validated.
        Action::ResetMembers { view_floor, wait_ms } => {
            if let Ok(reset) = MembershipReset::new(*view_floor, Duration::from_millis(*wait_ms)) {
                controls.operate(OperatorOp::ResetMembers(reset));
            }
        }
        Action::Outage { for_ms, status } => {
            controls.operate(OperatorOp::Outage(Duration::from_millis(*for_ms), *status));
        }
    }
    history.record(now, "world", Event::Fault { action: Fault::Applied(action.clone()) });
}

pub(super) fn record_store_event(history: &History, event: &fake_s3::Event, faults: &mut BTreeMap<String, usize>) {
    let recorded = event.key == KEY || event.key == node::MEMBERS_KEY || event.key.starts_with(node::LEASES_PREFIX);
    if event.bucket != BUCKET || !recorded {
        return;
    }
    let micros = |instant: hoplock::clock::Instant| instant.as_nanos() / 1000;
    let (status, answered) = match &event.outcome {
        Outcome::Applied => (Some(200), true),
        Outcome::DroppedAfterApply => (None, false),
        Outcome::AppliedThenFailed { status } => (Some(*status), true),
        Outcome::Refused { status, reply_dropped, .. } => (Some(*status), !reply_dropped),
    };
    match &event.outcome {
        Outcome::DroppedAfterApply => *faults.entry("ambiguous-success".into()).or_default() += 1,
        Outcome::AppliedThenFailed { .. } => *faults.entry("applied-then-500".into()).or_default() += 1,
        Outcome::Refused { status: 500, .. } => *faults.entry("error-500".into()).or_default() += 1,
        Outcome::Refused { status: 503, .. } => *faults.entry("slow-down-503".into()).or_default() += 1,
        Outcome::Refused { status: 409, .. } => *faults.entry("conflict-409".into()).or_default() += 1,
        _ => {}
    }
    let op = match (event.op, &event.if_match, &event.if_none_match) {
        (OpKind::Read, _, _) => StoreOpKind::Read,
        (OpKind::Write, Some(_), _) => StoreOpKind::Update,
        (OpKind::Write, None, Some(_)) => StoreOpKind::Create,
        (OpKind::Write, None, None) => StoreOpKind::Put,
        (OpKind::Delete, _, _) => StoreOpKind::Delete,
    };
    let applied = event.outcome.applied();
    let is_write = !matches!(event.op, OpKind::Read);
    let record = if is_write && applied { written(event) } else { None };
    let op = StoreOp {
        client: event.client.clone(),
        op,
        expected: event.if_match.clone(),
        written: if is_write && applied { event.etag.clone() } else { None },
        read: if is_write { None } else { event.etag.clone() },
        status: if answered { status } else { None },
        applied,
        generation: record.as_ref().map(|record| record.generation.get()),
        released: record.is_some_and(|record| record.released),
        invoked_us: micros(event.started),
        ended_us: micros(event.ended),
        reply_dropped: !answered,
    };
    let at = Duration::from_micros(micros(event.applied_at.unwrap_or(event.ended)));
    history.record(at, S3_HOST, Event::Store(op));
    if event.key == node::MEMBERS_KEY
        && is_write
        && applied
        && let Some(record) = event.body.as_ref().and_then(|body| MembershipRecord::decode(body).ok())
    {
        let members = record.entries.iter().map(|entry| entry.id.clone()).collect();
        let change = format!("{:?}", record.change.kind).to_lowercase();
        history.record(at, S3_HOST, Event::View { view: record.view, members, change, entry: record.change.id });
    }
}

/// The record a write stored, if the body is a record.
pub(super) fn written(event: &fake_s3::Event) -> Option<hoplock::lease::LeaseRecord> {
    hoplock::lease::LeaseRecord::decode(event.body.as_ref()?).ok()
}
