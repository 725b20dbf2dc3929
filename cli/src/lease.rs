//! `hoplock lease show` and `hoplock lease reset`: the operator's view of the
//! lease record and the way out of a corrupt or deleted one.

use std::io::Write;
use std::time::Duration;

use clap::{Args, Subcommand};
use hoplock::backend::Backend;
use hoplock::entropy::{Entropy, OsEntropy};
use hoplock::lease::LeaseRecord;
use hoplock::{BackendError, Generation};

use crate::store::StoreArgs;

/// Inspect or repair the lease record.
#[derive(Debug, Subcommand)]
pub enum LeaseCommand {
    /// Print the record: generation, owner, released, and its age by the server's clock.
    Show(#[command(flatten)] StoreArgs),
    /// Write a released record with a generation of at least the floor, so the next
    /// holder's generation is above every token issued before.
    Reset(ResetArgs),
}

/// Options of `hoplock lease reset`.
#[derive(Debug, Args)]
pub struct ResetArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The lowest generation the reset record may carry: at least the highest
    /// fencing token any downstream system has seen.
    #[arg(long)]
    pub generation_floor: u64,
    /// Reset even while the lease looks held.
    #[arg(long)]
    pub force: bool,
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] BackendError),
    /// The lease looks held; resetting it would depose a live leader.
    #[error(
        "the lease looks held by {owner:?} (generation {generation}, written {age:?} ago, TTL {ttl:?}); \
         pass --force to reset it anyway"
    )]
    Held {
        /// The holder.
        owner: String,
        /// Its generation.
        generation: Generation,
        /// Its age by the server's clock.
        age: Duration,
        /// Its TTL.
        ttl: Duration,
    },
    /// The reset would leave a generation with no successor, so no one could
    /// ever lead again on this key.
    #[error(
        "generation {generation} leaves no room for another term (the next holder needs generation + 1); \
         {hint}"
    )]
    NoRoom {
        /// The generation the reset would write.
        generation: Generation,
        /// What to do instead.
        hint: &'static str,
    },
    /// Writing the output failed.
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}

/// Runs a `lease` subcommand.
pub async fn run(command: LeaseCommand, out: &mut impl Write) -> Result<(), LeaseError> {
    match command {
        LeaseCommand::Show(store) => show(&store, out).await,
        LeaseCommand::Reset(args) => reset(&args, out).await,
    }
}

async fn show(store: &StoreArgs, out: &mut impl Write) -> Result<(), LeaseError> {
    let backend = store.open()?;
    let Some(found) = backend.inspect().await? else {
        writeln!(out, "no lease record at {}", backend.url())?;
        return Ok(());
    };
    let age = found.age().map_or_else(|| "unknown".into(), |age| format!("{}s", age.as_secs()));
    match &found.record {
        Ok(record) => {
            writeln!(out, "generation  {}", record.generation)?;
            writeln!(out, "owner       {}", record.owner)?;
            writeln!(out, "released    {}", record.released)?;
            writeln!(out, "ttl         {}", record.ttl_ms.map_or_else(|| "not stated".into(), |ms| format!("{ms}ms")))?;
            writeln!(
                out,
                "renews      {}",
                record.renew_ms.map_or_else(|| "not stated".into(), |ms| format!("every {ms}ms"))
            )?;
            writeln!(out, "age         {age} (by the server's clock)")?;
            writeln!(out, "expires_at  {} (the writer's clock; information only)", record.expires_at)?;
            writeln!(out, "incarnation {}", record.incarnation)?;
            writeln!(out, "etag        {}", found.version)?;
        }
        Err(reason) => {
            writeln!(out, "unreadable  {reason}")?;
            writeln!(out, "age         {age} (by the server's clock)")?;
            writeln!(out, "etag        {}", found.version)?;
            writeln!(out, "bytes       {:?}", String::from_utf8_lossy(&found.bytes[..found.bytes.len().min(200)]))?;
            writeln!(out, "repair it with `hoplock lease reset --generation-floor N`")?;
        }
    }
    Ok(())
}

async fn reset(args: &ResetArgs, out: &mut impl Write) -> Result<(), LeaseError> {
    // Refused before touching the store: a floor with no successor is a typo
    // or a misunderstanding, and no store state can make it usable.
    let floor = Generation(args.generation_floor);
    let Some(mut next) = floor.next() else {
        return Err(LeaseError::NoRoom { generation: floor, hint: "choose a lower --generation-floor" });
    };
    let backend = args.store.open()?;
    let found = backend.inspect().await?;
    let mut generation = floor;
    // The live record the reset replaces, if any: its holder is still
    // waited out by every elector that saw it.
    let mut replaced_live: Option<(String, Duration)> = None;
    let expected = match &found {
        None => None,
        Some(found) => {
            if let Ok(record) = &found.record {
                // Never lower the generation: the floor only raises it.
                generation = generation.max(record.generation);
                // A record without a TTL is held as long as electors wait
                // one out by default.
                let ttl = record.ttl().unwrap_or(hoplock::elector::DEFAULT_ASSUMED_TTL);
                let age = found.age().unwrap_or(Duration::ZERO);
                if !record.released && age < ttl && !args.force {
                    return Err(LeaseError::Held {
                        owner: record.owner.clone(),
                        generation: record.generation,
                        age,
                        ttl,
                    });
                }
                if !record.released {
                    replaced_live = Some((record.owner.clone(), ttl));
                }
            }
            Some(found.version.clone())
        }
    };
    if generation != floor {
        next = generation.next().ok_or(LeaseError::NoRoom {
            generation,
            hint: "the stored generation is exhausted; move the lease to a new key and raise its floor there",
        })?;
    }
    let record = LeaseRecord::reset(generation, format!("{:016x}{:016x}", OsEntropy.next_u64(), OsEntropy.next_u64()));
    // Conditional on what was just read: if anything wrote in between, the
    // reset fails rather than overwrite it.
    backend.write(expected.as_ref(), &record).await?;
    writeln!(out, "reset: released record at generation {generation}; the next holder gets {next}")?;
    if let Some((owner, ttl)) = replaced_live {
        // A release proves only that its writer stopped. The record replaced
        // here was not released, and may itself have replaced another
        // writer's live record: electors wait those holders out.
        writeln!(
            out,
            "note: the record replaced was not released ({owner:?}, TTL {ttl:?}). A release proves only that \
             its writer stopped, so electors that saw that record, or an earlier holder's that it replaced, \
             still wait out the longest TTL they saw before taking over"
        )?;
    }
    Ok(())
}
