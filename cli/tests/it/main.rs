//! The `hoplock` binary, run as a user would run it: one module per subcommand.

mod check_s3;
mod credentials;
mod hrw;
mod lease;
mod readme;
mod run;

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
