//! The context a key's work runs under: its round, and the signal to stop.

use std::fmt;
use std::sync::Arc;

use tokio::sync::watch;

use crate::clock::{Clock, Instant};
use crate::hrw::{KeyLease, Round};

/// How long a member's term is good for: until cancelled, and no later than
/// `until` on its monotonic clock (moved on by every confirmed write).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Term {
    pub cancelled: bool,
    pub until: Instant,
}

/// The right to act for one key, for as long as it is not cancelled.
///
/// A context is cancelled when the key moves to another member, when this
/// member's term ends (it could not renew in time, or it was evicted), and
/// when it leaves. Work must stop promptly once [`KeyContext::cancelled`]
/// completes: the member waits for it before it lets the key move, and a
/// member whose work does not stop by the end of its term stops renewing.
/// Stamp every downstream write with [`KeyContext::round`] and let the
/// downstream reject lower rounds: a paused process is stopped by nothing
/// else.
///
/// ```
/// # async fn example(ctx: hoplock::keyed::KeyContext) {
/// while !ctx.is_cancelled() {
///     // Write `ctx.key()` downstream, fenced by `ctx.round()`.
///     # break;
/// }
/// # }
/// ```
pub struct KeyContext {
    pub(crate) lease: KeyLease,
    pub(crate) incarnation: Arc<str>,
    pub(crate) stop: watch::Receiver<bool>,
    pub(crate) term: watch::Receiver<Term>,
    pub(crate) clock: Arc<dyn Clock>,
}

impl fmt::Debug for KeyContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyContext")
            .field("key", &self.lease.key)
            .field("round", &self.lease.round)
            .field("cancelled", &self.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl KeyContext {
    /// The key.
    pub fn key(&self) -> &str {
        &self.lease.key
    }

    /// The key's fencing token: the view in which this member incarnation
    /// started the key. It is the same for as long as the key stays here,
    /// and higher for every later holder.
    pub fn round(&self) -> Round {
        self.lease.round
    }

    /// The key, owner and round as one value, for fenced writes.
    pub fn lease(&self) -> &KeyLease {
        &self.lease
    }

    /// This member's incarnation: new on every start.
    pub fn incarnation(&self) -> &str {
        &self.incarnation
    }

    /// Whether this member may no longer act for the key.
    pub fn is_cancelled(&self) -> bool {
        let term = *self.term.borrow();
        *self.stop.borrow() || term.cancelled || self.clock.now() >= term.until
    }

    /// Completes once this member may no longer act for the key.
    ///
    /// It arms no timer: the member wakes it when the key must stop, when
    /// the term is cancelled or ends sooner, and, through its watchdog,
    /// when the term has ended by the clock; each wake-up reads the clock.
    pub async fn cancelled(&self) {
        let mut stop = self.stop.clone();
        let mut term_watch = self.term.clone();
        loop {
            let term = *term_watch.borrow_and_update();
            if *stop.borrow_and_update() || term.cancelled || self.clock.now() >= term.until {
                return;
            }
            tokio::select! {
                biased;
                // A closed channel means the member is gone, which ends the
                // right to act as well.
                changed = stop.changed() => if changed.is_err() { return },
                changed = term_watch.changed() => if changed.is_err() { return },
            }
        }
    }
}
