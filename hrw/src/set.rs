//! The prepared member set: member ids hashed once, so a lookup hashes only
//! the key.

use std::num::NonZeroU32;

use super::capacity;
use super::fast::{self, Kernel};
use super::select;
use super::sha::{self, IdTail, KeyStream, OneBlock};
use super::{Member, WeightFn};

/// Whether lookups may use SIMD kernels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Simd {
    /// Use the widest kernel the CPU supports, detected once when the set is
    /// built. Every kernel returns the same answers as [`Simd::Off`].
    #[default]
    Auto,
    /// Use only the portable scalar kernel.
    Off,
}

/// How a [`MemberSet`] computes ownership.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Options {
    /// The weight function. Every replica must use the same one.
    pub weight_fn: WeightFn,
    /// Whether SIMD kernels may be used. Only speed depends on it.
    pub simd: Simd,
}

/// A member set prepared for many lookups.
///
/// Building the set sorts the members by id, collapses duplicate ids and
/// hashes every id once; each lookup then hashes only the key. Lookups do not
/// allocate (except [`MemberSet::replicas`], which returns a `Vec`, and any
/// request for more than 32 replicas). The answers never depend on the order
/// in which the members were given.
///
/// Duplicate ids collapse to the member with the bytewise smallest address
/// (and, for weighted sets, then the smallest capacity), so every replica
/// keeps the same one whatever order its list came in.
///
/// # Example
///
/// ```
/// use hoplock_hrw::{Member, MemberSet, Options, WeightFn};
///
/// let members = ["r1", "r2", "r3"].map(|id| Member::new(id, format!("{id}:7000")));
/// let set = MemberSet::with_options(members, Options { weight_fn: WeightFn::GoSha256, ..Options::default() });
/// assert_eq!(set.owner("acme").unwrap().id, "r2");
/// assert!(set.is_owner("acme", "r2"));
/// let order: Vec<&str> = set.replicas("acme", 3).iter().map(|m| m.id.as_str()).collect();
/// assert_eq!(order, ["r2", "r1", "r3"]);
/// ```
#[derive(Clone, Debug)]
pub struct MemberSet {
    /// Sorted by id, ids unique, so a lower index is a smaller id and the
    /// tie rule becomes "lower index wins".
    members: Vec<Member>,
    options: Options,
    kernel: Kernel,
    /// One entry per member for [`WeightFn::Fast`]; empty otherwise.
    fast_hashes: Vec<u64>,
    /// One entry per member for [`WeightFn::GoSha256`]; empty otherwise.
    sha_tails: Vec<IdTail>,
    /// One entry per member for a weighted set; empty otherwise.
    capacities: Vec<NonZeroU32>,
}

impl Default for MemberSet {
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

impl MemberSet {
    /// A set with the default options: the fast weight function and SIMD
    /// where available.
    ///
    /// ```
    /// use hoplock_hrw::{Member, MemberSet};
    ///
    /// let set = MemberSet::new(["a", "b", "c"].map(|id| Member::new(id, "")));
    /// let owner = set.owner("orders/42").unwrap();
    /// assert!(set.is_owner("orders/42", &owner.id));
    /// ```
    pub fn new(members: impl IntoIterator<Item = Member>) -> Self {
        Self::with_options(members, Options::default())
    }

    /// A set with explicit options.
    pub fn with_options(members: impl IntoIterator<Item = Member>, options: Options) -> Self {
        let mut members: Vec<Member> = members.into_iter().collect();
        members.sort_unstable_by(|a, b| a.id.cmp(&b.id).then_with(|| a.addr.cmp(&b.addr)));
        // `dedup_by` keeps the first of each run, the smallest address.
        members.dedup_by(|later, first| later.id == first.id);
        Self::build(members, Vec::new(), options)
    }

    /// A capacity-weighted set: over many keys, each member owns a share
    /// proportional to its capacity. If all capacities are equal the owners
    /// are exactly those of the unweighted set.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use hoplock_hrw::{Member, MemberSet, Options};
    ///
    /// let big = NonZeroU32::new(3).unwrap();
    /// let small = NonZeroU32::new(1).unwrap();
    /// let set = MemberSet::weighted(
    ///     [(Member::new("big", ""), big), (Member::new("small", ""), small)],
    ///     Options::default(),
    /// );
    /// let big_keys = (0..10_000).filter(|i| set.is_owner(i.to_string(), "big")).count();
    /// assert!((7_000..8_000).contains(&big_keys));
    /// ```
    pub fn weighted(members: impl IntoIterator<Item = (Member, NonZeroU32)>, options: Options) -> Self {
        let mut entries: Vec<(Member, NonZeroU32)> = members.into_iter().collect();
        entries.sort_unstable_by(|a, b| {
            a.0.id.cmp(&b.0.id).then_with(|| a.0.addr.cmp(&b.0.addr)).then_with(|| a.1.cmp(&b.1))
        });
        entries.dedup_by(|later, first| later.0.id == first.0.id);
        let (members, capacities) = entries.into_iter().unzip();
        Self::build(members, capacities, options)
    }

    fn build(members: Vec<Member>, capacities: Vec<NonZeroU32>, options: Options) -> Self {
        let kernel = match options.simd {
            Simd::Auto => Kernel::detect(),
            Simd::Off => Kernel::Scalar,
        };
        let (fast_hashes, sha_tails) = match options.weight_fn {
            WeightFn::Fast => (members.iter().map(|m| fast::member_hash(m.id.as_bytes())).collect(), Vec::new()),
            WeightFn::GoSha256 => (Vec::new(), members.iter().map(|m| IdTail::new(m.id.as_bytes())).collect()),
        };
        Self { members, options, kernel, fast_hashes, sha_tails, capacities }
    }

    /// The members, sorted by id, duplicates collapsed.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// The number of distinct members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the set is empty; an empty set owns nothing.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The options the set was built with.
    pub fn options(&self) -> Options {
        self.options
    }

    /// Whether the set was built with capacities.
    pub fn is_weighted(&self) -> bool {
        !self.capacities.is_empty()
    }

    /// The member with this id, if any.
    pub fn get(&self, id: &str) -> Option<&Member> {
        self.position(id).map(|index| &self.members[index])
    }

    /// Whether this set holds every member of `earlier`, each with the same
    /// address and capacity, and weighs keys as `earlier` does. Every set
    /// extends an empty one, which owns nothing.
    ///
    /// Then each key's owner here is either its owner in `earlier` or a
    /// member that `earlier` lacks: the weights of the members both sets
    /// hold are the same, and so is the tie rule between them. A member of
    /// both therefore owns here only keys it owned in `earlier`, and a
    /// caller that knows those keys need weigh only them again after a join.
    ///
    /// ```
    /// use hoplock_hrw::{Member, MemberSet};
    ///
    /// let before = MemberSet::new(["a", "b"].map(|id| Member::new(id, "")));
    /// let after = MemberSet::new(["a", "b", "c"].map(|id| Member::new(id, "")));
    /// assert!(after.extends(&before));
    /// assert!(!before.extends(&after));
    /// for key in (0..1000).map(|i| i.to_string()) {
    ///     if after.is_owner(&key, "a") {
    ///         assert!(before.is_owner(&key, "a"));
    ///     }
    /// }
    /// ```
    pub fn extends(&self, earlier: &MemberSet) -> bool {
        // An empty set owns nothing, whatever it would weigh keys by.
        if earlier.is_empty() {
            return true;
        }
        if self.options.weight_fn != earlier.options.weight_fn || self.is_weighted() != earlier.is_weighted() {
            return false;
        }
        // Both lists are sorted by id with ids unique, so one pass over this
        // set finds each of `earlier`'s members in order.
        let mut here = 0;
        for (there, member) in earlier.members.iter().enumerate() {
            while here < self.members.len() && self.members[here].id < member.id {
                here += 1;
            }
            let same =
                self.members.get(here) == Some(member) && self.capacities.get(here) == earlier.capacities.get(there);
            if !same {
                return false;
            }
            here += 1;
        }
        true
    }

    fn position(&self, id: &str) -> Option<usize> {
        self.members.binary_search_by(|m| m.id.as_str().cmp(id)).ok()
    }

    /// The owner of `key`, or `None` when the set is empty.
    ///
    /// ```
    /// use hoplock_hrw::MemberSet;
    ///
    /// assert!(MemberSet::default().owner("k").is_none());
    /// ```
    pub fn owner(&self, key: impl AsRef<[u8]>) -> Option<&Member> {
        self.owner_index(key.as_ref()).map(|index| &self.members[index])
    }

    fn owner_index(&self, key: &[u8]) -> Option<usize> {
        let len = self.members.len();
        if len == 0 {
            return None;
        }
        if self.is_weighted() {
            let mut weigher = self.weigher(key);
            return select::argmax(len, |start, out| weigher.fill_ranks(start, out));
        }
        match self.options.weight_fn {
            WeightFn::Fast => self.kernel.owner(fast::key_hash(key), &self.fast_hashes),
            WeightFn::GoSha256 => {
                let long_id = |index: usize| KeyStream::new(key).weight(self.members[index].id.as_bytes());
                if let Some(owner) = sha::owner(key, &self.sha_tails, long_id) {
                    return owner;
                }
                let mut weigher = self.weigher(key);
                select::argmax(len, |start, out| weigher.fill(start, out))
            }
        }
    }

    /// Whether the member `self_id` owns `key`. `false` when `self_id` is not
    /// a member.
    ///
    /// This stops at the first member that outweighs `self_id`, so it costs
    /// about `ln N + 2` weights on average instead of `N`.
    ///
    /// ```
    /// use hoplock_hrw::{Member, MemberSet};
    ///
    /// let set = MemberSet::new(["a", "b"].map(|id| Member::new(id, "")));
    /// assert_ne!(set.is_owner("k", "a"), set.is_owner("k", "b"));
    /// assert!(!set.is_owner("k", "stranger"));
    /// ```
    pub fn is_owner(&self, key: impl AsRef<[u8]>, self_id: &str) -> bool {
        let key = key.as_ref();
        let len = self.members.len();
        // For a few members the plain scan is cheaper than weighing self
        // separately; measured crossovers.
        let small = match self.options.weight_fn {
            WeightFn::Fast => len <= IS_OWNER_SCAN_MAX_FAST,
            WeightFn::GoSha256 => len <= IS_OWNER_SCAN_MAX_SHA,
        };
        if small && !self.is_weighted() {
            return self.owner_index(key).is_some_and(|i| self.members[i].id == self_id);
        }
        if !self.is_weighted() && self.options.weight_fn == WeightFn::Fast {
            return self.is_owner_fast(fast::key_hash(key), self_id);
        }
        let mut weigher = self.weigher(key);
        if self.is_weighted() {
            let Some(me) = self.position(self_id) else {
                return false;
            };
            let mut mine = [0u128; 1];
            weigher.fill_ranks(me, &mut mine);
            let mine = mine[0];
            return !any_in_batches(
                len,
                |start, out| weigher.fill_ranks(start, out),
                |i, theirs| theirs > mine || (theirs == mine && i < me),
            );
        }
        // Compute self's weight straight from the id, so the common case (a
        // heavier member turns up early) needs no search for self.
        let mine = weigher.weight_of_id(self_id);
        let beaten = any_in_batches(
            len,
            |start, out| weigher.fill(start, out),
            |i, theirs| theirs > mine || (theirs == mine && self.members[i].id.as_str() < self_id),
        );
        // Nobody outweighs self_id; it owns the key only if it is a member.
        !beaten && self.position(self_id).is_some()
    }

    /// `is_owner` for the unweighted fast weight: the kernel finds the
    /// first member at least as heavy as self, and only an equal weight
    /// (self itself, or a full 64-bit collision) looks at ids. Meeting self's
    /// own id there also proves membership, so the owner case needs no
    /// search for self.
    fn is_owner_fast(&self, key: u64, self_id: &str) -> bool {
        let mine = fast::weight(key, fast::member_hash(self_id.as_bytes()));
        let mut member = false;
        let mut from = 0;
        while let Some(index) = self.kernel.first_at_least(key, &self.fast_hashes, from, mine) {
            if fast::weight(key, self.fast_hashes[index]) > mine {
                return false;
            }
            match self.members[index].id.as_str().cmp(self_id) {
                // Equal weights go to the smaller id, as in `owner`.
                std::cmp::Ordering::Less => return false,
                std::cmp::Ordering::Equal => member = true,
                std::cmp::Ordering::Greater => {}
            }
            from = index + 1;
        }
        member
    }

    /// The owner of `key` followed by its failover successors, at most `n`
    /// members in all, best first.
    ///
    /// ```
    /// use hoplock_hrw::{Member, MemberSet};
    ///
    /// let set = MemberSet::new(["a", "b", "c", "d"].map(|id| Member::new(id, "")));
    /// let replicas = set.replicas("k", 3);
    /// assert_eq!(replicas.len(), 3);
    /// assert_eq!(replicas[0], set.owner("k").unwrap());
    /// ```
    pub fn replicas(&self, key: impl AsRef<[u8]>, n: usize) -> Vec<&Member> {
        let mut out = Vec::with_capacity(n.min(self.members.len()));
        self.replicas_into(key, n, &mut out);
        out
    }

    /// [`MemberSet::replicas`] into a caller's buffer, which is cleared
    /// first. With enough capacity in `out` and `n` at most 32, this does not
    /// allocate.
    ///
    /// ```
    /// use hoplock_hrw::{Member, MemberSet};
    ///
    /// let set = MemberSet::new(["a", "b", "c", "d"].map(|id| Member::new(id, "")));
    /// let mut buffer = Vec::with_capacity(3);
    /// for key in ["k1", "k2"] {
    ///     set.replicas_into(key, 3, &mut buffer);
    ///     assert_eq!(buffer.len(), 3);
    /// }
    /// ```
    pub fn replicas_into<'s>(&'s self, key: impl AsRef<[u8]>, n: usize, out: &mut Vec<&'s Member>) {
        out.clear();
        let key = key.as_ref();
        let len = self.members.len();
        let emit = |index: usize| out.push(&self.members[index]);
        if self.is_weighted() {
            let mut weigher = self.weigher(key);
            select::top_by_index(len, n, |start, out| weigher.fill_ranks(start, out), emit);
            return;
        }
        match self.options.weight_fn {
            WeightFn::Fast => self.kernel.top(fast::key_hash(key), &self.fast_hashes, n, emit),
            WeightFn::GoSha256 => {
                let mut weigher = self.weigher(key);
                select::top_by_index(len, n, |start, out| weigher.fill(start, out), emit);
            }
        }
    }
}

/// Up to this many members, `is_owner` with the fast weight runs the owner
/// kernel and compares: a SIMD scan of a few members costs less than
/// hashing the id of self.
const IS_OWNER_SCAN_MAX_FAST: usize = 32;

/// Up to this many members, Go-compatible `is_owner` weighs them all: the
/// early exit saves SHA-256 blocks only once it skips more than it costs to
/// weigh self separately.
const IS_OWNER_SCAN_MAX_SHA: usize = 4;

/// How many members `is_owner` weighs at a time. It usually stops after
/// about `ln N + 2` members, so a small batch wastes little work.
const IS_OWNER_BATCH: usize = 4;

/// Whether `beats(index, rank)` holds for any member, weighing in small
/// batches and stopping at the first batch with a hit.
#[inline]
fn any_in_batches<R: Copy + Default>(
    len: usize,
    mut fill: impl FnMut(usize, &mut [R]),
    mut beats: impl FnMut(usize, R) -> bool,
) -> bool {
    let mut ranks = [R::default(); IS_OWNER_BATCH];
    for start in (0..len).step_by(IS_OWNER_BATCH) {
        let batch = &mut ranks[..IS_OWNER_BATCH.min(len - start)];
        fill(start, batch);
        if batch.iter().enumerate().any(|(offset, &rank)| beats(start + offset, rank)) {
            return true;
        }
    }
    false
}

/// Computes member weights for one key, a batch at a time.
#[allow(
    clippy::large_enum_variant,
    reason = "it lives on the stack for one lookup; boxing the SHA-256 scratch would allocate per lookup"
)]
enum Weigher<'s> {
    Fast { key: u64, members: &'s [u64] },
    Sha { stream: KeyStream, one_block: Option<OneBlock>, tails: &'s [IdTail], members: &'s [Member] },
}

impl Weigher<'_> {
    /// The weight of an id that need not be in the set.
    fn weight_of_id(&self, id: &str) -> u64 {
        match self {
            Weigher::Fast { key, .. } => fast::weight(*key, fast::member_hash(id.as_bytes())),
            Weigher::Sha { stream, .. } => stream.weight(id.as_bytes()),
        }
    }

    /// Writes the weights of members `start..start + out.len()` into `out`.
    #[inline]
    fn fill(&mut self, start: usize, out: &mut [u64]) {
        match self {
            Weigher::Fast { key, members } => {
                for (slot, &member) in out.iter_mut().zip(&members[start..]) {
                    *slot = fast::weight(*key, member);
                }
            }
            Weigher::Sha { stream, one_block, tails, members } => {
                let members = &members[start..start + out.len()];
                let general = |k: usize| stream.weight(members[k].id.as_bytes());
                match one_block {
                    Some(block) => block.fill(&tails[start..start + out.len()], out, general),
                    None => out.iter_mut().enumerate().for_each(|(k, slot)| *slot = general(k)),
                }
            }
        }
    }
}

impl MemberSet {
    /// The per-member weight source for one key.
    fn weigher<'s>(&'s self, key: &[u8]) -> WeightedWeigher<'s> {
        let inner = match self.options.weight_fn {
            WeightFn::Fast => Weigher::Fast { key: fast::key_hash(key), members: &self.fast_hashes },
            WeightFn::GoSha256 => {
                let stream = KeyStream::new(key);
                Weigher::Sha { one_block: stream.one_block(), stream, tails: &self.sha_tails, members: &self.members }
            }
        };
        WeightedWeigher { inner, capacities: &self.capacities }
    }
}

/// A [`Weigher`] that also turns weights into capacity-weighted ranks.
struct WeightedWeigher<'s> {
    inner: Weigher<'s>,
    capacities: &'s [NonZeroU32],
}

impl WeightedWeigher<'_> {
    fn weight_of_id(&self, id: &str) -> u64 {
        self.inner.weight_of_id(id)
    }

    #[inline]
    fn fill(&mut self, start: usize, out: &mut [u64]) {
        self.inner.fill(start, out);
    }

    /// Writes the capacity-weighted ranks of members
    /// `start..start + out.len()` into `out`.
    fn fill_ranks(&mut self, start: usize, out: &mut [u128]) {
        let mut weights = [0u64; select::BATCH];
        for (chunk_start, chunk) in (start..).step_by(select::BATCH).zip(out.chunks_mut(select::BATCH)) {
            let weights = &mut weights[..chunk.len()];
            self.inner.fill(chunk_start, weights);
            for ((slot, &weight), &capacity) in
                chunk.iter_mut().zip(weights.iter()).zip(&self.capacities[chunk_start..])
            {
                *slot = capacity::rank(weight, capacity);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(ids: &[&str], weight_fn: WeightFn, simd: Simd) -> MemberSet {
        MemberSet::with_options(ids.iter().map(|id| Member::new(*id, "")), Options { weight_fn, simd })
    }

    #[test]
    fn duplicates_collapse_to_the_smallest_address() {
        let a = MemberSet::new([Member::new("r1", "b"), Member::new("r1", "a"), Member::new("r2", "")]);
        let b = MemberSet::new([Member::new("r2", ""), Member::new("r1", "a"), Member::new("r1", "b")]);
        assert_eq!(a.members(), b.members());
        assert_eq!(a.get("r1").unwrap().addr, "a");
        assert_eq!(a.len(), 2);
    }

    #[test]
    fn long_ids_and_keys_take_the_general_sha_path() {
        let long_id = "x".repeat(80);
        let ids = ["r1", long_id.as_str(), "r3"];
        let s = set(&ids, WeightFn::GoSha256, Simd::Auto);
        for key in ["", "acme", &"k".repeat(60), &"k".repeat(200)] {
            let expected = WeightFn::GoSha256.owner(key, s.members());
            assert_eq!(s.owner(key), expected, "key length {}", key.len());
        }
    }

    #[test]
    fn a_set_extends_only_sets_whose_members_it_keeps_unchanged() {
        let one = NonZeroU32::MIN;
        let two = NonZeroU32::new(2).unwrap();
        let plain = |ids: &[&str]| set(ids, WeightFn::Fast, Simd::Auto);
        let weighted = |members: &[(&str, &str, NonZeroU32)]| {
            MemberSet::weighted(members.iter().map(|&(id, addr, cap)| (Member::new(id, addr), cap)), Options::default())
        };
        assert!(plain(&["a", "b"]).extends(&plain(&["a", "b"])));
        assert!(plain(&["a", "b"]).extends(&MemberSet::default()));
        assert!(weighted(&[("a", "", two)]).extends(&MemberSet::default()), "an empty set owns nothing");
        assert!(plain(&["a", "c", "e"]).extends(&plain(&["c"])));
        assert!(!plain(&["a", "c"]).extends(&plain(&["b"])), "a member left");
        assert!(!plain(&["a"]).extends(&plain(&["a", "b"])), "a member left");
        assert!(!set(&["a", "b"], WeightFn::GoSha256, Simd::Auto).extends(&plain(&["a"])), "another weight");
        let collapsed = MemberSet::new([Member::new("a", "x"), Member::new("a", "b"), Member::new("c", "")]);
        assert!(collapsed.extends(&MemberSet::new([Member::new("a", "b")])), "a duplicate id collapses as before");
        assert!(!collapsed.extends(&MemberSet::new([Member::new("a", "x")])), "the duplicate kept another address");
        let moved = MemberSet::new([Member::new("a", "there")]);
        assert!(!moved.extends(&MemberSet::new([Member::new("a", "here")])), "another address");
        assert!(weighted(&[("a", "", one), ("b", "", two)]).extends(&weighted(&[("a", "", one)])));
        assert!(!weighted(&[("a", "", two)]).extends(&weighted(&[("a", "", one)])), "another capacity");
        assert!(!weighted(&[("a", "", one)]).extends(&plain(&["a"])), "weighted against unweighted");
    }

    proptest! {
        #[test]
        fn an_extended_set_moves_keys_only_to_its_new_members(
            ids in proptest::collection::btree_set("[a-z0-9]{1,6}", 1..50),
            kept in proptest::collection::vec(any::<bool>(), 50),
            keys in proptest::collection::vec(".{0,12}", 1..40),
            weight_fn in prop_oneof![Just(WeightFn::Fast), Just(WeightFn::GoSha256)],
            weighted_by in proptest::option::of(1u32..4),
        ) {
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            let build = |ids: &[&str]| {
                let options = Options { weight_fn, ..Options::default() };
                match weighted_by {
                    // A capacity per id, so both sets give each member the same one.
                    Some(spread) => MemberSet::weighted(
                        ids.iter().map(|id| (Member::new(*id, ""), NonZeroU32::new(1 + id.len() as u32 % spread).unwrap())),
                        options,
                    ),
                    None => MemberSet::with_options(ids.iter().map(|id| Member::new(*id, "")), options),
                }
            };
            // The earlier members are any of them, so a joiner may sort
            // before, between or after them and move their indices.
            let earlier_ids: Vec<&str> = ids.iter().zip(&kept).filter(|(_, kept)| **kept).map(|(id, _)| *id).collect();
            let earlier = build(&earlier_ids);
            let later = build(&ids);
            prop_assert!(later.extends(&earlier));
            for key in &keys {
                let owner = later.owner(key).unwrap();
                if earlier.get(&owner.id).is_some() {
                    prop_assert_eq!(earlier.owner(key), Some(owner));
                }
            }
        }

        #[test]
        fn simd_and_scalar_sets_agree(ids in proptest::collection::btree_set("[a-z0-9]{0,6}", 0..60),
                                      key in ".{0,20}", n in 0usize..8) {
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            let auto = set(&ids, WeightFn::Fast, Simd::Auto);
            let scalar = set(&ids, WeightFn::Fast, Simd::Off);
            prop_assert_eq!(auto.owner(&key), scalar.owner(&key));
            prop_assert_eq!(auto.replicas(&key, n), scalar.replicas(&key, n));
        }

        #[test]
        fn is_owner_agrees_with_owner_past_the_plain_scan(ids in proptest::collection::btree_set("[a-z0-9]{1,6}", 0..120),
                                                          key in ".{0,20}", stranger in "[A-Z]{1,4}") {
            // Sets past IS_OWNER_SCAN_MAX_FAST take the early-exit kernels;
            // the stranger (upper case, so never a member) owns nothing.
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            for simd in [Simd::Auto, Simd::Off] {
                let s = set(&ids, WeightFn::Fast, simd);
                let owner = s.owner(&key).map(|m| m.id.clone());
                for id in &ids {
                    prop_assert_eq!(s.is_owner(&key, id), owner.as_deref() == Some(*id));
                }
                prop_assert!(!s.is_owner(&key, &stranger));
            }
        }
    }
}
