//! The membership object: who the members are, which view they are in, and
//! how far each has caught up.
//!
//! The object is JSON, read and written whole through an
//! [`crate::backend::ObjectBackend`]. Every field a member decides on is
//! checked when the object is read: an object that breaks a rule is
//! reported as corrupt and nobody acts on it, because acting on a view that
//! is not what its writer meant is how two members end up owning one key.

use std::num::NonZeroU32;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::hrw::{Member, MemberSet, Options, WeightFn};
use crate::lease::{MAX_OWNER_BYTES, MAX_TTL};

/// The most entries one membership object holds.
///
/// Every member writes the one object once per renew interval, and a
/// provider sustains only so many conditional writes a second on one key
/// (AWS: a few tens). At the default renew interval of TTL/3 with a 30 s
/// TTL, 100 members write ten times a second. A join past this limit is
/// refused with [`crate::keyed::KeyedError::Full`]; larger groups split the
/// key space over several objects.
pub const MAX_MEMBERS: usize = 100;

/// The largest membership object read, in bytes. An entry is about 250
/// bytes with short ids, so [`MAX_MEMBERS`] entries fit many times over;
/// anything larger is not ours.
pub const MAX_OBJECT_BYTES: usize = 512 * 1024;

/// The format tag written into every object, so a lease record or a stray
/// object at the membership key is reported as what it is.
const FORMAT: &str = "hoplock-members/1";

/// The HRW weight function of a view. It is stored in the object so every
/// member computes owners with the same function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hash {
    /// The weight of a (key, member id) pair.
    pub function: WeightFn,
    /// Whether entries' capacities scale their shares
    /// ([`MemberSet::weighted`]). Without it every capacity must be 1.
    pub weighted: bool,
}

impl Default for Hash {
    fn default() -> Self {
        Hash { function: WeightFn::Fast, weighted: false }
    }
}

/// What made a view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// An incarnation added its entry.
    Join,
    /// An incarnation removed its own entry after stopping its work.
    Leave,
    /// A member removed an entry that had not renewed for its TTL.
    Evict,
}

/// The change that made a view, naming the entry concerned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// What happened.
    pub kind: ChangeKind,
    /// The member id of the entry.
    pub id: String,
    /// The incarnation of the entry.
    pub incarnation: String,
}

/// One member incarnation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The member id that ownership is computed from.
    pub id: String,
    /// This run of the member: new on every start, so a restarted process
    /// is a new entry and takes every key with a new round.
    pub incarnation: String,
    /// Where to reach the member; not part of any weight.
    #[serde(default)]
    pub addr: String,
    /// How long the entry stays without a renewal before others may evict
    /// it, in milliseconds.
    pub ttl_ms: u64,
    /// Fresh on every write the member makes, so others can tell a renewal
    /// from silence.
    pub nonce: String,
    /// The highest view this incarnation has adopted: it had stopped every
    /// key it does not own in that view when it wrote this.
    pub adopted: u64,
    /// The member's share of keys when the view is weighted; fixed for the
    /// entry's life.
    #[serde(default = "one")]
    pub capacity: NonZeroU32,
}

fn one() -> NonZeroU32 {
    NonZeroU32::MIN
}

impl Entry {
    /// The entry's TTL.
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }

    /// Whether this entry is the given incarnation.
    pub fn is(&self, id: &str, incarnation: &str) -> bool {
        self.id == id && self.incarnation == incarnation
    }
}

/// The membership object's contents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipRecord {
    /// Always `hoplock-members/1`.
    pub format: String,
    /// The view generation: one more on every change, never less.
    pub view: u64,
    /// The weight function every member uses.
    pub hash: Hash,
    /// What made this view.
    pub change: Change,
    /// The most recent view whose change was a join.
    pub last_join: u64,
    /// One entry per member incarnation, at most one per id, sorted by id.
    pub entries: Vec<Entry>,
}

/// Why bytes read from the membership key are not a membership object.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RecordError(String);

impl MembershipRecord {
    /// The first view: `entry` joins an empty group at view `view`.
    pub fn first(view: u64, hash: Hash, entry: Entry) -> MembershipRecord {
        let change = Change { kind: ChangeKind::Join, id: entry.id.clone(), incarnation: entry.incarnation.clone() };
        MembershipRecord { format: FORMAT.to_owned(), view, hash, change, last_join: view, entries: vec![entry] }
    }

    /// The object's bytes.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a membership record always serialises")
    }

    /// Parses and checks an object read from the store.
    pub fn decode(bytes: &[u8]) -> Result<MembershipRecord, RecordError> {
        if bytes.len() > MAX_OBJECT_BYTES {
            return Err(RecordError(format!(
                "{} bytes is larger than the {MAX_OBJECT_BYTES} a membership object may be",
                bytes.len()
            )));
        }
        let record: MembershipRecord =
            serde_json::from_slice(bytes).map_err(|e| RecordError(format!("not a membership object: {e}")))?;
        record.check()?;
        Ok(record)
    }

    /// The rules every object obeys; a record that breaks one is not acted on.
    fn check(&self) -> Result<(), RecordError> {
        let fail = |message: String| Err(RecordError(message));
        if self.format != FORMAT {
            return fail(format!("format {:?} is not {FORMAT:?}", self.format));
        }
        if self.view == 0 {
            return fail("view 0 is never written".into());
        }
        if self.last_join == 0 || self.last_join > self.view {
            return fail(format!("last join {} is not in 1..={}", self.last_join, self.view));
        }
        if self.change.kind == ChangeKind::Join && self.last_join != self.view {
            return fail(format!("a join made view {} but the last join is {}", self.view, self.last_join));
        }
        if self.entries.len() > MAX_MEMBERS {
            return fail(format!("{} entries, more than the {MAX_MEMBERS} allowed", self.entries.len()));
        }
        for pair in self.entries.windows(2) {
            if pair[0].id >= pair[1].id {
                return fail(format!("entries are not sorted by unique id at {:?}", pair[1].id));
            }
        }
        for entry in &self.entries {
            if entry.id.is_empty() || entry.id.len() > MAX_OWNER_BYTES {
                return fail(format!("entry id {:?} is empty or longer than {MAX_OWNER_BYTES} bytes", entry.id));
            }
            if entry.incarnation.is_empty() || entry.nonce.is_empty() {
                return fail(format!("entry {:?} has no incarnation or no nonce", entry.id));
            }
            if entry.ttl_ms < 10 || entry.ttl() > MAX_TTL {
                return fail(format!(
                    "entry {:?} states a TTL of {} ms, outside 10..={MAX_TTL:?}",
                    entry.id, entry.ttl_ms
                ));
            }
            if entry.adopted > self.view {
                return fail(format!("entry {:?} adopted view {}, newer than the object", entry.id, entry.adopted));
            }
            if !self.hash.weighted && entry.capacity.get() != 1 {
                return fail(format!("entry {:?} has capacity {} in an unweighted view", entry.id, entry.capacity));
            }
        }
        Ok(())
    }

    /// The entry with this id.
    pub fn entry(&self, id: &str) -> Option<&Entry> {
        self.entries.binary_search_by(|e| e.id.as_str().cmp(id)).ok().map(|i| &self.entries[i])
    }

    /// Whether every entry has adopted the last join: only then may a key
    /// that a join moved be started by its new owner.
    pub fn is_active(&self) -> bool {
        self.entries.iter().all(|e| e.adopted >= self.last_join)
    }

    /// The members of this view as a prepared HRW set, with the view's own
    /// weight function.
    pub fn member_set(&self) -> MemberSet {
        let options = Options { weight_fn: self.hash.function, ..Options::default() };
        let members = self.entries.iter().map(|e| (Member::new(e.id.clone(), e.addr.clone()), e.capacity));
        if self.hash.weighted {
            MemberSet::weighted(members, options)
        } else {
            MemberSet::with_options(members.map(|(m, _)| m), options)
        }
    }

    /// The next view, made by `change`, with the entries as `edit` leaves
    /// them (kept sorted by id).
    pub(crate) fn next(&self, change: Change, edit: impl FnOnce(&mut Vec<Entry>)) -> Option<MembershipRecord> {
        let view = self.view.checked_add(1)?;
        let mut entries = self.entries.clone();
        edit(&mut entries);
        entries.sort_by(|a, b| a.id.cmp(&b.id));
        let last_join = if change.kind == ChangeKind::Join { view } else { self.last_join };
        Some(MembershipRecord { format: FORMAT.to_owned(), view, hash: self.hash, change, last_join, entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn entry(id: &str, adopted: u64) -> Entry {
        Entry {
            id: id.into(),
            incarnation: format!("{id}-1"),
            addr: String::new(),
            ttl_ms: 3_000,
            nonce: format!("{id}-n"),
            adopted,
            capacity: NonZeroU32::MIN,
        }
    }

    fn record() -> MembershipRecord {
        let mut record = MembershipRecord::first(1, Hash::default(), entry("a", 1));
        record = record
            .next(Change { kind: ChangeKind::Join, id: "b".into(), incarnation: "b-1".into() }, |e| {
                e.push(entry("b", 2))
            })
            .unwrap();
        record
    }

    #[test]
    fn round_trips_and_tracks_the_last_join() {
        let record = record();
        assert_eq!((record.view, record.last_join), (2, 2));
        assert_eq!(MembershipRecord::decode(&record.encode()), Ok(record.clone()));
        let left = record
            .next(Change { kind: ChangeKind::Leave, id: "a".into(), incarnation: "a-1".into() }, |e| {
                e.retain(|e| e.id != "a")
            })
            .unwrap();
        assert_eq!((left.view, left.last_join), (3, 2));
    }

    #[test]
    fn a_view_is_active_once_every_entry_adopted_the_last_join() {
        let mut record = record();
        assert!(!record.is_active(), "a has not adopted b's join");
        record.entries[0].adopted = 2;
        assert!(record.is_active());
    }

    #[test]
    fn owners_come_from_the_views_own_weight_function() {
        let mut record = record();
        let fast = record.member_set();
        record.hash.function = WeightFn::GoSha256;
        let sha = record.member_set();
        let differ = (0..200).filter(|i| fast.owner(i.to_string()) != sha.owner(i.to_string())).count();
        assert!(differ > 0, "the two weight functions give different owners for some keys");
        assert_eq!(sha.owner("k"), WeightFn::GoSha256.owner("k", sha.members()));
    }

    #[test]
    fn objects_that_break_a_rule_are_refused_with_the_reason() {
        let good = record();
        type Breakage = Box<dyn Fn(&mut MembershipRecord)>;
        let cases: Vec<(&str, Breakage)> = vec![
            ("format", Box::new(|r| r.format = "hoplock-lease/1".into())),
            ("view 0", Box::new(|r| r.view = 0)),
            ("last join", Box::new(|r| r.last_join = 9)),
            ("sorted", Box::new(|r| r.entries.swap(0, 1))),
            ("sorted", Box::new(|r| r.entries[1].id = "a".into())),
            ("TTL", Box::new(|r| r.entries[0].ttl_ms = 0)),
            ("adopted", Box::new(|r| r.entries[0].adopted = 3)),
            ("capacity", Box::new(|r| r.entries[0].capacity = NonZeroU32::new(2).unwrap())),
            ("no incarnation", Box::new(|r| r.entries[0].nonce.clear())),
        ];
        for (reason, break_it) in cases {
            let mut bad = good.clone();
            break_it(&mut bad);
            let error = MembershipRecord::decode(&bad.encode()).unwrap_err();
            assert!(error.to_string().contains(reason), "{reason}: {error}");
        }
        for junk in [&b"not json"[..], b"{}", br#"{"generation":3}"#] {
            assert!(MembershipRecord::decode(junk).is_err());
        }
        assert!(
            MembershipRecord::decode(&vec![b' '; MAX_OBJECT_BYTES + 1]).unwrap_err().to_string().contains("larger")
        );
    }
}
