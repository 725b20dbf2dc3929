//! The conformance suite every [`Backend`] must pass, and the one every
//! [`ObjectBackend`] must pass ([`run_objects`]: the lease suite over the
//! records it stores, then what byte bodies need besides).
//!
//! Each check takes a backend whose key is empty, leaves it empty again when
//! it passes, and returns a [`Failure`] that says which rule was broken. The
//! checks report rather than panic, so a command-line validator can run them
//! against a user's store and print the result.
//!
//! ```
//! use hoplock::backend::memory::MemoryBackend;
//! use hoplock::testing::conformance;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let store = MemoryBackend::new();
//! let plant = store.clone();
//! conformance::run_all(&store, move |bytes| {
//!     let plant = plant.clone();
//!     async move { plant.put_raw(bytes); Ok(()) }
//! })
//! .await
//! .expect("the memory backend conforms");
//! # }
//! ```

use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;

use crate::backend::{Backend, BackendError, ObjectBackend, Version};
use crate::lease::{Generation, LeaseRecord};

/// A broken conformance rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The check that failed.
    pub check: &'static str,
    /// What was expected and what happened.
    pub detail: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.check, self.detail)
    }
}

impl std::error::Error for Failure {}

/// How many writers race in the race checks.
pub const RACERS: usize = 8;

fn fail(check: &'static str, detail: impl Into<String>) -> Failure {
    Failure { check, detail: detail.into() }
}

/// A record distinguishable by `tag`.
pub fn sample_record(generation: u64, tag: &str) -> LeaseRecord {
    LeaseRecord {
        generation: Generation(generation),
        expires_at: "2030-01-01T00:00:00.000Z".into(),
        owner: format!("conformance-{tag}"),
        nonce: format!("nonce-{tag}"),
        ttl_ms: Some(30_000),
        renew_ms: Some(10_000),
        incarnation: "conformance".into(),
        released: false,
    }
}

/// Runs every check in turn. `plant` stores raw bytes under the empty key
/// (with or without a condition); it is used to put a corrupt record in
/// place.
pub async fn run_all<B, P, F>(backend: &B, plant: P) -> Result<(), Failure>
where
    B: Backend,
    P: FnOnce(Vec<u8>) -> F,
    F: Future<Output = Result<(), String>>,
{
    create_race_has_one_winner(backend).await?;
    update_race_has_one_winner(backend).await?;
    stale_version_is_rejected(backend).await?;
    every_write_changes_the_version(backend).await?;
    delete_rules(backend).await?;
    corrupt_record_is_reported(backend, plant).await?;
    Ok(())
}

/// Polls every future to completion concurrently on the current task, so the
/// suite needs no runtime-specific spawn.
async fn join_all<T>(futures: Vec<Pin<Box<dyn Future<Output = T> + Send + '_>>>) -> Vec<T> {
    let mut futures: Vec<_> = futures.into_iter().map(Some).collect();
    let mut results: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    poll_fn(|cx| {
        let mut pending = false;
        for (slot, result) in futures.iter_mut().zip(results.iter_mut()) {
            if let Some(future) = slot {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => {
                        *result = Some(value);
                        *slot = None;
                    }
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending { Poll::Pending } else { Poll::Ready(()) }
    })
    .await;
    results.into_iter().flatten().collect()
}

async fn expect_empty<B: Backend>(backend: &B, check: &'static str) -> Result<(), Failure> {
    match backend.read().await {
        Err(BackendError::NoLease) => Ok(()),
        Ok(stored) => Err(fail(check, format!("the key must be empty at the start, found {:?}", stored.record))),
        Err(other) => Err(fail(check, format!("reading the empty key failed: {other}"))),
    }
}

async fn cleanup<B: Backend>(backend: &B, check: &'static str) -> Result<(), Failure> {
    let version = match backend.read().await {
        Ok(stored) => stored.version,
        Err(BackendError::Corrupt { version, .. }) => version,
        Err(BackendError::NoLease) => return Ok(()),
        Err(other) => return Err(fail(check, format!("cleanup read failed: {other}"))),
    };
    backend.delete(&version).await.map_err(|err| fail(check, format!("cleanup delete failed: {err}")))
}

/// Counts winners among race results; anything but a win, `LeaseHeld` or
/// `Conflict` is a failure.
fn count_winners(check: &'static str, results: &[Result<Version, BackendError>]) -> Result<usize, Failure> {
    let mut winners = 0;
    for result in results {
        match result {
            Ok(_) => winners += 1,
            Err(BackendError::LeaseHeld | BackendError::Conflict(_)) => {}
            Err(other) => {
                return Err(fail(check, format!("a racing write failed unexpectedly: {other}")));
            }
        }
    }
    Ok(winners)
}

/// The one winner among race results, by index, with its version; `races`
/// names the racing writes for the message when there is not exactly one.
fn one_winner(
    check: &'static str,
    results: &[Result<Version, BackendError>],
    races: &str,
) -> Result<(usize, Version), Failure> {
    let winners = count_winners(check, results)?;
    if winners != 1 {
        return Err(fail(check, format!("{winners} of {RACERS} {races} succeeded; exactly one must")));
    }
    results
        .iter()
        .enumerate()
        .find_map(|(index, result)| result.as_ref().ok().map(|version| (index, version.clone())))
        .ok_or_else(|| fail(check, "no winner found"))
}

/// Writers racing to create the record: exactly one wins, and the stored
/// record is the winner's.
pub async fn create_race_has_one_winner<B: Backend>(backend: &B) -> Result<(), Failure> {
    const CHECK: &str = "create_race_has_one_winner";
    expect_empty(backend, CHECK).await?;
    let records: Vec<LeaseRecord> = (0..RACERS).map(|i| sample_record(1, &format!("create-{i}"))).collect();
    let futures = records.iter().map(|r| Box::pin(backend.write(None, r)) as Pin<Box<dyn Future<Output = _> + Send>>);
    let results = join_all(futures.collect()).await;
    let (index, version) = one_winner(CHECK, &results, "racing creates")?;
    let stored = backend.read().await.map_err(|err| fail(CHECK, format!("read after the race failed: {err}")))?;
    if stored.record != records[index] || stored.version != version {
        return Err(fail(CHECK, "the stored record or version is not the winner's"));
    }
    cleanup(backend, CHECK).await
}

/// Writers racing to replace the same version: exactly one wins.
pub async fn update_race_has_one_winner<B: Backend>(backend: &B) -> Result<(), Failure> {
    const CHECK: &str = "update_race_has_one_winner";
    expect_empty(backend, CHECK).await?;
    let base = backend
        .write(None, &sample_record(1, "base"))
        .await
        .map_err(|err| fail(CHECK, format!("create failed: {err}")))?;
    let records: Vec<LeaseRecord> = (0..RACERS).map(|i| sample_record(2, &format!("update-{i}"))).collect();
    let futures =
        records.iter().map(|r| Box::pin(backend.write(Some(&base), r)) as Pin<Box<dyn Future<Output = _> + Send>>);
    let results = join_all(futures.collect()).await;
    one_winner(CHECK, &results, "racing updates of one version")?;
    cleanup(backend, CHECK).await
}

/// A write or delete against a version that has been replaced is refused
/// and changes nothing.
pub async fn stale_version_is_rejected<B: Backend>(backend: &B) -> Result<(), Failure> {
    const CHECK: &str = "stale_version_is_rejected";
    expect_empty(backend, CHECK).await?;
    let first = backend.write(None, &sample_record(1, "first")).await.map_err(|e| fail(CHECK, e.to_string()))?;
    let second =
        backend.write(Some(&first), &sample_record(2, "second")).await.map_err(|e| fail(CHECK, e.to_string()))?;
    match backend.write(Some(&first), &sample_record(3, "stale")).await {
        Err(BackendError::LeaseHeld) => {}
        other => {
            return Err(fail(CHECK, format!("a write against a replaced version must be LeaseHeld, got {other:?}")));
        }
    }
    match backend.write(None, &sample_record(3, "create-over")).await {
        Err(BackendError::LeaseHeld) => {}
        other => {
            return Err(fail(CHECK, format!("a create over an existing record must be LeaseHeld, got {other:?}")));
        }
    }
    match backend.delete(&first).await {
        Err(BackendError::LeaseHeld) => {}
        other => {
            return Err(fail(CHECK, format!("a delete against a replaced version must be LeaseHeld, got {other:?}")));
        }
    }
    let stored = backend.read().await.map_err(|e| fail(CHECK, e.to_string()))?;
    if stored.version != second || stored.record != sample_record(2, "second") {
        return Err(fail(CHECK, "a refused write or delete changed the record"));
    }
    cleanup(backend, CHECK).await
}

/// Every write hands out a new version, even when it writes the same bytes
/// as an earlier one; versions do not come back after a delete.
pub async fn every_write_changes_the_version<B: Backend>(backend: &B) -> Result<(), Failure> {
    const CHECK: &str = "every_write_changes_the_version";
    expect_empty(backend, CHECK).await?;
    let record = sample_record(1, "renew");
    let mut seen = vec![backend.write(None, &record).await.map_err(|e| fail(CHECK, e.to_string()))?];
    for round in 0..3 {
        let mut renewed = record.clone();
        renewed.nonce = format!("nonce-renew-{round}");
        let last = seen.last().cloned().unwrap_or_else(|| Version::new(""));
        let next = backend.write(Some(&last), &renewed).await.map_err(|e| fail(CHECK, e.to_string()))?;
        if seen.contains(&next) {
            return Err(fail(CHECK, format!("version {next} was handed out twice")));
        }
        seen.push(next);
    }
    cleanup(backend, CHECK).await?;
    let again = backend.write(None, &sample_record(1, "after-delete")).await.map_err(|e| fail(CHECK, e.to_string()))?;
    if seen.contains(&again) {
        return Err(fail(CHECK, format!("version {again} came back after a delete")));
    }
    cleanup(backend, CHECK).await
}

/// Deleting needs the current version; a missing record is `NoLease`.
///
/// Some S3-compatible stores answer a condition on a missing key with 412
/// rather than 404; the suite accepts `LeaseHeld` there, since both refuse.
pub async fn delete_rules<B: Backend>(backend: &B) -> Result<(), Failure> {
    const CHECK: &str = "delete_rules";
    expect_empty(backend, CHECK).await?;
    let version = backend.write(None, &sample_record(1, "delete")).await.map_err(|e| fail(CHECK, e.to_string()))?;
    backend.delete(&version).await.map_err(|e| fail(CHECK, format!("deleting the current version failed: {e}")))?;
    match backend.read().await {
        Err(BackendError::NoLease) => {}
        other => {
            return Err(fail(CHECK, format!("a deleted record must read as NoLease, got {other:?}")));
        }
    }
    match backend.delete(&version).await {
        Err(BackendError::NoLease | BackendError::LeaseHeld) => {}
        other => {
            return Err(fail(CHECK, format!("deleting a missing record must be refused, got {other:?}")));
        }
    }
    match backend.write(Some(&version), &sample_record(2, "vanished")).await {
        Err(BackendError::NoLease | BackendError::LeaseHeld) => {}
        other => {
            return Err(fail(CHECK, format!("a conditional write to a missing record must be refused, got {other:?}")));
        }
    }
    expect_empty(backend, CHECK).await
}

/// Bytes that are not a lease record read as `Corrupt`, with a version a
/// conditional write can replace them at.
pub async fn corrupt_record_is_reported<B, P, F>(backend: &B, plant: P) -> Result<(), Failure>
where
    B: Backend,
    P: FnOnce(Vec<u8>) -> F,
    F: Future<Output = Result<(), String>>,
{
    const CHECK: &str = "corrupt_record_is_reported";
    expect_empty(backend, CHECK).await?;
    plant(b"{\"generation\": \"not a number\"".to_vec())
        .await
        .map_err(|e| fail(CHECK, format!("planting failed: {e}")))?;
    let version = match backend.read().await {
        Err(BackendError::Corrupt { version, .. }) => version,
        other => {
            return Err(fail(CHECK, format!("a corrupt record must read as Corrupt, got {other:?}")));
        }
    };
    backend
        .write(Some(&version), &sample_record(5, "repaired"))
        .await
        .map_err(|e| fail(CHECK, format!("replacing the corrupt record at its version failed: {e}")))?;
    cleanup(backend, CHECK).await
}

/// How large the bodies of [`object_bodies_come_back_whole`] are: more
/// than a list of a hundred members with a few hundred bytes each.
pub const LARGE_OBJECT_BYTES: usize = 256 * 1024;

/// Runs the object suite: the whole lease suite over `store` (which holds
/// lease records as their JSON), then the checks only byte bodies need.
///
/// ```
/// use hoplock::backend::memory::MemoryBackend;
/// use hoplock::testing::conformance;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// conformance::run_objects(&MemoryBackend::new()).await.expect("the memory backend conforms");
/// # }
/// ```
pub async fn run_objects<O: ObjectBackend>(store: &O) -> Result<(), Failure> {
    // A corrupt record is planted through the seam itself, conditionally
    // on the key being empty, which every check leaves it.
    run_all(store, |bytes| async move { store.write_object(None, bytes).await.map(|_| ()).map_err(|e| e.to_string()) })
        .await?;
    object_bodies_come_back_whole(store).await?;
    object_race_leaves_one_whole_body(store).await?;
    Ok(())
}

/// Bytes of `len`, different for every `tag`; from 256 bytes on they
/// cover every byte value, NUL and invalid UTF-8 included.
fn body(len: usize, tag: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(tag)).collect()
}

async fn expect_no_object<O: ObjectBackend>(store: &O, check: &'static str) -> Result<(), Failure> {
    match store.read_object().await {
        Err(BackendError::NoLease) => Ok(()),
        Ok(object) => {
            Err(fail(check, format!("the key must be empty at the start, found {} bytes", object.bytes.len())))
        }
        Err(other) => Err(fail(check, format!("reading the empty key failed: {other}"))),
    }
}

async fn delete_object_at<O: ObjectBackend>(store: &O, check: &'static str, version: &Version) -> Result<(), Failure> {
    store.delete_object(version).await.map_err(|e| fail(check, format!("cleanup delete failed: {e}")))?;
    expect_no_object(store, check).await
}

/// Any bytes come back exactly as written, with the version the write
/// returned: large and small, binary and not UTF-8, replaced by a shorter
/// body without a tail of the longer one left over.
pub async fn object_bodies_come_back_whole<O: ObjectBackend>(store: &O) -> Result<(), Failure> {
    const CHECK: &str = "object_bodies_come_back_whole";
    expect_no_object(store, CHECK).await?;
    let mut expected = None;
    for (len, tag) in [(LARGE_OBJECT_BYTES, 1), (1, 2), (4096, 3)] {
        let bytes = body(len, tag);
        let version = store
            .write_object(expected.as_ref(), bytes.clone())
            .await
            .map_err(|e| fail(CHECK, format!("writing {len} bytes failed: {e}")))?;
        let read = store.read_object().await.map_err(|e| fail(CHECK, format!("reading {len} bytes failed: {e}")))?;
        if read.bytes != bytes {
            return Err(fail(CHECK, format!("wrote {len} bytes, read back {} different ones", read.bytes.len())));
        }
        if read.version != version {
            return Err(fail(CHECK, format!("the write returned version {version}, the read {}", read.version)));
        }
        expected = Some(version);
    }
    let last = expected.unwrap_or_else(|| Version::new(""));
    delete_object_at(store, CHECK, &last).await
}

/// Writers racing to replace one version with large bodies of their own:
/// exactly one wins, and the object reads back as the winner's body, whole.
pub async fn object_race_leaves_one_whole_body<O: ObjectBackend>(store: &O) -> Result<(), Failure> {
    const CHECK: &str = "object_race_leaves_one_whole_body";
    expect_no_object(store, CHECK).await?;
    let base = store.write_object(None, body(16, 0)).await.map_err(|e| fail(CHECK, format!("create failed: {e}")))?;
    let bodies: Vec<Vec<u8>> = (0..RACERS).map(|i| body(LARGE_OBJECT_BYTES, i as u8 + 1)).collect();
    let futures = bodies.iter().map(|bytes| {
        Box::pin(store.write_object(Some(&base), bytes.clone())) as Pin<Box<dyn Future<Output = _> + Send>>
    });
    let results = join_all(futures.collect()).await;
    let (index, version) = one_winner(CHECK, &results, "racing writes of one version")?;
    let read = store.read_object().await.map_err(|e| fail(CHECK, format!("read after the race failed: {e}")))?;
    if read.bytes != bodies[index] || read.version != version {
        return Err(fail(CHECK, "the object read after the race is not the winner's body at the winner's version"));
    }
    delete_object_at(store, CHECK, &version).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::StoredObject;
    use crate::backend::memory::MemoryBackend;

    /// Keeps only the first kilobyte of what it stores, as a store with a
    /// body limit it does not report would.
    struct Truncating(MemoryBackend);

    impl ObjectBackend for Truncating {
        async fn read_object(&self) -> Result<StoredObject, BackendError> {
            self.0.read_object().await
        }

        async fn write_object(&self, expected: Option<&Version>, mut bytes: Vec<u8>) -> Result<Version, BackendError> {
            bytes.truncate(1024);
            self.0.write_object(expected, bytes).await
        }

        async fn delete_object(&self, expected: &Version) -> Result<(), BackendError> {
            self.0.delete_object(expected).await
        }
    }

    /// Applies every write that names a version, current or not, as a
    /// provider that ignores `If-Match` does.
    struct IgnoresIfMatch(MemoryBackend);

    impl ObjectBackend for IgnoresIfMatch {
        async fn read_object(&self) -> Result<StoredObject, BackendError> {
            self.0.read_object().await
        }

        async fn write_object(&self, expected: Option<&Version>, bytes: Vec<u8>) -> Result<Version, BackendError> {
            match (expected, self.0.read_object().await) {
                (Some(_), Ok(current)) => self.0.write_object(Some(&current.version), bytes).await,
                _ => self.0.write_object(expected, bytes).await,
            }
        }

        async fn delete_object(&self, expected: &Version) -> Result<(), BackendError> {
            self.0.delete_object(expected).await
        }
    }

    #[tokio::test]
    async fn the_byte_checks_catch_what_they_are_for() {
        // Small lease records fit in a kilobyte: only the byte check sees it.
        let truncating = Truncating(MemoryBackend::new());
        let failure = object_bodies_come_back_whole(&truncating).await.unwrap_err();
        assert_eq!(failure.check, "object_bodies_come_back_whole", "{failure}");
        let failure = run_objects(&Truncating(MemoryBackend::new())).await.unwrap_err();
        assert_eq!(failure.check, "object_bodies_come_back_whole", "{failure}");

        let ignoring = IgnoresIfMatch(MemoryBackend::new());
        let failure = object_race_leaves_one_whole_body(&ignoring).await.unwrap_err();
        assert_eq!(failure.check, "object_race_leaves_one_whole_body", "{failure}");
        assert!(failure.detail.starts_with("8 of 8"), "{failure}");
    }
}
