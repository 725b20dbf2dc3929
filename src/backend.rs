//! The storage seam: a compare-and-swap register holding one lease record.
//!
//! A [`Backend`] is one lease key in one strongly consistent store. It has
//! three operations, each conditional on a [`Version`] the store hands out:
//! a read, a conditional write and a conditional delete. On S3 the version is
//! the ETag and the conditions are `If-None-Match: *` and `If-Match`.
//!
//! Errors are grouped by what the caller should do next, not by where they
//! came from; see [`BackendError`].
//!
//! Under it sits [`ObjectBackend`]: the same three operations on one object
//! read and written whole as bytes, for stores that hold something other
//! than a lease record (a membership list, for instance). Every object store is a lease [`Backend`] too, storing the
//! record's JSON: the built-in backends implement only the object seam.

use std::fmt;
use std::future::Future;

use crate::lease::{LeaseRecord, RecordError};

pub mod memory;

/// An opaque token naming one stored version of the lease record.
///
/// A backend must never hand out the same version for two different writes
/// of its key, or a stale writer could succeed (ABA).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Version(String);

impl Version {
    /// Wraps a backend's version string (an ETag, a counter, ...).
    pub fn new(token: impl Into<String>) -> Version {
        Version(token.into())
    }

    /// The backend's version string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Version({})", self.0)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A record as read, with the version to make a conditional write against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The parsed record.
    pub record: LeaseRecord,
    /// The version the record was read at.
    pub version: Version,
}

/// What went wrong, grouped by what the caller should do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// There is no lease record (or, for a conditional write or delete, the
    /// record the condition named has vanished).
    #[error("no lease record exists")]
    NoLease,
    /// The condition failed: somebody else's write got there first. Nothing
    /// was changed.
    #[error("the lease record changed since it was read: another writer got there first")]
    LeaseHeld,
    /// The store saw overlapping conditional writes and refused this one.
    /// Nothing was changed; re-read and decide again.
    #[error("conflicting concurrent write, nothing changed; re-read and retry: {0}")]
    Conflict(String),
    /// The write may or may not have been applied (a timeout, a lost reply, a
    /// server error after sending). Re-read and compare the nonce to find out.
    #[error("the write may or may not have been applied: {0}")]
    Ambiguous(String),
    /// A temporary failure before anything changed. Try again later.
    #[error("temporary failure, nothing changed; try again: {0}")]
    Transient(String),
    /// The store cannot do conditional writes, so it cannot hold a lease
    /// safely. Use another store.
    #[error("this store cannot do conditional writes, so it cannot hold a lease safely: {0}")]
    Unsupported(String),
    /// A record is stored but cannot be used. Nothing is taken over on it;
    /// an operator must repair or reset the key.
    #[error("the lease record at version {version} is unreadable: {reason}; repair it or reset the key")]
    Corrupt {
        /// The version of the unreadable record, for a conditional reset.
        version: Version,
        /// What is wrong with it.
        reason: RecordError,
    },
    /// The backend is misconfigured (missing bucket, bad credentials, ...).
    /// Retrying will not help.
    #[error("lease store configuration error: {0}")]
    Config(String),
}

impl BackendError {
    /// Whether the error leaves the caller unable to go on at all
    /// (configuration, or a store that cannot do conditional writes).
    pub fn is_fatal(&self) -> bool {
        matches!(self, BackendError::Unsupported(_) | BackendError::Config(_))
    }
}

/// One lease key in a compare-and-swap store.
///
/// Implementations must be linearizable: each operation takes effect at one
/// instant between its call and its return, and a read returns the latest
/// write. They must never retry a conditional write blindly: if an attempt
/// may have been applied, the answer is [`BackendError::Ambiguous`].
///
/// The `hoplock::testing` module (feature `testing`) has a conformance suite
/// every implementation should pass.
pub trait Backend: Send + Sync + 'static {
    /// Reads the record. A missing record is [`BackendError::NoLease`]; one
    /// that does not parse is [`BackendError::Corrupt`].
    fn read(&self) -> impl Future<Output = Result<Stored, BackendError>> + Send;

    /// Writes `record` if the stored version is `expected`, or, when
    /// `expected` is `None`, only if no record exists. A failed condition is
    /// [`BackendError::LeaseHeld`], or [`BackendError::NoLease`] when the
    /// expected record has vanished. Returns the new version.
    fn write(
        &self,
        expected: Option<&Version>,
        record: &LeaseRecord,
    ) -> impl Future<Output = Result<Version, BackendError>> + Send;

    /// Deletes the record if the stored version is `expected`: a mismatch is
    /// [`BackendError::LeaseHeld`], a missing record [`BackendError::NoLease`].
    /// The elector never deletes; this is for the seed's reference policy,
    /// operators and tests.
    fn delete(&self, expected: &Version) -> impl Future<Output = Result<(), BackendError>> + Send;
}

/// One object's bytes as read, with the version to write against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredObject {
    /// The object's bytes, exactly as written.
    pub bytes: Vec<u8>,
    /// The version the bytes were read at.
    pub version: Version,
}

/// One object in a compare-and-swap store, read and written whole as bytes.
///
/// The rules are the lease [`Backend`]'s: linearizable operations, every
/// write conditional, and never a blind retry of a write that may have
/// landed ([`BackendError::Ambiguous`]). A missing object is
/// [`BackendError::NoLease`], a failed condition [`BackendError::LeaseHeld`].
/// The store may derive versions from the bytes (an S3 ETag is the body's
/// MD5), so a caller that needs every write to change the version puts a
/// fresh nonce in the bytes, as lease records do. The S3 backend reads
/// objects of at most [`crate::s3::transport::MAX_RESPONSE_BYTES`] (1 MiB)
/// and refuses to write larger ones.
///
/// `hoplock::testing::conformance::run_objects` (feature `testing`) is the
/// conformance suite for implementations.
///
/// ```
/// use hoplock::backend::{BackendError, ObjectBackend, memory::MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), BackendError> {
/// let store = MemoryBackend::new();
/// let first = store.write_object(None, b"view 1".to_vec()).await?;
/// // A write against a version that is no longer current changes nothing.
/// store.write_object(Some(&first), b"view 2".to_vec()).await?;
/// let stale = store.write_object(Some(&first), b"view 2 again".to_vec()).await;
/// assert_eq!(stale, Err(BackendError::LeaseHeld));
/// assert_eq!(store.read_object().await?.bytes, b"view 2");
/// # Ok(())
/// # }
/// ```
pub trait ObjectBackend: Send + Sync + 'static {
    /// Reads the object. A missing object is [`BackendError::NoLease`].
    fn read_object(&self) -> impl Future<Output = Result<StoredObject, BackendError>> + Send;

    /// Writes `bytes` if the stored version is `expected`, or, when
    /// `expected` is `None`, only if no object exists. A failed condition is
    /// [`BackendError::LeaseHeld`], or [`BackendError::NoLease`] when the
    /// expected object has vanished. Returns the new version.
    fn write_object(
        &self,
        expected: Option<&Version>,
        bytes: Vec<u8>,
    ) -> impl Future<Output = Result<Version, BackendError>> + Send;

    /// Deletes the object if the stored version is `expected`.
    fn delete_object(&self, expected: &Version) -> impl Future<Output = Result<(), BackendError>> + Send;
}

/// Every object store holds lease records: stored as their JSON encoding,
/// with bytes that do not parse reported as [`BackendError::Corrupt`].
impl<O: ObjectBackend> Backend for O {
    async fn read(&self) -> Result<Stored, BackendError> {
        decode(self.read_object().await?)
    }

    async fn write(&self, expected: Option<&Version>, record: &LeaseRecord) -> Result<Version, BackendError> {
        self.write_object(expected, record.encode()).await
    }

    async fn delete(&self, expected: &Version) -> Result<(), BackendError> {
        self.delete_object(expected).await
    }
}

/// A stored object as a lease record, or [`BackendError::Corrupt`] naming
/// its version.
fn decode(object: StoredObject) -> Result<Stored, BackendError> {
    match LeaseRecord::decode(&object.bytes) {
        Ok(record) => Ok(Stored { record, version: object.version }),
        Err(reason) => Err(BackendError::Corrupt { version: object.version, reason }),
    }
}
