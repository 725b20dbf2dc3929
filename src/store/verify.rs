//! [`Store::verify`](super::Store::verify) for stores other than S3: the
//! quick, sequential checks that a store honours conditional writes, made
//! through the object seam, before an elector campaigns on it.
//!
//! They are S3's checks without the ETag forms, which only S3 has: a create
//! of an existing object is refused; a write at the current version
//! succeeds twice with a new version each time; a write at a replaced
//! version is refused; a write conditional on a version of a missing object
//! is refused and creates nothing. A check that should succeed but lost to
//! another verifier's write is tried again; a check that should fail but
//! succeeded is always a finding.

use std::time::Duration;

use super::Store;
use crate::backend::{BackendError, ObjectBackend, Version};
use crate::clock::{Clock, SystemClock};
use crate::entropy::{Entropy, OsEntropy, random_hex};

/// The suffix of the probe object the checks write:
/// `<lease key>.hoplock-verify`.
pub const PROBE_SUFFIX: &str = ".hoplock-verify";

/// What a store's verification found on a store that passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verification {
    /// The probe key the checks wrote (left in place).
    pub probe_key: String,
    /// The checks that passed, in the order they ran.
    pub checks: Vec<&'static str>,
}

/// Why one pass of a verification stopped.
pub(crate) enum Stop {
    /// Worth another try: another writer got in between, or a passing
    /// failure (throttling, a timeout, a 5xx).
    Interrupted(BackendError),
    /// The answer: the store is unsafe or unusable, or the configuration is
    /// wrong.
    Final(BackendError),
}

impl From<BackendError> for Stop {
    fn from(error: BackendError) -> Stop {
        match error {
            BackendError::Transient(_) | BackendError::Ambiguous(_) | BackendError::Conflict(_) => {
                Stop::Interrupted(error)
            }
            other => Stop::Final(other),
        }
    }
}

/// How many times a verification is tried when another writer or a passing
/// failure gets in its way.
pub(crate) const ATTEMPTS: u32 = 4;

/// Runs the checks on `probe`, the probe object next to the lease key.
pub(super) async fn verify(probe: &Store) -> Result<Verification, BackendError> {
    let clock = SystemClock::new();
    let mut last = BackendError::Transient("the checks did not run".into());
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            // Jittered, so verifiers that started together drift apart.
            let pause = Duration::from_millis(100 * u64::from(attempt) + OsEntropy.next_u64() % 200);
            clock.sleep_until(clock.now() + pause).await;
        }
        match verify_once(probe).await {
            Ok(checks) => return Ok(Verification { probe_key: probe.key().to_owned(), checks }),
            Err(Stop::Final(error)) => return Err(error),
            Err(Stop::Interrupted(error)) => last = error,
        }
    }
    Err(last)
}

/// One pass over the checks.
async fn verify_once(probe: &Store) -> Result<Vec<&'static str>, Stop> {
    let mut checks = Vec::new();
    let unsafe_store = |what: String| {
        Stop::Final(BackendError::Unsupported(format!(
            "UNSAFE: ignores conditions: {what} (probe {}); it cannot hold a lease safely",
            probe.url()
        )))
    };
    let first = match probe.read_object().await {
        Ok(object) => object.version,
        Err(BackendError::NoLease) => match refused(probe.write_object(None, body("create")).await)? {
            Ok(version) => version,
            // Another verifier created it first.
            Err(refusal) => return Err(Stop::Interrupted(refusal)),
        },
        Err(other) => return Err(other.into()),
    };
    if refused(probe.write_object(None, body("recreate")).await)?.is_ok() {
        return Err(unsafe_store("a create of an existing object succeeded".into()));
    }
    checks.push("create of an existing object refused");

    let second = refused(probe.write_object(Some(&first), body("update-1")).await)?.map_err(Stop::Interrupted)?;
    let third = refused(probe.write_object(Some(&second), body("update-2")).await)?.map_err(Stop::Interrupted)?;
    if second == first || third == second {
        return Err(Stop::Final(BackendError::Unsupported(format!(
            "UNSAFE: weak versions: two writes got the same version {third} (probe {})",
            probe.url()
        ))));
    }
    checks.push("write at the current version succeeds with a new version");

    if refused(probe.write_object(Some(&second), body("stale")).await)?.is_ok() {
        return Err(unsafe_store("a write at a replaced version succeeded".into()));
    }
    checks.push("write at a replaced version refused");

    let missing = probe.with_key(format!("{}-missing-{}", probe.key(), random_hex(&OsEntropy, 6)));
    // Digits only: a GCS generation is a number, and Azure takes any ETag.
    let nowhere = Version::new(format!("1{}", OsEntropy.next_u64() % 1_000_000_000_000_000));
    let created = refused(missing.write_object(Some(&nowhere), body("missing")).await)?.is_ok()
        || !matches!(missing.read_object().await, Err(BackendError::NoLease));
    if created {
        return Err(unsafe_store(format!("a write conditional on a missing object created {}", missing.url())));
    }
    checks.push("write conditional on a missing object refused, nothing created");
    Ok(checks)
}

/// A probe body: the same length for every tag, so only the bytes differ.
fn body(tag: &str) -> Vec<u8> {
    format!("hoplock verify {tag:>11} {}\n", random_hex(&OsEntropy, 16)).into_bytes()
}

/// A write's outcome: `Ok(Ok(version))` stored, `Ok(Err(_))` refused by its
/// condition, `Err` anything else.
fn refused(result: Result<Version, BackendError>) -> Result<Result<Version, BackendError>, Stop> {
    match result {
        Ok(version) => Ok(Ok(version)),
        Err(refusal @ (BackendError::LeaseHeld | BackendError::NoLease)) => Ok(Err(refusal)),
        Err(BackendError::Unsupported(message)) => {
            Err(Stop::Final(BackendError::Unsupported(format!("UNSUPPORTED: {message}"))))
        }
        Err(other) => Err(other.into()),
    }
}
