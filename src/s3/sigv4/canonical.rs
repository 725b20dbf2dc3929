//! The canonical request, the string to sign and the signing key: the part of
//! SigV4 the signer and the verifier share, so a rule wrong here is wrong in both.

use super::*;

/// The credential scope `DATE/REGION/SERVICE/aws4_request`.
pub(super) struct Scope<'a> {
    pub(super) date: &'a [u8; 8],
    pub(super) region: &'a str,
    pub(super) service: &'a str,
}

impl Scope<'_> {
    /// Appends the scope, `DATE/REGION/SERVICE/aws4_request`.
    pub(super) fn push(&self, out: &mut String) {
        // The date is always eight ASCII digits (see `AmzTime`).
        out.push_str(std::str::from_utf8(self.date).unwrap_or("00000000"));
        out.push('/');
        out.push_str(self.region);
        out.push('/');
        out.push_str(self.service);
        out.push_str("/aws4_request");
    }
}

/// The canonical request: method, canonical URI, canonical query, canonical
/// headers, signed header list and payload hash, one per line.
///
/// It is bytes rather than a `String` because header values may hold
/// non-UTF-8 bytes (`obs-text`), which are signed as they are.
pub(super) fn canonical_request(
    method: &str,
    uri: &Uri,
    headers: &HeaderMap,
    signed: &[&str],
    payload_hash: &str,
) -> Vec<u8> {
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
pub(super) fn push_trimmed(value: &[u8], out: &mut Vec<u8>) {
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
pub(super) fn canonical_path(path: &str, out: &mut Vec<u8>) {
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
pub(super) fn canonical_query(query: &str, out: &mut Vec<u8>) {
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
pub(super) fn encode_query_part(part: &str) -> Vec<u8> {
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
pub(super) fn decode_at(bytes: &[u8], i: usize) -> (u8, usize) {
    if bytes[i] == b'%'
        && let (Some(&hi), Some(&lo)) = (bytes.get(i + 1), bytes.get(i + 2))
        && let (Some(hi), Some(lo)) = (hex_value(hi), hex_value(lo))
    {
        return ((hi << 4) | lo, 3);
    }
    (bytes[i], 1)
}

pub(super) fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

pub(super) fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~')
}

pub(super) fn push_encoded(byte: u8, encode_slash: bool, out: &mut Vec<u8>) {
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

pub(super) fn encode(value: &str, encode_slash: bool) -> String {
    let mut out = Vec::with_capacity(value.len());
    for &b in value.as_bytes() {
        push_encoded(b, encode_slash, &mut out);
    }
    // Every byte pushed is ASCII, so this never takes the lossy path.
    String::from_utf8_lossy(&out).into_owned()
}

pub(super) fn string_to_sign(date_time: &str, scope: &Scope<'_>, canonical_request: &[u8]) -> String {
    // Written piece by piece rather than through `format!`: it is built
    // twice for every request, once to sign and once to verify.
    let mut out = String::with_capacity(ALGORITHM.len() + date_time.len() + 64 + 64 + 3);
    out.push_str(ALGORITHM);
    out.push('\n');
    out.push_str(date_time);
    out.push('\n');
    scope.push(&mut out);
    out.push('\n');
    push_hex(&Sha256::digest(canonical_request), &mut out);
    out
}

pub(super) fn derive_signing_key(secret: &str, date: &[u8; 8], region: &str, service: &str) -> [u8; 32] {
    let mut first_key = Vec::with_capacity(4 + secret.len());
    first_key.extend_from_slice(b"AWS4");
    first_key.extend_from_slice(secret.as_bytes());
    let date_key = hmac(&first_key, date);
    let region_key = hmac(&date_key, region.as_bytes());
    let service_key = hmac(&region_key, service.as_bytes());
    hmac(&service_key, b"aws4_request")
}

/// The signing key of the most recent date and region, for one secret. The
/// key changes only with those, so once a day for one region, and deriving
/// it costs four HMACs: the [`Signer`] and the [`Verifier`] each keep one
/// of these rather than derive it for every request.
#[derive(Default)]
pub(super) struct KeyCache(Mutex<Option<ScopedKey>>);

/// A signing key with the date and region it was derived for.
struct ScopedKey {
    date: [u8; 8],
    region: String,
    key: [u8; 32],
}

impl KeyCache {
    /// The S3 signing key of `secret` for `date` and `region`.
    pub(super) fn key(&self, secret: &str, date: &[u8; 8], region: &str) -> [u8; 32] {
        // A poisoned lock only means another thread panicked while holding
        // it; the cached value is still a whole key or nothing, so use it.
        let mut cache = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(cached) = cache.as_ref()
            && cached.date == *date
            && cached.region == region
        {
            return cached.key;
        }
        let key = derive_signing_key(secret, date, region, SERVICE);
        *cache = Some(ScopedKey { date: *date, region: region.to_owned(), key });
        key
    }
}

pub(super) fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    // HMAC takes keys of any length (a long one is hashed first), so this
    // constructor cannot fail; it returns a `Result` only because the
    // `KeyInit` trait is shared with ciphers whose keys have a fixed size.
    #[allow(clippy::expect_used)]
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(data);
    mac.finalize().into_bytes().into()
}

pub(super) fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    push_hex(bytes, &mut out);
    out
}

/// Appends `bytes` in lower-case hex.
pub(super) fn push_hex(bytes: &[u8], out: &mut String) {
    const HEX_LOWER: &[u8; 16] = b"0123456789abcdef";
    for &b in bytes {
        out.push(char::from(HEX_LOWER[usize::from(b >> 4)]));
        out.push(char::from(HEX_LOWER[usize::from(b & 0x0f)]));
    }
}
