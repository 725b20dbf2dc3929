//! The async shell around [`super::core::Core`]: it reads and writes the
//! membership object, sleeps until the next thing is due, and runs one task
//! per key this member acts for.

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tracing::{debug, error, info, warn};

use super::context::{KeyContext, Term};
use super::core::{Core, Identity, Observed, Planned, Refusal, Timing};
use super::record::{Hash, MembershipRecord};
use super::term_guard::{Task, Tasks, Watchdog, within_term};
use super::{KeyedError, Snapshot};
use crate::backend::{BackendError, ObjectBackend};
use crate::clock::{Clock, Instant, SystemClock, sleep_until_checked};
use crate::entropy::{Entropy, OsEntropy, random_hex};
use crate::hrw::{KeyLease, KeyLeaseError, Leases, Member, Membership, MembershipError, WeightFn};
use crate::lease::MAX_OWNER_BYTES;
use crate::planted::{self, Bug};
use crate::term_timing::{self, TermTiming};
use in_flight::Watched;

mod in_flight;
mod reports;

/// How many times one step re-reads and writes again after its write lost
/// a race with another member's. Each retry follows a fresh read, so none
/// is blind; past this the step waits for the next read.
const WRITE_ATTEMPTS: usize = 6;

/// A fresh incarnation id: random, so a restarted process is never taken
/// for its predecessor.
fn new_incarnation(id: &str, entropy: &dyn Entropy) -> String {
    if planted::active(Bug::ReuseEntry) {
        return format!("{id}-incarnation");
    }
    random_hex(entropy, 16)
}

mod builder;
pub use builder::KeyedWriterBuilder;
mod handle;
pub use handle::KeyedHandle;

/// One member of a group that shares keys out by HRW over a membership
/// object, with at most one member acting for each key at any moment.
///
/// [`KeyedWriter::run`] joins the group, runs a task per key this member
/// owns under a [`KeyContext`], renews the member's entry, adopts new views
/// after stopping the keys that moved away, evicts members that stopped
/// renewing, and starts over as a new incarnation if its own entry was
/// evicted. [`KeyedWriter::leave`] ends it gracefully.
///
/// ```
/// use std::time::Duration;
/// use hoplock::backend::memory::MemoryBackend;
/// use hoplock::keyed::KeyedWriter;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), hoplock::keyed::KeyedError> {
/// let writer = KeyedWriter::builder(MemoryBackend::new())
///     .id("a")
///     .keys(["orders", "invoices"])
///     .ttl(Duration::from_secs(3))
///     // A new group: this member may create the membership object.
///     .create_at(1)
///     .build()?;
/// let handle = writer.handle();
/// let leave = writer.leaver();
/// tokio::spawn(async move {
///     // A lone member owns every key, once its first view is active.
///     tokio::time::sleep(Duration::from_secs(5)).await;
///     assert_eq!(handle.snapshot().running.len(), 2);
///     leave.leave();
/// });
/// writer
///     .run(|ctx| async move {
///         // Write ctx.key() downstream, fenced by ctx.round(), until told to stop.
///         ctx.cancelled().await;
///     })
///     .await?;
/// # Ok(())
/// # }
/// ```
pub struct KeyedWriter<O> {
    store: O,
    shared: Arc<Shared>,
    entropy: Arc<dyn Entropy>,
    leave: Arc<Leave>,
    /// Whether a missing object this member may not create was reported,
    /// so the warning comes once, not on every read.
    reported_absent: std::sync::atomic::AtomicBool,
    /// One term channel for every key task; only the planted
    /// `shared-term-watch` bug hands it out.
    #[cfg(feature = "planted")]
    shared_term: watch::Sender<Term>,
}

struct Shared {
    core: Mutex<Core>,
    clock: Arc<dyn Clock>,
    id: String,
}

impl Shared {
    fn core(&self) -> MutexGuard<'_, Core> {
        // The core holds no invariant a panic elsewhere could break halfway.
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Default)]
struct Leave {
    requested: std::sync::atomic::AtomicBool,
    notify: Notify,
}

/// Asks a running [`KeyedWriter`] to leave its group gracefully.
#[derive(Clone)]
pub struct Leaver(Arc<Leave>);

impl Leaver {
    /// Stops every key, removes this member's entry and makes
    /// [`KeyedWriter::run`] return.
    pub fn leave(&self) {
        self.0.requested.store(true, std::sync::atomic::Ordering::SeqCst);
        self.0.notify.notify_one();
    }
}

/// How one write went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sent {
    /// It landed, and the core knows.
    Landed,
    /// It lost a race (its condition failed): read again before the next.
    Lost,
    /// Its outcome is unknown and was read back already; if it lands
    /// later, a read that shows it renews the term.
    Unsettled,
}

/// What a read returned, once decoded.
enum Read {
    Found(MembershipRecord, crate::backend::Version),
    Missing,
    /// The store did not answer usably; nothing is learnt.
    Failed,
}

impl<O: ObjectBackend> KeyedWriter<O> {
    /// A builder for a member over `store`, the membership object.
    pub fn builder(store: O) -> KeyedWriterBuilder<O> {
        KeyedWriterBuilder {
            store,
            id: None,
            addr: String::new(),
            keys: Vec::new(),
            term: TermTiming::default(),
            read_interval: None,
            leave_timeout: None,
            hash: Hash::default(),
            capacity: NonZeroU32::MIN,
            create_at: None,
            adoption: true,
            clock: None,
            entropy: None,
        }
    }

    /// A cloneable view of this member's state, which also serves as its
    /// [`Membership`] and [`Leases`].
    pub fn handle(&self) -> KeyedHandle {
        KeyedHandle { shared: self.shared.clone() }
    }

    /// A handle that makes [`KeyedWriter::run`] leave gracefully.
    pub fn leaver(&self) -> Leaver {
        Leaver(self.leave.clone())
    }

    /// Runs the member until it leaves: `work` is called once for each key
    /// it starts, and the future it returns runs as its own task until the
    /// context is cancelled.
    ///
    /// Every key's work is dropped at the end of the member's term on the
    /// clock alone, whatever the store does; after the host was suspended,
    /// within one [`Clock::suspend_check`] of waking.
    ///
    /// Returns after a graceful leave, or with an error the caller must fix
    /// (configuration, a full object, a store that cannot do conditional
    /// writes). Dropping the future stops every key at once, as a crash
    /// would: the member runs no key from then on, its handle reports none
    /// and hands out no lease, and its entry is evicted after its TTL
    /// unless the member is run again (which goes on as after a long
    /// pause).
    ///
    /// The future `work` returns must not block its thread. A key counts as
    /// stopped only once its task is gone, aborted or not, and a task stuck
    /// inside a poll cannot go: the member then waits for it, renews
    /// nothing, and its term ends, so the others take its keys after the
    /// TTL, but this member acts for no key again.
    pub async fn run<F, Fut>(&self, work: F) -> Result<(), KeyedError>
    where
        F: Fn(KeyContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let mut tasks = Tasks::default();
        // It goes with the run, before the key tasks it guards.
        let shared = self.shared.clone();
        let watchdog = Watchdog::spawn(self.shared.clock.clone(), move || shared.core().term_end(), tasks.channels());
        // Declared after the tasks, so dropped before them: the handle stops
        // reporting keys before their tasks are aborted.
        let mut abandoned = AbandonOnDrop { shared: &self.shared, armed: true };
        let result = self.serve(&work, &mut tasks).await;
        abandoned.armed = false;
        drop(watchdog);
        result
    }

    /// The member's loop: reads, writes and starts and stops keys until a
    /// graceful leave or an error the caller must fix.
    async fn serve<F, Fut>(&self, work: &F, tasks: &mut Tasks) -> Result<(), KeyedError>
    where
        F: Fn(KeyContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let timing = self.timing();
        let mut next_read = self.now();
        let mut last_attempt: Option<Instant> = None;
        loop {
            if self.leave_requested() {
                return self.leave_now(tasks).await;
            }
            let retry_at = last_attempt.map_or(Instant::ZERO, |at| at + self.retry_gap(&timing));
            let wake = self.next_wake(next_read, retry_at, tasks);
            if wake > self.now() {
                tokio::select! {
                    biased;
                    () = self.leave.notify.notified() => continue,
                    () = self.shared.clock.sleep_until(wake) => {}
                }
            }
            let now = self.now();
            // After a pause (a GC, a frozen VM) the term may have ended
            // long ago: its keys stop before anything waits on the store.
            self.stop_if_term_lapsed(now, tasks).await;
            if now >= next_read || (now >= retry_at && self.write_due(now)) {
                last_attempt = Some(now);
                // A read has no effect on the store, so a leave asked for
                // while it is on its way drops it rather than wait for it.
                let (read, arrived) = tokio::select! {
                    biased;
                    () = self.leave.notify.notified() => continue,
                    read = self.read() => read,
                };
                next_read = match read {
                    Read::Failed => now + timing.read_interval.min(self.retry_gap(&timing)),
                    _ => arrived + timing.read_interval,
                };
                self.take_in(read, arrived, tasks).await;
                if planted::active(Bug::AdoptBeforeStop) {
                    self.write(tasks).await?;
                }
                self.stop_moved(tasks).await;
                // Keys this read gave the member start before its write, not
                // after: nothing a key may start on waits for the member's
                // own write (a leave or an eviction needs no adoption, and a
                // join's view is active only once read so), and the write
                // may take up to the request timeout.
                self.start_owned(work, tasks);
                self.write(tasks).await?;
            }
            self.stop_moved(tasks).await;
            self.start_owned(work, tasks);
        }
    }

    fn timing(&self) -> Timing {
        self.shared.core().timing.clone()
    }

    /// Whether [`Leaver::leave`] was called.
    fn leave_requested(&self) -> bool {
        self.leave.requested.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// How long after a read or write that could not be made (the store is
    /// down, the object is missing, corrupt or older than a view seen) the
    /// next try comes. While the term holds there is a term to save, so it
    /// is soon; once it has run out, trying at the read interval keeps a
    /// member that cannot make progress from hammering the store.
    fn retry_gap(&self, timing: &Timing) -> Duration {
        let soon = timing.renew_interval / 8;
        if self.shared.core().term_holds(self.now()) { soon } else { soon.max(timing.read_interval) }
    }

    fn now(&self) -> Instant {
        self.shared.clock.now()
    }

    /// Whether a write (renewal, adoption, eviction, join) is due without
    /// waiting for the next read.
    fn write_due(&self, now: Instant) -> bool {
        self.shared.core().write_due(now)
    }

    /// The next instant something is due: a read, a renewal, an eviction,
    /// an adoption, the end of the term while keys run, or the end of a
    /// hold on new keys.
    fn next_wake(&self, next_read: Instant, retry_at: Instant, tasks: &Tasks) -> Instant {
        let core = self.shared.core();
        let now = self.now();
        let mut wake = next_read;
        for due in [core.renewal_due(), core.next_eviction(), core.adoption_due()].into_iter().flatten() {
            wake = wake.min(due.max(retry_at));
        }
        if !tasks.is_empty()
            && let Some(end) = core.term_end()
        {
            wake = wake.min(end);
        }
        let held = core.hold_new_until();
        if held > now {
            wake = wake.min(held);
        }
        wake
    }

    /// One read of the object, bounded by the request timeout.
    async fn read(&self) -> (Read, Instant) {
        let timeout = self.timing().request_timeout;
        let outcome = self.timed(timeout, self.store.read_object()).await;
        let arrived = self.now();
        let read = match outcome {
            Some(Ok(object)) => match MembershipRecord::decode(&object.bytes) {
                Ok(record) => Read::Found(record, object.version),
                Err(reason) => {
                    error!(member = %self.shared.id, version = %object.version, %reason, "the membership object is corrupt; acting for no key until it is fixed");
                    Read::Failed
                }
            },
            Some(Err(BackendError::NoLease)) => Read::Missing,
            Some(Err(e)) => {
                warn!(member = %self.shared.id, error = %e, "reading the membership object failed");
                Read::Failed
            }
            None => {
                warn!(member = %self.shared.id, ?timeout, "reading the membership object timed out");
                Read::Failed
            }
        };
        (read, arrived)
    }

    async fn timed<T>(&self, timeout: Duration, call: impl Future<Output = T>) -> Option<T> {
        let deadline = self.now() + timeout;
        tokio::select! {
            biased;
            value = call => Some(value),
            () = self.shared.clock.sleep_until(deadline) => None,
        }
    }

    /// Feeds a read to the core and acts on what it means for this
    /// incarnation.
    async fn take_in(&self, read: Read, arrived: Instant, tasks: &mut Tasks) {
        // A read may renew the term (a write given up on shows up in it):
        // keys whose term ran out before it arrived stop first, so no
        // context is cancelled and then revived.
        self.stop_if_term_lapsed(arrived, tasks).await;
        let observed = {
            let mut core = self.shared.core();
            let before = core.newest().map(|seen| seen.record.view);
            let observed = match read {
                Read::Found(record, version) => core.observe(Some((record, version)), arrived),
                Read::Missing => core.observe(None, arrived),
                Read::Failed => return,
            };
            reports::new_view(&self.shared.id, before, core.newest().map(|seen| &**seen));
            observed
        };
        match observed {
            Observed::Current => {}
            Observed::Absent => reports::absent(&self.shared.id, &self.reported_absent),
            Observed::Vanished => {
                error!(member = %self.shared.id, "the membership object vanished, or holds another group's view, after a view was seen; acting for no key until a newer view shows up (an operator runs `hoplock members reset --view-floor N --wait D` with N above the last view, or starts one member with create_at above it)");
                self.stop_all(tasks).await;
            }
            Observed::Removed => {
                warn!(member = %self.shared.id, "this member's entry was removed; stopping every key and joining again as a new incarnation");
                self.stop_all(tasks).await;
                let incarnation = new_incarnation(&self.shared.id, self.entropy.as_ref());
                self.shared.core().reincarnate(incarnation);
            }
        }
    }

    /// Stops every key the core says must stop, and waits for their work.
    async fn stop_moved(&self, tasks: &mut Tasks) {
        let stop = self.shared.core().to_stop(self.now());
        if stop.is_empty() {
            self.publish_term(tasks);
            return;
        }
        let deadline = self.shared.core().term_end().unwrap_or(Instant::ZERO);
        self.stop_keys(tasks, &stop, deadline).await;
        self.publish_term(tasks);
    }

    async fn stop_all(&self, tasks: &mut Tasks) {
        let keys = tasks.keys();
        self.stop_keys(tasks, &keys, Instant::ZERO).await;
        self.publish_term(tasks);
    }

    /// Signals each key to stop, then waits for its task until `deadline`;
    /// work still running then is aborted, since the term it ran under has
    /// ended.
    async fn stop_keys(&self, tasks: &mut Tasks, keys: &[String], deadline: Instant) {
        let mut stopping = Vec::with_capacity(keys.len());
        for key in keys {
            if let Some(task) = tasks.remove(key) {
                let _ = task.stop.send(true);
                stopping.push((key.clone(), task));
            }
        }
        for (key, mut task) in stopping {
            // The term's end is read again every suspend check: a host that
            // slept while work wound down must not let it run on.
            let finished = self.now() < deadline
                && tokio::select! {
                    biased;
                    _ = &mut task.handle => true,
                    () = sleep_until_checked(self.shared.clock.as_ref(), deadline) => false,
                };
            if !finished && !task.handle.is_finished() {
                warn!(member = %self.shared.id, %key, "work did not stop before the term ended; aborting it");
                task.handle.abort();
                // An abort takes effect between two polls, and another
                // thread may be in the middle of one: the key counts as
                // stopped only once the task is gone.
                let _ = (&mut task.handle).await;
            }
            drop(task);
            tasks.stopped(&key);
            let round = self.shared.core().running().get(&key).copied();
            self.shared.core().stopped(&key);
            debug!(member = %self.shared.id, %key, round = ?round.map(|r| r.get()), "stopped key");
        }
    }

    /// How long the term holds, as key contexts see it.
    fn term(&self) -> Term {
        match self.shared.core().term_end() {
            Some(until) => Term { cancelled: false, until },
            None => Term { cancelled: true, until: Instant::ZERO },
        }
    }

    /// Tells every key context how long the term holds, in key order.
    fn publish_term(&self, tasks: &mut Tasks) {
        let term = self.term();
        tasks.publish(term);
        #[cfg(feature = "planted")]
        self.shared_term.send_replace(term);
    }

    /// Plans and sends writes until none is due, re-reading after each race
    /// lost and after each unknown outcome.
    async fn write(&self, tasks: &mut Tasks) -> Result<(), KeyedError> {
        let mut attempts = 0;
        while attempts < WRITE_ATTEMPTS {
            attempts += 1;
            // A leave asked for meanwhile is the next write: a renewal or an
            // adoption sent first would only hold it up by a round trip.
            if self.leave_requested() {
                return Ok(());
            }
            let nonce = random_hex(self.entropy.as_ref(), 16);
            let plan = self.shared.core().plan(self.now(), nonce);
            let planned = match plan {
                Ok(Some(planned)) => planned,
                Ok(None) => return Ok(()),
                Err(Refusal::Full) => return Err(KeyedError::Full),
                Err(Refusal::HashMismatch { stored }) => {
                    let ours = self.shared.core().me.hash;
                    return Err(KeyedError::Config(format!(
                        "the membership object uses {stored:?}, this member is configured with {ours:?}"
                    )));
                }
            };
            let against = planned.expected.clone();
            // A landed write needs no read, nor one whose outcome was read
            // back already.
            if self.send(planned, tasks).await? == Sent::Lost
                && !self.read_back(against.as_ref(), &mut attempts, tasks).await
            {
                return Ok(());
            }
            // A read that taught nothing new (it failed, or it was still
            // older than a view already seen) leaves the next write against
            // the version that just lost: it would lose again. The loop's
            // next read comes after the retry gap instead.
            if self.shared.core().version() == against.as_ref() {
                self.stop_moved(tasks).await;
                return Ok(());
            }
            // A landed write or a read-back may show a newer view: keys that
            // moved in it stop before the next write adopts it.
            self.stop_moved(tasks).await;
        }
        Ok(())
    }

    /// Sends one write and says how it went.
    async fn send(&self, planned: Planned, tasks: &mut Tasks) -> Result<Sent, KeyedError> {
        let timeout = self.timing().request_timeout;
        let sent_at = self.now();
        let bytes = planned.record.encode();
        let write = self.store.write_object(planned.expected.as_ref(), bytes);
        let outcome = match self.watch_write(write, &planned, sent_at, timeout, tasks).await {
            Watched::Answered(outcome) => outcome,
            Watched::SeenLanded => {
                debug!(member = %self.shared.id, kind = ?planned.kind, "a read showed the write landed before its answer came");
                self.publish_term(tasks);
                return Ok(Sent::Landed);
            }
            Watched::SeenLost => {
                debug!(member = %self.shared.id, kind = ?planned.kind, "a read showed the write lost its race before its answer came");
                self.shared.core().unresolved(&planned, sent_at);
                return Ok(Sent::Unsettled);
            }
        };
        let arrived = self.now();
        match outcome {
            Some(Ok(version)) => {
                self.stop_if_term_lapsed(arrived, tasks).await;
                let (kind, view, change) = (planned.kind, planned.record.view, planned.record.change.clone());
                self.shared.core().landed(planned, sent_at, version, arrived);
                reports::landed(&self.shared.id, kind, view, &change);
                self.publish_term(tasks);
                Ok(Sent::Landed)
            }
            Some(Err(BackendError::LeaseHeld | BackendError::NoLease)) => {
                debug!(member = %self.shared.id, kind = ?planned.kind, "lost a write race; reading again");
                self.shared.core().lost_against(planned.expected.as_ref());
                Ok(Sent::Lost)
            }
            Some(Err(e)) if e.is_fatal() => Err(KeyedError::Store(e)),
            failed => {
                // The write may have landed: read, then judge by nonce (I7).
                let reason = reports::unknown_outcome(failed, timeout);
                warn!(member = %self.shared.id, kind = ?planned.kind, %reason, "write outcome unknown; reading back");
                let (read, read_at) = self.read().await;
                let found = matches!(read, Read::Found(..));
                // Through take_in, so that a read-back showing this
                // incarnation's entry gone ends it like any other read.
                self.take_in(read, read_at, tasks).await;
                let landed = found && self.shared.core().settle(&planned, sent_at, arrived);
                if landed {
                    self.publish_term(tasks);
                    return Ok(Sent::Landed);
                }
                // It may still land, later than the read-back: a later read
                // that shows its nonce renews the term from its send.
                // A leave is not given up here: `leave_now` reads again and
                // sends another against the version it finds, until a read
                // shows the entry gone. If this one lands first, the next
                // loses its race; if the next lands first, this one does.
                self.shared.core().unresolved(&planned, sent_at);
                Ok(Sent::Unsettled)
            }
        }
    }

    /// A term that ran out while a write was on its way has cancelled every
    /// context; the keys stop for good before the write that renews the
    /// term counts, so no context is ever cancelled and then revived.
    async fn stop_if_term_lapsed(&self, now: Instant, tasks: &mut Tasks) {
        let lapsed = self.shared.core().term_end().is_some_and(|end| now >= end);
        if lapsed && !tasks.is_empty() {
            self.stop_all(tasks).await;
        }
    }

    /// Starts a task for every key the core says may start.
    fn start_owned<F, Fut>(&self, work: &F, tasks: &mut Tasks)
    where
        F: Fn(KeyContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        // A member asked to leave starts nothing it would stop at once.
        if self.leave_requested() {
            return;
        }
        let (start, incarnation) = {
            let mut core = self.shared.core();
            let start = core.to_start(self.now());
            for (key, round) in &start {
                core.started(key.clone(), *round);
            }
            (start, Arc::<str>::from(core.incarnation.as_str()))
        };
        if start.is_empty() {
            return;
        }
        // `work` is the caller's code: the core is not locked while it runs,
        // so it may look at this member's handle.
        let now = self.term();
        #[cfg(feature = "planted")]
        self.shared_term.send_replace(now);
        for (key, round) in start {
            let (stop, stopped) = watch::channel(false);
            let (term_sender, term) = watch::channel(now);
            #[cfg(feature = "planted")]
            let term = if planted::active(Bug::SharedTermWatch) { self.shared_term.subscribe() } else { term };
            let lease = KeyLease { key: key.clone(), owner: self.shared.id.clone(), round };
            let ctx = KeyContext {
                lease,
                incarnation: incarnation.clone(),
                stop: stopped,
                term: term.clone(),
                clock: self.shared.clock.clone(),
            };
            debug!(member = %self.shared.id, %key, round = round.get(), "started key");
            let guarded = within_term(work(ctx), term.clone(), self.shared.clock.clone());
            tasks.insert(key, Task { stop, term: term_sender, handle: tokio::spawn(guarded) });
        }
    }

    /// The graceful leave: every key stops (waiting for its work up to the
    /// leave timeout), then the entry is removed. Once the removal is sent
    /// this incarnation never acts again, whatever its outcome.
    async fn leave_now(&self, tasks: &mut Tasks) -> Result<(), KeyedError> {
        let deadline = self.now() + self.timing().leave_timeout;
        // Work may take until the term's end or the leave timeout to stop,
        // whichever comes first: read before leaving ends the term.
        let stop_by = self.shared.core().term_end().map_or(deadline, |end| end.min(deadline)).max(self.now());
        self.shared.core().begin_leave();
        let keys = tasks.keys();
        // The term is over for every key the moment leaving starts.
        self.publish_term(tasks);
        self.stop_keys(tasks, &keys, stop_by).await;
        // Whether the core has just taken in a read: a leave of unknown
        // outcome was read back already, and the next one is planned from
        // that read at once, which keeps the window for a lost race short.
        let mut read_back = false;
        while self.now() < deadline {
            if !read_back {
                let (read, arrived) = self.read().await;
                if matches!(read, Read::Failed) {
                    let retry = self.now() + self.timing().renew_interval / 8;
                    self.shared.clock.sleep_until(retry.min(deadline)).await;
                    continue;
                }
                self.take_in(read, arrived, tasks).await;
            }
            let plan = self.shared.core().plan(self.now(), String::new());
            let Ok(Some(planned)) = plan else { break };
            match self.send(planned, tasks).await? {
                Sent::Landed => break,
                _ if self.shared.core().phase == super::core::Phase::Finished => break,
                Sent::Unsettled => read_back = true,
                Sent::Lost => read_back = false,
            }
        }
        self.shared.core().finish();
        info!(member = %self.shared.id, "left the group");
        Ok(())
    }
}

/// Tells the core when a run's future is dropped before it returns (an
/// application that selects on a shutdown signal, or aborts the task the
/// member runs in). Every key's task is aborted with the future, so the
/// member runs no key from then on, and its handle must not report one or
/// hand out a lease on it. Its entry is left to be evicted after its TTL.
struct AbandonOnDrop<'a> {
    shared: &'a Shared,
    armed: bool,
}

impl Drop for AbandonOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.shared.core().abandoned();
        }
    }
}
