//! Google Cloud Storage: the lease record, or any object, as one GCS object
//! written with generation preconditions.
//!
//! - `read` is a JSON API media download; the version is the object's
//!   generation (`x-goog-generation`).
//! - `write` is a JSON API multipart upload with `ifGenerationMatch=0`
//!   (create) or `ifGenerationMatch=<generation>`.
//! - `delete` is a JSON API delete with `ifGenerationMatch`.
//!
//! GCS gives every write of an object a new generation, so versions never
//! repeat (no ABA). Its S3-compatible XML interop answers `If-None-Match`
//! and `If-Match` on a PUT with 200 and ignores them: never point the S3
//! backend at `storage.googleapis.com`. Generation preconditions are GCS's
//! own and are honoured.
//!
//! Writes are sent once: a timeout, a broken connection or a 5xx is
//! [`BackendError::Ambiguous`], and the elector reads its nonce back. Reads
//! retry passing failures within the operation deadline.
//!
//! # Credentials
//!
//! [`GcsCredentials::Default`] is the chain Google's SDKs use, as
//! `object_store` implements it: a service-account key named by
//! `GOOGLE_SERVICE_ACCOUNT` or `GOOGLE_SERVICE_ACCOUNT_KEY`, then
//! Application Default Credentials (`GOOGLE_APPLICATION_CREDENTIALS`, or
//! `~/.config/gcloud/application_default_credentials.json` from `gcloud auth
//! application-default login`), then the metadata server of a GCE VM, GKE
//! pod or Cloud Run service. With `STORAGE_EMULATOR_HOST` set, as for
//! Google's own clients, [`GcsConfig::from_env`] sends every request there
//! without credentials.
//!
//! # Permissions
//!
//! An elector needs `storage.objects.get` and `storage.objects.create` on
//! the lease object, and `storage.objects.delete` too: GCS counts replacing
//! an object as deleting the old generation. The predefined role
//! `roles/storage.objectUser` on the bucket grants all three.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use object_store::gcp::{GcpCredential, GoogleCloudStorageBuilder};

use crate::backend::{BackendError, ObjectBackend, StoredObject, Version};
use crate::clock::{Clock, SystemClock};
use crate::cloud::{self, Connector, Failure, Op};
use crate::entropy::{Entropy, OsEntropy, random_hex};
use crate::transport::{HttpTransport, ReqwestTransport, TransportOptions};

/// Google's endpoint for the JSON API.
pub const DEFAULT_ENDPOINT: &str = "https://storage.googleapis.com";

/// Where a [`GcsBackend`] finds its credentials.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum GcsCredentials {
    /// Google's chain: a service-account key from the environment,
    /// Application Default Credentials, then the metadata server.
    #[default]
    Default,
    /// The service-account key file at this path.
    ServiceAccountFile(std::path::PathBuf),
    /// No credentials: for an emulator, or a public bucket.
    Anonymous,
}

/// How to reach one object in a GCS bucket.
///
/// ```
/// use hoplock::gcs::GcsConfig;
///
/// let config = GcsConfig::new("my-bucket", "leases/scheduler.json");
/// assert_eq!(config.endpoint, hoplock::gcs::DEFAULT_ENDPOINT);
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GcsConfig {
    /// The bucket.
    pub bucket: String,
    /// The object's name: the lease record's, or the membership object's.
    pub object: String,
    /// The JSON API's base URL, without a trailing slash.
    pub endpoint: String,
    /// Where credentials come from.
    pub credentials: GcsCredentials,
    /// How long one request may take.
    pub request_timeout: Duration,
    /// How long a read may take in all, retries included.
    pub operation_deadline: Duration,
    /// Proxy and extra CA certificates.
    pub transport: TransportOptions,
}

impl GcsConfig {
    /// The object `object` in `bucket` on Google Cloud Storage, with
    /// Google's credential chain, 5 s per request and 10 s per read.
    pub fn new(bucket: impl Into<String>, object: impl Into<String>) -> GcsConfig {
        GcsConfig {
            bucket: bucket.into(),
            object: object.into(),
            endpoint: DEFAULT_ENDPOINT.into(),
            credentials: GcsCredentials::Default,
            request_timeout: Duration::from_secs(5),
            operation_deadline: Duration::from_secs(10),
            transport: TransportOptions::default(),
        }
    }

    /// As [`GcsConfig::new`], but pointed at the emulator named by
    /// `STORAGE_EMULATOR_HOST` (`host:port` or a URL), without credentials,
    /// when that variable is set, as Google's clients do.
    pub fn from_env(bucket: impl Into<String>, object: impl Into<String>) -> GcsConfig {
        let mut config = GcsConfig::new(bucket, object);
        if let Some(host) = std::env::var("STORAGE_EMULATOR_HOST").ok().filter(|host| !host.trim().is_empty()) {
            let host = host.trim().trim_end_matches('/');
            config.endpoint = if host.contains("://") { host.to_owned() } else { format!("http://{host}") };
            config.credentials = GcsCredentials::Anonymous;
        }
        config
    }
}

/// One object in a GCS bucket, written with generation preconditions.
///
/// ```no_run
/// use hoplock::gcs::{GcsBackend, GcsConfig};
/// use hoplock::Elector;
///
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// let store = GcsBackend::new(GcsConfig::from_env("my-bucket", "leases/scheduler.json"))?;
/// let elector = Elector::builder(store).owner("host-1").build()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct GcsBackend {
    inner: Arc<Inner>,
    object: String,
}

#[derive(Debug)]
struct Inner {
    bucket: String,
    endpoint: String,
    credentials: Option<object_store::gcp::GcpCredentialProvider>,
    had_credential: AtomicBool,
    request_timeout: Duration,
    operation_deadline: Duration,
    transport: Arc<dyn HttpTransport>,
    clock: Arc<dyn Clock>,
    entropy: Arc<dyn Entropy>,
    /// Whether a missing object has been told apart from a missing bucket.
    bucket_seen: AtomicBool,
}

/// Where Google credentials are looked for, for error messages.
const CREDENTIAL_SOURCES: &str = "GOOGLE_SERVICE_ACCOUNT, GOOGLE_SERVICE_ACCOUNT_KEY, GOOGLE_APPLICATION_CREDENTIALS, \
     ~/.config/gcloud/application_default_credentials.json and the GCE metadata server";

impl GcsBackend {
    /// A backend with the production transport, the system clock and OS
    /// randomness. A service-account file that cannot be read or parsed is
    /// a [`BackendError::Config`] now; other credential problems show on
    /// the first request.
    pub fn new(config: GcsConfig) -> Result<GcsBackend, BackendError> {
        let transport = ReqwestTransport::new(&config.transport).map_err(|err| BackendError::Config(err.message))?;
        let credentials = match &config.credentials {
            GcsCredentials::Anonymous => None,
            source => {
                let mut builder = GoogleCloudStorageBuilder::from_env()
                    .with_bucket_name(&config.bucket)
                    .with_retry(cloud::credential_retries())
                    .with_http_connector(Connector(transport.clone()));
                if let GcsCredentials::ServiceAccountFile(path) = source {
                    builder = builder.with_service_account_path(path.to_string_lossy());
                }
                let store = builder.build().map_err(|err| {
                    BackendError::Config(format!(
                        "cannot set up Google credentials (looked in {CREDENTIAL_SOURCES}): {err}"
                    ))
                })?;
                Some(store.credentials().clone())
            }
        };
        Ok(GcsBackend::with_parts(
            config,
            credentials,
            Arc::new(transport),
            Arc::new(SystemClock::new()),
            Arc::new(OsEntropy),
        ))
    }

    /// A backend over the given transport, clock and randomness, with
    /// `credentials` (`None` sends requests without any): for tests.
    pub fn with_parts(
        config: GcsConfig,
        credentials: Option<object_store::gcp::GcpCredentialProvider>,
        transport: Arc<dyn HttpTransport>,
        clock: Arc<dyn Clock>,
        entropy: Arc<dyn Entropy>,
    ) -> GcsBackend {
        let inner = Inner {
            bucket: config.bucket,
            endpoint: config.endpoint.trim_end_matches('/').to_owned(),
            credentials,
            had_credential: AtomicBool::new(false),
            request_timeout: config.request_timeout,
            operation_deadline: config.operation_deadline,
            transport,
            clock,
            entropy,
            bucket_seen: AtomicBool::new(false),
        };
        GcsBackend { inner: Arc::new(inner), object: config.object }
    }

    /// The same bucket and settings, for another object.
    pub fn with_object(&self, object: impl Into<String>) -> GcsBackend {
        GcsBackend { inner: self.inner.clone(), object: object.into() }
    }

    /// The object's name.
    pub fn object(&self) -> &str {
        &self.object
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.inner.bucket
    }

    /// Stores `bytes` without a precondition, as an operator's tool or a
    /// foreign writer would. For tests and repairs; the elector never does
    /// this.
    pub async fn put_raw(&self, bytes: Vec<u8>) -> Result<Version, BackendError> {
        self.upload(None, bytes).await
    }

    fn object_url(&self) -> String {
        format!(
            "{}/storage/v1/b/{}/o/{}",
            self.inner.endpoint,
            cloud::encode_component(&self.inner.bucket),
            cloud::encode_component(&self.object)
        )
    }

    /// Builds one request with credentials and sends it once.
    async fn send(
        &self,
        method: Method,
        url: String,
        headers: &[(&str, String)],
        body: Bytes,
    ) -> Result<Response<Bytes>, Failure> {
        let inner = &self.inner;
        let deadline = inner.clock.now() + inner.request_timeout;
        let mut builder = Request::builder().method(method).uri(url);
        for (name, value) in headers {
            builder = builder.header(*name, value.as_str());
        }
        if let Some(provider) = &inner.credentials {
            let credential: Arc<GcpCredential> =
                cloud::credential(provider, inner.clock.as_ref(), deadline, &inner.had_credential, CREDENTIAL_SOURCES)
                    .await
                    .map_err(Failure::Credentials)?;
            if !credential.bearer.is_empty() {
                builder = builder.header(http::header::AUTHORIZATION, format!("Bearer {}", credential.bearer));
            }
        }
        let request = builder.body(body).map_err(|err| {
            Failure::Credentials(BackendError::Config(format!("cannot form a request to GCS: {err}")))
        })?;
        cloud::send_once(inner.transport.as_ref(), inner.clock.as_ref(), request, deadline).await
    }

    /// One media download.
    async fn read_once(&self) -> Result<StoredObject, BackendError> {
        let url = format!("{}?alt=media", self.object_url());
        let response = self
            .send(Method::GET, url, &[], Bytes::new())
            .await
            .map_err(|f| cloud::failure_to_error(f, false, "GCS"))?;
        if response.status() != StatusCode::OK {
            return Err(self.refusal(&response, Op::Read).await);
        }
        let generation = header(&response, "x-goog-generation").ok_or_else(|| {
            BackendError::Unsupported(
                "GCS answered a read without x-goog-generation, so writes cannot be conditional".into(),
            )
        })?;
        Ok(StoredObject { bytes: response.body().to_vec(), version: Version::new(generation) })
    }

    /// A multipart upload, with `ifGenerationMatch` when `condition` is set.
    async fn upload(&self, condition: Option<&str>, bytes: Vec<u8>) -> Result<Version, BackendError> {
        let boundary = loop {
            let candidate = format!("hoplock-{}", random_hex(self.inner.entropy.as_ref(), 16));
            if !bytes.windows(candidate.len()).any(|window| window == candidate.as_bytes()) {
                break candidate;
            }
        };
        let metadata = serde_json::json!({ "name": self.object }).to_string();
        let mut body = Vec::with_capacity(bytes.len() + 256);
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{metadata}\r\n").as_bytes(),
        );
        body.extend_from_slice(format!("--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n").as_bytes());
        body.extend_from_slice(&bytes);
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        let mut url = format!(
            "{}/upload/storage/v1/b/{}/o?uploadType=multipart",
            self.inner.endpoint,
            cloud::encode_component(&self.inner.bucket)
        );
        if let Some(generation) = condition {
            url.push_str("&ifGenerationMatch=");
            url.push_str(&cloud::encode_component(generation));
        }
        let headers = [("content-type", format!("multipart/related; boundary={boundary}"))];
        let response = self
            .send(Method::POST, url, &headers, Bytes::from(body))
            .await
            .map_err(|f| cloud::failure_to_error(f, true, "GCS"))?;
        if !response.status().is_success() {
            return Err(self.refusal(&response, Op::Write).await);
        }
        let generation = serde_json::from_slice::<serde_json::Value>(response.body())
            .ok()
            .and_then(|value| match &value["generation"] {
                serde_json::Value::String(text) => Some(text.clone()),
                serde_json::Value::Number(number) => Some(number.to_string()),
                _ => None,
            })
            .or_else(|| header(&response, "x-goog-generation"));
        // The write was applied; without its generation the caller cannot
        // make the next write conditional, but it must not think it lost.
        generation
            .map(Version::new)
            .ok_or_else(|| BackendError::Ambiguous("GCS stored the object but its answer named no generation".into()))
    }

    /// Maps an unsuccessful answer by what the caller should do.
    async fn refusal(&self, response: &Response<Bytes>, op: Op) -> BackendError {
        let status = response.status().as_u16();
        let detail = describe(response);
        let bucket = &self.inner.bucket;
        match status {
            404 if detail.contains("specified bucket does not exist") => missing_bucket(bucket, &detail),
            // A missing object, or a missing bucket that did not say so.
            404 => {
                if !self.inner.bucket_seen.load(Ordering::Relaxed)
                    && let Some(error) = self.check_bucket().await
                {
                    return error;
                }
                BackendError::NoLease
            }
            412 | 304 => BackendError::LeaseHeld,
            409 => BackendError::Conflict(detail),
            401 => {
                BackendError::Config(format!("GCS refused the credentials (looked in {CREDENTIAL_SOURCES}): {detail}"))
            }
            403 => BackendError::Config(format!(
                "permission denied on gs://{bucket}/{}: the identity needs storage.objects.get, .create and .delete \
                 (roles/storage.objectUser): {detail}",
                self.object
            )),
            400 => BackendError::Config(format!("GCS refused the request as malformed: {detail}")),
            500..=599 if op != Op::Read => BackendError::Ambiguous(detail),
            500..=599 => BackendError::Transient(detail),
            // Throttling (429), a request timeout (408) and any other
            // refusal: nothing changed, and trying again may help.
            405..=499 => BackendError::Transient(format!("GCS refused the request: {detail}")),
            _ if op != Op::Read => BackendError::Ambiguous(format!("unexpected answer: {detail}")),
            _ => BackendError::Transient(format!("unexpected answer: {detail}")),
        }
    }

    /// After a 404 on a read, asks once whether the bucket exists, so a
    /// missing bucket is not taken for a missing lease. An identity that
    /// may not read bucket metadata gets a 403, which says nothing, and
    /// the 404 stands.
    async fn check_bucket(&self) -> Option<BackendError> {
        let url = format!("{}/storage/v1/b/{}", self.inner.endpoint, cloud::encode_component(&self.inner.bucket));
        let response = self.send(Method::GET, url, &[], Bytes::new()).await.ok()?;
        match response.status().as_u16() {
            404 => Some(missing_bucket(&self.inner.bucket, &describe(&response))),
            // The bucket exists, or this identity may not ask (403): either
            // way, asking again would say nothing new.
            _ => {
                self.inner.bucket_seen.store(true, Ordering::Relaxed);
                None
            }
        }
    }
}

impl ObjectBackend for GcsBackend {
    async fn read_object(&self) -> Result<StoredObject, BackendError> {
        let inner = &self.inner;
        let deadline = inner.clock.now() + inner.operation_deadline;
        cloud::read_with_retries(inner.clock.as_ref(), inner.entropy.as_ref(), deadline, || self.read_once()).await
    }

    async fn write_object(&self, expected: Option<&Version>, bytes: Vec<u8>) -> Result<Version, BackendError> {
        // Generation 0 is GCS's "must not exist".
        let condition = expected.map_or("0", Version::as_str);
        match self.upload(Some(condition), bytes).await {
            // A precondition on a generation that no longer exists fails
            // with 412 on GCS: the same refusal as a newer generation.
            Err(BackendError::NoLease) => Err(BackendError::LeaseHeld),
            other => other,
        }
    }

    async fn delete_object(&self, expected: &Version) -> Result<(), BackendError> {
        let url = format!("{}?ifGenerationMatch={}", self.object_url(), cloud::encode_component(expected.as_str()));
        let response = self
            .send(Method::DELETE, url, &[], Bytes::new())
            .await
            .map_err(|f| cloud::failure_to_error(f, true, "GCS"))?;
        if response.status().is_success() {
            return Ok(());
        }
        Err(self.refusal(&response, Op::Delete).await)
    }
}

fn missing_bucket(bucket: &str, detail: &str) -> BackendError {
    BackendError::Config(format!(
        "GCS bucket {bucket:?} does not exist (a missing bucket is not a missing lease): {detail}"
    ))
}

fn header(response: &Response<Bytes>, name: &str) -> Option<String> {
    response.headers().get(name)?.to_str().ok().map(str::to_owned).filter(|value| !value.is_empty())
}

/// `HTTP 412: message (reason)` from a JSON API error body.
fn describe(response: &Response<Bytes>) -> String {
    let mut text = format!("HTTP {}", response.status().as_u16());
    if let Ok(body) = serde_json::from_slice::<serde_json::Value>(response.body()) {
        if let Some(message) = body["error"]["message"].as_str() {
            text.push_str(": ");
            text.push_str(message);
        }
        if let Some(reason) = body["error"]["errors"][0]["reason"].as_str() {
            text.push_str(&format!(" ({reason})"));
        }
    }
    text
}
