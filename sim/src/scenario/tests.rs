//! Scenario files: parsing, the errors malformed files get, and judging runs against expectations.

use super::*;

const MINIMAL: &str = "description = \"x\"\nexpect = \"safe\"\nduration_ms = 1000\n\n[[nodes]]\nname = \"a\"\n";

fn error(text: &str) -> ScenarioError {
    Scenario::parse("s.toml", text).unwrap_err()
}

#[test]
fn a_minimal_file_takes_the_defaults() {
    let scenario = Scenario::parse("s.toml", MINIMAL).unwrap();
    assert_eq!(scenario.seeds, DEFAULT_SEEDS);
    assert_eq!(scenario.tick_ms, 10);
    assert_eq!(scenario.world().nodes[0].elector.ttl_ms, 6_000);
}

#[test]
fn a_wrong_type_names_the_line_and_the_field_path() {
    let err = error(&format!("{MINIMAL}\n[nodes.elector]\nttl_ms = \"six\"\n"));
    assert_eq!(err.line, 9, "{err}");
    assert_eq!(err.field, "nodes[0].elector.ttl_ms", "{err}");
    assert!(err.message.contains("invalid type"), "{err}");
}

#[test]
fn an_unknown_field_is_refused_with_its_name() {
    let err = error(&MINIMAL.replace("name = \"a\"", "name = \"a\"\nttl = 5"));
    assert_eq!(err.line, 7, "{err}");
    assert!(err.message.contains("unknown field `ttl`"), "{err}");
}

#[test]
fn a_missing_field_and_bad_syntax_are_reported() {
    let err = error(&MINIMAL.replace("duration_ms = 1000\n", ""));
    assert!(err.message.contains("duration_ms"), "{err}");
    let err = error("description = \"x\nexpect = 1");
    assert_eq!(err.line, 1, "{err}");
    assert!(err.field.is_empty());
}

#[test]
fn work_that_returns_under_the_run_api_is_refused() {
    // run() has no voluntary release, so the history would record a
    // release the elector never made and judge a handover that cannot
    // happen.
    let text = format!("{MINIMAL}workload = {{ api = \"run\", release_after_ms = 4000 }}\n");
    let err = error(&text);
    assert!(err.field.ends_with("workload.release_after_ms") && err.message.contains("no voluntary release"), "{err}");
    let text = format!("{MINIMAL}workload = {{ api = \"lead\", release_after_ms = 4000 }}\n");
    Scenario::parse("s.toml", &text).unwrap();
}

#[test]
fn expectations_are_checked_by_name() {
    let err = error(&MINIMAL.replace("\"safe\"", "[\"two leaders\"]"));
    assert_eq!((err.line, err.field.as_str()), (2, "expect"), "{err}");
    assert!(err.message.contains("one-holder-per-generation"), "lists the known names: {err}");
    let err = error(&MINIMAL.replace("\"safe\"", "\"fine\""));
    assert!(err.message.contains("\"safe\""), "{err}");
    let err = error(&MINIMAL.replace("\"safe\"", "[]"));
    assert!(err.message.contains("accept anything"), "{err}");
}

#[test]
fn a_schedule_naming_an_unknown_node_or_mode_is_refused() {
    let err = error(&format!("{MINIMAL}\n[[schedule]]\nat_ms = 5\naction = \"crash\"\nnode = \"zz\"\n"));
    assert_eq!(err.field, "schedule", "{err}");
    assert_eq!(err.line, 8, "{err}");
    assert!(err.message.contains("\"zz\""), "{err}");
    let err = error(&format!("{MINIMAL}\n[[schedule]]\nat_ms = 5\naction = \"explode\"\nnode = \"a\"\n"));
    assert!(err.message.contains("explode"), "{err}");
    let err = error(&format!("{MINIMAL}\n[[schedule]]\nat_ms = 5\naction = \"pause\"\nnode = \"a\"\nfor = 3\n"));
    assert_eq!(err.field, "schedule[0]", "{err}");
    assert!(err.message.contains("unknown field `for`"), "{err}");
    let err = error(&format!("{MINIMAL}\n[[schedule]]\nat_ms = 5\naction = \"crash\"\nnode = \"s3\"\n"));
    assert!(err.message.contains("applies to nodes"), "{err}");
    let err = error(&format!("{MINIMAL}\n[s3]\nmode = \"garage\"\n"));
    assert_eq!(err.field, "s3.mode", "{err}");
    assert!(err.message.contains("ignore-if-none-match"), "{err}");
}

#[test]
fn a_membership_edit_takes_exactly_one_form_and_a_known_member() {
    let keyed = format!("{MINIMAL}\n[keyed]\nkeys = 4\n");
    let edit = |fields: &str| format!("{keyed}\n[[schedule]]\nat_ms = 5\naction = \"write-members\"\n{fields}");
    for fields in ["", "raw = \"x\"\nviews_back = 1\n", "views_back = 1\ndrop_member = \"a\"\n"] {
        let err = error(&edit(fields));
        assert_eq!(err.field, "schedule", "{err}");
        assert!(err.message.contains("exactly one of raw, views_back, drop_member and reincarnate_member"), "{err}");
    }
    for field in ["drop_member", "reincarnate_member"] {
        let err = error(&edit(&format!("{field} = \"zz\"\n")));
        assert!(err.message.contains("\"zz\", which is no member's id"), "{err}");
        Scenario::parse("s.toml", &edit(&format!("{field} = \"a\"\n"))).unwrap();
    }
}

#[test]
fn zero_seeds_and_zero_ttl_are_refused() {
    let err = error(&MINIMAL.replace("expect", "seeds = 0\nexpect"));
    assert_eq!((err.line, err.field.as_str()), (2, "seeds"), "{err}");
    let err = error(&format!("{MINIMAL}\n[nodes.elector]\nttl_ms = 0\n"));
    assert_eq!((err.line, err.field.as_str()), (9, "nodes[0].elector.ttl_ms"), "{err}");
}

#[test]
fn fenced_writes_too_frequent_too_slow_or_too_many_are_refused() {
    let keyed = |extra: &str| format!("{MINIMAL}\n[keyed]\nkeys = 10\n{extra}\n");
    for bad in ["fenced_every_ms = 0", "fenced_latency_ms = 9223372036854775807"] {
        let err = error(&keyed(bad));
        assert_eq!(err.field, "keyed", "{bad}: {err}");
    }
    let week = keyed("fenced_every_ms = 1").replace("duration_ms = 1000", "duration_ms = 604800000");
    let err = error(&week);
    assert_eq!(err.field, "keyed.fenced_every_ms", "{err}");
    assert!(err.message.contains("fenced_keys"), "{err}");
    assert!(Scenario::parse("s.toml", &keyed("fenced_every_ms = 1")).is_ok());
}

#[test]
fn a_stop_margin_shorter_than_the_tick_is_refused() {
    let err = error(&format!("{MINIMAL}\n[nodes.elector]\nstop_margin_ms = 5\n"));
    assert_eq!((err.line, err.field.as_str()), (9, "nodes[0].elector.stop_margin_ms"), "{err}");
    assert!(err.message.contains("tick"), "{err}");
    assert!(Scenario::parse("s.toml", &format!("{MINIMAL}\n[nodes.elector]\nstop_margin_ms = 10\n")).is_ok());
}

#[test]
fn a_scenario_survives_a_round_trip_through_toml() {
    let mut scenario = Scenario::parse("s.toml", MINIMAL).unwrap();
    scenario.expect = Expect::Findings(vec![Finding::Violation(Property::NoBeliefOverlap)]);
    scenario.schedule.push(Scheduled { at_ms: 5, action: crate::world::Action::Crash { node: "a".into() } });
    let text = scenario.to_toml().unwrap();
    assert_eq!(Scenario::parse("again.toml", &text).unwrap(), scenario, "{text}");
}

#[test]
fn the_verdict_wants_every_expected_finding_and_no_other_violation() {
    let scenario = Scenario::parse("s.toml", MINIMAL).unwrap();
    let verdict = Verdict { found: BTreeMap::new(), ..Verdict::default() };
    assert!(verdict.as_expected());
    let expecting = Scenario {
        expect: Expect::Findings(vec![Finding::StaleWritesRejected]),
        tolerate: vec![Finding::Violation(Property::Liveness)],
        ..scenario
    };
    assert_eq!(expecting.verdict(&[]).missing, vec![Finding::StaleWritesRejected]);
}

#[test]
fn a_handover_slower_than_the_bound_is_unexpected() {
    let report = |seed, gaps_ms: &[u64]| Report {
        seed,
        entries: Vec::new(),
        trace_hash: 0,
        violations: Vec::new(),
        stats: crate::runner::Stats {
            failover_gaps_us: gaps_ms.iter().map(|ms| ms * 1000).collect(),
            ..Default::default()
        },
    };
    let reports = [report(0, &[300, 900]), report(1, &[6100, 200]), report(2, &[])];
    let unbounded = Scenario::parse("s.toml", MINIMAL).unwrap();
    assert!(unbounded.verdict(&reports).as_expected());
    let bounded = Scenario { max_failover_ms: Some(1000), ..unbounded };
    let verdict = bounded.verdict(&reports);
    assert_eq!(verdict.slow_failovers, vec![(1, 6100.0)]);
    assert!(!verdict.as_expected());
    assert_eq!(verdict.replay_seed(), Some(1));
    let text = format!("max_failover_ms = 1000\n{MINIMAL}");
    assert_eq!(Scenario::parse("s.toml", &text).unwrap().max_failover_ms, Some(1000));
}

#[test]
fn a_keyed_handoff_slower_than_its_bound_is_unexpected() {
    let report = |seed, leaves_ms: &[u64], crashes_ms: &[u64], joins_ms: &[u64], creations_ms: &[u64]| Report {
        seed,
        entries: Vec::new(),
        trace_hash: 0,
        violations: Vec::new(),
        stats: crate::runner::Stats {
            leave_handoffs_us: leaves_ms.iter().map(|ms| ms * 1000).collect(),
            crash_handoffs_us: crashes_ms.iter().map(|ms| ms * 1000).collect(),
            join_handoffs_us: joins_ms.iter().map(|ms| ms * 1000).collect(),
            create_handoffs_us: creations_ms.iter().map(|ms| ms * 1000).collect(),
            ..Default::default()
        },
    };
    let reports = [
        report(0, &[800], &[6_500], &[900], &[6_100]),
        report(1, &[2_600], &[6_600], &[1_000], &[6_100]),
        report(2, &[900], &[11_000], &[1_000], &[6_100]),
        report(3, &[900], &[6_000], &[1_900], &[6_100]),
        report(4, &[900], &[6_000], &[1_000], &[7_300]),
    ];
    let text = format!(
        "max_leave_handoff_ms = 2300\nmax_crash_handoff_ms = 10200\nmax_join_handoff_ms = 1500\n\
         max_create_handoff_ms = 6500\n{MINIMAL}"
    );
    let bounded = Scenario::parse("s.toml", &text).unwrap();
    let verdict = bounded.verdict(&reports);
    assert_eq!(verdict.slow_leaves, vec![(1, 2600.0)]);
    assert_eq!(verdict.slow_crashes, vec![(2, 11000.0)]);
    assert_eq!(verdict.slow_joins, vec![(3, 1900.0)]);
    assert_eq!(verdict.slow_creations, vec![(4, 7300.0)]);
    assert!(!verdict.as_expected());
    assert_eq!(verdict.replay_seed(), Some(1));
}

#[test]
fn an_aborted_stop_over_the_bound_is_unexpected() {
    let report = |seed, aborted_stops| Report {
        seed,
        entries: Vec::new(),
        trace_hash: 0,
        violations: Vec::new(),
        stats: crate::runner::Stats { aborted_stops, ..Default::default() },
    };
    let reports = [report(0, 0), report(1, 3)];
    let unbounded = Scenario::parse("s.toml", MINIMAL).unwrap();
    assert!(unbounded.verdict(&reports).as_expected());
    let bounded = Scenario::parse("s.toml", &format!("max_aborted_stops = 0\n{MINIMAL}")).unwrap();
    let verdict = bounded.verdict(&reports);
    assert_eq!(verdict.aborted_stops, vec![(1, 3)]);
    assert!(!verdict.as_expected());
    assert_eq!(verdict.replay_seed(), Some(1));
}
