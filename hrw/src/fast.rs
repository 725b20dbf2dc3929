//! The fast weight: `mix(xxh3_64(key) ^ member_hash(id))`.
//!
//! # The frozen definition
//!
//! - `key_hash = xxh3_64(key)`: XXH3, 64-bit output, seed 0, as specified by
//!   the xxHash project.
//! - `member_hash = xxh3_64_with_seed(id, MEMBER_SEED)` with
//!   `MEMBER_SEED = 0x9e37_79b9_7f4a_7c15`. A different seed from the key's
//!   keeps a key that happens to equal a member id from landing on a fixed
//!   weight.
//! - `mix` is the `Mix13` variant of the SplitMix64 finaliser (David
//!   Stafford's search for 64-bit mixers): `z ^= z >> 30; z *= 0xbf58_476d_1ce4_e5b9;
//!   z ^= z >> 27; z *= 0x94d0_49bb_1331_11eb; z ^= z >> 31`, in wrapping 64-bit
//!   arithmetic. It is a bijection with full avalanche, so weights for one key
//!   behave like independent uniform draws per member.
//!
//! Only integer operations are involved, so every platform computes the same
//! weights. Changing any part of this is a breaking change for every
//! deployment that mixes versions, and the golden vectors in the tests freeze
//! it.
//!
//! # Kernels
//!
//! A lookup hashes the key once and then mixes it with each precomputed
//! member hash. The scalar kernel is the reference; on x86-64 an AVX-512 or
//! AVX2 kernel is picked at run time and must agree with it exactly.
//!
//! Selecting the best 2 to 4 members (the common replica counts) must cost
//! little more than the owner's arg-max scan. A selection that inserts into
//! a sorted list pays a mispredicted branch per insertion, which at a few
//! hundred members costs more than the scan itself, so the scalar and
//! AVX-512 kernels have branch-free paths for it (`top_lanes_scalar` and
//! `x86::top_tagged`); they decline, and the general path answers, only for
//! exact or near ties and for sets they do not cover.

use std::mem::MaybeUninit;

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use super::select::{Best, INLINE_REPLICAS};

/// The seed for member-id hashes. Frozen: see the module documentation.
pub(crate) const MEMBER_SEED: u64 = 0x9e37_79b9_7f4a_7c15;

const MIX_MUL_1: u64 = 0xbf58_476d_1ce4_e5b9;
const MIX_MUL_2: u64 = 0x94d0_49bb_1331_11eb;

/// The key's half of the fast weight.
#[inline]
pub(crate) fn key_hash(key: &[u8]) -> u64 {
    xxh3_64(key)
}

/// The member's half of the fast weight, computed once per member.
#[inline]
pub(crate) fn member_hash(id: &[u8]) -> u64 {
    xxh3_64_with_seed(id, MEMBER_SEED)
}

/// The 64-bit finaliser.
#[inline]
pub(crate) const fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(MIX_MUL_1);
    z = (z ^ (z >> 27)).wrapping_mul(MIX_MUL_2);
    z ^ (z >> 31)
}

/// The fast weight from the two precomputed halves.
#[inline]
pub(crate) const fn weight(key_hash: u64, member_hash: u64) -> u64 {
    mix(key_hash ^ member_hash)
}

/// An implementation of the lookup loops; all of them give the same answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kernel {
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Kernel {
    /// The widest kernel this CPU runs.
    pub(crate) fn detect() -> Kernel {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512dq")
                && std::arch::is_x86_feature_detected!("popcnt")
            {
                return Kernel::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                return Kernel::Avx2;
            }
        }
        Kernel::Scalar
    }

    /// Every kernel this CPU runs, scalar first; for tests.
    #[cfg(test)]
    pub(crate) fn available() -> Vec<Kernel> {
        let mut kernels = vec![Kernel::Scalar];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                kernels.push(Kernel::Avx2);
            }
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512dq")
                && std::arch::is_x86_feature_detected!("popcnt")
            {
                kernels.push(Kernel::Avx512);
            }
        }
        kernels
    }

    /// The index of the heaviest member; ties go to the lower index.
    #[inline]
    pub(crate) fn owner(self, key_hash: u64, members: &[u64]) -> Option<usize> {
        match self {
            Kernel::Scalar => owner_scalar(key_hash, members),
            // SAFETY: `Kernel::Avx2` is only constructed after
            // `is_x86_feature_detected!("avx2")` returned true.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { x86::owner_avx2(key_hash, members) },
            // SAFETY: `Kernel::Avx512` is only constructed after AVX-512F,
            // AVX-512DQ and POPCNT were detected.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => unsafe { x86::owner_avx512(key_hash, members) },
        }
    }

    /// The index of the first member at or after `from` whose weight is at
    /// least `floor`, if any: what `is_owner` asks, since one heavier member
    /// ends the question and it usually turns up within a few members.
    #[inline]
    pub(crate) fn first_at_least(self, key_hash: u64, members: &[u64], from: usize, floor: u64) -> Option<usize> {
        match self {
            Kernel::Scalar => first_at_least_scalar(key_hash, members, from, floor),
            // SAFETY: as in `owner`.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { x86::first_at_least_avx2(key_hash, members, from, floor) },
            // SAFETY: as in `owner`.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => unsafe { x86::first_at_least_avx512(key_hash, members, from, floor) },
        }
    }

    /// The best `n` members, best first, handed to `emit` by index.
    #[inline]
    pub(crate) fn top(self, key_hash: u64, members: &[u64], n: usize, mut emit: impl FnMut(usize)) {
        let n = n.min(members.len());
        if n == 0 {
            return;
        }
        if n == 1 {
            if let Some(owner) = self.owner(key_hash, members) {
                emit(owner);
            }
            return;
        }
        // The common replica counts take a kernel without data-dependent
        // branches; it declines (and the general path below answers) only
        // for sets it does not cover and for exact weight ties.
        let done = match n {
            2 => self.top_few::<2, 3>(key_hash, members, &mut emit),
            // A spare entry per lane costs two operations per chunk; without
            // it, a lookup whose winners all share a lane rescans that lane,
            // which for three or more winners is rare enough to be cheaper.
            3 => self.top_few::<3, 3>(key_hash, members, &mut emit),
            4 => self.top_few::<4, 4>(key_hash, members, &mut emit),
            _ => false,
        };
        if done {
            return;
        }
        if n > INLINE_REPLICAS {
            super::select::top_by_index(
                members.len(),
                n,
                |start, out| {
                    for (slot, &member) in out.iter_mut().zip(&members[start..]) {
                        *slot = weight(key_hash, member);
                    }
                },
                emit,
            );
            return;
        }
        let mut slots = [(0u64, 0usize); INLINE_REPLICAS];
        let mut best = Best::new(&mut slots[..n]);
        match self {
            Kernel::Scalar => top_two_pass_scalar(key_hash, members, &mut best),
            // SAFETY: as in `owner`.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { x86::top_avx2(key_hash, members, &mut best) },
            // SAFETY: as in `owner`.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => unsafe { x86::top_avx512(key_hash, members, &mut best) },
        }
        best.indices().for_each(emit);
    }

    /// The best `K` members, best first, by the branch-free kernels; `L` is
    /// how many the AVX-512 kernel keeps per lane, `K` or `K + 1`.
    /// Returns `false`, having emitted nothing, when the kernel declines.
    #[inline]
    fn top_few<const K: usize, const L: usize>(
        self,
        key_hash: u64,
        members: &[u64],
        emit: &mut impl FnMut(usize),
    ) -> bool {
        let mut out = [0usize; K];
        let found = match self {
            Kernel::Scalar => top_lanes_scalar(key_hash, members, &mut out),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => false,
            // SAFETY: as in `owner`.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => unsafe { x86::top_tagged::<K, L>(key_hash, members, &mut out) },
        };
        if found {
            out.into_iter().for_each(emit);
        }
        found
    }
}

#[inline]
pub(crate) fn owner_scalar(key_hash: u64, members: &[u64]) -> Option<usize> {
    let (&first, rest) = members.split_first()?;
    let mut best = (weight(key_hash, first), 0usize);
    for (offset, &member) in rest.iter().enumerate() {
        let w = weight(key_hash, member);
        // Strictly greater: an equal weight at a higher index loses the tie.
        if w > best.0 {
            best = (w, offset + 1);
        }
    }
    Some(best.1)
}

#[inline]
pub(crate) fn first_at_least_scalar(key_hash: u64, members: &[u64], from: usize, floor: u64) -> Option<usize> {
    members.get(from..)?.iter().position(|&member| weight(key_hash, member) >= floor).map(|offset| from + offset)
}

/// How many members the two-pass kernels weigh into a stack buffer before
/// they switch to a plain pass with a floor that is already high.
const FIRST_BLOCK: usize = 256;

/// Below this many members a plain pass is cheaper than two.
const TWO_PASS_MIN: usize = 32;

/// How many interleaved running maxima the scalar two-pass kernel keeps.
const SCALAR_LANES: usize = 8;

/// The `n`-th largest of `maxima`, counting repeats, or 0 when there are
/// fewer than `n`. A branch-free insertion network: sorting would branch
/// unpredictably on every comparison.
#[inline]
fn nth_largest<const L: usize>(maxima: [u64; L], n: usize) -> u64 {
    if n == 0 || n > L {
        return 0;
    }
    // `top[j]` is the (j+1)-th largest so far; each value moves down the
    // levels it beats, as `min` and `max` without branches.
    let mut top = [0u64; L];
    for value in maxima {
        let mut carried = value;
        for slot in &mut top[..n] {
            let kept = (*slot).max(carried);
            carried = (*slot).min(carried);
            *slot = kept;
        }
    }
    top[n - 1]
}

/// Top-n without an unpredictable branch per member.
///
/// A plain pass inserts about `n ln(N/n)` times, each after a mispredicted
/// branch, mostly early while the floor is low. So the first block is
/// weighed into a buffer while `SCALAR_LANES` interleaved running maxima are
/// kept without branches; those are weights of distinct members, so the
/// n-th largest of them is a floor that at least n members reach, and the
/// second pass over the buffer offers only the few members at or above it.
/// The remaining members then meet a floor that is already high.
fn top_two_pass_scalar(key_hash: u64, members: &[u64], best: &mut Best<'_, u64>) {
    let n = best.capacity();
    // Measured: for sets larger than one block the plain pass is as fast,
    // because its floor rises quickly anyway.
    if n > SCALAR_LANES || members.len() <= TWO_PASS_MIN || members.len() > FIRST_BLOCK {
        top_scalar(key_hash, members, 0, best);
        return;
    }
    let (head, rest) = members.split_at(members.len().min(FIRST_BLOCK));
    let mut buffer = [0u64; FIRST_BLOCK];
    let weights = &mut buffer[..head.len()];
    let mut maxima = [0u64; SCALAR_LANES];
    for (out, chunk) in weights.chunks_mut(SCALAR_LANES).zip(head.chunks(SCALAR_LANES)) {
        for (lane, (slot, &member)) in out.iter_mut().zip(chunk).enumerate() {
            *slot = weight(key_hash, member);
            maxima[lane] = maxima[lane].max(*slot);
        }
    }
    let floor = nth_largest(maxima, n);
    for (index, &w) in weights.iter().enumerate() {
        if w >= floor {
            best.push((w, index));
        }
    }
    top_scalar(key_hash, rest, head.len(), best);
}

/// How many members the scalar few-replica kernel weighs into its stack
/// buffer; the rest meet a floor that is already high.
const LANES_BLOCK: usize = 128;

/// How many lanes the scalar few-replica kernel keeps a running maximum for.
const LANES: usize = 8;

/// Hits (members at or above the floor) the scalar few-replica kernel
/// collects before it declines; ties are the only way to reach it.
const LANE_HITS: usize = 16;

/// Up to this many hits are ranked by a fixed-size, branch-free loop.
const LANE_RANKED: usize = 4;

/// The best `K` members, best first, into `out`, for `K` at most
/// [`LANES`]; `false` when it declines (a set of at most [`TWO_PASS_MIN`]
/// members, where a plain pass is cheaper, a zero floor, or many ties).
///
/// A plain pass with a floor mispredicts a branch on every insertion, about
/// `K ln(N/K)` times. Instead, the first [`LANES_BLOCK`] members are weighed
/// into a buffer while `LANES` interleaved running maxima are kept without
/// branches. The `K`-th largest maximum is a floor that at least `K`
/// distinct members reach, and every member at or above it sits in a lane
/// whose maximum is at or above it: typically exactly `K` lanes, holding
/// `K` or a few more such members. Only those lanes are rescanned, each into
/// a bit mask of its rows that reach the floor, and the few hits are ranked
/// without branches. Any members after the block then meet a floor that is
/// already high.
fn top_lanes_scalar<const K: usize>(key_hash: u64, members: &[u64], out: &mut [usize; K]) -> bool {
    const { assert!(K >= 1 && K <= LANES && K <= LANE_RANKED) };
    let len = members.len();
    if len <= TWO_PASS_MIN {
        return false;
    }
    let (head, rest) = members.split_at(len.min(LANES_BLOCK));
    let rows = head.len().div_ceil(LANES);
    // Not zeroed: clearing a kilobyte on every lookup was a measurable part
    // of the selection at N = 100.
    let mut buffer = [MaybeUninit::<u64>::uninit(); LANES_BLOCK];
    let mut maxima = [0u64; LANES];
    let chunks = head.chunks_exact(LANES);
    let remainder = chunks.remainder();
    for (row, chunk) in buffer.chunks_exact_mut(LANES).zip(chunks) {
        for (lane, (slot, &member)) in row.iter_mut().zip(chunk).enumerate() {
            let w = weight(key_hash, member);
            slot.write(w);
            maxima[lane] = maxima[lane].max(w);
        }
    }
    if !remainder.is_empty() {
        // The last row is padded with zeros, which never reach the floor,
        // so every lane is rescanned over the same number of rows.
        let row = &mut buffer[(rows - 1) * LANES..rows * LANES];
        for (lane, slot) in row.iter_mut().enumerate() {
            let w = remainder.get(lane).map_or(0, |&member| weight(key_hash, member));
            slot.write(w);
            maxima[lane] = maxima[lane].max(w);
        }
    }
    // SAFETY: the loops above wrote every one of the first `rows * LANES`
    // entries (`rows * LANES <= LANES_BLOCK`), and `u64` has no invalid
    // bit patterns.
    let weights: &[u64] = unsafe { std::slice::from_raw_parts(buffer.as_ptr().cast::<u64>(), rows * LANES) };
    let floor = nth_largest(maxima, K);
    if floor == 0 {
        // A zero weight would be indistinguishable from the padding.
        return false;
    }
    let mut lanes = 0u32;
    for (lane, &maximum) in maxima.iter().enumerate() {
        lanes |= u32::from(maximum >= floor) << lane;
    }
    let mut hit_weights = [0u64; LANE_HITS];
    let mut hit_indices = [0usize; LANE_HITS];
    let mut count = 0usize;
    while lanes != 0 {
        let lane = lanes.trailing_zeros() as usize;
        lanes &= lanes - 1;
        // Which rows of this lane reach the floor: independent comparisons,
        // no chain through a running count.
        let mut rows_hit = 0u32;
        for (row, &w) in weights.iter().skip(lane).step_by(LANES).enumerate() {
            rows_hit |= u32::from(w >= floor) << row;
        }
        while rows_hit != 0 {
            let index = rows_hit.trailing_zeros() as usize * LANES + lane;
            rows_hit &= rows_hit - 1;
            if count == LANE_HITS {
                return false;
            }
            hit_weights[count] = weights[index];
            hit_indices[count] = index;
            count += 1;
        }
    }
    // Rank every hit by how many hits rank ahead of it; the first K ranks
    // are the answer. Slot K is a sink for the others.
    let ahead = |b: usize, a: usize| {
        let (wa, ia) = (hit_weights[a], hit_indices[a]);
        let (wb, ib) = (hit_weights[b], hit_indices[b]);
        (wb > wa) | ((wb == wa) & (ib < ia))
    };
    let mut ranked = [0usize; LANE_RANKED + 1];
    let ranked = &mut ranked[..=K];
    if count <= LANE_RANKED {
        // Fixed trip counts: slots past `count` are masked out.
        for (a, &index) in hit_indices.iter().enumerate().take(LANE_RANKED) {
            let rank = (0..LANE_RANKED).map(|b| usize::from(ahead(b, a) & (b < count))).sum::<usize>();
            let slot = if a < count { rank.min(K) } else { K };
            ranked[slot] = index;
        }
    } else {
        for (a, &index) in hit_indices.iter().enumerate().take(count) {
            let rank = (0..count).map(|b| usize::from(ahead(b, a))).sum::<usize>();
            ranked[rank.min(K)] = index;
        }
    }
    out.copy_from_slice(&ranked[..K]);
    if !rest.is_empty() {
        let mut top = out.map(|index| (weights[index], index));
        top_rest_scalar(key_hash, rest, head.len(), &mut top);
        *out = top.map(|(_, index)| index);
    }
    true
}

/// Continues a best-first selection over `members` (whose first index is
/// `base`, above every index already in `top`), so an equal weight never
/// enters.
#[inline]
fn top_rest_scalar<const K: usize>(key_hash: u64, members: &[u64], base: usize, top: &mut [(u64, usize); K]) {
    let mut floor = top[K - 1].0;
    for (offset, &member) in members.iter().enumerate() {
        let w = weight(key_hash, member);
        if w <= floor {
            continue;
        }
        let mut at = K - 1;
        while at > 0 && w > top[at - 1].0 {
            top[at] = top[at - 1];
            at -= 1;
        }
        top[at] = (w, base + offset);
        floor = top[K - 1].0;
    }
}

/// Offers `members` (whose first index is `base`) to `best` one by one.
#[inline]
fn top_scalar(key_hash: u64, members: &[u64], base: usize, best: &mut Best<'_, u64>) {
    // The floor is kept in a register: most members fall below it, and
    // that test must stay one comparison.
    let mut floor = best.floor();
    for (offset, &member) in members.iter().enumerate() {
        let w = weight(key_hash, member);
        if floor.is_some_and(|floor| w < floor) {
            continue;
        }
        best.push((w, base + offset));
        floor = best.floor();
    }
}

#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(test)]
mod tests;
