//! `hoplock run`: run a command only while holding the lease.
//!
//! The runner campaigns; when it leads it starts the command in a process
//! group of its own with the generation in `HOPLOCK_GENERATION`. When
//! leadership ends (lost, or the runner is asked to stop) it sends the group
//! SIGTERM, then SIGKILL after the grace period, all before the lease can
//! pass to anyone else: the elector's stop margin is the grace period plus
//! half a second. On Linux the command also gets SIGKILL if the runner dies.

use std::pin::pin;
use std::process::ExitStatus;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Args;
use hoplock::clock::{Clock, SystemClock};
use hoplock::elector::TermEnd;
use hoplock::{BackendError, Elector, ElectorError, LeaderContext, Lease, Reads};
use tokio::process::{Child, Command};
use tracing::{error, info, warn};

use hoplock::backend::ObjectBackend;
use hoplock::store::Store;

use crate::store::{StoreArgs, parse_duration};

/// Options of `hoplock run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The owner name written into the lease. Default: the host name and pid.
    #[arg(long)]
    pub owner: Option<String>,
    /// The lease's time to live.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    pub ttl: Duration,
    /// How often the leader renews. Default TTL/3.
    #[arg(long, value_parser = parse_duration)]
    pub renew: Option<Duration>,
    /// When a follower reads the lease: `follow-renewals` (about once per
    /// holder's renew interval, just after each renewal) or `poll` (every
    /// --poll, as the Go hoplock does: a release is seen within one poll
    /// instead of one renew interval, for about five times the requests).
    #[arg(long, value_enum, default_value_t = ReadsArg::FollowRenewals)]
    pub reads: ReadsArg,
    /// How often a follower reads the lease with `--reads poll`, and when
    /// the record does not say how often its holder renews. Default TTL/15.
    #[arg(long, value_parser = parse_duration)]
    pub poll: Option<Duration>,
    /// How long a new leader waits after taking the lease from a holder that
    /// did not release it, before it starts the command: time for the old
    /// holder's last writes, already in flight, to land first.
    #[arg(long, value_parser = parse_duration, default_value = "0s")]
    pub lock_delay: Duration,
    /// How long the command gets between SIGTERM and SIGKILL. Default TTL/15.
    #[arg(long, value_parser = parse_duration)]
    pub grace: Option<Duration>,
    /// Run one term, then exit with the command's exit code.
    #[arg(long)]
    pub once: bool,
    /// Serve metrics in the Prometheus text format on this address
    /// (for example 127.0.0.1:9464), at any path: `hoplock_leader`,
    /// `hoplock_generation`, `hoplock_transitions_total`,
    /// `hoplock_renewal_seconds`, `hoplock_store_requests_total`,
    /// `hoplock_store_errors_total`.
    #[arg(long)]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// With --once: give up when the lease store has not answered for this
    /// long while campaigning, and exit with code 69 (EX_UNAVAILABLE).
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    pub unreachable_timeout: Duration,
    /// Campaign without first checking that the store honours conditional
    /// writes. Only for stores you have validated yourself (`hoplock
    /// check-s3`): on a store that ignores conditions two runners both lead.
    #[arg(long)]
    pub skip_verify: bool,
    /// The command and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// `--reads`: the elector's read schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReadsArg {
    /// About one read per renew interval, just after each renewal.
    FollowRenewals,
    /// A read every poll interval.
    Poll,
}

/// Why `hoplock run` stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The elector could not be built or the store is unusable.
    #[error(transparent)]
    Elector(#[from] ElectorError),
    /// The metrics endpoint could not be started.
    #[error("cannot serve metrics on {addr}: {message}")]
    Metrics {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// Why.
        message: String,
    },
    /// The store failed the checks run before campaigning.
    #[error(
        "refusing to campaign: {0}. These checks are sequential; `hoplock check` (`hoplock check-s3` on S3) also checks racing writers. \
         Pass --skip-verify to campaign anyway"
    )]
    UnsafeStore(String),
    /// The checks run before campaigning could not finish.
    #[error("cannot check the store before campaigning: {0}")]
    VerifyFailed(BackendError),
    /// The command could not be started.
    #[error("cannot start {command:?}: {source}")]
    Spawn {
        /// The command.
        command: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Exit code when the runner stopped because it was told to (SIGINT/SIGTERM).
pub const EXIT_STOPPED: u8 = 0;

/// Exit code when `--once` gave up on a store that did not answer
/// (sysexits' EX_UNAVAILABLE).
pub const EXIT_UNREACHABLE: u8 = 69;

/// Runs the command under the lease; returns the exit code to exit with.
pub async fn run(args: RunArgs) -> Result<u8, RunError> {
    if let Some(addr) = args.metrics_addr {
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            .install()
            .map_err(|err| RunError::Metrics { addr, message: err.to_string() })?;
        info!(%addr, "serving metrics");
    }
    let backend = args.store.open().map_err(ElectorError::from)?;
    if args.skip_verify {
        warn!("not checking that the store honours conditional writes (--skip-verify)");
    } else if !verify_store(&backend, &args).await? {
        return Ok(EXIT_UNREACHABLE);
    }
    let grace = args.grace.unwrap_or(args.ttl / 15);
    let owner = args.owner.clone().unwrap_or_else(default_owner);
    // The elector's own clock, so the watchdog below measures its instants.
    let clock = Arc::new(SystemClock::new());
    let mut builder = Elector::builder(backend)
        .owner(owner)
        .ttl(args.ttl)
        .stop_margin(grace + Duration::from_millis(500))
        .lock_delay(args.lock_delay)
        .reads(match args.reads {
            ReadsArg::FollowRenewals => Reads::FollowRenewals,
            ReadsArg::Poll => Reads::Poll,
        })
        .clock(clock.clone());
    if let Some(renew) = args.renew {
        builder = builder.renew_interval(renew);
    }
    if let Some(poll) = args.poll {
        builder = builder.poll_interval(poll);
    }
    let elector = builder.build()?;

    // SIGINT or SIGTERM: stop campaigning, stop the command, release.
    let stopper = elector.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        info!("stopping: signal received");
        stopper.stop();
    });

    // With --once, a campaign against a store that never answers gives up
    // after a stated bound rather than waiting forever. The watchdog stops
    // the elector (never mid-term), so the campaign ends the ordinary way.
    let gave_up = Arc::new(AtomicBool::new(false));
    if args.once {
        let (watched, flag, bound, clock) = (elector.clone(), gave_up.clone(), args.unreachable_timeout, clock.clone());
        tokio::spawn(async move {
            loop {
                clock.sleep_until(clock.now() + Duration::from_millis(250)).await;
                let health = watched.store_health();
                let failing_for = health.failing_since.map(|since| clock.now().saturating_duration_since(since));
                let failing_for = failing_for.unwrap_or_default();
                if !watched.is_leader() && failing_for >= bound {
                    let cause = health.last_error.map(|err| err.to_string()).unwrap_or_default();
                    error!(failing_for = ?failing_for, "giving up: the lease store did not answer: {cause}");
                    flag.store(true, Ordering::Relaxed);
                    watched.stop();
                    return;
                }
            }
        });
    }

    loop {
        let command = args.command.clone();
        let term = elector.lead(|ctx, lease| supervise(command, ctx, lease, grace)).await;
        let term = match term {
            Ok(term) => term,
            Err(ElectorError::Stopped) if gave_up.load(Ordering::Relaxed) => return Ok(EXIT_UNREACHABLE),
            Err(ElectorError::Stopped) => return Ok(EXIT_STOPPED),
            Err(err) => return Err(err.into()),
        };
        let status = term.output?;
        match &term.end {
            TermEnd::Lost(reason) => {
                warn!(generation = %term.generation, %reason, "lost the lease; command stopped")
            }
            end => info!(generation = %term.generation, ?end, "term over"),
        }
        if args.once {
            return Ok(status.map_or(1, exit_code));
        }
    }
}

/// Checks the store before campaigning, as the campaign itself would wait
/// for it: while it does not answer, a warning with the cause when that
/// starts and every 30 s, and with `--once` a give-up after
/// `--unreachable-timeout`. Returns `false` on giving up; an unsafe store
/// or a wrong configuration is an error.
async fn verify_store(backend: &Store, args: &RunArgs) -> Result<bool, RunError> {
    let clock = SystemClock::new();
    // The checks retry a store that does not answer for many seconds before
    // they give up once; a store that cannot be reached at all (nothing
    // listening, a name that does not resolve, a TLS failure) is said at
    // once, from one plain request sent beside them.
    let mut checks = pin!(verify_with_retries(backend, args, &clock));
    let first_contact = pin!(first_contact(backend, &clock));
    tokio::select! {
        biased;
        verified = &mut checks => return verified,
        trouble = first_contact => {
            if let Some(cause) = trouble {
                warn!("the lease store did not answer a first request; retrying the checks before campaigning: {cause}");
            }
        }
    }
    checks.await
}

/// How long the first request may take before `hoplock run` says the store
/// does not answer.
const FIRST_CONTACT: Duration = Duration::from_secs(2);

/// One GET of the lease key, no retries: `None` if the store answered
/// anything at all (even 404 or 403), else what went wrong, within
/// [`FIRST_CONTACT`]. The cause says which: a refused connection, a name
/// that does not resolve, TLS, or credentials not yet to be had.
async fn first_contact(backend: &Store, clock: &SystemClock) -> Option<String> {
    let answer = async {
        match backend {
            Store::S3(s3) => {
                s3.request(http::Method::GET, &[], bytes::Bytes::new()).await.err().map(|err| err.to_string())
            }
            #[allow(unreachable_patterns)]
            other => match other.read_object().await {
                // Only an error that got no answer says the store is not
                // answering; a refusal is an answer.
                Err(error @ (BackendError::Transient(_) | BackendError::Ambiguous(_))) => Some(error.to_string()),
                _ => None,
            },
        }
    };
    tokio::select! {
        biased;
        answer = answer => answer,
        () = clock.sleep_until(clock.now() + FIRST_CONTACT) => {
            Some(format!(
                "no answer within {FIRST_CONTACT:?}, from the store or its credential source (the checks go on waiting)"
            ))
        }
    }
}

/// The checks, tried again while the store does not answer.
async fn verify_with_retries(backend: &Store, args: &RunArgs, clock: &SystemClock) -> Result<bool, RunError> {
    const WARN_EVERY: Duration = Duration::from_secs(30);
    let started = clock.now();
    let mut warned: Option<hoplock::clock::Instant> = None;
    loop {
        let cause = match backend.verify().await {
            Ok(verification) => {
                let probe = verification.probe_key;
                info!(%probe, checks = verification.checks.len(), "the store honours conditional writes");
                return Ok(true);
            }
            Err(BackendError::Unsupported(message)) => return Err(RunError::UnsafeStore(message)),
            Err(error @ (BackendError::Transient(_) | BackendError::Ambiguous(_))) => error,
            Err(error) => return Err(RunError::VerifyFailed(error)),
        };
        let now = clock.now();
        if warned.is_none_or(|at| now.saturating_duration_since(at) >= WARN_EVERY) {
            warn!("the lease store is not answering; retrying the checks before campaigning: {cause}");
            warned = Some(now);
        }
        if args.once && now.saturating_duration_since(started) >= args.unreachable_timeout {
            error!(failing_for = ?now.saturating_duration_since(started), "giving up: the lease store did not answer: {cause}");
            return Ok(false);
        }
        clock.sleep_until(clock.now() + Duration::from_millis(500)).await;
    }
}

/// Runs the command for one term. Returns its exit status, or `None` if it
/// had to be stopped because leadership ended.
async fn supervise(
    command: Vec<String>,
    ctx: LeaderContext,
    lease: Lease,
    grace: Duration,
) -> Result<Option<ExitStatus>, RunError> {
    let mut child = spawn(&command, &lease)?;
    info!(generation = %lease.generation, pid = child.id(), "started the command");
    let generation = lease.generation;
    tokio::select! {
        biased;
        () = ctx.cancelled() => {
            stop_group(&mut child, grace).await;
            // Said before the release that follows: from here the command
            // writes nothing more.
            info!(%generation, "the command stopped");
            Ok(None)
        }
        status = child.wait() => {
            let status = status.ok();
            info!(%generation, code = status.map(exit_code), "the command exited by itself");
            Ok(status)
        }
    }
}

fn spawn(command: &[String], lease: &Lease) -> Result<Child, RunError> {
    let (program, args) = command.split_first().ok_or_else(|| RunError::Spawn {
        command: String::new(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "no command given"),
    })?;
    let mut process = Command::new(program);
    process
        .args(args)
        .env("HOPLOCK_GENERATION", lease.generation.to_string())
        .env("HOPLOCK_OWNER", &lease.owner)
        .kill_on_drop(true)
        .process_group(0);
    #[cfg(target_os = "linux")]
    {
        let runner = std::process::id() as libc::pid_t;
        // SAFETY: prctl and getppid are async-signal-safe and touch only the
        // new process.
        unsafe {
            process.pre_exec(move || {
                // If the runner dies without stopping the command (SIGKILL, a
                // crash), the kernel kills the command too: it must not go on
                // writing as a leader nobody renews.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // A runner that died between the fork and the prctl sent no
                // signal: the command must not start as an orphan.
                if libc::getppid() != runner {
                    return Err(std::io::Error::other("the runner died before its command started"));
                }
                Ok(())
            });
        }
    }
    process.spawn().map_err(|source| RunError::Spawn { command: command.join(" "), source })
}

/// SIGTERM to the whole group, then SIGKILL after `grace`.
async fn stop_group(child: &mut Child, grace: Duration) {
    let Some(pid) = child.id() else { return };
    let group = -(pid as i32);
    // SAFETY: kill(2) with a negative pid signals the process group we made.
    unsafe {
        libc::kill(group, libc::SIGTERM);
    }
    // Waiting on a real child process, in real time.
    #[allow(clippy::disallowed_methods)]
    let exited = tokio::time::timeout(grace, child.wait()).await;
    if exited.is_err() {
        warn!(pid, "the command ignored SIGTERM; killing its process group");
    }
    // Kill whatever is left of the group, including children of the command
    // that outlived it.
    // SAFETY: as above.
    unsafe {
        libc::kill(group, libc::SIGKILL);
    }
    let _ = child.wait().await;
}

fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code.clamp(0, 255) as u8,
        (None, Some(signal)) => (128 + signal).clamp(0, 255) as u8,
        _ => 1,
    }
}

fn default_owner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "host".into());
    format!("{host}-{}", std::process::id())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut interrupt), Ok(mut terminate)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
    else {
        return std::future::pending().await;
    };
    tokio::select! {
        biased;
        _ = interrupt.recv() => {}
        _ = terminate.recv() => {}
    }
}
