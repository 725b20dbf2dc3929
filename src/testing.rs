//! Test support for users of the library and for its own tests: the backend
//! conformance suite and a backend wrapper that injects failures.
//!
//! Enabled by the `testing` feature.

pub mod conformance;
pub mod faulty;
#[cfg(feature = "s3")]
pub mod stub_transport;
