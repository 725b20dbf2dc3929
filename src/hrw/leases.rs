//! The per-key lease seam: confirming ownership of one key with a fencing
//! token before writing.
//!
//! HRW names the owner from the member list alone, so two replicas with
//! different views of the list can both believe they own a key for a while.
//! A key lease closes that gap: the owner acquires `key` and stamps its
//! writes with the lease's [`Round`], and the store rejects a lower round.
//! The names differ from the election lease's ([`crate::lease`]) because this
//! lease is per key, not per group.

use std::future::Future;

/// The fencing token of a key lease: the library's [`Generation`] type, so
/// the same fence code checks election and key leases.
///
/// [`Generation`]: crate::lease::Generation
pub type Round = crate::lease::Generation;

/// A held lease on one key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeyLease {
    /// The key the lease covers.
    pub key: String,
    /// The member id holding the lease.
    pub owner: String,
    /// The fencing token for writes under this lease.
    pub round: Round,
}

/// Why a key lease could not be acquired. The caller must not write the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyLeaseError {
    /// Another member holds the key.
    #[error("key {key:?} is held by {holder:?}")]
    Held {
        /// The key asked for.
        key: String,
        /// Who holds it.
        holder: String,
    },
    /// The lease store could not be reached or did not answer in time.
    #[error("lease store unavailable: {0}")]
    Unavailable(String),
}

/// A source of per-key leases.
///
/// # Example
///
/// ```
/// use hoplock::hrw::{Leases, Round, StaticLeases};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let leases = StaticLeases::new("r1");
/// let lease = leases.acquire("orders/42").await.unwrap();
/// assert_eq!(lease.owner, "r1");
/// assert_eq!(lease.round.get(), 1);
/// # });
/// ```
pub trait Leases: Send + Sync {
    /// Acquires (or renews) the lease on `key` for this process.
    fn acquire(&self, key: &str) -> impl Future<Output = Result<KeyLease, KeyLeaseError>> + Send;
}

/// The leases of a single process that owns every key: always round 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticLeases {
    owner: String,
}

impl StaticLeases {
    /// Leases held by `owner`.
    pub fn new(owner: impl Into<String>) -> Self {
        Self { owner: owner.into() }
    }
}

impl Leases for StaticLeases {
    fn acquire(&self, key: &str) -> impl Future<Output = Result<KeyLease, KeyLeaseError>> + Send {
        std::future::ready(Ok(KeyLease {
            key: key.to_owned(),
            owner: self.owner.clone(),
            // The first round after "never leased".
            round: crate::lease::Generation(1),
        }))
    }
}
