//! The hoplock simulator: the production elector and S3 backend, run
//! unchanged against a faithful fake S3 inside a deterministic simulated
//! network and clock.

pub mod clocks;
pub mod downstream;
pub mod follower_reads;
pub mod history;
pub mod invariants;
pub mod keyed_abandons;
pub mod keyed_aborts;
pub mod keyed_evictions;
pub mod keyed_handoffs;
pub mod keyed_lapses;
pub mod keyed_rewrites;
pub mod mix;
pub mod node;
pub mod runner;
pub mod scenario;
pub mod transport;
pub mod version_lag;
pub mod world;

// The fake S3 and the register checker live in `hoplock-testkit`, where the
// command line can use them too; re-exported so the simulator's paths and
// its users' keep working.
pub use hoplock_testkit::{fake_s3, linearizability};
