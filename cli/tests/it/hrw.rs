//! `hoplock hrw`, run as a user would run it.

use std::process::{Command, Output};

fn hoplock(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hoplock")).args(args).output().expect("the hoplock binary runs")
}

/// Runs a command that must succeed and returns its stdout lines.
fn lines(args: &[&str]) -> Vec<String> {
    let output = hoplock(args);
    assert!(output.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("utf-8 output").lines().map(str::to_owned).collect()
}

#[test]
fn owner_matches_the_go_package() {
    assert_eq!(lines(&["hrw", "owner", "--key", "acme", "--hash", "go-sha256", "r1", "r2", "r3"]), ["r2"]);
    assert_eq!(lines(&["hrw", "owner", "--key", "g", "--hash", "go-sha256", "r1", "r2", "r3", "r4"]), ["r4"]);
    assert_eq!(lines(&["hrw", "owner", "--hash=go-sha256", "--key=_global", "r1", "r2", "r3"]), ["r1"]);
}

#[test]
fn replicas_match_the_go_package() {
    assert_eq!(
        lines(&["hrw", "replicas", "--key", "acme", "-n", "3", "--hash", "go-sha256", "r1", "r2", "r3", "r4"]),
        ["r2", "r1", "r4"]
    );
    let ids: Vec<String> = (0..16).map(|i| format!("replica-{i:02}")).collect();
    let mut args = vec!["hrw", "replicas", "--key", "some-org-slug", "-n", "3", "--hash", "go-sha256"];
    args.extend(ids.iter().map(String::as_str));
    assert_eq!(lines(&args), ["replica-01", "replica-03", "replica-10"]);
}

#[test]
fn fast_is_the_default() {
    // The frozen golden vectors of the fast weight.
    assert_eq!(lines(&["hrw", "owner", "--key", "g", "r1", "r2", "r3", "r4"]), ["r3"]);
    assert_eq!(lines(&["hrw", "owner", "--key", "g", "--hash", "fast", "r1", "r2", "r3", "r4"]), ["r3"]);
    assert_eq!(lines(&["hrw", "replicas", "--key", "acme", "-n", "3", "r1", "r2", "r3"]), ["r2", "r3", "r1"]);
}

#[test]
fn empty_keys_and_dashed_ids() {
    assert_eq!(lines(&["hrw", "owner", "--key=", "a", "b", "c"]), ["c"]);
    assert_eq!(lines(&["hrw", "owner", "--key", "", "a", "b", "c"]), ["c"]);
    let dashed = lines(&["hrw", "replicas", "--key", "k", "-n", "5", "--", "-a", "--b", "c"]);
    let mut sorted = dashed.clone();
    sorted.sort();
    assert_eq!(sorted, ["--b", "-a", "c"]);
    // A key that begins with a dash.
    let owner = lines(&["hrw", "owner", "--key", "-k", "a", "b"]);
    assert!(owner == ["a"] || owner == ["b"]);
    // Unicode keys and ids.
    assert_eq!(
        lines(&["hrw", "replicas", "--key", "ключ/ü", "-n", "3", "r1", "r2", "r3", "r4", "r5"]),
        ["r4", "r5", "r1"]
    );
}

#[test]
fn duplicate_ids_count_once() {
    assert_eq!(
        lines(&["hrw", "replicas", "--key", "acme", "-n", "5", "--hash", "go-sha256", "r3", "r1", "r2", "r1"]),
        ["r2", "r1", "r3"]
    );
}

#[test]
fn an_empty_member_list_is_an_error() {
    for args in [
        &["hrw", "owner", "--key", "k"][..],
        &["hrw", "replicas", "--key", "k", "-n", "2"][..],
        &["hrw", "owner", "--key", "k", "--"][..],
    ] {
        let output = hoplock(args);
        assert!(!output.status.success(), "{args:?} succeeded");
        assert!(output.stdout.is_empty());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("no member ids"), "{args:?}: {stderr}");
    }
}

#[test]
fn bad_arguments_are_rejected() {
    for args in [
        &["hrw", "owner", "r1"][..],
        &["hrw", "owner", "--key", "k", "--hash", "sha1", "r1"][..],
        &["hrw", "replicas", "--key", "k", "-n", "0", "r1"][..],
        &["hrw", "replicas", "--key", "k", "r1"][..],
        &["hrw"][..],
    ] {
        let output = hoplock(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(output.stdout.is_empty());
    }
}

#[test]
fn help_names_the_subcommands() {
    let help = lines(&["hrw", "--help"]).join("\n");
    assert!(help.contains("owner") && help.contains("replicas"), "{help}");
    let help = lines(&["hrw", "owner", "--help"]).join("\n");
    assert!(help.contains("go-sha256"), "{help}");
}
