//! The S3 backend against a real S3-compatible server.
//!
//! `cargo xtask test` starts SeaweedFS on 127.0.0.1 and sets
//! `HOPLOCK_S3_ENDPOINT`, `HOPLOCK_S3_BUCKET`, `AWS_ACCESS_KEY_ID` and
//! `AWS_SECRET_ACCESS_KEY`, plus `HOPLOCK_REQUIRE_S3=1` so that a test that
//! cannot reach the server fails instead of skipping. Under a plain
//! `cargo test` these tests skip and say so.

#![allow(clippy::disallowed_methods)] // Tests measure real time.

use std::time::Duration;

use hoplock::backend::{Backend, BackendError};
use hoplock::entropy::{Entropy, OsEntropy};
use hoplock::s3::config::Addressing;
use hoplock::s3::credentials::CredentialSource;
use hoplock::s3::sigv4::Credentials;
use hoplock::s3::{S3Backend, S3Config};
use hoplock::testing::conformance;
use hoplock::{Elector, Generation, Reads};

/// The server's settings, or `None` (with a note on stderr) when the tests
/// should skip.
fn server() -> Option<S3Config> {
    let endpoint = std::env::var("HOPLOCK_S3_ENDPOINT").ok();
    let bucket = std::env::var("HOPLOCK_S3_BUCKET").ok();
    let (Some(endpoint), Some(bucket)) = (endpoint, bucket) else {
        assert!(
            std::env::var("HOPLOCK_REQUIRE_S3").as_deref() != Ok("1"),
            "HOPLOCK_REQUIRE_S3=1 but HOPLOCK_S3_ENDPOINT / HOPLOCK_S3_BUCKET are not set"
        );
        eprintln!("skipped: no S3 server (set HOPLOCK_S3_ENDPOINT and HOPLOCK_S3_BUCKET, or run `cargo xtask test`)");
        return None;
    };
    let mut config = S3Config::new(bucket, unique_key("lease"));
    config.endpoint = Some(endpoint);
    config.addressing = Addressing::PathStyle;
    config.region = std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into());
    // A freshly started server can take several seconds over its first
    // writes (it grows volumes on demand); a slow answer is not what these
    // tests are about, so give each request room.
    config.request_timeout = Duration::from_secs(30);
    config.operation_deadline = Duration::from_secs(60);
    Some(config)
}

fn unique_key(prefix: &str) -> String {
    format!("it/{prefix}-{:016x}.json", OsEntropy.next_u64())
}

fn store(config: &S3Config) -> S3Backend {
    S3Backend::new(config.clone()).expect("valid configuration")
}

#[tokio::test]
async fn passes_the_conformance_suite() {
    let Some(config) = server() else { return };
    let backend = store(&config);
    let plant = backend.clone();
    conformance::run_all(&backend, move |bytes| async move {
        plant.put_raw(bytes).await.map(|_| ()).map_err(|e| e.to_string())
    })
    .await
    .unwrap_or_else(|failure| panic!("{failure}"));
}

#[tokio::test]
async fn passes_the_object_conformance_suite() {
    let Some(config) = server() else { return };
    conformance::run_objects(&store(&config)).await.unwrap_or_else(|failure| panic!("{failure}"));
}

#[tokio::test]
async fn verify_accepts_a_store_that_honours_conditions() {
    let Some(config) = server() else { return };
    let store = store(&config);
    let verification = store.verify().await.unwrap();
    assert_eq!(verification.probe_key, format!("{}{}", store.key(), hoplock::s3::PROBE_SUFFIX));
    assert_eq!(verification.checks.len(), 4, "{verification:?}");
    // The probe stays (no DeleteObject needed), and the next start reuses it.
    assert_eq!(store.verify().await.unwrap().checks.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_electors_elect_one_and_hand_over_twenty_times() {
    // Followers read once per renew interval (TTL/3): a release is seen at
    // the next read.
    hand_over_twenty_times(Reads::FollowRenewals, TTL / 3, "default").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_electors_hand_over_within_a_poll() {
    hand_over_twenty_times(Reads::Poll, POLL, "poll").await;
}

const TTL: Duration = Duration::from_secs(3);
const POLL: Duration = Duration::from_millis(200);

/// Three electors on one key; the leader releases twenty times, and each
/// time another node must take over within `gap` (how long followers go
/// between reads) and the round trips of a read and a write.
async fn hand_over_twenty_times(reads: Reads, gap: Duration, label: &str) {
    let Some(config) = server() else { return };
    let electors: Vec<_> = (0..3)
        .map(|i| {
            Elector::builder(store(&config))
                .owner(format!("node-{i}"))
                .ttl(TTL)
                .poll_interval(POLL)
                .reads(reads)
                .build()
                .unwrap()
        })
        .collect();
    let mut streams: Vec<_> = electors.iter().map(|elector| Some(elector.run())).collect();
    let mut generations = Vec::new();
    let mut last_release = None;
    let mut handovers = Vec::new();
    let mut resting: Option<usize> = None;
    for round in 0..21 {
        // Wait for a leader.
        let started = tokio::time::Instant::now();
        let leader = loop {
            let leaders: Vec<usize> = (0..3).filter(|&i| electors[i].is_leader()).collect();
            assert!(leaders.len() <= 1, "round {round}: {leaders:?} all lead");
            if let [leader] = leaders[..] {
                break leader;
            }
            assert!(started.elapsed() < TTL * 3, "round {round}: nobody leads");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        // The node that released sat out this round; it campaigns again now
        // that somebody else leads.
        if let Some(rested) = resting.take() {
            assert_ne!(rested, leader, "round {round}: the releasing node took the lease back");
            streams[rested] = Some(electors[rested].run());
        }
        if let Some(released_at) = last_release {
            let handover = tokio::time::Instant::now() - released_at;
            // One gap between reads, plus the round trips of a read and a
            // write, plus this loop's own 10 ms sampling.
            assert!(handover <= gap + Duration::from_millis(300), "{label} round {round}: handover took {handover:?}");
            handovers.push(handover);
        }
        generations.push(electors[leader].current_generation().unwrap());
        if round == 20 {
            break;
        }
        // Force a handover: the leader releases (its stream is dropped) and
        // sits out until another node has taken over.
        streams[leader] = None;
        while electors[leader].is_leader() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        last_release = Some(tokio::time::Instant::now());
        resting = Some(leader);
    }
    assert!(generations.windows(2).all(|w| w[0] < w[1]), "generations did not strictly increase: {generations:?}");
    handovers.sort();
    eprintln!(
        "20 handovers on a real server ({label} reads, gap {gap:?}): median {:?}, max {:?}; generations {:?}",
        handovers[handovers.len() / 2],
        handovers[handovers.len() - 1],
        generations.iter().map(|g| g.get()).collect::<Vec<_>>()
    );
    assert!(generations[20] > Generation(20));
}

#[tokio::test]
async fn a_lease_object_that_is_not_our_json_is_corrupt_and_left_alone() {
    let Some(config) = server() else { return };
    let backend = store(&config);
    backend.put_raw(b"<html>not a lease</html>".to_vec()).await.unwrap();
    let err = backend.read().await.unwrap_err();
    let BackendError::Corrupt { version, .. } = &err else { panic!("{err:?}") };
    assert!(err.to_string().contains("repair it or reset the key"), "{err}");
    // An elector reports it and does not take over.
    let elector = Elector::builder(backend.clone()).owner("a").ttl(Duration::from_secs(1)).build().unwrap();
    let mut events = elector.run();
    let event = events.next().await.unwrap();
    assert!(matches!(event, hoplock::Event::Error { error: BackendError::Corrupt { .. } }), "{event:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!elector.is_leader());
    drop(events);
    let still = backend.read().await.unwrap_err();
    assert!(matches!(still, BackendError::Corrupt { version: ref v, .. } if v == version), "nothing was overwritten");
}

#[tokio::test]
async fn a_wrong_secret_is_a_config_error_that_says_so() {
    let Some(mut config) = server() else { return };
    let id = std::env::var("AWS_ACCESS_KEY_ID").unwrap_or_default();
    config.credentials = CredentialSource::Explicit(Credentials::new(id, "definitely-not-the-secret"));
    let backend = store(&config);
    for err in
        [backend.read().await.unwrap_err(), backend.write(None, &conformance::sample_record(1, "x")).await.unwrap_err()]
    {
        assert!(matches!(&err, BackendError::Config(m) if m.contains("secret access key is wrong")), "{err:?}");
    }
}

#[tokio::test]
async fn a_missing_bucket_is_not_a_missing_lease() {
    let Some(mut config) = server() else { return };
    config.bucket = format!("no-such-bucket-{:08x}", OsEntropy.next_u64() as u32);
    let err = store(&config).read().await.unwrap_err();
    assert!(matches!(&err, BackendError::Config(m) if m.contains("does not exist")), "{err:?}");
}

#[tokio::test]
async fn an_unreachable_endpoint_says_it_cannot_reach_the_store() {
    let Some(mut config) = server() else { return };
    // Bind a port and close it, so nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    config.endpoint = Some(format!("http://127.0.0.1:{port}"));
    config.request_timeout = Duration::from_secs(1);
    config.operation_deadline = Duration::from_secs(1);
    let err = store(&config).read().await.unwrap_err();
    assert!(matches!(&err, BackendError::Transient(m) if m.contains("cannot reach the store")), "{err:?}");
}

#[tokio::test]
async fn a_clock_far_off_the_stores_is_reported_with_the_measured_skew() {
    let Some(config) = server() else { return };
    // A wall clock 20 minutes ahead: SigV4 allows 15.
    let ahead = hoplock::clock::DriftingClock::new(std::time::SystemTime::now() + Duration::from_secs(1200), 0);
    let transport = hoplock::s3::transport::ReqwestTransport::new(&config.transport).unwrap();
    let backend = S3Backend::with_parts(
        config.clone(),
        std::sync::Arc::new(transport),
        std::sync::Arc::new(ahead),
        std::sync::Arc::new(OsEntropy),
    )
    .unwrap();
    let err = backend.read().await.unwrap_err();
    let BackendError::Config(message) = &err else { panic!("{err:?}") };
    assert!(message.contains("wall clock is") && message.contains("fix the clock"), "{message}");
    // The skew is measured from the server's Date header: about 1200 s, and
    // this machine's clock is the one ahead.
    let (before, _) = message.split_once(" s ahead of the store's").unwrap_or_else(|| panic!("{message}"));
    let secs: u64 = before.rsplit(' ').next().unwrap().parse().unwrap();
    assert!((1199..=1201).contains(&secs), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_members_share_a_thousand_keys_through_a_leave_and_a_kill() {
    let Some(mut config) = server() else { return };
    config.key = unique_key("members");
    // TTL 3 s: three members share 1,000 keys; one leaves, one is killed;
    // the members' own logs show one writer per key throughout.
    crate::keyed::join_leave_and_kill(store(&config), 1_000, Duration::from_secs(3)).await;
}
