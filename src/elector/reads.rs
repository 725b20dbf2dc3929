//! When a follower reads the lease key next, free of I/O.
//!
//! A follower reads for one reason: to see a new version of the record soon
//! after it lands, because a takeover waits out the TTL counted from the
//! first arrival of a version (I4). The holder renews every renew interval R,
//! counted from the send of its last successful write, and says so in the
//! record, so new versions land about R apart. Reading every TTL/15 sees each
//! one within a poll; reading once just after each renewal lands sees it
//! almost as soon, for a fifth of the requests.
//!
//! The schedule only moves reads. Safety never depends on it: a takeover is
//! still a conditional write on a version watched for its full TTL, and a
//! read that comes late only makes the watch start later.
//!
//! # How reads find the renewals
//!
//! The follower aims each read slightly *before* one R after the send of the
//! read that first showed the current version, so its reads creep earlier
//! until one lands before a renewal and finds the old version (a miss). It
//! then reads again one step later (R/10), and the read that finds the new
//! version is at most a step after the renewal landed: the follower is
//! *locked* onto the renewals. While locked, reads creep earlier by only
//! 2ρR (at least R/1000), enough to outrun the drift between the two clocks,
//! so a miss, and with it an extra read, comes once every few dozen renew
//! intervals. Until the first miss (after the first read, or after a renewal
//! that came later than a step after it was due) the follower searches:
//! its reads creep earlier by R/8, doubling up to R/4 on every read that
//! still finds a new version.
//!
//! A renewal later than the schedule allows for is read for again with a
//! backoff (a step, then doubling up to R/2) until a new version or the
//! takeover comes. Re-reads around a renewal come a step apart, so for a
//! moment a follower reads more often than it would poll (R/10 is TTL/30
//! with the defaults, the poll TTL/15); every read waits at least half a
//! step after the previous one's answer. A record that states no renew
//! interval (the Go tools'), a released or missing record, a holder renewing
//! at least as often as the follower polls, and [`Reads::Poll`] fall back to
//! reading every poll interval.

use std::time::Duration;

use crate::backend::Version;
use crate::clock::Instant;
use crate::planted::{self, Bug};

/// How often a follower reads the lease key.
///
/// ```
/// use std::time::Duration;
/// use hoplock::Reads;
/// use hoplock::backend::memory::MemoryBackend;
///
/// // The Go hoplock's schedule: a read every TTL/15, five times the requests
/// // of the default, for a handoff after a release within one poll.
/// let elector = hoplock::Elector::builder(MemoryBackend::new())
///     .owner("worker-1")
///     .ttl(Duration::from_secs(30))
///     .reads(Reads::Poll)
///     .build()?;
/// # Ok::<(), hoplock::ElectorError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reads {
    /// About one read per renew interval, just after each renewal of the
    /// holder lands, as the holder's record advertises it. A crash is seen
    /// about as soon as with polling; a graceful release is seen within one
    /// renew interval and a round trip. Records that advertise no renew
    /// interval are polled.
    #[default]
    FollowRenewals,
    /// A read every poll interval (TTL/15 unless set), as the Go hoplock
    /// does: a release is seen within one poll, at about five times the
    /// requests.
    Poll,
}

/// What a read showed, as far as the schedule is concerned.
#[derive(Debug)]
pub(crate) enum Seen<'a> {
    /// A live record from a holder that advertises how often it renews.
    Renewing { version: &'a Version, renew_interval: Duration },
    /// Anything else: a released, missing, corrupt or unadvertised record,
    /// or a failed read. Polled.
    Other,
}

/// The follower's read schedule.
#[derive(Debug)]
pub(crate) struct ReadSchedule {
    reads: Reads,
    poll_interval: Duration,
    drift_bound_ppb: u32,
    /// The version the last read showed, if the schedule follows it.
    version: Option<Version>,
    /// How much earlier than one renew interval after the send of the read
    /// that first showed `version` the next read goes.
    lead: Duration,
    /// Whether a read just before a renewal missed it and the next found
    /// it, so the read that first showed `version` was sent within one step
    /// of the renewal landing.
    locked: bool,
    /// Reads since `version` was first seen that still showed it.
    misses: u32,
    /// When to read next.
    next: Instant,
}

impl ReadSchedule {
    pub fn new(reads: Reads, poll_interval: Duration, drift_bound_ppb: u32) -> ReadSchedule {
        ReadSchedule {
            reads,
            poll_interval,
            drift_bound_ppb,
            version: None,
            lead: Duration::ZERO,
            locked: false,
            misses: 0,
            next: Instant::ZERO,
        }
    }

    /// When the next read is due, as decided after the last one.
    pub fn next(&self) -> Instant {
        self.next
    }

    /// Whether the schedule is locked onto the holder's renewals.
    #[cfg(test)]
    fn is_locked(&self) -> bool {
        self.locked
    }

    /// Notes what a read sent at `sent_at` and answered at `arrived` showed,
    /// and schedules the next one.
    pub fn after_read(&mut self, seen: Seen<'_>, sent_at: Instant, arrived: Instant) -> Instant {
        let poll = arrived + self.poll_interval;
        self.next = match (self.reads, seen) {
            // A holder that renews no less often than a poll gains nothing
            // from being followed: it is polled.
            (Reads::FollowRenewals, Seen::Renewing { version, renew_interval })
                if renew_interval > self.poll_interval =>
            {
                // However slow the read was, the next waits at least half a
                // step after its answer: a slow store never gets reads back
                // to back.
                self.follow(version, renew_interval, sent_at).max(arrived + renew_interval / 20)
            }
            _ => {
                self.version = None;
                poll
            }
        };
        self.next
    }

    fn follow(&mut self, version: &Version, renew: Duration, sent_at: Instant) -> Instant {
        let step = renew / 10;
        let creep = Duration::from_nanos(
            u64::try_from(renew.as_nanos() * 2 * u128::from(self.drift_bound_ppb) / 1_000_000_000).unwrap_or(u64::MAX),
        )
        .max(renew / 1000)
        .min(step / 2);
        let search = renew / 8;
        let window = self.window(step);
        if self.version.as_ref() == Some(version) {
            // A miss: the renewal has not landed yet.
            self.misses = self.misses.saturating_add(1);
            return match self.misses.checked_sub(window) {
                // Still within the window the lead allows for.
                None | Some(0) => sent_at + step,
                Some(late) => sent_at + step.saturating_mul(1 << late.min(4)).min(renew / 2),
            };
        }
        // A new version.
        let misses = self.misses;
        if self.version.is_none() || misses > window {
            // No phase known, or the renewal came later than one step after
            // it was due (retries, a new holder): search again.
            self.locked = false;
            self.lead = search;
        } else if misses > 0 {
            // The read before this one was just early: this read is within
            // one step of the renewal.
            self.locked = true;
            self.lead = creep;
        } else if !self.locked {
            self.lead = (self.lead * 2).min(renew / 4);
        }
        if planted::active(Bug::LaggingReads) {
            self.lead = Duration::ZERO;
        }
        self.version = Some(version.clone());
        self.misses = 0;
        sent_at + renew.saturating_sub(self.lead)
    }

    /// How many misses in a row are still the renewal being just ahead of a
    /// read aimed `lead` early: re-reads one `step` apart cover the lead,
    /// and one step more for jitter.
    fn window(&self, step: Duration) -> u32 {
        if step.is_zero() {
            return 1;
        }
        u32::try_from(self.lead.as_nanos() / step.as_nanos()).unwrap_or(u32::MAX).saturating_add(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const RENEW: Duration = Duration::from_millis(2000);
    const POLL: Duration = Duration::from_millis(400);

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * MS)
    }

    fn ms(instant: Instant) -> u64 {
        instant.saturating_duration_since(Instant::ZERO).as_nanos() as u64 / MS
    }

    /// A holder whose writes land every `RENEW` from `phase_ms`, and a
    /// follower that reads whenever its schedule says, with `rtt_ms` per
    /// read. Returns the reads made and the worst lag between a renewal
    /// landing and the follower's read that showed it, over renewals after
    /// `settle_ms`.
    fn follow(phase_ms: u64, rtt_ms: u64, until_ms: u64, settle_ms: u64) -> (u64, u64, u64) {
        let mut schedule = ReadSchedule::new(Reads::FollowRenewals, POLL, 1_000_000);
        let version_at = |ms: u64| if ms < phase_ms { 0 } else { (ms - phase_ms) / 2000 + 1 };
        let mut now = 0;
        let (mut reads, mut settled_reads, mut worst_lag) = (0, 0, 0);
        let mut last_version = u64::MAX;
        while now < until_ms {
            // The store answers at the middle of the round trip.
            let served = now + rtt_ms / 2;
            let seen = version_at(served);
            let version = Version::new(seen.to_string());
            let next = schedule.after_read(
                Seen::Renewing { version: &version, renew_interval: RENEW },
                at(now),
                at(now + rtt_ms),
            );
            reads += 1;
            if now >= settle_ms {
                settled_reads += 1;
                if seen != last_version && seen > 0 {
                    let landed = phase_ms + (seen - 1) * 2000;
                    worst_lag = worst_lag.max(now + rtt_ms - landed);
                }
            }
            last_version = seen;
            assert!(ms(next) > now, "the schedule must move forward: {now} -> {}", ms(next));
            now = ms(next);
        }
        (reads, settled_reads, worst_lag)
    }

    #[test]
    fn locks_onto_renewals_and_reads_about_once_per_renew_interval() {
        for phase in [0, 1, 300, 999, 1500, 1999] {
            let (_, settled, lag) = follow(phase, 30, 3_600_000, 60_000);
            let renewals = (3_600_000 - 60_000) / 2000;
            // About one read per renewal: at most 10 % more.
            assert!(settled <= renewals * 110 / 100, "phase {phase}: {settled} reads for {renewals} renewals");
            assert!(settled >= renewals, "phase {phase}: {settled} reads cannot see {renewals} renewals");
            // Every renewal is seen within a step and a round trip.
            assert!(lag <= 200 + 30 + 10, "phase {phase}: a renewal was seen {lag} ms after it landed");
        }
    }

    #[test]
    fn a_late_renewal_is_read_for_with_backoff_and_the_schedule_searches_again() {
        let mut schedule = ReadSchedule::new(Reads::FollowRenewals, POLL, 1_000_000);
        let (one, two) = (Version::new("1"), Version::new("2"));
        let seen = |version| Seen::Renewing { version, renew_interval: RENEW };
        assert_eq!(schedule.after_read(seen(&one), at(0), at(10)), at(1750));
        // The renewal is late: re-reads one step apart while it may still be
        // just ahead, then backing off up to half a renew interval.
        let mut gaps = Vec::new();
        let mut now = 1750;
        for _ in 0..8 {
            let next = ms(schedule.after_read(seen(&one), at(now), at(now + 10)));
            gaps.push(next - now);
            now = next;
        }
        assert_eq!(gaps, [200, 200, 400, 800, 1000, 1000, 1000, 1000]);
        // The renewal that finally comes resets the search.
        schedule.after_read(seen(&two), at(now), at(now + 10));
        assert!(!schedule.is_locked());
    }

    #[test]
    fn polls_when_the_record_does_not_say_how_often_it_is_renewed() {
        let mut schedule = ReadSchedule::new(Reads::FollowRenewals, POLL, 1_000_000);
        assert_eq!(schedule.after_read(Seen::Other, at(0), at(10)), at(410));
        let mut polling = ReadSchedule::new(Reads::Poll, POLL, 1_000_000);
        let version = Version::new("1");
        let seen = Seen::Renewing { version: &version, renew_interval: RENEW };
        assert_eq!(polling.after_read(seen, at(0), at(10)), at(410));
    }

    #[test]
    fn polls_a_holder_that_renews_at_least_as_often_as_a_poll() {
        for renew_ms in [1, 100, 400] {
            let mut schedule = ReadSchedule::new(Reads::FollowRenewals, POLL, 1_000_000);
            let mut now = 0;
            for n in 0..50 {
                let version = Version::new(n.to_string());
                let seen = Seen::Renewing { version: &version, renew_interval: Duration::from_millis(renew_ms) };
                let next = ms(schedule.after_read(seen, at(now), at(now + 1)));
                assert_eq!(next - now, 401, "read {n} of a holder renewing every {renew_ms} ms");
                now = next;
            }
        }
    }
}
