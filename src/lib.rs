//! hoplock elects a single writer over a compare-and-swap store.
//! (Crate documentation is filled in below as the modules land.)

pub mod hrw;
pub mod lease;
