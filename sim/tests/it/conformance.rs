//! The fake S3 passes the library's backend conformance suites (the lease
//! suite, and the object suite for stores of any bytes) over the
//! simulated network, with the production S3 backend on the client side.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hoplock::entropy::SeededEntropy;
use hoplock::s3::config::Addressing;
use hoplock::s3::credentials::CredentialSource;
use hoplock::s3::sigv4::Credentials;
use hoplock::s3::{S3Backend, S3Config};
use hoplock::testing::conformance;
use hoplock_sim::clocks::{ClockControl, ClockSpec, SimClock};
use hoplock_sim::fake_s3::{FakeS3, Faults, Latency, OpFaults, ProviderMode};
use hoplock_sim::transport::{self, Exchange, SimTransport};

const EPOCH: Duration = Duration::from_secs(1_893_456_000);

/// Which conformance suite to run.
#[derive(Clone, Copy, Debug)]
enum Suite {
    Lease,
    Objects,
}

/// Runs `suite` against a fake S3 in `mode` inside turmoil; returns the
/// suite's verdict.
fn suite_over_the_simulated_network(suite: Suite, mode: ProviderMode, faults: Faults) -> Result<(), String> {
    let epoch = SystemTime::UNIX_EPOCH + EPOCH;
    let mut sim = turmoil::Builder::new()
        .epoch(epoch)
        .tick_duration(Duration::from_millis(1))
        .simulation_duration(Duration::from_secs(600))
        .rng_seed(7)
        .build();
    let exchange = Exchange::default();
    let server_exchange = exchange.clone();
    sim.host("s3", move || {
        let (faults, exchange) = (faults.clone(), server_exchange.clone());
        async move {
            let clock = Arc::new(SimClock::new(epoch, ClockSpec::default(), &ClockControl::default()));
            let s3 = FakeS3::builder(clock, 1).mode(mode).faults(faults).credentials("AK", "SK").bucket("b").build()?;
            transport::serve(s3, 9000, exchange).await?;
            Ok(())
        }
    });
    let verdict = Arc::new(std::sync::Mutex::new(Err("the client never finished".to_string())));
    let out = verdict.clone();
    sim.client("client", async move {
        let clock = Arc::new(SimClock::new(epoch, ClockSpec::default(), &ClockControl::default()));
        let mut config = S3Config::new("b", "suite/lease.json");
        config.endpoint = Some("http://s3:9000".into());
        config.addressing = Addressing::PathStyle;
        config.credentials = CredentialSource::Explicit(Credentials::new("AK", "SK"));
        let backend = S3Backend::with_parts(
            config,
            Arc::new(SimTransport::new("s3:9000", exchange)),
            clock,
            Arc::new(SeededEntropy::new(3)),
        )?;
        let plant = backend.clone();
        let result = match suite {
            Suite::Lease => {
                conformance::run_all(&backend, move |bytes| async move {
                    plant.put_raw(bytes).await.map(|_| ()).map_err(|e| e.to_string())
                })
                .await
            }
            Suite::Objects => conformance::run_objects(&backend.with_key("suite/members.json")).await,
        }
        .map_err(|failure| failure.to_string());
        *out.lock().unwrap() = result;
        Ok(())
    });
    sim.run().map_err(|err| err.to_string())?;
    verdict.lock().unwrap().clone()
}

/// Latency on every request, so racing writers really overlap.
fn slow_store() -> Faults {
    let slow = OpFaults { latency: Latency::Uniform { min_ms: 5, max_ms: 60 }, ..OpFaults::default() };
    Faults { read: slow.clone(), write: slow.clone(), delete: slow, ..Faults::default() }
}

#[test]
fn the_honest_fake_passes_over_the_simulated_network() {
    for suite in [Suite::Lease, Suite::Objects] {
        suite_over_the_simulated_network(suite, ProviderMode::Honest, Faults::default()).unwrap();
        suite_over_the_simulated_network(suite, ProviderMode::Honest, slow_store()).unwrap();
    }
}

#[test]
fn a_broken_fake_fails_over_the_simulated_network() {
    for suite in [Suite::Lease, Suite::Objects] {
        for mode in [ProviderMode::IgnoreIfNoneMatch, ProviderMode::IgnoreIfMatch, ProviderMode::NonAtomic] {
            let failure = suite_over_the_simulated_network(suite, mode, slow_store())
                .expect_err(&format!("{mode} passed the {suite:?} suite"));
            assert!(failure.contains("race") || failure.contains("stale"), "{suite:?} {mode}: {failure}");
        }
    }
}
