//! Keyed single writers: many keys shared out over a group of members by
//! HRW, with at most one member acting for each key at any moment, and a
//! round per key that fences its downstream writes.
//!
//! The group's state is one membership object in a compare-and-swap store
//! (any [`crate::backend::ObjectBackend`]: S3, memory). It lists one entry
//! per member incarnation and a view generation that goes up by one on every
//! join, leave and eviction. The cost is per member, not per key: each
//! member reads the object every read interval and writes it every renew
//! interval, whether it shares out a hundred keys or ten thousand.
//!
//! - A member's **term** is a lease term: it holds for TTL·(1−ρ)/(1+ρ)
//!   minus the stop margin after the send of its last successful write, and
//!   every key it runs stops when the term ends, reachable store or not.
//! - **Joins** are acknowledged: a member that reads a view in which a key
//!   moved away stops that key's work, waits for it, and only then writes
//!   the view back as *adopted*. A joiner starts keys only once every entry
//!   has adopted its join (the view is **active**).
//! - **Leaves** stop every key before the entry is removed; **evictions**
//!   remove an entry whose nonce has not changed for its TTL, timed as a
//!   lease contender times a dead holder.
//! - The **round** of a key is the view in which its current holder started
//!   it: unique per holder and strictly rising per key.
//!
//! [`KeyedWriter`] runs a member; [`KeyedHandle`] exposes it as
//! [`crate::hrw::Membership`] and [`crate::hrw::Leases`]. The object's
//! format and limits are in [`record`].
//!
//! ```
//! use std::time::Duration;
//! use hoplock::backend::memory::MemoryBackend;
//! use hoplock::keyed::KeyedWriter;
//!
//! let writer = KeyedWriter::builder(MemoryBackend::new())
//!     .id("worker-1")
//!     .keys((0..1_000).map(|i| format!("tenant-{i}")))
//!     .ttl(Duration::from_secs(30))
//!     .build()
//!     .expect("a valid configuration");
//! assert_eq!(writer.handle().snapshot().view, None, "nothing is read before run()");
//! ```

mod context;
mod core;
pub mod record;
mod reset;
mod term_guard;
mod writer;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use context::KeyContext;
pub use record::{MAX_MEMBERS, MAX_OBJECT_BYTES, MembershipRecord};
pub use reset::{MembershipReset, RESET_ENTRY_ID, Replaced, ResetError, ResetPlan};
pub use writer::{KeyedHandle, KeyedWriter, KeyedWriterBuilder, Leaver};

use crate::backend::BackendError;
use crate::hrw::Round;

/// Why a member cannot run, grouped by what the caller should do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyedError {
    /// Fix the configuration: bad timing, a missing id, or a weight
    /// function that differs from the membership object's.
    #[error("keyed writer configuration error: {0}")]
    Config(String),
    /// The membership object already holds [`MAX_MEMBERS`] entries: split
    /// the keys over more objects.
    #[error("the membership object already holds the {MAX_MEMBERS} entries it may")]
    Full,
    /// The store cannot do what membership needs (conditional writes) or is
    /// misconfigured; retrying will not help.
    #[error("membership store error: {0}")]
    Store(#[source] BackendError),
}

/// A member's state at one moment, from [`KeyedHandle::snapshot`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Snapshot {
    /// The current incarnation.
    pub incarnation: String,
    /// The newest view read, if any.
    pub view: Option<u64>,
    /// Whether that view is active.
    pub active: bool,
    /// Whether the member's term holds.
    pub term_holds: bool,
    /// The keys it runs, with their rounds. Shared with the member, so a
    /// snapshot costs the same with ten keys or ten thousand.
    pub running: Arc<BTreeMap<String, Round>>,
}
