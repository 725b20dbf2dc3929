//! Configuration of the S3 backend.

use std::fmt;
use std::time::Duration;

use super::credentials::CredentialSource;
use super::transport::TransportOptions;
use crate::backend::Version;

/// How the bucket appears in request URLs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Addressing {
    /// `https://bucket.endpoint/key`, as AWS prefers.
    #[default]
    VirtualHost,
    /// `https://endpoint/bucket/key`, which most self-hosted stores need.
    PathStyle,
}

/// How an ETag is sent back in `If-Match`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EtagStyle {
    /// As the server sent it, quotes included (AWS, MinIO, SeaweedFS).
    #[default]
    Quoted,
    /// Without the surrounding quotes, for providers that compare the bare
    /// value (some Ceph deployments) or refuse the quoted form with 412
    /// (DigitalOcean Spaces and Hetzner are reported to).
    /// [`S3Backend::verify`](super::S3Backend::verify) switches to it on
    /// its own when the quoted form is refused and the bare one honoured.
    Bare,
}

impl EtagStyle {
    /// The `If-Match` value for `version` in this form: as the server
    /// sent it, or without its quotes.
    ///
    /// ```
    /// use hoplock::backend::Version;
    /// use hoplock::s3::config::EtagStyle;
    ///
    /// let version = Version::new("\"5d41402a\"");
    /// assert_eq!(EtagStyle::Quoted.render(&version), "\"5d41402a\"");
    /// assert_eq!(EtagStyle::Bare.render(&version), "5d41402a");
    /// ```
    pub fn render(self, version: &Version) -> String {
        match self {
            EtagStyle::Quoted => version.as_str().to_string(),
            EtagStyle::Bare => version.as_str().trim_matches('"').to_string(),
        }
    }

    /// The other form.
    pub fn other(self) -> EtagStyle {
        match self {
            EtagStyle::Quoted => EtagStyle::Bare,
            EtagStyle::Bare => EtagStyle::Quoted,
        }
    }

    /// The form's name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            EtagStyle::Quoted => "quoted",
            EtagStyle::Bare => "bare",
        }
    }
}

/// Where the lease record lives and how to reach it.
///
/// ```
/// use hoplock::s3::config::{Addressing, S3Config};
///
/// let mut config = S3Config::new("my-bucket", "leases/scheduler.json");
/// config.endpoint = Some("http://127.0.0.1:8333".into()); // plain HTTP only when asked for
/// config.addressing = Addressing::PathStyle;
/// assert!(format!("{config:?}").contains("my-bucket"));
/// ```
#[derive(Clone)]
pub struct S3Config {
    /// The endpoint URL. `None` means AWS: `https://s3.<region>.amazonaws.com`.
    /// HTTPS unless the URL says `http://`, which is the explicit opt-in to
    /// plain HTTP.
    pub endpoint: Option<String>,
    /// The bucket.
    pub bucket: String,
    /// The object key of the lease record.
    pub key: String,
    /// The signing region. Default `us-east-1`.
    pub region: String,
    /// Virtual-host (default) or path-style URLs.
    pub addressing: Addressing,
    /// Where the credentials come from. Default: the environment, then the
    /// shared credentials file.
    pub credentials: CredentialSource,
    /// How long one HTTP request may take. Default 5 s.
    pub request_timeout: Duration,
    /// How long a read may take in all, retries included. Default 10 s.
    /// Writes are never retried.
    pub operation_deadline: Duration,
    /// A private CA and a proxy.
    pub transport: TransportOptions,
    /// How to send ETags in `If-Match`.
    pub etag_style: EtagStyle,
    /// Warn when the server's `Date` differs from the local wall clock by
    /// more than this. Default 60 s. The election does not depend on it, but
    /// SigV4 fails beyond 15 minutes.
    pub clock_skew_warning: Duration,
    /// Headers added to every request, as `(name, value)`: some providers
    /// need one to make conditional writes strongly consistent (Tigris:
    /// `X-Tigris-Consistent: true`). Names the backend sets itself
    /// (`Authorization`, `Host`, the conditions, `x-amz-*` signing headers)
    /// are refused. Default none.
    pub extra_headers: Vec<(String, String)>,
}

impl S3Config {
    /// A configuration for `bucket`/`key` on AWS with the defaults.
    pub fn new(bucket: impl Into<String>, key: impl Into<String>) -> S3Config {
        S3Config {
            endpoint: None,
            bucket: bucket.into(),
            key: key.into(),
            region: "us-east-1".into(),
            addressing: Addressing::VirtualHost,
            credentials: CredentialSource::Default,
            request_timeout: Duration::from_secs(5),
            operation_deadline: Duration::from_secs(10),
            transport: TransportOptions::default(),
            etag_style: EtagStyle::Quoted,
            clock_skew_warning: Duration::from_secs(60),
            extra_headers: Vec::new(),
        }
    }
}

impl fmt::Debug for S3Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Credentials print through `Credentials`' own Debug, which masks
        // the secret and the session token.
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("key", &self.key)
            .field("region", &self.region)
            .field("addressing", &self.addressing)
            .field("credentials", &self.credentials)
            .field("request_timeout", &self.request_timeout)
            .field("operation_deadline", &self.operation_deadline)
            .field("transport", &self.transport)
            .field("etag_style", &self.etag_style)
            .field("extra_headers", &self.extra_headers.iter().map(|(name, _)| name).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}
