//! The fake S3 over real loopback TCP, driven by the production S3 backend:
//! the honest mode passes the backend conformance suite, every broken mode
//! is caught by the suite or by `S3Backend::verify`, and faults reach the
//! client as the errors the elector acts on.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hoplock::backend::{Backend, BackendError};
use hoplock::clock::{Clock, SystemClock};
use hoplock::s3::config::Addressing;
use hoplock::s3::credentials::CredentialSource;
use hoplock::s3::sigv4::{Credentials, sign};
use hoplock::s3::{S3Backend, S3Config};
use hoplock::testing::conformance::{self, Failure, sample_record};
use hoplock_sim::fake_s3::store::etag_of;
use hoplock_sim::fake_s3::{Event, FakeS3, Faults, Latency, OpFaults, OpKind, Outcome, ProviderMode, server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

const ACCESS_KEY: &str = "FAKEAKID";
const SECRET_KEY: &str = "fake-secret-key";
const BUCKET: &str = "hoplock-test";

/// A fake S3 serving on a loopback port until dropped.
struct Running {
    s3: FakeS3,
    address: std::net::SocketAddr,
    _stop: oneshot::Sender<()>,
}

impl Running {
    fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The production backend, path-style over plain HTTP, for `key`.
    fn backend(&self, key: &str) -> S3Backend {
        self.backend_with(key, Credentials::new(ACCESS_KEY, SECRET_KEY), BUCKET)
    }

    fn backend_with(&self, key: &str, credentials: Credentials, bucket: &str) -> S3Backend {
        let mut config = S3Config::new(bucket, key);
        config.endpoint = Some(self.endpoint());
        config.addressing = Addressing::PathStyle;
        config.credentials = CredentialSource::Explicit(credentials);
        // Short, so that tests of failing reads end quickly.
        config.request_timeout = Duration::from_secs(2);
        config.operation_deadline = Duration::from_secs(3);
        S3Backend::new(config).expect("a valid configuration")
    }
}

async fn start(mode: ProviderMode, faults: Faults) -> Running {
    start_with(FakeS3::builder(Arc::new(SystemClock::new()), 1).mode(mode).faults(faults)).await
}

async fn start_with(builder: hoplock_sim::fake_s3::FakeS3Builder) -> Running {
    let s3 = builder.credentials(ACCESS_KEY, SECRET_KEY).bucket(BUCKET).build().expect("a valid fake S3");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(server::serve(s3.clone(), listener, async move {
        let _ = stopped.await;
    }));
    Running { s3, address, _stop: stop }
}

async fn run_suite(backend: &S3Backend) -> Result<(), Failure> {
    let plant = backend.clone();
    conformance::run_all(backend, move |bytes| async move {
        plant.put_raw(bytes).await.map(|_| ()).map_err(|err| err.to_string())
    })
    .await
}

/// Waits in real time, through the clock seam as everything here does.
async fn pause(duration: Duration) {
    let clock = SystemClock::new();
    clock.sleep_until(clock.now() + duration).await;
}

fn write_latency(ms: u64) -> Faults {
    Faults { write: OpFaults { latency: Latency::Fixed { ms }, ..OpFaults::default() }, ..Faults::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn honest_mode_passes_the_conformance_suite_and_verify() {
    let server = start(ProviderMode::Honest, Faults::none()).await;
    let backend = server.backend("leases/honest.json");
    run_suite(&backend).await.expect("the honest fake S3 conforms");
    let verification = backend.verify().await.expect("verify passes");
    assert_eq!(verification.probe_key, "leases/honest.json.hoplock-verify");
    assert_eq!(verification.checks.len(), 4, "{verification:?}");
    // The probe is left in place, and a second run reuses it.
    assert_eq!(backend.verify().await.expect("verify passes again").checks.len(), 4);
    // With latency, the racing writers really overlap; still one winner.
    let slow = start(ProviderMode::Honest, write_latency(50)).await;
    conformance::create_race_has_one_winner(&slow.backend("leases/slow.json"))
        .await
        .expect("an atomic store has one winner however the requests overlap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignoring_if_none_match_is_caught_by_the_create_race_and_verify() {
    let server = start(ProviderMode::IgnoreIfNoneMatch, Faults::none()).await;
    let failure = run_suite(&server.backend("a.json")).await.unwrap_err();
    assert_eq!(failure.check, "create_race_has_one_winner", "{failure}");
    let err = server.backend("b.json").verify().await.unwrap_err();
    assert!(
        matches!(&err, BackendError::Unsupported(m) if m.starts_with("UNSAFE: ignores conditions") && m.contains("If-None-Match: * of an existing key")),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignoring_if_match_is_caught_by_the_update_race_and_verify() {
    let server = start(ProviderMode::IgnoreIfMatch, Faults::none()).await;
    let failure = run_suite(&server.backend("a.json")).await.unwrap_err();
    assert_eq!(failure.check, "update_race_has_one_winner", "{failure}");
    let err = server.backend("b.json").verify().await.unwrap_err();
    assert!(
        matches!(&err, BackendError::Unsupported(m) if m.starts_with("UNSAFE: ignores conditions") && m.contains("replaced If-Match ETag")),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_adapts_to_a_store_that_honours_only_bare_etags() {
    use hoplock::s3::config::EtagStyle;
    let server = start(ProviderMode::BareEtagsOnly, Faults::none()).await;
    let backend = server.backend("leases/bare.json");
    assert_eq!(backend.etag_style(), EtagStyle::Quoted);
    let verification = backend.verify().await.expect("the bare form is found and used");
    assert_eq!(verification.checks.len(), 4, "{verification:?}");
    assert_eq!(backend.etag_style(), EtagStyle::Bare);
    // Every backend made from it sends the form found, and it passes the
    // suite that way.
    let other = backend.with_key("leases/bare-too.json");
    assert_eq!(other.etag_style(), EtagStyle::Bare);
    run_suite(&other).await.unwrap_or_else(|failure| panic!("{failure}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_refuses_a_store_that_ignores_either_form_of_an_etag() {
    let server = start(ProviderMode::IgnoresBareEtags, Faults::none()).await;
    // Sent quoted, every write is conditional, but the bare form lets a
    // replaced ETag through: unsafe for any client that sends it.
    let err = server.backend("leases/a.json").verify().await.unwrap_err();
    assert!(
        matches!(&err, BackendError::Unsupported(m) if m.starts_with("UNSAFE: ignores conditions") && m.contains("bare form")),
        "{err:?}"
    );
    let mut config = S3Config::new(BUCKET, "leases/b.json");
    config.endpoint = Some(server.endpoint());
    config.addressing = Addressing::PathStyle;
    config.credentials = CredentialSource::Explicit(Credentials::new(ACCESS_KEY, SECRET_KEY));
    config.etag_style = hoplock::s3::config::EtagStyle::Bare;
    let err = S3Backend::new(config).unwrap().verify().await.unwrap_err();
    assert!(matches!(&err, BackendError::Unsupported(m) if m.starts_with("UNSAFE: ignores conditions")), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_atomic_store_lets_overlapping_creates_all_win() {
    let server = start(ProviderMode::NonAtomic, write_latency(200)).await;
    let failure = conformance::create_race_has_one_winner(&server.backend("race.json")).await.unwrap_err();
    assert!(failure.detail.contains("racing creates succeeded"), "{failure}");
    let failure = run_suite(&server.backend("suite.json")).await.unwrap_err();
    assert_eq!(failure.check, "create_race_has_one_winner", "{failure}");
    // One request at a time, a non-atomic store looks honest: verify() alone
    // cannot see it, which is why the validator races many writers.
    server.backend("verify.json").verify().await.expect("sequential checks pass on a non-atomic store");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_refuses_weak_etags_and_if_match_that_creates() {
    let server = start(ProviderMode::WeakEtags, Faults::none()).await;
    let err = server.backend("weak.json").verify().await.unwrap_err();
    assert!(matches!(&err, BackendError::Unsupported(m) if m.starts_with("UNSAFE: weak ETags")), "{err:?}");
    let server = start(ProviderMode::IfMatchCreates, Faults::none()).await;
    let err = server.backend("creates.json").verify().await.unwrap_err();
    assert!(
        matches!(&err, BackendError::Unsupported(m) if m.starts_with("UNSAFE: ignores conditions") && m.contains("missing key")),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejecting_conditional_requests_makes_writes_unsupported() {
    let server = start(ProviderMode::RejectConditional, Faults::none()).await;
    let backend = server.backend("lease.json");
    assert_eq!(backend.read().await.unwrap_err(), BackendError::NoLease);
    let err = backend.write(None, &sample_record(1, "a")).await.unwrap_err();
    assert!(matches!(&err, BackendError::Unsupported(m) if m.contains("NotImplemented")), "{err:?}");
    assert!(matches!(backend.verify().await, Err(BackendError::Unsupported(m)) if m.starts_with("UNSUPPORTED")));
    // An unconditional write is still accepted, as Backblaze B2 does.
    backend.put_raw(b"{}".to_vec()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignoring_conditional_deletes_fails_the_delete_rules() {
    let server = start(ProviderMode::IgnoreConditionalDelete, Faults::none()).await;
    let failure = run_suite(&server.backend("a.json")).await.unwrap_err();
    assert_eq!(failure.check, "stale_version_is_rejected", "{failure}");
    assert!(failure.detail.contains("delete"), "{failure}");
    let failure = conformance::delete_rules(&server.backend("b.json")).await.unwrap_err();
    assert!(failure.detail.contains("missing record"), "{failure}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_reads_return_the_older_version_within_the_window() {
    let faults = Faults { stale_read_window_ms: 1000, ..Faults::default() };
    let server = start(ProviderMode::StaleReads, faults).await;
    let backend = server.backend("lease.json");
    let first = backend.write(None, &sample_record(1, "first")).await.unwrap();
    // Right after the create, the key still reads as missing.
    assert_eq!(backend.read().await.unwrap_err(), BackendError::NoLease);
    pause(Duration::from_millis(1200)).await;
    assert_eq!(backend.read().await.unwrap().version, first);
    let second = backend
        .write(Some(&first), &sample_record(2, "second"))
        .await
        .expect("conditions are checked against the latest version");
    let stored = backend.read().await.unwrap();
    assert_eq!(stored.version, first, "a read within the window is stale");
    assert_eq!(stored.record, sample_record(1, "first"));
    pause(Duration::from_millis(1200)).await;
    assert_eq!(backend.read().await.unwrap().version, second, "and then settles");
    let failure = run_suite(&server.backend("suite.json")).await.unwrap_err();
    assert_eq!(failure.check, "create_race_has_one_winner", "{failure}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credentials_are_refused_as_s3_refuses_them() {
    let server = start(ProviderMode::Honest, Faults::none()).await;
    let wrong_secret = server.backend_with("k.json", Credentials::new(ACCESS_KEY, "not-the-secret"), BUCKET);
    let err = wrong_secret.read().await.unwrap_err();
    assert!(
        matches!(&err, BackendError::Config(m) if m.contains("secret access key is wrong") && m.contains("SignatureDoesNotMatch")),
        "{err:?}"
    );
    let unknown = server.backend_with("k.json", Credentials::new("NOSUCHKEY", SECRET_KEY), BUCKET);
    let err = unknown.write(None, &sample_record(1, "x")).await.unwrap_err();
    assert!(
        matches!(&err, BackendError::Config(m) if m.contains("access key id") && m.contains("InvalidAccessKeyId")),
        "{err:?}"
    );
    assert!(server.s3.object(BUCKET, "k.json").is_none(), "nothing was written");
    let missing_bucket = server.backend_with("k.json", Credentials::new(ACCESS_KEY, SECRET_KEY), "no-such-bucket");
    let err = missing_bucket.read().await.unwrap_err();
    assert!(matches!(&err, BackendError::Config(m) if m.contains("NoSuchBucket")), "{err:?}");
}

/// Sends `request` on a fresh connection with `wire_body` as the body
/// actually transmitted, and returns the status and the response body.
async fn raw_exchange(
    address: std::net::SocketAddr,
    request: &http::Request<Bytes>,
    wire_body: &[u8],
) -> (u16, String) {
    let mut text = format!("{} {} HTTP/1.1\r\n", request.method(), request.uri().path_and_query().unwrap());
    for (name, value) in request.headers() {
        text.push_str(&format!("{name}: {}\r\n", value.to_str().unwrap()));
    }
    text.push_str(&format!("content-length: {}\r\nconnection: close\r\n\r\n", wire_body.len()));
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(text.as_bytes()).await.unwrap();
    stream.write_all(wire_body).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default();
    (status, body)
}

fn signed_put(address: std::net::SocketAddr, key: &str, body: &'static str) -> http::Request<Bytes> {
    let mut request = http::Request::put(format!("http://{address}/{BUCKET}/{key}"))
        .header("if-none-match", "*")
        .body(Bytes::from_static(body.as_bytes()))
        .unwrap();
    sign(&mut request, &Credentials::new(ACCESS_KEY, SECRET_KEY), "us-east-1", SystemClock::new().wall()).unwrap();
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_changed_in_flight_is_refused_with_a_sha256_mismatch() {
    let server = start(ProviderMode::Honest, Faults::none()).await;
    let request = signed_put(server.address, "tampered", "hello");
    let (status, body) = raw_exchange(server.address, &request, b"HELLO").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("<Code>XAmzContentSHA256Mismatch</Code>"), "{body}");
    assert!(body.contains("<RequestId>"), "{body}");
    assert!(server.s3.object(BUCKET, "tampered").is_none());
    // The same request with the body it was signed for is accepted.
    let (status, body) = raw_exchange(server.address, &request, b"hello").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(server.s3.object(BUCKET, "tampered").unwrap().body(), "hello");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_are_ambiguous_for_writes_and_transient_for_reads() {
    let faults = Faults::everywhere(OpFaults { error_500_rate: 1.0, ..OpFaults::default() });
    let server = start(ProviderMode::Honest, faults).await;
    let backend = server.backend("lease.json");
    let err = backend.write(None, &sample_record(1, "x")).await.unwrap_err();
    assert!(matches!(&err, BackendError::Ambiguous(m) if m.contains("InternalError")), "{err:?}");
    let err = backend.read().await.unwrap_err();
    assert!(matches!(&err, BackendError::Transient(_)), "{err:?}");
    assert!(server.s3.object(BUCKET, "lease.json").is_none(), "a 500 applies nothing");

    let slow_down = Faults::everywhere(OpFaults { slow_down_503_rate: 1.0, ..OpFaults::default() });
    let server = start(ProviderMode::Honest, slow_down).await;
    let err = server.backend("lease.json").read().await.unwrap_err();
    assert!(matches!(&err, BackendError::Transient(m) if m.contains("SlowDown")), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ambiguous_success_applies_the_write_and_loses_the_reply() {
    let faults = Faults { write: OpFaults { ambiguous_success_rate: 1.0, ..OpFaults::default() }, ..Faults::default() };
    let events = Arc::new(Mutex::new(Vec::<Event>::new()));
    let sink = events.clone();
    let server = start_with(
        FakeS3::builder(Arc::new(SystemClock::new()), 3)
            .faults(faults)
            .observer(move |event| sink.lock().unwrap().push(event.clone())),
    )
    .await;
    let backend = server.backend("lease.json");
    let record = sample_record(1, "lost-reply");
    let err = backend.write(None, &record).await.unwrap_err();
    assert!(matches!(err, BackendError::Ambiguous(_)), "{err:?}");
    let stored = backend.read().await.expect("the write was applied");
    assert_eq!(stored.record, record);
    let events = events.lock().unwrap();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0].op, OpKind::Write);
    assert_eq!(events[0].outcome, Outcome::DroppedAfterApply);
    assert_eq!(events[0].etag.as_deref(), Some(stored.version.as_str()));
    assert_eq!(events[0].if_none_match.as_deref(), Some("*"));
    assert_eq!(events[1].op, OpKind::Read);
    assert_eq!(events[1].outcome, Outcome::Applied);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etags_are_the_quoted_md5_of_the_body() {
    let server = start(ProviderMode::Honest, Faults::none()).await;
    let a = server.backend("a").put_raw(b"hello".to_vec()).await.unwrap();
    let b = server.backend("b").put_raw(b"hello".to_vec()).await.unwrap();
    let c = server.backend("c").put_raw(b"hello!".to_vec()).await.unwrap();
    assert_eq!(a.as_str(), "\"5d41402abc4b2a76b9719d911017c592\"");
    assert_eq!(a, b, "identical bodies, identical ETags");
    assert_eq!(c.as_str(), etag_of(b"hello!"));
    assert_ne!(a, c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_conditional_writes_can_get_409_and_the_suite_still_passes() {
    let mut faults = write_latency(200);
    faults.conflict_409_on_overlap = true;
    let events = Arc::new(Mutex::new(Vec::<Event>::new()));
    let sink = events.clone();
    let server = start_with(
        FakeS3::builder(Arc::new(SystemClock::new()), 5)
            .faults(faults)
            .observer(move |event| sink.lock().unwrap().push(event.clone())),
    )
    .await;
    run_suite(&server.backend("lease.json")).await.expect("409 is a refusal the suite accepts");
    let conflicts = events
        .lock()
        .unwrap()
        .iter()
        .filter(|event| {
            matches!(event.outcome, Outcome::Refused { status: 409, code: "ConditionalRequestConflict", .. })
        })
        .count();
    assert!(conflicts > 0, "the racing writers overlapped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_observer_sees_every_object_request_in_order() {
    let events = Arc::new(Mutex::new(Vec::<Event>::new()));
    let sink = events.clone();
    let server = start_with(
        FakeS3::builder(Arc::new(SystemClock::new()), 9)
            .observer(move |event| sink.lock().unwrap().push(event.clone())),
    )
    .await;
    let backend = server.backend("lease.json");
    let first = backend.write(None, &sample_record(1, "a")).await.unwrap();
    backend.read().await.unwrap();
    assert_eq!(backend.write(None, &sample_record(1, "b")).await, Err(BackendError::LeaseHeld));
    backend.delete(&first).await.unwrap();
    let events = events.lock().unwrap();
    let summary: Vec<_> = events.iter().map(|e| (e.op, e.outcome.clone(), e.etag.clone())).collect();
    let etag = Some(first.as_str().to_owned());
    assert_eq!(
        summary,
        vec![
            (OpKind::Write, Outcome::Applied, etag.clone()),
            (OpKind::Read, Outcome::Applied, etag.clone()),
            (OpKind::Write, Outcome::Refused { status: 412, code: "PreconditionFailed", reply_dropped: false }, None),
            (OpKind::Delete, Outcome::Applied, etag),
        ]
    );
    for event in events.iter() {
        assert_eq!(event.bucket, BUCKET);
        assert_eq!(event.key, "lease.json");
        assert!(event.started <= event.ended);
        if let Some(at) = event.applied_at {
            assert!(event.started <= at && at <= event.ended);
        }
    }
}

/// A fake S3 whose writes have these faults, recording every event.
async fn start_recording(write: OpFaults) -> (Running, Arc<Mutex<Vec<Event>>>) {
    let events = Arc::new(Mutex::new(Vec::<Event>::new()));
    let sink = events.clone();
    let faults = Faults { write, ..Faults::default() };
    let server = start_with(
        FakeS3::builder(Arc::new(SystemClock::new()), 5)
            .faults(faults)
            .observer(move |event| sink.lock().unwrap().push(event.clone())),
    )
    .await;
    (server, events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fully_received_write_commits_after_its_client_hung_up() {
    // Each write takes 2 s and commits somewhere within them; the client
    // gives up after 50 ms and closes its connection. S3 commits a PUT it
    // has received whole whether or not anyone still waits for the answer.
    let (server, events) =
        start_recording(OpFaults { latency: Latency::Fixed { ms: 2_000 }, ..OpFaults::default() }).await;
    for key in ["w0", "w1", "w2", "w3"] {
        let mut config = S3Config::new(BUCKET, key);
        config.endpoint = Some(server.endpoint());
        config.addressing = Addressing::PathStyle;
        config.credentials = CredentialSource::Explicit(Credentials::new(ACCESS_KEY, SECRET_KEY));
        config.request_timeout = Duration::from_millis(50);
        config.operation_deadline = Duration::from_millis(50);
        let impatient = S3Backend::new(config).unwrap();
        let err = impatient.write(None, &sample_record(1, key)).await.unwrap_err();
        assert!(matches!(err, BackendError::Ambiguous(_)), "{err:?}");
    }
    pause(Duration::from_millis(2_500)).await;
    for key in ["w0", "w1", "w2", "w3"] {
        let stored = server.backend(key).read().await.unwrap_or_else(|err| panic!("{key} never committed: {err}"));
        assert_eq!(stored.record, sample_record(1, key));
    }
    let events = events.lock().unwrap();
    let late = events.iter().filter(|event| event.op == OpKind::Write).filter(|event| {
        event.applied_at.is_some_and(|at| at.saturating_duration_since(event.started) > Duration::from_millis(50))
    });
    assert!(late.count() >= 1, "no write committed after its client had given up: {events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_may_have_applied() {
    let (server, events) = start_recording(OpFaults { applied_error_500_rate: 1.0, ..OpFaults::default() }).await;
    let backend = server.backend("lease.json");
    let record = sample_record(1, "applied-500");
    let err = backend.write(None, &record).await.unwrap_err();
    // The backend never takes a 5xx on a write as "not applied".
    assert!(matches!(err, BackendError::Ambiguous(ref m) if m.contains("500")), "{err:?}");
    assert_eq!(backend.read().await.expect("the write was applied").record, record);
    assert_eq!(events.lock().unwrap()[0].outcome, Outcome::AppliedThenFailed { status: 500 });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_can_be_one_that_never_comes() {
    let (server, events) = start_recording(OpFaults { silent_reply_rate: 1.0, ..OpFaults::default() }).await;
    let backend = server.backend("lease.json"); // 2 s request timeout
    let record = sample_record(1, "silent");
    let clock = SystemClock::new();
    let sent = clock.now();
    let err = backend.write(None, &record).await.unwrap_err();
    let waited = clock.now().saturating_duration_since(sent);
    assert!(matches!(err, BackendError::Ambiguous(_)), "{err:?}");
    // Not a prompt close: the client heard nothing until its own timeout.
    assert!(waited >= Duration::from_millis(1_900), "gave up after {waited:?}");
    assert_eq!(backend.read().await.expect("the write was applied").record, record);
    assert_eq!(events.lock().unwrap()[0].outcome, Outcome::DroppedAfterApply);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_body_never_arrived_whole_never_commits() {
    // The headers promise five bytes; two arrive, then the client hangs up.
    let server = start(ProviderMode::Honest, Faults::none()).await;
    let request = signed_put(server.address, "half", "hello");
    let mut text = format!("PUT {} HTTP/1.1\r\n", request.uri().path_and_query().unwrap());
    for (name, value) in request.headers() {
        text.push_str(&format!("{name}: {}\r\n", value.to_str().unwrap()));
    }
    text.push_str("content-length: 5\r\n\r\nhe");
    let mut stream = tokio::net::TcpStream::connect(server.address).await.unwrap();
    stream.write_all(text.as_bytes()).await.unwrap();
    stream.shutdown().await.unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    drop(stream);
    pause(Duration::from_millis(200)).await;
    assert!(server.s3.object(BUCKET, "half").is_none(), "a partial body was committed");
    // The whole body on another connection commits.
    let (status, body) = raw_exchange(server.address, &request, b"hello").await;
    assert_eq!(status, 200, "{body}");
}
