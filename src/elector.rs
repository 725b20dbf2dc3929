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
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tracing::{debug, error, info, warn};

use crate::backend::{Backend, BackendError, Stored, Version};
use crate::clock::{Clock, Instant, SystemClock};
use crate::entropy::{Entropy, OsEntropy, random_hex};
use crate::lease::{Generation, LeaseRecord, MAX_OWNER_BYTES, RecordError};
use crate::planted::{self, Bug};

mod api;
mod builder;
pub mod core;
mod reads;
mod term_guard;

pub use self::api::{Elector, Events};
pub use self::builder::ElectorBuilder;
use self::term_guard::TermGuard;

use self::core::{Core, Decision, Observation, Resolution, Timing};
pub use self::core::{Policy, Reads};

mod types;
pub(crate) use types::*;
pub use types::{ElectorError, Event, LeaderContext, Lease, LossReason, Observed, Term, TermEnd, WorkGuard};

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
    /// Whether the store has been answering, for warnings and
    /// [`Elector::store_health`].
    health: Mutex<StoreHealth>,
}

/// How often a store that keeps failing is reported again.
const TROUBLE_REPORT_INTERVAL: Duration = Duration::from_secs(30);

/// Whether the lease store has been answering, as [`Elector::store_health`]
/// reports it. A store answers when it says anything about the record (a
/// record, "missing", "changed"); it fails when a request times out, cannot
/// connect, or gets a passing error.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreHealth {
    /// Since when every request has failed, if the last one did.
    pub failing_since: Option<Instant>,
    /// Failed requests in a row.
    pub consecutive_failures: u64,
    /// The last failure, with its cause.
    pub last_error: Option<BackendError>,
    /// When the failure streak was last logged.
    last_reported: Option<Instant>,
}

pub use crate::term_timing::DEFAULT_ASSUMED_TTL;

/// How many renewals of one term may be left unresolved before the holder
/// stops trying and lets the term run out: far more than any store that
/// answers at all leaves open, and a bound on the memory a term holds.
/// Stepping down is always safe; forgetting one that lands later is not.
const MAX_UNRESOLVED: usize = 4096;

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
    /// (they may still land): nonce and send time, oldest first. All of
    /// them up to [`MAX_UNRESOLVED`]: one forgotten and landing later would
    /// read as another writer's record, a loss nobody caused. Attempts the
    /// store refused outright are dropped, since they can never land.
    pending: Vec<(String, Instant)>,
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
        let result = self
            .timed(self.backend.read())
            .await
            .unwrap_or_else(|| Err(BackendError::Transient("read timed out".into())));
        crate::metrics::store_request(&self.owner, "read", result.as_ref().err());
        self.note_store(result.as_ref().err());
        result
    }

    async fn write(&self, expected: Option<&Version>, record: &LeaseRecord) -> Result<Version, BackendError> {
        let result = self
            .timed(self.backend.write(expected, record))
            .await
            .unwrap_or_else(|| Err(BackendError::Ambiguous("write timed out".into())));
        crate::metrics::store_request(&self.owner, "write", result.as_ref().err());
        self.note_store(result.as_ref().err());
        result
    }

    /// Keeps [`StoreHealth`] and says when the store stops or starts
    /// answering: a warning with the cause on the first failure of a streak
    /// and every [`TROUBLE_REPORT_INTERVAL`] while it lasts, and a note
    /// when it is over. Otherwise a store that cannot be reached would only
    /// show as an elector that never leads.
    fn note_store(&self, error: Option<&BackendError>) {
        let failed = matches!(error, Some(BackendError::Transient(_) | BackendError::Ambiguous(_)));
        let now = self.clock.now();
        let mut health = self.health.lock().unwrap_or_else(PoisonError::into_inner);
        if !failed {
            if let Some(since) = health.failing_since.take() {
                info!(
                    owner = %self.owner,
                    failures = health.consecutive_failures,
                    after = ?now.saturating_duration_since(since),
                    "the lease store answers again"
                );
            }
            *health = StoreHealth::default();
            return;
        }
        let error = error.cloned();
        let since = *health.failing_since.get_or_insert(now);
        health.consecutive_failures += 1;
        health.last_error = error.clone();
        let due =
            health.last_reported.is_none_or(|last| now.saturating_duration_since(last) >= TROUBLE_REPORT_INTERVAL);
        if due {
            health.last_reported = Some(now);
            let cause = error.map(|error| error.to_string()).unwrap_or_default();
            warn!(
                owner = %self.owner,
                failures = health.consecutive_failures,
                failing_for = ?now.saturating_duration_since(since),
                "the lease store is not answering; retrying: {cause}"
            );
        }
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
                    let read = self.core().next_read();
                    let wake = until.map_or(read, |until| until.min(read));
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
        let sent_at = self.clock.now();
        let result = self.read().await;
        let arrived = self.clock.now();
        let wall = self.clock.wall();
        self.core().schedule_read(result.as_ref().ok(), sent_at, arrived);
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
            Err(err @ (BackendError::LeaseHeld | BackendError::NoLease)) => {
                // The key changed under us: time the new version from scratch.
                let mut core = self.core();
                core.forget_watch();
                if expected.is_none() && matches!(err, BackendError::LeaseHeld) {
                    core.create_refused();
                }
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
        crate::metrics::leadership(&self.owner, true, lease.generation);
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
            Ok(version) => {
                crate::metrics::renewed(&self.owner, self.clock.now().saturating_duration_since(sent_at));
                return Renewal::Renewed { version, sent_at };
            }
            Err(BackendError::NoLease) => return Renewal::Lost(LossReason::Deleted),
            Err(err) if err.is_fatal() => return Renewal::Lost(LossReason::Failed(err)),
            Err(BackendError::Transient(message)) => {
                self.emit(Event::Error { error: BackendError::Transient(message) });
                return Renewal::Refused;
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
    /// Not applied so far; it may still land.
    NotApplied,
    /// Refused before it was applied: it can never land.
    Refused,
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

impl<B: Backend> Inner<B> {
    fn end_term(&self, cancel: &watch::Sender<Validity>) {
        if self.leading.swap(false, Ordering::AcqRel) {
            let generation = Generation(self.generation.load(Ordering::Acquire));
            crate::metrics::leadership(&self.owner, false, generation);
        }
        cancel.send_modify(|validity| validity.cancelled = true);
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

#[cfg(test)]
mod tests;
