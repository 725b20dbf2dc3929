//! `hoplock check-s3` against the built-in fake S3 in every provider mode,
//! against the real S3 server `cargo xtask test` starts, and `hoplock run`
//! refusing a store that ignores conditions.

use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use hoplock::clock::SystemClock;
use hoplock_testkit::fake_s3::{FakeS3, ProviderMode, server};
use serde_json::Value;

use crate::server;

fn check_s3(args: &[&str]) -> (Output, Value) {
    check_s3_with(args, &[])
}

/// Runs `hoplock check-s3 --json` with `env` set on top of the test's own.
fn check_s3_with(args: &[&str], env: &[(&str, &str)]) -> (Output, Value) {
    let output = Command::new(env!("CARGO_BIN_EXE_hoplock"))
        .arg("check-s3")
        .args(["--json"])
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "no JSON report ({err}): {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output, report)
}

fn check_status(report: &Value, name: &str) -> String {
    let check = report["checks"].as_array().unwrap().iter().find(|check| check["name"] == name);
    check.map_or_else(|| "absent".into(), |check| check["status"].as_str().unwrap().to_owned())
}

/// Runs check-s3 on the fake in `mode` with `args` and checks the verdict,
/// the exit code, the check that must fail (or warn), that every check
/// judged states its evidence, and that everything written was deleted.
fn expect_verdict(mode: &str, args: &[&str], verdict: &str, code: i32, failing: Option<&str>) -> Value {
    let (output, report) = check_s3(&[&["--fake-mode", mode], args].concat());
    assert_eq!(report["verdict"], verdict, "{mode} {args:?}: {report:#}");
    assert_eq!(output.status.code(), Some(code), "{mode}");
    assert_eq!(report["exit_code"], code, "{mode}");
    assert_eq!(report["schema_version"], 1);
    if let Some(name) = failing {
        assert_eq!(check_status(&report, name), "fail", "{mode}: {name}: {report:#}");
    }
    for check in report["checks"].as_array().unwrap() {
        let evidence = check["evidence"].as_str().unwrap();
        let vacuous = [" 0 conditional writes", "(0 succeeded)", " 0 reads", " 0 rounds won"];
        if check["status"] == "pass" {
            assert!(!vacuous.iter().any(|none| evidence.contains(none)), "a pass on no evidence: {check:#}");
        }
    }
    // Everything written was deleted again, and stayed deleted.
    assert!(report["clean_up"]["deleted"].as_u64().unwrap() > 0, "{mode}");
    assert_eq!(report["clean_up"]["left"], Value::Array(vec![]), "{mode}");
    assert_eq!(report["clean_up"]["came_back"], Value::Array(vec![]), "{mode}");
    report
}

/// Fewer rounds than the default keep the suite quick for the modes whose
/// verdicts do not depend on the settings.
const QUICK: &[&str] = &["--rounds", "8"];

/// The small settings the lies that depend on size or count must be
/// caught at too.
const SMALL: &[&str] = &["--rounds", "6", "--body-bytes", "4096"];

#[test]
fn an_honest_store_is_safe_with_every_check_judged() {
    let report = expect_verdict("honest", QUICK, "SAFE", 0, None);
    let statuses: Vec<&str> =
        report["checks"].as_array().unwrap().iter().map(|check| check["status"].as_str().unwrap()).collect();
    assert!(statuses.iter().all(|status| *status == "pass"), "{statuses:?}");
    assert_eq!(statuses.len(), 17);
    assert_eq!(report["not_judged"], Value::Array(vec![]));
}

#[test]
fn stores_that_ignore_or_refuse_conditions_get_their_verdicts() {
    let cases = [
        ("ignore-if-none-match", "UNSAFE_IGNORES_CONDITIONS", 5, Some("create")),
        ("ignore-if-match", "UNSAFE_IGNORES_CONDITIONS", 5, Some("compare-and-swap")),
        ("if-match-creates", "UNSAFE_IGNORES_CONDITIONS", 5, Some("if-match on a missing key")),
        ("non-atomic", "UNSAFE_NOT_ATOMIC", 6, Some("racing compare-and-swaps")),
        ("weak-etags", "UNSAFE_WEAK_ETAGS", 7, Some("etag quality")),
        ("reject-conditional", "UNSUPPORTED", 4, None),
    ];
    for (mode, verdict, code, failing) in cases {
        expect_verdict(mode, QUICK, verdict, code, failing);
    }
}

#[test]
fn stale_reads_and_a_lax_conditional_delete_are_safe() {
    expect_verdict("stale-reads", QUICK, "SAFE", 3, Some("read lag"));
    let report = expect_verdict("ignore-conditional-delete", QUICK, "SAFE", 3, Some("conditional delete"));
    let warnings = report["warnings"].to_string();
    assert!(warnings.contains("removed the object") && warnings.contains("never deletes"), "{warnings}");
}

#[test]
fn a_refused_write_applied_later_ignores_conditions() {
    for args in [&[][..], SMALL] {
        expect_verdict(
            "applies-refused-late",
            args,
            "UNSAFE_IGNORES_CONDITIONS",
            5,
            Some("refused writes stay refused"),
        );
    }
}

#[test]
fn conditions_dropped_for_large_bodies_are_caught_at_any_body_size() {
    for args in [&[][..], SMALL] {
        expect_verdict("large-bodies-unconditional", args, "UNSAFE_IGNORES_CONDITIONS", 5, Some("create"));
    }
}

#[test]
fn conditions_that_expire_after_a_keys_first_writes_are_caught_at_few_rounds() {
    for args in [&[][..], SMALL] {
        expect_verdict(
            "conditions-expire-per-key",
            args,
            "UNSAFE_IGNORES_CONDITIONS",
            5,
            Some("many writes to one key"),
        );
    }
}

#[test]
fn lagging_reads_are_safe_with_a_warning_that_names_the_lag() {
    for args in [&[][..], SMALL] {
        let report = expect_verdict("lagging-reads", args, "SAFE", 3, Some("read lag"));
        let lag = report["read_lag_ms"].as_u64().unwrap();
        assert!((5000..6000).contains(&lag), "the fake's 5 s lag is measured: {lag} ms");
        let warnings = report["warnings"].to_string();
        assert!(warnings.contains("reads lag writes by up to") && warnings.contains("takeovers"), "{warnings}");
        assert_eq!(check_status(&report, "linearizability"), "pass", "the audit is judged: {report:#}");
    }
}

#[test]
fn the_etag_form_a_store_honours_is_found_and_used() {
    for args in [&[][..], SMALL] {
        let report = expect_verdict("bare-etags-only", args, "SAFE", 0, None);
        let forms = report["checks"].as_array().unwrap().iter().find(|check| check["name"] == "etag forms").unwrap();
        assert!(forms["evidence"].as_str().unwrap().contains("only the bare form"), "{forms:#}");
        expect_verdict("ignores-bare-etags", args, "UNSAFE_IGNORES_CONDITIONS", 5, Some("etag forms"));
    }
    // --bare-etags makes every check send the bare form, so a store that
    // ignores it fails the checks that depend on it too.
    let report =
        expect_verdict("ignores-bare-etags", &["--bare-etags", "--rounds", "6"], "UNSAFE_IGNORES_CONDITIONS", 5, None);
    assert_eq!(check_status(&report, "compare-and-swap"), "fail", "{report:#}");
}

#[test]
fn the_markdown_report_keeps_the_table_settings_and_verdict() {
    let dir = std::env::temp_dir().join(format!("hoplock-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("report.md");
    let (output, report) =
        check_s3(&["--fake-mode", "honest", "--rounds", "4", "--settle", "1s", "--report", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{report:#}");
    let markdown = std::fs::read_to_string(&path).unwrap();
    assert!(markdown.starts_with("# hoplock check-s3: SAFE"), "{markdown}");
    for needle in
        ["| check | result | evidence |", "| linearizability | pass |", "settle 1 s", "- date: ", "- hoplock: "]
    {
        assert!(markdown.contains(needle), "{needle} missing from\n{markdown}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_options_are_usage_errors() {
    let output = Command::new(env!("CARGO_BIN_EXE_hoplock"))
        .args(["check-s3", "--endpoint", "http://127.0.0.1:9", "--fake-mode", "honest"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--fake-mode"));
    let output = Command::new(env!("CARGO_BIN_EXE_hoplock"))
        .args(["check-s3", "--endpoint", "http://127.0.0.1:9"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--bucket"));
    let output =
        Command::new(env!("CARGO_BIN_EXE_hoplock")).args(["check-s3", "--fake-mode", "garage"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("weak-etags"), "the valid modes are listed");
}

#[test]
fn an_unreachable_endpoint_is_an_error_with_the_cause() {
    // Port 9 (discard) on loopback: nothing listens there.
    // Keys of its own, so the credential chain never looks further (the
    // instance metadata service is not on loopback).
    let keys = [("AWS_ACCESS_KEY_ID", "AK"), ("AWS_SECRET_ACCESS_KEY", "SK"), ("AWS_EC2_METADATA_DISABLED", "true")];
    let (output, report) =
        check_s3_with(&["--endpoint", "http://127.0.0.1:9", "--bucket", "b", "--request-timeout", "2s"], &keys);
    assert_eq!(report["verdict"], "ERROR");
    assert_eq!(output.status.code(), Some(1));
    assert!(report["error"].as_str().unwrap().contains("cannot reach http://127.0.0.1:9"), "{report:#}");
}

#[test]
fn the_real_s3_server_is_safe() {
    let Some(server) = server() else { return };
    let output = Command::new(env!("CARGO_BIN_EXE_hoplock"))
        .args(["check-s3", "--endpoint", &server.endpoint, "--bucket", &server.bucket, "--path-style"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&output.stdout);
    // The report is the evidence: print it whatever the verdict.
    println!("{table}");
    assert!(table.contains("verdict: SAFE"), "{table}\n{}", String::from_utf8_lossy(&output.stderr));
    // SeaweedFS verifies signatures, so no warning either.
    assert_eq!(output.status.code(), Some(0), "{table}");
    // The stored example report the docs show (docs/check-s3.md) is this
    // run's: the same checks with the same results, in the same order.
    let stored =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/results/check-s3-seaweedfs.txt"))
            .expect("the stored SeaweedFS report");
    assert_eq!(
        rows(&stored),
        rows(&table),
        "the stored SeaweedFS report is stale: record it again (`cargo xtask docs --help` says how), then run \
         `cargo xtask docs`"
    );

    // Racers spread over two endpoints of one server (two names for it,
    // so two Host headers and two signatures), as a cluster's nodes would.
    let other = server.endpoint.replace("127.0.0.1", "localhost");
    let (output, report) = check_s3(&[
        "--endpoint",
        &server.endpoint,
        "--endpoint",
        &other,
        "--bucket",
        &server.bucket,
        "--path-style",
        "--rounds",
        "5",
    ]);
    assert_eq!(report["verdict"], "SAFE", "{report:#}");
    assert_eq!(report["target"]["endpoints"].as_array().unwrap().len(), 2);
    assert_eq!(output.status.code(), Some(0));

    // A wrong secret is an ERROR that says so, not a verdict on conditions.
    let output = Command::new(env!("CARGO_BIN_EXE_hoplock"))
        .args(["check-s3", "--json", "--endpoint", &server.endpoint, "--bucket", &server.bucket, "--path-style"])
        .env("AWS_SECRET_ACCESS_KEY", "not-the-secret")
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["verdict"], "ERROR", "{report:#}");
    assert!(report["error"].as_str().unwrap().contains("secret access key is wrong"), "{report:#}");
}

/// The check and result columns of a report table, in order.
fn rows(table: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = table.lines().collect();
    let Some(start) = lines.iter().position(|line| line.starts_with("---")) else { return Vec::new() };
    lines[start + 1..]
        .iter()
        .take_while(|line| !line.is_empty())
        .map(|line| {
            let mut columns = line.split("  ").map(str::trim).filter(|column| !column.is_empty());
            (columns.next().unwrap_or_default().to_owned(), columns.next().unwrap_or_default().to_owned())
        })
        .collect()
}

/// The fake S3 in `mode` on a loopback port, served from a thread of its
/// own until the test ends.
fn serve_fake(mode: ProviderMode) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let s3 = FakeS3::builder(Arc::new(SystemClock::new()), 3)
                .mode(mode)
                .credentials("AK", "SK")
                .bucket("leases")
                .build()
                .unwrap();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(format!("http://{}", listener.local_addr().unwrap())).unwrap();
            server::serve(s3, listener, std::future::pending()).await;
        });
    });
    rx.recv().unwrap()
}

fn hoplock_run(endpoint: &str, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hoplock"))
        .args(["run", "--endpoint", endpoint, "--bucket", "leases", "--key", "job.json", "--path-style", "--once"])
        .args(["--ttl", "3s"])
        .args(extra)
        .args(["--", "sh", "-c", "echo started"])
        .env("AWS_ACCESS_KEY_ID", "AK")
        .env("AWS_SECRET_ACCESS_KEY", "SK")
        .env_remove("AWS_PROFILE")
        .output()
        .unwrap()
}

#[test]
fn hoplock_run_refuses_a_store_that_ignores_conditions() {
    let endpoint = serve_fake(ProviderMode::IgnoreIfNoneMatch);
    let output = hoplock_run(&endpoint, &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("refusing to campaign: UNSAFE: ignores conditions"), "{stderr}");
    assert!(stderr.contains("check-s3") && stderr.contains("--skip-verify"), "the way out is named: {stderr}");
    assert!(!String::from_utf8_lossy(&output.stdout).contains("started"), "the command never ran");

    // Those who know better can say so.
    let output = hoplock_run(&endpoint, &["--skip-verify"]);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stdout).contains("started"));

    // A store that ignores the bare form is refused with --bare-etags, and
    // without it too: verify tries a replaced ETag in both forms.
    for extra in [&["--bare-etags"][..], &[]] {
        let output = hoplock_run(&serve_fake(ProviderMode::IgnoresBareEtags), extra);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("refusing to campaign: UNSAFE: ignores conditions"), "{stderr}");
        assert!(!String::from_utf8_lossy(&output.stdout).contains("started"), "the command never ran");
    }

    // A store that honours only bare ETags is adapted to, not refused.
    let output = hoplock_run(&serve_fake(ProviderMode::BareEtagsOnly), &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("sending ETags bare from now on"), "the adaptation is logged: {stderr}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("started"), "it held the lease: {stderr}");

    // Weak ETags are refused too, and an honest store is not.
    let output = hoplock_run(&serve_fake(ProviderMode::WeakEtags), &[]);
    assert!(String::from_utf8_lossy(&output.stderr).contains("UNSAFE: weak ETags"));
    let output = hoplock_run(&serve_fake(ProviderMode::Honest), &[]);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stdout).contains("started"));
}

#[test]
fn ctrl_c_deletes_what_was_written() {
    let Some(server) = server() else { return };
    let prefix = format!("it/check-ctrl-c-{:016x}/", hoplock::entropy::Entropy::next_u64(&hoplock::entropy::OsEntropy));
    let child = Command::new(env!("CARGO_BIN_EXE_hoplock"))
        .args(["check-s3", "--json", "--endpoint", &server.endpoint, "--bucket", &server.bucket, "--path-style"])
        .args(["--prefix", &prefix])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The sequential checks take well under a second; the races are under
    // way after three.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let status = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130), "{}", String::from_utf8_lossy(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["exit_code"], 130);
    assert!(report["clean_up"]["deleted"].as_u64().unwrap() >= 5, "{report:#}");
    assert_eq!(report["clean_up"]["left"], Value::Array(vec![]), "{report:#}");
    // The keys are gone from the store itself, not only from the report.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for name in ["forms", "create-512", "cas-512"] {
        let mut config = hoplock::s3::S3Config::new(&server.bucket, format!("{prefix}{name}"));
        config.endpoint = Some(server.endpoint.clone());
        config.addressing = hoplock::s3::config::Addressing::PathStyle;
        let backend = hoplock::s3::S3Backend::new(config).unwrap();
        let inspected = runtime.block_on(backend.inspect()).unwrap();
        assert!(inspected.is_none(), "{prefix}{name} is still there");
    }
}
