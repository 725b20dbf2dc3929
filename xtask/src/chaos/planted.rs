//! `cargo xtask chaos --planted NAME`: the worlds of real processes that
//! can show one of the library's deliberate bugs, run with a `hoplock`
//! binary built with the `planted` feature and `HOPLOCK_PLANTED=NAME`.
//! Each world claimed for the bug runs four times; the bug is caught when
//! at least three of the four runs break the property the claim names (the
//! rule the bug breaks), so that a run that fails for another reason does
//! not count as a catch.
//!
//! Which bugs real processes can show, and which they cannot, is said
//! once here ([`CLAIMS`], [`NOT_SHOWN`]); `--planted all` runs every claim.

use std::path::{Path, PathBuf};

use hoplock_sim::invariants::Property;

use super::{Options, Plan, Store};
use crate::sim::table::columns;

/// Runs of a world per claimed bug.
pub const RUNS: u64 = 4;

/// Of those, how many must break a safety property.
pub const CAUGHT_IN: usize = 3;

/// A bug a world of real processes shows, and why it shows there.
pub struct Claim {
    /// The bug's name, as `HOPLOCK_PLANTED` takes it.
    pub bug: &'static str,
    /// The world under `scenarios/chaos/` that shows it.
    pub world: &'static str,
    /// What the world does that the bug gets wrong.
    pub why: &'static str,
    /// The properties whose violation catches it: the rule the bug breaks,
    /// and where one breach shows as another (a generation taken twice is
    /// also a token that went down), that one too.
    pub caught_by: &'static [Property],
}

/// Every bug the chaos worlds claim to catch.
pub const CLAIMS: &[Claim] = &[
    Claim {
        bug: "reused-generation",
        world: "leader-crash",
        why: "a crashed leader's lease is taken over involuntarily, writing the generation it held",
        caught_by: &[Property::OneHolderPerGeneration],
    },
    Claim {
        bug: "release-deletes",
        world: "graceful-handoff",
        why: "commands that finish release the lease; the next leader starts again at generation 1",
        caught_by: &[Property::MonotoneFencing, Property::OneHolderPerGeneration],
    },
    Claim {
        bug: "lead-while-unreachable",
        world: "leader-partitioned",
        why: "the leader's renewals fail for longer than its TTL while the others take over",
        caught_by: &[Property::NoBeliefOverlap],
    },
    Claim {
        bug: "trust-expires-at",
        world: "contender-clock-ahead",
        why: "a contender whose wall clock (libfaketime) is minutes ahead reads every record as expired",
        caught_by: &[Property::NoBeliefOverlap],
    },
    Claim {
        bug: "skip-lock-delay",
        world: "leader-crash",
        why: "takeovers after a crash must wait the 1 s lock-delay before the command starts",
        caught_by: &[Property::LockDelay],
    },
    Claim {
        bug: "release-before-work-stops",
        world: "rolling-restart",
        why: "SIGTERM reaches a command that ignores it; the lease goes before the command has stopped",
        caught_by: &[Property::ReleaseAfterWork],
    },
    Claim {
        bug: "reuse-record-bytes",
        world: "leader-partitioned",
        why: "followers wait for a record that changes; renewals that write the same bytes look dead, and with \
              no lock-delay the taker acts at once",
        caught_by: &[Property::NoBeliefOverlap],
    },
    Claim {
        bug: "fixed-incarnation",
        world: "redeploy-new-copy-first",
        why: "a new copy of the leader starts under its owner name while the old one still leads, and takes the \
              old one's term as its own",
        caught_by: &[Property::NoBeliefOverlap, Property::OneHolderPerGeneration],
    },
];

/// The planted bugs no world of real processes can show, and why.
pub const NOT_SHOWN: &[(&str, &str)] = &[
    (
        "foreign-release-ends-wait",
        "needs an operator's reset written over a live holder; the chaos worlds write nothing themselves",
    ),
    (
        "act-on-unknown-outcome",
        "needs a contested takeover whose reply is lost while another contender's record lands: a timing real runs reach too rarely to catch in 3 of 4",
    ),
    (
        "wall-clock-deadline",
        "needs a running process's wall clock stepped back mid-term; libfaketime fixes the offset at start",
    ),
    (
        "timer-stops-in-suspend",
        "needs a host suspended with its monotonic clock stopped; SIGSTOP stops a process, not its clock",
    ),
    ("lagging-reads", "a liveness bug: real runs' handover times vary more than the lag it adds"),
    ("adopt-before-stop", "keyed: `hoplock run` runs an elector, not keyed members"),
    ("start-before-active", "keyed"),
    ("round-from-counter", "keyed"),
    ("reuse-entry", "keyed"),
    ("create-without-floor", "keyed"),
    ("resume-older-view", "keyed"),
    ("skip-keyed-lock-delay", "keyed"),
    ("lease-from-ownership", "keyed"),
    ("watchdog-asleep", "keyed"),
    ("shared-term-watch", "a determinism bug: only a replay of the simulator shows it"),
];

/// Runs the claims for `bug` (`all`: every claim) and says which were
/// caught; fails unless every one was.
pub fn run(
    root: &Path,
    out: &Path,
    plans: &[Plan],
    bug: &str,
    options: &Options,
    faketime: Option<PathBuf>,
) -> Result<(), String> {
    // With --scenario, only the claims of the worlds asked for.
    let claims: Vec<&Claim> = CLAIMS
        .iter()
        .filter(|claim| bug == "all" || claim.bug == bug)
        .filter(|claim| options.scenarios.is_empty() || plans.iter().any(|plan| plan.name == claim.world))
        .collect();
    if claims.is_empty() {
        if let Some((_, why)) = NOT_SHOWN.iter().find(|(name, _)| *name == bug) {
            return Err(format!("no chaos world shows planted bug {bug}: {why}"));
        }
        let known: Vec<&str> = CLAIMS.iter().map(|claim| claim.bug).collect();
        return Err(format!("no chaos world claims planted bug {bug:?}; claimed: {}", known.join(", ")));
    }
    let hoplock = super::build_binary(root, out, true)?;
    let runtime = super::runtime()?;
    let launch = super::launch(hoplock, faketime)?;
    let (store, server) = Store::start(root, options.fake)?;
    // Every run of every claim, `--jobs` at a time.
    let mut work = Vec::new();
    for (index, claim) in claims.iter().enumerate() {
        let plan = plans.iter().find(|plan| plan.name == claim.world).ok_or_else(|| {
            format!("planted bug {} is claimed by world {}, which is not among those run", claim.bug, claim.world)
        })?;
        for k in 0..RUNS {
            work.push((index, plan.clone(), options.seed.saturating_add(k)));
        }
    }
    let results = runtime.block_on(async {
        let semaphore = std::sync::Arc::new(tokio::sync::Semaphore::new(options.jobs));
        let mut tasks = tokio::task::JoinSet::new();
        for (index, plan, seed) in work {
            let launch = super::Launch { planted: Some(claims[index].bug.to_string()), ..launch.clone() };
            let (store, semaphore) = (store.clone(), semaphore.clone());
            tasks.spawn(async move {
                let _permit = semaphore.acquire_owned().await;
                (index, seed, super::run_one(&plan, seed, &store, &launch).await)
            });
        }
        let mut results = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            results.push(joined.map_err(|err| format!("a chaos run panicked: {err}"))?);
        }
        Ok::<_, String>(results)
    });
    drop(server);
    let mut results = results?;
    results.sort_by_key(|(index, seed, _)| (*index, *seed));
    let mut rows = Vec::new();
    let mut missed = Vec::new();
    for (index, claim) in claims.iter().enumerate() {
        let mut caught = 0;
        let mut by: Vec<Property> = Vec::new();
        for (_, seed, outcome) in results.iter().filter(|(i, _, _)| *i == index) {
            let outcome = outcome.as_ref().map_err(Clone::clone)?;
            let safety: Vec<Property> = outcome
                .report
                .violations
                .iter()
                .map(|violation| violation.property)
                .filter(|property| property.is_safety())
                .collect();
            let hit = safety.iter().any(|property| claim.caught_by.contains(property));
            eprintln!(
                "==> {} in {} seed {seed}: {} safety violation(s){}",
                claim.bug,
                claim.world,
                safety.len(),
                if hit { "" } else { ", none of those it is caught by" }
            );
            if hit {
                caught += 1;
            }
            by.extend(safety);
        }
        by.sort();
        by.dedup();
        if caught < CAUGHT_IN {
            missed.push(claim.bug);
            // The runs that missed it, kept to show why.
            let plan = plans.iter().find(|plan| plan.name == claim.world);
            let missed_runs: Vec<(u64, super::run::Outcome)> = results
                .iter()
                .filter(|(i, _, _)| *i == index)
                .filter_map(|(_, seed, outcome)| outcome.as_ref().ok().map(|outcome| (*seed, outcome.clone())))
                .filter(|(_, outcome)| {
                    !outcome.report.violations.iter().any(|violation| claim.caught_by.contains(&violation.property))
                })
                .collect();
            if let Some(plan) = plan {
                let rerun = format!("cargo xtask chaos --planted {} --scenario {}", claim.bug, claim.world);
                let kept = out.join(format!("planted-{}", claim.bug));
                eprint!("{}", super::report::keep_failures(&kept, plan, &missed_runs, &rerun));
            }
        }
        let by: Vec<&str> = by.iter().map(|property| property.name()).collect();
        let caught_by: Vec<&str> = claim.caught_by.iter().map(|property| property.name()).collect();
        rows.push(vec![
            claim.bug.to_string(),
            claim.world.to_string(),
            format!("{caught}/{RUNS}"),
            caught_by.join(" or "),
            if by.is_empty() { "-".into() } else { by.join(", ") },
            claim.why.to_string(),
        ]);
    }
    let header = [
        "planted bug",
        "world",
        "caught",
        "caught by",
        "every safety violation seen",
        "what the world does that the bug gets wrong",
    ]
    .map(String::from);
    print!("{}", columns(&header, &rows));
    if missed.is_empty() {
        Ok(())
    } else {
        Err(format!("caught in fewer than {CAUGHT_IN} of {RUNS} runs: {}", missed.join(", ")))
    }
}
