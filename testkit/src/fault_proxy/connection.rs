//! One client connection through the proxy: read a request, judge it by the
//! standing faults, forward it, read the reply, judge that, deliver it.
//!
//! The client does not pipeline, so one loop that alternates between the
//! two directions sees every message in order and pairs each reply with its
//! request without any queue. The upstream connection is opened when the
//! first request is forwarded, so a connection accepted during a partition
//! never reaches the server, and it is reopened after the server closed it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::http::{self, Kind, Message};
use super::{AtomicCounters, Control, Exchange, LinkFaults, Shared};

/// The real clock: the proxy runs in real time, outside any simulation.
#[allow(clippy::disallowed_methods)] // Real time by design: the proxy is outside any simulation.
pub(super) fn now() -> Instant {
    Instant::now()
}

/// Sleeps on tokio's real timer until `at`.
#[allow(clippy::disallowed_methods)] // Real time by design: the proxy is outside any simulation.
pub(super) async fn sleep_until(at: Instant) {
    tokio::time::sleep_until(at.into()).await;
}

/// How a connection's task ended, when not by its own loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    Reset,
    Shutdown,
}

/// Runs one client connection to its end and closes it as its end demands.
pub(super) async fn serve(
    shared: Arc<Shared>,
    id: u64,
    accepted_us: u64,
    client: TcpStream,
    mut control: watch::Receiver<Control>,
) {
    let resets_seen = control.borrow_and_update().resets;
    // Nagle would add its own delay to the latency the harness asked for.
    let _ = client.set_nodelay(true);
    let mut conn = Connection {
        faults: shared.faults.subscribe(),
        shared: shared.clone(),
        id,
        accepted_us,
        client,
        client_buf: BytesMut::new(),
        upstream: None,
        pending: None,
        next_request_at: None,
        next_reply_at: None,
    };
    let ended = tokio::select! {
        () = conn.run() => None,
        ordered = control.wait_for(|c| c.shutdown || c.resets != resets_seen) => match ordered {
            Ok(c) if !c.shutdown => Some(Ended::Reset),
            _ => Some(Ended::Shutdown),
        },
    };
    // A request at the upstream when the connection ends still happened:
    // record it without a reply, or with the reply it got but never passed on.
    if let Some(exchange) = conn.pending.take() {
        (shared.record)(exchange);
    }
    if ended == Some(Ended::Reset) {
        // Linger 0 makes the close send RST instead of FIN.
        let _ = conn.client.set_zero_linger();
        AtomicCounters::bump(&shared.counters.resets);
    }
    // Dropping `conn` closes both sockets.
}

/// The upstream side of a connection.
struct Upstream {
    stream: TcpStream,
    buf: BytesMut,
}

struct Connection {
    shared: Arc<Shared>,
    faults: watch::Receiver<LinkFaults>,
    id: u64,
    accepted_us: u64,
    client: TcpStream,
    client_buf: BytesMut,
    upstream: Option<Upstream>,
    /// The exchange whose request is at the upstream and whose reply has
    /// not been delivered yet; recorded by [`serve`] if the task is stopped.
    pending: Option<Exchange>,
    /// When the last request and reply were (to be) delivered, so that a
    /// later message never overtakes an earlier one.
    next_request_at: Option<Instant>,
    next_reply_at: Option<Instant>,
}

/// Why the loop stops reading: the connection is closed quietly after it.
enum Stop {
    /// Either side closed, or a socket failed.
    Closed,
    /// One side sent bytes that are not HTTP/1.1.
    Malformed,
}

impl From<std::io::Error> for Stop {
    fn from(_: std::io::Error) -> Self {
        Stop::Closed
    }
}

impl From<http::Malformed> for Stop {
    fn from(_: http::Malformed) -> Self {
        Stop::Malformed
    }
}

impl Connection {
    async fn run(&mut self) {
        if let Err(Stop::Malformed) = self.exchanges().await {
            AtomicCounters::bump(&self.shared.counters.malformed);
        }
    }

    /// Serves requests one after another until the connection ends.
    async fn exchanges(&mut self) -> Result<(), Stop> {
        loop {
            let request = self.read_request().await?;
            let faults = self.faults.borrow().clone();
            if faults.partitioned {
                AtomicCounters::bump(&self.shared.counters.dropped_by_partition);
                continue;
            }
            let hang_up = faults.hang_up_bodies && request.has_body();
            let at = schedule(&mut self.next_request_at, self.shared.draw_latency(&faults));
            self.hold(at).await;

            if self.upstream.is_none() {
                match TcpStream::connect(self.shared.upstream).await {
                    Ok(stream) => {
                        let _ = stream.set_nodelay(true);
                        self.upstream = Some(Upstream { stream, buf: BytesMut::new() });
                    }
                    Err(_) => {
                        AtomicCounters::bump(&self.shared.counters.connect_failures);
                        return Err(Stop::Closed);
                    }
                }
            }
            let upstream = self.upstream.as_mut().ok_or(Stop::Closed)?;
            let to_send = if hang_up {
                let body_len = request.raw.len() - request.head_len;
                request.raw.slice(..request.head_len + body_len / 2)
            } else {
                request.raw.clone()
            };
            // Pending from before the first byte goes, so that a write cut
            // short (a failure, a reset) is still recorded: it may have
            // reached the upstream and been applied. Its invocation is
            // stamped here too, and never later: the upstream may apply the
            // request as soon as its bytes arrive, before this task runs
            // again, and an invocation stamped after that would make an
            // honest store's history look not linearizable.
            AtomicCounters::bump(&self.shared.counters.forwarded);
            self.pending = Some(Exchange {
                connection: self.id,
                accepted_us: self.accepted_us,
                method: request.method.clone(),
                target: request.target.clone(),
                request_headers: request.headers.clone(),
                request_body: request.body.clone(),
                forwarded_us: self.shared.micros(now()),
                status: None,
                response_headers: Vec::new(),
                response_body: Default::default(),
                answered_us: None,
                delivered: false,
                hung_up: hang_up,
            });
            upstream.stream.write_all(&to_send).await?;
            if hang_up {
                AtomicCounters::bump(&self.shared.counters.hang_ups);
                return Err(Stop::Closed);
            }

            let to_head = request.method.eq_ignore_ascii_case("HEAD");
            let reply = self.read_reply(to_head).await?;
            let answered = now();
            let faults = self.faults.borrow().clone();
            if let Some(exchange) = self.pending.as_mut() {
                exchange.status = Some(reply.status);
                exchange.response_headers = reply.headers.clone();
                exchange.response_body = reply.body.clone();
                exchange.answered_us = Some(self.shared.micros(answered));
            }
            if reply.close || self.upstream.as_ref().is_some_and(|up| !up.buf.is_empty()) {
                // The server ends its side after this reply (or sent more
                // than one reply, which cannot be paired with anything); the
                // next request, if the client connection lives on, gets a
                // new upstream connection.
                self.upstream = None;
            }
            if faults.partitioned || faults.drop_replies {
                AtomicCounters::bump(&self.shared.counters.replies_dropped);
                self.finish();
                continue;
            }
            let at = schedule(&mut self.next_reply_at, self.shared.draw_latency(&faults));
            self.hold(at).await;
            // A client that gave up and closed while its request was out
            // never sees the reply, even if the kernel would take the bytes.
            let delivered = !self.client_gone().await && self.client.write_all(&reply.raw).await.is_ok();
            if let Some(exchange) = self.pending.as_mut() {
                exchange.delivered = delivered;
            }
            self.finish();
            if !delivered || reply.close || request.close {
                return Err(Stop::Closed);
            }
        }
    }

    /// Records the pending exchange as it stands.
    fn finish(&mut self) {
        if let Some(exchange) = self.pending.take() {
            (self.shared.record)(exchange);
        }
    }

    /// Whether the client has closed its connection (or sent a reset). It
    /// does not pipeline, so with a request outstanding the only thing it
    /// can have sent is its end; a pending read means it is still there.
    async fn client_gone(&mut self) -> bool {
        let mut byte = [0u8; 1];
        tokio::select! {
            biased;
            peeked = self.client.peek(&mut byte) => !matches!(peeked, Ok(n) if n > 0),
            () = std::future::ready(()) => false,
        }
    }

    /// Waits until `at`, then for as long as a stall stands.
    async fn hold(&mut self, at: Instant) {
        sleep_until(at).await;
        // The sender lives in `Shared`, which outlives this task.
        let _ = self.faults.wait_for(|f| !f.stalled).await;
    }

    /// Reads the next whole request from the client. While waiting, it also
    /// watches the idle upstream connection: a server that closes it must
    /// not leave the client believing its connection is still good.
    async fn read_request(&mut self) -> Result<Message, Stop> {
        loop {
            if let Some(request) = http::parse(&mut self.client_buf, Kind::Request, false)? {
                return Ok(request);
            }
            self.client_buf.reserve(8192);
            let Connection { client, client_buf, upstream, .. } = &mut *self;
            let upstream_read = async {
                match upstream.as_mut() {
                    Some(up) => up.stream.read_buf(&mut up.buf).await,
                    None => std::future::pending::<std::io::Result<usize>>().await,
                }
            };
            let client_read = tokio::select! {
                read = client.read_buf(client_buf) => Some(read),
                _ = upstream_read => None,
            };
            match client_read {
                Some(read) => {
                    if read? == 0 {
                        return Err(Stop::Closed);
                    }
                }
                None => {
                    // EOF, an error, or bytes nobody asked for (say a 408
                    // before closing): this upstream connection is done, and
                    // the client learns it by its own connection closing,
                    // unless the link is silent towards it.
                    self.upstream = None;
                    let faults = self.faults.borrow().clone();
                    if !(faults.partitioned || faults.drop_replies) {
                        return Err(Stop::Closed);
                    }
                }
            }
        }
    }

    /// Reads the whole reply to the request just forwarded.
    async fn read_reply(&mut self, to_head: bool) -> Result<Message, Stop> {
        let up = self.upstream.as_mut().ok_or(Stop::Closed)?;
        let mut eof = false;
        loop {
            if let Some(reply) = http::parse(&mut up.buf, Kind::Response { to_head }, eof)? {
                return Ok(reply);
            }
            if eof {
                // Closed before the reply was whole: no reply.
                return Err(Stop::Closed);
            }
            up.buf.reserve(8192);
            eof = up.stream.read_buf(&mut up.buf).await? == 0;
        }
    }
}

/// When a message drawn `delay` should go: its own draw, but never before
/// the previous message in its direction.
fn schedule(previous: &mut Option<Instant>, delay: Duration) -> Instant {
    let start = now();
    // A delay past what `Instant` can hold (a harness's "forever") waits a year.
    let mut at = start.checked_add(delay).unwrap_or(start + Duration::from_secs(365 * 24 * 3600));
    if let Some(previous) = *previous {
        at = at.max(previous);
    }
    *previous = Some(at);
    at
}
