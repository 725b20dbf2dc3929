//! A TCP fault proxy for HTTP/1.1: it sits between a real S3 client (a
//! `hoplock run` process) and a real S3 server on loopback, forwards their
//! traffic message by message, does to it what a bad network does, and
//! records every request it forwarded with the reply the server gave.
//!
//! # Why
//!
//! The simulator shows what hoplock does over a simulated network; this
//! proxy lets a chaos harness show the same of the real binary, with the
//! real HTTP stack and the real server. The faults act on whole HTTP
//! messages rather than on bytes, because the interesting failures of an
//! S3 client are message-shaped: a request that lands late, a reply that
//! never comes back although the write was applied, a body cut off midway.
//! The [`Exchange`] records let the harness see what the server actually
//! did, which the client cannot always know, and feed it to the
//! linearizability checker.
//!
//! # Faults
//!
//! The standing faults are a [`LinkFaults`], replaced whole with
//! [`FaultProxy::set`]. A message is judged by the faults standing at the
//! moment its last byte arrives at the proxy, except for the stall, which
//! holds any message that is ready to go while it stands.
//!
//! - **Latency** (`latency_min`..`latency_max`, plus `spike` with
//!   `spike_chance`) delays each request before it is forwarded and each
//!   reply before it is delivered. Real links are slow and sometimes very
//!   slow; the long tail is what makes a renewal miss its deadline. Draws
//!   come from the seed, and a message never overtakes the one before it
//!   on its connection, as on TCP.
//! - **Stall** (`stalled`) holds complete messages in both directions and
//!   delivers them in order once it is cleared. This is a request stuck in
//!   flight: the client gives up, and the write lands later anyway, which
//!   is the case fencing exists for.
//! - **Dropped replies** (`drop_replies`) forward requests and read the
//!   server's replies, which are recorded and then thrown away; the client
//!   hears nothing more and times out. This is the ambiguous outcome: the
//!   write may have been applied although the client saw a failure.
//! - **Partition** (`partitioned`) drops requests before they reach the
//!   server and delivers nothing; new connections are accepted and then go
//!   silent, as a connection through a dead route does. Lifting it lets
//!   later requests through, on the same connection or new ones.
//! - **Hang-up** (`hang_up_bodies`) forwards a request with a body up to
//!   about half of the body, then closes both connections. The server sees
//!   a truncated upload, which it must not apply.
//! - **Reset** ([`FaultProxy::reset_connections`]) aborts every open
//!   connection with a TCP RST to the client, as a crashed middlebox does.
//!
//! # Framing and records
//!
//! Requests on a connection are sequential (the client does not pipeline),
//! so each reply is paired with the request before it. Bodies are framed
//! by `Content-Length` or chunked coding and forwarded byte for byte; the
//! record holds them decoded. Malformed HTTP from either side closes that
//! connection and is counted in [`Counters::malformed`]. [`Exchange`] is
//! recorded once per request that was forwarded, including requests whose
//! reply never came (the server closed, a hang-up, a reset or a shutdown);
//! requests dropped by a partition are only counted.
//!
//! A request is forwarded once its whole body has arrived, so a client that
//! sends `Expect: 100-continue` and waits for the interim reply before its
//! body waits out its own expect timeout first; hoplock's client does not.
//!
//! The proxy runs in real time on tokio tasks, outside any simulation, so
//! it reads the real clock and sleeps on tokio's timer.

mod connection;
mod http;
#[cfg(test)]
mod tests;

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The faults standing on the link; see the [module docs](self) for why
/// each exists. The default is a clean link.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LinkFaults {
    /// The least delay added to each request before it is forwarded and to
    /// each reply before it is delivered.
    pub latency_min: Duration,
    /// The most such delay; draws are uniform in `[latency_min, latency_max]`
    /// (a maximum below the minimum means the minimum).
    pub latency_max: Duration,
    /// The chance, in `[0, 1]`, that a message gets `spike` more (a long tail).
    pub spike_chance: f64,
    /// The extra delay of a spike.
    pub spike: Duration,
    /// While true, complete messages in either direction are held, and
    /// delivered in order when it is cleared (a request stuck in flight).
    pub stalled: bool,
    /// One-way blackhole: requests reach the upstream, its replies are read
    /// (so the record knows the outcome) and dropped; the client's
    /// connection gets nothing more.
    pub drop_replies: bool,
    /// Full partition: requests are dropped, nothing is delivered; new
    /// connections are accepted but go silent.
    pub partitioned: bool,
    /// Hang-up: each request with a body is forwarded with its head and
    /// about half its body, then both connections are closed.
    pub hang_up_bodies: bool,
}

/// One request forwarded to the upstream, and what became of it.
#[derive(Clone, Debug)]
pub struct Exchange {
    /// The proxy's number for the client connection, from 1 in accept order.
    pub connection: u64,
    /// When the client connection was accepted, in microseconds since the
    /// proxy's origin: a process's requests come on connections it opened,
    /// so this says which process sent them, even when the record is made
    /// after another has taken its place.
    pub accepted_us: u64,
    /// The request method, e.g. `PUT`.
    pub method: String,
    /// The request target as sent, e.g. `/bucket/key?x=y`.
    pub target: String,
    /// The request's header fields in order, names lower-cased.
    pub request_headers: Vec<(String, String)>,
    /// The request body, with any chunked coding removed (the whole body
    /// the client sent, also when a hang-up forwarded only part of it).
    pub request_body: Bytes,
    /// When the proxy began forwarding the request to the upstream, before
    /// its first byte went, in microseconds since the proxy's origin: the
    /// upstream cannot have acted on it earlier.
    pub forwarded_us: u64,
    /// The upstream's final status, or `None` when no complete reply came
    /// (the upstream closed, a hang-up, a reset or a shutdown).
    pub status: Option<u16>,
    /// The reply's header fields in order, names lower-cased.
    pub response_headers: Vec<(String, String)>,
    /// The reply body, with any chunked coding removed.
    pub response_body: Bytes,
    /// When the upstream's whole reply had arrived, in microseconds since
    /// the proxy's origin.
    pub answered_us: Option<u64>,
    /// Whether the reply was passed on to the client.
    pub delivered: bool,
    /// Whether the request was cut off mid-body by
    /// [`LinkFaults::hang_up_bodies`].
    pub hung_up: bool,
}

/// What the proxy has done so far, counted over all connections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Client connections accepted.
    pub connections: u64,
    /// Requests forwarded to the upstream, hung-up ones included.
    pub forwarded: u64,
    /// Requests dropped by a partition.
    pub dropped_by_partition: u64,
    /// Replies read from the upstream and not delivered (dropped replies,
    /// or a partition that began while the request was at the upstream).
    pub replies_dropped: u64,
    /// Connections reset by [`FaultProxy::reset_connections`].
    pub resets: u64,
    /// Requests cut off by [`LinkFaults::hang_up_bodies`].
    pub hang_ups: u64,
    /// Connections closed because one side sent malformed HTTP.
    pub malformed: u64,
    /// Connections closed because the upstream refused a connection.
    pub connect_failures: u64,
}

/// A running fault proxy; a cheap handle that can be cloned. The proxy
/// shuts down when [`FaultProxy::shutdown`] is called or the last handle is
/// dropped.
#[derive(Clone)]
pub struct FaultProxy {
    shared: Arc<Shared>,
    addr: SocketAddr,
    _guard: Arc<ShutdownOnDrop>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy").field("addr", &self.addr).field("upstream", &self.shared.upstream).finish()
    }
}

impl FaultProxy {
    /// Listens on `127.0.0.1:0` and forwards every connection to `upstream`.
    ///
    /// Times in records are microseconds since `origin` (the harness's
    /// clock); latency draws come from `seed`; `record` is called once per
    /// request forwarded to the upstream, from the proxy's tasks. Must be
    /// called within a tokio runtime.
    pub async fn start(
        upstream: SocketAddr,
        origin: Instant,
        seed: u64,
        record: impl Fn(Exchange) + Send + Sync + 'static,
    ) -> io::Result<FaultProxy> {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            origin,
            rng: Mutex::new(seed),
            faults: watch::Sender::new(LinkFaults::default()),
            control: watch::Sender::new(Control::default()),
            record: Box::new(record),
            counters: AtomicCounters::default(),
            next_connection: AtomicU64::new(1),
        });
        tokio::spawn(accept(shared.clone(), listener));
        let guard = Arc::new(ShutdownOnDrop(shared.clone()));
        Ok(FaultProxy { shared, addr, _guard: guard })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Replaces the standing faults. Messages completed from now on are
    /// judged by them; held messages are released when the stall clears.
    pub fn set(&self, faults: LinkFaults) {
        self.shared.faults.send_replace(faults);
    }

    /// The standing faults.
    pub fn faults(&self) -> LinkFaults {
        self.shared.faults.borrow().clone()
    }

    /// Aborts every open connection: the client gets a TCP RST (linger 0,
    /// then close) and the upstream connection is closed. Connections
    /// accepted afterwards are not affected.
    pub fn reset_connections(&self) {
        self.shared.control.send_modify(|c| c.resets += 1);
    }

    /// What the proxy has done so far.
    pub fn counters(&self) -> Counters {
        self.shared.counters.snapshot()
    }

    /// Stops accepting and closes every connection. Requests at the
    /// upstream are recorded without a reply.
    pub fn shutdown(&self) {
        self.shared.control.send_modify(|c| c.shutdown = true);
    }
}

/// State shared by the handle, the accept loop and the connections.
struct Shared {
    upstream: SocketAddr,
    origin: Instant,
    /// splitmix64 state for latency draws.
    rng: Mutex<u64>,
    faults: watch::Sender<LinkFaults>,
    control: watch::Sender<Control>,
    record: Box<dyn Fn(Exchange) + Send + Sync>,
    counters: AtomicCounters,
    next_connection: AtomicU64,
}

impl Shared {
    /// Microseconds from the origin to `at`.
    fn micros(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_micros()).unwrap_or(u64::MAX)
    }

    /// The delay to add to one message under `faults`.
    fn draw_latency(&self, faults: &LinkFaults) -> Duration {
        let max = faults.latency_max.max(faults.latency_min);
        let spread = max - faults.latency_min;
        let mut delay = faults.latency_min;
        if !spread.is_zero() {
            delay = delay.saturating_add(spread.mul_f64(self.unit()));
        }
        if faults.spike_chance > 0.0 && self.unit() < faults.spike_chance {
            // Saturating, so that `Duration::MAX` can stand for "forever".
            delay = delay.saturating_add(faults.spike);
        }
        delay
    }

    /// A uniform draw in `[0, 1)` from splitmix64.
    fn unit(&self) -> f64 {
        let mut state = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Orders from the handle to the tasks.
#[derive(Clone, Copy, Debug, Default)]
struct Control {
    /// Bumped by each [`FaultProxy::reset_connections`]; a connection resets
    /// when it differs from the value it saw when accepted.
    resets: u64,
    shutdown: bool,
}

#[derive(Default)]
struct AtomicCounters {
    connections: AtomicU64,
    forwarded: AtomicU64,
    dropped_by_partition: AtomicU64,
    replies_dropped: AtomicU64,
    resets: AtomicU64,
    hang_ups: AtomicU64,
    malformed: AtomicU64,
    connect_failures: AtomicU64,
}

impl AtomicCounters {
    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> Counters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Counters {
            connections: get(&self.connections),
            forwarded: get(&self.forwarded),
            dropped_by_partition: get(&self.dropped_by_partition),
            replies_dropped: get(&self.replies_dropped),
            resets: get(&self.resets),
            hang_ups: get(&self.hang_ups),
            malformed: get(&self.malformed),
            connect_failures: get(&self.connect_failures),
        }
    }
}

/// Shuts the proxy down when the last handle goes.
struct ShutdownOnDrop(Arc<Shared>);

impl Drop for ShutdownOnDrop {
    fn drop(&mut self) {
        self.0.control.send_modify(|c| c.shutdown = true);
    }
}

/// Accepts connections until shutdown, each on its own task.
async fn accept(shared: Arc<Shared>, listener: TcpListener) {
    let mut control = shared.control.subscribe();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = control.wait_for(|c| c.shutdown) => return,
        };
        let Ok((client, _)) = accepted else {
            // Accept errors (out of descriptors, an aborted handshake)
            // concern one connection, not the listener; the pause keeps a
            // persistent one (out of descriptors) from spinning.
            connection::sleep_until(connection::now() + Duration::from_millis(10)).await;
            continue;
        };
        // Subscribed before anything else can happen, so a reset ordered
        // after this accept reaches this connection.
        let control = shared.control.subscribe();
        let id = shared.next_connection.fetch_add(1, Ordering::Relaxed);
        AtomicCounters::bump(&shared.counters.connections);
        let accepted_us = shared.micros(connection::now());
        tokio::spawn(connection::serve(shared.clone(), id, accepted_us, client, control));
    }
}
