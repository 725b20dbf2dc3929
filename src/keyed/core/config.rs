//! What the keyed core is configured with: the member's timing and identity,
//! checked by the builder, and where an incarnation is in its life.

use super::*;

/// A member's timing, validated by the builder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Timing {
    pub ttl: Duration,
    pub renew_interval: Duration,
    pub read_interval: Duration,
    pub request_timeout: Duration,
    pub leave_timeout: Duration,
    pub drift_bound_ppb: u32,
    pub stop_margin: Duration,
    pub lock_delay: Duration,
}

impl Timing {
    /// How long the member may act after sending its last successful write:
    /// TTL·(1−ρ)/(1+ρ) − margin, the lease rule (I3) applied to its entry.
    pub fn hold_for(&self) -> Duration {
        crate::term_timing::hold_for(self.ttl, self.drift_bound_ppb, self.stop_margin)
    }
}

/// Who this member is, as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Identity {
    pub id: String,
    pub addr: String,
    pub capacity: NonZeroU32,
    pub hash: Hash,
    /// The view a membership object this member creates starts at; `None`
    /// when it never creates one, so that a missing object fails closed.
    pub create_at: Option<u64>,
    /// Whether a key new to this member waits for the view to be active.
    /// Always on outside tests: off, a joiner acts on its own list as soon
    /// as it has one, which is how two members end up writing one key.
    pub adoption: bool,
}

/// Where this incarnation is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Waiting to add an entry (or for its predecessor's to go).
    Joining,
    /// Its entry was in the object from view `joined` on.
    Member { joined: u64 },
    /// Removing its entry; it acts for nothing any more.
    Leaving,
    /// Its entry is gone, or it gave up: it never acts again.
    Finished,
}
