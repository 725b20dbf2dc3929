//! Per-node clocks: an offset, a drift rate and wall-clock steps, on the
//! library's [`Clock`] seam.
//!
//! turmoil gives every host the same notion of time; real machines do not.
//! A [`SimClock`] reads the host's (tokio) time and bends it: its monotonic
//! time runs fast or slow by `drift_ppb`, and so do its timers, and its wall
//! clock is offset and stepped. Because it is anchored to the simulation's
//! elapsed time rather than to the process start, a restarted node keeps the
//! same machine clock, as a real restart would.
//!
//! Every timer a simulated host arms goes through its `SimClock`, so the
//! clock also writes it on the host's [`Agenda`]. From the agendas the
//! runner knows when the next timer of any host is due, and steps over the
//! stretches before it in which nothing else can happen.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use hoplock::clock::{Clock, Instant, Sleep};
use serde::{Deserialize, Serialize};

const PPB: i128 = 1_000_000_000;

/// One node's clock, as a scenario describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockSpec {
    /// Wall-clock offset from true time, in milliseconds (any size).
    #[serde(default)]
    pub offset_ms: i64,
    /// Rate error in parts per billion; positive runs fast.
    #[serde(default)]
    pub drift_ppb: i64,
    /// Wall-clock steps (NTP jumps): at true time `at_ms`, move by `by_ms`.
    #[serde(default)]
    pub steps: Vec<ClockStep>,
}

/// A wall-clock step.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockStep {
    /// When, in simulated milliseconds since the start.
    pub at_ms: u64,
    /// How far; negative steps back.
    pub by_ms: i64,
}

/// A node's clock inside the simulation.
#[derive(Debug)]
pub struct SimClock {
    epoch: SystemTime,
    spec: ClockSpec,
    /// Simulated time since the start when this clock object was made.
    base: Duration,
    /// tokio time at the same moment.
    origin: tokio::time::Instant,
    /// While simulated time is below this (in ns since the start), the
    /// node is paused: no timer of its fires.
    paused_until: Arc<AtomicU64>,
    /// Wall steps the runner applied while the run went on.
    stepped_ms: Arc<AtomicI64>,
    /// Where this clock's armed timers are written down for the runner.
    agenda: Agenda,
    /// turmoil fires timers on its ticks, so up to one tick late.
    timer_resolution: Duration,
}

/// The runner's handle on one node's clock: stop-the-world pauses and wall
/// steps decided while the run goes on.
#[derive(Clone, Debug, Default)]
pub struct ClockControl {
    until_nanos: Arc<AtomicU64>,
    stepped_ms: Arc<AtomicI64>,
    agenda: Agenda,
}

impl ClockControl {
    /// A handle whose clock writes its timers into `agenda`.
    pub fn with_agenda(agenda: Agenda) -> ClockControl {
        ClockControl { agenda, ..ClockControl::default() }
    }

    /// Steps the node's wall clock by `by_ms` from now on.
    pub fn step_wall(&self, by_ms: i64) {
        self.stepped_ms.fetch_add(by_ms, Ordering::SeqCst);
    }

    /// Pauses the node's timers until simulated time `until`.
    pub fn pause_until(&self, until: Duration) {
        self.until_nanos.store(u64::try_from(until.as_nanos()).unwrap_or(u64::MAX), Ordering::SeqCst);
    }
}

impl SimClock {
    /// Makes the clock. Must be called inside the node's host, which owns the
    /// tokio time it reads.
    #[allow(clippy::disallowed_methods)] // Anchors the simulated clock to the host's tokio time.
    pub fn new(epoch: SystemTime, spec: ClockSpec, pause: &ClockControl) -> SimClock {
        let base = turmoil::sim_elapsed().unwrap_or_default();
        let origin = tokio::time::Instant::now();
        SimClock {
            epoch,
            spec,
            base,
            origin,
            paused_until: pause.until_nanos.clone(),
            stepped_ms: pause.stepped_ms.clone(),
            agenda: pause.agenda.clone(),
            timer_resolution: Duration::from_millis(1),
        }
    }

    /// Sets how late a timer may fire: the simulation's tick.
    pub fn with_timer_resolution(mut self, resolution: Duration) -> SimClock {
        self.timer_resolution = resolution;
        self
    }

    #[allow(clippy::disallowed_methods)] // The host's tokio time is the simulation's true time.
    fn true_elapsed(&self) -> Duration {
        self.base + tokio::time::Instant::now().saturating_duration_since(self.origin)
    }

    fn local_nanos(&self, true_elapsed: Duration) -> i128 {
        true_elapsed.as_nanos() as i128 * (PPB + self.spec.drift_ppb as i128) / PPB
    }
}

impl Clock for SimClock {
    fn wall(&self) -> SystemTime {
        let elapsed = self.true_elapsed();
        let stepped: i64 = self
            .spec
            .steps
            .iter()
            .filter(|step| Duration::from_millis(step.at_ms) <= elapsed)
            .map(|step| step.by_ms)
            .sum::<i64>()
            + self.stepped_ms.load(Ordering::SeqCst);
        let nanos = self.local_nanos(elapsed) + (self.spec.offset_ms as i128 + stepped as i128) * 1_000_000;
        let magnitude = Duration::from_nanos(u64::try_from(nanos.unsigned_abs()).unwrap_or(u64::MAX));
        if nanos >= 0 {
            self.epoch.checked_add(magnitude).unwrap_or(self.epoch)
        } else {
            self.epoch.checked_sub(magnitude).unwrap_or(SystemTime::UNIX_EPOCH)
        }
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.local_nanos(self.true_elapsed()).max(0)).unwrap_or(u64::MAX))
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        // Round up, so that on waking `now()` has reached the deadline.
        let rate = PPB + self.spec.drift_ppb as i128;
        let true_nanos = (deadline.as_nanos() as i128 * PPB + rate - 1) / rate;
        let true_deadline = Duration::from_nanos(u64::try_from(true_nanos).unwrap_or(u64::MAX));
        let at = self.origin + true_deadline.saturating_sub(self.base);
        // On the agenda from now rather than from the first poll: the runner
        // may look before this future is first polled.
        let agenda = self.agenda.clone();
        let mut armed = agenda.arm(true_deadline);
        let paused_until = self.paused_until.clone();
        let (origin, base) = (self.origin, self.base);
        Box::pin(async move {
            #[allow(clippy::disallowed_methods)] // The simulated clock's own timer, in host time.
            tokio::time::sleep_until(at).await;
            // A timer due during a pause fires when the pause ends, as it
            // would in a process that was stopped.
            loop {
                let until = Duration::from_nanos(paused_until.load(Ordering::SeqCst));
                let resume = origin + until.saturating_sub(base);
                #[allow(clippy::disallowed_methods)]
                let now = tokio::time::Instant::now();
                if resume <= now {
                    return;
                }
                // The timer now waits for the pause's end.
                drop(std::mem::replace(&mut armed, agenda.arm(until)));
                #[allow(clippy::disallowed_methods)]
                tokio::time::sleep_until(resume).await;
            }
        })
    }

    fn timer_resolution(&self) -> Duration {
        self.timer_resolution
    }
}

/// When one host's armed timers are due, in true simulated time since the
/// start of the run.
///
/// A timer is on the agenda from the moment its `Sleep` is made until that
/// future is dropped, whether it fired or was cancelled. A timer that has
/// fired but whose task has not run yet is therefore still on it, which is
/// what the runner needs: that task has work to do at that instant. A
/// cancelled timer whose future lives on only makes the runner look at the
/// host when it needn't have.
#[derive(Clone, Debug, Default)]
pub struct Agenda {
    /// Deadline in nanoseconds → how many armed timers share it.
    due: Arc<Mutex<BTreeMap<u64, usize>>>,
}

impl Agenda {
    /// The earliest deadline of any armed timer, if there is one.
    pub fn next_due(&self) -> Option<Duration> {
        self.lock().keys().next().map(|nanos| Duration::from_nanos(*nanos))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, usize>> {
        self.due.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes down a timer due at `at`; dropping the result strikes it out.
    fn arm(&self, at: Duration) -> Armed {
        let nanos = u64::try_from(at.as_nanos()).unwrap_or(u64::MAX);
        *self.lock().entry(nanos).or_default() += 1;
        Armed { agenda: self.clone(), nanos }
    }
}

/// One timer on an [`Agenda`], struck out when dropped.
#[derive(Debug)]
struct Armed {
    agenda: Agenda,
    nanos: u64,
}

impl Drop for Armed {
    fn drop(&mut self) {
        let mut due = self.agenda.lock();
        if let Some(count) = due.get_mut(&self.nanos) {
            *count -= 1;
            if *count == 0 {
                due.remove(&self.nanos);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agenda_shows_the_earliest_timer_until_it_is_dropped() {
        let agenda = Agenda::default();
        assert_eq!(agenda.next_due(), None);
        let late = agenda.arm(Duration::from_millis(300));
        let early = agenda.arm(Duration::from_millis(100));
        let twin = agenda.arm(Duration::from_millis(100));
        assert_eq!(agenda.next_due(), Some(Duration::from_millis(100)));
        drop(early);
        // Another timer shares that deadline: it stays.
        assert_eq!(agenda.next_due(), Some(Duration::from_millis(100)));
        drop(twin);
        assert_eq!(agenda.next_due(), Some(Duration::from_millis(300)));
        drop(late);
        assert_eq!(agenda.next_due(), None);
    }

    #[test]
    fn a_timer_due_during_a_pause_waits_on_the_agenda_for_its_end() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&runtime, async {
            let control = ClockControl::default();
            let clock = SimClock::new(SystemTime::UNIX_EPOCH, ClockSpec::default(), &control);
            control.pause_until(Duration::from_millis(500));
            let sleep = clock.sleep_until(clock.now() + Duration::from_millis(100));
            assert_eq!(control.agenda.next_due(), Some(Duration::from_millis(100)));
            let waiting = tokio::task::spawn_local(sleep);
            #[allow(clippy::disallowed_methods)]
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert_eq!(control.agenda.next_due(), Some(Duration::from_millis(500)), "re-armed for the pause's end");
            waiting.await.unwrap();
            assert_eq!(control.agenda.next_due(), None);
        });
    }
}
