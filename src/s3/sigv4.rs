//! AWS Signature Version 4 for S3: signing outgoing requests and verifying
//! incoming ones.
//!
//! The S3 backend signs every request it sends with [`Signer::sign`] (or the
//! one-shot [`sign`]); a fake S3 server checks what it receives with
//! [`verify`]. Both sides build the canonical request with the same code, so
//! a rule that is wrong here is wrong in both places: that is why the signer
//! is also tested against AWS's published examples and, differentially,
//! against the `aws-sigv4` crate.
//!
//! # The S3 rules this module follows
//!
//! - **Payload.** `x-amz-content-sha256` carries the hex SHA-256 of the body
//!   on every request, including a GET or DELETE with an empty body. S3
//!   requires the header, and signing the real hash (rather than
//!   `UNSIGNED-PAYLOAD`) means a body altered in flight fails the check.
//! - **Path.** Each path segment is URI-encoded exactly once: the unreserved
//!   characters `A-Z a-z 0-9 - _ . ~` stay as they are, every other byte
//!   becomes `%XX` with upper-case hex, and the `/` between segments stays.
//!   An escape already in the request URI (`%24`) is decoded first, so a key
//!   sent raw (`$`) and one sent escaped (`%24`) sign the same. The path is
//!   never normalised: S3 keys may contain `.`, `..` and `//`.
//! - **Query.** Parameters are sorted by encoded name, then encoded value;
//!   names and values are encoded like a path segment, with `/` encoded too.
//!   A parameter without `=` (`?lifecycle`) has the empty value. A `+` in the
//!   query means a space, as in HTML forms and as S3 decodes it.
//! - **Headers.** Only a fixed set is signed: `host`, `date`, `content-type`,
//!   `content-md5`, `if-match`, `if-none-match`, `range` and every `x-amz-*`
//!   header present. Headers an HTTP client or proxy may add or rewrite
//!   (`user-agent`, `content-length`, `accept-encoding`, ...) are left out,
//!   so the signature survives them. Values are trimmed of spaces, runs of
//!   spaces collapse to one, and repeated headers join with `,`.
//!
//! # Time
//!
//! The caller passes the signing time in. The library never reads the
//! system clock, so the simulator can sign with simulated time and tests can
//! sign with the fixed dates of AWS's examples.

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, KeyInit, Mac};
use http::header::{AUTHORIZATION, HOST};
use http::{HeaderMap, HeaderName, HeaderValue, Request, Uri};
use sha2::{Digest, Sha256};

/// The algorithm name that opens the `Authorization` header and the string
/// to sign.
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// The service name in the credential scope. This module signs for S3 only.
pub const SERVICE: &str = "s3";

/// The `x-amz-content-sha256` value of a request whose body is not signed.
/// The signer never sends it; the verifier accepts it.
pub const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";

/// How far a request's `x-amz-date` may be from the verifier's clock before
/// S3 answers `403 RequestTimeTooSkewed`.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(15 * 60);

const X_AMZ_DATE: &str = "x-amz-date";
const X_AMZ_CONTENT_SHA256: &str = "x-amz-content-sha256";
const X_AMZ_SECURITY_TOKEN: &str = "x-amz-security-token";

/// Headers signed whenever they are present, besides `host` and `x-amz-*`.
/// `date` is here because AWS's own PUT example signs it.
const SIGNED_STANDARD_HEADERS: [&str; 6] =
    ["content-md5", "content-type", "date", "if-match", "if-none-match", "range"];

type HmacSha256 = Hmac<Sha256>;

/// An access key pair, with the session token that temporary credentials
/// carry.
///
/// `Debug` prints only the access key id, so credentials can sit in structs
/// that are logged without leaking the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The public half, e.g. `AKIAIOSFODNN7EXAMPLE`. It travels in every
    /// `Authorization` header.
    pub access_key_id: String,
    /// The secret half. It never leaves the process: only HMACs derived from
    /// it do.
    pub secret_access_key: String,
    /// The token of temporary (STS) credentials, sent and signed as
    /// `x-amz-security-token`.
    pub session_token: Option<String>,
}

impl Credentials {
    /// Long-term credentials, without a session token.
    pub fn new(access_key_id: impl Into<String>, secret_access_key: impl Into<String>) -> Self {
        Self { access_key_id: access_key_id.into(), secret_access_key: secret_access_key.into(), session_token: None }
    }

    /// The same credentials with a session token.
    #[must_use]
    pub fn with_session_token(mut self, session_token: impl Into<String>) -> Self {
        self.session_token = Some(session_token.into());
        self
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field("session_token", &self.session_token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Why a request could not be signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    /// The request has no `Host` header and its URI names no host, so there
    /// is nothing to sign as `host`.
    #[error("the request has no Host header and its URI has no host")]
    MissingHost,
    /// The signing time is before 1970 or after 9999, which the basic ISO
    /// 8601 format of `x-amz-date` cannot express.
    #[error("the signing time is outside the years 1970 to 9999")]
    TimeOutOfRange,
    /// The access key id is empty or holds a character (`/`, `,`, a space, a
    /// control character) that would break the `Credential=` field.
    #[error("the access key id is empty or contains a character not allowed in a credential scope")]
    InvalidAccessKeyId,
    /// The region is empty or holds a character other than ASCII letters,
    /// digits, `-` and `_`.
    #[error("the region {0:?} is empty or contains a character not allowed in a credential scope")]
    InvalidRegion(String),
    /// A value the signer writes into a header (the session token, say) is
    /// not a valid HTTP header value.
    #[error("the value for the {header} header is not a valid HTTP header value")]
    InvalidHeaderValue {
        /// The header the value was meant for.
        header: &'static str,
    },
}

/// Signs requests for one set of credentials in one region, caching the
/// signing key.
///
/// The signing key depends only on the secret, the date and the region, so
/// it changes once a day: deriving it costs four HMACs, which the cache saves
/// on every request but the first of each day.
pub struct Signer {
    credentials: Credentials,
    region: String,
    /// The signing key of the most recent date signed for.
    key_cache: Mutex<Option<CachedKey>>,
}

#[derive(Clone, Copy)]
struct CachedKey {
    date: [u8; 8],
    key: [u8; 32],
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer")
            .field("credentials", &self.credentials)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// A signer for `credentials` in `region` (e.g. `us-east-1`).
    ///
    /// Fails if the access key id or the region could not be written into a
    /// credential scope, so that a bad configuration shows up once, here,
    /// rather than as a 403 on every request.
    pub fn new(credentials: Credentials, region: impl Into<String>) -> Result<Self, SignError> {
        let region = region.into();
        validate_scope_parts(&credentials.access_key_id, &region)?;
        Ok(Self { credentials, region, key_cache: Mutex::new(None) })
    }

    /// The credentials this signer signs with.
    pub fn credentials(&self) -> &Credentials {
        &self.credentials
    }

    /// The region in this signer's credential scope.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// Signs `request` as of `now`; see [`sign`] for what it adds.
    pub fn sign<B: AsRef<[u8]>>(&self, request: &mut Request<B>, now: SystemTime) -> Result<(), SignError> {
        let time = AmzTime::from_system_time(now)?;
        let key = self.signing_key(&time.date);
        sign_with_key(request, &self.credentials, &self.region, SERVICE, &time, &key)
    }

    fn signing_key(&self, date: &[u8; 8]) -> [u8; 32] {
        // A poisoned lock only means another thread panicked while holding
        // it; the cached value is still a whole key or nothing, so use it.
        let mut cache = self.key_cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(cached) = *cache
            && cached.date == *date
        {
            return cached.key;
        }
        let key = derive_signing_key(&self.credentials.secret_access_key, date, &self.region, SERVICE);
        *cache = Some(CachedKey { date: *date, key });
        key
    }
}

/// Signs `request` for S3 with `credentials` in `region`, as of `now`.
///
/// It sets `x-amz-date`, `x-amz-content-sha256` (the hex SHA-256 of the
/// body), `x-amz-security-token` when the credentials carry a session token
/// (and removes a stale one when they do not), `Host` when the request has
/// none (from the URI's authority, without a default port), and finally
/// `Authorization`. Headers set earlier with the same names are replaced.
///
/// The body is any byte container; the S3 backend uses
/// `http::Request<bytes::Bytes>`. To sign many requests with the same
/// credentials, build a [`Signer`] once: it caches the signing key.
///
/// # Example
///
/// AWS's published example: a ranged GET of `/test.txt`.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
///
/// use bytes::Bytes;
/// use hoplock::s3::sigv4::{Credentials, sign};
///
/// let mut request = http::Request::get("https://examplebucket.s3.amazonaws.com/test.txt")
///     .header("range", "bytes=0-9")
///     .body(Bytes::new())?;
/// let credentials = Credentials::new(
///     "AKIAIOSFODNN7EXAMPLE",
///     "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
/// );
/// // 2013-05-24T00:00:00Z. The caller owns the clock.
/// let now = UNIX_EPOCH + Duration::from_secs(1_369_353_600);
///
/// sign(&mut request, &credentials, "us-east-1", now)?;
///
/// assert_eq!(request.headers()["x-amz-date"], "20130524T000000Z");
/// assert_eq!(
///     request.headers()["authorization"],
///     "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
///      SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
///      Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn sign<B: AsRef<[u8]>>(
    request: &mut Request<B>,
    credentials: &Credentials,
    region: &str,
    now: SystemTime,
) -> Result<(), SignError> {
    sign_for_service(request, credentials, region, SERVICE, now)
}

/// Signs `request` as [`sign`] does, for another AWS service than S3 (the
/// credential providers sign STS `AssumeRole` calls with it).
pub fn sign_for_service<B: AsRef<[u8]>>(
    request: &mut Request<B>,
    credentials: &Credentials,
    region: &str,
    service: &str,
    now: SystemTime,
) -> Result<(), SignError> {
    validate_scope_parts(&credentials.access_key_id, region)?;
    let time = AmzTime::from_system_time(now)?;
    let key = derive_signing_key(&credentials.secret_access_key, &time.date, region, service);
    sign_with_key(request, credentials, region, service, &time, &key)
}

fn sign_with_key<B: AsRef<[u8]>>(
    request: &mut Request<B>,
    credentials: &Credentials,
    region: &str,
    service: &str,
    time: &AmzTime,
    key: &[u8; 32],
) -> Result<(), SignError> {
    // Compute everything that can fail before touching the request, so a
    // failed call leaves it as it was.
    let host = if request.headers().contains_key(HOST) {
        None
    } else {
        Some(host_from_uri(request.uri()).ok_or(SignError::MissingHost)?)
    };
    let token = match &credentials.session_token {
        Some(token) => Some(
            HeaderValue::from_str(token).map_err(|_| SignError::InvalidHeaderValue { header: X_AMZ_SECURITY_TOKEN })?,
        ),
        None => None,
    };
    let payload_hash = hex(&Sha256::digest(request.body().as_ref()));

    let headers = request.headers_mut();
    if let Some(host) = host {
        headers.insert(HOST, host);
    }
    headers.insert(X_AMZ_DATE, ascii_header_value(&time.date_time));
    headers.insert(X_AMZ_CONTENT_SHA256, ascii_header_value(&payload_hash));
    match token {
        Some(token) => {
            headers.insert(X_AMZ_SECURITY_TOKEN, token);
        }
        None => {
            headers.remove(X_AMZ_SECURITY_TOKEN);
        }
    }
    // A stale Authorization header from an earlier attempt is not signed
    // (it is not in the signed set), but drop it so the new one replaces it
    // even if this call fails later.
    headers.remove(AUTHORIZATION);

    let signed = signed_header_names(request.headers());
    let canonical =
        canonical_request(request.method().as_str(), request.uri(), request.headers(), &signed, &payload_hash);
    let scope = Scope { date: &time.date, region, service };
    let string_to_sign = string_to_sign(&time.date_time, &scope, &canonical);
    let signature = hex(&hmac(key, string_to_sign.as_bytes()));

    let authorization = format!(
        "{ALGORITHM} Credential={}/{}, SignedHeaders={}, Signature={signature}",
        credentials.access_key_id,
        scope,
        signed.join(";"),
    );
    let authorization = HeaderValue::from_str(&authorization).map_err(|_| {
        // Unreachable after `validate_scope_parts`, but an error beats a
        // panic if that check ever drifts from this format.
        SignError::InvalidAccessKeyId
    })?;
    request.headers_mut().insert(AUTHORIZATION, authorization);
    Ok(())
}

/// The names of the headers to sign in `headers`, lower-case and sorted.
fn signed_header_names(headers: &HeaderMap) -> Vec<&str> {
    let mut names: Vec<&str> = headers
        .keys()
        .map(HeaderName::as_str)
        .filter(|name| *name == "host" || name.starts_with("x-amz-") || SIGNED_STANDARD_HEADERS.contains(name))
        .collect();
    // `HeaderMap` names are already lower-case; sorting makes the list
    // canonical, and `keys()` yields each name once.
    names.sort_unstable();
    names
}

/// The `Host` header value for `uri`: its host, plus the port unless the
/// port is the scheme's default (which HTTP clients leave out of `Host`).
fn host_from_uri(uri: &Uri) -> Option<HeaderValue> {
    let host = uri.host()?;
    let default_port = match uri.scheme_str() {
        Some("http") => Some(80),
        Some("https") => Some(443),
        _ => None,
    };
    let value = match uri.port_u16() {
        Some(port) if Some(port) != default_port => format!("{host}:{port}"),
        _ => host.to_owned(),
    };
    HeaderValue::from_str(&value).ok()
}

fn ascii_header_value(value: &str) -> HeaderValue {
    // Only called with hex digits and ISO 8601 digits, which are always
    // valid header values; the fallback keeps this total all the same.
    HeaderValue::from_str(value).unwrap_or_else(|_| HeaderValue::from_static(""))
}

fn validate_scope_parts(access_key_id: &str, region: &str) -> Result<(), SignError> {
    // The credential field is split on '/' and the header on ',' and
    // spaces, so none of them may appear inside a part.
    let key_ok = !access_key_id.is_empty()
        && access_key_id.bytes().all(|b| b.is_ascii_graphic() && b != b'/' && b != b',' && b != b'=');
    if !key_ok {
        return Err(SignError::InvalidAccessKeyId);
    }
    let region_ok = !region.is_empty() && region.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !region_ok {
        return Err(SignError::InvalidRegion(region.to_owned()));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Canonical request, string to sign, signing key.
// ---------------------------------------------------------------------------

/// The credential scope `DATE/REGION/SERVICE/aws4_request`.
struct Scope<'a> {
    date: &'a [u8; 8],
    region: &'a str,
    service: &'a str,
}

impl fmt::Display for Scope<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The date is always eight ASCII digits (see `AmzTime`).
        let date = std::str::from_utf8(self.date).unwrap_or("00000000");
        write!(f, "{date}/{}/{}/aws4_request", self.region, self.service)
    }
}

/// The canonical request: method, canonical URI, canonical query, canonical
/// headers, signed header list and payload hash, one per line.
///
/// It is bytes rather than a `String` because header values may hold
/// non-UTF-8 bytes (`obs-text`), which are signed as they are.
fn canonical_request(method: &str, uri: &Uri, headers: &HeaderMap, signed: &[&str], payload_hash: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(method.as_bytes());
    out.push(b'\n');
    canonical_path(uri.path(), &mut out);
    out.push(b'\n');
    canonical_query(uri.query().unwrap_or(""), &mut out);
    out.push(b'\n');
    for name in signed {
        out.extend_from_slice(name.as_bytes());
        out.push(b':');
        for (i, value) in headers.get_all(*name).iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_trimmed(value.as_bytes(), &mut out);
        }
        out.push(b'\n');
    }
    out.push(b'\n');
    out.extend_from_slice(signed.join(";").as_bytes());
    out.push(b'\n');
    out.extend_from_slice(payload_hash.as_bytes());
    out
}

/// Appends `value` with leading and trailing spaces removed and each run of
/// spaces inside collapsed to one. Only the space character counts, as in
/// S3; tabs and other whitespace are kept.
fn push_trimmed(value: &[u8], out: &mut Vec<u8>) {
    let mut pending_space = false;
    let mut started = false;
    for &b in value {
        if b == b' ' {
            pending_space = started;
            continue;
        }
        if pending_space {
            out.push(b' ');
            pending_space = false;
        }
        started = true;
        out.push(b);
    }
}

/// Appends the canonical URI of `path`: each segment encoded once, `/` kept
/// between segments, nothing normalised. An empty path is `/`.
fn canonical_path(path: &str, out: &mut Vec<u8>) {
    if path.is_empty() {
        out.push(b'/');
        return;
    }
    let bytes = path.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'/' => {
                out.push(b'/');
                i += 1;
            }
            _ => {
                // A valid escape is decoded first, so that `%24` and `$`,
                // or `%7E` and `~`, sign the same. A decoded `/` is part of a
                // segment, not a separator, and so is encoded again as `%2F`.
                let (byte, used) = decode_at(bytes, i);
                push_encoded(byte, true, out);
                i += used;
            }
        }
    }
}

/// Appends the canonical query string of `query` (without the `?`).
fn canonical_query(query: &str, out: &mut Vec<u8>) {
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (encode_query_part(name), encode_query_part(value))
        })
        .collect();
    pairs.sort_unstable();
    for (i, (name, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(b'&');
        }
        out.extend_from_slice(name);
        out.push(b'=');
        out.extend_from_slice(value);
    }
}

/// Decodes one query name or value (`+` is a space, `%XX` an escape) and
/// encodes it again the canonical way.
fn encode_query_part(part: &str) -> Vec<u8> {
    let bytes = part.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let (byte, used) = match bytes[i] {
            b'+' => (b' ', 1),
            _ => decode_at(bytes, i),
        };
        push_encoded(byte, true, &mut out);
        i += used;
    }
    out
}

/// The byte at `bytes[i]`, decoding a `%XX` escape there; returns the byte
/// and how many input bytes it took. A `%` that does not start a valid escape
/// is a literal `%`.
fn decode_at(bytes: &[u8], i: usize) -> (u8, usize) {
    if bytes[i] == b'%'
        && let (Some(&hi), Some(&lo)) = (bytes.get(i + 1), bytes.get(i + 2))
        && let (Some(hi), Some(lo)) = (hex_value(hi), hex_value(lo))
    {
        return ((hi << 4) | lo, 3);
    }
    (bytes[i], 1)
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~')
}

fn push_encoded(byte: u8, encode_slash: bool, out: &mut Vec<u8>) {
    const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";
    if is_unreserved(byte) || (byte == b'/' && !encode_slash) {
        out.push(byte);
    } else {
        out.extend_from_slice(&[b'%', HEX_UPPER[usize::from(byte >> 4)], HEX_UPPER[usize::from(byte & 0x0f)]]);
    }
}

/// URI-encodes an object key for the path of a request: every byte but the
/// unreserved characters and `/` becomes `%XX`.
///
/// Build request URIs with it (`/{bucket}/{encode_key(key)}`), so that what
/// goes on the wire is already the canonical form and no HTTP layer has a
/// reason to re-escape it.
///
/// ```
/// use hoplock::s3::sigv4::encode_key;
///
/// assert_eq!(encode_key("leases/a b+c=$~"), "leases/a%20b%2Bc%3D%24~");
/// assert_eq!(encode_key("ü"), "%C3%BC");
/// ```
pub fn encode_key(key: &str) -> String {
    encode(key, false)
}

/// URI-encodes a query parameter name or value: every byte but the
/// unreserved characters becomes `%XX`, `/` included.
///
/// ```
/// use hoplock::s3::sigv4::encode_query_component;
///
/// assert_eq!(encode_query_component("leases/a b"), "leases%2Fa%20b");
/// ```
pub fn encode_query_component(value: &str) -> String {
    encode(value, true)
}

fn encode(value: &str, encode_slash: bool) -> String {
    let mut out = Vec::with_capacity(value.len());
    for &b in value.as_bytes() {
        push_encoded(b, encode_slash, &mut out);
    }
    // Every byte pushed is ASCII, so this never takes the lossy path.
    String::from_utf8_lossy(&out).into_owned()
}

fn string_to_sign(date_time: &str, scope: &Scope<'_>, canonical_request: &[u8]) -> String {
    format!("{ALGORITHM}\n{date_time}\n{scope}\n{}", hex(&Sha256::digest(canonical_request)))
}

fn derive_signing_key(secret: &str, date: &[u8; 8], region: &str, service: &str) -> [u8; 32] {
    let mut first_key = Vec::with_capacity(4 + secret.len());
    first_key.extend_from_slice(b"AWS4");
    first_key.extend_from_slice(secret.as_bytes());
    let date_key = hmac(&first_key, date);
    let region_key = hmac(&date_key, region.as_bytes());
    let service_key = hmac(&region_key, service.as_bytes());
    hmac(&service_key, b"aws4_request")
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    // HMAC takes keys of any length (a long one is hashed first), so this
    // constructor cannot fail; it returns a `Result` only because the
    // `KeyInit` trait is shared with ciphers whose keys have a fixed size.
    #[allow(clippy::expect_used)]
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(data);
    mac.finalize().into_bytes().into()
}

fn hex(bytes: &[u8]) -> String {
    const HEX_LOWER: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(char::from(HEX_LOWER[usize::from(b >> 4)]));
        out.push(char::from(HEX_LOWER[usize::from(b & 0x0f)]));
    }
    out
}

// ---------------------------------------------------------------------------
// Time: basic ISO 8601, without a date library.
// ---------------------------------------------------------------------------

/// A signing time as SigV4 writes it.
struct AmzTime {
    /// `YYYYMMDD`, the date of the credential scope.
    date: [u8; 8],
    /// `YYYYMMDDTHHMMSSZ`, the value of `x-amz-date`.
    date_time: String,
}

impl AmzTime {
    fn from_system_time(time: SystemTime) -> Result<Self, SignError> {
        // Sub-second precision is dropped: x-amz-date has none.
        let secs = time.duration_since(UNIX_EPOCH).map_err(|_| SignError::TimeOutOfRange)?.as_secs();
        // The calendar arithmetic lives in one place; this only reshapes
        // `YYYY-MM-DDTHH:MM:SS.mmmZ` into the basic `YYYYMMDDTHHMMSSZ`.
        let stamp = crate::rfc3339::format(UNIX_EPOCH + Duration::from_secs(secs));
        if stamp.len() != 24 {
            return Err(SignError::TimeOutOfRange); // a year past 9999
        }
        let date_time = format!(
            "{}{}{}T{}{}{}Z",
            &stamp[0..4],
            &stamp[5..7],
            &stamp[8..10],
            &stamp[11..13],
            &stamp[14..16],
            &stamp[17..19]
        );
        let mut date = [b'0'; 8];
        date.copy_from_slice(&date_time.as_bytes()[..8]);
        Ok(Self { date, date_time })
    }
}

/// Parses a basic ISO 8601 `YYYYMMDDTHHMMSSZ` into a time, checking every
/// field's range.
fn parse_amz_date(value: &[u8]) -> Option<SystemTime> {
    // ASCII only, so the byte slicing below stays on character boundaries.
    if value.len() != 16 || !value.is_ascii() || value[8] != b'T' || value[15] != b'Z' {
        return None;
    }
    let text = std::str::from_utf8(value).ok()?;
    // SigV4 has no leap seconds; RFC 3339 allows :60, so refuse it here.
    if &text[13..15] == "60" {
        return None;
    }
    let stamp = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &text[0..4],
        &text[4..6],
        &text[6..8],
        &text[9..11],
        &text[11..13],
        &text[13..15]
    );
    crate::rfc3339::parse(&stamp).ok()
}

// ---------------------------------------------------------------------------
// Verification, for a server that receives signed requests.
// ---------------------------------------------------------------------------

/// The parsed `Authorization` header of a SigV4 request:
/// `AWS4-HMAC-SHA256 Credential=AK/DATE/REGION/SERVICE/aws4_request,
/// SignedHeaders=a;b;c, Signature=HEX`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    access_key_id: String,
    date: [u8; 8],
    region: String,
    service: String,
    signed_headers: Vec<String>,
    signature: [u8; 32],
}

/// Why an `Authorization` header could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthorizationError {
    /// The header is not visible ASCII.
    #[error("the Authorization header is not ASCII")]
    NotAscii,
    /// The header does not start with `AWS4-HMAC-SHA256 `.
    #[error("the Authorization header does not use {ALGORITHM}")]
    UnsupportedAlgorithm,
    /// A comma-separated part is not `Name=value`.
    #[error("the Authorization header has a part that is not Name=value: {0:?}")]
    MalformedPart(String),
    /// A part other than `Credential`, `SignedHeaders` and `Signature`.
    #[error("the Authorization header has an unknown part {0:?}")]
    UnknownPart(String),
    /// A part appears twice.
    #[error("the Authorization header has {0} twice")]
    DuplicatePart(&'static str),
    /// A required part is missing.
    #[error("the Authorization header has no {0}")]
    MissingPart(&'static str),
    /// `Credential` is not `AK/YYYYMMDD/REGION/SERVICE/aws4_request`.
    #[error("the Credential is not ACCESS_KEY/YYYYMMDD/REGION/SERVICE/aws4_request")]
    MalformedCredential,
    /// `SignedHeaders` is empty, has an empty or non-lower-case name, or is
    /// not sorted without repeats.
    #[error("SignedHeaders must be lower-case names, sorted, without repeats")]
    MalformedSignedHeaders,
    /// `Signature` is not 64 lower-case hex digits.
    #[error("the Signature is not 64 lower-case hex digits")]
    MalformedSignature,
}

impl Authorization {
    /// Parses an `Authorization` header value.
    ///
    /// The parts may be separated by `,` with or without spaces, in any
    /// order; each must appear exactly once.
    pub fn parse(value: &[u8]) -> Result<Self, AuthorizationError> {
        let value = std::str::from_utf8(value)
            .ok()
            .filter(|v| v.bytes().all(|b| b == b' ' || b.is_ascii_graphic()))
            .ok_or(AuthorizationError::NotAscii)?;
        let rest = value
            .strip_prefix(ALGORITHM)
            .filter(|rest| rest.starts_with(' '))
            .ok_or(AuthorizationError::UnsupportedAlgorithm)?;

        let (mut credential, mut signed_headers, mut signature) = (None, None, None);
        for part in rest.split(',') {
            let part = part.trim_matches(' ');
            let (name, field_value) =
                part.split_once('=').ok_or_else(|| AuthorizationError::MalformedPart(part.to_owned()))?;
            let (slot, label) = match name {
                "Credential" => (&mut credential, "Credential"),
                "SignedHeaders" => (&mut signed_headers, "SignedHeaders"),
                "Signature" => (&mut signature, "Signature"),
                _ => return Err(AuthorizationError::UnknownPart(name.to_owned())),
            };
            if slot.replace(field_value).is_some() {
                return Err(AuthorizationError::DuplicatePart(label));
            }
        }
        let credential = credential.ok_or(AuthorizationError::MissingPart("Credential"))?;
        let signed_headers = signed_headers.ok_or(AuthorizationError::MissingPart("SignedHeaders"))?;
        let signature = signature.ok_or(AuthorizationError::MissingPart("Signature"))?;

        let mut fields = credential.split('/');
        let (Some(access_key_id), Some(date), Some(region), Some(service), Some("aws4_request"), None) =
            (fields.next(), fields.next(), fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(AuthorizationError::MalformedCredential);
        };
        let date: [u8; 8] = date
            .as_bytes()
            .try_into()
            .ok()
            .filter(|d: &[u8; 8]| d.iter().all(u8::is_ascii_digit))
            .ok_or(AuthorizationError::MalformedCredential)?;
        if access_key_id.is_empty() || region.is_empty() || service.is_empty() {
            return Err(AuthorizationError::MalformedCredential);
        }

        let signed_headers: Vec<String> = signed_headers.split(';').map(str::to_owned).collect();
        let names_ok = signed_headers
            .iter()
            .all(|name| !name.is_empty() && name.bytes().all(|b| b.is_ascii_graphic() && !b.is_ascii_uppercase()));
        let sorted = signed_headers.windows(2).all(|w| w[0] < w[1]);
        if !names_ok || !sorted {
            return Err(AuthorizationError::MalformedSignedHeaders);
        }

        let signature = parse_signature(signature).ok_or(AuthorizationError::MalformedSignature)?;

        Ok(Self {
            access_key_id: access_key_id.to_owned(),
            date,
            region: region.to_owned(),
            service: service.to_owned(),
            signed_headers,
            signature,
        })
    }

    /// Parses the `Authorization` header of `request`.
    pub fn from_request<B>(request: &Request<B>) -> Result<Self, VerifyError> {
        let value = request.headers().get(AUTHORIZATION).ok_or(VerifyError::MissingAuthorization)?;
        Ok(Self::parse(value.as_bytes())?)
    }

    /// The access key id, to look the secret up by.
    pub fn access_key_id(&self) -> &str {
        &self.access_key_id
    }

    /// The scope's date, `YYYYMMDD`.
    pub fn date(&self) -> &str {
        // Eight ASCII digits, checked by `parse`.
        std::str::from_utf8(&self.date).unwrap_or("")
    }

    /// The scope's region. [`verify`] does not check it: a server that
    /// serves one region compares it itself.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The scope's service; [`verify`] requires `s3`.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// The signed header names, lower-case and sorted.
    pub fn signed_headers(&self) -> &[String] {
        &self.signed_headers
    }
}

fn parse_signature(value: &str) -> Option<[u8; 32]> {
    let bytes = value.as_bytes();
    if bytes.len() != 64 || bytes.iter().any(u8::is_ascii_uppercase) {
        return None;
    }
    let mut out = [0u8; 32];
    for (slot, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *slot = (hex_value(pair[0])? << 4) | hex_value(pair[1])?;
    }
    Some(out)
}

/// Why a received request failed verification. [`VerifyError::s3_code`]
/// gives the error code S3 would answer with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The request has no `Authorization` header.
    #[error("the request has no Authorization header")]
    MissingAuthorization,
    /// The `Authorization` header could not be parsed.
    #[error(transparent)]
    Authorization(#[from] AuthorizationError),
    /// The credential scope names a service other than `s3`.
    #[error("the credential scope is for service {0:?}, not s3")]
    WrongService(String),
    /// `x-amz-date` is missing or not `YYYYMMDDTHHMMSSZ`.
    #[error("x-amz-date is missing or not a valid YYYYMMDDTHHMMSSZ time")]
    InvalidDate,
    /// The credential scope's date is not the date of `x-amz-date`.
    #[error("the credential scope date does not match x-amz-date")]
    ScopeDateMismatch,
    /// The request time is further from the verifier's clock than allowed.
    #[error("the request time is too far from the server's time")]
    RequestTimeTooSkewed {
        /// The time in `x-amz-date`.
        request_time: SystemTime,
        /// The verifier's time.
        server_time: SystemTime,
    },
    /// A header that must be signed (`host`, `x-amz-date`,
    /// `x-amz-content-sha256`, or any `x-amz-*` present) is not in
    /// `SignedHeaders`.
    #[error("the {0} header must be signed but is not in SignedHeaders")]
    HeaderNotSigned(String),
    /// `SignedHeaders` names a header the request does not have.
    #[error("SignedHeaders names {0}, which the request does not have")]
    SignedHeaderMissing(String),
    /// `x-amz-content-sha256` is missing.
    #[error("the request has no x-amz-content-sha256 header")]
    MissingContentSha256,
    /// `x-amz-content-sha256` is neither a SHA-256 in hex nor
    /// `UNSIGNED-PAYLOAD` (streaming uploads are not supported).
    #[error("x-amz-content-sha256 is neither a hex SHA-256 nor UNSIGNED-PAYLOAD")]
    UnsupportedContentSha256,
    /// `x-amz-content-sha256` is not the SHA-256 of the body received.
    #[error("x-amz-content-sha256 does not match the body")]
    ContentSha256Mismatch,
    /// The signature is not the one the secret gives for this request.
    #[error("the signature does not match")]
    SignatureDoesNotMatch {
        /// The canonical request the verifier computed (non-UTF-8 bytes
        /// replaced), for the error body, as S3 does.
        canonical_request: String,
        /// The string to sign the verifier computed.
        string_to_sign: String,
    },
}

impl VerifyError {
    /// The S3 error code for this failure, e.g. `SignatureDoesNotMatch`.
    /// All of them come with HTTP status 403, except
    /// `AuthorizationHeaderMalformed`, `InvalidArgument` and
    /// `XAmzContentSHA256Mismatch`, which come with 400.
    pub fn s3_code(&self) -> &'static str {
        match self {
            Self::MissingAuthorization => "AccessDenied",
            Self::Authorization(_) | Self::WrongService(_) | Self::ScopeDateMismatch => "AuthorizationHeaderMalformed",
            Self::InvalidDate | Self::HeaderNotSigned(_) | Self::SignedHeaderMissing(_) => "AccessDenied",
            Self::RequestTimeTooSkewed { .. } => "RequestTimeTooSkewed",
            Self::MissingContentSha256 | Self::UnsupportedContentSha256 => "InvalidArgument",
            Self::ContentSha256Mismatch => "XAmzContentSHA256Mismatch",
            Self::SignatureDoesNotMatch { .. } => "SignatureDoesNotMatch",
        }
    }

    /// The HTTP status S3 answers this failure with.
    pub fn http_status(&self) -> u16 {
        match self.s3_code() {
            "AuthorizationHeaderMalformed" | "InvalidArgument" | "XAmzContentSHA256Mismatch" => 400,
            _ => 403,
        }
    }
}

/// Verifies the SigV4 signature of a received `request` with the secret of
/// the access key named in its `Authorization` header, at the verifier's
/// time `now`, allowing `max_skew` (S3 allows [`MAX_CLOCK_SKEW`]) between
/// `x-amz-date` and `now`.
///
/// On success it returns the parsed `Authorization`. A server looks the
/// secret up first with [`Authorization::from_request`]:
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
///
/// use hoplock::s3::sigv4::{Authorization, Credentials, MAX_CLOCK_SKEW, sign, verify};
///
/// let credentials = Credentials::new("AK", "SK");
/// let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
/// let mut request = http::Request::put("http://127.0.0.1:9000/bucket/key")
///     .header("if-none-match", "*")
///     .body(b"hello".to_vec())?;
/// sign(&mut request, &credentials, "us-east-1", now)?;
///
/// // On the server:
/// let access_key = Authorization::from_request(&request)?.access_key_id().to_owned();
/// assert_eq!(access_key, "AK");
/// verify(&request, "SK", now, MAX_CLOCK_SKEW)?;
///
/// // A wrong secret, or a body changed in flight, fails.
/// let err = verify(&request, "not the secret", now, MAX_CLOCK_SKEW).unwrap_err();
/// assert_eq!(err.s3_code(), "SignatureDoesNotMatch");
/// *request.body_mut() = b"HELLO".to_vec();
/// let err = verify(&request, "SK", now, MAX_CLOCK_SKEW).unwrap_err();
/// assert_eq!(err.s3_code(), "XAmzContentSHA256Mismatch");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn verify<B: AsRef<[u8]>>(
    request: &Request<B>,
    secret_access_key: &str,
    now: SystemTime,
    max_skew: Duration,
) -> Result<Authorization, VerifyError> {
    let authorization = Authorization::from_request(request)?;
    if authorization.service != SERVICE {
        return Err(VerifyError::WrongService(authorization.service));
    }
    let headers = request.headers();

    let date_time = headers.get(X_AMZ_DATE).ok_or(VerifyError::InvalidDate)?.as_bytes();
    let request_time = parse_amz_date(date_time).ok_or(VerifyError::InvalidDate)?;
    if date_time[..8] != authorization.date {
        return Err(VerifyError::ScopeDateMismatch);
    }
    let skew = match now.duration_since(request_time) {
        Ok(behind) => behind,
        Err(ahead) => ahead.duration(),
    };
    if skew > max_skew {
        return Err(VerifyError::RequestTimeTooSkewed { request_time, server_time: now });
    }

    // Every header that carries meaning for S3's authentication must be
    // covered by the signature; otherwise it could be swapped in flight.
    let is_signed = |name: &str| authorization.signed_headers.iter().any(|s| s == name);
    for required in ["host", X_AMZ_DATE, X_AMZ_CONTENT_SHA256] {
        if !is_signed(required) {
            return Err(VerifyError::HeaderNotSigned(required.to_owned()));
        }
    }
    if let Some(name) =
        headers.keys().map(HeaderName::as_str).find(|name| name.starts_with("x-amz-") && !is_signed(name))
    {
        return Err(VerifyError::HeaderNotSigned(name.to_owned()));
    }
    if let Some(missing) = authorization.signed_headers.iter().find(|name| !headers.contains_key(name.as_str())) {
        return Err(VerifyError::SignedHeaderMissing(missing.clone()));
    }

    let payload_hash = headers
        .get(X_AMZ_CONTENT_SHA256)
        .ok_or(VerifyError::MissingContentSha256)?
        .to_str()
        .map_err(|_| VerifyError::UnsupportedContentSha256)?;
    if payload_hash != UNSIGNED_PAYLOAD {
        if parse_signature(payload_hash).is_none() {
            return Err(VerifyError::UnsupportedContentSha256);
        }
        if hex(&Sha256::digest(request.body().as_ref())) != payload_hash {
            return Err(VerifyError::ContentSha256Mismatch);
        }
    }

    let signed: Vec<&str> = authorization.signed_headers.iter().map(String::as_str).collect();
    let canonical = canonical_request(request.method().as_str(), request.uri(), headers, &signed, payload_hash);
    let scope = Scope { date: &authorization.date, region: &authorization.region, service: SERVICE };
    // `date_time` was checked to be 16 ASCII characters above.
    let date_time = std::str::from_utf8(date_time).unwrap_or("");
    let string_to_sign = string_to_sign(date_time, &scope, &canonical);
    let key = derive_signing_key(secret_access_key, &authorization.date, &authorization.region, SERVICE);
    let expected = hmac(&key, string_to_sign.as_bytes());
    if !constant_time_eq(&expected, &authorization.signature) {
        return Err(VerifyError::SignatureDoesNotMatch {
            canonical_request: String::from_utf8_lossy(&canonical).into_owned(),
            string_to_sign,
        });
    }
    Ok(authorization)
}

/// Compares two MACs in time that does not depend on where they differ, so
/// a network attacker cannot find a valid signature byte by byte.
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
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
        String::from_utf8(canonical_request(
            request.method().as_str(),
            request.uri(),
            request.headers(),
            &signed,
            &hash,
        ))
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
        assert_eq!(
            sign(&mut request, &example_credentials(), "us-east-1", example_time()),
            Err(SignError::MissingHost)
        );
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
                format!("AWS4-HMAC-SHA256 {sig}, SignedHeaders=host, Credential=A/20130524/r/s3/aws4_request")
                    .as_bytes()
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
        let authorization =
            format!("{ALGORITHM} Credential=AK/{scope}, SignedHeaders={}, Signature={signature}", signed.join(";"));
        request.headers_mut().insert(AUTHORIZATION, HeaderValue::from_str(&authorization).unwrap());
        verify(&request, "SK", now, MAX_CLOCK_SKEW).unwrap();
    }
}
