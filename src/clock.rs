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
//! # Suspend
//!
//! A host can be suspended: a laptop sleeps, a VM is paused or snapshotted
//! and restored. Two kinds of monotonic clock behave differently then.
//! `CLOCK_MONOTONIC` on Linux, `mach_absolute_time` on macOS, and so `std`'s
//! and tokio's `Instant`, **stop** while the host sleeps; `CLOCK_BOOTTIME` on
//! Linux and `CLOCK_MONOTONIC_RAW` on macOS and iOS **count** the time
//! slept. A lease is timed in true elapsed time (the other nodes keep
//! counting while this one sleeps), so [`SystemClock::now`] counts suspend
//! on those platforms. Elsewhere it is tokio's `Instant`, which counts
//! whatever the platform's monotonic clock counts: on Windows that is
//! `QueryPerformanceCounter`, which Microsoft documents as counting sleep;
//! on the BSDs and other Unix systems it may stop, and a holder whose host
//! sleeps there is stopped by fencing alone.
//!
//! Timers are another matter. tokio's timer wheel runs on the clock that
//! stops, so a timer armed before a suspend fires late by the time slept,
//! whatever [`Clock::now`] reads. No safety deadline may therefore rest on
//! one long sleep: [`sleep_until_checked`] sleeps in slices of at most
//! [`Clock::suspend_check`] (default [`DEFAULT_SUSPEND_CHECK`]) and reads the
//! clock again after each, so a deadline that passed while the host slept
//! is noticed within one slice of waking. The elector's and the keyed
//! writer's term guards wait that way.
//!
//! Architecture invariant: nothing outside this module reads the system
//! clock. Clippy's `disallowed_methods` enforces it for the rest of the crate.

use std::fmt;
use std::future::Future;
use std::ops::{Add, Sub};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use crate::planted::{self, Bug};

/// How often, by default, a safety deadline is read again from the clock
/// while it is waited for ([`Clock::suspend_check`]): after a host wakes
/// from a suspend, a holder whose term ended while it slept stops within
/// this long (plus a timer's lateness).
pub const DEFAULT_SUSPEND_CHECK: Duration = Duration::from_millis(250);

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

    /// How long a timer of this clock may sleep before a safety deadline is
    /// read again ([`sleep_until_checked`]). A timer may fire late by as
    /// long as the host was suspended (see the module docs), so this bounds
    /// how long after waking a holder whose term ended in its sleep goes on
    /// believing it leads. Default [`DEFAULT_SUSPEND_CHECK`]; never shorter
    /// than [`Clock::timer_resolution`] in use.
    fn suspend_check(&self) -> Duration {
        DEFAULT_SUSPEND_CHECK
    }
}

/// Completes once `clock.now()` has reached `deadline`, at most
/// [`Clock::suspend_check`] (and a timer's lateness) after it did, even if
/// the host was suspended meanwhile.
///
/// One sleep until the deadline would fire late by the time the host slept
/// (tokio's timers run on the clock that stops), so this sleeps in slices
/// of at most the suspend check and reads the clock after each. Every
/// deadline that ends a right to act is waited for this way; timers that
/// only make something happen later (a renewal, a read) need not be.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use hoplock::clock::{self, Clock, SystemClock};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
/// let deadline = clock.now() + Duration::from_secs(2);
/// clock::sleep_until_checked(clock.as_ref(), deadline).await;
/// assert!(clock.now() >= deadline);
/// # }
/// ```
pub async fn sleep_until_checked(clock: &dyn Clock, deadline: Instant) {
    if planted::active(Bug::TimerStopsInSuspend) {
        // The bug: one long sleep, late by however long the host slept.
        return clock.sleep_until(deadline).await;
    }
    let slice = clock.suspend_check().max(clock.timer_resolution());
    loop {
        let now = clock.now();
        if now >= deadline {
            return;
        }
        clock.sleep_until(deadline.min(now + slice)).await;
    }
}

/// The real clocks: a monotonic clock that counts time the host spent
/// suspended, where the platform tells it, and the system's wall time.
///
/// The monotonic reading is tokio's `Instant` (so tokio's paused test time
/// and simulators that virtualise tokio time apply to it) plus the time the
/// host has spent suspended since this clock was made: on Linux and Android
/// `CLOCK_BOOTTIME` − `CLOCK_MONOTONIC`, on macOS and iOS
/// `CLOCK_MONOTONIC_RAW` − `CLOCK_UPTIME_RAW`. Under real time that sum
/// *is* `CLOCK_BOOTTIME` (or `CLOCK_MONOTONIC_RAW`) since the clock was made.
/// On other platforms the suspended part is zero and the reading is
/// tokio's `Instant` alone (see the module docs for what that counts).
///
/// Timers are tokio's, so a sleep fires late by the time the host slept;
/// [`sleep_until_checked`] bounds that for the deadlines that matter.
///
/// ```
/// use std::time::Duration;
/// use hoplock::clock::{Clock, SystemClock};
///
/// // Safety deadlines are read again every 100 ms instead of every 250 ms.
/// let clock = SystemClock::new().with_suspend_check(Duration::from_millis(100));
/// assert_eq!(clock.suspend_check(), Duration::from_millis(100));
/// ```
pub struct SystemClock {
    origin: tokio::time::Instant,
    /// Where the time spent suspended comes from (the OS, or a test's).
    suspended: SuspendSource,
    /// What it read when the clock was made.
    suspended_at_origin: Duration,
    /// The most suspended time seen since, in nanoseconds: the two OS
    /// clocks are read one after the other, so their difference jitters by
    /// a few nanoseconds, and the reading must never go back.
    suspended_seen: AtomicU64,
    suspend_check: Duration,
}

/// Reads how long the host has spent suspended since it booted.
type SuspendSource = Arc<dyn Fn() -> Duration + Send + Sync>;

impl fmt::Debug for SystemClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SystemClock")
            .field("origin", &self.origin)
            .field("suspended", &self.suspended())
            .field("suspend_check", &self.suspend_check)
            .finish_non_exhaustive()
    }
}

impl SystemClock {
    /// A clock whose origin is now.
    pub fn new() -> SystemClock {
        SystemClock::with_suspend_source(Arc::new(suspended_since_boot))
    }

    /// A clock that learns how long the host slept from `suspended`
    /// instead of the OS, so tests can suspend it under tokio's paused
    /// time.
    #[cfg(test)]
    pub(crate) fn with_fake_suspends(suspended: Arc<AtomicU64>) -> SystemClock {
        SystemClock::with_suspend_source(Arc::new(move || Duration::from_nanos(suspended.load(Ordering::SeqCst))))
    }

    #[allow(clippy::disallowed_methods)] // The one place the real clock is read.
    fn with_suspend_source(suspended: SuspendSource) -> SystemClock {
        SystemClock {
            origin: tokio::time::Instant::now(),
            suspended_at_origin: suspended(),
            suspended,
            suspended_seen: AtomicU64::new(0),
            suspend_check: DEFAULT_SUSPEND_CHECK,
        }
    }

    /// Sets how often safety deadlines are read again while waited for
    /// ([`Clock::suspend_check`]); values below the timer resolution (1 ms)
    /// count as 1 ms.
    pub fn with_suspend_check(mut self, check: Duration) -> SystemClock {
        self.suspend_check = check.max(Duration::from_millis(1));
        self
    }

    /// Time spent suspended since the clock was made, never going back.
    fn suspended(&self) -> Duration {
        let now = (self.suspended)().saturating_sub(self.suspended_at_origin);
        let nanos = u64::try_from(now.as_nanos()).unwrap_or(u64::MAX);
        let seen = self.suspended_seen.fetch_max(nanos, Ordering::AcqRel).max(nanos);
        Duration::from_nanos(seen)
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
        Instant::ZERO + elapsed + self.suspended()
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        // tokio's timer runs on the clock that stops in suspend: it is set
        // for the time left now, and fires late by any suspend to come.
        let left = deadline.saturating_duration_since(self.now());
        Box::pin(tokio::time::sleep_until(tokio::time::Instant::now() + left))
    }

    fn suspend_check(&self) -> Duration {
        self.suspend_check
    }
}

/// The clock that counts suspend, and the one that stops in it (the one
/// tokio's `Instant` reads), on platforms that have both.
#[cfg(any(target_os = "linux", target_os = "android"))]
const SUSPEND_CLOCKS: (libc::clockid_t, libc::clockid_t) = (libc::CLOCK_BOOTTIME, libc::CLOCK_MONOTONIC);
#[cfg(any(target_os = "macos", target_os = "ios"))]
const SUSPEND_CLOCKS: (libc::clockid_t, libc::clockid_t) = (libc::CLOCK_MONOTONIC_RAW, libc::CLOCK_UPTIME_RAW);

/// Time the host has spent suspended since it booted, as the difference of
/// a clock that counts suspend and one that does not. Zero where the
/// platform has no such pair.
#[cfg(any(target_os = "linux", target_os = "android", target_os = "macos", target_os = "ios"))]
fn suspended_since_boot() -> Duration {
    /// Two reads of the stopping clock further apart than this mean the
    /// thread was descheduled between them.
    const TIGHT: Duration = Duration::from_micros(20);
    let (counting, stopping) = SUSPEND_CLOCKS;
    let mut lower = Duration::ZERO;
    for _ in 0..4 {
        // Stopping, counting, stopping: the difference to the first read
        // is at most the true suspended time plus the gap, to the second
        // at least the true time less the gap.
        let (Some(before), Some(counted), Some(after)) =
            (read_clock(stopping), read_clock(counting), read_clock(stopping))
        else {
            return Duration::ZERO;
        };
        if after.saturating_sub(before) <= TIGHT {
            return counted.saturating_sub(before);
        }
        lower = lower.max(counted.saturating_sub(after));
    }
    // Descheduled every time: a reading that may fall short by the time
    // the thread was off the CPU (as late as a process paused that long
    // would be) rather than one that may run ahead for good, since the
    // clock never goes back. The next tight reading catches up.
    lower
}

#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "macos", target_os = "ios")))]
fn suspended_since_boot() -> Duration {
    Duration::ZERO
}

/// One `clock_gettime` reading, or `None` if the kernel refused the clock.
#[cfg(any(target_os = "linux", target_os = "android", target_os = "macos", target_os = "ios"))]
fn read_clock(id: libc::clockid_t) -> Option<Duration> {
    let mut spec = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let status = unsafe { libc::clock_gettime(id, &mut spec) };
    let secs = u64::try_from(spec.tv_sec).ok()?;
    let nanos = u32::try_from(spec.tv_nsec).ok()?;
    (status == 0).then(|| Duration::new(secs, nanos))
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

    #[tokio::test(start_paused = true)]
    async fn the_system_clock_counts_time_the_host_spent_suspended() {
        let slept = Arc::new(AtomicU64::new(5_000_000_000));
        let clock = SystemClock::with_fake_suspends(slept.clone());
        let start = clock.now();
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(clock.now().saturating_duration_since(start), Duration::from_secs(1));
        // The host sleeps a minute: tokio's time stands still, the clock
        // does not.
        slept.fetch_add(60_000_000_000, Ordering::SeqCst);
        assert_eq!(clock.now().saturating_duration_since(start), Duration::from_secs(61));
        // A source that jitters back never moves the reading back.
        slept.fetch_sub(1, Ordering::SeqCst);
        assert_eq!(clock.now().saturating_duration_since(start), Duration::from_secs(61));
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn on_linux_the_suspended_time_is_boottime_less_monotonic() {
        // Read the kernel directly around the clock's own read: the time
        // slept since boot cannot change within microseconds.
        let read = |id| read_clock(id).expect("the kernel has the clock");
        let before = read(libc::CLOCK_BOOTTIME).saturating_sub(read(libc::CLOCK_MONOTONIC));
        let ours = suspended_since_boot();
        let after = read(libc::CLOCK_BOOTTIME).saturating_sub(read(libc::CLOCK_MONOTONIC));
        let slack = Duration::from_millis(1);
        assert!(
            ours + slack >= before.min(after) && ours <= before.max(after) + slack,
            "{before:?} {ours:?} {after:?}"
        );
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn on_linux_the_system_clock_reads_boottime() {
        // Under real time, tokio's Instant is CLOCK_MONOTONIC, so the clock
        // plus the suspended part is CLOCK_BOOTTIME since the clock was made.
        let boottime = || read_clock(libc::CLOCK_BOOTTIME).expect("the kernel has CLOCK_BOOTTIME");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        runtime.block_on(async {
            let first = boottime();
            let clock = SystemClock::new();
            let made = boottime();
            std::thread::sleep(Duration::from_millis(20));
            let before = boottime();
            let read = clock.now().saturating_duration_since(Instant::ZERO);
            let after = boottime();
            // The clock's origin lies between `first` and `made`.
            assert!(read >= before.saturating_sub(made) && read <= after.saturating_sub(first), "{read:?}");
        });
    }

    /// A clock whose host the test suspends by hand, under tokio's paused
    /// time.
    fn suspendable() -> (SystemClock, Arc<AtomicU64>) {
        let slept = Arc::new(AtomicU64::new(0));
        (SystemClock::with_fake_suspends(slept.clone()), slept)
    }

    #[tokio::test(start_paused = true)]
    #[allow(clippy::disallowed_methods)] // Tokio's paused time is the test's true time.
    async fn a_checked_deadline_that_passed_in_a_suspend_is_noticed_within_one_check() {
        let (clock, slept) = suspendable();
        let clock: Arc<dyn Clock> = Arc::new(clock);
        let deadline = clock.now() + Duration::from_secs(10);
        let checked = tokio::spawn({
            let clock = clock.clone();
            async move { sleep_until_checked(clock.as_ref(), deadline).await }
        });
        let raw = tokio::spawn(clock.sleep_until(deadline));
        tokio::time::sleep(Duration::from_secs(1)).await;
        // The host sleeps for a minute: tokio's timers do not move.
        slept.fetch_add(60_000_000_000, Ordering::SeqCst);
        let woke = tokio::time::Instant::now();
        checked.await.unwrap();
        let noticed = woke.elapsed();
        assert!(noticed <= DEFAULT_SUSPEND_CHECK + Duration::from_millis(1), "{noticed:?}");
        // One long sleep would have gone on for the nine seconds left.
        assert!(!raw.is_finished());
        raw.await.unwrap();
        assert!(woke.elapsed() >= Duration::from_secs(9));
    }

    #[tokio::test(start_paused = true)]
    async fn a_checked_deadline_without_a_suspend_fires_on_time() {
        let clock = SystemClock::new().with_suspend_check(Duration::from_millis(100));
        let start = clock.now();
        sleep_until_checked(&clock, start + Duration::from_millis(1234)).await;
        // The system clock reads the kernel's monotonic time, which moves on
        // by a few nanoseconds while the paused runtime does not: on time
        // means within a millisecond, never early.
        let slept = clock.now().saturating_duration_since(start);
        assert!(slept >= Duration::from_millis(1234) && slept < Duration::from_millis(1235), "{slept:?}");
    }

    #[test]
    fn instant_arithmetic_saturates() {
        let far = Instant::from_nanos(u64::MAX - 1) + Duration::from_secs(10);
        assert_eq!(far.as_nanos(), u64::MAX);
        assert_eq!((Instant::ZERO - Duration::from_secs(1)).as_nanos(), 0);
    }
}
