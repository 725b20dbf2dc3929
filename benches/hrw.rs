//! HRW ownership lookups: ours, the Go seed's algorithm done naively in Rust,
//! and the peer crates, all in the same run.
//!
//! Every benchmark looks up 16-byte keys rotated over 1,024 distinct keys,
//! so no single key's branch pattern is learned, against members named
//! `replica-NNNNN`. The benchmark ids are `hrw-<operation>/<method>/<N>`;
//! `cargo xtask bench-hrw` reads the medians back and prints the table.
//!
//! Peers that default to a per-process random hasher get a fixed one
//! (`BuildHasherDefault<DefaultHasher>`), as a deployment would need so that
//! replicas agree.

use std::collections::hash_map::DefaultHasher;
use std::hash::BuildHasherDefault;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::{BenchmarkGroup, BenchmarkId, Criterion, criterion_group, criterion_main, measurement::WallTime};
use hoplock::hrw::{Member, MemberSet, Options, Simd, WeightFn};
use sha2::{Digest, Sha256};

const SIZES: [usize; 5] = [3, 10, 100, 1_000, 10_000];

/// Distinct keys per benchmark; a power of two so rotation is a mask.
const KEY_COUNT: usize = 1_024;

type FixedHasher = BuildHasherDefault<DefaultHasher>;

/// 16-byte keys: the hex form of a SplitMix64 sequence.
fn keys() -> Vec<String> {
    let mut state = 0u64;
    (0..KEY_COUNT)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            format!("{:016x}", z ^ (z >> 31))
        })
        .collect()
}

fn members(n: usize) -> Vec<Member> {
    (0..n).map(|i| Member::new(format!("replica-{i:05}"), format!("10.0.{}.{}:7000", i / 256, i % 256))).collect()
}

/// The Go seed's algorithm done naively: a full SHA-256 per member.
mod naive {
    use super::*;

    pub fn weight(key: &str, id: &str) -> u64 {
        let digest =
            Sha256::new().chain_update(key.as_bytes()).chain_update([0u8]).chain_update(id.as_bytes()).finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(first)
    }

    pub fn owner<'m>(key: &str, members: &'m [Member]) -> Option<&'m Member> {
        let mut best: Option<(u64, &Member)> = None;
        for member in members {
            let w = weight(key, &member.id);
            if best.is_none_or(|(bw, bm)| w > bw || (w == bw && member.id < bm.id)) {
                best = Some((w, member));
            }
        }
        best.map(|(_, member)| member)
    }

    /// As in Go: a full owner scan, then a comparison.
    pub fn is_owner(key: &str, self_id: &str, members: &[Member]) -> bool {
        owner(key, members).is_some_and(|m| m.id == self_id)
    }

    /// A full sort by (weight descending, id ascending).
    pub fn replicas<'m>(key: &str, members: &'m [Member], n: usize) -> Vec<&'m Member> {
        let mut all: Vec<(u64, &Member)> = members.iter().map(|m| (weight(key, &m.id), m)).collect();
        all.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.id.cmp(&b.1.id)));
        all.into_iter().take(n).map(|(_, m)| m).collect()
    }
}

/// Benchmarks one lookup closure over the rotating keys.
fn bench<R>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    method: &str,
    n: usize,
    keys: &[String],
    mut lookup: impl FnMut(&str) -> R,
) {
    let mut next = 0usize;
    group.bench_with_input(BenchmarkId::new(method, n), &n, |b, _| {
        b.iter(|| {
            let key = &keys[next & (KEY_COUNT - 1)];
            next = next.wrapping_add(1);
            black_box(lookup(black_box(key.as_str())))
        })
    });
}

fn prepared(members: &[Member], weight_fn: WeightFn, simd: Simd) -> MemberSet {
    MemberSet::with_options(members.to_vec(), Options { weight_fn, simd })
}

fn owner(c: &mut Criterion) {
    let keys = keys();
    let mut group = c.benchmark_group("hrw-owner");
    for n in SIZES {
        let members = members(n);
        let ids: Vec<String> = members.iter().map(|m| m.id.clone()).collect();

        bench(&mut group, "naive-sha256", n, &keys, |k| naive::owner(k, &members).is_some());

        let go = prepared(&members, WeightFn::GoSha256, Simd::Auto);
        bench(&mut group, "go-sha256", n, &keys, |k| go.owner(k).is_some());

        let fast = prepared(&members, WeightFn::Fast, Simd::Auto);
        bench(&mut group, "fast", n, &keys, |k| fast.owner(k).is_some());

        let scalar = prepared(&members, WeightFn::Fast, Simd::Off);
        bench(&mut group, "fast-scalar", n, &keys, |k| scalar.owner(k).is_some());

        let capacity = |i: usize| NonZeroU32::new(1 + (i % 4) as u32).unwrap_or(NonZeroU32::MIN);
        let weighted =
            MemberSet::weighted(members.iter().cloned().enumerate().map(|(i, m)| (m, capacity(i))), Options::default());
        bench(&mut group, "fast-weighted", n, &keys, |k| weighted.owner(k).is_some());

        bench(&mut group, "fast-unprepared", n, &keys, |k| hoplock::hrw::owner(k, &members).is_some());

        let peer_hrw = hrw::Rendezvous::from_nodes_and_hasher(ids.iter().cloned(), FixedHasher::default());
        bench(&mut group, "peer-hrw", n, &keys, |k| peer_hrw.pick_top(&k).is_some());

        let mut peer_rendezvous = rendezvous_hash::RendezvousNodes::default();
        for id in &ids {
            peer_rendezvous.insert(id.as_str());
        }
        bench(&mut group, "peer-rendezvous_hash", n, &keys, |k| peer_rendezvous.calc_candidates(&k).next().is_some());

        let mut peer_rings = hash_rings::rendezvous::Ring::with_hasher(FixedHasher::default());
        for id in &ids {
            peer_rings.insert_node(id, 1);
        }
        bench(&mut group, "peer-hash-rings", n, &keys, |k| peer_rings.get_node(&k).len());
    }
    group.finish();
}

fn is_owner(c: &mut Criterion) {
    let keys = keys();
    let mut group = c.benchmark_group("hrw-is_owner");
    for n in SIZES {
        let members = members(n);
        // A member in the middle; over the rotating keys its rank is uniform.
        let me = members[n / 2].id.clone();

        bench(&mut group, "naive-sha256", n, &keys, |k| naive::is_owner(k, &me, &members));

        let go = prepared(&members, WeightFn::GoSha256, Simd::Auto);
        bench(&mut group, "go-sha256", n, &keys, |k| go.is_owner(k, &me));

        let fast = prepared(&members, WeightFn::Fast, Simd::Auto);
        bench(&mut group, "fast", n, &keys, |k| fast.is_owner(k, &me));
    }
    group.finish();
}

fn replicas(c: &mut Criterion) {
    let keys = keys();
    let mut group = c.benchmark_group("hrw-replicas3");
    for n in SIZES {
        let members = members(n);
        let ids: Vec<String> = members.iter().map(|m| m.id.clone()).collect();

        bench(&mut group, "naive-sha256", n, &keys, |k| naive::replicas(k, &members, 3).len());

        let go = prepared(&members, WeightFn::GoSha256, Simd::Auto);
        let mut buffer = Vec::with_capacity(3);
        bench(&mut group, "go-sha256", n, &keys, |k| {
            go.replicas_into(k, 3, &mut buffer);
            buffer.len()
        });

        let fast = prepared(&members, WeightFn::Fast, Simd::Auto);
        let mut buffer = Vec::with_capacity(3);
        bench(&mut group, "fast", n, &keys, |k| {
            fast.replicas_into(k, 3, &mut buffer);
            buffer.len()
        });

        let scalar = prepared(&members, WeightFn::Fast, Simd::Off);
        let mut buffer = Vec::with_capacity(3);
        bench(&mut group, "fast-scalar", n, &keys, |k| {
            scalar.replicas_into(k, 3, &mut buffer);
            buffer.len()
        });

        let peer_hrw = hrw::Rendezvous::from_nodes_and_hasher(ids.iter().cloned(), FixedHasher::default());
        bench(&mut group, "peer-hrw", n, &keys, |k| peer_hrw.pick_top_k(&k, 3).len());

        let mut peer_rendezvous = rendezvous_hash::RendezvousNodes::default();
        for id in &ids {
            peer_rendezvous.insert(id.as_str());
        }
        bench(&mut group, "peer-rendezvous_hash", n, &keys, |k| peer_rendezvous.calc_candidates(&k).take(3).count());
    }
    group.finish();
}

fn config() -> Criterion {
    // Short windows keep the full run (about 100 benchmarks) near five
    // minutes; `--quick` shortens it further.
    Criterion::default()
        .warm_up_time(Duration::from_millis(700))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50)
}

criterion_group! {
    name = benches;
    config = config();
    targets = owner, is_owner, replicas
}
criterion_main!(benches);
