//! A faithful fake S3: a state machine plus an HTTP front end that answers
//! the calls hoplock's S3 backend makes the way AWS S3 does, and can be made
//! to misbehave the ways real providers do.
//!
//! - [`store`]: buckets, keys and versions with S3's conditional semantics.
//!   No I/O, no clock: every operation takes the time it happens at.
//! - [`mode`]: [`ProviderMode`], how faithfully conditions are honoured.
//! - [`faults`]: [`Faults`], latency, 500/503 rates, 409 on overlapping
//!   conditional writes, and ambiguous successes (applied, reply lost).
//! - [`http`]: [`FakeS3`], SigV4 authentication, routing, and S3's
//!   answers: quoted MD5 ETags, `412 PreconditionFailed`, `404 NoSuchKey`,
//!   `304` for a matching `If-None-Match` on GET, XML error bodies, `Date`,
//!   `Last-Modified` and `x-amz-request-id` headers.
//! - [`server`]: hyper over any listener, and [`server::handle_whole`] for
//!   transports that carry whole requests, such as the simulator's.
//!
//! Determinism: time comes from the injected [`hoplock::clock::Clock`] and
//! every random choice from the seed given to [`FakeS3::builder`]; maps
//! whose order shows are `BTreeMap`s. Over the simulated network, one seed
//! replays one run.
//!
//! `cargo xtask fake-s3 --port N --mode M` serves it on 127.0.0.1 for
//! tests outside this workspace.
//!
//! # Example: the production S3 backend against the fake, over loopback TCP
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use hoplock::backend::Backend;
//! use hoplock::clock::SystemClock;
//! use hoplock::s3::config::Addressing;
//! use hoplock::s3::credentials::CredentialSource;
//! use hoplock::s3::sigv4::Credentials;
//! use hoplock::s3::{S3Backend, S3Config};
//! use hoplock_testkit::fake_s3::{FakeS3, ProviderMode, server};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let s3 = FakeS3::builder(Arc::new(SystemClock::new()), 7)
//!     .mode(ProviderMode::IgnoreIfNoneMatch)
//!     .credentials("AK", "SK")
//!     .bucket("leases")
//!     .build()?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let endpoint = format!("http://{}", listener.local_addr()?);
//! tokio::spawn(server::serve(s3, listener, std::future::pending()));
//!
//! let mut config = S3Config::new("leases", "scheduler.json");
//! config.endpoint = Some(endpoint);
//! config.addressing = Addressing::PathStyle;
//! config.credentials = CredentialSource::Explicit(Credentials::new("AK", "SK"));
//! let backend = S3Backend::new(config)?;
//! // The provider ignores If-None-Match, and verify() says so.
//! assert!(backend.verify().await.is_err());
//! # Ok(())
//! # }
//! ```

pub mod faults;
pub mod http;
pub mod mode;
pub mod server;
pub mod store;

pub use faults::{Faults, Latency, OpFaults, OpKind};
pub use http::{BuildError, CLIENT_HEADER, Event, FakeS3, FakeS3Builder, Observer, Outcome, Reply};
pub use mode::{CONDITIONS_PER_KEY, LARGE_BODY_BYTES, ParseModeError, ProviderMode};
