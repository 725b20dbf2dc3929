//! Runs one world with one seed and checks the result.
//!
//! The runner owns the turmoil simulation: it registers the fake S3 and the
//! nodes as hosts, steps the simulation tick by tick, applies the fault
//! schedule between ticks, and finally hands the history to the checkers.
//! Ticks in which nothing can happen are stepped over in one go (see
//! [`advance`]).
//! Everything random is drawn from the one seed, so a seed replays a run
//! exactly.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::{Arc, mpsc};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::clocks::{Agenda, ClockControl, ClockSpec, SimClock};
use crate::downstream::Downstream;
use crate::fake_s3::{self, FakeS3, OpKind, Outcome};
use crate::history::{Entry, Event, History, STOPPED, StoreOp, trace_hash};
use crate::invariants::{self, Context, Violation};
use crate::node::{self, ACCESS_KEY, BUCKET, KEY, MEMBERS_KEY, NodeContext, S3_HOST, S3_PORT, SECRET_KEY};
use crate::world::{Action, LEADER, PolicySpec, ReadsSpec, World};
use hoplock::keyed::{MembershipRecord, MembershipReset};
use hoplock::term_timing;

/// The longest run a world may ask for: a week of simulated time.
pub const MAX_DURATION_MS: u64 = 7 * 24 * 3600 * 1000;

/// The true wall-clock time at the start of every run. Fixed, so traces do
/// not depend on when they were made.
pub const EPOCH_SECS: u64 = 1_893_456_000; // 2030-01-01T00:00:00Z

/// Why a world could not be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// The world refers to something that does not exist or is malformed.
    /// `field` is the path of the field at fault, as a scenario file spells
    /// it (`duration_ms`, `nodes[1].clock.drift_ppb`, `schedule`).
    #[error("invalid world: {field}: {message}")]
    InvalidWorld {
        /// The field at fault.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A host's software failed (the elector could not be built, ...).
    #[error("simulation failed: {0}")]
    Failed(String),
}

/// Figures from one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
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

/// The result of one run.
#[derive(Clone, Debug)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Everything that happened.
    pub entries: Vec<Entry>,
    /// A hash of the trace; equal seeds give equal hashes.
    pub trace_hash: u64,
    /// Broken properties.
    pub violations: Vec<Violation>,
    /// Figures.
    pub stats: Stats,
}

/// Runs `world` with `seed`.
#[allow(clippy::disallowed_methods)] // Measures the run's own CPU time, outside the simulation.
pub fn run(world: &World, seed: u64) -> Result<Report, SimError> {
    validate(world)?;
    let started = std::time::Instant::now();
    let epoch = SystemTime::UNIX_EPOCH + Duration::from_secs(EPOCH_SECS);
    let duration = Duration::from_millis(world.duration_ms);
    let tick = Duration::from_millis(world.tick_ms.max(1));
    let mut sim = turmoil::Builder::new()
        .epoch(epoch)
        .tick_duration(tick)
        // Leave room after the run proper; the runner stops stepping itself.
        .simulation_duration(duration + Duration::from_secs(3600))
        .min_message_latency(Duration::from_millis(world.network.latency_min_ms))
        .max_message_latency(Duration::from_millis(world.network.latency_max_ms.max(world.network.latency_min_ms)))
        .fail_rate(world.network.loss_rate)
        .repair_rate(world.network.loss_repair_rate)
        .rng_seed(seed)
        // The store's accept backlog: a per-key-lease world opens one
        // connection per key and member at once. It is only a limit; below
        // it nothing changes.
        .tcp_capacity(4096)
        .build();

    let history = History::default();
    // Each host's timers, for `advance`: the store's first, then the nodes'.
    let store_agenda = Agenda::default();
    let mut agendas = vec![store_agenda.clone()];
    let (store_events, received) = mpsc::channel::<fake_s3::Event>();
    // The schedule's own writes to the key run inside the store's host, on
    // its clock, at the next tick.
    let (operator, operator_ops) = tokio::sync::mpsc::unbounded_channel::<OperatorOp>();
    let operator_ops = Rc::new(std::cell::RefCell::new(Some(operator_ops)));
    {
        let mode = world.s3.mode;
        let faults = world.s3.faults.clone();
        let control = ClockControl::with_agenda(store_agenda);
        sim.host(S3_HOST, move || {
            let (faults, store_events, control) = (faults.clone(), store_events.clone(), control.clone());
            let operator_ops = operator_ops.borrow_mut().take();
            async move {
                let clock = Arc::new(SimClock::new(epoch, ClockSpec::default(), &control));
                let s3 = FakeS3::builder(clock, seed ^ 0x5335_5335_5335_5335)
                    .mode(mode)
                    .faults(faults)
                    .credentials(ACCESS_KEY, SECRET_KEY)
                    .bucket(BUCKET)
                    .observer(move |event| {
                        let _ = store_events.send(event.clone());
                    })
                    .build()?;
                if let Some(mut ops) = operator_ops {
                    let s3 = s3.clone();
                    tokio::task::spawn_local(async move {
                        while let Some(op) = ops.recv().await {
                            op.apply(&s3);
                        }
                    });
                }
                let listener = turmoil::net::TcpListener::bind(("0.0.0.0", S3_PORT)).await?;
                fake_s3::server::serve(s3, crate::transport::SimListener(listener), std::future::pending()).await;
                Ok(())
            }
        });
    }

    let downstream = Downstream::default();
    let hosts: Vec<String> = std::iter::once(S3_HOST.to_string()).chain(world.node_names()).collect();
    let mut controls = Controls { hosts, operator: Some(operator), ..Controls::default() };
    for (index, spec) in world.nodes.iter().enumerate() {
        let agenda = Agenda::default();
        agendas.push(agenda.clone());
        let pause = ClockControl::with_agenda(agenda);
        let stop = Arc::new(tokio::sync::watch::channel(false).0);
        let abandon = Arc::new(tokio::sync::watch::channel(false).0);
        controls.clocks.insert(spec.name.clone(), pause.clone());
        controls.stops.insert(spec.name.clone(), stop.clone());
        controls.abandons.insert(spec.name.clone(), abandon.clone());
        let suspend_check = suspend_check(world, &spec.name);
        controls.wake_grace.insert(spec.name.clone(), wake_grace(&spec.clock, suspend_check, tick));
        let context = NodeContext {
            spec: spec.clone(),
            index: index as u64,
            seed,
            epoch,
            history: history.clone(),
            downstream: downstream.clone(),
            incarnations: Rc::default(),
            pause,
            stop,
            abandon,
            tick,
            suspend_check,
            keyed: world.keyed.clone(),
        };
        sim.host(spec.name.as_str(), move || node::run(context.clone()));
    }

    let mut schedule = world.schedule.clone();
    schedule.sort_by_key(|scheduled| scheduled.at_ms);
    let mut schedule = schedule.into_iter().peekable();
    // Pauses end by releasing the links they held: (at, node, other hosts).
    let mut resumes: Vec<(Duration, String, Vec<String>)> = Vec::new();
    let mut fault_counts: BTreeMap<String, usize> = BTreeMap::new();
    // Who can contend, as the schedule changes it; the liveness checker's
    // windows.
    let mut reach = Reach::default();
    let names = world.node_names();
    let mut contention = vec![(0, names.clone())];
    let mut membership_touched = false;

    // Hosts have software that has not run yet: the first tick is stepped
    // alone.
    let mut woken = true;
    let mut wakes_seen = sim.unannounced_wakes();
    while sim.elapsed() < duration {
        let now = sim.elapsed();
        // Who can contend changes only when an action applies or a pause
        // ends: looked at then, not on every tick.
        let mut reach_changed = false;
        while let Some(scheduled) = schedule.next_if(|s| Duration::from_millis(s.at_ms) <= now) {
            let action = if scheduled.action.hosts().contains(&LEADER) {
                let entries = history.entries();
                let open = invariants::terms(&entries, u64::MAX).into_iter().filter(|term| term.end_us == u64::MAX);
                match open.max_by_key(|term| term.generation) {
                    Some(term) => scheduled.action.resolve(&term.node),
                    None => {
                        let skipped = format!(
                            "{}{} (nobody leads)",
                            invariants::action_skipped::SKIPPED,
                            scheduled.action.label()
                        );
                        history.record(now, "world", Event::Fault { action: skipped });
                        continue;
                    }
                }
            } else {
                scheduled.action.clone()
            };
            apply(&mut sim, &action, &controls, &reach, &mut resumes, now, &history);
            reach.apply(&action, now);
            reach_changed = true;
            // A membership object deleted or rewritten is a membership
            // change: the members settle again from here.
            membership_touched |=
                matches!(action, Action::DeleteMembers | Action::WriteMembers { .. } | Action::ResetMembers { .. });
            *fault_counts.entry(action.verb()).or_default() += 1;
        }
        resumes.retain(|(at, node, held)| {
            if *at > now {
                return true;
            }
            // turmoil's release makes a link healthy both ways, so a link the
            // schedule cut or held meanwhile is left as the schedule has it.
            for other in held.iter().filter(|other| !reach.cut(node, other)) {
                sim.release(node.as_str(), other.as_str());
            }
            reach_changed = true;
            false
        });
        reach_changed |= reach.outage_ended(now);
        if reach_changed {
            let contenders = reach.contenders(&names, now);
            if std::mem::take(&mut membership_touched) || contention.last().is_none_or(|(_, last)| *last != contenders)
            {
                contention.push((now.as_micros() as u64, contenders));
            }
        }
        // What the runner did just now (a crash, a restart, a stop, an
        // operator's write) wakes tasks no timer speaks for.
        woken |= reach_changed;
        let next_look = [
            schedule.peek().map(|scheduled| Duration::from_millis(scheduled.at_ms)),
            resumes.iter().map(|(at, _, _)| *at).min(),
            reach.outage_until,
            Some(duration),
        ];
        let look_at = next_look.into_iter().flatten().min().unwrap_or(duration);
        advance(&mut sim, &agendas, &history, tick, look_at, std::mem::take(&mut woken), &mut wakes_seen)?;
        for event in received.try_iter() {
            record_store_event(&history, &event, &mut fault_counts);
        }
        // turmoil's random loss repairs a link by making it healthy both
        // ways, which would heal a one-way partition; put those back.
        if world.network.loss_rate > 0.0 {
            for (from, to) in reach.one_way() {
                sim.partition_oneway(from, to);
            }
        }
    }

    // Requests still in flight at the end are finished and recorded, with
    // every node stopped so that nothing new starts: a read that saw a write
    // must find that write in the history, even if the write's reply was
    // still on its way when the run ended.
    for name in world.node_names() {
        sim.crash(name.as_str());
    }
    let network = Duration::from_millis(world.network.latency_max_ms.max(world.network.latency_min_ms));
    let drain_until = duration + 2 * (world.s3.faults.longest_latency() + network) + Duration::from_secs(1);
    woken = true;
    while sim.elapsed() < drain_until {
        advance(&mut sim, &agendas, &history, tick, drain_until, std::mem::take(&mut woken), &mut wakes_seen)?;
        for event in received.try_iter() {
            record_store_event(&history, &event, &mut fault_counts);
        }
    }

    let mut entries = history.entries();
    // Store events are collected after each tick; order everything by time,
    // keeping the recording order between equal times.
    entries.sort_by_key(|entry| entry.at_us);
    let context = Context { contention, ..checker_context(world) };
    let violations = invariants::check_all(&entries, &context);
    let stats = stats(world, &entries, &context, fault_counts, started.elapsed());
    Ok(Report { seed, trace_hash: trace_hash(&entries), entries, violations, stats })
}

/// Steps the simulation: by one tick, or by every tick before `look_at` (when
/// the runner must next look at the world) in one go if nothing can happen
/// in them.
///
/// Nothing can happen in a tick in which no host has a timer due (the hosts'
/// [`Agenda`]s know them all: every simulated timer goes through a
/// `SimClock`), no message is on the network, and no task was woken from
/// outside since the last tick (`woken`: the runner acted; or a connect was
/// answered without a message, see below). Stepping over
/// such ticks one at a time only moves every host's clock forward, which is
/// what one longer step does too. What differs is tokio's own bookkeeping
/// (how often each host's scheduler has ticked), which decides the order of
/// tasks woken at one instant, so traces differ from a tick-by-tick run;
/// the same seed still gives the same trace. A multi-tick step in which a
/// host sent anything or recorded anything means a wake-up the agenda
/// missed, and the run fails loudly rather than quietly delivering a
/// message late.
fn advance(
    sim: &mut turmoil::Sim<'_>,
    agendas: &[Agenda],
    history: &History,
    tick: Duration,
    look_at: Duration,
    woken: bool,
    wakes_seen: &mut u64,
) -> Result<(), SimError> {
    let now = sim.elapsed();
    // A step in which a SYN arrived or a message was dropped may have woken
    // a task on one host from another without a message (turmoil answers a
    // connect through a channel); that task runs in the next step, which is
    // therefore a single tick.
    let silently_woken = std::mem::replace(wakes_seen, sim.unannounced_wakes()) != *wakes_seen;
    let failed = |err: Box<dyn std::error::Error>| SimError::Failed(err.to_string());
    let ticks_until = |at: Duration| at.saturating_sub(now).as_nanos() / tick.as_nanos();
    // After `n` ticks the clock must stay short of the next timer, which
    // then fires in a tick of its own, and must not go past the first tick
    // boundary at or after `look_at`, where stepping tick by tick would
    // have looked.
    let next_due = agendas.iter().filter_map(Agenda::next_due).min();
    let before_timer = next_due.map_or(u128::MAX, |due| ticks_until(due.saturating_sub(Duration::from_nanos(1))));
    let to_look = ticks_until(look_at + tick - Duration::from_nanos(1));
    let ticks = before_timer.min(to_look);
    if woken || silently_woken || ticks < 2 || sim.in_flight() > 0 {
        sim.step().map_err(failed)?;
        return Ok(());
    }
    let (recorded, sent) = (history.len(), sim.messages_sent());
    let span = tick * u32::try_from(ticks).unwrap_or(u32::MAX);
    sim.step_by(span).map_err(failed)?;
    // Anything sent in the span (delivered at once, dropped or still on its
    // way), a connect answered, or anything recorded means a host acted.
    let acted = sim.messages_sent() != sent || sim.unannounced_wakes() != *wakes_seen;
    if acted || sim.in_flight() > 0 || history.len() != recorded {
        return Err(SimError::Failed(format!(
            "something happened while the runner stepped over {span:?} from {now:?} believing nothing could: a \
             simulated timer or wake-up the clock's agenda does not know of"
        )));
    }
    Ok(())
}

/// The name the store's history gives the schedule's own writes.
pub const OPERATOR: &str = "operator";

/// A write to the lease key by someone other than the electors.
#[derive(Debug)]
enum OperatorOp {
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
    fn apply(self, s3: &FakeS3) {
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
fn edit_members(s3: &FakeS3, edit: impl FnOnce(&mut MembershipRecord)) {
    let Some(mut record) =
        s3.object(BUCKET, MEMBERS_KEY).and_then(|object| MembershipRecord::decode(object.body()).ok())
    else {
        return;
    };
    edit(&mut record);
    s3.put_direct(BUCKET, MEMBERS_KEY, record.encode().into(), OPERATOR);
}

impl Controls {
    fn operate(&self, op: OperatorOp) {
        if let Some(operator) = &self.operator {
            let _ = operator.send(op);
        }
    }
}

/// Who can contend for the lease, kept as the runner applies the schedule:
/// a node contends while it runs (not crashed, stopped or paused) and
/// reaches the store both ways.
#[derive(Default)]
struct Reach {
    down: BTreeSet<String>,
    paused_until: BTreeMap<String, Duration>,
    /// Directed links the schedule partitioned: (from, to).
    partitioned: BTreeSet<(String, String)>,
    /// Links the schedule holds, in both directions.
    held: BTreeSet<(String, String)>,
    /// Whether the key holds a record no elector may take over.
    store_unusable: bool,
    /// Until when the store refuses every request.
    outage_until: Option<Duration>,
}

impl Reach {
    fn apply(&mut self, action: &Action, now: Duration) {
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
    fn outage_ended(&mut self, now: Duration) -> bool {
        let ended = self.outage_until.is_some_and(|until| until <= now);
        if ended {
            self.outage_until = None;
        }
        ended
    }

    /// Whether the schedule has partitioned (either way) or held the link
    /// between `a` and `b`.
    fn cut(&self, a: &str, b: &str) -> bool {
        let (ab, ba) = ((a.to_string(), b.to_string()), (b.to_string(), a.to_string()));
        self.partitioned.contains(&ab) || self.partitioned.contains(&ba) || self.held.contains(&ab)
    }

    /// Links partitioned in one direction only: (from, to).
    fn one_way(&self) -> impl Iterator<Item = (&str, &str)> {
        self.partitioned
            .iter()
            .filter(|(from, to)| !self.partitioned.contains(&(to.clone(), from.clone())))
            .map(|(from, to)| (from.as_str(), to.as_str()))
    }

    fn contenders(&self, nodes: &[String], now: Duration) -> Vec<String> {
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
struct Controls {
    /// Every host: the store and the nodes.
    hosts: Vec<String>,
    /// The schedule's own writes to the lease key, for the store's host.
    operator: Option<tokio::sync::mpsc::UnboundedSender<OperatorOp>>,
    clocks: BTreeMap<String, ClockControl>,
    stops: BTreeMap<String, Arc<tokio::sync::watch::Sender<bool>>>,
    abandons: BTreeMap<String, Arc<tokio::sync::watch::Sender<bool>>>,
    /// How long after waking from a suspend each node may still act on a
    /// term that ended while it slept: its suspend check, in true time, and
    /// two ticks of timer lateness.
    wake_grace: BTreeMap<String, Duration>,
}

/// How long after a suspend ends a node whose term ended in its sleep may
/// still act (I9a): one suspend check on its clock, in true time, and two
/// ticks, one for the check's timer and one for the tasks it wakes.
fn wake_grace(clock: &crate::clocks::ClockSpec, suspend_check: Duration, tick: Duration) -> Duration {
    clock.true_duration(suspend_check) + 2 * tick
}

/// How often `node` reads its safety deadlines again: the library's
/// default if the schedule may suspend its host, else once a run (see the
/// clocks module: a clock that never stops makes the slices idle).
fn suspend_check(world: &World, node: &str) -> Duration {
    let suspended = world.schedule.iter().any(|scheduled| match &scheduled.action {
        Action::Suspend { node: target, .. } => target == node || target == crate::world::LEADER,
        _ => false,
    });
    if suspended { hoplock::clock::DEFAULT_SUSPEND_CHECK } else { crate::clocks::quiet_suspend_check() }
}

/// Applies one fault and records it.
fn apply(
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
    history.record(now, "world", Event::Fault { action: action.label() });
}

fn record_store_event(history: &History, event: &fake_s3::Event, faults: &mut BTreeMap<String, usize>) {
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
        (OpKind::Read, _, _) => "read",
        (OpKind::Write, Some(_), _) => "update",
        (OpKind::Write, None, Some(_)) => "create",
        (OpKind::Write, None, None) => "put",
        (OpKind::Delete, _, _) => "delete",
    };
    let applied = event.outcome.applied();
    let is_write = !matches!(event.op, OpKind::Read);
    let record = if is_write && applied { written(event) } else { None };
    let op = StoreOp {
        client: event.client.clone(),
        op: op.into(),
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
fn written(event: &fake_s3::Event) -> Option<hoplock::lease::LeaseRecord> {
    hoplock::lease::LeaseRecord::decode(event.body.as_ref()?).ok()
}

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

/// A scenario's milliseconds as a duration, to read the library's defaults.
fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// A duration in microseconds, as the checkers' bounds are computed.
fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

fn checker_context(world: &World) -> Context {
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
/// a request and its connection take about six messages).
fn failure_probability(world: &World) -> f64 {
    let rate = |op: &fake_s3::OpFaults| {
        op.error_500_rate + op.slow_down_503_rate + op.throttle_429_rate + op.ambiguous_success_rate
    };
    let store = rate(&world.s3.faults.read).max(rate(&world.s3.faults.write));
    let (loss, repair) = (world.network.loss_rate, world.network.loss_repair_rate);
    let down = if loss > 0.0 { loss / (loss + repair.max(1e-9)) } else { 0.0 };
    let network = 1.0 - (1.0 - down).powi(6);
    (store + network).min(1.0)
}

/// How long each scheduled stop took to be honoured: from the `stop` to the
/// node recording that its campaign returned `Stopped`. A stop still
/// unanswered when the node is restarted or crashed, or the run ends,
/// counts until then.
/// Time every node process ran, from its start to its crash, its
/// campaign's end (a keyed member's leave) or `end_us`, in µs.
fn member_us(entries: &[Entry], end_us: u64) -> u64 {
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

fn stop_latencies(entries: &[Entry], end_us: u64) -> Vec<u64> {
    let mut latencies = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let Event::Fault { action } = &entry.event else { continue };
        let Some(node) = action.strip_prefix(invariants::stop_honoured::STOP) else { continue };
        let answered = entries[index + 1..].iter().find_map(|later| match &later.event {
            Event::ElectorError { message } if later.node == node && message == STOPPED => Some(later.at_us),
            Event::Crashed if later.node == node => Some(later.at_us),
            Event::Fault { action } if action.strip_prefix(invariants::stop_honoured::RESTART) == Some(node) => {
                Some(later.at_us)
            }
            _ => None,
        });
        latencies.push(answered.unwrap_or(end_us).saturating_sub(entry.at_us));
    }
    latencies
}

fn stats(world: &World, entries: &[Entry], context: &Context, faults: BTreeMap<String, usize>, cpu: Duration) -> Stats {
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
        let acting = invariants::keyed_acting::intervals(entries);
        (leave_handoffs_us, crash_handoffs_us) = crate::keyed_handoffs::handoffs(entries, &acting);
        join_handoffs_us = crate::keyed_handoffs::joins(entries, &acting, keyed);
        create_handoffs_us = crate::keyed_handoffs::creations(entries, &acting);
        rewrite_stops_us = crate::keyed_rewrites::rewrite_stops(entries, &acting, context.end_us);
        eviction_delays_us = crate::keyed_evictions::delays(entries, keyed);
        eviction_handoffs_us = crate::keyed_evictions::handoffs(entries, &acting, keyed);
        abandon_stops_us = crate::keyed_abandons::abandon_stops(entries, &acting);
        (stale_keyed, fenced_writes) = invariants::keyed_fencing::refused_writes(entries);
    }
    Stats {
        simulated_secs: world.duration_ms as f64 / 1000.0,
        cpu_secs: cpu.as_secs_f64(),
        s3_requests: entries.iter().filter(|entry| matches!(entry.event, Event::Store(_))).count(),
        s3_reads: entries.iter().filter(|entry| matches!(&entry.event, Event::Store(op) if op.op == "read")).count(),
        s3_deletes: entries
            .iter()
            .filter(|entry| matches!(&entry.event, Event::Store(op) if op.op == "delete"))
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
                        if matches!(reason.as_str(), "expired" | "superseded" | "deleted" | "failed"))
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
