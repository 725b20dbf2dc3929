//! Watching a write of the membership object while it is on its way.
//!
//! Members renew by conditional writes of one object, so a renewal loses
//! whenever another member's write commits between the read it is based on
//! and its own commit. When writes take long to commit, that window is
//! long, races are lost often, and a member that waited for every lost
//! write's reply (up to the request timeout) could make only a few attempts
//! in its term. So a write that has not been answered after a quarter of
//! the request timeout is looked at by reading the object, and read again
//! as often while it stays unanswered:
//!
//! - the object carries this write's fresh nonce: it landed, and the term
//!   counts from its send (I7), without waiting for the reply;
//! - the object moved to another version without it: it can never land (it
//!   was conditional on a version that is gone), so the next attempt starts
//!   at once, against the version just read;
//! - the object is as it was: the write may still land, and is waited for.
//!
//! A store whose writes answer within a quarter of the request timeout
//! never sees these reads.
//!
//! A write that lost is read back before the next is planned. A read-back
//! that answered but shows nothing newer than the version the write lost
//! against is stale (a store whose reads lag), and a write planned on it
//! would lose again; so it is read again a retry gap later, within the
//! write's bound of attempts. A joiner on such a store joins in a few retry
//! gaps rather than a few read intervals.

use std::future::Future;
use std::time::Duration;

use super::{KeyedWriter, Read, Tasks};
use crate::backend::{BackendError, ObjectBackend, Version};
use crate::clock::Instant;
use crate::keyed::core::Planned;

/// How a watched write ended.
pub(super) enum Watched {
    /// The store answered (or not, within the request timeout: `None`).
    Answered(Option<Result<Version, BackendError>>),
    /// A read showed the write's nonce: it landed, and the core knows.
    SeenLanded,
    /// A read showed the object moved on without it: it never will land.
    SeenLost,
}

impl<O: ObjectBackend> KeyedWriter<O> {
    /// Reads the object back after a write against `against` lost, again
    /// every retry gap while the reads are stale, counting each read after
    /// the first in `attempts` (see the module docs). `false` when a leave
    /// was asked for meanwhile, which is the next write.
    pub(super) async fn read_back(&self, against: Option<&Version>, attempts: &mut usize, tasks: &mut Tasks) -> bool {
        loop {
            let (read, arrived) = self.read().await;
            let answered = !matches!(read, Read::Failed);
            self.take_in(read, arrived, tasks).await;
            if !answered || self.shared.core().version() != against || *attempts >= super::WRITE_ATTEMPTS {
                return true;
            }
            *attempts += 1;
            let retry = self.now() + self.timing().renew_interval / 8;
            tokio::select! {
                biased;
                () = self.leave.notify.notified() => return false,
                () = self.shared.clock.sleep_until(retry) => {}
            }
        }
    }

    /// Waits for `write`, sent at `sent_at`, reading the object while it is
    /// unanswered (see the module docs).
    pub(super) async fn watch_write<W>(
        &self,
        write: W,
        planned: &Planned,
        sent_at: Instant,
        timeout: Duration,
        tasks: &mut Tasks,
    ) -> Watched
    where
        W: Future<Output = Result<Version, BackendError>>,
    {
        let deadline = sent_at + timeout;
        let look_every = timeout / 4;
        // A write without a nonce (a leave) cannot be recognised in a read.
        let watchable = planned.nonce.is_some() && !look_every.is_zero();
        let mut next_look = sent_at + look_every;
        let mut write = std::pin::pin!(write);
        loop {
            tokio::select! {
                biased;
                answer = &mut write => return Watched::Answered(Some(answer)),
                () = self.shared.clock.sleep_until(deadline) => return Watched::Answered(None),
                () = self.shared.clock.sleep_until(next_look), if watchable && next_look < deadline => {}
            }
            // The write goes on while the object is read: both are polled.
            let (read, arrived) = {
                let mut read = std::pin::pin!(self.read());
                tokio::select! {
                    biased;
                    answer = &mut write => return Watched::Answered(Some(answer)),
                    () = self.shared.clock.sleep_until(deadline) => return Watched::Answered(None),
                    read = &mut read => read,
                }
            };
            next_look = self.now() + look_every;
            let found = matches!(read, Read::Found(..));
            self.take_in(read, arrived, tasks).await;
            if found && self.shared.core().settle(planned, sent_at, arrived) {
                return Watched::SeenLanded;
            }
            let moved_on = found && self.shared.core().version() != planned.expected.as_ref();
            if moved_on {
                return Watched::SeenLost;
            }
        }
    }
}
