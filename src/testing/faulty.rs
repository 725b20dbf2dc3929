//! A [`Backend`] wrapper that injects failures, for tests of code built on
//! the elector.
//!
//! ```
//! use hoplock::backend::{Backend, BackendError, memory::MemoryBackend};
//! use hoplock::testing::faulty::{Fault, Faulty};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let store = Faulty::new(MemoryBackend::new());
//! store.control().set(Fault::Fail(BackendError::Transient("injected".into())));
//! assert!(matches!(store.read().await, Err(BackendError::Transient(_))));
//! # }
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::backend::{Backend, BackendError, Stored, Version};
use crate::lease::LeaseRecord;

/// What the wrapper does to each operation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Fault {
    /// Pass operations through.
    #[default]
    None,
    /// Fail every operation with this error, without reaching the store.
    Fail(BackendError),
    /// Never answer, as a partitioned store would.
    Hang,
    /// Apply writes, then report [`BackendError::Ambiguous`], as when a reply
    /// is lost. Reads pass through.
    LoseReply,
}

/// Shared switch for a [`Faulty`] backend's behaviour.
#[derive(Clone, Debug, Default)]
pub struct FaultControl {
    state: Arc<Mutex<(Fault, Duration)>>,
}

impl FaultControl {
    /// Sets the fault applied from now on.
    pub fn set(&self, fault: Fault) {
        self.lock().0 = fault;
    }

    /// Sets a delay added before every operation (tokio time).
    pub fn set_latency(&self, latency: Duration) {
        self.lock().1 = latency;
    }

    fn get(&self) -> (Fault, Duration) {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Fault, Duration)> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A backend whose operations fail or stall on command.
#[derive(Clone, Debug)]
pub struct Faulty<B> {
    inner: B,
    control: FaultControl,
}

impl<B: Backend> Faulty<B> {
    /// Wraps `inner`, passing everything through until told otherwise.
    pub fn new(inner: B) -> Faulty<B> {
        Faulty { inner, control: FaultControl::default() }
    }

    /// The switch; clones of it control this backend.
    pub fn control(&self) -> FaultControl {
        self.control.clone()
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    async fn before(&self) -> Result<Fault, BackendError> {
        let (fault, latency) = self.control.get();
        if !latency.is_zero() {
            #[allow(clippy::disallowed_methods)] // Test support: latency in tokio time.
            tokio::time::sleep(latency).await;
        }
        match fault {
            Fault::Fail(err) => Err(err),
            Fault::Hang => std::future::pending().await,
            other => Ok(other),
        }
    }
}

impl<B: Backend> Backend for Faulty<B> {
    async fn read(&self) -> Result<Stored, BackendError> {
        self.before().await?;
        self.inner.read().await
    }

    async fn write(&self, expected: Option<&Version>, record: &LeaseRecord) -> Result<Version, BackendError> {
        let fault = self.before().await?;
        let result = self.inner.write(expected, record).await;
        match (fault, result) {
            (Fault::LoseReply, Ok(_)) => Err(BackendError::Ambiguous("reply lost (injected)".into())),
            (_, result) => result,
        }
    }

    async fn delete(&self, expected: &Version) -> Result<(), BackendError> {
        let fault = self.before().await?;
        let result = self.inner.delete(expected).await;
        match (fault, result) {
            (Fault::LoseReply, Ok(())) => Err(BackendError::Ambiguous("reply lost (injected)".into())),
            (_, result) => result,
        }
    }
}
