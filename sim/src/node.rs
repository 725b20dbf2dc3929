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
use crate::downstream::Downstream;
use crate::history::{Event, History, STOPPED};
use crate::transport::SimTransport;
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
    let transport =
        Arc::new(SimTransport::new(format!("{S3_HOST}:{S3_PORT}")).with_client(&format!("{name}#{incarnation}")));
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
                    let reason = reason.as_ref().map_or("released", loss_kind).to_string();
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
                    context.history.record_now(&name, Event::Stepped { generation, reason: "dropped".into() });
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

/// Runs one process of a keyed member until it is crashed: a
/// [`KeyedWriter`] over the world's keys, whose work records when it starts
/// and stops each key. A scheduled stop is a graceful leave.
async fn run_keyed(
    context: &NodeContext,
    keyed: &KeyedSpec,
    backend: S3Backend,
    clock: Arc<SimClock>,
    entropy: Arc<SeededEntropy>,
    delays_seed: u64,
) -> turmoil::Result {
    let spec = &context.spec.elector;
    let ttl = Duration::from_millis(spec.ttl_ms);
    let name = context.spec.name.clone();
    let mut builder = KeyedWriter::builder(backend)
        .id(context.spec.owner.clone().unwrap_or_else(|| name.clone()))
        .keys((0..keyed.keys).map(|i| format!("k{i}")))
        .ttl(ttl)
        .request_timeout(
            spec.request_timeout_ms.map_or(term_timing::default_request_timeout(ttl), Duration::from_millis),
        )
        .drift_bound(spec.drift_bound)
        .lock_delay(Duration::from_millis(spec.lock_delay_ms))
        .adoption(keyed.adoption)
        .clock(clock.clone())
        .entropy(entropy);
    if let Some(renew) = spec.renew_ms {
        builder = builder.renew_interval(Duration::from_millis(renew));
    }
    if let Some(read) = keyed.read_interval_ms {
        builder = builder.read_interval(Duration::from_millis(read));
    }
    let create_at = context.spec.create_at_view.unwrap_or(keyed.create_at_view);
    if create_at > 0 {
        builder = builder.create_at(create_at);
    }
    if let Some(margin) = spec.stop_margin_ms {
        builder = builder.stop_margin(Duration::from_millis(margin));
    }
    let writer = builder.build()?;
    spawn_prober(context, keyed.keys, writer.handle(), clock.clone());
    let leaver = writer.leaver();
    let mut stop = context.stop.subscribe();
    tokio::task::spawn_local(async move {
        if stop.wait_for(|stop| *stop).await.is_ok() {
            leaver.leave();
        }
    });
    let events = spawn_recorder(context, keyed, clock.clone(), delays_seed);
    let work = KeyWork::new(keyed, clock.clone());
    let run = writer.run(move |ctx| {
        let key = key_number(ctx.key());
        let acting = Acting::start(events.clone(), key, ctx.round().get(), ctx.incarnation().to_owned());
        work.clone().run(acting, ctx)
    });
    let mut abandon = context.abandon.subscribe();
    let abandoned = async move {
        // The value `wait_for` returns holds the channel's lock, which the
        // runner needs to restart the node: it goes at once.
        if abandon.wait_for(|abandon| *abandon).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    // Dropping the run future is all an abandoned member is told: every
    // key's work must end with it.
    let result = tokio::select! {
        biased;
        () = abandoned => return std::future::pending().await,
        result = run => result,
    };
    let event = match result {
        Ok(()) => Event::ElectorError { message: STOPPED.into() },
        Err(err) => Event::CampaignEnded { message: err.to_string() },
    };
    context.history.record_now(&name, event);
    std::future::pending().await
}

/// How often a keyed member's handle is asked what it holds.
const PROBE_EVERY: Duration = Duration::from_secs(1);

/// Asks the member's handle, every second of its clock, for the lease of
/// one key (each key in turn), for the members and for a snapshot, and
/// records the answers: `keyed-handle-truthful` holds them against what
/// the member did. Users fence downstream writes with these leases and
/// route work by these members, so the handle is judged as the keys are.
fn spawn_prober(context: &NodeContext, keys: u32, handle: KeyedHandle, clock: Arc<SimClock>) {
    use hoplock::clock::Clock;
    use hoplock::hrw::{KeyLeaseError, Leases, Membership};
    if keys == 0 {
        return;
    }
    let (history, node) = (context.history.clone(), context.spec.name.clone());
    tokio::task::spawn_local(async move {
        for probe in 0u32.. {
            clock.sleep_until(clock.now() + PROBE_EVERY).await;
            let key = probe % keys;
            let (lease, holder) = match handle.acquire(&format!("k{key}")).await {
                Ok(lease) => (Some(lease.round.get()), None),
                Err(KeyLeaseError::Held { holder, .. }) => (None, Some(holder)),
                Err(_) => (None, None),
            };
            let members = handle.members().await.ok().map(|members| members.into_iter().map(|m| m.id).collect());
            let snapshot = handle.snapshot();
            let event = Event::HandleProbe {
                key,
                incarnation: snapshot.incarnation,
                lease,
                holder,
                members,
                view: snapshot.view,
                term_holds: snapshot.term_holds,
            };
            history.record_now(&node, event);
        }
    });
}

/// What a keyed member's work tells the node's recorder.
enum Note {
    /// An event, stamped with the simulated time it happened.
    Event(Duration, Event),
    /// A fenced write sent downstream at `sent`.
    Write { key: u32, round: u64, incarnation: String, sent: Duration },
}

/// Keeps the fenced downstream's delays apart from the member's own draws.
const FENCED_DELAYS: u64 = 0xfe0c_ed0d_e1a7_5eed;

/// One key being acted on: recorded when made and when dropped, however
/// the work ends (seeing the cancellation, or aborted by its member).
struct Acting {
    events: tokio::sync::mpsc::UnboundedSender<Note>,
    key: u32,
    round: u64,
    incarnation: String,
    /// Whether the work saw its right to act cancelled and wound down; a
    /// drop before then is an abort.
    wound_down: bool,
}

impl Acting {
    fn start(events: tokio::sync::mpsc::UnboundedSender<Note>, key: u32, round: u64, incarnation: String) -> Acting {
        let now = turmoil::sim_elapsed().unwrap_or_default();
        let _ = events.send(Note::Event(now, Event::KeyStarted { key, round, incarnation: incarnation.clone() }));
        Acting { events, key, round, incarnation, wound_down: false }
    }

    /// Sends one fenced write for the key, at its round.
    fn write(&self) {
        let sent = turmoil::sim_elapsed().unwrap_or_default();
        let (key, round, incarnation) = (self.key, self.round, self.incarnation.clone());
        let _ = self.events.send(Note::Write { key, round, incarnation, sent });
    }
}

/// Key `k{n}`'s number `n` (`u32::MAX` for a name the world never uses).
fn key_number(key: &str) -> u32 {
    key.strip_prefix('k').and_then(|i| i.parse().ok()).unwrap_or(u32::MAX)
}

/// The right to act for one key, as either protocol hands it out.
trait KeyRight: Send + 'static {
    fn is_cancelled(&self) -> bool;
    fn cancelled(&self) -> impl std::future::Future<Output = ()> + Send;
}

impl KeyRight for KeyContext {
    fn is_cancelled(&self) -> bool {
        KeyContext::is_cancelled(self)
    }

    fn cancelled(&self) -> impl std::future::Future<Output = ()> + Send {
        KeyContext::cancelled(self)
    }
}

impl KeyRight for LeaderContext {
    fn is_cancelled(&self) -> bool {
        LeaderContext::is_cancelled(self)
    }

    fn cancelled(&self) -> impl std::future::Future<Output = ()> + Send {
        LeaderContext::cancelled(self)
    }
}

/// What a key's work does in a keyed world, under either protocol.
#[derive(Clone)]
struct KeyWork {
    clock: Arc<SimClock>,
    work_stop: Duration,
    ignores_cancellation: bool,
    fenced_keys: u32,
    write_every: Duration,
}

impl KeyWork {
    fn new(keyed: &KeyedSpec, clock: Arc<SimClock>) -> KeyWork {
        KeyWork {
            clock,
            work_stop: Duration::from_millis(keyed.work_stop_ms),
            ignores_cancellation: keyed.work_ignores_cancellation,
            fenced_keys: keyed.fenced_keys,
            write_every: Duration::from_millis(keyed.fenced_every_ms),
        }
    }

    /// Acts for the key until `right` is cancelled, then winds down.
    fn run(self, acting: Acting, right: impl KeyRight) -> impl std::future::Future<Output = ()> + Send + 'static {
        let work = self;
        async move {
            use hoplock::clock::Clock;
            if work.ignores_cancellation {
                // Careless work: it never looks at its right to act, and
                // only its member's abort at the end of the term stops it.
                let _ = &right;
                loop {
                    if acting.key < work.fenced_keys {
                        acting.write();
                    }
                    work.clock.sleep_until(work.clock.now() + work.write_every).await;
                }
            }
            if acting.key < work.fenced_keys {
                // Writes as a careful user's work does: only while the
                // right to act for the key holds.
                while !right.is_cancelled() {
                    acting.write();
                    tokio::select! {
                        biased;
                        () = right.cancelled() => break,
                        () = work.clock.sleep_until(work.clock.now() + work.write_every) => {}
                    }
                }
            } else {
                right.cancelled().await;
            }
            // Real work takes a while to wind down; the member waits for it
            // before the key may move.
            work.clock.sleep_until(work.clock.now() + work.work_stop).await;
            let mut acting = acting;
            acting.wound_down = true;
            drop(acting);
        }
    }
}

/// Starts the node's recorder: it writes what the key work reports into
/// the history, and delivers fenced writes downstream after a delay drawn
/// from the seed.
fn spawn_recorder(
    context: &NodeContext,
    keyed: &KeyedSpec,
    wire: Arc<SimClock>,
    delays_seed: u64,
) -> tokio::sync::mpsc::UnboundedSender<Note> {
    // Key work runs on tokio tasks that must be Send, and the history is
    // not: the work sends what it saw, stamped with the simulated time,
    // and this local task records it.
    let (events, mut received) = tokio::sync::mpsc::unbounded_channel::<Note>();
    let (history, node, downstream) = (context.history.clone(), context.spec.name.clone(), context.downstream.clone());
    let latency_ms = keyed.fenced_latency_ms;
    tokio::task::spawn_local(async move {
        // Drawn here, in the order the notes arrive, so every run of a
        // seed draws the same delays.
        let mut delays = delays_seed;
        while let Some(note) = received.recv().await {
            match note {
                Note::Event(at, event) => history.record(at, &node, event),
                Note::Write { key, round, incarnation, sent } => {
                    let delay = Duration::from_millis(splitmix64(&mut delays) % (latency_ms + 1));
                    let (history, node, downstream) = (history.clone(), node.clone(), downstream.clone());
                    let sent_us = u64::try_from(sent.as_micros()).unwrap_or(u64::MAX);
                    // Timed on the node's clock, whose timers the runner
                    // knows of; a pause of the node holds these back too,
                    // which only makes them later.
                    let wire = wire.clone();
                    tokio::task::spawn_local(async move {
                        use hoplock::clock::Clock;
                        wire.sleep_until(wire.now() + delay).await;
                        downstream.write_key(&history, &node, key, round, incarnation, sent_us);
                    });
                }
            }
        }
    });
    events
}

/// Runs one process of a member of the per-key-lease baseline until it is
/// crashed: one [`Elector`] per key, each on its own lease object, whose
/// work records when it starts and stops the key, with the generation as
/// the round. A scheduled stop stops every elector.
#[allow(clippy::too_many_arguments)]
async fn run_leases_per_key(
    context: &NodeContext,
    keyed: &KeyedSpec,
    config: S3Config,
    transport: Arc<SimTransport>,
    clock: Arc<SimClock>,
    entropy: Arc<SeededEntropy>,
    delays_seed: u64,
    process: String,
) -> turmoil::Result {
    let events = spawn_recorder(context, keyed, clock.clone(), delays_seed);
    let work = KeyWork::new(keyed, clock.clone());
    let mut electors = Vec::new();
    for key in 0..keyed.keys {
        let config = S3Config { key: format!("{LEASES_PREFIX}{key}"), ..config.clone() };
        let backend = S3Backend::with_parts(config, transport.clone(), clock.clone(), entropy.clone())?;
        electors.push(elector_for(&context.spec, backend, clock.clone(), entropy.clone())?);
    }
    let mut stop = context.stop.subscribe();
    let stopping = electors.clone();
    tokio::task::spawn_local(async move {
        if stop.wait_for(|stop| *stop).await.is_ok() {
            for elector in &stopping {
                elector.stop();
            }
        }
    });
    let campaigns: Vec<_> = electors
        .into_iter()
        .zip(0..keyed.keys)
        .map(|(elector, key)| {
            let (events, work, process) = (events.clone(), work.clone(), process.clone());
            tokio::task::spawn_local(async move {
                loop {
                    let (events, work, process) = (events.clone(), work.clone(), process.clone());
                    let led = elector
                        .lead(move |ctx, lease| {
                            let acting = Acting::start(events, key, lease.generation.get(), process);
                            work.run(acting, ctx)
                        })
                        .await;
                    if let Err(err) = led {
                        return err;
                    }
                }
            })
        })
        .collect();
    // Every key's campaign ends the same way: stopped, or a store that
    // cannot do conditional writes. The first to end says which.
    let mut first = None;
    for campaign in campaigns {
        if let Ok(err) = campaign.await {
            first.get_or_insert(err);
        }
    }
    let event = match first {
        Some(hoplock::ElectorError::Stopped) | None => Event::ElectorError { message: STOPPED.into() },
        Some(err) => Event::CampaignEnded { message: err.to_string() },
    };
    context.history.record_now(&context.spec.name, event);
    std::future::pending().await
}

impl Drop for Acting {
    fn drop(&mut self) {
        // A crash drops the work with its host; the crash itself closes the
        // interval then, so a drop outside the simulation's time records
        // nothing.
        if let Some(now) = turmoil::sim_elapsed() {
            let incarnation = std::mem::take(&mut self.incarnation);
            let event = Event::KeyStopped { key: self.key, round: self.round, incarnation, aborted: !self.wound_down };
            let _ = self.events.send(Note::Event(now, event));
        }
    }
}

/// The kind of a loss reason, as the history and the `events-truthful`
/// checker name it.
fn loss_kind(reason: &hoplock::elector::LossReason) -> &'static str {
    match reason {
        hoplock::elector::LossReason::Expired => "expired",
        hoplock::elector::LossReason::Superseded => "superseded",
        hoplock::elector::LossReason::Deleted => "deleted",
        hoplock::elector::LossReason::Failed(_) => "failed",
        hoplock::elector::LossReason::ReleaseUnconfirmed(_) => "release-unconfirmed",
        hoplock::elector::LossReason::Abandoned => "abandoned",
        _ => "other",
    }
}

/// The leader-only work: write downstream every `write_every_ms` with the
/// term's generation until the context is cancelled.
struct Workload {
    spec: WorkloadSpec,
    clock: Arc<SimClock>,
    history: History,
    downstream: Downstream,
    node: String,
}

impl Workload {
    async fn run(self, ctx: LeaderContext, lease: Lease) {
        use hoplock::clock::Clock;
        let generation = lease.generation.get();
        self.history.record_now(&self.node, Event::Acquired { generation });
        let every = Duration::from_millis(self.spec.write_every_ms.max(1));
        let start = self.clock.now();
        let release_at = self.spec.release_after_ms.map(|ms| start + Duration::from_millis(ms));
        let mut next_write = start;
        let mut stop_writing_at = None;
        loop {
            let release = async {
                match release_at {
                    Some(at) if stop_writing_at.is_none() => self.clock.sleep_until(at).await,
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                () = ctx.cancelled(), if stop_writing_at.is_none() => {
                    self.history.record_now(&self.node, Event::Stepped { generation, reason: "cancelled".into() });
                    if self.spec.ignore_cancellation_ms == 0 {
                        return;
                    }
                    // A callback that ignores cancellation: it keeps writing
                    // for a while, unfenced but for the downstream's check.
                    stop_writing_at = Some(self.clock.now() + Duration::from_millis(self.spec.ignore_cancellation_ms));
                }
                () = release => {
                    self.history.record_now(&self.node, Event::Stepped { generation, reason: "released".into() });
                    return;
                }
                () = self.clock.sleep_until(next_write) => {
                    if stop_writing_at.is_some_and(|stop| self.clock.now() >= stop) {
                        return;
                    }
                    // The write is on its way now; it lands after its
                    // latency whatever happens to the context meanwhile.
                    let latency = Duration::from_millis(self.spec.write_latency_ms);
                    if !latency.is_zero() {
                        self.clock.sleep_until(self.clock.now() + latency).await;
                    }
                    self.downstream.write(&self.history, &self.node, generation);
                    next_write = next_write + every;
                }
            }
        }
    }
}
