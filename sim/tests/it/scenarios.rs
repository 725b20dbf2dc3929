//! The scenario files under `scenarios/`: every one loads, and every one
//! turns out as it expects on its first seeds. `cargo xtask sim` runs them
//! over all their seeds; this test keeps `cargo test` honest about them
//! too, and is what `cargo mutants` runs against the decision code.

use std::path::{Path, PathBuf};

use hoplock_sim::runner;
use hoplock_sim::scenario::{Expect, Scenario};

/// Seeds per scenario here: enough for every expectation the files state.
/// `cargo xtask mutants` raises it through `HOPLOCK_SCENARIO_SEEDS`, so a
/// mutant that only shows on a rarer interleaving is still caught.
const SEEDS: u64 = 2;

fn seeds() -> u64 {
    match std::env::var("HOPLOCK_SCENARIO_SEEDS") {
        Ok(text) => text.parse().unwrap_or_else(|_| panic!("HOPLOCK_SCENARIO_SEEDS={text:?} is not a whole number")),
        Err(_) => SEEDS,
    }
}

/// With `HOPLOCK_SCENARIO_FAIL_FAST=1` (which `cargo xtask mutants` sets)
/// the test exits at the first file that does not turn out as it expects,
/// so a caught mutant costs the time of that one file.
fn fail_fast() -> bool {
    std::env::var("HOPLOCK_SCENARIO_FAIL_FAST").as_deref() == Ok("1")
}

/// With `HOPLOCK_SCENARIO_WORLDS=keyed` (which `cargo xtask mutants --part
/// keyed` sets) only the keyed worlds run: the keyed writer's code runs in
/// no other world, so the others could not catch a change to it and would
/// only make each surviving mutant slower to judge.
fn keyed_only() -> bool {
    match std::env::var("HOPLOCK_SCENARIO_WORLDS").as_deref() {
        Ok("keyed") => true,
        Ok("all") | Err(_) => false,
        Ok(other) => panic!("HOPLOCK_SCENARIO_WORLDS={other:?} is neither \"keyed\" nor \"all\""),
    }
}

fn files() -> Vec<PathBuf> {
    let directory = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    hoplock_sim::scenario::files_in(&directory).expect("the scenarios directory")
}

#[test]
fn every_scenario_file_turns_out_as_it_expects() {
    let files = files();
    let seeds = seeds();
    let keyed_only = keyed_only();
    assert!(files.len() >= 20, "found only {} scenario files", files.len());
    let failures: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = files
            .iter()
            .map(|path| {
                scope.spawn(move || {
                    let scenario = Scenario::load(path).map_err(|err| err.to_string())?;
                    if keyed_only && scenario.keyed.is_none() {
                        return Ok(());
                    }
                    let reports = (0..seeds.min(scenario.seeds))
                        .map(|seed| runner::run(&scenario.world(), seed))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|err| format!("{}: {err}", path.display()))?;
                    let verdict = scenario.verdict(&reports);
                    if verdict.as_expected() {
                        Ok(())
                    } else {
                        let failure = format!("{}: expected {}, got {verdict:?}", path.display(), scenario.expect);
                        if fail_fast() {
                            // A mutant is caught by its first failure; the
                            // other files need not finish.
                            eprintln!("{failure}");
                            std::process::exit(101);
                        }
                        Err(failure)
                    }
                })
            })
            .collect();
        handles.into_iter().filter_map(|handle| handle.join().expect("no panic").err()).collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_broken_provider_mode_has_a_scenario_that_expects_trouble() {
    use hoplock_sim::fake_s3::ProviderMode;
    let scenarios: Vec<Scenario> = files().iter().map(|path| Scenario::load(path).unwrap()).collect();
    for mode in ProviderMode::ALL.into_iter().filter(|mode| !mode.is_safe()) {
        let covered = scenarios.iter().any(|scenario| scenario.s3.mode == mode);
        assert!(covered, "no scenario runs provider mode {mode}");
    }
    let expecting: usize =
        scenarios.iter().filter(|s| s.s3.mode != ProviderMode::Honest && s.expect != Expect::Safe).count();
    assert!(expecting >= 5, "only {expecting} provider scenarios expect a violation");
}

#[test]
fn a_replay_of_a_broken_provider_seed_reproduces_the_same_violation_at_the_same_time() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/provider-ignore-if-match.toml");
    let world = Scenario::load(&path).unwrap().world();
    let first = runner::run(&world, 5).unwrap();
    let again = runner::run(&world, 5).unwrap();
    assert!(!first.violations.is_empty());
    assert_eq!(first.violations, again.violations, "same properties, nodes, generations and times");
    assert_eq!(first.trace_hash, again.trace_hash);
    let other = runner::run(&world, 6).unwrap();
    assert_ne!(first.trace_hash, other.trace_hash, "another seed is another run");
}

/// A keyed world winds many keys down at one instant when a member leaves.
/// Their tasks must wake in an order fixed by the run, not by the runtime's
/// own random numbers, or the same seed gives another trace.
#[test]
fn a_keyed_world_gives_the_same_trace_for_the_same_seed() {
    use hoplock_sim::history::Event;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/keyed-churn.toml");
    let world = Scenario::load(&path).unwrap().world();
    for seed in [0, 1] {
        let first = runner::run(&world, seed).unwrap();
        let again = runner::run(&world, seed).unwrap();
        let stops = first.entries.iter().filter(|entry| matches!(entry.event, Event::KeyStopped { .. })).count();
        assert!(stops > 100, "seed {seed}: only {stops} keys stopped, so no leave wound many down at once");
        assert_eq!(first.trace_hash, again.trace_hash, "keyed-churn seed {seed} diverged");
        assert_eq!(first.entries, again.entries);
    }
}
