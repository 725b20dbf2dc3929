//! The HTTP transport seam.
//!
//! The S3 backend builds and signs requests itself and hands them to an
//! [`HttpTransport`] to send. Production uses [`ReqwestTransport`]; the
//! simulator plugs in a client over its simulated network, and tests plug in
//! a stub that scripts any answer. Timeouts are the backend's business, not
//! the transport's, so every transport behaves the same under them.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;

/// The future a transport returns.
pub type ResponseFuture<'a> = Pin<Box<dyn Future<Output = Result<http::Response<Bytes>, TransportError>> + Send + 'a>>;

/// Sends one HTTP request and collects the whole response.
pub trait HttpTransport: Send + Sync + fmt::Debug + 'static {
    /// Sends `request`. The backend drops the future when its deadline
    /// passes.
    fn send(&self, request: http::Request<Bytes>) -> ResponseFuture<'_>;
}

/// Whether a failed request may have reached the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportErrorKind {
    /// The connection was never made (refused, DNS, TLS handshake): the
    /// request was certainly not sent.
    Connect,
    /// The request may have been sent, in whole or in part.
    Io,
    /// The transport could not be built or the request not formed.
    Config,
}

/// A request that got no HTTP response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TransportError {
    /// Whether the request may have reached the server.
    pub kind: TransportErrorKind,
    /// What went wrong.
    pub message: String,
}

impl TransportError {
    /// An error of `kind`.
    pub fn new(kind: TransportErrorKind, message: impl Into<String>) -> TransportError {
        TransportError { kind, message: message.into() }
    }
}

/// The largest response body the backend reads. Lease records are a few
/// hundred bytes; S3 error bodies a few hundred more.
pub const MAX_RESPONSE_BYTES: usize = 1 << 20;

/// Options for [`ReqwestTransport`].
#[derive(Clone, Default)]
pub struct TransportOptions {
    /// Extra PEM-encoded root certificates to trust, for a private CA.
    pub ca_certificates_pem: Option<Vec<u8>>,
    /// An HTTP(S) proxy URL for every request.
    pub proxy: Option<String>,
}

impl fmt::Debug for TransportOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A proxy URL can carry a password; print only whether one is set.
        f.debug_struct("TransportOptions")
            .field("ca_certificates_pem", &self.ca_certificates_pem.as_ref().map(Vec::len))
            .field("proxy", &self.proxy.as_ref().map(|_| "<set>"))
            .finish()
    }
}

/// The production transport: reqwest over rustls, trusting the platform's
/// certificate store plus any extra CA given.
#[derive(Debug, Clone)]
pub struct ReqwestTransport {
    client: reqwest::Client,
}

impl ReqwestTransport {
    /// Builds the client.
    pub fn new(options: &TransportOptions) -> Result<ReqwestTransport, TransportError> {
        // rustls needs one process-wide crypto provider; installing it twice
        // is harmless, so the error from a second install is ignored.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let config = |message: String| TransportError::new(TransportErrorKind::Config, message);
        let mut builder = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).no_proxy();
        if let Some(pem) = &options.ca_certificates_pem {
            for certificate in reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|err| config(format!("the CA certificate file is not valid PEM: {err}")))?
            {
                builder = builder.add_root_certificate(certificate);
            }
        }
        if let Some(proxy) = &options.proxy {
            let proxy = reqwest::Proxy::all(proxy).map_err(|err| config(format!("invalid proxy URL: {err}")))?;
            builder = builder.proxy(proxy);
        }
        let client = builder.build().map_err(|err| config(format!("could not build the HTTP client: {err}")))?;
        Ok(ReqwestTransport { client })
    }
}

impl ReqwestTransport {
    /// The reqwest client, for credential sources that make requests of
    /// their own (feature `gcs` or `azure`).
    #[cfg(any(feature = "gcs", feature = "azure"))]
    pub(crate) fn client(&self) -> &reqwest::Client {
        &self.client
    }
}

impl HttpTransport for ReqwestTransport {
    fn send(&self, request: http::Request<Bytes>) -> ResponseFuture<'_> {
        Box::pin(async move {
            let request = reqwest::Request::try_from(request)
                .map_err(|err| TransportError::new(TransportErrorKind::Config, err.to_string()))?;
            self.execute(request).await
        })
    }
}

impl ReqwestTransport {
    /// Sends `request` with its body in two parts: the first `first_bytes`
    /// at once, the rest only once `gate` fires (or is dropped). The server
    /// has the headers and a partial body meanwhile.
    ///
    /// This is how a validator asks whether a provider checks a PUT's
    /// condition when the headers arrive rather than when the body is
    /// complete: another write lands while the body is held back, and the
    /// conditional PUT must then fail. It bypasses [`HttpTransport`], whose
    /// requests carry whole bodies, and sets `Content-Length` itself.
    pub fn send_gated(
        &self,
        request: http::Request<Bytes>,
        first_bytes: usize,
        gate: tokio::sync::oneshot::Receiver<()>,
    ) -> ResponseFuture<'_> {
        let (mut parts, body) = request.into_parts();
        let split = first_bytes.min(body.len());
        parts.headers.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(body.len()));
        let gated = GatedBody { first: Some(body.slice(..split)), rest: Some(body.slice(split..)), gate };
        let request = http::Request::from_parts(parts, reqwest::Body::wrap(gated));
        Box::pin(async move {
            let request = reqwest::Request::try_from(request)
                .map_err(|err| TransportError::new(TransportErrorKind::Config, err.to_string()))?;
            self.execute(request).await
        })
    }

    async fn execute(&self, request: reqwest::Request) -> Result<http::Response<Bytes>, TransportError> {
        let mut response = self.client.execute(request).await.map_err(|err| {
            let kind = if err.is_connect() { TransportErrorKind::Connect } else { TransportErrorKind::Io };
            TransportError::new(kind, error_chain(&err))
        })?;
        let mut builder = http::Response::builder().status(response.status()).version(response.version());
        if let Some(headers) = builder.headers_mut() {
            *headers = std::mem::take(response.headers_mut());
        }
        let mut body = Vec::new();
        while let Some(chunk) =
            response.chunk().await.map_err(|err| TransportError::new(TransportErrorKind::Io, error_chain(&err)))?
        {
            if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(TransportError::new(
                    TransportErrorKind::Io,
                    format!("response body larger than {MAX_RESPONSE_BYTES} bytes"),
                ));
            }
            body.extend_from_slice(&chunk);
        }
        builder.body(Bytes::from(body)).map_err(|err| TransportError::new(TransportErrorKind::Io, err.to_string()))
    }
}

/// A request body sent in two parts, the second once a gate opens.
struct GatedBody {
    first: Option<Bytes>,
    rest: Option<Bytes>,
    gate: tokio::sync::oneshot::Receiver<()>,
}

impl http_body::Body for GatedBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        use std::task::Poll;
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(http_body::Frame::data(first))));
        }
        if self.rest.is_some() {
            // A dropped sender opens the gate too: the body must end.
            if Pin::new(&mut self.gate).poll(cx).is_pending() {
                return Poll::Pending;
            }
            return Poll::Ready(self.rest.take().map(|rest| Ok(http_body::Frame::data(rest))));
        }
        Poll::Ready(None)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let len = |part: &Option<Bytes>| part.as_ref().map_or(0, Bytes::len) as u64;
        http_body::SizeHint::with_exact(len(&self.first) + len(&self.rest))
    }
}

/// An error and its causes on one line: reqwest's top-level message alone
/// ("error sending request") rarely says what happened.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}
