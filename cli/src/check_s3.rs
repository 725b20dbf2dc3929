//! `hoplock check-s3`: does an S3-compatible provider really honour
//! conditional writes, including when writers race?
//!
//! The checks (in [`checks`]) write only under a prefix of their own (by
//! default a fresh random one), through the same signing and transport as
//! the elector, and delete what they wrote afterwards, also after Ctrl-C.
//! Without `--endpoint` the built-in fake S3 is served on 127.0.0.1 and
//! checked, so the full report can be seen with no set-up; `--fake-mode`
//! turns one of its broken provider modes on.
//!
//! The verdict and its exit code are in [`report`]; the JSON report's
//! schema is documented there.

mod checks;
mod probe;
mod report;

use std::io::{IsTerminal, Write};
use std::sync::Arc;

use clap::Args;
use hoplock::clock::{Clock, SystemClock};
use hoplock::entropy::{Entropy, OsEntropy};
use hoplock::s3::S3Backend;
use hoplock::s3::credentials::CredentialSource;
use hoplock::s3::sigv4::Credentials;
use hoplock::s3::transport::ReqwestTransport;
use hoplock_testkit::fake_s3::{FakeS3, ProviderMode, server};

use self::checks::Settings;
use self::probe::Probe;
use self::report::Report;
use crate::store::ClientArgs;

/// Options of `hoplock check-s3`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// An S3 endpoint URL (repeatable: racing clients are spread over the
    /// endpoints, as the nodes of one cluster would be). Without one, the
    /// built-in fake S3 is started on 127.0.0.1 and checked.
    #[arg(long = "endpoint", value_name = "URL")]
    pub endpoints: Vec<String>,
    /// The bucket to write in. Required with --endpoint; the built-in fake
    /// S3 has `hoplock-check`.
    #[arg(long)]
    pub bucket: Option<String>,
    /// The key prefix everything is written under. Default: a fresh random
    /// one, `hoplock-check-<random>/`. Nothing outside it is touched.
    #[arg(long)]
    pub prefix: Option<String>,
    /// Rounds of each race (racing creates, racing compare-and-swaps), and
    /// steps of each client in the linearizability audit.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub rounds: u32,
    /// Clients racing in each round.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(2..=256))]
    pub concurrency: u32,
    /// Bytes of each racing write: large enough that a server which checks
    /// the condition before the body has arrived shows it.
    #[arg(long, default_value_t = 256 * 1024, value_parser = clap::value_parser!(u64).range(512..=16 * 1024 * 1024))]
    pub body_bytes: u64,
    /// How long after the last refused conditional write every key is
    /// read again: a store that answers 412 but applies the write later is
    /// caught if it does so within this time. The default catches writes
    /// applied up to 10 s late.
    #[arg(long, value_parser = crate::store::parse_duration, default_value = "12s")]
    pub settle: std::time::Duration,
    /// Also write a body over 5 MiB in the one-at-a-time checks (they
    /// always write 512 B, --body-bytes and just over 512 KiB). Bodies over
    /// 1 MiB are read back with a Range GET, which the store must honour.
    #[arg(long)]
    pub thorough: bool,
    /// Also write the report as Markdown to FILE: the table, findings,
    /// settings, the server's `Server` header, the date and this version,
    /// for a team's infrastructure docs.
    #[arg(long, value_name = "FILE")]
    pub report: Option<std::path::PathBuf>,
    /// Serve the built-in fake S3 in this provider mode and check it (no
    /// --endpoint). Modes: honest, ignore-if-none-match, ignore-if-match,
    /// non-atomic, stale-reads, ignore-conditional-delete,
    /// reject-conditional, if-match-creates, weak-etags,
    /// applies-refused-late, large-bodies-unconditional,
    /// conditions-expire-per-key, lagging-reads, bare-etags-only,
    /// ignores-bare-etags.
    #[arg(long, value_name = "MODE")]
    pub fake_mode: Option<ProviderMode>,
    /// Print the report as JSON (schema version 1) instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// The bucket the built-in fake S3 serves.
const FAKE_BUCKET: &str = "hoplock-check";

/// Progress on standard error: a line per check, and on a terminal a
/// line rewritten per round. Silent when asked.
pub struct Progress {
    terminal: bool,
    quiet: bool,
}

impl Progress {
    fn check(&self, index: usize, of: usize, name: &str) {
        if !self.quiet {
            let end = if self.terminal { "\r\x1b[K" } else { "" };
            eprint!("{end}[{index}/{of}] {name}{}", if self.terminal { "" } else { "\n" });
        }
    }

    fn round(&self, name: &str, round: u32, of: u32) {
        if !self.quiet && self.terminal {
            eprint!("\r\x1b[K      {name}: round {round}/{of}");
        }
    }

    fn done(&self) {
        if !self.quiet && self.terminal {
            eprint!("\r\x1b[K");
        }
    }
}

/// Why `check-s3` could not start.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The options contradict each other or miss something.
    #[error("{0}")]
    Usage(String),
    /// The store's configuration is wrong, or the fake could not start.
    #[error("{0}")]
    Setup(String),
}

/// Runs the checks and writes the report to `out`; returns the exit code.
pub async fn run(args: CheckArgs, out: &mut impl Write) -> Result<u8, CheckError> {
    let clock = SystemClock::new();
    let started = clock.now();
    let prefix = match &args.prefix {
        Some(prefix) if prefix.is_empty() || prefix.starts_with('/') => {
            return Err(CheckError::Usage(format!("--prefix {prefix:?} must be non-empty and not start with '/'")));
        }
        Some(prefix) => prefix.clone(),
        None => format!("hoplock-check-{:012x}/", OsEntropy.next_u64() >> 16),
    };
    let fake = if args.endpoints.is_empty() {
        Some(start_fake(args.fake_mode.unwrap_or_default()).await?)
    } else if args.fake_mode.is_some() {
        return Err(CheckError::Usage("--fake-mode checks the built-in fake S3; leave out --endpoint".into()));
    } else {
        None
    };
    let (endpoints, bucket) = match &fake {
        Some(fake) => (vec![fake.endpoint.clone()], args.bucket.clone().unwrap_or_else(|| FAKE_BUCKET.into())),
        None => {
            let bucket =
                args.bucket.clone().ok_or_else(|| CheckError::Usage("--bucket is required with --endpoint".into()))?;
            (args.endpoints.clone(), bucket)
        }
    };
    let mut backends = Vec::new();
    let mut transport_options = None;
    for endpoint in &endpoints {
        let mut config = args.client.config(Some(endpoint), &bucket, &format!("{prefix}probe")).map_err(setup)?;
        if let Some(fake) = &fake {
            config.credentials = CredentialSource::Explicit(fake.credentials.clone());
            config.addressing = hoplock::s3::config::Addressing::PathStyle;
        }
        transport_options.get_or_insert_with(|| config.transport.clone());
        backends.push(S3Backend::new(config).map_err(setup)?);
    }
    let transport =
        ReqwestTransport::new(&transport_options.unwrap_or_default()).map_err(|err| CheckError::Setup(err.message))?;
    // Each request may take the request timeout; a racing body of 16 MiB
    // over a slow link may need more, so the timeout scales with it.
    let timeout = args.client.request_timeout.max(std::time::Duration::from_secs(1))
        + std::time::Duration::from_millis(args.body_bytes / 1024);
    let probe = Probe::new(backends, transport, timeout, prefix.clone());
    let settings = Settings {
        rounds: args.rounds,
        concurrency: args.concurrency,
        body_bytes: args.body_bytes as usize,
        settle: args.settle,
        bare_etags: args.client.bare_etags,
        thorough: args.thorough,
    };
    let mut report = Report {
        endpoints: endpoints.clone(),
        bucket,
        prefix,
        fake_mode: fake.as_ref().map(|fake| fake.mode.to_string()),
        rounds: settings.rounds,
        concurrency: settings.concurrency,
        body_bytes: settings.body_bytes,
        settle: settings.settle,
        thorough: settings.thorough,
        bare_etags: settings.bare_etags,
        started: Some(clock.wall()),
        ..Report::default()
    };
    let progress = Progress { terminal: std::io::stderr().is_terminal(), quiet: false };

    let outcome = {
        let checks = checks::run_all(&probe, settings, &mut report, &progress);
        tokio::select! {
            biased;
            _ = tokio::signal::ctrl_c() => None,
            outcome = checks => Some(outcome),
        }
    };
    progress.done();
    let interrupted = outcome.is_none();
    if let Some(Err(fatal)) = outcome {
        report.error = Some(fatal);
    }
    if interrupted {
        eprintln!("interrupted: deleting what was written");
        report.error = Some("interrupted".into());
        report.interrupted = true;
    }
    let written = probe.written().len();
    // Deleted keys are read again once the read lag has passed: a refused
    // write applied late can bring a key back after its delete.
    (report.left, report.came_back) = probe.clean_up(report.read_lag_wait).await;
    report.deleted = written.saturating_sub(report.left.len());
    if report.error.is_none() {
        report.checks.push(came_back(&report.came_back, report.read_lag_wait));
    }
    report.elapsed_ms = clock.now().saturating_duration_since(started).as_millis() as u64;
    if let Some(fake) = fake {
        let _ = fake.stop.send(());
    }
    let text = if args.json {
        let mut json = serde_json::to_string_pretty(&report.json()).unwrap_or_default();
        json.push('\n');
        json
    } else {
        report.table()
    };
    out.write_all(text.as_bytes()).map_err(|err| CheckError::Setup(format!("cannot write the report: {err}")))?;
    if let Some(path) = &args.report {
        std::fs::write(path, report.markdown())
            .map_err(|err| CheckError::Setup(format!("cannot write the report to {}: {err}", path.display())))?;
    }
    Ok(report.exit_code())
}

/// The "nothing came back" check, judged after the clean-up: a key that
/// holds a refused write after its delete shows a write applied later than
/// `--settle` ("ignores conditions"); any other key that came back is a
/// warning.
fn came_back(keys: &[(String, bool)], waited: std::time::Duration) -> report::Check {
    const NAME: &str = "nothing came back";
    let refused: Vec<&str> = keys.iter().filter(|(_, refused)| *refused).map(|(key, _)| key.as_str()).collect();
    let others: Vec<&str> = keys.iter().filter(|(_, refused)| !*refused).map(|(key, _)| key.as_str()).collect();
    let read = format!("every deleted key read again {} ms after the clean-up", waited.as_millis());
    if !refused.is_empty() {
        let what =
            format!("{} keys held a refused write after their delete: {} ({read})", refused.len(), refused.join(", "));
        report::Check::fail(NAME, report::Verdict::IgnoresConditions, what)
    } else if !others.is_empty() {
        report::Check::warn(
            NAME,
            format!("{} keys came back after their delete: {} ({read})", others.len(), others.join(", ")),
        )
    } else {
        report::Check::pass(NAME, format!("{read}; none was there"))
    }
}

fn setup(error: hoplock::BackendError) -> CheckError {
    CheckError::Setup(error.to_string())
}

/// The built-in fake S3, served on a loopback port for the run.
struct Fake {
    endpoint: String,
    mode: ProviderMode,
    credentials: Credentials,
    stop: tokio::sync::oneshot::Sender<()>,
}

async fn start_fake(mode: ProviderMode) -> Result<Fake, CheckError> {
    let secret = format!("{:016x}{:016x}", OsEntropy.next_u64(), OsEntropy.next_u64());
    let credentials = Credentials::new("HOPLOCKCHECK", secret.clone());
    let s3 = FakeS3::builder(Arc::new(SystemClock::new()), OsEntropy.next_u64())
        .mode(mode)
        .credentials("HOPLOCKCHECK", secret)
        .bucket(FAKE_BUCKET)
        .build()
        .map_err(|err| CheckError::Setup(format!("cannot build the fake S3: {err}")))?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|err| CheckError::Setup(format!("cannot listen on 127.0.0.1 for the fake S3: {err}")))?;
    let address = listener.local_addr().map_err(|err| CheckError::Setup(err.to_string()))?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server::serve(s3, listener, async move {
        let _ = stopped.await;
    }));
    Ok(Fake { endpoint: format!("http://{address}"), mode, credentials, stop })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::came_back;
    use super::report::{Status, Verdict};

    #[test]
    fn a_key_back_after_its_delete_with_a_refused_write_ignores_conditions() {
        let wait = Duration::from_millis(300);
        let refused = came_back(&[("p/cas-512".into(), true), ("p/etag".into(), false)], wait);
        assert_eq!((refused.status, refused.verdict), (Status::Fail, Some(Verdict::IgnoresConditions)));
        assert!(refused.evidence.contains("p/cas-512") && refused.evidence.contains("300 ms"), "{}", refused.evidence);
        let other = came_back(&[("p/etag".into(), false)], wait);
        assert_eq!((other.status, other.verdict), (Status::Fail, None), "a warning");
        let none = came_back(&[], wait);
        assert_eq!(none.status, Status::Pass);
    }
}
