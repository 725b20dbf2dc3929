//! hoplock elects a single writer over a compare-and-swap store, such as
//! S3 with conditional writes, and hands the writer a fencing token that
//! strictly increases for the life of the lease key.
//!
//! - [`Elector`] campaigns for the lease, runs leader-only work while it
//!   holds it, and cancels that work before the lease can have passed to
//!   anyone else, even when the store is unreachable.
//! - [`Backend`] is the storage seam: one key with a read, a conditional
//!   write and a conditional delete. [`backend::memory::MemoryBackend`] is
//!   included; the S3 backend lives in `hoplock::s3` (feature `s3`), Google
//!   Cloud Storage in `hoplock::gcs` (feature `gcs`), Azure Blob Storage in
//!   `hoplock::azure` (feature `azure`), and `hoplock::store` opens any of
//!   them from a URL.
//! - [`Generation`] is the fencing token; [`fence::Fence`] is the check a
//!   downstream resource makes with it.
//! - [`hrw`] answers "which replica owns key K?" by rendezvous hashing,
//!   identically on every replica.
//! - [`clock::Clock`] and [`entropy::Entropy`] are the seams for time and
//!   randomness, so tests and the simulator can control both.
//!
//! # Guarantees and assumptions
//!
//! Clocks may be offset from each other by any amount; the elector never
//! compares one machine's clock with another's. Each clock's *rate* must stay
//! within the drift bound ρ of real time (default 1e-3). The store must be
//! linearizable and honour its conditions; `hoplock check-s3` tests that.
//! Under those assumptions no two electors hold a live leader context at the
//! same moment, and no generation is acquired twice. Work that keeps running
//! after its context is cancelled (a paused process) is not stopped by any
//! lease: downstream resources must check the generation.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use hoplock::{Elector, backend::memory::MemoryBackend};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), hoplock::ElectorError> {
//! let store = MemoryBackend::new();
//! let elector = Elector::builder(store).owner("node-a").ttl(Duration::from_secs(30)).build()?;
//! let term = elector
//!     .lead(|ctx, lease| async move {
//!         // Leader-only work: write with `lease.generation` as the fencing
//!         // token, and stop when `ctx.cancelled()` completes.
//!         let _ = ctx;
//!         lease.generation.get()
//!     })
//!     .await?;
//! assert_eq!(term.output, 1);
//! # Ok(())
//! # }
//! ```

#[cfg(feature = "azure")]
pub mod azure;
pub mod backend;
pub mod clock;
#[cfg(any(feature = "gcs", feature = "azure"))]
mod cloud;
pub mod elector;
pub mod entropy;
pub mod fence;
#[cfg(feature = "gcs")]
pub mod gcs;
pub mod hrw;
pub mod keyed;
pub mod lease;
pub mod metrics;
#[cfg(feature = "planted")]
pub mod planted;
#[cfg(not(feature = "planted"))]
mod planted;
mod rfc3339;
#[cfg(feature = "s3")]
pub mod s3;
#[cfg(any(feature = "s3", feature = "gcs", feature = "azure"))]
pub mod store;
pub mod term_timing;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(feature = "http-transport")]
pub mod transport;

pub use backend::{Backend, BackendError};
pub use elector::{Elector, ElectorError, Event, LeaderContext, Lease, Reads, StoreHealth, WorkGuard};
pub use lease::Generation;

/// The README's and the guides' Rust snippets, compiled and run as doctests
/// so that what a reader copies builds.
#[cfg(doctest)]
mod documentation {
    #[doc = include_str!("../README.md")]
    struct Readme;
    #[doc = include_str!("../docs/guarantees.md")]
    struct Guarantees;
    #[doc = include_str!("../docs/s3.md")]
    struct S3;
    #[doc = include_str!("../docs/stores.md")]
    struct Stores;
    #[doc = include_str!("../docs/keyed.md")]
    struct Keyed;
    #[doc = include_str!("../docs/check-s3.md")]
    struct CheckS3;
    #[doc = include_str!("../docs/testing.md")]
    struct Testing;
    #[doc = include_str!("../docs/chaos.md")]
    struct Chaos;
    #[doc = include_str!("../docs/performance.md")]
    struct Performance;
    #[doc = include_str!("../docs/mutation-testing.md")]
    struct MutationTesting;
    #[doc = include_str!("../docs/hrw-bench.md")]
    struct HrwBench;
    #[doc = include_str!("../CONTRIBUTING.md")]
    struct Contributing;
}
