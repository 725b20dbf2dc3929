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

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use super::select::{Candidate, INLINE_REPLICAS, TopN, ahead_by_index, never_same};

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
            // SAFETY: `Kernel::Avx512` is only constructed after both
            // features were detected.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => unsafe { x86::owner_avx512(key_hash, members) },
        }
    }

    /// The best `n` members, best first, handed to `emit` by index.
    #[inline]
    pub(crate) fn top(self, key_hash: u64, members: &[u64], n: usize, emit: impl FnMut(usize)) {
        let n = n.min(members.len());
        if n == 0 {
            return;
        }
        if n > INLINE_REPLICAS {
            super::select::top_by_index(members.len(), n, |i| weight(key_hash, members[i]), emit);
            return;
        }
        let mut slots = [(0u64, 0usize); INLINE_REPLICAS];
        let mut top = TopN::new(&mut slots[..n]);
        match self {
            Kernel::Scalar => top_scalar(key_hash, members, 0, &mut top),
            // SAFETY: as in `owner`.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => unsafe { x86::top_avx2(key_hash, members, &mut top) },
            // SAFETY: as in `owner`.
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => unsafe { x86::top_avx512(key_hash, members, &mut top) },
        }
        top.as_slice().iter().map(|c| c.1).for_each(emit);
    }
}

#[inline]
pub(crate) fn owner_scalar(key_hash: u64, members: &[u64]) -> Option<usize> {
    super::select::argmax(members.len(), |i| weight(key_hash, members[i]))
}

/// Offers `members` (whose first index is `base`) to `top` one by one,
/// skipping those that cannot enter.
#[inline]
fn top_scalar(key_hash: u64, members: &[u64], base: usize, top: &mut TopN<'_, u64>) {
    for (offset, &member) in members.iter().enumerate() {
        let candidate: Candidate<u64> = (weight(key_hash, member), base + offset);
        if let Some(last) = top.last() {
            if !ahead_by_index(&candidate, last) {
                continue;
            }
        }
        top.offer(candidate, ahead_by_index, never_same);
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

    use super::super::select::{TopN, ahead_by_index, never_same};
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

    /// Offers the lanes of `mask` in `weights` (members `base..base + 8`)
    /// to `top`, in index order.
    #[inline]
    fn offer_lanes(weights: &[u64; 8], mut mask: u8, base: usize, top: &mut TopN<'_, u64>) {
        while mask != 0 {
            let lane = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            let candidate = (weights[lane], base + lane);
            if let Some(last) = top.last() {
                if !ahead_by_index(&candidate, last) {
                    continue;
                }
            }
            top.offer(candidate, ahead_by_index, never_same);
        }
    }

    /// # Safety
    /// The CPU must support AVX-512F and AVX-512DQ.
    #[target_feature(enable = "avx512f,avx512dq")]
    pub(super) unsafe fn top_avx512(key_hash: u64, members: &[u64], top: &mut TopN<'_, u64>) {
        let len = members.len();
        let key = _mm512_set1_epi64(key_hash as i64);
        // Until the selection is full every member enters; afterwards only
        // weights at or above the last kept one can, and the exact order,
        // ties included, is settled by the scalar offer.
        let mut threshold = _mm512_setzero_si512();
        let mut weights = [0u64; 8];
        let mut at = 0;
        while at + 8 <= len {
            let w = weigh8(key, members, at);
            let hits = _mm512_cmpge_epu64_mask(w, threshold);
            if hits != 0 {
                // SAFETY: `weights` is 8 `u64`s, the size of the store.
                unsafe { _mm512_storeu_si512(weights.as_mut_ptr().cast(), w) };
                offer_lanes(&weights, hits, at, top);
                threshold = _mm512_set1_epi64(top.last().map_or(0, |c| c.0) as i64);
            }
            at += 8;
        }
        if at < len {
            let (w, valid) = weigh_tail8(key, members, at);
            let hits = _mm512_mask_cmpge_epu64_mask(valid, w, threshold);
            if hits != 0 {
                // SAFETY: as above.
                unsafe { _mm512_storeu_si512(weights.as_mut_ptr().cast(), w) };
                offer_lanes(&weights, hits, at, top);
            }
        }
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
    pub(super) unsafe fn top_avx2(key_hash: u64, members: &[u64], top: &mut TopN<'_, u64>) {
        let len = members.len();
        let key = _mm256_set1_epi64x(key_hash as i64);
        // Signed `>` against (threshold - 1) is `>=` against the threshold;
        // the sign-flipped zero minus one does not exist, so "everything
        // enters" is a separate flag.
        let mut open = true;
        let mut threshold = _mm256_setzero_si256();
        let mut weights = [0u64; 4];
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
                // SAFETY: `weights` is 4 `u64`s, the size of the store.
                unsafe { _mm256_storeu_si256(weights.as_mut_ptr().cast(), unflipped) };
                let mut padded = [0u64; 8];
                padded[..4].copy_from_slice(&weights);
                offer_lanes(&padded, hits, at, top);
                if let Some(last) = top.last() {
                    match last.0.checked_sub(1) {
                        Some(below) => {
                            open = false;
                            threshold = _mm256_set1_epi64x((below as i64) ^ SIGN);
                        }
                        None => open = true,
                    }
                }
            }
            at += 4;
        }
        top_scalar(key_hash, &members[at..], at, top);
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
        assert_eq!(
            weight(key_hash(b"acme"), member_hash(b"r1")),
            GOLDEN_ACME_R1
        );
    }

    /// `weight(key_hash("acme"), member_hash("r1"))`, frozen.
    const GOLDEN_ACME_R1: u64 = 0x6ec8_48d0_ce22_926d;

    fn reference_top(key_hash: u64, members: &[u64], n: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..members.len()).collect();
        order.sort_by(|&a, &b| {
            weight(key_hash, members[b])
                .cmp(&weight(key_hash, members[a]))
                .then(a.cmp(&b))
        });
        order.truncate(n);
        order
    }

    fn members_strategy() -> impl Strategy<Value = Vec<u64>> {
        // Draw from a small pool now and then so equal member hashes (and so
        // equal weights) occur.
        prop_oneof![
            proptest::collection::vec(any::<u64>(), 0..70),
            proptest::collection::vec(0u64..4, 0..40),
        ]
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
            let members: Vec<u64> = (0..len as u64)
                .map(|i| member_hash(&i.to_le_bytes()))
                .collect();
            for key in 0..64u64 {
                let key = key_hash(&key.to_le_bytes());
                for kernel in Kernel::available() {
                    assert_eq!(
                        kernel.owner(key, &members),
                        owner_scalar(key, &members),
                        "{kernel:?} len {len}"
                    );
                    for n in [1, 2, 3, 5, 9] {
                        let mut got = Vec::new();
                        kernel.top(key, &members, n, |i| got.push(i));
                        assert_eq!(
                            got,
                            reference_top(key, &members, n),
                            "{kernel:?} len {len} n {n}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn ties_go_to_the_lower_index_in_every_kernel() {
        // All members equal: every weight ties, so index 0 owns.
        for len in 1..=33usize {
            let members = vec![7u64; len];
            for kernel in Kernel::available() {
                assert_eq!(kernel.owner(3, &members), Some(0), "{kernel:?} len {len}");
                let mut got = Vec::new();
                kernel.top(3, &members, 3, |i| got.push(i));
                assert_eq!(got, (0..len.min(3)).collect::<Vec<_>>());
            }
        }
    }
}
