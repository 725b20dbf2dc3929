//! The HTTP front end: authentication, routing, faults and S3's answers.
//!
//! [`FakeS3::handle`] takes one whole request and returns a [`Reply`]: an
//! S3-shaped response, or [`Reply::DropConnection`] / [`Reply::Silence`]
//! when a fault says the reply is lost. It knows nothing of sockets; [`super::server`] runs it
//! over TCP, real or simulated. Time comes from the injected [`Clock`] and
//! every random choice from the generator seeded at construction, so a run
//! over the simulated network replays exactly.
//!
//! # The life of an object request
//!
//! 1. Route (`route.rs`): path-style `/bucket/key`, or virtual-host
//!    `bucket.<domain>/key` when a domain is configured.
//! 2. Authenticate (`auth.rs`) with SigV4 against the configured key pairs.
//! 3. Draw this request's faults, among them its commit point within its
//!    latency; wait until that point.
//! 4. Answer `503 SlowDown` or `500 InternalError` if drawn (nothing applied).
//! 5. Apply it, under the provider mode's rules. An honest write checks and
//!    writes under one lock; a non-atomic one checks, waits the rest of its
//!    latency, then writes. With 409-on-overlap (`overlap.rs`) a conditional
//!    write that overlaps an earlier one is refused instead.
//! 6. Wait the rest of the latency, tell the observer, and answer (a 500 if
//!    "applied, then 500" was drawn), or drop the connection, or stay
//!    silent. Error bodies are rendered in `failure.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use hoplock::clock::{Clock, Instant};
use hoplock::s3::sigv4::{Authorization, MAX_CLOCK_SKEW, Verifier, VerifyError};
use hoplock::s3::xml::{escape, format_http_date};
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, DATE, ETAG, HOST, LAST_MODIFIED};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use sha2::{Digest, Sha256};

use super::faults::{Faults, FaultsError, OpKind, Rng};
use super::mode::ProviderMode;
use super::store::{Conditions, EtagCondition, Object, Refusal, Store};

mod auth;
mod direct;
mod failure;
mod lies;
mod overlap;
mod route;

use self::failure::{S3Failure, finish, refused};
use self::route::Target;

/// The longest object key S3 accepts, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;

mod events;
pub use events::{Event, Outcome, Reply};
mod builder;
pub use builder::{BuildError, FakeS3Builder};
pub use events::Observer;

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
/// use hoplock_testkit::fake_s3::{FakeS3, ProviderMode, Reply};
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
    /// A verifier per access key id, each caching its signing key.
    credentials: BTreeMap<String, Verifier>,
    clock: Arc<dyn Clock>,
    rng: Mutex<Rng>,
    observer: Option<Observer>,
    /// Conditional mutations in flight, by bucket and key, as request
    /// sequence numbers: who overlaps whom, for `conflict_409_on_overlap`.
    in_flight: Mutex<BTreeMap<(String, String), BTreeSet<u64>>>,
    next_sequence: AtomicU64,
    virtual_host_domain: Option<String>,
    /// Until when every object request is refused, and with which status:
    /// an outage of the store, or throttling of the whole prefix.
    outage_until: Mutex<Option<(Instant, u16)>>,
    /// Conditional writes per key, for `conditions-expire-per-key`.
    conditional_writes: lies::ConditionalWrites,
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

/// The answers an outage may give: see [`FakeS3::outage`].
pub const OUTAGE_STATUSES: [u16; 3] = [429, 500, 503];

/// An outage status the fake S3 does not model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("an outage answers 429, 500 or 503, not {0}")]
pub struct UnknownOutageStatus(pub u16);

/// Locks a mutex, taking over a poisoned one: every critical section here
/// leaves the data whole, so a panic elsewhere does not make it unusable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
    /// The `Range` header of a GET, as received.
    range: Option<String>,
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
            range: header(request.headers(), "range"),
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

        let refusal = match self.outage_status() {
            Some(status) => Some(status),
            None if draw.slow_down => Some(503),
            None if draw.throttled => Some(429),
            None if draw.error_500 => Some(500),
            None => None,
        };
        let applied = if let Some(status) = refusal {
            Applied::refused(S3Failure::overloaded(status))
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
                let failure = S3Failure::overloaded(500);
                let code = failure.code;
                (self.error_response(failure, &req.resource, &req.request_id, req.head), code)
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
            _ => self.bend_conditions(req, request.body().len(), &mut conditions)?,
        }
        Ok(conditions)
    }

    fn read(&self, req: &ObjectRequest, conditions: &Conditions) -> Applied {
        // Drawn only when reads are stale by chance, so that worlds whose
        // every read lags keep the random sequence they always had.
        let chance = self.inner.faults.stale_read_chance;
        let stale =
            self.inner.mode == ProviderMode::StaleReads && (chance >= 1.0 || lock(&self.inner.rng).chance(chance));
        let lag = match self.inner.mode {
            ProviderMode::LaggingReads => Some(self.inner.faults.read_lag()),
            _ if stale => Some(self.inner.faults.stale_read_window()),
            _ => None,
        };
        let store = lock(&self.inner.store);
        let applied_at = Some(self.inner.clock.now());
        let result = if let Some(window) = lag {
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
        // Decided under the lock: whether the key is missing is part of
        // the condition the mode gets wrong.
        let creates = self.inner.mode == ProviderMode::IfMatchCreates
            && req.op == OpKind::Write
            && conditions.if_match.is_some()
            && store.current(&req.bucket, &req.key).is_none();
        let conditions = if non_atomic || creates { &unconditional } else { conditions };
        let kept = body.clone();
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
                Err(refusal) => {
                    self.apply_refused_later(req, &refusal, kept);
                    Applied::refused(S3Failure::from_refusal(&refusal, &req.key))
                }
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

    fn object_response(&self, object: &Object, req: &ObjectRequest) -> Response<Bytes> {
        let whole = object.body();
        // A GET with a `Range` of bytes gets that part, as S3 answers it; a
        // range S3 would not parse is ignored, as S3 ignores it.
        let part = req.range.as_deref().filter(|_| !req.head).and_then(|range| byte_range(range, whole.len()));
        let (status, body) = match part {
            Some((first, last)) => (StatusCode::PARTIAL_CONTENT, whole.slice(first..=last)),
            None => (StatusCode::OK, whole.clone()),
        };
        let mut response = self
            .base_response(status, &req.request_id)
            .header(ETAG, object.etag())
            .header(LAST_MODIFIED, format_http_date(object.last_modified()))
            .header(CONTENT_TYPE, object.content_type().unwrap_or("binary/octet-stream"))
            .header(CONTENT_LENGTH, body.len());
        if let Some((first, last)) = part {
            response = response.header("content-range", format!("bytes {first}-{last}/{}", whole.len()));
        }
        finish(response, if req.head { Bytes::new() } else { body })
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

/// The first and last byte of `bytes=FIRST-LAST` or `bytes=FIRST-` within
/// an object of `len` bytes, the last clamped to the object's end. `None`
/// for any other form, or a first byte past the end (S3 answers 416 there;
/// the whole object is enough for the fake's clients).
fn byte_range(range: &str, len: usize) -> Option<(usize, usize)> {
    let (first, last) = range.trim().strip_prefix("bytes=")?.split_once('-')?;
    let first: usize = first.parse().ok()?;
    let last = if last.is_empty() { len.checked_sub(1)? } else { last.parse::<usize>().ok()?.min(len.checked_sub(1)?) };
    (first <= last).then_some((first, last))
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
    let mut out = String::with_capacity(bytes.len() * 2);
    super::store::push_hex(bytes, &mut out);
    out
}

#[cfg(test)]
mod tests;
