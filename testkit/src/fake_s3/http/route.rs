//! Routing: which bucket and key a request names, path-style or
//! virtual-host, and the bucket-level requests the fake answers.

use super::*;

/// Where a request is addressed.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Target {
    /// `/`: the service (ListBuckets).
    Service,
    /// A bucket without a key.
    Bucket(String),
    /// An object.
    Object { bucket: String, key: String },
}

/// Decodes `%XX` escapes. A `%` without two hex digits is a malformed URI.
pub(super) fn percent_decode(text: &str) -> Result<Vec<u8>, S3Failure> {
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
pub(super) fn valid_bucket_name(name: &str) -> bool {
    let edge_ok = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    (3..=63).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        && edge_ok(name.bytes().next())
        && edge_ok(name.bytes().last())
}

impl FakeS3 {
    pub(super) fn bucket_request(
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

    pub(super) fn route(&self, request: &Request<Bytes>) -> Result<Target, S3Failure> {
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
    pub(super) fn virtual_host_bucket(&self, request: &Request<Bytes>) -> Option<String> {
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
}
