//! [`Elector`], the public handle: `lead`, `lead_until`, `run`, `observe`,
//! `subscribe` and `stop`, and the [`Events`] stream. Each call drives the
//! campaign and term code of the parent module.

use super::*;
use crate::term_timing::TermTiming;

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
    pub(super) inner: Arc<Inner<B>>,
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

impl<B: Backend> Elector<B> {
    /// Starts configuring an elector over `backend`.
    pub fn builder(backend: B) -> ElectorBuilder<B> {
        ElectorBuilder {
            backend,
            owner: None,
            term: TermTiming::default(),
            poll_interval: None,
            release_timeout: Duration::from_secs(2),
            assumed_ttl: None,
            policy: Policy::Safe,
            reads: Reads::FollowRenewals,
            clock: None,
            entropy: None,
        }
    }

    /// Whether the lease store has been answering: for a health check, or
    /// to give up on a store that cannot be reached. Failures are also
    /// logged as warnings, with their cause, when a streak starts and every
    /// 30 s while it lasts.
    ///
    /// ```
    /// use hoplock::{Elector, backend::memory::MemoryBackend};
    ///
    /// let elector = Elector::builder(MemoryBackend::new()).owner("a").build()?;
    /// assert_eq!(elector.store_health().consecutive_failures, 0);
    /// # Ok::<(), hoplock::ElectorError>(())
    /// ```
    pub fn store_health(&self) -> StoreHealth {
        self.inner.health.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
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
        let (mut term, generation, validity) = loop {
            let (held, involuntary) = inner.acquire(&mut stop).await?;
            let generation = held.record.generation;
            let (cancel, validity) = watch::channel(Validity { cancelled: false, until: held.ends_at });
            let mut term = TermGuard { inner: inner.clone(), held: Some(held), cancel, started: false };
            let lock_delay = if involuntary && !planted::active(Bug::SkipLockDelay) {
                inner.timing().lock_delay
            } else {
                Duration::ZERO
            };
            if lock_delay.is_zero() {
                break (term, generation, validity);
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
                HoldEnd::WorkDone(()) => break (term, generation, validity),
                HoldEnd::Lost(reason) => term.lose(reason),
            }
        };

        term.started = true;
        let context = LeaderContext { generation, validity, clock: inner.clock.clone() };
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

/// A stream of [`Event`]s. Returned by [`Elector::subscribe`] and
/// [`Elector::run`]; from `run`, dropping it ends the campaign and releases
/// the lease if held.
#[derive(Debug)]
pub struct Events {
    pub(super) receiver: mpsc::UnboundedReceiver<Event>,
    pub(super) stop: Option<watch::Sender<bool>>,
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
