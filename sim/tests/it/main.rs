//! The simulator crate's one integration-test binary; each module tests one
//! part.

mod conformance;
mod fake_s3;
mod gated_steps;
mod runs;
mod scenarios;
mod transport;
