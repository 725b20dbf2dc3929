//! The time seam.
//!
//! Every reading of time in the library goes through a [`Clock`]: wall time
//! (used only for the informational `expires_at` field and for logs), a
//! monotonic instant (used for every safety decision), and sleeping until a
//! monotonic deadline. Sleeping belongs to the clock rather than to tokio
//! because a clock that runs fast or slow must also stretch or shrink its
//! timers; a simulated drift that only changed the readings would hide the
//! bugs it exists to find.
//!
//! Architecture invariant: nothing outside this module reads the system
//! clock. Clippy's `disallowed_methods` enforces it for the rest of the crate.

use std::fmt;
use std::future::Future;
use std::ops::{Add, Sub};
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime};

/// A point on one clock's monotonic timeline, in nanoseconds since that
/// clock's origin.
///
/// Instants from different clocks are not comparable; the type does not stop
/// you, so keep each clock's instants to itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant {
    nanos: u64,
}

impl Instant {
    /// The clock's origin.
    pub const ZERO: Instant = Instant { nanos: 0 };

    /// An instant `nanos` nanoseconds after the origin.
    pub const fn from_nanos(nanos: u64) -> Instant {
        Instant { nanos }
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.nanos
    }

    /// Time from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.nanos.saturating_sub(earlier.nanos))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;

    /// Saturates at the far end of the timeline instead of overflowing, so a
    /// record with an absurd TTL means "never" rather than a panic.
    fn add(self, rhs: Duration) -> Instant {
        let rhs = u64::try_from(rhs.as_nanos()).unwrap_or(u64::MAX);
        Instant { nanos: self.nanos.saturating_add(rhs) }
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;

    fn sub(self, rhs: Duration) -> Instant {
        let rhs = u64::try_from(rhs.as_nanos()).unwrap_or(u64::MAX);
        Instant { nanos: self.nanos.saturating_sub(rhs) }
    }
}

/// A boxed sleep, so [`Clock`] stays object safe.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Where the library gets its time.
///
/// Production code uses [`SystemClock`]. Tests and the simulator inject a
/// [`DriftingClock`] (or their own implementation) to model offset, drift and
/// steps.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Wall-clock time. It may jump in either direction; the library uses it
    /// only for information, never to decide who leads.
    fn wall(&self) -> SystemTime;

    /// Monotonic time on this clock's own timeline. It never goes back.
    fn now(&self) -> Instant;

    /// Completes once [`Clock::now`] has reached `deadline`.
    fn sleep_until(&self, deadline: Instant) -> Sleep;

    /// How late a timer may fire after its deadline. tokio's timers have a
    /// resolution of one millisecond; a simulator that advances time in
    /// ticks fires up to one tick late. The elector refuses a stop margin
    /// shorter than this, because the margin is what absorbs it.
    fn timer_resolution(&self) -> Duration {
        Duration::from_millis(1)
    }
}

/// The real clocks: tokio's monotonic time and the system's wall time.
///
/// Monotonic time comes from tokio rather than `std` so that tokio's paused
/// test time and simulators that virtualise tokio time apply to it.
#[derive(Debug)]
pub struct SystemClock {
    origin: tokio::time::Instant,
}

impl SystemClock {
    /// A clock whose origin is now.
    #[allow(clippy::disallowed_methods)] // The one place the real clock is read.
    pub fn new() -> SystemClock {
        SystemClock { origin: tokio::time::Instant::now() }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

#[allow(clippy::disallowed_methods)] // The one place the real clock is read.
impl Clock for SystemClock {
    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }

    fn now(&self) -> Instant {
        let elapsed = tokio::time::Instant::now().saturating_duration_since(self.origin);
        Instant::ZERO + elapsed
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        let at = self.origin + Duration::from_nanos(deadline.as_nanos());
        Box::pin(tokio::time::sleep_until(at))
    }
}

const PPB: i128 = 1_000_000_000;

/// A clock with a wall-clock offset, a constant rate error and wall-clock
/// steps, driven by tokio time.
///
/// With a drift of `d` parts per billion, one second of tokio time reads as
/// `1 + d·1e-9` seconds on this clock, and a sleep of one local second lasts
/// `1 / (1 + d·1e-9)` tokio seconds. Steps move only the wall clock, as an NTP
/// step does; the monotonic reading is never stepped.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use hoplock::clock::{Clock, DriftingClock};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// // Ten minutes ahead and 1 ms per second fast.
/// let clock = DriftingClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(600), 1_000_000);
/// let start = clock.now();
/// clock.sleep_until(start + Duration::from_secs(10)).await;
/// assert!(clock.now().saturating_duration_since(start) >= Duration::from_secs(10));
/// # }
/// ```
#[derive(Debug)]
pub struct DriftingClock {
    origin: tokio::time::Instant,
    wall_origin: SystemTime,
    drift_ppb: i64,
    wall_step_nanos: AtomicI64,
}

impl DriftingClock {
    /// A clock whose wall time reads `wall_origin` now and whose rate is off
    /// by `drift_ppb` parts per billion (positive runs fast).
    ///
    /// Drifts beyond ±50 % are clamped there; such a clock is not a clock.
    #[allow(clippy::disallowed_methods)] // Anchors the simulated clock to tokio time.
    pub fn new(wall_origin: SystemTime, drift_ppb: i64) -> DriftingClock {
        DriftingClock {
            origin: tokio::time::Instant::now(),
            wall_origin,
            drift_ppb: drift_ppb.clamp(-500_000_000, 500_000_000),
            wall_step_nanos: AtomicI64::new(0),
        }
    }

    /// Moves the wall clock by `by_nanos` (negative steps it back), as an NTP
    /// step would. Monotonic time is unaffected.
    pub fn step_wall(&self, by_nanos: i64) {
        self.wall_step_nanos.fetch_add(by_nanos, Ordering::Relaxed);
    }

    /// The configured drift in parts per billion.
    pub fn drift_ppb(&self) -> i64 {
        self.drift_ppb
    }

    #[allow(clippy::disallowed_methods)] // Reads tokio time, which tests pause and simulators virtualise.
    fn real_elapsed_nanos(&self) -> i128 {
        tokio::time::Instant::now().saturating_duration_since(self.origin).as_nanos() as i128
    }

    fn local_from_real(&self, real_nanos: i128) -> i128 {
        real_nanos * (PPB + self.drift_ppb as i128) / PPB
    }
}

impl Clock for DriftingClock {
    fn wall(&self) -> SystemTime {
        let local = self.local_from_real(self.real_elapsed_nanos());
        let total = local + self.wall_step_nanos.load(Ordering::Relaxed) as i128;
        shift(self.wall_origin, total)
    }

    fn now(&self) -> Instant {
        let local = self.local_from_real(self.real_elapsed_nanos());
        Instant::from_nanos(u64::try_from(local.max(0)).unwrap_or(u64::MAX))
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        // Round the real deadline up, so that on waking `now()` has reached
        // `deadline` despite the integer division in `local_from_real`.
        let rate = PPB + self.drift_ppb as i128;
        let real = (deadline.as_nanos() as i128 * PPB + rate - 1) / rate;
        let real = u64::try_from(real).unwrap_or(u64::MAX);
        let at = self.origin + Duration::from_nanos(real);
        #[allow(clippy::disallowed_methods)] // The simulated clock's own timer.
        Box::pin(tokio::time::sleep_until(at))
    }
}

fn shift(base: SystemTime, nanos: i128) -> SystemTime {
    let magnitude = Duration::from_nanos(u64::try_from(nanos.unsigned_abs()).unwrap_or(u64::MAX));
    if nanos >= 0 {
        base.checked_add(magnitude).unwrap_or(base)
    } else {
        base.checked_sub(magnitude).unwrap_or(SystemTime::UNIX_EPOCH)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn drift_stretches_readings_and_timers() {
        let fast = DriftingClock::new(SystemTime::UNIX_EPOCH, 100_000_000); // 10 % fast
        let start = fast.now();
        #[allow(clippy::disallowed_methods)]
        let real_start = tokio::time::Instant::now();
        fast.sleep_until(start + Duration::from_secs(11)).await;
        #[allow(clippy::disallowed_methods)]
        let real = real_start.elapsed();
        // Eleven local seconds on a clock 10 % fast are ten real seconds.
        assert!(real >= Duration::from_secs(10) && real < Duration::from_millis(10_002), "{real:?}");
        assert!(fast.now() >= start + Duration::from_secs(11));
    }

    #[tokio::test(start_paused = true)]
    async fn steps_move_wall_time_but_not_monotonic_time() {
        let clock = DriftingClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1000), 0);
        let before = clock.now();
        clock.step_wall(-60_000_000_000);
        assert_eq!(clock.wall(), SystemTime::UNIX_EPOCH + Duration::from_secs(940));
        assert_eq!(clock.now(), before);
    }

    #[test]
    fn instant_arithmetic_saturates() {
        let far = Instant::from_nanos(u64::MAX - 1) + Duration::from_secs(10);
        assert_eq!(far.as_nanos(), u64::MAX);
        assert_eq!((Instant::ZERO - Duration::from_secs(1)).as_nanos(), 0);
    }
}
