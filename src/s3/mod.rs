//! Talking to S3-compatible object stores.
//!
//! [`S3Backend`] keeps the lease record in one object and writes it with
//! conditional PUTs. [`sigv4`] signs (and, for the simulator's fake S3,
//! verifies) requests; [`transport`] is the HTTP seam; [`credentials`] finds
//! keys; [`xml`] reads S3's error bodies.

pub mod sigv4;

pub mod backend;
pub mod config;
pub mod credentials;
pub mod transport;
pub mod xml;

pub use backend::S3Backend;
pub use config::S3Config;
