//! From a scenario file to a plan of real processes: which `hoplock run`
//! flags each node gets, what its command does, which clock it runs on,
//! and the schedule of real faults. What cannot be mapped onto real
//! processes is refused here, with the field at fault and the reason, before
//! anything starts.
//!
//! The plan also gives the *effective* world: the file's world with every
//! setting the binary decides for itself written in (its stop margin is the
//! grace period plus half a second, its command winds down within the
//! grace period). The checkers judge the real run against that world, and
//! the simulator runs that world for the side-by-side figures, so both
//! engines are held to the same settings.

use std::path::Path;
use std::time::Duration;

use hoplock_sim::fake_s3::ProviderMode;
use hoplock_sim::node::S3_HOST;
use hoplock_sim::scenario::{ChaosAction, Scenario};
use hoplock_sim::world::{Action, Api, PolicySpec, ReadsSpec, World};

/// The default drift bound the binary runs with (it has no flag for it).
const DEFAULT_DRIFT_BOUND: f64 = 1e-3;

/// What the binary adds to the grace period for its stop margin.
pub const STOP_MARGIN_OVER_GRACE: Duration = Duration::from_millis(500);

/// One world, ready to run on real processes.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The file's name without `.toml`.
    pub name: String,
    /// The file as given.
    pub file: String,
    /// The scenario as loaded.
    pub scenario: Scenario,
    /// The world with the binary's own settings written in.
    pub world: World,
    /// The nodes.
    pub nodes: Vec<NodePlan>,
    /// Every fault, in time order.
    pub steps: Vec<Step>,
    /// Whether the world needs the fake S3 (a provider mode or store faults).
    pub needs_fake: bool,
}

/// One node's process.
#[derive(Clone, Debug)]
pub struct NodePlan {
    /// Its name in the world.
    pub name: String,
    /// `hoplock run` flags, besides the store's.
    pub run_args: Vec<String>,
    /// The command's behaviour.
    pub child: ChildPlan,
    /// Its wall-clock offset and rate error, when it runs under libfaketime.
    pub clock: Option<(i64, i64)>,
}

/// What a node's command does while it leads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildPlan {
    /// How often it writes downstream.
    pub every_ms: u64,
    /// Whether it ignores SIGTERM (and is killed after the grace period).
    pub ignores_sigterm: bool,
    /// If set, it exits by itself this long after it starts.
    pub exits_after_ms: Option<u64>,
}

/// A fault at a time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// When, from the start of the run.
    pub at_ms: u64,
    /// What.
    pub fault: StepFault,
}

/// The two kinds of fault a chaos world has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepFault {
    /// One of the simulator's actions, mapped onto real processes.
    World(Action),
    /// A fault only real processes and sockets have.
    Chaos(ChaosAction),
}

/// A file that cannot be run on real processes.
#[derive(Debug)]
pub struct Refused {
    /// The file.
    pub file: String,
    /// The field at fault.
    pub field: String,
    /// Why.
    pub reason: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: cannot run on real processes: {}", self.file, self.field, self.reason)
    }
}

/// The grace period `hoplock run` gives a command by default: TTL/15.
pub fn grace(ttl_ms: u64) -> Duration {
    Duration::from_millis(ttl_ms) / 15
}

/// Loads `path` and maps it; `clocks` says whether libfaketime is at hand
/// to run nodes whose clocks are offset or drift.
pub fn load(path: &Path, clocks: bool) -> Result<Plan, String> {
    let scenario = Scenario::load(path).map_err(|err| err.to_string())?;
    let file = path.display().to_string();
    let name = path.file_stem().map(|stem| stem.to_string_lossy().into_owned()).unwrap_or_else(|| file.clone());
    map(name, file, scenario, clocks).map_err(|refused| refused.to_string())
}

/// Maps a loaded scenario.
pub fn map(name: String, file: String, scenario: Scenario, clocks: bool) -> Result<Plan, Refused> {
    let refuse = |field: &str, reason: &str| Refused { file: file.clone(), field: field.into(), reason: reason.into() };
    let mut world = scenario.world();
    if world.keyed.is_some() {
        return Err(refuse("keyed", "`hoplock run` runs an elector; keyed members have no command-line runner yet"));
    }
    if world.network.loss_rate > 0.0 {
        return Err(refuse("network.loss_rate", "random message loss has no TCP counterpart; use partitions"));
    }
    let needs_fake = world.s3.mode != ProviderMode::Honest || world.s3.faults != Default::default();
    let mut nodes = Vec::new();
    for (index, node) in world.nodes.iter_mut().enumerate() {
        let field = |name: &str| format!("nodes[{index}].{name}");
        let spec = &mut node.elector;
        if spec.policy != PolicySpec::Ours {
            return Err(refuse(&field("elector.policy"), "the binary runs hoplock's own rules only"));
        }
        if spec.drift_bound != DEFAULT_DRIFT_BOUND {
            return Err(refuse(&field("elector.drift_bound"), "`hoplock run` has no flag for the drift bound"));
        }
        if spec.stop_margin_ms.is_some() {
            return Err(refuse(
                &field("elector.stop_margin_ms"),
                "`hoplock run` sets its stop margin from the grace period (grace + 0.5 s)",
            ));
        }
        if spec.request_timeout_ms.is_some() || spec.release_timeout_ms.is_some() {
            return Err(refuse(&field("elector"), "`hoplock run` has no flag for the elector's request timeouts"));
        }
        if node.create_at_view.is_some() {
            return Err(refuse(&field("create_at_view"), "views belong to keyed worlds"));
        }
        let workload = &mut node.workload;
        if workload.api != Api::Lead || workload.observe_every_ms.is_some() || workload.rest_after_term_ms.is_some() {
            return Err(refuse(
                &field("workload"),
                "`hoplock run` leads with one command per term; the API variants belong to the simulator",
            ));
        }
        let clock = &node.clock;
        if !clock.steps.is_empty() {
            return Err(refuse(&field("clock.steps"), "a running process's wall clock cannot be stepped"));
        }
        if clock.drift_ppb <= -1_000_000_000 {
            return Err(refuse(&field("clock.drift_ppb"), "a clock must run forward"));
        }
        let faked = clock.offset_ms != 0 || clock.drift_ppb != 0;
        if faked && !clocks {
            return Err(refuse(&field("clock"), "an offset or drifting clock needs libfaketime, which is not at hand"));
        }
        let grace = grace(spec.ttl_ms);
        // The binary's own settings, written into the world that judges it.
        spec.stop_margin_ms = Some((grace + STOP_MARGIN_OVER_GRACE).as_millis() as u64);
        let ignores_sigterm = workload.ignore_cancellation_ms > 0;
        if ignores_sigterm {
            // SIGTERM is ignored; SIGKILL ends it after the grace period.
            workload.ignore_cancellation_ms = grace.as_millis() as u64;
        }
        // The owner name is the node's, unless the world gives two nodes one
        // (a new copy started beside the old).
        let owner = node.owner.clone().unwrap_or_else(|| node.name.clone());
        let mut run_args = vec!["--owner".to_string(), owner, "--ttl".into(), format!("{}ms", spec.ttl_ms)];
        if let Some(renew) = spec.renew_ms {
            run_args.extend(["--renew".into(), format!("{renew}ms")]);
        }
        if let Some(poll) = spec.poll_ms {
            run_args.extend(["--poll".into(), format!("{poll}ms")]);
        }
        if spec.reads == ReadsSpec::Poll {
            run_args.extend(["--reads".into(), "poll".into()]);
        }
        if spec.lock_delay_ms > 0 {
            run_args.extend(["--lock-delay".into(), format!("{}ms", spec.lock_delay_ms)]);
        }
        nodes.push(NodePlan {
            name: node.name.clone(),
            run_args,
            child: ChildPlan {
                every_ms: workload.write_every_ms.max(1),
                ignores_sigterm,
                exits_after_ms: workload.release_after_ms,
            },
            clock: faked.then_some((clock.offset_ms, clock.drift_ppb)),
        });
    }
    let mut steps = Vec::new();
    let late = |at_ms: u64| at_ms >= world.duration_ms;
    for (index, scheduled) in world.schedule.iter().enumerate() {
        let field = format!("schedule[{index}]");
        if late(scheduled.at_ms) {
            return Err(refuse(&format!("{field}.at_ms"), "comes at or after the end of the run"));
        }
        if let Some(reason) = unmapped(&scheduled.action) {
            return Err(refuse(&field, &format!("`{}` {reason}", scheduled.action.verb())));
        }
        steps.push(Step { at_ms: scheduled.at_ms, fault: StepFault::World(scheduled.action.clone()) });
    }
    for (index, scheduled) in scenario.chaos.iter().flat_map(|chaos| chaos.schedule.iter()).enumerate() {
        if late(scheduled.at_ms) {
            return Err(refuse(&format!("chaos.schedule[{index}].at_ms"), "comes at or after the end of the run"));
        }
        let node = scheduled.action.node();
        if node != hoplock_sim::world::LEADER && !world.nodes.iter().any(|n| n.name == node) {
            return Err(refuse(&format!("chaos.schedule[{index}].node"), &format!("no node is named {node:?}")));
        }
        steps.push(Step { at_ms: scheduled.at_ms, fault: StepFault::Chaos(scheduled.action.clone()) });
    }
    steps.sort_by_key(|step| step.at_ms);
    Ok(Plan { name, file, scenario, world, nodes, steps, needs_fake })
}

/// Why an action cannot be mapped onto real processes, if it cannot.
fn unmapped(action: &Action) -> Option<&'static str> {
    match action {
        Action::Partition { .. }
        | Action::PartitionOneway { .. }
        | Action::Repair { .. }
        | Action::Hold { .. }
        | Action::Release { .. }
        | Action::Crash { .. }
        | Action::Restart { .. }
        | Action::Pause { .. }
        | Action::Stop { .. } => None,
        Action::Suspend { .. } => Some("cannot be done to a real host: the harness can stop a process, not its clock"),
        Action::Abandon { .. } => Some("drops a keyed member's future, which only the simulator's nodes have"),
        Action::StepClock { .. } => Some("cannot step a running process's wall clock"),
        Action::WriteRecord { .. } | Action::DeleteKey | Action::ResetKey { .. } => {
            Some("is an operator's write, which the chaos worlds do not make")
        }
        Action::DeleteMembers | Action::WriteMembers { .. } | Action::ResetMembers { .. } => {
            Some("concerns the keyed membership object")
        }
        Action::Outage { .. } => Some("is the fake S3's own refusal; use a partition between the node and s3"),
    }
}

/// Whether a link is between a node and the store, and which node.
pub fn store_link<'a>(a: &'a str, b: &'a str) -> Option<&'a str> {
    match (a == S3_HOST, b == S3_HOST) {
        (true, false) => Some(b),
        (false, true) => Some(a),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Scenario {
        Scenario::parse("world.toml", text).expect("a valid scenario")
    }

    const NODES: &str = r#"
[[nodes]]
name = "a"
elector = { ttl_ms = 3000, lock_delay_ms = 500 }
workload = { write_every_ms = 100, ignore_cancellation_ms = 5000 }

[[nodes]]
name = "b"
clock = { offset_ms = 60000 }
"#;

    #[test]
    fn every_shipped_world_maps() {
        let root = crate::workspace_root().unwrap();
        let files = hoplock_sim::scenario::files_in(&root.join("scenarios/chaos")).unwrap();
        assert!(files.len() >= 6, "at least six chaos worlds ship, found {}", files.len());
        for file in files {
            let plan = load(&file, true).unwrap_or_else(|err| panic!("{err}"));
            // Something must happen: a fault, or commands that end their
            // terms themselves.
            let ends_itself = plan.nodes.iter().any(|node| node.child.exits_after_ms.is_some());
            assert!(!plan.steps.is_empty() || ends_itself, "{}: a chaos world where nothing happens", plan.name);
        }
    }

    #[test]
    fn the_binarys_own_settings_are_written_into_the_world() {
        let text = format!("description = \"x\"\nexpect = \"safe\"\nduration_ms = 10000\n{NODES}");
        let plan = map("w".into(), "w.toml".into(), parse(&text), true).unwrap_or_else(|err| panic!("{err}"));
        let a = &plan.world.nodes[0];
        // Grace TTL/15 = 200 ms; the stop margin is the grace plus 0.5 s.
        assert_eq!(a.elector.stop_margin_ms, Some(700));
        // A command that ignores SIGTERM is killed after the grace period.
        assert_eq!(a.workload.ignore_cancellation_ms, 200);
        assert_eq!(plan.nodes[0].run_args, ["--owner", "a", "--ttl", "3000ms", "--lock-delay", "500ms"]);
        assert!(plan.nodes[0].child.ignores_sigterm);
        assert_eq!(plan.nodes[1].clock, Some((60000, 0)));
    }

    #[test]
    fn what_real_processes_cannot_do_is_refused_with_the_field() {
        let base = format!("description = \"x\"\nexpect = \"safe\"\nduration_ms = 10000\n{NODES}");
        let suspend = format!("{base}\n[[schedule]]\nat_ms = 1000\naction = \"suspend\"\nnode = \"a\"\nfor_ms = 100\n");
        let err = map("w".into(), "w.toml".into(), parse(&suspend), true).unwrap_err().to_string();
        assert!(err.starts_with("w.toml: schedule[0]: cannot run on real processes: `suspend`"), "{err}");
        let err = map("w".into(), "w.toml".into(), parse(&base), false).unwrap_err().to_string();
        assert!(err.contains("nodes[1].clock") && err.contains("libfaketime"), "{err}");
        let seed = base.replace("ttl_ms = 3000, lock_delay_ms = 500", "ttl_ms = 3000, policy = \"seed\"");
        let err = map("w".into(), "w.toml".into(), parse(&seed), true).unwrap_err().to_string();
        assert!(err.contains("nodes[0].elector.policy"), "{err}");
        let lossy = base.replace("duration_ms = 10000", "duration_ms = 10000\n[network]\nloss_rate = 0.1");
        let err = map("w".into(), "w.toml".into(), parse(&lossy), true).unwrap_err().to_string();
        assert!(err.contains("network.loss_rate"), "{err}");
        let stranger =
            format!("{base}\n[chaos]\n[[chaos.schedule]]\nat_ms = 1\naction = \"reset-connections\"\nnode = \"z\"\n");
        let err = map("w".into(), "w.toml".into(), parse(&stranger), true).unwrap_err().to_string();
        assert!(err.contains("chaos.schedule[0].node"), "{err}");
    }
}
