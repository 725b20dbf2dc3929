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
    key_cache: KeyCache,
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
        Ok(Self { credentials, region, key_cache: KeyCache::default() })
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
        let key = self.key_cache.key(&self.credentials.secret_access_key, &time.date, &self.region);
        sign_with_key(request, &self.credentials, &self.region, SERVICE, &time, &key)
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
    let signature = hmac(key, string_to_sign.as_bytes());

    // `ALGORITHM Credential=KEY/SCOPE, SignedHeaders=NAMES, Signature=HEX`,
    // written piece by piece as it is for every request.
    let mut authorization = String::with_capacity(256);
    authorization.push_str(ALGORITHM);
    authorization.push_str(" Credential=");
    authorization.push_str(&credentials.access_key_id);
    authorization.push('/');
    scope.push(&mut authorization);
    authorization.push_str(", SignedHeaders=");
    authorization.push_str(&signed.join(";"));
    authorization.push_str(", Signature=");
    push_hex(&signature, &mut authorization);
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

mod canonical;
use canonical::*;
pub use canonical::{encode_key, encode_query_component};
mod time;
use time::*;
mod authorization;
use authorization::*;
pub use authorization::{Authorization, AuthorizationError};
mod verify;
pub use verify::{Verifier, VerifyError, verify};
#[cfg(test)]
mod tests;
