//! The simulator's transport: requests and replies travel as messages over
//! turmoil's network, and each side sees what it would see over a
//! connection (see `sim/src/transport.rs`).
//!
//! These worlds are plain turmoil simulations, without the runner and its
//! skipping, so the client times itself with tokio's (simulated) time.
#![allow(clippy::disallowed_methods)]

use std::future::Future;
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hoplock::clock::DriftingClock;
use hoplock::s3::sigv4::{Credentials, sign};
use hoplock::s3::transport::{HttpTransport, TransportErrorKind};
use hoplock_sim::fake_s3::{FakeS3, Faults, Latency, OpFaults};
use hoplock_sim::transport::{self, Exchange, SimTransport};

const EPOCH_SECS: u64 = 1_700_000_000;
const BUCKET: &str = "b";

fn epoch() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(EPOCH_SECS)
}

/// The ports hosts hand out to the sockets they open, turmoil's default.
const ALL_PORTS: RangeInclusive<u16> = 49152..=65535;

/// Runs `client` on a transport to a fake S3 on `s3:9000` whose writes have
/// `write` faults, in a world whose hosts hand out only `ports`; returns
/// what the store holds under `k` once the client is done.
fn run_client<F>(
    write: OpFaults,
    ports: RangeInclusive<u16>,
    client: impl FnOnce(SimTransport) -> F,
) -> Result<Option<Bytes>, Box<dyn std::error::Error>>
where
    F: Future<Output = turmoil::Result> + 'static,
{
    let mut sim = turmoil::Builder::new()
        .epoch(epoch())
        .ephemeral_ports(ports)
        .tick_duration(Duration::from_millis(1))
        .min_message_latency(Duration::from_millis(5))
        .max_message_latency(Duration::from_millis(5))
        .simulation_duration(Duration::from_secs(60))
        .build();
    let exchange = Exchange::default();
    let store = Arc::new(Mutex::new(None));
    let (server_exchange, server_store) = (exchange.clone(), store.clone());
    sim.host("s3", move || {
        let (exchange, store, write) = (server_exchange.clone(), server_store.clone(), write.clone());
        async move {
            let clock = Arc::new(DriftingClock::new(epoch(), 0));
            let faults = Faults { write, ..Faults::none() };
            let s3 = FakeS3::builder(clock, 11).credentials("AK", "SK").bucket(BUCKET).faults(faults).build()?;
            *store.lock().unwrap() = Some(s3.clone());
            transport::serve(s3, 9000, exchange).await?;
            Ok(())
        }
    });
    sim.client("client", client(SimTransport::new("s3:9000", exchange)));
    sim.run()?;
    let stored =
        store.lock().unwrap().as_ref().and_then(|s3| s3.object(BUCKET, "k")).map(|object| object.body().clone());
    Ok(stored)
}

/// A signed request; `body` makes it a PUT, `None` a GET.
fn request(key: &str, body: Option<&'static str>) -> http::Request<Bytes> {
    let uri = format!("http://s3:9000/{BUCKET}/{key}");
    let mut request = match body {
        Some(body) => http::Request::put(uri).body(Bytes::from_static(body.as_bytes())),
        None => http::Request::get(uri).body(Bytes::new()),
    }
    .unwrap();
    // The simulated clock starts at the epoch; the store allows skew.
    sign(&mut request, &Credentials::new("AK", "SK"), "us-east-1", epoch()).unwrap();
    request
}

#[test]
fn a_request_and_its_reply_travel_as_messages() -> turmoil::Result {
    let write = OpFaults { latency: Latency::Fixed { ms: 20 }, ..OpFaults::default() };
    let stored = run_client(write, ALL_PORTS, |transport| async move {
        let sent = tokio::time::Instant::now();
        let response = transport.send(request("k", Some("hello"))).await?;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["etag"], "\"5d41402abc4b2a76b9719d911017c592\"");
        // Time is the simulation's: a message each way and the store's
        // own latency.
        assert!(response.headers()["date"].to_str()?.starts_with("Tue, 14 Nov 2023 22:13:"));
        assert_eq!(sent.elapsed(), Duration::from_millis(30));
        Ok(())
    })?;
    assert_eq!(stored.as_deref(), Some(&b"hello"[..]));
    Ok(())
}

#[test]
fn a_reply_the_store_drops_is_an_io_error_one_delay_later_and_the_write_stands() -> turmoil::Result {
    let write = OpFaults { ambiguous_success_rate: 1.0, ..OpFaults::default() };
    let stored = run_client(write, ALL_PORTS, |transport| async move {
        let sent = tokio::time::Instant::now();
        let err = transport.send(request("k", Some("hello"))).await.unwrap_err();
        assert_eq!(err.kind, TransportErrorKind::Io, "{err}");
        assert_eq!(sent.elapsed(), Duration::from_millis(10), "a closed connection is heard at once");
        Ok(())
    })?;
    assert_eq!(stored.as_deref(), Some(&b"hello"[..]));
    Ok(())
}

#[test]
fn a_silent_store_leaves_the_client_waiting_and_the_write_stands() -> turmoil::Result {
    let write = OpFaults { silent_reply_rate: 1.0, ..OpFaults::default() };
    let stored = run_client(write, ALL_PORTS, |transport| async move {
        let waited = tokio::time::timeout(Duration::from_secs(2), transport.send(request("k", Some("hello")))).await;
        assert!(waited.is_err(), "an answer came: {waited:?}");
        Ok(())
    })?;
    assert_eq!(stored.as_deref(), Some(&b"hello"[..]));
    Ok(())
}

#[test]
fn a_request_lost_to_a_partition_is_never_handled() -> turmoil::Result {
    let stored = run_client(OpFaults::default(), ALL_PORTS, |transport| async move {
        // Let the store's host start before cutting it off.
        tokio::time::sleep(Duration::from_millis(10)).await;
        turmoil::partition("client", "s3");
        let lost = tokio::time::timeout(Duration::from_secs(1), transport.send(request("k", Some("lost")))).await;
        assert!(lost.is_err(), "an answer came through a partition: {lost:?}");
        turmoil::repair("client", "s3");
        let read = transport.send(request("k", None)).await?;
        assert_eq!(read.status(), 404, "the lost write was applied");
        Ok(())
    })?;
    assert_eq!(stored, None);
    Ok(())
}

#[test]
fn a_late_reply_to_an_abandoned_request_is_never_taken_for_another() -> turmoil::Result {
    // One port for the client's sockets: the next request's socket has the
    // abandoned one's port, so the late reply reaches it and must be told
    // apart by its number.
    let write = OpFaults { latency: Latency::Fixed { ms: 500 }, ..OpFaults::default() };
    let stored = run_client(write, 49152..=49152, |transport| async move {
        // The write's reply comes about 510 ms after it was sent; the
        // client gives up after 100 ms, and its next request (a read, not
        // slowed) is still waiting for its own answer when that reply comes.
        let abandoned =
            tokio::time::timeout(Duration::from_millis(100), transport.send(request("k", Some("slow")))).await;
        assert!(abandoned.is_err());
        tokio::time::sleep(Duration::from_millis(405)).await;
        let read = transport.send(request("k", None)).await?;
        assert_eq!(read.status(), 200, "the read took another request's reply");
        assert_eq!(read.body().as_ref(), b"slow");
        Ok(())
    })?;
    assert_eq!(stored.as_deref(), Some(&b"slow"[..]));
    Ok(())
}
