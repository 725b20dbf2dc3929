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
mod x86 {
    //! The SIMD kernels. Each lane keeps its own running best, visiting its
    //! members in index order and replacing only on a strictly greater
    //! weight, so within a lane ties already go to the lower index; the final
    //! reduction takes the greatest weight and, among lanes that hold it, the
    //! lowest index.

    use std::arch::x86_64::*;

    use super::super::select::Best;
    use super::{MIX_MUL_1, MIX_MUL_2, owner_scalar, top_scalar, weight};

    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn mix_avx512(z: __m512i) -> __m512i {
        let z = _mm512_xor_si512(z, _mm512_srli_epi64::<30>(z));
        let z = _mm512_mullo_epi64(z, _mm512_set1_epi64(MIX_MUL_1 as i64));
        let z = _mm512_xor_si512(z, _mm512_srli_epi64::<27>(z));
        let z = _mm512_mullo_epi64(z, _mm512_set1_epi64(MIX_MUL_2 as i64));
        _mm512_xor_si512(z, _mm512_srli_epi64::<31>(z))
    }

    /// Weights of the 8 members at `members[at..at + 8]`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn weigh8(key: __m512i, members: &[u64], at: usize) -> __m512i {
        let chunk = &members[at..at + 8];
        // SAFETY: `chunk` holds exactly 8 `u64`s, and the load is unaligned.
        let loaded = unsafe { _mm512_loadu_si512(chunk.as_ptr().cast()) };
        mix_avx512(_mm512_xor_si512(key, loaded))
    }

    /// Weights of the 1 to 7 members at `members[at..]`, zero in unused
    /// lanes, and the mask of used lanes.
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn weigh_tail8(key: __m512i, members: &[u64], at: usize) -> (__m512i, __mmask8) {
        let tail = &members[at..];
        debug_assert!(!tail.is_empty() && tail.len() < 8);
        let valid: __mmask8 = ((1u16 << tail.len()) - 1) as __mmask8;
        // SAFETY: the mask covers exactly the `tail.len()` elements of
        // `tail`; masked-off lanes are not read.
        let loaded = unsafe { _mm512_maskz_loadu_epi64(valid, tail.as_ptr().cast()) };
        (mix_avx512(_mm512_xor_si512(key, loaded)), valid)
    }

    /// # Safety
    /// The CPU must support AVX-512F and AVX-512DQ.
    #[target_feature(enable = "avx512f,avx512dq")]
    pub(super) unsafe fn owner_avx512(key_hash: u64, members: &[u64]) -> Option<usize> {
        let len = members.len();
        if len < 8 {
            return owner_scalar(key_hash, members);
        }
        let key = _mm512_set1_epi64(key_hash as i64);
        let lanes = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
        // Two independent accumulators hide the compare-and-blend latency.
        // Both start from the first chunk, so no lane needs a sentinel.
        let mut best_a = weigh8(key, members, 0);
        let mut index_a = lanes;
        let mut best_b = best_a;
        let mut index_b = index_a;
        let mut at = 8;
        while at + 16 <= len {
            let wa = weigh8(key, members, at);
            let wb = weigh8(key, members, at + 8);
            let ia = _mm512_add_epi64(lanes, _mm512_set1_epi64(at as i64));
            let ib = _mm512_add_epi64(lanes, _mm512_set1_epi64((at + 8) as i64));
            let ga = _mm512_cmpgt_epu64_mask(wa, best_a);
            let gb = _mm512_cmpgt_epu64_mask(wb, best_b);
            best_a = _mm512_mask_blend_epi64(ga, best_a, wa);
            index_a = _mm512_mask_blend_epi64(ga, index_a, ia);
            best_b = _mm512_mask_blend_epi64(gb, best_b, wb);
            index_b = _mm512_mask_blend_epi64(gb, index_b, ib);
            at += 16;
        }
        if at + 8 <= len {
            let w = weigh8(key, members, at);
            let i = _mm512_add_epi64(lanes, _mm512_set1_epi64(at as i64));
            let g = _mm512_cmpgt_epu64_mask(w, best_a);
            best_a = _mm512_mask_blend_epi64(g, best_a, w);
            index_a = _mm512_mask_blend_epi64(g, index_a, i);
            at += 8;
        }
        if at < len {
            let (w, valid) = weigh_tail8(key, members, at);
            let i = _mm512_add_epi64(lanes, _mm512_set1_epi64(at as i64));
            let g = _mm512_mask_cmpgt_epu64_mask(valid, w, best_b);
            best_b = _mm512_mask_blend_epi64(g, best_b, w);
            index_b = _mm512_mask_blend_epi64(g, index_b, i);
        }
        let max = _mm512_reduce_max_epu64(best_a).max(_mm512_reduce_max_epu64(best_b));
        let max_v = _mm512_set1_epi64(max as i64);
        let at_max_a = _mm512_cmpeq_epu64_mask(best_a, max_v);
        let at_max_b = _mm512_cmpeq_epu64_mask(best_b, max_v);
        // A mask with no lanes set reduces to the identity of `min`, which is
        // `u64::MAX`; at least one of the two masks is non-empty.
        let ia = _mm512_mask_reduce_min_epu64(at_max_a, index_a);
        let ib = _mm512_mask_reduce_min_epu64(at_max_b, index_b);
        Some(ia.min(ib) as usize)
    }

    /// # Safety
    /// The CPU must support AVX-512F and AVX-512DQ.
    #[target_feature(enable = "avx512f,avx512dq")]
    pub(super) unsafe fn top_avx512(key_hash: u64, members: &[u64], best: &mut Best<'_, u64>) {
        match best.capacity() {
            0 => {}
            1 => {
                // SAFETY: this function's own precondition.
                if let Some(owner) = unsafe { owner_avx512(key_hash, members) } {
                    best.push((weight(key_hash, members[owner]), owner));
                }
            }
            2..=TWO_PASS_MAX => top_two_pass(key_hash, members, best),
            _ => top_threshold(key_hash, members, 0, best),
        }
    }

    /// The most replicas the two-pass kernel serves: the floor is the n-th
    /// largest of 16 lane maxima.
    const TWO_PASS_MAX: usize = 16;

    /// Top-n as `top_two_pass_scalar`, 16 lanes wide: the first pass over
    /// the first block keeps only per-lane maxima (one `max` per chunk
    /// instead of the owner kernel's compare and two blends) and stores the
    /// weights; the second compares the stored weights with the floor.
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn top_two_pass(key_hash: u64, members: &[u64], best: &mut Best<'_, u64>) {
        let n = best.capacity();
        if members.len() <= super::TWO_PASS_MIN {
            top_threshold(key_hash, members, 0, best);
            return;
        }
        let key = _mm512_set1_epi64(key_hash as i64);
        let (head, rest) = members.split_at(members.len().min(super::FIRST_BLOCK));
        let len = head.len();
        // Whole 8-lane chunks only, unmasked: a masked store or load would
        // keep the second pass's loads from being forwarded from the first
        // pass's stores. Lanes past `len` hold garbage and are masked off in
        // the comparisons.
        let mut buffer = [0u64; super::FIRST_BLOCK];
        let mut max_a = _mm512_setzero_si512();
        let mut max_b = _mm512_setzero_si512();
        let mut at = 0;
        while at + 16 <= len {
            let wa = weigh8(key, head, at);
            let wb = weigh8(key, head, at + 8);
            let out = &mut buffer[at..at + 16];
            // SAFETY: `out` holds 16 `u64`s, the size of the two stores.
            unsafe {
                _mm512_storeu_si512(out.as_mut_ptr().cast(), wa);
                _mm512_storeu_si512(out[8..].as_mut_ptr().cast(), wb);
            }
            max_a = _mm512_max_epu64(max_a, wa);
            max_b = _mm512_max_epu64(max_b, wb);
            at += 16;
        }
        while at < len {
            let (w, valid) = if at + 8 <= len { (weigh8(key, head, at), 0xff) } else { weigh_tail8(key, head, at) };
            // `len` is below the buffer's size here whenever the chunk is
            // partial, so the whole chunk fits.
            let out = &mut buffer[at..at + 8];
            // SAFETY: `out` holds 8 `u64`s, the size of the store.
            unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), w) };
            max_a = _mm512_mask_max_epu64(max_a, valid, max_a, w);
            at += 8;
        }
        // Lanes that saw no member hold 0, which only lowers the floor. For
        // small n the lane-wise maximum of the two accumulators (8 distinct
        // members) is enough and cheaper to order.
        let floor = if n <= 8 {
            let mut maxima = [0u64; 8];
            // SAFETY: `maxima` holds 8 `u64`s, the size of the store.
            unsafe { _mm512_storeu_si512(maxima.as_mut_ptr().cast(), _mm512_max_epu64(max_a, max_b)) };
            super::nth_largest(maxima, n)
        } else {
            let mut maxima = [0u64; TWO_PASS_MAX];
            // SAFETY: `maxima` holds 16 `u64`s, the size of the two stores.
            unsafe {
                _mm512_storeu_si512(maxima.as_mut_ptr().cast(), max_a);
                _mm512_storeu_si512(maxima[8..].as_mut_ptr().cast(), max_b);
            }
            super::nth_largest(maxima, n)
        };
        let floor_v = _mm512_set1_epi64(floor as i64);
        let mut at = 0;
        while at < len {
            let take = (len - at).min(8);
            let valid: __mmask8 = ((1u16 << take) - 1) as __mmask8;
            let chunk: &[u64; 8] = match buffer[at..].first_chunk() {
                Some(chunk) => chunk,
                None => break,
            };
            // SAFETY: `chunk` holds 8 `u64`s, the size of the load.
            let w = unsafe { _mm512_loadu_si512(chunk.as_ptr().cast()) };
            let hits = _mm512_mask_cmpge_epu64_mask(valid, w, floor_v);
            if hits != 0 {
                offer_lanes(chunk, hits, at, best);
            }
            at += 8;
        }
        top_threshold(key_hash, rest, len, best);
    }

    /// Offers the lanes of `mask` in `weights` (members `base..base + 8`)
    /// to `best`, in index order.
    #[inline]
    fn offer_lanes(weights: &[u64; 8], mut mask: u8, base: usize, best: &mut Best<'_, u64>) {
        while mask != 0 {
            let lane = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            best.push((weights[lane], base + lane));
        }
    }

    /// Weighs 8 members at a time and hands only those at or above the
    /// current floor to the scalar insertion; `members` start at index
    /// `base`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn top_threshold(key_hash: u64, members: &[u64], base: usize, best: &mut Best<'_, u64>) {
        let len = members.len();
        let key = _mm512_set1_epi64(key_hash as i64);
        let mut threshold = _mm512_set1_epi64(best.floor().unwrap_or(0) as i64);
        let mut weights = [0u64; 8];
        let mut at = 0;
        while at < len {
            let (w, valid) =
                if at + 8 <= len { (weigh8(key, members, at), 0xff) } else { weigh_tail8(key, members, at) };
            let hits = _mm512_mask_cmpge_epu64_mask(valid, w, threshold);
            if hits != 0 {
                // SAFETY: `weights` is 8 `u64`s, the size of the store.
                unsafe { _mm512_storeu_si512(weights.as_mut_ptr().cast(), w) };
                offer_lanes(&weights, hits, base + at, best);
                threshold = _mm512_set1_epi64(best.floor().unwrap_or(0) as i64);
            }
            at += 8;
        }
    }

    /// Low bits of a packed weight that carry the member's tag.
    const TAG_BITS: u32 = 16;

    /// The tag field of a packed weight; a member's tag is
    /// `TAG_MASK - index`.
    const TAG_MASK: u64 = (1 << TAG_BITS) - 1;

    /// The most members `top_tagged` takes: every index must have a tag.
    pub(super) const TAGGED_MAX: usize = TAG_MASK as usize;

    /// How many members `top_tagged` inserts into its lists before it
    /// compares each chunk with the floor first.
    const TAGGED_HEAD: usize = 1024;

    /// Inserts `packed` into the lane-wise lists, best first, keeping the
    /// best `L` of each lane: `min` and `max` only, no masks or branches.
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn insert_lanes<const L: usize>(lists: &mut [__m512i; L], packed: __m512i, valid: __mmask8) {
        for k in (1..L).rev() {
            let carried = _mm512_min_epu64(lists[k - 1], packed);
            lists[k] = _mm512_mask_max_epu64(lists[k], valid, lists[k], carried);
        }
        lists[0] = _mm512_mask_max_epu64(lists[0], valid, lists[0], packed);
    }

    /// Lane-wise, the best `K` of the union of two best-first lists: the
    /// k-th largest of a union is the largest `min(a_i, b_j)` over
    /// `i + j = k` (with `a_0 = b_0 = ∞`), counting repeats.
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn merge_lists<const K: usize>(a: &[__m512i; K], b: &[__m512i; K]) -> [__m512i; K] {
        let mut merged = [_mm512_setzero_si512(); K];
        for (k, slot) in merged.iter_mut().enumerate() {
            let mut best = _mm512_max_epu64(a[k], b[k]);
            for j in 0..k {
                best = _mm512_max_epu64(best, _mm512_min_epu64(a[j], b[k - 1 - j]));
            }
            *slot = best;
        }
        merged
    }

    /// The best `K` values of all 8 lanes' lists, best first, each
    /// broadcast to every lane: three merges with the lists of the lane 1,
    /// 2 and 4 places away (cheapest shuffle first).
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn best_of_lanes<const K: usize>(lists: &[__m512i; K]) -> [__m512i; K] {
        let mut partner = [_mm512_setzero_si512(); K];
        for k in 0..K {
            partner[k] = _mm512_shuffle_epi32::<0b0100_1110>(lists[k]);
        }
        let merged = merge_lists(lists, &partner);
        for k in 0..K {
            partner[k] = _mm512_permutex_epi64::<0b0100_1110>(merged[k]);
        }
        let merged = merge_lists(&merged, &partner);
        for k in 0..K {
            partner[k] = _mm512_shuffle_i64x2::<0b0100_1110>(merged[k], merged[k]);
        }
        merge_lists(&merged, &partner)
    }

    /// The best `K` of `members` (at most [`TAGGED_MAX`]), best first, into
    /// `out`, keeping `L` (`K` or `K + 1`) per lane. Returns `false` when
    /// packed weights cannot decide (see below), which needs two weights
    /// that agree in their top 48 bits.
    ///
    /// A weight is packed as its top 48 bits above a 16-bit tag,
    /// `TAG_MASK - index`, so one unsigned `max` orders members and carries
    /// the index along. Each lane keeps its best `L` packed weights with
    /// `min` and `max` only, so no step depends on a mispredictable branch;
    /// a log-step merge across lanes then yields the best `K` packed weights
    /// overall, and their tags name the members.
    ///
    /// Packed order is weight order for members whose top 48 bits differ.
    /// Let `h` be the top 48 bits of the `K`-th packed weight; every member
    /// of the true best `K` has top bits of at least `h`. If exactly `K`
    /// list entries reach `h` and the `K` winners' top bits are distinct,
    /// the winners are the true best `K` in the true order, provided no
    /// lane hides a member that reaches `h`. A lane with more members there
    /// than it keeps shows all `L` of its entries reaching `h`: with
    /// `L > K` that alone exceeds `K` entries, and with `L == K` such a lane
    /// holds all `K` winners (for random weights, one lookup in
    /// `8^(K-1)`), and its members are counted directly. Otherwise the
    /// caller's exact path answers.
    ///
    /// After the first [`TAGGED_HEAD`] members a chunk is weighed and
    /// compared with the current `h` first, and only a chunk with a member
    /// at or above it is inserted; skipped members are below `h`, so they
    /// cannot matter.
    ///
    /// # Safety
    /// The CPU must support AVX-512F and AVX-512DQ.
    #[target_feature(enable = "avx512f,avx512dq,popcnt")]
    pub(super) unsafe fn top_tagged<const K: usize, const L: usize>(
        key_hash: u64,
        members: &[u64],
        out: &mut [usize; K],
    ) -> bool {
        const { assert!(K >= 1 && (L == K || L == K + 1)) };
        let len = members.len();
        if len > TAGGED_MAX {
            return false;
        }
        let key = _mm512_set1_epi64(key_hash as i64);
        let high = _mm512_set1_epi64(!TAG_MASK as i64);
        let lanes = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
        let first_tags = _mm512_sub_epi64(_mm512_set1_epi64(TAG_MASK as i64), lanes);
        let tags_at = |at: usize| _mm512_sub_epi64(first_tags, _mm512_set1_epi64(at as i64));
        // (weight & high) | tag
        let pack = |w: __m512i, tags: __m512i| _mm512_ternarylogic_epi64::<0xEA>(w, high, tags);
        let eight = _mm512_set1_epi64(8);
        // Empty slots hold 0, below every packed weight with a nonzero top.
        let mut lists = [_mm512_setzero_si512(); L];
        let head_end = len.min(TAGGED_HEAD) & !7;
        let mut tags = first_tags;
        let mut at = 0;
        while at < head_end {
            insert_lanes(&mut lists, pack(weigh8(key, members, at), tags), 0xff);
            tags = _mm512_sub_epi64(tags, eight);
            at += 8;
        }
        let best_lists = |lists: &[__m512i; L]| -> [__m512i; K] {
            let mut top = [_mm512_setzero_si512(); K];
            top.copy_from_slice(&lists[..K]);
            best_of_lanes(&top)
        };
        let mut floor = _mm512_and_si512(best_lists(&lists)[K - 1], high);
        while at + 8 <= len {
            let w = weigh8(key, members, at);
            if _mm512_cmpge_epu64_mask(w, floor) != 0 {
                insert_lanes(&mut lists, pack(w, tags_at(at)), 0xff);
                floor = _mm512_and_si512(best_lists(&lists)[K - 1], high);
            }
            at += 8;
        }
        if at < len {
            let (w, valid) = weigh_tail8(key, members, at);
            insert_lanes(&mut lists, pack(w, tags_at(at)), valid);
        }
        let best = best_lists(&lists);
        let floor = _mm512_and_si512(best[K - 1], high);
        let mut reaching = 0;
        for list in &lists {
            reaching += _mm512_cmpge_epu64_mask(*list, floor).count_ones();
        }
        let mut decided = reaching as usize == K;
        if L == K {
            let full = _mm512_cmpge_epu64_mask(lists[K - 1], floor);
            if full != 0 {
                // All K winners share this lane, which keeps no spare entry
                // to show whether another of its members reaches the floor
                // too: count them directly.
                let lane = full.trailing_zeros() as usize;
                let floor = _mm_cvtsi128_si64(_mm512_castsi512_si128(floor)) as u64;
                let reaching = members.iter().skip(lane).step_by(8).filter(|&&m| weight(key_hash, m) >= floor);
                decided &= reaching.count() == K;
            }
        }
        let mut above = u64::MAX;
        for (slot, packed) in out.iter_mut().zip(best) {
            let packed = _mm_cvtsi128_si64(_mm512_castsi512_si128(packed)) as u64;
            let top_bits = packed >> TAG_BITS;
            decided &= (top_bits < above) & (top_bits != 0);
            above = top_bits;
            *slot = (TAG_MASK - (packed & TAG_MASK)) as usize;
        }
        decided
    }

    /// Flipping the sign bit makes AVX2's signed 64-bit compare order
    /// unsigned values.
    const SIGN: i64 = i64::MIN;

    /// A 64-bit multiply by a constant from three 32×32→64 multiplies,
    /// because AVX2 has no 64-bit `mullo`. `b_hi` holds `b >> 32`.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn mullo_avx2(a: __m256i, b: __m256i, b_hi: __m256i) -> __m256i {
        let low = _mm256_mul_epu32(a, b);
        let a_hi = _mm256_srli_epi64::<32>(a);
        let cross = _mm256_add_epi64(_mm256_mul_epu32(a_hi, b), _mm256_mul_epu32(a, b_hi));
        _mm256_add_epi64(low, _mm256_slli_epi64::<32>(cross))
    }

    /// Weights of the 4 members at `members[at..at + 4]`, with the sign bit
    /// flipped for signed comparison.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn weigh4_flipped(key: __m256i, members: &[u64], at: usize) -> __m256i {
        let chunk = &members[at..at + 4];
        // SAFETY: `chunk` holds exactly 4 `u64`s, and the load is unaligned.
        let loaded = unsafe { _mm256_loadu_si256(chunk.as_ptr().cast()) };
        let m1 = _mm256_set1_epi64x(MIX_MUL_1 as i64);
        let m1_hi = _mm256_set1_epi64x((MIX_MUL_1 >> 32) as i64);
        let m2 = _mm256_set1_epi64x(MIX_MUL_2 as i64);
        let m2_hi = _mm256_set1_epi64x((MIX_MUL_2 >> 32) as i64);
        let z = _mm256_xor_si256(key, loaded);
        let z = _mm256_xor_si256(z, _mm256_srli_epi64::<30>(z));
        let z = mullo_avx2(z, m1, m1_hi);
        let z = _mm256_xor_si256(z, _mm256_srli_epi64::<27>(z));
        let z = mullo_avx2(z, m2, m2_hi);
        let z = _mm256_xor_si256(z, _mm256_srli_epi64::<31>(z));
        _mm256_xor_si256(z, _mm256_set1_epi64x(SIGN))
    }

    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn owner_avx2(key_hash: u64, members: &[u64]) -> Option<usize> {
        let len = members.len();
        if len < 8 {
            return owner_scalar(key_hash, members);
        }
        let key = _mm256_set1_epi64x(key_hash as i64);
        let lanes = _mm256_setr_epi64x(0, 1, 2, 3);
        let mut best_a = weigh4_flipped(key, members, 0);
        let mut index_a = lanes;
        let mut best_b = weigh4_flipped(key, members, 4);
        let mut index_b = _mm256_add_epi64(lanes, _mm256_set1_epi64x(4));
        let mut at = 8;
        while at + 8 <= len {
            let wa = weigh4_flipped(key, members, at);
            let wb = weigh4_flipped(key, members, at + 4);
            let ia = _mm256_add_epi64(lanes, _mm256_set1_epi64x(at as i64));
            let ib = _mm256_add_epi64(lanes, _mm256_set1_epi64x((at + 4) as i64));
            let ga = _mm256_cmpgt_epi64(wa, best_a);
            let gb = _mm256_cmpgt_epi64(wb, best_b);
            best_a = _mm256_blendv_epi8(best_a, wa, ga);
            index_a = _mm256_blendv_epi8(index_a, ia, ga);
            best_b = _mm256_blendv_epi8(best_b, wb, gb);
            index_b = _mm256_blendv_epi8(index_b, ib, gb);
            at += 8;
        }
        let mut weights = [0i64; 8];
        let mut indices = [0u64; 8];
        // SAFETY: each store writes 4 `i64`s or `u64`s into its half of an
        // 8-element array.
        unsafe {
            _mm256_storeu_si256(weights.as_mut_ptr().cast(), best_a);
            _mm256_storeu_si256(weights[4..].as_mut_ptr().cast(), best_b);
            _mm256_storeu_si256(indices.as_mut_ptr().cast(), index_a);
            _mm256_storeu_si256(indices[4..].as_mut_ptr().cast(), index_b);
        }
        let mut best = (0u64, usize::MAX);
        for (flipped, index) in weights.iter().zip(indices) {
            let w = (*flipped ^ SIGN) as u64;
            let index = index as usize;
            if w > best.0 || (w == best.0 && index < best.1) {
                best = (w, index);
            }
        }
        // The members after the last full chunk have higher indices than
        // any lane, so a strictly greater weight is needed to win.
        for (index, &member) in members.iter().enumerate().skip(at) {
            let w = weight(key_hash, member);
            if w > best.0 {
                best = (w, index);
            }
        }
        Some(best.1)
    }

    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn top_avx2(key_hash: u64, members: &[u64], best: &mut Best<'_, u64>) {
        let len = members.len();
        let key = _mm256_set1_epi64x(key_hash as i64);
        // Signed `>` against (floor - 1) is `>=` against the floor; a floor
        // of 0 admits everything, which "open" stands for.
        let mut open = true;
        let mut threshold = _mm256_setzero_si256();
        let mut weights = [0u64; 8];
        let mut at = 0;
        while at + 4 <= len {
            let w = weigh4_flipped(key, members, at);
            let hits = if open {
                0b1111
            } else {
                _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpgt_epi64(w, threshold))) as u8
            };
            if hits != 0 {
                let unflipped = _mm256_xor_si256(w, _mm256_set1_epi64x(SIGN));
                // SAFETY: the store writes 4 `u64`s into an 8-element array.
                unsafe { _mm256_storeu_si256(weights.as_mut_ptr().cast(), unflipped) };
                offer_lanes(&weights, hits, at, best);
                match best.floor().and_then(|floor| floor.checked_sub(1)) {
                    Some(below) => {
                        open = false;
                        threshold = _mm256_set1_epi64x((below as i64) ^ SIGN);
                    }
                    None => open = true,
                }
            }
            at += 4;
        }
        top_scalar(key_hash, &members[at..], at, best);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn golden_member_and_key_hashes() {
        // Frozen: these pin xxh3, the member seed and the finaliser.
        assert_eq!(key_hash(b""), 0x2d06_8005_38d3_94c2);
        assert_eq!(mix(0), 0);
        assert_eq!(mix(1), 0x5692_161d_100b_05e5);
        assert_eq!(weight(key_hash(b"acme"), member_hash(b"r1")), GOLDEN_ACME_R1);
    }

    /// `weight(key_hash("acme"), member_hash("r1"))`, frozen.
    const GOLDEN_ACME_R1: u64 = 0x6ec8_48d0_ce22_926d;

    fn reference_top(key_hash: u64, members: &[u64], n: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..members.len()).collect();
        order.sort_by(|&a, &b| weight(key_hash, members[b]).cmp(&weight(key_hash, members[a])).then(a.cmp(&b)));
        order.truncate(n);
        order
    }

    fn members_strategy() -> impl Strategy<Value = Vec<u64>> {
        // Draw from a small pool now and then so equal member hashes (and so
        // equal weights) occur.
        prop_oneof![proptest::collection::vec(any::<u64>(), 0..70), proptest::collection::vec(0u64..4, 0..40),]
    }

    proptest! {
        #[test]
        fn every_kernel_matches_the_reference(key in any::<u64>(), members in members_strategy(), n in 0usize..40) {
            let expected_top = reference_top(key, &members, n);
            for kernel in Kernel::available() {
                prop_assert_eq!(kernel.owner(key, &members), reference_top(key, &members, 1).first().copied(), "{:?}", kernel);
                let mut got = Vec::new();
                kernel.top(key, &members, n, |i| got.push(i));
                prop_assert_eq!(&got, &expected_top, "{:?}", kernel);
            }
        }
    }

    #[test]
    fn kernels_agree_on_every_length_up_to_three_chunks() {
        for len in 0..=40usize {
            let members: Vec<u64> = (0..len as u64).map(|i| member_hash(&i.to_le_bytes())).collect();
            for key in 0..64u64 {
                let key = key_hash(&key.to_le_bytes());
                for kernel in Kernel::available() {
                    assert_eq!(kernel.owner(key, &members), owner_scalar(key, &members), "{kernel:?} len {len}");
                    for n in [1, 2, 3, 4, 5, 9] {
                        let mut got = Vec::new();
                        kernel.top(key, &members, n, |i| got.push(i));
                        assert_eq!(got, reference_top(key, &members, n), "{kernel:?} len {len} n {n}");
                    }
                }
            }
        }
    }

    #[test]
    fn kernels_agree_across_block_boundaries() {
        for len in [511usize, 512, 513, 1030, 1536] {
            let members: Vec<u64> = (0..len as u64).map(|i| member_hash(&i.to_be_bytes())).collect();
            for key in 0..8u64 {
                let key = key_hash(&key.to_be_bytes());
                for kernel in Kernel::available() {
                    assert_eq!(kernel.owner(key, &members), owner_scalar(key, &members));
                    for n in [2, 3, 8, 16, 17, 40] {
                        let mut got = Vec::new();
                        kernel.top(key, &members, n, |i| got.push(i));
                        assert_eq!(got, reference_top(key, &members, n), "{kernel:?} len {len} n {n}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_weight_of_zero_is_handled_by_every_kernel() {
        // The weight is 0 exactly when the key hash equals the member hash.
        // Lengths past 32 and 128 reach the few-replica kernels' blocks.
        for len in (1..=20u64).chain([33, 40, 100, 128, 129, 300]) {
            let members: Vec<u64> = (0..len).collect();
            for key in (0..len).step_by(len.div_ceil(20) as usize) {
                for kernel in Kernel::available() {
                    for n in 1..=5 {
                        let mut got = Vec::new();
                        kernel.top(key, &members, n, |i| got.push(i));
                        assert_eq!(got, reference_top(key, &members, n), "{kernel:?} len {len} n {n}");
                    }
                }
            }
        }
    }

    #[test]
    fn ties_go_to_the_lower_index_in_every_kernel() {
        // All members equal: every weight ties, so index 0 owns.
        for len in (1..=33usize).chain([40, 100, 128, 129, 300]) {
            let members = vec![7u64; len];
            for kernel in Kernel::available() {
                assert_eq!(kernel.owner(3, &members), Some(0), "{kernel:?} len {len}");
                let mut got = Vec::new();
                for n in 1..=6 {
                    got.clear();
                    kernel.top(3, &members, n, |i| got.push(i));
                    assert_eq!(got, (0..len.min(n)).collect::<Vec<_>>(), "{kernel:?} len {len} n {n}");
                }
            }
        }
    }

    /// The member hash whose weight for `key` is `weight`: the finaliser is
    /// a bijection, and this is its inverse.
    fn member_with_weight(key: u64, weight: u64) -> u64 {
        let inverse = |m: u64| (0..6).fold(m, |x, _| x.wrapping_mul(2u64.wrapping_sub(m.wrapping_mul(x))));
        let unshift = |z: u64, s: u32| (1..=64 / s).fold(z, |acc, k| acc ^ (z >> (s * k)));
        let mut z = unshift(weight, 31);
        z = z.wrapping_mul(inverse(MIX_MUL_2));
        z = unshift(z, 27);
        z = z.wrapping_mul(inverse(MIX_MUL_1));
        unshift(z, 30) ^ key
    }

    #[test]
    fn weights_that_agree_in_their_top_bits_are_still_ordered_exactly() {
        // The AVX-512 few-replica kernel orders by the top 48 bits of a
        // weight and must notice when those do not decide.
        let key = key_hash(b"collide");
        for weight in [0, 1, u64::MAX, 0x1234_5678_9abc_def0] {
            assert_eq!(self::weight(key, member_with_weight(key, weight)), weight);
        }
        let top = |high: u64, low: u64| (high << 16) | low;
        let high = 0xffff_ffff_fff0;
        for len in [3usize, 4, 10, 40, 100, 127, 128, 129, 300, 1000] {
            let places = [(0, 1), (1, 0), (len - 1, 0), (len / 2, len / 3 + 1), (2, len - 1)];
            for (case, &(a, b)) in places.iter().enumerate() {
                if a == b || a >= len || b >= len {
                    continue;
                }
                let members: Vec<u64> = (0..len as u64).map(|i| member_hash(&i.to_le_bytes())).collect();
                // Two leaders that tie in the top bits, the heavier later…
                let mut first = members.clone();
                first[a] = member_with_weight(key, top(high, 0x0001));
                first[b] = member_with_weight(key, top(high, 0xfffe));
                // …and two that tie at the boundary of the best three.
                let mut boundary = first.clone();
                boundary[a] = member_with_weight(key, top(high, 9));
                boundary[b] = member_with_weight(key, top(high - 1, 5));
                let c = (a + b + 1) % len;
                if c != a && c != b {
                    boundary[c] = member_with_weight(key, top(high - 1, 0xff00));
                }
                for members in [&first, &boundary] {
                    for kernel in Kernel::available() {
                        for n in 1..=5 {
                            let mut got = Vec::new();
                            kernel.top(key, members, n, |i| got.push(i));
                            assert_eq!(got, reference_top(key, members, n), "{kernel:?} len {len} case {case} n {n}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn winners_that_share_a_lane_are_found_exactly() {
        // The AVX-512 kernel keeps only as many entries per lane as it
        // returns for three or more winners; when they all share a lane,
        // another member of that lane may tie them in the top bits.
        let key = key_hash(b"one lane");
        let top = |high: u64, low: u64| (high << 16) | low;
        let high = 0xffff_ffff_fff0;
        for len in [24usize, 40, 100, 1000, 1030, 1500] {
            for lane in [0usize, 3, 7] {
                let members: Vec<u64> = (0..len as u64).map(|i| member_hash(&i.to_le_bytes())).collect();
                let mut shared = members.clone();
                for (rank, slot) in [lane + 8, lane, lane + 16, lane + 24].into_iter().enumerate() {
                    if slot < len {
                        shared[slot] = member_with_weight(key, top(high - rank as u64, 7));
                    }
                }
                // A later member of the same lane that ties the fourth in
                // its top bits but is heavier, so it is third or fourth.
                let mut hidden = shared.clone();
                if let Some(slot) = (lane + 32..len).step_by(8).next_back() {
                    hidden[slot] = member_with_weight(key, top(high - 3, 0xfff0));
                }
                for members in [&shared, &hidden] {
                    for kernel in Kernel::available() {
                        for n in 1..=5 {
                            let mut got = Vec::new();
                            kernel.top(key, members, n, |i| got.push(i));
                            assert_eq!(got, reference_top(key, members, n), "{kernel:?} len {len} lane {lane} n {n}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn sets_too_large_for_tags_take_the_general_path() {
        let len = x86_tag_limit() + 10;
        let members: Vec<u64> = (0..len as u64).map(|i| member_hash(&i.to_le_bytes())).collect();
        for key in 0..2u64 {
            for kernel in Kernel::available() {
                for n in [2, 3, 4] {
                    let mut got = Vec::new();
                    kernel.top(key, &members, n, |i| got.push(i));
                    assert_eq!(got, reference_top(key, &members, n), "{kernel:?} n {n}");
                }
            }
        }
    }

    fn x86_tag_limit() -> usize {
        #[cfg(target_arch = "x86_64")]
        {
            x86::TAGGED_MAX
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            65_535
        }
    }
}
