//! The options every S3-backed subcommand shares, and the backend they build.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use hoplock::BackendError;
use hoplock::s3::config::{Addressing, EtagStyle};
use hoplock::s3::{S3Backend, S3Config};
use hoplock::store::{Store, StoreOptions, StoreUrl};

/// How to reach an S3-compatible store, apart from the endpoint and the
/// bucket: shared by every S3-backed subcommand. Credentials come from the
/// AWS SDKs' chain (the environment, the shared files, web identity,
/// container and instance credentials), or a profile with `--profile`.
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// The signing region.
    #[arg(long, default_value = "us-east-1", env = "AWS_REGION")]
    pub region: String,
    /// Use path-style URLs (endpoint/bucket/key), as most self-hosted stores need.
    #[arg(long)]
    pub path_style: bool,
    /// A credentials-file profile to use instead of the environment.
    #[arg(long)]
    pub profile: Option<String>,
    /// A PEM file of extra CA certificates to trust.
    #[arg(long)]
    pub ca_cert: Option<PathBuf>,
    /// An HTTP(S) proxy for every request.
    #[arg(long)]
    pub proxy: Option<String>,
    /// Send ETags in If-Match without quotes from the start. `run` also
    /// switches to them on its own when the store refuses a current ETag
    /// in quotes and honours it bare; `check-s3` checks every condition in
    /// the bare form.
    #[arg(long)]
    pub bare_etags: bool,
    /// How long one request may take.
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    pub request_timeout: Duration,
    /// A header to add to every request, as NAME:VALUE (repeatable); some
    /// providers need one for strongly consistent conditional writes, e.g.
    /// X-Tigris-Consistent:true.
    #[arg(long = "header", value_name = "NAME:VALUE", value_parser = parse_header)]
    pub headers: Vec<(String, String)>,
}

impl ClientArgs {
    /// The backend configuration for `bucket`/`key` at `endpoint`; every
    /// problem is a `Config` error saying what to fix.
    pub fn config(&self, endpoint: Option<&str>, bucket: &str, key: &str) -> Result<S3Config, BackendError> {
        let mut config = S3Config::new(bucket, key);
        config.endpoint = endpoint.map(str::to_owned);
        config.region = self.region.clone();
        if self.path_style {
            config.addressing = Addressing::PathStyle;
        }
        if let Some(profile) = &self.profile {
            config.credentials = hoplock::s3::credentials::CredentialSource::Profile(profile.clone());
        }
        if let Some(path) = &self.ca_cert {
            let pem = std::fs::read(path)
                .map_err(|err| BackendError::Config(format!("cannot read {}: {err}", path.display())))?;
            config.transport.ca_certificates_pem = Some(pem);
        }
        config.transport.proxy = self.proxy.clone();
        if self.bare_etags {
            config.etag_style = EtagStyle::Bare;
        }
        config.request_timeout = self.request_timeout;
        config.operation_deadline = self.request_timeout * 2;
        config.extra_headers = self.headers.clone();
        Ok(config)
    }
}

/// Where the lease record (or the membership object) lives: `--store URL`,
/// or the S3 spelling `--bucket` and `--key`.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    /// The object as a URL: s3://BUCKET/KEY, gs://BUCKET/OBJECT (Google
    /// Cloud Storage, feature `gcs`) or az://CONTAINER/BLOB[?account=NAME]
    /// (Azure Blob Storage, feature `azure`). Instead of --bucket and --key.
    #[arg(long, value_name = "URL", conflicts_with_all = ["bucket", "key"])]
    pub store: Option<String>,
    /// The store's endpoint URL; https:// unless you write http://. Default:
    /// the cloud's own (for GCS, STORAGE_EMULATOR_HOST when set).
    #[arg(long)]
    pub endpoint: Option<String>,
    /// The S3 bucket (with --key; or use --store).
    #[arg(long, required_unless_present = "store", requires = "key")]
    pub bucket: Option<String>,
    /// The object's key: the lease record's (`lease`, `run`) or the membership
    /// object's (`members`).
    #[arg(long, required_unless_present = "store", requires = "bucket")]
    pub key: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

impl StoreArgs {
    /// The store named, as a URL.
    pub fn url(&self) -> Result<StoreUrl, BackendError> {
        match (&self.store, &self.bucket, &self.key) {
            (Some(url), _, _) => url.parse(),
            (None, Some(bucket), Some(key)) => Ok(StoreUrl::S3 { bucket: bucket.clone(), key: key.clone() }),
            _ => Err(BackendError::Config("name the store with --store URL, or --bucket and --key".into())),
        }
    }

    /// Opens the store; every problem is a `Config` error saying what to
    /// fix. An S3 store takes every S3 option; the others take
    /// `--endpoint`, `--request-timeout`, `--ca-cert` and `--proxy`.
    pub fn open(&self) -> Result<Store, BackendError> {
        let url = self.url()?;
        if let StoreUrl::S3 { bucket, key } = &url {
            return Ok(Store::S3(S3Backend::new(self.client.config(self.endpoint.as_deref(), bucket, key)?)?));
        }
        let mut options = StoreOptions::default();
        options.endpoint.clone_from(&self.endpoint);
        options.request_timeout = self.client.request_timeout;
        options.transport = self.client.config(None, "", "")?.transport;
        Store::open(&url, &options)
    }
}

/// Parses `NAME:VALUE` (spaces around either are trimmed).
pub fn parse_header(text: &str) -> Result<(String, String), String> {
    match text.split_once(':') {
        Some((name, value)) if !name.trim().is_empty() => Ok((name.trim().to_owned(), value.trim().to_owned())),
        _ => Err(format!("{text:?} is not a header; write NAME:VALUE, e.g. X-Tigris-Consistent:true")),
    }
}

/// Parses `30s`, `500ms`, `2m`, `1h` or a plain number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().map_err(|_| format!("{text:?} is not a duration such as 30s or 500ms"))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("{text:?} has an unknown unit; use ms, s, m or h")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("{text:?} is out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn headers_parse() {
        assert_eq!(parse_header("X-Tigris-Consistent: true"), Ok(("X-Tigris-Consistent".into(), "true".into())));
        assert_eq!(parse_header("a:b:c"), Ok(("a".into(), "b:c".into())));
        assert!(parse_header("novalue").is_err());
        assert!(parse_header(":x").is_err());
    }
}
