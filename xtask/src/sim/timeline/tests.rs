//! The timeline's layout: lanes, labels and what a run's history draws.

use hoplock_sim::history::{Entry, Event, Fault, StepReason};
use hoplock_sim::invariants::{Property, Violation};
use hoplock_sim::runner::{Report, Stats};
use hoplock_sim::world::{Action, NodeSpec, World};

use super::draw;

fn node(name: &str) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        owner: None,
        create_at_view: None,
        clock: Default::default(),
        elector: Default::default(),
        workload: Default::default(),
    }
}

fn world(names: &[&str], duration_ms: u64) -> World {
    World {
        nodes: names.iter().map(|name| node(name)).collect(),
        s3: Default::default(),
        schedule: Vec::new(),
        duration_ms,
        tick_ms: 10,
        network: Default::default(),
        keyed: None,
    }
}

fn at(ms: u64, node: &str, event: Event) -> Entry {
    Entry { at_us: ms * 1000, node: node.into(), event }
}

fn report(entries: Vec<Entry>, violations: Vec<Violation>) -> Report {
    Report { seed: 7, entries, trace_hash: 0, violations, stats: Stats::default() }
}

/// Draws into a fresh file under the temp directory and returns the SVG.
fn render(world: &World, report: &Report, name: &str) -> Result<String, String> {
    let path = std::env::temp_dir().join(format!("hoplock-timeline-{}-{name}.svg", std::process::id()));
    let drawn = draw(world, report, "test run", &path);
    let svg = std::fs::read_to_string(&path);
    let _ = std::fs::remove_file(&path);
    drawn?;
    svg.map_err(|err| err.to_string())
}

/// A scheduled action the runner applied.
fn applied(action: Action) -> Event {
    Event::Fault { action: Fault::Applied(action) }
}

#[test]
fn draws_lanes_generations_faults_and_violations() {
    let world = world(&["alpha", "beta"], 30_000);
    let entries = vec![
        at(0, "alpha", Event::Started { incarnation: 0 }),
        at(0, "beta", Event::Started { incarnation: 0 }),
        at(200, "alpha", Event::Acquired { generation: 1 }),
        at(6_000, "world", applied(Action::Partition { a: "alpha".into(), b: "s3".into() })),
        at(12_000, "beta", Event::Acquired { generation: 2 }),
        at(12_500, "alpha", Event::Downstream { generation: 1, accepted: false, highest_before: 2, sequence: 0 }),
        at(13_000, "alpha", Event::Stepped { generation: 1, reason: StepReason::Cancelled }),
        at(15_000, "world", applied(Action::Repair { a: "s3".into(), b: "alpha".into() })),
        at(20_000, "beta", Event::Crashed),
        at(25_000, "world", applied(Action::Restart { node: "beta".into() })),
        at(25_000, "beta", Event::Started { incarnation: 1 }),
    ];
    let violation = Violation {
        property: Property::NoBeliefOverlap,
        at_us: 12_000_000,
        nodes: vec!["alpha".into(), "beta".into()],
        generation: Some(2),
        detail: "alpha and beta both led".into(),
    };
    let svg = render(&world, &report(entries, vec![violation]), "full").expect("the timeline draws");
    for text in ["alpha", "beta", "g1", "g2", "seed 7", "partition alpha s3", "crash beta", "no-belief-overlap"] {
        assert!(svg.contains(text), "the SVG lacks {text:?}");
    }
    let red = "#D6191C";
    assert!(svg.contains(&format!("stroke=\"{red}\"")), "the SVG has no red line");
    assert!(svg.contains(&format!("fill=\"{red}\"")), "the violation's label is not red");
}

#[test]
fn odd_inputs_draw_or_fail_cleanly() {
    let empty = report(Vec::new(), Vec::new());
    assert!(render(&world(&[], 1_000), &empty, "no-nodes").is_err());
    assert!(render(&world(&["a"], 0), &empty, "no-time").is_err());
    assert!(render(&world(&["a"], 1_000), &empty, "empty").is_ok());

    // Names nobody declared, events past the end, out of order, an
    // unclosed partition and a violation naming only strangers.
    let entries = vec![
        at(5_000, "ghost", Event::Acquired { generation: 3 }),
        at(900, "a", Event::Paused { until_us: 99_000_000 }),
        at(100, "world", applied(Action::Hold { a: "a".into(), b: "ghost".into() })),
        at(200, "world", Event::Fault { action: Fault::Skipped(Action::Crash { node: "@leader".into() }) }),
        at(400, "a", Event::Crashed),
        at(400, "a", Event::Crashed),
    ];
    let violation = Violation {
        property: Property::Liveness,
        at_us: u64::MAX,
        nodes: vec!["ghost".into()],
        generation: None,
        detail: String::new(),
    };
    let svg = render(&world(&["a", "a"], 1_000), &report(entries, vec![violation]), "odd").expect("draws");
    assert!(svg.contains("liveness"));

    // Extreme time axes: a millisecond and as long as a u64 allows.
    let paused = vec![at(0, "a", Event::Paused { until_us: u64::MAX })];
    assert!(render(&world(&["a"], 1), &report(paused.clone(), Vec::new()), "short").is_ok());
    assert!(render(&world(&["a"], u64::MAX), &report(paused, Vec::new()), "long").is_ok());

    // A file that cannot be written is an error, not a panic.
    let unwritable = std::env::temp_dir().join("hoplock-timeline-no-such-directory").join("x.svg");
    assert!(draw(&world(&["a"], 1_000), &empty, "test run", &unwritable).is_err());
}
