//! Property tests of the elector on the memory backend: random latencies,
//! lost replies, partitions, crashes and restarts, clock offsets of up to
//! ten minutes and drifts within the bound ρ.
//!
//! Properties, checked after every run:
//! - at most one elector ever acquires a given generation;
//! - the generations each elector acquires strictly increase;
//! - no two electors believe they lead at the same (tokio) instant.
//!
//! The same world run with the seed's wall-clock policy must break the last
//! property, which shows the checks can fail.

#![allow(clippy::disallowed_methods)] // Tokio's paused time stands for real time here.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use hoplock::backend::memory::MemoryBackend;
use hoplock::backend::{Backend, BackendError, Stored, Version};
use hoplock::clock::DriftingClock;
use hoplock::elector::Policy;
use hoplock::entropy::{SeededEntropy, splitmix64};
use hoplock::lease::LeaseRecord;
use hoplock::{Elector, Generation};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(2);
const RHO: f64 = 1e-3;
const RUN: Duration = Duration::from_secs(60);

#[derive(Clone, Debug)]
struct World {
    seed: u64,
    /// Per node: wall-clock offset (s) and drift (ppb, within ρ).
    clocks: Vec<(i64, i64)>,
    latency_max_ms: u64,
    lose_reply_percent: u64,
    /// (node, start ms, length ms): the node cannot reach the store.
    partitions: Vec<(usize, u64, u64)>,
    /// (node, at ms, down for ms): the node crashes and restarts later.
    crashes: Vec<(usize, u64, u64)>,
}

fn world(nodes: usize) -> impl Strategy<Value = World> {
    let rho_ppb = (RHO * 1e9) as i64;
    (
        any::<u64>(),
        prop::collection::vec((-600i64..=600, -rho_ppb..=rho_ppb), nodes),
        0u64..400,
        0u64..15,
        prop::collection::vec((0..nodes, 0u64..55_000, 100u64..6_000), 0..6),
        prop::collection::vec((0..nodes, 0u64..55_000, 0u64..5_000), 0..4),
    )
        .prop_map(|(seed, clocks, latency_max_ms, lose_reply_percent, partitions, crashes)| World {
            seed,
            clocks,
            latency_max_ms,
            lose_reply_percent,
            partitions,
            crashes,
        })
}

/// The memory store as seen from one elector incarnation over a bad
/// network: latency on both legs, replies lost after the write applied, and
/// no answer at all while partitioned or after the process died.
#[derive(Clone)]
struct Network {
    store: MemoryBackend,
    rng: Arc<Mutex<u64>>,
    origin: Instant,
    latency_max_ms: u64,
    lose_reply_percent: u64,
    partitions: Arc<Vec<(Duration, Duration)>>,
    dead: Arc<AtomicBool>,
}

impl Network {
    fn draw(&self, below: u64) -> u64 {
        splitmix64(&mut self.rng.lock().unwrap()) % below.max(1)
    }

    fn cut_off(&self) -> bool {
        let now = self.origin.elapsed();
        self.dead.load(Ordering::Relaxed) || self.partitions.iter().any(|(start, end)| (*start..*end).contains(&now))
    }

    async fn call<T, F: Future<Output = Result<T, BackendError>>>(
        &self,
        op: F,
        is_write: bool,
    ) -> Result<T, BackendError> {
        tokio::time::sleep(Duration::from_millis(self.draw(self.latency_max_ms + 1) / 2)).await;
        if self.cut_off() {
            return std::future::pending().await;
        }
        let result = op.await;
        let lose = is_write && self.draw(100) < self.lose_reply_percent;
        tokio::time::sleep(Duration::from_millis(self.draw(self.latency_max_ms + 1) / 2)).await;
        if lose || self.cut_off() {
            return std::future::pending().await;
        }
        result
    }
}

impl Backend for Network {
    async fn read(&self) -> Result<Stored, BackendError> {
        self.call(self.store.read(), false).await
    }

    async fn write(&self, expected: Option<&Version>, record: &LeaseRecord) -> Result<Version, BackendError> {
        self.call(self.store.write(expected, record), true).await
    }

    async fn delete(&self, expected: &Version) -> Result<(), BackendError> {
        self.call(self.store.delete(expected), true).await
    }
}

/// One term as the leader-only work saw it.
#[derive(Clone, Debug)]
struct Belief {
    /// Which elector: node and incarnation number.
    holder: (usize, usize),
    generation: Generation,
    start: Duration,
    end: Option<Duration>,
}

/// Records the end of a belief when the work stops, including when its
/// task is aborted by a crash.
struct EndOnDrop {
    beliefs: Arc<Mutex<Vec<Belief>>>,
    index: usize,
    origin: Instant,
}

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        if let Ok(mut beliefs) = self.beliefs.lock() {
            beliefs[self.index].end.get_or_insert(self.origin.elapsed());
        }
    }
}

fn simulate(world: &World, policy: Policy) -> Vec<Belief> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
    runtime.block_on(async {
        let store = MemoryBackend::new();
        let origin = Instant::now();
        let beliefs = Arc::new(Mutex::new(Vec::new()));
        let nodes = world.clocks.len();
        let mut slots = Vec::new();
        for node in 0..nodes {
            let world = world.clone();
            let store = store.clone();
            let beliefs = beliefs.clone();
            slots.push(tokio::spawn(run_node(node, world, store, beliefs, origin, policy)));
        }
        tokio::time::sleep(RUN).await;
        for slot in &slots {
            slot.abort();
        }
        tokio::task::yield_now().await;
        let mut beliefs = beliefs.lock().unwrap().clone();
        for belief in &mut beliefs {
            belief.end.get_or_insert(RUN);
        }
        beliefs
    })
}

/// Runs one node: incarnation after incarnation, each campaigning and
/// leading repeatedly until its crash time.
async fn run_node(
    node: usize,
    world: World,
    store: MemoryBackend,
    beliefs: Arc<Mutex<Vec<Belief>>>,
    origin: Instant,
    policy: Policy,
) {
    let (offset_secs, drift_ppb) = world.clocks[node];
    let mut crashes: Vec<(u64, u64)> =
        world.crashes.iter().filter(|c| c.0 == node).map(|&(_, at, down)| (at, down)).collect();
    crashes.sort_unstable();
    let partitions: Arc<Vec<(Duration, Duration)>> = Arc::new(
        world
            .partitions
            .iter()
            .filter(|p| p.0 == node)
            .map(|&(_, start, len)| (Duration::from_millis(start), Duration::from_millis(start + len)))
            .collect(),
    );
    let rng = Arc::new(Mutex::new(world.seed ^ (node as u64) << 32));
    for incarnation in 0.. {
        let dead = Arc::new(AtomicBool::new(false));
        let network = Network {
            store: store.clone(),
            rng: rng.clone(),
            origin,
            latency_max_ms: world.latency_max_ms,
            lose_reply_percent: world.lose_reply_percent,
            partitions: partitions.clone(),
            dead: dead.clone(),
        };
        let wall =
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000) + origin.elapsed() + Duration::from_secs(600);
        let wall = if offset_secs >= 0 {
            wall + Duration::from_secs(offset_secs as u64)
        } else {
            wall - Duration::from_secs(offset_secs.unsigned_abs())
        };
        let seed = world.seed.wrapping_add((node * 1000 + incarnation) as u64);
        let elector = Elector::builder(network)
            .owner(format!("node-{node}"))
            .ttl(TTL)
            .drift_bound(RHO)
            .policy(policy)
            .clock(Arc::new(DriftingClock::new(wall, drift_ppb)))
            .entropy(Arc::new(SeededEntropy::new(seed)))
            .build()
            .unwrap();
        let life = {
            let beliefs = beliefs.clone();
            let rng = rng.clone();
            async move {
                loop {
                    let hold = Duration::from_millis(splitmix64(&mut rng.lock().unwrap()) % 8_000);
                    let beliefs = beliefs.clone();
                    let _ = elector
                        .lead(|ctx, lease| async move {
                            let index = {
                                let mut all = beliefs.lock().unwrap();
                                all.push(Belief {
                                    holder: (node, incarnation),
                                    generation: lease.generation,
                                    start: origin.elapsed(),
                                    end: None,
                                });
                                all.len() - 1
                            };
                            let _end = EndOnDrop { beliefs: beliefs.clone(), index, origin };
                            tokio::select! {
                                biased;
                                _ = ctx.cancelled() => {}
                                _ = tokio::time::sleep(hold) => {}
                            }
                        })
                        .await;
                }
            }
        };
        match crashes.get(incarnation) {
            Some(&(at, down)) => {
                let crash_at = origin + Duration::from_millis(at);
                tokio::select! {
                    biased;
                    _ = tokio::time::sleep_until(crash_at) => {}
                    _ = life => {}
                }
                // The process is gone: nothing it started may reach the store.
                dead.store(true, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(down)).await;
            }
            None => {
                life.await;
                return;
            }
        }
    }
}

/// All three properties. Returns the first violation found.
fn check(beliefs: &[Belief]) -> Result<(), String> {
    check_generations(beliefs)?;
    check_overlap(beliefs)
}

/// One holder per generation, and each holder's generations increase.
fn check_generations(beliefs: &[Belief]) -> Result<(), String> {
    let mut holders: BTreeMap<Generation, (usize, usize)> = BTreeMap::new();
    let mut last_by_holder: BTreeMap<(usize, usize), Generation> = BTreeMap::new();
    for belief in beliefs {
        if let Some(other) = holders.insert(belief.generation, belief.holder)
            && other != belief.holder
        {
            return Err(format!("generation {} acquired by {:?} and {:?}", belief.generation, other, belief.holder));
        }
        if let Some(last) = last_by_holder.insert(belief.holder, belief.generation)
            && belief.generation <= last
        {
            return Err(format!("{:?} acquired {} after {}", belief.holder, belief.generation, last));
        }
    }
    Ok(())
}

/// No two holders believe they lead at the same instant.
fn check_overlap(beliefs: &[Belief]) -> Result<(), String> {
    for (i, a) in beliefs.iter().enumerate() {
        for b in &beliefs[i + 1..] {
            let (a_end, b_end) = (a.end.unwrap_or(RUN), b.end.unwrap_or(RUN));
            if a.holder != b.holder && a.start < b_end && b.start < a_end {
                let overlap = a_end.min(b_end) - a.start.max(b.start);
                return Err(format!("{a:?} and {b:?} both believed they led for {overlap:?}"));
            }
        }
    }
    Ok(())
}

/// Runs `cases` random worlds under `policy` and applies `check` to each.
/// Returns the number of terms seen, or the first failing world.
fn run_property(
    policy: Policy,
    cases: u32,
    check: fn(&[Belief]) -> Result<(), String>,
) -> Result<usize, TestError<World>> {
    let terms = Arc::new(Mutex::new(0usize));
    let counted = terms.clone();
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    runner.run(&world(3), move |world| {
        let beliefs = simulate(&world, policy);
        // A run in which nobody led would pass vacuously.
        prop_assert!(!beliefs.is_empty(), "nobody led in {world:?}");
        *counted.lock().unwrap() += beliefs.len();
        check(&beliefs).map_err(TestCaseError::fail)
    })?;
    let terms = *terms.lock().unwrap();
    Ok(terms)
}

#[test]
fn the_safe_policy_never_overlaps_or_reuses_a_generation() {
    match run_property(Policy::Safe, 256, check) {
        Ok(terms) => {
            eprintln!("256 worlds, {terms} terms, no violation");
            // About one term every few seconds per world: the worlds really
            // hand the lease around, so "no violation" means something.
            assert!(terms >= 256 * 5, "only {terms} terms in 256 worlds");
        }
        Err(failure) => panic!("{failure}"),
    }
}

#[test]
fn the_wall_clock_policy_is_caught_overlapping() {
    match run_property(Policy::WallClockExpiry, 64, check_overlap) {
        Err(TestError::Fail(reason, world)) => {
            let reason = reason.to_string();
            assert!(reason.contains("both believed they led"), "unexpected failure {reason} in {world:?}");
            eprintln!("caught, shrunk to {world:?}: {reason}");
        }
        other => panic!("the wall-clock policy was not caught overlapping: {other:?}"),
    }
}

#[test]
fn the_checker_flags_hand_built_violations() {
    let belief = |holder, generation, start, end| Belief {
        holder,
        generation: Generation(generation),
        start: Duration::from_secs(start),
        end: Some(Duration::from_secs(end)),
    };
    assert!(check(&[belief((0, 0), 1, 0, 5), belief((1, 0), 2, 5, 9)]).is_ok());
    assert!(check(&[belief((0, 0), 1, 0, 5), belief((1, 0), 2, 4, 9)]).unwrap_err().contains("both believed"));
    assert!(check(&[belief((0, 0), 1, 0, 5), belief((1, 0), 1, 6, 9)]).unwrap_err().contains("acquired by"));
    assert!(check(&[belief((0, 0), 2, 0, 5), belief((0, 0), 2, 6, 9)]).unwrap_err().contains("after"));
}
