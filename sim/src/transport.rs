//! The S3 backend's HTTP transport over the simulated network.
//!
//! The production backend sends requests through
//! [`hoplock::s3::transport::HttpTransport`]; here a hyper HTTP/1.1 client
//! runs over turmoil's TCP, so signing, status mapping and retries run
//! unchanged. reqwest cannot take a custom stream, which is why this is
//! hyper.
//!
//! Each request opens its own connection. That costs a simulated handshake
//! but means a request abandoned at its deadline takes its connection with
//! it: a partition drops segments silently, and a pooled connection stuck
//! behind one would hang every later request.

use bytes::Bytes;
use hoplock::s3::transport::{HttpTransport, MAX_RESPONSE_BYTES, ResponseFuture, TransportError, TransportErrorKind};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;

/// Sends requests to one simulated host and port, such as `s3:9000`.
#[derive(Debug, Clone)]
pub struct SimTransport {
    address: String,
    client: Option<http::HeaderValue>,
}

impl SimTransport {
    /// A transport to `address` (`host:port`, resolved by turmoil).
    pub fn new(address: impl Into<String>) -> SimTransport {
        SimTransport { address: address.into(), client: None }
    }

    /// Names the sender of every request (`node#incarnation`) in a header
    /// the fake S3 reports, so the store's history says who wrote what.
    pub fn with_client(mut self, client: &str) -> SimTransport {
        self.client = http::HeaderValue::from_str(client).ok();
        self
    }
}

impl HttpTransport for SimTransport {
    fn send(&self, mut request: http::Request<Bytes>) -> ResponseFuture<'_> {
        if let Some(client) = &self.client {
            request.headers_mut().insert(crate::fake_s3::CLIENT_HEADER, client.clone());
        }
        Box::pin(async move {
            let io = |message: String| TransportError::new(TransportErrorKind::Io, message);
            let stream = turmoil::net::TcpStream::connect(self.address.as_str()).await.map_err(|err| {
                TransportError::new(TransportErrorKind::Connect, format!("connect {}: {err}", self.address))
            })?;
            let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|err| TransportError::new(TransportErrorKind::Connect, format!("handshake: {err}")))?;
            let exchange = async {
                let response = sender.send_request(request.map(Full::new)).await.map_err(|err| io(err.to_string()))?;
                let (parts, body) = response.into_parts();
                let body = Limited::new(body, MAX_RESPONSE_BYTES)
                    .collect()
                    .await
                    .map_err(|err| io(format!("reading the body: {err}")))?
                    .to_bytes();
                Ok(http::Response::from_parts(parts, body))
            };
            // The connection future does the actual I/O; it must be polled
            // alongside the exchange, and is dropped (closing the socket)
            // once the response is in.
            tokio::pin!(connection);
            tokio::pin!(exchange);
            tokio::select! {
                biased;
                result = &mut exchange => result,
                result = &mut connection => match result {
                    Err(err) => Err(io(format!("connection failed: {err}"))),
                    // The connection closed cleanly; the exchange finishes
                    // (or fails) on its own now.
                    Ok(()) => exchange.await,
                },
            }
        })
    }
}

/// turmoil's listener as the fake S3 server's [`Listener`]: the server lives
/// in `hoplock-testkit`, which knows nothing of the simulated network.
///
/// [`Listener`]: crate::fake_s3::server::Listener
pub struct SimListener(pub turmoil::net::TcpListener);

impl crate::fake_s3::server::Listener for SimListener {
    type Io = turmoil::net::TcpStream;

    async fn accept(&mut self) -> std::io::Result<(Self::Io, std::net::SocketAddr)> {
        self.0.accept().await
    }
}
