//! An in-memory [`ObjectBackend`] (and so a lease [`super::Backend`]): one
//! object behind a mutex.
//!
//! Every operation takes the lock once, so the backend is linearizable by
//! construction. It stores the encoded bytes rather than the record, so reads
//! go through the same parser as a real store's and a corrupt record can be
//! planted with [`MemoryBackend::put_raw`].

use std::sync::{Arc, Mutex, MutexGuard};

use super::{BackendError, ObjectBackend, StoredObject, Version};

/// An in-memory lease key. Clones share the same key.
///
/// ```
/// use hoplock::backend::{Backend, memory::MemoryBackend};
/// use hoplock::lease::{Generation, LeaseRecord};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), hoplock::backend::BackendError> {
/// let store = MemoryBackend::new();
/// let record = LeaseRecord {
///     generation: Generation(1),
///     expires_at: String::new(),
///     owner: "a".into(),
///     nonce: "1".into(),
///     ttl_ms: Some(30_000),
///     renew_ms: Some(10_000),
///     incarnation: "i".into(),
///     released: false,
/// };
/// let version = store.write(None, &record).await?;
/// assert_eq!(store.read().await?.version, version);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct MemoryBackend {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    object: Option<(Vec<u8>, Version)>,
    /// Versions come from a counter that survives deletes, so no version is
    /// ever handed out twice.
    writes: u64,
}

impl State {
    fn next_version(&mut self) -> Version {
        self.writes += 1;
        Version::new(format!("m{}", self.writes))
    }

    fn check(&self, expected: Option<&Version>) -> Result<(), BackendError> {
        match (expected, &self.object) {
            (None, None) => Ok(()),
            (None, Some(_)) => Err(BackendError::LeaseHeld),
            (Some(_), None) => Err(BackendError::NoLease),
            (Some(expected), Some((_, current))) if expected == current => Ok(()),
            (Some(_), Some(_)) => Err(BackendError::LeaseHeld),
        }
    }
}

impl MemoryBackend {
    /// An empty lease key.
    pub fn new() -> MemoryBackend {
        MemoryBackend::default()
    }

    /// Stores `bytes` unconditionally, as a foreign writer or a broken tool
    /// would. Returns the new version.
    pub fn put_raw(&self, bytes: impl Into<Vec<u8>>) -> Version {
        let mut state = self.lock();
        let version = state.next_version();
        state.object = Some((bytes.into(), version.clone()));
        version
    }

    /// Removes the record unconditionally, as an operator or a lifecycle rule
    /// might.
    pub fn remove(&self) {
        self.lock().object = None;
    }

    /// The stored bytes, if any.
    pub fn raw(&self) -> Option<Vec<u8>> {
        self.lock().object.as_ref().map(|(bytes, _)| bytes.clone())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state has no invariant that a panic while holding the lock can
        // break half-way (each operation assigns whole values), so a poisoned
        // lock is still usable.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl ObjectBackend for MemoryBackend {
    async fn read_object(&self) -> Result<StoredObject, BackendError> {
        let state = self.lock();
        let (bytes, version) = state.object.as_ref().ok_or(BackendError::NoLease)?;
        Ok(StoredObject { bytes: bytes.clone(), version: version.clone() })
    }

    async fn write_object(&self, expected: Option<&Version>, bytes: Vec<u8>) -> Result<Version, BackendError> {
        let mut state = self.lock();
        state.check(expected)?;
        let version = state.next_version();
        state.object = Some((bytes, version.clone()));
        Ok(version)
    }

    async fn delete_object(&self, expected: &Version) -> Result<(), BackendError> {
        let mut state = self.lock();
        state.check(Some(expected))?;
        state.object = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::conformance;

    #[tokio::test]
    async fn passes_the_object_conformance_suite() {
        conformance::run_objects(&MemoryBackend::new()).await.unwrap();
    }

    #[tokio::test]
    async fn passes_the_conformance_suite() {
        let store = MemoryBackend::new();
        let plant = store.clone();
        conformance::run_all(&store, move |bytes| {
            let plant = plant.clone();
            async move {
                plant.put_raw(bytes);
                Ok(())
            }
        })
        .await
        .unwrap();
    }
}
