//! One run of one chaos world: the downstream, a fault proxy per node, the
//! processes, the schedule applied in real time, then the history judged
//! by the simulator's checkers.
//!
//! The schedule is deterministic (the file's times, and the proxies'
//! latency draws from the seed); the run is not: the kernel schedules the
//! processes, the store answers when it answers. The same seed therefore
//! gives the same faults at the same times, not the same history.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hoplock_sim::history::{Event, Fault};
use hoplock_sim::invariants;
use hoplock_sim::runner::{self, Reach, Recorded, Report};
use hoplock_sim::scenario::ChaosAction;
use hoplock_sim::world::{Action, LEADER};
use hoplock_testkit::fault_proxy::{Exchange, FaultProxy, LinkFaults};
use hoplock_testkit::fenced_downstream::FencedDownstream;

use super::cluster::{Launch, Node};
use super::plan::{Plan, StepFault, store_link};
use super::record::{self, Recorder};

/// How late the harness may stamp an event it learns of from a pipe or a
/// socket: generous, for a loaded two-core machine.
pub const STAMP_SLACK: Duration = Duration::from_millis(20);

/// How long a proxy's connections get to record what was pending when it
/// shut down.
const SHUTDOWN_RECORDS: Duration = Duration::from_millis(200);

/// How soon a process thawed after a pause must have stopped a term that
/// ended while it was frozen: its overdue timer runs, it signals its
/// command, the command exits and the line saying so is read.
pub const WAKE_ALLOWANCE: Duration = Duration::from_millis(100);

/// After the run ends, how long requests still in flight get to reach the
/// store and be recorded.
const DRAIN: Duration = Duration::from_millis(1500);

/// What a run gives back.
#[derive(Clone)]
pub struct Outcome {
    /// The judged history.
    pub report: Report,
    /// Every process's log lines, as `(node#incarnation, line)`.
    pub logs: Vec<(String, String)>,
}

/// Where the store is.
#[derive(Clone, Debug)]
pub struct StoreAt {
    pub addr: std::net::SocketAddr,
    pub bucket: String,
    pub access_key: String,
    pub secret_key: String,
    pub region: String,
}

/// Runs `plan` once with `seed`.
#[allow(clippy::disallowed_methods)] // Real processes, real time.
pub async fn run_once(plan: &Plan, seed: u64, store: &StoreAt, launch: &Launch) -> Result<Outcome, String> {
    let origin = Instant::now();
    let recorder = Recorder::new(origin);
    let downstream =
        FencedDownstream::start(origin).await.map_err(|err| format!("cannot start the downstream: {err}"))?;
    // A fresh key per run: runs never see each other's records.
    let key = format!("chaos/{}/{seed}-{}-{}/lease", plan.name, std::process::id(), origin_nanos());
    let path = format!("/{}/{key}", store.bucket);
    let launch = Launch {
        bucket: store.bucket.clone(),
        key: key.clone(),
        downstream: downstream.addr().to_string(),
        ..launch.clone()
    };
    let standing = LinkFaults {
        latency_min: Duration::from_millis(plan.world.network.latency_min_ms),
        latency_max: Duration::from_millis(plan.world.network.latency_max_ms.max(plan.world.network.latency_min_ms)),
        ..LinkFaults::default()
    };
    // Every exchange on the lease key, by node: which process sent it is
    // decided after the run, from when its connection was accepted.
    let exchanges: Arc<std::sync::Mutex<Vec<(String, Exchange)>>> = Arc::default();
    let mut nodes: Vec<Node> = Vec::new();
    for (index, node_plan) in plan.nodes.iter().enumerate() {
        let (exchanges, name) = (exchanges.clone(), node_plan.name.clone());
        let proxy =
            FaultProxy::start(store.addr, origin, seed.wrapping_mul(31).wrapping_add(index as u64), move |exchange| {
                // Kept whole: `record::store_op` picks the lease key's.
                exchanges.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((name.clone(), exchange));
            })
            .await
            .map_err(|err| format!("cannot start a fault proxy: {err}"))?;
        proxy.set(standing.clone());
        nodes.push(Node::new(node_plan.clone(), proxy));
    }
    let result = drive(plan, &mut nodes, &launch, &recorder, &standing).await;
    for node in &mut nodes {
        node.end(&recorder);
    }
    // Requests sent before the end still reach the store and are recorded;
    // the proxies stay up meanwhile.
    tokio::time::sleep(DRAIN).await;
    for node in &nodes {
        node.proxy.shutdown();
    }
    downstream.shutdown();
    // A proxy records the requests still pending at its shutdown from its
    // connections' tasks, just after.
    tokio::time::sleep(SHUTDOWN_RECORDS).await;
    let Driven { contention, counts: faults, skipped } = result?;
    let started = starts(&recorder.entries());
    let exchanges = std::mem::take(&mut *exchanges.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    let ops: Vec<record::StoredOp> = exchanges
        .iter()
        .filter_map(|(node, exchange)| {
            let client = record::client_of(node, started.get(node).map_or(&[], Vec::as_slice), exchange.accepted_us);
            record::store_op(exchange, &path, &client)
        })
        .collect();
    if ops.is_empty() {
        return Err(format!(
            "{}: the proxies recorded no request on the lease key {path}: nothing for the store's checkers to judge",
            plan.name
        ));
    }
    for (at_us, op) in record::settle_unknown(ops) {
        recorder.record_at(at_us, record::STORE, Event::Store(op));
    }
    for write in downstream.writes() {
        recorder.record_at(
            write.at_us,
            &write.node,
            Event::Downstream {
                generation: write.token,
                accepted: write.accepted,
                highest_before: write.highest_before,
                sequence: write.sequence,
            },
        );
    }
    let latency = standing.latency_max + standing.spike;
    let recorded = Recorded {
        seed,
        contention,
        faults,
        wall: origin.elapsed(),
        in_flight_us: (latency * 2 + STAMP_SLACK).as_micros() as u64,
        tick_us: STAMP_SLACK.as_micros() as u64,
    };
    // The checkers' search can take a while: off the runtime's workers,
    // which carry the other runs' proxies and log readers.
    let (world, entries) = (plan.world.clone(), recorder.entries());
    let mut report = tokio::task::spawn_blocking(move || runner::judge(&world, entries, recorded))
        .await
        .map_err(|err| format!("judging a run failed: {err}"))?;
    // A chaos fault skipped is a run that tested less than its file says,
    // as a skipped scheduled action is.
    for (at_us, label) in skipped {
        report.violations.push(invariants::Violation {
            property: invariants::Property::ActionSkipped,
            at_us,
            nodes: Vec::new(),
            generation: None,
            detail: format!("{label} was skipped: nobody led"),
        });
    }
    Ok(Outcome { report, logs: recorder.logs() })
}

/// Starts the processes and applies the schedule until the run's end.
#[allow(clippy::disallowed_methods)] // Real processes, real time.
async fn drive(
    plan: &Plan,
    nodes: &mut [Node],
    launch: &Launch,
    recorder: &Recorder,
    standing: &LinkFaults,
) -> Result<Driven, String> {
    let names = plan.world.node_names();
    let mut reach = Reach::default();
    let mut contention = vec![(0, names.clone())];
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut skipped = Vec::new();
    for node in nodes.iter_mut() {
        node.start(launch, recorder)?;
    }
    let end = Duration::from_millis(plan.world.duration_ms);
    // Faults with an end: (when, what to undo).
    let mut undo: Vec<(Duration, Undo)> = Vec::new();
    let mut hung_up: BTreeMap<String, Duration> = BTreeMap::new();
    let mut steps = plan.steps.iter().peekable();
    let started = recorder.origin();
    loop {
        let next = [
            steps.peek().map(|step| Duration::from_millis(step.at_ms)),
            undo.iter().map(|(at, _)| *at).min(),
            Some(end),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(end);
        tokio::time::sleep_until((started + next).into()).await;
        let now = Duration::from_micros(recorder.now_us());
        if next >= end && now >= end {
            break;
        }
        let mut changed = false;
        undo.retain(|(at, what)| {
            if *at > now {
                return true;
            }
            match what {
                Undo::Thaw(name) => {
                    if let Some(node) = nodes.iter().find(|node| node.plan.name == *name) {
                        node.freeze(false);
                    }
                }
                Undo::HangUps(name) => {
                    if let Some(node) = nodes.iter().find(|node| node.plan.name == *name) {
                        node.proxy.set(LinkFaults { hang_up_bodies: false, ..node.proxy.faults() });
                    }
                    hung_up.remove(name);
                }
            }
            changed = true;
            false
        });
        while let Some(step) = steps.next_if(|step| Duration::from_millis(step.at_ms) <= now) {
            changed = true;
            match &step.fault {
                StepFault::World(action) => {
                    let Some(action) = resolve(action, recorder) else {
                        recorder.record("world", Event::Fault { action: Fault::Skipped(action.clone()) });
                        continue;
                    };
                    apply(&action, nodes, launch, recorder, standing, now, &mut undo)?;
                    recorder.record("world", Event::Fault { action: Fault::Applied(action.clone()) });
                    reach.apply(&action, now);
                    *counts.entry(action.verb()).or_default() += 1;
                }
                StepFault::Chaos(action) => {
                    let leader = current_leader(recorder);
                    let name = if action.node() == LEADER { leader } else { Some(action.node().to_string()) };
                    let Some(name) = name else {
                        skipped.push((now.as_micros() as u64, action.label()));
                        continue;
                    };
                    let Some(node) = nodes.iter().find(|node| node.plan.name == name) else { continue };
                    match action {
                        ChaosAction::ResetConnections { .. } => node.proxy.reset_connections(),
                        ChaosAction::HangUpBodies { for_ms, .. } => {
                            node.proxy.set(LinkFaults { hang_up_bodies: true, ..node.proxy.faults() });
                            let until = now + Duration::from_millis(*for_ms);
                            hung_up.insert(name.clone(), until);
                            undo.push((until, Undo::HangUps(name.clone())));
                        }
                    }
                    let verb = action.label().split(' ').next().unwrap_or_default().to_string();
                    *counts.entry(verb).or_default() += 1;
                }
            }
        }
        if changed {
            let _ = reach.outage_ended(now);
            let contenders: Vec<String> =
                reach.contenders(&names, now).into_iter().filter(|name| !hung_up.contains_key(name)).collect();
            if contention.last().is_none_or(|(_, last)| *last != contenders) {
                contention.push((now.as_micros() as u64, contenders));
            }
        }
    }
    Ok(Driven { contention, counts, skipped })
}

/// What applying the schedule gave.
struct Driven {
    /// Who could contend from when.
    contention: Vec<(u64, Vec<String>)>,
    /// How often each kind of fault fired.
    counts: BTreeMap<String, usize>,
    /// Chaos faults aimed at `@leader` while nobody led: (µs, label).
    skipped: Vec<(u64, String)>,
}

/// When each node's processes started: node → (µs, incarnation).
fn starts(entries: &[hoplock_sim::history::Entry]) -> BTreeMap<String, Vec<(u64, u32)>> {
    let mut starts: BTreeMap<String, Vec<(u64, u32)>> = BTreeMap::new();
    for entry in entries {
        if let Event::Started { incarnation } = entry.event {
            starts.entry(entry.node.clone()).or_default().push((entry.at_us, incarnation));
        }
    }
    starts
}

/// A fault's end, due at a time.
enum Undo {
    /// SIGCONT to a paused node.
    Thaw(String),
    /// The end of a node's hang-ups.
    HangUps(String),
}

/// The node that leads now, by the history so far: the open term with the
/// highest generation.
fn current_leader(recorder: &Recorder) -> Option<String> {
    let entries = recorder.entries();
    let open = invariants::terms(&entries, u64::MAX).into_iter().filter(|term| term.end_us == u64::MAX);
    open.max_by_key(|term| term.generation).map(|term| term.node)
}

/// The action with `@leader` replaced by the node that leads, or `None`
/// when it names the leader and nobody leads.
fn resolve(action: &Action, recorder: &Recorder) -> Option<Action> {
    if !action.hosts().contains(&LEADER) {
        return Some(action.clone());
    }
    current_leader(recorder).map(|leader| action.resolve(&leader))
}

/// Applies one of the simulator's actions to the real processes.
fn apply(
    action: &Action,
    nodes: &mut [Node],
    launch: &Launch,
    recorder: &Recorder,
    standing: &LinkFaults,
    now: Duration,
    undo: &mut Vec<(Duration, Undo)>,
) -> Result<(), String> {
    let find = |nodes: &mut [Node], name: &str| nodes.iter_mut().position(|node| node.plan.name == name);
    let set_link = |nodes: &mut [Node], a: &str, b: &str, change: &dyn Fn(&mut LinkFaults)| {
        if let Some(name) = store_link(a, b)
            && let Some(index) = find(nodes, name)
        {
            let mut faults = nodes[index].proxy.faults();
            change(&mut faults);
            nodes[index].proxy.set(faults);
        }
    };
    match action {
        Action::Partition { a, b } => set_link(nodes, a, b, &|faults| faults.partitioned = true),
        Action::PartitionOneway { from, to } => {
            // The store's replies cut: requests land, answers never come.
            // The node's requests cut: nothing lands, nothing comes back.
            let store_side = *from == hoplock_sim::node::S3_HOST;
            set_link(nodes, from, to, &|faults| {
                if store_side {
                    faults.drop_replies = true;
                } else {
                    faults.partitioned = true;
                }
            })
        }
        Action::Repair { a, b } => set_link(nodes, a, b, &|faults| {
            faults.partitioned = false;
            faults.drop_replies = false;
        }),
        Action::Hold { a, b } => set_link(nodes, a, b, &|faults| faults.stalled = true),
        Action::Release { a, b } => set_link(nodes, a, b, &|faults| faults.stalled = standing.stalled),
        Action::Crash { node } => {
            if let Some(index) = find(nodes, node) {
                nodes[index].kill(recorder);
            }
        }
        Action::Restart { node } => {
            if let Some(index) = find(nodes, node) {
                // A process still running (a stop not yet honoured) is
                // crashed first, as the simulator's restart does.
                nodes[index].kill(recorder);
                nodes[index].start(launch, recorder)?;
            }
        }
        Action::Stop { node } => {
            if let Some(index) = find(nodes, node) {
                nodes[index].terminate();
            }
        }
        Action::Pause { node, for_ms } => {
            if let Some(index) = find(nodes, node) {
                let until = now + Duration::from_millis(*for_ms);
                nodes[index].freeze(true);
                // A frozen process wakes to find its deadlines passed, and
                // needs the scheduler to run them: unlike a simulated one,
                // it cannot stop in the instant it wakes. It is held to the
                // simulator's suspend rule instead: paused until it wakes,
                // and stopped within the wake allowance after.
                let stops_by = until + WAKE_ALLOWANCE;
                recorder.record(
                    node,
                    Event::Suspended { until_us: until.as_micros() as u64, stops_by_us: stops_by.as_micros() as u64 },
                );
                undo.push((until, Undo::Thaw(node.clone())));
            }
        }
        // The plan refused every other action.
        other => return Err(format!("the plan let through an action it cannot map: {}", other.label())),
    }
    Ok(())
}

/// Nanoseconds of the wall clock, to tell runs' keys apart.
#[allow(clippy::disallowed_methods)] // A name, not a timing.
fn origin_nanos() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |since| since.as_nanos())
}
