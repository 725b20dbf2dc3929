//! What the keyed core's calls answer: the views it has seen, what a read
//! meant, the write it plans next, and why it refuses one.

use super::*;

/// A view as read, with its member set prepared once.
#[derive(Debug)]
pub(crate) struct Seen {
    pub record: MembershipRecord,
    pub set: Arc<MemberSet>,
}

/// What a read told the shell.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Observed {
    /// Nothing that ends this incarnation.
    Current,
    /// This incarnation's entry is gone: it must stop everything and start
    /// over as a new incarnation.
    Removed,
    /// The object is missing after a view was seen: fail closed.
    Vanished,
    /// The object is missing, no view was seen, and this member was not
    /// told a view to create it at: it waits for someone who was.
    Absent,
}

/// A write the shell should send.
#[derive(Clone, Debug)]
pub(crate) struct Planned {
    pub kind: WriteKind,
    pub expected: Option<Version>,
    pub record: MembershipRecord,
    /// This member's nonce in `record`, when the record holds its entry.
    pub nonce: Option<String>,
}

/// Why a write is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteKind {
    /// Creates the object with this member as the only entry.
    Create,
    /// Adds this member's entry.
    Join,
    /// Refreshes this member's nonce and adopts the view.
    Renew,
    /// Removes an entry that stopped renewing.
    Evict,
    /// Removes this member's entry.
    Leave,
}

/// Why no write can be planned at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The object already holds [`MAX_MEMBERS`] entries.
    Full,
    /// The object's weight function is not the one this member is configured
    /// with.
    HashMismatch { stored: Hash },
}
