//! The elector's public vocabulary: its errors, the terms and leases it hands
//! out, the leader context and work guard the work runs under, the events it
//! reports, and what `observe` sees.

use super::*;

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
///
/// The context also knows the instant by which the elector steps down if no
/// renewal lands, and counts as cancelled from then on by itself. After a
/// process pause (a GC, a suspended VM) the work's own timers may fire
/// before the elector's task has run and cancelled anything; asking the
/// context then still gives the right answer.
#[derive(Clone)]
pub struct LeaderContext {
    pub(super) generation: Generation,
    pub(super) validity: watch::Receiver<Validity>,
    pub(super) clock: Arc<dyn Clock>,
}

/// How long a leader context is good for: until it is cancelled, and no
/// later than `until` on the elector's monotonic clock (moved on by every
/// confirmed renewal).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Validity {
    pub(super) cancelled: bool,
    pub(super) until: Instant,
}

impl fmt::Debug for LeaderContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderContext")
            .field("generation", &self.generation)
            .field("cancelled", &self.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl LeaderContext {
    /// The term's fencing token.
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// Whether leadership has ended.
    pub fn is_cancelled(&self) -> bool {
        let validity = *self.validity.borrow();
        validity.cancelled || self.clock.now() >= validity.until
    }

    /// Completes when leadership ends.
    pub async fn cancelled(&self) {
        let mut receiver = self.validity.clone();
        loop {
            let validity = *receiver.borrow_and_update();
            if validity.cancelled || self.clock.now() >= validity.until {
                return;
            }
            tokio::select! {
                biased;
                changed = receiver.changed() => {
                    // The sender is gone, which also ends leadership.
                    if changed.is_err() {
                        return;
                    }
                }
                // Looked at again at the top: a renewal may have moved the
                // end meanwhile.
                () = self.clock.sleep_until(validity.until) => {}
            }
        }
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
    pub(super) alive: Option<mpsc::Sender<std::convert::Infallible>>,
}

impl WorkGuard {
    /// A guard and the future that completes once it and its clones are gone.
    pub(super) fn armed() -> (WorkGuard, WorkStopped) {
        let (sender, receiver) = mpsc::channel(1);
        (WorkGuard { alive: Some(sender) }, WorkStopped(Some(receiver)))
    }

    /// A guard nothing waits for.
    pub(super) fn detached() -> WorkGuard {
        WorkGuard { alive: None }
    }

    /// Whether the elector waits for this guard before releasing.
    pub fn is_armed(&self) -> bool {
        self.alive.is_some()
    }
}

/// Completes once every clone of a [`WorkGuard`] is dropped; at once for a
/// term whose work is the caller's own future ([`Elector::lead`]).
pub(super) struct WorkStopped(pub(super) Option<mpsc::Receiver<std::convert::Infallible>>);

impl WorkStopped {
    pub(super) async fn wait(self) {
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
    /// elector carries on. A failed condition
    /// ([`BackendError::LeaseHeld`]: another writer got there first) is
    /// the protocol at work, not trouble, and is never reported here: it
    /// shows as a lost race, or as [`Event::Lost`] when it ends a term.
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
