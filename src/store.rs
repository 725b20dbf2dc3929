//! A store named by URL: `s3://bucket/key`, `gs://bucket/object` or
//! `az://container/blob`, opened as the backend its scheme names.
//!
//! [`StoreUrl`] parses the URL and [`Store`] is the opened backend: an
//! [`ObjectBackend`] (and so a lease [`crate::Backend`]) whatever the cloud,
//! for programs and tools that let their users pick the store. Each backend
//! sits behind its cargo feature (`s3`, the default; `gcs`; `azure`); a URL
//! whose backend was not built in is a [`BackendError::Config`] that names
//! the feature.
//!
//! ```
//! use hoplock::store::StoreUrl;
//!
//! let url: StoreUrl = "gs://my-bucket/leases/scheduler.json".parse()?;
//! assert_eq!(url, StoreUrl::Gcs { bucket: "my-bucket".into(), object: "leases/scheduler.json".into() });
//! assert!("ftp://host/key".parse::<StoreUrl>().is_err());
//! # Ok::<(), hoplock::BackendError>(())
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use crate::backend::{BackendError, ObjectBackend, StoredObject, Version};
use crate::lease::LeaseRecord;

pub(crate) mod verify;
pub use verify::{PROBE_SUFFIX, Verification};

/// A parsed store URL.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreUrl {
    /// `s3://bucket/key`: S3 or an S3-compatible store.
    S3 {
        /// The bucket.
        bucket: String,
        /// The object's key.
        key: String,
    },
    /// `gs://bucket/object`: Google Cloud Storage.
    Gcs {
        /// The bucket.
        bucket: String,
        /// The object's name.
        object: String,
    },
    /// `az://container/blob?account=name`: Azure Blob Storage. Without
    /// `?account=`, the account comes from `AZURE_STORAGE_ACCOUNT_NAME`.
    Azure {
        /// The storage account, if the URL names one.
        account: Option<String>,
        /// The container.
        container: String,
        /// The blob's name.
        blob: String,
    },
}

impl FromStr for StoreUrl {
    type Err = BackendError;

    fn from_str(text: &str) -> Result<StoreUrl, BackendError> {
        let bad = |why: &str| BackendError::Config(format!("{text:?} is not a store URL: {why}"));
        let Some((scheme, rest)) = text.split_once("://") else {
            return Err(bad("write s3://bucket/key, gs://bucket/object or az://container/blob"));
        };
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let Some((container, key)) = path.split_once('/') else {
            return Err(bad("it names no object after the bucket or container"));
        };
        if container.is_empty() || key.is_empty() {
            return Err(bad("the bucket (or container) and the object name must both be given"));
        }
        let mut account = None;
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            match pair.split_once('=') {
                Some(("account", value)) if scheme == "az" && !value.is_empty() => account = Some(value.to_owned()),
                _ => return Err(bad(&format!("unknown query parameter {pair:?}"))),
            }
        }
        let (container, key) = (container.to_owned(), key.to_owned());
        match scheme {
            "s3" => Ok(StoreUrl::S3 { bucket: container, key }),
            "gs" => Ok(StoreUrl::Gcs { bucket: container, object: key }),
            "az" => Ok(StoreUrl::Azure { account, container, blob: key }),
            other => Err(BackendError::Config(format!(
                "unknown store scheme {other:?} in {text:?}: use s3://, gs:// or az://"
            ))),
        }
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::S3 { bucket, key } => write!(f, "s3://{bucket}/{key}"),
            StoreUrl::Gcs { bucket, object } => write!(f, "gs://{bucket}/{object}"),
            StoreUrl::Azure { account: Some(account), container, blob } => {
                write!(f, "az://{container}/{blob}?account={account}")
            }
            StoreUrl::Azure { account: None, container, blob } => write!(f, "az://{container}/{blob}"),
        }
    }
}

/// The lease object as [`Store::inspect`] found it, for operators' tools.
#[derive(Debug, Clone)]
pub struct Inspection {
    /// The object's ETag.
    pub version: Version,
    /// The parsed record, or why it does not parse.
    pub record: Result<LeaseRecord, crate::lease::RecordError>,
    /// The stored bytes.
    pub bytes: Vec<u8>,
    /// `Last-Modified`, by the server's clock (S3 only).
    pub last_modified: Option<SystemTime>,
    /// `Date`, the server's clock when it answered (S3 only).
    pub server_date: Option<SystemTime>,
}

impl Inspection {
    /// How long ago the object was written, by the server's own clock (so
    /// this machine's clock does not matter). Second resolution.
    pub fn age(&self) -> Option<Duration> {
        self.server_date?.duration_since(self.last_modified?).ok()
    }
}

/// Settings every store takes, for [`Store::open`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct StoreOptions {
    /// The store's endpoint, for S3-compatible stores, emulators and
    /// private endpoints. `None` is the cloud's own (or, for GCS,
    /// `STORAGE_EMULATOR_HOST`).
    pub endpoint: Option<String>,
    /// How long one request may take; a read may take twice that, retries
    /// included.
    pub request_timeout: Duration,
    /// Proxy and extra CA certificates.
    pub transport: crate::transport::TransportOptions,
}

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions { endpoint: None, request_timeout: Duration::from_secs(5), transport: Default::default() }
    }
}

/// A backend opened from a store URL.
///
/// ```no_run
/// use hoplock::{Elector, store::Store};
///
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// let store = Store::from_url("s3://my-bucket/leases/scheduler.json")?;
/// store.verify().await?; // refuse a store that ignores conditions
/// let elector = Elector::builder(store).owner("host-1").build()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Store {
    /// An S3 or S3-compatible bucket.
    #[cfg(feature = "s3")]
    S3(crate::s3::S3Backend),
    /// A Google Cloud Storage bucket.
    #[cfg(feature = "gcs")]
    Gcs(crate::gcs::GcsBackend),
    /// An Azure Blob Storage container.
    #[cfg(feature = "azure")]
    Azure(crate::azure::AzureBackend),
}

/// Calls `$body` with `$backend` bound to whichever backend `$store` holds.
macro_rules! each {
    ($store:expr, $backend:ident => $body:expr) => {
        match $store {
            #[cfg(feature = "s3")]
            Store::S3($backend) => $body,
            #[cfg(feature = "gcs")]
            Store::Gcs($backend) => $body,
            #[cfg(feature = "azure")]
            Store::Azure($backend) => $body,
        }
    };
}

impl Store {
    /// Opens the store `url` names with default settings, credentials from
    /// the environment as each cloud's SDKs find them.
    pub fn from_url(url: &str) -> Result<Store, BackendError> {
        Store::open(&url.parse()?, &StoreOptions::default())
    }

    /// Opens the store `url` names with `options`.
    pub fn open(url: &StoreUrl, options: &StoreOptions) -> Result<Store, BackendError> {
        // Each arm uses the options only when its backend is built in.
        let _ = options;
        match url {
            #[cfg(feature = "s3")]
            StoreUrl::S3 { bucket, key } => {
                let mut config = crate::s3::S3Config::new(bucket, key);
                config.endpoint.clone_from(&options.endpoint);
                config.request_timeout = options.request_timeout;
                config.transport = options.transport.clone();
                config.operation_deadline = options.request_timeout * 2;
                Ok(Store::S3(crate::s3::S3Backend::new(config)?))
            }
            #[cfg(feature = "gcs")]
            StoreUrl::Gcs { bucket, object } => {
                let mut config = crate::gcs::GcsConfig::from_env(bucket, object);
                if let Some(endpoint) = &options.endpoint {
                    config.endpoint.clone_from(endpoint);
                }
                config.request_timeout = options.request_timeout;
                config.transport = options.transport.clone();
                config.operation_deadline = options.request_timeout * 2;
                Ok(Store::Gcs(crate::gcs::GcsBackend::new(config)?))
            }
            #[cfg(feature = "azure")]
            StoreUrl::Azure { account, container, blob } => {
                let mut config = crate::azure::AzureConfig::new(container, blob);
                config.account.clone_from(account);
                config.endpoint.clone_from(&options.endpoint);
                config.request_timeout = options.request_timeout;
                config.transport = options.transport.clone();
                config.operation_deadline = options.request_timeout * 2;
                Ok(Store::Azure(crate::azure::AzureBackend::new(config)?))
            }
            #[allow(unreachable_patterns)]
            other => Err(missing_feature(other)),
        }
    }

    /// The URL of the object this store reads and writes.
    pub fn url(&self) -> StoreUrl {
        match self {
            #[cfg(feature = "s3")]
            Store::S3(backend) => StoreUrl::S3 { bucket: backend.bucket().to_owned(), key: backend.key().to_owned() },
            #[cfg(feature = "gcs")]
            Store::Gcs(backend) => {
                StoreUrl::Gcs { bucket: backend.bucket().to_owned(), object: backend.object().to_owned() }
            }
            #[cfg(feature = "azure")]
            Store::Azure(backend) => StoreUrl::Azure {
                account: Some(backend.account().to_owned()),
                container: backend.container().to_owned(),
                blob: backend.blob().to_owned(),
            },
        }
    }

    /// The same store and settings, for another object in the same bucket
    /// or container.
    pub fn with_key(&self, key: impl Into<String>) -> Store {
        match self {
            #[cfg(feature = "s3")]
            Store::S3(backend) => Store::S3(backend.with_key(key)),
            #[cfg(feature = "gcs")]
            Store::Gcs(backend) => Store::Gcs(backend.with_object(key)),
            #[cfg(feature = "azure")]
            Store::Azure(backend) => Store::Azure(backend.with_blob(key)),
        }
    }

    /// The object's key (or name) in its bucket or container.
    pub fn key(&self) -> &str {
        match self {
            #[cfg(feature = "s3")]
            Store::S3(backend) => backend.key(),
            #[cfg(feature = "gcs")]
            Store::Gcs(backend) => backend.object(),
            #[cfg(feature = "azure")]
            Store::Azure(backend) => backend.blob(),
        }
    }

    /// Stores `bytes` without a condition, as an operator's tool would. For
    /// tests and repairs; the elector never does this.
    pub async fn put_raw(&self, bytes: Vec<u8>) -> Result<Version, BackendError> {
        each!(self, backend => backend.put_raw(bytes).await)
    }

    /// Reads the lease object as stored, with what the server said about
    /// it: for operators' tools, which must show a record even when it does
    /// not parse. `Ok(None)` means there is no object. Only S3 reports the
    /// object's age; elsewhere [`Inspection::age`] is `None`.
    pub async fn inspect(&self) -> Result<Option<Inspection>, BackendError> {
        match self {
            #[cfg(feature = "s3")]
            Store::S3(backend) => backend.inspect().await,
            #[allow(unreachable_patterns)]
            other => match other.read_object().await {
                Ok(object) => Ok(Some(Inspection {
                    version: object.version,
                    record: LeaseRecord::decode(&object.bytes),
                    bytes: object.bytes,
                    last_modified: None,
                    server_date: None,
                })),
                Err(BackendError::NoLease) => Ok(None),
                Err(error) => Err(error),
            },
        }
    }

    /// Checks that the store honours conditional writes, on a probe object
    /// `<key>.hoplock-verify` next to this one (created if missing, left in
    /// place): the checks of [`crate::s3::S3Backend::verify`] on S3, the
    /// same checks through the object seam on the other stores. An unsafe
    /// store is [`BackendError::Unsupported`] whose message starts with the
    /// verdict. Races are not checked here; `hoplock check` checks them.
    pub async fn verify(&self) -> Result<Verification, BackendError> {
        match self {
            #[cfg(feature = "s3")]
            Store::S3(backend) => backend.verify().await,
            #[allow(unreachable_patterns)]
            other => verify::verify(&other.with_key(format!("{}{PROBE_SUFFIX}", other.key()))).await,
        }
    }
}

impl ObjectBackend for Store {
    async fn read_object(&self) -> Result<StoredObject, BackendError> {
        each!(self, backend => backend.read_object().await)
    }

    async fn write_object(&self, expected: Option<&Version>, bytes: Vec<u8>) -> Result<Version, BackendError> {
        each!(self, backend => backend.write_object(expected, bytes).await)
    }

    async fn delete_object(&self, expected: &Version) -> Result<(), BackendError> {
        each!(self, backend => backend.delete_object(expected).await)
    }
}

/// The error for a URL whose backend is not built in.
fn missing_feature(url: &StoreUrl) -> BackendError {
    let (scheme, feature) = match url {
        StoreUrl::S3 { .. } => ("s3://", "s3"),
        StoreUrl::Gcs { .. } => ("gs://", "gcs"),
        StoreUrl::Azure { .. } => ("az://", "azure"),
    };
    BackendError::Config(format!("{scheme} needs hoplock built with the {feature} feature"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_into_their_parts() {
        assert_eq!(
            "s3://b/a/key.json".parse::<StoreUrl>(),
            Ok(StoreUrl::S3 { bucket: "b".into(), key: "a/key.json".into() })
        );
        assert_eq!(
            "az://leases/x?account=acct".parse::<StoreUrl>(),
            Ok(StoreUrl::Azure { account: Some("acct".into()), container: "leases".into(), blob: "x".into() })
        );
        for url in ["s3://b/k", "gs://b/o/p", "az://c/b?account=a", "az://c/b"] {
            assert_eq!(url.parse::<StoreUrl>().map(|parsed| parsed.to_string()).as_deref(), Ok(url));
        }
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        let message = |url: &str| url.parse::<StoreUrl>().unwrap_err().to_string();
        assert!(message("ftp://b/k").contains("unknown store scheme \"ftp\""), "{}", message("ftp://b/k"));
        assert!(message("my-bucket/key").contains("is not a store URL"));
        assert!(message("s3://bucket").contains("names no object"));
        assert!(message("s3:///key").contains("must both be given"));
        assert!(message("gs://b/k?account=a").contains("unknown query parameter"));
    }

    #[test]
    fn a_url_whose_backend_is_not_built_names_the_feature() {
        #[cfg(not(feature = "gcs"))]
        assert_eq!(
            Store::from_url("gs://b/k").unwrap_err(),
            BackendError::Config("gs:// needs hoplock built with the gcs feature".into())
        );
        #[cfg(not(feature = "azure"))]
        assert_eq!(
            Store::from_url("az://c/b").unwrap_err(),
            BackendError::Config("az:// needs hoplock built with the azure feature".into())
        );
        assert_eq!(
            missing_feature(&StoreUrl::Gcs { bucket: "b".into(), object: "k".into() }).to_string(),
            "lease store configuration error: gs:// needs hoplock built with the gcs feature"
        );
    }
}
