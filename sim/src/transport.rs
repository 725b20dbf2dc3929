//! The S3 backend's HTTP transport over the simulated network.
//!
//! The production backend sends requests through
//! [`hoplock::s3::transport::HttpTransport`]; here a hyper HTTP/1.1 client
//! runs over turmoil's TCP, so signing, status mapping and retries run
//! unchanged. reqwest cannot take a custom stream, which is why this is
//! hyper.
//!
//! Connections are kept alive between requests, as the production
//! transport's pool keeps them: a request takes an idle connection, or opens
//! one when none is idle, and gives it back once its whole response is in.
//! A request abandoned at its deadline, or one whose connection failed,
//! takes its connection with it: a partition drops segments silently, and
//! a connection stuck behind one must never serve a later request.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use hoplock::s3::transport::{HttpTransport, MAX_RESPONSE_BYTES, ResponseFuture, TransportError, TransportErrorKind};
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::{Connection, SendRequest};
use hyper_util::rt::TokioIo;

/// Sends requests to one simulated host and port, such as `s3:9000`.
#[derive(Debug, Clone)]
pub struct SimTransport {
    address: String,
    client: Option<http::HeaderValue>,
    /// Connections no request is using, most recently used last.
    idle: Arc<Mutex<Vec<Open>>>,
}

/// One open HTTP/1.1 connection: the handle requests go through, and the
/// future that does the connection's I/O, which a request polls alongside
/// its exchange (nothing polls it while the connection is idle).
struct Open {
    sender: SendRequest<Full<Bytes>>,
    connection: Pin<Box<Connection<TokioIo<turmoil::net::TcpStream>, Full<Bytes>>>>,
}

impl std::fmt::Debug for Open {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Open").finish_non_exhaustive()
    }
}

impl Open {
    /// Whether the connection can take a request now: it has not closed
    /// (the server hung up, or it failed) and no exchange is left on it.
    /// Polls its I/O once, without waiting, to learn of a close that
    /// arrived while it was idle.
    fn usable(&mut self) -> bool {
        let mut context = Context::from_waker(Waker::noop());
        if self.connection.as_mut().poll(&mut context).is_ready() {
            return false;
        }
        matches!(self.sender.poll_ready(&mut context), Poll::Ready(Ok(())))
    }
}

impl SimTransport {
    /// A transport to `address` (`host:port`, resolved by turmoil).
    pub fn new(address: impl Into<String>) -> SimTransport {
        SimTransport { address: address.into(), client: None, idle: Arc::default() }
    }

    /// An idle connection that can take a request, if there is one; idle
    /// connections found closed are dropped on the way.
    fn take_idle(&self) -> Option<Open> {
        let mut idle = self.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        while let Some(mut open) = idle.pop() {
            if open.usable() {
                return Some(open);
            }
        }
        None
    }

    fn give_back(&self, open: Open) {
        self.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(open);
    }

    async fn connect(&self) -> Result<Open, TransportError> {
        let stream = turmoil::net::TcpStream::connect(self.address.as_str()).await.map_err(|err| {
            TransportError::new(TransportErrorKind::Connect, format!("connect {}: {err}", self.address))
        })?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|err| TransportError::new(TransportErrorKind::Connect, format!("handshake: {err}")))?;
        Ok(Open { sender, connection: Box::pin(connection) })
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
            let mut open = match self.take_idle() {
                Some(open) => open,
                None => self.connect().await?,
            };
            let result = {
                let Open { sender, connection } = &mut open;
                let exchange = async {
                    let response =
                        sender.send_request(request.map(Full::new)).await.map_err(|err| io(err.to_string()))?;
                    let (parts, body) = response.into_parts();
                    let body = Limited::new(body, MAX_RESPONSE_BYTES)
                        .collect()
                        .await
                        .map_err(|err| io(format!("reading the body: {err}")))?
                        .to_bytes();
                    Ok(http::Response::from_parts(parts, body))
                };
                // The connection future does the actual I/O; it must be polled
                // alongside the exchange.
                tokio::pin!(exchange);
                let result = tokio::select! {
                    biased;
                    result = &mut exchange => result,
                    result = connection.as_mut() => {
                        let result = match result {
                            Err(err) => Err(io(format!("connection failed: {err}"))),
                            // The connection closed cleanly; the exchange
                            // finishes (or fails) on its own now.
                            Ok(()) => exchange.await,
                        };
                        // A closed connection serves no one again.
                        return result;
                    }
                };
                result
            };
            if result.is_ok() {
                self.give_back(open);
            }
            result
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
