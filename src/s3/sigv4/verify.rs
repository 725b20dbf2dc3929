//! Verifying a received request, for a server that checks SigV4 as S3 does.

use super::*;

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
    verify_with(request, now, max_skew, |date, region| derive_signing_key(secret_access_key, date, region, SERVICE))
}

/// Verifies requests signed with one secret, as [`verify`] does, caching
/// the signing key.
///
/// The key depends only on the secret, the request's date and its region,
/// so a server that checks many requests with one secret derives it once a
/// day rather than with four HMACs on every request, as [`Signer`] does on
/// the other side. Its `Debug` shows no secret.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
///
/// use hoplock::s3::sigv4::{Credentials, MAX_CLOCK_SKEW, Verifier, sign};
///
/// let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
/// let mut request = http::Request::get("http://127.0.0.1:9000/bucket/key").body(Vec::new())?;
/// sign(&mut request, &Credentials::new("AK", "SK"), "us-east-1", now)?;
///
/// let verifier = Verifier::new("SK");
/// assert_eq!(verifier.verify(&request, now, MAX_CLOCK_SKEW)?.access_key_id(), "AK");
/// let wrong = Verifier::new("not the secret");
/// assert_eq!(wrong.verify(&request, now, MAX_CLOCK_SKEW).unwrap_err().s3_code(), "SignatureDoesNotMatch");
/// assert!(!format!("{verifier:?}").contains("SK"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Verifier {
    secret_access_key: String,
    key_cache: KeyCache,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier").finish_non_exhaustive()
    }
}

impl Verifier {
    /// A verifier for requests signed with `secret_access_key`.
    pub fn new(secret_access_key: impl Into<String>) -> Self {
        Self { secret_access_key: secret_access_key.into(), key_cache: KeyCache::default() }
    }

    /// Verifies `request` as [`verify`] does with this verifier's secret.
    pub fn verify<B: AsRef<[u8]>>(
        &self,
        request: &Request<B>,
        now: SystemTime,
        max_skew: Duration,
    ) -> Result<Authorization, VerifyError> {
        verify_with(request, now, max_skew, |date, region| self.key_cache.key(&self.secret_access_key, date, region))
    }
}

/// [`verify`] with the signing key for a date and region from `signing_key`.
fn verify_with<B: AsRef<[u8]>>(
    request: &Request<B>,
    now: SystemTime,
    max_skew: Duration,
    signing_key: impl FnOnce(&[u8; 8], &str) -> [u8; 32],
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
    let key = signing_key(&authorization.date, &authorization.region);
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
pub(super) fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
