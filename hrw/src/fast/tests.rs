//! The fast weight and its kernels against the scalar reference and golden vectors.

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

proptest! {
    #[test]
    fn every_kernel_finds_the_first_member_at_least_as_heavy(
        key in any::<u64>(),
        members in members_strategy(),
        from in 0usize..80,
        pick in any::<prop::sample::Index>(),
        floor_offset in 0u64..3,
    ) {
        // A floor taken from a member's own weight (a little below, at or
        // above it) makes hits and near misses common.
        let floor = if members.is_empty() {
            floor_offset
        } else {
            weight(key, members[pick.index(members.len())]).wrapping_add(floor_offset).wrapping_sub(1)
        };
        let expected = (from..members.len()).find(|&i| weight(key, members[i]) >= floor);
        for kernel in Kernel::available() {
            prop_assert_eq!(kernel.first_at_least(key, &members, from, floor), expected, "{:?}", kernel);
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
