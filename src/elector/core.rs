//! The elector's decisions, free of I/O.
//!
//! The async shell in `elector.rs` reads the store, asks this module what to
//! do, and carries the answer out. Everything safety rests on (when a
//! contender may take over, when a holder must stop, which generation to
//! write, how to read an unknown outcome) is decided here, from values the
//! shell passes in, so it can be tested without a runtime.

use std::time::{Duration, SystemTime};

use crate::backend::{Stored, Version};
use crate::clock::Instant;
use crate::lease::{Generation, LeaseRecord};
use crate::planted::{self, Bug};
use crate::rfc3339;
use crate::term_timing;

pub use super::reads::Reads;
use super::reads::{ReadSchedule, Seen};

/// How the elector decides. [`Policy::Safe`] is the only policy for
/// production use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Policy {
    /// The rules in ARCHITECTURE.md: takeover after watching one version for
    /// its TTL on the contender's own monotonic clock, a holder deadline
    /// shortened by the drift bound, and release by writing a `released`
    /// record that keeps the generation.
    #[default]
    Safe,
    /// What the Go hoplock does, kept as a reference to compare against in
    /// tests and the simulator: a contender compares the record's
    /// `expires_at` with its own wall clock, a holder acts until its own TTL
    /// is up with no drift allowance, a record with its own owner name is
    /// renewed at the same generation, and release deletes the record (so
    /// the next acquisition starts again at generation 1). **Unsafe.**
    #[cfg(any(test, feature = "testing"))]
    WallClockExpiry,
}

/// The elector's timing, validated by the builder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Timing {
    pub ttl: Duration,
    pub renew_interval: Duration,
    pub poll_interval: Duration,
    pub request_timeout: Duration,
    pub release_timeout: Duration,
    pub drift_bound_ppb: u32,
    pub stop_margin: Duration,
    pub lock_delay: Duration,
    /// How long to wait out a record that states no TTL (one written by the
    /// Go hoplock or Litestream).
    pub assumed_ttl: Duration,
    /// When a follower reads.
    pub reads: Reads,
}

impl Timing {
    /// How long a holder may act after sending its last successful write:
    /// TTL·(1−ρ)/(1+ρ) − margin, on its own monotonic clock
    /// ([`term_timing::hold_for`] says why).
    pub fn hold_for(&self) -> Duration {
        term_timing::hold_for(self.ttl, self.drift_bound_ppb, self.stop_margin)
    }
}

/// Whether two records come from one incarnation. An empty incarnation
/// (the Go hoplock's records, `lease reset`'s) names nobody, so it matches
/// nothing, itself included.
fn same_writer(a: &str, b: &str) -> bool {
    !a.is_empty() && a == b
}

/// What the elector saw when it read the lease key.
#[derive(Debug)]
pub(crate) enum Observation<'a> {
    Missing,
    Record(&'a Stored),
    /// A record that does not parse. Never a reason to take over.
    Corrupt,
}

/// What to do next while not leading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Write a new term now, conditional on `expected` (`None`: the key must
    /// not exist).
    Take { expected: Option<Version>, generation: Generation, involuntary: bool },
    /// Not yet. If `until` is set, the lease can be taken then without
    /// another read, provided the version has not changed (the conditional
    /// write checks that).
    Wait { until: Option<Instant> },
    /// The stored generation has no successor, so no term can ever follow
    /// it. Report it like a corrupt record and never write.
    Exhausted { generation: Generation },
}

/// The version a contender is timing, and since when.
#[derive(Clone, Debug)]
struct Watch {
    /// The version watched, and what a takeover writes against. `None` is
    /// the key found missing after a record was seen: a version of its own,
    /// because the last holder may have renewed just before the deletion.
    version: Option<Version>,
    /// Arrival time of the response that first showed `version`.
    since: Instant,
    ttl: Duration,
}

/// How a write whose reply was lost, refused or timed out turned out,
/// judged from a fresh read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Resolution {
    /// The stored record carries the nonce of the write in question.
    Applied(Version),
    /// The stored record is still the one the write was meant to replace.
    NotApplied,
    /// Somebody else's record is stored.
    Superseded,
    /// The key is gone.
    Vanished,
}

/// Judges an unknown write outcome by the nonce in the record now stored.
pub(crate) fn resolve(read: Option<&Stored>, written_nonce: &str, previous_nonce: Option<&str>) -> Resolution {
    match read {
        None => Resolution::Vanished,
        Some(stored) if stored.record.nonce == written_nonce => Resolution::Applied(stored.version.clone()),
        Some(stored) if previous_nonce == Some(stored.record.nonce.as_str()) => Resolution::NotApplied,
        Some(_) => Resolution::Superseded,
    }
}

/// The elector's memory between reads: the highest generation seen and the
/// version being timed.
#[derive(Debug)]
pub(crate) struct Core {
    pub timing: Timing,
    pub policy: Policy,
    pub owner: String,
    pub incarnation: String,
    highest_seen: Generation,
    watch: Option<Watch>,
    /// The TTL of the last record read or written, `None` until one has
    /// been. A key found missing after that is waited out for at least this.
    last_ttl: Option<Duration>,
    /// The last live (not released) record read since our last write: its
    /// writer's incarnation and TTL. A record from another writer that
    /// replaces it is waited out for at least that TTL too.
    last_live: Option<(String, Duration)>,
    /// No takeover before this instant, whatever version is watched then: a
    /// holder deposed by a deletion or by someone else's write may not know
    /// yet, and its term is waited out even if the record changes again.
    not_before: Option<Instant>,
    /// When a follower reads next.
    reads: ReadSchedule,
}

impl Core {
    pub fn new(timing: Timing, policy: Policy, owner: String, incarnation: String) -> Core {
        Core {
            policy,
            owner,
            incarnation,
            highest_seen: Generation::ZERO,
            watch: None,
            last_ttl: None,
            last_live: None,
            not_before: None,
            reads: ReadSchedule::new(timing.reads, timing.poll_interval, timing.drift_bound_ppb),
            timing,
        }
    }

    /// Schedules the next read after one sent at `sent_at` that arrived at
    /// `arrived` and showed `read` (`None`: it failed or found nothing).
    /// Returns when the next read is due.
    pub fn schedule_read(&mut self, read: Option<&Stored>, sent_at: Instant, arrived: Instant) -> Instant {
        let seen = match read {
            Some(stored) if !stored.record.released && stored.record.incarnation != self.incarnation => {
                match stored.record.renew_interval() {
                    Some(renew_interval) => Seen::Renewing { version: &stored.version, renew_interval },
                    None => Seen::Other,
                }
            }
            _ => Seen::Other,
        };
        self.reads.after_read(seen, sent_at, arrived)
    }

    /// When the next read is due, as scheduled after the last one.
    pub fn next_read(&self) -> Instant {
        self.reads.next()
    }

    /// The highest generation this elector has read or written.
    pub fn highest_seen(&self) -> Generation {
        self.highest_seen
    }

    /// Notes a write of ours the store confirmed: its generation is the
    /// highest seen, and a key found missing afterwards is waited out for at
    /// least our own TTL. Another writer's record seen before it no longer
    /// counts as the one a later record replaced: ours replaced it, and a
    /// record of our own never calls for the replaced-writer wait.
    pub fn wrote(&mut self, record: &LeaseRecord) {
        self.saw(record.generation);
        self.last_ttl = Some(self.timing.ttl);
        self.last_live = None;
    }

    /// Records a generation seen or written elsewhere than through `decide`.
    pub fn saw(&mut self, generation: Generation) {
        self.highest_seen = self.highest_seen.max(generation);
    }

    /// How long a contender waits out `record`: the TTL it states, or the
    /// assumed TTL when it states none.
    fn wait_for(&self, record: &LeaseRecord) -> Duration {
        record.ttl().unwrap_or(self.timing.assumed_ttl)
    }

    /// Decides what to do about what a read showed. `arrived` is when the
    /// response arrived on this elector's monotonic clock; `wall` is its wall
    /// clock, which only the reference policy looks at.
    pub fn decide(&mut self, observation: Observation<'_>, arrived: Instant, wall: SystemTime) -> Decision {
        match self.policy {
            // The safe policy never looks at the wall clock.
            Policy::Safe => self.decide_safe(observation, arrived, wall),
            #[cfg(any(test, feature = "testing"))]
            Policy::WallClockExpiry => self.decide_wall_clock(observation, wall),
        }
    }

    /// `wall` is only read by a planted bug.
    #[cfg_attr(not(feature = "planted"), allow(unused_variables))]
    fn decide_safe(&mut self, observation: Observation<'_>, arrived: Instant, wall: SystemTime) -> Decision {
        // The live record seen before this one, if another writer wrote it.
        let mut replaced_ttl = None;
        if let Observation::Record(stored) = &observation {
            let record = &stored.record;
            self.saw(record.generation);
            self.last_ttl = Some(self.wait_for(record));
            replaced_ttl = self
                .last_live
                .as_ref()
                .filter(|(incarnation, _)| {
                    !same_writer(incarnation, &record.incarnation) && !same_writer(incarnation, &self.incarnation)
                })
                .map(|(_, ttl)| *ttl);
            self.last_live = (!record.released).then(|| (record.incarnation.clone(), self.wait_for(record)));
        }
        // Nothing may be written once the highest generation seen has no
        // successor: a saturated token would be shared by two terms.
        let Some(next) = self.highest_seen.next() else {
            self.watch = None;
            return Decision::Exhausted { generation: self.highest_seen };
        };
        match observation {
            Observation::Corrupt => Decision::Wait { until: None },
            // The seed's habit: a missing key starts over at generation 1.
            Observation::Missing if planted::active(Bug::ReleaseDeletes) => {
                self.watch = None;
                Decision::Take { expected: None, generation: Generation(1), involuntary: false }
            }
            Observation::Missing => {
                // A process that has never seen a record for the key has no
                // term to respect and may create it at once.
                let Some(last_ttl) = self.last_ttl else {
                    return Decision::Take { expected: None, generation: next, involuntary: false };
                };
                // After a record was seen, "missing" is a new version: the
                // last holder may have renewed after our last read and be
                // inside its term still, so its TTL is waited out from the
                // arrival of this answer, like any other version's.
                let already_timing_missing = self.watch.as_ref().is_some_and(|watch| watch.version.is_none());
                if !already_timing_missing {
                    let ttl = last_ttl.max(self.timing.ttl);
                    self.watch = Some(Watch { version: None, since: arrived, ttl });
                    // Kept even if a record appears again before it passes.
                    self.hold_back_until(arrived + ttl);
                }
                self.due(arrived).unwrap_or(Decision::Wait { until: Some(self.watch_deadline()) })
            }
            Observation::Record(stored) => {
                let record = &stored.record;
                if record.released {
                    return self.decide_released(stored, replaced_ttl, next, arrived);
                }
                if record.incarnation == self.incarnation {
                    // Our own earlier term, which this process has already
                    // stopped acting on: nobody else can hold it, so it can be
                    // replaced at once, as an involuntary loss.
                    self.watch = None;
                    return Decision::Take {
                        expected: Some(stored.version.clone()),
                        generation: next,
                        involuntary: true,
                    };
                }
                if planted::trusts_expires_at(record, wall) {
                    return Decision::Take {
                        expected: Some(stored.version.clone()),
                        generation: next,
                        involuntary: true,
                    };
                }
                if !self.watching(&stored.version) {
                    // A record that replaced another writer's live one may
                    // not have waited that writer's term out (someone else
                    // overwrote the key, or the writer's TTL is shorter):
                    // that holder may still be inside its term, so its TTL
                    // is waited out too, as for a key found missing.
                    if let Some(replaced_ttl) = replaced_ttl {
                        self.hold_back_until(arrived + replaced_ttl);
                    }
                    let ttl = self.wait_for(record);
                    self.watch = Some(Watch { version: Some(stored.version.clone()), since: arrived, ttl });
                }
                self.due(arrived).unwrap_or(Decision::Wait { until: Some(self.watch_deadline()) })
            }
        }
    }

    /// A released record proves that its *writer* stopped, nothing more
    /// (I4a). It is taken at once when it replaced the releasing
    /// incarnation's own record, or when no live record was seen before it.
    /// A release written over someone else's live record (an operator's
    /// reset, a foreign writer) leaves that holder's TTL to wait out, and
    /// no release ends a hold-back already running for a holder displaced
    /// earlier.
    fn decide_released(
        &mut self,
        stored: &Stored,
        replaced_ttl: Option<Duration>,
        next: Generation,
        arrived: Instant,
    ) -> Decision {
        let take_now = Decision::Take { expected: Some(stored.version.clone()), generation: next, involuntary: false };
        if planted::active(Bug::ForeignReleaseEndsWait) {
            self.watch = None;
            return take_now;
        }
        if let Some(replaced_ttl) = replaced_ttl {
            self.hold_back_until(arrived + replaced_ttl);
        }
        let held_back = self.not_before.is_some_and(|before| arrived < before);
        let watched = self.watching(&stored.version);
        if !held_back && !watched {
            self.watch = None;
            return take_now;
        }
        // Watched with no wait of its own, so the takeover is due the
        // moment the hold-back ends, conditional on this version still.
        // It counts as involuntary: a holder that did not release may
        // still have requests in flight, which the lock-delay drains.
        if !watched {
            self.watch = Some(Watch { version: Some(stored.version.clone()), since: arrived, ttl: Duration::ZERO });
        }
        self.due(arrived).unwrap_or(Decision::Wait { until: Some(self.watch_deadline()) })
    }

    #[cfg(any(test, feature = "testing"))]
    fn decide_wall_clock(&mut self, observation: Observation<'_>, wall: SystemTime) -> Decision {
        match observation {
            Observation::Corrupt => Decision::Wait { until: None },
            // The seed starts every new record at generation 1.
            Observation::Missing => Decision::Take { expected: None, generation: Generation(1), involuntary: false },
            Observation::Record(stored) => {
                let record = &stored.record;
                self.saw(record.generation);
                let expected = Some(stored.version.clone());
                if record.owner == self.owner {
                    // The seed treats its own owner name as its own lease and
                    // renews it at the same generation.
                    return Decision::Take { expected, generation: record.generation, involuntary: false };
                }
                let expired = record.released || record.expires_at_time().is_none_or(|expires| expires <= wall);
                match record.generation.next() {
                    Some(generation) if expired => Decision::Take { expected, generation, involuntary: false },
                    Some(_) => Decision::Wait { until: None },
                    None => Decision::Exhausted { generation: record.generation },
                }
            }
        }
    }

    /// Whether `version` is the one being timed.
    fn watching(&self, version: &Version) -> bool {
        self.watch.as_ref().is_some_and(|watch| watch.version.as_ref() == Some(version))
    }

    fn watch_deadline(&self) -> Instant {
        let watched = self.watch.as_ref().map_or(Instant::ZERO, |watch| watch.since + watch.ttl);
        watched.max(self.not_before.unwrap_or(Instant::ZERO))
    }

    fn hold_back_until(&mut self, until: Instant) {
        self.not_before = Some(self.not_before.map_or(until, |before| before.max(until)));
    }

    /// The takeover that is due at `now` without another read, if any: the
    /// watched version has been unchanged for its TTL.
    pub fn due(&self, now: Instant) -> Option<Decision> {
        let watch = self.watch.as_ref()?;
        let generation =
            if planted::active(Bug::ReusedGeneration) { self.highest_seen } else { self.highest_seen.next()? };
        if self.not_before.is_some_and(|before| now < before) {
            return None;
        }
        (now >= watch.since + watch.ttl).then(|| Decision::Take {
            expected: watch.version.clone(),
            generation,
            involuntary: true,
        })
    }

    /// Forgets the version being timed, after a failed takeover showed the
    /// key changed.
    pub fn forget_watch(&mut self) {
        self.watch = None;
    }

    /// When a holder that sent its last successful write at `sent_at` must
    /// have stopped.
    pub fn lease_end(&self, sent_at: Instant) -> Instant {
        match self.policy {
            Policy::Safe => sent_at + self.timing.hold_for(),
            #[cfg(any(test, feature = "testing"))]
            Policy::WallClockExpiry => sent_at + self.timing.ttl,
        }
    }

    /// Whether a graceful release deletes the record instead of writing a
    /// `released` one.
    pub fn release_deletes(&self) -> bool {
        match self.policy {
            Policy::Safe => planted::active(Bug::ReleaseDeletes),
            #[cfg(any(test, feature = "testing"))]
            Policy::WallClockExpiry => true,
        }
    }

    /// The renew interval written into records, in whole milliseconds
    /// rounded down (followers then read a little early, never late), at
    /// least 1. The reference policy writes none, as the Go hoplock does, so
    /// its followers poll.
    fn advertised_renew_ms(&self) -> Option<u64> {
        match self.policy {
            Policy::Safe => Some(u64::try_from(self.timing.renew_interval.as_millis()).unwrap_or(u64::MAX).max(1)),
            #[cfg(any(test, feature = "testing"))]
            Policy::WallClockExpiry => None,
        }
    }

    /// The record for a new term or a renewal at `generation`.
    ///
    /// Building it changes nothing: the write may never land. The shell
    /// reports the ones the store confirmed through [`Core::wrote`].
    pub fn record(&self, generation: Generation, wall: SystemTime, nonce: String, released: bool) -> LeaseRecord {
        LeaseRecord {
            generation,
            expires_at: rfc3339::format(wall.checked_add(self.timing.ttl).unwrap_or(wall)),
            owner: self.owner.clone(),
            nonce,
            ttl_ms: Some(advertised_ttl_ms(self.timing.ttl)),
            renew_ms: self.advertised_renew_ms(),
            incarnation: self.incarnation.clone(),
            released,
        }
    }
}

/// The TTL written into records, in whole milliseconds rounded **up**: a
/// contender waits what the record says, and rounding down would let it wait
/// less than the holder's term lasts. The builder caps the TTL at
/// [`crate::lease::MAX_TTL`], so the value always fits.
pub(crate) fn advertised_ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
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
        let core = Core::new(
            Timing { ttl: Duration::from_micros(29_999_500), ..timing() },
            Policy::Safe,
            "me".into(),
            "i".into(),
        );
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
}
