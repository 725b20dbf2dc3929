//! Per-node clocks: an offset, a drift rate and wall-clock steps, on the
//! library's [`Clock`] seam.
//!
//! turmoil gives every host the same notion of time; real machines do not.
//! A [`SimClock`] reads the host's (tokio) time and bends it: its monotonic
//! time runs fast or slow by `drift_ppb`, and so do its timers, and its wall
//! clock is offset and stepped. Because it is anchored to the simulation's
//! elapsed time rather than to the process start, a restarted node keeps the
//! same machine clock, as a real restart would.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
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
    /// turmoil fires timers on its ticks, so up to one tick late.
    timer_resolution: Duration,
}

/// The runner's handle on one node's clock: stop-the-world pauses and wall
/// steps decided while the run goes on.
#[derive(Clone, Debug, Default)]
pub struct ClockControl {
    until_nanos: Arc<AtomicU64>,
    stepped_ms: Arc<AtomicI64>,
}

impl ClockControl {
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
        SimClock {
            epoch,
            spec,
            base,
            origin: tokio::time::Instant::now(),
            paused_until: pause.until_nanos.clone(),
            stepped_ms: pause.stepped_ms.clone(),
            timer_resolution: Duration::from_millis(1),
        }
    }

    /// Sets how late a timer may fire: the simulation's tick.
    pub fn with_timer_resolution(mut self, resolution: Duration) -> SimClock {
        self.timer_resolution = resolution;
        self
    }

    /// The tokio instant at simulated time `at`.
    fn tokio_at(&self, at: Duration) -> tokio::time::Instant {
        self.origin + at.saturating_sub(self.base)
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
        let at = self.tokio_at(true_deadline);
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
                #[allow(clippy::disallowed_methods)]
                tokio::time::sleep_until(resume).await;
            }
        })
    }

    fn timer_resolution(&self) -> Duration {
        self.timer_resolution
    }
}
