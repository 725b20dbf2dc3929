//! The S3 backend against a stub transport: requests, error mapping, ETag forms and read-backs.

use std::sync::Arc;

use super::*;
use crate::backend::Backend;
use crate::entropy::SeededEntropy;
use crate::s3::credentials::CredentialSource;
use crate::s3::sigv4::Credentials;
use crate::testing::conformance::sample_record;
use crate::testing::stub_transport::StubTransport;

fn config() -> S3Config {
    let mut config = S3Config::new("bucket", "leases/a b.json");
    config.endpoint = Some("http://127.0.0.1:9".into());
    config.addressing = Addressing::PathStyle;
    config.credentials = CredentialSource::Explicit(Credentials::new("AK", "SECRET-xyz"));
    config
}

fn reply(status: u16, code: &str) -> Result<Response<Bytes>, TransportError> {
    let body = if code.is_empty() {
        String::new()
    } else {
        format!("<?xml version=\"1.0\"?><Error><Code>{code}</Code><Message>m</Message></Error>")
    };
    Ok(Response::builder().status(status).body(Bytes::from(body)).unwrap())
}

fn backend(stub: &StubTransport) -> S3Backend {
    S3Backend::with_parts(
        config(),
        Arc::new(stub.clone()),
        Arc::new(SystemClock::new()),
        Arc::new(SeededEntropy::new(1)),
    )
    .unwrap()
}

#[tokio::test]
async fn statuses_map_to_what_the_caller_should_do() {
    type Expect = fn(&BackendError) -> bool;
    let cases: [(u16, &str, Expect); 10] = [
        (412, "PreconditionFailed", |e| matches!(e, BackendError::LeaseHeld)),
        (304, "", |e| matches!(e, BackendError::LeaseHeld)),
        (404, "NoSuchKey", |e| matches!(e, BackendError::NoLease)),
        (404, "NoSuchBucket", |e| matches!(e, BackendError::Config(m) if m.contains("bucket"))),
        (409, "ConditionalRequestConflict", |e| matches!(e, BackendError::Conflict(_))),
        (409, "OperationAborted", |e| matches!(e, BackendError::Conflict(_))),
        (501, "NotImplemented", |e| matches!(e, BackendError::Unsupported(m) if m.contains("conditional"))),
        (400, "NotImplemented", |e| matches!(e, BackendError::Unsupported(_))),
        (503, "SlowDown", |e| matches!(e, BackendError::Ambiguous(_))),
        (403, "SignatureDoesNotMatch", |e| matches!(e, BackendError::Config(m) if m.contains("secret access key"))),
    ];
    for (status, code, expected) in cases {
        let stub = StubTransport::new(move |_| reply(status, code));
        let err = backend(&stub).write(None, &sample_record(1, "x")).await.unwrap_err();
        assert!(expected(&err), "{status} {code}: {err:?}");
    }
}

#[tokio::test]
async fn a_skewed_clock_is_reported_ahead_or_behind_as_it_is() {
    // HTTP dates carry whole seconds, so the figure may be off by one.
    for (server_offset_secs, expected) in [(-1200i64, " s ahead of"), (1200, " s behind")] {
        let stub = StubTransport::new(move |_| {
            #[allow(clippy::disallowed_methods)] // The stub server's own clock.
            let now = SystemTime::now();
            let server = if server_offset_secs < 0 {
                now - Duration::from_secs(server_offset_secs.unsigned_abs())
            } else {
                now + Duration::from_secs(server_offset_secs.unsigned_abs())
            };
            let mut response = reply(403, "RequestTimeTooSkewed")?;
            let date = super::super::xml::format_http_date(server);
            response.headers_mut().insert(http::header::DATE, date.parse().unwrap());
            Ok(response)
        });
        let err = backend(&stub).write(None, &sample_record(1, "x")).await.unwrap_err();
        let BackendError::Config(message) = &err else { panic!("{err:?}") };
        let (before, _) = message.split_once(expected).unwrap_or_else(|| panic!("{expected}: {message}"));
        let secs: u64 = before.rsplit(' ').next().unwrap().parse().unwrap();
        assert!((1199..=1201).contains(&secs), "{message}");
    }
}

#[tokio::test]
async fn a_provider_that_refuses_conditional_headers_is_unsupported_and_loud() {
    let stub = StubTransport::new(|request| {
        if request.headers().contains_key("if-none-match") || request.headers().contains_key("if-match") {
            reply(501, "NotImplemented")
        } else {
            reply(404, "NoSuchKey")
        }
    });
    let store = backend(&stub);
    assert!(matches!(store.read().await, Err(BackendError::NoLease)));
    let err = store.write(None, &sample_record(1, "x")).await.unwrap_err();
    assert!(err.is_fatal());
    assert!(err.to_string().contains("cannot do conditional writes"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn writes_are_never_retried_and_reads_are() {
    let stub = StubTransport::new(|_| reply(500, "InternalError"));
    let store = backend(&stub);
    assert!(matches!(store.write(None, &sample_record(1, "x")).await, Err(BackendError::Ambiguous(_))));
    assert_eq!(stub.requests().len(), 1);
    assert!(matches!(store.read().await, Err(BackendError::Transient(_))));
    assert!(stub.requests().len() > 2, "{} requests", stub.requests().len());
}

#[tokio::test]
async fn requests_are_conditional_signed_and_path_encoded() {
    let stub = StubTransport::new(|_| {
        Ok(Response::builder().status(200).header("etag", "\"abc\"").body(Bytes::new()).unwrap())
    });
    let store = backend(&stub);
    let version = store.write(None, &sample_record(1, "x")).await.unwrap();
    store.write(Some(&version), &sample_record(1, "y")).await.unwrap();
    store.delete(&version).await.unwrap();
    let requests = stub.requests();
    assert_eq!(requests[0].uri().to_string(), "http://127.0.0.1:9/bucket/leases/a%20b.json");
    assert_eq!(requests[0].headers()["if-none-match"], "*");
    assert_eq!(requests[1].headers()["if-match"], "\"abc\"");
    assert_eq!(requests[2].method(), Method::DELETE);
    assert_eq!(requests[2].headers()["if-match"], "\"abc\"");
    for request in &requests {
        let authorization = request.headers()["authorization"].to_str().unwrap();
        assert!(authorization.starts_with("AWS4-HMAC-SHA256 Credential=AK/"));
        assert!(!authorization.contains("SECRET"));
        assert!(request.headers().contains_key("x-amz-content-sha256"));
    }
}

#[tokio::test]
async fn extra_headers_go_on_every_request_and_reserved_names_are_refused() {
    let stub = StubTransport::new(|_| {
        Ok(Response::builder().status(200).header("etag", "\"abc\"").body(Bytes::new()).unwrap())
    });
    let mut with_header = config();
    with_header.extra_headers = vec![("X-Tigris-Consistent".into(), "true".into())];
    let store = S3Backend::with_parts(
        with_header,
        Arc::new(stub.clone()),
        Arc::new(SystemClock::new()),
        Arc::new(SeededEntropy::new(1)),
    )
    .unwrap();
    let version = store.write(None, &sample_record(1, "x")).await.unwrap();
    store.read().await.unwrap_err();
    store.delete(&version).await.unwrap();
    store.request(Method::HEAD, &[], Bytes::new()).await.unwrap();
    for request in stub.requests() {
        assert_eq!(request.headers()["x-tigris-consistent"], "true", "{} {}", request.method(), request.uri());
    }
    for (name, value) in
        [("Authorization", "x"), ("If-Match", "*"), ("x-amz-date", "1"), ("bad name", "x"), ("X-Ok", "a\nb")]
    {
        let mut bad = config();
        bad.extra_headers = vec![(name.into(), value.into())];
        let err = S3Backend::new(bad).unwrap_err();
        assert!(matches!(&err, BackendError::Config(m) if m.contains("header")), "{name}: {err:?}");
    }
    let mut secret = config();
    secret.extra_headers = vec![("X-Token".into(), "hush-hush".into())];
    assert!(!format!("{secret:?}").contains("hush-hush"), "header values are not printed");
}

#[tokio::test]
async fn a_success_without_an_etag_and_a_foreign_object_are_errors() {
    let stub = StubTransport::new(|_| Ok(Response::builder().status(200).body(Bytes::from("<html/>")).unwrap()));
    let store = backend(&stub);
    assert!(matches!(store.write(None, &sample_record(1, "x")).await, Err(BackendError::Unsupported(_))));
    let stub = StubTransport::new(|_| {
        Ok(Response::builder().status(200).header("etag", "\"e\"").body(Bytes::from("<html/>")).unwrap())
    });
    assert!(matches!(backend(&stub).read().await, Err(BackendError::Corrupt { .. })));
}

#[tokio::test]
async fn an_object_too_large_to_read_back_is_refused_before_it_is_sent() {
    let stub = StubTransport::new(|_| reply(200, ""));
    let store = backend(&stub);
    let err = store.write_object(None, vec![0; MAX_RESPONSE_BYTES + 1]).await.unwrap_err();
    assert!(matches!(&err, BackendError::Config(message) if message.contains("larger than")), "{err}");
    assert!(stub.requests().is_empty());
}

#[tokio::test]
async fn bare_etags_are_sent_bare_when_asked() {
    let stub = StubTransport::new(|_| reply(412, "PreconditionFailed"));
    let mut config = config();
    config.etag_style = EtagStyle::Bare;
    let store =
        S3Backend::with_parts(config, Arc::new(stub.clone()), Arc::new(SystemClock::new()), Arc::new(OsEntropy))
            .unwrap();
    let _ = store.write(Some(&Version::new("\"abc\"")), &sample_record(1, "x")).await;
    assert_eq!(stub.requests()[0].headers()["if-match"], "abc");
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_endpoint_is_transient_for_reads() {
    let stub = StubTransport::new(|_| Err(TransportError::new(TransportErrorKind::Connect, "connection refused")));
    let err = backend(&stub).read().await.unwrap_err();
    assert!(matches!(&err, BackendError::Transient(m) if m.contains("cannot reach")), "{err:?}");
    let err = backend(&stub).write(None, &sample_record(1, "x")).await.unwrap_err();
    assert!(matches!(err, BackendError::Transient(_)), "nothing was sent, so nothing happened");
}

#[tokio::test(start_paused = true)]
async fn throttling_and_timeouts_are_retried_and_only_a_5xx_write_is_ambiguous() {
    type Expect = fn(&BackendError) -> bool;
    let transient: Expect = |e| matches!(e, BackendError::Transient(_));
    let ambiguous: Expect = |e| matches!(e, BackendError::Ambiguous(_));
    // (status, code, what a read gets, what a write gets)
    let cases: [(u16, &str, Expect, Expect); 9] = [
        (429, "TooManyRequests", transient, transient),
        (408, "", transient, transient),
        (400, "RequestTimeout", transient, transient),
        (400, "Throttling", transient, transient),
        (400, "InvalidArgument", transient, transient),
        (503, "SlowDown", transient, ambiguous),
        (503, "ServiceUnavailable", transient, ambiguous),
        (500, "InternalError", transient, ambiguous),
        (302, "", transient, ambiguous),
    ];
    for (status, code, on_read, on_write) in cases {
        let stub = StubTransport::new(move |_| reply(status, code));
        let store = backend(&stub);
        let err = store.read().await.unwrap_err();
        assert!(on_read(&err) && !err.is_fatal(), "read {status} {code}: {err:?}");
        let err = store.write(None, &sample_record(1, "x")).await.unwrap_err();
        assert!(on_write(&err) && !err.is_fatal(), "write {status} {code}: {err:?}");
    }
}

#[tokio::test]
async fn an_expired_token_is_fatal_only_for_keys_that_cannot_be_refreshed() {
    let stub = StubTransport::new(|_| reply(400, "ExpiredToken"));
    let err = backend(&stub).write(None, &sample_record(1, "x")).await.unwrap_err();
    assert!(matches!(&err, BackendError::Config(m) if m.contains("cannot be refreshed")), "{err:?}");
    let stub = StubTransport::new(|request| {
        if request.uri().host() == Some("creds.test") {
            let body =
                r#"{"AccessKeyId":"ASIA","SecretAccessKey":"S","Token":"T","Expiration":"2999-01-01T00:00:00Z"}"#;
            return Ok(Response::builder().status(200).body(Bytes::from(body)).unwrap());
        }
        reply(403, "ExpiredToken")
    });
    let provider = super::super::credentials::providers::Provider::Container {
        url: "http://creds.test/v2".into(),
        token: None,
        token_file: None,
    };
    let store = S3Backend::with_provider(
        config(),
        provider,
        Arc::new(stub.clone()),
        Arc::new(SystemClock::new()),
        Arc::new(OsEntropy),
    )
    .unwrap();
    let err = store.read().await.unwrap_err();
    assert!(matches!(&err, BackendError::Transient(m) if m.contains("refreshed")), "{err:?}");
    let err = store.write(None, &sample_record(1, "x")).await.unwrap_err();
    assert!(matches!(err, BackendError::Transient(_)), "a refused write changed nothing: {err:?}");
    let signed = stub.requests().into_iter().find(|r| r.uri().host() != Some("creds.test")).unwrap();
    assert_eq!(signed.headers()["x-amz-security-token"], "T");
}

/// One S3 object behind a stub transport, answering GET and conditional
/// PUT as S3 does. `deny_missing` makes a GET of the missing key a 403,
/// as S3 answers a caller without s3:ListBucket; `deny_reads` makes every
/// GET a 403. `faults` are answered first, one per request.
#[derive(Clone, Default)]
struct OneObject {
    object: Arc<std::sync::Mutex<Option<(String, Bytes)>>>,
    writes: Arc<std::sync::atomic::AtomicU64>,
    faults: Arc<std::sync::Mutex<std::collections::VecDeque<(u16, &'static str)>>>,
    deny_missing: bool,
    deny_reads: Arc<AtomicBool>,
}

impl OneObject {
    fn transport(&self) -> StubTransport {
        let this = self.clone();
        StubTransport::new(move |request| this.answer(request))
    }

    fn answer(&self, request: &http::Request<Bytes>) -> Result<Response<Bytes>, TransportError> {
        if let Some((status, code)) = self.faults.lock().unwrap().pop_front() {
            return reply(status, code);
        }
        let mut object = self.object.lock().unwrap();
        let header = |name: &str| request.headers().get(name).map(|v| v.to_str().unwrap().to_string());
        match *request.method() {
            Method::GET => match &*object {
                _ if self.deny_reads.load(Ordering::Relaxed) => reply(403, "AccessDenied"),
                None if self.deny_missing => reply(403, "AccessDenied"),
                None => reply(404, "NoSuchKey"),
                Some((etag, body)) => {
                    Ok(Response::builder().status(200).header("etag", etag.as_str()).body(body.clone()).unwrap())
                }
            },
            Method::PUT => {
                let allowed = match (header("if-none-match"), header("if-match"), &*object) {
                    (Some(_), _, None) => true,
                    (None, Some(wanted), Some((etag, _))) => wanted == *etag,
                    _ => false,
                };
                if !allowed {
                    return reply(if object.is_none() && header("if-match").is_some() { 404 } else { 412 }, "x");
                }
                let etag = format!("\"{}\"", self.writes.fetch_add(1, Ordering::Relaxed));
                *object = Some((etag.clone(), request.body().clone()));
                Ok(Response::builder().status(200).header("etag", etag.as_str()).body(Bytes::new()).unwrap())
            }
            _ => reply(405, "MethodNotAllowed"),
        }
    }
}

#[tokio::test]
async fn a_missing_key_read_as_403_is_settled_by_the_conditional_create() {
    // GetObject and PutObject only: the missing key reads as 403, and
    // the create proves it missing.
    let s3 = OneObject { deny_missing: true, ..OneObject::default() };
    let store = backend(&s3.transport());
    assert_eq!(store.read().await, Err(BackendError::NoLease));
    store.write(None, &sample_record(1, "x")).await.unwrap();
    assert_eq!(store.read().await.unwrap().record, sample_record(1, "x"));

    // Another elector created the key between our 403 and our create:
    // an ordinary lost race, not a configuration error.
    let s3 = OneObject { deny_missing: true, ..OneObject::default() };
    let store = backend(&s3.transport());
    assert_eq!(store.read().await, Err(BackendError::NoLease));
    backend(&s3.transport()).write(None, &sample_record(1, "other")).await.unwrap();
    assert_eq!(store.write(None, &sample_record(1, "x")).await, Err(BackendError::LeaseHeld));

    // The key exists and reading it is denied: no campaign can work.
    let s3 = OneObject::default();
    backend(&s3.transport()).write(None, &sample_record(1, "other")).await.unwrap();
    s3.deny_reads.store(true, Ordering::Relaxed);
    let store = backend(&s3.transport());
    assert_eq!(store.read().await, Err(BackendError::NoLease));
    let err = store.write(None, &sample_record(1, "x")).await.unwrap_err();
    assert!(matches!(&err, BackendError::Config(m) if m.contains("s3:GetObject")), "{err:?}");
}

#[tokio::test(start_paused = true)]
async fn under_the_documented_policy_the_first_campaign_on_a_fresh_key_leads() {
    let s3 = OneObject { deny_missing: true, ..OneObject::default() };
    let elector = crate::Elector::builder(backend(&s3.transport())).owner("a").build().unwrap();
    let term = tokio::time::timeout(
        Duration::from_secs(30),
        elector.lead(|ctx, lease| async move {
            drop(ctx);
            lease.generation
        }),
    )
    .await
    .expect("elected within 30 s")
    .unwrap();
    assert_eq!((term.output, term.generation), (crate::Generation(1), crate::Generation(1)));
}

#[tokio::test(start_paused = true)]
async fn a_throttling_burst_neither_ends_a_term_nor_a_campaign() {
    use crate::elector::Event;
    let s3 = OneObject::default();
    let ttl = Duration::from_secs(9);
    // A contender throttled while it campaigns keeps campaigning.
    s3.faults.lock().unwrap().extend([(429, "TooManyRequests"), (503, "SlowDown"), (400, "Throttling")]);
    let elector = crate::Elector::builder(backend(&s3.transport())).owner("a").ttl(ttl).build().unwrap();
    let mut events = elector.run();
    let generation = loop {
        match tokio::time::timeout(Duration::from_secs(60), events.next()).await.expect("elected").unwrap() {
            Event::Acquired { lease, .. } => break lease.generation,
            Event::Lost { .. } => panic!("lost before it led"),
            _ => {}
        }
    };
    // A burst of throttling answers across several renewals does not
    // end the term: each renewal is retried until the term's deadline.
    s3.faults.lock().unwrap().extend([(429, "TooManyRequests"), (503, "SlowDown"), (400, "Throttling"), (429, "")]);
    let watch = tokio::time::sleep(ttl * 3);
    tokio::pin!(watch);
    let mut renewed = 0;
    loop {
        tokio::select! {
            () = &mut watch => break,
            event = events.next() => match event.unwrap() {
                Event::Lost { reason, .. } => panic!("the term ended in a throttling burst: {reason:?}"),
                Event::Renewed { generation: g } => {
                    assert_eq!(g, generation);
                    renewed += 1;
                }
                _ => {}
            },
        }
    }
    assert!(s3.faults.lock().unwrap().is_empty(), "the burst was served");
    assert!(renewed >= 3, "renewed {renewed} times");
    assert!(elector.is_leader());
    elector.stop();
}

#[tokio::test(start_paused = true)]
async fn keys_are_refreshed_in_the_background_and_a_term_never_notices() {
    use std::collections::BTreeMap;

    use crate::clock::DriftingClock;
    use crate::elector::Event;
    let clock = Arc::new(DriftingClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_900_000_000), 0));
    let s3 = OneObject::default();
    // Key id -> expiry, for every set of keys handed out; and for every
    // S3 request, the key id and the time it was signed at.
    let issued: Arc<std::sync::Mutex<BTreeMap<String, SystemTime>>> = Arc::default();
    let used: Arc<std::sync::Mutex<Vec<(String, SystemTime)>>> = Arc::default();
    let stub = {
        let (s3, issued, used, clock) = (s3.clone(), issued.clone(), used.clone(), clock.clone());
        StubTransport::new(move |request| {
            if request.uri().host() == Some("creds.test") {
                let mut issued = issued.lock().unwrap();
                let id = format!("ASIA{}", issued.len());
                let expires = clock.wall() + Duration::from_secs(120);
                issued.insert(id.clone(), expires);
                let body = format!(
                    r#"{{"AccessKeyId":"{id}","SecretAccessKey":"S","Token":"T","Expiration":"{}"}}"#,
                    crate::rfc3339::format(expires)
                );
                return Ok(Response::builder().status(200).body(Bytes::from(body)).unwrap());
            }
            let authorization = request.headers()["authorization"].to_str().unwrap();
            let id = authorization.split("Credential=").nth(1).unwrap().split('/').next().unwrap().to_string();
            used.lock().unwrap().push((id, clock.wall()));
            s3.answer(request)
        })
    };
    let provider = super::super::credentials::providers::Provider::Container {
        url: "http://creds.test/v2".into(),
        token: None,
        token_file: None,
    };
    let store =
        S3Backend::with_provider(config(), provider, Arc::new(stub), clock.clone(), Arc::new(OsEntropy)).unwrap();
    let elector =
        crate::Elector::builder(store).owner("a").ttl(Duration::from_secs(9)).clock(clock.clone()).build().unwrap();
    let mut events = elector.run();
    let watch = tokio::time::sleep(Duration::from_secs(600));
    tokio::pin!(watch);
    let (mut acquired, mut renewed) = (0, 0);
    loop {
        tokio::select! {
            () = &mut watch => break,
            event = events.next() => match event.unwrap() {
                Event::Acquired { .. } => acquired += 1,
                Event::Renewed { .. } => renewed += 1,
                Event::Lost { reason, .. } => panic!("the term ended: {reason:?}"),
                Event::Error { error } => panic!("a request failed: {error}"),
            },
        }
    }
    elector.stop();
    let issued = issued.lock().unwrap().clone();
    let used = used.lock().unwrap().clone();
    // Keys that live two minutes are replaced after one, so ten
    // minutes see about ten sets, and the term went on throughout.
    assert_eq!(acquired, 1);
    assert!(renewed > 100, "renewed {renewed} times");
    assert!((9..=12).contains(&issued.len()), "{} sets of keys", issued.len());
    let distinct: std::collections::BTreeSet<&String> = used.iter().map(|(id, _)| id).collect();
    assert!(distinct.len() >= 9, "S3 requests used {} sets of keys", distinct.len());
    for (id, at) in &used {
        assert!(*at < issued[id], "{id} was used after it expired");
    }
}

#[test]
fn bad_configuration_is_refused_with_reasons() {
    let mut bad = config();
    bad.endpoint = Some("ftp://example".into());
    assert!(S3Backend::new(bad).unwrap_err().to_string().contains("https://"));
    let mut bad = config();
    bad.bucket = String::new();
    assert!(S3Backend::new(bad).unwrap_err().to_string().contains("bucket"));
    for key in ["", "a/../b", "./a", "a//b", "/a"] {
        let mut bad = config();
        bad.key = key.into();
        assert!(S3Backend::new(bad).unwrap_err().to_string().contains("key"), "{key}");
    }
    let debug = format!("{:?}", config());
    assert!(!debug.contains("SECRET-xyz"), "{debug}");
}
