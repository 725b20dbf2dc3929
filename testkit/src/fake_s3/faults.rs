//! Faults the fake S3 injects: latency, server errors, lost replies and
//! conflicts, configured per operation kind.
//!
//! A [`Faults`] value is plain data, so scenario files can carry it (every
//! field is optional) and the simulator can derive one from its seed. The
//! random draws themselves come from the server's seeded generator, one fixed
//! set of draws per request, so changing one rate does not shift the draws of
//! every later request.
//!
//! ```
//! use hoplock_testkit::fake_s3::{Faults, Latency};
//!
//! let faults: Faults = serde_json::from_str(
//!     r#"{ "write": { "latency": { "kind": "uniform", "min_ms": 5, "max_ms": 50 },
//!                     "ambiguous_success_rate": 0.1 },
//!          "conflict_409_on_overlap": true }"#,
//! )?;
//! assert_eq!(faults.write.latency, Latency::Uniform { min_ms: 5, max_ms: 50 });
//! assert_eq!(faults.read.error_500_rate, 0.0);
//! faults.validate()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::time::Duration;

use hoplock::entropy::splitmix64;
use serde::{Deserialize, Serialize};

/// The longest latency a fault may add. A limit on everything: a typo in a
/// scenario must not park a request for a day.
pub const MAX_LATENCY_MS: u64 = 10 * 60 * 1000;

/// The longest stale-read window.
pub const MAX_STALE_READ_WINDOW_MS: u64 = 60 * 60 * 1000;

/// The kinds of request faults are configured for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OpKind {
    /// GET and HEAD of an object.
    Read,
    /// PUT of an object.
    Write,
    /// DELETE of an object.
    Delete,
}

impl OpKind {
    /// Whether the request changes the store when it is applied.
    pub const fn is_mutation(self) -> bool {
        matches!(self, OpKind::Write | OpKind::Delete)
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OpKind::Read => "read",
            OpKind::Write => "write",
            OpKind::Delete => "delete",
        })
    }
}

/// Every fault the fake S3 injects. The default injects none.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Faults {
    /// Faults of GET and HEAD requests.
    pub read: OpFaults,
    /// Faults of PUT requests.
    pub write: OpFaults,
    /// Faults of DELETE requests.
    pub delete: OpFaults,
    /// Answer `409 ConditionalRequestConflict`, as AWS may, to a conditional
    /// write or delete that reaches its commit point while an earlier
    /// conditional request on the same key is still in flight. Nothing is
    /// changed by the refused request.
    pub conflict_409_on_overlap: bool,
    /// In the `stale-reads` mode, a GET returns the version that was current
    /// this long ago. Default 1000 ms: long enough that a read right after a
    /// write sees the old version, short enough that it settles within one
    /// lease TTL.
    pub stale_read_window_ms: u64,
    /// In the `stale-reads` mode, the chance that a GET is stale at all;
    /// the others return the current version. Default 1: every read lags by
    /// the window. Less makes a client's reads jump back and forth in
    /// time, as reads served by replicas that lag by different amounts do.
    pub stale_read_chance: f64,
    /// In the `applies-refused-late` mode, how long after its refusal a
    /// refused conditional write is applied anyway. Default 4000 ms: some
    /// seconds, as the lie was seen.
    pub late_apply_ms: u64,
    /// In the `lagging-reads` mode, how far every GET lags the writes.
    /// Default 5000 ms.
    pub read_lag_ms: u64,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            read: OpFaults::default(),
            write: OpFaults::default(),
            delete: OpFaults::default(),
            conflict_409_on_overlap: false,
            stale_read_window_ms: 1000,
            stale_read_chance: 1.0,
            late_apply_ms: 4000,
            read_lag_ms: 5000,
        }
    }
}

/// The faults of one kind of request.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OpFaults {
    /// Time from receiving the request to answering it. The request is
    /// applied at a point drawn uniformly within it, so two concurrent
    /// requests may commit in either order whatever order they arrived in,
    /// as over a real network and a real store.
    pub latency: Latency,
    /// Fraction of requests answered `500 InternalError` without being
    /// applied.
    pub error_500_rate: f64,
    /// Fraction of requests answered `503 SlowDown` without being applied.
    pub slow_down_503_rate: f64,
    /// Fraction of requests answered `429 TooManyRequests` without being
    /// applied, as several S3-compatible providers throttle. Unlike a 5xx,
    /// a 4xx says for certain that nothing changed.
    pub throttle_429_rate: f64,
    /// Fraction of requests that are handled (a write applied, if its
    /// condition holds) and then get no answer: the connection is closed
    /// instead, so the client cannot tell whether its write happened.
    pub ambiguous_success_rate: f64,
    /// Fraction of requests that are handled (a write applied, if its
    /// condition holds) and then answered `500 InternalError`: S3 does not
    /// promise that a 500 changed nothing.
    pub applied_error_500_rate: f64,
    /// Fraction of requests that are handled and then never answered: the
    /// connection stays open and silent until the client gives up at its
    /// own timeout (a lost reply need not be a prompt close).
    pub silent_reply_rate: f64,
}

/// A latency distribution, in whole milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Latency {
    /// No added latency.
    #[default]
    None,
    /// Always `ms`.
    Fixed {
        /// The latency.
        ms: u64,
    },
    /// Uniform over `min_ms..=max_ms`.
    Uniform {
        /// The shortest latency.
        min_ms: u64,
        /// The longest latency.
        max_ms: u64,
    },
    /// Exponential with mean `mean_ms`, cut off at `cap_ms`: mostly quick,
    /// with a tail of slow requests, as real stores have.
    Exponential {
        /// The mean before the cap.
        mean_ms: u64,
        /// The longest latency.
        cap_ms: u64,
    },
}

/// Why a [`Faults`] value cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FaultsError {
    /// A rate is not a number between 0 and 1.
    #[error("{op} {field} must be between 0 and 1, got {value}")]
    Rate {
        /// The operation kind.
        op: OpKind,
        /// The field.
        field: &'static str,
        /// The value given.
        value: f64,
    },
    /// A latency distribution is inverted or longer than [`MAX_LATENCY_MS`].
    #[error("{op} latency {latency:?} must have min <= max and stay within {MAX_LATENCY_MS} ms")]
    Latency {
        /// The operation kind.
        op: OpKind,
        /// The distribution given.
        latency: Latency,
    },
    /// The stale-read window is longer than [`MAX_STALE_READ_WINDOW_MS`].
    #[error("stale_read_window_ms must be at most {MAX_STALE_READ_WINDOW_MS}, got {0}")]
    StaleReadWindow(u64),
    /// The chance of a stale read is not within 0..=1.
    #[error("stale_read_chance must be within 0..=1, got {0}")]
    StaleReadChance(f64),
    /// A late apply or a read lag longer than [`MAX_STALE_READ_WINDOW_MS`].
    #[error("{field} must be at most {MAX_STALE_READ_WINDOW_MS} ms, got {value}")]
    Delay {
        /// The field.
        field: &'static str,
        /// The value given.
        value: u64,
    },
}

impl Faults {
    /// No faults at all (the default).
    pub fn none() -> Faults {
        Faults::default()
    }

    /// The same faults for reads, writes and deletes.
    pub fn everywhere(op: OpFaults) -> Faults {
        Faults { read: op.clone(), write: op.clone(), delete: op, ..Faults::default() }
    }

    /// The faults of one kind of request.
    pub fn for_op(&self, op: OpKind) -> &OpFaults {
        match op {
            OpKind::Read => &self.read,
            OpKind::Write => &self.write,
            OpKind::Delete => &self.delete,
        }
    }

    /// The longest latency any operation may be given.
    pub fn longest_latency(&self) -> Duration {
        [&self.read, &self.write, &self.delete]
            .into_iter()
            .map(|op| match op.latency {
                Latency::None => 0,
                Latency::Fixed { ms } => ms,
                Latency::Uniform { max_ms, .. } => max_ms,
                Latency::Exponential { cap_ms, .. } => cap_ms,
            })
            .max()
            .map_or(Duration::ZERO, |ms| Duration::from_millis(ms.min(MAX_LATENCY_MS)))
    }

    /// The stale-read window as a duration.
    pub fn stale_read_window(&self) -> Duration {
        Duration::from_millis(self.stale_read_window_ms)
    }

    /// How late a refused write is applied in `applies-refused-late`.
    pub fn late_apply(&self) -> Duration {
        Duration::from_millis(self.late_apply_ms)
    }

    /// How far reads lag in `lagging-reads`.
    pub fn read_lag(&self) -> Duration {
        Duration::from_millis(self.read_lag_ms)
    }

    /// Checks every rate and distribution.
    pub fn validate(&self) -> Result<(), FaultsError> {
        for op in [OpKind::Read, OpKind::Write, OpKind::Delete] {
            self.for_op(op).validate(op)?;
        }
        if self.stale_read_window_ms > MAX_STALE_READ_WINDOW_MS {
            return Err(FaultsError::StaleReadWindow(self.stale_read_window_ms));
        }
        if !(0.0..=1.0).contains(&self.stale_read_chance) {
            return Err(FaultsError::StaleReadChance(self.stale_read_chance));
        }
        for (field, value) in [("late_apply_ms", self.late_apply_ms), ("read_lag_ms", self.read_lag_ms)] {
            if value > MAX_STALE_READ_WINDOW_MS {
                return Err(FaultsError::Delay { field, value });
            }
        }
        Ok(())
    }
}

impl OpFaults {
    fn validate(&self, op: OpKind) -> Result<(), FaultsError> {
        for (field, value) in [
            ("error_500_rate", self.error_500_rate),
            ("slow_down_503_rate", self.slow_down_503_rate),
            ("throttle_429_rate", self.throttle_429_rate),
            ("ambiguous_success_rate", self.ambiguous_success_rate),
            ("applied_error_500_rate", self.applied_error_500_rate),
            ("silent_reply_rate", self.silent_reply_rate),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(FaultsError::Rate { op, field, value });
            }
        }
        let bad = match self.latency {
            Latency::None => false,
            Latency::Fixed { ms } => ms > MAX_LATENCY_MS,
            Latency::Uniform { min_ms, max_ms } => min_ms > max_ms || max_ms > MAX_LATENCY_MS,
            Latency::Exponential { mean_ms, cap_ms } => mean_ms > MAX_LATENCY_MS || cap_ms > MAX_LATENCY_MS,
        };
        if bad {
            return Err(FaultsError::Latency { op, latency: self.latency });
        }
        Ok(())
    }

    /// Draws this request's fate. Always the same number of draws, whatever
    /// the rates, so that one seed keeps its meaning when a rate changes.
    pub(crate) fn draw(&self, rng: &mut Rng) -> Draw {
        let latency = self.latency.sample(rng);
        // One draw decides both refusals that change nothing, so adding the
        // 429 rate did not shift the draws of runs that do not use it.
        let refusal = unit(rng.next_u64());
        let slow_down = refusal < self.slow_down_503_rate;
        let throttled = !slow_down && refusal < self.slow_down_503_rate + self.throttle_429_rate;
        let error_500 = rng.chance(self.error_500_rate);
        let drop_reply = rng.chance(self.ambiguous_success_rate);
        let applied_error_500 = rng.chance(self.applied_error_500_rate);
        let silent = rng.chance(self.silent_reply_rate);
        // Whole milliseconds, like the latency: timers round up, and a
        // fraction would stretch the request past its latency.
        let commit_ms = (latency.as_millis() as f64 * unit(rng.next_u64())).floor() as u64;
        let commit_at = Duration::from_millis(commit_ms).min(latency);
        Draw { latency, commit_at, slow_down, throttled, error_500, drop_reply, applied_error_500, silent }
    }
}

impl Latency {
    /// Draws one latency. One draw from `rng` whatever the distribution.
    pub(crate) fn sample(&self, rng: &mut Rng) -> Duration {
        let word = rng.next_u64();
        let ms = match *self {
            Latency::None => 0,
            Latency::Fixed { ms } => ms,
            Latency::Uniform { min_ms, max_ms } => {
                let span = max_ms.saturating_sub(min_ms).saturating_add(1);
                min_ms + word % span
            }
            Latency::Exponential { mean_ms, cap_ms } => {
                // Inverse transform sampling; `1 - u` is in (0, 1], so the
                // logarithm is finite. libm rather than std so that one
                // seed draws the same latencies on every platform.
                let u = unit(word);
                let ms = -(mean_ms as f64) * libm::log(1.0 - u);
                (ms.round() as u64).min(cap_ms)
            }
        };
        Duration::from_millis(ms.min(MAX_LATENCY_MS))
    }
}

/// One request's drawn faults.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Draw {
    pub(crate) latency: Duration,
    /// When, within `latency`, the request reads or changes the store.
    pub(crate) commit_at: Duration,
    pub(crate) slow_down: bool,
    pub(crate) throttled: bool,
    pub(crate) error_500: bool,
    pub(crate) drop_reply: bool,
    pub(crate) applied_error_500: bool,
    pub(crate) silent: bool,
}

/// The fake S3's deterministic generator: SplitMix64, as the library's
/// `SeededEntropy` uses, without its lock (the caller holds one).
#[derive(Clone, Debug)]
pub(crate) struct Rng {
    state: u64,
}

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        splitmix64(&mut self.state)
    }

    /// True with probability `p`. Draws once even when `p` is 0 or 1.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        unit(self.next_u64()) < p
    }
}

/// A uniform number in `[0, 1)` from the top 53 bits of `word`.
fn unit(word: u64) -> f64 {
    (word >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_is_optional() {
        let faults: Faults = serde_json::from_str("{}").unwrap();
        assert_eq!(faults, Faults::default());
        assert_eq!(faults.stale_read_window_ms, 1000);
        let op: OpFaults = serde_json::from_str(r#"{"error_500_rate": 0.5}"#).unwrap();
        assert_eq!(op.error_500_rate, 0.5);
        assert_eq!(op.latency, Latency::None);
    }

    #[test]
    fn unknown_fields_and_bad_values_are_refused() {
        assert!(serde_json::from_str::<Faults>(r#"{"error_rate": 1}"#).is_err());
        let mut faults = Faults::none();
        faults.write.error_500_rate = 1.5;
        assert!(matches!(faults.validate(), Err(FaultsError::Rate { op: OpKind::Write, field: "error_500_rate", .. })));
        faults.write.error_500_rate = f64::NAN;
        assert!(faults.validate().is_err());
        let mut faults = Faults::none();
        faults.read.latency = Latency::Uniform { min_ms: 10, max_ms: 5 };
        assert!(faults.validate().is_err());
        faults.read.latency = Latency::Fixed { ms: MAX_LATENCY_MS + 1 };
        assert!(faults.validate().is_err());
    }

    #[test]
    fn latencies_stay_within_their_distribution() {
        let mut rng = Rng::new(7);
        let uniform = Latency::Uniform { min_ms: 3, max_ms: 9 };
        let exponential = Latency::Exponential { mean_ms: 20, cap_ms: 100 };
        let mut seen_capped = false;
        for _ in 0..2000 {
            let ms = uniform.sample(&mut rng).as_millis();
            assert!((3..=9).contains(&ms), "{ms}");
            let ms = exponential.sample(&mut rng).as_millis();
            assert!(ms <= 100, "{ms}");
            seen_capped |= ms == 100;
        }
        assert!(seen_capped, "about 1 in 150 draws is past five means");
        assert_eq!(Latency::Fixed { ms: 4 }.sample(&mut rng), Duration::from_millis(4));
    }

    #[test]
    fn draws_are_deterministic_and_rates_are_honoured() {
        let op = OpFaults { error_500_rate: 0.25, ..OpFaults::default() };
        let (mut a, mut b) = (Rng::new(1), Rng::new(1));
        let draws: Vec<Draw> = (0..4000).map(|_| op.draw(&mut a)).collect();
        assert_eq!(draws, (0..4000).map(|_| op.draw(&mut b)).collect::<Vec<_>>());
        let errors = draws.iter().filter(|d| d.error_500).count();
        assert!((800..1200).contains(&errors), "{errors}");
        assert!(draws.iter().all(|d| !d.slow_down && !d.drop_reply));
        let always = OpFaults { ambiguous_success_rate: 1.0, ..OpFaults::default() };
        assert!((0..100).all(|_| always.draw(&mut a).drop_reply));
    }
}
