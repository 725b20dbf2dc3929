//! What keeps a member's key work inside its term on the clock alone: each
//! key's task drops its work at the term's end ([`within_term`]) when one
//! watchdog per member ([`guard_terms`]) wakes every task once the term has
//! ended, also after a suspend.
//!
//! The member's loop stops keys too, but it also waits on the store: after
//! a pause or a suspend it may be in the middle of a request when the
//! process runs again. Nothing here waits on anything but the clock.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::context::Term;
use crate::clock::{Clock, Instant, sleep_until_checked};
use crate::planted::{self, Bug};

/// A running key's task, its stop signal, and its copy of the term.
///
/// Each task has a term channel of its own rather than all of them sharing
/// the member's: a watch with many waiters wakes them in an order drawn
/// from tokio's own random numbers, not the seed, so a leave would wind
/// keys down in a different order from run to run. Sending to one channel
/// per task, in key order, wakes them in key order.
pub(super) struct Task {
    pub stop: watch::Sender<bool>,
    pub term: watch::Sender<Term>,
    pub handle: JoinHandle<()>,
}

/// A task dropped (a crash, the run future dropped, a stop cut short) is
/// aborted, so no work outlives its member.
impl Drop for Task {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// The term channel of every running key, by key, shared by the member's
/// loop and its [`guard_terms`] watchdog, and the call that tells the
/// watchdog a key started.
#[derive(Default)]
pub(super) struct Guarded {
    keys: Mutex<BTreeMap<String, watch::Sender<Term>>>,
    started: Notify,
}

/// What the member's loop shares with its watchdog.
pub(super) type TermChannels = Arc<Guarded>;

/// Every key task of one run; dropping it (the run future dropped, as in a
/// crash) aborts them, so no work outlives its member.
///
/// A key being stopped has left `running` but keeps its term channel until
/// its task is gone: work winding down is guarded by the watchdog too.
#[derive(Default)]
pub(super) struct Tasks {
    running: BTreeMap<String, Task>,
    channels: TermChannels,
    /// The term last given to every running task, while no task has
    /// started since: giving it again changes nothing (see
    /// [`Tasks::publish`]), and the member's loop gives it on every pass.
    published: Option<Term>,
}

impl Tasks {
    /// The term channels, for the watchdog.
    pub fn channels(&self) -> TermChannels {
        self.channels.clone()
    }

    pub fn insert(&mut self, key: String, task: Task) {
        self.published = None;
        lock(&self.channels.keys).insert(key.clone(), task.term.clone());
        self.channels.started.notify_one();
        self.running.insert(key, task);
    }

    /// Takes a key's task out to be stopped; its term channel stays with
    /// the watchdog until [`Tasks::stopped`].
    pub fn remove(&mut self, key: &str) -> Option<Task> {
        self.running.remove(key)
    }

    /// A key's task is gone: the watchdog has nothing more to wake there.
    pub fn stopped(&mut self, key: &str) {
        if !self.running.contains_key(key) {
            lock(&self.channels.keys).remove(key);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// The running keys, in key order.
    pub fn keys(&self) -> Vec<String> {
        self.running.keys().cloned().collect()
    }

    /// Gives every task `term`, in key order. Only a term that ends
    /// sooner than the one a task holds (cancelled, or an earlier end)
    /// wakes the task: a renewal that moves the end on is stored without a
    /// wake-up, and each task reads it at its next message ([`within_term`]
    /// and `KeyContext::cancelled` both look again then; the watchdog sends
    /// one when the term ends). A renewal every third of a TTL thus costs
    /// each key nothing but a store, rather than waking its guard and its
    /// work; a member with thousands of keys renews without a stampede of
    /// tasks.
    ///
    /// A cancellation keeps the last end the task was given: its work may
    /// wind down until then, and since renewals do not wake the task, the
    /// end it read last may be older than the one the term reached.
    ///
    /// Giving the same term twice leaves every task as the first time did
    /// (a later end is stored as it is, and a cancellation keeps the later
    /// of the two ends), so a term already given to every running task is
    /// not given again.
    pub fn publish(&mut self, term: Term) {
        if self.published == Some(term) {
            return;
        }
        self.published = Some(term);
        for task in self.running.values() {
            task.term.send_if_modified(|held| {
                let next =
                    if term.cancelled { Term { cancelled: true, until: held.until.max(term.until) } } else { term };
                let sooner = next.cancelled != held.cancelled || next.until < held.until;
                *held = next;
                sooner
            });
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A map of channels holds no invariant a panic could break halfway.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs one key's work until it returns or the member's term ends,
/// whichever comes first; at the term's end the work is dropped.
///
/// The task arms no timer of its own: a member with thousands of keys
/// would otherwise keep thousands of timers, each firing once more with
/// every end the key knew of. It wakes only on its term channel: a
/// cancellation or an earlier end ([`Tasks::publish`]), and the member's
/// watchdog ([`guard_terms`]), which wakes every key once the term has
/// ended by the clock. Each message has it read the clock, so work never
/// outlives the term by more than the watchdog's lateness, or, after the
/// host was suspended, its suspend check. Renewals reach it without a
/// message, and it reads the end they reached at its next message. Once
/// the term is over (a leave, an eviction) its end is never pushed back
/// again.
pub(super) async fn within_term(
    work: impl Future<Output = ()>,
    mut term: watch::Receiver<Term>,
    clock: Arc<dyn Clock>,
) {
    tokio::pin!(work);
    let first = *term.borrow_and_update();
    let (mut deadline, mut ended) = (first.until, first.cancelled);
    loop {
        if clock.now() >= deadline {
            return;
        }
        tokio::select! {
            biased;
            () = &mut work => return,
            changed = term.changed() => match changed {
                Ok(()) => {
                    // A cancelled term keeps its last end, until which the
                    // work may still wind down.
                    let now = *term.borrow_and_update();
                    if !ended {
                        deadline = deadline.max(now.until);
                    }
                    if now.cancelled {
                        ended = true;
                    }
                }
                // The member dropped the key's task and its channel: it is
                // gone, or has aborted this task already.
                Err(_) => return,
            },
        }
    }
}

/// The member's watchdog task ([`guard_terms`]); dropping it aborts the
/// task, so the watchdog ends with the member's run.
pub(super) struct Watchdog(JoinHandle<Infallible>);

impl Watchdog {
    /// Starts the watchdog as a task of its own, so that a member loop held
    /// up in a poll, or stuck on a request after a suspend, does not hold
    /// it up: it needs the clock and the term's end, never the store.
    pub fn spawn(
        clock: Arc<dyn Clock>,
        term_end: impl Fn() -> Option<Instant> + Send + Sync + 'static,
        channels: TermChannels,
    ) -> Watchdog {
        Watchdog(tokio::spawn(async move { guard_terms(clock.as_ref(), term_end, &channels).await }))
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The member's watchdog: once the term has ended by the clock, it sends
/// every running key's term channel a wake-up (in key order), and each
/// key's [`within_term`] and `KeyContext::cancelled` read the clock again
/// and stop. Never returns; the member runs it as a task of its own
/// ([`Watchdog`]).
///
/// It is the only timer that ends keys: the term's end is waited for with
/// [`sleep_until_checked`], so after a suspend the keys stop within one
/// suspend check of waking. One watchdog per member, rather than a timer
/// per key, keeps the cost per member and not per key.
async fn guard_terms(clock: &dyn Clock, term_end: impl Fn() -> Option<Instant>, channels: &TermChannels) -> Infallible {
    // A term that is over (a leave, an eviction) has no end of its own: its
    // keys wind down until the last end each was given, which a renewal
    // the watchdog never saw may have moved past the end it last read.
    let latest = || term_end().or_else(|| lock(&channels.keys).values().map(|channel| channel.borrow().until).max());
    let mut woken_for: Option<Instant> = None;
    loop {
        match latest() {
            Some(end) if woken_for != Some(end) => {
                sleep_until_checked(clock, end).await;
                // A renewal may have moved the end meanwhile.
                if latest().is_some_and(|moved| moved > end) {
                    continue;
                }
                if !planted::active(Bug::WatchdogAsleep) {
                    for channel in lock(&channels.keys).values() {
                        channel.send_modify(|_| {});
                    }
                }
                woken_for = Some(end);
            }
            // Nothing to guard yet, or already done: look again once a key
            // starts, and every suspend check besides. A term begins with
            // no key running, and its end only matters once one does.
            _ => {
                let again = clock.now() + clock.suspend_check().max(clock.timer_resolution());
                tokio::select! {
                    biased;
                    () = channels.started.notified() => {}
                    () = clock.sleep_until(again) => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::disallowed_methods)] // tokio's paused time is the test's true time.

    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::backend::memory::MemoryBackend;
    use crate::clock::{DEFAULT_SUSPEND_CHECK, SystemClock};
    use crate::keyed::KeyedWriter;

    /// Sends when it is dropped: the work it lives in is gone.
    struct Gone(Option<tokio::sync::mpsc::UnboundedSender<tokio::time::Instant>>);

    impl Drop for Gone {
        fn drop(&mut self) {
            if let Some(sender) = self.0.take() {
                let _ = sender.send(tokio::time::Instant::now());
            }
        }
    }

    /// A task for one key under `Tasks`, whose work never returns and
    /// reports when it is dropped.
    fn guarded_key(
        tasks: &mut Tasks,
        clock: &Arc<dyn Clock>,
        term: Term,
    ) -> tokio::sync::mpsc::UnboundedReceiver<tokio::time::Instant> {
        let (gone, dropped) = tokio::sync::mpsc::unbounded_channel();
        let (stop, _) = watch::channel(false);
        let (term_sender, receiver) = watch::channel(term);
        let gone = Gone(Some(gone));
        let work = async move {
            let _gone = gone;
            std::future::pending::<()>().await;
        };
        let handle = tokio::spawn(within_term(work, receiver, clock.clone()));
        tasks.insert("k".into(), Task { stop, term: term_sender, handle });
        dropped
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_move_the_end_on_without_waking_the_task_and_a_cancellation_keeps_the_last_end() {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let start = tokio::time::Instant::now();
        let at = |secs: u64| clock.now() + Duration::from_secs(secs);
        let mut tasks = Tasks::default();
        let mut dropped = guarded_key(&mut tasks, &clock, Term { cancelled: false, until: at(3) });
        // The member's term as the watchdog reads it from the core.
        let term_end = Arc::new(Mutex::new(Some(at(3))));
        let watchdog = {
            let read_end = term_end.clone();
            Watchdog::spawn(clock.clone(), move || *lock(&read_end), tasks.channels())
        };
        // Sees what the task's receiver sees: whether a message was sent.
        let observer = tasks.running["k"].term.subscribe();
        // Two renewals, a second apart: each moves the end on by a second.
        for _ in 0..2 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            *lock(&term_end) = Some(at(3));
            tasks.publish(Term { cancelled: false, until: at(3) });
        }
        assert!(!observer.has_changed().unwrap(), "a renewal woke the task");
        assert_eq!(observer.borrow().until, at(3), "the renewal was not stored");
        // The member leaves half a second later: the term is over, and the
        // work may wind down until the end the term last reached (5 s),
        // not the one the task was first given (3 s).
        tokio::time::sleep(Duration::from_millis(500)).await;
        *lock(&term_end) = None;
        tasks.publish(Term { cancelled: true, until: crate::clock::Instant::ZERO });
        assert!(observer.has_changed().unwrap(), "the cancellation did not wake the task");
        let gone = dropped.recv().await.unwrap().duration_since(start);
        assert_eq!(gone, Duration::from_secs(5), "the work was dropped at {gone:?}");
        drop(watchdog);
    }

    #[tokio::test(start_paused = true)]
    async fn without_the_watchdog_a_key_outlives_its_term() {
        // The key's task arms no timer of its own: the watchdog is what
        // ends it. This shows the test above depends on it.
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let mut tasks = Tasks::default();
        let mut dropped =
            guarded_key(&mut tasks, &clock, Term { cancelled: false, until: clock.now() + Duration::from_secs(1) });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(dropped.try_recv().is_err(), "the work was dropped without the watchdog");
    }

    #[tokio::test(start_paused = true)]
    async fn keys_whose_term_ended_while_the_host_slept_stop_within_one_suspend_check_of_waking() {
        let slept = Arc::new(AtomicU64::new(0));
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::with_fake_suspends(slept.clone()));
        let writer = KeyedWriter::builder(MemoryBackend::new())
            .id("a")
            .keys((0..20).map(|i| format!("k{i}")))
            .ttl(Duration::from_secs(3))
            .create_at(1)
            .clock(clock)
            .build()
            .unwrap();
        let handle = writer.handle();
        let (gone, mut stopped) = tokio::sync::mpsc::unbounded_channel();
        let member = tokio::spawn(async move {
            writer
                .run(move |ctx| {
                    let gone = Gone(Some(gone.clone()));
                    async move {
                        ctx.cancelled().await;
                        // Winding down takes long: only the term guard
                        // stops it in time.
                        tokio::time::sleep(Duration::from_secs(600)).await;
                        drop(gone);
                    }
                })
                .await
        });
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(handle.snapshot().running.len(), 20);
        // Just after a renewal, the host sleeps for a minute: every timer
        // the member armed fires a minute late.
        tokio::time::sleep(Duration::from_millis(50)).await;
        slept.fetch_add(60_000_000_000, Ordering::SeqCst);
        let woke = tokio::time::Instant::now();
        for _ in 0..20 {
            let at = stopped.recv().await.unwrap();
            let after = at.saturating_duration_since(woke);
            assert!(after <= DEFAULT_SUSPEND_CHECK + Duration::from_millis(1), "a key stopped {after:?} after waking");
        }
        member.abort();
    }
}
