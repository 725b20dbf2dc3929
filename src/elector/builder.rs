//! [`ElectorBuilder`]: the settings of an elector, checked against each
//! other before anything runs, so that a configuration which could let a
//! lease run out before a renewal can land is refused up front.

use super::*;
use crate::term_timing::{self, TermTiming};

/// Builds an [`Elector`], validating the configuration.
///
/// Defaults: TTL 30 s, renew every TTL/3, followers reading about once per
/// renew interval ([`Reads::FollowRenewals`]), poll every TTL/15, a per-request
/// timeout of TTL/6, a stop margin of TTL/10, a release timeout of 2 s, a
/// drift bound ρ of 1e-3, no lock-delay, and records without a TTL waited out
/// for the larger of the TTL and 60 s.
///
/// Every duration must be at most [`MAX_TTL`](crate::lease::MAX_TTL) (a day), the TTL at least
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
    /// The settings every term holder shares, with their defaults.
    pub(super) term: TermTiming,
    pub(super) poll_interval: Option<Duration>,
    pub(super) release_timeout: Duration,
    pub(super) assumed_ttl: Option<Duration>,
    pub(super) policy: Policy,
    pub(super) reads: Reads,
    pub(super) clock: Option<Arc<dyn Clock>>,
    pub(super) entropy: Option<Arc<dyn Entropy>>,
}

impl<B: Backend> ElectorBuilder<B> {
    crate::term_timing::term_timing_setters!();

    /// The owner name written into the record. Required; free text.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
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

    /// How long a graceful release may take. Default 2 s.
    pub fn release_timeout(mut self, timeout: Duration) -> Self {
        self.release_timeout = timeout;
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
        self.term.lock_delay = delay;
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
        let term = &self.term;
        let ttl = term.ttl;
        let timing = Timing {
            ttl,
            renew_interval: term.renew_interval(),
            poll_interval: self.poll_interval.unwrap_or(term_timing::default_poll_interval(ttl)),
            request_timeout: term.request_timeout(),
            release_timeout: self.release_timeout,
            drift_bound_ppb: term.drift_bound_ppb(),
            stop_margin: term.stop_margin(),
            lock_delay: term.lock_delay,
            assumed_ttl: self.assumed_ttl.unwrap_or(term_timing::default_assumed_ttl(ttl)),
            reads: self.reads,
        };
        let resolution = self.clock.as_ref().map_or(Duration::from_millis(1), |clock| clock.timer_resolution());
        term.check(
            &[("poll interval", timing.poll_interval, false)],
            &[("release timeout", timing.release_timeout, false), ("assumed TTL", timing.assumed_ttl, false)],
            resolution,
        )
        .map_err(ElectorError::Config)?;
        if timing.poll_interval > ttl {
            return Err(ElectorError::Config(format!(
                "the poll interval {:?} is longer than the TTL {ttl:?}",
                timing.poll_interval
            )));
        }
        Ok(timing)
    }
}
