//! Capacity-weighted ranks: the logarithmic method of weighted rendezvous
//! hashing.
//!
//! A member with capacity `c` and weight `h` (from either weight function)
//! scores `c / -ln(u)`, where `u` maps `h` into the open interval (0, 1). For
//! independent uniform `u`, `-ln(u) / c` is exponentially distributed with
//! rate `c`, so the member with the highest score (the smallest of those
//! exponentials) is member `i` with probability `c_i / Σ c`, and removing or
//! adding a member still moves only the keys that member loses or wins.
//!
//! # Portability
//!
//! `ln` is `libm::log`, a pure-Rust port of a correctly specified C library
//! routine, instead of the platform's `f64::ln`, whose last bit may differ
//! between C libraries. The remaining steps (an exact integer-to-float
//! conversion, one multiplication by a power of two, one division) are
//! correctly rounded IEEE-754 operations, so every platform computes the
//! same score bits. Golden vectors in the tests freeze them.

use std::num::NonZeroU32;

/// `2^-52`: scales a 52-bit integer into [0, 1).
const UNIT: f64 = 1.0 / (1u64 << 52) as f64;

/// Maps a weight to `u` in (0, 1): the top 52 bits plus one half, scaled.
/// Both ends are excluded, so `ln(u)` is finite and strictly negative.
#[inline]
pub(crate) fn unit_interval(weight: u64) -> f64 {
    // The sum is exact: 52 bits plus a half needs 53 bits of mantissa.
    ((weight >> 12) as f64 + 0.5) * UNIT
}

/// The score `capacity / -ln(u)`; always positive and finite.
#[inline]
pub(crate) fn score(weight: u64, capacity: NonZeroU32) -> f64 {
    f64::from(capacity.get()) / -libm::log(unit_interval(weight))
}

/// A total order over weighted members: the score first, then the full
/// weight. A positive finite `f64`'s bit pattern orders like its value, so
/// the rank is a plain integer. Breaking score ties by the weight makes a set
/// whose capacities are all equal choose exactly like the unweighted set.
#[inline]
pub(crate) fn rank(weight: u64, capacity: NonZeroU32) -> u128 {
    (u128::from(score(weight, capacity).to_bits()) << 64) | u128::from(weight)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap(c: u32) -> NonZeroU32 {
        NonZeroU32::new(c).unwrap()
    }

    #[test]
    fn the_interval_excludes_both_ends() {
        assert!(unit_interval(0) > 0.0);
        assert!(unit_interval(u64::MAX) < 1.0);
        assert!(score(u64::MAX, cap(u32::MAX)).is_finite());
        assert!(score(0, cap(1)) > 0.0);
    }

    #[test]
    fn rank_is_monotone_in_the_weight_for_equal_capacities() {
        let weights = [0u64, 1, 4095, 4096, 1 << 40, u64::MAX / 3, u64::MAX - 1, u64::MAX];
        for pair in weights.windows(2) {
            assert!(rank(pair[0], cap(3)) < rank(pair[1], cap(3)), "{pair:?}");
        }
    }

    #[test]
    fn golden_scores() {
        // Frozen bit patterns: a change here changes which member owns keys
        // in weighted deployments.
        let cases = [
            (0u64, 1u32, GOLDEN[0]),
            (u64::MAX, 1, GOLDEN[1]),
            (0x8000_0000_0000_0000, 1, GOLDEN[2]),
            (0x6dbc_f892_fc24_da1b, 7, GOLDEN[3]),
            (0x0123_4567_89ab_cdef, 1000, GOLDEN[4]),
        ];
        for (weight, capacity, bits) in cases {
            assert_eq!(score(weight, cap(capacity)).to_bits(), bits, "{weight:#x} {capacity}");
        }
    }

    const GOLDEN: [u64; 5] = [
        0x3f9b_dfbb_a5a3_a303,
        0x4340_0000_0000_0000,
        0x3ff7_1547_652b_8300,
        0x4020_8701_19c3_d002,
        0x4067_144f_5a22_9267,
    ];
}
