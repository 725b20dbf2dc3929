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
    /// A create was refused since the last record read or written: the key
    /// exists, whatever reads say.
    create_refused: bool,
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
            create_refused: false,
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
        self.create_refused = false;
    }

    /// Notes that a create (a write on a key believed missing) was refused
    /// because the key exists, although no record has been read: a read
    /// that finds the key missing again is stale, or the key went since.
    /// Such a read is met with another create only a poll interval later
    /// (see `decide`), never at once; without the pause, a provider whose
    /// reads lag its writes has a contender create, be refused and read
    /// "missing" as fast as the round trips allow.
    pub fn create_refused(&mut self) {
        self.create_refused = true;
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
            self.create_refused = false;
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
                // term to respect and may create it at once, unless a create
                // of its own was just refused: then the key exists, this read
                // is stale, and the next create waits a poll interval (with
                // the lock-delay of a takeover, the holder being unknown).
                let Some(last_ttl) = self.last_ttl else {
                    if !self.create_refused {
                        return Decision::Take { expected: None, generation: next, involuntary: false };
                    }
                    if self.watch.is_none() {
                        let ttl = self.timing.poll_interval;
                        self.watch = Some(Watch { version: None, since: arrived, ttl });
                    }
                    return self.due(arrived).unwrap_or(Decision::Wait { until: Some(self.watch_deadline()) });
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
mod tests;
