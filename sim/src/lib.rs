//! The hoplock simulator: the production elector and S3 backend, run
//! unchanged against a faithful fake S3 inside a deterministic simulated
//! network and clock.

pub mod clocks;
pub mod downstream;
pub mod fake_s3;
pub mod history;
pub mod invariants;
pub mod linearizability;
pub mod mix;
pub mod node;
pub mod runner;
pub mod scenario;
pub mod transport;
pub mod world;
