//! Rendezvous (highest-random-weight) ownership: which replica is the single
//! writer for a key right now, answered identically on every replica with no
//! coordinator.
//!
//! The hashing lives in the `hoplock-hrw` crate, re-exported here unchanged,
//! so a program that wants only lookups can depend on that crate without an
//! async runtime. This module adds the two async seams the keyed writers
//! serve: [`Membership`] supplies the live member list ([`Static`] for a
//! single process), and [`Leases`] confirms ownership of one key with a
//! fencing [`Round`] ([`StaticLeases`] for a single process). The seams only
//! return futures; nothing here does I/O.
//!
//! ```
//! use hoplock::hrw::{Member, MemberSet};
//!
//! let set = MemberSet::new((1..=3).map(|i| Member::new(format!("r{i}"), format!("10.0.0.{i}:7000"))));
//! let owner = set.owner("orders/42").unwrap();
//! assert!(set.is_owner("orders/42", &owner.id));
//! ```

mod leases;
mod membership;

pub use hoplock_hrw::*;
pub use leases::{KeyLease, KeyLeaseError, Leases, Round, StaticLeases};
pub use membership::{Membership, MembershipError, Static, owns, prepare};
