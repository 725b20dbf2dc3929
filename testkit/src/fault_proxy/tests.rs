//! The proxy over real loopback sockets in real time: a scripted upstream
//! that answers simple HTTP, and a raw client that speaks it byte by byte,
//! so each test controls exactly what crosses the wire.

// Real time and real timeouts: the proxy under test runs outside any simulation.
#![allow(clippy::disallowed_methods)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::http::{self, Kind, Message};
use super::{Counters, Exchange, FaultProxy, LinkFaults};

/// What the upstream has seen: every complete request, and every byte.
#[derive(Clone, Default)]
struct Seen {
    requests: Arc<Mutex<Vec<Message>>>,
    bytes: Arc<Mutex<Vec<u8>>>,
}

impl Seen {
    fn requests(&self) -> Vec<Message> {
        self.requests.lock().unwrap().clone()
    }

    fn bytes(&self) -> Vec<u8> {
        self.bytes.lock().unwrap().clone()
    }
}

/// The reply the upstream gives to a request.
fn answer(request: &Message) -> &'static [u8] {
    match (request.method.as_str(), request.target.as_str()) {
        ("HEAD", _) => b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
        (_, "/chunked") => {
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nt: 1\r\n\r\n"
        }
        (_, "/empty") => b"HTTP/1.1 204 No Content\r\n\r\n",
        (_, "/never") => b"",
        (_, "/close") => b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil-close",
        _ => b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\nETag: \"e\"\r\n\r\nok",
    }
}

/// A raw HTTP/1.1 upstream on loopback that answers by [`answer`].
async fn upstream() -> (SocketAddr, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Seen::default();
    let serving = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let seen = serving.clone();
            tokio::spawn(async move {
                let mut buf = BytesMut::new();
                loop {
                    while let Ok(Some(request)) = http::parse(&mut buf, Kind::Request, false) {
                        let reply = answer(&request);
                        seen.requests.lock().unwrap().push(request);
                        if stream.write_all(reply).await.is_err() || reply.ends_with(b"until-close") {
                            return;
                        }
                    }
                    let mut chunk = [0u8; 4096];
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            seen.bytes.lock().unwrap().extend_from_slice(&chunk[..n]);
                            buf.extend_from_slice(&chunk[..n]);
                        }
                    }
                }
            });
        }
    });
    (addr, seen)
}

type Records = Arc<Mutex<Vec<Exchange>>>;

/// The proxy in front of a fresh upstream, with its records collected.
async fn proxy() -> (FaultProxy, Seen, Records) {
    let (upstream, seen) = upstream().await;
    let records = Records::default();
    let sink = records.clone();
    let proxy = FaultProxy::start(upstream, Instant::now(), 7, move |e| sink.lock().unwrap().push(e)).await.unwrap();
    (proxy, seen, records)
}

/// A raw client connection.
struct Client {
    stream: TcpStream,
    buf: BytesMut,
}

impl Client {
    async fn connect(proxy: &FaultProxy) -> Client {
        Client { stream: TcpStream::connect(proxy.addr()).await.unwrap(), buf: BytesMut::new() }
    }

    async fn send(&mut self, request: &[u8]) {
        self.stream.write_all(request).await.unwrap();
    }

    /// The next reply, or `None` if none came within `wait` (or the
    /// connection ended first).
    async fn reply(&mut self, to_head: bool, wait: Duration) -> Option<Message> {
        let read = async {
            loop {
                if let Some(reply) = http::parse(&mut self.buf, Kind::Response { to_head }, false).unwrap() {
                    return Some(reply);
                }
                match self.stream.read_buf(&mut self.buf).await {
                    // A reply may run until the close.
                    Ok(0) => return http::parse(&mut self.buf, Kind::Response { to_head }, true).ok().flatten(),
                    Err(_) => return None,
                    Ok(_) => {}
                }
            }
        };
        tokio::time::timeout(wait, read).await.ok().flatten()
    }

    async fn roundtrip(&mut self, request: &[u8]) -> Message {
        self.send(request).await;
        self.reply(request.starts_with(b"HEAD"), Duration::from_secs(1)).await.expect("a reply")
    }
}

const PUT: &[u8] = b"PUT /bucket/key?x=y HTTP/1.1\r\nHost: s3\r\nContent-Length: 3\r\n\r\nabc";
const GET: &[u8] = b"GET /bucket/key HTTP/1.1\r\nHost: s3\r\n\r\n";

/// Waits (briefly) until `records` holds `n` exchanges.
async fn records(records: &Records, n: usize) -> Vec<Exchange> {
    for _ in 0..100 {
        if records.lock().unwrap().len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    records.lock().unwrap().clone()
}

#[tokio::test]
async fn passes_through_lengths_chunks_and_head() {
    let (proxy, seen, recorded) = proxy().await;
    let mut client = Client::connect(&proxy).await;

    let reply = client.roundtrip(PUT).await;
    assert_eq!((reply.status, &reply.body[..]), (201, &b"ok"[..]));
    let reply = client.roundtrip(b"GET /chunked HTTP/1.1\r\nHost: s3\r\n\r\n").await;
    assert_eq!((reply.status, &reply.body[..]), (200, &b"hello world"[..]));
    let reply = client.roundtrip(b"HEAD /head HTTP/1.1\r\nHost: s3\r\n\r\n").await;
    assert_eq!((reply.status, reply.body.len()), (200, 0));
    let chunked_put = b"PUT /up HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
    let reply = client.roundtrip(chunked_put).await;
    assert_eq!(reply.status, 201);
    let reply = client.roundtrip(b"GET /empty HTTP/1.1\r\n\r\n").await;
    assert_eq!(reply.status, 204);

    // The upstream got the client's bytes unchanged, on one connection.
    let requests = seen.requests();
    assert_eq!(requests.len(), 5);
    assert_eq!(&requests[0].raw[..], PUT);
    assert_eq!(&requests[3].raw[..], &chunked_put[..]);

    let records = records(&recorded, 5).await;
    assert_eq!(records.len(), 5);
    let put = &records[0];
    assert_eq!((put.method.as_str(), put.target.as_str()), ("PUT", "/bucket/key?x=y"));
    assert_eq!(&put.request_body[..], b"abc");
    assert!(put.request_headers.contains(&("content-length".into(), "3".into())));
    assert_eq!(put.status, Some(201));
    assert!(put.response_headers.contains(&("etag".into(), "\"e\"".into())));
    assert_eq!(&put.response_body[..], b"ok");
    assert!(put.delivered && !put.hung_up);
    assert_eq!(&records[1].response_body[..], b"hello world");
    assert_eq!(&records[3].request_body[..], b"abcde");
    assert_eq!(records[4].status, Some(204));
    for r in &records {
        assert_eq!(r.connection, 1);
        assert!(r.forwarded_us <= r.answered_us.unwrap());
    }
    assert!(records.windows(2).all(|w| w[0].answered_us <= Some(w[1].forwarded_us)));
    assert_eq!(proxy.counters(), Counters { connections: 1, forwarded: 5, ..Counters::default() });

    // A reply the server ends by closing is delivered, and so is the close.
    let reply = client.roundtrip(b"GET /close HTTP/1.1\r\n\r\n").await;
    assert_eq!(&reply.body[..], b"until-close");
    assert!(client.reply(false, Duration::from_secs(1)).await.is_none());
}

/// A hyper server on loopback that answers each request with the size of
/// its body, as the repo's fake S3 server would serve.
async fn hyper_upstream() -> SocketAddr {
    use http_body_util::{BodyExt, Full};
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = service_fn(|request: hyper::Request<hyper::body::Incoming>| async move {
                let body = request.into_body().collect().await?.to_bytes();
                let reply = format!("{} bytes", body.len());
                Ok::<_, hyper::Error>(hyper::Response::new(Full::new(bytes::Bytes::from(reply))))
            });
            tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
        }
    });
    addr
}

#[tokio::test]
async fn keeps_a_hyper_connection_alive_through_faults() {
    let records = Records::default();
    let sink = records.clone();
    let proxy = FaultProxy::start(hyper_upstream().await, Instant::now(), 1, move |e| sink.lock().unwrap().push(e))
        .await
        .unwrap();
    proxy.set(LinkFaults {
        latency_min: Duration::from_millis(1),
        latency_max: Duration::from_millis(20),
        ..LinkFaults::default()
    });
    let mut client = Client::connect(&proxy).await;
    for i in 0..5usize {
        let body = "x".repeat(i * 100);
        let request = format!("PUT /k{i} HTTP/1.1\r\nHost: s3\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        let reply = client.roundtrip(request.as_bytes()).await;
        assert_eq!((reply.status, reply.body), (200, bytes::Bytes::from(format!("{} bytes", i * 100))));
    }
    let records = self::records(&records, 5).await;
    assert_eq!(records.iter().map(|r| r.target.as_str()).collect::<Vec<_>>(), ["/k0", "/k1", "/k2", "/k3", "/k4"]);
    assert!(records.iter().all(|r| r.connection == 1 && r.status == Some(200) && r.delivered));
    assert!(records[4].response_headers.iter().any(|(name, _)| name == "date"));
    assert_eq!(proxy.counters().forwarded, 5);
}

#[tokio::test]
async fn latency_delays_both_directions() {
    let (proxy, _seen, recorded) = proxy().await;
    let latency = Duration::from_millis(60);
    proxy.set(LinkFaults { latency_min: latency, latency_max: latency * 2, ..LinkFaults::default() });
    let mut client = Client::connect(&proxy).await;
    let started = Instant::now();
    client.roundtrip(PUT).await;
    assert!(started.elapsed() >= latency * 2, "{:?}", started.elapsed());

    // A spike that always happens adds its whole length.
    proxy.set(LinkFaults { spike_chance: 1.0, spike: latency, ..LinkFaults::default() });
    let started = Instant::now();
    client.roundtrip(GET).await;
    assert!(started.elapsed() >= latency * 2, "{:?}", started.elapsed());
    assert!(records(&recorded, 2).await.iter().all(|r| r.delivered));
}

#[tokio::test]
async fn a_stall_holds_messages_until_cleared() {
    let (proxy, seen, recorded) = proxy().await;
    proxy.set(LinkFaults { stalled: true, ..LinkFaults::default() });
    let mut client = Client::connect(&proxy).await;
    client.send(PUT).await;
    assert!(client.reply(false, Duration::from_millis(300)).await.is_none());
    assert!(seen.requests().is_empty(), "a stalled request must not reach the upstream");

    proxy.set(LinkFaults::default());
    let reply = client.reply(false, Duration::from_secs(1)).await.expect("delivered once the stall clears");
    assert_eq!(reply.status, 201);
    assert_eq!(seen.requests().len(), 1);
    let records = records(&recorded, 1).await;
    assert_eq!((records[0].status, records[0].delivered), (Some(201), true));
}

#[tokio::test]
async fn a_reply_to_a_client_that_gave_up_is_not_delivered() {
    let (proxy, seen, recorded) = proxy().await;
    proxy.set(LinkFaults { stalled: true, ..LinkFaults::default() });
    let mut client = Client::connect(&proxy).await;
    client.send(PUT).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(client);
    tokio::time::sleep(Duration::from_millis(50)).await;

    // The held request still lands: the write the client gave up on.
    proxy.set(LinkFaults::default());
    let records = records(&recorded, 1).await;
    assert_eq!(seen.requests().len(), 1);
    assert_eq!((records[0].status, records[0].delivered), (Some(201), false));
}

#[tokio::test]
async fn dropped_replies_reach_the_record_but_not_the_client() {
    let (proxy, seen, recorded) = proxy().await;
    proxy.set(LinkFaults { drop_replies: true, ..LinkFaults::default() });
    let mut client = Client::connect(&proxy).await;
    client.send(PUT).await;
    assert!(client.reply(false, Duration::from_millis(300)).await.is_none());
    assert_eq!(seen.requests().len(), 1, "the request reaches the upstream");

    let records = records(&recorded, 1).await;
    assert_eq!(records.len(), 1);
    assert_eq!((records[0].status, records[0].delivered), (Some(201), false));
    assert_eq!(&records[0].response_body[..], b"ok");
    assert_eq!(proxy.counters().replies_dropped, 1);
}

#[tokio::test]
async fn a_partition_drops_requests_until_lifted() {
    let (proxy, seen, recorded) = proxy().await;
    proxy.set(LinkFaults { partitioned: true, ..LinkFaults::default() });
    let mut client = Client::connect(&proxy).await;
    client.send(PUT).await;
    assert!(client.reply(false, Duration::from_millis(300)).await.is_none());
    assert!(seen.requests().is_empty());
    assert!(recorded.lock().unwrap().is_empty(), "a dropped request is only counted");
    assert_eq!(proxy.counters().dropped_by_partition, 1);

    proxy.set(LinkFaults::default());
    let mut fresh = Client::connect(&proxy).await;
    assert_eq!(fresh.roundtrip(GET).await.status, 201);
    // The partitioned connection flows again too.
    assert_eq!(client.roundtrip(GET).await.status, 201);
    assert_eq!(seen.requests().len(), 2);
    let records = records(&recorded, 2).await;
    assert_eq!(records.iter().map(|r| r.connection).collect::<Vec<_>>(), [2, 1]);
}

#[tokio::test]
async fn reset_connections_resets_the_client() {
    let (proxy, _seen, _recorded) = proxy().await;
    let mut client = Client::connect(&proxy).await;
    client.roundtrip(GET).await;
    proxy.reset_connections();

    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(1), client.stream.read(&mut byte)).await.expect("not silent");
    assert_eq!(read.map_err(|e| e.kind()), Err(std::io::ErrorKind::ConnectionReset));
    assert_eq!(proxy.counters().resets, 1);

    // Connections opened afterwards are not affected.
    let mut fresh = Client::connect(&proxy).await;
    assert_eq!(fresh.roundtrip(GET).await.status, 201);
}

#[tokio::test]
async fn hang_up_forwards_half_a_body_then_closes() {
    let (proxy, seen, recorded) = proxy().await;
    proxy.set(LinkFaults { hang_up_bodies: true, ..LinkFaults::default() });
    let mut client = Client::connect(&proxy).await;
    let body = vec![b'x'; 1000];
    let head = b"PUT /bucket/key HTTP/1.1\r\nContent-Length: 1000\r\n\r\n";
    client.send(&[&head[..], &body].concat()).await;
    assert!(client.reply(false, Duration::from_secs(1)).await.is_none(), "the client connection closes");

    for _ in 0..100 {
        if seen.bytes().len() >= head.len() + 500 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(seen.bytes(), [&head[..], &body[..500]].concat(), "a head and half a body");
    assert!(seen.requests().is_empty(), "never a whole request");
    let records = records(&recorded, 1).await;
    assert!(records[0].hung_up);
    assert_eq!((records[0].status, records[0].delivered), (None, false));
    assert_eq!(records[0].request_body.len(), 1000);
    assert_eq!(proxy.counters().hang_ups, 1);

    // Requests without a body are not cut off.
    let mut client = Client::connect(&proxy).await;
    assert_eq!(client.roundtrip(GET).await.status, 201);
}

#[tokio::test]
async fn malformed_http_closes_and_counts() {
    let (proxy, seen, _recorded) = proxy().await;
    let mut client = Client::connect(&proxy).await;
    client.send(b"NOT HTTP AT ALL\r\n\r\n").await;
    assert!(client.reply(false, Duration::from_secs(1)).await.is_none());
    assert_eq!(proxy.counters().malformed, 1);
    assert!(seen.bytes().is_empty());
}

#[tokio::test]
async fn shutdown_records_a_request_in_flight() {
    let (proxy, seen, recorded) = proxy().await;
    let mut client = Client::connect(&proxy).await;
    client.send(b"GET /never HTTP/1.1\r\n\r\n").await;
    for _ in 0..100 {
        if !seen.requests().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    proxy.shutdown();
    assert!(client.reply(false, Duration::from_secs(1)).await.is_none(), "closed");
    let records = records(&recorded, 1).await;
    assert_eq!(records.len(), 1);
    assert_eq!((records[0].target.as_str(), records[0].status, records[0].answered_us), ("/never", None, None));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(TcpStream::connect(proxy.addr()).await.is_err(), "no longer accepting");
}

#[test]
fn framing_handles_interim_replies_trailers_and_bad_lengths() {
    let mut buf =
        BytesMut::from(&b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxHTTP/1.1"[..]);
    let reply = http::parse(&mut buf, Kind::Response { to_head: false }, false).unwrap().unwrap();
    assert_eq!((reply.status, &reply.body[..]), (200, &b"x"[..]));
    assert_eq!(&buf[..], b"HTTP/1.1", "the next message stays buffered");

    let mut partial = BytesMut::from(&b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab"[..]);
    assert_eq!(http::parse(&mut partial, Kind::Request, false), Ok(None));

    for bad in [
        &b"PUT / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"[..],
        b"PUT / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        b"PUT / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nabc\r\n",
    ] {
        assert!(http::parse(&mut BytesMut::from(bad), Kind::Request, false).is_err(), "{bad:?}");
    }
    let close = b"HTTP/1.0 200 OK\r\n\r\nrest";
    let reply = http::parse(&mut BytesMut::from(&close[..]), Kind::Response { to_head: false }, true).unwrap().unwrap();
    assert_eq!((&reply.body[..], reply.close), (&b"rest"[..], true));
}

#[tokio::test]
async fn an_endless_delay_holds_until_reset() {
    let (proxy, seen, _recorded) = proxy().await;
    proxy.set(LinkFaults { latency_max: Duration::MAX, spike_chance: 1.0, spike: Duration::MAX, ..Default::default() });
    let mut client = Client::connect(&proxy).await;
    client.send(GET).await;
    let mut byte = [0u8; 1];
    let silent = tokio::time::timeout(Duration::from_millis(200), client.stream.read(&mut byte)).await;
    assert!(silent.is_err(), "held, and the connection still open: {silent:?}");
    assert!(seen.requests().is_empty());

    proxy.reset_connections();
    let read = tokio::time::timeout(Duration::from_secs(1), client.stream.read(&mut byte)).await.expect("not silent");
    assert_eq!(read.map_err(|e| e.kind()), Err(std::io::ErrorKind::ConnectionReset));
}

proptest::proptest! {
    /// Framing never panics, whatever either side sends.
    #[test]
    fn framing_never_panics(
        prefix in proptest::sample::select(vec![
            &b""[..],
            b"PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\n",
        ]),
        bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
        eof in proptest::prelude::any::<bool>(),
    ) {
        for kind in [Kind::Request, Kind::Response { to_head: false }, Kind::Response { to_head: true }] {
            let mut buf = BytesMut::from(&[prefix, &bytes[..]].concat()[..]);
            let _ = http::parse(&mut buf, kind, eof);
        }
    }
}
