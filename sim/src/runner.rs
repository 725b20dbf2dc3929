//! Runs one world with one seed and checks the result.
//!
//! The runner owns the turmoil simulation: it registers the fake S3 and the
//! nodes as hosts, steps the simulation tick by tick, applies the fault
//! schedule between ticks, and finally hands the history to the checkers.
//! Ticks in which nothing can happen are stepped over in one go, and in the
//! other ticks a host with nothing to do sits the tick out (see
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
use crate::history::{Entry, Event, Fault, History, STOPPED, StoreOp, trace_hash};
use crate::invariants::{self, Context, Violation};
use crate::node::{self, ACCESS_KEY, BUCKET, KEY, MEMBERS_KEY, NodeContext, S3_HOST, S3_PORT, SECRET_KEY};
use crate::transport::Exchange;
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
        // How many requests may wait for the store to take them: a
        // per-key-lease world sends one per key and member at once. It is
        // only a limit (the requests past it would be lost); below it
        // nothing changes.
        .udp_capacity(1 << 16)
        .build();

    let history = History::default();
    // Where requests and replies wait while their datagrams travel.
    let exchange = Exchange::default();
    // Each host's timers, for `advance`, by host name.
    let store_agenda = Agenda::default();
    let mut agendas = BTreeMap::from([(S3_HOST.to_string(), store_agenda.clone())]);
    let (store_events, received) = mpsc::channel::<fake_s3::Event>();
    // The schedule's own writes to the key run inside the store's host, on
    // its clock, at the next tick.
    let (operator, operator_ops) = tokio::sync::mpsc::unbounded_channel::<OperatorOp>();
    let operator_ops = Rc::new(std::cell::RefCell::new(Some(operator_ops)));
    {
        let mode = world.s3.mode;
        let faults = world.s3.faults.clone();
        let control = ClockControl::with_agenda(store_agenda);
        let exchange = exchange.clone();
        sim.host(S3_HOST, move || {
            let (faults, store_events, control) = (faults.clone(), store_events.clone(), control.clone());
            let exchange = exchange.clone();
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
                crate::transport::serve(s3, S3_PORT, exchange).await?;
                Ok(())
            }
        });
    }

    let downstream = Downstream::default();
    let hosts: Vec<String> = std::iter::once(S3_HOST.to_string()).chain(world.node_names()).collect();
    let mut controls = Controls { hosts, operator: Some(operator), ..Controls::default() };
    for (index, spec) in world.nodes.iter().enumerate() {
        let agenda = Agenda::default();
        agendas.insert(spec.name.clone(), agenda.clone());
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
            exchange: exchange.clone(),
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
    let mut seen = Unannounced::read(&sim);
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
                        let skipped = Fault::Skipped(scheduled.action.clone());
                        history.record(now, "world", Event::Fault { action: skipped });
                        continue;
                    }
                }
            } else {
                scheduled.action.clone()
            };
            catch_up(&mut sim, &agendas, &history)?;
            apply(&mut sim, &action, &controls, &reach, &mut resumes, now, &history);
            reach.apply(&action, now);
            reach_changed = true;
            // A membership object deleted or rewritten is a membership
            // change: the members settle again from here.
            membership_touched |=
                matches!(action, Action::DeleteMembers | Action::WriteMembers { .. } | Action::ResetMembers { .. });
            *fault_counts.entry(action.verb()).or_default() += 1;
        }
        if resumes.iter().any(|(at, _, _)| *at <= now) {
            catch_up(&mut sim, &agendas, &history)?;
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
        advance(&mut sim, &agendas, &history, tick, look_at, std::mem::take(&mut woken), &mut seen)?;
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
    catch_up(&mut sim, &agendas, &history)?;
    let ended = sim.elapsed();
    for name in world.node_names() {
        sim.crash(name.as_str());
    }
    let network = Duration::from_millis(world.network.latency_max_ms.max(world.network.latency_min_ms));
    let drain_until = duration + 2 * (world.s3.faults.longest_latency() + network) + Duration::from_secs(1);
    woken = true;
    while sim.elapsed() < drain_until {
        advance(&mut sim, &agendas, &history, tick, drain_until, std::mem::take(&mut woken), &mut seen)?;
        for event in received.try_iter() {
            record_store_event(&history, &event, &mut fault_counts);
        }
    }

    let mut entries = history.entries();
    // The keyed downstream's writes land now, each at its own time; see
    // `Downstream` for why that is the same as landing them as they come.
    let landed = downstream.land_keys(&entries, ended);
    entries.extend(landed);
    // Store events are collected after each tick; order everything by time,
    // keeping the recording order between equal times.
    entries.sort_by_key(|entry| entry.at_us);
    let context = Context { contention, ..checker_context(world) };
    let acting = invariants::acting_intervals(&entries, &context);
    let violations = invariants::check_all(&entries, &context, &acting);
    let stats = stats(world, &entries, &context, &acting, fault_counts, started.elapsed());
    Ok(Report { seed, trace_hash: trace_hash(&entries), entries, violations, stats })
}

/// What a run recorded outside the simulator gives the checkers besides its
/// history: who could contend when, the faults applied, and the slack the
/// real recording needs.
#[derive(Clone, Debug, Default)]
pub struct Recorded {
    /// The run's seed (of its fault draws).
    pub seed: u64,
    /// Who could contend from when, as [`Reach`] kept it while the schedule
    /// was applied.
    pub contention: Vec<(u64, Vec<String>)>,
    /// How often each kind of fault fired.
    pub faults: BTreeMap<String, usize>,
    /// How long the run took.
    pub wall: Duration,
    /// The longest a request may still commit after its sender stopped, in
    /// µs, when that is more than the world's own latencies imply.
    pub in_flight_us: u64,
    /// How late the recording may place an event, in µs (the world's tick
    /// when that is more).
    pub tick_us: u64,
}

/// Judges a history recorded outside the simulator, by real processes on
/// real sockets (the chaos harness), with the checkers and figures of a
/// simulated run of `world`.
pub fn judge(world: &World, mut entries: Vec<Entry>, recorded: Recorded) -> Report {
    entries.sort_by_key(|entry| entry.at_us);
    let base = checker_context(world);
    let context = Context {
        contention: recorded.contention,
        in_flight_us: base.in_flight_us.max(recorded.in_flight_us),
        tick_us: base.tick_us.max(recorded.tick_us),
        ..base
    };
    let acting = invariants::acting_intervals(&entries, &context);
    let violations = invariants::check_all(&entries, &context, &acting);
    let stats = stats(world, &entries, &context, &acting, recorded.faults, recorded.wall);
    Report { seed: recorded.seed, trace_hash: trace_hash(&entries), entries, violations, stats }
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
/// what one longer step does too; the hosts sit that step out like any
/// other they have nothing to do in (see below), and live it when they next
/// run. What differs is tokio's own bookkeeping
/// (how often each host's scheduler has ticked), which decides the order of
/// tasks woken at one instant, so traces differ from a tick-by-tick run;
/// the same seed still gives the same trace. A multi-tick step in which a
/// host sent anything or recorded anything means a wake-up the agenda
/// missed, and the run fails loudly rather than quietly delivering a
/// message late.
///
/// A tick that cannot be stepped over is one tick for the world but not
/// for every host: a host runs in it only if it has a message to take, a
/// timer due by the tick's end, or a connect answered (turmoil's
/// [`turmoil::Sim::step_gated`] with an [`AgendaGate`]); the others sit it
/// out and live the ticks they missed in one go just before they next run,
/// which the same check guards: a host that sends or records anything then
/// fails the run. In a world of twenty members most hosts have nothing to
/// do in most ticks. Traces can differ from running every host every tick,
/// for the reason above: a host's scheduler ticks fewer times.
fn advance(
    sim: &mut turmoil::Sim<'_>,
    agendas: &BTreeMap<String, Agenda>,
    history: &History,
    tick: Duration,
    look_at: Duration,
    woken: bool,
    seen: &mut Unannounced,
) -> Result<(), SimError> {
    let now = sim.elapsed();
    // A step in which a SYN arrived or a message was dropped may have woken
    // a task on one host from another without a message (turmoil answers a
    // connect through a channel); that task runs in the next step, which is
    // therefore a single tick. turmoil knows which host a connect woke and
    // runs it; a drop may have woken any host, so all of them run.
    let last = std::mem::replace(seen, Unannounced::read(sim));
    let silently_woken = last.wakes != seen.wakes;
    let dropped = last.drops != seen.drops;
    let failed = |err: Box<dyn std::error::Error>| SimError::Failed(err.to_string());
    let ticks_until = |at: Duration| at.saturating_sub(now).as_nanos() / tick.as_nanos();
    // After `n` ticks the clock must stay short of the next timer, which
    // then fires in a tick of its own, and must not go past the first tick
    // boundary at or after `look_at`, where stepping tick by tick would
    // have looked.
    let next_due = agendas.values().filter_map(Agenda::next_due).min();
    let before_timer = next_due.map_or(u128::MAX, |due| ticks_until(due.saturating_sub(Duration::from_nanos(1))));
    let to_look = ticks_until(look_at + tick - Duration::from_nanos(1));
    let ticks = before_timer.min(to_look);
    if woken || silently_woken || ticks < 2 || sim.in_flight() > 0 {
        // A connect answered in the last step wakes only its own host,
        // which turmoil runs by itself; a drop may wake any.
        let mut gate = AgendaGate::new(agendas, woken || dropped, history);
        sim.step_gated(tick, &mut gate).map_err(failed)?;
        return Ok(());
    }
    let (recorded, sent) = (history.len(), sim.messages_sent());
    let span = tick * u32::try_from(ticks).unwrap_or(u32::MAX);
    // Gated like any step: no host has a timer due in the span, so every
    // host with an agenda sits it out and lives it, with the check that
    // guards catching up, only when it next has something to do. Running
    // every host through the span instead cost a scheduler run per host
    // per span, for nothing.
    let mut gate = AgendaGate::new(agendas, false, history);
    sim.step_gated(span, &mut gate).map_err(failed)?;
    // Anything sent in the span (delivered at once, dropped or still on its
    // way), a connect answered, or anything recorded means a host acted.
    let acted = sim.messages_sent() != sent || sim.unannounced_wakes() != seen.wakes;
    if acted || sim.in_flight() > 0 || history.len() != recorded {
        return Err(SimError::Failed(format!(
            "something happened while the runner stepped over {span:?} from {now:?} believing nothing could: a \
             simulated timer or wake-up the clock's agenda does not know of"
        )));
    }
    Ok(())
}

/// The network's counts of wake-ups that come without a message, as the
/// runner last read them.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Unannounced {
    /// SYNs handed to hosts plus messages dropped.
    wakes: u64,
    /// Messages dropped.
    drops: u64,
}

impl Unannounced {
    fn read(sim: &turmoil::Sim<'_>) -> Unannounced {
        Unannounced { wakes: sim.unannounced_wakes(), drops: sim.messages_dropped() }
    }
}

/// Brings every host that sat out steps up to the simulation's time, with
/// the same check as in a step: the runner does this before it acts on hosts
/// from outside (a crash, a restart, a pause, a clock's suspend) and before
/// it stops them at the end, so no host meets an action with a clock that
/// lags, and no wake-up the agendas missed goes unnoticed at the end.
fn catch_up(sim: &mut turmoil::Sim<'_>, agendas: &BTreeMap<String, Agenda>, history: &History) -> Result<(), SimError> {
    let mut gate = AgendaGate::new(agendas, true, history);
    sim.catch_up(&mut gate).map_err(|err| SimError::Failed(err.to_string()))
}

/// Which hosts run in a one-tick step: every host when something woke tasks
/// from outside (`everyone`), else those with a timer due by the step's end;
/// [`turmoil::Sim::step_gated`] adds those with a message to take. A host
/// that sat out steps and then records anything while it lives them has
/// acted on a wake-up its agenda did not know of, and the run fails. A host
/// that runs only for a timer lives the steps it sat out and this one in one
/// tick; recording anything before that timer's instant fails the run the
/// same way. (A message it sent then, with nothing recorded, is not seen
/// there; the hosts that take a message still catch up apart, with the
/// stricter check.)
struct AgendaGate<'a> {
    agendas: &'a BTreeMap<String, Agenda>,
    everyone: bool,
    history: &'a History,
    /// The history's length when the host now catching up began to.
    recorded: usize,
    /// The first timer the host living a merged tick had due.
    first_due: Duration,
}

impl<'a> AgendaGate<'a> {
    fn new(agendas: &'a BTreeMap<String, Agenda>, everyone: bool, history: &'a History) -> AgendaGate<'a> {
        AgendaGate { agendas, everyone, history, recorded: 0, first_due: Duration::ZERO }
    }
}

impl turmoil::HostGate for AgendaGate<'_> {
    fn must_run(&mut self, host: &str, until: Duration) -> bool {
        self.everyone || self.agendas.get(host).is_none_or(|agenda| agenda.next_due().is_some_and(|due| due <= until))
    }

    fn catching_up(&mut self, _host: &str) {
        self.recorded = self.history.len();
    }

    fn caught_up(&mut self, host: &str) -> turmoil::Result {
        if self.history.len() != self.recorded {
            return Err(format!(
                "{host} recorded an event while living steps it sat out believing it had nothing to do: a \
                 simulated timer or wake-up its clock's agenda does not know of"
            ))?;
        }
        Ok(())
    }

    fn merging(&mut self, host: &str) {
        self.recorded = self.history.len();
        self.first_due = self.agendas.get(host).and_then(Agenda::next_due).unwrap_or_default();
    }

    fn merged(&mut self, host: &str) -> turmoil::Result {
        let first_due_us = u64::try_from(self.first_due.as_micros()).unwrap_or(u64::MAX);
        if let Some(early) = self.history.earliest_since(self.recorded).filter(|at_us| *at_us < first_due_us) {
            return Err(format!(
                "{host} recorded an event at {early} us, before its first timer due at {first_due_us} us, while \
                 living steps it sat out: a simulated timer or wake-up its clock's agenda does not know of"
            ))?;
        }
        Ok(())
    }
}

mod faults;
pub use crate::history::OPERATOR;
pub use faults::Reach;
use faults::*;
mod validate;
pub use validate::validate;
mod context;
use context::*;
mod stats;
pub use stats::Stats;
use stats::*;

#[cfg(test)]
mod tests {
    use super::*;
    use turmoil::HostGate;

    #[test]
    fn the_agenda_gate_runs_hosts_with_a_timer_due_and_refuses_a_host_that_recorded_while_catching_up() {
        let agenda = Agenda::default();
        let agendas = BTreeMap::from([("a".to_string(), agenda.clone())]);
        let history = History::default();
        let mut gate = AgendaGate::new(&agendas, false, &history);
        // No timer: nothing to run for; a host the gate has no agenda for
        // always runs.
        assert!(!gate.must_run("a", Duration::from_secs(1)));
        assert!(gate.must_run("stranger", Duration::from_secs(1)));
        let armed = agenda.arm(Duration::from_millis(1_500));
        assert!(!gate.must_run("a", Duration::from_secs(1)));
        assert!(gate.must_run("a", Duration::from_millis(1_500)));
        drop(armed);
        assert!(!gate.must_run("a", Duration::from_secs(2)));

        gate.catching_up("a");
        assert!(gate.caught_up("a").is_ok());
        gate.catching_up("a");
        history.record(Duration::from_secs(1), "a", Event::ElectorError { message: "late".into() });
        let err = gate.caught_up("a").expect_err("a recorded while it lived steps it sat out");
        assert!(err.to_string().contains("a recorded an event while living steps it sat out"), "{err}");
    }

    #[test]
    fn the_agenda_gate_refuses_a_merged_tick_that_recorded_before_the_first_timer() {
        let agenda = Agenda::default();
        let agendas = BTreeMap::from([("a".to_string(), agenda.clone())]);
        let history = History::default();
        let mut gate = AgendaGate::new(&agendas, false, &history);
        let _armed = agenda.arm(Duration::from_millis(1_500));
        let event = || Event::ElectorError { message: "woken".into() };
        // What the timer did, at its instant or later, is fine.
        gate.merging("a");
        history.record(Duration::from_millis(1_500), "a", event());
        history.record(Duration::from_millis(1_700), "a", event());
        assert!(gate.merged("a").is_ok());
        // Anything before it was woken by something the agenda did not know.
        gate.merging("a");
        history.record(Duration::from_millis(1_499), "a", event());
        let err = gate.merged("a").expect_err("a recorded before its first timer");
        assert!(err.to_string().contains("before its first timer due at 1500000 us"), "{err}");
    }
}
