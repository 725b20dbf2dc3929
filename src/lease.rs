//! The lease record stored under the lease key, and its fencing token.
//!
//! The record is JSON. Its `generation`, `expires_at` and `owner` fields keep
//! the names used by the Go hoplock and Litestream records so their tools can
//! read ours; the other fields are what safety needs and what those designs
//! lack. Unknown fields are ignored on read, so a newer writer's additions do
//! not lock out an older reader.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::rfc3339;

/// A fencing token: the lease's generation.
///
/// Every acquisition of a lease key writes the previous generation plus one,
/// including after a graceful release, so the generation strictly increases
/// for the life of the key. Pass it to every system the leader writes to and
/// let them reject lower ones (see [`crate::fence::Fence`]).
///
/// ```
/// use hoplock::Generation;
///
/// let first = Generation::ZERO.next().expect("room for a first term");
/// assert_eq!(first.get(), 1);
/// assert!(first.next() > Some(first));
/// // The last generation has no successor: a record holding it can never be
/// // taken over, so electors report it instead of reusing a token.
/// assert_eq!(Generation::MAX.next(), None);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Generation(pub u64);

impl Generation {
    /// The generation before any lease has been written.
    pub const ZERO: Generation = Generation(0);

    /// The token as a plain integer.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The last generation. A lease at this generation has no successor.
    pub const MAX: Generation = Generation(u64::MAX);

    /// The next generation, or `None` at [`Generation::MAX`].
    ///
    /// There is no saturating form on purpose: two terms sharing a token is
    /// the failure fencing exists to prevent.
    pub const fn next(self) -> Option<Generation> {
        match self.0.checked_add(1) {
            Some(next) => Some(Generation(next)),
            None => None,
        }
    }
}

impl std::fmt::Display for Generation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// The largest record the library will parse. Real records are a few hundred
/// bytes; anything far larger is not ours and is reported as corrupt rather
/// than parsed.
pub const MAX_RECORD_BYTES: usize = 64 * 1024;

/// The longest TTL an elector accepts, and the longest a record may state.
///
/// A record stating more is reported as corrupt: a contender would otherwise
/// wait for it practically forever without saying why. A day is far beyond
/// any sensible lease and far below anything that could overflow a timer.
pub const MAX_TTL: Duration = Duration::from_secs(86_400);

/// The largest owner name accepted, in bytes.
pub const MAX_OWNER_BYTES: usize = 1024;

/// The lease record as stored.
///
/// ```
/// use hoplock::lease::LeaseRecord;
///
/// let record = LeaseRecord::decode(br#"{"generation":7,"expires_at":"2024-05-01T10:00:00Z","owner":"a"}"#)?;
/// assert_eq!(record.generation.get(), 7);
/// // A Go hoplock record has no TTL or nonce; readers fall back to their own TTL.
/// assert_eq!(record.ttl_ms, None);
/// # Ok::<(), hoplock::lease::RecordError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// The fencing token of the term this record belongs to.
    pub generation: Generation,
    /// When the writer's wall clock says the lease ends (RFC 3339). Only
    /// information for people and for the Go tools: another machine's wall
    /// clock is never a reason to act.
    pub expires_at: String,
    /// Who holds (or last held) the lease. Free text.
    pub owner: String,
    /// Fresh random bytes on every write, so that every write changes the
    /// stored bytes and therefore the store's version (no ABA), and so that a
    /// writer can recognise its own write when the reply was lost.
    #[serde(default)]
    pub nonce: String,
    /// The holder's TTL. Contenders wait this long, not their own TTL, before
    /// taking over. Absent in records written by the Go tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// How often the holder renews. Followers read just after each renewal
    /// is due instead of polling; it never shortens anyone's wait. Absent in
    /// records written by the Go tools and by hoplock before it was added,
    /// and then followers poll, as they do when it holds a value no elector
    /// writes (see [`LeaseRecord::renew_interval`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_ms: Option<u64>,
    /// Changes on every process start, so a restarted process with the same
    /// owner name does not mistake its predecessor's lease for its own.
    #[serde(default)]
    pub incarnation: String,
    /// Set by a graceful release. The generation is kept, so the next holder
    /// writes a higher one; contenders may take a released lease at once.
    #[serde(default)]
    pub released: bool,
}

/// Why a stored lease record could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The bytes are not a lease record.
    #[error("not a lease record: {0}")]
    Malformed(String),
    /// The record is larger than [`MAX_RECORD_BYTES`].
    #[error("lease record is {0} bytes, more than the {MAX_RECORD_BYTES} a lease record can be")]
    TooLarge(usize),
    /// A field holds a value no writer of ours would write.
    #[error("lease record field `{field}` is invalid: {reason}")]
    InvalidField {
        /// The field's name.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// The owner a reset record names, so that `hoplock lease show` and the
/// electors' logs say who wrote it.
pub const RESET_OWNER: &str = "hoplock lease reset";

impl LeaseRecord {
    /// The record an operator writes to reset a lease (`hoplock lease reset`):
    /// released at `generation`, so the next holder takes it at once and
    /// writes `generation + 1`, with a TTL of 1 ms, no renew interval and no
    /// incarnation, so that it names no live writer. `nonce` must be fresh
    /// for every write (random bytes in production, drawn from the seed in
    /// the simulator).
    ///
    /// ```
    /// use hoplock::lease::LeaseRecord;
    /// use hoplock::Generation;
    ///
    /// let record = LeaseRecord::reset(Generation(42), "5f1c0a7d92e4b318");
    /// assert!(record.released);
    /// assert_eq!(record.generation.next(), Some(Generation(43)));
    /// assert_eq!(LeaseRecord::decode(&record.encode()).unwrap(), record);
    /// ```
    pub fn reset(generation: Generation, nonce: impl Into<String>) -> LeaseRecord {
        LeaseRecord {
            generation,
            expires_at: String::new(),
            owner: RESET_OWNER.into(),
            nonce: nonce.into(),
            ttl_ms: Some(1),
            renew_ms: None,
            incarnation: String::new(),
            released: true,
        }
    }

    /// Parses a stored record, checking the fields safety relies on.
    pub fn decode(bytes: &[u8]) -> Result<LeaseRecord, RecordError> {
        if bytes.len() > MAX_RECORD_BYTES {
            return Err(RecordError::TooLarge(bytes.len()));
        }
        let record: LeaseRecord =
            serde_json::from_slice(bytes).map_err(|err| RecordError::Malformed(err.to_string()))?;
        record.validate()?;
        Ok(record)
    }

    /// Serialises the record for storage.
    pub fn encode(&self) -> Vec<u8> {
        // Serialising a struct of strings, integers and booleans cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Checks what `decode` checks, for records built in memory.
    pub fn validate(&self) -> Result<(), RecordError> {
        match self.ttl_ms {
            Some(0) => return Err(RecordError::InvalidField { field: "ttl_ms", reason: "a TTL of zero".into() }),
            Some(ms) if u128::from(ms) > MAX_TTL.as_millis() => {
                return Err(RecordError::InvalidField {
                    field: "ttl_ms",
                    reason: format!("{ms} ms is longer than the {} ms any elector writes", MAX_TTL.as_millis()),
                });
            }
            _ => {}
        }
        if self.owner.len() > MAX_OWNER_BYTES {
            return Err(RecordError::InvalidField {
                field: "owner",
                reason: format!("{} bytes, more than {MAX_OWNER_BYTES}", self.owner.len()),
            });
        }
        Ok(())
    }

    /// The holder's TTL, if the record states one.
    pub fn ttl(&self) -> Option<Duration> {
        self.ttl_ms.map(Duration::from_millis)
    }

    /// How often the holder says it renews, if the record states a value
    /// any elector could write: more than zero, and shorter than the
    /// record's TTL (or than a day, for a record without one).
    ///
    /// Any other value is ignored, not reported as a corrupt record: the
    /// field only tells followers when to read, and a record that cannot be
    /// taken over because of it would cost far more than polling it.
    pub fn renew_interval(&self) -> Option<Duration> {
        let limit = self.ttl_ms.map_or(MAX_TTL.as_millis(), u128::from);
        self.renew_ms.filter(|ms| *ms > 0 && u128::from(*ms) < limit).map(Duration::from_millis)
    }

    /// `expires_at` parsed, if it is valid RFC 3339.
    pub fn expires_at_time(&self) -> Option<SystemTime> {
        rfc3339::parse(&self.expires_at).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> LeaseRecord {
        LeaseRecord {
            generation: Generation(3),
            expires_at: "2026-01-01T00:00:30.000Z".into(),
            owner: "node-a".into(),
            nonce: "00ff".into(),
            ttl_ms: Some(30_000),
            renew_ms: Some(10_000),
            incarnation: "abcd".into(),
            released: false,
        }
    }

    #[test]
    fn round_trips_and_ignores_unknown_fields() {
        let bytes = record().encode();
        assert_eq!(LeaseRecord::decode(&bytes).unwrap(), record());
        let mut value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        value["from_the_future"] = serde_json::json!({"x": 1});
        let bytes = serde_json::to_vec(&value).unwrap();
        assert_eq!(LeaseRecord::decode(&bytes).unwrap(), record());
    }

    #[test]
    fn the_last_generation_has_no_successor() {
        assert_eq!(Generation(u64::MAX - 1).next(), Some(Generation::MAX));
        assert_eq!(Generation::MAX.next(), None);
    }

    #[test]
    fn reads_a_go_record() {
        let go = br#"{"generation":12,"expires_at":"2024-05-01T10:00:00.123456789+02:00","owner":"host-1"}"#;
        let record = LeaseRecord::decode(go).unwrap();
        assert_eq!(record.generation, Generation(12));
        assert!(!record.released);
        assert!(record.expires_at_time().is_some());
    }

    #[test]
    fn rejects_what_is_not_a_record() {
        for bad in [&b""[..], b"null", b"[]", b"{}", b"not json", b"{\"generation\":-1}", b"\xff\xfe"] {
            assert!(matches!(LeaseRecord::decode(bad), Err(RecordError::Malformed(_))), "{bad:?}");
        }
        let zero_ttl = br#"{"generation":1,"expires_at":"","owner":"a","ttl_ms":0}"#;
        assert!(matches!(LeaseRecord::decode(zero_ttl), Err(RecordError::InvalidField { field: "ttl_ms", .. })));
        let absurd_ttl = br#"{"generation":1,"expires_at":"","owner":"a","ttl_ms":18446744073709551615}"#;
        let err = LeaseRecord::decode(absurd_ttl).unwrap_err();
        assert!(matches!(err, RecordError::InvalidField { field: "ttl_ms", .. }), "{err}");
        let longest = format!(r#"{{"generation":1,"expires_at":"","owner":"a","ttl_ms":{}}}"#, MAX_TTL.as_millis());
        assert_eq!(LeaseRecord::decode(longest.as_bytes()).unwrap().ttl(), Some(MAX_TTL));
        // A renew interval no elector could write is ignored (followers
        // poll), never a reason to refuse the record.
        for odd_renew in [
            r#"{"generation":1,"expires_at":"","owner":"a","ttl_ms":6000,"renew_ms":0}"#,
            r#"{"generation":1,"expires_at":"","owner":"a","ttl_ms":6000,"renew_ms":6000}"#,
            r#"{"generation":1,"expires_at":"","owner":"a","renew_ms":18446744073709551615}"#,
        ] {
            assert_eq!(LeaseRecord::decode(odd_renew.as_bytes()).unwrap().renew_interval(), None, "{odd_renew}");
        }
        let sane = r#"{"generation":1,"expires_at":"","owner":"a","ttl_ms":6000,"renew_ms":2000}"#;
        assert_eq!(LeaseRecord::decode(sane.as_bytes()).unwrap().renew_interval(), Some(Duration::from_secs(2)));
        let huge = vec![b' '; MAX_RECORD_BYTES + 1];
        assert_eq!(LeaseRecord::decode(&huge), Err(RecordError::TooLarge(MAX_RECORD_BYTES + 1)));
    }
}
