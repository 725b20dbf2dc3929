//! The elector: campaigns for a lease, holds it while leader-only work runs,
//! and stops that work before the lease can have passed to anyone else.
//!
//! The decisions live in the I/O-free [`core`] module; this file is the async
//! shell that reads and writes the [`Backend`], keeps time through the
//! [`Clock`] and hands out [`LeaderContext`]s.
//!
//! ```
//! use std::time::Duration;
//! use hoplock::{Elector, backend::memory::MemoryBackend};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), hoplock::ElectorError> {
//! let elector = Elector::builder(MemoryBackend::new()).owner("node-a").ttl(Duration::from_secs(10)).build()?;
//! let term = elector
//!     .lead(|ctx, lease| async move {
//!         // Leader-only work goes here; pass `lease.generation` to every
//!         // downstream write and stop when `ctx` is cancelled.
//!         assert!(!ctx.is_cancelled());
//!         lease.generation
//!     })
//!     .await?;
//! assert_eq!(term.output.get(), 1);
//! assert!(term.end.is_released());
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tracing::{debug, error, info, warn};

use crate::backend::{Backend, BackendError, Stored, Version};
use crate::clock::{Clock, Instant, SystemClock};
use crate::entropy::{Entropy, OsEntropy, random_hex};
use crate::lease::{Generation, LeaseRecord, MAX_OWNER_BYTES, MAX_TTL, RecordError};
use crate::planted::{self, Bug};

pub mod core;

pub use self::core::Policy;
use self::core::{Core, Decision, Observation, Resolution, Timing};

/// Errors from the elector itself, as opposed to one failed store call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ElectorError {
    /// The configuration is invalid; the message says which setting and why.
    #[error("invalid elector configuration: {0}")]
    Config(String),
    /// The store failed in a way retrying cannot fix (it cannot do
    /// conditional writes, or it is misconfigured).
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// An observer saw the stored generation go down: somebody deleted or
    /// reset the lease key. Fencing tokens from before are no longer ordered
    /// against new ones; reset the key with a generation floor.
    #[error("the stored generation went back from {seen} to {found}: the lease key was deleted or reset")]
    GenerationWentBack {
        /// The highest generation this elector had seen.
        seen: Generation,
        /// What the store holds now.
        found: Generation,
    },
    /// The elector was told to stop.
    #[error("the elector was stopped")]
    Stopped,
}

/// Why a term ended without a graceful release.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// Renewals did not succeed in time; the lease ran out on the holder's
    /// own clock, so it stopped before anyone else could take over.
    Expired,
    /// Somebody else's write replaced ours.
    Superseded,
    /// The lease record vanished.
    Deleted,
    /// The store failed in a way retrying cannot fix.
    Failed(BackendError),
    /// The work stopped and a release was written, but the store did not
    /// confirm it; contenders take over once the lease runs out.
    ReleaseUnconfirmed(String),
    /// The term was dropped while leading (the [`Elector::lead`] future was
    /// dropped): the context was cancelled at once and a release attempted
    /// in the background, unconfirmed.
    Abandoned,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LossReason::Expired => f.write_str("renewals did not succeed before the lease ran out"),
            LossReason::Superseded => f.write_str("another writer replaced the lease record"),
            LossReason::Deleted => f.write_str("the lease record was deleted"),
            LossReason::Failed(err) => write!(f, "the store failed: {err}"),
            LossReason::ReleaseUnconfirmed(why) => write!(f, "the release was not confirmed: {why}"),
            LossReason::Abandoned => f.write_str("the term was dropped while leading; released in the background"),
        }
    }
}

/// How a term ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TermEnd {
    /// The work finished and the lease was released.
    Released,
    /// The work finished, but whether the release reached the store is not
    /// known. The elector stopped leading anyway; contenders take over once
    /// the lease runs out.
    ReleaseUnconfirmed(String),
    /// Leadership was lost while the work ran; its context was cancelled.
    Lost(LossReason),
}

impl TermEnd {
    /// Whether the release was confirmed by the store.
    pub fn is_released(&self) -> bool {
        matches!(self, TermEnd::Released)
    }
}

/// A term's result: the work's output and how the term ended.
#[derive(Debug)]
pub struct Term<T> {
    /// What the leader-only work returned.
    pub output: T,
    /// The term's fencing token.
    pub generation: Generation,
    /// How the term ended.
    pub end: TermEnd,
}

/// What a leader knows about its term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The fencing token. Send it with every write to guarded resources.
    pub generation: Generation,
    /// The owner name this elector campaigns under.
    pub owner: String,
    /// This elector's incarnation id.
    pub incarnation: String,
}

/// Handed to leader-only work: cancelled when leadership ends, before the
/// lease can have passed to anyone else.
#[derive(Clone, Debug)]
pub struct LeaderContext {
    generation: Generation,
    cancelled: watch::Receiver<bool>,
}

impl LeaderContext {
    /// The term's fencing token.
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// Whether leadership has ended.
    pub fn is_cancelled(&self) -> bool {
        *self.cancelled.borrow()
    }

    /// Completes when leadership ends.
    pub async fn cancelled(&self) {
        let mut receiver = self.cancelled.clone();
        // An error means the sender is gone, which also ends leadership.
        let _ = receiver.wait_for(|cancelled| *cancelled).await;
    }
}

/// Tells an elector started with [`Elector::run`] that the leader-only work
/// has stopped.
///
/// [`Event::Acquired`] from `run()` carries an armed guard. Keep it (or a
/// clone) in whatever does the leader-only work and drop it once that work
/// has stopped. After the context is cancelled (on [`Elector::stop`], or
/// when the [`Events`] stream is dropped), the elector releases the lease
/// only once every clone of the guard is gone, or when the lease ends,
/// whichever comes first. Releasing earlier would let the next leader start
/// at once, skipping the lock-delay, while this one's work still writes.
///
/// Dropping the guard before the context is cancelled does not resign; it
/// only says there is nothing to wait for. Copies of the event delivered to
/// [`Elector::subscribe`] streams carry a detached guard that holds nothing.
///
/// ```
/// use hoplock::{Elector, Event, backend::memory::MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let elector = Elector::builder(MemoryBackend::new()).owner("node-a").build().unwrap();
/// let mut events = elector.run();
/// if let Some(Event::Acquired { context, guard, .. }) = events.next().await {
///     assert!(guard.is_armed());
///     tokio::spawn(async move {
///         context.cancelled().await;
///         // ... finish in-flight writes ...
///         drop(guard); // now the elector may release
///     });
/// }
/// elector.stop();
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct WorkGuard {
    /// Never sent on: the elector waits for every sender to be dropped.
    alive: Option<mpsc::Sender<std::convert::Infallible>>,
}

impl WorkGuard {
    /// A guard and the future that completes once it and its clones are gone.
    fn armed() -> (WorkGuard, WorkStopped) {
        let (sender, receiver) = mpsc::channel(1);
        (WorkGuard { alive: Some(sender) }, WorkStopped(Some(receiver)))
    }

    /// A guard nothing waits for.
    fn detached() -> WorkGuard {
        WorkGuard { alive: None }
    }

    /// Whether the elector waits for this guard before releasing.
    pub fn is_armed(&self) -> bool {
        self.alive.is_some()
    }
}

/// Completes once every clone of a [`WorkGuard`] is dropped; at once for a
/// term whose work is the caller's own future ([`Elector::lead`]).
struct WorkStopped(Option<mpsc::Receiver<std::convert::Infallible>>);

impl WorkStopped {
    async fn wait(self) {
        if let Some(mut receiver) = self.0 {
            // `None` once every sender is gone; nothing is ever sent.
            let _ = receiver.recv().await;
        }
    }
}

/// Something operators and callers should know about.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event {
    /// This elector leads. Leader-only work may use `context` until it is
    /// cancelled.
    Acquired {
        /// The term.
        lease: Lease,
        /// Cancelled when the term ends.
        context: LeaderContext,
        /// Drop it when the work has stopped; see [`WorkGuard`].
        guard: WorkGuard,
    },
    /// A renewal succeeded.
    Renewed {
        /// The term's generation.
        generation: Generation,
    },
    /// A term ended.
    Lost {
        /// The term's generation.
        generation: Generation,
        /// Why; `None` only for a graceful release the store confirmed.
        reason: Option<LossReason>,
    },
    /// Non-fatal trouble: a failing store call, an unreadable record. The
    /// elector carries on.
    Error {
        /// What went wrong.
        error: BackendError,
    },
}

/// What [`Elector::observe`] reports about the lease key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// The owner name in the record.
    pub owner: String,
    /// The record's generation.
    pub generation: Generation,
    /// Whether the record was released.
    pub released: bool,
    /// How long this elector has seen this exact version unchanged. A record
    /// unchanged for longer than its TTL belongs to a holder that has
    /// stopped.
    pub unchanged_for: Duration,
    /// The TTL stated in the record, if any.
    pub ttl: Option<Duration>,
}

/// Builds an [`Elector`], validating the configuration.
///
/// Defaults: TTL 30 s, renew every TTL/3, poll every TTL/15, a per-request
/// timeout of TTL/6, a stop margin of TTL/10, a release timeout of 2 s, a
/// drift bound ρ of 1e-3, no lock-delay, and records without a TTL waited out
/// for the larger of the TTL and 60 s.
///
/// Every duration must be at most [`MAX_TTL`] (a day), the TTL at least
/// 10 ms, and the stop margin at least the clock's timer resolution (1 ms
/// for the system clock): timers fire up to that late, and the margin is what
/// absorbs it.
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
    backend: B,
    owner: Option<String>,
    ttl: Duration,
    renew_interval: Option<Duration>,
    poll_interval: Option<Duration>,
    request_timeout: Option<Duration>,
    stop_margin: Option<Duration>,
    release_timeout: Duration,
    drift_bound: f64,
    lock_delay: Duration,
    assumed_ttl: Option<Duration>,
    policy: Policy,
    clock: Option<Arc<dyn Clock>>,
    entropy: Option<Arc<dyn Entropy>>,
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

    /// How often a contender reads the key. Default TTL/15; a released lease
    /// is taken over within one poll.
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
        };
        for (name, value, may_be_zero) in [
            ("renew interval", timing.renew_interval, false),
            ("poll interval", timing.poll_interval, false),
            ("request timeout", timing.request_timeout, false),
            ("release timeout", timing.release_timeout, false),
            ("assumed TTL", timing.assumed_ttl, false),
            ("stop margin", timing.stop_margin, true),
            ("lock-delay", timing.lock_delay, true),
        ] {
            if value.is_zero() && !may_be_zero {
                return config(format!("the {name} must be more than zero"));
            }
            // Bounding every duration also keeps the sums below far from
            // overflowing.
            if value > MAX_TTL {
                return config(format!("the {name} {value:?} is longer than the {MAX_TTL:?} any setting may be"));
            }
        }
        let resolution = self.clock.as_ref().map_or(Duration::from_millis(1), |clock| clock.timer_resolution());
        if timing.stop_margin < resolution {
            return config(format!(
                "the stop margin {:?} is shorter than the clock's timer resolution {resolution:?}: timers fire up \
                 to that late, so the holder could act past its deadline",
                timing.stop_margin
            ));
        }
        if timing.poll_interval > ttl {
            return config(format!("the poll interval {:?} is longer than the TTL {ttl:?}", timing.poll_interval));
        }
        let safe = self::core::drift_shrunk(ttl, timing.drift_bound_ppb);
        let needed = timing.renew_interval + timing.request_timeout + timing.stop_margin;
        if needed >= safe {
            return config(format!(
                "renew interval {:?} + request timeout {:?} + stop margin {:?} = {needed:?} must be less than \
                 TTL·(1−ρ)/(1+ρ) = {safe:?}, or the lease runs out before a renewal can succeed; \
                 lengthen the TTL or shorten the others",
                timing.renew_interval, timing.request_timeout, timing.stop_margin
            ));
        }
        Ok(timing)
    }
}

/// Campaigns for one lease key and runs leader-only work while it holds it.
///
/// Cloning an `Elector` gives another handle to the same elector (the same
/// incarnation). Only one campaign runs at a time; a second [`Elector::lead`]
/// waits for the first.
///
/// Dropping a [`Elector::lead`] future or the [`Events`] stream while leading
/// cancels the leader context at once and makes a best-effort release in a
/// spawned task (if a tokio runtime is running); the release is not
/// confirmed to anyone, and contenders fall back to waiting out the TTL if it
/// does not land.
pub struct Elector<B> {
    inner: Arc<Inner<B>>,
}

impl<B> Clone for Elector<B> {
    fn clone(&self) -> Self {
        Elector { inner: self.inner.clone() }
    }
}

impl<B> fmt::Debug for Elector<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Elector")
            .field("owner", &self.inner.owner)
            .field("incarnation", &self.inner.incarnation)
            .field("leading", &self.inner.leading.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

struct Inner<B> {
    backend: B,
    clock: Arc<dyn Clock>,
    entropy: Arc<dyn Entropy>,
    owner: String,
    incarnation: String,
    core: Mutex<Core>,
    /// Held for the whole of a campaign and term.
    campaign: tokio::sync::Mutex<()>,
    leading: AtomicBool,
    generation: AtomicU64,
    /// The version [`Elector::observe`] last saw, and when it first saw it.
    observed: Mutex<Option<(Version, Instant)>>,
    subscribers: Mutex<Vec<mpsc::UnboundedSender<Event>>>,
    /// Set once by [`Elector::stop`].
    stop: watch::Sender<bool>,
}

/// The least time a record without a TTL is waited out: the Go hoplock's
/// records state none, and its deployments commonly run TTLs up to a minute.
const DEFAULT_ASSUMED_TTL: Duration = Duration::from_secs(60);

/// How many unresolved renewals a holder tracks. More than this many in a row
/// within one TTL means the store is failing anyway; forgetting the oldest
/// can only make the holder step down early, never lead late.
const MAX_PENDING: usize = 8;

/// The current term's state while leading.
#[derive(Clone, Debug)]
struct Held {
    version: Version,
    record: LeaseRecord,
    /// When the last successful write was sent.
    sent_at: Instant,
    /// When the holder must have stopped acting.
    ends_at: Instant,
    /// Renewals since the last confirmed write whose outcome is not known
    /// (they may still land): nonce and send time, oldest first, at most
    /// [`MAX_PENDING`].
    pending: Vec<(String, Instant)>,
}

impl<B: Backend> Elector<B> {
    /// Starts configuring an elector over `backend`.
    pub fn builder(backend: B) -> ElectorBuilder<B> {
        ElectorBuilder {
            backend,
            owner: None,
            ttl: Duration::from_secs(30),
            renew_interval: None,
            poll_interval: None,
            request_timeout: None,
            stop_margin: None,
            release_timeout: Duration::from_secs(2),
            drift_bound: 1e-3,
            lock_delay: Duration::ZERO,
            assumed_ttl: None,
            policy: Policy::Safe,
            clock: None,
            entropy: None,
        }
    }

    /// Whether this elector currently leads. Cheap.
    pub fn is_leader(&self) -> bool {
        self.inner.leading.load(Ordering::Acquire)
    }

    /// The generation of the current term, if leading. Cheap.
    pub fn current_generation(&self) -> Option<Generation> {
        self.is_leader().then(|| Generation(self.inner.generation.load(Ordering::Acquire)))
    }

    /// The highest generation this elector has read or written.
    pub fn highest_generation_seen(&self) -> Generation {
        self.inner.core().highest_seen()
    }

    /// This elector's incarnation id, new for every elector built.
    pub fn incarnation(&self) -> &str {
        &self.inner.incarnation
    }

    /// The owner name this elector campaigns under.
    pub fn owner(&self) -> &str {
        &self.inner.owner
    }

    /// A stream of this elector's events from now on.
    pub fn subscribe(&self) -> Events {
        self.inner.subscribe().1
    }

    /// Stops the elector: a campaign in progress returns
    /// [`ElectorError::Stopped`] (after settling a takeover write already on
    /// its way, and releasing it if it landed), and a term in progress
    /// cancels its context and releases once the work returns. Later
    /// campaigns return at once.
    pub fn stop(&self) {
        self.inner.stop.send_replace(true);
    }

    /// Reads the lease key once, without campaigning.
    ///
    /// Errors with [`ElectorError::GenerationWentBack`] if the stored
    /// generation is lower than one this elector had seen before the read
    /// was sent, so an observer's view never moves back. Concurrent calls
    /// may finish in any order without a false report.
    pub async fn observe(&self) -> Result<Option<Observed>, ElectorError> {
        let inner = &self.inner;
        // Compared with what was known when the read was sent: a concurrent
        // call may raise the bar while this read is in flight, and the lower
        // answer this one gets is then old, not a step back.
        let seen_before = inner.core().highest_seen();
        let stored = match inner.read().await {
            Ok(stored) => stored,
            Err(BackendError::NoLease) => return Ok(None),
            Err(err) => return Err(err.into()),
        };
        let now = inner.clock.now();
        if stored.record.generation < seen_before {
            return Err(ElectorError::GenerationWentBack { seen: seen_before, found: stored.record.generation });
        }
        inner.core().saw(stored.record.generation);
        let mut observed = inner.observed.lock().unwrap_or_else(|p| p.into_inner());
        let since = match &*observed {
            Some((version, since)) if *version == stored.version => *since,
            _ => now,
        };
        *observed = Some((stored.version.clone(), since));
        Ok(Some(Observed {
            owner: stored.record.owner.clone(),
            generation: stored.record.generation,
            released: stored.record.released,
            unchanged_for: now.saturating_duration_since(since),
            ttl: stored.record.ttl(),
        }))
    }

    /// Campaigns until this elector leads, runs `work(context, lease)`, and
    /// releases the lease when the work returns.
    ///
    /// If leadership is lost while the work runs, its context is cancelled
    /// before the lease can have passed to anyone else; `lead` then waits
    /// for the work to return and reports [`TermEnd::Lost`]. Work that
    /// ignores cancellation keeps running, unfenced: pass the generation to
    /// every resource it writes, and let those resources reject stale
    /// generations (see [`crate::fence::Fence`]).
    ///
    /// With a lock-delay, `work` is called only once the delay has passed
    /// with the lease still held; a term lost during the delay is not
    /// reported and the campaign goes on.
    ///
    /// Returns an error only if the store is unusable or the elector was
    /// stopped before it led.
    pub async fn lead<F, Fut, T>(&self, work: F) -> Result<Term<T>, ElectorError>
    where
        F: FnOnce(LeaderContext, Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        self.lead_until(|context, lease, _| work(context, lease), None, None).await
    }

    /// [`Elector::lead`], also stopped by `extra_stop`. `announce_to` is the
    /// [`Elector::run`] stream that gets the armed [`WorkGuard`].
    async fn lead_until<F, Fut, T>(
        &self,
        work: F,
        extra_stop: Option<watch::Receiver<bool>>,
        announce_to: Option<&mpsc::UnboundedSender<Event>>,
    ) -> Result<Term<T>, ElectorError>
    where
        F: FnOnce(LeaderContext, Lease, WorkStopped) -> Fut,
        Fut: Future<Output = T>,
    {
        let inner = &self.inner;
        let mut stop = StopSignal { elector: inner.stop.subscribe(), extra: extra_stop };
        let _campaign = tokio::select! {
            biased;
            () = stop.stopped() => return Err(ElectorError::Stopped),
            guard = inner.campaign.lock() => guard,
        };
        let (mut term, generation, cancelled) = loop {
            let (held, involuntary) = inner.acquire(&mut stop).await?;
            let generation = held.record.generation;
            let (cancel, cancelled) = watch::channel(false);
            let mut term = TermGuard { inner: inner.clone(), held: Some(held), cancel, started: false };
            let lock_delay = if involuntary && !planted::active(Bug::SkipLockDelay) {
                inner.timing().lock_delay
            } else {
                Duration::ZERO
            };
            if lock_delay.is_zero() {
                break (term, generation, cancelled);
            }
            // The lock-delay runs inside the held term, so the lease is
            // renewed while it passes, and a term lost meanwhile never
            // starts: no event, no work.
            let mut delay = inner.clock.sleep_until(inner.clock.now() + lock_delay);
            match term.hold(delay.as_mut(), &mut stop).await {
                HoldEnd::WorkDone(()) if stop.is_set() => {
                    // Nothing ran. The delay has drained the previous holder's
                    // requests, so the release cannot let anyone skip it.
                    term.release().await;
                    return Err(ElectorError::Stopped);
                }
                HoldEnd::WorkDone(()) => break (term, generation, cancelled),
                HoldEnd::Lost(reason) => term.lose(reason),
            }
        };

        term.started = true;
        let context = LeaderContext { generation, cancelled };
        let lease = Lease { generation, owner: inner.owner.clone(), incarnation: inner.incarnation.clone() };
        let (guard, stopped) = match announce_to {
            Some(_) => WorkGuard::armed(),
            None => (WorkGuard::detached(), WorkStopped(None)),
        };
        inner.begin_term(lease.clone(), context.clone(), guard, announce_to);
        let mut work = pin!(work(context, lease, stopped));
        match term.hold(work.as_mut(), &mut stop).await {
            HoldEnd::WorkDone(output) => {
                let end = term.release().await;
                Ok(Term { output, generation, end })
            }
            HoldEnd::Lost(reason) => {
                term.lose(reason.clone());
                let output = work.await;
                Ok(Term { output, generation, end: TermEnd::Lost(reason) })
            }
        }
    }

    /// Campaigns for as long as the returned stream lives, leading whenever
    /// it can, and reports every [`Event`]. The leader context comes in
    /// [`Event::Acquired`], with a [`WorkGuard`] to drop once the work it
    /// started has stopped.
    ///
    /// Dropping the stream, or [`Elector::stop`], cancels the context; the
    /// lease is released once the guard is gone (or when the lease ends),
    /// never while the work may still be writing. After losing a term the
    /// campaign resumes only once the guard is gone, so one process never
    /// runs two terms' work at once.
    ///
    /// Needs a tokio runtime: the campaign runs in a spawned task.
    pub fn run(&self) -> Events {
        let (sender, mut events) = self.inner.subscribe();
        let (stop_sender, stop) = watch::channel(false);
        let elector = self.clone();
        tokio::spawn(async move {
            loop {
                let result = elector
                    .lead_until(
                        |context, _lease, stopped| async move {
                            context.cancelled().await;
                            stopped.wait().await;
                        },
                        Some(stop.clone()),
                        Some(&sender),
                    )
                    .await;
                match result {
                    Ok(_) if !*stop.borrow() => continue,
                    Ok(_) | Err(ElectorError::Stopped) => return,
                    Err(ElectorError::Backend(error)) => {
                        error!(owner = %elector.inner.owner, %error, "the lease store is unusable; campaign ended");
                        elector.inner.emit(Event::Error { error });
                        return;
                    }
                    Err(other) => {
                        error!(owner = %elector.inner.owner, error = %other, "campaign ended");
                        return;
                    }
                }
            }
        });
        events.stop = Some(stop_sender);
        events
    }
}

/// Completes once the elector-wide stop or a campaign's own stop is set.
struct StopSignal {
    elector: watch::Receiver<bool>,
    extra: Option<watch::Receiver<bool>>,
}

impl StopSignal {
    async fn stopped(&mut self) {
        let extra = async {
            match &mut self.extra {
                Some(extra) => {
                    let _ = extra.wait_for(|stop| *stop).await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = self.elector.wait_for(|stop| *stop) => {}
            () = extra => {}
        }
    }

    fn is_set(&self) -> bool {
        *self.elector.borrow() || self.extra.as_ref().is_some_and(|extra| *extra.borrow())
    }
}

impl<B: Backend> Inner<B> {
    fn core(&self) -> MutexGuard<'_, Core> {
        // Every critical section assigns whole values, so a poisoned lock
        // still guards a consistent state.
        self.core.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn lock_subscribers(&self) -> MutexGuard<'_, Vec<mpsc::UnboundedSender<Event>>> {
        self.subscribers.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn emit(&self, event: Event) {
        self.lock_subscribers().retain(|subscriber| subscriber.send(event.clone()).is_ok());
    }

    /// A new event stream, and the sender that feeds it.
    fn subscribe(&self) -> (mpsc::UnboundedSender<Event>, Events) {
        let (sender, receiver) = mpsc::unbounded_channel();
        self.lock_subscribers().push(sender.clone());
        (sender, Events { receiver, stop: None })
    }

    fn timing(&self) -> Timing {
        self.core().timing.clone()
    }

    fn nonce(&self) -> String {
        random_hex(self.entropy.as_ref(), 16)
    }

    /// A backoff of about `base`, jittered by ±25 % so contenders spread out.
    fn jittered(&self, base: Duration) -> Duration {
        let unit = (self.entropy.next_u64() % 1000) as u32; // 0..1000
        base * (750 + unit / 2) / 1000
    }

    /// The wall-clock time of the monotonic instant `at`, as the wall clock
    /// reads now. Only a planted bug needs it.
    #[cfg(feature = "planted")]
    fn wall_at(&self, at: Instant) -> std::time::SystemTime {
        let ago = self.clock.now().saturating_duration_since(at);
        self.clock.wall().checked_sub(ago).unwrap_or(std::time::UNIX_EPOCH)
    }

    async fn sleep_for(&self, duration: Duration) {
        self.clock.sleep_until(self.clock.now() + duration).await;
    }

    /// Runs a store call under the request timeout. `None` means it timed
    /// out and was abandoned.
    async fn timed<T>(&self, call: impl Future<Output = T>) -> Option<T> {
        let deadline = self.clock.now() + self.timing().request_timeout;
        tokio::select! {
            biased;
            result = call => Some(result),
            () = self.clock.sleep_until(deadline) => None,
        }
    }

    async fn read(&self) -> Result<Stored, BackendError> {
        self.timed(self.backend.read()).await.unwrap_or_else(|| Err(BackendError::Transient("read timed out".into())))
    }

    async fn write(&self, expected: Option<&Version>, record: &LeaseRecord) -> Result<Version, BackendError> {
        self.timed(self.backend.write(expected, record))
            .await
            .unwrap_or_else(|| Err(BackendError::Ambiguous("write timed out".into())))
    }

    /// Sleeps until `deadline`, or fails with [`ElectorError::Stopped`].
    async fn sleep_unless_stopped(&self, deadline: Instant, stop: &mut StopSignal) -> Result<(), ElectorError> {
        tokio::select! {
            biased;
            () = stop.stopped() => Err(ElectorError::Stopped),
            () = self.clock.sleep_until(deadline) => Ok(()),
        }
    }

    /// Campaigns until a term is won. Returns the term and whether it was
    /// taken from a holder that did not release (lock-delay applies).
    ///
    /// A stop interrupts reads and waits, never a takeover write: one
    /// abandoned mid-flight may land, and then nobody would hold the record
    /// it wrote while everyone waited out its TTL. The write is settled
    /// first and, if it landed, released.
    async fn acquire(&self, stop: &mut StopSignal) -> Result<(Held, bool), ElectorError> {
        let mut due: Option<Decision> = None;
        loop {
            let decision = match due.take() {
                Some(decision) => decision,
                None => {
                    let observed = tokio::select! {
                        biased;
                        () = stop.stopped() => return Err(ElectorError::Stopped),
                        observed = self.observe_for_campaign() => observed?,
                    };
                    match observed {
                        Some(decision) => decision,
                        None => {
                            self.sleep_unless_stopped(self.clock.now() + self.timing().poll_interval, stop).await?;
                            continue;
                        }
                    }
                }
            };
            match decision {
                Decision::Wait { until } => {
                    let now = self.clock.now();
                    let poll = now + self.timing().poll_interval;
                    let wake = until.map_or(poll, |until| until.min(poll));
                    self.sleep_unless_stopped(wake, stop).await?;
                    due = self.core().due(self.clock.now());
                }
                // Reported by `observe_for_campaign` on every read. This
                // process can never write here again (its highest generation
                // seen has no successor); the way out is a new key, and a
                // restart for processes that saw this one.
                Decision::Exhausted { .. } => {
                    self.sleep_unless_stopped(self.clock.now() + self.timing().poll_interval, stop).await?;
                }
                Decision::Take { expected, generation, involuntary } => {
                    let taken = self.take(expected.as_ref(), generation).await?;
                    if stop.is_set() {
                        self.give_back(taken, involuntary).await;
                        return Err(ElectorError::Stopped);
                    }
                    match taken {
                        Taken::Held(held) if self.clock.now() < held.ends_at => return Ok((held, involuntary)),
                        // The write landed so late that the term is already
                        // over; the next read finds our own record and
                        // replaces it at once.
                        Taken::Held(_) | Taken::No | Taken::Unknown { .. } => continue,
                    }
                }
            }
        }
    }

    /// Reads the key and decides. `None` means the read failed in a way
    /// worth retrying after a poll interval.
    async fn observe_for_campaign(&self) -> Result<Option<Decision>, ElectorError> {
        let result = self.read().await;
        let arrived = self.clock.now();
        let wall = self.clock.wall();
        let decision = match &result {
            Ok(stored) => self.core().decide(Observation::Record(stored), arrived, wall),
            Err(BackendError::NoLease) => self.core().decide(Observation::Missing, arrived, wall),
            Err(err @ BackendError::Corrupt { .. }) => {
                warn!(owner = %self.owner, error = %err, "lease record is unreadable; not taking over");
                self.emit(Event::Error { error: err.clone() });
                self.core().decide(Observation::Corrupt, arrived, wall)
            }
            Err(err) if err.is_fatal() => return Err(err.clone().into()),
            Err(err) => {
                debug!(owner = %self.owner, error = %err, "reading the lease failed");
                self.emit(Event::Error { error: err.clone() });
                return Ok(None);
            }
        };
        if let Decision::Exhausted { generation } = decision {
            let error = BackendError::Corrupt {
                version: result.as_ref().map(|stored| stored.version.clone()).unwrap_or_else(|_| Version::new("")),
                reason: RecordError::InvalidField {
                    field: "generation",
                    reason: format!(
                        "generation {generation} has no successor, so no further term can be fenced; \
                         move the lease to a new key"
                    ),
                },
            };
            warn!(owner = %self.owner, %error, "the lease's generation is exhausted; not taking over");
            self.emit(Event::Error { error });
        }
        Ok(Some(decision))
    }

    /// Tries to write a new term.
    async fn take(&self, expected: Option<&Version>, generation: Generation) -> Result<Taken, ElectorError> {
        let nonce = self.nonce();
        let record = self.core().record(generation, self.clock.wall(), nonce.clone(), false);
        let sent_at = self.clock.now();
        let result = self.write(expected, &record).await;
        let version = match result {
            Ok(version) => version,
            Err(BackendError::LeaseHeld | BackendError::NoLease) => {
                // The key changed under us: time the new version from scratch.
                self.core().forget_watch();
                return Ok(Taken::No);
            }
            Err(BackendError::Conflict(_)) => {
                let pause = self.jittered(self.timing().poll_interval / 4);
                self.sleep_for(pause).await;
                return Ok(Taken::No);
            }
            Err(err @ BackendError::Ambiguous(_)) => {
                self.emit(Event::Error { error: err });
                // Never act on an unknown outcome: read back and look for the
                // nonce. A read that fails leaves it unknown, and then the
                // next campaign round will find out.
                match self.read().await {
                    Ok(stored) if stored.record.nonce == nonce || planted::active(Bug::ActOnUnknownOutcome) => {
                        stored.version
                    }
                    read if may_still_land(&read, expected) => {
                        return Ok(Taken::Unknown { nonce, expected: expected.cloned() });
                    }
                    _ => return Ok(Taken::No),
                }
            }
            Err(err) if err.is_fatal() => return Err(err.into()),
            Err(err) => {
                self.emit(Event::Error { error: err });
                self.sleep_for(self.timing().poll_interval).await;
                return Ok(Taken::No);
            }
        };
        self.core().wrote(&record);
        let ends_at = self.core().lease_end(sent_at);
        Ok(Taken::Held(Held { version, record, sent_at, ends_at, pending: Vec::new() }))
    }

    /// Undoes a takeover that a stop overtook: releases the record if it
    /// landed, settling an unknown outcome by reading the nonce back for at
    /// most the release timeout. The term was never announced.
    ///
    /// A takeover from a holder that did not release is not released when
    /// a lock-delay is set: a released record would let the next leader
    /// skip its own delay while the old holder's requests may still drain.
    /// It is left to run out instead.
    async fn give_back(&self, taken: Taken, involuntary: bool) {
        let held = match taken {
            Taken::No => return,
            Taken::Held(held) => held,
            Taken::Unknown { nonce, expected } => {
                let deadline = self.clock.now() + self.timing().release_timeout;
                let settle = async {
                    loop {
                        match self.read().await {
                            Ok(stored) if stored.record.nonce == nonce => {
                                let ends_at = self.clock.now();
                                let (version, record) = (stored.version, stored.record);
                                break Some(Held { version, record, sent_at: ends_at, ends_at, pending: Vec::new() });
                            }
                            read if may_still_land(&read, expected.as_ref()) => {}
                            _ => break None,
                        }
                        self.sleep_for(self.timing().poll_interval / 4).await;
                    }
                };
                let settled = tokio::select! {
                    biased;
                    settled = settle => settled,
                    () = self.clock.sleep_until(deadline) => None,
                };
                let Some(held) = settled else {
                    warn!(owner = %self.owner, "stopped while a takeover's outcome was unknown; it may hold the lease \
                          until its TTL runs out");
                    return;
                };
                held
            }
        };
        if involuntary && !self.timing().lock_delay.is_zero() {
            info!(owner = %self.owner, generation = %held.record.generation,
                  "stopped while taking the lease from a holder that did not release; left to run out so the next \
                   leader still waits its lock-delay");
            return;
        }
        let end = self.release(&held).await;
        info!(owner = %self.owner, generation = %held.record.generation, end = ?end,
              "stopped while taking the lease; gave it back without starting");
    }

    /// Announces a term. The [`Elector::run`] stream `announce_to` gets the
    /// armed guard; every other subscriber a detached one, so a stream
    /// nobody reads cannot hold a release back.
    fn begin_term(
        &self,
        lease: Lease,
        context: LeaderContext,
        guard: WorkGuard,
        announce_to: Option<&mpsc::UnboundedSender<Event>>,
    ) {
        self.generation.store(lease.generation.get(), Ordering::Release);
        self.leading.store(true, Ordering::Release);
        info!(owner = %self.owner, generation = %lease.generation, "acquired the lease");
        let detached = Event::Acquired { lease: lease.clone(), context: context.clone(), guard: WorkGuard::detached() };
        let mut armed = Some(Event::Acquired { lease, context, guard });
        self.lock_subscribers().retain(|subscriber| {
            let event = match announce_to {
                Some(to) if to.same_channel(subscriber) => armed.take().unwrap_or_else(|| detached.clone()),
                _ => detached.clone(),
            };
            subscriber.send(event).is_ok()
        });
    }

    /// One renewal attempt, with its unknown outcomes resolved where a read
    /// can resolve them.
    async fn renew(&self, held: &Held, record: &LeaseRecord, sent_at: Instant) -> Renewal {
        let result = self.write(Some(&held.version), record).await;
        match result {
            Ok(version) => return Renewal::Renewed { version, sent_at },
            Err(BackendError::NoLease) => return Renewal::Lost(LossReason::Deleted),
            Err(err) if err.is_fatal() => return Renewal::Lost(LossReason::Failed(err)),
            Err(BackendError::Transient(message)) => {
                self.emit(Event::Error { error: BackendError::Transient(message) });
                return Renewal::NotApplied;
            }
            // LeaseHeld may mean our own earlier, unresolved renewal landed;
            // Ambiguous and Conflict leave the outcome to be read back.
            Err(err) => {
                if !matches!(err, BackendError::LeaseHeld) {
                    self.emit(Event::Error { error: err });
                }
            }
        }
        let read = match self.read().await {
            Ok(stored) => Some(stored),
            Err(BackendError::NoLease) => None,
            Err(_) => return Renewal::Unknown,
        };
        match self::core::resolve(read.as_ref(), &record.nonce, Some(&held.record.nonce)) {
            Resolution::Applied(version) => Renewal::Renewed { version, sent_at },
            Resolution::NotApplied => Renewal::NotApplied,
            Resolution::Vanished => Renewal::Lost(LossReason::Deleted),
            Resolution::Superseded => {
                // An earlier renewal whose outcome was unknown may have landed.
                let landed = read.and_then(|stored| {
                    let (_, sent_at) = held.pending.iter().find(|(nonce, _)| *nonce == stored.record.nonce)?;
                    Some(Renewal::Adopt { version: stored.version, record: stored.record, sent_at: *sent_at })
                });
                landed.unwrap_or(Renewal::Lost(LossReason::Superseded))
            }
        }
    }
}

impl Held {
    /// Records a write of ours that the store confirmed: the term now runs
    /// from its send time, and older unresolved writes can no longer land.
    fn confirm(&mut self, version: Version, record: LeaseRecord, sent_at: Instant, ends_at: Instant) {
        self.version = version;
        self.record = record;
        self.sent_at = sent_at;
        self.ends_at = ends_at;
        self.pending.clear();
    }
}

enum Renewal {
    Renewed {
        version: Version,
        sent_at: Instant,
    },
    /// An earlier renewal turned out to have landed.
    Adopt {
        version: Version,
        record: LeaseRecord,
        sent_at: Instant,
    },
    NotApplied,
    Unknown,
    Lost(LossReason),
}

enum HoldEnd<T> {
    WorkDone(T),
    Lost(LossReason),
}

/// Whether a conditional write whose outcome is unknown (its nonce is not
/// in `read`) may still land: the store still holds what it was conditional
/// on (`expected`, or nothing for a create), or the read failed and says
/// nothing.
fn may_still_land(read: &Result<Stored, BackendError>, expected: Option<&Version>) -> bool {
    match read {
        Ok(stored) => Some(&stored.version) == expected,
        Err(BackendError::NoLease) => expected.is_none(),
        Err(_) => true,
    }
}

/// How a takeover write turned out.
enum Taken {
    /// It landed; the term is ours (unless it landed too late to use).
    Held(Held),
    /// It did not land.
    No,
    /// Its reply was lost and reading back did not settle it: it may have
    /// landed, or land later while `expected` is still stored.
    Unknown { nonce: String, expected: Option<Version> },
}

/// Owns a term while it lasts. Dropped while still armed (the `lead` future
/// was dropped), it cancels the context and releases in the background.
struct TermGuard<B: Backend> {
    inner: Arc<Inner<B>>,
    held: Option<Held>,
    cancel: watch::Sender<bool>,
    /// Whether the term was announced and its work started; a term still in
    /// its lock-delay ends without events.
    started: bool,
}

impl<B: Backend> TermGuard<B> {
    /// Renews until the work returns or the term is lost.
    async fn hold<W: Future + ?Sized>(&mut self, mut work: Pin<&mut W>, stop: &mut StopSignal) -> HoldEnd<W::Output> {
        let inner = self.inner.clone();
        let timing = inner.timing();
        let Some(held) = self.held.as_mut() else {
            return HoldEnd::Lost(LossReason::Expired);
        };
        let mut next_renewal = held.sent_at + timing.renew_interval;
        let mut stop_seen = stop.is_set();
        if stop_seen {
            inner.end_term(&self.cancel);
        }
        // Only the planted wall-clock bug reads the wall clock here.
        #[cfg(feature = "planted")]
        let mut wall_sent = inner.wall_at(held.sent_at);
        loop {
            #[cfg(feature = "planted")]
            if planted::active(Bug::WallClockDeadline) {
                let elapsed = inner.clock.wall().duration_since(wall_sent).unwrap_or_default();
                held.ends_at = inner.clock.now() + timing.hold_for().saturating_sub(elapsed);
            }
            // Wait for the renewal time. The lease end comes first in every
            // select: stopping in time matters more than anything else.
            tokio::select! {
                biased;
                () = inner.clock.sleep_until(held.ends_at) => return HoldEnd::Lost(LossReason::Expired),
                output = work.as_mut() => return HoldEnd::WorkDone(output),
                () = inner.clock.sleep_until(next_renewal) => {}
                // A stop request cancels the context; the work then returns
                // and the term is released as usual.
                () = stop.stopped(), if !stop_seen => {
                    // The lease stays held and renewed until the work has
                    // stopped, but this elector no longer claims to lead.
                    stop_seen = true;
                    inner.end_term(&self.cancel);
                    if planted::active(Bug::ReleaseBeforeWorkStops) {
                        let _ = inner.release(held).await;
                        let output = work.as_mut().await;
                        self.held = None;
                        inner.leading.store(false, Ordering::Release);
                        return HoldEnd::WorkDone(output);
                    }
                    continue;
                }
            }
            let (nonce, record) = if planted::active(Bug::ReuseRecordBytes) {
                (held.record.nonce.clone(), held.record.clone())
            } else {
                let nonce = inner.nonce();
                let record = inner.core().record(held.record.generation, inner.clock.wall(), nonce.clone(), false);
                (nonce, record)
            };
            let sent_at = inner.clock.now();
            // Tracked until a renewal is confirmed: a timed-out write may
            // still land later, and must then be recognised as ours.
            if held.pending.len() == MAX_PENDING {
                held.pending.remove(0);
            }
            held.pending.push((nonce, sent_at));
            let outcome = tokio::select! {
                biased;
                () = inner.clock.sleep_until(held.ends_at) => return HoldEnd::Lost(LossReason::Expired),
                output = work.as_mut() => return HoldEnd::WorkDone(output),
                outcome = inner.renew(held, &record, sent_at) => outcome,
            };
            let retry = inner.jittered(timing.poll_interval.min(timing.renew_interval / 2));
            match outcome {
                Renewal::Renewed { version, sent_at } => {
                    inner.core().wrote(&record);
                    held.confirm(version, record, sent_at, inner.core().lease_end(sent_at));
                    #[cfg(feature = "planted")]
                    {
                        wall_sent = inner.wall_at(sent_at);
                    }
                    next_renewal = sent_at + timing.renew_interval;
                    debug!(owner = %inner.owner, generation = %held.record.generation, "renewed the lease");
                    // A term still in its lock-delay has not been announced.
                    if self.started {
                        inner.emit(Event::Renewed { generation: held.record.generation });
                    }
                }
                Renewal::Adopt { version, record, sent_at } => {
                    inner.core().wrote(&record);
                    held.confirm(version, record, sent_at, inner.core().lease_end(sent_at));
                    #[cfg(feature = "planted")]
                    {
                        wall_sent = inner.wall_at(sent_at);
                    }
                    // The adopted write is older than the attempt just made,
                    // so renew again soon.
                    next_renewal = inner.clock.now() + retry;
                }
                // Unapplied so far; pending writes stay tracked because a
                // delayed one can still land on our version.
                Renewal::NotApplied | Renewal::Unknown => {
                    if planted::active(Bug::LeadWhileUnreachable) {
                        held.ends_at = inner.core().lease_end(sent_at);
                    }
                    next_renewal = inner.clock.now() + retry;
                }
                Renewal::Lost(reason) => return HoldEnd::Lost(reason),
            }
        }
    }

    /// Ends the term involuntarily: cancels the context at once.
    fn lose(&mut self, reason: LossReason) {
        let generation = self.held.as_ref().map(|held| held.record.generation).unwrap_or_default();
        self.held = None;
        self.inner.end_term(&self.cancel);
        if !self.started {
            info!(owner = %self.inner.owner, %generation, %reason, "lost the lease during its lock-delay; \
                  the term never started");
            return;
        }
        info!(owner = %self.inner.owner, %generation, %reason, "lost the lease");
        self.inner.emit(Event::Lost { generation, reason: Some(reason) });
    }

    /// Ends the term voluntarily, after the work has returned.
    async fn release(&mut self) -> TermEnd {
        let Some(held) = self.held.take() else {
            return TermEnd::ReleaseUnconfirmed("no term was held".into());
        };
        // Stop leading locally first: the release must come after the
        // guarded work has stopped, never before.
        self.inner.end_term(&self.cancel);
        let end = self.inner.release(&held).await;
        let generation = held.record.generation;
        let reason = match &end {
            TermEnd::Released => {
                info!(owner = %self.inner.owner, %generation, "released the lease");
                None
            }
            TermEnd::ReleaseUnconfirmed(why) => {
                warn!(owner = %self.inner.owner, %generation, %why, "stopped leading; release not confirmed");
                Some(LossReason::ReleaseUnconfirmed(why.clone()))
            }
            TermEnd::Lost(reason) => Some(reason.clone()),
        };
        if self.started {
            self.inner.emit(Event::Lost { generation, reason });
        }
        end
    }
}

impl<B: Backend> Drop for TermGuard<B> {
    fn drop(&mut self) {
        let Some(held) = self.held.take() else { return };
        self.inner.end_term(&self.cancel);
        let generation = held.record.generation;
        if !self.started {
            // Dropped during its lock-delay: a release now would let the next
            // leader skip its own delay. The lease runs out instead.
            info!(owner = %self.inner.owner, %generation, "term dropped during its lock-delay; left to run out");
            return;
        }
        warn!(owner = %self.inner.owner, %generation, "term dropped while leading; releasing in the background");
        self.inner.emit(Event::Lost { generation, reason: Some(LossReason::Abandoned) });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let inner = self.inner.clone();
            runtime.spawn(async move {
                let _ = inner.release(&held).await;
            });
        }
    }
}

impl<B: Backend> Inner<B> {
    fn end_term(&self, cancel: &watch::Sender<bool>) {
        self.leading.store(false, Ordering::Release);
        cancel.send_replace(true);
    }

    /// Writes the released record (or, under the reference policy, deletes
    /// the record), within the release timeout.
    async fn release(&self, held: &Held) -> TermEnd {
        let deadline = self.clock.now() + self.timing().release_timeout;
        let attempt = async {
            if self.core().release_deletes() {
                return match self.backend.delete(&held.version).await {
                    Ok(()) => TermEnd::Released,
                    Err(err) => TermEnd::ReleaseUnconfirmed(err.to_string()),
                };
            }
            let mut expected = held.version.clone();
            // Every attempt writes fresh bytes (I8), and each attempt's nonce
            // is remembered: an earlier attempt may land after a later one
            // was refused, and is then still our release.
            let mut nonces: Vec<String> = Vec::with_capacity(2);
            let ours =
                |nonce: &str| held.pending.iter().any(|(pending, _)| pending == nonce) || nonce == held.record.nonce;
            // At most two attempts: the second only when an earlier write of
            // ours turns out to have landed (or not) and left our version.
            for _ in 0..2 {
                let nonce = self.nonce();
                let record = self.core().record(held.record.generation, self.clock.wall(), nonce.clone(), true);
                nonces.push(nonce);
                match self.backend.write(Some(&expected), &record).await {
                    Ok(_) => {
                        self.core().wrote(&record);
                        return TermEnd::Released;
                    }
                    Err(BackendError::NoLease) => {
                        return TermEnd::ReleaseUnconfirmed("the lease record is gone".into());
                    }
                    Err(err) => {
                        let Ok(stored) = self.backend.read().await else {
                            return TermEnd::ReleaseUnconfirmed(err.to_string());
                        };
                        if nonces.contains(&stored.record.nonce) {
                            return TermEnd::Released;
                        }
                        if !ours(&stored.record.nonce) {
                            return TermEnd::ReleaseUnconfirmed("another writer holds the lease now".into());
                        }
                        expected = stored.version;
                    }
                }
            }
            // Both attempts left our own record in place; one may still be
            // on its way. Look once more before saying it did not land.
            if let Ok(stored) = self.backend.read().await
                && nonces.contains(&stored.record.nonce)
            {
                return TermEnd::Released;
            }
            TermEnd::ReleaseUnconfirmed("the release did not land".into())
        };
        tokio::select! {
            biased;
            end = attempt => end,
            () = self.clock.sleep_until(deadline) => TermEnd::ReleaseUnconfirmed("the release timed out".into()),
        }
    }
}

/// A stream of [`Event`]s. Returned by [`Elector::subscribe`] and
/// [`Elector::run`]; from `run`, dropping it ends the campaign and releases
/// the lease if held.
#[derive(Debug)]
pub struct Events {
    receiver: mpsc::UnboundedReceiver<Event>,
    stop: Option<watch::Sender<bool>>,
}

impl Events {
    /// The next event, or `None` once the elector is gone.
    pub async fn next(&mut self) -> Option<Event> {
        self.receiver.recv().await
    }
}

impl futures_core::Stream for Events {
    type Item = Event;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        self.receiver.poll_recv(cx)
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        if let Some(stop) = &self.stop {
            stop.send_replace(true);
        }
    }
}

#[cfg(test)]
mod tests;
