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
//! they never delete it. This policy is enough:
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
//! Without `s3:ListBucket`, S3 answers a GET of a key that does not exist
//! with `403 AccessDenied` rather than `404`. The backend takes that 403 as
//! "maybe missing" and lets the conditional create settle it: `If-None-Match:
//! *` succeeds only on a missing key, so the first campaign on a fresh key
//! proceeds as after a 404, and a 412 followed by another 403 proves the key
//! exists but may not be read, which is reported as a configuration error
//! naming `s3:GetObject`. Granting `s3:ListBucket` is not needed, and it lets
//! the holder list every key name in the bucket (restrict it with an
//! `s3:prefix` condition if you grant it).
//!
//! [`S3Backend::verify`] (which `hoplock run` calls before it campaigns)
//! writes a probe object next to the lease key and leaves it in place, and
//! checks that a key beside it stays missing, so it needs the same two
//! permissions on `leases/scheduler.json.hoplock-verify*`; list both
//! resources:
//!
//! ```json
//! "Resource": ["arn:aws:s3:::my-bucket/leases/scheduler.json",
//!              "arn:aws:s3:::my-bucket/leases/scheduler.json.hoplock-verify*"]
//! ```
//!
//! # Credentials
//!
//! [`credentials::CredentialSource::Default`] tries, in this order, the
//! sources the AWS SDKs try: the environment (`AWS_ACCESS_KEY_ID`, ...), the
//! shared config and credentials files (`AWS_PROFILE`; static keys,
//! `role_arn` with `source_profile` or `credential_source`, web identity,
//! `credential_process`), web identity from `AWS_WEB_IDENTITY_TOKEN_FILE`
//! (EKS), container credentials (ECS, EKS Pod Identity), and EC2 instance
//! metadata (IMDSv2). SSO profiles are not read. Temporary keys are
//! refreshed in the background ahead of expiry; see [`credentials`].
//!
//! # Errors
//!
//! An answer is grouped by what it proves. A 4xx proves the request was
//! refused, so nothing changed: throttling (429, `SlowDown` on a read,
//! `Throttling`), timeouts (408, `RequestTimeout`) and unknown refusals are
//! passing errors the elector retries. A 5xx or a lost reply to a write may
//! come after the write applied, so it is ambiguous and settled by reading
//! the nonce back. `ExpiredToken` passes when the keys refresh and is fatal
//! for static keys. Only what needs a person ends a campaign: a wrong secret
//! or key id, a missing bucket, a denied permission, a provider without
//! conditional writes.
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
pub use crate::transport;
pub mod xml;

pub use backend::{Inspection, PROBE_SUFFIX, S3Backend, Verification};
pub use config::S3Config;
