//! The `hoplock` command line.
//!
//! Each subcommand lives in its own module; this file only parses the
//! command line and dispatches.

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod check;
mod check_s3;
mod hrw;
mod lease;
mod members;
mod run;
mod store;

/// Single-writer election and ownership tools.
#[derive(Debug, Parser)]
#[command(name = "hoplock", version, about, propagate_version = true)]
struct Cli {
    /// How log lines are written to stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "HOPLOCK_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Rendezvous (HRW) ownership: which member owns a key.
    #[command(subcommand)]
    Hrw(hrw::HrwCommand),
    /// Run a command only while holding the lease (a leader-only job).
    Run(run::RunArgs),
    /// Inspect or repair the lease record.
    #[command(subcommand)]
    Lease(lease::LeaseCommand),
    /// Inspect or recreate a keyed group's membership object.
    #[command(subcommand)]
    Members(members::MembersCommand),
    /// Check whether an S3-compatible provider honours conditional writes,
    /// also under racing writers. Exit codes: 0 SAFE, 3 SAFE with warnings,
    /// 4 UNSUPPORTED, 5 UNSAFE (ignores conditions), 6 UNSAFE (not atomic),
    /// 7 UNSAFE (weak ETags), 1 ERROR, 130 interrupted.
    #[command(name = "check-s3")]
    CheckS3(check_s3::CheckArgs),
    /// Check whether any conditional store (gs://, az://, s3://) honours its
    /// preconditions, also under racing writers. Exit codes as check-s3's:
    /// 0 SAFE, 4 UNSUPPORTED, 5 UNSAFE (ignores conditions), 6 UNSAFE (not
    /// atomic), 7 UNSAFE (weak versions), 1 ERROR.
    Check(check::CheckArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    #[cfg(feature = "planted")]
    if let Err(error) = plant_from_env() {
        return fail(&error);
    }
    match cli.command {
        Command::Hrw(command) => hrw_main(command),
        Command::Run(args) => {
            init_logging(cli.log_format);
            let runtime = match runtime() {
                Ok(runtime) => runtime,
                Err(error) => return fail(&error),
            };
            match runtime.block_on(run::run(args)) {
                Ok(code) => ExitCode::from(code),
                Err(error) => fail(&error.to_string()),
            }
        }
        Command::Check(args) => {
            init_logging(cli.log_format);
            let runtime = match runtime() {
                Ok(runtime) => runtime,
                Err(error) => return fail(&error),
            };
            let mut stdout = std::io::stdout().lock();
            match runtime.block_on(check::run(args, &mut stdout)) {
                Ok(code) => {
                    let _ = stdout.flush();
                    ExitCode::from(code)
                }
                Err(error) => fail(&error),
            }
        }
        Command::CheckS3(args) => {
            init_logging(cli.log_format);
            let runtime = match runtime() {
                Ok(runtime) => runtime,
                Err(error) => return fail(&error),
            };
            let mut stdout = std::io::stdout().lock();
            match runtime.block_on(check_s3::run(args, &mut stdout)) {
                Ok(code) => {
                    let _ = stdout.flush();
                    ExitCode::from(code)
                }
                Err(check_s3::CheckError::Usage(message)) => {
                    eprintln!("hoplock check-s3: {message}");
                    ExitCode::from(2)
                }
                Err(error) => fail(&error.to_string()),
            }
        }
        Command::Lease(command) => operate(cli.log_format, |runtime, out| runtime.block_on(lease::run(command, out))),
        Command::Members(command) => {
            operate(cli.log_format, |runtime, out| runtime.block_on(members::run(command, out)))
        }
    }
}

fn hrw_main(command: hrw::HrwCommand) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    let result = hrw::run(command, &mut stdout).and_then(|()| stdout.flush().map_err(hrw::HrwError::from));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that closed the pipe early (`| head`) is not an error.
        Err(hrw::HrwError::Output(error)) if error.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("hoplock: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}

/// Runs an operator's subcommand (`lease`, `members`): logs set up, one
/// runtime, the output written to stdout and flushed, any error printed.
fn operate<E: std::fmt::Display>(
    format: LogFormat,
    command: impl FnOnce(&tokio::runtime::Runtime, &mut std::io::StdoutLock<'static>) -> Result<(), E>,
) -> ExitCode {
    init_logging(format);
    let mut stdout = std::io::stdout().lock();
    let result = runtime().and_then(|runtime| command(&runtime, &mut stdout).map_err(|err| err.to_string()));
    match result.and_then(|()| stdout.flush().map_err(|err| err.to_string())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(&error),
    }
}

/// In a build with the `planted` feature, activates the deliberate bug
/// `HOPLOCK_PLANTED` names, for the chaos harness to show that its checkers
/// catch it in real processes.
#[cfg(feature = "planted")]
fn plant_from_env() -> Result<(), String> {
    match std::env::var("HOPLOCK_PLANTED") {
        Ok(name) if !name.is_empty() => {
            let bug: hoplock::planted::Bug = name.parse().map_err(|err| format!("HOPLOCK_PLANTED: {err}"))?;
            hoplock::planted::plant(Some(bug));
            eprintln!("hoplock: planted bug {bug} is active (HOPLOCK_PLANTED)");
            Ok(())
        }
        _ => Ok(()),
    }
}

fn fail(error: &str) -> ExitCode {
    eprintln!("hoplock: {error}");
    ExitCode::FAILURE
}

/// One thread: `hoplock run` asks the kernel to kill its command when the
/// thread that started it exits, so that thread must be the process's own.
fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| format!("cannot start the async runtime: {err}"))
}

/// Logs to stderr: leadership changes at info, renewals at debug (set
/// `HOPLOCK_LOG=debug` to see them). Colour only on a terminal, and never
/// with `NO_COLOR` set; `HOPLOCK_LOG_FORMAT=json` (or `--log-format json`)
/// writes one JSON object per line for log shippers.
fn init_logging(format: LogFormat) {
    use std::io::IsTerminal;
    let level = match std::env::var("HOPLOCK_LOG").as_deref() {
        Ok("debug") => tracing::Level::DEBUG,
        Ok("warn") => tracing::Level::WARN,
        Ok("error") => tracing::Level::ERROR,
        _ => tracing::Level::INFO,
    };
    let builder = tracing_subscriber::fmt().with_max_level(level).with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().with_ansi(false).init(),
        LogFormat::Text => {
            let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
            builder.with_ansi(colour).init();
        }
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}
