//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (feature
//! `metrics`). The application installs whichever exporter it likes; with
//! none installed, or without the feature, every call here does nothing.
//!
//! | Name | Kind | Labels | Meaning |
//! |---|---|---|---|
//! | `hoplock_leader` | gauge | `owner` | 1 while this elector leads, else 0 |
//! | `hoplock_generation` | gauge | `owner` | the generation of the current or last term |
//! | `hoplock_transitions_total` | counter | `owner`, `to` (`leader`, `follower`) | leadership changes |
//! | `hoplock_renewal_seconds` | histogram | `owner` | time a successful renewal write took |
//! | `hoplock_store_requests_total` | counter | `owner`, `op` (`read`, `write`) | requests to the lease store |
//! | `hoplock_store_errors_total` | counter | `owner`, `op`, `kind` | failed requests, by what the caller does next |
//!
//! `kind` is one of `transient`, `ambiguous`, `conflict`, `corrupt`,
//! `unsupported`, `config`. "The record changed" and "no record" are
//! answers, not errors, and are not counted as errors.

use std::time::Duration;

use crate::backend::BackendError;
use crate::lease::Generation;

/// The name of the leader gauge.
pub const LEADER: &str = "hoplock_leader";
/// The name of the generation gauge.
pub const GENERATION: &str = "hoplock_generation";
/// The name of the leadership-change counter.
pub const TRANSITIONS: &str = "hoplock_transitions_total";
/// The name of the renewal latency histogram.
pub const RENEWAL_SECONDS: &str = "hoplock_renewal_seconds";
/// The name of the store request counter.
pub const STORE_REQUESTS: &str = "hoplock_store_requests_total";
/// The name of the store error counter.
pub const STORE_ERRORS: &str = "hoplock_store_errors_total";

/// A term began (`leading`) or ended.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn leadership(owner: &str, leading: bool, generation: Generation) {
    #[cfg(feature = "metrics")]
    {
        let owner = owner.to_string();
        metrics::gauge!(LEADER, "owner" => owner.clone()).set(if leading { 1.0 } else { 0.0 });
        metrics::gauge!(GENERATION, "owner" => owner.clone()).set(generation.get() as f64);
        let to = if leading { "leader" } else { "follower" };
        metrics::counter!(TRANSITIONS, "owner" => owner, "to" => to).increment(1);
    }
}

/// A renewal landed after `took`.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn renewed(owner: &str, took: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!(RENEWAL_SECONDS, "owner" => owner.to_string()).record(took.as_secs_f64());
}

/// One request to the store, and its error if it failed.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn store_request(owner: &str, op: &'static str, error: Option<&BackendError>) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!(STORE_REQUESTS, "owner" => owner.to_string(), "op" => op).increment(1);
        let kind = match error {
            None | Some(BackendError::NoLease | BackendError::LeaseHeld) => return,
            Some(BackendError::Transient(_)) => "transient",
            Some(BackendError::Ambiguous(_)) => "ambiguous",
            Some(BackendError::Conflict(_)) => "conflict",
            Some(BackendError::Corrupt { .. }) => "corrupt",
            Some(BackendError::Unsupported(_)) => "unsupported",
            Some(BackendError::Config(_)) => "config",
        };
        metrics::counter!(STORE_ERRORS, "owner" => owner.to_string(), "op" => op, "kind" => kind).increment(1);
    }
}
