//! The elector's decision core, one situation at a time.

use super::*;

fn timing() -> Timing {
    Timing {
        ttl: Duration::from_secs(30),
        renew_interval: Duration::from_secs(10),
        poll_interval: Duration::from_secs(2),
        request_timeout: Duration::from_secs(5),
        release_timeout: Duration::from_secs(2),
        drift_bound_ppb: 1_000_000,
        stop_margin: Duration::from_secs(1),
        lock_delay: Duration::ZERO,
        assumed_ttl: Duration::from_secs(60),
        reads: Reads::FollowRenewals,
    }
}

fn core() -> Core {
    Core::new(timing(), Policy::Safe, "me".into(), "my-incarnation".into())
}

fn stored(generation: u64, version: &str, incarnation: &str, released: bool) -> Stored {
    Stored {
        record: LeaseRecord {
            generation: Generation(generation),
            expires_at: "2000-01-01T00:00:00Z".into(),
            owner: "other".into(),
            nonce: format!("n-{version}"),
            ttl_ms: Some(20_000),
            renew_ms: None,
            incarnation: incarnation.into(),
            released,
        },
        version: Version::new(version),
    }
}

const WALL: SystemTime = SystemTime::UNIX_EPOCH;
fn at(secs: u64) -> Instant {
    Instant::ZERO + Duration::from_secs(secs)
}

#[test]
fn a_refused_create_paces_the_next_one() {
    // The create was refused, so the key exists; a read that still finds it
    // missing is stale, and the next create comes a poll interval later
    // rather than at once.
    let mut fresh = core();
    let create = Decision::Take { expected: None, generation: Generation(1), involuntary: false };
    assert_eq!(fresh.decide(Observation::Missing, at(0), WALL), create);
    fresh.create_refused();
    fresh.forget_watch();
    assert_eq!(fresh.decide(Observation::Missing, at(1), WALL), Decision::Wait { until: Some(at(3)) });
    assert_eq!(fresh.decide(Observation::Missing, at(2), WALL), Decision::Wait { until: Some(at(3)) });
    assert_eq!(fresh.due(at(3)), Some(Decision::Take { expected: None, generation: Generation(1), involuntary: true }));
    // A record read since counts for itself, and a later "missing" is then
    // waited out for that record's TTL as always.
    fresh.decide(Observation::Record(&stored(3, "v1", "x", false)), at(4), WALL);
    assert_eq!(fresh.decide(Observation::Missing, at(5), WALL), Decision::Wait { until: Some(at(35)) });
}

#[test]
fn hold_time_is_shrunk_by_drift_and_margin() {
    // 30 s · (1 − 0.001) / (1 + 0.001) − 1 s
    assert_eq!(timing().hold_for().as_nanos(), 28_940_059_940);
}

#[test]
fn takes_a_missing_key_at_once_and_a_released_one_at_once() {
    let mut core = core();
    assert_eq!(
        core.decide(Observation::Missing, at(0), WALL),
        Decision::Take { expected: None, generation: Generation(1), involuntary: false }
    );
    let released = stored(4, "v1", "x", true);
    assert_eq!(
        core.decide(Observation::Record(&released), at(0), WALL),
        Decision::Take { expected: Some(Version::new("v1")), generation: Generation(5), involuntary: false }
    );
}

#[test]
fn waits_the_holders_ttl_from_first_arrival_whatever_expires_at_says() {
    let mut core = core();
    let live = stored(2, "v1", "x", false);
    // expires_at is in the distant past; it must not matter.
    assert_eq!(core.decide(Observation::Record(&live), at(5), WALL), Decision::Wait { until: Some(at(25)) });
    assert_eq!(core.decide(Observation::Record(&live), at(24), WALL), Decision::Wait { until: Some(at(25)) });
    assert_eq!(core.due(at(24)), None);
    let take = Decision::Take { expected: Some(Version::new("v1")), generation: Generation(3), involuntary: true };
    assert_eq!(core.due(at(25)), Some(take.clone()));
    assert_eq!(core.decide(Observation::Record(&live), at(26), WALL), take);
    // A new version restarts the wait.
    let renewed = stored(2, "v2", "x", false);
    assert_eq!(core.decide(Observation::Record(&renewed), at(27), WALL), Decision::Wait { until: Some(at(47)) });
}

#[test]
fn a_vanished_key_is_a_new_version_and_never_lowers_the_generation() {
    let mut core = core();
    let live = stored(9, "v1", "x", false);
    core.decide(Observation::Record(&live), at(0), WALL);
    // The holder may have renewed after our read at 0 and before the
    // deletion, so the wait runs from the answer that showed the key
    // missing, for the longer of its TTL (20 s) and ours (30 s).
    assert_eq!(core.decide(Observation::Missing, at(1), WALL), Decision::Wait { until: Some(at(31)) });
    assert_eq!(core.decide(Observation::Missing, at(5), WALL), Decision::Wait { until: Some(at(31)) });
    assert_eq!(core.due(at(30)), None);
    let take = Decision::Take { expected: None, generation: Generation(10), involuntary: true };
    assert_eq!(core.due(at(31)), Some(take));
}

#[test]
fn a_missing_key_after_a_forgotten_watch_is_still_waited_out() {
    // A failed takeover forgets its watch; the record it lost to is then
    // deleted. The elector has seen records, so "missing" is no licence
    // to skip the wait.
    let mut core = core();
    let mut longer = stored(3, "v1", "x", false);
    longer.record.ttl_ms = Some(45_000);
    core.decide(Observation::Record(&longer), at(0), WALL);
    core.forget_watch();
    assert_eq!(core.decide(Observation::Missing, at(10), WALL), Decision::Wait { until: Some(at(55)) });
    assert!(matches!(core.due(at(55)), Some(Decision::Take { generation: Generation(4), involuntary: true, .. })));
}

#[test]
fn a_record_that_replaced_another_writers_live_one_is_waited_out_for_both_ttls() {
    // x holds with a 20 s TTL; someone else overwrites its record with
    // one stating 5 s. x may not know yet and may act for up to 20 s:
    // the new version is waited out for 20 s, not 5.
    let mut core = core();
    core.decide(Observation::Record(&stored(2, "v1", "x", false)), at(0), WALL);
    let mut foreign = stored(9, "v2", "y", false);
    foreign.record.ttl_ms = Some(5_000);
    assert_eq!(core.decide(Observation::Record(&foreign), at(1), WALL), Decision::Wait { until: Some(at(21)) });
    // y's renewals are timed by y's TTL, but do not end x's wait early:
    // if y stops at once, x may still be acting until 21 s.
    let mut renewed = stored(9, "v3", "y", false);
    renewed.record.ttl_ms = Some(5_000);
    assert_eq!(core.decide(Observation::Record(&renewed), at(2), WALL), Decision::Wait { until: Some(at(21)) });
    assert_eq!(core.due(at(20)), None);
    assert!(core.due(at(21)).is_some());
    // A released record ended its writer's term: no extra wait after it.
    let mut core = self::core();
    core.decide(Observation::Record(&stored(2, "v1", "x", true)), at(0), WALL);
    let mut next = stored(3, "v2", "z", false);
    next.record.ttl_ms = Some(5_000);
    assert_eq!(core.decide(Observation::Record(&next), at(1), WALL), Decision::Wait { until: Some(at(6)) });
}

#[test]
fn a_release_ends_the_wait_only_for_the_holder_that_wrote_it() {
    // x releases its own record: taken at once.
    let mut core = core();
    core.decide(Observation::Record(&stored(2, "v1", "x", false)), at(0), WALL);
    assert_eq!(
        core.decide(Observation::Record(&stored(2, "v2", "x", true)), at(1), WALL),
        Decision::Take { expected: Some(Version::new("v2")), generation: Generation(3), involuntary: false }
    );

    // Someone else (an operator's reset) releases over x's live record:
    // x may still be inside its 20 s term and is waited out.
    let mut core = self::core();
    core.decide(Observation::Record(&stored(2, "v1", "x", false)), at(0), WALL);
    let reset = stored(2, "v2", "", true);
    assert_eq!(core.decide(Observation::Record(&reset), at(3), WALL), Decision::Wait { until: Some(at(23)) });
    assert_eq!(core.due(at(22)), None);
    let take = Decision::Take { expected: Some(Version::new("v2")), generation: Generation(3), involuntary: true };
    assert_eq!(core.due(at(23)), Some(take.clone()));
    assert_eq!(core.decide(Observation::Record(&reset), at(24), WALL), take);
}

#[test]
fn a_release_never_cuts_short_the_wait_for_a_holder_displaced_before_it() {
    // x holds with a 20 s TTL; y overwrites with a 6 s record at 1 s (x
    // is waited out until 21 s); at 8 s a reset releases y's record. The
    // release says y stopped, but x may still act until 21 s.
    let mut core = core();
    core.decide(Observation::Record(&stored(2, "v1", "x", false)), at(0), WALL);
    let mut foreign = stored(9, "v2", "y", false);
    foreign.record.ttl_ms = Some(6_000);
    assert_eq!(core.decide(Observation::Record(&foreign), at(1), WALL), Decision::Wait { until: Some(at(21)) });
    assert_eq!(
        core.decide(Observation::Record(&stored(9, "v3", "", true)), at(8), WALL),
        Decision::Wait { until: Some(at(21)) }
    );
    // y releasing its own record proves no more about x.
    let mut core = self::core();
    core.decide(Observation::Record(&stored(2, "v1", "x", false)), at(0), WALL);
    core.decide(Observation::Record(&foreign), at(1), WALL);
    assert_eq!(
        core.decide(Observation::Record(&stored(9, "v3", "y", true)), at(8), WALL),
        Decision::Wait { until: Some(at(21)) }
    );
    assert!(matches!(core.due(at(21)), Some(Decision::Take { generation: Generation(10), .. })));

    // Nor does a release written over a key found missing.
    let mut core = self::core();
    core.decide(Observation::Record(&stored(2, "v1", "x", false)), at(0), WALL);
    assert_eq!(core.decide(Observation::Missing, at(1), WALL), Decision::Wait { until: Some(at(31)) });
    assert_eq!(
        core.decide(Observation::Record(&stored(5, "v2", "", true)), at(2), WALL),
        Decision::Wait { until: Some(at(31)) }
    );
}

#[test]
fn records_that_name_no_incarnation_are_never_the_same_writer() {
    // A Go holder's live record (no incarnation) and a reset's release
    // (none either): the release proves nothing about the Go holder.
    let mut core = core();
    let mut go = stored(2, "v1", "", false);
    go.record.ttl_ms = None;
    core.decide(Observation::Record(&go), at(0), WALL);
    assert_eq!(
        core.decide(Observation::Record(&stored(2, "v2", "", true)), at(1), WALL),
        Decision::Wait { until: Some(at(61)) }
    );
}

#[test]
fn a_takeover_attempt_that_never_landed_changes_nothing() {
    // The holder's TTL is 45 s; our takeover write is built (and fails:
    // the holder renewed). Then the key is deleted: the wait must still
    // be the holder's 45 s, and the generation we tried is not "seen".
    let mut core = core();
    let mut holder = stored(3, "v1", "x", false);
    holder.record.ttl_ms = Some(45_000);
    core.decide(Observation::Record(&holder), at(0), WALL);
    let attempt = core.record(Generation(4), WALL, "mine".into(), false);
    assert_eq!(attempt.generation, Generation(4));
    assert_eq!(core.highest_seen(), Generation(3));
    core.forget_watch();
    assert_eq!(core.decide(Observation::Missing, at(10), WALL), Decision::Wait { until: Some(at(55)) });
    // A write the store confirmed does count.
    core.wrote(&attempt);
    assert_eq!(core.highest_seen(), Generation(4));
}

#[test]
fn a_record_without_a_ttl_is_waited_out_for_the_assumed_ttl() {
    // A record from the Go hoplock states no TTL. Our own is 30 s; the
    // Go holder's may be longer, so the assumed 60 s applies.
    let mut core = core();
    let mut go = stored(5, "v1", "", false);
    go.record.ttl_ms = None;
    assert_eq!(core.decide(Observation::Record(&go), at(0), WALL), Decision::Wait { until: Some(at(60)) });
    assert_eq!(core.due(at(59)), None);
    assert!(core.due(at(60)).is_some());
}

#[test]
fn an_exhausted_generation_is_never_taken_over() {
    let mut core = core();
    for released in [false, true] {
        let last = stored(u64::MAX, "v1", "x", released);
        assert_eq!(
            core.decide(Observation::Record(&last), at(0), WALL),
            Decision::Exhausted { generation: Generation::MAX }
        );
        assert_eq!(core.due(at(1_000_000)), None);
    }
    // Once seen, even a missing key cannot restart below it.
    assert_eq!(core.decide(Observation::Missing, at(0), WALL), Decision::Exhausted { generation: Generation::MAX });
}

#[test]
fn the_advertised_ttl_is_rounded_up_to_whole_milliseconds() {
    assert_eq!(advertised_ttl_ms(Duration::from_millis(3000)), 3000);
    assert_eq!(advertised_ttl_ms(Duration::from_nanos(3_000_000_001)), 3001);
    assert_eq!(advertised_ttl_ms(Duration::from_micros(1500)), 2);
    let core =
        Core::new(Timing { ttl: Duration::from_micros(29_999_500), ..timing() }, Policy::Safe, "me".into(), "i".into());
    let record = core.record(Generation(1), WALL, "n".into(), false);
    assert_eq!(record.ttl_ms, Some(30_000));
}

#[test]
fn own_incarnation_is_replaced_at_once_and_corrupt_never() {
    let mut core = core();
    let mine = stored(3, "v1", "my-incarnation", false);
    assert!(matches!(
        core.decide(Observation::Record(&mine), at(0), WALL),
        Decision::Take { generation: Generation(4), .. }
    ));
    assert_eq!(core.decide(Observation::Corrupt, at(100), WALL), Decision::Wait { until: None });
    assert_eq!(core.due(at(1000)), None);
}

#[test]
fn unknown_outcomes_are_judged_by_nonce() {
    let s = stored(1, "v7", "x", false);
    assert_eq!(resolve(Some(&s), "n-v7", Some("old")), Resolution::Applied(Version::new("v7")));
    assert_eq!(resolve(Some(&s), "mine", Some("n-v7")), Resolution::NotApplied);
    assert_eq!(resolve(Some(&s), "mine", Some("old")), Resolution::Superseded);
    assert_eq!(resolve(None, "mine", None), Resolution::Vanished);
}

#[test]
fn the_reference_policy_trusts_expires_at() {
    let mut core = Core::new(timing(), Policy::WallClockExpiry, "me".into(), "i".into());
    let live = stored(2, "v1", "x", false); // expires_at in 2000
    assert!(matches!(
        core.decide(Observation::Record(&live), at(0), WALL + Duration::from_secs(1 << 31)),
        Decision::Take { .. }
    ));
    assert_eq!(
        core.decide(Observation::Missing, at(0), WALL),
        Decision::Take { expected: None, generation: Generation(1), involuntary: false }
    );
}
