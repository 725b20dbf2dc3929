//! [`TermTiming`]: the timing every term holder obeys, the elector and keyed
//! members alike, with its defaults and its validation in one place.
//!
//! A holder renews every renew interval, gives each request a timeout, and
//! stops acting a stop margin before TTL·(1−ρ)/(1+ρ) has passed since it
//! sent its last successful write (ρ the drift bound). The builders embed a
//! [`TermTiming`], and the simulator reads its defaults from here too, so a
//! changed default moves the library, the simulated nodes and the checkers'
//! bounds together, and no default is written twice.

use std::time::Duration;

use crate::lease::MAX_TTL;

/// The TTL a builder starts from.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// The shortest TTL a holder accepts: below it, timer resolution and a
/// request's round trip would eat the whole term.
pub const MIN_TTL: Duration = Duration::from_millis(10);

/// The drift bound ρ a builder starts from: a clock may gain or lose a
/// millisecond per second against real time.
pub const DEFAULT_DRIFT_BOUND: f64 = 1e-3;

/// The least time a record without a TTL is waited out: the Go hoplock's
/// records state none, and its deployments commonly run TTLs up to a minute.
/// Electors wait such a record out for the larger of this and their own TTL
/// unless told otherwise (`ElectorBuilder::assumed_ttl`); `hoplock lease
/// reset` counts one as held for as long.
pub const DEFAULT_ASSUMED_TTL: Duration = Duration::from_secs(60);

/// The default renew interval, TTL/3: two renewals may fail before the term
/// is at risk.
pub fn default_renew_interval(ttl: Duration) -> Duration {
    ttl / 3
}

/// The default per-request timeout, TTL/6: a renewal that gets no answer is
/// given up on while half a renew interval is left to try again.
pub fn default_request_timeout(ttl: Duration) -> Duration {
    ttl / 6
}

/// The default stop margin, TTL/10: the holder stops acting that long before
/// its term's end, which absorbs timer lateness and scheduling.
pub fn default_stop_margin(ttl: Duration) -> Duration {
    ttl / 10
}

/// The elector's default poll interval, TTL/15 (the Go hoplock's schedule):
/// how often a contender reads under `Reads::Poll`, and when a record does
/// not say how often its holder renews.
pub fn default_poll_interval(ttl: Duration) -> Duration {
    ttl / 15
}

/// A keyed member's default leave timeout, TTL/3: how long a graceful leave
/// tries to remove the member's entry before it leaves eviction to finish.
pub fn default_leave_timeout(ttl: Duration) -> Duration {
    ttl / 3
}

/// The elector's default assumed TTL for records that state none: the larger
/// of its own TTL and [`DEFAULT_ASSUMED_TTL`].
pub fn default_assumed_ttl(ttl: Duration) -> Duration {
    ttl.max(DEFAULT_ASSUMED_TTL)
}

/// `d·(1−ρ)/(1+ρ)` with ρ in parts per billion, in integer arithmetic so the
/// result is the same on every platform.
pub fn drift_shrunk(d: Duration, rho_ppb: u32) -> Duration {
    let ppb = 1_000_000_000u128;
    let rho = u128::from(rho_ppb);
    let nanos = d.as_nanos() * (ppb - rho.min(ppb)) / (ppb + rho);
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// How long a holder may act after sending its last successful write:
/// TTL·(1−ρ)/(1+ρ) minus the stop margin, on its own monotonic clock
/// (rule I3).
///
/// Why the ratio: a contender waits TTL on a clock that may run fast by ρ,
/// so it may act after only TTL/(1+ρ) real seconds counted from a moment no
/// earlier than the holder's send. A holder whose clock runs slow by ρ sees
/// `d` local seconds pass in up to `d/(1−ρ)` real ones. Stopping after
/// TTL·(1−ρ)/(1+ρ) local seconds therefore stops within TTL/(1+ρ) real
/// seconds, before any contender can act.
pub fn hold_for(ttl: Duration, drift_bound_ppb: u32, stop_margin: Duration) -> Duration {
    drift_shrunk(ttl, drift_bound_ppb).saturating_sub(stop_margin)
}

/// The setters of the settings every term holder shares, written once for
/// every builder that keeps a [`TermTiming`] in a field named `term`.
macro_rules! term_timing_setters {
    () => {
        /// The term's time to live (default 30 s): how long the holder's
        /// record lives without a renewal. Others wait this long on their
        /// own clocks before taking over from a holder that stopped
        /// renewing.
        pub fn ttl(mut self, ttl: std::time::Duration) -> Self {
            self.term.ttl = ttl;
            self
        }

        /// How often the holder renews (default TTL/3).
        pub fn renew_interval(mut self, interval: std::time::Duration) -> Self {
            self.term.renew_interval = Some(interval);
            self
        }

        /// How long one request may take before its outcome counts as
        /// unknown (default TTL/6).
        pub fn request_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.term.request_timeout = Some(timeout);
            self
        }

        /// How long before its term's end the holder stops acting, to leave
        /// its work time to stop (default TTL/10).
        pub fn stop_margin(mut self, margin: std::time::Duration) -> Self {
            self.term.stop_margin = Some(margin);
            self
        }

        /// ρ: the most any clock's rate may differ from real time, as a
        /// fraction (default 1e-3, a millisecond per second). Offsets
        /// between clocks do not matter and need no setting.
        pub fn drift_bound(mut self, rho: f64) -> Self {
            self.term.drift_bound = rho;
            self
        }
    };
}
pub(crate) use term_timing_setters;

/// A holder's own duration as [`TermTiming::check`] checks it: its name in
/// the error message, its value, and whether it may be zero.
pub type Named<'a> = (&'a str, Duration, bool);

/// The timing settings a term holder shares with every other kind of
/// holder, as a builder collects them: the settings not given take their
/// defaults from the TTL when read.
///
/// ```
/// use std::time::Duration;
/// use hoplock::term_timing::TermTiming;
///
/// let timing = TermTiming::new(Duration::from_secs(6));
/// assert_eq!(timing.renew_interval(), Duration::from_secs(2));
/// assert_eq!(timing.request_timeout(), Duration::from_secs(1));
/// assert_eq!(timing.stop_margin(), Duration::from_millis(600));
/// assert!(timing.check(&[], &[], Duration::from_millis(1)).is_ok());
///
/// // A renew interval that leaves no room for a renewal to land is refused.
/// let tight = TermTiming { renew_interval: Some(Duration::from_secs(5)), ..timing };
/// assert!(tight.check(&[], &[], Duration::from_millis(1)).unwrap_err().contains("must be less than"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TermTiming {
    /// The term's time to live.
    pub ttl: Duration,
    /// How often the holder renews; `None` for [`default_renew_interval`].
    pub renew_interval: Option<Duration>,
    /// How long one request may take; `None` for [`default_request_timeout`].
    pub request_timeout: Option<Duration>,
    /// How long before its term's end the holder stops acting; `None` for
    /// [`default_stop_margin`].
    pub stop_margin: Option<Duration>,
    /// ρ: how far any clock's rate may differ from real time.
    pub drift_bound: f64,
    /// How long a holder that took over from another involuntarily waits
    /// before acting.
    pub lock_delay: Duration,
}

impl Default for TermTiming {
    fn default() -> Self {
        TermTiming::new(DEFAULT_TTL)
    }
}

impl TermTiming {
    /// The defaults for this TTL.
    pub fn new(ttl: Duration) -> Self {
        TermTiming {
            ttl,
            renew_interval: None,
            request_timeout: None,
            stop_margin: None,
            drift_bound: DEFAULT_DRIFT_BOUND,
            lock_delay: Duration::ZERO,
        }
    }

    /// The renew interval, given or default.
    pub fn renew_interval(&self) -> Duration {
        self.renew_interval.unwrap_or(default_renew_interval(self.ttl))
    }

    /// The request timeout, given or default.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout.unwrap_or(default_request_timeout(self.ttl))
    }

    /// The stop margin, given or default.
    pub fn stop_margin(&self) -> Duration {
        self.stop_margin.unwrap_or(default_stop_margin(self.ttl))
    }

    /// ρ in parts per billion, as the decision cores compute with it.
    pub fn drift_bound_ppb(&self) -> u32 {
        (self.drift_bound * 1e9).round() as u32
    }

    /// How long the holder may act after sending its last successful write.
    pub fn hold_for(&self) -> Duration {
        hold_for(self.ttl, self.drift_bound_ppb(), self.stop_margin())
    }

    /// Checks the settings against each other and against the clock's timer
    /// resolution. `intervals` and `timeouts` are the holder's own
    /// durations, each with its name and whether it may be zero: its
    /// intervals are checked right after the renew interval and its timeouts
    /// right after the request timeout, so that of several bad settings the
    /// one reported is the one the builders have always reported first.
    /// Every duration must be at most [`MAX_TTL`], and renew interval +
    /// request timeout + stop margin must be less than TTL·(1−ρ)/(1+ρ), or a
    /// term could run out before a renewal can land. The message says what
    /// to change.
    pub fn check(&self, intervals: &[Named], timeouts: &[Named], resolution: Duration) -> Result<(), String> {
        let ttl = self.ttl;
        if ttl < MIN_TTL || ttl > MAX_TTL {
            return Err(format!("TTL {ttl:?} is outside {MIN_TTL:?}..={MAX_TTL:?}"));
        }
        if !(self.drift_bound.is_finite() && (0.0..0.1).contains(&self.drift_bound)) {
            return Err(format!("drift bound {} must be at least 0 and below 0.1", self.drift_bound));
        }
        let (renew_interval, request_timeout, stop_margin) =
            (self.renew_interval(), self.request_timeout(), self.stop_margin());
        let renew = [("renew interval", renew_interval, false)];
        let request = [("request timeout", request_timeout, false)];
        let margins = [("stop margin", stop_margin, true), ("lock-delay", self.lock_delay, true)];
        let durations = renew.iter().chain(intervals).chain(&request).chain(timeouts).chain(&margins);
        for &(name, value, may_be_zero) in durations {
            if value.is_zero() && !may_be_zero {
                return Err(format!("the {name} must be more than zero"));
            }
            // Bounding every duration also keeps the sums below far from
            // overflowing.
            if value > MAX_TTL {
                return Err(format!("the {name} {value:?} is longer than the {MAX_TTL:?} any setting may be"));
            }
        }
        if stop_margin < resolution {
            return Err(format!(
                "the stop margin {stop_margin:?} is shorter than the clock's timer resolution {resolution:?}: timers \
                 fire up to that late, so the holder could act past its deadline"
            ));
        }
        let safe = drift_shrunk(ttl, self.drift_bound_ppb());
        let needed = renew_interval + request_timeout + stop_margin;
        if needed >= safe {
            return Err(format!(
                "renew interval {renew_interval:?} + request timeout {request_timeout:?} + stop margin \
                 {stop_margin:?} = {needed:?} must be less than TTL·(1−ρ)/(1+ρ) = {safe:?}, or the term runs out \
                 before a renewal can succeed; lengthen the TTL or shorten the others"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_follow_the_ttl() {
        let ttl = Duration::from_secs(30);
        let timing = TermTiming::default();
        assert_eq!(timing.ttl, ttl);
        assert_eq!(timing.renew_interval(), Duration::from_secs(10));
        assert_eq!(timing.request_timeout(), Duration::from_secs(5));
        assert_eq!(timing.stop_margin(), Duration::from_secs(3));
        assert_eq!(default_poll_interval(ttl), Duration::from_secs(2));
        assert_eq!(default_leave_timeout(ttl), Duration::from_secs(10));
        assert_eq!(default_assumed_ttl(ttl), Duration::from_secs(60));
        assert_eq!(default_assumed_ttl(Duration::from_secs(90)), Duration::from_secs(90));
        assert_eq!(timing.drift_bound_ppb(), 1_000_000);
    }

    #[test]
    fn each_rule_is_refused_with_its_reason() {
        let ms = Duration::from_millis;
        let base = TermTiming::new(Duration::from_secs(6));
        let refused = |timing: TermTiming, intervals: &[Named]| timing.check(intervals, &[], ms(1)).unwrap_err();
        assert!(refused(TermTiming::new(ms(5)), &[]).contains("outside"));
        assert!(refused(TermTiming { drift_bound: 0.1, ..base }, &[]).contains("drift bound"));
        assert!(refused(TermTiming { drift_bound: f64::NAN, ..base }, &[]).contains("drift bound"));
        assert!(refused(TermTiming { request_timeout: Some(ms(0)), ..base }, &[]).contains("request timeout must be"));
        assert!(refused(base, &[("poll interval", ms(0), false)]).contains("poll interval must be more than zero"));
        assert!(refused(base, &[("assumed TTL", MAX_TTL + ms(1), false)]).contains("longer than"));
        assert!(refused(TermTiming { stop_margin: Some(Duration::ZERO), ..base }, &[]).contains("timer resolution"));
        assert!(refused(TermTiming { renew_interval: Some(ms(5_000)), ..base }, &[]).contains("must be less than"));
        assert!(base.check(&[("lock-delay", Duration::ZERO, true)], &[], ms(1)).is_ok());
    }

    #[test]
    fn the_first_bad_setting_is_reported_in_the_builders_order() {
        let ms = Duration::from_millis;
        let timing = TermTiming {
            request_timeout: Some(Duration::ZERO),
            stop_margin: Some(MAX_TTL + ms(1)),
            ..TermTiming::new(Duration::from_secs(6))
        };
        let zero = [("poll interval", Duration::ZERO, false)];
        let long = [("release timeout", MAX_TTL + ms(1), false)];
        let first = |intervals: &[Named], timeouts: &[Named]| timing.check(intervals, timeouts, ms(1)).unwrap_err();
        assert!(first(&zero, &[]).contains("the poll interval must be"));
        assert!(first(&[], &long).contains("the request timeout must be"));
        let fine = TermTiming { request_timeout: None, ..timing };
        assert!(fine.check(&[], &long, ms(1)).unwrap_err().contains("the release timeout"));
    }

    #[test]
    fn drift_shrinks_the_term_by_the_bound() {
        let second = Duration::from_secs(1);
        assert_eq!(drift_shrunk(second, 0), second);
        assert_eq!(drift_shrunk(second, 1_000_000), Duration::from_nanos(998_001_998));
        assert_eq!(hold_for(second, 0, Duration::from_millis(100)), Duration::from_millis(900));
        assert_eq!(hold_for(second, 0, Duration::from_secs(2)), Duration::ZERO);
    }
}
