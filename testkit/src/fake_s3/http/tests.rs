//! Unit tests of the front end, on its own clock, without a network.

use hoplock::clock::DriftingClock;
use hoplock::s3::sigv4::{Credentials, sign};
use hoplock::s3::xml::S3Error;

use super::*;
use crate::fake_s3::faults::{Latency, OpFaults};
use crate::fake_s3::mode::{CONDITIONS_PER_KEY, LARGE_BODY_BYTES};

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

fn signed(clock: &DriftingClock, method: Method, path: &str, headers: &[(&str, &str)], body: &str) -> Request<Bytes> {
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
    assert!(body.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code>"), "{body}");
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
    // The hash S3 computed is of the body it received, in lower-case hex.
    let body = String::from_utf8_lossy(response.body());
    let computed = "3733cd977ff8eb18b987357e22ced99f46097f31ecb239e878ae63760e83e4d5";
    assert!(body.contains(&format!("<S3ComputedContentSHA256>{computed}</S3ComputedContentSHA256>")), "{body}");
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
    let faults =
        Faults { write: OpFaults { latency: Latency::Fixed { ms: 10 }, ..OpFaults::default() }, ..Faults::default() };
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
async fn stale_reads_by_chance_mix_old_and_current_versions() {
    let faults = Faults { stale_read_window_ms: 500, stale_read_chance: 0.5, ..Faults::default() };
    let (s3, clock) = fake(ProviderMode::StaleReads, faults);
    send(&s3, signed(&clock, Method::PUT, "/b/k", &[], "one")).await;
    tokio::time::advance(Duration::from_millis(600)).await;
    send(&s3, signed(&clock, Method::PUT, "/b/k", &[], "two")).await;
    let mut bodies = std::collections::BTreeSet::new();
    for _ in 0..40 {
        bodies.insert(send(&s3, signed(&clock, Method::GET, "/b/k", &[], "")).await.body().clone());
    }
    assert_eq!(bodies, [Bytes::from("one"), Bytes::from("two")].into(), "some reads lag, some do not");
    let never = Faults { stale_read_chance: 0.0, ..Faults::default() };
    let (s3, clock) = fake(ProviderMode::StaleReads, never);
    send(&s3, signed(&clock, Method::PUT, "/b/k", &[], "one")).await;
    assert_eq!(send(&s3, signed(&clock, Method::GET, "/b/k", &[], "")).await.body(), "one");
    assert!(Faults { stale_read_chance: 1.5, ..Faults::default() }.validate().is_err());
}

#[tokio::test(start_paused = true)]
async fn an_ambiguous_success_is_applied_and_the_reply_dropped() {
    let faults = Faults::everywhere(OpFaults { ambiguous_success_rate: 1.0, ..OpFaults::default() });
    let (s3, clock) = fake(ProviderMode::Honest, faults);
    let reply = s3.handle(signed(&clock, Method::PUT, "/b/k", &[], "x")).await;
    assert!(reply.response().is_none());
    assert_eq!(s3.object("b", "k").unwrap().body(), "x");
}

#[tokio::test(start_paused = true)]
async fn a_throttled_request_gets_429_and_changes_nothing() {
    let faults = Faults::everywhere(OpFaults { throttle_429_rate: 1.0, ..OpFaults::default() });
    let (s3, clock) = fake(ProviderMode::Honest, faults);
    let response = send(&s3, signed(&clock, Method::PUT, "/b/k", &[("if-none-match", "*")], "x")).await;
    assert_eq!((response.status().as_u16(), code(&response).as_str()), (429, "TooManyRequests"));
    assert!(s3.object("b", "k").is_none());
}

#[tokio::test(start_paused = true)]
async fn an_outage_refuses_everything_with_503_until_it_ends() {
    let (s3, clock) = fake(ProviderMode::Honest, Faults::none());
    assert_eq!(send(&s3, signed(&clock, Method::PUT, "/b/k", &[], "one")).await.status(), 200);
    s3.outage(Duration::from_secs(10), 503).unwrap();
    for method in [Method::GET, Method::PUT, Method::DELETE] {
        let response = send(&s3, signed(&clock, method, "/b/k", &[], "two")).await;
        assert_eq!((response.status().as_u16(), code(&response).as_str()), (503, "SlowDown"));
    }
    s3.outage(Duration::from_secs(10), 429).unwrap();
    let response = send(&s3, signed(&clock, Method::PUT, "/b/k", &[], "two")).await;
    assert_eq!((response.status().as_u16(), code(&response).as_str()), (429, "TooManyRequests"));
    assert_eq!(s3.outage(Duration::from_secs(1), 404), Err(UnknownOutageStatus(404)));
    assert_eq!(s3.object("b", "k").unwrap().body(), "one");
    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(send(&s3, signed(&clock, Method::PUT, "/b/k", &[], "two")).await.status(), 200);
    assert_eq!(s3.object("b", "k").unwrap().body(), "two");
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

#[tokio::test(start_paused = true)]
async fn applies_refused_late_answers_412_then_stores_the_write() {
    let faults = Faults { late_apply_ms: 2000, ..Faults::default() };
    let (s3, clock) = fake(ProviderMode::AppliesRefusedLate, faults);
    let first = etag(&send(&s3, signed(&clock, Method::PUT, "/b/k", &[], "one")).await);
    send(&s3, signed(&clock, Method::PUT, "/b/k", &[("if-match", first.as_str())], "two")).await;
    let stale = send(&s3, signed(&clock, Method::PUT, "/b/k", &[("if-match", first.as_str())], "late")).await;
    assert_eq!(stale.status(), 412, "the answer is right");
    let missing = send(&s3, signed(&clock, Method::PUT, "/b/gone", &[("if-match", first.as_str())], "ghost")).await;
    assert_eq!(missing.status(), 404);
    assert_eq!(send(&s3, signed(&clock, Method::GET, "/b/k", &[], "")).await.body(), "two");
    clock.sleep_until(clock.now() + Duration::from_millis(2100)).await;
    assert_eq!(send(&s3, signed(&clock, Method::GET, "/b/k", &[], "")).await.body(), "late", "then it lands");
    assert_eq!(send(&s3, signed(&clock, Method::GET, "/b/gone", &[], "")).await.body(), "ghost");
}

#[tokio::test(start_paused = true)]
async fn large_bodies_lose_their_conditions() {
    let (s3, clock) = fake(ProviderMode::LargeBodiesUnconditional, Faults::none());
    let create = [("if-none-match", "*")];
    let small = "s".repeat(LARGE_BODY_BYTES);
    let large = "l".repeat(LARGE_BODY_BYTES + 1);
    assert_eq!(send(&s3, signed(&clock, Method::PUT, "/b/k", &create, &small)).await.status(), 200);
    assert_eq!(send(&s3, signed(&clock, Method::PUT, "/b/k", &create, &small)).await.status(), 412);
    assert_eq!(send(&s3, signed(&clock, Method::PUT, "/b/k", &create, &large)).await.status(), 200);
}

#[tokio::test(start_paused = true)]
async fn conditions_expire_after_a_keys_first_conditional_writes() {
    let (s3, clock) = fake(ProviderMode::ConditionsExpirePerKey, Faults::none());
    let first = etag(&send(&s3, signed(&clock, Method::PUT, "/b/k", &[], "base")).await);
    let mut current = first.clone();
    for n in 0..CONDITIONS_PER_KEY - 1 {
        let body = format!("write {n:04}");
        let write = send(&s3, signed(&clock, Method::PUT, "/b/k", &[("if-match", current.as_str())], &body)).await;
        assert_eq!(write.status(), 200);
        current = etag(&write);
    }
    let stale = [("if-match", first.as_str())];
    assert_eq!(send(&s3, signed(&clock, Method::PUT, "/b/k", &stale, "stale 1")).await.status(), 412, "the 50th");
    assert_eq!(send(&s3, signed(&clock, Method::PUT, "/b/k", &stale, "stale 2")).await.status(), 200, "the 51st");
    let other = send(&s3, signed(&clock, Method::PUT, "/b/other", &[("if-match", first.as_str())], "x")).await;
    assert_eq!(other.status(), 404, "another key still has its conditions");
}

#[tokio::test(start_paused = true)]
async fn lagging_reads_show_every_write_late_and_writes_stay_atomic() {
    let faults = Faults { read_lag_ms: 1000, ..Faults::default() };
    let (s3, clock) = fake(ProviderMode::LaggingReads, faults);
    let first = etag(&send(&s3, signed(&clock, Method::PUT, "/b/k", &[], "one")).await);
    assert_eq!(send(&s3, signed(&clock, Method::GET, "/b/k", &[], "")).await.status(), 404, "not there yet");
    clock.sleep_until(clock.now() + Duration::from_millis(1100)).await;
    send(&s3, signed(&clock, Method::PUT, "/b/k", &[("if-match", first.as_str())], "two")).await;
    assert_eq!(send(&s3, signed(&clock, Method::GET, "/b/k", &[], "")).await.body(), "one");
    let stale = send(&s3, signed(&clock, Method::PUT, "/b/k", &[("if-match", first.as_str())], "three")).await;
    assert_eq!(stale.status(), 412, "writes are judged on the latest state");
    clock.sleep_until(clock.now() + Duration::from_millis(1100)).await;
    assert_eq!(send(&s3, signed(&clock, Method::GET, "/b/k", &[], "")).await.body(), "two");
}

#[tokio::test(start_paused = true)]
async fn bare_etags_only_refuses_quoted_ones_and_ignores_bare_ones_is_the_reverse() {
    let (s3, clock) = fake(ProviderMode::BareEtagsOnly, Faults::none());
    let quoted = etag(&send(&s3, signed(&clock, Method::PUT, "/b/k", &[], "one")).await);
    let bare = quoted.trim_matches('"').to_owned();
    assert_eq!(
        send(&s3, signed(&clock, Method::PUT, "/b/k", &[("if-match", quoted.as_str())], "2")).await.status(),
        412
    );
    assert_eq!(send(&s3, signed(&clock, Method::PUT, "/b/k", &[("if-match", bare.as_str())], "3")).await.status(), 200);
    assert_eq!(send(&s3, signed(&clock, Method::PUT, "/b/k", &[("if-match", bare.as_str())], "4")).await.status(), 412);

    let (s3, clock) = fake(ProviderMode::IgnoresBareEtags, Faults::none());
    let quoted = etag(&send(&s3, signed(&clock, Method::PUT, "/b/k", &[], "one")).await);
    send(&s3, signed(&clock, Method::PUT, "/b/k", &[], "two")).await;
    let bare = quoted.trim_matches('"').to_owned();
    assert_eq!(
        send(&s3, signed(&clock, Method::PUT, "/b/k", &[("if-match", quoted.as_str())], "3")).await.status(),
        412
    );
    assert_eq!(send(&s3, signed(&clock, Method::PUT, "/b/k", &[("if-match", bare.as_str())], "4")).await.status(), 200);
    assert_eq!(send(&s3, signed(&clock, Method::GET, "/b/k", &[], "")).await.body(), "4", "the stale write won");
}

#[tokio::test(start_paused = true)]
async fn a_ranged_get_returns_that_part_with_the_objects_etag() {
    let (s3, clock) = fake(ProviderMode::Honest, Faults::none());
    let put = send(&s3, signed(&clock, Method::PUT, "/b/k", &[], "0123456789")).await;
    let part = send(&s3, signed(&clock, Method::GET, "/b/k", &[("range", "bytes=2-4")], "")).await;
    assert_eq!((part.status().as_u16(), part.body().clone()), (206, Bytes::from("234")));
    assert_eq!(part.headers()["content-range"], "bytes 2-4/10");
    assert_eq!(etag(&part), etag(&put));
    let tail = send(&s3, signed(&clock, Method::GET, "/b/k", &[("range", "bytes=8-99")], "")).await;
    assert_eq!(tail.body(), "89", "the last byte is clamped to the end");
    let odd = send(&s3, signed(&clock, Method::GET, "/b/k", &[("range", "lines=1-2")], "")).await;
    assert_eq!((odd.status().as_u16(), odd.body().len()), (200, 10), "a range S3 would not parse is ignored");
}
