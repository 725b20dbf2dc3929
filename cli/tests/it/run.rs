//! `hoplock run` end to end against a real S3-compatible server (started by
//! `cargo xtask test`; skipped with a note otherwise).

#![allow(clippy::disallowed_methods)] // Tests measure real time.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hoplock::Generation;

use crate::{Server, server};
use hoplock::entropy::{Entropy, OsEntropy};
use hoplock::lease::LeaseRecord;
use hoplock::s3::config::Addressing;
use hoplock::s3::{S3Backend, S3Config};

const TTL: &str = "3s";
const TTL_SECS: f64 = 3.0;
const POLL_SECS: f64 = 0.2;

/// A scratch directory and a lease key of the test's own.
struct Scene {
    server: Server,
    key: String,
    dir: PathBuf,
}

impl Scene {
    fn new(server: Server, name: &str) -> Scene {
        let id = OsEntropy.next_u64();
        let dir = std::env::temp_dir().join(format!("hoplock-run-{name}-{id:016x}"));
        std::fs::create_dir_all(&dir).unwrap();
        Scene { server, key: format!("it/run-{name}-{id:016x}.json"), dir }
    }

    /// Starts `hoplock run` with a child that logs "owner generation pid" on
    /// start and then sleeps until stopped.
    fn runner(&self, owner: &str, extra: &[&str], script: &str) -> Child {
        let log = self.dir.join("starts.log");
        let script = format!("echo \"$HOPLOCK_OWNER $HOPLOCK_GENERATION $$\" >> {}; {script}", log.display());
        Command::new(env!("CARGO_BIN_EXE_hoplock"))
            .args(["run", "--endpoint", &self.server.endpoint, "--bucket", &self.server.bucket, "--key", &self.key])
            .args(["--path-style", "--ttl", TTL, "--poll", "200ms", "--grace", "300ms", "--owner", owner])
            .args(extra)
            .args(["--", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    /// (owner, generation, pid) of every child started so far.
    fn starts(&self) -> Vec<(String, u64, u32)> {
        let text = std::fs::read_to_string(self.dir.join("starts.log")).unwrap_or_default();
        text.lines()
            .filter_map(|line| {
                let mut parts = line.split_whitespace();
                Some((parts.next()?.to_string(), parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
            })
            .collect()
    }

    fn wait_for_starts(&self, count: usize, within: Duration) -> Vec<(String, u64, u32)> {
        let deadline = Instant::now() + within;
        loop {
            let starts = self.starts();
            if starts.len() >= count {
                return starts;
            }
            assert!(Instant::now() < deadline, "only {} of {count} starts after {within:?}: {starts:?}", starts.len());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn backend(&self) -> S3Backend {
        let mut config = S3Config::new(&self.server.bucket, &self.key);
        config.endpoint = Some(self.server.endpoint.clone());
        config.addressing = Addressing::PathStyle;
        S3Backend::new(config).unwrap()
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn alive(pid: u32) -> bool {
    // A zombie has exited; only its entry remains until it is reaped.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
        .unwrap_or(false)
}

fn wait_dead(pid: u32, within: Duration) -> Duration {
    let start = Instant::now();
    while alive(pid) {
        assert!(start.elapsed() < within, "pid {pid} still alive after {within:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    start.elapsed()
}

fn signal(child: &Child, signal: &str) {
    Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap();
}

#[test]
fn only_the_leaders_command_runs_and_a_killed_leader_hands_over() {
    let Some(server) = server() else { return };
    let scene = Scene::new(server, "handover");
    let mut runners = [scene.runner("a", &[], "sleep 1000"), scene.runner("b", &[], "sleep 1000")];
    let first = scene.wait_for_starts(1, Duration::from_secs(10));
    // For a few renewals, exactly one command runs.
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(100));
        let starts = scene.starts();
        assert_eq!(starts.len(), 1, "{starts:?}");
        assert!(alive(starts[0].2));
    }
    let (leader_owner, leader_generation, leader_pid) = first[0].clone();
    let leader = if leader_owner == "a" { 0 } else { 1 };

    // Kill the leader's runner outright: no release is written.
    runners[leader].kill().unwrap();
    let killed_at = Instant::now();
    runners[leader].wait().unwrap();
    // Its command dies with it (PR_SET_PDEATHSIG), so it cannot go on writing.
    wait_dead(leader_pid, Duration::from_secs(2));

    let starts = scene.wait_for_starts(2, Duration::from_secs(10));
    let took = killed_at.elapsed().as_secs_f64();
    let (next_owner, next_generation, next_pid) = starts[1].clone();
    assert_ne!(next_owner, leader_owner);
    assert!(next_generation > leader_generation, "{starts:?}");
    assert!(took <= TTL_SECS + POLL_SECS + 0.5, "handover took {took:.2}s");
    assert!(alive(next_pid));

    let other = 1 - leader;
    signal(&runners[other], "-TERM");
    let status = runners[other].wait().unwrap();
    assert!(status.success(), "{status}");
    wait_dead(next_pid, Duration::from_secs(2));
    // A graceful stop releases the lease and keeps the generation.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let found = runtime.block_on(scene.backend().inspect()).unwrap().unwrap();
    let record = found.record.unwrap();
    assert!(record.released);
    assert_eq!(record.generation, Generation(next_generation));
}

#[test]
fn the_command_is_stopped_when_its_runner_loses_the_lease() {
    let Some(server) = server() else { return };
    let scene = Scene::new(server, "lose");
    let mut runner = scene.runner("a", &[], "trap 'exit 0' TERM; while true; do sleep 0.05; done");
    let starts = scene.wait_for_starts(1, Duration::from_secs(10));
    let (_, generation, pid) = starts[0].clone();

    // Somebody else's record replaces ours (as a leader elsewhere would).
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut foreign = hoplock::testing::conformance::sample_record(generation + 5, "foreign");
    foreign.ttl_ms = Some(2_000);
    runtime.block_on(scene.backend().put_raw(foreign.encode())).unwrap();

    // The next renewal (every TTL/3) finds it and stops the command.
    let stopped_after = wait_dead(pid, Duration::from_secs(3));
    assert!(stopped_after.as_secs_f64() <= TTL_SECS / 3.0 + 0.5, "stopped after {stopped_after:?}");
    // The runner campaigns again and, once the foreign record has gone
    // unrenewed for its TTL, leads with a higher generation.
    let starts = scene.wait_for_starts(2, Duration::from_secs(10));
    assert!(starts[1].1 > generation + 5, "{starts:?}");
    runner.kill().unwrap();
    let _ = runner.wait();
}

#[test]
fn once_exits_with_the_commands_exit_code() {
    let Some(server) = server() else { return };
    let scene = Scene::new(server, "once");
    let mut runner = scene.runner("a", &["--once"], "exit 7");
    let status = runner.wait().unwrap();
    assert_eq!(status.code(), Some(7));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let record: LeaseRecord = runtime.block_on(scene.backend().inspect()).unwrap().unwrap().record.unwrap();
    assert!(record.released, "the lease was released after the term");
}

#[test]
fn bad_input_is_a_clear_error() {
    let Some(server) = server() else { return };
    let scene = Scene::new(server, "bad");
    let output = Command::new(env!("CARGO_BIN_EXE_hoplock"))
        .args(["run", "--endpoint", "ftp://nowhere", "--bucket", "b", "--key", "k", "--", "true"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("https://"), "{output:?}");
    let output = Command::new(env!("CARGO_BIN_EXE_hoplock"))
        .args(["run", "--endpoint", &scene.server.endpoint, "--bucket", &scene.server.bucket, "--key", &scene.key])
        .args(["--path-style", "--ttl", "1s", "--renew", "900ms", "--", "true"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("renew interval"), "{output:?}");
}

#[test]
fn logs_have_no_colour_codes_in_a_pipe_and_json_lines_on_request() {
    let Some(server) = server() else { return };
    let scene = Scene::new(server, "logs");
    let run = |extra: &[&str], env: &[(&str, &str)]| {
        let output = Command::new(env!("CARGO_BIN_EXE_hoplock"))
            .args(extra)
            .args(["run", "--endpoint", &scene.server.endpoint, "--bucket", &scene.server.bucket, "--key", &scene.key])
            .args(["--path-style", "--ttl", TTL, "--once", "--", "true"])
            .env_remove("NO_COLOR")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    // stderr is a pipe here, so no escape codes even without NO_COLOR.
    let text = run(&[], &[]);
    assert!(text.contains("leads") || text.contains("acquired"), "{text}");
    assert!(!text.contains('\u{1b}'), "colour codes in a pipe: {text:?}");
    for json in [run(&["--log-format", "json"], &[]), run(&[], &[("HOPLOCK_LOG_FORMAT", "json")])] {
        let lines: Vec<&str> = json.lines().collect();
        assert!(!lines.is_empty());
        for line in lines {
            let value: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|err| panic!("{err}: {line}"));
            assert!(value.get("level").is_some() && value.get("fields").is_some(), "{line}");
        }
    }
}

#[test]
fn an_unreachable_store_is_reported_with_its_cause_and_once_gives_up() {
    // A closed loopback port: every connection is refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_hoplock"))
        .args(["run", "--endpoint", &format!("http://{closed}"), "--bucket", "b", "--key", "k", "--path-style"])
        .args(["--ttl", "3s", "--request-timeout", "500ms", "--once", "--unreachable-timeout", "2s", "--", "true"])
        .env("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
        .env("AWS_SECRET_ACCESS_KEY", "example-secret")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(69), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(15), "took {:?}", started.elapsed());
    assert!(stderr.contains("not answering") && stderr.to_lowercase().contains("refused"), "{stderr}");
    assert!(stderr.contains("giving up"), "{stderr}");
}

#[test]
fn a_refused_connection_is_reported_within_two_seconds() {
    // The checks before campaigning retry a store that does not answer for
    // many seconds; nothing listening must be said at once all the same.
    use std::io::BufRead;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hoplock"))
        .args(["run", "--endpoint", &format!("http://{closed}"), "--bucket", "b", "--key", "k", "--path-style"])
        .args(["--", "true"])
        .env("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
        .env("AWS_SECRET_ACCESS_KEY", "example-secret")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines.send((started.elapsed(), line)).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    let found = loop {
        match received.recv_timeout(Duration::from_secs(2).saturating_sub(started.elapsed())) {
            Ok((at, line)) if line.to_lowercase().contains("connection refused") => break Some((at, line)),
            Ok((_, line)) => seen.push(line),
            Err(_) => break None,
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    let (at, line) = found.unwrap_or_else(|| panic!("no word of the refused connection within 2 s: {seen:?}"));
    assert!(at <= Duration::from_secs(2), "{at:?}: {line}");
    assert!(line.contains("did not answer a first request"), "{line}");
}

/// The body of `GET /metrics` on `addr`, or `None` if nothing answers yet.
fn scrape(addr: std::net::SocketAddr) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    Some(text)
}

#[test]
fn metrics_are_served_in_the_prometheus_format() {
    let Some(server) = server() else { return };
    let scene = Scene::new(server, "metrics");
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut runner = scene.runner("m", &["--once", "--metrics-addr", &addr.to_string()], "sleep 3");
    let deadline = Instant::now() + Duration::from_secs(20);
    let leading = loop {
        let text = scrape(addr).unwrap_or_default();
        if text.lines().any(|line| line.starts_with("hoplock_leader{") && line.ends_with(" 1")) {
            break text;
        }
        assert!(Instant::now() < deadline, "never saw hoplock_leader 1: {text}");
        std::thread::sleep(Duration::from_millis(100));
    };
    for name in ["hoplock_generation{owner=\"m\"} 1", "hoplock_transitions_total{", "hoplock_store_requests_total{"] {
        assert!(leading.contains(name), "no {name} in:\n{leading}");
    }
    assert!(leading.contains("# TYPE hoplock_leader gauge"), "{leading}");
    assert_eq!(runner.wait().unwrap().code(), Some(0));
}

#[test]
fn a_store_url_is_checked_before_anything_runs() {
    let run = |url: &str| {
        let out =
            Command::new(env!("CARGO_BIN_EXE_hoplock")).args(["run", "--store", url, "--", "true"]).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, stderr) = run("ftp://bucket/key");
    assert_eq!(code, Some(1));
    assert!(stderr.contains("unknown store scheme \"ftp\""), "{stderr}");
    let (code, stderr) = run("s3://bucket-only");
    assert_eq!(code, Some(1));
    assert!(stderr.contains("names no object"), "{stderr}");
    #[cfg(not(feature = "gcs"))]
    assert!(run("gs://b/k").1.contains("gs:// needs hoplock built with the gcs feature"));
}
