//! The simulator's transport: requests and replies travel as messages over
//! turmoil's network, and each side sees what it would see over a
//! connection (see `sim/src/transport.rs`).
//!
//! These worlds are plain turmoil simulations, without the runner and its
//! skipping, so the client times itself with tokio's (simulated) time.
#![allow(clippy::disallowed_methods)]

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

/// A simulation with a fake S3 on `s3:9000` whose writes have `write`
/// faults, and the store itself, to look into once the client is done.
fn world(write: OpFaults) -> (turmoil::Sim<'static>, Exchange, Arc<Mutex<Option<FakeS3>>>) {
    world_with_ports(write, 49152..=65535)
}

/// [`world`], with hosts handing out only `ports` to the sockets they open.
fn world_with_ports(
    write: OpFaults,
    ports: std::ops::RangeInclusive<u16>,
) -> (turmoil::Sim<'static>, Exchange, Arc<Mutex<Option<FakeS3>>>) {
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
    (sim, exchange, store)
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

fn stored(store: &Mutex<Option<FakeS3>>, key: &str) -> Option<Bytes> {
    store.lock().unwrap().as_ref().and_then(|s3| s3.object(BUCKET, key)).map(|object| object.body().clone())
}

#[test]
fn a_request_and_its_reply_travel_as_messages() -> turmoil::Result {
    let (mut sim, exchange, store) = world(OpFaults { latency: Latency::Fixed { ms: 20 }, ..OpFaults::default() });
    sim.client("client", async move {
        let transport = SimTransport::new("s3:9000", exchange);
        let sent = tokio::time::Instant::now();
        let response = transport.send(request("k", Some("hello"))).await?;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["etag"], "\"5d41402abc4b2a76b9719d911017c592\"");
        // Time is the simulation's: a message each way and the store's
        // own latency.
        assert!(response.headers()["date"].to_str()?.starts_with("Tue, 14 Nov 2023 22:13:"));
        assert_eq!(sent.elapsed(), Duration::from_millis(30));
        Ok(())
    });
    sim.run()?;
    assert_eq!(stored(&store, "k").as_deref(), Some(&b"hello"[..]));
    Ok(())
}

#[test]
fn a_reply_the_store_drops_is_an_io_error_one_delay_later_and_the_write_stands() -> turmoil::Result {
    let (mut sim, exchange, store) = world(OpFaults { ambiguous_success_rate: 1.0, ..OpFaults::default() });
    sim.client("client", async move {
        let transport = SimTransport::new("s3:9000", exchange);
        let sent = tokio::time::Instant::now();
        let err = transport.send(request("k", Some("hello"))).await.unwrap_err();
        assert_eq!(err.kind, TransportErrorKind::Io, "{err}");
        assert_eq!(sent.elapsed(), Duration::from_millis(10), "a closed connection is heard at once");
        Ok(())
    });
    sim.run()?;
    assert_eq!(stored(&store, "k").as_deref(), Some(&b"hello"[..]));
    Ok(())
}

#[test]
fn a_silent_store_leaves_the_client_waiting_and_the_write_stands() -> turmoil::Result {
    let (mut sim, exchange, store) = world(OpFaults { silent_reply_rate: 1.0, ..OpFaults::default() });
    sim.client("client", async move {
        let transport = SimTransport::new("s3:9000", exchange);
        let waited = tokio::time::timeout(Duration::from_secs(2), transport.send(request("k", Some("hello")))).await;
        assert!(waited.is_err(), "an answer came: {waited:?}");
        Ok(())
    });
    sim.run()?;
    assert_eq!(stored(&store, "k").as_deref(), Some(&b"hello"[..]));
    Ok(())
}

#[test]
fn a_request_lost_to_a_partition_is_never_handled() -> turmoil::Result {
    let (mut sim, exchange, store) = world(OpFaults::default());
    sim.client("client", async move {
        let transport = SimTransport::new("s3:9000", exchange);
        // Let the store's host start before cutting it off.
        tokio::time::sleep(Duration::from_millis(10)).await;
        turmoil::partition("client", "s3");
        let lost = tokio::time::timeout(Duration::from_secs(1), transport.send(request("k", Some("lost")))).await;
        assert!(lost.is_err(), "an answer came through a partition: {lost:?}");
        turmoil::repair("client", "s3");
        let read = transport.send(request("k", None)).await?;
        assert_eq!(read.status(), 404, "the lost write was applied");
        Ok(())
    });
    sim.run()?;
    assert_eq!(stored(&store, "k"), None);
    Ok(())
}

#[test]
fn a_late_reply_to_an_abandoned_request_is_never_taken_for_another() -> turmoil::Result {
    // One port for the client's sockets: the next request's socket has the
    // abandoned one's port, so the late reply reaches it and must be told
    // apart by its number.
    let (mut sim, exchange, store) =
        world_with_ports(OpFaults { latency: Latency::Fixed { ms: 500 }, ..OpFaults::default() }, 49152..=49152);
    sim.client("client", async move {
        let transport = SimTransport::new("s3:9000", exchange);
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
    });
    sim.run()?;
    assert_eq!(stored(&store, "k").as_deref(), Some(&b"slow"[..]));
    Ok(())
}
