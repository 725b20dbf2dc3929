//! `hoplock members show` and `hoplock members reset` against a real
//! S3-compatible server (started by `cargo xtask test`; skipped otherwise).

use crate::{ObjectTarget, runtime, stdout};

use hoplock::backend::ObjectBackend;
use hoplock::keyed::{MembershipRecord, RESET_ENTRY_ID};

fn target() -> Option<ObjectTarget> {
    ObjectTarget::new("members-cmd")
}

fn read_members(target: &ObjectTarget) -> MembershipRecord {
    let object = runtime().block_on(target.backend().read_object()).unwrap();
    MembershipRecord::decode(&object.bytes).unwrap()
}

#[test]
fn reset_recreates_a_missing_or_corrupt_object_above_the_floor_and_show_prints_it() {
    let Some(target) = target() else { return };
    let output = target.hoplock("members", &["show"]);
    assert!(output.status.success(), "{output:?}");
    assert!(stdout(&output).contains("no membership object"), "{output:?}");

    let output = target.hoplock("members", &["reset", "--view-floor", "700", "--wait", "45s"]);
    assert!(output.status.success(), "{output:?}");
    let stored = read_members(&target);
    assert_eq!(stored.view, 700);
    assert!(!stored.is_active(), "no key may start before the placeholder is evicted");
    assert_eq!((stored.entries[0].id.as_str(), stored.entries[0].ttl_ms), (RESET_ENTRY_ID, 45_000));

    let text = stdout(&target.hoplock("members", &["show"]));
    assert!(text.contains("view        700") && text.contains("active      false"), "{text}");
    assert!(text.contains("placeholder"), "{text}");

    // Corrupt bytes over it: show says so, and a reset replaces them at the floor.
    let backend = target.backend();
    let version = runtime().block_on(backend.read_object()).unwrap().version;
    runtime().block_on(backend.write_object(Some(&version), b"{\"not\": \"members\"}".to_vec())).unwrap();
    let text = stdout(&target.hoplock("members", &["show"]));
    assert!(text.contains("unreadable") && text.contains("members reset"), "{text}");
    let output =
        target.hoplock("members", &["reset", "--view-floor", "900", "--wait", "10s", "--weight-fn", "go-sha256"]);
    assert!(output.status.success(), "{output:?}");
    assert!(stdout(&output).contains("unreadable"), "{output:?}");
    let stored = read_members(&target);
    assert_eq!(stored.view, 900);
    assert_eq!(stored.hash.function, hoplock::hrw::WeightFn::GoSha256);
}

#[test]
fn reset_refuses_a_live_group_without_force_and_never_lowers_the_view() {
    let Some(target) = target() else { return };
    let mut record = MembershipRecord::decode(
        br#"{"format":"hoplock-members/1","view":40,"hash":{"function":"fast","weighted":false},
            "change":{"kind":"join","id":"worker-1","incarnation":"i1"},"last_join":40,
            "entries":[{"id":"worker-1","incarnation":"i1","ttl_ms":30000,"nonce":"n1","adopted":40}]}"#,
    )
    .unwrap();
    record.entries[0].addr = "10.0.0.1:7000".into();
    runtime().block_on(target.backend().write_object(None, record.encode())).unwrap();

    let output = target.hoplock("members", &["reset", "--view-floor", "5", "--wait", "40s"]);
    assert!(!output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--force") && stderr.contains("view 40"), "{stderr}");
    assert_eq!(read_members(&target), record, "a refused reset writes nothing");

    let output = target.hoplock("members", &["reset", "--view-floor", "5", "--wait", "40s", "--force"]);
    assert!(output.status.success(), "{output:?}");
    assert!(stdout(&output).contains("above the floor"), "{output:?}");
    assert_eq!(read_members(&target).view, 41, "one above the stored view, not the lower floor");
}

#[test]
fn reset_refuses_bad_settings_before_touching_the_store() {
    // Nothing listens on port 1: each refusal must come before any request.
    for (args, says) in [
        (["--view-floor", "0", "--wait", "40s"], "at least 1"),
        (["--view-floor", "9", "--wait", "5ms"], "outside"),
        (["--view-floor", "9", "--wait", "2000h"], "outside"),
    ] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_hoplock"))
            .args(["members", "reset"])
            .args(args)
            .args(["--endpoint", "http://127.0.0.1:1", "--bucket", "b", "--key", "k", "--path-style"])
            .output()
            .unwrap();
        assert!(!output.status.success(), "{output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says) && !stderr.contains("127.0.0.1"), "{args:?}: {stderr}");
    }
}
