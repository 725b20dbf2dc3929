//! The S3 backend's HTTP transport over the simulated network, and the fake
//! S3's side of it.
//!
//! The production backend sends requests through
//! [`hoplock::s3::transport::HttpTransport`], which takes a whole
//! `http::Request` and gives back a whole `http::Response`; signing, status
//! mapping, retries and timeouts all run above it, unchanged here. Below it,
//! the simulator carries each request and each reply as one message over
//! turmoil's network, so latency, random loss, partitions and held links
//! apply to it as to any message. The message itself waits at the run's
//! [`Exchange`] under the number the datagram carries and is taken out when
//! the datagram arrives: nothing is encoded, and a datagram that never
//! arrives leaves its message unread.
//!
//! HTTP/1.1 on the wire is not what the simulator tests: the production
//! transport is reqwest's, and the tests against real stores (SeaweedFS,
//! moto, the emulators) and the chaos harness run it. What the simulator
//! needs of the transport is what a request can meet on the way: arriving
//! late, not at all, or its reply not arriving, and these are the network's.
//!
//! What each side sees is what it would see over a connection:
//! - a request whose datagram is lost is never handled, as a request whose
//!   bytes never arrived is never committed;
//! - a request that arrives is handled to the end, whether or not the
//!   client still waits (S3 commits a whole PUT whatever becomes of the
//!   answer);
//! - a reply the store drops ([`Reply::DropConnection`]) reaches the client
//!   as a connection closed before the answer, an I/O error, one network
//!   delay later;
//! - a reply the store keeps back ([`Reply::Silence`]) or that the network
//!   loses leaves the client waiting until its own deadline, as a dead
//!   connection would.
//!
//! Each request goes from a socket of its own, closed when the request ends
//! or is abandoned, so a reply that comes back after its client gave up
//! finds nobody, like a reply on a connection that was closed.
//!
//! One thing a request meets differently: a partition makes it wait out its
//! deadline, where turmoil's TCP refused a new connection through a cut link
//! at once. A silent partition (dropped packets) does not refuse a real
//! connection either; the S3 backend's handling of a refused connection is
//! tested against the real stores and in its own unit tests.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use hoplock::s3::transport::{HttpTransport, MAX_RESPONSE_BYTES, ResponseFuture, TransportError, TransportErrorKind};
use turmoil::net::UdpSocket;

use crate::fake_s3::{FakeS3, Reply, server};

/// One message waiting at the [`Exchange`] for its datagram to arrive.
enum Parcel {
    /// A request, for the store.
    Request(http::Request<Bytes>),
    /// The store's answer to the request of the same number.
    Response(http::Response<Bytes>),
    /// The store closed the connection instead of answering.
    HungUp,
}

/// Where messages wait while their datagrams travel: one per run, shared by
/// every node's transport and the fake S3. Numbers are given out in order,
/// so a run numbers its messages the same way every time.
///
/// A message whose datagram the network loses, or whose reply reaches a
/// socket that was closed meanwhile, is never taken out: nobody can tell a
/// lost datagram from a slow one (a held link delivers hours late). Those
/// stay until the run ends and its `Exchange` is dropped, one per lost
/// message, and nothing reads them.
#[derive(Clone, Default)]
pub struct Exchange {
    inner: Arc<Mutex<Parcels>>,
}

#[derive(Default)]
struct Parcels {
    next: u64,
    waiting: BTreeMap<u64, Parcel>,
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange").finish_non_exhaustive()
    }
}

impl Exchange {
    fn parcels(&self) -> std::sync::MutexGuard<'_, Parcels> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Leaves a request and returns the number its datagram carries.
    fn post_request(&self, request: http::Request<Bytes>) -> u64 {
        let mut parcels = self.parcels();
        parcels.next += 1;
        let number = parcels.next;
        parcels.waiting.insert(number, Parcel::Request(request));
        number
    }

    /// Leaves the answer to request `number`, under the same number.
    fn post_answer(&self, number: u64, answer: Parcel) {
        self.parcels().waiting.insert(number, answer);
    }

    /// Takes out the message whose datagram just arrived.
    fn take(&self, number: u64) -> Option<Parcel> {
        self.parcels().waiting.remove(&number)
    }
}

/// A datagram's whole content: the number of the message it stands for.
fn datagram(number: u64) -> [u8; 8] {
    number.to_be_bytes()
}

/// Waits for the next datagram on `socket` and reads its number; a datagram
/// of any other length (nobody sends one) is skipped.
async fn receive(socket: &UdpSocket) -> std::io::Result<(u64, std::net::SocketAddr)> {
    loop {
        let mut buffer = [0u8; 8];
        let (length, from) = socket.recv_from(&mut buffer).await?;
        if length == buffer.len() {
            return Ok((u64::from_be_bytes(buffer), from));
        }
    }
}

/// Sends requests to one simulated host and port, such as `s3:9000`.
#[derive(Debug, Clone)]
pub struct SimTransport {
    address: String,
    client: Option<http::HeaderValue>,
    exchange: Exchange,
}

impl SimTransport {
    /// A transport to `address` (`host:port`, resolved by turmoil) through
    /// the run's `exchange`.
    pub fn new(address: impl Into<String>, exchange: Exchange) -> SimTransport {
        SimTransport { address: address.into(), client: None, exchange }
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
            let unsent = |err: std::io::Error| {
                TransportError::new(TransportErrorKind::Connect, format!("connect {}: {err}", self.address))
            };
            // The socket is the request's connection: bound before anything
            // is sent, closed (dropped) when the request ends either way.
            let socket = UdpSocket::bind(("0.0.0.0", 0)).await.map_err(unsent)?;
            let number = self.exchange.post_request(request);
            if let Err(err) = socket.send_to(&datagram(number), self.address.as_str()).await {
                self.exchange.take(number);
                return Err(unsent(err));
            }
            loop {
                let (answered, _) = receive(&socket).await.map_err(|err| io(err.to_string()))?;
                // A port is used again once its request is over, so a late
                // answer to an earlier request can arrive here; it is
                // thrown away, as a reply on a closed connection is.
                let parcel = self.exchange.take(answered);
                if answered != number {
                    continue;
                }
                return match parcel {
                    Some(Parcel::Response(response)) if response.body().len() > MAX_RESPONSE_BYTES => {
                        Err(io(format!("reading the body: more than {MAX_RESPONSE_BYTES} bytes")))
                    }
                    Some(Parcel::Response(response)) => Ok(response),
                    Some(Parcel::HungUp) => Err(io("connection closed before the reply".into())),
                    Some(Parcel::Request(_)) | None => Err(io("a reply without its message".into())),
                };
            }
        })
    }
}

/// Serves `s3` on `port` of the current simulated host through the run's
/// `exchange`, until the host goes down: each request that arrives is
/// handled in a task of its own ([`server::handle_whole`]), and its answer
/// goes back to the socket it came from.
pub async fn serve(s3: FakeS3, port: u16, exchange: Exchange) -> std::io::Result<()> {
    let socket = Arc::new(UdpSocket::bind(("0.0.0.0", port)).await?);
    loop {
        let (number, from) = receive(&socket).await?;
        let Some(Parcel::Request(request)) = exchange.take(number) else {
            continue;
        };
        let (s3, socket, exchange) = (s3.clone(), socket.clone(), exchange.clone());
        tokio::spawn(async move {
            let answer = match server::handle_whole(&s3, request).await {
                Reply::Respond(response) => Parcel::Response(response),
                Reply::DropConnection => Parcel::HungUp,
                Reply::Silence => return,
            };
            exchange.post_answer(number, answer);
            // Sending fails only if there is no link to the client at all;
            // then nobody can take the answer.
            if socket.send_to(&datagram(number), from).await.is_err() {
                exchange.take(number);
            }
        });
    }
}
