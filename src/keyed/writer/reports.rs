//! What the member's loop tells its operator: the log lines whose wording
//! or level depends on what happened.
//!
//! They live apart from the loop so that the loop's functions hold only
//! what decides when the member reads, writes, starts and stops keys; the
//! mutation run (`cargo xtask mutants --part keyed`) judges those, and a
//! changed log line is nothing a scenario can observe.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tracing::{debug, info, warn};

use crate::backend::{BackendError, Version};
use crate::keyed::core::{Seen, WriteKind};
use crate::keyed::record::Change;

/// Logs the newest view at info when it is new to this member (`before` is
/// the view it knew before the read).
pub(super) fn new_view(member: &str, before: Option<u64>, newest: Option<&Seen>) {
    if let Some(seen) = newest.filter(|seen| Some(seen.record.view) != before) {
        let change = &seen.record.change;
        info!(member, view = seen.record.view, change = ?change.kind, entry = %change.id, members = seen.record.entries.len(), "new membership view");
    }
}

/// Warns, once per process, that there is no object and this member may
/// not create one.
pub(super) fn absent(member: &str, reported: &AtomicBool) {
    if !reported.swap(true, Ordering::Relaxed) {
        warn!(
            member,
            "there is no membership object, and this member was not told a view to create one at (create_at); acting for no key until it exists"
        );
    }
}

/// Logs a write that landed: a renewal at debug, any change of membership
/// at info.
pub(super) fn landed(member: &str, kind: WriteKind, view: u64, change: &Change) {
    match kind {
        WriteKind::Renew => debug!(member, view, "renewed"),
        _ => info!(member, view, ?kind, entry = %change.id, "membership changed"),
    }
}

/// Why a write's outcome is unknown: the store's error, or no answer
/// within the request timeout.
pub(super) fn unknown_outcome(failed: Option<Result<Version, BackendError>>, timeout: Duration) -> String {
    match failed {
        Some(Err(e)) => e.to_string(),
        _ => format!("no answer within {timeout:?}"),
    }
}
