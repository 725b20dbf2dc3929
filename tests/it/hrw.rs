//! HRW ownership through the public API: the Go package's vectors, frozen
//! golden vectors for the fast weight, the properties every replica relies
//! on, balance, and the seams.

use std::collections::BTreeSet;
use std::num::NonZeroU32;

use hoplock::hrw::{
    self, KeyLease, KeyLeaseError, Leases, Member, MemberSet, Membership, MembershipError, Options, Round, Simd,
    Static, StaticLeases, WeightFn,
};
use proptest::prelude::*;
use sha2::{Digest, Sha256};

const WEIGHT_FNS: [WeightFn; 2] = [WeightFn::Fast, WeightFn::GoSha256];

fn members(ids: &[&str]) -> Vec<Member> {
    ids.iter().map(|id| Member::new(*id, format!("{id}.internal:7000"))).collect()
}

fn numbered(prefix: &str, count: usize) -> Vec<Member> {
    (0..count).map(|i| Member::new(format!("{prefix}{i:02}"), "")).collect()
}

fn ids<'a>(members: impl IntoIterator<Item = &'a Member>) -> Vec<&'a str> {
    members.into_iter().map(|m| m.id.as_str()).collect()
}

/// Every way this crate answers, so each vector checks all of them.
fn all_sets(weight_fn: WeightFn, members: &[Member]) -> Vec<MemberSet> {
    [Simd::Auto, Simd::Off]
        .into_iter()
        .map(|simd| MemberSet::with_options(members.to_vec(), Options { weight_fn, simd }))
        .collect()
}

/// Checks owner, is_owner and replicas for one vector, by the free functions
/// and by prepared sets.
fn check_vector(weight_fn: WeightFn, key: &str, member_ids: &[&str], n: usize, expected: &[&str]) {
    let list = members(member_ids);
    assert_eq!(weight_fn.owner(key, &list).map(|m| m.id.as_str()), Some(expected[0]), "{weight_fn} owner {key:?}");
    assert_eq!(ids(weight_fn.replicas(key, &list, n)), expected, "{weight_fn} replicas {key:?}");
    for id in member_ids {
        assert_eq!(weight_fn.is_owner(key, id, &list), *id == expected[0], "{weight_fn} is_owner {key:?} {id}");
    }
    for set in all_sets(weight_fn, &list) {
        assert_eq!(set.owner(key).map(|m| m.id.as_str()), Some(expected[0]), "{:?}", set.options());
        assert_eq!(ids(set.replicas(key, n)), expected, "{:?}", set.options());
        for id in member_ids {
            assert_eq!(set.is_owner(key, id), *id == expected[0]);
        }
    }
}

#[test]
fn go_ha_package_vectors() {
    let go = WeightFn::GoSha256;
    check_vector(go, "acme", &["r1", "r2", "r3"], 3, &["r2", "r1", "r3"]);
    check_vector(go, "acme", &["r1", "r2", "r3", "r4"], 3, &["r2", "r1", "r4"]);
    check_vector(go, "g", &["r1", "r2", "r3", "r4"], 3, &["r4", "r1", "r2"]);
    check_vector(go, "_global", &["r1", "r2", "r3"], 3, &["r1", "r3", "r2"]);
    let replicas: Vec<String> = (0..16).map(|i| format!("replica-{i:02}")).collect();
    let replicas: Vec<&str> = replicas.iter().map(String::as_str).collect();
    check_vector(go, "some-org-slug", &replicas, 3, &["replica-01", "replica-03", "replica-10"]);
    assert_eq!(go.weight("acme", "r1"), 0x6dbc_f892_fc24_da1b);
}

#[test]
fn go_sha256_handles_keys_longer_than_a_block() {
    // Cross-checked with an independent SHA-256 implementation.
    check_vector(WeightFn::GoSha256, &"k".repeat(100), &["r1", "r2", "r3"], 3, &["r3", "r2", "r1"]);
    for len in [55, 56, 63, 64, 65, 119, 120, 200, 1000] {
        let key = "x".repeat(len);
        for id in ["", "r1", &"i".repeat(60)] {
            assert_eq!(WeightFn::GoSha256.weight(&key, id), naive_weight(&key, id), "key {len} id {}", id.len());
        }
    }
}

/// Frozen golden vectors for the fast weight. They were computed by an
/// independent implementation of the definition documented on
/// [`WeightFn::Fast`]; if one of these fails, owners changed for every
/// deployment, which is a breaking change.
#[test]
fn fast_golden_vectors() {
    let fast = WeightFn::Fast;
    assert_eq!(fast.weight("acme", "r1"), 0x6ec8_48d0_ce22_926d);
    assert_eq!(fast.weight("acme", "r2"), 0xaa52_cfea_2c32_0c47);
    assert_eq!(fast.weight("", ""), 0x5725_338b_1af4_4412);
    assert_eq!(fast.weight("g", "r4"), 0x1d17_0293_c8e1_de00);
    check_vector(fast, "acme", &["r1", "r2", "r3"], 3, &["r2", "r3", "r1"]);
    check_vector(fast, "acme", &["r1", "r2", "r3", "r4"], 3, &["r2", "r3", "r1"]);
    check_vector(fast, "g", &["r1", "r2", "r3", "r4"], 3, &["r3", "r2", "r4"]);
    check_vector(fast, "_global", &["r1", "r2", "r3"], 3, &["r1", "r2", "r3"]);
    let replicas: Vec<String> = (0..16).map(|i| format!("replica-{i:02}")).collect();
    let replicas: Vec<&str> = replicas.iter().map(String::as_str).collect();
    check_vector(fast, "some-org-slug", &replicas, 3, &["replica-12", "replica-00", "replica-13"]);
    check_vector(fast, "", &["a", "b", "c"], 3, &["c", "b", "a"]);
    check_vector(fast, "ключ/ü", &["r1", "r2", "r3", "r4", "r5"], 3, &["r4", "r5", "r1"]);
    check_vector(fast, &"k".repeat(100), &["r1", "r2", "r3"], 3, &["r3", "r1", "r2"]);
}

/// The Go seed's algorithm, done naively: a full SHA-256 per member and a
/// full sort.
fn naive_weight(key: &str, id: &str) -> u64 {
    let digest = Sha256::new().chain_update(key.as_bytes()).chain_update([0u8]).chain_update(id.as_bytes()).finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

fn naive_replicas(key: &str, members: &[Member], n: usize) -> Vec<String> {
    let mut unique: Vec<&str> = ids(members);
    unique.sort_unstable();
    unique.dedup();
    unique.sort_by(|a, b| naive_weight(key, b).cmp(&naive_weight(key, a)).then(a.cmp(b)));
    unique.into_iter().take(n).map(str::to_owned).collect()
}

#[test]
fn go_sha256_owner_matches_the_naive_seed_around_the_one_block_limits() {
    // Keys of every length up to past one block, against sets of 1 to 9
    // members (every remainder of the four-way SHA-NI interleave) whose ids
    // straddle the longest id that still fits in one block with the key.
    let id_lengths = [0usize, 1, 12, 30, 38, 39, 40, 53, 54, 55, 70];
    for key_len in 0..=70usize {
        let key: String = (0..key_len).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
        for size in 1..=9usize {
            let list: Vec<Member> = (0..size)
                .map(|i| {
                    let len = id_lengths[(i * 7 + key_len) % id_lengths.len()];
                    Member::new(format!("{i}{}", "x".repeat(len)), "")
                })
                .collect();
            let expected = naive_replicas(&key, &list, 3);
            for set in all_sets(WeightFn::GoSha256, &list) {
                assert_eq!(
                    set.owner(&key).map(|m| m.id.as_str()),
                    Some(expected[0].as_str()),
                    "key {key_len} size {size}"
                );
                assert_eq!(ids(set.replicas(&key, 3)), expected, "key {key_len} size {size}");
                for member in &list {
                    assert_eq!(set.is_owner(&key, &member.id), member.id == expected[0]);
                }
            }
        }
    }
}

#[test]
fn empty_sets_own_nothing() {
    for weight_fn in WEIGHT_FNS {
        assert!(weight_fn.owner("k", &[]).is_none());
        assert!(!weight_fn.is_owner("k", "r1", &[]));
        assert!(weight_fn.replicas("k", &[], 3).is_empty());
        for set in all_sets(weight_fn, &[]) {
            assert!(set.owner("k").is_none());
            assert!(!set.is_owner("k", "r1"));
            assert!(set.replicas("k", 3).is_empty());
        }
    }
}

#[test]
fn strangers_and_zero_replicas() {
    let list = members(&["r1", "r2"]);
    for weight_fn in WEIGHT_FNS {
        assert!(!weight_fn.is_owner("k", "r3", &list));
        assert!(weight_fn.replicas("k", &list, 0).is_empty());
        for set in all_sets(weight_fn, &list) {
            assert!(!set.is_owner("k", "r3"));
            assert!(!set.is_owner("k", ""));
            assert!(set.replicas("k", 0).is_empty());
            assert_eq!(set.replicas("k", 10).len(), 2);
        }
    }
}

#[test]
fn many_replicas_take_the_heap_path_with_the_same_order() {
    let list = numbered("m", 80);
    for weight_fn in WEIGHT_FNS {
        for key in ["a", "b", "orders/1"] {
            let expected: Vec<&str> = {
                let mut all = list.iter().collect::<Vec<_>>();
                all.sort_by(|a, b| {
                    weight_fn.weight(key, &b.id).cmp(&weight_fn.weight(key, &a.id)).then(a.id.cmp(&b.id))
                });
                ids(all)
            };
            for n in [31, 32, 33, 50, 80, 200] {
                let want = &expected[..n.min(80)];
                assert_eq!(ids(weight_fn.replicas(key, &list, n)), want, "free {weight_fn} n {n}");
                for set in all_sets(weight_fn, &list) {
                    assert_eq!(ids(set.replicas(key, n)), want, "{:?} n {n}", set.options());
                }
            }
        }
    }
}

#[test]
fn replicas_into_reuses_the_buffer() {
    let set = MemberSet::new(numbered("r", 20));
    let mut buffer = Vec::with_capacity(3);
    let capacity = buffer.capacity();
    for key in 0..100 {
        let key = key.to_string();
        set.replicas_into(&key, 3, &mut buffer);
        assert_eq!(buffer.len(), 3);
        assert_eq!(buffer[0], set.owner(&key).unwrap());
    }
    assert_eq!(buffer.capacity(), capacity);
}

#[test]
fn duplicate_ids_collapse_deterministically() {
    let a = vec![Member::new("r1", "x"), Member::new("r2", ""), Member::new("r1", "a"), Member::new("r2", "")];
    let b: Vec<Member> = a.iter().rev().cloned().collect();
    for weight_fn in WEIGHT_FNS {
        for key in ["acme", "g", "", "zz"] {
            assert_eq!(weight_fn.replicas(key, &a, 4), weight_fn.replicas(key, &b, 4));
            assert_eq!(weight_fn.replicas(key, &a, 4).len(), 2);
            let set_a = MemberSet::with_options(a.clone(), Options { weight_fn, ..Options::default() });
            let set_b = MemberSet::with_options(b.clone(), Options { weight_fn, ..Options::default() });
            assert_eq!(set_a.replicas(key, 4), set_b.replicas(key, 4));
            assert_eq!(set_a.replicas(key, 4), weight_fn.replicas(key, &a, 4));
        }
    }
    assert_eq!(MemberSet::new(a).get("r1").unwrap().addr, "a");
}

fn member_list() -> impl Strategy<Value = Vec<Member>> {
    // Short ids from a small alphabet so duplicates and shared prefixes turn
    // up; arbitrary Unicode now and then.
    proptest::collection::vec(
        prop_oneof![4 => "[a-d]{0,3}", 1 => "\\PC{0,12}"].prop_map(|id| Member::new(id, "")),
        0..40,
    )
}

fn weight_fn() -> impl Strategy<Value = WeightFn> {
    prop_oneof![Just(WeightFn::Fast), Just(WeightFn::GoSha256)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn order_never_matters(weight_fn in weight_fn(), list in member_list(), key in "\\PC{0,40}", seed in any::<u64>()) {
        let mut shuffled = list.clone();
        // A deterministic shuffle from the seed.
        let mut state = seed | 1;
        for i in (1..shuffled.len()).rev() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            shuffled.swap(i, (state % (i as u64 + 1)) as usize);
        }
        prop_assert_eq!(weight_fn.owner(&key, &list), weight_fn.owner(&key, &shuffled));
        prop_assert_eq!(weight_fn.replicas(&key, &list, 5), weight_fn.replicas(&key, &shuffled, 5));
        let a = MemberSet::with_options(list.clone(), Options { weight_fn, ..Options::default() });
        let b = MemberSet::with_options(shuffled, Options { weight_fn, ..Options::default() });
        prop_assert_eq!(a.replicas(&key, 5), b.replicas(&key, 5));
    }

    #[test]
    fn lookups_agree_with_each_other(weight_fn in weight_fn(), list in member_list(), key in "\\PC{0,40}", n in 1usize..10) {
        let owner = weight_fn.owner(&key, &list);
        let replicas = weight_fn.replicas(&key, &list, n);
        prop_assert_eq!(replicas.first().copied(), owner);
        for member in &list {
            prop_assert_eq!(weight_fn.is_owner(&key, &member.id, &list), owner.map(|o| &o.id) == Some(&member.id));
        }
        for set in all_sets(weight_fn, &list) {
            // The prepared set, with SIMD or without, and its early-exit
            // `is_owner` equal the plain scan.
            prop_assert_eq!(set.owner(&key), owner);
            prop_assert_eq!(set.replicas(&key, n), replicas.clone());
            for member in &list {
                prop_assert_eq!(set.is_owner(&key, &member.id), owner.map(|o| &o.id) == Some(&member.id));
            }
        }
    }

    #[test]
    fn go_sha256_matches_the_naive_seed(list in member_list(), key in "\\PC{0,90}", n in 1usize..6) {
        let expected = naive_replicas(&key, &list, n);
        let free: Vec<&str> = ids(WeightFn::GoSha256.replicas(&key, &list, n));
        prop_assert_eq!(&free, &expected);
        let set = MemberSet::with_options(list, Options { weight_fn: WeightFn::GoSha256, ..Options::default() });
        prop_assert_eq!(set.owner(&key).map(|m| m.id.as_str()), expected.first().map(String::as_str));
        prop_assert_eq!(ids(set.replicas(&key, n)), expected);
    }

    #[test]
    fn simd_equals_scalar_on_large_sets(count in 0usize..300, keys in proptest::collection::vec(any::<u64>(), 1..20), n in 1usize..12) {
        let list = numbered("node-", count);
        let auto = MemberSet::with_options(list.clone(), Options { simd: Simd::Auto, ..Options::default() });
        let scalar = MemberSet::with_options(list, Options { simd: Simd::Off, ..Options::default() });
        for key in keys {
            let key = key.to_le_bytes();
            prop_assert_eq!(auto.owner(key), scalar.owner(key));
            prop_assert_eq!(auto.replicas(key, n), scalar.replicas(key, n));
        }
    }

    #[test]
    fn removing_a_member_moves_only_its_keys(weight_fn in weight_fn(), count in 2usize..30, gone in any::<prop::sample::Index>()) {
        let list = numbered("r", count);
        let gone = &list[gone.index(count)].id;
        let rest: Vec<Member> = list.iter().filter(|m| &m.id != gone).cloned().collect();
        let before = MemberSet::with_options(list.clone(), Options { weight_fn, ..Options::default() });
        let after = MemberSet::with_options(rest, Options { weight_fn, ..Options::default() });
        for key in 0..200 {
            let key = format!("key-{key}");
            let was = &before.owner(&key).unwrap().id;
            let now = &after.owner(&key).unwrap().id;
            if was != gone {
                prop_assert_eq!(was, now);
            } else {
                // The key goes to its first successor.
                prop_assert_eq!(now, &before.replicas(&key, 2)[1].id);
            }
        }
    }

    #[test]
    fn adding_a_member_moves_keys_only_to_it(weight_fn in weight_fn(), count in 1usize..30) {
        let list = numbered("r", count);
        let mut grown = list.clone();
        grown.push(Member::new("newcomer", ""));
        let before = MemberSet::with_options(list, Options { weight_fn, ..Options::default() });
        let after = MemberSet::with_options(grown, Options { weight_fn, ..Options::default() });
        for key in 0..200 {
            let key = format!("key-{key}");
            let was = &before.owner(&key).unwrap().id;
            let now = &after.owner(&key).unwrap().id;
            prop_assert!(was == now || now == "newcomer", "{} moved from {} to {}", key, was, now);
        }
    }

    #[test]
    fn equal_capacities_choose_like_the_unweighted_set(weight_fn in weight_fn(), count in 0usize..40, capacity in 1u32..1000) {
        let list = numbered("r", count);
        let capacity = NonZeroU32::new(capacity).unwrap();
        let options = Options { weight_fn, ..Options::default() };
        let plain = MemberSet::with_options(list.clone(), options);
        let weighted = MemberSet::weighted(list.iter().cloned().map(|m| (m, capacity)), options);
        for key in 0..50 {
            let key = key.to_string();
            prop_assert_eq!(plain.owner(&key), weighted.owner(&key));
            prop_assert_eq!(plain.replicas(&key, 3), weighted.replicas(&key, 3));
        }
    }

    #[test]
    fn weighted_lookups_agree_with_each_other(weight_fn in weight_fn(),
                                              entries in proptest::collection::vec(("[a-f]{1,2}", 1u32..6), 0..20),
                                              key in "\\PC{0,20}", n in 1usize..5) {
        let weighted: Vec<(Member, NonZeroU32)> = entries
            .into_iter()
            .map(|(id, c)| (Member::new(id, ""), NonZeroU32::new(c).unwrap()))
            .collect();
        let mut reversed = weighted.clone();
        reversed.reverse();
        let options = Options { weight_fn, ..Options::default() };
        let set = MemberSet::weighted(weighted, options);
        let other = MemberSet::weighted(reversed, options);
        let owner = set.owner(&key);
        prop_assert_eq!(owner, other.owner(&key));
        let replicas = set.replicas(&key, n);
        prop_assert_eq!(replicas.first().copied(), owner);
        for member in set.members() {
            prop_assert_eq!(set.is_owner(&key, &member.id), owner == Some(member));
        }
    }
}

/// Each member's share of 100,000 keys must be within ±5 % of its fair
/// share.
fn assert_balanced(counts: &[usize], shares: &[f64], label: &str) {
    let total: usize = counts.iter().sum();
    for (count, share) in counts.iter().zip(shares) {
        let fair = total as f64 * share;
        let (low, high) = (fair * 0.95, fair * 1.05);
        assert!(
            (low..=high).contains(&(*count as f64)),
            "{label}: {count} keys, expected {low:.0}..={high:.0}; all counts {counts:?}"
        );
    }
}

const BALANCE_KEYS: usize = 100_000;

#[test]
fn ownership_is_balanced_for_both_weight_functions() {
    let list = numbered("replica-", 10);
    for weight_fn in WEIGHT_FNS {
        let set = MemberSet::with_options(list.clone(), Options { weight_fn, ..Options::default() });
        let mut counts = [0usize; 10];
        for key in 0..BALANCE_KEYS {
            let owner = set.owner(format!("tenant/{key}")).unwrap();
            let index = set.members().iter().position(|m| m == owner).unwrap();
            counts[index] += 1;
        }
        assert_balanced(&counts, &[0.1; 10], weight_fn.name());
    }
}

#[test]
fn weighted_ownership_follows_capacity() {
    let capacities = [1u32, 2, 3, 4];
    let total: u32 = capacities.iter().sum();
    let shares: Vec<f64> = capacities.iter().map(|c| f64::from(*c) / f64::from(total)).collect();
    for weight_fn in WEIGHT_FNS {
        let set = MemberSet::weighted(
            capacities
                .iter()
                .enumerate()
                .map(|(i, c)| (Member::new(format!("r{i}"), ""), NonZeroU32::new(*c).unwrap())),
            Options { weight_fn, ..Options::default() },
        );
        let mut counts = [0usize; 4];
        for key in 0..BALANCE_KEYS {
            let owner = set.owner(key.to_string()).unwrap();
            let index = set.members().iter().position(|m| m == owner).unwrap();
            counts[index] += 1;
        }
        assert_balanced(&counts, &shares, &format!("weighted {weight_fn}"));
    }
}

#[test]
fn weighted_golden_vectors() {
    // Frozen: a change here moves keys in weighted deployments.
    let set = |weight_fn| {
        MemberSet::weighted(
            [("r1", 1u32), ("r2", 2), ("r3", 5)].map(|(id, c)| (Member::new(id, ""), NonZeroU32::new(c).unwrap())),
            Options { weight_fn, ..Options::default() },
        )
    };
    let fast = set(WeightFn::Fast);
    let go = set(WeightFn::GoSha256);
    let keys = ["acme", "g", "_global", "some-org-slug", "", "orders/42"];
    let fast_owners: Vec<&str> = keys.iter().map(|k| fast.owner(k).unwrap().id.as_str()).collect();
    let go_owners: Vec<&str> = keys.iter().map(|k| go.owner(k).unwrap().id.as_str()).collect();
    assert_eq!(fast_owners, GOLDEN_WEIGHTED_FAST);
    assert_eq!(go_owners, GOLDEN_WEIGHTED_GO);
}

// Computed by an independent implementation of the documented scores.
const GOLDEN_WEIGHTED_FAST: [&str; 6] = ["r3", "r3", "r1", "r3", "r3", "r3"];
const GOLDEN_WEIGHTED_GO: [&str; 6] = ["r2", "r3", "r1", "r3", "r3", "r1"];

struct Failing;

impl Membership for Failing {
    fn self_id(&self) -> &str {
        "r1"
    }

    async fn members(&self) -> Result<Vec<Member>, MembershipError> {
        Err(MembershipError::Unavailable("discovery timed out".into()))
    }
}

struct Empty;

impl Membership for Empty {
    fn self_id(&self) -> &str {
        "r1"
    }

    async fn members(&self) -> Result<Vec<Member>, MembershipError> {
        Ok(Vec::new())
    }
}

#[tokio::test]
async fn membership_failures_fail_closed() {
    assert!(hrw::owns(&Static::new("solo"), "any key", WeightFn::Fast).await.unwrap());
    assert!(hrw::owns(&Static::new("solo"), "", WeightFn::GoSha256).await.unwrap());
    assert!(hrw::owns(&Failing, "k", WeightFn::Fast).await.is_err());
    assert!(!hrw::owns(&Empty, "k", WeightFn::Fast).await.unwrap());
    let set = hrw::prepare(&Empty, WeightFn::Fast).await.unwrap();
    assert!(set.owner("k").is_none());
}

#[tokio::test]
async fn static_leases_are_round_one() {
    let lease = StaticLeases::new("solo").acquire("orders/42").await.unwrap();
    assert_eq!(lease, KeyLease { key: "orders/42".into(), owner: "solo".into(), round: Round::ZERO.next().unwrap() });
    assert_eq!(lease.round.get(), 1);
    let error = KeyLeaseError::Held { key: "k".into(), holder: "r2".into() };
    assert!(error.to_string().contains("r2"));
}

#[test]
fn member_sets_report_what_they_hold() {
    let set = MemberSet::new(members(&["b", "a", "c", "a"]));
    assert_eq!(ids(set.members()), ["a", "b", "c"]);
    assert_eq!(set.len(), 3);
    assert!(!set.is_empty());
    assert!(!set.is_weighted());
    assert!(set.get("z").is_none());
    let unique: BTreeSet<&str> = (0..100).map(|k| set.owner(k.to_string()).unwrap().id.as_str()).collect();
    assert_eq!(unique.len(), 3, "every member owns some of 100 keys");
}
