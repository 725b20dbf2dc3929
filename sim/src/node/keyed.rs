//! A keyed member's process: a [`KeyedWriter`] over the world's keys, and the
//! prober that asks its handle what it holds.

use super::*;

/// Runs one process of a keyed member until it is crashed: a
/// [`KeyedWriter`] over the world's keys, whose work records when it starts
/// and stops each key. A scheduled stop is a graceful leave.
pub(super) async fn run_keyed(
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
    let events = spawn_recorder(context, keyed, delays_seed);
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
pub(super) const PROBE_EVERY: Duration = Duration::from_secs(1);

/// Asks the member's handle, every second of its clock, for the lease of
/// one key (each key in turn), for the members and for a snapshot, and
/// records the answers: `keyed-handle-truthful` holds them against what
/// the member did. Users fence downstream writes with these leases and
/// route work by these members, so the handle is judged as the keys are.
pub(super) fn spawn_prober(context: &NodeContext, keys: u32, handle: KeyedHandle, clock: Arc<SimClock>) {
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
