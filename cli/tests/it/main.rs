//! The `hoplock` binary, run as a user would run it: one module per subcommand.

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
    match (std::env::var("HOPLOCK_S3_ENDPOINT"), std::env::var("HOPLOCK_S3_BUCKET")) {
        (Ok(endpoint), Ok(bucket)) => Some(Server { endpoint, bucket }),
        _ => {
            assert!(
                std::env::var("HOPLOCK_REQUIRE_S3").as_deref() != Ok("1"),
                "HOPLOCK_REQUIRE_S3=1 but no server set"
            );
            eprintln!("skipped: no S3 server (run `cargo xtask test`)");
            None
        }
    }
}
