//! The software of one electing node: the production elector and S3
//! backend, over the simulated network, clock and randomness, running the
//! leader-only workload.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hoplock::elector::{Policy, Reads};
use hoplock::entropy::{SeededEntropy, splitmix64};
use hoplock::keyed::{KeyContext, KeyedHandle, KeyedWriter};
use hoplock::s3::config::Addressing;
use hoplock::s3::credentials::CredentialSource;
use hoplock::s3::sigv4::Credentials;
use hoplock::s3::{S3Backend, S3Config};
use hoplock::term_timing;
use hoplock::{Elector, Event as ElectorEvent, LeaderContext, Lease};

use crate::clocks::{ClockControl, SimClock};
use crate::downstream::{Downstream, KeyWriter};
use crate::history::{Event, History, STOPPED};
use crate::transport::{Exchange, SimTransport};
use crate::world::{Api, KeyedProtocol, KeyedSpec, NodeSpec, PolicySpec, ReadsSpec, WorkloadSpec};

/// Where the fake S3 listens inside the simulation.
pub const S3_HOST: &str = "s3";
/// Its port.
pub const S3_PORT: u16 = 9000;
/// The bucket and key of the lease.
pub const BUCKET: &str = "leases";
/// The lease key.
pub const KEY: &str = "election/lease.json";
/// The membership object's key, in keyed worlds.
pub const MEMBERS_KEY: &str = "keyed/members.json";

/// The prefix of the per-key lease keys, in keyed worlds run with
/// [`KeyedProtocol::LeasePerKey`].
pub const LEASES_PREFIX: &str = "leases/k";
/// The credentials every node uses.
pub const ACCESS_KEY: &str = "SIMACCESSKEY";
/// The matching secret.
pub const SECRET_KEY: &str = "sim-secret-key";

/// Everything a node's software needs, shared across its restarts.
#[derive(Clone, Debug)]
pub struct NodeContext {
    /// The node's settings.
    pub spec: NodeSpec,
    /// The node's index, for deriving its seeds.
    pub index: u64,
    /// The run's seed.
    pub seed: u64,
    /// The simulation's true wall-clock start.
    pub epoch: SystemTime,
    /// The run's history.
    pub history: History,
    /// The fenced resource.
    pub downstream: Downstream,
    /// Counts process starts.
    pub incarnations: Rc<Cell<u32>>,
    /// The runner's handle on this node's clock.
    pub pause: ClockControl,
    /// Set by the runner to shut the node down gracefully; cleared again
    /// when it restarts the node.
    pub stop: Arc<tokio::sync::watch::Sender<bool>>,
    /// Set by the runner to drop a keyed member's run future while the
    /// process lives on; cleared again when it restarts the node.
    pub abandon: Arc<tokio::sync::watch::Sender<bool>>,
    /// The simulation's tick: how late a timer may fire.
    pub tick: Duration,
    /// How often the node's safety deadlines are read again while waited
    /// for (see the clocks module).
    pub suspend_check: Duration,
    /// Set in keyed worlds: the node is a keyed writer.
    pub keyed: Option<KeyedSpec>,
    /// Where the run's requests and replies wait while they travel.
    pub exchange: Exchange,
}

impl NodeContext {
    /// A seed for this node's `incarnation`, derived from the run's seed so
    /// every draw replays.
    fn entropy_seed(&self, incarnation: u32) -> u64 {
        let mut state = self.seed ^ (self.index << 32) ^ u64::from(incarnation);
        splitmix64(&mut state)
    }
}

/// Runs one process of the node until it is crashed. Returns an error only
/// if the elector cannot be built, which is a scenario mistake.
pub async fn run(context: NodeContext) -> turmoil::Result {
    let incarnation = context.incarnations.get();
    context.incarnations.set(incarnation + 1);
    let name = context.spec.name.clone();
    context.history.record_now(&name, Event::Started { incarnation });

    let clock = Arc::new(
        SimClock::new(context.epoch, context.spec.clock.clone(), &context.pause)
            .with_timer_resolution(context.tick)
            .with_suspend_check(context.suspend_check),
    );
    let entropy = Arc::new(SeededEntropy::new(context.entropy_seed(incarnation)));
    let spec = &context.spec.elector;
    let ttl = Duration::from_millis(spec.ttl_ms);
    let request_timeout =
        spec.request_timeout_ms.map_or(term_timing::default_request_timeout(ttl), Duration::from_millis);

    let key = if context.keyed.is_some() { MEMBERS_KEY } else { KEY };
    let mut config = S3Config::new(BUCKET, key);
    config.endpoint = Some(format!("http://{S3_HOST}:{S3_PORT}"));
    config.addressing = Addressing::PathStyle;
    config.credentials = CredentialSource::Explicit(Credentials::new(ACCESS_KEY, SECRET_KEY));
    // As `hoplock run` sets them: one request may take the elector's request
    // timeout, and a read may retry within twice that. The elector still
    // cuts the whole read off at its own request timeout, so a read retries
    // only after a failure that came back early, and that retry code runs
    // here as it does in production.
    config.request_timeout = request_timeout;
    config.operation_deadline = request_timeout * 2;
    let transport = Arc::new(
        SimTransport::new(format!("{S3_HOST}:{S3_PORT}"), context.exchange.clone())
            .with_client(&format!("{name}#{incarnation}")),
    );
    let delays_seed = context.entropy_seed(incarnation) ^ FENCED_DELAYS;
    if let Some(keyed) = context.keyed.clone()
        && keyed.protocol == KeyedProtocol::LeasePerKey
    {
        let process = format!("{name}#{incarnation}");
        return run_leases_per_key(&context, &keyed, config, transport, clock, entropy, delays_seed, process).await;
    }
    let backend = S3Backend::with_parts(config, transport, clock.clone(), entropy.clone())?;
    if let Some(keyed) = context.keyed.clone() {
        return run_keyed(&context, &keyed, backend, clock, entropy, delays_seed).await;
    }

    let elector = elector_for(&context.spec, backend, clock.clone(), entropy)?;

    // Renewals and errors go into the history as they happen. turmoil runs
    // each host on a local task set, so the history need not be Send.
    let mut events = elector.subscribe();
    let (history, node) = (context.history.clone(), name.clone());
    tokio::task::spawn_local(async move {
        while let Some(event) = events.next().await {
            match event {
                ElectorEvent::Renewed { generation } => {
                    history.record_now(&node, Event::Renewed { generation: generation.get() })
                }
                ElectorEvent::Error { error } => {
                    history.record_now(&node, Event::ElectorError { message: error.to_string() })
                }
                ElectorEvent::Acquired { lease, guard, .. } => {
                    let (generation, armed) = (lease.generation.get(), guard.is_armed());
                    history.record_now(&node, Event::Announced { generation, armed })
                }
                ElectorEvent::Lost { generation, reason } => {
                    let reason = LossKind::of(reason.as_ref());
                    history.record_now(&node, Event::Lost { generation: generation.get(), reason })
                }
                _ => {}
            }
        }
    });

    // A graceful shutdown: the elector cancels the work, waits for it and
    // releases the lease.
    let mut stop = context.stop.subscribe();
    let stopping = elector.clone();
    tokio::task::spawn_local(async move {
        if stop.wait_for(|stop| *stop).await.is_ok() {
            stopping.stop();
        }
    });

    if let Some(every) = context.spec.workload.observe_every_ms {
        let (observer, history, node, clock) = (elector.clone(), context.history.clone(), name.clone(), clock.clone());
        tokio::task::spawn_local(async move {
            use hoplock::clock::Clock;
            loop {
                clock.sleep_until(clock.now() + Duration::from_millis(every.max(1))).await;
                let started_us = turmoil::sim_elapsed().unwrap_or_default().as_micros() as u64;
                let event = match observer.observe().await {
                    Ok(Some(seen)) => Event::Observed {
                        generation: seen.generation.get(),
                        started_us,
                        unchanged_for_us: seen.unchanged_for.as_micros() as u64,
                    },
                    Ok(None) => Event::ObservedNothing { started_us },
                    Err(hoplock::ElectorError::GenerationWentBack { seen, found }) => {
                        Event::ObservedGoingBack { seen: seen.get(), found: found.get(), started_us }
                    }
                    Err(err) => Event::ElectorError { message: err.to_string() },
                };
                history.record_now(&node, event);
            }
        });
    }

    let workload = |context: &NodeContext| Workload {
        spec: context.spec.workload.clone(),
        clock: clock.clone(),
        history: context.history.clone(),
        downstream: context.downstream.clone(),
        node: name.clone(),
    };
    let mut campaigns = 0u64;
    match context.spec.workload.api {
        Api::Run => {
            // The work starts from the event and holds the guard until it
            // has stopped, as the guard's docs tell users to.
            let mut events = elector.run();
            while let Some(event) = events.next().await {
                if let ElectorEvent::Acquired { lease, context: leader, guard, .. } = event {
                    let (generation, armed) = (lease.generation.get(), guard.is_armed());
                    context.history.record_now(&name, Event::GuardHandedOut { generation, armed });
                    let work = workload(&context);
                    tokio::task::spawn_local(async move {
                        work.run(leader, lease).await;
                        drop(guard);
                    });
                }
            }
            // The stream ends when the campaign does: stopped, or the store
            // is unusable (then the last event before it says why).
            let stopped = *context.stop.borrow();
            let event = if stopped {
                Event::ElectorError { message: STOPPED.into() }
            } else {
                Event::CampaignEnded { message: "the run() event stream ended".into() }
            };
            context.history.record_now(&name, event);
            std::future::pending().await
        }
        Api::Lead | Api::DropLead => loop {
            campaigns += 1;
            if let Some(ms) = context.spec.workload.rest_after_term_ms
                && campaigns > 1
            {
                use hoplock::clock::Clock;
                clock.sleep_until(clock.now() + Duration::from_millis(ms)).await;
            }
            let work = workload(&context);
            let (started, began) = tokio::sync::oneshot::channel::<u64>();
            let lead = elector.lead(|ctx, lease| {
                let _ = started.send(lease.generation.get());
                work.run(ctx, lease)
            });
            let mut lead = std::pin::pin!(lead);
            let drop_after = Duration::from_millis(context.spec.workload.drop_after_ms);
            let give_up = async {
                use hoplock::clock::Clock;
                match (context.spec.workload.api, began.await) {
                    (Api::DropLead, Ok(generation)) => {
                        clock.sleep_until(clock.now() + drop_after).await;
                        generation
                    }
                    _ => std::future::pending().await,
                }
            };
            let result = tokio::select! {
                biased;
                result = &mut lead => result,
                generation = give_up => {
                    // The caller gives up on the future mid-term: leaving
                    // this iteration drops it (it is pinned in the loop's
                    // scope) with its work, and the elector releases in the
                    // background. The history must show the term ending.
                    context.history.record_now(&name, Event::Stepped { generation, reason: StepReason::Dropped });
                    continue;
                }
            };
            // A term that fails to start (the store is unusable) ends the
            // campaign; the history shows why.
            if let Err(err) = result {
                let event = match err {
                    hoplock::ElectorError::Stopped => Event::ElectorError { message: STOPPED.into() },
                    err => Event::CampaignEnded { message: err.to_string() },
                };
                context.history.record_now(&name, event);
                std::future::pending::<()>().await;
            }
        },
    }
}

/// The node's elector over `backend`, with the settings of its
/// `[nodes.elector]` table.
fn elector_for(
    node: &NodeSpec,
    backend: S3Backend,
    clock: Arc<SimClock>,
    entropy: Arc<SeededEntropy>,
) -> Result<Elector<S3Backend>, hoplock::ElectorError> {
    let spec = &node.elector;
    let ttl = Duration::from_millis(spec.ttl_ms);
    let mut builder = Elector::builder(backend)
        .owner(node.owner.clone().unwrap_or_else(|| node.name.clone()))
        .ttl(ttl)
        .request_timeout(
            spec.request_timeout_ms.map_or(term_timing::default_request_timeout(ttl), Duration::from_millis),
        )
        .drift_bound(spec.drift_bound)
        .lock_delay(Duration::from_millis(spec.lock_delay_ms))
        .clock(clock)
        .entropy(entropy)
        .policy(match spec.policy {
            PolicySpec::Ours => Policy::Safe,
            PolicySpec::Seed => Policy::WallClockExpiry,
        })
        .reads(match spec.reads {
            ReadsSpec::FollowRenewals => Reads::FollowRenewals,
            ReadsSpec::Poll => Reads::Poll,
        });
    if let Some(renew) = spec.renew_ms {
        builder = builder.renew_interval(Duration::from_millis(renew));
    }
    if let Some(margin) = spec.stop_margin_ms {
        builder = builder.stop_margin(Duration::from_millis(margin));
    }
    if let Some(timeout) = spec.release_timeout_ms {
        builder = builder.release_timeout(Duration::from_millis(timeout));
    }
    if let Some(poll) = spec.poll_ms {
        builder = builder.poll_interval(Duration::from_millis(poll));
    }
    builder.build()
}

mod keyed;
use keyed::*;
mod key_work;
use key_work::*;
mod baseline;
use crate::history::{LossKind, StepReason};
use baseline::*;
