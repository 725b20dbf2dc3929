//! Rendezvous (highest-random-weight) ownership: which replica is the single
//! writer for a key right now, answered identically on every replica with no
//! coordinator.
//!
//! Every member gets a pseudo-random weight per key, computed from the key
//! and the member's id alone; the heaviest member owns the key, and the next
//! heaviest take over in order when it leaves. Because a weight depends on
//! nothing but the pair, replicas that see the same member set agree without
//! talking, and a membership change moves only the keys the departing member
//! owned (or the joining member wins).
//!
//! # Two weight functions
//!
//! - [`WeightFn::Fast`], the default: XXH3 of the key, combined with a
//!   precomputed hash of each member id through a 64-bit finaliser. Stable
//!   across processes, platforms and releases; its exact definition is in
//!   the documentation of [`WeightFn::Fast`], and **changing it is a breaking
//!   change**.
//! - [`WeightFn::GoSha256`]: bit-compatible with the Go `ha` package, for
//!   deployments that mix Go and Rust replicas: the first 8 bytes, big-endian,
//!   of SHA-256(key ‖ 0x00 ‖ id).
//!
//! Whichever is used, every replica must use the same one.
//!
//! # The rules
//!
//! - The highest weight owns the key; equal weights go to the bytewise
//!   smaller id. [`replicas`] orders members by weight, descending, then id,
//!   ascending.
//! - An empty member set owns nothing ([`owner`] returns `None`, [`is_owner`]
//!   returns `false`): callers fail closed.
//! - Duplicate ids count once, and the answer never depends on the order of
//!   the member list (the Go package's answer does, for duplicates).
//!
//! # One-off calls and prepared sets
//!
//! The free functions ([`owner`], [`is_owner`], [`replicas`],
//! [`replicas_into`], using [`WeightFn::Fast`]; the same methods on
//! [`WeightFn`] for either function) hash every member id on every call. A
//! [`MemberSet`] hashes the ids once, picks a SIMD kernel where the CPU has
//! one, and then answers a lookup without allocating.
//!
//! ```
//! use hoplock_hrw::{self as hrw, Member, MemberSet};
//!
//! let members: Vec<Member> = (1..=4).map(|i| Member::new(format!("r{i}"), format!("10.0.0.{i}:7000"))).collect();
//!
//! // One-off.
//! let owner = hrw::owner("orders/42", &members).unwrap();
//!
//! // Prepared: the same answers, faster.
//! let set = MemberSet::new(members.clone());
//! assert_eq!(set.owner("orders/42"), Some(owner));
//! assert!(set.is_owner("orders/42", &owner.id));
//! assert_eq!(set.replicas("orders/42", 2)[0], owner);
//! ```
//!
//! # Weighted members
//!
//! [`MemberSet::weighted`] gives each member a capacity; over many keys a
//! member owns a share proportional to it. The score is the logarithmic
//! method's `capacity / -ln(u)`, computed with a portable `ln` so every
//! platform agrees (see [`MemberSet::weighted`]).
//!
//! # This crate and `hoplock::hrw`
//!
//! This crate is the hashing alone: it does no I/O, needs no async runtime,
//! and depends only on the hash functions (and on serde, behind the `serde`
//! feature, for the member and weight-function types). `hoplock::hrw`
//! re-exports all of it unchanged and adds the async seams: `Membership`,
//! which supplies the live member list, and `Leases`, which confirms
//! ownership of one key with a fencing round.

mod capacity;
mod fast;
mod select;
mod set;
mod sha;

use std::fmt;
use std::str::FromStr;

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

pub use set::{MemberSet, Options, Simd};

use select::{Candidate, INLINE_REPLICAS, TopN};

/// A member of the replica set. Its weight for a key derives from `id` only;
/// `addr` is carried along so a caller can reach the owner.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
pub struct Member {
    /// The stable identity that ownership is computed from.
    pub id: String,
    /// Where to reach the member; not part of the weight.
    pub addr: String,
}

impl Member {
    /// A member with this id and address.
    ///
    /// ```
    /// let m = hoplock_hrw::Member::new("r1", "10.0.0.1:7000");
    /// assert_eq!(m.id, "r1");
    /// ```
    pub fn new(id: impl Into<String>, addr: impl Into<String>) -> Self {
        Self { id: id.into(), addr: addr.into() }
    }
}

/// The function that gives each (key, member id) pair its weight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum WeightFn {
    /// The fast, stable, non-cryptographic weight:
    /// `mix(xxh3_64(key) ^ xxh3_64_with_seed(id, 0x9e37_79b9_7f4a_7c15))`,
    /// where `mix` is SplitMix64's `Mix13` finaliser:
    /// `z ^= z >> 30; z *= 0xbf58_476d_1ce4_e5b9; z ^= z >> 27;
    /// z *= 0x94d0_49bb_1331_11eb; z ^= z >> 31` (wrapping).
    ///
    /// Only integer arithmetic is involved, so the weight is the same on
    /// every platform. It is frozen by golden vectors: **changing it is a
    /// breaking change**, because replicas on different versions would then
    /// disagree about owners.
    #[default]
    Fast,
    /// The Go `ha` package's weight: the first 8 bytes, big-endian, of
    /// SHA-256(key ‖ 0x00 ‖ id).
    GoSha256,
}

/// The weight function's name was not recognised.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown weight function {0:?}; expected \"fast\" or \"go-sha256\"")]
pub struct ParseWeightFnError(String);

impl WeightFn {
    /// The name used on the command line and in configuration.
    pub const fn name(self) -> &'static str {
        match self {
            WeightFn::Fast => "fast",
            WeightFn::GoSha256 => "go-sha256",
        }
    }

    /// The weight of member `id` for `key`.
    ///
    /// ```
    /// use hoplock_hrw::WeightFn;
    ///
    /// assert_eq!(WeightFn::GoSha256.weight("acme", "r1"), 0x6dbc_f892_fc24_da1b);
    /// ```
    pub fn weight(self, key: impl AsRef<[u8]>, id: &str) -> u64 {
        KeyWeigher::new(self, key.as_ref()).weight(id)
    }

    /// The owner of `key` among `members`; `None` when `members` is empty.
    ///
    /// ```
    /// use hoplock_hrw::{Member, WeightFn};
    ///
    /// let members = ["r1", "r2", "r3"].map(|id| Member::new(id, ""));
    /// assert_eq!(WeightFn::GoSha256.owner("acme", &members).unwrap().id, "r2");
    /// ```
    pub fn owner(self, key: impl AsRef<[u8]>, members: &[Member]) -> Option<&Member> {
        let weigher = KeyWeigher::new(self, key.as_ref());
        let mut best: Option<(u64, &Member)> = None;
        for member in members {
            let candidate = (weigher.weight(&member.id), member);
            if best.is_none_or(|b| ahead(&candidate, &b)) {
                best = Some(candidate);
            }
        }
        best.map(|(_, member)| member)
    }

    /// Whether `self_id` owns `key` among `members`; `false` when it is not
    /// among them. Stops at the first member that outweighs `self_id`.
    ///
    /// ```
    /// use hoplock_hrw::{Member, WeightFn};
    ///
    /// let members = ["r1", "r2", "r3"].map(|id| Member::new(id, ""));
    /// assert!(WeightFn::GoSha256.is_owner("acme", "r2", &members));
    /// assert!(!WeightFn::GoSha256.is_owner("acme", "r1", &members));
    /// ```
    pub fn is_owner(self, key: impl AsRef<[u8]>, self_id: &str, members: &[Member]) -> bool {
        let weigher = KeyWeigher::new(self, key.as_ref());
        let mine = weigher.weight(self_id);
        let mut present = false;
        for member in members {
            if member.id == self_id {
                present = true;
                continue;
            }
            let theirs = weigher.weight(&member.id);
            if theirs > mine || (theirs == mine && member.id.as_str() < self_id) {
                return false;
            }
        }
        present
    }

    /// The owner of `key` and its failover successors, at most `n` distinct
    /// members, best first.
    ///
    /// ```
    /// use hoplock_hrw::{Member, WeightFn};
    ///
    /// let members = ["r1", "r2", "r3"].map(|id| Member::new(id, ""));
    /// let ids: Vec<&str> = WeightFn::GoSha256.replicas("acme", &members, 3).iter().map(|m| m.id.as_str()).collect();
    /// assert_eq!(ids, ["r2", "r1", "r3"]);
    /// ```
    pub fn replicas(self, key: impl AsRef<[u8]>, members: &[Member], n: usize) -> Vec<&Member> {
        let mut out = Vec::with_capacity(n.min(members.len()));
        self.replicas_into(key, members, n, &mut out);
        out
    }

    /// [`WeightFn::replicas`] into a caller's buffer, which is cleared first.
    /// With enough capacity in `out` and `n` at most 32, this does not
    /// allocate.
    pub fn replicas_into<'m>(self, key: impl AsRef<[u8]>, members: &'m [Member], n: usize, out: &mut Vec<&'m Member>) {
        out.clear();
        let n = n.min(members.len());
        if n == 0 {
            return;
        }
        let weigher = KeyWeigher::new(self, key.as_ref());
        let by_member = |a: &Candidate<u64>, b: &Candidate<u64>| ahead(&(a.0, &members[a.1]), &(b.0, &members[b.1]));
        if n <= INLINE_REPLICAS {
            let mut slots = [(0u64, 0usize); INLINE_REPLICAS];
            let mut top = TopN::new(&mut slots[..n]);
            let same = |i: usize, j: usize| members[i].id == members[j].id;
            for (index, member) in members.iter().enumerate() {
                let candidate = (weigher.weight(&member.id), index);
                if let Some(last) = top.last() {
                    // A duplicate of a kept member with a smaller address
                    // ranks ahead of it, so this filter keeps such a one.
                    if !by_member(&candidate, last) {
                        continue;
                    }
                }
                top.offer(candidate, by_member, same);
            }
            out.extend(top.as_slice().iter().map(|&(_, index)| &members[index]));
        } else {
            let mut all: Vec<(u64, &Member)> =
                members.iter().map(|member| (weigher.weight(&member.id), member)).collect();
            all.sort_unstable_by(|a, b| {
                b.0.cmp(&a.0).then_with(|| a.1.id.cmp(&b.1.id)).then_with(|| a.1.addr.cmp(&b.1.addr))
            });
            all.dedup_by(|later, first| later.1.id == first.1.id);
            out.extend(all.into_iter().take(n).map(|(_, member)| member));
        }
    }
}

/// The order of the free functions: weight descending, then id ascending,
/// then address ascending so duplicate ids resolve the same way whatever the
/// list order.
#[inline]
fn ahead(a: &(u64, &Member), b: &(u64, &Member)) -> bool {
    (b.0, &a.1.id, &a.1.addr) < (a.0, &b.1.id, &b.1.addr)
}

impl fmt::Display for WeightFn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for WeightFn {
    type Err = ParseWeightFnError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fast" => Ok(WeightFn::Fast),
            "go-sha256" => Ok(WeightFn::GoSha256),
            other => Err(ParseWeightFnError(other.to_owned())),
        }
    }
}

/// A key prepared for weighing against member ids that are not
/// precomputed.
enum KeyWeigher {
    Fast(u64),
    Sha(sha::KeyStream),
}

impl KeyWeigher {
    fn new(weight_fn: WeightFn, key: &[u8]) -> Self {
        match weight_fn {
            WeightFn::Fast => KeyWeigher::Fast(fast::key_hash(key)),
            WeightFn::GoSha256 => KeyWeigher::Sha(sha::KeyStream::new(key)),
        }
    }

    #[inline]
    fn weight(&self, id: &str) -> u64 {
        match self {
            KeyWeigher::Fast(key) => fast::weight(*key, fast::member_hash(id.as_bytes())),
            KeyWeigher::Sha(stream) => stream.weight(id.as_bytes()),
        }
    }
}

/// The owner of `key` among `members` by the default [`WeightFn::Fast`];
/// `None` when `members` is empty.
///
/// ```
/// use hoplock_hrw::{self as hrw, Member};
///
/// assert!(hrw::owner("k", &[]).is_none());
/// let members = [Member::new("a", ""), Member::new("b", "")];
/// assert!(hrw::owner("k", &members).is_some());
/// ```
pub fn owner(key: impl AsRef<[u8]>, members: &[Member]) -> Option<&Member> {
    WeightFn::Fast.owner(key, members)
}

/// Whether `self_id` owns `key` among `members` by [`WeightFn::Fast`].
///
/// ```
/// use hoplock_hrw::{self as hrw, Member};
///
/// let members = [Member::new("a", ""), Member::new("b", "")];
/// assert_ne!(hrw::is_owner("k", "a", &members), hrw::is_owner("k", "b", &members));
/// ```
pub fn is_owner(key: impl AsRef<[u8]>, self_id: &str, members: &[Member]) -> bool {
    WeightFn::Fast.is_owner(key, self_id, members)
}

/// The owner of `key` and its failover successors by [`WeightFn::Fast`], at
/// most `n` distinct members, best first.
///
/// ```
/// use hoplock_hrw::{self as hrw, Member};
///
/// let members = [Member::new("a", ""), Member::new("b", ""), Member::new("c", "")];
/// let replicas = hrw::replicas("k", &members, 2);
/// assert_eq!(replicas[0], hrw::owner("k", &members).unwrap());
/// assert_eq!(replicas.len(), 2);
/// ```
pub fn replicas(key: impl AsRef<[u8]>, members: &[Member], n: usize) -> Vec<&Member> {
    WeightFn::Fast.replicas(key, members, n)
}

/// [`replicas`] into a caller's buffer, which is cleared first; no
/// allocation with enough capacity and `n` at most 32.
///
/// ```
/// use hoplock_hrw::{self as hrw, Member};
///
/// let members = [Member::new("a", ""), Member::new("b", "")];
/// let mut buffer = Vec::with_capacity(2);
/// hrw::replicas_into("k", &members, 2, &mut buffer);
/// assert_eq!(buffer.len(), 2);
/// ```
pub fn replicas_into<'m>(key: impl AsRef<[u8]>, members: &'m [Member], n: usize, out: &mut Vec<&'m Member>) {
    WeightFn::Fast.replicas_into(key, members, n, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(members: &[&Member]) -> Vec<String> {
        members.iter().map(|m| m.id.clone()).collect()
    }

    #[test]
    fn free_functions_collapse_duplicates_whatever_the_order() {
        let forward = [Member::new("r1", "b"), Member::new("r2", ""), Member::new("r1", "a")];
        let mut backward = forward.clone();
        backward.reverse();
        for weight_fn in [WeightFn::Fast, WeightFn::GoSha256] {
            for key in ["acme", "g", "", "x"] {
                let a = weight_fn.replicas(key, &forward, 5);
                let b = weight_fn.replicas(key, &backward, 5);
                assert_eq!(a, b);
                assert_eq!(ids(&a).len(), 2, "duplicates count once");
                assert_eq!(weight_fn.owner(key, &forward), weight_fn.owner(key, &backward));
                let r1 = a.iter().find(|m| m.id == "r1").unwrap();
                assert_eq!(r1.addr, "a");
            }
        }
    }

    #[test]
    fn weight_fn_names_round_trip() {
        for weight_fn in [WeightFn::Fast, WeightFn::GoSha256] {
            assert_eq!(weight_fn.name().parse::<WeightFn>(), Ok(weight_fn));
        }
        assert!("sha256".parse::<WeightFn>().is_err());
    }
}
