//! What keeps a member's key work inside its term on the clock alone: each
//! key's task drops its work at the term's end ([`within_term`]), and one
//! watchdog per member ([`guard_terms`]) wakes every task again once the
//! term has ended, however late their own timers fire after a suspend.
//!
//! The member's loop stops keys too, but it also waits on the store: after
//! a pause or a suspend it may be in the middle of a request when the
//! process runs again. Nothing here waits on anything but the clock.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::context::Term;
use crate::clock::{Clock, Instant, sleep_until_checked};

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
/// loop and its [`guard_terms`] watchdog.
pub(super) type TermChannels = Arc<Mutex<BTreeMap<String, watch::Sender<Term>>>>;

/// Every key task of one run; dropping it (the run future dropped, as in a
/// crash) aborts them, so no work outlives its member.
///
/// A key being stopped has left `running` but keeps its term channel until
/// its task is gone: work winding down is guarded by the watchdog too.
#[derive(Default)]
pub(super) struct Tasks {
    running: BTreeMap<String, Task>,
    channels: TermChannels,
}

impl Tasks {
    /// The term channels, for the watchdog.
    pub fn channels(&self) -> TermChannels {
        self.channels.clone()
    }

    pub fn insert(&mut self, key: String, task: Task) {
        lock(&self.channels).insert(key.clone(), task.term.clone());
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
            lock(&self.channels).remove(key);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// The running keys, in key order.
    pub fn keys(&self) -> Vec<String> {
        self.running.keys().cloned().collect()
    }

    /// Sends `term` to every task, in key order.
    pub fn publish(&self, term: Term) {
        for task in self.running.values() {
            task.term.send_replace(term);
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
/// This guard needs nothing but the clock, so work never outlives the term
/// by more than a timer's lateness, or, after the host was suspended, by
/// more than the watchdog's suspend check: any message on the term channel
/// (a renewal, a cancellation, the watchdog's wake-up call) has it read
/// the clock again. Once the term is over (a leave, an eviction) its end
/// is never pushed back again.
pub(super) async fn within_term(
    work: impl Future<Output = ()>,
    mut term: watch::Receiver<Term>,
    clock: Arc<dyn Clock>,
) {
    tokio::pin!(work);
    let first = *term.borrow_and_update();
    let (mut deadline, mut ended) = (first.until, first.cancelled);
    // Messages keep coming after the term ended (the watchdog's wake-ups),
    // until the member drops the channel.
    let mut open = true;
    loop {
        tokio::select! {
            biased;
            () = clock.sleep_until(deadline) => {
                // A renewal may have moved the end while this task waited
                // to be polled: the term ended only if it still says so.
                let now = *term.borrow_and_update();
                if ended || now.cancelled || now.until <= deadline {
                    return;
                }
                deadline = now.until;
            }
            () = &mut work => return,
            changed = term.changed(), if open => match changed {
                Ok(()) => {
                    let now = *term.borrow_and_update();
                    if now.cancelled {
                        ended = true;
                    } else if !ended {
                        deadline = deadline.max(now.until);
                    }
                    // The timer above fires late by as long as the host
                    // slept; the clock itself says whether the end passed.
                    if clock.now() >= deadline {
                        return;
                    }
                }
                // The member is gone; dropping its tasks aborts this one.
                Err(_) => (ended, open) = (true, false),
            },
        }
    }
}

/// The member's watchdog: once the term has ended by the clock, it sends
/// every running key's term channel a wake-up (in key order), and each
/// key's [`within_term`] and `KeyContext::cancelled` read the clock again
/// and stop. Never returns; it runs beside the member's loop.
///
/// The term's end is waited for with [`sleep_until_checked`], so after a
/// suspend the keys stop within one suspend check of waking, though every
/// key's own timer fires late by the time the host slept. One watchdog per
/// member, rather than every key reading the clock that often, keeps the
/// cost per member and not per key.
pub(super) async fn guard_terms(
    clock: &dyn Clock,
    term_end: impl Fn() -> Option<Instant>,
    channels: &TermChannels,
) -> Infallible {
    let mut last_end: Option<Instant> = None;
    let mut woken_for: Option<Instant> = None;
    loop {
        // A term that is over (a leave, an eviction) publishes no end: its
        // keys run until the last end they were sent.
        let end = term_end().or(last_end);
        last_end = end;
        match end {
            Some(end) if woken_for != Some(end) => {
                sleep_until_checked(clock, end).await;
                // A renewal may have moved the end meanwhile.
                if term_end().is_some_and(|moved| moved > end) {
                    continue;
                }
                for channel in lock(channels).values() {
                    channel.send_modify(|_| {});
                }
                woken_for = Some(end);
            }
            // Nothing to guard yet, or already done: look again later.
            _ => clock.sleep_until(clock.now() + clock.suspend_check().max(clock.timer_resolution())).await,
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
