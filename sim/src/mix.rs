//! Random worlds drawn from a seed: a few nodes with skewed and drifting
//! clocks, a store with latency, errors, conflicts and lost replies, and a
//! schedule of partitions, crashes and restarts.
//!
//! Used by the tests that sweep hundreds of seeds, and by the swarm search
//! for failing scenarios. The same seed always draws the same world.

use hoplock::entropy::splitmix64;

use crate::clocks::ClockSpec;
use crate::fake_s3::{Faults, Latency, OpFaults, ProviderMode};
use crate::world::{Action, NodeSpec, S3Spec, Scheduled, World};

/// How wild a mix may get.
#[derive(Clone, Debug)]
pub struct MixBounds {
    /// Nodes, at least and at most.
    pub nodes: (usize, usize),
    /// Largest wall-clock offset, in ms (either way).
    pub max_offset_ms: i64,
    /// Drift as a fraction of each node's drift bound (at most 1.0 stays
    /// within it).
    pub drift_share: f64,
    /// Simulated duration.
    pub duration_ms: u64,
    /// How many scheduled faults.
    pub faults: usize,
    /// The store's mode.
    pub mode: ProviderMode,
    /// Whether overlapping conditional writes get 409, as AWS may answer.
    /// That refusal also hides a store that is not atomic, so the tests of
    /// broken stores turn it off.
    pub conflict_409: bool,
}

impl Default for MixBounds {
    fn default() -> Self {
        MixBounds {
            nodes: (3, 5),
            max_offset_ms: 10 * 60 * 1000,
            drift_share: 1.0,
            duration_ms: 120_000,
            faults: 8,
            mode: ProviderMode::Honest,
            conflict_409: true,
        }
    }
}

/// A deterministic draw source.
struct Draw(u64);

impl Draw {
    fn below(&mut self, bound: u64) -> u64 {
        splitmix64(&mut self.0) % bound.max(1)
    }

    fn range_i64(&mut self, low: i64, high: i64) -> i64 {
        low + self.below((high - low + 1) as u64) as i64
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Draws a world from `seed` within `bounds`.
pub fn world(seed: u64, bounds: &MixBounds) -> World {
    let mut draw = Draw(seed ^ 0x6d69_785f_776f_726c);
    let count = bounds.nodes.0 + draw.below((bounds.nodes.1 - bounds.nodes.0 + 1) as u64) as usize;
    let nodes: Vec<NodeSpec> = (0..count)
        .map(|i| {
            let mut node = NodeSpec {
                owner: None,
                create_at_view: None,
                name: format!("n{i}"),
                clock: ClockSpec::default(),
                elector: Default::default(),
                workload: Default::default(),
            };
            let bound_ppb = (node.elector.drift_bound * 1e9 * bounds.drift_share) as i64;
            node.clock.offset_ms = draw.range_i64(-bounds.max_offset_ms, bounds.max_offset_ms);
            node.clock.drift_ppb = draw.range_i64(-bound_ppb, bound_ppb);
            // Some terms end by release rather than by loss.
            if draw.chance(30) {
                node.workload.release_after_ms = Some(5_000 + draw.below(20_000));
            }
            node
        })
        .collect();
    let op = |draw: &mut Draw, ambiguous: bool| OpFaults {
        latency: Latency::Exponential { mean_ms: 5 + draw.below(30), cap_ms: 800 + draw.below(1500) },
        error_500_rate: draw.below(4) as f64 / 100.0,
        slow_down_503_rate: draw.below(4) as f64 / 100.0,
        ambiguous_success_rate: if ambiguous { draw.below(5) as f64 / 100.0 } else { 0.0 },
        applied_error_500_rate: if ambiguous { draw.below(3) as f64 / 100.0 } else { 0.0 },
        silent_reply_rate: if ambiguous { draw.below(3) as f64 / 100.0 } else { 0.0 },
        throttle_429_rate: draw.below(4) as f64 / 100.0,
    };
    let faults = Faults {
        read: op(&mut draw, false),
        write: op(&mut draw, true),
        delete: op(&mut draw, true),
        conflict_409_on_overlap: bounds.conflict_409,
        ..Faults::default()
    };
    let names: Vec<String> = nodes.iter().map(|node| node.name.clone()).collect();
    let mut schedule = Vec::new();
    let mut crashed = vec![false; count];
    for _ in 0..bounds.faults {
        let at_ms = 5_000 + draw.below(bounds.duration_ms.saturating_sub(30_000).max(1));
        let i = draw.below(count as u64) as usize;
        let node = names[i].clone();
        let heal_at = at_ms + 1_000 + draw.below(15_000);
        match draw.below(4) {
            0 => {
                schedule.push(Scheduled { at_ms, action: Action::Partition { a: node.clone(), b: "s3".into() } });
                schedule.push(Scheduled { at_ms: heal_at, action: Action::Repair { a: node, b: "s3".into() } });
            }
            1 => {
                schedule
                    .push(Scheduled { at_ms, action: Action::PartitionOneway { from: "s3".into(), to: node.clone() } });
                schedule.push(Scheduled { at_ms: heal_at, action: Action::Repair { a: node, b: "s3".into() } });
            }
            _ if !crashed[i] => {
                crashed[i] = true;
                schedule.push(Scheduled { at_ms, action: Action::Crash { node: node.clone() } });
                schedule.push(Scheduled { at_ms: heal_at, action: Action::Restart { node } });
            }
            _ => {
                let peer = names[(i + 1) % count].clone();
                schedule.push(Scheduled { at_ms, action: Action::Partition { a: node.clone(), b: peer.clone() } });
                schedule.push(Scheduled { at_ms: heal_at, action: Action::Repair { a: node, b: peer } });
            }
        }
    }
    // Each node crashes at most once, so every restart follows its crash.
    schedule.sort_by_key(|s| s.at_ms);
    World {
        nodes,
        s3: S3Spec { mode: bounds.mode, faults },
        schedule,
        duration_ms: bounds.duration_ms,
        tick_ms: 10,
        network: Default::default(),
        keyed: None,
    }
}
