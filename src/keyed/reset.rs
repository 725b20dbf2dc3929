//! The operator's way out of a lost membership object: a new object at a
//! view floor, kept inactive until every member of the old one has stopped.
//!
//! Members that saw a view fail closed when the object vanishes, is
//! overwritten with bytes that are not a membership object, or is restored
//! from a stale copy: they act for no key until a newer view shows up.
//! Restarting them with [`crate::keyed::KeyedWriterBuilder::create_at`] is
//! one way back; this is the other, for a group that should keep running.
//! `hoplock members reset` calls it.
//!
//! The object written has two properties that together keep one writer per
//! key across the reset:
//!
//! - **Its view starts at the floor** (or one above the stored view, if the
//!   stored object is readable and higher), so the rounds of the keys
//!   started in it are above every round a downstream has accepted, as long
//!   as the floor is above the last view the old object reached.
//! - **It holds one placeholder entry that never adopts its view**, with the
//!   wait as its TTL. No key of the new object starts while an entry has not
//!   adopted the last join, so the members that join it stay idle until they
//!   have watched the placeholder's silence for the wait and evicted it; the
//!   keys it owned then pass through the lock-delay like any evicted
//!   member's. A member of the old object whose link to the store broke
//!   stops acting at the end of its term, at most its TTL after the reset:
//!   a wait of at least the longest TTL any member used, plus its
//!   lock-delay, covers it.
//!
//! This is the same shape a member started with `create_at` gives a new
//! object (its own entry, not yet adopted, waits out the TTL and the
//! lock-delay), so members need nothing new to follow a reset.
//!
//! ```
//! use std::time::Duration;
//! use hoplock::keyed::{MembershipRecord, MembershipReset, Replaced};
//!
//! let reset = MembershipReset::new(1_000, Duration::from_secs(45)).expect("a valid reset");
//! // The object was deleted: nothing is stored.
//! let plan = reset.plan(None, "nonce-1".into(), "incarnation-1".into(), false).expect("nothing to refuse");
//! assert_eq!(plan.record.view, 1_000);
//! assert!(!plan.record.is_active(), "no key starts until the placeholder is evicted");
//! assert_eq!(plan.replaced, Replaced::Nothing);
//!
//! // A copy restored from an old backup, at a view below the floor: replaced.
//! let stale = plan.record.encode();
//! let again = reset.plan(Some(&stale), "nonce-2".into(), "incarnation-2".into(), false).expect("no live members");
//! assert_eq!(again.record.view, 1_001, "never at or below a view that was stored");
//! ```

use std::time::Duration;

use crate::backend::{BackendError, ObjectBackend};
use crate::entropy::{Entropy, random_hex};
use crate::keyed::record::{Entry, Hash, MembershipRecord};
use crate::lease::MAX_TTL;

/// The member id of the placeholder entry a reset writes. No member may use
/// it: `~` sorts after every letter and digit, so it is also easy to spot at
/// the end of the entries.
pub const RESET_ENTRY_ID: &str = "~hoplock-members-reset";

/// The shortest wait a reset accepts: the shortest TTL an entry may state.
const MIN_WAIT: Duration = Duration::from_millis(10);

/// A reset of the membership object: the view floor, the wait, and the
/// weight function the new object states.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MembershipReset {
    view_floor: u64,
    wait: Duration,
    hash: Option<Hash>,
}

/// What a reset replaced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Replaced {
    /// No object was stored.
    Nothing,
    /// Bytes that are not a membership object, with the reason.
    Unreadable(String),
    /// A membership object at this view, with this many entries.
    Object {
        /// Its view.
        view: u64,
        /// Its entries, the placeholder of an earlier reset included.
        entries: usize,
    },
}

/// The object a reset writes, and what it replaces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResetPlan {
    /// The new object.
    pub record: MembershipRecord,
    /// What was stored.
    pub replaced: Replaced,
}

/// Why a reset was not written, grouped by what the operator should do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResetError {
    /// Fix the command: a floor of zero, or a wait outside what an entry may
    /// state.
    #[error("{0}")]
    Config(String),
    /// The stored object has live-looking members; resetting it would stop
    /// every key for the wait. Pass `force` (`--force`) to reset anyway.
    #[error(
        "the membership object at view {view} has {members} member(s); a reset stops every key until the \
         wait is over; pass --force to reset it anyway"
    )]
    Members {
        /// The stored view.
        view: u64,
        /// Its entries other than a reset's placeholder.
        members: usize,
    },
    /// The stored view is the last one: no view can follow it.
    #[error("the stored view {0} leaves no room for another; move the group to a new object key")]
    NoRoom(u64),
    /// The store refused or failed; an `Ambiguous` write may have landed, so
    /// read the object (`hoplock members show`) before trying again.
    #[error(transparent)]
    Store(#[from] BackendError),
}

impl MembershipReset {
    /// A reset to `view_floor` whose new object stays inactive for `wait`.
    ///
    /// Choose the floor above the last view the old object reached (at
    /// least the highest round any downstream has accepted), and the wait
    /// at least the longest TTL any member used plus its lock-delay.
    pub fn new(view_floor: u64, wait: Duration) -> Result<MembershipReset, ResetError> {
        if view_floor == 0 {
            return Err(ResetError::Config("the view floor must be at least 1: view 0 is never written".into()));
        }
        if view_floor == u64::MAX {
            return Err(ResetError::Config("a view floor of u64::MAX leaves no room for a join".into()));
        }
        if !(MIN_WAIT..=MAX_TTL).contains(&wait) {
            return Err(ResetError::Config(format!("the wait {wait:?} is outside {MIN_WAIT:?}..={MAX_TTL:?}")));
        }
        // Whole milliseconds, as the entry states it: a wait rounded down
        // would be shorter than the operator asked for.
        if !wait.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(ResetError::Config(format!("the wait {wait:?} is not a whole number of milliseconds")));
        }
        Ok(MembershipReset { view_floor, wait, hash: None })
    }

    /// The weight function the new object states. Without it, a readable
    /// stored object's is kept, and the default is used otherwise.
    pub fn hash(mut self, hash: Hash) -> MembershipReset {
        self.hash = Some(hash);
        self
    }

    /// The object to write over `stored` (`None`: nothing is stored), with
    /// the placeholder's incarnation and nonce. Refused when the stored
    /// object has members, unless `force`.
    pub fn plan(
        &self,
        stored: Option<&[u8]>,
        nonce: String,
        incarnation: String,
        force: bool,
    ) -> Result<ResetPlan, ResetError> {
        let mut view = self.view_floor;
        let mut hash = self.hash.unwrap_or_default();
        let replaced = match stored.map(MembershipRecord::decode) {
            None => Replaced::Nothing,
            Some(Err(reason)) => Replaced::Unreadable(reason.to_string()),
            Some(Ok(record)) => {
                let members = record.entries.iter().filter(|entry| entry.id != RESET_ENTRY_ID).count();
                if members > 0 && !force {
                    return Err(ResetError::Members { view: record.view, members });
                }
                // Never at or below a view that was stored: a member that
                // saw it would take the new object for a stale copy, and
                // its rounds may have been accepted downstream.
                let above = record.view.checked_add(1).ok_or(ResetError::NoRoom(record.view))?;
                view = view.max(above);
                if self.hash.is_none() {
                    hash = record.hash;
                }
                Replaced::Object { view: record.view, entries: record.entries.len() }
            }
        };
        if view == u64::MAX {
            return Err(ResetError::NoRoom(view));
        }
        let placeholder = Entry {
            id: RESET_ENTRY_ID.into(),
            incarnation,
            addr: String::new(),
            ttl_ms: u64::try_from(self.wait.as_millis()).unwrap_or(u64::MAX),
            nonce,
            // Adopted nothing: the view stays inactive until it is evicted.
            adopted: 0,
            capacity: std::num::NonZeroU32::MIN,
        };
        Ok(ResetPlan { record: MembershipRecord::first(view, hash, placeholder), replaced })
    }

    /// Reads the object, plans the reset and writes it, conditional on what
    /// was read: if anything wrote in between, the write fails rather than
    /// replace it.
    pub async fn apply<O: ObjectBackend>(
        &self,
        store: &O,
        entropy: &dyn Entropy,
        force: bool,
    ) -> Result<ResetPlan, ResetError> {
        let stored = match store.read_object().await {
            Ok(object) => Some(object),
            Err(BackendError::NoLease) => None,
            Err(error) => return Err(error.into()),
        };
        let plan = self.plan(
            stored.as_ref().map(|object| object.bytes.as_slice()),
            random_hex(entropy, 16),
            random_hex(entropy, 16),
            force,
        )?;
        store.write_object(stored.as_ref().map(|object| &object.version), plan.record.encode()).await?;
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;
    use crate::entropy::SeededEntropy;
    use crate::hrw::WeightFn;

    fn member(id: &str) -> Entry {
        Entry {
            id: id.into(),
            incarnation: format!("{id}-1"),
            addr: String::new(),
            ttl_ms: 6_000,
            nonce: "n".into(),
            adopted: 7,
            capacity: std::num::NonZeroU32::MIN,
        }
    }

    fn live_group(view: u64) -> MembershipRecord {
        let mut record =
            MembershipRecord::first(view, Hash { function: WeightFn::GoSha256, weighted: false }, member("a"));
        record.entries[0].adopted = view;
        record
    }

    #[test]
    fn bad_settings_are_refused_before_anything_is_read() {
        assert!(matches!(MembershipReset::new(0, Duration::from_secs(1)), Err(ResetError::Config(_))));
        assert!(matches!(MembershipReset::new(u64::MAX, Duration::from_secs(1)), Err(ResetError::Config(_))));
        assert!(matches!(MembershipReset::new(5, Duration::from_millis(9)), Err(ResetError::Config(_))));
        assert!(matches!(MembershipReset::new(5, MAX_TTL + Duration::from_millis(1)), Err(ResetError::Config(_))));
        assert!(matches!(MembershipReset::new(5, Duration::from_micros(1_500)), Err(ResetError::Config(_))));
    }

    #[test]
    fn the_new_object_waits_with_a_placeholder_that_never_adopts() {
        let reset = MembershipReset::new(40, Duration::from_millis(12_500)).unwrap();
        let plan = reset.plan(Some(b"{ not json"), "n".into(), "i".into(), false).unwrap();
        assert!(matches!(plan.replaced, Replaced::Unreadable(_)));
        assert_eq!(plan.record.view, 40);
        assert_eq!(plan.record.entries.len(), 1);
        let placeholder = &plan.record.entries[0];
        assert_eq!((placeholder.id.as_str(), placeholder.ttl_ms, placeholder.adopted), (RESET_ENTRY_ID, 12_500, 0));
        assert!(!plan.record.is_active());
        // The object written is one members accept.
        assert_eq!(MembershipRecord::decode(&plan.record.encode()).unwrap(), plan.record);
    }

    #[test]
    fn a_readable_object_is_replaced_above_its_view_and_keeps_its_hash() {
        let reset = MembershipReset::new(10, Duration::from_secs(1)).unwrap();
        let stored = live_group(90).encode();
        let refused = reset.plan(Some(&stored), "n".into(), "i".into(), false);
        assert!(matches!(refused, Err(ResetError::Members { view: 90, members: 1 })), "{refused:?}");
        let plan = reset.plan(Some(&stored), "n".into(), "i".into(), true).unwrap();
        assert_eq!(plan.record.view, 91);
        assert_eq!(plan.record.hash.function, WeightFn::GoSha256);
        assert_eq!(plan.replaced, Replaced::Object { view: 90, entries: 1 });
        // An explicit hash wins over the stored one.
        let fast = reset.clone().hash(Hash::default()).plan(Some(&stored), "n".into(), "i".into(), true).unwrap();
        assert_eq!(fast.record.hash, Hash::default());
        // Another reset's placeholder alone is not a member to protect.
        let placeholder_only = plan.record.encode();
        let again = reset.plan(Some(&placeholder_only), "n".into(), "i".into(), false).unwrap();
        assert_eq!(again.record.view, 92);
    }

    #[test]
    fn no_view_follows_the_last() {
        let reset = MembershipReset::new(10, Duration::from_secs(1)).unwrap();
        for view in [u64::MAX, u64::MAX - 1] {
            let stored = live_group(view).encode();
            let plan = reset.plan(Some(&stored), "n".into(), "i".into(), true);
            assert!(matches!(plan, Err(ResetError::NoRoom(_))), "{view}: {plan:?}");
        }
    }

    #[tokio::test]
    async fn apply_writes_against_what_it_read() {
        let store = MemoryBackend::new();
        let entropy = SeededEntropy::new(7);
        let reset = MembershipReset::new(500, Duration::from_secs(3)).unwrap();
        let plan = reset.apply(&store, &entropy, false).await.unwrap();
        assert_eq!(plan.replaced, Replaced::Nothing);
        let stored = MembershipRecord::decode(&store.read_object().await.unwrap().bytes).unwrap();
        assert_eq!(stored, plan.record);
        let second = reset.apply(&store, &entropy, false).await.unwrap();
        assert_eq!(second.record.view, 501);
    }
}
