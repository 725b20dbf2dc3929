//! [`TermGuard`]: owns a term while it lasts. It renews until the work
//! returns or the term is lost, and, dropped while still armed (a `lead`
//! future dropped mid-term), cancels the work and releases in the
//! background.

use super::*;
use crate::clock::sleep_until_checked;

/// Owns a term while it lasts. Dropped while still armed (the `lead` future
/// was dropped), it cancels the context and releases in the background.
pub(super) struct TermGuard<B: Backend> {
    pub(super) inner: Arc<Inner<B>>,
    pub(super) held: Option<Held>,
    /// Cancels the context, and tells it how long the term lasts.
    pub(super) cancel: watch::Sender<Validity>,
    /// Whether the term was announced and its work started; a term still in
    /// its lock-delay ends without events.
    pub(super) started: bool,
}

impl<B: Backend> TermGuard<B> {
    /// Renews until the work returns or the term is lost.
    pub(super) async fn hold<W: Future + ?Sized>(
        &mut self,
        mut work: Pin<&mut W>,
        stop: &mut StopSignal,
    ) -> HoldEnd<W::Output> {
        let inner = self.inner.clone();
        let timing = inner.timing();
        let Some(held) = self.held.as_mut() else {
            return HoldEnd::Lost(LossReason::Expired);
        };
        let mut next_renewal = held.sent_at + timing.renew_interval;
        // The longest a renewal of this term took to come back: the round
        // trip a last retry must leave room for (see `last_chance`).
        let mut slowest_renewal = Duration::ZERO;
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
                held.ends_at =
                    planted::wall_clock_deadline(inner.clock.now(), inner.clock.wall(), wall_sent, timing.hold_for());
            }
            // The context stops counting as valid at the term's end by
            // itself, so work woken from a pause never acts on a term the
            // elector has not yet seen end.
            self.cancel.send_if_modified(|validity| {
                let moved = validity.until != held.ends_at;
                validity.until = held.ends_at;
                moved
            });
            // Wait for the renewal time. The lease end comes first in every
            // select: stopping in time matters more than anything else. It is
            // read again every suspend check, because a timer fires late by
            // as long as the host slept, and the term may have ended in its
            // sleep.
            tokio::select! {
                biased;
                () = sleep_until_checked(inner.clock.as_ref(), held.ends_at) => return HoldEnd::Lost(LossReason::Expired),
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
            // So many unresolved renewals means a store that answers
            // nothing usable: no more are sent, and the term runs out.
            if held.pending.len() >= MAX_UNRESOLVED {
                warn!(owner = %inner.owner, generation = %held.record.generation, unresolved = held.pending.len(),
                      "too many renewals with unknown outcomes; letting the term run out");
                next_renewal = held.ends_at;
                continue;
            }
            let sent_at = inner.clock.now();
            // Tracked until a renewal is confirmed: a timed-out write may
            // still land later, and must then be recognised as ours. A
            // confirmed write clears them, and the term's end drops them.
            held.pending.push((nonce, sent_at));
            let outcome = tokio::select! {
                biased;
                () = sleep_until_checked(inner.clock.as_ref(), held.ends_at) => return HoldEnd::Lost(LossReason::Expired),
                output = work.as_mut() => return HoldEnd::WorkDone(output),
                outcome = inner.renew(held, &record, sent_at) => outcome,
            };
            // A renewal that did not go through is tried again a pause after
            // the failed attempt was *sent*, not after it ended: an attempt
            // whose reply was lost or refused is followed by a read-back,
            // which may itself retry, and counting the pause from its end
            // would space attempts out by that much more just when the term
            // is running short. Attempts still never overlap, so one that
            // took longer than the pause is followed at once, and the rate
            // stays at most one attempt per pause or per attempt's length.
            let now = inner.clock.now();
            let retry_at = last_chance(
                sent_at + inner.jittered(timing.poll_interval.min(timing.renew_interval / 2)),
                now,
                now.saturating_duration_since(sent_at).max(slowest_renewal),
                held.ends_at,
            );
            match outcome {
                Renewal::Renewed { version, sent_at } => {
                    slowest_renewal = slowest_renewal.max(now.saturating_duration_since(sent_at));
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
                    next_renewal = retry_at;
                }
                // Unapplied so far; pending writes stay tracked because a
                // delayed one can still land on our version. One the store
                // refused outright can never land: nothing to recognise.
                unapplied @ (Renewal::Refused | Renewal::NotApplied | Renewal::Unknown) => {
                    if matches!(unapplied, Renewal::Refused) {
                        held.pending.pop();
                    }
                    if planted::active(Bug::LeadWhileUnreachable) {
                        held.ends_at = inner.core().lease_end(sent_at);
                    }
                    next_renewal = retry_at;
                }
                Renewal::Lost(reason) => return HoldEnd::Lost(reason),
            }
        }
    }

    /// Ends the term involuntarily: cancels the context at once.
    pub(super) fn lose(&mut self, reason: LossReason) {
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
    pub(super) async fn release(&mut self) -> TermEnd {
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

/// When to try a renewal again after an attempt failed, given the jittered
/// pause's `retry_at`. A retry that may not come back before the term ends
/// (`ends_at`) is worth nothing: the term would be lost while it is in
/// flight. A retry is therefore sent at the latest two round trips before
/// the end (one for the attempt, one for the latency it varies by), so a
/// store that stops refusing just before the term would end still gets one
/// renewal in time. The `round_trip` is the longer of the failed attempt's
/// and the slowest renewal of the term that went through: a store refusing
/// a request may answer sooner than it applies a write (a 429 is cheap), and
/// the retry that counts is one that goes through.
/// It is brought forward only to an instant still to come, so it never
/// turns into a burst: the attempt made then leaves no room for another.
fn last_chance(retry_at: Instant, now: Instant, round_trip: Duration, ends_at: Instant) -> Instant {
    let latest = ends_at - round_trip * 2;
    if retry_at > latest && latest > now { latest.min(retry_at) } else { retry_at }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn a_retry_that_comes_back_in_time_is_left_alone() {
        // Failed at 1020 after a 20 ms round trip; the retry at 1200 is back
        // by 1220.
        assert_eq!(last_chance(at(1200), at(1020), ms(20), at(1500)), at(1200));
        // Two round trips before the end is still in time.
        assert_eq!(last_chance(at(1460), at(1320), ms(20), at(1500)), at(1460));
    }

    #[test]
    fn a_retry_that_would_come_back_too_late_is_brought_forward() {
        // The retry at 1490 might be back only after the end at 1500: it
        // goes at 1460, two round trips before the end.
        assert_eq!(last_chance(at(1490), at(1320), ms(20), at(1500)), at(1460));
        // Counted from a refusal that came back in 10 ms, the retry would go
        // at 1480, too late for a write that takes 20 ms to come back; the
        // guard passes the slowest renewal's round trip when it is longer.
        assert_eq!(last_chance(at(1490), at(1320), ms(10), at(1500)), at(1480));
    }

    #[test]
    fn a_last_chance_already_past_does_not_start_a_burst() {
        // The attempt sent at 1465 failed at 1485; 1500 − 40 has passed, so
        // the retry keeps its pause and the term runs out.
        assert_eq!(last_chance(at(1650), at(1485), ms(20), at(1500)), at(1650));
    }
}
