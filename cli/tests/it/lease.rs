//! `hoplock lease show` and `hoplock lease reset` against a real
//! S3-compatible server (started by `cargo xtask test`; skipped otherwise).

use std::process::Command;

use crate::{ObjectTarget, runtime, stdout};

use hoplock::Generation;
use hoplock::backend::{Backend, BackendError};
use hoplock::testing::conformance::sample_record;

fn target() -> Option<ObjectTarget> {
    ObjectTarget::new("lease-cmd")
}

#[test]
fn show_prints_the_record_or_says_there_is_none() {
    let Some(target) = target() else { return };
    let output = target.hoplock("lease", &["show"]);
    assert!(output.status.success(), "{output:?}");
    assert!(stdout(&output).contains("no lease record"), "{output:?}");

    runtime().block_on(target.backend().write(None, &sample_record(9, "shown"))).unwrap();
    let output = target.hoplock("lease", &["show"]);
    let text = stdout(&output);
    assert!(text.contains("generation  9") && text.contains("conformance-shown"), "{text}");
    assert!(text.contains("by the server's clock"), "{text}");
}

#[test]
fn reset_refuses_a_held_lease_and_raises_the_generation() {
    let Some(target) = target() else { return };
    let runtime = runtime();
    let backend = target.backend();
    runtime.block_on(backend.write(None, &sample_record(4, "held"))).unwrap();

    // A live holder (TTL 30 s, written just now) is not deposed by accident.
    let output = target.hoplock("lease", &["reset", "--generation-floor", "10"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--force"), "{output:?}");
    let stored = runtime.block_on(backend.read()).unwrap();
    assert_eq!(stored.record.generation, Generation(4), "nothing was overwritten");

    let output = target.hoplock("lease", &["reset", "--generation-floor", "10", "--force"]);
    assert!(output.status.success(), "{output:?}");
    let stored = runtime.block_on(backend.read()).unwrap();
    assert!(stored.record.released);
    assert_eq!(stored.record.generation, Generation(10));
    // The release is the operator's, not the holder's: electors still wait
    // the holder out, and the operator is told so.
    assert!(stdout(&output).contains("still wait out the longest TTL they saw"), "{output:?}");

    // A floor below the stored generation never lowers it. The record
    // replaced was released already: nothing is left to wait out.
    let output = target.hoplock("lease", &["reset", "--generation-floor", "2"]);
    assert!(output.status.success(), "{output:?}");
    assert!(!stdout(&output).contains("still wait out"), "{output:?}");
    assert_eq!(runtime.block_on(backend.read()).unwrap().record.generation, Generation(10));
}

#[test]
fn reset_repairs_a_corrupt_record() {
    let Some(target) = target() else { return };
    let runtime = runtime();
    let backend = target.backend();
    runtime.block_on(backend.put_raw(b"garbage".to_vec())).unwrap();
    assert!(matches!(runtime.block_on(backend.read()), Err(BackendError::Corrupt { .. })));
    let shown = target.hoplock("lease", &["show"]);
    assert!(stdout(&shown).contains("unreadable"), "{shown:?}");
    let output = target.hoplock("lease", &["reset", "--generation-floor", "7"]);
    assert!(output.status.success(), "{output:?}");
    let stored = runtime.block_on(backend.read()).unwrap();
    assert_eq!((stored.record.generation, stored.record.released), (Generation(7), true));
}

#[test]
fn reset_refuses_a_floor_that_leaves_no_room_before_touching_the_store() {
    // Nothing listens on port 1: the refusal must come before any request.
    let output = Command::new(env!("CARGO_BIN_EXE_hoplock"))
        .args(["lease", "reset", "--generation-floor", &u64::MAX.to_string()])
        .args(["--endpoint", "http://127.0.0.1:1", "--bucket", "b", "--key", "k", "--path-style"])
        .output()
        .unwrap();
    assert!(!output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("leaves no room") && stderr.contains("lower --generation-floor"), "{stderr}");
}

#[test]
fn reset_refuses_to_keep_an_exhausted_generation() {
    let Some(target) = target() else { return };
    let runtime = runtime();
    let backend = target.backend();
    let mut exhausted = sample_record(u64::MAX, "exhausted");
    exhausted.released = true;
    runtime.block_on(backend.write(None, &exhausted)).unwrap();
    let output = target.hoplock("lease", &["reset", "--generation-floor", "5"]);
    assert!(!output.status.success(), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("new key"), "{output:?}");
    let stored = runtime.block_on(backend.read()).unwrap();
    assert_eq!(stored.record.generation, Generation::MAX, "nothing was overwritten");
}
