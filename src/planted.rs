//! Deliberate bugs, one per safety rule, for showing that the simulator's
//! scenarios catch what they exist to catch.
//!
//! Each [`Bug`] breaks exactly one rule of ARCHITECTURE.md's tables (I1 to
//! I10 with I4a and I9a, and the liveness rule L1 in the elector; K1, K2, K7 and K8 in keyed
//! writers; D1, one seed one trace, in the simulator), the way real
//! libraries have broken it. A bug is
//! active only when the crate is built with the `planted` feature *and* the
//! bug has been chosen at run time with [`plant`]. Without the feature this
//! module is private, [`active`] is a constant `false`, and the compiler
//! removes every planted branch: release builds never enable it.
//!
//! ```
//! # #[cfg(feature = "planted")] {
//! use hoplock::planted::{self, Bug};
//!
//! let bug: Bug = "skip-lock-delay".parse().unwrap();
//! assert_eq!(bug.rule(), "I5");
//! planted::plant(Some(bug));
//! assert_eq!(planted::planted(), Some(bug));
//! planted::plant(None);
//! # }
//! ```

use std::fmt;
use std::str::FromStr;

/// One deliberate bug, named after what it does wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(not(feature = "planted"), allow(dead_code))]
pub enum Bug {
    /// I1: an involuntary takeover writes the highest generation seen
    /// instead of the next one, so two holders share a fencing token.
    ReusedGeneration,
    /// I2: release deletes the record, and a missing key starts over at
    /// generation 1 (the Go hoplock's and Litestream's behaviour).
    ReleaseDeletes,
    /// I3: a renewal that fails or times out extends the term as if it had
    /// succeeded, so a leader cut off from the store keeps leading.
    LeadWhileUnreachable,
    /// I4: a contender takes over once the record's `expires_at` has passed
    /// on its own wall clock.
    TrustExpiresAt,
    /// I4a: a released record is taken at once whoever wrote it, so an
    /// operator's reset over a record that had replaced a live holder's
    /// cuts that holder's wait short.
    ForeignReleaseEndsWait,
    /// I5: the lock-delay is skipped after an involuntary takeover.
    SkipLockDelay,
    /// I6: a stop request releases the lease at once, while the leader-only
    /// work is still running.
    ReleaseBeforeWorkStops,
    /// I7: a takeover write with an unknown outcome counts as won whenever
    /// the read-back shows any record, without comparing the nonce.
    ActOnUnknownOutcome,
    /// I8: renewals write the same bytes again (same nonce, same
    /// `expires_at`), so the ETag never changes and contenders see a dead
    /// lease.
    ReuseRecordBytes,
    /// I9: the holder times its term on the wall clock, so an NTP step
    /// backwards extends it.
    WallClockDeadline,
    /// I9a: a safety deadline is one long sleep, which fires late by as
    /// long as the host was suspended, so a holder whose term ended while
    /// its host slept goes on leading after it wakes.
    TimerStopsInSuspend,
    /// I10: the incarnation id is derived from the owner name, so a second
    /// process under the same name treats the first one's lease as its own.
    FixedIncarnation,
    /// L1: a follower reads one renew interval after the read that first
    /// showed each version, never earlier, so it never finds out how late
    /// after the renewals its reads come, and sees a crashed holder's last
    /// record up to a renew interval late.
    LaggingReads,
    /// K1: a keyed member writes its adoption of a new view before the
    /// work on keys that moved away has stopped.
    AdoptBeforeStop,
    /// K1: a keyed member starts a key HRW gives it before every member
    /// has adopted the join that moved it.
    StartBeforeActive,
    /// K2: a key's round comes from a local counter instead of the view in
    /// which the member started it.
    RoundFromCounter,
    /// K2: the member incarnation is derived from the member id, so a
    /// restarted process takes over its predecessor's entry instead of
    /// waiting for it to go.
    ReuseEntry,
    /// K7: a keyed member starts the keys of an evicted member as soon as
    /// it owns them, without waiting its lock-delay, while the evicted
    /// member's unfenced writes may still be in flight.
    SkipKeyedLockDelay,
    /// K2: a process that has seen no view creates a missing membership
    /// object at view 1, whatever it was configured with, so a group whose
    /// object was deleted starts its views, and its keys' rounds, again.
    CreateWithoutFloor,
    /// K1: a read of an older view replaces the newest one read, so a key
    /// that moved away runs again under the older view.
    ResumeOlderView,
    /// K8: the handle hands out a lease on every key the member owns in
    /// the newest view it read, whether or not it runs it yet: during a
    /// lock-delay, or before the view is active, a downstream is given a
    /// round nobody acts under.
    LeaseFromOwnership,
    /// D1: every key task of a member waits on one shared term channel. A
    /// watch wakes many waiters in an order drawn from tokio's own random
    /// numbers, which no seed reaches, so a leave winds keys down in a
    /// different order from run to run and one seed gives two traces.
    SharedTermWatch,
    /// K4: the keyed member's watchdog never wakes the keys at the term's
    /// end, so a key stops only when the member's loop gets to it, which
    /// may be a request's timeout later.
    WatchdogAsleep,
}

#[cfg_attr(not(feature = "planted"), allow(dead_code))]
impl Bug {
    /// Every bug, in rule order.
    pub const ALL: [Bug; 23] = [
        Bug::ReusedGeneration,
        Bug::ReleaseDeletes,
        Bug::LeadWhileUnreachable,
        Bug::TrustExpiresAt,
        Bug::ForeignReleaseEndsWait,
        Bug::SkipLockDelay,
        Bug::ReleaseBeforeWorkStops,
        Bug::ActOnUnknownOutcome,
        Bug::ReuseRecordBytes,
        Bug::WallClockDeadline,
        Bug::TimerStopsInSuspend,
        Bug::FixedIncarnation,
        Bug::LaggingReads,
        Bug::AdoptBeforeStop,
        Bug::StartBeforeActive,
        Bug::RoundFromCounter,
        Bug::ReuseEntry,
        Bug::CreateWithoutFloor,
        Bug::ResumeOlderView,
        Bug::WatchdogAsleep,
        Bug::SkipKeyedLockDelay,
        Bug::LeaseFromOwnership,
        Bug::SharedTermWatch,
    ];

    /// The kebab-case name `--planted` takes.
    pub const fn name(self) -> &'static str {
        match self {
            Bug::ReusedGeneration => "reused-generation",
            Bug::ReleaseDeletes => "release-deletes",
            Bug::LeadWhileUnreachable => "lead-while-unreachable",
            Bug::TrustExpiresAt => "trust-expires-at",
            Bug::ForeignReleaseEndsWait => "foreign-release-ends-wait",
            Bug::SkipLockDelay => "skip-lock-delay",
            Bug::ReleaseBeforeWorkStops => "release-before-work-stops",
            Bug::ActOnUnknownOutcome => "act-on-unknown-outcome",
            Bug::ReuseRecordBytes => "reuse-record-bytes",
            Bug::WallClockDeadline => "wall-clock-deadline",
            Bug::TimerStopsInSuspend => "timer-stops-in-suspend",
            Bug::FixedIncarnation => "fixed-incarnation",
            Bug::LaggingReads => "lagging-reads",
            Bug::AdoptBeforeStop => "adopt-before-stop",
            Bug::StartBeforeActive => "start-before-active",
            Bug::RoundFromCounter => "round-from-counter",
            Bug::ReuseEntry => "reuse-entry",
            Bug::CreateWithoutFloor => "create-without-floor",
            Bug::SkipKeyedLockDelay => "skip-keyed-lock-delay",
            Bug::ResumeOlderView => "resume-older-view",
            Bug::LeaseFromOwnership => "lease-from-ownership",
            Bug::SharedTermWatch => "shared-term-watch",
            Bug::WatchdogAsleep => "watchdog-asleep",
        }
    }

    /// The safety rule the bug breaks.
    pub const fn rule(self) -> &'static str {
        match self {
            Bug::ReusedGeneration => "I1",
            Bug::ReleaseDeletes => "I2",
            Bug::LeadWhileUnreachable => "I3",
            Bug::TrustExpiresAt => "I4",
            Bug::ForeignReleaseEndsWait => "I4a",
            Bug::SkipLockDelay => "I5",
            Bug::ReleaseBeforeWorkStops => "I6",
            Bug::ActOnUnknownOutcome => "I7",
            Bug::ReuseRecordBytes => "I8",
            Bug::WallClockDeadline => "I9",
            Bug::TimerStopsInSuspend => "I9a",
            Bug::FixedIncarnation => "I10",
            Bug::LaggingReads => "L1",
            Bug::AdoptBeforeStop | Bug::StartBeforeActive | Bug::ResumeOlderView => "K1",
            Bug::RoundFromCounter | Bug::ReuseEntry | Bug::CreateWithoutFloor => "K2",
            Bug::SkipKeyedLockDelay => "K7",
            Bug::LeaseFromOwnership => "K8",
            Bug::SharedTermWatch => "D1",
            Bug::WatchdogAsleep => "K4",
        }
    }
}

impl fmt::Display for Bug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not one of [`Bug::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown planted bug {given:?}; known: {}", Bug::ALL.map(Bug::name).join(", "))]
pub struct UnknownBug {
    /// The name given.
    pub given: String,
}

impl FromStr for Bug {
    type Err = UnknownBug;

    fn from_str(name: &str) -> Result<Bug, UnknownBug> {
        Bug::ALL.into_iter().find(|bug| bug.name() == name).ok_or_else(|| UnknownBug { given: name.into() })
    }
}

#[cfg(feature = "planted")]
static ACTIVE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Activates `bug` for every elector in the process (`None`: none).
#[cfg(feature = "planted")]
pub fn plant(bug: Option<Bug>) {
    let code = bug.map_or(0, |bug| Bug::ALL.iter().position(|b| *b == bug).map_or(0, |i| i as u8 + 1));
    ACTIVE.store(code, std::sync::atomic::Ordering::SeqCst);
}

/// The bug now active, if any.
#[cfg(feature = "planted")]
pub fn planted() -> Option<Bug> {
    let code = ACTIVE.load(std::sync::atomic::Ordering::SeqCst);
    code.checked_sub(1).and_then(|i| Bug::ALL.get(usize::from(i)).copied())
}

/// Whether `bug` is active. Always `false` without the `planted` feature.
#[inline(always)]
#[cfg_attr(not(feature = "planted"), allow(unused_variables))]
pub(crate) fn active(bug: Bug) -> bool {
    #[cfg(feature = "planted")]
    {
        planted() == Some(bug)
    }
    #[cfg(not(feature = "planted"))]
    {
        false
    }
}

/// [`Bug::TrustExpiresAt`]: whether the record's `expires_at` has passed on
/// this process's wall clock. Kept here, outside the elector's files, so
/// that mutation testing (built without this feature) does not count code
/// it cannot run.
#[cfg_attr(not(feature = "planted"), allow(unused_variables))]
pub(crate) fn trusts_expires_at(record: &crate::lease::LeaseRecord, wall: std::time::SystemTime) -> bool {
    active(Bug::TrustExpiresAt) && record.expires_at_time().is_none_or(|at| at <= wall)
}

/// [`Bug::RoundFromCounter`]: a round counted from the keys a member runs
/// rather than taken from the view, kept here for the same reason.
pub(crate) fn round_from_counter(running: usize) -> crate::lease::Generation {
    crate::lease::Generation(running as u64 + 1)
}

/// [`Bug::WallClockDeadline`]: the term's end computed from the wall clock,
/// as the time the hold lasts minus the wall time since the last renewal
/// was sent.
#[cfg(feature = "planted")]
pub(crate) fn wall_clock_deadline(
    now: crate::clock::Instant,
    wall_now: std::time::SystemTime,
    wall_sent: std::time::SystemTime,
    hold_for: std::time::Duration,
) -> crate::clock::Instant {
    let elapsed = wall_now.duration_since(wall_sent).unwrap_or_default();
    now + hold_for.saturating_sub(elapsed)
}
