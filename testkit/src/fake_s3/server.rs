//! Serving the fake S3 over HTTP/1.1 with hyper, on any stream-yielding
//! listener: tokio's `TcpListener` for real loopback tests, or any other
//! [`Listener`]. A transport that carries whole requests rather than bytes
//! (the simulator's does) hands each to [`handle_whole`], which is what the
//! server does once a body has arrived.
//!
//! [`serve`] accepts connections until its `shutdown` future completes and
//! runs each on [`serve_connection`]. A connection whose reply is to be
//! dropped ([`Reply::DropConnection`]) is closed without an answer, which is
//! how a client experiences a lost reply.
//!
//! The server sets no header-read timeout: timeouts are the client's
//! business here, and a server timer would add a source of timing the
//! simulation does not control.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use hoplock::clock::SystemClock;
//! use hoplock_testkit::fake_s3::{FakeS3, server};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let s3 = FakeS3::builder(Arc::new(SystemClock::new()), 1)
//!     .credentials("AK", "SK")
//!     .bucket("leases")
//!     .build()?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! println!("http://{}", listener.local_addr()?);
//! server::serve(s3, listener, std::future::pending()).await;
//! # Ok(())
//! # }
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tracing::{debug, warn};

use super::http::{FakeS3, Reply};

/// The largest request body the server reads. S3 takes up to 5 GiB in one
/// PUT; a lease record is a few hundred bytes, and the fake keeps every
/// body in memory.
pub const MAX_BODY_BYTES: usize = 16 << 20;

/// A listener that yields byte streams: what [`serve`] needs of a socket.
pub trait Listener {
    /// One accepted connection.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;

    /// Waits for the next connection.
    fn accept(&mut self) -> impl Future<Output = io::Result<(Self::Io, SocketAddr)>>;
}

impl Listener for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;

    async fn accept(&mut self) -> io::Result<(Self::Io, SocketAddr)> {
        tokio::net::TcpListener::accept(self).await
    }
}

/// Serves `s3` on every connection `listener` accepts until `shutdown`
/// completes; then the connections still open are closed.
///
/// Connections run as tasks on the current tokio runtime (or simulated host).
pub async fn serve<L: Listener>(s3: FakeS3, mut listener: L, shutdown: impl Future<Output = ()>) {
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // Shutdown first, so a busy listener cannot keep the server alive.
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            // Reap finished connections, so the set stays as small as the
            // number of open ones.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((io, peer)) => {
                    debug!(%peer, "fake S3 accepted a connection");
                    connections.spawn(serve_connection(s3.clone(), io));
                }
                Err(err) => {
                    // Running out of file descriptors is worth a pause rather
                    // than a busy loop; nothing else stops the server.
                    warn!(error = %err, "fake S3 could not accept a connection");
                    let clock = s3.clock().clone();
                    clock.sleep_until(clock.now() + Duration::from_millis(10)).await;
                }
            },
        }
    }
    connections.shutdown().await;
}

/// Serves HTTP/1.1 requests on one connection until the client closes it,
/// it fails, or a reply is to be dropped.
pub async fn serve_connection<I>(s3: FakeS3, io: I)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let hang_up = Arc::new(Notify::new());
    let service = {
        let hang_up = hang_up.clone();
        service_fn(move |request: http::Request<Incoming>| {
            let s3 = s3.clone();
            let hang_up = hang_up.clone();
            async move {
                match answer(&s3, request).await {
                    Some(response) => Ok::<_, Infallible>(response.map(Full::new)),
                    None => {
                        // Closing the connection is the connection task's
                        // job: tell it, and never answer.
                        hang_up.notify_one();
                        std::future::pending().await
                    }
                }
            }
        })
    };
    let connection = http1::Builder::new().serve_connection(TokioIo::new(io), service);
    tokio::select! {
        biased;
        // Dropping the connection future closes the socket unanswered.
        () = hang_up.notified() => debug!("fake S3 dropped a reply"),
        result = connection => {
            if let Err(err) = result {
                debug!(error = %err, "fake S3 connection ended with an error");
            }
        }
    }
}

/// Reads the body and handles the request; `None` drops the reply.
///
/// A request whose body did not arrive whole is never handled, so it never
/// commits; one that did is handled by [`handle_whole`].
async fn answer(s3: &FakeS3, request: http::Request<Incoming>) -> Option<http::Response<Bytes>> {
    let (parts, body) = request.into_parts();
    let body = match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(err) if err.downcast_ref::<LengthLimitError>().is_some() => {
            return Some(s3.entity_too_large(parts.uri.path(), MAX_BODY_BYTES));
        }
        // The client went away mid-body: there is nobody to answer.
        Err(_) => return None,
    };
    match handle_whole(s3, http::Request::from_parts(parts, body)).await {
        Reply::Respond(response) => Some(response),
        Reply::Silence => std::future::pending().await,
        Reply::DropConnection => None,
    }
}

/// Handles a request whose body arrived whole, as the server does: a body
/// over [`MAX_BODY_BYTES`] is refused with S3's `EntityTooLarge` (a 400), and any
/// other request is handled to the end in a task of its own, even if the
/// client hangs up meanwhile, because S3 commits a fully received PUT
/// whether or not anyone waits for the answer.
///
/// For transports that carry whole messages rather than bytes, such as the
/// simulator's; [`serve`] reads the body first and then comes here.
///
/// ```
/// use std::sync::Arc;
/// use std::time::{Duration, SystemTime};
///
/// use bytes::Bytes;
/// use hoplock::clock::{Clock, DriftingClock};
/// use hoplock::s3::sigv4::{Credentials, sign};
/// use hoplock_testkit::fake_s3::{FakeS3, Reply, server};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let clock = Arc::new(DriftingClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000), 0));
/// let s3 = FakeS3::builder(clock.clone(), 42).credentials("AK", "SK").bucket("leases").build()?;
///
/// // One byte over the limit is refused before the store sees it.
/// let too_large = Bytes::from(vec![b'x'; server::MAX_BODY_BYTES + 1]);
/// let mut request = http::Request::put("http://s3.test/leases/k").body(too_large)?;
/// sign(&mut request, &Credentials::new("AK", "SK"), "us-east-1", clock.wall())?;
/// let Reply::Respond(response) = server::handle_whole(&s3, request).await else { unreachable!() };
/// assert_eq!(response.status(), 400);
/// assert!(std::str::from_utf8(response.body())?.contains("<Code>EntityTooLarge</Code>"));
/// assert!(s3.object("leases", "k").is_none());
/// # Ok(())
/// # }
/// ```
pub async fn handle_whole(s3: &FakeS3, request: http::Request<Bytes>) -> Reply {
    if request.body().len() > MAX_BODY_BYTES {
        return Reply::Respond(s3.entity_too_large(request.uri().path(), MAX_BODY_BYTES));
    }
    let handler = s3.clone();
    match tokio::spawn(async move { handler.handle(request).await }).await {
        Ok(reply) => reply,
        // The handler panicked: nobody can be answered.
        Err(_) => Reply::DropConnection,
    }
}
