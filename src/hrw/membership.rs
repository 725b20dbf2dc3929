//! The membership seam: where the live member set comes from.
//!
//! Ownership is only as good as the member list every replica feeds it, so
//! the list is a seam: a discovery service, a gossip layer or a static
//! configuration can provide it, and tests can make it fail. A caller that
//! gets an error or an empty list must fail closed and act as a non-owner.

use std::future::Future;

use super::{Member, MemberSet, WeightFn};

/// Why the member list could not be read. Either way the caller must act
/// as a non-owner until a later read succeeds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MembershipError {
    /// The source could not be reached or did not answer in time.
    #[error("membership source unavailable: {0}")]
    Unavailable(String),
    /// The source answered with something that is not a member list.
    #[error("membership source returned an invalid member list: {0}")]
    Invalid(String),
}

/// A source of the live member set, as seen by one process.
///
/// # Example
///
/// ```
/// use hoplock::hrw::{Membership, Static};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let membership = Static::new("r1");
/// assert_eq!(membership.self_id(), "r1");
/// assert_eq!(membership.members().await.unwrap().len(), 1);
/// # });
/// ```
pub trait Membership: Send + Sync {
    /// This process's member id.
    fn self_id(&self) -> &str;

    /// The current live members, this process included when it is live.
    fn members(&self) -> impl Future<Output = Result<Vec<Member>, MembershipError>> + Send;
}

/// The membership of a single process that is always the only member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Static {
    member: Member,
}

impl Static {
    /// A single member with this id and no address.
    pub fn new(id: impl Into<String>) -> Self {
        Self { member: Member::new(id, "") }
    }

    /// The one member.
    pub fn member(&self) -> &Member {
        &self.member
    }
}

impl From<Member> for Static {
    fn from(member: Member) -> Self {
        Self { member }
    }
}

impl Membership for Static {
    fn self_id(&self) -> &str {
        &self.member.id
    }

    fn members(&self) -> impl Future<Output = Result<Vec<Member>, MembershipError>> + Send {
        std::future::ready(Ok(vec![self.member.clone()]))
    }
}

/// Whether this process owns `key` right now, failing closed.
///
/// Reads the member list once and applies `weight_fn`. An empty list yields
/// `Ok(false)`; an error is returned so the caller can log it, and must be
/// treated as `false`.
///
/// # Example
///
/// ```
/// use hoplock::hrw::{Static, WeightFn, owns};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let me = Static::new("r1");
/// assert!(owns(&me, "orders/42", WeightFn::Fast).await.unwrap_or(false));
/// # });
/// ```
pub async fn owns<M: Membership>(
    membership: &M,
    key: impl AsRef<[u8]>,
    weight_fn: WeightFn,
) -> Result<bool, MembershipError> {
    let members = membership.members().await?;
    Ok(weight_fn.is_owner(key, membership.self_id(), &members))
}

/// The prepared member set for the current membership, for callers that
/// look up many keys against one reading of the list.
///
/// # Example
///
/// ```
/// use hoplock::hrw::{Static, WeightFn, prepare};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let set = prepare(&Static::new("r1"), WeightFn::Fast).await.unwrap();
/// assert_eq!(set.owner("orders/42").map(|m| m.id.as_str()), Some("r1"));
/// # });
/// ```
pub async fn prepare<M: Membership>(membership: &M, weight_fn: WeightFn) -> Result<MemberSet, MembershipError> {
    let members = membership.members().await?;
    Ok(MemberSet::with_options(members, super::Options { weight_fn, ..super::Options::default() }))
}
