//! The decisions of one member, free of I/O: what a read of the membership
//! object means, which keys to stop and start, and what to write next.
//!
//! The async shell ([`super::writer`]) does the reading, writing, sleeping
//! and running of work; everything it decides goes through here, so the
//! rules below are tested without a store or a runtime.
//!
//! The rules, in the order they protect a key:
//!
//! - A member acts for a key only while its term holds, it owns the key in
//!   the newest view it has read, and, for a key it was not already running,
//!   that view is active (every entry adopted the last join).
//! - It stops a key as soon as it reads a view in which it does not own it,
//!   and never runs it under an older view again: the newest view only goes
//!   up, so a stale read changes nothing.
//! - Its term is a lease term: it ends [`Timing::hold_for`] after the send of
//!   its last successful write, on its own monotonic clock.
//! - It evicts another entry only after seeing that entry's nonce unchanged
//!   for the entry's TTL, timed from the arrival of the response that first
//!   showed it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::Version;
use crate::clock::Instant;
use crate::hrw::{Member, MemberSet, Round};
use crate::keyed::record::{Change, ChangeKind, Entry, Hash, MAX_MEMBERS, MembershipRecord};
use crate::planted::{self, Bug};

mod config;
pub(crate) use config::*;
mod answers;
pub(crate) use answers::*;
mod ownership;
mod yielding;

#[derive(Debug)]
pub(crate) struct Core {
    pub timing: Timing,
    pub me: Identity,
    pub incarnation: String,
    pub phase: Phase,
    /// The newest view read or written.
    newest: Option<Arc<Seen>>,
    /// The version of the newest view's latest known state, to write against.
    version: Option<Version>,
    /// The highest view any incarnation of this process has seen.
    highest_view: u64,
    /// When this incarnation last sent a write that landed with its entry.
    last_sent: Option<Instant>,
    /// Others' entries by (id, incarnation): the nonce last seen and when
    /// the response that first showed it arrived.
    watched: BTreeMap<(String, String), (String, Instant)>,
    /// No key new to this member starts before this instant (lock-delay
    /// after a view that may follow an eviction, and the wait after
    /// creating the object).
    hold_new_until: Instant,
    /// A member that created the object adopts no view before this instant,
    /// so that no view of the new object is active, for any member, until
    /// the members of a deleted predecessor have stopped.
    withhold_adoption_until: Instant,
    /// The keys this incarnation is running, with their rounds. Shared, so
    /// that a snapshot of them costs no copy: the map is copied only when
    /// it changes while a snapshot still holds it.
    running: Arc<BTreeMap<String, Round>>,
    /// The keys it owns in the newest view, in key order.
    owned: Vec<String>,
    /// The same keys, to look one up; `owned` keeps their order, in which
    /// they start.
    owned_lookup: BTreeSet<String>,
    /// The running keys not owned in the newest view: what must stop. Kept
    /// as keys start and stop and worked out again once per view, so the
    /// member's loop, which asks on every pass, does not weigh or look up
    /// every running key each time.
    unowned_running: BTreeSet<String>,
    keys: Arc<[String]>,
    /// Whether a read has found the object missing.
    read_missing: bool,
    /// The members of the newest active view read (without adoption, of
    /// the newest view read).
    active_members: Option<Vec<Member>>,
    /// This incarnation's renewals and evictions whose outcome is not
    /// known yet, oldest first: their nonce and when each was sent. One
    /// that shows up in a later read landed, and the term counts from its
    /// send (I7), however long after its sender gave up on it.
    unresolved: Vec<(String, Instant)>,
    /// Versions that a conditional write of this member lost against,
    /// oldest first. The store had moved past each when it refused the
    /// write; the object's history only moves forward, and its versions do
    /// not repeat (every write carries a fresh nonce), so a read that
    /// returns one is stale. Within one view nothing else tells such a read
    /// apart: renewals change nonces, not the view number. On a provider
    /// whose versions do repeat (weak ETags, which `verify` refuses) a member
    /// could ignore the current version until another member writes.
    superseded: VecDeque<Version>,
}

/// Whether two records of one view number are that view: the same change
/// made it, and they list the same member incarnations. Renewals change
/// only nonces and adoptions.
fn same_view(a: &MembershipRecord, b: &MembershipRecord) -> bool {
    let same_members = a.entries.len() == b.entries.len()
        && a.entries.iter().zip(&b.entries).all(|(x, y)| x.id == y.id && x.incarnation == y.incarnation);
    a.change == b.change && a.last_join == b.last_join && a.hash == b.hash && same_members
}

/// The most unresolved writes remembered; past it the oldest is dropped,
/// which only ever makes the term shorter.
const MAX_UNRESOLVED: usize = 64;

/// The most superseded versions remembered; past it the oldest is dropped,
/// which only means that a read returning it is taken in again (and a write
/// against it loses again).
const MAX_SUPERSEDED: usize = 16;

impl Core {
    pub fn new(timing: Timing, me: Identity, incarnation: String, keys: Arc<[String]>) -> Core {
        Core {
            timing,
            me,
            incarnation,
            phase: Phase::Joining,
            newest: None,
            version: None,
            highest_view: 0,
            last_sent: None,
            watched: BTreeMap::new(),
            hold_new_until: Instant::ZERO,
            withhold_adoption_until: Instant::ZERO,
            running: Arc::default(),
            owned: Vec::new(),
            owned_lookup: BTreeSet::new(),
            unowned_running: BTreeSet::new(),
            keys,
            read_missing: false,
            active_members: None,
            unresolved: Vec::new(),
            superseded: VecDeque::new(),
        }
    }

    /// Starts over as a new incarnation: nothing of the old one's standing
    /// survives except the highest view seen.
    pub fn reincarnate(&mut self, incarnation: String) {
        debug_assert!(self.running.is_empty(), "every key stops before an incarnation ends");
        self.incarnation = incarnation;
        self.phase = Phase::Joining;
        self.last_sent = None;
        self.watched.clear();
        self.running = Arc::default();
        self.index_running();
        self.unresolved.clear();
    }

    pub fn newest(&self) -> Option<&Arc<Seen>> {
        self.newest.as_ref()
    }

    /// The members of the newest active view read (without adoption, of
    /// the newest view read).
    pub fn active_members(&self) -> Option<&[Member]> {
        self.active_members.as_deref()
    }

    /// The version the next write is conditional on.
    pub fn version(&self) -> Option<&Version> {
        self.version.as_ref()
    }

    pub fn running(&self) -> &Arc<BTreeMap<String, Round>> {
        &self.running
    }

    /// When this incarnation's term ends, if it has one.
    pub fn term_end(&self) -> Option<Instant> {
        match self.phase {
            Phase::Member { .. } => self.last_sent.map(|sent| sent + self.timing.hold_for()),
            _ => None,
        }
    }

    pub fn term_holds(&self, now: Instant) -> bool {
        self.term_end().is_some_and(|end| now < end)
    }

    /// Whether the object was found missing after a view was seen: the
    /// member then acts for nothing, term or not, until a view is back.
    pub fn vanished(&self) -> bool {
        self.version.is_none() && self.highest_view > 0
    }

    /// Takes in a read: `None` when the object is missing.
    pub fn observe(&mut self, read: Option<(MembershipRecord, Version)>, arrived: Instant) -> Observed {
        let Some((record, version)) = read else {
            self.version = None;
            self.read_missing = true;
            return if self.vanished() {
                Observed::Vanished
            } else if self.create_at().is_some() {
                Observed::Current
            } else {
                Observed::Absent
            };
        };
        let newest_view = self.newest.as_ref().map_or(0, |seen| seen.record.view);
        if record.view < newest_view && !planted::active(Bug::ResumeOlderView) {
            // A stale read: it may only make this member act later, so it is
            // not used at all.
            return Observed::Current;
        }
        if self.superseded.contains(&version) {
            // A version this member's write lost against: as stale as an
            // older view, though its view number is the newest. Taken in,
            // it would replace a newer version already read, and the next
            // write would lose against it again.
            return Observed::Current;
        }
        if self.newest.as_ref().is_some_and(|seen| seen.record.view == record.view && !same_view(&seen.record, &record))
        {
            // The same view number with other members or another change:
            // someone wrote the object over (a copy restored, another
            // group). Acting on it could give a key two owners, and writing
            // to it would make it active: fail closed, as for an object
            // that vanished, until a newer view shows up.
            self.version = None;
            return Observed::Vanished;
        }
        self.highest_view = self.highest_view.max(record.view);
        self.watch(&record, arrived);
        self.hold_after_eviction(newest_view, &record, arrived);
        let removed = match self.phase {
            Phase::Member { joined } => {
                record.view >= joined && record.entry(&self.me.id).is_none_or(|e| e.incarnation != self.incarnation)
            }
            _ => false,
        };
        self.adopt_seen(record, version);
        if removed {
            self.phase = Phase::Finished;
            return Observed::Removed;
        }
        self.credit_late_landing();
        Observed::Current
    }

    /// A write this member gave up on may have landed after all: if the
    /// newest view carries the nonce of one, its term counts from that
    /// write's send, and every write sent before it is settled too.
    fn credit_late_landing(&mut self) {
        if !matches!(self.phase, Phase::Member { .. }) || self.unresolved.is_empty() {
            return;
        }
        let Some(own) = self.newest.as_ref().and_then(|seen| seen.record.entry(&self.me.id).cloned()) else { return };
        if own.incarnation != self.incarnation {
            return;
        }
        if let Some(landed) = self.unresolved.iter().position(|(nonce, _)| *nonce == own.nonce) {
            let sent_at = self.unresolved[landed].1;
            self.last_sent = Some(self.last_sent.map_or(sent_at, |last| last.max(sent_at)));
            self.unresolved.drain(..=landed);
        }
    }

    /// A conditional write against `version` was refused because the object
    /// had changed (or was gone): a later read that returns `version` is
    /// stale and is not taken in.
    pub fn lost_against(&mut self, version: Option<&Version>) {
        let Some(version) = version else { return };
        if self.superseded.contains(version) {
            return;
        }
        if self.superseded.len() == MAX_SUPERSEDED {
            self.superseded.pop_front();
        }
        self.superseded.push_back(version.clone());
    }

    /// A write's outcome stayed unknown after its read-back: remembered, so
    /// a later read that shows it landed still renews the term.
    pub fn unresolved(&mut self, planned: &Planned, sent_at: Instant) {
        let (Some(nonce), WriteKind::Renew | WriteKind::Evict) = (&planned.nonce, planned.kind) else { return };
        if !matches!(self.phase, Phase::Member { .. }) {
            return;
        }
        if self.unresolved.len() >= MAX_UNRESOLVED {
            self.unresolved.remove(0);
        }
        self.unresolved.push((nonce.clone(), sent_at));
    }

    /// Keys may come from an evicted member, whose unfenced requests may
    /// still be in flight: new keys wait the lock-delay (I5). A view that
    /// skipped some could hide an eviction, and so could the first view a
    /// member reads, so both are held back too.
    fn hold_after_eviction(&mut self, newest_view: u64, record: &MembershipRecord, arrived: Instant) {
        let jumped = newest_view == 0 || record.view > newest_view.saturating_add(1);
        if planted::active(Bug::SkipKeyedLockDelay) {
            return;
        }
        if record.view > newest_view && (record.change.kind == ChangeKind::Evict || jumped) {
            self.hold_new_until = self.hold_new_until.max(arrived + self.timing.lock_delay);
        }
    }

    fn adopt_seen(&mut self, record: MembershipRecord, version: Version) {
        // Renewals change nonces, not members: the prepared set (and what
        // this member owns) carries over while the view stays the same.
        let set = match self.newest.as_ref().filter(|seen| seen.record.view == record.view) {
            Some(seen) => seen.set.clone(),
            None => {
                let set = Arc::new(record.member_set());
                self.reweigh(&set);
                set
            }
        };
        if self.acts_under(&record) {
            self.active_members = Some(set.members().to_vec());
        }
        self.newest = Some(Arc::new(Seen { record, set }));
        self.version = Some(version);
    }

    fn watch(&mut self, record: &MembershipRecord, arrived: Instant) {
        let mut watched = BTreeMap::new();
        for entry in &record.entries {
            if entry.is(&self.me.id, &self.incarnation) {
                continue;
            }
            let key = (entry.id.clone(), entry.incarnation.clone());
            let since = match self.watched.remove(&key) {
                Some((nonce, since)) if nonce == entry.nonce => since,
                _ => arrived,
            };
            watched.insert(key, (entry.nonce.clone(), since));
        }
        self.watched = watched;
    }

    fn may_start_in(&self, record: &MembershipRecord) -> bool {
        self.acts_under(record) || planted::active(Bug::StartBeforeActive)
    }

    /// Whether this member acts under `record`'s view: once it is active,
    /// or at once without adoption (where no view waits to be adopted).
    /// Its members are the ones the handle reports.
    fn acts_under(&self, record: &MembershipRecord) -> bool {
        !self.me.adoption || record.is_active()
    }

    fn round_for(&self, view: u64) -> Round {
        if planted::active(Bug::RoundFromCounter) {
            return planted::round_from_counter(self.running.len());
        }
        crate::lease::Generation(view)
    }

    /// The instant before which no key new to this member starts: the end
    /// of a lock-delay or of the wait after creating the object.
    pub fn hold_new_until(&self) -> Instant {
        self.hold_new_until
    }

    /// The earliest instant an entry this member watches may be evicted.
    pub fn next_eviction(&self) -> Option<Instant> {
        let seen = self.newest.as_ref()?;
        seen.record.entries.iter().filter_map(|e| self.eviction_due(e)).min()
    }

    /// When `entry` may be evicted: its TTL after the response that first
    /// showed its current nonce. `None` for entries this member does not
    /// watch (its own).
    fn eviction_due(&self, entry: &Entry) -> Option<Instant> {
        self.first_seen(entry).map(|since| since + entry.ttl())
    }

    /// When the response that first showed `entry`'s current nonce arrived.
    /// `None` for entries this member does not watch (its own).
    fn first_seen(&self, entry: &Entry) -> Option<Instant> {
        self.watched.get(&(entry.id.clone(), entry.incarnation.clone())).map(|(_, since)| *since)
    }

    fn evictable_at(&self, entry: &Entry, now: Instant) -> bool {
        self.eviction_due(entry).is_some_and(|due| now >= due)
    }

    /// Whether a write is due without waiting for the next read: a
    /// renewal, an eviction, or an adoption that was held back.
    pub fn write_due(&self, now: Instant) -> bool {
        let adoption_due = self.adoption_due().is_some_and(|due| now >= due) && self.to_stop(now).is_empty();
        adoption_due
            || self.renewal_due().is_some_and(|due| now >= due)
            || self.next_eviction().is_some_and(|due| now >= due)
    }

    /// When this member's adoption of the newest view is due: at once, or,
    /// for a creator, at the end of its wait. `None` when it has adopted
    /// that view, or has no object to write to. The shell wakes for it as
    /// for a renewal: a creator whose wait ends just after a read would
    /// otherwise keep its new object inactive until its next read.
    pub fn adoption_due(&self) -> Option<Instant> {
        let seen = self.newest.as_ref().filter(|_| self.version.is_some())?;
        let pending = matches!(self.phase, Phase::Member { .. }) && self.unadopted(&seen.record);
        pending.then_some(self.withhold_adoption_until)
    }

    /// Whether this incarnation has an entry in `record` that has not
    /// adopted its view, and may adopt it now.
    fn adoption_pending(&self, record: &MembershipRecord, now: Instant) -> bool {
        now >= self.withhold_adoption_until && self.unadopted(record)
    }

    /// Whether this incarnation has an entry in `record` that has not
    /// adopted its view.
    fn unadopted(&self, record: &MembershipRecord) -> bool {
        record.entry(&self.me.id).is_some_and(|e| e.is(&self.me.id, &self.incarnation) && e.adopted < record.view)
    }

    /// When this member's next renewal is due.
    pub fn renewal_due(&self) -> Option<Instant> {
        match self.phase {
            Phase::Member { .. } => {
                Some(self.last_sent.map_or(Instant::ZERO, |sent| sent + self.timing.renew_interval))
            }
            _ => None,
        }
    }

    /// The write to send now, if any. `fresh_nonce` is used for this
    /// member's entry.
    pub fn plan(&self, now: Instant, fresh_nonce: String) -> Result<Option<Planned>, Refusal> {
        let Some(seen) = self.newest.as_ref().filter(|_| self.version.is_some()) else {
            // No object: only a process that never saw one creates it, only
            // after a read said it is missing, and only when it was told the
            // view to start at. A process cannot tell a new group from one
            // whose object was deleted, and views that started again at 1
            // would hand out rounds a downstream has already accepted.
            if self.phase == Phase::Joining
                && self.highest_view == 0
                && self.read_missing
                && let Some(view) = self.create_at()
            {
                // Adopted nothing yet: the view stays inactive until the
                // creator's wait is over (see `confirm`).
                let record = MembershipRecord::first(view, self.me.hash, self.own_entry(fresh_nonce.clone(), 0));
                return Ok(Some(Planned { kind: WriteKind::Create, expected: None, record, nonce: Some(fresh_nonce) }));
            }
            return Ok(None);
        };
        let record = &seen.record;
        let expected = self.version.clone();
        let evictable = record.entries.iter().find(|e| self.evictable_at(e, now));
        match self.phase {
            Phase::Finished => Ok(None),
            Phase::Leaving => {
                if record.entry(&self.me.id).is_none_or(|e| e.incarnation != self.incarnation) {
                    return Ok(None);
                }
                if now < self.withhold_adoption_until {
                    // A creator's entry keeps the new object inactive until
                    // its wait is over; removing it would end the wait for
                    // everyone. Left in place, it is evicted after its TTL
                    // of silence, which waits as long.
                    return Ok(None);
                }
                let change = self.change(ChangeKind::Leave, &self.me.id, &self.incarnation);
                let next = record.next(change, |entries| entries.retain(|e| !e.is(&self.me.id, &self.incarnation)));
                Ok(next.map(|record| Planned { kind: WriteKind::Leave, expected, record, nonce: None }))
            }
            Phase::Joining => {
                if record.hash != self.me.hash {
                    return Err(Refusal::HashMismatch { stored: record.hash });
                }
                if let Some(own) = record.entry(&self.me.id).filter(|e| e.incarnation == self.incarnation) {
                    // This incarnation's own entry: a join or creation whose
                    // outcome was not settled landed after all. It counts
                    // from now, and a creation (the one entry that adopted
                    // nothing) still waits out its TTL.
                    let kind = if own.adopted == 0 { WriteKind::Create } else { WriteKind::Join };
                    let mut next = record.clone();
                    if let Some(own) = next.entries.iter_mut().find(|e| e.is(&self.me.id, &self.incarnation)) {
                        own.nonce = fresh_nonce.clone();
                        if kind == WriteKind::Join {
                            own.adopted = record.view;
                        }
                    }
                    return Ok(Some(Planned { kind, expected, record: next, nonce: Some(fresh_nonce) }));
                }
                if record.entry(&self.me.id).is_some() {
                    // A predecessor's entry under this id must go first, by
                    // the ordinary eviction once it has been silent for its
                    // TTL (or by its own leave).
                    // Another silent entry may sort before it; the
                    // predecessor goes first, then any other.
                    let victim = record.entry(&self.me.id).filter(|e| self.evictable_at(e, now)).or(evictable);
                    return Ok(victim.and_then(|e| self.evict(record, e, expected, None, false)));
                }
                if let Some(entry) = evictable {
                    return Ok(self.evict(record, entry, expected, None, false));
                }
                if record.entries.len() >= MAX_MEMBERS {
                    return Err(Refusal::Full);
                }
                // A join adopts the view it makes; there is none after the last.
                let Some(view) = record.view.checked_add(1) else { return Ok(None) };
                let entry = self.own_entry(fresh_nonce.clone(), view);
                let change = self.change(ChangeKind::Join, &self.me.id, &self.incarnation);
                let next = record.next(change, |entries| entries.push(entry));
                Ok(next.map(|record| Planned { kind: WriteKind::Join, expected, record, nonce: Some(fresh_nonce) }))
            }
            Phase::Member { .. } => {
                // Every write of a member adopts the view it is based on,
                // which is a promise that no key it lost there still runs.
                if !self.to_stop(now).is_empty() && !planted::active(Bug::AdoptBeforeStop) {
                    return Ok(None);
                }
                let adopt = now >= self.withhold_adoption_until;
                if let Some(entry) = evictable {
                    return Ok(self.evict(record, entry, expected, Some(fresh_nonce), adopt));
                }
                if record.entry(&self.me.id).is_none_or(|e| e.incarnation != self.incarnation) {
                    return Ok(None);
                }
                let renewal_due = self.renewal_due().is_some_and(|due| now >= due) && !self.holds_back(now);
                if !renewal_due && !self.adoption_pending(record, now) {
                    return Ok(None);
                }
                let mut next = record.clone();
                if let Some(own) = next.entries.iter_mut().find(|e| e.is(&self.me.id, &self.incarnation)) {
                    own.nonce = fresh_nonce.clone();
                    if adopt {
                        own.adopted = record.view;
                    }
                }
                Ok(Some(Planned { kind: WriteKind::Renew, expected, record: next, nonce: Some(fresh_nonce) }))
            }
        }
    }

    /// The view this member creates a missing object at, if it may.
    fn create_at(&self) -> Option<u64> {
        if planted::active(Bug::CreateWithoutFloor) {
            return Some(1);
        }
        self.me.create_at.map(|view| view.max(1))
    }

    /// Starts a graceful leave: from now on this incarnation acts for
    /// nothing, and its next write removes its entry.
    pub fn begin_leave(&mut self) {
        self.phase = match self.phase {
            Phase::Member { .. } | Phase::Leaving => Phase::Leaving,
            Phase::Joining | Phase::Finished => Phase::Finished,
        };
    }

    /// Gives up for good: this incarnation never acts again.
    pub fn finish(&mut self) {
        self.phase = Phase::Finished;
    }

    /// The member's run was dropped before it returned, and every key's
    /// task with it: the member runs no key, and its handle says so. Its
    /// entry stays, and its term runs out unless the member is run again,
    /// which goes on as after a long pause.
    pub fn abandoned(&mut self) {
        self.running = Arc::default();
        self.index_running();
    }

    /// A planned write landed: it was sent at `sent_at`, and its response,
    /// carrying the new `version`, arrived at `arrived`.
    pub fn landed(&mut self, planned: Planned, sent_at: Instant, version: Version, arrived: Instant) {
        self.confirm(&planned, sent_at, arrived);
        // Writes sent before this one either landed before it (and this
        // later send counts for more) or were conditional on a version this
        // one replaced, so they never will.
        self.unresolved.clear();
        let newest_view = self.newest.as_ref().map_or(0, |seen| seen.record.view);
        self.hold_after_eviction(newest_view, &planned.record, arrived);
        self.highest_view = self.highest_view.max(planned.record.view);
        self.watch(&planned.record, arrived);
        self.adopt_seen(planned.record, version);
    }

    /// A planned write's outcome was unknown, and the object has since been
    /// read again (through [`Core::observe`]): whether the write landed,
    /// judged by this member's nonce (I7). A write that landed counts from
    /// its send, as any other.
    pub fn settle(&mut self, planned: &Planned, sent_at: Instant, arrived: Instant) -> bool {
        let landed = match (&planned.nonce, self.newest.as_ref()) {
            (Some(nonce), Some(seen)) => {
                seen.record.entry(&self.me.id).is_some_and(|e| e.incarnation == self.incarnation && &e.nonce == nonce)
            }
            _ => false,
        };
        if landed {
            self.confirm(planned, sent_at, arrived);
        }
        landed
    }

    fn confirm(&mut self, planned: &Planned, sent_at: Instant, arrived: Instant) {
        match planned.kind {
            WriteKind::Create | WriteKind::Join => {
                self.phase = Phase::Member { joined: planned.record.view };
                self.last_sent = Some(sent_at);
                if planned.kind == WriteKind::Create {
                    // A fresh object may replace one that was deleted under
                    // live members; they stop within a TTL of their last
                    // write, which was before this one, so waiting a TTL
                    // from the response covers them (the I4 argument). No
                    // view is active before the creator adopts one, so the
                    // wait holds for members that join meanwhile too.
                    // The lock-delay comes on top, as after an eviction:
                    // the old members' last writes may still be in flight
                    // when their terms end.
                    let wait_until = arrived + self.timing.ttl + self.timing.lock_delay;
                    self.hold_new_until = self.hold_new_until.max(wait_until);
                    self.withhold_adoption_until = self.withhold_adoption_until.max(wait_until);
                }
            }
            WriteKind::Renew | WriteKind::Evict => {
                if planned.nonce.is_some() && matches!(self.phase, Phase::Member { .. }) {
                    self.last_sent = Some(sent_at);
                }
            }
            WriteKind::Leave => self.phase = Phase::Finished,
        }
    }

    fn change(&self, kind: ChangeKind, id: &str, incarnation: &str) -> Change {
        Change { kind, id: id.to_owned(), incarnation: incarnation.to_owned() }
    }

    fn evict(
        &self,
        record: &MembershipRecord,
        victim: &Entry,
        expected: Option<Version>,
        fresh_nonce: Option<String>,
        adopt: bool,
    ) -> Option<Planned> {
        let change = self.change(ChangeKind::Evict, &victim.id, &victim.incarnation);
        let (id, incarnation, me, mine) = (&victim.id, &victim.incarnation, &self.me.id, &self.incarnation);
        let next = record.next(change, |entries| {
            entries.retain(|e| !e.is(id, incarnation));
            if let (Some(nonce), Some(own)) = (&fresh_nonce, entries.iter_mut().find(|e| e.is(me, mine))) {
                // Evicting gives this member keys and takes none, so it
                // adopts the view it makes (`next` checked that it exists).
                own.nonce = nonce.clone();
                if adopt {
                    own.adopted = record.view + 1;
                }
            }
        })?;
        Some(Planned { kind: WriteKind::Evict, expected, record: next, nonce: fresh_nonce })
    }

    fn own_entry(&self, nonce: String, view: u64) -> Entry {
        Entry {
            id: self.me.id.clone(),
            incarnation: self.incarnation.clone(),
            addr: self.me.addr.clone(),
            // Rounded up: a shorter stated TTL would let others evict the
            // entry while this member's term still holds.
            ttl_ms: u64::try_from(self.timing.ttl.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX),
            nonce,
            adopted: view,
            capacity: self.me.capacity,
        }
    }
}

#[cfg(test)]
mod tests;
