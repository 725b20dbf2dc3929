//! [`KeyedHandle`]: a cloneable window on a running member, which the rest of a
//! service uses as its [`Membership`] and its [`Leases`].

use super::*;

/// A cloneable window on a running member: what it runs, which view it is
/// in, and its [`Membership`] and [`Leases`].
#[derive(Clone)]
pub struct KeyedHandle {
    pub(super) shared: Arc<Shared>,
}

impl KeyedHandle {
    /// This member's state right now.
    pub fn snapshot(&self) -> Snapshot {
        let core = self.shared.core();
        let now = self.shared.clock.now();
        Snapshot {
            incarnation: core.incarnation.clone(),
            view: core.newest().map(|seen| seen.record.view),
            active: core.newest().is_some_and(|seen| seen.record.is_active()),
            term_holds: core.term_holds(now),
            running: core.running().clone(),
        }
    }

    /// The planted bug `lease-from-ownership`: a lease on a key this member
    /// owns in the newest view, running or not. Always `None` otherwise.
    pub(super) fn owned_round(&self, core: &Core, key: &str) -> Option<crate::hrw::Round> {
        if !planted::active(Bug::LeaseFromOwnership) {
            return None;
        }
        let seen = core.newest()?;
        seen.set.is_owner(key, &self.shared.id).then_some(crate::lease::Generation(seen.record.view))
    }

    pub(super) fn term_error(&self) -> MembershipError {
        MembershipError::Unavailable(format!("member {:?} does not hold a term", self.shared.id))
    }
}

impl Membership for KeyedHandle {
    fn self_id(&self) -> &str {
        &self.shared.id
    }

    /// The members of the newest active view this member has read (without
    /// adoption, of the newest view, which its keys follow); an error while
    /// its own term does not hold.
    fn members(&self) -> impl Future<Output = Result<Vec<Member>, MembershipError>> + Send {
        let core = self.shared.core();
        let result = if core.term_holds(self.shared.clock.now()) && !core.vanished() {
            core.active_members().map(<[Member]>::to_vec).ok_or_else(|| self.term_error())
        } else {
            Err(self.term_error())
        };
        std::future::ready(result)
    }
}

impl Leases for KeyedHandle {
    /// The key's lease if this member runs it now, as a snapshot: use it
    /// only with a downstream that checks the round.
    fn acquire(&self, key: &str) -> impl Future<Output = Result<KeyLease, KeyLeaseError>> + Send {
        let core = self.shared.core();
        let result = if !core.term_holds(self.shared.clock.now()) {
            Err(KeyLeaseError::Unavailable(self.term_error().to_string()))
        } else if let Some(round) = core.running().get(key).copied().or_else(|| self.owned_round(&core, key)) {
            Ok(KeyLease { key: key.to_owned(), owner: self.shared.id.clone(), round })
        } else {
            let holder = core.newest().and_then(|seen| seen.set.owner(key).map(|m| m.id.clone())).unwrap_or_default();
            Err(KeyLeaseError::Held { key: key.to_owned(), holder })
        };
        std::future::ready(result)
    }
}
