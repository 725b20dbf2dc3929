//! S3's error answers: the failure before it is rendered, and the XML body
//! and headers it is rendered into.

use super::*;

/// An S3 error answer before it is rendered.
#[derive(Debug)]
pub(super) struct S3Failure {
    pub(super) status: StatusCode,
    pub(super) code: &'static str,
    pub(super) message: String,
    /// Extra elements S3 adds for this code, e.g. `<Condition>`.
    pub(super) extra: Vec<(&'static str, String)>,
}

impl S3Failure {
    pub(super) fn new(status: u16, code: &'static str, message: impl Into<String>) -> S3Failure {
        S3Failure {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            code,
            message: message.into(),
            extra: Vec::new(),
        }
    }

    pub(super) fn with(mut self, name: &'static str, value: impl Into<String>) -> S3Failure {
        self.extra.push((name, value.into()));
        self
    }

    /// The store's own refusal with `status`, when it is overloaded or
    /// failing: 429 TooManyRequests, 500 InternalError or 503 SlowDown.
    /// Drawn faults and outages answer with these.
    pub(super) fn overloaded(status: u16) -> S3Failure {
        match status {
            429 => S3Failure::new(429, "TooManyRequests", "Please reduce your request rate."),
            500 => S3Failure::new(500, "InternalError", "We encountered an internal error. Please try again."),
            _ => S3Failure::new(503, "SlowDown", "Please reduce your request rate."),
        }
    }

    pub(super) fn invalid_uri() -> S3Failure {
        S3Failure::new(400, "InvalidURI", "Couldn't parse the specified URI.")
    }

    pub(super) fn not_implemented(what: &str) -> S3Failure {
        S3Failure::new(501, "NotImplemented", "A header you provided implies functionality that is not implemented")
            .with("Detail", what)
    }

    pub(super) fn method_not_allowed(method: &Method) -> S3Failure {
        S3Failure::new(405, "MethodNotAllowed", "The specified method is not allowed against this resource.")
            .with("Method", method.as_str())
    }

    pub(super) fn from_refusal(refusal: &Refusal, key: &str) -> S3Failure {
        match refusal {
            Refusal::NoSuchBucket => S3Failure::new(404, "NoSuchBucket", "The specified bucket does not exist"),
            Refusal::NoSuchKey => {
                S3Failure::new(404, "NoSuchKey", "The specified key does not exist.").with("Key", key)
            }
            Refusal::PreconditionFailed { header } => S3Failure::new(
                412,
                "PreconditionFailed",
                "At least one of the pre-conditions you specified did not hold",
            )
            .with("Condition", *header),
            Refusal::NotModified { .. } => S3Failure::new(304, "NotModified", "Not Modified"),
            Refusal::NotImplemented(what) => S3Failure::not_implemented(what),
        }
    }

    pub(super) fn from_verify(error: &VerifyError, request: &Request<Bytes>) -> S3Failure {
        let failure = S3Failure::new(error.http_status(), error.s3_code(), error.to_string());
        match error {
            VerifyError::SignatureDoesNotMatch { canonical_request, string_to_sign } => S3Failure::new(
                403,
                "SignatureDoesNotMatch",
                "The request signature we calculated does not match the signature you provided. \
                 Check your key and signing method.",
            )
            .with("StringToSign", string_to_sign.clone())
            .with("CanonicalRequest", canonical_request.clone()),
            VerifyError::ContentSha256Mismatch => S3Failure::new(
                400,
                "XAmzContentSHA256Mismatch",
                "The provided 'x-amz-content-sha256' header does not match what was computed.",
            )
            .with("ClientComputedContentSHA256", header(request.headers(), "x-amz-content-sha256").unwrap_or_default())
            .with("S3ComputedContentSHA256", hex(&Sha256::digest(request.body()))),
            VerifyError::RequestTimeTooSkewed { request_time, server_time } => S3Failure::new(
                403,
                "RequestTimeTooSkewed",
                "The difference between the request time and the current time is too large.",
            )
            .with("RequestTime", format_http_date(*request_time))
            .with("ServerTime", format_http_date(*server_time))
            .with("MaxAllowedSkewMilliseconds", MAX_CLOCK_SKEW.as_millis().to_string()),
            _ => failure,
        }
    }
}

/// The refusal outcome of an error `response` with S3 error `code`.
pub(super) fn refused(response: &Response<Bytes>, code: &'static str, reply_dropped: bool) -> Outcome {
    Outcome::Refused { status: response.status().as_u16(), code, reply_dropped }
}

/// Sets the body; the builder was made here from valid parts, so a failure
/// would be a bug in this module, answered with a bare 500 rather than a
/// panic.
pub(super) fn finish(builder: http::response::Builder, body: Bytes) -> Response<Bytes> {
    builder.body(body).unwrap_or_else(|_| {
        let mut response = Response::new(Bytes::new());
        *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        response
    })
}

impl FakeS3 {
    /// A response with the headers every S3 answer carries.
    pub(super) fn base_response(&self, status: StatusCode, request_id: &str) -> http::response::Builder {
        Response::builder()
            .status(status)
            .header(DATE, format_http_date(self.inner.clock.wall()))
            .header("x-amz-request-id", request_id)
            .header("server", "AmazonS3")
    }

    pub(super) fn error_response(
        &self,
        failure: S3Failure,
        resource: &str,
        request_id: &str,
        head: bool,
    ) -> Response<Bytes> {
        let builder = self.base_response(failure.status, request_id);
        // A 304 and any answer to HEAD carry no body, as on S3.
        if head || failure.status == StatusCode::NOT_MODIFIED {
            return finish(builder, Bytes::new());
        }
        let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error>");
        let mut element = |name: &str, value: &str| {
            xml.push_str(&format!("<{name}>{}</{name}>", escape(value)));
        };
        element("Code", failure.code);
        element("Message", &failure.message);
        for (name, value) in &failure.extra {
            element(name, value);
        }
        element("Resource", resource);
        element("RequestId", request_id);
        xml.push_str("</Error>");
        finish(builder.header(CONTENT_TYPE, "application/xml"), Bytes::from(xml))
    }

    /// The answer to a request whose body was longer than the server reads.
    pub(crate) fn entity_too_large(&self, resource: &str, limit: usize) -> Response<Bytes> {
        let request_id = self.request_id();
        let failure =
            S3Failure::new(400, "EntityTooLarge", "Your proposed upload exceeds the maximum allowed object size.")
                .with("MaxSizeAllowed", limit.to_string());
        self.error_response(failure, resource, &request_id, false)
    }
}
