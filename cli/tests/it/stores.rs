//! `hoplock run`, `hoplock check` and `hoplock lease` on Google Cloud Storage
//! and Azure Blob Storage, through their emulators (started by `cargo xtask
//! test`; skipped with a note otherwise): three runners elect one leader,
//! and when its runner is killed another takes over at a higher generation.

#![allow(clippy::disallowed_methods)] // Tests measure real time.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use hoplock::entropy::{Entropy, OsEntropy};

/// A store URL prefix and the environment that reaches its emulator.
struct Emulator {
    /// `gs://bucket` or `az://container`.
    base: String,
    env: Vec<(&'static str, String)>,
}

fn required(what: &str) -> Option<Emulator> {
    assert!(std::env::var("HOPLOCK_REQUIRE_S3").as_deref() != Ok("1"), "HOPLOCK_REQUIRE_S3=1 but no {what} emulator");
    eprintln!("skipped: no {what} emulator (run `cargo xtask test`)");
    None
}

#[cfg(feature = "gcs")]
fn gcs() -> Option<Emulator> {
    let (Ok(endpoint), Ok(bucket)) = (std::env::var("HOPLOCK_GCS_ENDPOINT"), std::env::var("HOPLOCK_GCS_BUCKET"))
    else {
        return required("GCS");
    };
    Some(Emulator { base: format!("gs://{bucket}"), env: vec![("STORAGE_EMULATOR_HOST", endpoint)] })
}

#[cfg(feature = "azure")]
fn azure() -> Option<Emulator> {
    let Ok(container) = std::env::var("HOPLOCK_AZURE_CONTAINER") else {
        return required("Azure");
    };
    // AZURE_STORAGE_USE_EMULATOR and AZURITE_BLOB_STORAGE_URL come from the
    // test command's environment.
    Some(Emulator { base: format!("az://{container}"), env: Vec::new() })
}

fn hoplock(emulator: &Emulator, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hoplock"));
    command.args(args).envs(emulator.env.iter().map(|(k, v)| (*k, v.as_str())));
    command
}

fn output(command: &mut Command) -> Output {
    command.output().unwrap()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
        .unwrap_or(false)
}

/// Three runners on one lease object: one command runs; killing its runner
/// (SIGKILL, no release) hands the lease to another at a higher generation.
fn one_leader_and_a_takeover_after_a_kill(emulator: &Emulator) {
    let id = OsEntropy.next_u64();
    let url = format!("{}/it/run-{id:016x}.json", emulator.base);
    let dir: PathBuf = std::env::temp_dir().join(format!("hoplock-stores-{id:016x}"));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("starts.log");
    let script = format!("echo \"$HOPLOCK_OWNER $HOPLOCK_GENERATION $$\" >> {}; sleep 1000", log.display());
    let mut runners: Vec<Child> = ["a", "b", "c"]
        .iter()
        .map(|owner| {
            hoplock(emulator, &["run", "--store", &url, "--ttl", "3s", "--poll", "200ms", "--grace", "300ms"])
                .args(["--owner", owner, "--", "sh", "-c", &script])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let starts = || -> Vec<(String, u64, u32)> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| {
                let mut parts = line.split_whitespace();
                Some((parts.next()?.to_owned(), parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
            })
            .collect()
    };
    let wait_for = |count: usize| {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let seen = starts();
            if seen.len() >= count {
                return seen;
            }
            assert!(Instant::now() < deadline, "only {} of {count} starts: {seen:?}", seen.len());
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let first = wait_for(1);
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(starts().len(), 1, "more than one command ran: {:?}", starts());
    }
    let (owner, generation, pid) = first[0].clone();
    let leader = ["a", "b", "c"].iter().position(|o| *o == owner).unwrap();
    runners[leader].kill().unwrap();
    let killed_at = Instant::now();
    runners[leader].wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    while alive(pid) {
        assert!(Instant::now() < deadline, "the killed leader's command outlived it");
        std::thread::sleep(Duration::from_millis(10));
    }
    let second = wait_for(2);
    let took = killed_at.elapsed();
    let (next_owner, next_generation, _) = second[1].clone();
    assert_ne!(next_owner, owner);
    assert!(next_generation > generation, "{second:?}");
    assert!(took < Duration::from_secs(6), "the takeover took {took:?}");
    eprintln!(
        "{url}: {owner} led at generation {generation}; after SIGKILL {next_owner} at {next_generation} in {took:?}"
    );
    for mut runner in runners {
        let _ = runner.kill();
        let _ = runner.wait();
    }
    let shown = output(&mut hoplock(emulator, &["lease", "show", "--store", &url]));
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains(&format!("generation  {next_generation}")), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `hoplock check` judges the emulator SAFE, every check passing.
fn check_is_safe(emulator: &Emulator) {
    let url = format!("{}/it/check-{:016x}", emulator.base, OsEntropy.next_u64());
    let out = output(&mut hoplock(emulator, &["check", "--store", &url, "--rounds", "5"]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("verdict: SAFE"), "{text}");
    assert_eq!(text.matches("  pass  ").count(), 7, "{text}");
}

#[cfg(feature = "gcs")]
#[test]
fn gcs_one_leader_among_three_and_a_takeover_after_sigkill() {
    let Some(emulator) = gcs() else { return };
    one_leader_and_a_takeover_after_a_kill(&emulator);
}

#[cfg(feature = "azure")]
#[test]
fn azure_one_leader_among_three_and_a_takeover_after_sigkill() {
    let Some(emulator) = azure() else { return };
    one_leader_and_a_takeover_after_a_kill(&emulator);
}

#[cfg(feature = "gcs")]
#[test]
fn gcs_check_is_safe() {
    let Some(emulator) = gcs() else { return };
    check_is_safe(&emulator);
}

#[cfg(feature = "azure")]
#[test]
fn azure_check_is_safe() {
    let Some(emulator) = azure() else { return };
    check_is_safe(&emulator);
}
