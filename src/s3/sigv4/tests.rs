//! The signer and verifier against AWS's published examples and each other.

use super::*;

const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

fn example_time() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_369_353_600)
}

fn example_credentials() -> Credentials {
    Credentials::new("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
}

fn canonical_of(request: &Request<Vec<u8>>) -> String {
    let signed = signed_header_names(request.headers());
    let hash = hex(&Sha256::digest(request.body()));
    String::from_utf8(canonical_request(request.method().as_str(), request.uri(), request.headers(), &signed, &hash))
        .unwrap()
}

/// The canonical request of AWS's GET Object example, line by line as
/// the documentation prints it.
#[test]
fn canonical_request_of_the_get_object_example() {
    let mut request = Request::get("https://examplebucket.s3.amazonaws.com/test.txt")
        .header("range", "bytes=0-9")
        .body(Vec::new())
        .unwrap();
    sign(&mut request, &example_credentials(), "us-east-1", example_time()).unwrap();
    let expected = format!(
        "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n\
         x-amz-content-sha256:{EMPTY_SHA256}\nx-amz-date:20130524T000000Z\n\n\
         host;range;x-amz-content-sha256;x-amz-date\n{EMPTY_SHA256}"
    );
    assert_eq!(canonical_of(&request), expected);
    let scope = Scope { date: b"20130524", region: "us-east-1", service: SERVICE };
    assert_eq!(
        string_to_sign("20130524T000000Z", &scope, expected.as_bytes()),
        "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n\
         7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972"
    );
}

#[test]
fn debug_never_prints_the_secret_or_the_token() {
    let credentials = Credentials::new("AKID", "super-secret-key").with_session_token("tok3n");
    let signer = Signer::new(credentials.clone(), "us-east-1").unwrap();
    for printed in
        [format!("{credentials:?}"), format!("{credentials:#?}"), format!("{signer:?}"), format!("{signer:#?}")]
    {
        assert!(printed.contains("AKID"), "{printed}");
        assert!(!printed.contains("super-secret-key"), "{printed}");
        assert!(!printed.contains("tok3n"), "{printed}");
    }
}

#[test]
fn the_signer_and_the_function_agree_across_days() {
    let signer = Signer::new(example_credentials(), "us-east-1").unwrap();
    for day in 0..3 {
        let now = example_time() + Duration::from_secs(day * 86_400 + 7);
        let build = || Request::put("http://127.0.0.1:9000/b/k").body(b"x".to_vec()).unwrap();
        let (mut a, mut b) = (build(), build());
        signer.sign(&mut a, now).unwrap();
        sign(&mut b, &example_credentials(), "us-east-1", now).unwrap();
        assert_eq!(a.headers(), b.headers());
    }
}

#[test]
fn paths_are_encoded_once_and_never_normalised() {
    let path = |p: &str| {
        let mut out = Vec::new();
        canonical_path(p, &mut out);
        String::from_utf8(out).unwrap()
    };
    assert_eq!(path(""), "/");
    assert_eq!(path("/test$file.text"), "/test%24file.text");
    assert_eq!(path("/test%24file.text"), "/test%24file.text");
    assert_eq!(path("/a%2fb/%7e"), "/a%2Fb/~");
    assert_eq!(path("/./a/../b//c/"), "/./a/../b//c/");
    assert_eq!(path("/100%/%zz"), "/100%25/%25zz");
    assert_eq!(path("/a+b=c"), "/a%2Bb%3Dc");
    assert_eq!(path("/%C3%BC"), "/%C3%BC");
}

#[test]
fn queries_are_sorted_by_encoded_name_then_value() {
    let query = |q: &str| {
        let mut out = Vec::new();
        canonical_query(q, &mut out);
        String::from_utf8(out).unwrap()
    };
    assert_eq!(query(""), "");
    assert_eq!(query("lifecycle"), "lifecycle=");
    assert_eq!(query("prefix=J&max-keys=2"), "max-keys=2&prefix=J");
    assert_eq!(query("b=2&a=z&a=y&&"), "a=y&a=z&b=2");
    assert_eq!(query("p=a/b+c%2Bd"), "p=a%2Fb%20c%2Bd");
    assert_eq!(query("k=a=b"), "k=a%3Db");
}

#[test]
fn header_values_are_trimmed_and_joined() {
    let trimmed = |v: &[u8]| {
        let mut out = Vec::new();
        push_trimmed(v, &mut out);
        out
    };
    assert_eq!(trimmed(b"  a   b  c "), b"a b c");
    assert_eq!(trimmed(b"\ta\t"), b"\ta\t");
    assert_eq!(trimmed(b"   "), b"");

    let request = Request::get("http://h/k")
        .header("x-amz-meta-a", " one  two ")
        .header("x-amz-meta-a", "three")
        .body(Vec::new())
        .unwrap();
    assert!(canonical_of(&request).contains("\nx-amz-meta-a:one two,three\n"));
}

#[test]
fn host_comes_from_the_uri_without_a_default_port() {
    let host = |uri: &str| host_from_uri(&uri.parse().unwrap()).unwrap();
    assert_eq!(host("http://h:80/k"), "h");
    assert_eq!(host("https://h:443/k"), "h");
    assert_eq!(host("http://h:443/k"), "h:443");
    assert_eq!(host("http://127.0.0.1:8333/b"), "127.0.0.1:8333");
    let mut request = Request::get("/only-a-path").body(Vec::new()).unwrap();
    assert_eq!(sign(&mut request, &example_credentials(), "us-east-1", example_time()), Err(SignError::MissingHost));
    assert!(request.headers().is_empty(), "a failed sign leaves the request alone");
}

#[test]
fn times_round_trip_through_iso_8601() {
    for secs in [
        0u64,
        951_782_400,   // 2000-02-29
        1_369_353_600, // 2013-05-24
        4_107_542_399, // 2100-02-28T23:59:59
        253_402_300_799,
    ] {
        let time = UNIX_EPOCH + Duration::from_secs(secs);
        let amz = AmzTime::from_system_time(time).unwrap();
        assert_eq!(parse_amz_date(amz.date_time.as_bytes()), Some(time));
    }
    assert_eq!(
        AmzTime::from_system_time(UNIX_EPOCH + Duration::from_secs(951_782_400)).unwrap().date_time,
        "20000229T000000Z"
    );
    assert!(AmzTime::from_system_time(UNIX_EPOCH + Duration::from_secs(253_402_300_800)).is_err());
    for bad in [
        "20130229T000000Z",
        "21000229T000000Z",
        "20131301T000000Z",
        "20130524T240000Z",
        "20130524T000000",
        "2013-05-24T00:00",
        "1969123T235959Z",
        "20130524T235960Z",
        "+0130524T000000Z",
        "2013 524T000000Z",
    ] {
        assert_eq!(parse_amz_date(bad.as_bytes()), None, "{bad}");
    }
    assert!(parse_amz_date(b"20240229T120000Z").is_some());
}

#[test]
fn invalid_scope_parts_are_refused() {
    let bad_key = Credentials::new("AK/ID", "s");
    assert_eq!(Signer::new(bad_key, "us-east-1").unwrap_err(), SignError::InvalidAccessKeyId);
    assert!(matches!(Signer::new(Credentials::new("AK", "s"), "us east"), Err(SignError::InvalidRegion(_))));
    let mut request = Request::get("http://h/").body(Vec::new()).unwrap();
    let bad_token = Credentials::new("AK", "s").with_session_token("line\nbreak");
    assert_eq!(
        sign(&mut request, &bad_token, "us-east-1", example_time()),
        Err(SignError::InvalidHeaderValue { header: "x-amz-security-token" })
    );
}

#[test]
fn authorization_headers_parse_strictly() {
    let good = "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-date,Signature=fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024";
    let parsed = Authorization::parse(good.as_bytes()).unwrap();
    assert_eq!(parsed.access_key_id(), "AKIAIOSFODNN7EXAMPLE");
    assert_eq!(parsed.date(), "20130524");
    assert_eq!(parsed.region(), "us-east-1");
    assert_eq!(parsed.service(), "s3");
    assert_eq!(parsed.signed_headers(), ["host", "range", "x-amz-date"]);

    let sig = "Signature=fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024";
    let cases: &[(&str, AuthorizationError)] = &[
        ("AWS4-HMAC-SHA512 Credential=a", AuthorizationError::UnsupportedAlgorithm),
        ("AWS4-HMAC-SHA256", AuthorizationError::UnsupportedAlgorithm),
        ("", AuthorizationError::UnsupportedAlgorithm),
        ("AWS4-HMAC-SHA256 Credential", AuthorizationError::MalformedPart("Credential".into())),
        ("AWS4-HMAC-SHA256 Foo=bar", AuthorizationError::UnknownPart("Foo".into())),
        ("AWS4-HMAC-SHA256 Signature=a, Signature=b", AuthorizationError::DuplicatePart("Signature")),
        ("AWS4-HMAC-SHA256 SignedHeaders=host, Signature=ab", AuthorizationError::MissingPart("Credential")),
        (
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, Signature=ab",
            AuthorizationError::MissingPart("SignedHeaders"),
        ),
        (
            "AWS4-HMAC-SHA256 Credential=AK/2013052/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=ab",
            AuthorizationError::MalformedCredential,
        ),
        (
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request/x, SignedHeaders=host, Signature=ab",
            AuthorizationError::MalformedCredential,
        ),
        (
            "AWS4-HMAC-SHA256 Credential=/20130524/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=ab",
            AuthorizationError::MalformedCredential,
        ),
        (
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, SignedHeaders=range;host, Signature=ab",
            AuthorizationError::MalformedSignedHeaders,
        ),
        (
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, SignedHeaders=Host, Signature=ab",
            AuthorizationError::MalformedSignedHeaders,
        ),
        (
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;;range, Signature=ab",
            AuthorizationError::MalformedSignedHeaders,
        ),
        (
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=ab",
            AuthorizationError::MalformedSignature,
        ),
        (
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=FE5F80F77D5FA3BECA038A248FF027D0445342FE2855DDC963176630326F1024",
            AuthorizationError::MalformedSignature,
        ),
    ];
    for (header, expected) in cases {
        assert_eq!(Authorization::parse(header.as_bytes()).as_ref(), Err(expected), "{header}");
    }
    assert_eq!(
        Authorization::parse("AWS4-HMAC-SHA256 Credential=\u{e9}".as_bytes()),
        Err(AuthorizationError::NotAscii)
    );
    assert!(
        Authorization::parse(
            format!("AWS4-HMAC-SHA256 {sig}, SignedHeaders=host, Credential=A/20130524/r/s3/aws4_request").as_bytes()
        )
        .is_ok(),
        "parts may come in any order"
    );
}

fn signed_put(now: SystemTime) -> Request<Vec<u8>> {
    let mut request = Request::put("http://127.0.0.1:8333/bucket/a%20b/c+d?x-id=PutObject")
        .header("if-match", "\"0123\"")
        .header("content-type", "application/json")
        .header("user-agent", "hoplock-test")
        .body(b"{\"generation\":1}".to_vec())
        .unwrap();
    let credentials = Credentials::new("AK", "SK").with_session_token("TOKEN");
    sign(&mut request, &credentials, "us-east-1", now).unwrap();
    request
}

#[test]
fn verify_accepts_what_sign_produced() {
    let now = example_time();
    let request = signed_put(now);
    let auth = verify(&request, "SK", now + Duration::from_secs(60), MAX_CLOCK_SKEW).unwrap();
    assert_eq!(auth.access_key_id(), "AK");
    assert_eq!(
        auth.signed_headers(),
        ["content-type", "host", "if-match", "x-amz-content-sha256", "x-amz-date", "x-amz-security-token"]
    );
    // Headers outside the signed set can change freely.
    let mut changed = request;
    changed.headers_mut().insert("user-agent", HeaderValue::from_static("other"));
    changed.headers_mut().insert("content-length", HeaderValue::from_static("16"));
    verify(&changed, "SK", now, MAX_CLOCK_SKEW).unwrap();
}

#[test]
fn verify_rejects_tampering_with_typed_errors() {
    let now = example_time();
    let code = |request: &Request<Vec<u8>>, secret: &str, at: SystemTime| {
        verify(request, secret, at, MAX_CLOCK_SKEW).unwrap_err().s3_code()
    };
    let request = signed_put(now);
    assert_eq!(code(&request, "WRONG", now), "SignatureDoesNotMatch");
    assert_eq!(code(&request, "SK", now + Duration::from_secs(16 * 60)), "RequestTimeTooSkewed");
    assert_eq!(code(&request, "SK", now - Duration::from_secs(16 * 60)), "RequestTimeTooSkewed");

    let mut r = signed_put(now);
    r.headers_mut().insert("if-match", HeaderValue::from_static("\"4567\""));
    assert_eq!(code(&r, "SK", now), "SignatureDoesNotMatch");

    let mut r = signed_put(now);
    *r.uri_mut() = "http://127.0.0.1:8333/bucket/a%20b/c+e?x-id=PutObject".parse().unwrap();
    assert_eq!(code(&r, "SK", now), "SignatureDoesNotMatch");

    let mut r = signed_put(now);
    r.body_mut().push(b' ');
    assert_eq!(code(&r, "SK", now), "XAmzContentSHA256Mismatch");

    let mut r = signed_put(now);
    r.headers_mut().insert("x-amz-meta-extra", HeaderValue::from_static("1"));
    assert_eq!(verify(&r, "SK", now, MAX_CLOCK_SKEW), Err(VerifyError::HeaderNotSigned("x-amz-meta-extra".into())));

    let mut r = signed_put(now);
    r.headers_mut().remove("if-match");
    assert_eq!(verify(&r, "SK", now, MAX_CLOCK_SKEW), Err(VerifyError::SignedHeaderMissing("if-match".into())));

    let mut r = signed_put(now);
    r.headers_mut().remove("authorization");
    assert_eq!(verify(&r, "SK", now, MAX_CLOCK_SKEW), Err(VerifyError::MissingAuthorization));

    let mut r = signed_put(now);
    r.headers_mut().insert("x-amz-date", HeaderValue::from_static("20130525T000000Z"));
    assert_eq!(verify(&r, "SK", now, Duration::from_secs(86_400)), Err(VerifyError::ScopeDateMismatch));

    let mut r = signed_put(now);
    r.headers_mut().insert("x-amz-date", HeaderValue::from_static("yesterday"));
    assert_eq!(verify(&r, "SK", now, MAX_CLOCK_SKEW), Err(VerifyError::InvalidDate));

    let mut r = signed_put(now);
    r.headers_mut().insert("x-amz-content-sha256", HeaderValue::from_static("STREAMING-AWS4-HMAC-SHA256-PAYLOAD"));
    assert_eq!(verify(&r, "SK", now, MAX_CLOCK_SKEW), Err(VerifyError::UnsupportedContentSha256));

    let mut r = signed_put(now);
    let auth = r.headers()["authorization"].to_str().unwrap().replace("/s3/", "/sts/");
    r.headers_mut().insert("authorization", HeaderValue::from_str(&auth).unwrap());
    assert_eq!(verify(&r, "SK", now, MAX_CLOCK_SKEW), Err(VerifyError::WrongService("sts".into())));
}

#[test]
fn verify_accepts_unsigned_payload() {
    // A client that sends UNSIGNED-PAYLOAD signs that literal instead of
    // the body's hash; build one by hand from the signer's pieces.
    let now = example_time();
    let mut request = Request::put("http://h/b/k")
        .header("x-amz-content-sha256", UNSIGNED_PAYLOAD)
        .header("x-amz-date", "20130524T000000Z")
        .header("host", "h")
        .body(b"body".to_vec())
        .unwrap();
    let signed = signed_header_names(request.headers());
    let canonical = canonical_request("PUT", request.uri(), request.headers(), &signed, UNSIGNED_PAYLOAD);
    let scope = Scope { date: b"20130524", region: "r", service: SERVICE };
    let key = derive_signing_key("SK", b"20130524", "r", SERVICE);
    let signature = hex(&hmac(&key, string_to_sign("20130524T000000Z", &scope, &canonical).as_bytes()));
    let authorization = format!(
        "{ALGORITHM} Credential=AK/20130524/r/s3/aws4_request, SignedHeaders={}, Signature={signature}",
        signed.join(";")
    );
    request.headers_mut().insert(AUTHORIZATION, HeaderValue::from_str(&authorization).unwrap());
    verify(&request, "SK", now, MAX_CLOCK_SKEW).unwrap();
}

#[test]
fn a_verifier_checks_each_day_and_region_with_its_own_key() {
    // The verifier keeps one derived key; a request of another day or
    // region must get that day's and region's key, not the cached one.
    let verifier = Verifier::new("SK");
    let credentials = Credentials::new("AK", "SK");
    let day = Duration::from_secs(86_400);
    for (offset, region) in
        [(Duration::ZERO, "us-east-1"), (day, "us-east-1"), (day, "eu-west-1"), (2 * day, "eu-west-1")]
    {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000) + offset;
        let mut request = Request::get("http://127.0.0.1:9000/bucket/key").body(Vec::new()).unwrap();
        sign(&mut request, &credentials, region, now).unwrap();
        assert_eq!(verifier.verify(&request, now, MAX_CLOCK_SKEW), verify(&request, "SK", now, MAX_CLOCK_SKEW));
        assert!(verifier.verify(&request, now, MAX_CLOCK_SKEW).is_ok(), "{region} on day {offset:?}");
        let mut forged = Request::get("http://127.0.0.1:9000/bucket/key").body(Vec::new()).unwrap();
        sign(&mut forged, &Credentials::new("AK", "not the secret"), region, now).unwrap();
        let err = verifier.verify(&forged, now, MAX_CLOCK_SKEW).unwrap_err();
        assert_eq!(err.s3_code(), "SignatureDoesNotMatch", "a cached key must not pass a forged signature");
    }
}
