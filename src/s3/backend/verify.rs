//! [`S3Backend::verify`]: the quick, sequential checks that a store honours
//! conditional writes, run before an elector campaigns on it.
//!
//! They catch a provider that ignores `If-None-Match` or `If-Match`, one
//! that creates a missing key on `If-Match`, one that refuses conditional
//! writes loudly, and one whose ETags do not tell different bytes apart.
//! They cannot catch a provider that honours conditions one request at a
//! time but lets racing writers both win: that takes many concurrent
//! clients over many rounds, which is what `hoplock check-s3` does.
//!
//! They also find out which form of an ETag the store takes in `If-Match`:
//! a store that refuses the quoted form but honours the bare one (as some
//! providers are reported to) is used with bare ETags from then on, and a
//! store that ignores either form is unsafe.
//!
//! The checks write a probe object next to the lease key and leave it in
//! place, so no `s3:DeleteObject` permission is needed and a restart reuses
//! it. Several processes may verify at once (a fleet starting together): a
//! check that should succeed but lost to another verifier's write is tried
//! again, while a check that should fail but succeeded is always a finding,
//! since no other writer can produce the ETag it matched.

use bytes::Bytes;
use http::Method;
use tracing::info;

use super::S3Backend;
use crate::backend::{Backend, BackendError, Version};
use crate::entropy::random_hex;

use crate::store::verify::{ATTEMPTS, Stop};
pub use crate::store::{PROBE_SUFFIX, Verification};

impl S3Backend {
    /// Checks that the store honours conditional writes, on the probe key
    /// `<key>.hoplock-verify` next to the lease key (created if missing,
    /// left in place), and on a key that must stay missing. It checks that
    ///
    /// 1. a create (`If-None-Match: *`) of an existing key is refused;
    /// 2. a write with the current ETag (`If-Match`) succeeds, twice in a
    ///    row with different bytes of the same length, and each gets a new
    ///    ETag (an ETag made of size and modification second would not);
    /// 3. a write with a replaced ETag is refused, with the ETag quoted and
    ///    bare;
    /// 4. `If-Match` on a missing key is refused and creates nothing.
    ///
    /// An unsafe store is [`BackendError::Unsupported`] whose message starts
    /// with the verdict (`UNSAFE: ignores conditions`, `UNSAFE: weak ETags`),
    /// and a store that refuses conditional writes outright is
    /// `Unsupported` starting with `UNSUPPORTED`. A store that refuses a
    /// current ETag in the configured form but honours it in the other is
    /// used in the other form from then on (by this backend and every one
    /// made from it), with a log line. Races are not checked
    /// here; `hoplock check-s3` checks them. Needs `s3:GetObject` and
    /// `s3:PutObject` on `<key>.hoplock-verify*`.
    ///
    /// ```no_run
    /// use hoplock::s3::{S3Backend, S3Config};
    ///
    /// # async fn example() -> Result<(), hoplock::BackendError> {
    /// let store = S3Backend::new(S3Config::new("my-bucket", "leases/scheduler.json"))?;
    /// let verification = store.verify().await?;
    /// assert_eq!(verification.probe_key, "leases/scheduler.json.hoplock-verify");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn verify(&self) -> Result<Verification, BackendError> {
        let probe = self.with_key(format!("{}{PROBE_SUFFIX}", self.key));
        let mut last = BackendError::Transient("the checks did not run".into());
        for attempt in 0..ATTEMPTS {
            if attempt > 0 {
                // Jittered, so verifiers that started together drift apart.
                let pause = self.jittered_backoff(attempt + 1);
                self.clock.sleep_until(self.clock.now() + pause).await;
            }
            match probe.verify_once().await {
                Ok(checks) => return Ok(Verification { probe_key: probe.key.clone(), checks }),
                Err(Stop::Final(error)) => return Err(error),
                Err(Stop::Interrupted(error)) => last = error,
            }
        }
        Err(last)
    }

    /// One pass over the checks, on `self` as the probe key.
    async fn verify_once(&self) -> Result<Vec<&'static str>, Stop> {
        let mut checks = Vec::new();
        let unsafe_store = |verdict: &str, what: String| {
            Stop::Final(BackendError::Unsupported(format!(
                "UNSAFE: {verdict}: {what} (probe key {}); it cannot hold a lease safely",
                self.key
            )))
        };
        let current = match self.read().await {
            Ok(stored) => Some(stored.version),
            // The probe holds no lease record, so it always reads as corrupt.
            Err(BackendError::Corrupt { version, .. }) => Some(version),
            Err(BackendError::NoLease) => None,
            Err(other) => return Err(other.into()),
        };
        let first = match current {
            Some(version) => version,
            None => match self.put_probe(None, "create").await? {
                Ok(version) => version,
                // Another verifier created it first.
                Err(refused) => return Err(Stop::Interrupted(refused)),
            },
        };

        if self.put_probe(None, "recreate").await?.is_ok() {
            return Err(unsafe_store(
                "ignores conditions",
                "a create with If-None-Match: * of an existing key succeeded".into(),
            ));
        }
        checks.push("create of an existing key refused");

        let second = match self.put_probe(Some(&first), "update-1").await? {
            Ok(version) => version,
            // Only a 412 can be a refusal of the ETag's form; a 409 is
            // another verifier's write in flight.
            Err(BackendError::LeaseHeld) => {
                self.adapt_etag_style(&first).await?.ok_or(Stop::Interrupted(BackendError::LeaseHeld))?
            }
            Err(refused) => return Err(Stop::Interrupted(refused)),
        };
        let third = self.put_probe(Some(&second), "update-2").await?.map_err(Stop::Interrupted)?;
        if second == first || third == second {
            return Err(unsafe_store(
                "weak ETags",
                format!("different bytes of the same length got the same ETag {}", third.as_str()),
            ));
        }
        checks.push("write with the current ETag succeeds with a new ETag");

        if self.put_probe(Some(&second), "stale").await?.is_ok() {
            return Err(unsafe_store("ignores conditions", "a write with a replaced If-Match ETag succeeded".into()));
        }
        // The form this backend does not send must not let a stale write
        // through either: a store that takes a form must honour it. Any
        // answer but a success (a 400 for a form it does not parse) is
        // fine here.
        let other = self.etag_style().other();
        let body = self.probe_body("stale-other");
        let header = ("if-match", other.render(&second));
        if self.request(Method::PUT, &[header], body).await?.status().is_success() {
            return Err(unsafe_store(
                "ignores conditions",
                format!("a write with a replaced If-Match ETag in the {} form succeeded", other.name()),
            ));
        }
        checks.push("write with a replaced ETag refused, quoted and bare");

        let missing = self.with_key(format!("{}-missing-{}", self.key, random_hex(self.entropy.as_ref(), 6)));
        let nowhere = Version::new(format!("\"{}\"", random_hex(self.entropy.as_ref(), 16)));
        let created = missing.put_probe(Some(&nowhere), "missing").await?.is_ok()
            || !matches!(missing.read().await, Err(BackendError::NoLease));
        if created {
            // Best effort: the probe of a missing key should not linger.
            let _ = missing.request(Method::DELETE, &[], Bytes::new()).await;
            return Err(unsafe_store(
                "ignores conditions",
                format!("If-Match on the missing key {} created it", missing.key),
            ));
        }
        checks.push("If-Match on a missing key refused, nothing created");
        Ok(checks)
    }

    /// A probe body: the same length for every tag, so only the bytes
    /// differ.
    fn probe_body(&self, tag: &str) -> Bytes {
        Bytes::from(format!("hoplock verify {tag:>11} {}\n", random_hex(self.entropy.as_ref(), 16)))
    }

    /// A write with the current ETag `current` was refused. If the probe
    /// still holds `current`, the refusal was of the ETag's form: the write
    /// is tried in the other form, and if that is honoured this backend
    /// sends that form from now on. Returns the new version, or `None`
    /// when the refusal was something else (another verifier's write).
    async fn adapt_etag_style(&self, current: &Version) -> Result<Option<Version>, Stop> {
        let held = match self.read().await {
            Ok(stored) => stored.version,
            Err(BackendError::Corrupt { version, .. }) => version,
            Err(_) => return Ok(None),
        };
        if held != *current {
            return Ok(None);
        }
        let (from, to) = (self.etag_style(), self.etag_style().other());
        let header = ("if-match", to.render(current));
        let response = self.request(Method::PUT, &[header], self.probe_body("adapt")).await?;
        if !response.status().is_success() {
            return Ok(None);
        }
        let version = self.etag(&response)?;
        self.set_etag_style(to);
        info!(
            key = %self.key,
            "the store refuses If-Match with a current ETag in the {} form and honours the {} form; sending ETags {} \
             from now on",
            from.name(),
            to.name(),
            to.name()
        );
        Ok(Some(version))
    }

    /// Writes a probe body of a fixed length, conditionally: `Ok(Ok(etag))`
    /// when it was stored, `Ok(Err(_))` when it was refused (412, 409, or 404
    /// for `If-Match` on a missing key).
    async fn put_probe(&self, expected: Option<&Version>, tag: &str) -> Result<Result<Version, BackendError>, Stop> {
        let condition = match expected {
            None => ("if-none-match", "*".to_string()),
            Some(version) => ("if-match", self.if_match(version)),
        };
        let response = self.request(Method::PUT, &[condition], self.probe_body(tag)).await?;
        if response.status().is_success() {
            return Ok(Ok(self.etag(&response)?));
        }
        match self.refusal_of(&response, true) {
            refused @ (BackendError::LeaseHeld | BackendError::NoLease | BackendError::Conflict(_)) => Ok(Err(refused)),
            BackendError::Unsupported(message) => {
                Err(Stop::Final(BackendError::Unsupported(format!("UNSUPPORTED: {message}"))))
            }
            other => Err(other.into()),
        }
    }
}
