//! The SIMD kernels. Each lane keeps its own running best, visiting its
//! members in index order and replacing only on a strictly greater
//! weight, so within a lane ties already go to the lower index; the final
//! reduction takes the greatest weight and, among lanes that hold it, the
//! lowest index.

use std::arch::x86_64::*;

use super::super::select::Best;
use super::{MIX_MUL_1, MIX_MUL_2, first_at_least_scalar, owner_scalar, top_scalar, weight};

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
pub(super) unsafe fn first_at_least_avx512(key_hash: u64, members: &[u64], from: usize, floor: u64) -> Option<usize> {
    let len = members.len();
    let key = _mm512_set1_epi64(key_hash as i64);
    let floor_lanes = _mm512_set1_epi64(floor as i64);
    let mut at = from;
    while at + 8 <= len {
        let hits = _mm512_cmpge_epu64_mask(weigh8(key, members, at), floor_lanes);
        if hits != 0 {
            return Some(at + hits.trailing_zeros() as usize);
        }
        at += 8;
    }
    if at < len {
        let (weights, valid) = weigh_tail8(key, members, at);
        let hits = _mm512_mask_cmpge_epu64_mask(valid, weights, floor_lanes);
        if hits != 0 {
            return Some(at + hits.trailing_zeros() as usize);
        }
    }
    None
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
        let (w, valid) = if at + 8 <= len { (weigh8(key, members, at), 0xff) } else { weigh_tail8(key, members, at) };
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
pub(super) unsafe fn first_at_least_avx2(key_hash: u64, members: &[u64], from: usize, floor: u64) -> Option<usize> {
    let len = members.len();
    let key = _mm256_set1_epi64x(key_hash as i64);
    // With the sign bits flipped, a signed `floor > w` is the unsigned one,
    // and the lanes where it fails are the hits.
    let floor_flipped = _mm256_set1_epi64x((floor as i64) ^ SIGN);
    let mut at = from;
    while at + 4 <= len {
        let below = _mm256_cmpgt_epi64(floor_flipped, weigh4_flipped(key, members, at));
        let hits = !_mm256_movemask_pd(_mm256_castsi256_pd(below)) & 0b1111;
        if hits != 0 {
            return Some(at + hits.trailing_zeros() as usize);
        }
        at += 4;
    }
    first_at_least_scalar(key_hash, members, at, floor)
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
        let hits =
            if open { 0b1111 } else { _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpgt_epi64(w, threshold))) as u8 };
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
