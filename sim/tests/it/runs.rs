//! Whole simulated runs: determinism, the honest world's safety under every
//! fault at once, the broken providers' violations, and the seed's policy
//! beside ours.

use std::collections::BTreeMap;

use hoplock_sim::fake_s3::ProviderMode;
use hoplock_sim::invariants::Property;
use hoplock_sim::mix::{self, MixBounds};
use hoplock_sim::runner::{self, Report};
use hoplock_sim::world::{Action, NodeSpec, PolicySpec, Scheduled, World};

fn run(world: &World, seed: u64) -> Report {
    runner::run(world, seed).unwrap_or_else(|err| panic!("seed {seed}: {err}"))
}

/// The replay command for a failing seed, as the runner prints it.
fn replay(what: &str, seed: u64) -> String {
    format!("{what} with seed {seed}: rerun with `cargo test -p hoplock-sim --test it` and this seed")
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    let mut bounds = MixBounds { duration_ms: 60_000, ..MixBounds::default() };
    for mode in [ProviderMode::Honest, ProviderMode::NonAtomic] {
        bounds.mode = mode;
        for seed in [1, 2, 3, 42] {
            let world = mix::world(seed, &bounds);
            let (first, second) = (run(&world, seed), run(&world, seed));
            assert_eq!(first.trace_hash, second.trace_hash, "{mode} seed {seed} diverged");
            assert_eq!(first.entries, second.entries);
            assert!(first.entries.len() > 100, "a run that does nothing proves nothing");
        }
        // Different seeds give different runs.
        let (a, b) = (run(&mix::world(5, &bounds), 5), run(&mix::world(6, &bounds), 6));
        assert_ne!(a.trace_hash, b.trace_hash);
    }
}

#[test]
fn an_honest_store_under_every_fault_at_once_never_breaks_safety() {
    let bounds = MixBounds::default();
    let mut faults: BTreeMap<String, usize> = BTreeMap::new();
    let (mut takeovers, mut simulated, mut cpu) = (0, 0.0, 0.0);
    let mut failures = Vec::new();
    for seed in 0..200 {
        let world = mix::world(seed, &bounds);
        let report = run(&world, seed);
        for (kind, count) in &report.stats.faults {
            *faults.entry(kind.clone()).or_default() += count;
        }
        takeovers += report.stats.takeovers;
        simulated += report.stats.simulated_secs;
        cpu += report.stats.cpu_secs;
        failures.extend(report.violations.iter().map(|v| format!("{v} ({})", replay("mix", seed))));
    }
    eprintln!("200 seeds: {takeovers} takeovers, faults fired {faults:?}");
    eprintln!("{simulated:.0} simulated seconds in {cpu:.1} CPU seconds ({:.0}x)", simulated / cpu);
    assert!(failures.is_empty(), "{} violations:\n{}", failures.len(), failures.join("\n"));
    // "No violation" must not come from faults that never fired.
    for kind in [
        "error-500",
        "slow-down-503",
        "conflict-409",
        "ambiguous-success",
        "partition",
        "partition-oneway",
        "crash",
        "restart",
    ] {
        let fired = faults.get(kind).copied().unwrap_or(0);
        assert!(fired >= 50, "{kind} fired only {fired} times");
    }
    assert!(takeovers >= 200, "only {takeovers} takeovers");
}

/// The first seed below 50 whose run breaks `property` under `mode`.
fn first_violation(mode: ProviderMode, property: Property) -> Option<(u64, String)> {
    let bounds = MixBounds { mode, duration_ms: 60_000, ..MixBounds::default() };
    (0..50).find_map(|seed| {
        let report = run(&mix::world(seed, &bounds), seed);
        report.violations.iter().find(|v| v.property == property).map(|v| (seed, v.to_string()))
    })
}

#[test]
fn a_store_that_ignores_if_none_match_elects_two_leaders_in_one_generation() {
    let found = first_violation(ProviderMode::IgnoreIfNoneMatch, Property::OneHolderPerGeneration);
    let (seed, violation) = found.expect("ignore-if-none-match went unnoticed for 50 seeds");
    eprintln!("caught at seed {seed}: {violation}");
}

#[test]
fn a_store_that_ignores_if_match_elects_two_leaders_in_one_generation() {
    let found = first_violation(ProviderMode::IgnoreIfMatch, Property::OneHolderPerGeneration);
    let (seed, violation) = found.expect("ignore-if-match went unnoticed for 50 seeds");
    eprintln!("caught at seed {seed}: {violation}");
}

#[test]
fn a_non_atomic_store_is_caught() {
    // AWS-style 409s on overlapping conditional writes would hide the
    // missing lock, so they are off here.
    let bounds =
        MixBounds { mode: ProviderMode::NonAtomic, duration_ms: 60_000, conflict_409: false, ..MixBounds::default() };
    // Two overlapping conditional writes that both win are exactly what the
    // linearizability checker exists to see.
    let found = (0..50).find_map(|seed| {
        let report = run(&mix::world(seed, &bounds), seed);
        report.violations.iter().find(|v| v.property == Property::Linearizable).map(|v| (seed, v.to_string()))
    });
    let (seed, violation) = found.expect("non-atomic went unnoticed for 50 seeds");
    eprintln!("caught at seed {seed}: {violation}");
}

fn offset_world(policy: PolicySpec) -> World {
    let nodes = (0..3)
        .map(|i| {
            let mut node = NodeSpec {
                owner: None,
                create_at_view: None,
                name: format!("n{i}"),
                clock: Default::default(),
                elector: Default::default(),
                workload: Default::default(),
            };
            node.elector.policy = policy;
            node
        })
        .collect::<Vec<_>>();
    let mut world = World {
        nodes,
        s3: Default::default(),
        schedule: Vec::new(),
        duration_ms: 60_000,
        tick_ms: 10,
        network: Default::default(),
        keyed: None,
    };
    // A contender whose wall clock is two minutes ahead: far beyond the
    // seed's (zero) margin, and irrelevant to ours.
    world.nodes[2].clock.offset_ms = 120_000;
    world.schedule.push(Scheduled { at_ms: 30_000, action: Action::Crash { node: "n2".into() } });
    world
}

#[test]
fn the_seeds_policy_overlaps_under_clock_offset_where_ours_does_not() {
    let (mut seed_overlaps, mut our_overlaps) = (0, 0);
    for seed in 0..8 {
        let theirs = run(&offset_world(PolicySpec::Seed), seed);
        let ours = run(&offset_world(PolicySpec::Ours), seed);
        seed_overlaps += theirs.violations.iter().filter(|v| v.property == Property::NoBeliefOverlap).count();
        our_overlaps += ours.violations.iter().filter(|v| v.property == Property::NoBeliefOverlap).count();
        assert!(ours.violations.is_empty(), "ours, seed {seed}: {:?}", ours.violations);
    }
    eprintln!("belief overlaps over 8 seeds: seed policy {seed_overlaps}, ours {our_overlaps}");
    assert!(seed_overlaps > 0, "the seed's policy was not caught");
    assert_eq!(our_overlaps, 0);
}

#[test]
fn simulation_speed_for_five_nodes_over_ten_minutes() {
    // Figures, not gates: speed is measured, not asserted, in tests.
    let quiet = MixBounds { nodes: (5, 5), duration_ms: 600_000, faults: 0, max_offset_ms: 0, ..MixBounds::default() };
    let mut quiet_world = mix::world(7, &quiet);
    quiet_world.s3 = Default::default();
    let stormy = MixBounds { nodes: (5, 5), duration_ms: 600_000, faults: 20, ..MixBounds::default() };
    for (name, world) in [("steady", quiet_world), ("every fault", mix::world(7, &stormy))] {
        let report = run(&world, 7);
        eprintln!(
            "5 nodes, 600 simulated seconds, {name}: {:.2} CPU seconds, {:.0} simulated seconds per CPU second, {} store requests",
            report.stats.cpu_secs,
            report.stats.simulated_secs / report.stats.cpu_secs,
            report.stats.s3_requests
        );
        assert!(report.violations.is_empty(), "{:?}", report.violations);
    }
}

/// A three-node world with default settings and the given schedule.
fn plain_world(schedule: Vec<Scheduled>) -> World {
    let nodes = (0..3)
        .map(|i| NodeSpec {
            owner: None,
            create_at_view: None,
            name: format!("n{i}"),
            clock: Default::default(),
            elector: Default::default(),
            workload: Default::default(),
        })
        .collect();
    World {
        nodes,
        s3: Default::default(),
        schedule,
        duration_ms: 60_000,
        tick_ms: 10,
        network: Default::default(),
        keyed: None,
    }
}

/// The node leading at `at_ms` in an undisturbed run of `world` (the same
/// seed makes the same node lead again).
fn leader_at(world: &World, seed: u64, at_ms: u64) -> String {
    let report = run(&World { schedule: Vec::new(), ..world.clone() }, seed);
    let terms = hoplock_sim::invariants::terms(&report.entries, world.duration_ms * 1000);
    terms
        .iter()
        .find(|t| t.start_us <= at_ms * 1000 && t.end_us > at_ms * 1000)
        .map(|t| t.node.clone())
        .expect("somebody leads")
}

/// An instant, in whole milliseconds, at which one of `node`'s downstream
/// writes is in flight in the unscheduled run of `world`: half a write's
/// latency before the first that lands after `after_ms`.
fn write_in_flight(world: &World, seed: u64, node: &str, after_ms: u64) -> u64 {
    let report = run(&World { schedule: Vec::new(), ..world.clone() }, seed);
    let latency_us =
        world.nodes.iter().find(|spec| spec.name == node).expect("the node").workload.write_latency_ms * 1000;
    let landed_us = report
        .entries
        .iter()
        .find(|e| {
            e.node == node
                && matches!(e.event, hoplock_sim::history::Event::Downstream { .. })
                && e.at_us > after_ms * 1000
        })
        .expect("the leader writes downstream")
        .at_us;
    (landed_us - latency_us / 2) / 1000
}

#[test]
fn a_paused_leaders_stale_writes_are_all_rejected_by_the_fence() {
    for seed in 0..4 {
        let mut base = plain_world(Vec::new());
        // Writes spend most of their period on the wire.
        for node in &mut base.nodes {
            node.workload.write_latency_ms = 450;
        }
        let leader = leader_at(&base, seed, 10_000);
        // Paused while one of its writes is on the wire: the run without
        // the pause is the same up to the pause, so a write it lands
        // after 10 s was in flight half its latency before.
        let at_ms = write_in_flight(&base, seed, &leader, 10_000);
        // Stopped for longer than the TTL (6 s), so another node takes over.
        let pause = Scheduled { at_ms, action: Action::Pause { node: leader.clone(), for_ms: 12_000 } };
        let world = World { schedule: vec![pause], ..base };
        let report = run(&world, seed);
        assert!(report.violations.is_empty(), "seed {seed}: {:?}", report.violations);
        let stale = report.stats.stale_writes_rejected;
        let newer = report.entries.iter().any(|e| {
            e.node != leader
                && matches!(e.event, hoplock_sim::history::Event::Acquired { .. })
                && e.at_us > at_ms * 1000
        });
        assert!(newer, "seed {seed}: nobody took over from the paused {leader}");
        assert!(stale > 0, "seed {seed}: the paused leader never wrote stale: the scenario tests nothing");
    }
}

#[test]
fn a_callback_that_ignores_cancellation_is_fenced_not_overlapping() {
    let mut world = plain_world(Vec::new());
    for node in &mut world.nodes {
        node.workload.ignore_cancellation_ms = 8_000;
    }
    let leader = leader_at(&world, 3, 10_000);
    world.schedule.push(Scheduled { at_ms: 10_000, action: Action::Partition { a: leader.clone(), b: "s3".into() } });
    world.schedule.push(Scheduled { at_ms: 30_000, action: Action::Repair { a: leader, b: "s3".into() } });
    let report = run(&world, 3);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert!(report.stats.stale_writes_rejected > 0, "the deposed callback's writes never reached the fence");
}

#[test]
fn clock_steps_held_messages_and_message_loss_break_nothing() {
    let mut world = plain_world(vec![
        Scheduled { at_ms: 8_000, action: Action::Hold { a: "n0".into(), b: "s3".into() } },
        Scheduled { at_ms: 11_000, action: Action::Release { a: "n0".into(), b: "s3".into() } },
        Scheduled { at_ms: 20_000, action: Action::Crash { node: "n1".into() } },
        Scheduled { at_ms: 26_000, action: Action::Restart { node: "n1".into() } },
    ]);
    for node in &mut world.nodes {
        // NTP steps of a minute, back and forth, on every clock.
        node.clock.steps = vec![
            hoplock_sim::clocks::ClockStep { at_ms: 5_000, by_ms: -60_000 },
            hoplock_sim::clocks::ClockStep { at_ms: 25_000, by_ms: 90_000 },
        ];
    }
    world.network.loss_rate = 0.01;
    world.network.loss_repair_rate = 0.5;
    for seed in 0..8 {
        let report = run(&world, seed);
        assert!(report.violations.is_empty(), "seed {seed}: {:?}", report.violations);
        assert!(report.stats.terms >= 1);
    }
}

/// Store requests from `node`'s processes that reached the store after
/// `after_us`.
fn requests_from(report: &Report, node: &str, after_us: u64) -> usize {
    report
        .entries
        .iter()
        .filter(|entry| entry.at_us > after_us)
        .filter(|entry| match &entry.event {
            hoplock_sim::history::Event::Store(op) => {
                op.client.as_deref().is_some_and(|client| client.starts_with(&format!("{node}#")))
            }
            _ => false,
        })
        .count()
}

#[test]
fn a_pause_does_not_heal_a_partition() {
    // n0 is cut off from the store for good at 5 s and paused from 10 s to
    // 12 s. The end of the pause must not reconnect it.
    let schedule = vec![
        Scheduled { at_ms: 5_000, action: Action::Partition { a: "n0".into(), b: "s3".into() } },
        Scheduled { at_ms: 10_000, action: Action::Pause { node: "n0".into(), for_ms: 2_000 } },
    ];
    let report = run(&plain_world(schedule), 1);
    assert_eq!(requests_from(&report, "n0", 5_500_000), 0, "the pause healed the partition");
    assert!(requests_from(&report, "n1", 12_000_000) > 0, "the others kept talking to the store");
}

#[test]
fn random_loss_does_not_heal_a_one_way_partition() {
    // n0's messages to the store are dropped from 5 s on; random loss breaks
    // and repairs links meanwhile, and a repair must not undo the partition.
    let schedule =
        vec![Scheduled { at_ms: 5_000, action: Action::PartitionOneway { from: "n0".into(), to: "s3".into() } }];
    let mut world = plain_world(schedule);
    world.network.loss_rate = 0.05;
    world.network.loss_repair_rate = 0.5;
    let report = run(&world, 2);
    assert_eq!(requests_from(&report, "n0", 5_500_000), 0, "random repair healed the one-way partition");
    assert!(requests_from(&report, "n1", 30_000_000) > 0);
}

#[test]
fn reads_retry_inside_their_deadline_as_in_production() {
    // Half of all reads are refused with 503 SlowDown. After a refused
    // read, the elector itself waits a poll interval (400 ms) before its next
    // one; a next read sooner than that is the backend's own retry.
    let mut world = plain_world(Vec::new());
    world.s3.faults.read.slow_down_503_rate = 0.5;
    let report = run(&world, 4);
    let mut last_refused: BTreeMap<String, u64> = BTreeMap::new();
    let mut retries = 0;
    for entry in &report.entries {
        let hoplock_sim::history::Event::Store(op) = &entry.event else { continue };
        let (Some(client), hoplock_sim::history::StoreOpKind::Read) = (op.client.as_deref(), op.op) else { continue };
        if let Some(refused_at) = last_refused.remove(client)
            && op.invoked_us.saturating_sub(refused_at) < 300_000
        {
            retries += 1;
        }
        if op.status == Some(503) {
            last_refused.insert(client.to_string(), op.ended_us);
        }
    }
    assert!(retries > 10, "only {retries} reads were retried by the backend");
    assert!(report.violations.is_empty(), "{:?}", report.violations);
}
