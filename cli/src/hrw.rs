//! `hoplock hrw`: who owns a key, by rendezvous hashing over the member ids
//! given on the command line.
//!
//! Keys and ids are taken verbatim as UTF-8 text: the empty key is written
//! `--key=`, and ids that begin with `-` go after `--`.

use std::io::Write;

use clap::{Args, Subcommand, ValueEnum};
use hoplock::hrw::{Member, WeightFn};

/// The `hrw` subcommands.
#[derive(Debug, Subcommand)]
pub enum HrwCommand {
    /// Print the id of the member that owns the key.
    Owner(OwnerArgs),
    /// Print the owner and its failover successors, one id a line, best first.
    Replicas(ReplicasArgs),
}

/// What every `hrw` subcommand needs.
#[derive(Debug, Args)]
pub struct Lookup {
    /// The key to look up; may be empty (`--key=`).
    #[arg(long, allow_hyphen_values = true)]
    key: String,

    /// The weight function; every replica must use the same one.
    #[arg(long = "hash", value_enum, default_value_t = Hash::Fast)]
    hash: Hash,

    /// The member ids. Put ids that begin with '-' after '--'.
    #[arg(value_name = "ID")]
    ids: Vec<String>,
}

/// `hrw owner`.
#[derive(Debug, Args)]
pub struct OwnerArgs {
    #[command(flatten)]
    lookup: Lookup,
}

/// `hrw replicas`.
#[derive(Debug, Args)]
pub struct ReplicasArgs {
    #[command(flatten)]
    lookup: Lookup,

    /// How many members to print (fewer if there are fewer distinct ids).
    #[arg(short = 'n', long = "count", value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    count: u64,
}

/// The weight function's command-line names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Hash {
    /// XXH3 of the key with a 64-bit finaliser; the default.
    Fast,
    /// SHA-256, bit-compatible with the Go `ha` package.
    #[value(name = "go-sha256")]
    GoSha256,
}

impl From<Hash> for WeightFn {
    fn from(hash: Hash) -> Self {
        match hash {
            Hash::Fast => WeightFn::Fast,
            Hash::GoSha256 => WeightFn::GoSha256,
        }
    }
}

/// Why an `hrw` subcommand failed.
#[derive(Debug, thiserror::Error)]
pub enum HrwError {
    /// No ids were given, so no member can own the key.
    #[error("no member ids given: an empty set owns nothing (ids that begin with '-' go after '--')")]
    NoMembers,
    /// Writing the answer failed.
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
}

impl HrwError {
    /// The process exit code: 2 for a usage error, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            HrwError::NoMembers => 2,
            HrwError::Output(_) => 1,
        }
    }
}

impl Lookup {
    fn members(&self) -> Result<Vec<Member>, HrwError> {
        if self.ids.is_empty() {
            return Err(HrwError::NoMembers);
        }
        Ok(self.ids.iter().map(|id| Member::new(id.as_str(), "")).collect())
    }
}

/// Runs one `hrw` subcommand, writing its answer to `out`.
pub fn run(command: HrwCommand, out: &mut impl Write) -> Result<(), HrwError> {
    match command {
        HrwCommand::Owner(args) => {
            let members = args.lookup.members()?;
            let weight_fn = WeightFn::from(args.lookup.hash);
            // A non-empty list always has an owner.
            let owner = weight_fn.owner(&args.lookup.key, &members).ok_or(HrwError::NoMembers)?;
            writeln!(out, "{}", owner.id)?;
        }
        HrwCommand::Replicas(args) => {
            let members = args.lookup.members()?;
            let weight_fn = WeightFn::from(args.lookup.hash);
            let count = usize::try_from(args.count).unwrap_or(usize::MAX);
            for member in weight_fn.replicas(&args.lookup.key, &members, count) {
                writeln!(out, "{}", member.id)?;
            }
        }
    }
    Ok(())
}
