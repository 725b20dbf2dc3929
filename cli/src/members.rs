//! `hoplock members show` and `hoplock members reset`: the operator's view of
//! a keyed group's membership object, and the way back after it was
//! deleted, overwritten or restored from a stale copy.

use std::io::Write;
use std::time::Duration;

use clap::{Args, Subcommand};
use hoplock::backend::{BackendError, ObjectBackend};
use hoplock::entropy::OsEntropy;
use hoplock::hrw::WeightFn;
use hoplock::keyed::record::Hash;
use hoplock::keyed::{MembershipRecord, MembershipReset, RESET_ENTRY_ID, Replaced, ResetError};

use crate::store::{StoreArgs, parse_duration};

/// Inspect or recreate a keyed group's membership object.
#[derive(Debug, Subcommand)]
pub enum MembersCommand {
    /// Print the object: view, what made it, whether it is active, and every entry.
    Show(#[command(flatten)] StoreArgs),
    /// Write a new object at a view floor, held inactive for a wait so that every
    /// member of the old object has stopped before any key starts again.
    Reset(ResetArgs),
}

/// Options of `hoplock members reset`.
#[derive(Debug, Args)]
pub struct ResetArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The lowest view the new object may start at: above the last view the old
    /// object reached, which is at least the highest round any downstream has
    /// accepted. A readable stored object's view is always exceeded.
    #[arg(long)]
    pub view_floor: u64,
    /// How long no key starts: at least the longest TTL any member used, plus
    /// its lock-delay (e.g. 45s, 90000ms).
    #[arg(long, value_parser = parse_duration)]
    pub wait: Duration,
    /// The weight function the group uses ("fast" or "go-sha256"). Without this
    /// and --weighted, a readable stored object's hash is kept; with either, the
    /// other takes its default ("fast", unweighted).
    #[arg(long)]
    pub weight_fn: Option<WeightFn>,
    /// Whether entries' capacities weight their shares (true or false); see
    /// --weight-fn for the default.
    #[arg(long)]
    pub weighted: Option<bool>,
    /// Reset even while the object has members (every key stops for the wait).
    #[arg(long)]
    pub force: bool,
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum MembersError {
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] BackendError),
    /// The reset was refused or failed.
    #[error(transparent)]
    Reset(#[from] ResetError),
    /// Writing the output failed.
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}

/// Runs a `members` subcommand.
pub async fn run(command: MembersCommand, out: &mut impl Write) -> Result<(), MembersError> {
    match command {
        MembersCommand::Show(store) => show(&store, out).await,
        MembersCommand::Reset(args) => reset(&args, out).await,
    }
}

async fn show(store: &StoreArgs, out: &mut impl Write) -> Result<(), MembersError> {
    let backend = store.open()?;
    let object = match backend.read_object().await {
        Ok(object) => object,
        Err(BackendError::NoLease) => {
            writeln!(out, "no membership object at {}", backend.url())?;
            writeln!(out, "members that saw a view act for no key until it is back; recreate it with")?;
            writeln!(
                out,
                "`hoplock members reset --view-floor N --wait D` (N above the last view, D the TTL plus the lock-delay)"
            )?;
            return Ok(());
        }
        Err(error) => return Err(error.into()),
    };
    let record = match MembershipRecord::decode(&object.bytes) {
        Ok(record) => record,
        Err(reason) => {
            writeln!(out, "unreadable  {reason}")?;
            writeln!(out, "etag        {}", object.version)?;
            writeln!(out, "bytes       {:?}", String::from_utf8_lossy(&object.bytes[..object.bytes.len().min(200)]))?;
            writeln!(
                out,
                "members act for no key on it; repair it with `hoplock members reset --view-floor N --wait D`"
            )?;
            return Ok(());
        }
    };
    writeln!(out, "view        {}", record.view)?;
    writeln!(out, "change      {:?} of {}", record.change.kind, record.change.id)?;
    writeln!(out, "last join   {}", record.last_join)?;
    writeln!(out, "active      {}", record.is_active())?;
    writeln!(
        out,
        "hash        {}{}",
        record.hash.function.name(),
        if record.hash.weighted { ", weighted" } else { "" }
    )?;
    writeln!(out, "etag        {}", object.version)?;
    writeln!(out, "entries     {}", record.entries.len())?;
    for entry in &record.entries {
        let note = if entry.id == RESET_ENTRY_ID { "  (a reset's placeholder: evicted after its TTL)" } else { "" };
        writeln!(
            out,
            "  {:<24} incarnation {} ttl {}ms adopted {} capacity {}{}{note}",
            entry.id,
            entry.incarnation,
            entry.ttl_ms,
            entry.adopted,
            entry.capacity,
            if entry.addr.is_empty() { String::new() } else { format!(" addr {}", entry.addr) },
        )?;
    }
    Ok(())
}

async fn reset(args: &ResetArgs, out: &mut impl Write) -> Result<(), MembersError> {
    // Refused before touching the store: bad settings are a typo, and no
    // store state can make them usable.
    let mut reset = MembershipReset::new(args.view_floor, args.wait)?;
    if args.weight_fn.is_some() || args.weighted.is_some() {
        let defaults = Hash::default();
        reset = reset.hash(Hash {
            function: args.weight_fn.unwrap_or(defaults.function),
            weighted: args.weighted.unwrap_or(defaults.weighted),
        });
    }
    let backend = args.store.open()?;
    let plan = reset.apply(&backend, &OsEntropy, args.force).await?;
    match &plan.replaced {
        Replaced::Nothing => writeln!(out, "no object was stored")?,
        Replaced::Unreadable(reason) => writeln!(out, "replaced an unreadable object: {reason}")?,
        Replaced::Object { view, entries } => writeln!(out, "replaced the object at view {view} ({entries} entries)")?,
    }
    writeln!(
        out,
        "reset: membership object at view {}; members rejoin it and start no key until they have evicted \
         the placeholder, {:?} after each first reads it",
        plan.record.view, args.wait
    )?;
    if plan.record.view > args.view_floor {
        writeln!(out, "note: the view is above the floor {}: it must exceed the stored view", args.view_floor)?;
    }
    Ok(())
}
