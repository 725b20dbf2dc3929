//! Talking to S3-compatible object stores.
//!
//! [`S3Backend`] keeps the lease record in one object and writes it with
//! conditional PUTs. [`sigv4`] signs (and, for the simulator's fake S3,
//! verifies) requests; [`transport`] is the HTTP seam; [`credentials`] finds
//! keys; [`xml`] reads S3's error bodies.
//!
//! # Deployment
//!
//! The electors need only `s3:GetObject` and `s3:PutObject` on the lease key;
//! they never delete it. A minimal IAM policy:
//!
//! ```json
//! {
//!   "Version": "2012-10-17",
//!   "Statement": [{
//!     "Effect": "Allow",
//!     "Action": ["s3:GetObject", "s3:PutObject"],
//!     "Resource": "arn:aws:s3:::my-bucket/leases/scheduler.json"
//!   }]
//! }
//! ```
//!
//! [`S3Backend::verify`] writes a scratch key next to the lease key, so it
//! also needs `s3:PutObject` (and `s3:DeleteObject` to clean up) on
//! `leases/scheduler.json.verify-*`.
//!
//! **Nothing may delete or expire the lease key.** A lifecycle rule, a
//! cleanup script or a bucket migration that removes it resets the fencing
//! token for any elector that has not seen the old generation. Electors that
//! have seen it never write a lower generation, but a freshly started one
//! would begin again at 1. If it happens, reset the key with `hoplock lease
//! reset --generation-floor N`, N being at least the highest token any
//! downstream system has accepted.
//!
//! # Provider quirks
//!
//! - Some providers compare the bare ETag in `If-Match`; set
//!   [`config::EtagStyle::Bare`] for them.
//! - A failed `If-None-Match` PUT may come back as 304 instead of 412, and an
//!   `If-Match` on a missing key as 412 instead of 404; both are refusals and
//!   are treated so.
//! - A clock more than 15 minutes off the store's makes every request fail
//!   with `RequestTimeTooSkewed`; the error reports the skew measured from
//!   the response's `Date` header, and the backend logs a warning once the
//!   skew passes [`config::S3Config::clock_skew_warning`]. The election itself
//!   never compares clocks.
//! - Providers that answer 501 to conditional headers (Backblaze B2) are
//!   reported as [`crate::BackendError::Unsupported`]; providers that ignore
//!   them (Garage) are caught by [`S3Backend::verify`].

pub mod sigv4;

pub mod backend;
pub mod config;
pub mod credentials;
pub mod transport;
pub mod xml;

pub use backend::S3Backend;
pub use config::S3Config;
