//! [`ElectorBuilder`]: the settings of an elector, checked against each
//! other before anything runs, so that a configuration which could let a
//! lease run out before a renewal can land is refused up front.

use super::*;

/// Builds an [`Elector`], validating the configuration.
///
/// Defaults: TTL 30 s, renew every TTL/3, followers reading about once per
/// renew interval ([`Reads::FollowRenewals`]), poll every TTL/15, a per-request
/// timeout of TTL/6, a stop margin of TTL/10, a release timeout of 2 s, a
/// drift bound ρ of 1e-3, no lock-delay, and records without a TTL waited out
/// for the larger of the TTL and 60 s.
///
/// Every duration must be at most [`MAX_TTL`] (a day), the TTL at least
/// 10 ms, and the stop margin at least the clock's timer resolution (1 ms
/// for the system clock): timers fire up to that late, and the margin is what
/// absorbs it.
///
/// The holder reads the term's end again every [`Clock::suspend_check`]
/// (250 ms for the system clock, set with
/// [`SystemClock::with_suspend_check`](crate::clock::SystemClock::with_suspend_check)),
/// so after its host was suspended it stops within that of waking.
///
/// ```
/// use std::time::Duration;
/// use hoplock::{Elector, ElectorError, backend::memory::MemoryBackend};
///
/// let built = Elector::builder(MemoryBackend::new())
///     .owner("node-a")
///     .ttl(Duration::from_secs(10))
///     .lock_delay(Duration::from_secs(15)) // longer than the TTL is fine
///     .build();
/// assert!(built.is_ok());
///
/// let refused = Elector::builder(MemoryBackend::new()).owner("node-a").stop_margin(Duration::ZERO).build();
/// assert!(matches!(refused, Err(ElectorError::Config(message)) if message.contains("stop margin")));
/// ```
pub struct ElectorBuilder<B> {
    pub(super) backend: B,
    pub(super) owner: Option<String>,
    pub(super) ttl: Duration,
    pub(super) renew_interval: Option<Duration>,
    pub(super) poll_interval: Option<Duration>,
    pub(super) request_timeout: Option<Duration>,
    pub(super) stop_margin: Option<Duration>,
    pub(super) release_timeout: Duration,
    pub(super) drift_bound: f64,
    pub(super) lock_delay: Duration,
    pub(super) assumed_ttl: Option<Duration>,
    pub(super) policy: Policy,
    pub(super) reads: Reads,
    pub(super) clock: Option<Arc<dyn Clock>>,
    pub(super) entropy: Option<Arc<dyn Entropy>>,
}

impl<B: Backend> ElectorBuilder<B> {
    /// The owner name written into the record. Required; free text.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// The lease's time to live. Contenders wait this long on their own
    /// clocks before taking over from a holder that stopped renewing.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How often the holder renews. Default TTL/3.
    pub fn renew_interval(mut self, interval: Duration) -> Self {
        self.renew_interval = Some(interval);
        self
    }

    /// How often a contender reads the key under [`Reads::Poll`], and under
    /// the default schedule when the record does not say how often its
    /// holder renews, the holder renews at least this often, or a read
    /// failed. Default TTL/15.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = Some(interval);
        self
    }

    /// How long one store call may take before its outcome counts as
    /// unknown. Default TTL/6.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }

    /// How long before the lease's end the holder's context is cancelled,
    /// to leave the work time to stop. Default TTL/10.
    pub fn stop_margin(mut self, margin: Duration) -> Self {
        self.stop_margin = Some(margin);
        self
    }

    /// How long a graceful release may take. Default 2 s.
    pub fn release_timeout(mut self, timeout: Duration) -> Self {
        self.release_timeout = timeout;
        self
    }

    /// ρ: the most any clock's rate may differ from real time, as a
    /// fraction (1e-3 is 1 ms per second). Offsets between clocks do not
    /// matter and need no setting. Default 1e-3.
    pub fn drift_bound(mut self, rho: f64) -> Self {
        self.drift_bound = rho;
        self
    }

    /// After taking over from a holder that did not release, wait this long
    /// before handing out the leader context, so the old holder's in-flight
    /// unfenced requests drain. Default zero.
    ///
    /// The lease is held and renewed during the delay, which may be longer
    /// than the TTL (Consul's default is 15 s). A term lost during its delay
    /// never starts: no [`Event::Acquired`], no work, and the campaign goes
    /// on. A stop requested during the delay waits it out before releasing,
    /// because a released record lets the next leader skip its own delay.
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = delay;
        self
    }

    /// How long to wait out a record that states no TTL, as records written
    /// by the Go hoplock or Litestream do. Default: the larger of this
    /// elector's TTL and 60 s. While migrating from those tools, set it to
    /// at least the TTL they run with.
    ///
    /// The wait counts from first sight of the record's version on this
    /// elector's own clock, as for every other record.
    pub fn assumed_ttl(mut self, ttl: Duration) -> Self {
        self.assumed_ttl = Some(ttl);
        self
    }

    /// The decision policy. Only [`Policy::Safe`] (the default) is for
    /// production.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// When followers read the lease key. Default:
    /// [`Reads::FollowRenewals`], about one read per holder's renew
    /// interval; [`Reads::Poll`] reads every poll interval instead, for a
    /// handoff after a release within one poll at five times the requests.
    pub fn reads(mut self, reads: Reads) -> Self {
        self.reads = reads;
        self
    }

    /// The clock. Default: the system clock (tokio time).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The randomness source. Default: the operating system's.
    pub fn entropy(mut self, entropy: Arc<dyn Entropy>) -> Self {
        self.entropy = Some(entropy);
        self
    }

    /// Validates the configuration and builds the elector. A new incarnation
    /// id is drawn here.
    pub fn build(self) -> Result<Elector<B>, ElectorError> {
        let timing = self.timing()?;
        let owner = self.owner.ok_or_else(|| ElectorError::Config("an owner name is required".into()))?;
        if owner.is_empty() || owner.len() > MAX_OWNER_BYTES {
            return Err(ElectorError::Config(format!("the owner name must be 1 to {MAX_OWNER_BYTES} bytes")));
        }
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock::new()));
        let entropy = self.entropy.unwrap_or_else(|| Arc::new(OsEntropy));
        let incarnation = if planted::active(Bug::FixedIncarnation) {
            format!("fixed-{owner}")
        } else {
            random_hex(entropy.as_ref(), 16)
        };
        let core = Core::new(timing, self.policy, owner.clone(), incarnation.clone());
        let (stop, _) = watch::channel(false);
        Ok(Elector {
            inner: Arc::new(Inner {
                backend: self.backend,
                clock,
                entropy,
                owner,
                incarnation,
                core: Mutex::new(core),
                campaign: tokio::sync::Mutex::new(()),
                leading: AtomicBool::new(false),
                generation: AtomicU64::new(0),
                observed: Mutex::new(None),
                health: Mutex::new(StoreHealth::default()),
                subscribers: Mutex::new(Vec::new()),
                stop,
            }),
        })
    }

    fn timing(&self) -> Result<Timing, ElectorError> {
        let config = |message: String| Err(ElectorError::Config(message));
        let ttl = self.ttl;
        if ttl < Duration::from_millis(10) || ttl > MAX_TTL {
            return config(format!("TTL {ttl:?} is outside 10ms..={MAX_TTL:?}"));
        }
        if !(self.drift_bound.is_finite() && (0.0..0.1).contains(&self.drift_bound)) {
            return config(format!("drift bound {} must be at least 0 and below 0.1", self.drift_bound));
        }
        let timing = Timing {
            ttl,
            renew_interval: self.renew_interval.unwrap_or(ttl / 3),
            poll_interval: self.poll_interval.unwrap_or(ttl / 15),
            request_timeout: self.request_timeout.unwrap_or(ttl / 6),
            release_timeout: self.release_timeout,
            drift_bound_ppb: (self.drift_bound * 1e9).round() as u32,
            stop_margin: self.stop_margin.unwrap_or(ttl / 10),
            lock_delay: self.lock_delay,
            assumed_ttl: self.assumed_ttl.unwrap_or(ttl.max(DEFAULT_ASSUMED_TTL)),
            reads: self.reads,
        };
        let resolution = self.clock.as_ref().map_or(Duration::from_millis(1), |clock| clock.timer_resolution());
        check_term_timing(
            ttl,
            &[
                ("renew interval", timing.renew_interval, false),
                ("poll interval", timing.poll_interval, false),
                ("request timeout", timing.request_timeout, false),
                ("release timeout", timing.release_timeout, false),
                ("assumed TTL", timing.assumed_ttl, false),
                ("stop margin", timing.stop_margin, true),
                ("lock-delay", timing.lock_delay, true),
            ],
            timing.drift_bound_ppb,
            (timing.renew_interval, timing.request_timeout, timing.stop_margin),
            resolution,
        )
        .map_err(ElectorError::Config)?;
        if timing.poll_interval > ttl {
            return config(format!("the poll interval {:?} is longer than the TTL {ttl:?}", timing.poll_interval));
        }
        Ok(timing)
    }
}

/// The timing rules a term holder obeys, shared by the elector and keyed
/// members: every duration present and at most [`MAX_TTL`], a stop margin
/// no shorter than the clock's timer resolution, and renew interval +
/// request timeout + stop margin less than TTL·(1−ρ)/(1+ρ).
pub(crate) fn check_term_timing(
    ttl: Duration,
    durations: &[(&str, Duration, bool)],
    drift_bound_ppb: u32,
    (renew_interval, request_timeout, stop_margin): (Duration, Duration, Duration),
    resolution: Duration,
) -> Result<(), String> {
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
            "the stop margin {stop_margin:?} is shorter than the clock's timer resolution {resolution:?}: timers fire \
             up to that late, so the holder could act past its deadline"
        ));
    }
    let safe = super::core::drift_shrunk(ttl, drift_bound_ppb);
    let needed = renew_interval + request_timeout + stop_margin;
    if needed >= safe {
        return Err(format!(
            "renew interval {renew_interval:?} + request timeout {request_timeout:?} + stop margin {stop_margin:?} = \
             {needed:?} must be less than TTL·(1−ρ)/(1+ρ) = {safe:?}, or the term runs out before a renewal can \
             succeed; lengthen the TTL or shorten the others"
        ));
    }
    Ok(())
}
