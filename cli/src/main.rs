//! The `hoplock` command line.
//!
//! Each subcommand lives in its own module; this file only parses the
//! command line and dispatches.

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod hrw;

/// Single-writer election and ownership tools.
#[derive(Debug, Parser)]
#[command(name = "hoplock", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Rendezvous (HRW) ownership: which member owns a key.
    #[command(subcommand)]
    Hrw(hrw::HrwCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut stdout = std::io::stdout().lock();
    let result = match cli.command {
        Command::Hrw(command) => hrw::run(command, &mut stdout),
    };
    let result = result.and_then(|()| stdout.flush().map_err(hrw::HrwError::from));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that closed the pipe early (`| head`) is not an error.
        Err(hrw::HrwError::Output(error)) if error.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("hoplock: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}
