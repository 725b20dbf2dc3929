//! The `hoplock` binary, run as a user would run it: one module per subcommand.

mod check_s3;
mod credentials;
mod hrw;
mod lease;
mod members;
mod readme;
mod run;
#[cfg(any(feature = "gcs", feature = "azure"))]
mod stores;

/// The real S3-compatible server `cargo xtask test` starts.
pub struct Server {
    pub endpoint: String,
    pub bucket: String,
}

/// The server, or `None` (with a note) when the S3 tests should skip. With
/// `HOPLOCK_REQUIRE_S3=1` a missing server fails the test instead.
pub fn server() -> Option<Server> {
    started("HOPLOCK_S3_ENDPOINT", "HOPLOCK_S3_BUCKET", "S3 server")
}

/// The moto server (STS, and an S3 that takes STS keys), as [`server`].
pub fn moto() -> Option<Server> {
    started("HOPLOCK_MOTO_ENDPOINT", "HOPLOCK_MOTO_BUCKET", "moto server")
}

/// A server `cargo xtask test` started, from its two variables.
fn started(endpoint: &str, bucket: &str, what: &str) -> Option<Server> {
    match (std::env::var(endpoint), std::env::var(bucket)) {
        (Ok(endpoint), Ok(bucket)) => Some(Server { endpoint, bucket }),
        _ => {
            assert!(
                std::env::var("HOPLOCK_REQUIRE_S3").as_deref() != Ok("1"),
                "HOPLOCK_REQUIRE_S3=1 but {endpoint} / {bucket} are not set"
            );
            eprintln!("skipped: no {what} (run `cargo xtask test`)");
            None
        }
    }
}

/// One fresh object on the test server, and the `hoplock` subcommands run
/// against it, as an operator would type them.
pub struct ObjectTarget {
    pub endpoint: String,
    pub bucket: String,
    pub key: String,
}

impl ObjectTarget {
    /// A fresh key under `it/` named after `what`, or `None` when the S3
    /// tests should skip.
    pub fn new(what: &str) -> Option<ObjectTarget> {
        use hoplock::entropy::{Entropy, OsEntropy};
        let server = server()?;
        let key = format!("it/{what}-{:016x}.json", OsEntropy.next_u64());
        Some(ObjectTarget { endpoint: server.endpoint, bucket: server.bucket, key })
    }

    /// Runs `hoplock <subcommand> <args>` against the object.
    pub fn hoplock(&self, subcommand: &str, args: &[&str]) -> std::process::Output {
        std::process::Command::new(env!("CARGO_BIN_EXE_hoplock"))
            .arg(subcommand)
            .args(args)
            .args(["--endpoint", &self.endpoint, "--bucket", &self.bucket, "--key", &self.key, "--path-style"])
            // A freshly started server can be slow over its first writes.
            .args(["--request-timeout", "30s"])
            .output()
            .unwrap()
    }

    /// The library's backend for the object, with the same patience.
    pub fn backend(&self) -> hoplock::s3::S3Backend {
        let mut config = hoplock::s3::S3Config::new(&self.bucket, &self.key);
        config.endpoint = Some(self.endpoint.clone());
        config.addressing = hoplock::s3::config::Addressing::PathStyle;
        config.request_timeout = std::time::Duration::from_secs(30);
        config.operation_deadline = std::time::Duration::from_secs(60);
        hoplock::s3::S3Backend::new(config).unwrap()
    }
}

/// A runtime for the library calls a test makes itself.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// A command's standard output as text.
pub fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}
