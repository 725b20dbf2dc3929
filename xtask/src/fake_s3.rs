//! `cargo xtask fake-s3`: the simulator's fake S3 on a loopback port, for
//! tests and validators outside the workspace to point at.
//!
//! It prints the endpoint and credentials as `KEY=VALUE` lines on standard
//! output, in the names `cargo xtask s3-server` uses, and serves until
//! standard input closes (Ctrl-D) or the process is interrupted (Ctrl-C):
//!
//! ```text
//! $ cargo xtask fake-s3 --port 0 --mode non-atomic
//! HOPLOCK_S3_ENDPOINT=http://127.0.0.1:41234
//! HOPLOCK_S3_BUCKET=hoplock-test
//! AWS_ACCESS_KEY_ID=HOPLOCKFAKE
//! AWS_SECRET_ACCESS_KEY=hoplock-fake-secret
//! AWS_REGION=us-east-1
//! ```
//!
//! The server is path-style, plain HTTP, on 127.0.0.1 only. `--faults`
//! takes the fault configuration as JSON, in the shape of the simulator's
//! `Faults` (every field optional), e.g.
//! `{"write": {"latency": {"kind": "fixed", "ms": 50}}}`.

use std::io::{self, Read, Write};
use std::sync::Arc;

use hoplock::clock::SystemClock;
use hoplock_sim::fake_s3::{FakeS3, Faults, ProviderMode, server};

const USAGE: &str = "usage: cargo xtask fake-s3 [--port N] [--mode MODE] [--access-key AK] \
[--secret-key SK] [--bucket B] [--seed N] [--faults JSON]";

/// The region printed for clients to sign with; the fake accepts any.
const REGION: &str = "us-east-1";

#[derive(Debug)]
struct Options {
    port: u16,
    mode: ProviderMode,
    access_key: String,
    secret_key: String,
    bucket: String,
    seed: u64,
    faults: Faults,
}

impl Options {
    fn parse(args: &[String]) -> Result<Options, String> {
        let mut options = Options {
            port: 0,
            mode: ProviderMode::Honest,
            access_key: "HOPLOCKFAKE".into(),
            secret_key: "hoplock-fake-secret".into(),
            bucket: "hoplock-test".into(),
            seed: 1,
            faults: Faults::default(),
        };
        let mut args = args.iter();
        while let Some(flag) = args.next() {
            if matches!(flag.as_str(), "-h" | "--help") {
                let modes: Vec<String> = ProviderMode::ALL
                    .iter()
                    .map(|mode| format!("  {:<27} {}", mode.name(), mode.description()))
                    .collect();
                return Err(format!("{USAGE}\n\nmodes:\n{}", modes.join("\n")));
            }
            let value = args.next().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
            match flag.as_str() {
                "--port" => {
                    options.port = value.parse().map_err(|_| format!("--port takes a port number, got {value:?}"))?;
                }
                "--mode" => options.mode = value.parse().map_err(|err| format!("--mode: {err}"))?,
                "--access-key" => options.access_key = value.clone(),
                "--secret-key" => options.secret_key = value.clone(),
                "--bucket" => options.bucket = value.clone(),
                "--seed" => {
                    options.seed = value.parse().map_err(|_| format!("--seed takes a number, got {value:?}"))?;
                }
                "--faults" => {
                    options.faults = serde_json::from_str(value)
                        .map_err(|err| format!("--faults is not a valid fault configuration: {err}"))?;
                }
                other => return Err(format!("unknown option {other:?}\n{USAGE}")),
            }
        }
        Ok(options)
    }
}

pub fn run(args: &[String]) -> Result<(), String> {
    let options = Options::parse(args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|err| format!("cannot start the runtime: {err}"))?;
    let (s3, listener) = runtime.block_on(async {
        let s3 = FakeS3::builder(Arc::new(SystemClock::new()), options.seed)
            .mode(options.mode)
            .faults(options.faults.clone())
            .credentials(options.access_key.clone(), options.secret_key.clone())
            .bucket(options.bucket.clone())
            .build()
            .map_err(|err| err.to_string())?;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", options.port))
            .await
            .map_err(|err| format!("cannot listen on 127.0.0.1:{}: {err}", options.port))?;
        Ok::<_, String>((s3, listener))
    })?;
    let address = listener.local_addr().map_err(|err| format!("cannot read the listening address: {err}"))?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = runtime.spawn(server::serve(s3, listener, async move {
        let _ = stopped.await;
    }));

    eprintln!(
        "fake S3 ({} mode, seed {}) on {address}; close standard input (Ctrl-D) or press Ctrl-C to stop",
        options.mode, options.seed
    );
    let settings = [
        ("HOPLOCK_S3_ENDPOINT", format!("http://{address}")),
        ("HOPLOCK_S3_BUCKET", options.bucket.clone()),
        ("AWS_ACCESS_KEY_ID", options.access_key.clone()),
        ("AWS_SECRET_ACCESS_KEY", options.secret_key.clone()),
        ("AWS_REGION", REGION.to_owned()),
    ];
    let mut stdout = io::stdout().lock();
    for (key, value) in settings {
        writeln!(stdout, "{key}={value}").map_err(|err| err.to_string())?;
    }
    stdout.flush().map_err(|err| err.to_string())?;
    drop(stdout);

    // The server runs on the runtime's threads; this one waits for EOF.
    let mut sink = Vec::new();
    let _ = io::stdin().read_to_end(&mut sink);
    eprintln!("stopping the fake S3...");
    let _ = stop.send(());
    runtime.block_on(serving).map_err(|err| format!("the server task failed: {err}"))
}
