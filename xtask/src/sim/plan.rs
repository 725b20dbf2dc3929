//! Which runs a `cargo xtask sim` makes: every scenario's seeds (its
//! default range, `--seeds N`, one `--seed`, or a sweep's fresh seeds),
//! each scenario's first seed once more to check that it replays, and with
//! `--shard K/N` the deterministic slice of those runs that is this
//! process's share.
//!
//! The plan depends on nothing but the scenario files and the options, so
//! N processes on N machines, given the same checkout and options, split
//! the runs between them without talking to each other, and
//! `cargo xtask sim --merge` puts their reports back together into what one
//! process would have printed.

use std::collections::BTreeSet;

use super::{Named, Options};

/// Where sweep seeds start: far above every scenario's default range and
/// any plausible `--seeds N`, so a sweep only ever runs seeds no default
/// run has judged.
pub const SWEEP_FLOOR: u64 = 1 << 32;

/// `--shard K/N`: this process runs the K-th of N slices (K from 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// Which slice, from 1.
    pub index: u64,
    /// How many slices.
    pub count: u64,
}

impl Shard {
    /// Reads `K/N`.
    pub fn parse(text: &str) -> Result<Shard, String> {
        let bad = || format!("--shard takes K/N with 1 <= K <= N (say 3/16), not {text:?}");
        let (index, count) = text.split_once('/').ok_or_else(bad)?;
        let index: u64 = index.trim().parse().map_err(|_| bad())?;
        let count: u64 = count.trim().parse().map_err(|_| bad())?;
        if index == 0 || count == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// Whether the run at `position` in the whole plan is this shard's.
    /// Dealt out in turn, so each scenario's seeds spread over the shards
    /// and no shard gets all of one costly world's.
    pub fn owns(self, position: usize) -> bool {
        position as u64 % self.count == self.index - 1
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// `--sweep N`: N fresh seeds per scenario, drawn from one sweep seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sweep {
    /// Seeds per scenario.
    pub runs: u64,
    /// What every scenario's seeds are drawn from; printed, so the sweep
    /// can be made again (and must be the same in every shard).
    pub seed: u64,
}

impl Sweep {
    /// The sweep's seeds for the scenario called `name`, in ascending
    /// order: `runs` distinct seeds at or above [`SWEEP_FLOOR`]. Drawn from
    /// the sweep seed and the name alone, so adding a scenario changes no
    /// other scenario's seeds.
    pub fn seeds_for(&self, name: &str) -> Vec<u64> {
        let mut state = self.seed ^ fnv1a(name.as_bytes());
        let mut seeds = BTreeSet::new();
        while (seeds.len() as u64) < self.runs {
            seeds.insert(SWEEP_FLOOR + (hoplock::entropy::splitmix64(&mut state) >> 2));
        }
        seeds.into_iter().collect()
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// The seeds to run the scenario `named` with, in ascending order.
pub fn seeds(named: &Named, options: &Options) -> Vec<u64> {
    match (options.seed, options.seeds, options.sweep) {
        (Some(seed), _, _) => vec![seed],
        (None, Some(count), _) => (0..count).collect(),
        (None, None, Some(sweep)) => sweep.seeds_for(&named.name),
        (None, None, None) => (0..named.scenario.seeds).collect(),
    }
}

/// One run to make: a scenario's index, a seed, and whether it replays a
/// seed that is run anyway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    pub scenario: usize,
    pub seed: u64,
    pub replay: bool,
}

/// The runs of the whole plan that are this process's: every scenario's
/// seeds, each scenario's first seed again when `replay`, and of those only
/// this shard's with `--shard`. A replay goes with the run it replays, so
/// the shard that runs a seed also checks that it replays.
pub fn jobs(scenarios: &[Named], options: &Options, replay: bool) -> Vec<Job> {
    let mut jobs = Vec::new();
    let mut position = 0;
    for (scenario, named) in scenarios.iter().enumerate() {
        for (nth, seed) in seeds(named, options).into_iter().enumerate() {
            let ours = options.shard.is_none_or(|shard| shard.owns(position));
            position += 1;
            if !ours {
                continue;
            }
            jobs.push(Job { scenario, seed, replay: false });
            // Right after the seed it replays, so that a long world's
            // replay runs beside the rest rather than last and alone.
            if replay && nth == 0 {
                jobs.push(Job { scenario, seed, replay: true });
            }
        }
    }
    jobs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(name: &str, seeds: u64) -> Named {
        let text = format!(
            "description = \"d\"\nexpect = \"safe\"\nseeds = {seeds}\nduration_ms = 1000\n[[nodes]]\nname = \"a\"\n"
        );
        Named { name: name.into(), scenario: hoplock_sim::scenario::Scenario::parse(name, &text).unwrap() }
    }

    #[test]
    fn shards_parse_from_one() {
        assert_eq!(Shard::parse("3/16"), Ok(Shard { index: 3, count: 16 }));
        for bad in ["0/4", "5/4", "1/0", "1", "a/b", "1/2/3"] {
            assert!(Shard::parse(bad).unwrap_err().contains("--shard takes K/N"), "{bad}");
        }
    }

    #[test]
    fn the_shards_split_the_plan_between_them_exactly_once() {
        let scenarios = [named("a", 7), named("b", 1), named("c", 12)];
        let whole = jobs(&scenarios, &Options::default(), true);
        for count in 1..=5 {
            let mut union: Vec<Job> = Vec::new();
            for index in 1..=count {
                let options = Options { shard: Some(Shard { index, count }), ..Options::default() };
                let slice = jobs(&scenarios, &options, true);
                // Every shard gets a fair share of the 20 runs.
                let runs = slice.iter().filter(|job| !job.replay).count() as u64;
                assert!(runs.abs_diff(20 / count) <= 1, "{index}/{count} got {runs}");
                union.extend(slice);
            }
            union.sort_by_key(|job| (job.scenario, job.seed, job.replay));
            let mut expected = whole.clone();
            expected.sort_by_key(|job| (job.scenario, job.seed, job.replay));
            assert_eq!(union, expected, "{count} shards");
        }
    }

    #[test]
    fn a_sweep_draws_fresh_distinct_seeds_per_scenario_from_its_seed() {
        let sweep = Sweep { runs: 50, seed: 7 };
        let seeds = sweep.seeds_for("keyed-large");
        assert_eq!(seeds.len(), 50);
        assert!(seeds.windows(2).all(|pair| pair[0] < pair[1]));
        assert!(seeds.iter().all(|seed| *seed >= SWEEP_FLOOR));
        assert_eq!(seeds, sweep.seeds_for("keyed-large"));
        assert_ne!(seeds, sweep.seeds_for("keyed-churn"));
        assert_ne!(seeds, Sweep { runs: 50, seed: 8 }.seeds_for("keyed-large"));
    }
}
