//! The per-key-lease baseline: one [`Elector`] per key and member, each on its
//! own lease object, for comparing costs with keyed writers.

use super::*;

/// Runs one process of a member of the per-key-lease baseline until it is
/// crashed: one [`Elector`] per key, each on its own lease object, whose
/// work records when it starts and stops the key, with the generation as
/// the round. A scheduled stop stops every elector.
#[allow(clippy::too_many_arguments)]
pub(super) async fn run_leases_per_key(
    context: &NodeContext,
    keyed: &KeyedSpec,
    config: S3Config,
    transport: Arc<SimTransport>,
    clock: Arc<SimClock>,
    entropy: Arc<SeededEntropy>,
    delays_seed: u64,
    process: String,
) -> turmoil::Result {
    let events = spawn_recorder(context, keyed, delays_seed);
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
