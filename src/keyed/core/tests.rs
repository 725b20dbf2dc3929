//! The keyed decision core, one situation at a time: joins, adoption, evictions, leaves, creations and terms.

use super::*;

const TTL: Duration = Duration::from_secs(3);

fn timing() -> Timing {
    Timing {
        ttl: TTL,
        renew_interval: Duration::from_secs(1),
        read_interval: Duration::from_secs(1),
        request_timeout: Duration::from_millis(500),
        leave_timeout: Duration::from_secs(1),
        drift_bound_ppb: 1_000_000,
        stop_margin: Duration::from_millis(300),
        lock_delay: Duration::ZERO,
    }
}

fn core(id: &str, keys: &Arc<[String]>) -> Core {
    let me = Identity {
        id: id.into(),
        addr: String::new(),
        capacity: NonZeroU32::MIN,
        hash: Hash::default(),
        create_at: Some(1),
        adoption: true,
    };
    Core::new(timing(), me, format!("{id}-1"), keys.clone())
}

fn keys() -> Arc<[String]> {
    (0..60).map(|i| format!("k{i}")).collect::<Vec<_>>().into()
}

fn at(millis: u64) -> Instant {
    Instant::ZERO + Duration::from_millis(millis)
}

/// A store of one object for the tests to write through.
#[derive(Default)]
struct Object {
    record: Option<MembershipRecord>,
    version: u64,
}

impl Object {
    fn read(&self) -> Option<(MembershipRecord, Version)> {
        self.record.clone().map(|r| (r, Version::new(self.version.to_string())))
    }

    /// Applies `planned` if its condition holds.
    fn write(&mut self, planned: &Planned) -> Option<Version> {
        let current = self.record.as_ref().map(|_| Version::new(self.version.to_string()));
        if current != planned.expected {
            return None;
        }
        self.version += 1;
        self.record = Some(planned.record.clone());
        Some(Version::new(self.version.to_string()))
    }
}

/// One read, plan and write by `core` at `now`; returns the kind written.
fn step(core: &mut Core, object: &mut Object, now: Instant) -> Option<WriteKind> {
    core.observe(object.read(), now);
    for key in core.to_stop(now) {
        core.stopped(&key);
    }
    let planned = core.plan(now, format!("n{}", now.as_nanos())).expect("no refusal");
    let kind = planned.map(|planned| {
        let kind = planned.kind;
        let version = object.write(&planned).expect("no race in these tests");
        core.landed(planned, now, version, now);
        kind
    });
    for (key, round) in core.to_start(now) {
        core.started(key, round);
    }
    kind
}

/// Renews every second from `from` to `to` (inclusive), as the shell
/// would, starting keys as they become startable.
fn keep_up(core: &mut Core, object: &mut Object, from: u64, to: u64) {
    let mut t = from;
    while t <= to {
        step(core, object, at(t));
        t += 1_000;
    }
}

fn plan(core: &Core, now: Instant) -> Option<Planned> {
    core.plan(now, "n".into()).expect("no refusal")
}

#[test]
fn a_lone_member_creates_the_object_and_waits_a_ttl_before_acting() {
    let keys = keys();
    let mut a = core("a", &keys);
    let mut object = Object::default();
    assert!(plan(&a, at(0)).is_none(), "nothing is created before a read says the object is missing");
    assert_eq!(step(&mut a, &mut object, at(0)), Some(WriteKind::Create));
    assert!(a.running().is_empty(), "a fresh object may replace a deleted one: wait out its members");
    keep_up(&mut a, &mut object, 1_000, 2_000);
    assert!(a.running().is_empty());
    assert!(!a.write_due(at(2_999)));
    assert!(a.write_due(at(3_000)), "the adoption held back is due once the wait is over");
    assert_eq!(step(&mut a, &mut object, at(3_000)), Some(WriteKind::Renew));
    assert_eq!(a.running().len(), keys.len());
    assert!(a.running().values().all(|round| round.get() == 1));
}

#[test]
fn a_join_moves_keys_only_after_their_owner_adopted_it() {
    let keys = keys();
    let (mut a, mut b) = (core("a", &keys), core("b", &keys));
    let mut object = Object::default();
    keep_up(&mut a, &mut object, 0, 3_000);
    assert_eq!(a.running().len(), keys.len());
    assert_eq!(step(&mut b, &mut object, at(3_100)), Some(WriteKind::Join));
    let record = object.record.clone().unwrap();
    assert_eq!((record.view, record.last_join), (2, 2));
    assert!(!record.is_active());
    assert!(b.to_start(at(3_200)).is_empty(), "a has not adopted the join");
    let mut moving: Vec<String> =
        keys.iter().filter(|k| record.member_set().is_owner(k.as_str(), "b")).cloned().collect();
    moving.sort();
    assert!(!moving.is_empty());

    // a reads the join: the moved keys must stop before it adopts.
    a.observe(object.read(), at(3_500));
    assert_eq!(a.to_stop(at(3_500)), moving);
    for key in &moving {
        a.stopped(key);
    }
    let adoption = plan(&a, at(3_500)).unwrap();
    assert_eq!(adoption.kind, WriteKind::Renew);
    assert_eq!(adoption.record.entry("a").unwrap().adopted, 2);
    let version = object.write(&adoption).unwrap();
    a.landed(adoption, at(3_500), version, at(3_510));

    // b's first read was at 3 100 ms: it holds new keys for the lock-delay.
    b.observe(object.read(), at(3_800));
    let started = b.to_start(at(3_800));
    let mut started_keys: Vec<String> = started.iter().map(|(k, _)| k.clone()).collect();
    started_keys.sort();
    assert_eq!(started_keys, moving);
    assert!(started.iter().all(|(_, round)| round.get() == 2), "the round is the view the key started in");
}

#[test]
fn a_stale_read_never_brings_back_a_key() {
    let keys = keys();
    let (mut a, mut b) = (core("a", &keys), core("b", &keys));
    let mut object = Object::default();
    keep_up(&mut a, &mut object, 0, 3_000);
    let old = object.read();
    step(&mut b, &mut object, at(3_100));
    a.observe(object.read(), at(3_200));
    let moved = a.to_stop(at(3_200));
    assert!(!moved.is_empty());
    for key in &moved {
        a.stopped(key);
    }
    a.observe(old, at(3_300));
    assert_eq!(a.newest().unwrap().record.view, 2, "the older view is ignored");
    assert!(a.to_start(at(3_300)).is_empty(), "no moved key starts again under the old view");
}

#[test]
fn a_read_of_a_version_a_write_lost_against_is_not_taken_in() {
    // Renewals change nonces, not the view: a read of a superseded version
    // of the newest view looks current, and only the member's own lost
    // write shows that it is not.
    let keys = keys();
    let (mut a, mut b) = (core("a", &keys), core("b", &keys));
    let mut object = Object::default();
    keep_up(&mut a, &mut object, 0, 3_000);
    step(&mut b, &mut object, at(3_100));
    keep_up(&mut a, &mut object, 4_000, 4_000);
    let superseded = object.read();
    // b renews; a, due to renew (past the time it holds back for b, whose
    // renewal it has not seen), writes against the version it read and loses.
    step(&mut b, &mut object, at(4_500));
    let lost = plan(&a, at(6_000)).unwrap();
    assert!(object.write(&lost).is_none());
    a.lost_against(lost.expected.as_ref());
    let current = object.read();
    a.observe(current.clone(), at(6_100));
    // A stale read of the version it lost against comes in after the
    // current one: it is not taken in, and the next write is against the
    // current version, so it lands.
    a.observe(superseded.clone(), at(6_200));
    assert_eq!(a.version(), current.as_ref().map(|(_, version)| version));
    let renewal = plan(&a, at(6_200)).unwrap();
    assert!(object.write(&renewal).is_some(), "the renewal is written against the current version");
    // Without the lost write, the same stale read would have been taken in.
    let mut c = core("a", &keys);
    c.observe(current, at(6_100));
    c.observe(superseded.clone(), at(6_200));
    assert_eq!(c.version(), superseded.as_ref().map(|(_, version)| version));
}

#[test]
fn an_entry_is_evicted_only_after_its_nonce_sat_still_for_its_ttl() {
    let keys = keys();
    let (mut a, mut b) = (core("a", &keys), core("b", &keys));
    b.timing.lock_delay = Duration::from_millis(700);
    let mut object = Object::default();
    step(&mut a, &mut object, at(0));
    step(&mut b, &mut object, at(100));
    // b watches a's nonce from the first response that showed it.
    b.observe(object.read(), at(200));
    assert_eq!(b.next_eviction(), Some(at(100) + TTL), "b first saw a's nonce at 100 ms");
    // a renews: the wait starts again from the response showing it.
    step(&mut a, &mut object, at(1_000));
    b.observe(object.read(), at(1_200));
    assert_eq!(b.next_eviction(), Some(at(1_200) + TTL));
    // b renews; a stays silent.
    keep_up(&mut b, &mut object, 2_100, 4_100);
    b.observe(object.read(), at(4_199));
    assert!(plan(&b, at(4_199)).is_none_or(|p| p.kind != WriteKind::Evict));
    b.observe(object.read(), at(4_200));
    let evict = plan(&b, at(4_200)).unwrap();
    assert_eq!(evict.kind, WriteKind::Evict);
    assert_eq!(evict.record.change.id, "a");
    assert_eq!(evict.record.entry("b").unwrap().adopted, evict.record.view, "the evicter adopts its own view");
    let version = object.write(&evict).unwrap();
    b.landed(evict, at(4_200), version, at(4_200));
    // Keys from an evicted member wait out the lock-delay.
    assert!(b.to_start(at(4_200)).is_empty());
    assert!(!b.to_start(at(4_900)).is_empty());
    // a, cut off meanwhile, learns its entry is gone.
    assert_eq!(a.observe(object.read(), at(5_000)), Observed::Removed);
    assert_eq!(a.phase, Phase::Finished);
    assert!(a.to_start(at(5_000)).is_empty());
}

#[test]
fn the_term_ends_hold_for_after_the_last_landed_send() {
    let keys = keys();
    let mut a = core("a", &keys);
    let mut object = Object::default();
    step(&mut a, &mut object, at(0));
    let hold = timing().hold_for();
    assert_eq!(a.term_end(), Some(at(0) + hold));
    assert!(a.term_holds(at(0) + hold - Duration::from_nanos(1)));
    assert!(!a.term_holds(at(0) + hold));
    for (key, round) in a.to_start(at(3_000).min(at(0) + hold - Duration::from_millis(1))) {
        a.started(key, round);
    }
    assert_eq!(a.to_stop(at(0) + hold).len(), a.running().len(), "every key stops at the term's end");
}

#[test]
fn a_restart_waits_for_its_predecessors_entry_to_go() {
    let keys = keys();
    let mut old = core("a", &keys);
    let mut object = Object::default();
    step(&mut old, &mut object, at(0));
    let mut new = core("a", &keys);
    new.incarnation = "a-2".into();
    assert_eq!(step(&mut new, &mut object, at(500)), None, "the old entry is still there");
    new.observe(object.read(), at(3_499));
    assert!(plan(&new, at(3_499)).is_none());
    new.observe(object.read(), at(3_500));
    let evict = plan(&new, at(3_500)).unwrap();
    assert_eq!((evict.kind, evict.record.change.incarnation.as_str()), (WriteKind::Evict, "a-1"));
    assert!(evict.record.entries.is_empty());
    let version = object.write(&evict).unwrap();
    new.landed(evict, at(3_500), version, at(3_500));
    assert_eq!(step(&mut new, &mut object, at(3_600)), Some(WriteKind::Join));
    assert_eq!(object.record.as_ref().unwrap().view, 3, "the restart is a new entry in a new view");
}

#[test]
fn an_unknown_outcome_counts_only_when_the_nonce_is_there() {
    let keys = keys();
    let mut a = core("a", &keys);
    let mut object = Object::default();
    step(&mut a, &mut object, at(0));
    a.observe(object.read(), at(1_000));
    let renewal = a.plan(at(1_000), "fresh".into()).unwrap().unwrap();
    // It did not land.
    a.observe(object.read(), at(1_100));
    assert!(!a.settle(&renewal, at(1_000), at(1_100)));
    assert_eq!(a.term_end(), Some(at(0) + timing().hold_for()));
    // It did.
    object.write(&renewal).unwrap();
    a.observe(object.read(), at(1_200));
    assert!(a.settle(&renewal, at(1_000), at(1_200)));
    assert_eq!(a.term_end(), Some(at(1_000) + timing().hold_for()), "counted from the send");
}

#[test]
fn a_leave_removes_only_the_own_entry_and_needs_no_adoption() {
    let keys = keys();
    let (mut a, mut b) = (core("a", &keys), core("b", &keys));
    let mut object = Object::default();
    step(&mut a, &mut object, at(0));
    step(&mut b, &mut object, at(100));
    for t in [1_000, 2_000, 3_000] {
        step(&mut a, &mut object, at(t));
        step(&mut b, &mut object, at(t + 100));
    }
    assert!(b.newest().unwrap().record.is_active(), "a adopted b's join once its wait was over");
    assert!(!a.running().is_empty());
    a.begin_leave();
    assert_eq!(a.term_end(), None, "a acts for nothing once leaving starts");
    assert_eq!(step(&mut a, &mut object, at(3_150)), Some(WriteKind::Leave));
    assert_eq!(a.phase, Phase::Finished);
    b.observe(object.read(), at(3_200));
    let record = &b.newest().unwrap().record;
    assert_eq!((record.view, record.last_join, record.is_active()), (3, 2, true));
    let owned_before = b.running().len();
    assert!(owned_before < keys.len());
    assert_eq!(b.to_start(at(3_200)).len(), keys.len() - owned_before, "a's keys start at once, with no lock-delay");
}

#[test]
fn no_view_is_adopted_while_a_key_that_moved_in_it_still_runs() {
    let keys = keys();
    let (mut a, mut b) = (core("a", &keys), core("b", &keys));
    let mut object = Object::default();
    keep_up(&mut a, &mut object, 0, 3_000);
    assert_eq!(step(&mut b, &mut object, at(3_100)), Some(WriteKind::Join));
    a.observe(object.read(), at(3_500));
    assert!(!a.to_stop(at(3_500)).is_empty());
    assert!(plan(&a, at(3_500)).is_none(), "adopting now would let b start keys a still runs");
    assert!(plan(&a, at(4_500)).is_none(), "not even when a renewal is due");
    for key in a.to_stop(at(4_500)) {
        a.stopped(&key);
    }
    assert_eq!(plan(&a, at(4_500)).map(|p| p.kind), Some(WriteKind::Renew));
}

#[test]
fn a_vanished_object_stops_every_key_and_starts_none() {
    let keys = keys();
    let mut a = core("a", &keys);
    let mut object = Object::default();
    keep_up(&mut a, &mut object, 0, 3_000);
    assert_eq!(a.running().len(), keys.len());
    assert_eq!(a.observe(None, at(3_500)), Observed::Vanished);
    assert_eq!(a.to_stop(at(3_500)).len(), keys.len(), "the term is no proof of ownership without a view");
    for key in a.to_stop(at(3_500)) {
        a.stopped(&key);
    }
    assert!(a.to_start(at(3_500)).is_empty());
    // The object is back (a read that said missing was stale): a acts again.
    a.observe(object.read(), at(3_600));
    assert_eq!(a.to_start(at(3_600)).len(), keys.len());
}

#[test]
fn keys_of_a_new_object_wait_a_ttl_from_its_creation_for_every_member() {
    let keys = keys();
    let (mut a, mut b) = (core("a", &keys), core("b", &keys));
    let mut object = Object::default();
    assert_eq!(step(&mut a, &mut object, at(0)), Some(WriteKind::Create));
    assert!(!object.record.as_ref().unwrap().is_active(), "the creator adopts its view only after the wait");
    assert_eq!(step(&mut b, &mut object, at(100)), Some(WriteKind::Join));
    let mut t = 500;
    while t < 3_000 {
        step(&mut a, &mut object, at(t));
        step(&mut b, &mut object, at(t + 10));
        assert!(a.running().is_empty() && b.running().is_empty(), "a key started {t} ms after the creation");
        t += 500;
    }
    step(&mut a, &mut object, at(3_000));
    step(&mut b, &mut object, at(3_010));
    assert!(!a.running().is_empty() && !b.running().is_empty());
}

#[test]
fn a_creator_leaving_during_its_wait_leaves_its_entry_to_be_evicted() {
    let keys = keys();
    let (mut a, mut b) = (core("a", &keys), core("b", &keys));
    let mut object = Object::default();
    step(&mut a, &mut object, at(0));
    step(&mut b, &mut object, at(100));
    a.observe(object.read(), at(500));
    a.begin_leave();
    // Removing the one entry that adopted nothing would make b's view
    // active before the wait for a deleted object's members is over.
    assert!(plan(&a, at(500)).is_none());
    assert!(plan(&a, at(2_999)).is_none());
    assert_eq!(plan(&a, at(3_000)).map(|p| p.kind), Some(WriteKind::Leave));
}

#[test]
fn a_creation_whose_outcome_was_lost_still_waits_a_ttl() {
    let keys = keys();
    let mut a = core("a", &keys);
    let mut object = Object::default();
    a.observe(None, at(0));
    let create = plan(&a, at(0)).unwrap();
    object.write(&create).unwrap();
    // No answer came and the read-back failed; a later read shows the entry.
    assert_eq!(step(&mut a, &mut object, at(500)), Some(WriteKind::Create));
    assert!(a.to_start(at(600)).is_empty());
    assert!(a.to_start(at(3_400)).is_empty());
    assert_eq!(step(&mut a, &mut object, at(3_500)), Some(WriteKind::Renew));
    assert_eq!(a.running().len(), keys.len());
}

#[test]
fn a_joiners_first_view_holds_new_keys_for_the_lock_delay() {
    let keys = keys();
    let (mut a, mut b) = (core("a", &keys), core("b", &keys));
    b.timing.lock_delay = Duration::from_millis(700);
    let mut object = Object::default();
    keep_up(&mut a, &mut object, 0, 3_000);
    // b's first read could follow an eviction it never saw.
    assert_eq!(step(&mut b, &mut object, at(3_100)), Some(WriteKind::Join));
    for key in {
        a.observe(object.read(), at(3_200));
        a.to_stop(at(3_200))
    } {
        a.stopped(&key);
    }
    assert_eq!(step(&mut a, &mut object, at(3_200)), Some(WriteKind::Renew));
    b.observe(object.read(), at(3_300));
    assert!(b.newest().unwrap().record.is_active());
    assert!(b.to_start(at(3_799)).is_empty());
    assert!(!b.to_start(at(3_800)).is_empty());
}

#[test]
fn a_restart_evicts_its_predecessor_even_behind_another_silent_entry() {
    let keys = keys();
    let (mut first, mut old) = (core("0", &keys), core("a", &keys));
    let mut object = Object::default();
    step(&mut first, &mut object, at(0));
    step(&mut old, &mut object, at(100));
    let mut new = core("a", &keys);
    new.incarnation = "a-2".into();
    assert_eq!(step(&mut new, &mut object, at(200)), None);
    new.observe(object.read(), at(3_200));
    let evict = plan(&new, at(3_200)).expect("both entries are silent past their TTL");
    assert_eq!(evict.kind, WriteKind::Evict);
    assert_eq!(evict.record.change.incarnation, "a-1", "the predecessor goes first");
}

#[test]
fn the_last_view_is_never_passed() {
    let keys = keys();
    let (mut a, mut b) = (core("a", &keys), core("b", &keys));
    a.me.create_at = Some(u64::MAX);
    let mut object = Object::default();
    step(&mut a, &mut object, at(0));
    assert_eq!(object.record.as_ref().unwrap().view, u64::MAX);
    assert_eq!(step(&mut b, &mut object, at(100)), None, "no join fits after the last view");
    a.observe(object.read(), at(200));
    assert_eq!(b.observe(object.read(), at(300)), Observed::Current);
}

#[test]
fn an_entry_states_its_ttl_rounded_up_to_a_millisecond() {
    let keys = keys();
    let mut a = core("a", &keys);
    a.timing.ttl = Duration::from_micros(3_000_500);
    assert_eq!(a.own_entry("n".into(), 1).ttl_ms, 3_001, "rounding down would let others evict it early");
}

#[test]
fn a_missing_object_after_a_view_fails_closed() {
    let keys = keys();
    let mut a = core("a", &keys);
    let mut object = Object::default();
    step(&mut a, &mut object, at(0));
    assert_eq!(a.observe(None, at(1_000)), Observed::Vanished);
    assert!(plan(&a, at(1_000)).is_none(), "it never recreates what it saw");
}

#[test]
fn a_member_told_no_view_to_create_at_never_creates_the_object() {
    let keys = keys();
    let mut a = core("a", &keys);
    a.me.create_at = None;
    assert_eq!(a.observe(None, at(0)), Observed::Absent);
    assert!(plan(&a, at(0)).is_none(), "a missing object fails closed");
    assert!(a.to_start(at(10_000)).is_empty());
    // Once someone who may creates it, the member joins it.
    let mut creator = core("b", &keys);
    creator.me.create_at = Some(500);
    let mut object = Object::default();
    assert_eq!(step(&mut creator, &mut object, at(0)), Some(WriteKind::Create));
    assert_eq!(object.record.as_ref().unwrap().view, 500, "views start at the floor given");
    assert_eq!(step(&mut a, &mut object, at(100)), Some(WriteKind::Join));
}

#[test]
fn a_creator_waits_its_ttl_and_lock_delay_before_any_view_is_active() {
    let keys = keys();
    let mut a = core("a", &keys);
    a.timing.lock_delay = Duration::from_millis(700);
    let mut object = Object::default();
    step(&mut a, &mut object, at(0));
    let wait = at(0) + TTL + a.timing.lock_delay;
    assert_eq!(a.withhold_adoption_until, wait, "no view of the new object is active before");
    assert_eq!(a.hold_new_until(), wait, "and no key starts before");
}

#[test]
fn a_renewal_given_up_on_renews_the_term_once_a_read_shows_it() {
    let keys = keys();
    let mut a = core("a", &keys);
    let mut object = Object::default();
    keep_up(&mut a, &mut object, 0, 4_000);
    let before = a.term_end().unwrap();
    // A renewal sent at 5 s whose reply never came, and whose read-back
    // did not show it yet: it lands afterwards.
    a.observe(object.read(), at(5_000));
    let planned = plan(&a, at(5_000)).expect("a renewal is due");
    assert_eq!(planned.kind, WriteKind::Renew);
    a.unresolved(&planned, at(5_000));
    assert_eq!(a.term_end(), Some(before), "an unknown outcome renews nothing yet");
    object.write(&planned).expect("it lands after all");
    a.observe(object.read(), at(6_500));
    assert_eq!(a.term_end(), Some(at(5_000) + timing().hold_for()), "the term counts from its send");
    // A read that shows someone else's nonce instead credits nothing.
    let mut b = core("b", &keys);
    let mut other = Object::default();
    keep_up(&mut b, &mut other, 0, 4_000);
    let end = b.term_end();
    let lost = plan(&b, at(5_000)).expect("a renewal is due");
    b.unresolved(&lost, at(5_000));
    b.observe(other.read(), at(6_000));
    assert_eq!(b.term_end(), end);
}

#[test]
fn the_same_view_number_with_other_members_fails_closed() {
    let keys = keys();
    let (mut a, mut b, mut c) = (core("a", &keys), core("b", &keys), core("c", &keys));
    let mut object = Object::default();
    keep_up(&mut a, &mut object, 0, 4_000);
    let copy = object.record.clone().unwrap();
    // c joins: view 2 lists a and c, and a reads it.
    assert_eq!(step(&mut c, &mut object, at(4_100)), Some(WriteKind::Join));
    a.observe(object.read(), at(4_200));
    assert_eq!(a.newest().unwrap().record.view, 2);
    // The copy of view 1 is restored, and b joins it: view 2 again, with
    // a and b.
    object.record = Some(copy);
    assert_eq!(step(&mut b, &mut object, at(5_000)), Some(WriteKind::Join));
    assert_eq!(object.record.as_ref().unwrap().view, 2);
    assert_eq!(a.observe(object.read(), at(5_100)), Observed::Vanished);
    assert!(a.to_start(at(5_100)).is_empty());
    assert_eq!(a.to_stop(at(5_100)).len(), a.running().len(), "every key stops");
    assert!(plan(&a, at(5_100)).is_none(), "nothing is written to it");
}

#[test]
fn a_due_renewal_gives_way_to_a_member_not_seen_renewing_since() {
    let keys = keys();
    let (mut a, mut b) = (core("a", &keys), core("b", &keys));
    let mut object = Object::default();
    keep_up(&mut a, &mut object, 0, 3_000);
    assert_eq!(step(&mut b, &mut object, at(3_100)), Some(WriteKind::Join));
    // a adopts the join at 3.5 s, in the read that first shows b's nonce.
    assert_eq!(step(&mut a, &mut object, at(3_500)), Some(WriteKind::Renew));
    let hold = a.hold_back_for();
    assert_eq!(hold, (timing().hold_for() - timing().renew_interval) / 2);

    // b's renewal (due at 4.1 s) is late: a, due at 4.5 s, holds its own
    // back, and keeps reading, until it sees b's or the hold runs out.
    assert!(a.write_due(at(4_500)), "the shell keeps reading while a holds back");
    assert_eq!(step(&mut a, &mut object, at(4_500)), None);
    assert!(a.holds_back(at(4_500)));
    // b does not hold back for a, whose renewal it first sees after its own
    // join was sent.
    assert_eq!(step(&mut b, &mut object, at(4_600)), Some(WriteKind::Renew));
    assert_eq!(step(&mut a, &mut object, at(4_700)), Some(WriteKind::Renew), "b's renewal was seen");

    // b falls silent: a holds back once, for the whole hold and no longer.
    assert_eq!(step(&mut a, &mut object, at(5_700)), None);
    let cap = at(5_700) + hold;
    assert!(a.holds_back(cap - Duration::from_millis(1)));
    assert!(!a.holds_back(cap));
    assert_eq!(step(&mut a, &mut object, cap), Some(WriteKind::Renew));
    // b's nonce was first seen at 4.7 s, over half its TTL before a's last
    // renewal: a member silent that long has most likely stopped, and is
    // left to be evicted instead.
    let next = cap + timing().renew_interval;
    assert!(!a.holds_back(next));
    assert_eq!(step(&mut a, &mut object, next), Some(WriteKind::Renew));
}

#[test]
fn a_due_renewal_does_not_give_way_to_a_member_with_a_longer_ttl() {
    let keys = keys();
    let mut a = core("a", &keys);
    let me = Identity { id: "b".into(), ..a.me.clone() };
    let mut b = Core::new(Timing { ttl: TTL * 3, ..timing() }, me, "b-1".into(), keys.clone());
    let mut object = Object::default();
    keep_up(&mut a, &mut object, 0, 3_000);
    assert_eq!(step(&mut b, &mut object, at(3_100)), Some(WriteKind::Join));
    assert_eq!(step(&mut a, &mut object, at(3_500)), Some(WriteKind::Renew));
    // b's entry, first seen at 3.5 s, runs out a TTL of its own later, past
    // the end of a's: b's term is in no more danger than a's, so a renews
    // when due instead of holding back (and reading) for it.
    assert!(!a.holds_back(at(4_500)));
    assert_eq!(step(&mut a, &mut object, at(4_500)), Some(WriteKind::Renew));
}

#[test]
fn the_member_that_renewed_longest_ago_never_holds_back() {
    // At every 50 ms step of a schedule drawn from a fixed seed, every
    // member reads the object, then one of them plans and writes. With
    // reads that fresh, the member due to renew whose renewal is oldest
    // holds back for nobody, so holds never stop every due member.
    let keys = keys();
    let mut members: Vec<Core> = ["a", "b", "c"].iter().map(|id| core(id, &keys)).collect();
    let mut object = Object::default();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut held_back = 0;
    for tick in 0..4_000u64 {
        let now = at(tick * 50);
        for member in &mut members {
            member.observe(object.read(), now);
        }
        let due: Vec<&Core> = members.iter().filter(|m| m.renewal_due().is_some_and(|due| now >= due)).collect();
        let holding = due.iter().filter(|m| m.holds_back(now)).count();
        held_back += holding;
        assert!(holding == 0 || holding < due.len(), "at {now:?} every member due to renew holds back");
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        // Most steps write nothing, so that renewals fall due and wait.
        if (state >> 60) < 5 {
            let who = (state >> 33) as usize % members.len();
            step(&mut members[who], &mut object, now);
        }
    }
    assert!(held_back > 0, "the schedule must make members hold back for the check to mean anything");
}

#[test]
fn the_keys_owned_after_joins_and_a_leave_are_those_every_key_weighed_gives() {
    // After a join only the keys a member owned are weighed again; after a
    // leave every key is. Either way the result must be the full weighing.
    let keys = keys();
    let mut cores: Vec<Core> = ["a", "b", "c", "d"].into_iter().map(|id| core(id, &keys)).collect();
    let mut object = Object::default();
    let weighed = |core: &Core| -> Vec<String> {
        let set = core.newest().unwrap().record.member_set();
        keys.iter().filter(|key| set.is_owner(key.as_str(), &core.me.id)).cloned().collect()
    };
    let mut t = 0;
    for joiner in 0..cores.len() {
        step(&mut cores[joiner], &mut object, at(t));
        t += 100;
        for core in &mut cores[..joiner] {
            core.observe(object.read(), at(t));
            assert_eq!(core.owned, weighed(core), "{} after the join of member {joiner}", core.me.id);
        }
    }
    assert_eq!(object.record.as_ref().unwrap().entries.len(), 4);
    let owned_before_leave = cores[0].owned.len();
    cores[3].begin_leave();
    for _ in 0..3 {
        t += 1_000;
        for core in &mut cores {
            step(core, &mut object, at(t));
        }
    }
    assert_eq!(object.record.as_ref().unwrap().entries.len(), 3, "d left");
    for core in &cores[..3] {
        assert_eq!(core.owned, weighed(core), "{} after d left", core.me.id);
    }
    assert!(cores[0].owned.len() >= owned_before_leave, "a leave only hands keys on");
}
