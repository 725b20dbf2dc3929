//! Raw requests for the checks: signed by the library's S3 backend, sent
//! through the production transport, answered as they came.
//!
//! Every key a check writes is recorded before the request goes out, so
//! the clean-up deletes it even if the check is interrupted between sending
//! and hearing back.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hoplock::clock::{Clock, Instant, SystemClock};

use bytes::Bytes;
use hoplock::BackendError;
use hoplock::s3::S3Backend;
use hoplock::s3::transport::{HttpTransport, ReqwestTransport, ResponseFuture};
use hoplock::s3::xml::S3Error;
use http::{Method, Request, Response};

/// A conditional header, or none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// No condition.
    None,
    /// `If-None-Match: *`.
    Absent,
    /// `If-Match: <etag>`, in the form the run uses (see
    /// [`Probe::use_bare_etags`]).
    Matches(String),
    /// `If-Match: <etag>`, sent exactly as given, whatever form the run
    /// uses: for the check that finds out which forms the store honours.
    MatchesAsGiven(String),
    /// `If-None-Match: <etag>`, for conditional reads.
    Differs(String),
}

impl Condition {
    fn header(&self, bare: bool) -> Option<(&'static str, String)> {
        match self {
            Condition::None => None,
            Condition::Absent => Some(("if-none-match", "*".into())),
            Condition::Matches(etag) if bare => Some(("if-match", etag.trim_matches('"').to_owned())),
            Condition::Matches(etag) | Condition::MatchesAsGiven(etag) => Some(("if-match", etag.clone())),
            Condition::Differs(etag) => Some(("if-none-match", etag.clone())),
        }
    }
}

/// What one request got back.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The HTTP status, or `None` when no answer came (timeout, reset).
    pub status: Option<u16>,
    /// The ETag header, as sent.
    pub etag: Option<String>,
    /// The S3 error code of an error body, if any.
    pub code: String,
    /// The response body.
    pub body: Bytes,
    /// Why no answer came.
    pub failure: Option<String>,
    /// The server's `Date`, if it sent one.
    pub date: Option<String>,
    /// The server's `Server` header, if it sent one.
    pub server: Option<String>,
    /// When it was sent, on this process's clock.
    pub sent: Instant,
    /// When the answer (or the failure) came.
    pub received: Instant,
}

impl Answer {
    /// A 2xx answer.
    pub fn succeeded(&self) -> bool {
        self.status.is_some_and(|status| (200..300).contains(&status))
    }

    /// A definite refusal of a condition: 412, 409, or 404 for `If-Match`
    /// on a missing key.
    pub fn refused(&self) -> bool {
        matches!(self.status, Some(412 | 409 | 404))
    }

    /// A refusal that changes nothing for certain and says so: 412, 409,
    /// and 503 SlowDown (S3 applies nothing it throttles).
    pub fn lost_cleanly(&self) -> bool {
        matches!(self.status, Some(412 | 409)) || (self.status == Some(503) && self.code == "SlowDown")
    }

    /// `status code` or `no answer (why)`, for evidence.
    pub fn describe(&self) -> String {
        match (self.status, &self.failure) {
            (Some(status), _) if self.code.is_empty() => status.to_string(),
            (Some(status), _) => format!("{status} {}", self.code),
            (None, Some(why)) => format!("no answer ({why})"),
            (None, None) => "no answer".into(),
        }
    }

    /// How long the request took.
    pub fn latency(&self) -> Duration {
        self.received.saturating_duration_since(self.sent)
    }
}

/// How many bytes [`Probe::get_start`] asks for: the write id comes first
/// in a body, well within them.
const START_BYTES: usize = 256;

/// The full key a request was signed for, carried in its extensions.
#[derive(Debug, Clone)]
struct KeyName(String);

/// A conditional write the store refused: which write (the id its body
/// carries) and when the refusal came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefusedWrite {
    /// The write id of the refused body.
    pub id: u64,
    /// When the refusal arrived.
    pub at: Instant,
}

/// The store under test: one backend per endpoint (for URLs and signing)
/// and the production transport that sends everything.
#[derive(Clone)]
pub struct Probe {
    backends: Arc<Vec<S3Backend>>,
    transport: Arc<ReqwestTransport>,
    timeout: Duration,
    prefix: Arc<String>,
    written: Arc<Mutex<BTreeSet<String>>>,
    /// Every conditional write refused so far, by key: a store that
    /// applies one later is caught when a read shows its bytes.
    refused: Arc<Mutex<BTreeMap<String, Vec<RefusedWrite>>>>,
    /// Whether `If-Match` ETags go out without their quotes.
    bare: Arc<AtomicBool>,
    /// The one clock every instant of the run comes from.
    clock: Arc<SystemClock>,
}

impl Probe {
    /// A probe writing under `prefix` through `backends` (one per endpoint).
    pub fn new(backends: Vec<S3Backend>, transport: ReqwestTransport, timeout: Duration, prefix: String) -> Probe {
        Probe {
            backends: Arc::new(backends),
            transport: Arc::new(transport),
            timeout,
            prefix: Arc::new(prefix),
            written: Arc::default(),
            refused: Arc::default(),
            bare: Arc::default(),
            clock: Arc::new(SystemClock::new()),
        }
    }

    /// From now on, [`Condition::Matches`] sends the ETag without quotes.
    pub fn use_bare_etags(&self, bare: bool) {
        self.bare.store(bare, Ordering::Relaxed);
    }

    /// Whether `If-Match` ETags go out bare.
    pub fn bare_etags(&self) -> bool {
        self.bare.load(Ordering::Relaxed)
    }

    /// The conditional writes refused so far on `name`.
    pub fn refused(&self, name: &str) -> Vec<RefusedWrite> {
        lock(&self.refused).get(&self.key(name)).cloned().unwrap_or_default()
    }

    /// How many conditional writes were refused in all, and when the last
    /// refusal came.
    pub fn refusals(&self) -> (usize, Option<Instant>) {
        let refused = lock(&self.refused);
        let count = refused.values().map(Vec::len).sum();
        (count, refused.values().flatten().map(|write| write.at).max())
    }

    /// The run's clock.
    pub fn clock(&self) -> &SystemClock {
        &self.clock
    }

    /// Waits for `duration`.
    pub async fn pause(&self, duration: Duration) {
        self.clock.sleep_until(self.clock.now() + duration).await;
    }

    /// The full key of `name` under the prefix.
    pub fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// Every key written so far.
    pub fn written(&self) -> Vec<String> {
        self.lock().iter().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        lock(&self.written)
    }

    fn backend(&self, client: usize, name: &str) -> S3Backend {
        self.backends[client % self.backends.len()].with_key(self.key(name))
    }

    /// Builds and signs a request for `name`, from `client`'s endpoint.
    pub async fn signed(
        &self,
        client: usize,
        method: Method,
        name: &str,
        condition: &Condition,
        body: Bytes,
    ) -> Result<Request<Bytes>, BackendError> {
        let headers: Vec<(&str, String)> = condition.header(self.bare_etags()).into_iter().collect();
        if method == Method::PUT {
            self.lock().insert(self.key(name));
        }
        let mut request = self.backend(client, name).signed_request(method, &headers, body).await?;
        // The key travels with the request, so a refusal is recorded under
        // it whatever the URL looks like (a bucket or base path may contain
        // the prefix too).
        request.extensions_mut().insert(KeyName(self.key(name)));
        Ok(request)
    }

    /// GET the first bytes of `name`: enough to tell which write it holds
    /// (see [`body_id`]) without reading a large body whole. A store that
    /// ignores `Range` answers with the whole object, which works too up to
    /// the transport's limit.
    pub async fn get_start(&self, client: usize, name: &str) -> Result<Answer, BackendError> {
        let headers = [("range", format!("bytes=0-{}", START_BYTES - 1))];
        let request = self.backend(client, name).signed_request(Method::GET, &headers, Bytes::new()).await?;
        Ok(self.send(request).await)
    }

    /// Sends a request built by [`Probe::signed`] (perhaps altered), with
    /// the request timeout plus a millisecond per KiB of body: a large body
    /// over a slow link needs more.
    pub async fn send(&self, request: Request<Bytes>) -> Answer {
        let refusable = self.refusable(&request);
        let timeout = self.timeout + Duration::from_millis(request.body().len() as u64 / 1024);
        let answer = self.timed(timeout, self.transport.send(request)).await;
        self.note_refusal(refusable, &answer);
        answer
    }

    /// The key and write id of a conditional PUT of one of our bodies.
    fn refusable(&self, request: &Request<Bytes>) -> Option<(String, u64)> {
        let conditional = request.headers().contains_key("if-match") || request.headers().contains_key("if-none-match");
        if request.method() != Method::PUT || !conditional {
            return None;
        }
        let id = body_id(request.body())?;
        let KeyName(key) = request.extensions().get::<KeyName>()?;
        Some((key.clone(), id))
    }

    fn note_refusal(&self, refusable: Option<(String, u64)>, answer: &Answer) {
        if let (Some((key, id)), true) = (refusable, answer.refused()) {
            lock(&self.refused).entry(key).or_default().push(RefusedWrite { id, at: answer.received });
        }
    }

    /// Sends a request whose body is held back after `first_bytes` until
    /// `gate` fires.
    pub async fn send_gated(
        &self,
        request: Request<Bytes>,
        first_bytes: usize,
        gate: tokio::sync::oneshot::Receiver<()>,
        timeout: Duration,
    ) -> Answer {
        let refusable = self.refusable(&request);
        let answer = self.timed(timeout, self.transport.send_gated(request, first_bytes, gate)).await;
        self.note_refusal(refusable, &answer);
        answer
    }

    /// Waits for a transport's answer for at most `timeout`.
    async fn timed(&self, timeout: Duration, sending: ResponseFuture<'_>) -> Answer {
        let sent = self.clock.now();
        // check-s3 runs against real stores in real time, never simulated.
        #[allow(clippy::disallowed_methods)]
        let result = tokio::time::timeout(timeout, sending).await;
        let received = self.clock.now();
        match result {
            Ok(Ok(response)) => answer(&response, sent, received),
            Ok(Err(err)) => no_answer(err.message, sent, received),
            Err(_) => no_answer(format!("timed out after {timeout:?}"), sent, received),
        }
    }

    /// One request: signs and sends it. A request that cannot even be
    /// signed (no credentials) is an error for the whole run.
    pub async fn call(
        &self,
        client: usize,
        method: Method,
        name: &str,
        condition: &Condition,
        body: Bytes,
    ) -> Result<Answer, BackendError> {
        let request = self.signed(client, method, name, condition, body).await?;
        Ok(self.send(request).await)
    }

    /// PUT `body` to `name` under `condition`.
    pub async fn put(
        &self,
        client: usize,
        name: &str,
        condition: &Condition,
        body: Bytes,
    ) -> Result<Answer, BackendError> {
        self.call(client, Method::PUT, name, condition, body).await
    }

    /// GET `name`.
    pub async fn get(&self, client: usize, name: &str) -> Result<Answer, BackendError> {
        self.call(client, Method::GET, name, &Condition::None, Bytes::new()).await
    }

    /// What the library's backend makes of a refusal: used to tell a
    /// configuration problem (wrong secret, missing bucket, denied
    /// permission) from an answer about a condition.
    pub fn meaning(&self, answer: &Answer, write: bool) -> Option<BackendError> {
        let status = answer.status?;
        let mut response = Response::builder().status(status);
        if let Some(date) = &answer.date {
            response = response.header(http::header::DATE, date.as_str());
        }
        let response = response.body(answer.body.clone()).ok()?;
        Some(self.backends[0].refusal_of(&response, write))
    }

    /// Deletes every key written, without conditions, then, after
    /// `verify_after` (the read lag), reads each again: a key that came
    /// back (a refused write applied after its delete) is deleted once more
    /// and reported. Returns the keys that could not be deleted, with why,
    /// and the keys that came back, each with whether it held a write the
    /// store had refused.
    pub async fn clean_up(&self, verify_after: Duration) -> (Vec<(String, String)>, Vec<(String, bool)>) {
        let mut left = Vec::new();
        let mut deleted = Vec::new();
        for key in self.written() {
            let name = key.strip_prefix(self.prefix.as_str()).unwrap_or(&key).to_owned();
            match self.delete(&name).await {
                Ok(()) => {
                    self.lock().remove(&key);
                    deleted.push(name);
                }
                Err(why) => left.push((key, why)),
            }
        }
        self.pause(verify_after).await;
        let mut back = Vec::new();
        for name in deleted {
            let Ok(answer) = self.get_start(0, &name).await else { continue };
            if matches!(answer.status, Some(200 | 206)) {
                let key = self.key(&name);
                let id = body_id(&answer.body);
                let refused = id.is_some_and(|id| self.refused(&name).iter().any(|write| write.id == id));
                if let Err(why) = self.delete(&name).await {
                    left.push((key.clone(), format!("came back after its delete, then: {why}")));
                }
                back.push((key, refused));
            }
        }
        (left, back)
    }

    async fn delete(&self, name: &str) -> Result<(), String> {
        match self.call(0, Method::DELETE, name, &Condition::None, Bytes::new()).await {
            Ok(answer) if answer.succeeded() || answer.status == Some(404) => Ok(()),
            Ok(answer) => Err(answer.describe()),
            Err(err) => Err(err.to_string()),
        }
    }
}

/// Locks `mutex`, poisoned or not; shared by the checks.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Sets and maps of facts: a panic elsewhere leaves them whole.
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn answer(response: &Response<Bytes>, sent: Instant, received: Instant) -> Answer {
    let header = |name: http::header::HeaderName| {
        response.headers().get(name).and_then(|value| value.to_str().ok()).map(str::to_owned)
    };
    let code = if response.status().is_success() { String::new() } else { S3Error::parse(response.body()).code };
    Answer {
        status: Some(response.status().as_u16()),
        etag: header(http::header::ETAG),
        code,
        body: response.body().clone(),
        failure: None,
        date: header(http::header::DATE),
        server: header(http::header::SERVER),
        sent,
        received,
    }
}

fn no_answer(why: String, sent: Instant, received: Instant) -> Answer {
    Answer {
        status: None,
        etag: None,
        code: String::new(),
        body: Bytes::new(),
        failure: Some(why),
        date: None,
        server: None,
        sent,
        received,
    }
}

/// A body of `len` bytes (at least its header line) that names a write id,
/// the run and the check on its first line, so a read tells which write it
/// returned; the rest is filler that differs per id. The id comes first, so
/// the first bytes of an object tell it whatever the prefix's length.
pub fn body(prefix: &str, tag: &str, id: u64, len: usize) -> Bytes {
    let mut bytes = format!("hoplock check-s3 {id:016x} {prefix} {tag}\n").into_bytes();
    let mut state = id;
    while bytes.len() < len {
        bytes.push(b'a' + (hoplock::entropy::splitmix64(&mut state) % 26) as u8);
    }
    Bytes::from(bytes)
}

/// The write id a body made by [`body`] carries, if it is one of ours.
pub fn body_id(bytes: &[u8]) -> Option<u64> {
    let line = bytes.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let id = line.strip_prefix("hoplock check-s3 ")?.split(' ').next()?;
    u64::from_str_radix(id, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_name_their_write_and_have_the_asked_length() {
        let a = body("p/", "race", 7, 4096);
        let b = body("p/", "race", 8, 4096);
        assert_eq!((a.len(), b.len()), (4096, 4096));
        assert_ne!(a, b);
        assert_eq!(body_id(&a), Some(7));
        assert_eq!(body_id(&b), Some(8));
        assert_eq!(body_id(b"something else"), None);
        assert_eq!(body_id(&body("p/", "x", 3, 1)), Some(3), "never shorter than its header");
        let long = "p".repeat(400);
        assert_eq!(body_id(&body(&long, "x", 9, 4096)[..START_BYTES]), Some(9), "the id comes first");
    }
}
