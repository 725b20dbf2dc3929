//! `--swarm N`: random scenarios, drawn with proptest strategies, each run
//! with seed 0 and checked for safety violations.
//!
//! When one fails, proptest shrinks it: fewer nodes, fewer and earlier
//! faults, smaller clock offsets, milder store faults, as long as some
//! safety property still breaks. The smallest failing world is written out
//! as a scenario file that expects exactly the violations it shows, ready
//! to be copied into `scenarios/`, and read back and run once more to show
//! that the file reproduces them.
//!
//! Only safety properties count as failures here; liveness and the no-
//! vacuous-pass findings are reported: random fault mixes may keep a store
//! unusable for longer than any bound the checker could assume.
//!
//! The worlds draw 2 to 5 nodes, clock offsets and drift, TTLs, lock-delays,
//! tight stop margins and fast polling, store fault rates (including writes
//! that apply and then fail or go unanswered) and per-operation latency
//! distributions, and up to six faults: crash and restart, partition from
//! the store, lost replies, pauses, clock steps, graceful stops, and stalls
//! (held messages). `cargo xtask test` runs 400 of them on the honest store.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use hoplock_sim::clocks::ClockSpec;
use hoplock_sim::fake_s3::{Faults, Latency, OpFaults, ProviderMode};
use hoplock_sim::runner::{self, Report};
use hoplock_sim::scenario::{self, Expect, Finding, Scenario};
use hoplock_sim::world::{
    Action, ElectorSpec, ForeignRecord, LEADER, NetworkSpec, NodeSpec, S3Spec, Scheduled, WorkloadSpec, World,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestError, TestRng, TestRunner};

use super::Options;

/// The seed every swarm world runs with: the randomness is in the world.
const RUN_SEED: u64 = 0;

pub fn run(root: &Path, count: u64, options: &Options) -> Result<(), String> {
    let mode = match &options.mode {
        Some(name) => Some(name.parse::<ProviderMode>().map_err(|err| err.to_string())?),
        None => None,
    };
    let out = options.out.clone().unwrap_or_else(|| root.join("target").join("swarm"));
    let seed = options.seed.unwrap_or(0);
    eprintln!(
        "==> swarm: {count} random scenarios (strategy seed {seed}{})",
        mode.map(|mode| format!(", provider mode {mode}")).unwrap_or_default()
    );
    match search(count, mode, seed)? {
        None => {
            println!("{count} random scenarios, no safety violation");
            Ok(())
        }
        Some(found) => {
            let path = save(&found, &out, mode, seed)?;
            let again = Scenario::load(&path).map_err(|err| err.to_string())?;
            let report = runner::run(&again.world(), RUN_SEED).map_err(|err| err.to_string())?;
            let reproduced = safety_findings(&report) == found.findings;
            println!("found and shrunk a failing scenario: {}", path.display());
            let size = |world: &World| {
                format!(
                    "{} node(s), {} scheduled fault(s), {} ms",
                    world.nodes.len(),
                    world.schedule.len(),
                    world.duration_ms
                )
            };
            println!("  shrunk from {} to {}", size(&found.original), size(&found.world));
            for violation in report.violations.iter().take(5) {
                // The linearizability checker explains over many lines;
                // the first says what broke.
                println!("  {}", violation.to_string().lines().next().unwrap_or_default());
            }
            println!(
                "  the written file {} the violations",
                if reproduced { "reproduces" } else { "does NOT reproduce" }
            );
            println!("  replay: cargo xtask sim --scenario {} --seed {RUN_SEED}", path.display());
            // CI keeps no files: print the scenario itself, so the failure
            // can be reproduced from the log alone.
            if let Ok(text) = std::fs::read_to_string(&path) {
                println!("---- {} ----\n{text}---- end ----", path.display());
            }
            Err("the swarm found a safety violation".into())
        }
    }
}

/// A failing world after shrinking, and what it breaks.
pub struct Found {
    /// The first failing world drawn, before shrinking.
    pub original: World,
    pub world: World,
    pub findings: Vec<Finding>,
    pub tolerated: Vec<Finding>,
}

/// Runs up to `count` random worlds; returns the shrunk first failure.
pub fn search(count: u64, mode: Option<ProviderMode>, seed: u64) -> Result<Option<Found>, String> {
    // Everything that matters is set here, so PROPTEST_* variables in the
    // environment do not change what a strategy seed finds.
    let config = Config {
        cases: u32::try_from(count).unwrap_or(u32::MAX),
        failure_persistence: None,
        max_shrink_iters: 400,
        max_shrink_time: 0,
        max_local_rejects: 65_536,
        max_global_rejects: 1024,
        timeout: 0,
        fork: false,
        rng_algorithm: RngAlgorithm::ChaCha,
        ..Config::default()
    };
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &key));
    let failure: RefCell<Option<String>> = RefCell::new(None);
    let first_failing: RefCell<Option<World>> = RefCell::new(None);
    let result = runner.run(&world_strategy(mode), |world| {
        let report = runner::run(&world, RUN_SEED).map_err(|err| {
            *failure.borrow_mut() = Some(format!("a drawn world could not run: {err}"));
            TestCaseError::fail(err.to_string())
        })?;
        let safety = safety_findings(&report);
        if safety.is_empty() {
            Ok(())
        } else {
            first_failing.borrow_mut().get_or_insert_with(|| world.clone());
            let names: Vec<&str> = safety.iter().map(|finding| finding.name()).collect();
            Err(TestCaseError::fail(names.join(", ")))
        }
    });
    if let Some(problem) = failure.into_inner() {
        return Err(problem);
    }
    match result {
        Ok(()) => Ok(None),
        Err(TestError::Fail(_, world)) => {
            let report = runner::run(&world, RUN_SEED).map_err(|err| err.to_string())?;
            let findings = safety_findings(&report);
            let tolerated = scenario::findings(&report)
                .into_iter()
                .filter(|finding| finding.is_violation() && !findings.contains(finding))
                .collect();
            let original = first_failing.into_inner().unwrap_or_else(|| world.clone());
            Ok(Some(Found { original, world, findings, tolerated }))
        }
        Err(TestError::Abort(reason)) => Err(format!("the swarm stopped: {reason}")),
    }
}

/// The properties a run broke that no random world may break, in report
/// order: the safety properties, the truth of what `observe()` tells
/// followers (they decide on it), and that a stopped elector stays stopped.
/// Liveness and vacuity findings are left out: a random world may well be
/// one where nobody can lead.
fn safety_findings(report: &Report) -> Vec<Finding> {
    use hoplock_sim::invariants::Property;
    scenario::findings(report)
        .into_iter()
        .filter(|finding| {
            matches!(finding, Finding::Violation(property)
                if property.is_safety() || matches!(property, Property::ObserveTruthful | Property::StopHonoured | Property::EventsTruthful))
        })
        .collect()
}

/// Writes the shrunk world as a scenario file and returns its path.
fn save(found: &Found, out: &Path, mode: Option<ProviderMode>, seed: u64) -> Result<PathBuf, String> {
    let description = format!(
        "Found by `cargo xtask sim --swarm` (strategy seed {seed}{}) and shrunk; it breaks {} with seed {RUN_SEED}.",
        mode.map(|mode| format!(", provider mode {mode}")).unwrap_or_default(),
        found.findings.iter().map(|finding| finding.name()).collect::<Vec<_>>().join(", ")
    );
    let mut scenario = Scenario::from_world(description, found.world.clone(), Expect::Findings(found.findings.clone()));
    scenario.tolerate = found.tolerated.clone();
    let text = scenario.to_toml()?;
    std::fs::create_dir_all(out).map_err(|err| format!("cannot create {}: {err}", out.display()))?;
    let name = format!("swarm-{}-{seed}.toml", mode.map_or("honest".to_string(), |mode| mode.to_string()));
    let path = out.join(name);
    std::fs::write(&path, text).map_err(|err| format!("cannot write {}: {err}", path.display()))?;
    Ok(path)
}

/// A fault as drawn: when, what, at whom (`None`: the current leader) and
/// for how long. Faults with a duration expand into two scheduled actions.
#[derive(Clone, Debug)]
struct Drawn {
    at_ms: u64,
    kind: Kind,
    target: Option<usize>,
    span_ms: u64,
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    CrashRestart,
    PartitionFromStore,
    RepliesLost,
    /// A process pause, or (for odd spans) a host suspend.
    Pause,
    StepBack,
    StopRestart,
    /// Requests to and from the store stall (held, not dropped) and are
    /// delivered late, so a renewal retry is still waiting when a term ends.
    Stall,
    /// Someone else writes a live record above any generation the run
    /// reaches, with a TTL or, like the Go library, without one. (Lower
    /// generations and deletions are left out: with every process that saw
    /// the higher ones restarted, the token going down is the documented
    /// price of letting anyone else write the key, not an elector bug.)
    ForeignWrite,
}

/// Random worlds: 2 to 5 nodes with clocks offset by up to ten minutes and
/// drifting within their bound, a store with some faults, and up to six
/// scheduled faults.
pub fn world_strategy(mode: Option<ProviderMode>) -> impl Strategy<Value = World> {
    let nodes = prop::collection::vec(node_strategy(), 2..=5);
    let faults = prop::collection::vec(drawn_strategy(), 0..=6);
    // Tight stop margins (down to the tick) and fast polling, for the whole
    // fleet at once (per node, they keep shrinking from removing nodes): the
    // timing rules show their errors there when replies come late.
    let timing = (prop::option::of(10u64..=200), prop::option::of(20u64..=400));
    (nodes, faults, store_strategy(), 20_000u64..=90_000, timing).prop_map(
        move |(nodes, drawn, faults, duration_ms, (stop_margin_ms, poll_ms))| {
            let nodes: Vec<NodeSpec> = nodes
                .into_iter()
                .enumerate()
                .map(|(index, mut node)| {
                    node.name = format!("n{index}");
                    node.elector.stop_margin_ms = stop_margin_ms;
                    node.elector.poll_ms = poll_ms;
                    node
                })
                .collect();
            let mut schedule = Vec::new();
            for fault in drawn {
                expand(&fault, &nodes, duration_ms, &mut schedule);
            }
            schedule.sort_by_key(|scheduled| scheduled.at_ms);
            World {
                nodes,
                s3: S3Spec { mode: mode.unwrap_or(ProviderMode::Honest), faults },
                schedule,
                duration_ms,
                tick_ms: 10,
                network: NetworkSpec::default(),
                keyed: None,
            }
        },
    )
}

fn node_strategy() -> impl Strategy<Value = NodeSpec> {
    let clock = (-600_000i64..=600_000, -1_000_000i64..=1_000_000).prop_map(|(offset_ms, drift_ppb)| ClockSpec {
        offset_ms,
        drift_ppb,
        ..ClockSpec::default()
    });
    let elector = (prop::sample::select(vec![6_000u64, 3_000, 12_000]), 0u64..=2_000)
        .prop_map(|(ttl_ms, lock_delay_ms)| ElectorSpec { ttl_ms, lock_delay_ms, ..ElectorSpec::default() });
    // Some nodes also call `observe()` now and then, so what followers are
    // told is judged (observe-truthful) under the same faults.
    let workload = (prop::option::of(5_000u64..=30_000), 0u64..=3_000, prop::option::weighted(0.3, 200u64..=3_000))
        .prop_map(|(release_after_ms, ignore, observe_every_ms)| WorkloadSpec {
            release_after_ms,
            ignore_cancellation_ms: ignore,
            observe_every_ms,
            ..WorkloadSpec::default()
        });
    (clock, elector, workload).prop_map(|(clock, elector, workload)| NodeSpec {
        name: String::new(),
        owner: None,
        create_at_view: None,
        clock,
        elector,
        workload,
    })
}

fn store_strategy() -> impl Strategy<Value = Faults> {
    let rates = (0.0f64..0.2, 0.0f64..0.1, 0.0f64..0.2, 0.0f64..0.1, 0.0f64..0.1);
    // Up to the smallest request timeout drawn (TTL 3 s / 6): late replies
    // and early commits, or the reverse.
    let latency = prop_oneof![
        Just(Latency::None),
        (0u64..=500).prop_map(|max_ms| Latency::Uniform { min_ms: 0, max_ms }),
        (1u64..=200, 100u64..=500).prop_map(|(mean_ms, cap_ms)| Latency::Exponential { mean_ms, cap_ms }),
    ];
    let op = (rates, latency).prop_map(
        |(
            (error_500_rate, slow_down_503_rate, ambiguous_success_rate, applied_error_500_rate, silent_reply_rate),
            latency,
        )| {
            OpFaults {
                latency,
                error_500_rate,
                slow_down_503_rate,
                // Throttling is left to the scenario files: one more
                // dimension here costs the shrinker its small worlds.
                throttle_429_rate: 0.0,
                ambiguous_success_rate,
                applied_error_500_rate,
                silent_reply_rate,
            }
        },
    );
    (op.clone(), op, any::<bool>()).prop_map(|(read, write, conflict_409_on_overlap)| Faults {
        read: OpFaults { ambiguous_success_rate: 0.0, applied_error_500_rate: 0.0, silent_reply_rate: 0.0, ..read },
        write,
        conflict_409_on_overlap,
        ..Faults::default()
    })
}

fn drawn_strategy() -> impl Strategy<Value = Drawn> {
    let kind = prop::sample::select(vec![
        Kind::CrashRestart,
        Kind::PartitionFromStore,
        Kind::RepliesLost,
        Kind::Pause,
        Kind::StepBack,
        Kind::StopRestart,
        Kind::Stall,
        Kind::ForeignWrite,
    ]);
    (0u64..=80_000, kind, prop::option::of(0usize..5), 1_000u64..=20_000)
        .prop_map(|(at_ms, kind, target, span_ms)| Drawn { at_ms, kind, target, span_ms })
}

/// Turns a drawn fault into scheduled actions. A target beyond the node
/// count wraps around; the leader target heals every node's links.
fn expand(fault: &Drawn, nodes: &[NodeSpec], duration_ms: u64, schedule: &mut Vec<Scheduled>) {
    let at_ms = fault.at_ms.min(duration_ms.saturating_sub(1));
    let end_ms = at_ms + fault.span_ms;
    let node = fault.target.map_or(LEADER.to_string(), |index| nodes[index % nodes.len()].name.clone());
    let at = |at_ms: u64, action: Action| Scheduled { at_ms, action };
    // Undoes a fault on the link to the store at its end. `@leader` may name
    // another node by then, so that case undoes it for every node's link.
    let heal = |schedule: &mut Vec<Scheduled>, undo: fn(String) -> Action| {
        let names: Vec<String> = match fault.target {
            Some(_) => vec![node.clone()],
            None => nodes.iter().map(|node| node.name.clone()).collect(),
        };
        for name in names {
            schedule.push(at(end_ms, undo(name)));
        }
    };
    let repair: fn(String) -> Action = |a| Action::Repair { a, b: "s3".into() };
    match fault.kind {
        Kind::CrashRestart => {
            schedule.push(at(at_ms, Action::Crash { node: node.clone() }));
            if fault.target.is_some() {
                schedule.push(at(end_ms, Action::Restart { node }));
            }
        }
        Kind::PartitionFromStore => {
            schedule.push(at(at_ms, Action::Partition { a: node.clone(), b: "s3".into() }));
            heal(schedule, repair);
        }
        Kind::RepliesLost => {
            schedule.push(at(at_ms, Action::PartitionOneway { from: "s3".into(), to: node.clone() }));
            heal(schedule, repair);
        }
        // Every other pause is a host suspend instead: its clock that stops
        // in suspend stands still too, and its timers fire late.
        Kind::Pause if fault.span_ms % 2 == 1 => {
            schedule.push(at(at_ms, Action::Suspend { node, for_ms: fault.span_ms }))
        }
        Kind::Pause => schedule.push(at(at_ms, Action::Pause { node, for_ms: fault.span_ms })),
        Kind::StepBack => schedule.push(at(at_ms, Action::StepClock { node, by_ms: -(fault.span_ms as i64) * 10 })),
        Kind::StopRestart => {
            schedule.push(at(at_ms, Action::Stop { node: node.clone() }));
            if fault.target.is_some() {
                schedule.push(at(end_ms, Action::Restart { node }));
            }
        }
        Kind::ForeignWrite => {
            let ttl_ms = fault.span_ms.is_multiple_of(2).then_some(6_000);
            let record = ForeignRecord { generation: 1_000 + fault.span_ms, ttl_ms, ..ForeignRecord::default() };
            schedule.push(at(at_ms, Action::WriteRecord { record }));
        }
        Kind::Stall => {
            schedule.push(at(at_ms, Action::Hold { a: node.clone(), b: "s3".into() }));
            heal(schedule, |a| Action::Release { a, b: "s3".into() });
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::strategy::ValueTree;

    use super::*;

    #[test]
    fn a_provider_that_ignores_if_match_is_found_shrunk_and_reproduced() {
        // Strategy seed 4's first failure (4 nodes, 9 scheduled faults)
        // shrinks in both directions. Seed 0's (5 nodes, 4 faults) only
        // loses its faults: with followers reading once per renewal, no
        // four of its five nodes race into a double takeover at seed 0.
        let found = search(20, Some(ProviderMode::IgnoreIfMatch), 4).unwrap().expect("a violation");
        assert!(!found.findings.is_empty());
        // Shrinking leaves little: the mode breaks safety with at most a
        // couple of faults (each with the repairs that heal it) left.
        assert!(found.world.nodes.len() <= 3, "{:?}", found.world.nodes.len());
        let faults = found
            .world
            .schedule
            .iter()
            .filter(|entry| {
                !matches!(entry.action, Action::Repair { .. } | Action::Release { .. } | Action::Restart { .. })
            })
            .count();
        assert!(faults <= 2, "{:?}", found.world.schedule);
        let out = std::env::temp_dir().join(format!("hoplock-swarm-test-{}", std::process::id()));
        let path = save(&found, &out, Some(ProviderMode::IgnoreIfMatch), 4).unwrap();
        let scenario = Scenario::load(&path).unwrap();
        let report = runner::run(&scenario.world(), RUN_SEED).unwrap();
        assert_eq!(safety_findings(&report), found.findings);
        let verdict = scenario.verdict(std::slice::from_ref(&report));
        assert!(verdict.as_expected(), "{verdict:?}");
        let _ = std::fs::remove_dir_all(out);
    }

    #[test]
    fn drawn_worlds_are_runnable() {
        let mut runner = TestRunner::new_with_rng(Config::default(), TestRng::deterministic_rng(RngAlgorithm::ChaCha));
        for _ in 0..50 {
            let world = world_strategy(None).new_tree(&mut runner).unwrap().current();
            runner::validate(&world).unwrap();
        }
    }
}
