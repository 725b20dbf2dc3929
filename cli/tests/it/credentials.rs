//! Every credential source of the chain, as a deployed `hoplock` meets it:
//! container and instance-metadata endpoints and `credential_process`
//! against local stubs that hand out the test server's keys (so SeaweedFS
//! checks every signature), and web identity and `AssumeRole` against the
//! STS of the moto server `cargo xtask test` starts, including a refresh
//! during a held term.

#![allow(clippy::disallowed_methods)] // Measures how fast a failure comes, in real time.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hoplock::entropy::{Entropy, OsEntropy};

/// Variables that name credentials: every test clears them all and sets
/// only the source it is about.
const CREDENTIAL_VARIABLES: [&str; 14] = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT",
    "AWS_EC2_METADATA_DISABLED",
    "AWS_ENDPOINT_URL_STS",
];

/// A scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let dir = std::env::temp_dir().join(format!("hoplock-cli-credentials-{:016x}", OsEntropy.next_u64()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn write(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

/// `hoplock ARGS` against `endpoint`/`bucket` with a fresh key, with no
/// credential variables but `env` and a home without `~/.aws`.
fn hoplock(args: &[&str], endpoint: &str, bucket: &str, home: &Scratch, env: &[(&str, &str)]) -> Output {
    let key = format!("it/credentials-{:016x}.json", OsEntropy.next_u64());
    // The store options go before a `--` that starts a command to run.
    let split = args.iter().position(|arg| *arg == "--").unwrap_or(args.len());
    let mut command = Command::new(env!("CARGO_BIN_EXE_hoplock"));
    command.args(&args[..split]).args(["--endpoint", endpoint, "--bucket", bucket, "--key", &key, "--path-style"]);
    if args.first() == Some(&"lease") {
        command.args(["--request-timeout", "30s"]);
    }
    command.args(&args[split..]);
    for variable in CREDENTIAL_VARIABLES {
        command.env_remove(variable);
    }
    command.env("HOME", &home.0).envs(env.iter().copied());
    command.output().unwrap()
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// The keys the S3 test server accepts, from the test's own environment.
fn server_keys() -> Option<(crate::Server, String, String)> {
    let server = crate::server()?;
    let id = std::env::var("AWS_ACCESS_KEY_ID").expect("the server's access key id");
    let secret = std::env::var("AWS_SECRET_ACCESS_KEY").expect("the server's secret");
    Some((server, id, secret))
}

/// A tiny HTTP server on a loopback port that answers every request with
/// `answer(method, path, headers)` and keeps the requests it saw.
struct Stub {
    url: String,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Stub {
    fn start(answer: impl Fn(&str, &str, &[String]) -> (u16, String) + Send + 'static) -> Stub {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                let mut parts = line.split_whitespace();
                let (method, path) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
                let mut headers = Vec::new();
                let mut length = 0;
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).is_err() || header.trim().is_empty() {
                        break;
                    }
                    let header = header.trim().to_lowercase();
                    if let Some(value) = header.strip_prefix("content-length:") {
                        length = value.trim().parse().unwrap_or(0);
                    }
                    headers.push(header);
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                log.lock().unwrap().push(format!("{method} {path} {}", headers.join(" | ")));
                let (status, body) = answer(&method, &path, &headers);
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Stub { url, seen }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

#[test]
fn container_credentials_come_from_the_endpoint_with_the_authorization_token() {
    let Some((server, id, secret)) = server_keys() else { return };
    let stub = Stub::start(move |_, path, headers| {
        if path != "/creds" || !headers.iter().any(|h| h == "authorization: token-from-file") {
            return (401, "no".into());
        }
        (200, format!(r#"{{"AccessKeyId":"{id}","SecretAccessKey":"{secret}","Expiration":"2999-01-01T00:00:00Z"}}"#))
    });
    let home = Scratch::new();
    let token_file = home.write("token", "token-from-file\n");
    let url = format!("{}/creds", stub.url);
    let env = [
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", url.as_str()),
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN", "ignored-when-a-file-is-set"),
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", token_file.as_str()),
    ];
    let output = hoplock(&["lease", "show"], &server.endpoint, &server.bucket, &home, &env);
    assert!(output.status.success(), "{}", text(&output));
    assert!(text(&output).contains("no lease record"), "{}", text(&output));
    assert_eq!(stub.seen().len(), 1, "{:?}", stub.seen());
}

#[test]
fn instance_metadata_uses_an_imdsv2_session_token() {
    let Some((server, id, secret)) = server_keys() else { return };
    let stub = Stub::start(move |method, path, headers| {
        let has_token = headers.iter().any(|h| h == "x-aws-ec2-metadata-token: session-1");
        match (method, path) {
            ("PUT", "/latest/api/token")
                if headers.iter().any(|h| h.starts_with("x-aws-ec2-metadata-token-ttl-seconds:")) =>
            {
                (200, "session-1".into())
            }
            ("GET", "/latest/meta-data/iam/security-credentials/") if has_token => (200, "app-role\n".into()),
            ("GET", "/latest/meta-data/iam/security-credentials/app-role") if has_token => (
                200,
                format!(
                    r#"{{"Code":"Success","Type":"AWS-HMAC","AccessKeyId":"{id}","SecretAccessKey":"{secret}","Expiration":"2999-01-01T00:00:00Z"}}"#
                ),
            ),
            // IMDSv1 (no session token) is refused, as on a hardened instance.
            _ => (401, String::new()),
        }
    });
    let home = Scratch::new();
    let env = [("AWS_EC2_METADATA_SERVICE_ENDPOINT", stub.url.as_str())];
    let output = hoplock(&["lease", "show"], &server.endpoint, &server.bucket, &home, &env);
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(stub.seen().len(), 3, "{:?}", stub.seen());
}

#[test]
fn off_ec2_the_chain_fails_fast_and_says_what_it_tried() {
    let Some(server) = crate::server() else { return };
    // A closed loopback port stands in for the metadata address off EC2.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let endpoint = format!("http://{closed}");
    let home = Scratch::new();
    let started = Instant::now();
    let env = [("AWS_EC2_METADATA_SERVICE_ENDPOINT", endpoint.as_str())];
    let output = hoplock(&["lease", "show"], &server.endpoint, &server.bucket, &home, &env);
    assert!(!output.status.success());
    assert!(text(&output).contains("instance metadata"), "{}", text(&output));
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());

    let env = [("AWS_EC2_METADATA_DISABLED", "true")];
    let output = hoplock(&["lease", "show"], &server.endpoint, &server.bucket, &home, &env);
    assert!(!output.status.success());
    assert!(text(&output).contains("AWS_ACCESS_KEY_ID"), "{}", text(&output));
}

#[test]
fn credential_process_output_is_used_and_its_failure_is_reported() {
    let Some((server, id, secret)) = server_keys() else { return };
    let home = Scratch::new();
    let script = home.write(
        "creds.sh",
        &format!(
            "#!/bin/sh\nprintf '%s' '{{\"Version\": 1, \"AccessKeyId\": \"{id}\", \"SecretAccessKey\": \"{secret}\"}}'\n"
        ),
    );
    let failing = home.write("fail.sh", "#!/bin/sh\necho 'token expired, log in again' >&2\nexit 3\n");
    let config = home.write(
        "config",
        &format!("[profile tool]\ncredential_process = /bin/sh {script}\n[profile broken]\ncredential_process = /bin/sh '{failing}'\n"),
    );
    let env = [("AWS_CONFIG_FILE", config.as_str()), ("AWS_PROFILE", "tool")];
    let output = hoplock(&["lease", "show"], &server.endpoint, &server.bucket, &home, &env);
    assert!(output.status.success(), "{}", text(&output));
    let env = [("AWS_CONFIG_FILE", config.as_str()), ("AWS_PROFILE", "broken")];
    let output = hoplock(&["lease", "show"], &server.endpoint, &server.bucket, &home, &env);
    assert!(!output.status.success());
    assert!(text(&output).contains("token expired, log in again"), "{}", text(&output));
}

#[test]
fn web_identity_assumes_the_role_through_sts() {
    let Some(crate::Server { endpoint, bucket }) = crate::moto() else { return };
    let home = Scratch::new();
    let token = home.write("token", "eyJhbGciOi.fake.jwt\n");
    let env = [
        ("AWS_WEB_IDENTITY_TOKEN_FILE", token.as_str()),
        ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/hoplock"),
        ("AWS_ROLE_SESSION_NAME", "it"),
        ("AWS_ENDPOINT_URL_STS", endpoint.as_str()),
    ];
    let output = hoplock(&["lease", "show"], &endpoint, &bucket, &home, &env);
    assert!(output.status.success(), "{}", text(&output));
    assert!(text(&output).contains("no lease record"), "{}", text(&output));
}

#[test]
fn an_assumed_role_is_refreshed_during_a_held_term_without_disturbing_renewals() {
    let Some(crate::Server { endpoint, bucket }) = crate::moto() else { return };
    let home = Scratch::new();
    // Keys that live 30 s are refreshed after 15 s; the term lasts 40 s.
    let config = home.write(
        "config",
        "[profile base]\naws_access_key_id = AKIDBASE\naws_secret_access_key = base-secret\n\
         [profile deploy]\nrole_arn = arn:aws:iam::123456789012:role/deploy\nsource_profile = base\nduration_seconds = 30\n",
    );
    let env = [
        ("AWS_CONFIG_FILE", config.as_str()),
        ("AWS_PROFILE", "deploy"),
        ("AWS_ENDPOINT_URL_STS", endpoint.as_str()),
        ("HOPLOCK_LOG", "debug"),
        ("NO_COLOR", "1"),
    ];
    let args = ["run", "--ttl", "3s", "--once", "--", "sh", "-c", "sleep 40; echo finished"];
    let output = hoplock(&args, &endpoint, &bucket, &home, &env);
    let log = text(&output);
    assert!(output.status.success(), "{log}");
    assert!(log.contains("finished"), "the command ran to its end: {log}");
    let refreshes = log.matches("S3 credentials refreshed").count();
    assert!(refreshes >= 2, "{refreshes} refreshes: {log}");
    // Renewals went on after the last refresh, and the term was never lost.
    let last_refresh = log.rfind("S3 credentials refreshed").unwrap();
    assert!(log[last_refresh..].contains("renewed"), "{log}");
    for word in ["lost", "expired"] {
        assert!(!log.to_lowercase().contains(word), "{word:?} in the log: {log}");
    }
}
