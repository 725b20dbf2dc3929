//! The `Authorization` header of a SigV4 request, parsed for verification.

use super::*;

/// The parsed `Authorization` header of a SigV4 request:
/// `AWS4-HMAC-SHA256 Credential=AK/DATE/REGION/SERVICE/aws4_request,
/// SignedHeaders=a;b;c, Signature=HEX`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    pub(super) access_key_id: String,
    pub(super) date: [u8; 8],
    pub(super) region: String,
    pub(super) service: String,
    pub(super) signed_headers: Vec<String>,
    pub(super) signature: [u8; 32],
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

pub(super) fn parse_signature(value: &str) -> Option<[u8; 32]> {
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
