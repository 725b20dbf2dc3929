//! Per-node clocks: an offset, a drift rate, wall-clock steps and host
//! suspends, on the library's [`Clock`] seam.
//!
//! turmoil gives every host the same notion of time; real machines do not.
//! A [`SimClock`] reads the host's (tokio) time and bends it: its monotonic
//! time runs fast or slow by `drift_ppb`, and so do its timers, and its wall
//! clock is offset and stepped. Because it is anchored to the simulation's
//! elapsed time rather than to the process start, a restarted node keeps the
//! same machine clock, as a real restart would.
//!
//! # Suspend
//!
//! A suspended host (a laptop asleep, a VM paused and restored) runs
//! nothing, like a paused process, and its clocks misbehave as real ones
//! do. A node's monotonic clock is one of two kinds ([`Monotonic`]):
//!
//! - `counts-suspend` (the default, what the production `SystemClock` reads
//!   on Linux and macOS: `CLOCK_BOOTTIME`, `CLOCK_MONOTONIC_RAW`): `now()`
//!   reads true elapsed time, the suspended stretch included;
//! - `stops-in-suspend` (what `CLOCK_MONOTONIC`, `mach_absolute_time` and so
//!   std's and tokio's `Instant` do): `now()` stands still while the host
//!   sleeps, and reads the suspended time short ever after.
//!
//! Timers are the same for both: they run on the clock that stops, as
//! tokio's timer wheel does, so a timer armed before a suspend fires late by
//! the time the host slept, whatever `now()` reads. This is what makes one
//! long sleep until a deadline unsafe, and what the library's
//! `sleep_until_checked` is for.
//!
//! A node whose world schedules no suspend for it (by name or as
//! `@leader`) reads its safety deadlines again only once a run
//! ([`quiet_suspend_check`]) rather than every 250 ms. Its clock never
//! stops, so every timer fires on time and the slices change nothing the
//! node does; they would only make the runner step to each of them, which
//! costs elector worlds about a third more CPU. Every node of a world that
//! schedules a suspend runs with the library's default.
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
    /// What the monotonic clock does while the host is suspended.
    #[serde(default)]
    pub monotonic: Monotonic,
}

impl ClockSpec {
    /// How much true time `local` takes on this clock, rounded up, so that
    /// a timer set by it never fires before `local` has passed on the clock.
    pub fn true_duration(&self, local: Duration) -> Duration {
        let rate = PPB + self.drift_ppb as i128;
        let nanos = (local.as_nanos() as i128 * PPB + rate - 1) / rate;
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// What a node's monotonic clock does while its host is suspended. Timers
/// run late by the suspended time under both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Monotonic {
    /// `now()` counts the time the host slept (`CLOCK_BOOTTIME`,
    /// `CLOCK_MONOTONIC_RAW`): what the production clock reads on Linux and
    /// macOS.
    #[default]
    CountsSuspend,
    /// `now()` stands still while the host sleeps (`CLOCK_MONOTONIC`, and so
    /// std's and tokio's `Instant`): what the production clock read before
    /// it counted suspend, and still reads where the platform cannot.
    StopsInSuspend,
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
    /// The host's suspends so far, in true time since the start.
    suspends: Suspends,
    /// Where this clock's armed timers are written down for the runner.
    agenda: Agenda,
    /// turmoil fires timers on its ticks, so up to one tick late.
    timer_resolution: Duration,
    /// How often safety deadlines are read again while waited for.
    suspend_check: Duration,
}

/// The runner's handle on one node's clock: stop-the-world pauses, host
/// suspends and wall steps decided while the run goes on.
#[derive(Clone, Debug, Default)]
pub struct ClockControl {
    until_nanos: Arc<AtomicU64>,
    stepped_ms: Arc<AtomicI64>,
    suspends: Suspends,
    agenda: Agenda,
}

/// `stretches` (from, until) in order, merged where they overlap or touch:
/// how a host's suspends stop its clock, read here and by the fenced
/// downstream, which replays a writer's timers after the run.
pub(crate) fn merged<T: Ord + Copy>(mut stretches: Vec<(T, T)>) -> Vec<(T, T)> {
    stretches.sort_unstable();
    let mut merged: Vec<(T, T)> = Vec::with_capacity(stretches.len());
    for (from, until) in stretches {
        match merged.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(until),
            _ => merged.push((from, until)),
        }
    }
    merged
}

/// The stretches of true time (from, until) in which one host was
/// suspended, in order and apart from one another.
#[derive(Clone, Debug, Default)]
struct Suspends(Arc<Mutex<Vec<(Duration, Duration)>>>);

impl Suspends {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Duration, Duration)>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a suspend, merged into any it overlaps.
    fn add(&self, from: Duration, until: Duration) {
        let mut all = self.lock();
        all.push((from, until));
        *all = merged(std::mem::take(&mut *all));
    }

    /// How long the host was suspended before true time `at`.
    fn before(&self, at: Duration) -> Duration {
        self.lock().iter().map(|&(from, until)| until.min(at).saturating_sub(from)).sum()
    }

    /// True time `at` on the clock that stops in suspend.
    fn stopping(&self, at: Duration) -> Duration {
        at.saturating_sub(self.before(at))
    }

    /// When the clock that stops in suspend reaches `stopping`, in true
    /// time, as far as the suspends known now tell.
    fn when_stopping_reaches(&self, stopping: Duration) -> Duration {
        let mut at = stopping;
        for &(from, until) in self.lock().iter() {
            if from < at {
                at += until - from;
            }
        }
        at
    }
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
        // A shorter pause or suspend during a longer one does not end it.
        self.until_nanos.fetch_max(u64::try_from(until.as_nanos()).unwrap_or(u64::MAX), Ordering::SeqCst);
    }

    /// Suspends the host from `from` until `until`: the process is paused,
    /// and the clock that stops in suspend stands still meanwhile.
    pub fn suspend(&self, from: Duration, until: Duration) {
        self.suspends.add(from, until);
        self.pause_until(until);
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
            suspends: pause.suspends.clone(),
            agenda: pause.agenda.clone(),
            timer_resolution: Duration::from_millis(1),
            suspend_check: hoplock::clock::DEFAULT_SUSPEND_CHECK,
        }
    }

    /// Sets how often safety deadlines are read again while waited for
    /// (`Clock::suspend_check`).
    pub fn with_suspend_check(mut self, check: Duration) -> SimClock {
        self.suspend_check = check;
        self
    }

    /// How much true time `local` takes on this clock (see
    /// [`ClockSpec::true_duration`]): how long a timer armed for `local`
    /// waits while nothing holds the host.
    pub fn true_duration(&self, local: Duration) -> Duration {
        self.spec.true_duration(local)
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
        let elapsed = match self.spec.monotonic {
            Monotonic::CountsSuspend => self.true_elapsed(),
            Monotonic::StopsInSuspend => self.suspends.stopping(self.true_elapsed()),
        };
        Instant::from_nanos(u64::try_from(self.local_nanos(elapsed).max(0)).unwrap_or(u64::MAX))
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        // Rounded up, so that on waking `now()` has reached the deadline.
        let true_deadline = self.spec.true_duration(Duration::from_nanos(deadline.as_nanos()));
        // The timer runs on the clock that stops in suspend. A clock that
        // reads the same timeline fires it at the deadline's reading there;
        // one that counts suspend arms it for the time left now, so a
        // suspend from here on makes it late.
        let target = match self.spec.monotonic {
            Monotonic::StopsInSuspend => true_deadline,
            Monotonic::CountsSuspend => true_deadline.saturating_sub(self.suspends.before(self.true_elapsed())),
        };
        let fires = self.suspends.when_stopping_reaches(target);
        // On the agenda from now rather than from the first poll: the runner
        // may look before this future is first polled.
        let agenda = self.agenda.clone();
        let mut armed = agenda.arm(fires);
        let paused_until = self.paused_until.clone();
        let suspends = self.suspends.clone();
        let (origin, base) = (self.origin, self.base);
        Box::pin(async move {
            let mut fires = fires;
            loop {
                #[allow(clippy::disallowed_methods)] // The simulated clock's own timer, in host time.
                tokio::time::sleep_until(origin + fires.saturating_sub(base)).await;
                // A suspend that began meanwhile stopped the timer's clock:
                // it fires that much later.
                #[allow(clippy::disallowed_methods)]
                let now = base + tokio::time::Instant::now().saturating_duration_since(origin);
                if suspends.stopping(now) >= target {
                    break;
                }
                fires = suspends.when_stopping_reaches(target);
                drop(std::mem::replace(&mut armed, agenda.arm(fires)));
            }
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

    fn suspend_check(&self) -> Duration {
        self.suspend_check
    }
}

/// The suspend check of a node no suspend can reach: longer than any run.
pub fn quiet_suspend_check() -> Duration {
    hoplock::lease::MAX_TTL
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
    pub(crate) fn arm(&self, at: Duration) -> Armed {
        let nanos = u64::try_from(at.as_nanos()).unwrap_or(u64::MAX);
        *self.lock().entry(nanos).or_default() += 1;
        Armed { agenda: self.clone(), nanos }
    }
}

/// One timer on an [`Agenda`], struck out when dropped.
#[derive(Debug)]
pub(crate) struct Armed {
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

    /// Arms a 1 s timer at 0, suspends the host from 0.2 s to 5.2 s, and
    /// returns (true time the timer fired, the clock's reading then, the
    /// reading at the start).
    fn timer_across_a_suspend(monotonic: Monotonic) -> (Duration, Duration) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&runtime, async {
            let control = ClockControl::default();
            let spec = ClockSpec { monotonic, ..ClockSpec::default() };
            let clock = SimClock::new(SystemTime::UNIX_EPOCH, spec, &control);
            #[allow(clippy::disallowed_methods)]
            let start = tokio::time::Instant::now();
            let timer = tokio::task::spawn_local(clock.sleep_until(clock.now() + Duration::from_secs(1)));
            #[allow(clippy::disallowed_methods)]
            tokio::time::sleep(Duration::from_millis(200)).await;
            control.suspend(Duration::from_millis(200), Duration::from_millis(5_200));
            timer.await.unwrap();
            let fired = start.elapsed();
            (fired, clock.now().saturating_duration_since(Instant::ZERO))
        })
    }

    #[test]
    fn a_timer_armed_before_a_suspend_fires_late_by_it_on_either_kind_of_clock() {
        // Due at 1 s; the host slept 5 s of it away: it fires at 6 s.
        let (fired, reads) = timer_across_a_suspend(Monotonic::CountsSuspend);
        assert_eq!(fired, Duration::from_secs(6));
        assert_eq!(reads, Duration::from_secs(6), "a clock that counts suspend reads true time");
        let (fired, reads) = timer_across_a_suspend(Monotonic::StopsInSuspend);
        assert_eq!(fired, Duration::from_secs(6));
        assert_eq!(reads, Duration::from_secs(1), "a clock that stops in suspend reads the time awake");
    }

    #[test]
    fn suspends_merge_and_map_between_the_two_timelines() {
        let suspends = Suspends::default();
        suspends.add(Duration::from_secs(10), Duration::from_secs(12));
        suspends.add(Duration::from_secs(11), Duration::from_secs(15));
        suspends.add(Duration::from_secs(20), Duration::from_secs(21));
        assert_eq!(suspends.before(Duration::from_secs(30)), Duration::from_secs(6));
        assert_eq!(suspends.stopping(Duration::from_secs(13)), Duration::from_secs(10));
        // 14 s awake is reached at 14 + 5 (the first suspend) = 19 s; 16 s
        // awake only after the second one too, at 22 s.
        assert_eq!(suspends.when_stopping_reaches(Duration::from_secs(14)), Duration::from_secs(19));
        assert_eq!(suspends.when_stopping_reaches(Duration::from_secs(16)), Duration::from_secs(22));
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
