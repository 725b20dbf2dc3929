//! A fenced downstream resource on a loopback port: what a leader-only job
//! writes to, with a [`Fence`] per key that refuses any token lower than
//! one it has accepted, and a record of every write it accepted or refused.
//!
//! The chaos harness points the commands `hoplock run` starts at it: each
//! sends `POST /write?key=K&token=G&node=N`, the token being the generation
//! it was started under (`HOPLOCK_GENERATION`). The record is what the
//! monotone-fencing and release-after-work checkers read, so it is kept
//! where the harness's clock is: the times are microseconds since the
//! harness's `origin`, and `sequence` is the order the fence judged the
//! writes in (two writes can arrive within one microsecond).
//!
//! Answers: `200` accepted, `409` refused as stale, `400` for a request
//! that does not say which key, token or node.
//!
//! ```no_run
//! use hoplock_testkit::fenced_downstream::FencedDownstream;
//!
//! # #[tokio::main]
//! # async fn main() -> std::io::Result<()> {
//! let downstream = FencedDownstream::start(std::time::Instant::now()).await?;
//! println!("write to {}/write?key=jobs&token=7&node=a", downstream.url());
//! # Ok(())
//! # }
//! ```

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::sync::Notify;

use hoplock::Generation;
use hoplock::fence::Fence;

/// One write the downstream judged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DownstreamWrite {
    /// When it was judged, in µs since the harness's origin.
    pub at_us: u64,
    /// The node that says it sent it.
    pub node: String,
    /// The key written.
    pub key: String,
    /// The fencing token it carried.
    pub token: u64,
    /// Whether the fence accepted it.
    pub accepted: bool,
    /// The highest token the key's fence had accepted before it.
    pub highest_before: u64,
    /// Its place in the order the fence judged every write, from 0.
    pub sequence: u64,
}

#[derive(Default)]
struct State {
    fences: BTreeMap<String, Fence>,
    writes: Vec<DownstreamWrite>,
}

/// A running downstream; dropping the handle leaves it running until
/// [`FencedDownstream::shutdown`].
#[derive(Clone)]
pub struct FencedDownstream {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    shutdown: Arc<Notify>,
}

impl FencedDownstream {
    /// Listens on `127.0.0.1` on a free port, on the current tokio runtime.
    pub async fn start(origin: Instant) -> std::io::Result<FencedDownstream> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let downstream =
            FencedDownstream { addr: listener.local_addr()?, state: Arc::default(), shutdown: Arc::new(Notify::new()) };
        let (state, shutdown) = (downstream.state.clone(), downstream.shutdown.clone());
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    biased;
                    () = shutdown.notified() => return,
                    accepted = listener.accept() => accepted,
                };
                let Ok((stream, _)) = accepted else { continue };
                let state = state.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(answer(&state, origin, &request)) }
                    });
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
                });
            }
        });
        Ok(downstream)
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every write judged so far, in the order judged.
    pub fn writes(&self) -> Vec<DownstreamWrite> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).writes.clone()
    }

    /// Stops accepting connections.
    pub fn shutdown(&self) {
        self.shutdown.notify_one();
    }
}

/// Judges one request.
fn answer(state: &Mutex<State>, origin: Instant, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, text: String| {
        let mut response = Response::new(Full::new(Bytes::from(text)));
        *response.status_mut() = status;
        response
    };
    if request.method() != hyper::Method::POST || request.uri().path() != "/write" {
        return reply(StatusCode::NOT_FOUND, "POST /write?key=K&token=G&node=N\n".into());
    }
    let query = request.uri().query().unwrap_or_default();
    let field = |name: &str| {
        query.split('&').filter_map(|pair| pair.split_once('=')).find(|(key, _)| *key == name).map(|(_, v)| v)
    };
    let (Some(key), Some(token), Some(node)) = (field("key"), field("token"), field("node")) else {
        return reply(StatusCode::BAD_REQUEST, "key, token and node are required\n".into());
    };
    let Ok(token) = token.parse::<u64>() else {
        return reply(StatusCode::BAD_REQUEST, format!("token {token:?} is not a number\n"));
    };
    let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
    let fence = state.fences.entry(key.to_string()).or_default();
    let highest_before = fence.highest().get();
    let accepted = fence.check(Generation(token)).is_ok();
    let sequence = state.writes.len() as u64;
    // Real time by design: the harness runs real processes, outside any
    // simulation.
    #[allow(clippy::disallowed_methods)]
    let at_us = Instant::now().saturating_duration_since(origin).as_micros() as u64;
    state.writes.push(DownstreamWrite {
        at_us,
        node: node.to_string(),
        key: key.to_string(),
        token,
        accepted,
        highest_before,
        sequence,
    });
    if accepted {
        reply(StatusCode::OK, "accepted\n".into())
    } else {
        reply(StatusCode::CONFLICT, format!("stale token {token}: {highest_before} was accepted\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn post(addr: SocketAddr, target: &str) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("POST {target} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0)
    }

    #[tokio::test]
    async fn accepts_rising_tokens_and_refuses_lower_ones_per_key() {
        #[allow(clippy::disallowed_methods)]
        let downstream = FencedDownstream::start(Instant::now()).await.unwrap();
        let addr = downstream.addr();
        assert_eq!(post(addr, "/write?key=a&token=2&node=x").await, 200);
        assert_eq!(post(addr, "/write?key=a&token=2&node=x").await, 200);
        assert_eq!(post(addr, "/write?key=a&token=1&node=y").await, 409);
        assert_eq!(post(addr, "/write?key=b&token=1&node=y").await, 200);
        assert_eq!(post(addr, "/write?key=a&token=x&node=y").await, 400);
        assert_eq!(post(addr, "/write?key=a&node=y").await, 400);
        let writes = downstream.writes();
        let judged: Vec<(&str, u64, bool, u64, u64)> =
            writes.iter().map(|w| (w.key.as_str(), w.token, w.accepted, w.highest_before, w.sequence)).collect();
        assert_eq!(judged, [("a", 2, true, 0, 0), ("a", 2, true, 2, 1), ("a", 1, false, 2, 2), ("b", 1, true, 0, 3)]);
        assert_eq!(writes[2].node, "y");
        assert!(writes.windows(2).all(|pair| pair[0].at_us <= pair[1].at_us));
        downstream.shutdown();
    }
}
