//! Renewals that give way: a member due to renew holds its write back for
//! a short while when another member, whose entry runs out before its own,
//! has not been seen renewing since this one last did, so that the member
//! whose term ends first writes first.
//!
//! Every member writes the one membership object, so two renewals on their
//! way at once race, and one of them fails its condition and must read and
//! write again. With slow writes a member can lose several such races in a
//! row and its term runs out, although the store and the member are well.
//! The member that renewed longest ago is the one whose term is in danger;
//! the others hold back for it.
//!
//! No two members ever hold back for each other. Let `a` hold back for `b`:
//! the response that first showed `b`'s current nonce reached `a` no later
//! than `a` sent its own last renewal, so `b`'s renewal landed no later than
//! `a`'s was sent, and so before `a`'s landed. For `b` to hold back for `a`
//! as well, `a`'s renewal would have to have landed no later than `b` sent
//! its own, which landed later still: a contradiction. Each member compares
//! instants of its own monotonic clock only. So the member with the oldest
//! renewal never holds back, and the holds form no cycle. (Both may hold
//! back at once only while one has not yet read the other's latest
//! renewal, and a member holding back reads again every retry gap.)
//!
//! A member holds back only for an entry that runs out no later than its
//! own would, counting both from this member's clock: the other's from when
//! its nonce was first seen, its own from its last send. A member with a
//! longer TTL is in no more danger than this one, and holding back for it
//! would cost a read every retry gap for nothing; with equal TTLs the rule
//! above already implies this. Narrowing who is held back for keeps the
//! proof: it removes holds and adds none.
//!
//! Holding back changes only when a member renews, never how long its term
//! lasts, which still counts from the send of its last landed write; and the
//! hold is bounded by the member's own slack, so it keeps half of it.

use super::*;

impl Core {
    /// Whether this member's renewal, although due, is held back at `now`
    /// for another member (see the module docs). It is held back for at
    /// most [`Core::hold_back_for`] past its due time, and only for a member
    /// whose current nonce was first seen by the time this member's last
    /// renewal was sent (a read and the write it leads to may fall on one
    /// instant), less than half that entry's TTL before it (one silent for
    /// longer has most likely stopped, and is left to be evicted), and whose
    /// entry runs out no later than this member's own.
    pub(crate) fn holds_back(&self, now: Instant) -> bool {
        let (Phase::Member { .. }, Some(sent)) = (self.phase, self.last_sent) else { return false };
        if now >= sent + self.timing.renew_interval + self.hold_back_for() {
            return false;
        }
        let Some(seen) = self.newest.as_ref() else { return false };
        let own_runs_out = sent + self.timing.ttl;
        seen.record.entries.iter().any(|entry| {
            self.first_seen(entry).is_some_and(|since| {
                since <= sent && since + entry.ttl() / 2 > sent && since + entry.ttl() <= own_runs_out
            })
        })
    }

    /// The longest a due renewal is held back: half the slack between the
    /// renewal interval and the end of the term, so the member holding back
    /// keeps the other half for its own attempts. Not the request timeout:
    /// a slow store applies writes after their senders gave up on them, and
    /// the member held back for may be waiting on just such a write.
    pub(crate) fn hold_back_for(&self) -> Duration {
        self.timing.hold_for().saturating_sub(self.timing.renew_interval) / 2
    }
}
