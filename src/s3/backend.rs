//! The S3 [`Backend`]: the lease record as one object, written with
//! conditional PUTs.
//!
//! - `read` is a GET.
//! - `write` is a PUT with `If-None-Match: *` (create) or `If-Match: <ETag>`.
//! - `delete` is a DELETE with `If-Match`.
//!
//! Writes are never retried here: a timeout, a broken connection or a 5xx on
//! a conditional write is [`BackendError::Ambiguous`], and the elector reads
//! back to find out what happened. Reads retry with jittered backoff within
//! the operation deadline.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use tracing::warn;

use super::config::{Addressing, EtagStyle, S3Config};
use super::credentials::refresh::CredentialCache;
use super::sigv4::encode_key;
use super::transport::{HttpTransport, MAX_RESPONSE_BYTES, ReqwestTransport, TransportError, TransportErrorKind};
use super::xml::{S3Error, parse_http_date};
use crate::backend::{BackendError, ObjectBackend, StoredObject, Version};
use crate::clock::{Clock, SystemClock};
use crate::entropy::{Entropy, OsEntropy};
use crate::lease::LeaseRecord;

mod verify;
pub use crate::store::Inspection;
pub use verify::{PROBE_SUFFIX, Verification};

/// One lease key in an S3 bucket.
///
/// ```no_run
/// use hoplock::s3::{S3Backend, S3Config};
/// use hoplock::{Elector, backend::Backend};
///
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// let store = S3Backend::new(S3Config::new("my-bucket", "leases/scheduler.json"))?;
/// store.verify().await?; // refuse to run on a store that ignores conditions
/// let elector = Elector::builder(store).owner("host-1").build()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct S3Backend {
    target: Arc<Target>,
    key: String,
    credentials: Arc<CredentialCache>,
    transport: Arc<dyn HttpTransport>,
    clock: Arc<dyn Clock>,
    entropy: Arc<dyn Entropy>,
    skew_warned: Arc<AtomicBool>,
    /// Set when the last read of this key was refused with 403
    /// AccessDenied, which S3 also answers for a missing key when the caller
    /// may not list the bucket. The next conditional create settles it.
    read_denied: Arc<AtomicBool>,
    /// Whether `If-Match` carries the ETag without its quotes: set from
    /// [`S3Config::etag_style`], and by [`S3Backend::verify`] when the store
    /// honours only the bare form. Shared by every backend made from this
    /// one, so the elector and its probes agree.
    bare_etags: Arc<AtomicBool>,
}

/// Where requests go, resolved once from the configuration.
#[derive(Debug)]
struct Target {
    scheme: String,
    authority: String,
    base_path: String,
    bucket: String,
    addressing: Addressing,
    request_timeout: Duration,
    operation_deadline: Duration,
    clock_skew_warning: Duration,
    extra_headers: Vec<(http::HeaderName, http::HeaderValue)>,
}

/// How one request failed before any S3 status could be mapped.
enum Failure {
    /// No keys to sign with; nothing was sent.
    Credentials(BackendError),
    Transport(TransportError),
    Timeout,
}

impl S3Backend {
    /// A backend with the production transport, the system clock and OS
    /// randomness. Credentials are resolved now.
    pub fn new(config: S3Config) -> Result<S3Backend, BackendError> {
        let transport = ReqwestTransport::new(&config.transport).map_err(|err| BackendError::Config(err.message))?;
        S3Backend::with_parts(config, Arc::new(transport), Arc::new(SystemClock::new()), Arc::new(OsEntropy))
    }

    /// A backend over the given transport, clock and randomness: for the
    /// simulator and for tests.
    pub fn with_parts(
        config: S3Config,
        transport: Arc<dyn HttpTransport>,
        clock: Arc<dyn Clock>,
        entropy: Arc<dyn Entropy>,
    ) -> Result<S3Backend, BackendError> {
        let provider = config.credentials.provider(&config.region)?;
        S3Backend::with_provider(config, provider, transport, clock, entropy)
    }

    /// A backend whose credential source is already resolved.
    fn with_provider(
        config: S3Config,
        provider: super::credentials::providers::Provider,
        transport: Arc<dyn HttpTransport>,
        clock: Arc<dyn Clock>,
        entropy: Arc<dyn Entropy>,
    ) -> Result<S3Backend, BackendError> {
        let target = Target::new(&config)?;
        let credentials = CredentialCache::new(provider, config.region.clone(), transport.clone(), clock.clone())?;
        Ok(S3Backend {
            target: Arc::new(target),
            key: config.key,
            credentials: Arc::new(credentials),
            transport,
            clock,
            entropy,
            skew_warned: Arc::new(AtomicBool::new(false)),
            read_denied: Arc::new(AtomicBool::new(false)),
            bare_etags: Arc::new(AtomicBool::new(config.etag_style == EtagStyle::Bare)),
        })
    }

    /// The same store and settings, for another key.
    pub fn with_key(&self, key: impl Into<String>) -> S3Backend {
        S3Backend { key: key.into(), read_denied: Arc::new(AtomicBool::new(false)), ..self.clone() }
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.target.bucket
    }

    /// The lease record's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Stores `bytes` without conditions, as an operator's tool or a foreign
    /// writer would. For tests and repairs; the elector never does this.
    pub async fn put_raw(&self, bytes: Vec<u8>) -> Result<Version, BackendError> {
        let response =
            self.send(Method::PUT, &[], Bytes::from(bytes)).await.map_err(|failure| failure_to_error(failure, true))?;
        match response.status() {
            status if status.is_success() => self.etag(&response),
            _ => Err(self.refusal(&response, Op::Write)),
        }
    }

    /// Reads the lease object as stored, with what the server said about
    /// it: for operators' tools, which must show a record even when it does
    /// not parse. `Ok(None)` means there is no object.
    pub async fn inspect(&self) -> Result<Option<Inspection>, BackendError> {
        let response = self.send(Method::GET, &[], Bytes::new()).await.map_err(|f| failure_to_error(f, false))?;
        if response.status() != StatusCode::OK {
            return match self.refusal(&response, Op::Read) {
                BackendError::NoLease => Ok(None),
                other => Err(other),
            };
        }
        let header_time = |name: http::header::HeaderName| {
            response.headers().get(name).and_then(|value| value.to_str().ok()).and_then(parse_http_date)
        };
        Ok(Some(Inspection {
            version: self.etag(&response)?,
            record: LeaseRecord::decode(response.body()),
            bytes: response.body().to_vec(),
            last_modified: header_time(http::header::LAST_MODIFIED),
            server_date: header_time(http::header::DATE),
        }))
    }

    fn url(&self) -> String {
        let target = &self.target;
        let key = encode_key(&self.key);
        match target.addressing {
            Addressing::PathStyle => {
                format!("{}://{}{}/{}/{}", target.scheme, target.authority, target.base_path, target.bucket, key)
            }
            Addressing::VirtualHost => {
                format!("{}://{}.{}{}/{}", target.scheme, target.bucket, target.authority, target.base_path, key)
            }
        }
    }

    /// Sends one request to this backend's key, signed, under the request
    /// timeout, and returns the answer as it came, whatever its status.
    ///
    /// This is the raw access a provider validator needs (`hoplock check-s3`
    /// sends conditional headers and bodies of its own choosing with it);
    /// the elector never uses it. The configured extra headers are added.
    /// A request that got no answer is mapped as a write would be when the
    /// method is not GET or HEAD: [`BackendError::Ambiguous`] once it may
    /// have been sent.
    ///
    /// ```no_run
    /// use hoplock::s3::{S3Backend, S3Config};
    ///
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = S3Backend::new(S3Config::new("my-bucket", "probe.bin"))?;
    /// let headers = [("if-none-match", "*".to_string())];
    /// let answer = store.request(http::Method::PUT, &headers, bytes::Bytes::from_static(b"x")).await?;
    /// println!("{} {:?}", answer.status(), answer.headers().get("etag"));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn request(
        &self,
        method: Method,
        headers: &[(&str, String)],
        body: Bytes,
    ) -> Result<Response<Bytes>, BackendError> {
        let is_write = !matches!(method, Method::GET | Method::HEAD);
        self.send(method, headers, body).await.map_err(|failure| failure_to_error(failure, is_write))
    }

    /// Builds and signs a request to this backend's key without sending it,
    /// for callers that send it another way (a validator trickling a body).
    /// The signature covers the whole body.
    pub async fn signed_request(
        &self,
        method: Method,
        headers: &[(&str, String)],
        body: Bytes,
    ) -> Result<Request<Bytes>, BackendError> {
        let deadline = self.clock.now() + self.target.request_timeout;
        self.sign(method, headers, body, deadline).await.map_err(|failure| failure_to_error(failure, false))
    }

    /// The error a refused answer maps to, as the backend's own reads and
    /// writes would report it (`write` for PUT and DELETE).
    pub fn refusal_of(&self, response: &Response<Bytes>, write: bool) -> BackendError {
        self.refusal(response, if write { Op::Write } else { Op::Read })
    }

    /// Builds and signs one request; waits for credentials until `deadline`.
    async fn sign(
        &self,
        method: Method,
        headers: &[(&str, String)],
        body: Bytes,
        deadline: crate::clock::Instant,
    ) -> Result<Request<Bytes>, Failure> {
        let mut builder = Request::builder().method(method).uri(self.url());
        for (name, value) in &self.target.extra_headers {
            builder = builder.header(name, value);
        }
        for (name, value) in headers {
            builder = builder.header(*name, value.as_str());
        }
        let mut request = builder
            .body(body)
            .map_err(|err| Failure::Transport(TransportError::new(TransportErrorKind::Config, err.to_string())))?;
        // Waits only for the very first keys; after that, keys in hand are
        // used and an expired set fails at once (see `credentials`).
        let signer = tokio::select! {
            biased;
            signer = self.credentials.signer() => signer.map_err(Failure::Credentials)?,
            () = self.clock.sleep_until(deadline) => {
                return Err(Failure::Credentials(BackendError::Transient(format!(
                    "no S3 credentials yet from {}",
                    self.credentials.source()
                ))));
            }
        };
        signer
            .sign(&mut request, self.clock.wall())
            .map_err(|err| Failure::Transport(TransportError::new(TransportErrorKind::Config, err.to_string())))?;
        Ok(request)
    }

    /// Builds, signs and sends one request under the request timeout.
    async fn send(&self, method: Method, headers: &[(&str, String)], body: Bytes) -> Result<Response<Bytes>, Failure> {
        let deadline = self.clock.now() + self.target.request_timeout;
        let request = self.sign(method, headers, body, deadline).await?;
        let response = tokio::select! {
            biased;
            result = self.transport.send(request) => result.map_err(Failure::Transport)?,
            () = self.clock.sleep_until(deadline) => return Err(Failure::Timeout),
        };
        self.check_skew(&response);
        Ok(response)
    }

    /// Warns once when the server's clock and ours disagree by more than the
    /// configured bound. Only SigV4 cares; the election never compares clocks.
    fn check_skew(&self, response: &Response<Bytes>) {
        let Some(skew) = server_skew(response, self.clock.wall()) else {
            return;
        };
        if skew.abs() > self.target.clock_skew_warning.as_secs_f64() && !self.skew_warned.swap(true, Ordering::Relaxed)
        {
            warn!(
                skew_seconds = skew,
                "the S3 server's clock differs from this machine's; requests fail once it exceeds 15 minutes"
            );
        }
    }

    fn etag(&self, response: &Response<Bytes>) -> Result<Version, BackendError> {
        let etag = response.headers().get(http::header::ETAG).and_then(|value| value.to_str().ok());
        match etag {
            Some(etag) if !etag.is_empty() => Ok(Version::new(etag)),
            _ => Err(BackendError::Unsupported(
                "the store answered without an ETag, so writes cannot be made conditional".into(),
            )),
        }
    }

    fn if_match(&self, version: &Version) -> String {
        self.etag_style().render(version)
    }

    /// The form `If-Match` ETags are sent in now.
    pub fn etag_style(&self) -> EtagStyle {
        if self.bare_etags.load(Ordering::Relaxed) { EtagStyle::Bare } else { EtagStyle::Quoted }
    }

    /// Sends `If-Match` ETags in `style` from now on, from this backend and
    /// every one made from it.
    fn set_etag_style(&self, style: EtagStyle) {
        self.bare_etags.store(style == EtagStyle::Bare, Ordering::Relaxed);
    }

    /// Maps an unsuccessful answer to the error the caller can act on.
    ///
    /// The grouping follows what the answer proves. Any 4xx proves the
    /// request was refused, so a refused write changed nothing; a 5xx or an
    /// unknown answer to a write may come after the write was applied, so it
    /// stays [`BackendError::Ambiguous`] and the elector reads its nonce
    /// back. Only answers that need a person (a wrong secret, a missing
    /// bucket, a denied permission, a provider without conditional writes)
    /// are fatal; throttling, timeouts and unknown refusals are retried.
    fn refusal(&self, response: &Response<Bytes>, op: Op) -> BackendError {
        let status = response.status();
        let error = S3Error::parse(response.body());
        let detail = describe(status, &error);
        let conditional = matches!(op, Op::Write | Op::Delete);
        match (status.as_u16(), error.code.as_str()) {
            (_, "NoSuchBucket") => BackendError::Config(format!(
                "bucket {:?} does not exist (a missing bucket is not a missing lease): {detail}",
                self.target.bucket
            )),
            (404, _) => BackendError::NoLease,
            (412, _) | (304, _) => BackendError::LeaseHeld,
            (409, _) => BackendError::Conflict(detail),
            (501, _) | (400, "NotImplemented") => BackendError::Unsupported(format!(
                "the provider refused a conditional request ({detail}): it cannot do conditional writes, \
                 so it cannot hold a lease; use another store"
            )),
            (400 | 403, "ExpiredToken" | "TokenRefreshRequired") => self.expired(detail),
            (403, "SignatureDoesNotMatch") => BackendError::Config(format!(
                "the secret access key is wrong: check AWS_SECRET_ACCESS_KEY or the credentials profile ({detail})"
            )),
            (403, "InvalidAccessKeyId") => BackendError::Config(format!(
                "the access key id is unknown to this store: check AWS_ACCESS_KEY_ID or the profile ({detail})"
            )),
            (400 | 403, "InvalidToken") => BackendError::Config(format!(
                "the session token is not valid for these keys: check AWS_SESSION_TOKEN or the profile ({detail})"
            )),
            (403, "RequestTimeTooSkewed") => BackendError::Config(format!(
                "{}; SigV4 allows 15 minutes: fix the clock ({detail})",
                describe_skew(server_skew(response, self.clock.wall()))
            )),
            (403, _) if op == Op::Read => BackendError::Config(format!(
                "access denied reading {}/{}: the credentials need s3:GetObject on that key (S3 also \
                 answers 403 for a missing key when s3:ListBucket is not granted) ({detail})",
                self.target.bucket, self.key
            )),
            (403, _) => BackendError::Config(format!(
                "access denied writing {}/{}: the credentials need s3:PutObject on that key ({detail})",
                self.target.bucket, self.key
            )),
            (301 | 307 | 400, "PermanentRedirect" | "AuthorizationHeaderMalformed") => BackendError::Config(format!(
                "the bucket is in another region or needs another endpoint: set the region ({detail})"
            )),
            // A server error may come after a write was applied.
            (500..=599, _) if conditional => BackendError::Ambiguous(detail),
            (500..=599, _) => BackendError::Transient(detail),
            // Throttling (429, 400 Throttling), a body the server gave up
            // waiting for (408, 400 RequestTimeout) and any other refusal:
            // nothing changed, and trying again later may help.
            (400..=499, _) => BackendError::Transient(format!("the store refused the request: {detail}")),
            // Anything else (a redirect we do not follow, an unknown status)
            // proves nothing about a write.
            _ if conditional => BackendError::Ambiguous(format!("unexpected answer: {detail}")),
            _ => BackendError::Transient(format!("unexpected answer: {detail}")),
        }
    }

    /// The answer to a request signed with expired temporary credentials.
    /// Nothing was applied. A source that refreshes will have new ones
    /// soon, so that is a passing failure; static keys never recover.
    fn expired(&self, detail: String) -> BackendError {
        if self.credentials.refreshes() {
            BackendError::Transient(format!("the credentials expired and are being refreshed: {detail}"))
        } else {
            BackendError::Config(format!(
                "the session token has expired and these credentials cannot be refreshed: \
                 replace AWS_SESSION_TOKEN or use a refreshing credential source ({detail})"
            ))
        }
    }

    /// After a read refused with 403 was taken for a missing key, a create
    /// failed: the key exists. One more read tells why the first was
    /// refused. If it is refused again, this identity may not read an
    /// existing key, and no campaign can work; if it succeeds, another
    /// elector simply created the key in between.
    async fn settle_denied_read(&self) -> BackendError {
        match self.send(Method::GET, &[], Bytes::new()).await {
            Ok(response) if is_access_denied(&response) => {
                let detail = describe(response.status(), &S3Error::parse(response.body()));
                BackendError::Config(format!(
                    "the lease key {}/{} exists but reading it is denied: grant s3:GetObject on it ({detail})",
                    self.target.bucket, self.key
                ))
            }
            Ok(response) => {
                if response.status() == StatusCode::OK || response.status() == StatusCode::NOT_FOUND {
                    self.read_denied.store(false, Ordering::Relaxed);
                }
                BackendError::LeaseHeld
            }
            Err(_) => BackendError::LeaseHeld,
        }
    }

    fn jittered_backoff(&self, attempt: u32) -> Duration {
        let base = Duration::from_millis(50).saturating_mul(1 << attempt.min(5));
        let base = base.min(Duration::from_secs(1));
        let unit = (self.entropy.next_u64() % 1000) as u32;
        base * (500 + unit / 2) / 1000
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Read,
    Write,
    Delete,
}

/// A 403 that only says access was denied (not a bad signature, key,
/// token or clock, which have codes of their own).
fn is_access_denied(response: &Response<Bytes>) -> bool {
    response.status() == StatusCode::FORBIDDEN && {
        let code = S3Error::parse(response.body()).code;
        code.is_empty() || code == "AccessDenied"
    }
}

fn describe(status: StatusCode, error: &S3Error) -> String {
    let mut text = format!("HTTP {}", status.as_u16());
    if !error.code.is_empty() {
        text.push(' ');
        text.push_str(&error.code);
    }
    if !error.message.is_empty() {
        text.push_str(": ");
        text.push_str(&error.message);
    }
    if !error.request_id.is_empty() {
        text.push_str(&format!(" (request id {})", error.request_id));
    }
    text
}

/// Server time minus local time in seconds, from the `Date` header.
fn server_skew(response: &Response<Bytes>, local: SystemTime) -> Option<f64> {
    let date = response.headers().get(http::header::DATE)?.to_str().ok()?;
    let server = parse_http_date(date)?;
    Some(match server.duration_since(local) {
        Ok(ahead) => ahead.as_secs_f64(),
        Err(behind) => -behind.duration().as_secs_f64(),
    })
}

/// How this machine's wall clock stands against the store's, given how far
/// the store's is ahead (`server_skew`): a clock 20 minutes fast is "1200 s
/// ahead of the store's".
fn describe_skew(server_ahead_secs: Option<f64>) -> String {
    match server_ahead_secs {
        None => "this machine's wall clock differs from the store's by an unknown amount".into(),
        Some(ahead) if ahead < 0.0 => format!("this machine's wall clock is {:.0} s ahead of the store's", -ahead),
        Some(ahead) => format!("this machine's wall clock is {ahead:.0} s behind the store's"),
    }
}

/// Maps a request that got no answer. A write that may have been sent has
/// an unknown outcome.
fn failure_to_error(failure: Failure, is_write: bool) -> BackendError {
    match failure {
        Failure::Credentials(err) => err,
        Failure::Transport(err) if err.kind == TransportErrorKind::Config => {
            BackendError::Config(format!("cannot send the request: {}", err.message))
        }
        Failure::Transport(err) if err.kind == TransportErrorKind::Connect => {
            BackendError::Transient(format!("cannot reach the store: {}", err.message))
        }
        Failure::Transport(err) if is_write => BackendError::Ambiguous(format!("connection failed: {}", err.message)),
        Failure::Transport(err) => BackendError::Transient(format!("connection failed: {}", err.message)),
        Failure::Timeout if is_write => BackendError::Ambiguous("the request timed out".into()),
        Failure::Timeout => BackendError::Transient("the request timed out".into()),
    }
}

/// Checks one of [`S3Config::extra_headers`]: a valid name and value, and
/// not a header the backend sets itself, which it would silently replace.
fn extra_header(name: &str, value: &str) -> Result<(http::HeaderName, http::HeaderValue), BackendError> {
    let header_name = http::HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| BackendError::Config(format!("{name:?} is not a valid HTTP header name")))?;
    let reserved = ["authorization", "host", "if-match", "if-none-match", "content-length", "content-type"];
    if reserved.contains(&header_name.as_str()) || header_name.as_str().starts_with("x-amz-") {
        return Err(BackendError::Config(format!(
            "the header {name:?} is set by the S3 backend itself and cannot be added"
        )));
    }
    let header_value = http::HeaderValue::from_str(value.trim())
        .map_err(|_| BackendError::Config(format!("the value of the header {name:?} is not valid in HTTP")))?;
    Ok((header_name, header_value))
}

impl Target {
    fn new(config: &S3Config) -> Result<Target, BackendError> {
        let bad = |message: String| Err(BackendError::Config(message));
        if config.bucket.is_empty() || config.bucket.len() > 63 || config.bucket.contains('/') {
            return bad(format!("{:?} is not a valid bucket name", config.bucket));
        }
        if config.key.is_empty() || config.key.len() > 1024 {
            return bad("the lease key must be 1 to 1024 bytes".into());
        }
        // Some stores map keys onto file paths and refuse or fold these, so a
        // lease key with them would not be the key the user named.
        if config.key.starts_with('/')
            || config.key.split('/').any(|segment| matches!(segment, "." | ".."))
            || config.key.contains("//")
        {
            return bad(format!(
                "lease key {:?} must not start with '/' or contain '//', '.' or '..' segments",
                config.key
            ));
        }
        if config.region.is_empty() {
            return bad("the region must not be empty".into());
        }
        if config.request_timeout.is_zero() || config.operation_deadline < config.request_timeout {
            return bad("the request timeout must be above zero and within the operation deadline".into());
        }
        let endpoint = config.endpoint.clone().unwrap_or_else(|| format!("https://s3.{}.amazonaws.com", config.region));
        let uri: http::Uri = endpoint
            .parse()
            .map_err(|err| BackendError::Config(format!("endpoint {endpoint:?} is not a URL: {err}")))?;
        let scheme = match uri.scheme_str() {
            Some(scheme @ ("https" | "http")) => scheme.to_string(),
            _ => {
                return bad(format!(
                    "endpoint {endpoint:?} must start with https:// (or http:// to opt into plain HTTP)"
                ));
            }
        };
        let Some(authority) = uri.authority() else {
            return bad(format!("endpoint {endpoint:?} has no host"));
        };
        if uri.query().is_some() {
            return bad(format!("endpoint {endpoint:?} must not have a query"));
        }
        let extra_headers = config
            .extra_headers
            .iter()
            .map(|(name, value)| extra_header(name, value))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Target {
            extra_headers,
            scheme,
            authority: authority.to_string(),
            base_path: uri.path().trim_end_matches('/').to_string(),
            bucket: config.bucket.clone(),
            addressing: config.addressing,
            request_timeout: config.request_timeout,
            operation_deadline: config.operation_deadline,
            clock_skew_warning: config.clock_skew_warning,
        })
    }
}

/// Objects are labelled `application/json`, which lease records are; the
/// label does not change what S3 stores. Objects larger than the backend
/// reads back ([`MAX_RESPONSE_BYTES`]) are refused before they are sent.
impl ObjectBackend for S3Backend {
    async fn read_object(&self) -> Result<StoredObject, BackendError> {
        let deadline = self.clock.now() + self.target.operation_deadline;
        let mut attempt = 0;
        loop {
            let error = match self.send(Method::GET, &[], Bytes::new()).await {
                Ok(response) if response.status() == StatusCode::OK => {
                    self.read_denied.store(false, Ordering::Relaxed);
                    let version = self.etag(&response)?;
                    return Ok(StoredObject { bytes: response.body().to_vec(), version });
                }
                Ok(response) if is_access_denied(&response) => {
                    // S3 answers a GET of a missing key with 403 instead of
                    // 404 when the caller may not list the bucket, which the
                    // documented policy does not grant. Take it as missing:
                    // the elector's next step is a create with
                    // `If-None-Match: *`, which succeeds only if the key is
                    // missing, and `write` tells the other case apart.
                    self.read_denied.store(true, Ordering::Relaxed);
                    return Err(BackendError::NoLease);
                }
                Ok(response) => {
                    if response.status() == StatusCode::NOT_FOUND {
                        self.read_denied.store(false, Ordering::Relaxed);
                    }
                    self.refusal(&response, Op::Read)
                }
                Err(failure) => failure_to_error(failure, false),
            };
            // Reads change nothing, so retrying them is safe; only trouble
            // that may pass is retried.
            if !matches!(error, BackendError::Transient(_)) {
                return Err(error);
            }
            let backoff = self.jittered_backoff(attempt);
            if self.clock.now() + backoff + self.target.request_timeout > deadline {
                return Err(error);
            }
            self.clock.sleep_until(self.clock.now() + backoff).await;
            attempt += 1;
        }
    }

    async fn write_object(&self, expected: Option<&Version>, bytes: Vec<u8>) -> Result<Version, BackendError> {
        if bytes.len() > MAX_RESPONSE_BYTES {
            return Err(BackendError::Config(format!(
                "an object of {} bytes is larger than the {MAX_RESPONSE_BYTES} bytes this backend reads back",
                bytes.len()
            )));
        }
        let condition = match expected {
            None => ("if-none-match", "*".to_string()),
            Some(version) => ("if-match", self.if_match(version)),
        };
        let headers = [condition, ("content-type", "application/json".to_string())];
        let response =
            self.send(Method::PUT, &headers, Bytes::from(bytes)).await.map_err(|f| failure_to_error(f, true))?;
        if response.status().is_success() {
            return self.etag(&response);
        }
        let error = self.refusal(&response, Op::Write);
        if expected.is_none() && error == BackendError::LeaseHeld && self.read_denied.load(Ordering::Relaxed) {
            return Err(self.settle_denied_read().await);
        }
        Err(error)
    }

    async fn delete_object(&self, expected: &Version) -> Result<(), BackendError> {
        let headers = [("if-match", self.if_match(expected))];
        let response =
            self.send(Method::DELETE, &headers, Bytes::new()).await.map_err(|f| failure_to_error(f, true))?;
        if response.status().is_success() { Ok(()) } else { Err(self.refusal(&response, Op::Delete)) }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // Tests watch tokio's paused time as "real time".
mod tests;
