//! Azure Blob Storage: the lease record, or any object, as one block blob
//! written with conditional Put Blob.
//!
//! - `read` is Get Blob; the version is the blob's ETag.
//! - `write` is Put Blob with `If-None-Match: *` (create) or `If-Match:
//!   <ETag>`.
//! - `delete` is Delete Blob with `If-Match`.
//!
//! Azure gives every write a new ETag. A failed condition is 412
//! `ConditionNotMet`. A 409 means what Azure means by it: `BlobAlreadyExists`
//! is a lost create, a blob with an Azure lease on it (`LeaseIdMissing`,
//! which hoplock never takes) needs an operator, and anything else is a
//! conflict that changed nothing. Azure's own blob leases are not used: a
//! second source of truth beside the record would only add ways to
//! disagree.
//!
//! Writes are sent once: a timeout, a broken connection or a 5xx is
//! [`BackendError::Ambiguous`], and the elector reads its nonce back. Reads
//! retry passing failures within the operation deadline.
//!
//! # Credentials
//!
//! [`AzureBackend::new`] uses `object_store`'s Azure chain, configured from
//! the environment as Azure's tools are: a shared key
//! (`AZURE_STORAGE_ACCOUNT_KEY`), a SAS token (`AZURE_STORAGE_SAS_KEY`), a
//! service principal (`AZURE_CLIENT_ID`, `AZURE_CLIENT_SECRET`,
//! `AZURE_TENANT_ID`), workload identity (`AZURE_FEDERATED_TOKEN_FILE`), or
//! managed identity. `AZURE_STORAGE_USE_EMULATOR=true` selects Azurite's
//! well-known development account at `AZURITE_BLOB_STORAGE_URL` (default
//! `http://127.0.0.1:10000`).
//!
//! # Permissions
//!
//! An elector needs to read and write the blob: the role `Storage Blob Data
//! Contributor` on the container, or a SAS with read, create and write.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use object_store::azure::{AzureAuthorizer, AzureConfigKey, AzureCredential, MicrosoftAzureBuilder};

use crate::backend::{BackendError, ObjectBackend, StoredObject, Version};
use crate::clock::{Clock, SystemClock};
use crate::cloud::{self, Connector, Failure, Op};
use crate::entropy::{Entropy, OsEntropy};
use crate::transport::{HttpTransport, ReqwestTransport, TransportOptions};

/// How to reach one blob in an Azure storage container.
///
/// ```
/// use hoplock::azure::AzureConfig;
///
/// let mut config = AzureConfig::new("leases", "scheduler.json");
/// config.account = Some("mystorageaccount".into());
/// assert_eq!(config.container, "leases");
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AzureConfig {
    /// The storage account; `None` reads `AZURE_STORAGE_ACCOUNT_NAME`.
    pub account: Option<String>,
    /// The container.
    pub container: String,
    /// The blob's name: the lease record's, or the membership object's.
    pub blob: String,
    /// The blob service's URL, without the container; `None` is
    /// `https://<account>.blob.core.windows.net` (or Azurite's with
    /// `AZURE_STORAGE_USE_EMULATOR=true`).
    pub endpoint: Option<String>,
    /// How long one request may take.
    pub request_timeout: Duration,
    /// How long a read may take in all, retries included.
    pub operation_deadline: Duration,
    /// Proxy and extra CA certificates.
    pub transport: TransportOptions,
}

impl AzureConfig {
    /// The blob `blob` in `container`, with the account and credentials
    /// from the environment, 5 s per request and 10 s per read.
    pub fn new(container: impl Into<String>, blob: impl Into<String>) -> AzureConfig {
        AzureConfig {
            account: None,
            container: container.into(),
            blob: blob.into(),
            endpoint: None,
            request_timeout: Duration::from_secs(5),
            operation_deadline: Duration::from_secs(10),
            transport: TransportOptions::default(),
        }
    }
}

/// One blob in an Azure storage container, written with conditional Put
/// Blob.
///
/// ```no_run
/// use hoplock::azure::{AzureBackend, AzureConfig};
/// use hoplock::Elector;
///
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// let store = AzureBackend::new(AzureConfig::new("leases", "scheduler.json"))?;
/// let elector = Elector::builder(store).owner("host-1").build()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct AzureBackend {
    inner: Arc<Inner>,
    blob: String,
}

#[derive(Debug)]
struct Inner {
    account: String,
    container: String,
    /// The blob service's URL, ending before the container.
    service_url: String,
    credentials: object_store::azure::AzureCredentialProvider,
    had_credential: AtomicBool,
    request_timeout: Duration,
    operation_deadline: Duration,
    transport: Arc<dyn HttpTransport>,
    clock: Arc<dyn Clock>,
    entropy: Arc<dyn Entropy>,
}

/// Where Azure credentials are looked for, for error messages.
const CREDENTIAL_SOURCES: &str = "AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_KEY, AZURE_CLIENT_ID with \
     AZURE_CLIENT_SECRET or AZURE_FEDERATED_TOKEN_FILE, the Azure CLI and managed identity";

impl AzureBackend {
    /// A backend with the production transport, the system clock and OS
    /// randomness. A missing account or an unusable key is a
    /// [`BackendError::Config`] now; other credential problems show on the
    /// first request.
    pub fn new(config: AzureConfig) -> Result<AzureBackend, BackendError> {
        let transport = ReqwestTransport::new(&config.transport).map_err(|err| BackendError::Config(err.message))?;
        let mut builder = MicrosoftAzureBuilder::from_env()
            .with_container_name(&config.container)
            .with_retry(cloud::credential_retries())
            .with_http_connector(Connector(transport.clone()));
        if let Some(account) = &config.account {
            builder = builder.with_account(account);
        }
        if let Some(endpoint) = &config.endpoint {
            builder = builder.with_endpoint(endpoint.clone());
        }
        let emulator = builder
            .get_config_value(&AzureConfigKey::UseEmulator)
            .is_some_and(|value| matches!(value.to_ascii_lowercase().as_str(), "true" | "1" | "yes"));
        let account = builder.get_config_value(&AzureConfigKey::AccountName);
        let endpoint = builder.get_config_value(&AzureConfigKey::Endpoint);
        let store = builder.build().map_err(|err| {
            BackendError::Config(format!(
                "cannot set up Azure credentials (the account from ?account= or AZURE_STORAGE_ACCOUNT_NAME; \
                 credentials from {CREDENTIAL_SOURCES}): {err}"
            ))
        })?;
        let account = match (account, emulator) {
            (Some(account), _) => account,
            (None, true) => "devstoreaccount1".to_owned(),
            (None, false) => {
                return Err(BackendError::Config(
                    "no Azure storage account: give ?account= or set AZURE_STORAGE_ACCOUNT_NAME".into(),
                ));
            }
        };
        let service_url = match (endpoint, emulator) {
            (Some(endpoint), _) => endpoint.trim_end_matches('/').to_owned(),
            (None, true) => {
                let base =
                    std::env::var("AZURITE_BLOB_STORAGE_URL").unwrap_or_else(|_| "http://127.0.0.1:10000".into());
                format!("{}/{account}", base.trim_end_matches('/'))
            }
            (None, false) => format!("https://{account}.blob.core.windows.net"),
        };
        let credentials = store.credentials().clone();
        Ok(AzureBackend::with_parts(
            config,
            account,
            service_url,
            credentials,
            Arc::new(transport),
            Arc::new(SystemClock::new()),
            Arc::new(OsEntropy),
        ))
    }

    /// A backend for `account` at `service_url` (the URL before the
    /// container) over the given credentials, transport, clock and
    /// randomness: for tests.
    pub fn with_parts(
        config: AzureConfig,
        account: String,
        service_url: String,
        credentials: object_store::azure::AzureCredentialProvider,
        transport: Arc<dyn HttpTransport>,
        clock: Arc<dyn Clock>,
        entropy: Arc<dyn Entropy>,
    ) -> AzureBackend {
        let inner = Inner {
            account,
            container: config.container,
            service_url,
            credentials,
            had_credential: AtomicBool::new(false),
            request_timeout: config.request_timeout,
            operation_deadline: config.operation_deadline,
            transport,
            clock,
            entropy,
        };
        AzureBackend { inner: Arc::new(inner), blob: config.blob }
    }

    /// The same container and settings, for another blob.
    pub fn with_blob(&self, blob: impl Into<String>) -> AzureBackend {
        AzureBackend { inner: self.inner.clone(), blob: blob.into() }
    }

    /// The blob's name.
    pub fn blob(&self) -> &str {
        &self.blob
    }

    /// The container.
    pub fn container(&self) -> &str {
        &self.inner.container
    }

    /// The storage account.
    pub fn account(&self) -> &str {
        &self.inner.account
    }

    /// Stores `bytes` without a condition, as an operator's tool or a
    /// foreign writer would. For tests and repairs; the elector never does
    /// this.
    pub async fn put_raw(&self, bytes: Vec<u8>) -> Result<Version, BackendError> {
        self.put(None, bytes).await
    }

    fn url(&self) -> String {
        format!(
            "{}/{}/{}",
            self.inner.service_url,
            cloud::encode_component(&self.inner.container),
            cloud::encode_path(&self.blob)
        )
    }

    /// Builds one request, signs it and sends it once.
    async fn send(&self, method: Method, headers: &[(&str, String)], body: Bytes) -> Result<Response<Bytes>, Failure> {
        let inner = &self.inner;
        let deadline = inner.clock.now() + inner.request_timeout;
        let credential: Arc<AzureCredential> = cloud::credential(
            &inner.credentials,
            inner.clock.as_ref(),
            deadline,
            &inner.had_credential,
            CREDENTIAL_SOURCES,
        )
        .await
        .map_err(Failure::Credentials)?;
        let malformed = |err: &dyn std::fmt::Display| {
            Failure::Credentials(BackendError::Config(format!("cannot form a request to Azure: {err}")))
        };
        let mut builder = Request::builder().method(method.clone()).uri(self.url());
        for (name, value) in headers {
            builder = builder.header(*name, value.as_str());
        }
        // Shared Key signs Content-Length, so a write states it.
        if method == Method::PUT {
            builder = builder.header(http::header::CONTENT_LENGTH, body.len());
        }
        let mut unsigned =
            builder.body(object_store::client::HttpRequestBody::empty()).map_err(|err| malformed(&err))?;
        AzureAuthorizer::new(&credential, &inner.account)
            .try_authorize(&mut unsigned)
            .map_err(|err| malformed(&err))?;
        let (parts, _) = unsigned.into_parts();
        let request = Request::from_parts(parts, body);
        cloud::send_once(inner.transport.as_ref(), inner.clock.as_ref(), request, deadline).await
    }

    async fn read_once(&self) -> Result<StoredObject, BackendError> {
        let response =
            self.send(Method::GET, &[], Bytes::new()).await.map_err(|f| cloud::failure_to_error(f, false, "Azure"))?;
        if response.status() != StatusCode::OK {
            return Err(self.refusal(&response, Op::Read));
        }
        let etag = response.headers().get(http::header::ETAG).and_then(|value| value.to_str().ok());
        match etag {
            Some(etag) if !etag.is_empty() => {
                Ok(StoredObject { bytes: response.body().to_vec(), version: Version::new(etag) })
            }
            _ => Err(BackendError::Unsupported("Azure answered a read without an ETag".into())),
        }
    }

    /// Put Blob, with the condition's header when one is given.
    async fn put(&self, condition: Option<(&str, String)>, bytes: Vec<u8>) -> Result<Version, BackendError> {
        let mut headers =
            vec![("x-ms-blob-type", "BlockBlob".to_owned()), ("content-type", "application/octet-stream".to_owned())];
        headers.extend(condition);
        let response = self
            .send(Method::PUT, &headers, Bytes::from(bytes))
            .await
            .map_err(|f| cloud::failure_to_error(f, true, "Azure"))?;
        if !response.status().is_success() {
            return Err(self.refusal(&response, Op::Write));
        }
        let etag = response.headers().get(http::header::ETAG).and_then(|value| value.to_str().ok());
        match etag {
            Some(etag) if !etag.is_empty() => Ok(Version::new(etag)),
            // The write was applied; it must not be taken for a lost race.
            _ => Err(BackendError::Ambiguous("Azure stored the blob but its answer had no ETag".into())),
        }
    }

    /// Maps an unsuccessful answer by what the caller should do.
    fn refusal(&self, response: &Response<Bytes>, op: Op) -> BackendError {
        let status = response.status().as_u16();
        let code = error_code(response);
        let detail = describe(status, &code, response.body());
        let conditional = op != Op::Read;
        match (status, code.as_str()) {
            (404, "ContainerNotFound") => BackendError::Config(format!(
                "Azure container {:?} does not exist (a missing container is not a missing lease): {detail}",
                self.inner.container
            )),
            (404, _) => BackendError::NoLease,
            (412, _) | (304, _) => BackendError::LeaseHeld,
            // Azure answers a create of an existing blob with 409 on some
            // paths: the same lost race as a 412.
            (409, "BlobAlreadyExists") => BackendError::LeaseHeld,
            (409, "LeaseIdMissing" | "LeaseAlreadyPresent" | "LeaseIdMismatchWithBlobOperation") => {
                BackendError::Config(format!(
                    "the blob {} has an Azure blob lease on it, which hoplock does not use; break that lease: {detail}",
                    self.blob
                ))
            }
            (409, _) => BackendError::Conflict(detail),
            (403, "AuthenticationFailed") => BackendError::Config(format!(
                "Azure refused the signature: check the account key or SAS token ({CREDENTIAL_SOURCES}): {detail}"
            )),
            // Azurite answers a bad signature so; Azure uses it for a
            // request its network rules or SAS do not allow.
            (403, "AuthorizationFailure") => BackendError::Config(format!(
                "Azure did not authorize the request: check the account key or SAS token ({CREDENTIAL_SOURCES}) \
                 and the account's network rules: {detail}"
            )),
            (401, _) => BackendError::Config(format!("Azure refused the credentials ({CREDENTIAL_SOURCES}): {detail}")),
            (403, _) => BackendError::Config(format!(
                "permission denied on {}/{}: the identity needs Storage Blob Data Contributor (read and write) on \
                 the container: {detail}",
                self.inner.container, self.blob
            )),
            (400, _) => BackendError::Config(format!("Azure refused the request as malformed: {detail}")),
            (500..=599, _) if conditional => BackendError::Ambiguous(detail),
            (500..=599, _) => BackendError::Transient(detail),
            (402..=499, _) => BackendError::Transient(format!("Azure refused the request: {detail}")),
            _ if conditional => BackendError::Ambiguous(format!("unexpected answer: {detail}")),
            _ => BackendError::Transient(format!("unexpected answer: {detail}")),
        }
    }
}

impl ObjectBackend for AzureBackend {
    async fn read_object(&self) -> Result<StoredObject, BackendError> {
        let inner = &self.inner;
        let deadline = inner.clock.now() + inner.operation_deadline;
        cloud::read_with_retries(inner.clock.as_ref(), inner.entropy.as_ref(), deadline, || self.read_once()).await
    }

    async fn write_object(&self, expected: Option<&Version>, bytes: Vec<u8>) -> Result<Version, BackendError> {
        let condition = match expected {
            None => ("if-none-match", "*".to_owned()),
            Some(version) => ("if-match", version.as_str().to_owned()),
        };
        self.put(Some(condition), bytes).await
    }

    async fn delete_object(&self, expected: &Version) -> Result<(), BackendError> {
        let headers = [("if-match", expected.as_str().to_owned())];
        let response = self
            .send(Method::DELETE, &headers, Bytes::new())
            .await
            .map_err(|f| cloud::failure_to_error(f, true, "Azure"))?;
        if response.status().is_success() {
            return Ok(());
        }
        Err(self.refusal(&response, Op::Delete))
    }
}

/// Azure's error code, from `x-ms-error-code` or the XML body's `<Code>`.
fn error_code(response: &Response<Bytes>) -> String {
    if let Some(code) = response.headers().get("x-ms-error-code").and_then(|value| value.to_str().ok()) {
        return code.to_owned();
    }
    xml_element(response.body(), "Code").unwrap_or_default()
}

fn xml_element(body: &[u8], name: &str) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let start = text.find(&format!("<{name}>"))? + name.len() + 2;
    let end = start + text[start..].find(&format!("</{name}>"))?;
    Some(text[start..end].trim().to_owned())
}

fn describe(status: u16, code: &str, body: &[u8]) -> String {
    let mut text = format!("HTTP {status}");
    if !code.is_empty() {
        text.push(' ');
        text.push_str(code);
    }
    if let Some(message) = xml_element(body, "Message") {
        let first = message.lines().next().unwrap_or_default();
        text.push_str(": ");
        text.push_str(first);
    }
    text
}
