//! The HTTP front end: authentication, routing, faults and S3's answers.
//!
//! [`FakeS3::handle`] takes one whole request and returns a [`Reply`]: an
//! S3-shaped response, or [`Reply::DropConnection`] when a fault says the
//! reply is lost. It knows nothing of sockets; [`super::server`] runs it
//! over TCP, real or simulated. Time comes from the injected [`Clock`] and
//! every random choice from the generator seeded at construction, so a run
//! over the simulated network replays exactly.
//!
//! # The life of an object request
//!
//! 1. Route: path-style `/bucket/key`, or virtual-host `bucket.<domain>/key`
//!    when a domain is configured.
//! 2. Authenticate with SigV4 against the configured key pairs.
//! 3. Draw this request's faults; wait half its latency.
//! 4. Answer `503 SlowDown` or `500 InternalError` if drawn (nothing applied).
//! 5. Apply it, under the provider mode's rules. An honest write checks and
//!    writes under one lock; a non-atomic one checks, waits the other half
//!    of its latency, then writes.
//! 6. Wait the rest of the latency, tell the observer, and answer, or
//!    drop the connection if an ambiguous success was drawn.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use hoplock::clock::{Clock, Instant};
use hoplock::s3::sigv4::{self, Authorization, MAX_CLOCK_SKEW, VerifyError};
use hoplock::s3::xml::{escape, format_http_date};
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, DATE, ETAG, HOST, LAST_MODIFIED};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use sha2::{Digest, Sha256};

use super::faults::{Faults, FaultsError, OpKind, Rng};
use super::mode::ProviderMode;
use super::store::{Conditions, EtagCondition, Object, Refusal, Store};

/// The longest object key S3 accepts, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;

/// What the front end does with a request.
#[derive(Debug)]
pub enum Reply {
    /// Send this response.
    Respond(Response<Bytes>),
    /// Close the connection without answering: the request may have been
    /// applied, and the client cannot tell.
    DropConnection,
    /// Never answer and keep the connection open: the client learns
    /// nothing until its own timeout.
    Silence,
}

impl Reply {
    /// The response, unless the reply is dropped.
    pub fn response(&self) -> Option<&Response<Bytes>> {
        match self {
            Reply::Respond(response) => Some(response),
            Reply::DropConnection | Reply::Silence => None,
        }
    }
}

/// What became of one object request, as the observer hears it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The request took effect and was answered: a write stored its body, a
    /// delete removed the object (or found none to remove, unconditionally),
    /// a read returned a version.
    Applied,
    /// The request took effect, but its reply was dropped: the client sees
    /// a broken connection, or no answer at all.
    DroppedAfterApply,
    /// The request took effect, and was answered with an error anyway
    /// (`500 InternalError`): the client must not take the error as "not
    /// applied".
    AppliedThenFailed {
        /// The HTTP status sent.
        status: u16,
    },
    /// Nothing changed; the server answered `status` with S3 error `code`
    /// (`NotModified` for a 304), or dropped that answer when
    /// `reply_dropped`.
    Refused {
        /// The HTTP status.
        status: u16,
        /// The S3 error code.
        code: &'static str,
        /// Whether the answer was dropped.
        reply_dropped: bool,
    },
}

impl Outcome {
    /// Whether the request changed (or, for a read, observed) the store.
    pub fn applied(&self) -> bool {
        matches!(self, Outcome::Applied | Outcome::DroppedAfterApply | Outcome::AppliedThenFailed { .. })
    }
}

/// One object request, reported to the observer when it ends.
///
/// Times are on the server's [`Clock`]: `applied_at` is the instant the
/// store was read or changed, the request's linearization point in an
/// honest store. Requests that cannot be routed to an object (bucket
/// operations, malformed paths, unsupported methods) are not reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The `x-amz-request-id` the response carries.
    pub request_id: String,
    /// Read, write or delete.
    pub op: OpKind,
    /// The bucket.
    pub bucket: String,
    /// The object key.
    pub key: String,
    /// The `If-Match` header as received, before the provider mode had its
    /// way with it.
    pub if_match: Option<String>,
    /// The `If-None-Match` header as received.
    pub if_none_match: Option<String>,
    /// What happened.
    pub outcome: Outcome,
    /// The ETag written (write), returned (read) or removed (delete), when
    /// the request was applied.
    pub etag: Option<String>,
    /// The body written (write) or returned (read), when the request was
    /// applied: the simulator reads the lease generation from it.
    pub body: Option<Bytes>,
    /// Who sent it: the `sim-client` header the simulator's transport adds
    /// (`node#incarnation`), absent for other clients.
    pub client: Option<String>,
    /// When the request reached the front end.
    pub started: Instant,
    /// When it read or changed the store, if it did.
    pub applied_at: Option<Instant>,
    /// When it was answered or its connection dropped.
    pub ended: Instant,
}

/// Receives one [`Event`] per object request. It runs on the request's
/// task, so it must be quick; forward to a channel for anything slow.
pub type Observer = Arc<dyn Fn(&Event) + Send + Sync>;

/// Why a [`FakeS3`] could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BuildError {
    /// The faults are out of range.
    #[error(transparent)]
    Faults(#[from] FaultsError),
    /// No credentials were given, so no request could authenticate.
    #[error("the fake S3 needs at least one access key pair")]
    NoCredentials,
    /// A bucket name no S3 client could address: empty, longer than 63
    /// bytes, or holding `/` or a character that is not visible ASCII.
    #[error("{0:?} is not a usable bucket name (1 to 63 visible ASCII characters, no '/')")]
    InvalidBucket(String),
}

/// Configures a [`FakeS3`].
pub struct FakeS3Builder {
    clock: Arc<dyn Clock>,
    seed: u64,
    mode: ProviderMode,
    faults: Faults,
    credentials: BTreeMap<String, String>,
    buckets: BTreeSet<String>,
    observer: Option<Observer>,
    virtual_host_domain: Option<String>,
}

impl fmt::Debug for FakeS3Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Secrets stay out of logs: list the key ids only.
        f.debug_struct("FakeS3Builder")
            .field("seed", &self.seed)
            .field("mode", &self.mode)
            .field("faults", &self.faults)
            .field("access_key_ids", &self.credentials.keys().collect::<Vec<_>>())
            .field("buckets", &self.buckets)
            .field("virtual_host_domain", &self.virtual_host_domain)
            .finish_non_exhaustive()
    }
}

impl FakeS3Builder {
    /// How the server treats conditional requests. Default `honest`.
    pub fn mode(mut self, mode: ProviderMode) -> Self {
        self.mode = mode;
        self
    }

    /// The faults to inject. Default none.
    pub fn faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// Adds an access key pair the server accepts. At least one is needed.
    pub fn credentials(mut self, access_key_id: impl Into<String>, secret_access_key: impl Into<String>) -> Self {
        self.credentials.insert(access_key_id.into(), secret_access_key.into());
        self
    }

    /// Adds a bucket that exists from the start. Others can be created with
    /// a PUT of the bucket, as on S3.
    pub fn bucket(mut self, name: impl Into<String>) -> Self {
        self.buckets.insert(name.into());
        self
    }

    /// Reports every object request to `observer` when it ends.
    pub fn observer(mut self, observer: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// Also accepts virtual-host requests: a `Host` of `bucket.<domain>`
    /// (any port) addresses `bucket`. Path-style requests work either way.
    pub fn virtual_host_domain(mut self, domain: impl Into<String>) -> Self {
        self.virtual_host_domain = Some(domain.into().to_ascii_lowercase());
        self
    }

    /// Builds the server.
    pub fn build(self) -> Result<FakeS3, BuildError> {
        self.faults.validate()?;
        if self.credentials.is_empty() {
            return Err(BuildError::NoCredentials);
        }
        let mut store = Store::new();
        if self.mode == ProviderMode::StaleReads {
            store.set_history_retention(self.faults.stale_read_window());
        }
        for bucket in &self.buckets {
            // Looser than the rules for new buckets (`valid_bucket_name`):
            // the buckets given here stand for existing ones, and old
            // buckets may have names S3 no longer hands out.
            let usable = (1..=63).contains(&bucket.len()) && bucket.bytes().all(|b| b.is_ascii_graphic() && b != b'/');
            if !usable {
                return Err(BuildError::InvalidBucket(bucket.clone()));
            }
            store.create_bucket(bucket);
        }
        Ok(FakeS3 {
            inner: Arc::new(Inner {
                store: Mutex::new(store),
                mode: self.mode,
                faults: self.faults,
                credentials: self.credentials,
                clock: self.clock,
                rng: Mutex::new(Rng::new(self.seed)),
                observer: self.observer,
                in_flight: Mutex::new(BTreeMap::new()),
                next_sequence: AtomicU64::new(0),
                virtual_host_domain: self.virtual_host_domain,
            }),
        })
    }
}

/// A fake S3 server: the store, its provider mode, its faults and its
/// credentials. Cloning it is cheap and shares the store.
///
/// ```
/// use std::sync::Arc;
/// use std::time::{Duration, SystemTime};
///
/// use bytes::Bytes;
/// use hoplock::clock::{Clock, DriftingClock};
/// use hoplock::s3::sigv4::{Credentials, sign};
/// use hoplock_sim::fake_s3::{FakeS3, ProviderMode, Reply};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let clock = Arc::new(DriftingClock::new(
///     SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
///     0,
/// ));
/// let s3 = FakeS3::builder(clock.clone(), 42)
///     .mode(ProviderMode::Honest)
///     .credentials("AK", "SK")
///     .bucket("leases")
///     .build()?;
///
/// let mut request = http::Request::put("http://s3.test/leases/k")
///     .header("if-none-match", "*")
///     .body(Bytes::from("hello"))?;
/// sign(&mut request, &Credentials::new("AK", "SK"), "us-east-1", clock.wall())?;
/// let Reply::Respond(response) = s3.handle(request).await else { unreachable!() };
/// assert_eq!(response.status(), 200);
/// assert_eq!(response.headers()["etag"], "\"5d41402abc4b2a76b9719d911017c592\"");
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct FakeS3 {
    inner: Arc<Inner>,
}

struct Inner {
    store: Mutex<Store>,
    mode: ProviderMode,
    faults: Faults,
    credentials: BTreeMap<String, String>,
    clock: Arc<dyn Clock>,
    rng: Mutex<Rng>,
    observer: Option<Observer>,
    /// Conditional mutations in flight, by bucket and key, as request
    /// sequence numbers: who overlaps whom, for `conflict_409_on_overlap`.
    in_flight: Mutex<BTreeMap<(String, String), BTreeSet<u64>>>,
    next_sequence: AtomicU64,
    virtual_host_domain: Option<String>,
}

impl fmt::Debug for FakeS3 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeS3")
            .field("mode", &self.inner.mode)
            .field("faults", &self.inner.faults)
            .field("access_key_ids", &self.inner.credentials.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Locks a mutex, taking over a poisoned one: every critical section here
/// leaves the data whole, so a panic elsewhere does not make it unusable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An S3 error answer before it is rendered.
#[derive(Debug)]
struct S3Failure {
    status: StatusCode,
    code: &'static str,
    message: String,
    /// Extra elements S3 adds for this code, e.g. `<Condition>`.
    extra: Vec<(&'static str, String)>,
}

impl S3Failure {
    fn new(status: u16, code: &'static str, message: impl Into<String>) -> S3Failure {
        S3Failure {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            code,
            message: message.into(),
            extra: Vec::new(),
        }
    }

    fn with(mut self, name: &'static str, value: impl Into<String>) -> S3Failure {
        self.extra.push((name, value.into()));
        self
    }

    fn invalid_uri() -> S3Failure {
        S3Failure::new(400, "InvalidURI", "Couldn't parse the specified URI.")
    }

    fn not_implemented(what: &str) -> S3Failure {
        S3Failure::new(501, "NotImplemented", "A header you provided implies functionality that is not implemented")
            .with("Detail", what)
    }

    fn method_not_allowed(method: &Method) -> S3Failure {
        S3Failure::new(405, "MethodNotAllowed", "The specified method is not allowed against this resource.")
            .with("Method", method.as_str())
    }

    fn from_refusal(refusal: &Refusal, key: &str) -> S3Failure {
        match refusal {
            Refusal::NoSuchBucket => S3Failure::new(404, "NoSuchBucket", "The specified bucket does not exist"),
            Refusal::NoSuchKey => {
                S3Failure::new(404, "NoSuchKey", "The specified key does not exist.").with("Key", key)
            }
            Refusal::PreconditionFailed { header } => S3Failure::new(
                412,
                "PreconditionFailed",
                "At least one of the pre-conditions you specified did not hold",
            )
            .with("Condition", *header),
            Refusal::NotModified { .. } => S3Failure::new(304, "NotModified", "Not Modified"),
            Refusal::NotImplemented(what) => S3Failure::not_implemented(what),
        }
    }

    fn from_verify(error: &VerifyError, request: &Request<Bytes>) -> S3Failure {
        let failure = S3Failure::new(error.http_status(), error.s3_code(), error.to_string());
        match error {
            VerifyError::SignatureDoesNotMatch { canonical_request, string_to_sign } => S3Failure::new(
                403,
                "SignatureDoesNotMatch",
                "The request signature we calculated does not match the signature you provided. \
                 Check your key and signing method.",
            )
            .with("StringToSign", string_to_sign.clone())
            .with("CanonicalRequest", canonical_request.clone()),
            VerifyError::ContentSha256Mismatch => S3Failure::new(
                400,
                "XAmzContentSHA256Mismatch",
                "The provided 'x-amz-content-sha256' header does not match what was computed.",
            )
            .with("ClientComputedContentSHA256", header(request.headers(), "x-amz-content-sha256").unwrap_or_default())
            .with("S3ComputedContentSHA256", hex(&Sha256::digest(request.body()))),
            VerifyError::RequestTimeTooSkewed { request_time, server_time } => S3Failure::new(
                403,
                "RequestTimeTooSkewed",
                "The difference between the request time and the current time is too large.",
            )
            .with("RequestTime", format_http_date(*request_time))
            .with("ServerTime", format_http_date(*server_time))
            .with("MaxAllowedSkewMilliseconds", MAX_CLOCK_SKEW.as_millis().to_string()),
            _ => failure,
        }
    }
}

/// Where a request is addressed.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    /// `/`: the service (ListBuckets).
    Service,
    /// A bucket without a key.
    Bucket(String),
    /// An object.
    Object { bucket: String, key: String },
}

/// Undoes an in-flight registration when its request ends, however it
/// ends: a client that hangs up makes hyper drop the request's future.
struct InFlight {
    inner: Arc<Inner>,
    key: (String, String),
    sequence: u64,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut in_flight = lock(&self.inner.in_flight);
        if let Some(set) = in_flight.get_mut(&self.key) {
            set.remove(&self.sequence);
            if set.is_empty() {
                in_flight.remove(&self.key);
            }
        }
    }
}

/// The header the simulator's transport names its node process in. It is
/// not signed (it is no `x-amz-` header), so it changes nothing S3 checks.
pub const CLIENT_HEADER: &str = "sim-client";

/// The parts of an object request the handler works from.
struct ObjectRequest {
    op: OpKind,
    bucket: String,
    key: String,
    head: bool,
    resource: String,
    request_id: String,
    started: Instant,
    sequence: u64,
    if_match: Option<String>,
    if_none_match: Option<String>,
    client: Option<String>,
}

/// The result of applying an object request.
struct Applied {
    result: Result<Response<Bytes>, S3Failure>,
    etag: Option<String>,
    body: Option<Bytes>,
    applied_at: Option<Instant>,
    /// Whether the store was read or changed (for the observer).
    took_effect: bool,
}

impl FakeS3 {
    /// Starts configuring a server that reads time from `clock` and draws
    /// every random choice (faults, latencies, request ids) from `seed`.
    pub fn builder(clock: Arc<dyn Clock>, seed: u64) -> FakeS3Builder {
        FakeS3Builder {
            clock,
            seed,
            mode: ProviderMode::Honest,
            faults: Faults::default(),
            credentials: BTreeMap::new(),
            buckets: BTreeSet::new(),
            observer: None,
            virtual_host_domain: None,
        }
    }

    /// The provider mode.
    pub fn mode(&self) -> ProviderMode {
        self.inner.mode
    }

    /// The injected faults.
    pub fn faults(&self) -> &Faults {
        &self.inner.faults
    }

    /// The server's clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// Creates a bucket. Returns false if it existed.
    pub fn create_bucket(&self, bucket: &str) -> bool {
        lock(&self.inner.store).create_bucket(bucket)
    }

    /// The latest version under `key`, for checks after a run. Ignores the
    /// provider mode (no stale reads) and faults.
    pub fn object(&self, bucket: &str, key: &str) -> Option<Object> {
        lock(&self.inner.store).current(bucket, key).cloned()
    }

    /// Writes `body` under `key` at once and unconditionally, on behalf of
    /// `client`, someone outside the simulated nodes (an operator, another
    /// tool). No faults apply; the observer hears of it like any request.
    pub fn put_direct(&self, bucket: &str, key: &str, body: Bytes, client: &str) -> Option<Object> {
        let now = self.inner.clock.now();
        let wall = self.inner.clock.wall();
        let stored = lock(&self.inner.store).put(bucket, key, body, None, &Conditions::default(), wall).ok()?;
        self.report_direct(OpKind::Write, bucket, key, Some(&stored), client, now);
        Some(stored)
    }

    /// Deletes `key` at once and unconditionally, on behalf of `client`.
    pub fn delete_direct(&self, bucket: &str, key: &str, client: &str) {
        let now = self.inner.clock.now();
        let wall = self.inner.clock.wall();
        let removed = lock(&self.inner.store).delete(bucket, key, &Conditions::default(), wall).ok().flatten();
        self.report_direct(OpKind::Delete, bucket, key, removed.as_ref(), client, now);
    }

    fn report_direct(&self, op: OpKind, bucket: &str, key: &str, object: Option<&Object>, client: &str, at: Instant) {
        let Some(observer) = &self.inner.observer else { return };
        observer(&Event {
            request_id: self.request_id(),
            op,
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            if_match: None,
            if_none_match: None,
            outcome: Outcome::Applied,
            etag: object.map(|object| object.etag().to_owned()),
            body: if op == OpKind::Write { object.map(|object| object.body().clone()) } else { None },
            client: Some(client.to_owned()),
            started: at,
            applied_at: Some(at),
            ended: at,
        });
    }

    /// Handles one request whose body has been read whole.
    pub async fn handle(&self, request: Request<Bytes>) -> Reply {
        let started = self.inner.clock.now();
        let sequence = self.inner.next_sequence.fetch_add(1, Ordering::Relaxed);
        let request_id = self.request_id();
        let resource = request.uri().path().to_owned();
        let head = request.method() == Method::HEAD;
        let target = match self.route(&request) {
            Ok(target) => target,
            Err(failure) => {
                return Reply::Respond(self.error_response(failure, &resource, &request_id, head));
            }
        };
        let (bucket, key) = match target {
            Target::Object { bucket, key } => (bucket, key),
            Target::Bucket(bucket) => {
                let response = match self.authenticate(&request) {
                    Ok(()) => self.bucket_request(&request, &bucket, &request_id),
                    Err(failure) => Err(failure),
                };
                return Reply::Respond(
                    response.unwrap_or_else(|f| self.error_response(f, &resource, &request_id, head)),
                );
            }
            Target::Service => {
                let failure = match self.authenticate(&request) {
                    Ok(()) => S3Failure::not_implemented("ListBuckets"),
                    Err(failure) => failure,
                };
                return Reply::Respond(self.error_response(failure, &resource, &request_id, head));
            }
        };
        let op = match *request.method() {
            Method::GET | Method::HEAD => OpKind::Read,
            Method::PUT => OpKind::Write,
            Method::DELETE => OpKind::Delete,
            ref other => {
                let failure = S3Failure::method_not_allowed(other);
                return Reply::Respond(self.error_response(failure, &resource, &request_id, head));
            }
        };
        let object_request = ObjectRequest {
            op,
            bucket,
            key,
            head,
            resource,
            request_id,
            started,
            sequence,
            if_match: header(request.headers(), "if-match"),
            if_none_match: header(request.headers(), "if-none-match"),
            client: header(request.headers(), CLIENT_HEADER),
        };
        self.object_request(object_request, request).await
    }

    async fn object_request(&self, req: ObjectRequest, request: Request<Bytes>) -> Reply {
        // Requests that fail before the store is involved are answered at
        // once: the faults model the store, not the front door.
        let conditions = match self.admit(&req, &request) {
            Ok(conditions) => conditions,
            Err(failure) => {
                let ended = self.inner.clock.now();
                let code = failure.code;
                let response = self.error_response(failure, &req.resource, &req.request_id, req.head);
                self.report(&req, refused(&response, code, false), None, None, None, ended);
                return Reply::Respond(response);
            }
        };
        let draw = self.inner.faults.for_op(req.op).draw(&mut lock(&self.inner.rng));
        // A provider that checks conditions without a lock has no overlap
        // detector either: 409s would make it atomic and hide the races the
        // mode exists to show.
        let detects_overlap = self.inner.faults.conflict_409_on_overlap && self.inner.mode != ProviderMode::NonAtomic;
        let _in_flight = (detects_overlap && req.op.is_mutation() && conditions.is_conditional())
            .then(|| self.register_in_flight(&req));
        let before = draw.commit_at;
        let mut after = draw.latency - before;
        self.sleep(before).await;

        let applied = if draw.slow_down {
            Applied::refused(S3Failure::new(503, "SlowDown", "Please reduce your request rate."))
        } else if draw.error_500 {
            Applied::refused(S3Failure::new(
                500,
                "InternalError",
                "We encountered an internal error. Please try again.",
            ))
        } else {
            match req.op {
                OpKind::Read => self.read(&req, &conditions),
                OpKind::Write | OpKind::Delete => {
                    let (applied, waited) = self.mutate(&req, request, &conditions, after).await;
                    if waited {
                        after = Duration::ZERO;
                    }
                    applied
                }
            }
        };
        // The client may give up (and close the connection) while the reply
        // is on its way; the request has still taken effect, and the history
        // must say so, or a write would vanish from it.
        let mut unreported = applied.took_effect.then(|| UnreportedEffect {
            s3: self,
            req: &req,
            etag: applied.etag.clone(),
            body: applied.body.clone(),
            applied_at: applied.applied_at,
        });
        self.sleep(after).await;
        if let Some(pending) = unreported.as_mut() {
            pending.disarm();
        }

        let ended = self.inner.clock.now();
        let failed_anyway = applied.took_effect && draw.applied_error_500;
        let (response, code) = match applied.result {
            Ok(_) if failed_anyway => {
                let failure =
                    S3Failure::new(500, "InternalError", "We encountered an internal error. Please try again.");
                (self.error_response(failure, &req.resource, &req.request_id, req.head), "InternalError")
            }
            Ok(response) if response.status() == StatusCode::NOT_MODIFIED => (response, "NotModified"),
            Ok(response) => (response, ""),
            Err(failure) => {
                let code = failure.code;
                let response = self.error_response(failure, &req.resource, &req.request_id, req.head);
                (response, code)
            }
        };
        let unanswered = draw.drop_reply || draw.silent;
        let outcome = match (applied.took_effect, unanswered) {
            (true, true) => Outcome::DroppedAfterApply,
            (true, false) if failed_anyway => Outcome::AppliedThenFailed { status: response.status().as_u16() },
            (true, false) => Outcome::Applied,
            (false, dropped) => refused(&response, code, dropped),
        };
        self.report(&req, outcome, applied.etag, applied.body, applied.applied_at, ended);
        if draw.silent {
            Reply::Silence
        } else if draw.drop_reply {
            Reply::DropConnection
        } else {
            Reply::Respond(response)
        }
    }

    /// Authenticates an object request and works out the conditions the
    /// provider mode will honour.
    fn admit(&self, req: &ObjectRequest, request: &Request<Bytes>) -> Result<Conditions, S3Failure> {
        self.authenticate(request)?;
        if let Some(query) = request.uri().query() {
            // The AWS SDKs add `x-id=PutObject` and the like; anything else
            // (versions, tagging, multipart) is not modelled, and silently
            // ignoring it would answer the wrong question.
            for pair in query.split('&').filter(|pair| !pair.is_empty()) {
                let name = pair.split_once('=').map_or(pair, |(name, _)| name);
                if name != "x-id" {
                    return Err(S3Failure::not_implemented(&format!("the query parameter {name:?}")));
                }
            }
        }
        if req.op == OpKind::Write && request.headers().contains_key("x-amz-copy-source") {
            return Err(S3Failure::not_implemented("CopyObject"));
        }
        let parse = |value: &Option<String>, name: &str| {
            value
                .as_deref()
                .map(EtagCondition::parse)
                .transpose()
                .map_err(|err| S3Failure::new(400, "InvalidArgument", err.to_string()).with("ArgumentName", name))
        };
        let mut conditions = Conditions {
            if_match: parse(&req.if_match, "If-Match")?,
            if_none_match: parse(&req.if_none_match, "If-None-Match")?,
        };
        match (self.inner.mode, req.op) {
            (ProviderMode::RejectConditional, OpKind::Write | OpKind::Delete) if conditions.is_conditional() => {
                return Err(S3Failure::not_implemented("conditional writes"));
            }
            (ProviderMode::IgnoreIfNoneMatch, OpKind::Write) => conditions.if_none_match = None,
            (ProviderMode::IgnoreIfMatch, OpKind::Write) => conditions.if_match = None,
            (ProviderMode::IgnoreConditionalDelete, OpKind::Delete) => conditions.if_match = None,
            _ => {}
        }
        Ok(conditions)
    }

    fn read(&self, req: &ObjectRequest, conditions: &Conditions) -> Applied {
        let store = lock(&self.inner.store);
        let applied_at = Some(self.inner.clock.now());
        let result = if self.inner.mode == ProviderMode::StaleReads {
            let window = self.inner.faults.stale_read_window();
            let now = self.inner.clock.wall();
            let then = now.checked_sub(window).unwrap_or(SystemTime::UNIX_EPOCH);
            store.get_as_of(&req.bucket, &req.key, then, conditions)
        } else {
            store.get(&req.bucket, &req.key, conditions)
        };
        drop(store);
        match result {
            Ok(object) => Applied {
                etag: Some(object.etag().to_owned()),
                body: Some(object.body().clone()),
                result: Ok(self.object_response(&object, req)),
                applied_at,
                took_effect: true,
            },
            Err(Refusal::NotModified { etag, last_modified }) => {
                let response = self
                    .base_response(StatusCode::NOT_MODIFIED, &req.request_id)
                    .header(ETAG, etag)
                    .header(LAST_MODIFIED, format_http_date(last_modified));
                Applied {
                    result: Ok(finish(response, Bytes::new())),
                    etag: None,
                    body: None,
                    applied_at,
                    took_effect: false,
                }
            }
            Err(refusal) => Applied {
                result: Err(S3Failure::from_refusal(&refusal, &req.key)),
                etag: None,
                body: None,
                applied_at,
                took_effect: false,
            },
        }
    }

    /// Applies a write or delete. Returns whether it already waited out
    /// `rest` of the latency (the non-atomic mode spends it between the
    /// check and the write).
    async fn mutate(
        &self,
        req: &ObjectRequest,
        request: Request<Bytes>,
        conditions: &Conditions,
        rest: Duration,
    ) -> (Applied, bool) {
        let content_type = header(request.headers(), "content-type");
        let body = request.into_body();
        if self.overlaps_earlier(req) {
            return (
                Applied::refused(S3Failure::new(
                    409,
                    "ConditionalRequestConflict",
                    "A conflicting conditional operation is currently in progress against this \
                     resource. Please try again.",
                )),
                false,
            );
        }
        let non_atomic = self.inner.mode == ProviderMode::NonAtomic;
        let mut waited = false;
        if non_atomic {
            // Check, let go of the lock, and write later: every request that
            // checks in the gap sees the same state, so they can all win.
            let check = {
                let store = lock(&self.inner.store);
                match req.op {
                    OpKind::Write => store.check_put(&req.bucket, &req.key, conditions),
                    _ => store.check_delete(&req.bucket, &req.key, conditions),
                }
            };
            if let Err(refusal) = check {
                return (Applied::refused(S3Failure::from_refusal(&refusal, &req.key)), false);
            }
            self.sleep(rest).await;
            tokio::task::yield_now().await;
            waited = true;
        }
        let mut store = lock(&self.inner.store);
        let now = self.inner.clock.wall();
        let applied_at = Some(self.inner.clock.now());
        let unconditional = Conditions::default();
        let conditions = if non_atomic { &unconditional } else { conditions };
        let applied = match req.op {
            OpKind::Write => match store.put(&req.bucket, &req.key, body, content_type, conditions, now) {
                Ok(object) => {
                    let response = self.base_response(StatusCode::OK, &req.request_id).header(ETAG, object.etag());
                    Applied {
                        result: Ok(finish(response, Bytes::new())),
                        etag: Some(object.etag().to_owned()),
                        body: Some(object.body().clone()),
                        applied_at,
                        took_effect: true,
                    }
                }
                Err(refusal) => Applied::refused(S3Failure::from_refusal(&refusal, &req.key)),
            },
            _ => match store.delete(&req.bucket, &req.key, conditions, now) {
                Ok(removed) => {
                    let response = self.base_response(StatusCode::NO_CONTENT, &req.request_id);
                    Applied {
                        result: Ok(finish(response, Bytes::new())),
                        etag: removed.map(|object| object.etag().to_owned()),
                        body: None,
                        applied_at,
                        took_effect: true,
                    }
                }
                Err(refusal) => Applied::refused(S3Failure::from_refusal(&refusal, &req.key)),
            },
        };
        (applied, waited)
    }

    fn register_in_flight(&self, req: &ObjectRequest) -> InFlight {
        let key = (req.bucket.clone(), req.key.clone());
        lock(&self.inner.in_flight).entry(key.clone()).or_default().insert(req.sequence);
        InFlight { inner: self.inner.clone(), key, sequence: req.sequence }
    }

    /// Whether a conditional mutation that started before `req` is still in
    /// flight on the same key. Only the earliest of overlapping requests
    /// goes through, so at most one of them can win.
    fn overlaps_earlier(&self, req: &ObjectRequest) -> bool {
        let in_flight = lock(&self.inner.in_flight);
        in_flight
            .get(&(req.bucket.clone(), req.key.clone()))
            .and_then(|set| set.first())
            .is_some_and(|&first| first < req.sequence)
    }

    fn bucket_request(
        &self,
        request: &Request<Bytes>,
        bucket: &str,
        request_id: &str,
    ) -> Result<Response<Bytes>, S3Failure> {
        let mut store = lock(&self.inner.store);
        match *request.method() {
            Method::PUT => {
                if !valid_bucket_name(bucket) {
                    return Err(S3Failure::new(400, "InvalidBucketName", "The specified bucket is not valid.")
                        .with("BucketName", bucket));
                }
                if !store.create_bucket(bucket) {
                    return Err(S3Failure::new(
                        409,
                        "BucketAlreadyOwnedByYou",
                        "Your previous request to create the named bucket succeeded and you already own it.",
                    )
                    .with("BucketName", bucket));
                }
                let response = self.base_response(StatusCode::OK, request_id).header("location", format!("/{bucket}"));
                Ok(finish(response, Bytes::new()))
            }
            Method::HEAD if store.has_bucket(bucket) => {
                Ok(finish(self.base_response(StatusCode::OK, request_id), Bytes::new()))
            }
            Method::HEAD | Method::GET | Method::DELETE if !store.has_bucket(bucket) => {
                Err(S3Failure::from_refusal(&Refusal::NoSuchBucket, ""))
            }
            Method::GET | Method::DELETE => {
                Err(S3Failure::not_implemented("bucket operations other than CreateBucket and HeadBucket"))
            }
            ref other => Err(S3Failure::method_not_allowed(other)),
        }
    }

    fn authenticate(&self, request: &Request<Bytes>) -> Result<(), S3Failure> {
        let authorization =
            Authorization::from_request(request).map_err(|err| S3Failure::from_verify(&err, request))?;
        let Some(secret) = self.inner.credentials.get(authorization.access_key_id()) else {
            return Err(S3Failure::new(
                403,
                "InvalidAccessKeyId",
                "The AWS Access Key Id you provided does not exist in our records.",
            )
            .with("AWSAccessKeyId", authorization.access_key_id()));
        };
        sigv4::verify(request, secret, self.inner.clock.wall(), MAX_CLOCK_SKEW)
            .map(|_| ())
            .map_err(|err| S3Failure::from_verify(&err, request))
    }

    fn route(&self, request: &Request<Bytes>) -> Result<Target, S3Failure> {
        let path = request.uri().path();
        let Some(path) = path.strip_prefix('/') else {
            return Err(S3Failure::invalid_uri());
        };
        let host_bucket = self.virtual_host_bucket(request);
        let (bucket, key) = match host_bucket {
            Some(bucket) => (bucket, path),
            None => {
                if path.is_empty() {
                    return Ok(Target::Service);
                }
                let (bucket, key) = path.split_once('/').unwrap_or((path, ""));
                let bucket = String::from_utf8(percent_decode(bucket)?).map_err(|_| S3Failure::invalid_uri())?;
                (bucket, key)
            }
        };
        if key.is_empty() {
            return Ok(Target::Bucket(bucket));
        }
        let key = String::from_utf8(percent_decode(key)?).map_err(|_| S3Failure::invalid_uri())?;
        if key.len() > MAX_KEY_BYTES {
            return Err(S3Failure::new(400, "KeyTooLongError", "Your key is too long")
                .with("MaxSizeAllowed", MAX_KEY_BYTES.to_string())
                .with("Size", key.len().to_string()));
        }
        Ok(Target::Object { bucket, key })
    }

    /// The bucket named by a `Host` of `bucket.<domain>`, if virtual-host
    /// addressing is configured and used.
    fn virtual_host_bucket(&self, request: &Request<Bytes>) -> Option<String> {
        let domain = self.inner.virtual_host_domain.as_deref()?;
        let host = request
            .headers()
            .get(HOST)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
            .or_else(|| request.uri().authority().map(|a| a.to_string()))?;
        let host = host.rsplit_once(':').map_or(host.as_str(), |(name, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) { name } else { host.as_str() }
        });
        let bucket = host.to_ascii_lowercase();
        let bucket = bucket.strip_suffix(domain)?.strip_suffix('.')?;
        (!bucket.is_empty()).then(|| bucket.to_owned())
    }

    fn object_response(&self, object: &Object, req: &ObjectRequest) -> Response<Bytes> {
        let response = self
            .base_response(StatusCode::OK, &req.request_id)
            .header(ETAG, object.etag())
            .header(LAST_MODIFIED, format_http_date(object.last_modified()))
            .header(CONTENT_TYPE, object.content_type().unwrap_or("binary/octet-stream"))
            .header(CONTENT_LENGTH, object.body().len());
        let body = if req.head { Bytes::new() } else { object.body().clone() };
        finish(response, body)
    }

    /// A response with the headers every S3 answer carries.
    fn base_response(&self, status: StatusCode, request_id: &str) -> http::response::Builder {
        Response::builder()
            .status(status)
            .header(DATE, format_http_date(self.inner.clock.wall()))
            .header("x-amz-request-id", request_id)
            .header("server", "AmazonS3")
    }

    fn error_response(&self, failure: S3Failure, resource: &str, request_id: &str, head: bool) -> Response<Bytes> {
        let builder = self.base_response(failure.status, request_id);
        // A 304 and any answer to HEAD carry no body, as on S3.
        if head || failure.status == StatusCode::NOT_MODIFIED {
            return finish(builder, Bytes::new());
        }
        let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error>");
        let mut element = |name: &str, value: &str| {
            xml.push_str(&format!("<{name}>{}</{name}>", escape(value)));
        };
        element("Code", failure.code);
        element("Message", &failure.message);
        for (name, value) in &failure.extra {
            element(name, value);
        }
        element("Resource", resource);
        element("RequestId", request_id);
        xml.push_str("</Error>");
        finish(builder.header(CONTENT_TYPE, "application/xml"), Bytes::from(xml))
    }

    /// The answer to a request whose body was longer than the server reads.
    pub(crate) fn entity_too_large(&self, resource: &str, limit: usize) -> Response<Bytes> {
        let request_id = self.request_id();
        let failure =
            S3Failure::new(400, "EntityTooLarge", "Your proposed upload exceeds the maximum allowed object size.")
                .with("MaxSizeAllowed", limit.to_string());
        self.error_response(failure, resource, &request_id, false)
    }

    fn report(
        &self,
        req: &ObjectRequest,
        outcome: Outcome,
        etag: Option<String>,
        body: Option<Bytes>,
        applied_at: Option<Instant>,
        ended: Instant,
    ) {
        let Some(observer) = &self.inner.observer else {
            return;
        };
        observer(&Event {
            request_id: req.request_id.clone(),
            op: req.op,
            bucket: req.bucket.clone(),
            key: req.key.clone(),
            if_match: req.if_match.clone(),
            if_none_match: req.if_none_match.clone(),
            outcome,
            etag,
            body,
            client: req.client.clone(),
            started: req.started,
            applied_at,
            ended,
        });
    }

    /// Sixteen upper-case hex digits, as AWS's request ids look.
    fn request_id(&self) -> String {
        format!("{:016X}", lock(&self.inner.rng).next_u64())
    }

    async fn sleep(&self, duration: Duration) {
        if !duration.is_zero() {
            let clock = &self.inner.clock;
            clock.sleep_until(clock.now() + duration).await;
        }
    }
}

/// Reports a request that took effect as `DroppedAfterApply` if its future
/// is dropped before the reply goes out (the client hung up first).
struct UnreportedEffect<'a> {
    s3: &'a FakeS3,
    req: &'a ObjectRequest,
    etag: Option<String>,
    body: Option<Bytes>,
    applied_at: Option<Instant>,
}

impl UnreportedEffect<'_> {
    /// The request will be reported the ordinary way.
    fn disarm(&mut self) {
        self.applied_at = None;
        self.etag = None;
        self.body = None;
    }
}

impl Drop for UnreportedEffect<'_> {
    fn drop(&mut self) {
        if self.applied_at.is_none() {
            return;
        }
        let ended = self.s3.inner.clock.now();
        self.s3.report(
            self.req,
            Outcome::DroppedAfterApply,
            self.etag.take(),
            self.body.take(),
            self.applied_at,
            ended,
        );
    }
}

impl Applied {
    fn refused(failure: S3Failure) -> Applied {
        Applied { result: Err(failure), etag: None, body: None, applied_at: None, took_effect: false }
    }
}

/// The refusal outcome of an error `response` with S3 error `code`.
fn refused(response: &Response<Bytes>, code: &'static str, reply_dropped: bool) -> Outcome {
    Outcome::Refused { status: response.status().as_u16(), code, reply_dropped }
}

/// Sets the body; the builder was made here from valid parts, so a failure
/// would be a bug in this module, answered with a bare 500 rather than a
/// panic.
fn finish(builder: http::response::Builder, body: Bytes) -> Response<Bytes> {
    builder.body(body).unwrap_or_else(|_| {
        let mut response = Response::new(Bytes::new());
        *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        response
    })
}

/// A header's values joined with `,`, as HTTP allows. Bytes that are not
/// UTF-8 are replaced rather than the header skipped: a conditional header
/// dropped for its spelling would turn a conditional write unconditional.
fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    let values: Vec<String> =
        headers.get_all(name).iter().map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned()).collect();
    (!values.is_empty()).then(|| values.join(","))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Decodes `%XX` escapes. A `%` without two hex digits is a malformed URI.
fn percent_decode(text: &str) -> Result<Vec<u8>, S3Failure> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let digit =
                |at: usize| bytes.get(at).and_then(|b| (*b as char).to_digit(16)).ok_or_else(S3Failure::invalid_uri);
            out.push((digit(i + 1)? * 16 + digit(i + 2)?) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// S3's rules for new bucket names, simplified: 3 to 63 characters of
/// lower-case letters, digits, `.` and `-`, starting and ending with a
/// letter or digit.
fn valid_bucket_name(name: &str) -> bool {
    let edge_ok = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    (3..=63).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        && edge_ok(name.bytes().next())
        && edge_ok(name.bytes().last())
}

#[cfg(test)]
mod tests {
    use hoplock::clock::DriftingClock;
    use hoplock::s3::sigv4::{Credentials, sign};
    use hoplock::s3::xml::S3Error;

    use super::*;
    use crate::fake_s3::faults::{Latency, OpFaults};

    const EPOCH_SECS: u64 = 1_700_000_000;

    fn clock() -> Arc<DriftingClock> {
        Arc::new(DriftingClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(EPOCH_SECS), 0))
    }

    fn fake(mode: ProviderMode, faults: Faults) -> (FakeS3, Arc<DriftingClock>) {
        let clock = clock();
        let s3 = FakeS3::builder(clock.clone(), 1)
            .mode(mode)
            .faults(faults)
            .credentials("AK", "SK")
            .bucket("b")
            .build()
            .unwrap();
        (s3, clock)
    }

    fn request(method: Method, path: &str, headers: &[(&str, &str)], body: &str) -> Request<Bytes> {
        let mut builder = Request::builder().method(method).uri(format!("http://s3.test{path}"));
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(Bytes::from(body.to_owned())).unwrap()
    }

    fn signed(
        clock: &DriftingClock,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Request<Bytes> {
        let mut request = request(method, path, headers, body);
        sign(&mut request, &Credentials::new("AK", "SK"), "us-east-1", clock.wall()).unwrap();
        request
    }

    async fn send(s3: &FakeS3, request: Request<Bytes>) -> Response<Bytes> {
        match s3.handle(request).await {
            Reply::Respond(response) => response,
            Reply::DropConnection | Reply::Silence => panic!("the reply was dropped"),
        }
    }

    fn code(response: &Response<Bytes>) -> String {
        S3Error::parse(response.body()).code
    }

    fn etag(response: &Response<Bytes>) -> String {
        response.headers()[ETAG].to_str().unwrap().to_owned()
    }

    #[tokio::test(start_paused = true)]
    async fn answers_carry_s3_headers_and_xml_error_bodies() {
        let (s3, clock) = fake(ProviderMode::Honest, Faults::none());
        let put = signed(&clock, Method::PUT, "/b/k", &[("content-type", "application/json")], "{}");
        let response = send(&s3, put).await;
        assert_eq!(response.status(), 200);
        assert_eq!(etag(&response), "\"99914b932bd37a50b983c5e7c90ae93b\"");
        assert_eq!(response.headers()[DATE], "Tue, 14 Nov 2023 22:13:20 GMT");
        assert_eq!(response.headers()["x-amz-request-id"].len(), 16);

        let response = send(&s3, signed(&clock, Method::GET, "/b/k", &[], "")).await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.body(), "{}");
        assert_eq!(response.headers()[CONTENT_TYPE], "application/json");
        assert_eq!(response.headers()[LAST_MODIFIED], "Tue, 14 Nov 2023 22:13:20 GMT");

        let head = send(&s3, signed(&clock, Method::HEAD, "/b/k", &[], "")).await;
        assert_eq!(head.status(), 200);
        assert!(head.body().is_empty());
        assert_eq!(head.headers()[CONTENT_LENGTH], "2");

        let response = send(&s3, signed(&clock, Method::GET, "/b/missing%20key", &[], "")).await;
        assert_eq!(response.status(), 404);
        let body = std::str::from_utf8(response.body()).unwrap();
        assert!(
            body.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code>"),
            "{body}"
        );
        assert!(body.contains("<Message>The specified key does not exist.</Message>"), "{body}");
        assert!(body.contains("<Key>missing key</Key>"), "{body}");
        assert!(body.contains("<Resource>/b/missing%20key</Resource>"), "{body}");
        let request_id = response.headers()["x-amz-request-id"].to_str().unwrap();
        assert!(body.contains(&format!("<RequestId>{request_id}</RequestId></Error>")), "{body}");
        let head = send(&s3, signed(&clock, Method::HEAD, "/b/missing", &[], "")).await;
        assert_eq!(head.status(), 404);
        assert!(head.body().is_empty(), "HEAD answers carry no body");
    }

    #[tokio::test(start_paused = true)]
    async fn conditional_requests_follow_s3() {
        let (s3, clock) = fake(ProviderMode::Honest, Faults::none());
        let create = [("if-none-match", "*")];
        let first = send(&s3, signed(&clock, Method::PUT, "/b/k", &create, "one")).await;
        let first = etag(&first);
        let again = send(&s3, signed(&clock, Method::PUT, "/b/k", &create, "two")).await;
        assert_eq!((again.status().as_u16(), code(&again)), (412, "PreconditionFailed".into()));
        assert!(std::str::from_utf8(again.body()).unwrap().contains("<Condition>If-None-Match</Condition>"));

        let cached = [("if-none-match", first.as_str())];
        let response = send(&s3, signed(&clock, Method::GET, "/b/k", &cached, "")).await;
        assert_eq!(response.status(), 304);
        assert_eq!(etag(&response), first);
        assert!(response.body().is_empty());
        let stale = [("if-match", "\"0123\"")];
        let response = send(&s3, signed(&clock, Method::GET, "/b/k", &stale, "")).await;
        assert_eq!(response.status(), 412);

        let missing = send(&s3, signed(&clock, Method::PUT, "/b/other", &[("if-match", first.as_str())], "x")).await;
        assert_eq!((missing.status().as_u16(), code(&missing)), (404, "NoSuchKey".into()));
        let bare = first.trim_matches('"').to_owned();
        let update = send(&s3, signed(&clock, Method::PUT, "/b/k", &[("if-match", bare.as_str())], "two")).await;
        assert_eq!(update.status(), 200, "a bare ETag matches too");
        let second = etag(&update);

        let response = send(&s3, signed(&clock, Method::DELETE, "/b/k", &[("if-match", first.as_str())], "")).await;
        assert_eq!(response.status(), 412);
        let response = send(&s3, signed(&clock, Method::DELETE, "/b/k", &[("if-match", second.as_str())], "")).await;
        assert_eq!(response.status(), 204);
        let response = send(&s3, signed(&clock, Method::DELETE, "/b/k", &[("if-match", second.as_str())], "")).await;
        assert_eq!((response.status().as_u16(), code(&response)), (404, "NoSuchKey".into()));
        let response = send(&s3, signed(&clock, Method::DELETE, "/b/k", &[], "")).await;
        assert_eq!(response.status(), 204, "an unconditional delete of nothing succeeds");
    }

    #[tokio::test(start_paused = true)]
    async fn buckets_must_exist_and_can_be_created() {
        let (s3, clock) = fake(ProviderMode::Honest, Faults::none());
        let response = send(&s3, signed(&clock, Method::PUT, "/nope/k", &[], "x")).await;
        assert_eq!((response.status().as_u16(), code(&response)), (404, "NoSuchBucket".into()));
        let response = send(&s3, signed(&clock, Method::HEAD, "/nope", &[], "")).await;
        assert_eq!(response.status(), 404);
        let response = send(&s3, signed(&clock, Method::PUT, "/nope", &[], "")).await;
        assert_eq!(response.status(), 200);
        let response = send(&s3, signed(&clock, Method::PUT, "/nope", &[], "")).await;
        assert_eq!(code(&response), "BucketAlreadyOwnedByYou");
        let response = send(&s3, signed(&clock, Method::PUT, "/nope/k", &[], "x")).await;
        assert_eq!(response.status(), 200);
        let response = send(&s3, signed(&clock, Method::PUT, "/Bad_Name", &[], "")).await;
        assert_eq!(code(&response), "InvalidBucketName");
        let response = send(&s3, signed(&clock, Method::GET, "/", &[], "")).await;
        assert_eq!(response.status(), 501);
    }

    #[tokio::test(start_paused = true)]
    async fn authentication_failures_get_s3_codes() {
        let (s3, clock) = fake(ProviderMode::Honest, Faults::none());
        let anonymous = send(&s3, request(Method::GET, "/b/k", &[], "")).await;
        assert_eq!((anonymous.status().as_u16(), code(&anonymous)), (403, "AccessDenied".into()));

        let mut wrong = request(Method::GET, "/b/k", &[], "");
        sign(&mut wrong, &Credentials::new("AK", "nope"), "us-east-1", clock.wall()).unwrap();
        let response = send(&s3, wrong).await;
        assert_eq!((response.status().as_u16(), code(&response)), (403, "SignatureDoesNotMatch".into()));
        assert!(std::str::from_utf8(response.body()).unwrap().contains("<StringToSign>AWS4-HMAC-SHA256"));

        let mut unknown = request(Method::GET, "/b/k", &[], "");
        sign(&mut unknown, &Credentials::new("WHO", "SK"), "us-east-1", clock.wall()).unwrap();
        let response = send(&s3, unknown).await;
        assert_eq!((response.status().as_u16(), code(&response)), (403, "InvalidAccessKeyId".into()));

        let mut skewed = request(Method::GET, "/b/k", &[], "");
        let late = clock.wall() + Duration::from_secs(16 * 60);
        sign(&mut skewed, &Credentials::new("AK", "SK"), "us-east-1", late).unwrap();
        let response = send(&s3, skewed).await;
        assert_eq!((response.status().as_u16(), code(&response)), (403, "RequestTimeTooSkewed".into()));

        let mut tampered = signed(&clock, Method::PUT, "/b/k", &[], "hello");
        *tampered.body_mut() = Bytes::from_static(b"HELLO");
        let response = send(&s3, tampered).await;
        assert_eq!((response.status().as_u16(), code(&response)), (400, "XAmzContentSHA256Mismatch".into()));
        assert!(s3.object("b", "k").is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn malformed_requests_get_400s_and_unmodelled_ones_501() {
        let (s3, clock) = fake(ProviderMode::Honest, Faults::none());
        for path in ["/b/%zz", "/b/%ff%fe", "/b/%4"] {
            let response = send(&s3, request(Method::GET, path, &[], "")).await;
            assert_eq!((response.status().as_u16(), code(&response)), (400, "InvalidURI".into()), "{path}");
        }
        let long = format!("/b/{}", "k".repeat(MAX_KEY_BYTES + 1));
        let response = send(&s3, signed(&clock, Method::PUT, &long, &[], "x")).await;
        assert_eq!(code(&response), "KeyTooLongError");
        let response = send(&s3, signed(&clock, Method::PUT, "/b/k", &[("if-match", "\"\"")], "x")).await;
        assert_eq!((response.status().as_u16(), code(&response)), (400, "InvalidArgument".into()));
        let response = send(&s3, signed(&clock, Method::GET, "/b/k?tagging", &[], "")).await;
        assert_eq!(response.status(), 501);
        let response = send(&s3, signed(&clock, Method::PUT, "/b/k?x-id=PutObject", &[], "x")).await;
        assert_eq!(response.status(), 200, "the SDKs' x-id parameter is harmless");
        let response = send(&s3, signed(&clock, Method::POST, "/b/k", &[], "")).await;
        assert_eq!((response.status().as_u16(), code(&response)), (405, "MethodNotAllowed".into()));
        let copy = [("x-amz-copy-source", "/b/k")];
        let response = send(&s3, signed(&clock, Method::PUT, "/b/k2", &copy, "")).await;
        assert_eq!(response.status(), 501);
        // A conditional header that is not UTF-8 still conditions the write.
        send(&s3, signed(&clock, Method::PUT, "/b/k", &[], "x")).await;
        let mut odd = request(Method::PUT, "/b/k", &[], "y");
        odd.headers_mut().insert("if-match", http::HeaderValue::from_bytes(b"\"\xff\"").unwrap());
        sign(&mut odd, &Credentials::new("AK", "SK"), "us-east-1", clock.wall()).unwrap();
        assert_eq!(send(&s3, odd).await.status(), 412);
        assert_eq!(s3.object("b", "k").unwrap().body(), "x");
        let tags = [("if-none-match", "\"abc\"")];
        let response = send(&s3, signed(&clock, Method::PUT, "/b/k", &tags, "x")).await;
        assert_eq!(response.status(), 501, "S3 takes only `*` in If-None-Match on PUT");
    }

    #[tokio::test(start_paused = true)]
    async fn virtual_host_requests_name_the_bucket_in_the_host() {
        let clock = clock();
        let s3 = FakeS3::builder(clock.clone(), 1)
            .credentials("AK", "SK")
            .bucket("b")
            .virtual_host_domain("S3.Test")
            .build()
            .unwrap();
        let mut put = Request::put("http://b.s3.test:9000/dir/k").body(Bytes::from("v")).unwrap();
        sign(&mut put, &Credentials::new("AK", "SK"), "us-east-1", clock.wall()).unwrap();
        assert_eq!(send(&s3, put).await.status(), 200);
        assert_eq!(s3.object("b", "dir/k").unwrap().body(), "v");
        // Path-style still works next to it.
        let response = send(&s3, signed(&clock, Method::GET, "/b/dir/k", &[], "")).await;
        assert_eq!(response.status(), 200);
    }

    #[tokio::test(start_paused = true)]
    async fn request_ids_and_faults_replay_from_the_seed() {
        let faults = Faults::everywhere(OpFaults {
            latency: Latency::Uniform { min_ms: 1, max_ms: 50 },
            error_500_rate: 0.3,
            ..OpFaults::default()
        });
        let run = |seed: u64| {
            let faults = faults.clone();
            async move {
                let clock = clock();
                let s3 = FakeS3::builder(clock.clone(), seed)
                    .faults(faults)
                    .credentials("AK", "SK")
                    .bucket("b")
                    .build()
                    .unwrap();
                let mut seen = Vec::new();
                for i in 0..20 {
                    let body = i.to_string();
                    let response = send(&s3, signed(&clock, Method::PUT, "/b/k", &[], &body)).await;
                    seen.push((
                        response.status().as_u16(),
                        response.headers()["x-amz-request-id"].to_str().unwrap().to_owned(),
                        clock.now(),
                    ));
                }
                seen
            }
        };
        let a = run(5).await;
        assert_eq!(a, run(5).await);
        assert_ne!(a, run(6).await);
        assert!(a.iter().any(|(status, ..)| *status == 500));
        assert!(a.iter().any(|(status, ..)| *status == 200));
    }

    /// A store whose every request takes 200 ms, recording its events.
    fn slow_and_recording(seed: u64) -> (FakeS3, Arc<DriftingClock>, Arc<Mutex<Vec<Event>>>) {
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        let clock = clock();
        let s3 = FakeS3::builder(clock.clone(), seed)
            .faults(Faults::everywhere(OpFaults { latency: Latency::Fixed { ms: 200 }, ..OpFaults::default() }))
            .credentials("AK", "SK")
            .bucket("b")
            .observer(move |event: &Event| sink.lock().unwrap().push(event.clone()))
            .build()
            .unwrap();
        (s3, clock, events)
    }

    #[tokio::test(start_paused = true)]
    async fn latency_is_spent_on_the_servers_clock_around_the_commit() {
        let (s3, clock, events) = slow_and_recording(1);
        let start = clock.now();
        send(&s3, signed(&clock, Method::PUT, "/b/k", &[], "x")).await;
        assert_eq!(clock.now().saturating_duration_since(start), Duration::from_millis(200));
        let events = events.lock().unwrap();
        let event = &events[0];
        let applied_at = event.applied_at.unwrap();
        assert!(applied_at >= event.started && applied_at <= event.ended, "{event:?}");
        assert_eq!(event.ended, event.started + Duration::from_millis(200));
    }

    #[tokio::test(start_paused = true)]
    async fn the_commit_point_is_drawn_within_the_latency_so_commits_can_reorder() {
        // Two writes with a fixed 200 ms latency, the second arriving 50 ms
        // after the first: with the commit at a fixed midpoint the first
        // always commits first. Drawn commit points let some seeds commit
        // the later arrival first.
        let mut reordered = 0;
        for seed in 0..40 {
            let (s3, clock, events) = slow_and_recording(seed);
            let first = send(&s3, signed(&clock, Method::PUT, "/b/k", &[], "first"));
            let second = async {
                clock.sleep_until(clock.now() + Duration::from_millis(50)).await;
                send(&s3, signed(&clock, Method::PUT, "/b/k", &[], "second")).await
            };
            tokio::join!(first, second);
            let events = events.lock().unwrap();
            let committed = |body: &[u8]| {
                events.iter().find(|event| event.body.as_deref() == Some(body)).and_then(|event| event.applied_at)
            };
            if committed(b"second") < committed(b"first") {
                reordered += 1;
            }
        }
        assert!(reordered > 0 && reordered < 40, "{reordered} of 40 reordered");
    }

    /// Two creates sent at the same instant, as racing electors would.
    async fn race(mode: ProviderMode, faults: Faults) -> (FakeS3, [u16; 2]) {
        let (s3, clock) = fake(mode, faults);
        let create = [("if-none-match", "*")];
        let (a, b) = tokio::join!(
            send(&s3, signed(&clock, Method::PUT, "/b/k", &create, "a")),
            send(&s3, signed(&clock, Method::PUT, "/b/k", &create, "b")),
        );
        (s3, [a.status().as_u16(), b.status().as_u16()])
    }

    #[tokio::test(start_paused = true)]
    async fn non_atomic_writers_both_win_and_honest_ones_do_not() {
        let faults = Faults {
            write: OpFaults { latency: Latency::Fixed { ms: 10 }, ..OpFaults::default() },
            ..Faults::default()
        };
        assert_eq!(race(ProviderMode::NonAtomic, faults.clone()).await.1, [200, 200]);
        let mut honest = race(ProviderMode::Honest, faults.clone()).await.1;
        honest.sort_unstable();
        assert_eq!(honest, [200, 412]);
        // Even without latency the check and the write are apart.
        assert_eq!(race(ProviderMode::NonAtomic, Faults::none()).await.1, [200, 200]);
        let mut conflict = faults;
        conflict.conflict_409_on_overlap = true;
        let (s3, statuses) = race(ProviderMode::Honest, conflict.clone()).await;
        assert_eq!(statuses, [200, 409]);
        assert_eq!(s3.object("b", "k").unwrap().body(), "a");
    }

    #[tokio::test(start_paused = true)]
    async fn overlap_detection_does_not_make_a_non_atomic_provider_atomic() {
        // With 409-on-overlap on, an honest store refuses the second racer;
        // a non-atomic one has no such detector, and both still win.
        let conflict = Faults {
            write: OpFaults { latency: Latency::Fixed { ms: 10 }, ..OpFaults::default() },
            conflict_409_on_overlap: true,
            ..Faults::default()
        };
        assert_eq!(race(ProviderMode::NonAtomic, conflict).await.1, [200, 200]);
    }

    #[tokio::test(start_paused = true)]
    async fn broken_modes_misbehave_as_named() {
        let create = [("if-none-match", "*")];
        let (s3, clock) = fake(ProviderMode::IgnoreIfNoneMatch, Faults::none());
        for body in ["a", "b"] {
            let response = send(&s3, signed(&clock, Method::PUT, "/b/k", &create, body)).await;
            assert_eq!(response.status(), 200);
        }
        let (s3, clock) = fake(ProviderMode::IgnoreIfMatch, Faults::none());
        let stale = [("if-match", "\"0123\"")];
        send(&s3, signed(&clock, Method::PUT, "/b/k", &create, "a")).await;
        let response = send(&s3, signed(&clock, Method::PUT, "/b/k", &stale, "b")).await;
        assert_eq!(response.status(), 200);
        let response = send(&s3, signed(&clock, Method::DELETE, "/b/k", &stale, "")).await;
        assert_eq!(response.status(), 412, "deletes are still checked");
        let (s3, clock) = fake(ProviderMode::IgnoreConditionalDelete, Faults::none());
        send(&s3, signed(&clock, Method::PUT, "/b/k", &create, "a")).await;
        let response = send(&s3, signed(&clock, Method::DELETE, "/b/k", &stale, "")).await;
        assert_eq!(response.status(), 204);
        assert!(s3.object("b", "k").is_none());
        let (s3, clock) = fake(ProviderMode::RejectConditional, Faults::none());
        let response = send(&s3, signed(&clock, Method::PUT, "/b/k", &create, "a")).await;
        assert_eq!((response.status().as_u16(), code(&response)), (501, "NotImplemented".into()));
        let response = send(&s3, signed(&clock, Method::PUT, "/b/k", &[], "a")).await;
        assert_eq!(response.status(), 200);
    }

    #[tokio::test(start_paused = true)]
    async fn stale_reads_lag_by_the_window() {
        let faults = Faults { stale_read_window_ms: 500, ..Faults::default() };
        let (s3, clock) = fake(ProviderMode::StaleReads, faults);
        let first = etag(&send(&s3, signed(&clock, Method::PUT, "/b/k", &[], "one")).await);
        tokio::time::advance(Duration::from_millis(600)).await;
        send(&s3, signed(&clock, Method::PUT, "/b/k", &[], "two")).await;
        let read = send(&s3, signed(&clock, Method::GET, "/b/k", &[], "")).await;
        assert_eq!((etag(&read), read.body().clone()), (first, Bytes::from("one")));
        tokio::time::advance(Duration::from_millis(500)).await;
        let read = send(&s3, signed(&clock, Method::GET, "/b/k", &[], "")).await;
        assert_eq!(read.body(), "two");
    }

    #[tokio::test(start_paused = true)]
    async fn an_ambiguous_success_is_applied_and_the_reply_dropped() {
        let faults = Faults::everywhere(OpFaults { ambiguous_success_rate: 1.0, ..OpFaults::default() });
        let (s3, clock) = fake(ProviderMode::Honest, faults);
        let reply = s3.handle(signed(&clock, Method::PUT, "/b/k", &[], "x")).await;
        assert!(reply.response().is_none());
        assert_eq!(s3.object("b", "k").unwrap().body(), "x");
    }

    #[test]
    fn building_checks_faults_credentials_and_buckets() {
        let builder = || FakeS3::builder(clock(), 1).credentials("AK", "SK");
        assert!(matches!(FakeS3::builder(clock(), 1).build(), Err(BuildError::NoCredentials)));
        assert!(matches!(builder().bucket("a/b").build(), Err(BuildError::InvalidBucket(_))));
        let mut faults = Faults::none();
        faults.read.slow_down_503_rate = -0.1;
        assert!(matches!(builder().faults(faults).build(), Err(BuildError::Faults(_))));
        let debug = format!("{:?}", builder().credentials("AK2", "TOPSECRET"));
        assert!(!debug.contains("TOPSECRET") && debug.contains("AK2"), "{debug}");
    }
}
